"""Global spherical attention, eq. (26) of "Attention on the Sphere":

    out(x_i) = sum_j exp(q_i.k_j * scale) w_j v_j / sum_l exp(q_i.k_l * scale) w_l

i.e. softmax attention whose key sum is a quadrature with weights w_j, implemented as
softmax(q.k * scale + log w_j) on PyTorch's scaled_dot_product_attention (SDPA).

Backends:
  - CPU, and GPU in float32: log w is passed as a float ``attn_mask`` of shape (1, 1, 1, N_kv),
    which broadcasts over batch, heads and queries. On CPU SDPA runs its fused flash kernel
    with this mask; on GPU the memory-efficient kernel (FlashAttention does not take masks).
  - GPU in float16/bfloat16: log w is folded into one extra q/k channel (q' = [q, 1],
    k' = [k, log w / scale], head_dim padded to a multiple of 8, no mask), so SDPA may pick
    its FlashAttention backend. The bias is shifted by its maximum first (softmax is shift
    invariant) to keep the extra channel small and its half-precision rounding negligible.
"""

import torch
import torch.nn.functional as F

from s2forecast.geometry import Grid
from s2forecast.ops.quadrature_bias import bias_dtype, log_quadrature_weights
from s2forecast.ops.validation import check_attention_inputs, check_grid, check_scale
from s2forecast.user_errors import UserError


def global_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grid_q: Grid,
    grid_kv: Grid | None = None,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
    log_w: torch.Tensor | None = None,
) -> torch.Tensor:
    """Quadrature-weighted softmax attention over all keys.

    Args:
        q: (batch, heads, nlat_q*nlon_q, head_dim) queries on ``grid_q``.
        k: (batch, heads, nlat_kv*nlon_kv, head_dim) keys on ``grid_kv``.
        v: (batch, heads, nlat_kv*nlon_kv, head_dim_v) values on ``grid_kv``.
        grid_q: grid of the queries (and of the output).
        grid_kv: grid of keys and values; defaults to ``grid_q``. It may differ from
            ``grid_q`` (down/upsampling attention).
        scale: logit scale; defaults to 1/sqrt(head_dim).
        bias: optional additive logit bias broadcastable to (batch, heads, N_q, N_kv), e.g. a
            relative position bias; it makes the mask a full N_q x N_kv tensor.
        log_w: (N_kv,) prepared log quadrature weights of ``grid_kv`` (``prepare_global``);
            computed when not given.

    Returns:
        (batch, heads, nlat_q*nlon_q, head_dim_v), same dtype as ``q``.
    """
    check_grid(grid_q, "grid_q")
    grid_kv = grid_q if grid_kv is None else check_grid(grid_kv, "grid_kv")
    check_attention_inputs(q, k, v, grid_q, grid_kv)
    scale = check_scale(scale, q.shape[-1])
    if log_w is None:
        log_w = log_quadrature_weights(grid_kv, q.device, bias_dtype(q.dtype))
    elif log_w.shape != (grid_kv.npoints,):
        raise UserError(f"log_w must have shape (N_kv,) = ({grid_kv.npoints},), got {tuple(log_w.shape)}")
    else:
        log_w = log_w.to(q.device, bias_dtype(q.dtype))
    mask = log_w.view(1, 1, 1, -1)
    if bias is not None:
        full = (*q.shape[:3], k.shape[2])
        try:
            broadcast = torch.broadcast_shapes(tuple(bias.shape), full) == full
        except RuntimeError:
            broadcast = False
        if not broadcast:
            raise UserError(f"bias must broadcast to (batch, heads, N_q, N_kv) = {full}, got {tuple(bias.shape)}")
        mask = mask + bias
    elif q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        return attention_with_folded_key_bias(q, k, v, log_w, scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), scale=scale)


def prepare_global(grid_kv: Grid, device="cpu", dtype=torch.float32) -> torch.Tensor:
    """(N_kv,) log quadrature weights of ``grid_kv`` on ``device`` for inputs of ``dtype``."""
    return log_quadrature_weights(grid_kv, device, bias_dtype(dtype))


def attention_with_folded_key_bias(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """SDPA with a per-key additive logit bias carried by an extra q/k channel instead of a mask.

    Args:
        q, k, v: (batch, heads, N, head_dim) as for SDPA.
        key_bias: (N_kv,) float32 logit bias b_j added to every query's logits.
        scale: logit scale applied to q.k.

    Returns:
        softmax(scale * q.k + b) v, shape (batch, heads, N_q, head_dim_v).
    """
    head_dim, head_dim_v = q.shape[-1], v.shape[-1]
    width = -(-(max(head_dim, head_dim_v) + 1) // 8) * 8
    bias = (key_bias - key_bias.max()) / scale

    def pad(t: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        parts = [t] if extra is None else [t, extra]
        used = t.shape[-1] + (0 if extra is None else 1)
        if width > used:
            parts.append(t.new_zeros(*t.shape[:-1], width - used))
        return torch.cat(parts, dim=-1)

    q_ext = pad(q, q.new_ones(*q.shape[:-1], 1))
    k_ext = pad(k, bias.to(k.dtype).view(1, 1, -1, 1).expand(*k.shape[:-1], 1))
    v_ext = pad(v, None)
    out = F.scaled_dot_product_attention(q_ext, k_ext, v_ext, scale=scale)
    return out[..., :head_dim_v]
