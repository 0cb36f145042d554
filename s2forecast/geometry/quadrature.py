"""Latitude nodes and quadrature weights for the grid kinds s2forecast supports.

All rules are formulated in x = cos(colatitude) on [-1, 1], so that a rule that is exact for
polynomials in x integrates band-limited functions on the sphere exactly. Nodes are returned
as colatitudes (radians) in increasing order, i.e. rows run north -> south like torch-harmonics.
"""

import math
from typing import TYPE_CHECKING

import numpy as np

from s2forecast.user_errors import UserError

if TYPE_CHECKING:  # imported where used: reading a grid's latitudes (stats, climatology) needs no torch
    import torch


def fejer_first_rule(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Fejer's first rule on the cell-centred nodes colat_k = (k + 1/2) * pi / n.

    These are exactly the latitudes of equiangular grids without poles (WeatherBench 64x32, ...).
    The rule is interpolatory: exact for polynomials in cos(colat) of degree n - 1, with
    positive weights summing to 2 (Waldvogel 2006, BIT 46).

    Returns:
        colatitudes (n,) in radians, increasing; weights (n,) in the cos(colat) measure.
    """
    colats = (np.arange(n) + 0.5) * math.pi / n
    j = np.arange(1, n // 2 + 1)
    series = np.cos(2.0 * np.outer(colats, j)) / (4.0 * j**2 - 1.0)
    weights = (2.0 / n) * (1.0 - 2.0 * series.sum(axis=1))
    return colats, weights


def latitude_quadrature(nlat: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Colatitudes (radians, increasing) and weights in the cos(colat) measure (sum 2).

    - ``equiangular``: Clenshaw-Curtis on nodes that include both poles (torch-harmonics'
      ``equiangular`` rule, bit for bit).
    - ``equiangular-midpoint``: Fejer's first rule on cell-centred nodes.
    - ``legendre-gauss``: Gauss-Legendre (torch-harmonics' rule).
    """
    if kind == "equiangular-midpoint":
        return fejer_first_rule(nlat)
    if kind in ("equiangular", "legendre-gauss"):
        from torch_harmonics.quadrature import precompute_latitudes

        colats, weights = precompute_latitudes(nlat, grid=kind)
        return colats.numpy().astype(np.float64), weights.numpy().astype(np.float64)
    raise UserError(f"unknown grid kind {kind!r}; use 'equiangular', 'equiangular-midpoint' or 'legendre-gauss'")


def cell_area_weights(lats_deg: np.ndarray) -> np.ndarray:
    """WeatherBench2 latitude weights: the exact area of each latitude cell, mean 1.

    Cell bounds are the midpoints between adjacent latitudes, closed by the poles, so pole
    rows of grids that include them get half-cell weights rather than zero.

    Args:
        lats_deg: (nlat,) latitudes in degrees, in any monotonic order.

    Returns:
        (nlat,) weights in the same order as ``lats_deg``.
    """
    lats = np.asarray(lats_deg, dtype=np.float64)
    order = np.argsort(lats)
    ascending = np.deg2rad(lats[order])
    bounds = np.concatenate([[-math.pi / 2], 0.5 * (ascending[1:] + ascending[:-1]), [math.pi / 2]])
    weights = np.sin(bounds[1:]) - np.sin(bounds[:-1])
    weights /= weights.mean()
    out = np.empty_like(weights)
    out[order] = weights
    return out


def latitude_nodes(nlat: int, kind: str) -> np.ndarray:
    """Colatitudes (radians, increasing) of a grid kind, in numpy alone (no torch): the nodes of
    :func:`latitude_quadrature` to round-off, for recognising a grid from its coordinates."""
    k = np.arange(nlat)
    if kind == "equiangular":
        return k * (math.pi / (nlat - 1))
    if kind == "equiangular-midpoint":
        return (k + 0.5) * (math.pi / nlat)
    if kind == "legendre-gauss":
        return np.arccos(np.polynomial.legendre.leggauss(nlat)[0][::-1])
    raise UserError(f"unknown grid kind {kind!r}; use 'equiangular', 'equiangular-midpoint' or 'legendre-gauss'")


def to_tensor(array: np.ndarray) -> "torch.Tensor":
    import torch

    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))
