"""The ``Grid`` value type: a regular latitude-longitude grid on the unit sphere."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from s2forecast.geometry.quadrature import cell_area_weights, latitude_nodes, latitude_quadrature, to_tensor
from s2forecast.user_errors import UserError

if TYPE_CHECKING:  # imported where a tensor is made: recognising a grid (Grid.from_coords) needs no torch
    import torch

GRID_KINDS = ("equiangular", "equiangular-midpoint", "legendre-gauss")


@dataclass(frozen=True)
class Grid:
    """A latitude-longitude grid, regular in longitude.

    Rows are ordered north -> south (colatitude increasing), columns east from longitude 0,
    as in torch-harmonics. Fields on the grid have shape ``(..., nlat, nlon)``; flattened
    point indices run row-major over (lat, lon).

    Kinds:
        - ``equiangular``: both poles included, spacing 180/(nlat-1) degrees (ERA5 0.25 deg
          721x1440, 1 deg 181x360, 1.5 deg 121x240). Clenshaw-Curtis quadrature.
        - ``equiangular-midpoint``: cell-centred latitudes, no poles, spacing 180/nlat degrees
          (WeatherBench2 64x32, WeatherBench1 32x64). Fejer's first rule.
        - ``legendre-gauss``: Gauss-Legendre latitudes. Gauss quadrature.

    All tensors are float64 and freshly allocated on each access.
    """

    nlat: int
    nlon: int
    kind: str = "equiangular"

    def __post_init__(self):
        if self.kind not in GRID_KINDS:
            raise UserError(f"unknown grid kind {self.kind!r}; use one of {GRID_KINDS}")
        if int(self.nlat) != self.nlat or int(self.nlon) != self.nlon:
            raise UserError(f"nlat and nlon must be integers, got nlat={self.nlat!r}, nlon={self.nlon!r}")
        # 8.0 is taken as 8: kept a float, it failed later where a count is needed (np.arange, torch shapes)
        object.__setattr__(self, "nlat", int(self.nlat))
        object.__setattr__(self, "nlon", int(self.nlon))
        if self.nlat < 2 or self.nlon < 1:
            raise UserError(f"a grid needs nlat >= 2 and nlon >= 1, got {self.nlat}x{self.nlon}")

    # --- coordinates -----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.nlat, self.nlon)

    @property
    def npoints(self) -> int:
        return self.nlat * self.nlon

    @cached_property
    def _latitude_rule(self) -> tuple[np.ndarray, np.ndarray]:
        return latitude_quadrature(self.nlat, self.kind)

    @property
    def colats(self) -> torch.Tensor:
        """(nlat,) colatitudes in radians, increasing from the north pole."""
        return to_tensor(self._latitude_rule[0])

    @property
    def lats(self) -> torch.Tensor:
        """(nlat,) latitudes in radians, decreasing from +pi/2 (north first)."""
        return math.pi / 2 - self.colats

    @property
    def lons(self) -> torch.Tensor:
        """(nlon,) longitudes in radians, 2*pi*j/nlon."""
        import torch

        return torch.arange(self.nlon, dtype=torch.float64) * (2.0 * math.pi / self.nlon)

    @property
    def lats_deg(self) -> torch.Tensor:
        import torch

        return torch.rad2deg(self.lats)

    @property
    def latitudes_deg(self) -> np.ndarray:
        """(nlat,) latitudes in degrees, north first, in numpy alone (``latitude_nodes``: no torch)."""
        return 90.0 - np.rad2deg(latitude_nodes(self.nlat, self.kind))

    @property
    def lons_deg(self) -> torch.Tensor:
        import torch

        return torch.arange(self.nlon, dtype=torch.float64) * (360.0 / self.nlon)

    @property
    def lat_spacing(self) -> float:
        """Largest gap between adjacent latitude rows, radians (pi/(nlat-1) if equiangular)."""
        return float(np.diff(self._latitude_rule[0]).max())

    @property
    def unit_vectors(self) -> torch.Tensor:
        """(nlat, nlon, 3) Cartesian unit vectors (x towards lon 0 on the equator, z north)."""
        import torch

        colat = self.colats[:, None]
        lon = self.lons[None, :]
        sin_colat = torch.sin(colat)
        x = sin_colat * torch.cos(lon)
        y = sin_colat * torch.sin(lon)
        z = torch.cos(colat).expand(self.nlat, self.nlon)
        return torch.stack([x, y, z], dim=-1)

    # --- weights ---------------------------------------------------------------------
    @property
    def quadrature_weights(self) -> torch.Tensor:
        """(nlat, nlon) quadrature weights (steradians), summing to 4*pi.

        Integrates band-limited functions exactly up to round-off: polynomial degree
        nlat-1 in cos(colat) (2*nlat-1 for legendre-gauss), |m| < nlon in longitude.
        Equal to torch-harmonics' weights for the grids both libraries have.
        """
        row = to_tensor(self._latitude_rule[1]) * (2.0 * math.pi / self.nlon)
        return row[:, None].expand(self.nlat, self.nlon).clone()

    @property
    def area_weights(self) -> torch.Tensor:
        """(nlat,) WeatherBench2 cell-area latitude weights with mean 1 (for metrics)."""
        return to_tensor(cell_area_weights(self.lats_deg.numpy()))

    # --- construction from data coordinates -------------------------------------------
    @classmethod
    def from_coords(cls, lat, lon) -> Grid:
        """Infer the grid from 1-D latitude and longitude coordinates in degrees.

        Latitudes may run north -> south or south -> north (the returned grid is always
        north -> south: flip the data if ``lat`` ascends). Longitudes must be evenly spaced
        over the full circle, ascending, from any first longitude on a meridian ``k * 360 / nlon``
        (one of them is 0 E). (The networks are equivariant at best to column shifts by a multiple
        of their latent stride, and with position embeddings fixed on the Earth to none, so readers
        first put every store's columns in one order, from 0 E: ``data.store.longitudes_from_zero``.)

        Args:
            lat: latitudes in degrees (numpy array, list or xarray coordinate).
            lon: longitudes in degrees.

        Raises:
            ValueError: for regional, irregular, non-global or unsupported grids.
        """
        lat = np.asarray(lat, dtype=np.float64).ravel()
        lon = np.asarray(lon, dtype=np.float64).ravel()
        nlat, nlon = lat.size, lon.size
        if nlat < 2 or nlon < 1:
            raise UserError(f"need at least 2 latitudes and 1 longitude, got {nlat} and {nlon}")
        if not np.all(np.isfinite(lat)) or not np.all(np.isfinite(lon)):
            raise UserError("latitude/longitude coordinates contain NaN or infinite values")
        if radians := _radian_coordinates(lat, lon):
            raise UserError(
                f"{radians} look like radians (latitudes {lat.min():.4g} .. {lat.max():.4g}, longitudes "
                f"{lon.min():.4g} .. {lon.max():.4g}); s2forecast expects degrees: convert with np.degrees"
            )
        if np.abs(lat).max() > 90.0 + 1e-6:
            raise UserError(f"latitudes must be in degrees within [-90, 90], got max |lat| = {np.abs(lat).max():g}")

        lon_step = np.diff(lon)
        expected_step = 360.0 / nlon
        # positions, not steps, within a thousandth of a step (as latitudes): float32 longitudes of a
        # 0.1 deg grid are up to 1.2e-5 deg off, their steps up to 2.4e-5 deg
        positions = np.arange(nlon) * expected_step
        if nlon > 1 and not np.allclose(lon - lon[0], positions, rtol=0.0, atol=1e-3 * expected_step):
            coverage = abs(lon[-1] - lon[0]) + (abs(lon_step).mean() if nlon > 1 else 0.0)
            even = np.allclose(lon_step, lon_step[0], rtol=0.0, atol=1e-3 * abs(lon_step[0]) + 1e-9)
            if even and lon_step[0] < 0:
                raise UserError(
                    f"longitudes descend ({lon[0]:g}, {lon[1]:g}, ...): s2forecast needs them ascending; sort them "
                    "(ds.sortby('longitude'))"
                )
            if even and nlon > 2 and np.isclose((nlon - 1) * lon_step[0], 360.0, rtol=0.0, atol=1e-3 * lon_step[0]):
                raise UserError(
                    f"the first and last longitudes ({lon[0]:g} and {lon[-1]:g} deg) are the same meridian: drop the "
                    "repeated column (ds.isel(longitude=slice(None, -1)))"
                )
            if even:
                raise UserError(
                    f"regional grid: {nlon} longitudes spaced {lon_step[0]:g} deg cover {coverage:g} of 360 deg; "
                    "s2forecast needs global grids evenly spaced in longitude"
                )
            raise UserError(
                f"irregular longitudes: spacing varies from {lon_step.min():g} to {lon_step.max():g} deg; "
                f"expected an even spacing of 360/{nlon} = {expected_step:g} deg"
            )

        # a column on 0 E (Grid's first): the same number of columns shifted by a fraction of a step is
        # another grid, whose points a checkpoint's static fields (sampled on 0 E + k step) would miss
        offset = float(np.mod(lon[0], expected_step))
        if min(offset, expected_step - offset) > 1e-3 * expected_step:
            raise UserError(
                f"longitudes {lon[0]:g}, {lon[1 % nlon]:g}, ... deg lie between the meridians 0 + k * "
                f"{expected_step:g} deg of a {nlon}-column grid (offset {offset:g} deg): s2forecast's grids have a "
                "column on 0 E; interpolate the store to those longitudes"
            )

        descending = np.sort(lat)[::-1]
        if np.any(np.diff(descending) == 0):
            raise UserError("latitudes contain duplicates")
        if not (np.all(np.diff(lat) < 0) or np.all(np.diff(lat) > 0)):
            raise UserError("latitudes must be sorted (ascending or descending)")

        for kind in GRID_KINDS:
            candidate = cls(nlat, nlon, kind)
            reference = candidate.latitudes_deg  # numpy: reading a store needs no torch
            spacing = 180.0 / nlat
            if np.allclose(descending, reference, rtol=0.0, atol=1e-3 * spacing):
                return candidate

        north, south = descending[0], descending[-1]
        steps = -np.diff(descending)
        if north < 90.0 - 2.0 * steps.max() or south > -90.0 + 2.0 * steps.max():
            raise UserError(f"regional grid: latitudes span {south:g} to {north:g} deg; s2forecast needs global grids")
        if np.allclose(steps, steps[0], rtol=1e-6):
            raise UserError(
                f"unsupported latitudes: {nlat} rows evenly spaced {steps[0]:g} deg from {south:g} to {north:g}; "
                "expected poles included (spacing 180/(nlat-1)), cell centres (spacing 180/nlat, first at "
                "90 - spacing/2) or Gauss-Legendre latitudes"
            )
        raise UserError(
            f"irregular latitudes: spacing varies from {steps.min():g} to {steps.max():g} deg and does not match "
            "Gauss-Legendre latitudes; supported kinds are " + ", ".join(GRID_KINDS)
        )


def _radian_coordinates(lat: np.ndarray, lon: np.ndarray) -> str:
    """Which of the coordinates are global in radians ("latitude/longitude", "latitudes",
    "longitudes" or ""): latitudes within +-pi/2 spanning at least pi/2, longitudes evenly
    spaced 2 pi / nlon within [-pi, 2 pi]. (In degrees such latitudes would be a 3-degree band,
    which s2forecast could not use either.)"""
    eps = 1e-6
    lat_radians = np.abs(lat).max() <= math.pi / 2 + eps and lat.max() - lat.min() >= math.pi / 2
    step = 2 * math.pi / lon.size
    lon_radians = (
        lon.size > 2
        and lon.min() >= -math.pi - eps
        and lon.max() <= 2 * math.pi + eps
        and np.allclose(np.diff(lon), step, rtol=1e-3, atol=0.0)
    )
    if lat_radians and lon_radians:
        return "latitude/longitude"
    return "latitudes" if lat_radians else "longitudes" if lon_radians else ""
