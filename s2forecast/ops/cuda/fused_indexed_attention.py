"""Launchers and autograd for the indexed-attention kernels (indexed_attention_kernels.py).

Autotuned on a GPU per (rows per tile, list length, head dims); under the Triton interpreter
(``TRITON_INTERPRET=1``, CPU tensors) one 16x16 configuration runs.
"""

import math

import torch
import triton
from torch.autograd.function import once_differentiable

from s2forecast.ops.cuda.fused_neighborhood_attention import (
    check_fused_inputs,
    interpreting,
    kernel_meta,
)
from s2forecast.ops.cuda.indexed_attention_kernels import indexed_backward_kernel, indexed_forward_kernel
from s2forecast.user_errors import UserError


def _configs():
    if interpreting():
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1)]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
        for m, n, w, s in [(16, 32, 2, 2), (32, 32, 2, 2), (64, 32, 4, 3), (64, 64, 4, 3), (128, 64, 8, 3)]
    ]


def _prune(configs, named_args, **kwargs):
    """Tiles taller than a query tile only waste rows (selection tiles hold 8 queries)."""
    rows = named_args["rows_per_tile"]
    fitting = [c for c in configs if c.kwargs["BLOCK_M"] <= max(16, triton.next_power_of_2(rows))]
    return fitting or configs[:1]


_TUNING_KEY = ["rows_per_tile", "list_len", "HEAD_DIM", "HEAD_DIM_V"]
_PRUNE = {"early_config_prune": _prune}
_forward = triton.autotune(_configs(), key=_TUNING_KEY, prune_configs_by=_PRUNE)(indexed_forward_kernel)
_backward = triton.autotune(_configs(), key=_TUNING_KEY, prune_configs_by=_PRUNE, reset_to_zero=["DK", "DV"])(
    indexed_backward_kernel
)


def dense_layout(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a contiguous copy when ``torch.empty_like`` would not reproduce its strides."""
    dense_strides = sorted(zip(t.stride(), t.shape, strict=True))
    expected = 1
    for stride, size in dense_strides:
        if size > 1 and stride != expected:
            return t.contiguous()
        expected *= size
    return t


def _index_strides(key_index):
    return (0 if key_index.shape[0] == 1 else key_index.stride(0)), key_index.stride(1)


def _grid(num_tiles, rows_per_tile, batch_heads):
    return lambda meta: (num_tiles * triton.cdiv(rows_per_tile, meta["BLOCK_M"]), batch_heads)


class _IndexedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_index, log2_w, scale):
        batch, heads, num_queries, _ = q.shape
        num_tiles, list_len = key_index.shape[1:]
        rows_per_tile = num_queries // num_tiles
        out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=q.device)
        lse = torch.empty(batch * heads, num_queries, dtype=torch.float32, device=q.device)
        _forward[_grid(num_tiles, rows_per_tile, batch * heads)](
            q, k, v, out, lse, key_index, log2_w,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(), *_index_strides(key_index),
            heads, num_queries, rows_per_tile, list_len, **kernel_meta(q, v, scale),
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, out, lse, key_index, log2_w)
        ctx.scale = scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v, out, lse, key_index, log2_w = ctx.saved_tensors
        batch, heads, num_queries, _ = q.shape
        num_keys = k.shape[2]
        num_tiles, list_len = key_index.shape[1:]
        rows_per_tile = num_queries // num_tiles
        q = dense_layout(q)
        dq = torch.empty_like(q)
        dk = torch.zeros(batch * heads, num_keys, k.shape[-1], dtype=torch.float32, device=q.device)
        dv = torch.zeros(batch * heads, num_keys, v.shape[-1], dtype=torch.float32, device=q.device)
        _backward[_grid(num_tiles, rows_per_tile, batch * heads)](
            q, k, v, grad_out, dq, dk, dv, lse, out, key_index, log2_w,
            *q.stride(), *k.stride(), *v.stride(), *grad_out.stride(), *out.stride(), *_index_strides(key_index),
            heads, num_queries, num_keys, rows_per_tile, list_len, **kernel_meta(q, v, ctx.scale), scale=ctx.scale,
        )  # fmt: skip
        dk = dk.view(k.shape).to(k.dtype)
        dv = dv.view(v.shape).to(v.dtype)
        return dq, dk, dv, None, None, None


def fused_indexed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_index: torch.Tensor,
    log_w: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Quadrature-weighted attention of query tiles to listed keys, through the fused kernels.

    Args:
        q: (batch, heads, num_tiles * rows_per_tile, head_dim); the queries of tile t are rows
            t * rows_per_tile ... (t + 1) * rows_per_tile - 1.
        k: (batch, heads, num_keys, head_dim), v: (batch, heads, num_keys, head_dim_v).
        key_index: (num_tiles, list_len) shared by all (batch, head), or (batch, heads,
            num_tiles, list_len): the keys of every tile; entries < 0 are skipped.
        log_w: (num_keys,) natural log of each key's quadrature weight (-inf: never attended).
        scale: logit scale.

    Returns:
        (batch, heads, num_queries, head_dim_v): softmax_j(scale * q.k_j + log w_j) v_j over
        the listed keys j of the query's tile. Every tile must list a key of positive weight.
    """
    check_fused_inputs(q, v)
    batch, heads, num_queries, _ = q.shape
    if key_index.dim() == 2:
        key_index = key_index[None]
    else:
        key_index = key_index.reshape(batch * heads, *key_index.shape[2:])
    if num_queries % key_index.shape[1] != 0:
        raise UserError(f"{num_queries} queries do not split into {key_index.shape[1]} tiles")
    key_index = key_index.to(device=q.device, dtype=torch.int32).contiguous()
    log2_w = (log_w.to(device=q.device, dtype=torch.float32) / math.log(2.0)).contiguous()
    return _IndexedAttention.apply(q, k, v, key_index, log2_w, float(scale))
