"""Input checks shared by the attention ops: every error names the bad value and the fix."""

import math
import numbers

import torch

from s2forecast.geometry import Grid
from s2forecast.user_errors import UserError


def check_grid(grid, name: str) -> Grid:
    if not isinstance(grid, Grid):
        raise UserError(f"{name} must be an s2forecast.geometry.Grid, got {type(grid).__name__}")
    return grid


def check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise UserError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_scale(scale, head_dim: int) -> float:
    """The logit scale: ``scale`` as a float, 1/sqrt(head_dim) for None."""
    if scale is None:
        return head_dim**-0.5
    try:
        value = float(scale)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several elements
        value = math.nan
    if not math.isfinite(value):
        raise UserError(f"scale must be a finite number (the logit scale; None for 1/sqrt(head_dim)), got {scale!r}")
    return value


def check_radius(theta) -> float:
    try:
        theta = float(theta)
    except (TypeError, ValueError):
        raise UserError(f"theta must be a number of radians in (0, pi], got {theta!r}") from None
    if not math.isfinite(theta) or theta <= 0.0 or theta > math.pi:
        raise UserError(f"theta must be a geodesic radius in radians in (0, pi], got {theta!r}")
    return theta


def check_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grid_q: Grid, grid_kv: Grid) -> None:
    """Shapes (batch, heads, N, head_dim), matching grids, one floating dtype and device; finite
    values on CPU.

    The finiteness check is skipped for CUDA tensors: it would read q, k and v once more and
    synchronize the device on every call, which costs as much as the fused forward itself."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise UserError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise UserError(f"{name} must have shape (batch, heads, nlat*nlon, head_dim), got {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise UserError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.dtype.is_floating_point:
        raise UserError(f"q, k, v must be floating point (float32, float64, bfloat16 or float16), got {q.dtype}")
    if not (q.device == k.device == v.device):
        raise UserError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise UserError(
            f"q, k, v must share (batch, heads), got {tuple(q.shape[:2])}, {tuple(k.shape[:2])}, {tuple(v.shape[:2])}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise UserError(f"q and k must share head_dim, got {q.shape[-1]} and {k.shape[-1]}")
    if q.shape[0] == 0 or q.shape[1] == 0 or q.shape[-1] == 0 or v.shape[-1] == 0:
        raise UserError(
            f"q, k, v must have at least one batch, head and channel per head, got q {tuple(q.shape)} and "
            f"v {tuple(v.shape)} (batch, heads, N, head_dim)"
        )
    if k.shape[2] != v.shape[2]:
        raise UserError(f"k and v must have the same number of points, got {k.shape[2]} and {v.shape[2]}")
    if q.shape[2] != grid_q.npoints:
        raise UserError(
            f"q has {q.shape[2]} points but its grid {grid_q.nlat}x{grid_q.nlon} has {grid_q.npoints}; "
            "flatten (lat, lon) row-major on the query grid"
        )
    if k.shape[2] != grid_kv.npoints:
        raise UserError(
            f"k and v have {k.shape[2]} points but their grid {grid_kv.nlat}x{grid_kv.nlon} has {grid_kv.npoints}; "
            "pass the key/value grid explicitly when it differs from the query grid"
        )
    if q.is_cuda:
        return
    for name, t in (("q", q), ("k", k), ("v", v)):
        # a sum is finite only when every term is: one pass without a bool temporary; the
        # elementwise check only when the sum overflowed or something is not finite
        if not bool(torch.isfinite(t.sum())) and not bool(torch.isfinite(t).all()):
            raise UserError(f"{name} contains NaN or infinite values")
