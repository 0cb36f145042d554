"""Streamed statistics (issue 27): Moments combine exactly, and compute_stats read block by block
equals the two-pass definition (xarray's weighted mean and std) on a WeatherBench2-layout store."""

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import s2forecast.data.stats as stats_module
from s2forecast.data.moments import Moments
from s2forecast.geometry.quadrature import cell_area_weights


def reference(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-pass weighted mean and std per channel of (time, channel, lat, lon), NaN skipped."""
    weights = np.broadcast_to(w[:, None], x.shape).copy()
    weights[np.isnan(x)] = 0
    values = np.nan_to_num(x)
    mean = (values * weights).sum((0, 2, 3)) / weights.sum((0, 2, 3))
    var = ((values - mean[:, None, None]) ** 2 * weights).sum((0, 2, 3)) / weights.sum((0, 2, 3))
    return mean, np.sqrt(var)


@pytest.mark.parametrize("splits", [[7], [1, 6], [2, 2, 3], [1] * 7])
def test_moments_of_blocks_combine_to_the_moments_of_all(splits):
    rng = np.random.default_rng(0)
    x = 5e5 + 100 * rng.standard_normal((7, 3, 5, 8))
    x[2, 1, 3, 4] = np.nan
    x[4, 2] = np.nan  # a whole field missing
    w = cell_area_weights(np.linspace(90, -90, 5))
    moments, start = Moments.empty(3), 0
    for size in splits:
        moments = moments.combine(Moments.of(x[start : start + size], w))
        start += size
    mean, std = moments.finalize()
    expected_mean, expected_std = reference(x, w)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-13)
    np.testing.assert_allclose(std, expected_std, rtol=1e-9)
    np.testing.assert_array_equal(moments.count, (~np.isnan(x)).sum((0, 2, 3)))


def test_moments_keep_the_spread_of_geopotential_in_float32():
    """Geopotential ~5e5 with a spread of 1: float32 sums of squares would lose it entirely."""
    rng = np.random.default_rng(1)
    x = (5e5 + rng.standard_normal((40, 1, 9, 16))).astype(np.float32)
    w = cell_area_weights(np.linspace(90, -90, 9))
    moments = Moments.empty(1)
    for t in range(40):
        moments = moments.combine(Moments.of(x[t : t + 1], w))
    _, expected = reference(x.astype(np.float64), w)
    np.testing.assert_allclose(moments.finalize()[1], expected, rtol=1e-10)


def test_moments_of_a_channel_without_values_are_nan():
    x = np.full((2, 1, 3, 4), np.nan)
    moments = Moments.empty(1).combine(Moments.of(x, np.ones(3)))
    assert moments.count[0] == 0 and np.isnan(moments.finalize()).all()


@pytest.mark.parametrize("value", [280.1, 0.3, -5.5e4])
def test_a_constant_field_has_zero_spread_with_or_without_nan(value):
    """With a NaN (the masked path) the deviations were taken about the weighted mean, a rounding away
    from the value: std 6e-14, which training's zero-spread check let through (and divided by)."""
    w = cell_area_weights(np.linspace(90, -90, 9))
    x = np.full((4, 2, 9, 16), value, np.float32)
    x[:, 1] = np.float32(value) + np.arange(16, dtype=np.float32)  # a second channel that varies
    clean = Moments.of(x, w)
    x[1, 0, 2, 3] = x[0, 0, 0, 0] = x[2, 1, 4, 5] = np.nan  # the first value too: the reference is the first finite
    masked = Moments.of(x, w)
    for moments in (clean, masked):
        mean, std = moments.finalize()
        assert std[0] == 0.0 and mean[0] == np.float32(value)
    expected_mean, expected_std = reference(x.astype(np.float64), w)  # the varying channel: as the definition
    np.testing.assert_allclose(masked.finalize()[0][1], expected_mean[1], rtol=1e-13)
    np.testing.assert_allclose(masked.finalize()[1][1], expected_std[1], rtol=1e-12)


def wb2_store(path, times: int = 9) -> xr.Dataset:
    """WeatherBench2's layout: (time, level, longitude, latitude), north to south, zarr v2, one
    time per chunk; two trajectories (a tendency never pairs across them), some NaN."""
    rng = np.random.default_rng(2)
    lat, lon = np.linspace(90, -90, 5), np.arange(8) * 45.0
    z = np.array([5.5e4, 1.4e4])[None, :, None, None] + 500 * rng.standard_normal((times, 2, 8, 5))  # plausible
    z[3, 1, 2:4] = np.nan
    t2m = 280 + rng.standard_normal((times, 8, 5))
    ds = xr.Dataset(
        {
            "geopotential": (("time", "level", "longitude", "latitude"), z, {"units": "m**2 s**-2"}),
            "2m_temperature": (("time", "longitude", "latitude"), t2m, {"units": "K"}),
            "land_sea_mask": (("longitude", "latitude"), (rng.random((8, 5)) > 0.5).astype(float), {"units": "1"}),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=times, freq="6h").values,
            "trajectory": ("time", np.arange(times) // 5),
            "level": [500, 850],
            "longitude": lon,
            "latitude": lat,
        },
    )
    encoding = {name: {"chunks": (1, *ds[name].shape[1:])} for name in ("geopotential", "2m_temperature")}
    ds.to_zarr(path, zarr_format=2, encoding=encoding, consolidated=True)
    return ds


def two_pass(ds: xr.Dataset, step_steps: int) -> xr.Dataset:
    """The definition: xarray weighted moments over all times, and over tendencies within a trajectory."""
    weights = xr.DataArray(cell_area_weights(ds["latitude"].values), dims="latitude")
    out, channels = {key: [] for key in stats_module.STAT_NAMES}, []
    for name in ("geopotential", "2m_temperature", "land_sea_mask"):
        x = ds[name]
        dims = [d for d in ("time", "latitude", "longitude") if d in x.dims]
        mean = x.weighted(weights).mean(dims)
        std = np.sqrt(((x - mean) ** 2).weighted(weights).mean(dims))
        if "time" in x.dims:
            later = x.isel(time=slice(step_steps, None)).drop_vars(["time", "trajectory"])
            earlier = x.isel(time=slice(None, -step_steps)).drop_vars(["time", "trajectory"])
            same = ds["trajectory"].values[step_steps:] == ds["trajectory"].values[:-step_steps]
            d = (later - earlier).isel(time=np.flatnonzero(same))
            t_mean = d.weighted(weights).mean(dims)
            t_std = np.sqrt(((d - t_mean) ** 2).weighted(weights).mean(dims))
        else:
            t_mean = t_std = xr.full_like(mean, np.nan)
        for key, value in zip(stats_module.STAT_NAMES, (mean, std, t_mean, t_std), strict=True):
            out[key] += list(np.atleast_1d(value.values))
        channels += [f"{name}/{level}" for level in x["level"].values] if "level" in x.dims else [name]
    return xr.Dataset({key: ("channel", value) for key, value in out.items()}, coords={"channel": channels})


@pytest.mark.parametrize("step_hours", [6, 12])
def test_streamed_stats_read_each_time_once_and_equal_the_two_pass_definition(tmp_path, monkeypatch, step_hours):
    ds = wb2_store(tmp_path / "wb2.zarr")
    monkeypatch.setattr(stats_module, "CHUNK_BYTES", 1)  # one time step per block: tendencies carried over
    reads = []
    block = stats_module._block

    def counting(var):
        if "time" in var.dims:
            reads.extend(var["time"].values)
        return block(var)

    monkeypatch.setattr(stats_module, "_block", counting)
    stats = stats_module.compute_stats(tmp_path / "wb2.zarr", out=tmp_path / "stats.zarr", step_hours=step_hours)
    # every time of both time-dependent variables read exactly once
    assert sorted(reads) == sorted(list(ds["time"].values) * 2)
    expected = two_pass(ds, step_hours // 6)
    assert sorted(stats["channel"].values) == sorted(expected["channel"].values)
    for key in stats_module.STAT_NAMES:
        np.testing.assert_allclose(
            stats[key].values, expected[key].sel(channel=stats["channel"]), rtol=1e-10, err_msg=key
        )
    assert stats.attrs["tendency_pairs"] == {6: 7, 12: 5}[step_hours]  # 9 times in trajectories of 5 and 4


def test_streamed_stats_name_the_first_infinite_time(tmp_path):
    """An infinite value in a later block is found (the check runs only on blocks with non-finite moments)."""
    import zarr

    wb2_store(tmp_path / "wb2.zarr")
    z = zarr.open_array(tmp_path / "wb2.zarr" / "geopotential", mode="r+")
    z[6, 1, 0, 0] = np.inf
    z[7, 1, 0, 0] = -np.inf
    with pytest.raises(ValueError, match=r"geopotential at 850 hPa has infinite values at 2020-01-02T12 \(the first "):
        stats_module.compute_stats(tmp_path / "wb2.zarr", out=tmp_path / "stats.zarr")


@pytest.mark.parametrize("time", [0, 6])
def test_an_infinite_value_is_the_message_alone(tmp_path, time):
    """One +inf makes an infinite block mean; merging it must not print numpy's RuntimeWarning
    before the one-line error (scripts/probe_inputs.py counts such warnings)."""
    import zarr

    wb2_store(tmp_path / "wb2.zarr")
    zarr.open_array(tmp_path / "wb2.zarr" / "geopotential", mode="r+")[time, 0, 3, 2] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"geopotential at 500 hPa has infinite values"):
            stats_module.compute_stats(tmp_path / "wb2.zarr", out=tmp_path / "stats.zarr")


def test_stats_in_parts_read_the_earlier_times_of_their_first_tendencies_and_equal_one_part(tmp_path, monkeypatch):
    """Parts of 2 blocks (s2forecast.data.engine's tasks): a part's first tendency pairs with the last time
    of the part before, read again by it; the statistics are those of the definition."""
    ds = wb2_store(tmp_path / "wb2.zarr")
    monkeypatch.setattr(stats_module, "CHUNK_BYTES", 1)  # one time step per block
    monkeypatch.setattr(stats_module, "PART_BLOCKS", 2)  # parts [0, 2), [2, 4), [4, 6), [6, 8), [8, 9)
    reads = []
    block = stats_module._block

    def counting(var):
        if "time" in var.dims:
            reads.extend(var["time"].values)
        return block(var)

    monkeypatch.setattr(stats_module, "_block", counting)
    stats = stats_module.compute_stats(tmp_path / "wb2.zarr", out=tmp_path / "stats.zarr")
    times = ds["time"].values
    # the last time of each part but the last (1, 3, 5, 7) pairs with the first of the next: read again by it
    assert sorted(reads) == sorted(list(times) * 2 + list(times[[1, 3, 5, 7]]) * 2)
    expected = two_pass(ds, 1)
    for key in stats_module.STAT_NAMES:
        np.testing.assert_allclose(
            stats[key].values, expected[key].sel(channel=stats["channel"]), rtol=1e-10, err_msg=key
        )
