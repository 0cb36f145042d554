"""Geodesic neighborhood attention, eq. (27) of "Attention on the Sphere": eq. (26) with the
sums restricted to keys within a geodesic radius theta of the query.

Three paths on (batch, heads, nlat*nlon, head_dim) tensors, each a backend of
``s2forecast.ops.backends`` with its ``prepare_*`` state (precomputed once per layer):

- fused: the Triton kernels of ``s2forecast.ops.cuda`` (the default on CUDA).
- blocked (``backend="blocked"``, pure PyTorch, the default elsewhere): each query row is split into longitude
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

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from s2forecast.geometry import Grid
from s2forecast.ops.neighborhood import SphericalNeighborhood, spherical_neighborhood
from s2forecast.ops.neighborhood_blocks import PREPARED_BIAS_ELEMENTS, LongitudeBlocks, longitude_blocks
from s2forecast.ops.prepared import to_device
from s2forecast.ops.quadrature_bias import bias_dtype, log_row_weights

# Working-set budget of one chunk of query rows (gathered keys/values and their gradients, or
# the reference's band and mask).
CHUNK_BYTES = 256 * 2**20
# The blocked path's gathered keys and values per SDPA call: not much below, as every call
# synchronises the threads.
BLOCK_CHUNK_BYTES = 16 * 2**20


class ReferenceState(NamedTuple):
    """What the reference path precomputes: the disks and the log weights of the rows."""

    neighborhood: SphericalNeighborhood
    log_w: torch.Tensor  # (nlat,) in bias_dtype(inputs' dtype)


class BlockedState(NamedTuple):
    """What the blocked path precomputes: the block layout, the log weights of the rows and,
    per group, its (rows, block, keys) mask of log w inside and -inf outside (None when larger
    than PREPARED_BIAS_ELEMENTS: recomputed per call)."""

    blocks: LongitudeBlocks
    log_w: torch.Tensor  # (nlat,) in bias_dtype(inputs' dtype)
    biases: tuple[torch.Tensor | None, ...]


def prepare_reference(grid: Grid, theta: float, device="cpu", dtype=torch.float32) -> ReferenceState:
    """The reference path's state on ``device`` for inputs of ``dtype``."""
    neighborhood = to_device(spherical_neighborhood(grid, theta), device)
    return ReferenceState(neighborhood, log_row_weights(grid, device, bias_dtype(dtype)))


def prepare_blocked(
    grid: Grid, theta: float, device="cpu", dtype=torch.float32, block: int | None = None
) -> BlockedState:
    """The blocked path's state on ``device`` for inputs of ``dtype``; ``block`` as for
    ``longitude_blocks``."""
    blocks = to_device(longitude_blocks(spherical_neighborhood(grid, theta), block), device)
    log_w = log_row_weights(grid, device, bias_dtype(dtype))
    biases = tuple(
        group.bias(log_w) if group.rows.numel() * group.block * group.keys <= PREPARED_BIAS_ELEMENTS else None
        for group in blocks.groups
    )
    return BlockedState(blocks, log_w, biases)


def neighborhood_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    neighborhood: SphericalNeighborhood,
    scale: float,
    log_w: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pure-PyTorch eq. (27) on validated inputs; see the module docstring. log_w: (nlat,) log
    weights of the rows (``ReferenceState``), computed when not given."""
    grid = neighborhood.grid
    nlat, nlon = grid.shape
    batch, heads, _, head_dim = q.shape
    head_dim_v = v.shape[-1]
    bh = batch * heads
    q_rows = q.reshape(bh, nlat, nlon, head_dim)
    k_rows = k.reshape(bh, nlat, nlon, head_dim)
    v_rows = v.reshape(bh, nlat, nlon, head_dim_v)
    log_w = log_row_weights(grid, q.device, bias_dtype(q.dtype)) if log_w is None else log_w.to(q.device)

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
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    blocks: LongitudeBlocks | BlockedState,
    scale: float,
    workspace: dict | None = None,
) -> torch.Tensor:
    """Pure-PyTorch eq. (27) over longitude blocks on validated inputs; see the module docstring.

    ``blocks``: a prepared ``BlockedState``, or a bare layout whose masks are formed per call.
    ``workspace``: a dict in which the gathers keep their scratch tensors from call to call (see
    ``_gather``; one per thread); default: fresh scratch per forward and backward pass."""
    if isinstance(blocks, LongitudeBlocks):
        log_w = log_row_weights(blocks.neighborhood.grid, q.device, bias_dtype(q.dtype))
        blocks = BlockedState(blocks, log_w, (None,) * len(blocks.groups))
    return _BlockedNeighborhoodAttention.apply(q, k, v, blocks, scale, workspace)


class _BlockedNeighborhoodAttention(torch.autograd.Function):
    """Saves only q, k, v: the backward gathers each chunk's keys again and recomputes its
    attention, so memory stays one chunk's working set above the inputs and gradients."""

    @staticmethod
    def forward(ctx, q, k, v, state: BlockedState, scale: float, workspace: dict | None):
        ctx.save_for_backward(q, k, v)
        ctx.state, ctx.scale, ctx.workspace = state, scale, workspace
        batch, heads, npoints, head_dim_v = v.shape
        outputs, queries, firsts, offset = [], [], [], 0
        # in the inputs' dtype, as the backward's recomputation (which runs outside autocast)
        with torch.autocast(q.device.type, enabled=False):
            for chunk in _chunks(q, k, v, state, {} if workspace is None else workspace):
                attended = F.scaled_dot_product_attention(*chunk.qkv(q.shape[-1]), attn_mask=chunk.bias, scale=scale)
                outputs.append(attended.view(batch * heads, -1, head_dim_v))
                first = chunk.first if chunk.first is not None else torch.arange(chunk.query_blocks.numel())
                queries.append(chunk.query_index)
                firsts.append(first.to(q.device) + offset)
                offset += chunk.query_blocks.numel()
            # one gather puts every query's output (not its wrapped repeats) in place
            source = torch.empty(npoints, dtype=torch.int64, device=q.device)
            source.index_copy_(0, torch.cat(queries), torch.cat(firsts))
            out = torch.cat(outputs, dim=1).index_select(1, source)
        return out.view(batch, heads, npoints, head_dim_v)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        batch, heads, npoints, head_dim = q.shape
        bh = batch * heads
        # a zero point after the last: the output gradient of the wrapped repeats, whose
        # outputs were dropped, so that they add nothing to dk and dv
        grad_points = torch.cat([grad_out.reshape(bh, npoints, -1), grad_out.new_zeros(bh, 1, grad_out.shape[-1])], 1)
        dq, dk, dv = (t.new_zeros(bh, npoints, t.shape[-1]) for t in (q, k, v))
        workspace = {} if ctx.workspace is None else ctx.workspace
        for chunk in _chunks(q, k, v, ctx.state, workspace):
            # k and v as separate leaves: a gradient for the whole gathered kv would be
            # assembled from two zero-filled slices
            leaves = tuple(t.detach().requires_grad_() for t in chunk.qkv(head_dim))
            with torch.enable_grad():
                attended = F.scaled_dot_product_attention(*leaves, attn_mask=chunk.bias, scale=ctx.scale)
            grad_index = chunk.query_blocks
            if chunk.first is not None:
                grad_index = torch.full_like(grad_index, npoints).index_copy_(0, chunk.first, chunk.query_index)
            grad = _gather(grad_points, grad_index, workspace, "grad").view(attended.shape)
            dq_blocks, dk_gathered, dv_gathered = torch.autograd.grad(attended, leaves, grad)
            _index_add(dq, chunk.query_blocks, dq_blocks, chunk.nblocks)
            _index_add(dk, chunk.key_index, dk_gathered, chunk.nblocks)
            _index_add(dv, chunk.key_index, dv_gathered, chunk.nblocks)
        return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape), None, None, None


class _Chunk(NamedTuple):
    """Rows of one group in the layout of one SDPA call (see ``_chunks``); bh = batch*heads."""

    rows: int
    nblocks: int
    query_blocks: torch.Tensor  # (nblocks*rows*block,) flat query point of each block position
    query_index: torch.Tensor  # the same without the wrapped repeats
    first: torch.Tensor | None  # positions of query_index in query_blocks; None: no repeats
    key_index: torch.Tensor  # (nblocks*rows*keys,) flat key point of each gathered key
    q_blocks: torch.Tensor  # (bh*nblocks, rows, block, d)
    kv_gathered: torch.Tensor  # (bh*nblocks, rows, keys, d + dv)
    bias: torch.Tensor  # (1, rows, block, keys) log w inside the disks, -inf outside

    def qkv(self, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The SDPA operands: q blocks, and the gathered keys and values (views)."""
        return self.q_blocks, self.kv_gathered[..., :head_dim], self.kv_gathered[..., head_dim:]


def _chunks(q, k, v, state: BlockedState, workspace: dict):
    """The SDPA calls of ``state``'s layout: each group's rows, split so that one call's gathered
    keys and values stay within BLOCK_CHUNK_BYTES. Gathers run along the points of (bh, N, c)
    tensors in the order (block, row, slot), so that SDPA's batch dims (bh*nblocks, rows) are
    plain views and the mask, which depends on the row only, broadcasts. ``workspace`` holds the
    scratch tensors of the gathers (see ``_gather``)."""
    batch, heads, npoints, head_dim = q.shape
    bh = batch * heads
    device = q.device
    q_points = q.reshape(bh, npoints, head_dim)
    kv_points = torch.cat([k, v], dim=-1).view(bh, npoints, -1)
    log_w = state.log_w.to(device, bias_dtype(q.dtype))
    for group, prepared_bias in zip(state.blocks.groups, state.biases, strict=True):
        usable = prepared_bias is not None and prepared_bias.dtype == log_w.dtype and prepared_bias.device == device
        group_bias = (prepared_bias if usable else group.bias(log_w)).to(q.dtype)
        bytes_per_row = group.nblocks * group.keys * bh * kv_points.shape[-1] * kv_points.element_size()
        step = max(1, BLOCK_CHUNK_BYTES // bytes_per_row)
        for start in range(0, group.rows.numel(), step):
            stop = min(start + step, group.rows.numel())
            rows = stop - start
            key_index = group.key_points(start, stop, device).flatten()
            query_blocks, first = group.query_points(start, stop, device)
            query_blocks, first = query_blocks.flatten(), first.flatten()
            wraps = not bool(first.all())
            first = first.nonzero().squeeze(1) if wraps else None
            bias = group_bias[start:stop]
            q_blocks = _gather(q_points, query_blocks, workspace, "q")
            kv_gathered = _gather(kv_points, key_index, workspace, "kv")
            yield _Chunk(
                rows=rows,
                nblocks=group.nblocks,
                query_blocks=query_blocks,
                query_index=query_blocks[first] if wraps else query_blocks,
                first=first,
                key_index=key_index,
                q_blocks=q_blocks.view(bh * group.nblocks, rows, group.block, head_dim),
                kv_gathered=kv_gathered.view(bh * group.nblocks, rows, group.keys, -1),
                bias=bias[None],
            )


def _gather(points: torch.Tensor, index: torch.Tensor, workspace: dict, slot: str) -> torch.Tensor:
    """``points.index_select(1, index)`` for (bh, N, c) ``points``, written into a scratch tensor
    that ``workspace`` keeps per slot and reuses from chunk to chunk (and, when the caller keeps
    the workspace, from call to call): a fresh multi-MiB tensor per chunk makes the forward
    1.3-1.5x slower on CPU (page faults, and the functional index_select's slower copy), fresh
    ones per call about 1.5x at 64x128. The result is valid until the next gather into ``slot``."""
    shape = (points.shape[0], index.numel(), points.shape[2])
    numel = math.prod(shape)
    buffer = workspace.get(slot)
    if buffer is None or buffer.numel() < numel or buffer.dtype != points.dtype or buffer.device != points.device:
        buffer = workspace[slot] = points.new_empty(numel)
    return torch.index_select(points, 1, index, out=buffer[:numel].view(shape))


def _index_add(target: torch.Tensor, index: torch.Tensor, grad: torch.Tensor, nblocks: int) -> None:
    """``target.index_add_(1, index, grad)`` for (bh, N, c) ``target`` and a chunk's gradient
    (bh*nblocks, rows, L, c) whose points ``index`` lists in (block, row, l) order. SDPA's CPU
    backward returns its gradients as transposed views of (bh*nblocks, L, rows, c) tensors:
    then the index is transposed instead of copying the gradient."""
    bh_blocks, rows, length, channels = grad.shape
    flipped = grad.transpose(1, 2)
    if flipped.is_contiguous():
        index = index.view(nblocks, rows, length).transpose(1, 2).reshape(-1)
        grad = flipped
    target.index_add_(1, index, grad.reshape(bh_blocks // nblocks, -1, channels))
