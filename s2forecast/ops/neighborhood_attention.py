"""Geodesic neighborhood attention, eq. (27) of "Attention on the Sphere": eq. (26) with the
sums restricted to keys within a geodesic radius theta of the query.

Three paths on (batch, heads, nlat*nlon, head_dim) tensors:

- fused: the Triton kernels of ``s2forecast.ops.cuda`` (the default on CUDA).
- blocked (pure PyTorch, the default elsewhere): each query row is split into longitude
  blocks, and a block attends only to its span of each key row of its disks (the layout of
  ``s2forecast.ops.neighborhood_blocks``, the structure of the fused kernel). The spans are
  gathered points-first and the blocks of a group of rows go through one SDPA call with one
  (block, keys) mask per row. A custom backward saves only q, k and v and recomputes each
  chunk's attention, so memory above the inputs is one chunk's working set.
- reference (``backend="reference"``, the tests' oracle): query rows attend, through SDPA,
  to the whole key rows of their band, with a float mask that is log w inside the disk and
  -inf outside; more arithmetic (896 keys per query for 141 neighbors at 64x128), simple
  autograd. When the band of every row does not fit the memory budget at once, each chunk
  is recomputed in the backward pass (activation checkpointing).
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from s2forecast.geometry import Grid
from s2forecast.ops.neighborhood import SphericalNeighborhood, spherical_neighborhood
from s2forecast.ops.neighborhood_blocks import LongitudeBlocks, longitude_blocks
from s2forecast.ops.quadrature_bias import bias_dtype, log_row_weights
from s2forecast.ops.validation import check_attention_inputs, check_grid, check_radius, use_fused

# Working-set budget of one chunk of query rows (gathered keys/values and their gradients, or
# the reference's band and mask).
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
            "reference" (pure PyTorch, whole key rows; the oracle) or "auto": fused on CUDA,
            the longitude-blocked pure-PyTorch path elsewhere (and for float64).

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
    neighborhood = spherical_neighborhood(grid, theta)
    if backend == "reference":
        return neighborhood_attention_reference(q, k, v, neighborhood, scale)
    return neighborhood_attention_blocked(q, k, v, longitude_blocks(neighborhood), scale)


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


def neighborhood_attention_blocked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: LongitudeBlocks, scale: float
) -> torch.Tensor:
    """Pure-PyTorch eq. (27) over longitude blocks on validated inputs; see the module docstring."""
    return _BlockedNeighborhoodAttention.apply(q, k, v, blocks, scale)


class _BlockedNeighborhoodAttention(torch.autograd.Function):
    """Saves only q, k, v: the backward gathers each chunk's keys again and recomputes its
    attention, so memory stays one chunk's working set above the inputs and gradients."""

    @staticmethod
    def forward(ctx, q, k, v, blocks: LongitudeBlocks, scale: float):
        ctx.save_for_backward(q, k, v)
        ctx.blocks, ctx.scale = blocks, scale
        batch, heads, npoints, head_dim_v = v.shape
        nlat, nlon = blocks.neighborhood.grid.shape
        out = q.new_empty(batch * heads, nlat, nlon, head_dim_v)
        # in the inputs' dtype, as the backward's recomputation (which runs outside autocast)
        with torch.autocast(q.device.type, enabled=False):
            for chunk in _chunks(q, k, v, blocks):
                attended = _attend(chunk, scale)
                out.index_copy_(1, chunk.rows, _from_blocks(attended, chunk, nlon))
        return out.view(batch, heads, npoints, head_dim_v)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        blocks = ctx.blocks
        batch, heads, npoints, head_dim = q.shape
        nlat, nlon = blocks.neighborhood.grid.shape
        grad_rows = grad_out.reshape(batch * heads, nlat, nlon, -1)
        dq = q.new_empty(batch * heads, nlat, nlon, head_dim)
        dk = k.new_zeros(npoints, batch * heads, head_dim)  # points first, as gathered
        dv = v.new_zeros(npoints, batch * heads, v.shape[-1])
        for chunk in _chunks(q, k, v, blocks):
            leaves = [t.detach().requires_grad_() for t in (chunk.q_blocks, chunk.k_gathered, chunk.v_gathered)]
            with torch.enable_grad():
                attended = _attend(
                    chunk._replace(q_blocks=leaves[0], k_gathered=leaves[1], v_gathered=leaves[2]), ctx.scale
                )
            grad = _to_blocks(grad_rows.index_select(1, chunk.rows), chunk, wrapped_columns="zero")
            dq_blocks, dk_gathered, dv_gathered = torch.autograd.grad(attended, leaves, grad)
            dq.index_copy_(1, chunk.rows, _from_blocks(dq_blocks, chunk, nlon))
            dk.index_add_(0, chunk.key_index, dk_gathered)
            dv.index_add_(0, chunk.key_index, dv_gathered)
        dk = dk.transpose(0, 1).reshape(k.shape)
        dv = dv.transpose(0, 1).reshape(v.shape)
        return dq.view(q.shape), dk, dv, None, None


class _Chunk(NamedTuple):
    """Rows of one group in the layout of one SDPA call (see ``_chunks``)."""

    rows: torch.Tensor  # (rows,) query rows
    block: int
    nblocks: int
    q_blocks: torch.Tensor  # (nblocks*bh, rows, block, d)
    key_index: torch.Tensor  # (rows*keys*nblocks,) flat key point of each gathered key
    k_gathered: torch.Tensor  # (rows*keys*nblocks, bh, d)
    v_gathered: torch.Tensor  # (rows*keys*nblocks, bh, dv)
    bias: torch.Tensor  # (1, rows, block, keys) log w inside the disks, -inf outside


def _chunks(q, k, v, blocks: LongitudeBlocks):
    """The SDPA calls of ``blocks``: each group's rows, split so that one call's gathered keys
    and values (and their gradients) stay within CHUNK_BYTES."""
    grid = blocks.neighborhood.grid
    nlat, nlon = grid.shape
    batch, heads, npoints, head_dim = q.shape
    bh = batch * heads
    device = q.device
    q_rows = q.reshape(bh, nlat, nlon, head_dim)
    # Points first, so that gathering a key copies one contiguous (batch*heads, head_dim) slab.
    k_points = k.reshape(bh, npoints, head_dim).transpose(0, 1).contiguous()
    v_points = v.reshape(bh, npoints, -1).transpose(0, 1).contiguous()
    log_w = log_row_weights(grid, device, bias_dtype(q.dtype))
    for group in blocks.groups:
        bytes_per_row = 2 * group.nblocks * group.keys * bh * (k.shape[-1] + v.shape[-1]) * k.element_size()
        step = max(1, CHUNK_BYTES // bytes_per_row)
        for start in range(0, group.rows.numel(), step):
            stop = start + step
            rows = group.rows[start:stop].to(device)
            key_row = group.key_row[start:stop].to(device)
            index = group.key_points(start, stop, device).flatten()  # (rows, keys, nblocks)
            inside = group.inside(start, stop, device)
            bias = torch.where(inside, log_w[key_row][:, None, :], float("-inf")).to(q.dtype)
            k_gathered, v_gathered = k_points.index_select(0, index), v_points.index_select(0, index)
            chunk = _Chunk(rows, group.block, group.nblocks, None, index, k_gathered, v_gathered, bias[None])
            yield chunk._replace(q_blocks=_to_blocks(q_rows.index_select(1, rows), chunk))


def _to_blocks(x_rows: torch.Tensor, chunk: _Chunk, wrapped_columns: str = "repeat") -> torch.Tensor:
    """(bh, rows, nlon, c) -> (nblocks*bh, rows, block, c). The last block's columns past nlon
    repeat the first columns ("repeat": queries) or are zero ("zero": output gradients, so that
    the repeats, whose outputs are dropped, add nothing to dk and dv)."""
    bh, rows, nlon, channels = x_rows.shape
    extra = chunk.nblocks * chunk.block - nlon
    if extra:
        tail = x_rows[:, :, :extra] if wrapped_columns == "repeat" else x_rows.new_zeros(bh, rows, extra, channels)
        x_rows = torch.cat([x_rows, tail], dim=2)
    x = x_rows.view(bh, rows, chunk.nblocks, chunk.block, channels).permute(2, 0, 1, 3, 4)
    return x.reshape(chunk.nblocks * bh, rows, chunk.block, channels)


def _from_blocks(x: torch.Tensor, chunk: _Chunk, nlon: int) -> torch.Tensor:
    """(nblocks*bh, rows, block, c) -> (bh, rows, nlon, c), dropping the wrapped repeats."""
    _, rows, block, channels = x.shape
    x = x.view(chunk.nblocks, -1, rows, block, channels).permute(1, 2, 0, 3, 4)
    return x.reshape(-1, rows, chunk.nblocks * block, channels)[:, :, :nlon]


def _attend(chunk: _Chunk, scale: float) -> torch.Tensor:
    """SDPA of one chunk, (nblocks*bh, rows, block, dv). Batch dims (nblocks*bh, rows): the
    mask depends on the row only, and the gathered keys are viewed in place, not copied."""
    rows, keys = chunk.bias.shape[1], chunk.bias.shape[-1]
    bh = chunk.k_gathered.shape[1]
    k = chunk.k_gathered.view(rows, keys, chunk.nblocks * bh, -1).permute(2, 0, 1, 3)
    v = chunk.v_gathered.view(rows, keys, chunk.nblocks * bh, -1).permute(2, 0, 1, 3)
    return F.scaled_dot_product_attention(chunk.q_blocks, k, v, attn_mask=chunk.bias, scale=scale)
