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


class FirstStep(pl.Callback):
    """Records the global step of each run's first training batch (where a resumed run started)."""

    steps: list[int] = []

    def on_train_start(self, trainer, pl_module):
        self.first = True

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.first:
            FirstStep.steps.append(trainer.global_step)
            self.first = False
