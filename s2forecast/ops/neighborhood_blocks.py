"""Longitude blocking of the disk neighborhoods: the layout of the PyTorch CPU path.

A query block is ``block`` consecutive longitudes of one query row. By the longitude shift
invariance of the grid, the neighbors of a block in key row h' are one wrapped span of
``block + 2m`` columns (m the arc half-width, see ``SphericalNeighborhood``), or the whole
row when that span reaches around, and the (query, key) mask inside the spans is the same
for every block of the row. Each query row is therefore attention of ``nlon / block`` query
blocks over ``K`` gathered keys with one shared (block, K) mask, which SDPA batches; this is
the structure of the fused GPU kernel, which walks the same spans.

Rows pick the block size with the lowest modelled cost (scores, gathered keys, SDPA tiles);
near the poles, where the disks cover whole rows, that is one block of the whole row. Rows
with the same block size and similar K are grouped into one SDPA call, padded to the
group's largest K with masked keys.
"""

import math
from dataclasses import dataclass

import torch

from s2forecast.ops.neighborhood import SphericalNeighborhood
from s2forecast.user_errors import UserError

# Costs in units of one scored (query, key) pair, measured with the CPU flash SDPA at head_dim
# 32 (1 thread): gathering one key and its value, and the fixed cost of one (block, head)
# tile of SDPA (its small matrix products and softmax set-up). A row's block size minimises
# nblocks * (keys * (block + GATHER_COST) + TILE_COST).
GATHER_COST = 5.0
TILE_COST = 1500.0
# A group accepts a row when its K is at least this fraction of the group's largest K: fewer,
# larger SDPA calls, as each costs a thread synchronisation (dear on a busy machine).
GROUP_FILL = 0.75
# Largest mask (elements) of a group that a prepared layout keeps (``prepare_blocked`` in
# ``neighborhood_attention``); whole-row groups of large grids recompute theirs per call.
PREPARED_BIAS_ELEMENTS = 2**22


@dataclass(frozen=True, eq=False)
class BlockGroup:
    """Query rows attended in one batched SDPA call (split further by memory at run time).

    The ``nblocks`` blocks of a row start at columns 0, block, 2*block, ... and wrap around: the
    last block repeats columns 0.. when ``block`` does not divide nlon. Key slot j of block b
    is the key (key_row[., j], (b*block + key_offset[., j]) mod nlon).

    Attributes:
        rows: (g,) int64 query rows of the group.
        block: query longitudes per block.
        nblocks: ceil(nlon / block).
        key_row: (g, K) int64 key row of each key slot.
        key_offset: (g, K) int64 key column relative to the block's first column.
        half_width: (g, K) int64 arc half-width of the slot's key row (nlon: the whole row;
            -1: a padding slot of a row with fewer than K keys, never inside).
    """

    rows: torch.Tensor
    block: int
    nblocks: int
    key_row: torch.Tensor
    key_offset: torch.Tensor
    half_width: torch.Tensor
    nlon: int

    @property
    def keys(self) -> int:
        return self.key_row.shape[1]

    def key_points(self, start: int, stop: int, device=None) -> torch.Tensor:
        """(nblocks, stop-start, K) int64 flat key index of every slot of rows start..stop-1."""
        shift = torch.arange(self.nblocks, device=device)[:, None, None] * self.block
        cols = (self.key_offset[start:stop].to(device) + shift) % self.nlon
        return self.key_row[start:stop].to(device) * self.nlon + cols

    def query_points(self, start: int, stop: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(nblocks, stop-start, block) int64 flat query index of every block position of rows
        start..stop-1, and whether the position is a query's first (not a wrapped repeat)."""
        cols = torch.arange(self.nblocks * self.block, device=device).view(self.nblocks, 1, self.block)
        rows = self.rows[start:stop].to(device)[:, None]
        return rows * self.nlon + cols % self.nlon, (cols < self.nlon).expand(-1, stop - start, -1)

    def bias(self, log_w: torch.Tensor) -> torch.Tensor:
        """(g, block, K) log w of the slot's key row where inside, -inf elsewhere, in log_w's
        dtype and on its device; log_w: (nlat,)."""
        inside = self.inside(0, self.rows.numel(), log_w.device)
        return torch.where(inside, log_w[self.key_row.to(log_w.device)][:, None, :], float("-inf"))

    def inside(self, start: int, stop: int, device=None) -> torch.Tensor:
        """(stop-start, block, K) bool: whether slot j is a neighbor of the block's query i
        (the same for every block of a row)."""
        query = torch.arange(self.block, device=device)
        apart = (self.key_offset[start:stop, None, :].to(device) - query[:, None]) % self.nlon
        return torch.minimum(apart, self.nlon - apart) <= self.half_width[start:stop, None, :].to(device)


@dataclass(frozen=True, eq=False)
class LongitudeBlocks:
    """The block layout of ``neighborhood``: its query rows in groups (each row in one)."""

    neighborhood: SphericalNeighborhood
    groups: tuple[BlockGroup, ...]


def _arcs(neighborhood: SphericalNeighborhood) -> list[list[tuple[int, int]]]:
    """Per query row, the (key row, arc half-width) pairs of the key rows it reaches."""
    key_rows, half_widths = neighborhood.key_rows.tolist(), neighborhood.half_width.tolist()
    return [
        [(r, m) for r, m in zip(rows, widths, strict=True) if m >= 0]
        for rows, widths in zip(key_rows, half_widths, strict=True)
    ]


def _spans(arcs: list[tuple[int, int]], block: int, nlon: int) -> list[tuple[int, int, int, int]]:
    """(key row, half-width, first column offset, length) of the span of each arc for a block of
    ``block`` longitudes, the offset relative to the block's first column; whole rows when the
    span would reach around."""
    spans = []
    for key_row, half_width in arcs:
        length = min(block + 2 * half_width, nlon)
        spans.append((key_row, half_width, 0 if length == nlon else -half_width, length))
    return spans


def block_cost(arcs: list[tuple[int, int]], block: int, nlon: int) -> float:
    """Modelled cost of a query row in blocks of ``block`` longitudes: scores, gathers, tiles."""
    keys = sum(length for *_, length in _spans(arcs, block, nlon))
    return math.ceil(nlon / block) * (keys * (block + GATHER_COST) + TILE_COST)


def _row_layout(arcs: list[tuple[int, int]], block: int, nlon: int) -> torch.Tensor:
    """(3, K) int64 key row, key offset and half-width of each key slot of one query row."""
    key_row, key_offset, half_width = [], [], []
    for row, width, offset, length in _spans(arcs, block, nlon):
        key_row += [row] * length
        key_offset += range(offset, offset + length)
        half_width += [width] * length
    return torch.tensor([key_row, key_offset, half_width])


def block_sizes(nlon: int) -> list[int]:
    """Candidate block sizes: powers of two from 4 below nlon, and the whole row."""
    return [2**p for p in range(2, nlon.bit_length()) if 2**p < nlon] + [nlon]


def longitude_blocks(neighborhood: SphericalNeighborhood, block: int | None = None) -> LongitudeBlocks:
    """Precompute the block layout (CPU tensors, not cached); ``block`` forces one block size
    for every row (tests), default: the cheapest per row."""
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1):
        raise UserError(f"block must be a positive number of longitudes, got {block!r}")
    nlat, nlon = neighborhood.grid.shape
    rows = []
    for row, arcs in enumerate(_arcs(neighborhood)):
        if block is None:
            size = min(block_sizes(nlon), key=lambda b, a=arcs: block_cost(a, b, nlon))
        else:
            size = min(block, nlon)
        rows.append((row, size, _row_layout(arcs, size, nlon)))
    # Same block size together, largest K first, so that a group pads little.
    rows.sort(key=lambda r: (r[1], -r[2].shape[1], r[0]))
    groups, start = [], 0
    while start < nlat:
        stop = start + 1
        while (
            stop < nlat
            and rows[stop][1] == rows[start][1]
            and rows[stop][2].shape[1] >= GROUP_FILL * rows[start][2].shape[1]
        ):
            stop += 1
        groups.append(_group(rows[start:stop], nlon))
        start = stop
    return LongitudeBlocks(neighborhood=neighborhood, groups=tuple(groups))


def _group(rows, nlon: int) -> BlockGroup:
    keys = max(layout.shape[1] for *_, layout in rows)
    slots = torch.empty(3, len(rows), keys, dtype=torch.int64)
    for i, (*_, layout) in enumerate(rows):
        slots[:, i] = layout[:, :1]  # padding slots repeat the row's first key...
        slots[2, i] = -1  # ...and are never inside
        slots[:, i, : layout.shape[1]] = layout
    block = rows[0][1]
    return BlockGroup(
        rows=torch.tensor([row for row, *_ in rows]),
        block=block,
        nblocks=-(-nlon // block),
        key_row=slots[0],
        key_offset=slots[1],
        half_width=slots[2],
        nlon=nlon,
    )
