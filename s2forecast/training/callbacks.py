"""Training callbacks configurable from YAML."""

from pytorch_lightning.callbacks import WeightAveraging
from torch.optim.swa_utils import get_ema_multi_avg_fn


class EMAWeightAveraging(WeightAveraging):
    """Exponential moving average of the weights (Lightning's ``WeightAveraging``), used for
    validation, testing and the saved model; ``decay`` per optimizer step from ``start_step``."""

    def __init__(self, decay: float = 0.999, start_step: int = 0, device: str | None = None):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        super().__init__(device=device, use_buffers=True, multi_avg_fn=get_ema_multi_avg_fn(decay))
        self.decay, self.start_step = decay, start_step

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return step_idx is not None and step_idx >= self.start_step
