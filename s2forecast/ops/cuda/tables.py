"""The Triton-free part of the fused path: input checks and the precomputed partner tables, so
that a backend can say whether it runs and prepare its state without importing Triton."""

import math
import os
from typing import NamedTuple

import torch

from s2forecast.geometry import Grid
from s2forecast.ops.neighborhood import spherical_neighborhood
from s2forecast.ops.quadrature_bias import log_row_weights
from s2forecast.user_errors import UserError

MAX_HEAD_DIM = 256
# Nominal tile width used only to order rows by cost, heaviest first.
_COST_TILE = 64


def interpreting() -> bool:
    """True when Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def fused_supported(q: torch.Tensor) -> str | None:
    """None when the fused kernel can take ``q``; otherwise the reason it cannot."""
    if q.device.type != "cuda" and not interpreting():
        return f"the fused kernel needs CUDA tensors, got {q.device} (set TRITON_INTERPRET=1 to run it on CPU)"
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return f"the fused kernel takes float32, float16 or bfloat16, got {q.dtype}"
    if q.dtype == torch.bfloat16 and q.device.type == "cpu":  # interpreting: Triton issue 11584
        return (
            "Triton's CPU interpreter cannot run the fused kernel in bfloat16 (its tl.dot multiplies the raw bits: "
            "outputs of 1e8); use float32 or float16 there, or backend='reference'"
        )
    return None


def check_fused_inputs(q: torch.Tensor, v: torch.Tensor) -> None:
    """ValueError unless the fused kernels can take ``q`` and ``v`` (device, dtype, head_dim)."""
    reason = fused_supported(q)
    if reason is not None:
        raise UserError(reason)
    if max(q.shape[-1], v.shape[-1]) > MAX_HEAD_DIM:
        raise UserError(
            f"the fused kernel takes head_dim <= {MAX_HEAD_DIM}, got {q.shape[-1]} / {v.shape[-1]}; "
            "use more heads or backend='reference'"
        )


class PartnerTable(NamedTuple):
    """For each row of the grid, the rows it interacts with and the arc half-widths.

    Attributes:
        order: (nlat,) int32 rows sorted by work, heaviest first (the launch order).
        rows: (nlat, max_partners) int32 partner rows, ascending, padded with 0.
        widths: (nlat, max_partners) int32 arc half-width in longitude steps (>= nlon // 2
            means the whole row).
        count: (nlat,) int32 number of partners of each row.
    """

    order: torch.Tensor
    rows: torch.Tensor
    widths: torch.Tensor
    count: torch.Tensor

    @property
    def max_partners(self) -> int:
        return self.rows.shape[1]


class FusedNeighborhoodState(NamedTuple):
    """What the fused neighborhood kernels precompute: the (query -> key rows) table of the
    forward and dQ kernels, its transpose (key -> query rows) for dK/dV, and the log2 weights
    of the rows, (nlat,) float32."""

    grid: Grid
    forward: PartnerTable
    backward: PartnerTable
    log2_w: torch.Tensor


def _compact(half_width: torch.Tensor, nlon: int, device) -> PartnerTable:
    """PartnerTable from a dense (nlat, nlat) half-width matrix with -1 for no interaction."""
    present = half_width >= 0
    count = present.sum(dim=1)
    rows = torch.argsort((~present).to(torch.int8), dim=1, stable=True)[:, : int(count.max())]
    widths = torch.gather(half_width, 1, rows)
    valid = torch.arange(rows.shape[1])[None, :] < count[:, None]
    span = torch.where(2 * widths + 1 >= nlon, nlon, (2 * widths + _COST_TILE).clamp(max=nlon))
    cost = torch.where(valid, span, 0).sum(dim=1)
    order = torch.argsort(cost, descending=True, stable=True)

    def to_device(t):
        return t.to(device=device, dtype=torch.int32).contiguous()

    return PartnerTable(
        to_device(order), to_device(torch.where(valid, rows, 0)), to_device(widths.clamp(max=nlon)), to_device(count)
    )


def partner_tables(grid: Grid, theta: float, device) -> tuple[PartnerTable, PartnerTable]:
    """(query -> key rows, key -> query rows) tables of the disks of radius ``theta`` on ``device``."""
    neighborhood = spherical_neighborhood(grid, theta)
    half_width = torch.full((grid.nlat, grid.nlat), -1, dtype=torch.int64)
    half_width.scatter_(1, neighborhood.key_rows, neighborhood.half_width)
    return _compact(half_width, grid.nlon, device), _compact(half_width.T, grid.nlon, device)


def prepare_fused_neighborhood(grid: Grid, theta: float, device="cpu") -> FusedNeighborhoodState:
    """The fused kernels' state on ``device`` (the same for every input dtype)."""
    forward, backward = partner_tables(grid, theta, device)
    log2_w = (log_row_weights(grid, device, torch.float64) / math.log(2.0)).to(torch.float32).contiguous()
    return FusedNeighborhoodState(grid, forward, backward, log2_w)
