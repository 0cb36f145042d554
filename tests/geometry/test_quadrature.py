import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch_harmonics.legendre import legpoly
from torch_harmonics.quadrature import precompute_latitudes

from s2forecast.geometry import Grid
from s2forecast.geometry.quadrature import latitude_quadrature, normalized_legendre

KINDS = ["equiangular", "equiangular-midpoint", "legendre-gauss"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(8, 16), (33, 64), (121, 240), (32, 64)])
def test_constants_integrate_to_4pi(kind, shape):
    w = Grid(*shape, kind).quadrature_weights
    assert w.shape == shape
    assert w.sum().item() == pytest.approx(4 * math.pi, abs=1e-12)
    assert bool((w > 0).all())


@pytest.mark.parametrize("kind", ["equiangular", "legendre-gauss"])
def test_weights_equal_torch_harmonics(kind):
    grid = Grid(37, 72, kind)
    colats, w = precompute_latitudes(37, grid=kind)
    assert torch.allclose(grid.colats, colats.double(), atol=1e-14)
    assert torch.allclose(grid.quadrature_weights[:, 0], 2 * math.pi * w.double() / 72, atol=1e-15)


@pytest.mark.parametrize("kind", ["equiangular", "legendre-gauss"])
@pytest.mark.parametrize("nlat", [2, 3, 8, 121, 721])
def test_numpy_rules_are_torch_harmonics_ones(kind, nlat):
    """latitude_quadrature ports torch-harmonics' rules to NumPy (no torch import to read a grid)."""
    colats, weights = precompute_latitudes(nlat, grid=kind)
    ours, our_weights = latitude_quadrature(nlat, kind)
    np.testing.assert_allclose(ours, colats.numpy(), rtol=0, atol=4e-15)
    np.testing.assert_allclose(our_weights, weights.numpy(), rtol=0, atol=1e-16)
    assert ours.dtype == our_weights.dtype == np.float64 and np.all(np.diff(ours) > 0)


@pytest.mark.parametrize(("mmax", "lmax", "n"), [(1, 1, 5), (4, 7, 9), (7, 4, 6), (61, 61, 121), (90, 121, 241)])
def test_numpy_legendre_functions_are_torch_harmonics_ones(mmax, lmax, n):
    """normalized_legendre ports legpoly(norm="ortho", csphase=False); x at the poles included."""
    x = np.cos(np.linspace(0.0, math.pi, n))
    expected = legpoly(mmax, lmax, torch.from_numpy(x), norm="ortho", csphase=False).numpy()
    got = normalized_legendre(mmax, lmax, x)
    assert got.shape == expected.shape == (mmax, lmax, n)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13)


def test_spectra_import_no_torch():
    """Scoring a field's spectrum reads its grid's quadrature and Legendre functions in NumPy: no 3.4 s
    torch-harmonics import (it calls torch.compile) and no torch."""
    code = (
        "import sys, numpy as np, xarray as xr\n"
        "from s2forecast.evaluation.spectra import spherical_harmonic_power\n"
        "gauss = np.degrees(np.arcsin(np.polynomial.legendre.leggauss(8)[0]))[::-1]\n"
        "for lat in (np.linspace(90, -90, 9), gauss):  # equiangular with poles, Gauss-Legendre\n"
        "    field = xr.DataArray(np.ones((lat.size, 16)), dims=('latitude', 'longitude'),\n"
        "                         coords={'latitude': lat, 'longitude': np.arange(16) * 22.5})\n"
        "    assert abs(float(spherical_harmonic_power(field).sum()) - 1.0) < 1e-12\n"
        "print(sorted(name for name in ('torch', 'torch_harmonics') if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def real_spherical_harmonics(grid: Grid, lmax: int) -> torch.Tensor:
    """(n_harmonics, nlat, nlon) orthonormal real spherical harmonics up to degree lmax."""
    mmax = min(lmax + 1, (grid.nlon - 1) // 2 + 1)
    p = legpoly(mmax, lmax + 1, torch.cos(grid.colats), norm="ortho")  # (m, l, nlat), int P^2 dx = 1/(2 pi)
    lons = grid.lons
    harmonics = []
    for m in range(mmax):
        for ell in range(m, lmax + 1):
            if m == 0:
                harmonics.append(p[0, ell][:, None] * torch.ones_like(lons)[None, :])
            else:
                harmonics.append(math.sqrt(2) * p[m, ell][:, None] * torch.cos(m * lons)[None, :])
                harmonics.append(math.sqrt(2) * p[m, ell][:, None] * torch.sin(m * lons)[None, :])
    return torch.stack(harmonics)


@pytest.mark.parametrize(
    "kind, nlat, exact_degree",
    [
        # Clenshaw-Curtis: exact for degree nlat - 1 in cos(colat)
        pytest.param("equiangular", 33, 32, marks=pytest.mark.slow),
        ("equiangular-midpoint", 32, 31),  # Fejer's first rule: the same
        pytest.param("legendre-gauss", 24, 47, marks=pytest.mark.slow),  # Gauss: 2 nlat - 1
    ],
)
def test_spherical_harmonics_orthonormal_to_the_grid_degree(kind, nlat, exact_degree):
    grid = Grid(nlat, 2 * nlat + 2, kind)
    lmax = exact_degree // 2  # a product of two harmonics of degree <= lmax is integrated exactly
    y = real_spherical_harmonics(grid, lmax).flatten(1)
    gram = torch.einsum("in,jn,n->ij", y, y, grid.quadrature_weights.flatten())
    error = (gram - torch.eye(len(y), dtype=torch.float64)).abs().max().item()
    print(f"{kind} {grid.nlat}x{grid.nlon}: {len(y)} harmonics up to degree {lmax}, max Gram error {error:.2e}")
    assert error < 1e-10


def test_midpoint_rule_would_fail_the_same_check():
    """The WB2 cell areas (midpoint rule) are fine for metrics but no exact quadrature."""
    grid = Grid(32, 66, "equiangular-midpoint")
    y = real_spherical_harmonics(grid, 15).flatten(1)
    cell = grid.area_weights[:, None].expand(grid.shape).flatten() * (4 * math.pi / grid.npoints)
    gram = torch.einsum("in,jn,n->ij", y, y, cell)
    assert (gram - torch.eye(len(y), dtype=torch.float64)).abs().max() > 1e-4
