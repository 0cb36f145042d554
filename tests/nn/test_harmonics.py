"""``SphericalHarmonicAnalysis``: the coefficients of torch-harmonics' SHT on its grids, the
power spectrum of the scores on WeatherBench2's cell-centred grid, differentiable."""

import math

import numpy as np
import pytest
import torch
import xarray as xr
from torch_harmonics import RealSHT

from s2forecast.evaluation.spectra import spherical_harmonic_power
from s2forecast.geometry import Grid
from s2forecast.nn import SphericalHarmonicAnalysis
from s2forecast.nn.position_embedding import real_spherical_harmonics


@pytest.mark.parametrize("grid", [Grid(17, 32), Grid(16, 32, "legendre-gauss")], ids=str)
def test_coefficients_are_torch_harmonics_ones(grid):
    analysis = SphericalHarmonicAnalysis(grid)
    x = torch.randn(3, 2, *grid.shape, generator=torch.Generator().manual_seed(0))
    sht = RealSHT(grid.nlat, grid.nlon, lmax=analysis.lmax, mmax=analysis.mmax, grid=grid.kind, csphase=False)
    expected = sht(x)
    got = analysis(x)
    assert got.shape == (3, 2, analysis.lmax, analysis.mmax) == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("grid", [Grid(32, 64, "equiangular-midpoint"), Grid(17, 32)], ids=str)
def test_power_is_the_scores_spectrum(grid):
    """On every grid kind, cell-centred included: sum_m of |c_lm|^2 (m > 0 twice) / 4 pi is the power
    per degree ``evaluation.spectra`` scores forecasts with."""
    analysis = SphericalHarmonicAnalysis(grid)
    x = torch.randn(2, *grid.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    twice = torch.ones(analysis.mmax, dtype=torch.float64)
    twice[1:] = 2.0
    power = (analysis(x).abs().square() * twice).sum(dim=-1) / (4 * np.pi)
    field = xr.DataArray(
        x.numpy(), dims=("sample", "latitude", "longitude"),
        coords={"latitude": grid.lats_deg.numpy(), "longitude": grid.lons_deg.numpy()},
    )  # fmt: skip
    scores = spherical_harmonic_power(field).values
    assert scores.shape == tuple(power.shape)
    np.testing.assert_allclose(power.numpy(), scores, rtol=1e-4, atol=1e-8)


def test_analysis_is_differentiable_and_checks_the_grid():
    grid = Grid(16, 32, "legendre-gauss")
    x = torch.randn(2, *grid.shape, requires_grad=True)
    SphericalHarmonicAnalysis(grid)(x).abs().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"fields of shape \(8, 16\) on a \(16, 32\) analysis"):
        SphericalHarmonicAnalysis(grid)(torch.zeros(8, 16))


@pytest.mark.parametrize(
    "grid", [Grid(17, 32), Grid(16, 32, "equiangular-midpoint"), Grid(8, 16, "legendre-gauss")], ids=str
)
def test_float64_fields_get_float64_coefficients(grid):
    """A field sum_c a_c Y_c of real harmonics of degree <= 3 (``real_spherical_harmonics``) has
    the complex coefficients c_l0 = a_l0 and c_lm = (a_lm - i a_l,-m) / sqrt(2) (m > 0), to
    float64 precision: from the float32 module (the kernel computed per call) and a ``.double()``
    one (which keeps it); the default module keeps the float32 kernel float32 fields read."""
    amplitudes = torch.randn(16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    field = torch.einsum("c,cij->ij", amplitudes, real_spherical_harmonics(grid, 16))
    analysis = SphericalHarmonicAnalysis(grid)
    assert analysis.kernel.dtype == torch.float32
    expected = torch.zeros(analysis.lmax, analysis.mmax, dtype=torch.complex128)
    for c, a in enumerate(amplitudes.tolist()):
        degree = math.isqrt(c)
        order = c - degree * degree - degree
        expected[degree, abs(order)] += a if order == 0 else (a if order > 0 else -1j * a) / math.sqrt(2)
    for module in (analysis, SphericalHarmonicAnalysis(grid).double()):
        torch.testing.assert_close(module(field), expected, rtol=0, atol=1e-12)
