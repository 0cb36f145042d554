"""Launchers and autograd for the fused neighborhood-attention kernels (neighborhood_kernels.py).

On a GPU every kernel is autotuned over tile sizes, warps and pipeline stages, once per
(grid, head_dim); under the Triton interpreter (``TRITON_INTERPRET=1``, CPU tensors) one small
configuration runs so that the test suite exercises the same kernel source without a GPU.
"""

import math
import os
from dataclasses import dataclass
from functools import lru_cache

import torch
import triton

from s2forecast.geometry import Grid
from s2forecast.ops.cuda.neighborhood_kernels import (
    neighborhood_backward_key_kernel,
    neighborhood_backward_query_kernel,
    neighborhood_forward_kernel,
)
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


@dataclass(frozen=True)
class PartnerTable:
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


@lru_cache(maxsize=64)
def partner_tables(grid: Grid, theta: float, device: torch.device) -> tuple[PartnerTable, PartnerTable]:
    """(query -> key rows, key -> query rows) tables of the disks of radius ``theta``, cached."""
    neighborhood = spherical_neighborhood(grid, theta)
    half_width = torch.full((grid.nlat, grid.nlat), -1, dtype=torch.int64)
    half_width.scatter_(1, neighborhood.key_rows, neighborhood.half_width)
    return _compact(half_width, grid.nlon, device), _compact(half_width.T, grid.nlon, device)


@lru_cache(maxsize=64)
def _log2_row_weights(grid: Grid, device: torch.device) -> torch.Tensor:
    return (log_row_weights(grid, device, torch.float64) / math.log(2.0)).to(torch.float32).contiguous()


def _configs():
    if interpreting():  # tl.dot needs tiles of at least 16; small tiles keep the interpreter fast
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1)]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
        for m, n, w, s in [
            (32, 32, 2, 2),
            (32, 64, 4, 3),
            (64, 32, 4, 3),
            (64, 64, 4, 3),
            (64, 64, 8, 2),
            (128, 32, 4, 3),
            (128, 64, 8, 3),
            (32, 128, 4, 3),
            (64, 128, 8, 3),
        ]
    ]


_TUNING_KEY = ["nlon", "npoints", "max_partners", "HEAD_DIM", "HEAD_DIM_V"]
_forward = triton.autotune(_configs(), key=_TUNING_KEY)(neighborhood_forward_kernel)
_backward_query = triton.autotune(_configs(), key=_TUNING_KEY)(neighborhood_backward_query_kernel)
_backward_key = triton.autotune(_configs(), key=_TUNING_KEY)(neighborhood_backward_key_kernel)


def _block_dim(dim: int) -> int:
    return max(16, triton.next_power_of_2(dim))


def _shared_meta(q, v, scale):
    return {
        "scale_log2": scale / math.log(2.0),
        "HEAD_DIM": q.shape[-1],
        "HEAD_DIM_V": v.shape[-1],
        "BLOCK_D": _block_dim(q.shape[-1]),
        "BLOCK_DV": _block_dim(v.shape[-1]),
        "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32",
    }


def _table_args(table: PartnerTable):
    return (table.order, table.rows, table.widths, table.count)


def fused_forward(q, k, v, grid: Grid, theta: float, scale: float):
    """Output (batch, heads, N, head_dim_v) and log2-sum-exp (batch*heads, N) float32."""
    batch, heads, npoints, _ = q.shape
    forward_table, _ = partner_tables(grid, theta, q.device)
    out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=q.device)
    lse = torch.empty(batch * heads, npoints, dtype=torch.float32, device=q.device)
    nlat, nlon = grid.shape
    _forward[lambda meta: (nlat * triton.cdiv(nlon, meta["BLOCK_M"]), batch * heads)](
        q, k, v, out, lse,
        *_table_args(forward_table), _log2_row_weights(grid, q.device),
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, nlon, npoints, forward_table.max_partners,
        **_shared_meta(q, v, scale),
    )  # fmt: skip
    return out, lse


def fused_backward(grad_out, q, k, v, out, lse, grid: Grid, theta: float, scale: float):
    """(dq, dk, dv) in the dtypes of q, k, v."""
    batch, heads, npoints, _ = q.shape
    forward_table, backward_table = partner_tables(grid, theta, q.device)
    nlat, nlon = grid.shape
    delta = (grad_out.float() * out.float()).sum(dim=-1).reshape(batch * heads, npoints)
    # each gradient is written with its input's strides; empty_like keeps them for dense inputs,
    # and an input it cannot mirror (overlapping or gapped) is made contiguous
    q, k, v = (_dense(t) for t in (q, k, v))
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    log2_w = _log2_row_weights(grid, q.device)
    strides = (*q.stride(), *k.stride(), *v.stride(), *grad_out.stride())
    meta = {**_shared_meta(q, v, scale), "scale": scale}
    _backward_query[lambda m: (nlat * triton.cdiv(nlon, m["BLOCK_M"]), batch * heads)](
        q, k, v, grad_out, dq, lse, delta,
        *_table_args(forward_table), log2_w, *strides,
        heads, nlon, npoints, forward_table.max_partners, **meta,
    )  # fmt: skip
    _backward_key[lambda m: (nlat * triton.cdiv(nlon, m["BLOCK_N"]), batch * heads)](
        q, k, v, grad_out, dk, dv, lse, delta,
        *_table_args(backward_table), log2_w, *strides,
        heads, nlon, npoints, backward_table.max_partners, **meta,
    )  # fmt: skip
    return dq, dk, dv


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a contiguous copy when ``torch.empty_like`` would not reproduce its strides."""
    dense_strides = sorted(zip(t.stride(), t.shape, strict=True))
    expected = 1
    for stride, size in dense_strides:
        if size > 1 and stride != expected:
            return t.contiguous()
        expected *= size
    return t


class _FusedNeighborhoodAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, grid, theta, scale):
        out, lse = fused_forward(q, k, v, grid, theta, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.grid, ctx.theta, ctx.scale = grid, theta, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = fused_backward(grad_out, q, k, v, out, lse, ctx.grid, ctx.theta, ctx.scale)
        return dq, dk, dv, None, None, None


def fused_neighborhood_attention(q, k, v, grid: Grid, theta: float, scale: float) -> torch.Tensor:
    """Eq. (27) through the fused kernels, on validated (batch, heads, N, head_dim) inputs.

    No (N x neighbors) intermediate: the forward keeps an online softmax and saves the
    log-sum-exp per query (4 bytes), the backward recomputes the probabilities.
    """
    check_fused_inputs(q, v)
    return _FusedNeighborhoodAttention.apply(q, k, v, grid, theta, scale)
