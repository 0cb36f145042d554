"""Spectra (issue 16) against independent computations of their definitions: WeatherBench2's
zonal energy spectrum by explicit DFT sums, the spherical-harmonic power by torch-harmonics'
RealSHT and by scipy's spherical harmonics, on the real ERA5 sample in tests/data."""

from pathlib import Path

import numpy as np
import pytest
import scipy.special
import torch
import xarray as xr
from torch_harmonics import InverseRealSHT, RealSHT

from s2forecast.evaluation.spectra import (
    EARTH_RADIUS_M,
    spectra,
    spherical_harmonic_power,
    zonal_energy_spectrum,
    zonal_spectrum_band,
)
from s2forecast.geometry import Grid

SAMPLE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"


@pytest.fixture(scope="module")
def t2m() -> xr.DataArray:
    """(valid_time, latitude, longitude) ERA5 2 m temperature (K), 4-degree equiangular grid with poles."""
    return xr.open_dataset(SAMPLE)["t2m"].load().rename(valid_time="time")


def wb2_zonal_by_loops(values: np.ndarray, lats: np.ndarray) -> np.ndarray:
    """WB2's ZonalEnergySpectrum written out: F[k] = (1/L) sum_l f[l] exp(-2 pi i k l / L),
    S[0] = C |F[0]|^2, S[k] = 2 C |F[k]|^2 (k = 1 .. L // 2)."""
    nlon = values.shape[-1]
    position = np.arange(nlon)
    out = np.zeros((*values.shape[:-1], nlon // 2 + 1))
    for k in range(nlon // 2 + 1):
        coefficient = (values * np.exp(-2j * np.pi * k * position / nlon)).sum(axis=-1) / nlon
        circumference = 2 * np.pi * EARTH_RADIUS_M * np.cos(np.deg2rad(lats))
        out[..., k] = (1 if k == 0 else 2) * circumference * np.abs(coefficient) ** 2
    return out


def test_zonal_energy_spectrum_is_wb2_definition(t2m):
    spectrum = zonal_energy_spectrum(t2m)
    assert spectrum.dims == ("time", "latitude", "zonal_wavenumber") and spectrum.sizes["zonal_wavenumber"] == 46
    expected = wb2_zonal_by_loops(t2m.values.astype(np.float64), t2m["latitude"].values)
    np.testing.assert_allclose(spectrum.values, expected, rtol=1e-10, atol=1e-6)
    # Parseval around each circle: sum_k S = (C / L) sum f^2 + C |F[L/2]|^2 (WB2 doubles the Nyquist term)
    values = t2m.values.astype(np.float64)
    circumference = 2 * np.pi * EARTH_RADIUS_M * np.cos(np.deg2rad(t2m["latitude"].values))
    nyquist = np.abs((values * (-1.0) ** np.arange(90)).sum(-1) / 90) ** 2 * circumference
    np.testing.assert_allclose(
        spectrum.sum("zonal_wavenumber").values, circumference / 90 * (values**2).sum(-1) + nyquist, rtol=1e-10
    )
    equator = spectrum.sel(latitude=2.0)
    np.testing.assert_allclose(equator["wavelength"].values[1], 2 * np.pi * EARTH_RADIUS_M * np.cos(np.deg2rad(2.0)))
    assert spectrum.attrs["units"] == "m (K)**2"


def test_band_average_interpolates_to_common_frequencies_with_cos_weights(t2m):
    spectrum = zonal_energy_spectrum(t2m)
    band = zonal_spectrum_band(spectrum, (30.0, 60.0))
    lats = t2m["latitude"].values
    rows = np.flatnonzero((np.abs(lats) >= 30) & (np.abs(lats) <= 60))
    circumference = 2 * np.pi * EARTH_RADIUS_M * np.cos(np.deg2rad(lats[rows]))
    wavenumbers = np.arange(46)
    common = np.linspace(0.0, (45 / circumference).min(), 46)  # narrowest range: the lowest |latitude|
    expected = np.zeros((3, 46))
    for time in range(3):
        rows_interpolated = []
        for r, c in zip(rows, circumference, strict=True):
            waves = spectrum.values[time, r].copy()
            waves[0] = 0.0  # the zonal mean's power: at frequency 0 only
            rows_interpolated.append(np.interp(common, wavenumbers / c, waves))
            rows_interpolated[-1][0] = spectrum.values[time, r, 0]
        weights = np.cos(np.deg2rad(lats[rows]))
        expected[time] = np.average(rows_interpolated, axis=0, weights=weights)
    np.testing.assert_allclose(band.values, expected, rtol=1e-12)
    assert band.dims == ("time", "frequency")
    np.testing.assert_allclose(band["wavelength"].values[1:], 1 / common[1:])


@pytest.mark.parametrize("shape", [(32, 64), (121, 240)])
def test_band_average_keeps_the_zonal_mean_out_of_the_waves(shape):
    """Z = 55000 + 100 cos(3 lon) has power at k = 0 and 3 only. WeatherBench2's interpolation from
    k = 0 put up to half the mean's power (1e16 against the wave's 1e11) into the longest wavelength."""
    grid = Grid(*shape, "equiangular" if shape[0] % 2 else "equiangular-midpoint")
    lat, lon = np.rad2deg(grid.lats), np.rad2deg(grid.lons)
    values = 55000.0 + 100.0 * np.cos(3 * np.deg2rad(lon))[None, :] + 0.0 * lat[:, None]
    field = xr.DataArray(values, dims=("latitude", "longitude"), coords={"latitude": lat, "longitude": lon})
    spectrum = zonal_energy_spectrum(field)
    band = zonal_spectrum_band(spectrum, (30.0, 60.0))
    peak = band.values.max(initial=0.0, where=np.arange(band.size) > 0)
    assert peak > 1e10
    assert band.values[1] < 1e-12 * peak  # no wave at the longest wavelength
    rows = np.flatnonzero((np.abs(lat) >= 30) & (np.abs(lat) <= 60))
    weights = np.cos(np.deg2rad(lat[rows]))
    mean_power = np.average(spectrum.values[rows, 0], weights=weights)
    np.testing.assert_allclose(band.values[0], mean_power, rtol=1e-12)


def sh_power_by_torch_harmonics(values: np.ndarray, nlat: int, nlon: int, grid: str) -> np.ndarray:
    sht = RealSHT(nlat, nlon, lmax=(nlat + 1) // 2, grid=grid, norm="ortho", csphase=False).double()
    coefficients = sht(torch.from_numpy(values)).numpy()  # (..., lmax, mmax)
    twice = np.concatenate(([1.0], np.full(coefficients.shape[-1] - 1, 2.0)))
    return (np.abs(coefficients) ** 2 * twice).sum(-1) / (4 * np.pi)


def test_sh_power_matches_torch_harmonics_on_era5(t2m):
    power = spherical_harmonic_power(t2m)
    expected = sh_power_by_torch_harmonics(t2m.values.astype(np.float64), 46, 90, "equiangular")
    assert power.dims == ("time", "degree") and power.shape == expected.shape
    np.testing.assert_allclose(power.values, expected, rtol=1e-9)
    assert power.attrs["units"] == "(K)**2"
    # latitudes south -> north (WB2's order) give the same spectrum
    np.testing.assert_allclose(spherical_harmonic_power(t2m.isel(latitude=slice(None, None, -1))).values, power.values)


def clenshaw_curtis_by_moments(colats: np.ndarray) -> np.ndarray:
    """Weights w_j (sum 2) integrating every polynomial in x = cos(colat) of degree < n exactly on
    the n nodes: solved from the Chebyshev moments int_-1^1 T_k dx = 2 / (1 - k^2) (even k), 0 (odd k)."""
    x = np.cos(colats)
    k = np.arange(colats.size)
    chebyshev = np.cos(np.outer(k, np.arccos(np.clip(x, -1.0, 1.0))))  # T_k(x_j)
    moments = np.where(k % 2 == 0, 2.0 / (1.0 - np.where(k == 1, 0, k) ** 2), 0.0)
    return np.linalg.solve(chebyshev, moments)


def test_sh_power_of_era5_sums_to_the_mean_square_of_its_resolved_part(t2m):
    """Parseval on real data: the SH power summed over degrees is the area mean of the square of
    the field's projection on the degrees kept (exact: the square has degree < nlat, which the
    rule integrates exactly), and at most the area mean of the field's square (Bessel)."""
    power = spherical_harmonic_power(t2m).values.sum(-1)  # (time,)
    values = t2m.values.astype(np.float64)  # north first, as torch-harmonics
    sht = RealSHT(46, 90, lmax=23, grid="equiangular", norm="ortho", csphase=False).double()
    isht = InverseRealSHT(46, 90, lmax=sht.lmax, mmax=sht.mmax, grid="equiangular", norm="ortho", csphase=False)
    resolved = isht.double()(sht(torch.from_numpy(values))).numpy()
    weights = clenshaw_curtis_by_moments(np.deg2rad(90.0 - t2m["latitude"].values))
    np.testing.assert_allclose(weights.sum(), 2.0, rtol=1e-12)

    def area_mean(field):
        return (weights * field.mean(-1)).sum(-1) / 2.0

    np.testing.assert_allclose(power, area_mean(resolved**2), rtol=1e-10)
    assert (power <= area_mean(values**2)).all()
    # and the degrees > 0 hold the resolved variance about the global mean
    anomaly_power = spherical_harmonic_power(t2m - t2m.weighted(xr.DataArray(weights, dims="latitude",
        coords={"latitude": t2m.latitude})).mean(("latitude", "longitude"))).values  # fmt: skip
    np.testing.assert_allclose(anomaly_power[:, 0], 0.0, atol=1e-9 * power.max())
    np.testing.assert_allclose(anomaly_power[:, 1:].sum(-1), power - area_mean(values) ** 2, rtol=1e-9)


def real_harmonic(degree: int, order: int, grid: Grid) -> np.ndarray:
    """Re Y_l^m on the grid, from scipy (an implementation independent of torch-harmonics)."""
    colat = grid.colats.numpy()[:, None]
    lon = grid.lons.numpy()[None, :]
    return np.real(scipy.special.sph_harm_y(degree, order, colat, lon))


@pytest.mark.parametrize("kind", ["equiangular", "equiangular-midpoint", "legendre-gauss"])
def test_a_single_harmonic_puts_its_power_at_its_degree(kind):
    grid = Grid(32, 64, kind)
    field = real_harmonic(7, 3, grid) + 0.5 * real_harmonic(2, 0, grid)
    da = xr.DataArray(field, dims=("latitude", "longitude"),
                      coords={"latitude": grid.lats_deg.numpy(), "longitude": grid.lons_deg.numpy()})  # fmt: skip
    power = spherical_harmonic_power(da).values
    # Re Y_7^3 has mean square 1 / (8 pi), 0.5 Y_2^0 has 0.25 / (4 pi)
    np.testing.assert_allclose(power[7], 1 / (8 * np.pi), rtol=1e-6)
    np.testing.assert_allclose(power[2], 0.25 / (4 * np.pi), rtol=1e-6)
    others = np.delete(power, [2, 7])
    assert others.max() < 1e-10 * power[7]
    # Parseval: the degrees sum to the area mean of the field squared (quadrature)
    weights = grid.quadrature_weights.numpy()
    np.testing.assert_allclose(power.sum(), (weights * field**2).sum() / weights.sum(), rtol=1e-6)


@pytest.mark.parametrize(("kind", "nlat", "nlon"), [("legendre-gauss", 16, 16), ("equiangular", 37, 18)])
def test_the_nyquist_order_of_a_grid_that_keeps_it_counts_once(kind, nlat, nlon):
    """Where the latitudes resolve the longitudes' Nyquist order m = nlon / 2, its one real coefficient
    stands for +m and -m alike: the degrees still sum to the grid's mean square (it counted twice: 2x)."""
    grid = Grid(nlat, nlon, kind)
    nyquist = nlon // 2
    field = real_harmonic(nyquist, nyquist, grid)
    field += 0.5 * real_harmonic(3, 2, grid) + 0.3 * real_harmonic(4, 0, grid)
    da = xr.DataArray(field, dims=("latitude", "longitude"),
                      coords={"latitude": grid.lats_deg.numpy(), "longitude": grid.lons_deg.numpy()})  # fmt: skip
    power = spherical_harmonic_power(da).values
    assert power.shape[-1] == nyquist + 1  # the order is kept
    weights = grid.quadrature_weights.numpy()
    np.testing.assert_allclose(power.sum(), (weights * field**2).sum() / weights.sum(), rtol=1e-9)
    # the resolved orders below it keep their continuous powers
    np.testing.assert_allclose(power[3], 0.25 / (8 * np.pi), rtol=1e-9)
    np.testing.assert_allclose(power[4], 0.09 / (4 * np.pi), rtol=1e-9)


def test_legendre_functions_are_computed_once_per_grid(monkeypatch):
    """Every field of an evaluation is on one grid: its Legendre table (~10 s at 0.25 deg) is made once."""
    from s2forecast.evaluation import spectra

    calls = []
    original = spectra.normalized_legendre
    monkeypatch.setattr(spectra, "normalized_legendre", lambda *a, **k: calls.append(a[:2]) or original(*a, **k))
    grid = Grid(23, 46, "equiangular")  # a grid of this test alone: nothing cached before
    coords = {"latitude": grid.lats_deg.numpy(), "longitude": grid.lons_deg.numpy()}
    field = xr.DataArray(real_harmonic(5, 2, grid), dims=("latitude", "longitude"), coords=coords)
    first = spherical_harmonic_power(field).values
    np.testing.assert_allclose(spherical_harmonic_power(2 * field).values, 4 * first, rtol=1e-12)
    assert len(calls) == 1
    other = Grid(23, 46, "legendre-gauss")  # another grid: its own table
    field = xr.DataArray(real_harmonic(5, 2, other), dims=("latitude", "longitude"),
                         coords={"latitude": other.lats_deg.numpy(), "longitude": other.lons_deg.numpy()})  # fmt: skip
    assert spherical_harmonic_power(field).values[5] == pytest.approx(first[5], rel=1e-6) and len(calls) == 2


def test_spectra_of_forecast_and_truth(t2m):
    truth = t2m.expand_dims(lead_time=[np.timedelta64(6, "h")], axis=1)
    blurred = truth.rolling(longitude=5, center=True, min_periods=1).mean()  # a blurry "forecast"
    blurred = blurred.rolling(latitude=5, center=True, min_periods=1).mean()
    result = spectra(blurred, truth)
    assert result["sh_power"].dims == ("source", "lead_time", "degree")
    assert list(result["source"].values) == ["forecast", "truth"]
    sh = result["sh_power"]
    small_scales = sh.sel(degree=slice(15, None)).sum("degree")
    assert small_scales.sel(source="forecast").values.sum() < 0.5 * small_scales.sel(source="truth").values.sum()
    zonal = result["zonal_power"].isel(frequency=slice(10, None)).sum("frequency")
    assert zonal.sel(source="forecast").values.sum() < 0.5 * zonal.sel(source="truth").values.sum()
    np.testing.assert_allclose(
        result["sh_power"].sel(source="truth").values,
        spherical_harmonic_power(truth).mean("time").values,
    )


def test_bad_inputs_name_the_problem(t2m):
    with pytest.raises(ValueError, match=r"needs \(\.\.\., latitude, longitude\) as the last dimensions"):
        zonal_energy_spectrum(t2m.transpose("latitude", "longitude", "time"))
    with pytest.raises(ValueError, match="evenly spaced over 360 degrees"):
        zonal_energy_spectrum(t2m.isel(longitude=slice(0, 45)))
    with pytest.raises(ValueError, match=r"0 <= low < high <= 90 degrees, got \(60.0, 30.0\)"):
        zonal_spectrum_band(zonal_energy_spectrum(t2m), (60.0, 30.0))
    with pytest.raises(ValueError, match="regional grid"):
        spherical_harmonic_power(t2m.isel(latitude=slice(0, 20)))
    with pytest.raises(ValueError, match="must be aligned"):
        spectra(t2m.isel(time=[0]), t2m)


def test_many_fields_are_transformed_a_few_at_a_time_with_the_same_powers():
    """Fields go through the transform SH_FIELDS at a time (memory independent of their number): the
    powers of a stack equal those of each field alone, past batch boundaries."""
    from s2forecast.evaluation.spectra import SH_FIELDS

    grid = Grid(16, 32, "equiangular")
    coords = {"latitude": grid.lats_deg.numpy(), "longitude": grid.lons_deg.numpy()}
    n = 2 * SH_FIELDS + 3
    values = np.random.default_rng(0).standard_normal((n, 16, 32))
    stack = xr.DataArray(values, dims=("sample", "latitude", "longitude"), coords=coords)
    together = spherical_harmonic_power(stack).values
    alone = np.stack([spherical_harmonic_power(stack.isel(sample=i)).values for i in range(n)])
    np.testing.assert_allclose(together, alone, rtol=1e-12)
    assert len(np.unique(together[:, 3])) == n  # each row is its own field's


def test_evaluations_spectra_are_summed_one_init_time_at_a_time(t2m):
    """``report.compute_spectra`` transforms one init time at a time (its memory does not grow with the
    number of init times): the mean of those spectra is the spectra of all the init times at once; the
    grid's Legendre table is freed afterwards (0.75 GB at 0.25 deg, not needed by the plots)."""
    from s2forecast.evaluation import spectra as module
    from s2forecast.evaluation.report import compute_spectra

    hourly = t2m.isel(time=[0, 0, 0, 0, 0]).assign_coords(time=np.arange(5) * np.timedelta64(6, "h")
                                                           + np.datetime64("2026-03-25T00", "ns"))  # fmt: skip
    rng = np.random.default_rng(0)
    truth_values = hourly + rng.normal(scale=2.0, size=hourly.shape)  # each time its own small scales
    truth = xr.Dataset({"2m_temperature": truth_values.assign_attrs(units="K")})
    leads = np.array([6, 12], dtype="timedelta64[h]").astype("timedelta64[ns]")
    inits = truth["time"].values[:3]
    forecast = xr.concat([truth_values.sel(time=inits + lead).assign_coords(time=inits) for lead in leads],
                         dim="prediction_timedelta").assign_coords(prediction_timedelta=leads)  # fmt: skip
    forecast = (forecast.transpose("time", "prediction_timedelta", ...) * 1.01).assign_attrs(units="K")
    result = compute_spectra(xr.Dataset({"2m_temperature": forecast}), truth, ["2m_temperature"], leads)
    assert module._weighted_legendre.cache_info().currsize == 0

    observed = xr.concat([truth_values.sel(time=inits + lead).assign_coords(time=inits) for lead in leads],
                         dim="prediction_timedelta").transpose(*forecast.dims)  # fmt: skip
    at_once = spectra(forecast, observed.assign_coords(prediction_timedelta=leads))
    for name in ("sh_power", "zonal_power"):
        got = result[f"2m_temperature_{name}"]
        np.testing.assert_allclose(got.values, at_once[name].values, rtol=1e-12)
        assert got.attrs["units"] == at_once[name].attrs["units"]
    assert result.attrs["spectra_init_times"] == 3
