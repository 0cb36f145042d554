"""Training callbacks configurable from YAML."""

import time

from pytorch_lightning import Callback
from pytorch_lightning.callbacks import WeightAveraging
from pytorch_lightning.utilities import rank_zero_only
from torch.optim.swa_utils import get_ema_multi_avg_fn

from s2forecast.user_errors import UserError


class EMAWeightAveraging(WeightAveraging):
    """Exponential moving average of the weights (Lightning's ``WeightAveraging``), used for
    validation, testing and the saved model; ``decay`` per optimizer step from ``start_step``."""

    def __init__(self, decay: float = 0.999, start_step: int = 0, device: str | None = None):
        if not 0.0 < decay < 1.0:
            raise UserError(f"EMAWeightAveraging decay must be in (0, 1), e.g. 0.999, got {decay}")
        # buffers are not averaged: ours are constants of the grid (attention masks hold -inf, and
        # lerp(-inf, -inf, w) is NaN: validation failed from the second update on), and there are no
        # running statistics (no batch norm) an average would stand for
        super().__init__(device=device, use_buffers=False, multi_avg_fn=get_ema_multi_avg_fn(decay))
        self.decay, self.start_step = decay, start_step
        self._trained_state: dict | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self._trained_state = None
        super().on_train_start(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        """Lightning puts the average into the model here, and only then ModelCheckpoint saves
        the last checkpoint, whose ``current_model_state`` (what a resume trains on from) would
        be the average: keep the weights training reached for it."""
        self._trained_state = {name: value.detach().clone() for name, value in pl_module.state_dict().items()}
        super().on_train_end(trainer, pl_module)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        super().on_save_checkpoint(trainer, pl_module, checkpoint)
        if self._trained_state is not None and "current_model_state" in checkpoint:
            checkpoint["current_model_state"] = self._trained_state

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """After every optimizer step. Before ``start_step`` the average is the current weights
        (it restarts from them at each step): validation, checkpoints and a run that ends early
        see the trained weights, not the initial ones the average was made from."""
        if step_idx is None:
            return False
        if step_idx < self.start_step and self._average_model is not None:
            self._average_model.n_averaged.zero_()  # the next update copies the weights
        return True


class LossLine(Callback):
    """One line every ``every_n_steps`` optimizer steps, for runs without a progress bar (logs,
    pipes, the demo): ``step 120  epoch 3  train/loss 0.0412  lr 1.8e-03  95 s``."""

    def __init__(self, every_n_steps: int = 50):
        if every_n_steps < 1:
            raise UserError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.start = time.perf_counter()
        self.printed = -1  # the optimizer step of the last line
        self.lr = float("nan")  # of the step under way: the scheduler moves it on before the batch ends

    @rank_zero_only
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else float("nan")

    @rank_zero_only
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        # once per optimizer step (a batch ends every micro-batch of gradient accumulation)
        if step == 0 or step % self.every_n_steps or step == self.printed:
            return
        self.printed = step
        loss = float(outputs["loss"]) if isinstance(outputs, dict) else float(outputs)
        loss *= trainer.accumulate_grad_batches  # Lightning divides a micro-batch's loss by it
        elapsed = time.perf_counter() - self.start
        print(f"step {step}  epoch {trainer.current_epoch}  train/loss {loss:.4g}  lr {self.lr:.2e}  {elapsed:.0f} s",
              flush=True)  # fmt: skip
