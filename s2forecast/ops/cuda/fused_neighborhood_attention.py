"""Launchers and autograd for the fused neighborhood-attention kernels (neighborhood_kernels.py).

On a GPU every kernel is autotuned over tile sizes, warps and pipeline stages, once per
(grid, head_dim); under the Triton interpreter (``TRITON_INTERPRET=1``, CPU tensors) one small
configuration runs so that the test suite exercises the same kernel source without a GPU.
"""

import math

import torch
import triton
from torch.autograd.function import once_differentiable

from s2forecast.geometry import Grid
from s2forecast.ops.cuda.neighborhood_kernels import (
    neighborhood_backward_key_kernel,
    neighborhood_backward_query_kernel,
    neighborhood_forward_kernel,
)
from s2forecast.ops.cuda.tables import (
    FusedNeighborhoodState,
    PartnerTable,
    check_fused_inputs,
    interpreting,
    prepare_fused_neighborhood,
)
from s2forecast.user_errors import UserError

__all__ = ["check_fused_inputs", "fused_neighborhood_attention", "interpreting"]


def _configs():
    if interpreting():  # tl.dot needs tiles of at least 16; small tiles keep the interpreter fast
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1)]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
        # small tiles score fewer pairs outside the disks (scripts/neighborhood_tiles.py: at 0.25
        # degrees 57 % of a 16x16 tile's scores are inside, 21 % of a 64x64 one's)
        for m, n, w, s in [
            (16, 16, 1, 2),
            (16, 32, 2, 2),
            (32, 16, 2, 2),
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


def kernel_meta(q, v, scale):
    """The constexpr arguments every neighborhood kernel launch shares (scale in log2 units, head dims)."""
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


def fused_forward(q, k, v, state: FusedNeighborhoodState, scale: float):
    """Output (batch, heads, N, head_dim_v) and log2-sum-exp (batch*heads, N) float32."""
    batch, heads, npoints, _ = q.shape
    forward_table, grid = state.forward, state.grid
    # in q's memory order: a layer's (batch, N, heads, head_dim) layout then merges its heads
    # as a view, not a copy
    out = empty_in_layout_of(q, q.shape[:-1] + v.shape[-1:])
    lse = torch.empty(batch * heads, npoints, dtype=torch.float32, device=q.device)
    nlat, nlon = grid.shape
    _forward[lambda meta: (nlat * triton.cdiv(nlon, meta["BLOCK_M"]), batch * heads)](
        q, k, v, out, lse,
        *_table_args(forward_table), state.log2_w,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, nlon, npoints, forward_table.max_partners,
        **kernel_meta(q, v, scale),
    )  # fmt: skip
    return out, lse


def fused_backward(grad_out, q, k, v, out, lse, state: FusedNeighborhoodState, scale: float):
    """(dq, dk, dv) in the dtypes of q, k, v."""
    batch, heads, npoints, _ = q.shape
    forward_table, backward_table, grid = state.forward, state.backward, state.grid
    nlat, nlon = grid.shape
    delta = torch.empty(batch * heads, npoints, dtype=torch.float32, device=q.device)  # the query kernel fills it
    # each gradient dense in its input's memory order: the views a layer's projections made
    # (heads split off one (batch, N, channels) tensor) get gradients that go back as views, and
    # a gapped or overlapping input (q, k, v sliced from one projection, k expanded) is not copied
    dq, dk, dv = (empty_in_layout_of(t, t.shape) for t in (q, k, v))
    log2_w = state.log2_w
    strides = (*q.stride(), *k.stride(), *v.stride(), *grad_out.stride())
    meta = {**kernel_meta(q, v, scale), "scale": scale}
    _backward_query[lambda m: (nlat * triton.cdiv(nlon, m["BLOCK_M"]), batch * heads)](
        q, k, v, grad_out, dq, lse, delta, out,
        *_table_args(forward_table), log2_w, *strides, *dq.stride(), *out.stride(),
        heads, nlon, npoints, forward_table.max_partners, **meta,
    )  # fmt: skip
    _backward_key[lambda m: (nlat * triton.cdiv(nlon, m["BLOCK_N"]), batch * heads)](
        q, k, v, grad_out, dk, dv, lse, delta,
        *_table_args(backward_table), log2_w, *strides, *dk.stride(), *dv.stride(),
        heads, nlon, npoints, backward_table.max_partners, **meta,
    )  # fmt: skip
    return dq, dk, dv


def empty_in_layout_of(t: torch.Tensor, shape) -> torch.Tensor:
    """An empty dense tensor of ``shape`` (``t``'s rank, ``t``'s dtype and device) whose
    dimensions lie in memory in the order of ``t``'s strides, largest first; a broadcast
    dimension (stride 0) outermost, so that each row stays contiguous."""
    order = sorted(range(t.dim()), key=lambda i: t.stride(i) or math.inf, reverse=True)
    buffer = t.new_empty([shape[i] for i in order])
    return buffer.permute([order.index(i) for i in range(t.dim())])


class _FusedNeighborhoodAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, state, scale):
        out, lse = fused_forward(q, k, v, state, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.state, ctx.scale = state, scale
        return out

    @staticmethod
    @once_differentiable  # the kernels' gradients carry no graph: a second derivative would miss them
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = fused_backward(grad_out, q, k, v, out, lse, ctx.state, ctx.scale)
        return dq, dk, dv, None, None


def fused_neighborhood_attention(
    q, k, v, grid: Grid | FusedNeighborhoodState, theta: float | None, scale: float
) -> torch.Tensor:
    """Eq. (27) through the fused kernels, on validated (batch, heads, N, head_dim) inputs.

    ``grid``: a prepared ``FusedNeighborhoodState`` (``theta`` unused), or the grid, whose
    tables are then built for this call. No (N x neighbors) intermediate: the forward keeps an
    online softmax and saves the log-sum-exp per query (4 bytes), the backward recomputes the
    probabilities.
    """
    check_fused_inputs(q, v)
    state = grid if isinstance(grid, FusedNeighborhoodState) else prepare_fused_neighborhood(grid, theta, q.device)
    if state.log2_w.device != q.device:
        raise UserError(f"the fused state is on {state.log2_w.device} but the inputs are on {q.device}")
    return _FusedNeighborhoodAttention.apply(q, k, v, state, scale)
