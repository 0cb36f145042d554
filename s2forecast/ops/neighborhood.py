"""Geodesic neighborhoods on a grid, stored as per-row longitude arcs.

The neighbors of query point (h, w) are the keys within a geodesic radius theta. Because the
grid is invariant under longitude shifts, they are the neighbors of (h, 0) shifted by w, and
in each key row h' they form one longitude arc centred on w (or the whole row near the poles).
A neighborhood is therefore described by, per query row h, a band of ``band_rows`` consecutive
key rows starting at ``row_start[h]`` and, per key row of the band, the arc half-width in
longitude steps. Memory is O(nlat * band_rows), independent of the number of neighbors.
"""

import math
from dataclasses import dataclass

import torch

from s2forecast.geometry import Grid, haversine, within_radius
from s2forecast.ops.validation import check_grid, check_radius


def default_radius(grid: Grid) -> float:
    """The attention paper's radius (7/sqrt(pi)) * lat spacing: a disk with the area of a 7x7
    planar window at the equator. For equiangular grids, (7/sqrt(pi)) * pi/(nlat-1); at most pi
    (the whole sphere) on grids of a few rows."""
    return min(math.pi, 7.0 / math.sqrt(math.pi) * check_grid(grid, "grid").lat_spacing)


@dataclass(frozen=True, eq=False)
class SphericalNeighborhood:
    """The disk neighborhoods of radius ``theta`` (radians) on ``grid``.

    Attributes:
        row_start: (nlat,) int64, first key row of each query row's band.
        band_rows: number of key rows in every band (the bands are clamped to the grid).
        half_width: (nlat, band_rows) int64, arc half-width m in longitude steps: key row
            ``row_start[h] + l`` contributes the keys w-m..w+m (mod nlon) to query (h, w);
            -1 for no key, >= nlon // 2 for the whole row.
    """

    grid: Grid
    theta: float
    row_start: torch.Tensor
    band_rows: int
    half_width: torch.Tensor

    @property
    def key_rows(self) -> torch.Tensor:
        """(nlat, band_rows) int64 key-row index of each band slot."""
        return self.row_start[:, None] + torch.arange(self.band_rows, device=self.row_start.device)

    @property
    def arc_offset(self) -> torch.Tensor:
        """(nlat, band_rows) int64 first longitude offset of each arc relative to the query."""
        nlon = self.grid.nlon
        return torch.where(self.arc_length == nlon, 0, -self.half_width.clamp(min=0))

    @property
    def arc_length(self) -> torch.Tensor:
        """(nlat, band_rows) int64 number of keys in each arc (0 for none, nlon for the row)."""
        return (2 * self.half_width + 1).clamp(min=0, max=self.grid.nlon)

    @property
    def neighbors_per_row(self) -> torch.Tensor:
        """(nlat,) number of keys in the disk of a query on each row."""
        return self.arc_length.sum(dim=1)

    def mask_rows(self, start: int, stop: int, device=None) -> torch.Tensor:
        """Boolean mask (stop-start, nlon, band_rows*nlon) of query rows start..stop-1.

        Entry [h, w, l*nlon + j] is true when key (row_start[h] + l, j) is a neighbor of (h, w).
        """
        nlon = self.grid.nlon
        j = torch.arange(nlon, device=device)
        offset = (j[None, :] - j[:, None]) % nlon
        circular = torch.minimum(offset, nlon - offset)  # (w, j) longitude steps apart
        half_width = self.half_width[start:stop].to(device)
        mask = circular[None, :, None, :] <= half_width[:, None, :, None]
        return mask.reshape(stop - start, nlon, self.band_rows * nlon)

    def dense_mask(self) -> torch.Tensor:
        """(N, N) boolean neighbor mask (query, key) over flattened points. Small grids only."""
        nlat, nlon = self.grid.shape
        dense = torch.zeros(nlat, nlon, nlat, nlon, dtype=torch.bool)
        rows = self.mask_rows(0, nlat).reshape(nlat, nlon, self.band_rows, nlon)
        index = self.key_rows[:, None, :, None].expand(nlat, nlon, self.band_rows, nlon)
        dense.scatter_(2, index, rows)
        return dense.reshape(nlat * nlon, nlat * nlon)


def neighborhood_mask_from_distances(grid: Grid, theta: float) -> torch.Tensor:
    """(N, N) boolean mask of pairs within ``theta``, computed pairwise (for tests, small N)."""
    colat = grid.colats[:, None].expand(grid.shape).reshape(-1)
    lon = grid.lons[None, :].expand(grid.shape).reshape(-1)
    hav = haversine(colat[:, None], lon[:, None], colat[None, :], lon[None, :])
    return within_radius(hav, theta)


def spherical_neighborhood(grid: Grid, theta: float) -> SphericalNeighborhood:
    """Precompute the neighborhood structure (CPU tensors; O(nlat * band_rows * nlon) work).

    Not cached: layers keep the structures they derive from it as buffers
    (``s2forecast.ops.backends``), the functional ops recompute it per call."""
    check_grid(grid, "grid")
    theta = check_radius(theta)
    nlat, nlon = grid.shape
    colats = grid.colats
    # hav(d) = hav(dcolat) + (a non-negative longitude term), so a key row is reachable exactly
    # when its point on the query's meridian is inside; only the band's rows need the offsets.
    reachable = within_radius(haversine(colats[:, None], torch.zeros(()), colats[None, :], torch.zeros(())), theta)
    first = reachable.to(torch.int64).argmax(dim=1)
    last = nlat - 1 - reachable.flip(1).to(torch.int64).argmax(dim=1)
    band_rows = int((last - first + 1).max())
    row_start = first.clamp(max=nlat - band_rows)
    slots = row_start[:, None] + torch.arange(band_rows)
    # Longitude offsets 0..nlon//2 suffice: the arc is symmetric about the query longitude.
    dlon = torch.arange(nlon // 2 + 1, dtype=torch.float64) * (2.0 * math.pi / nlon)
    hav = haversine(colats[:, None, None], torch.zeros(()), colats[slots][:, :, None], dlon[None, None, :])
    inside = within_radius(hav, theta)  # (query row, band slot, offset)
    # The distance grows with the longitude offset, so the members form a prefix 0..m.
    count = inside.sum(dim=-1)
    half_width = count - 1  # -1: no key in that row
    half_width = torch.where(count == nlon // 2 + 1, torch.full_like(count, nlon), half_width)
    return SphericalNeighborhood(
        grid=grid,
        theta=theta,
        row_start=row_start,
        band_rows=band_rows,
        half_width=half_width,
    )
