"""A callback for the DDP test: each rank writes a checksum of its final weights to PROBE_DIR."""

import json
import os
from pathlib import Path

import pytorch_lightning as pl
import torch


class WeightProbe(pl.Callback):
    def on_train_end(self, trainer, pl_module):
        state = torch.cat([p.detach().double().flatten() for p in pl_module.parameters()])
        probe = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "step": trainer.global_step,
            "checksum": float(state.sum()) + float((state * torch.arange(state.numel())).sum()),
        }
        Path(os.environ["PROBE_DIR"], f"rank{trainer.global_rank}.json").write_text(json.dumps(probe))


class Crash(RuntimeError):
    """Raised by CrashAtEpoch."""


class CrashAtEpoch(pl.Callback):
    """Simulates a crash at the start of epoch ``epoch`` (after the previous epoch's checkpoint)."""

    def __init__(self, epoch: int = 1):
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            raise Crash(f"simulated crash at epoch {self.epoch}")
