"""Latitude nodes and quadrature weights for the grid kinds s2forecast supports.

All rules are formulated in x = cos(colatitude) on [-1, 1], so that a rule that is exact for
polynomials in x integrates band-limited functions on the sphere exactly. Nodes are returned
as colatitudes (radians) in increasing order, i.e. rows run north -> south like torch-harmonics.
Everything here is NumPy: torch-harmonics' rules and Legendre functions, ported and checked
against it to round-off (``tests/geometry/test_quadrature.py``), because importing torch-harmonics
costs 3.4 s (it calls ``torch.compile`` at import): evaluate's spectra would pay it, and torch's.
"""

import functools
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
      ``equiangular`` rule, to 2e-15).
    - ``equiangular-midpoint``: Fejer's first rule on cell-centred nodes.
    - ``legendre-gauss``: Gauss-Legendre (NumPy's ``leggauss``, as torch-harmonics: bit for bit).
    """
    if kind == "equiangular-midpoint":
        return fejer_first_rule(nlat)
    if kind == "equiangular":
        x, weights = clenshaw_curtis_rule(nlat)
    elif kind == "legendre-gauss":
        x, weights = gauss_legendre_rule(nlat)
    else:
        raise UserError(f"unknown grid kind {kind!r}; use 'equiangular', 'equiangular-midpoint' or 'legendre-gauss'")
    # nodes in x = cos(colat) from -1 up: colatitudes from the north pole down, as torch-harmonics'
    return np.flip(np.arccos(x)).copy(), np.flip(weights).copy()


@functools.lru_cache(maxsize=8)
def gauss_legendre_rule(n: int) -> tuple[np.ndarray, np.ndarray]:
    """NumPy's ``leggauss(n)`` nodes (ascending on [-1, 1]) and weights, read-only: computed once
    per size (an eigenvalue problem of order n: 0.1 s at 721 latitudes, asked for by every
    recognition of a grid and every quadrature of a Gauss grid)."""
    x, weights = np.polynomial.legendre.leggauss(n)
    x.flags.writeable = weights.flags.writeable = False
    return x, weights


def clenshaw_curtis_rule(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Clenshaw-Curtis nodes x_k = -cos(pi k / (n - 1)) on [-1, 1], both ends included, and their
    weights (sum 2), by Waldvogel's FFT (2006): torch-harmonics' ``clenshaw_curtiss_weights``, in
    NumPy, so that reading a grid's quadrature (the scores' spectra) imports no torch."""
    if n < 2:
        raise UserError(f"an equiangular grid with poles needs at least 2 latitudes, got {n}")
    x = np.cos(np.linspace(math.pi, 0.0, n))
    if n == 2:
        return x, np.ones(2)
    n1 = n - 1
    odd = np.arange(1, n1, 2, dtype=np.float64)
    count, rest = odd.size, n1 - odd.size
    v = np.concatenate([2.0 / odd / (odd - 2.0), 1.0 / odd[-1:], np.zeros(rest)])
    v = -v[:-1] - v[:0:-1]
    g = -np.ones(n1)
    g[count] += n1
    g[rest] += n1
    g /= n1**2 - 1 + (n1 % 2)
    weights = np.fft.ifft(v + g).real
    return x, np.concatenate([weights, weights[:1]])


def normalized_legendre(mmax: int, lmax: int, x: np.ndarray) -> np.ndarray:
    """(mmax, lmax, len(x)) orthonormal associated Legendre functions P_lm(x), 2 pi int P_lm^2 dx = 1,
    without the Condon-Shortley phase (zero for m > l): torch-harmonics' ``legpoly(mmax, lmax, x,
    norm="ortho", csphase=False)`` in NumPy (its stable recurrences over the degree), so that the
    scores' spectra import no torch."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros((mmax, lmax, x.size))
    if mmax == 0 or lmax == 0:
        return out
    prev1, prev2 = np.zeros((mmax, x.size)), np.zeros((mmax, x.size))
    diag = np.full(x.size, 1.0 / math.sqrt(4 * math.pi))  # P_00
    for ell in range(lmax):
        current = np.zeros((mmax, x.size))
        if ell > 0:
            sub = math.sqrt(2 * ell + 1) * x * diag  # P_{l, l-1} from P_{l-1, l-1}
            diag = np.sqrt((2 * ell + 1) * (1 + x) * (1 - x) / 2 / ell) * diag  # P_ll
        if ell >= 2 and mmax > 0:  # the interior orders m <= l - 2
            m = np.arange(min(mmax - 1, ell - 2) + 1, dtype=np.float64)
            a = np.sqrt((2 * ell - 1) / (ell - m) * (2 * ell + 1) / (ell + m))
            b = np.sqrt((ell + m - 1) / (ell - m) * (2 * ell + 1) / (2 * ell - 3) * (ell - m - 1) / (ell + m))
            current[: m.size] = a[:, None] * x * prev1[: m.size] - b[:, None] * prev2[: m.size]
        if 1 <= ell <= mmax:
            current[ell - 1] = sub
        if ell < mmax:
            current[ell] = diag
        out[:, ell] = current
        prev2, prev1 = prev1, current
    return out


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
        return np.arccos(gauss_legendre_rule(nlat)[0][::-1])
    raise UserError(f"unknown grid kind {kind!r}; use 'equiangular', 'equiangular-midpoint' or 'legendre-gauss'")


def to_tensor(array: np.ndarray) -> "torch.Tensor":
    import torch

    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))
