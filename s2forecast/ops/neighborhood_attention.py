"""Geodesic neighborhood attention, eq. (27) of "Attention on the Sphere": eq. (26) with the
sums restricted to keys within a geodesic radius theta of the query.

Two backends: the fused Triton kernels of ``s2forecast.ops.cuda`` (CUDA tensors) and the
reference below (any device, the default on CPU).

Reference implementation (autograd): query rows are processed in chunks; each
query row attends, through SDPA, to the ``band_rows`` key rows its disks can reach, with a
float mask that is log w inside the disk and -inf outside. Matrix products over whole rows
waste some arithmetic on the keys outside the arcs but run at matmul speed, which on CPU
beats gathering the arcs point by point. When the band of every row does not fit the memory
budget at once, each chunk is recomputed in the backward pass (activation checkpointing), so
only q, k, v and the output are kept between forward and backward.
"""

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from s2forecast.geometry import Grid
from s2forecast.ops.neighborhood import SphericalNeighborhood, spherical_neighborhood
from s2forecast.ops.quadrature_bias import bias_dtype, log_row_weights
from s2forecast.ops.validation import check_attention_inputs, check_grid, check_radius, use_fused

# Working-set budget of one chunk of query rows (gathered keys/values, mask and SDPA scratch).
CHUNK_BYTES = 256 * 2**20


def neighborhood_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grid: Grid,
    theta: float,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Quadrature-weighted softmax attention over the keys within geodesic radius ``theta``.

    Args:
        q: (batch, heads, nlat*nlon, head_dim) queries, flattened row-major over (lat, lon).
        k: (batch, heads, nlat*nlon, head_dim) keys on the same grid.
        v: (batch, heads, nlat*nlon, head_dim_v) values on the same grid.
        grid: the grid of queries, keys and values.
        theta: neighborhood radius in radians, 0 < theta <= pi. The neighborhood structure
            is precomputed once per (grid, theta) and cached.
        scale: logit scale; defaults to 1/sqrt(head_dim).
        backend: "fused" (Triton kernels; CUDA tensors, or CPU under TRITON_INTERPRET=1),
            "reference" (pure PyTorch) or "auto": fused on CUDA, reference elsewhere.

    Returns:
        (batch, heads, nlat*nlon, head_dim_v), same dtype as ``q``.
    """
    check_grid(grid, "grid")
    theta = check_radius(theta)
    check_attention_inputs(q, k, v, grid, grid)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if use_fused(backend, q):
        from s2forecast.ops.cuda.fused_neighborhood_attention import fused_neighborhood_attention

        return fused_neighborhood_attention(q, k, v, grid, theta, scale)
    return neighborhood_attention_reference(q, k, v, spherical_neighborhood(grid, theta), scale)


def neighborhood_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, neighborhood: SphericalNeighborhood, scale: float
) -> torch.Tensor:
    """Pure-PyTorch eq. (27) on validated inputs; see the module docstring."""
    grid = neighborhood.grid
    nlat, nlon = grid.shape
    batch, heads, _, head_dim = q.shape
    head_dim_v = v.shape[-1]
    bh = batch * heads
    q_rows = q.reshape(bh, nlat, nlon, head_dim)
    k_rows = k.reshape(bh, nlat, nlon, head_dim)
    v_rows = v.reshape(bh, nlat, nlon, head_dim_v)
    log_w = log_row_weights(grid, q.device, bias_dtype(q.dtype))

    keys_per_row = neighborhood.band_rows * nlon
    row_bytes = q.element_size() * nlon * keys_per_row * (1 + bh) + 4 * bh * keys_per_row * (head_dim + head_dim_v)
    rows_per_chunk = max(1, min(nlat, CHUNK_BYTES // row_bytes))
    recompute = rows_per_chunk < nlat and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))

    outputs = []
    for start in range(0, nlat, rows_per_chunk):
        stop = min(nlat, start + rows_per_chunk)
        args = (q_rows, k_rows, v_rows, neighborhood, log_w, scale, start, stop)
        if recompute:
            outputs.append(checkpoint(_attend_rows, *args, use_reentrant=False))
        else:
            outputs.append(_attend_rows(*args))
    return torch.cat(outputs, dim=1).reshape(batch, heads, nlat * nlon, head_dim_v)


def _attend_rows(q_rows, k_rows, v_rows, neighborhood: SphericalNeighborhood, log_w, scale, start, stop):
    """Output of query rows start..stop-1, shape (batch*heads, stop-start, nlon, head_dim_v)."""
    bh, nlat, nlon, _ = q_rows.shape
    rows = stop - start
    key_rows = neighborhood.key_rows[start:stop].to(q_rows.device)  # (rows, band_rows)
    k_band = k_rows[:, key_rows].reshape(bh, rows, -1, k_rows.shape[-1])
    v_band = v_rows[:, key_rows].reshape(bh, rows, -1, v_rows.shape[-1])
    inside = neighborhood.mask_rows(start, stop, device=q_rows.device)  # (rows, nlon, band_rows*nlon)
    row_bias = log_w[key_rows].repeat_interleave(nlon, dim=1)  # (rows, band_rows*nlon)
    bias = torch.where(inside, row_bias[:, None, :], float("-inf")).to(q_rows.dtype)
    return F.scaled_dot_product_attention(q_rows[:, start:stop], k_band, v_band, attn_mask=bias[None], scale=scale)
