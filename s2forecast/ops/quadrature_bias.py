"""log(quadrature weight) per key: the additive logit bias that turns softmax attention into
the quadrature of eqs. (26)/(27) of the attention paper."""

from functools import lru_cache

import torch

from s2forecast.geometry import Grid


@lru_cache(maxsize=64)
def _log_row_weights(grid: Grid, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.log(grid.quadrature_weights[:, 0]).to(device=device, dtype=dtype)


def log_row_weights(grid: Grid, device, dtype) -> torch.Tensor:
    """(nlat,) log quadrature weight of each latitude row (weights depend on the row only)."""
    return _log_row_weights(grid, torch.device(device), dtype)


def bias_dtype(dtype: torch.dtype) -> torch.dtype:
    """Precision in which the log-weight bias is formed: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def log_quadrature_weights(grid: Grid, device, dtype) -> torch.Tensor:
    """(nlat*nlon,) log quadrature weight of every grid point, flattened row-major."""
    return _log_point_weights(grid, torch.device(device), dtype)


@lru_cache(maxsize=64)
def _log_point_weights(grid: Grid, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    # cached: global attention asks for it on every forward
    return _log_row_weights(grid, device, dtype).repeat_interleave(grid.nlon)
