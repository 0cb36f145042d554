import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from s2forecast.evaluation import (
    acc,
    climatology_at_valid_times,
    compute_climatology,
    open_climatology,
    persistence_forecast,
    smooth_dayofyear,
    window_weights,
)

LAT = np.array([60.0, 0.0, -60.0])
LON = np.array([0.0, 120.0, 240.0])


def series(times, values, name="2m_temperature", lat=LAT, lon=LON, units="K"):
    """Dataset whose field is ``values[t]`` at every grid point, dims (time, latitude, longitude)."""
    values = np.asarray(values, dtype=np.float64)
    data = np.broadcast_to(values[:, None, None], (values.size, lat.size, lon.size)).copy()
    return xr.Dataset(
        {name: (("time", "latitude", "longitude"), data, {"units": units})},
        coords={"time": pd.DatetimeIndex(times), "latitude": lat, "longitude": lon},
    )


def fejer_attenuation(half, period=366):
    """Gain of the triangular window w_k = 1 - |k|/half at one cycle per ``period`` days (Fejer kernel)."""
    theta = 2.0 * np.pi / period
    return (np.sin(half * theta / 2.0) / (half * np.sin(theta / 2.0))) ** 2


# --- window and smoothing ---------------------------------------------------------------


def test_window_weights_are_wb2_triangle():
    w = window_weights(61)
    assert w.shape == (61,)
    assert w.mean() == pytest.approx(1.0)
    assert w[0] == 0.0 and w[-1] == 0.0 and w.argmax() == 30
    np.testing.assert_allclose(w, w[::-1])
    np.testing.assert_allclose(np.diff(w[:31]), np.diff(w[:31])[0])  # linear ramp
    np.testing.assert_array_equal(window_weights(1), [1.0])
    for bad in (60, 0, -3, 367, 2.5):
        with pytest.raises(ValueError, match="odd"):
            window_weights(bad)


def test_smoothing_preserves_constants_and_attenuates_sinusoid_as_known():
    doy = np.arange(1, 367)
    field = xr.DataArray(
        np.stack([np.full(366, 7.5), np.cos(2 * np.pi * (doy - 1) / 366), np.sin(2 * np.pi * 3 * doy / 366)], axis=1),
        dims=("dayofyear", "case"),
        coords={"dayofyear": doy},
    )
    out = smooth_dayofyear(field, 61)
    np.testing.assert_allclose(out[:, 0], 7.5, rtol=1e-13)
    np.testing.assert_allclose(out[:, 1], fejer_attenuation(30) * field[:, 1], atol=1e-12)
    np.testing.assert_allclose(out[:, 2], fejer_attenuation(30, 366 / 3) * field[:, 2], atol=1e-12)
    assert fejer_attenuation(30) < 0.98  # the attenuation is visible, not round-off


def test_smoothing_wraps_around_the_year_end():
    impulse = xr.DataArray(np.zeros(366), dims="dayofyear", coords={"dayofyear": np.arange(1, 367)})
    impulse[0] = 1.0  # Jan 1
    out = smooth_dayofyear(impulse, 61).values
    w = window_weights(61) / window_weights(61).sum()
    np.testing.assert_allclose(out[:30], w[30:60])  # Jan 1 .. Jan 30
    np.testing.assert_allclose(out[-29:], w[1:30])  # Dec 3 .. Dec 31 (leap) see Jan 1
    assert out[365] == pytest.approx(out[1])  # symmetric across the wrap
    assert out.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("first_nan_day", [None, 0, 200, 350])
@pytest.mark.parametrize("window_days", [61, 5, 3])
def test_streamed_smoothing_equals_the_window_and_learns_of_nan_on_the_way(first_nan_day, window_days, monkeypatch):
    """The running sums of the streamed climatology (in tiles, in place) give the periodic window's
    values; a NaN is left out of the windows over it, their weights renormalized (WB2's weighted mean
    skips NaN), and a day is NaN only where its whole window is, whether the first NaN comes with the
    first field asked for, in the middle or near the end (its counts start then, at zero)."""
    from s2forecast.evaluation import climatology as module

    monkeypatch.setattr(module, "SMOOTHING_TILE", 4)  # several tiles, the last one partial
    rng = np.random.default_rng(11)
    values = (280.0 + rng.normal(size=(366, 10))).astype(np.float32)
    if first_nan_day is not None:
        values[first_nan_day, 3] = np.nan
        values[(first_nan_day + 40) % 366, 7] = np.nan
        values[(first_nan_day + np.arange(window_days + 8)) % 366, 9] = np.nan  # some whole windows
    asked = []

    def field(day):
        asked.append(day)
        return values[day]

    streamed = np.stack([day.copy() for day in module._smoothed_days(field, window_days, np.float64)])
    half = window_days // 2
    expected_asks = range(366) if half <= 1 else [d % 366 for d in range(1 - half, 365 + half)]
    assert asked == list(expected_asks)  # each once, in order (the plan of pass 2's own reads)
    lazy = smooth_dayofyear(xr.DataArray(values.astype(np.float64), dims=("dayofyear", "point")), window_days)
    np.testing.assert_allclose(streamed, lazy.values, rtol=1e-12)
    np.testing.assert_array_equal(np.isnan(streamed), np.isnan(lazy.values))
    weights = window_weights(window_days)
    finite = np.isfinite(values)
    window = [np.roll(np.where(finite, values, 0.0), half - k, axis=0) for k in range(weights.size)]
    weight = sum(w * np.roll(finite, half - k, axis=0) for k, w in enumerate(weights))
    with np.errstate(invalid="ignore", divide="ignore"):
        direct = np.where(weight > 0, sum(w * x for w, x in zip(weights, window, strict=True)) / weight, np.nan)
    np.testing.assert_allclose(streamed, direct, rtol=1e-12)
    np.testing.assert_array_equal(np.isnan(streamed), np.isnan(direct))
    if first_nan_day is not None:  # NaN only on the days whose whole window is NaN: the single NaN unsmoothed only
        assert np.isnan(streamed[:, :9]).sum() == (2 if half <= 1 else 0)
        # the window's nonzero taps span window_days - 2 days (the end taps are zero; 1 day unsmoothed)
        assert np.isnan(streamed[:, 9]).sum() == window_days + 8 - max(window_days - 3, 0)


# --- full dayofyear x hour climatology --------------------------------------------------


def test_constant_field_stays_constant_and_layout():
    times = pd.date_range("2003-01-01", "2004-12-31T12", freq="12h")
    truth = series(times, np.full(times.size, 283.0))
    truth["geopotential"] = xr.DataArray(
        np.full((times.size, 2, LAT.size, LON.size), 5.0e4),
        dims=("time", "level", "latitude", "longitude"),
        coords={"level": [500, 850]},
    )
    truth["land_sea_mask"] = xr.DataArray(np.ones((LAT.size, LON.size)), dims=("latitude", "longitude"))
    clim = compute_climatology(truth)
    assert clim.attrs["climatology_method"] == "dayofyear_hour"
    assert clim.attrs["climatology_window_days"] == 61
    assert "land_sea_mask" not in clim  # static fields have no climatology
    assert clim["2m_temperature"].dims == ("dayofyear", "hour", "latitude", "longitude")
    assert clim["geopotential"].dims == ("dayofyear", "hour", "level", "latitude", "longitude")
    np.testing.assert_array_equal(clim.dayofyear.values, np.arange(1, 367))
    np.testing.assert_array_equal(clim.hour.values, [0, 12])
    np.testing.assert_allclose(clim["2m_temperature"].values, 283.0, rtol=1e-14)
    np.testing.assert_allclose(clim["geopotential"].values, 5.0e4, rtol=1e-14)
    assert clim["2m_temperature"].attrs["units"] == "K"


def test_sinusoid_over_the_year_is_attenuated_by_the_triangular_window():
    times = pd.date_range("2001-01-01", "2004-12-31T18", freq="6h")
    doy = times.day_of_year.to_numpy()
    values = 10.0 * np.cos(2 * np.pi * (doy - 1) / 366) + 0.5 * times.hour.to_numpy()
    clim = compute_climatology(series(times, values))
    assert clim.attrs["climatology_method"] == "dayofyear_hour"
    expected = 10.0 * fejer_attenuation(30) * np.cos(2 * np.pi * np.arange(366) / 366)
    for hour in (0, 6, 12, 18):
        got = clim["2m_temperature"].sel(hour=hour, latitude=0.0, longitude=0.0).values
        # slot 366 also holds non-leap Dec 31s (the value of slot 365): a ~1e-4 effect after smoothing,
        # while the attenuation itself is 10 * (1 - 0.978) ~ 0.2
        np.testing.assert_allclose(got, expected + 0.5 * hour, atol=1e-3)
        assert np.abs(got - 0.5 * hour - 10.0 * np.cos(2 * np.pi * np.arange(366) / 366)).max() > 0.1


def test_dayofyear_convention_matches_wb2():
    times = pd.date_range("2003-01-01", "2004-12-31", freq="D")
    days = (times - times[0]).days.to_numpy().astype(np.float64)  # 0 on 2003-01-01
    clim = compute_climatology(series(times, days), window_days=1)["2m_temperature"].isel(
        hour=0, latitude=0, longitude=0
    )
    assert clim.attrs == {"units": "K"}
    assert float(clim.sel(dayofyear=1)) == (0 + 365) / 2
    assert float(clim.sel(dayofyear=60)) == (59 + 424) / 2  # Mar 1 2003 with Feb 29 2004
    assert float(clim.sel(dayofyear=61)) == (60 + 425) / 2  # Mar 2 2003 with Mar 1 2004
    assert float(clim.sel(dayofyear=365)) == (364 + 729) / 2  # Dec 31 2003 with Dec 30 2004
    assert float(clim.sel(dayofyear=366)) == (364 + 730) / 2  # every Dec 31 (WB2 fills day 366 with day 365)


def test_gaps_are_filled_from_neighbours_periodically():
    times = pd.date_range("2003-01-06", "2003-12-24", freq="D")
    times = times[(times.day_of_year < 100) | (times.day_of_year > 109)]
    values = times.day_of_year.to_numpy().astype(np.float64)
    with pytest.raises(ValueError, match="unknown climatology method"):
        compute_climatology(series(times, values), method="daily")
    assert compute_climatology(series(times, values), window_days=1).attrs["climatology_method"] == "hour"
    clim = compute_climatology(series(times, values), window_days=1, method="dayofyear_hour")
    got = clim["2m_temperature"].isel(hour=0, latitude=0, longitude=0)
    np.testing.assert_allclose(got.sel(dayofyear=slice(99, 110)).values, np.arange(99, 111))  # linear between 99, 110
    # Dec 25 .. Jan 5 (slots 359..366 and 1..5) lie between slot 358 (value 358) and slot 6 (value 6), 14 slots apart
    for slot, offset in ((359, 1), (366, 8), (1, 9), (5, 13)):
        assert float(got.sel(dayofyear=slot)) == pytest.approx(358 + (6 - 358) * offset / 14)


def test_start_and_end_select_the_period():
    times = pd.date_range("2002-01-01", "2004-12-31", freq="D")
    values = np.where(times.year == 2003, 1.0, -50.0)
    clim = compute_climatology(series(times, values), start="2003-01-01", end="2003-12-31")
    np.testing.assert_allclose(clim["2m_temperature"].values, 1.0)
    assert clim.attrs["climatology_start"].startswith("2003-01-01")
    assert clim.attrs["climatology_end"].startswith("2003-12-31")
    assert clim.attrs["climatology_n_times"] == 365
    with pytest.raises(ValueError, match="no truth times"):
        compute_climatology(series(times, values), start="2010", end="2011")
    # a time zone is converted to UTC (pandas refused to compare it with the naive time axis)
    zoned = compute_climatology(series(times, values), start="2003-01-01T02:00+02:00", end="2003-12-31T00:00Z")
    assert zoned.attrs["climatology_n_times"] == 365 and zoned.attrs["climatology_start"].startswith("2003-01-01")


@pytest.mark.slow  # about 10 s
def test_dask_input_stays_lazy_and_matches_numpy():
    times = pd.date_range("2003-01-01", "2003-12-31T12", freq="12h")
    rng = np.random.default_rng(0)
    truth = series(times, np.zeros(times.size)) + xr.DataArray(
        rng.normal(size=(times.size, LAT.size, LON.size)), dims=("time", "latitude", "longitude")
    )
    eager = compute_climatology(truth)
    lazy = compute_climatology(truth.chunk(time=50))
    assert lazy["2m_temperature"].chunks is not None  # nothing computed yet
    np.testing.assert_allclose(lazy.compute()["2m_temperature"].values, eager["2m_temperature"].values, rtol=1e-12)


@pytest.mark.parametrize("lazy", [False, True])
def test_day_of_year_means_are_groupbys_means(lazy):
    """The per-(day of year, hour) means without a reduction per group: two years (one leap), NaN points and
    a day of no finite value, variables of float32, float64 and int, against xarray's groupby means."""
    from s2forecast.evaluation.climatology import _dayofyear_hour_means

    times = pd.date_range("2003-01-01", "2004-12-31T18", freq="6h").delete(slice(40, 44))  # Jan 11 missing
    rng = np.random.default_rng(1)
    values = rng.normal(size=(times.size, 2, 3))
    values[rng.random(values.shape) < 0.05] = np.nan
    values[times.day_of_year == 100, 0, 0] = np.nan  # a (day, point) of no finite value
    dims = ("time", "latitude", "longitude")
    data = xr.Dataset({
        "a": (dims, values.astype(np.float32), {"units": "K"}),
        "b": (dims, values * 1e3, {"units": "m"}),
        "c": (dims, rng.integers(0, 9, values.shape)),
    }, coords={"time": times, "latitude": [10.0, -10.0], "longitude": [0.0, 120.0, 240.0]})  # fmt: skip
    got = _dayofyear_hour_means(data.chunk(time=97) if lazy else data, times)
    assert all(isinstance(v.data, np.ndarray) != lazy for v in got.data_vars.values())
    got = got.compute()
    doy, hour, leap = times.day_of_year.values, times.hour.values, times.is_leap_year
    for name in data.data_vars:
        assert got[name].dims == ("hour", "dayofyear", "latitude", "longitude") and got[name].attrs == data[name].attrs
        assert got[name].dtype == (np.float64 if name == "c" else data[name].dtype)
        for h in (0, 18):
            at = hour == h
            extra = at & (doy == 365) & ~leap  # a non-leap year's Dec 31 counts in day 366 too
            keys = np.concatenate([doy[at], np.full(extra.sum(), 366)])
            sub = data[name].isel(time=np.concatenate([np.flatnonzero(at), np.flatnonzero(extra)]))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # day 100's point: a mean of no value
                expected = sub.assign_coords(dayofyear=("time", keys)).groupby("dayofyear").mean()
            # days of no time (Jan 11 here) are filled from their neighbours afterwards: compare the others
            np.testing.assert_allclose(got[name].sel(hour=h, dayofyear=expected.dayofyear).values,
                                       expected.values, rtol=1e-6 if name == "a" else 1e-12)  # fmt: skip
        assert np.isnan(got[name].sel(dayofyear=100).values[:, 0, 0]).all() == (name != "c")


# --- short-record fallbacks -----------------------------------------------------------------


def test_short_record_falls_back_to_mean_per_hour():
    times = pd.date_range("2020-03-25", periods=12, freq="6h")  # three days
    values = np.arange(12.0)
    clim = compute_climatology(series(times, values))
    assert clim.attrs["climatology_method"] == "hour"
    assert "does not cover every day of year" in clim.attrs["climatology_method_reason"]
    assert clim.attrs["climatology_window_days"] == 0
    assert clim["2m_temperature"].dims == ("dayofyear", "hour", "latitude", "longitude")
    np.testing.assert_array_equal(clim.hour.values, [0, 6, 12, 18])
    got = clim["2m_temperature"].isel(latitude=0, longitude=0)
    for h, expected in zip([0, 6, 12, 18], [4.0, 5.0, 6.0, 7.0], strict=True):
        np.testing.assert_allclose(got.sel(hour=h).values, expected)  # every day of year


@pytest.mark.parametrize(
    "times",
    [
        pd.DatetimeIndex(["2026-03-25T00", "2026-03-25T07", "2026-03-25T15", "2026-03-25T22", "2026-03-26T06"]),
        pd.date_range("2020-03-25", periods=4, freq="6h"),  # a single date: one sample per hour
    ],
)
def test_irregular_or_single_day_record_falls_back_to_overall_mean(times):
    values = np.arange(float(times.size))
    clim = compute_climatology(series(times, values))
    assert clim.attrs["climatology_method"] == "mean"
    np.testing.assert_allclose(clim["2m_temperature"].values, values.mean())
    np.testing.assert_array_equal(clim.hour.values, np.unique(times.hour))


def test_non_datetime_time_axis_uses_overall_mean():
    truth = series(pd.date_range("2000-01-01", periods=5), np.arange(5.0)).assign_coords(time=np.arange(5.0) * 3600)
    clim = compute_climatology(truth)
    assert clim.attrs["climatology_method"] == "mean"
    assert "not datetime64" in clim.attrs["climatology_method_reason"]
    np.testing.assert_array_equal(clim.hour.values, [0])
    np.testing.assert_allclose(clim["2m_temperature"].values, 2.0)
    with pytest.raises(ValueError, match="datetime64"):
        compute_climatology(truth, method="hour")


def test_fallback_climatology_serves_every_valid_time():
    times = pd.date_range("2020-03-25", periods=12, freq="6h")
    truth = series(times, np.arange(12.0))
    clim = compute_climatology(truth)
    out = climatology_at_valid_times(clim, ["2021-07-04T06", "2021-12-31T18"])
    np.testing.assert_allclose(out["2m_temperature"][:, 0, 0].values, [5.0, 7.0])


# --- storage and end to end -------------------------------------------------------------


def test_open_climatology_round_trip_and_wb2_layout(tmp_path):
    times = pd.date_range("2020-03-25", periods=8, freq="6h")
    clim = compute_climatology(series(times, np.arange(8.0)))
    path = tmp_path / "clim.zarr"
    clim.to_zarr(path)
    opened = open_climatology(path)
    assert opened.attrs["climatology_method"] == "hour"
    xr.testing.assert_allclose(opened.load(), clim)

    # a WB2 climatology: latitude ascending, dims (hour, dayofyear, latitude, longitude)
    wb2 = clim.transpose("hour", "dayofyear", ...).isel(latitude=slice(None, None, -1))
    wb2.attrs = {}
    wb2.to_zarr(tmp_path / "wb2.zarr")
    opened = open_climatology(tmp_path / "wb2.zarr")
    truth = series(times, np.arange(8.0))
    forecast = persistence_forecast(truth, times[:2], pd.to_timedelta([0], "h"))
    scores = acc(forecast, truth, opened)
    np.testing.assert_allclose(scores["2m_temperature"].values, 1.0)


def test_open_climatology_names_what_is_missing(tmp_path):
    doy = np.arange(1, 367)
    good = xr.Dataset(
        {"t": (("dayofyear", "hour", "lat", "lon"), np.zeros((366, 1, 3, 3)))},
        coords={"dayofyear": doy, "hour": [0], "lat": LAT, "lon": LON},
    )
    good.to_zarr(tmp_path / "a.zarr")
    with pytest.raises(ValueError, match=r"\['latitude', 'longitude'\].*rename") as info:
        open_climatology(tmp_path / "a.zarr")
    assert "a.zarr" in str(info.value)
    short = good.rename(lat="latitude", lon="longitude").isel(dayofyear=slice(0, 365))
    short.to_zarr(tmp_path / "b.zarr")
    with pytest.raises(ValueError, match=r"dayofyear value\(s\) \[366\]"):
        open_climatology(tmp_path / "b.zarr")
    with pytest.raises(FileNotFoundError):
        open_climatology(tmp_path / "missing.zarr")
    daily = good.rename(lat="latitude", lon="longitude").isel(hour=0, drop=True)  # WB2's ACC takes one
    daily.to_zarr(tmp_path / "daily.zarr")
    with pytest.raises(ValueError, match=r"lacks dim\(s\) \['hour'\] .*; a daily climatology \(one field per day of "
                                         r"year\): clim.expand_dims\(hour=\[0\]\), used at every hour"):  # fmt: skip
        open_climatology(tmp_path / "daily.zarr")


def test_perfect_forecast_against_computed_climatology():
    times = pd.date_range("2003-01-01", "2003-12-31T12", freq="12h")
    rng = np.random.default_rng(1)
    truth = series(times, rng.normal(size=times.size)) * xr.DataArray(
        rng.normal(size=(LAT.size, LON.size)), dims=("latitude", "longitude")
    )
    clim = compute_climatology(truth)
    forecast = persistence_forecast(truth, times[:4], pd.to_timedelta([0], "h"))
    np.testing.assert_allclose(acc(forecast, truth, clim)["2m_temperature"].values, 1.0)


# --- streamed over a store (s2forecast climatology) --------------------------------------------


def direct_climatology(values, times, window_days=61):
    """The definition, computed directly in float64: per hour of day and slot 1..366 the NaN-skipping mean
    (slot 366 also holds non-leap Dec 31s; a slot without times, here never two in a row, the mean of its
    neighbours'), smoothed with the periodic window over the finite slot means (WB2's weighted mean skips
    NaN). values: (time, ...)."""
    doy, hour, leap = times.day_of_year.to_numpy(), times.hour.to_numpy(), times.is_leap_year
    weights = window_weights(window_days)
    half = window_days // 2
    out = []
    for h in np.unique(hour):
        slots = [(hour == h) & ((doy == d) | ((d == 366) & (doy == 365) & ~leap)) for d in range(1, 367)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slots: NaN
            raw = np.stack([np.nanmean(values[slot], axis=0) for slot in slots]).astype(np.float64)
        for d in [d for d, slot in enumerate(slots) if not slot.any()]:
            raw[d] = (raw[d - 1] + raw[(d + 1) % 366]) / 2
        finite = np.isfinite(raw)
        total = sum(w * np.roll(np.where(finite, raw, 0.0), half - k, axis=0) for k, w in enumerate(weights))
        weight = sum(w * np.roll(finite, half - k, axis=0) for k, w in enumerate(weights))
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(np.where(weight > 0, total / weight, np.nan))
    return np.stack(out, axis=1)  # (dayofyear, hour, ...)


def test_in_memory_smoothing_rounds_float32_once():
    """A float32 pressure of ~1e5 Pa varying by ~10 Pa: the in-memory window summed 59 slot means in
    float32, 5.5e-7 off the float64 definition where the streamed path was 5e-8 (a review found it)."""
    times = pd.date_range("2003-01-01", "2003-12-31T12", freq="12h")
    values = (101325.0 + 10.0 * np.random.default_rng(4).normal(size=(times.size, 3, 4))).astype(np.float32)
    truth = xr.Dataset(
        {"mean_sea_level_pressure": (("time", "latitude", "longitude"), values, {"units": "Pa"})},
        coords={"time": times, "latitude": [60.0, 0.0, -60.0], "longitude": [0.0, 90.0, 180.0, 270.0]},
    )
    clim = compute_climatology(truth)["mean_sea_level_pressure"]
    assert clim.dtype == np.float32 and clim.dims[:2] == ("dayofyear", "hour")
    np.testing.assert_allclose(clim.values, direct_climatology(values.astype(np.float64), times), rtol=1.2e-7)


def to_zarr_one_time_per_chunk(ds: xr.Dataset, path) -> None:
    """``ds.chunk(time=1).to_zarr(path, zarr_format=2)`` without a dask task per chunk (3x faster)."""
    ds.to_zarr(path, zarr_format=2, encoding={name: {"chunks": (1, *var.shape[1:])} for name, var in ds.items()})


def test_a_year_with_a_missing_step_and_a_missing_value_keeps_its_seasonal_cycle(tmp_path):
    """One time step missing made ``auto`` fall back to one mean per hour for every day of year (10 K off
    at 0.25 deg's seasons: found by a review), and one NaN value blanked 59 days of the climatology at its
    point. Now the gap is filled from its neighbours and the NaN left out of the windows over it (WB2)."""
    from s2forecast.evaluation.climatology import write_climatology

    times = pd.date_range("2019-01-01", "2019-12-31T12", freq="12h")
    times = times.delete(times.get_loc(pd.Timestamp("2019-04-10T12")))
    lat, lon = np.array([60.0, 0.0, -60.0]), np.array([0.0, 90.0, 180.0, 270.0])
    rng = np.random.default_rng(4)
    seasonal = 10.0 * np.cos(2 * np.pi * times.day_of_year.to_numpy() / 366)
    t2m = (280.0 + seasonal[:, None, None] + rng.normal(size=(times.size, lon.size, lat.size))).astype(np.float32)
    t2m[times.get_loc(pd.Timestamp("2019-07-01T12")), 1, 2] = np.nan
    temperature = np.stack([t2m - 30.0, t2m - 10.0], axis=1)  # two levels: through pass 1 and its scratch
    store = tmp_path / "wb2.zarr"
    xr.Dataset(
        {
            "2m_temperature": (("time", "longitude", "latitude"), t2m, {"units": "K"}),
            "temperature": (("time", "level", "longitude", "latitude"), temperature, {"units": "K"}),
        },
        coords={"time": times, "level": [500, 850], "longitude": lon, "latitude": lat},
    ).pipe(to_zarr_one_time_per_chunk, store)
    clim = open_climatology(write_climatology(store, tmp_path / "clim.zarr"))
    assert clim.attrs["climatology_method"] == "dayofyear_hour"
    assert "but for gaps of at most 1 day(s) (hour 12" in clim.attrs["climatology_method_reason"]
    for name, values in (("2m_temperature", t2m), ("temperature", temperature)):
        expected = direct_climatology(values.astype(np.float64), times).swapaxes(-1, -2)
        assert np.isfinite(expected).all()
        np.testing.assert_allclose(clim[name].values, expected, rtol=1e-6, err_msg=name)
    # a gap wider than half the window: one mean per hour, as before
    lazy = compute_climatology(xr.open_zarr(store).sel(time=slice(None, "2019-11-15")))
    assert lazy.attrs["climatology_method"] == "hour"
    assert (
        "a gap of 46 days at hour 0, wider than half the 61-day smoothing window"
        in lazy.attrs["climatology_method_reason"]
    )


def test_streamed_store_climatology_equals_the_direct_computation(tmp_path, monkeypatch):
    """A WB2-layout store ((time, level, longitude, latitude), north to south, zarr v2) whose times span many
    chunks and a year boundary, read in several blocks and written in several chunks of days."""
    from s2forecast.evaluation import climatology as module
    from s2forecast.evaluation.climatology import write_climatology

    times = pd.date_range("2003-07-01", "2005-06-30T12", freq="12h")  # two years across 2004 (leap)
    lat, lon = np.array([60.0, 0.0, -60.0]), np.array([0.0, 90.0, 180.0, 270.0])
    rng = np.random.default_rng(3)
    seasonal = 10.0 * np.cos(2 * np.pi * times.day_of_year.to_numpy() / 366)
    temperature = 280.0 + seasonal[:, None, None, None] + rng.normal(size=(times.size, 2, lon.size, lat.size))
    temperature = temperature.astype(np.float32)
    temperature[40, 1, 2, 0] = np.nan  # a missing value: skipped by the mean of its slot
    surface = 1.0e5 + 50.0 * seasonal[:, None, None] + rng.normal(size=(times.size, lon.size, lat.size))
    store = tmp_path / "wb2.zarr"
    xr.Dataset(
        {
            "temperature": (("time", "level", "longitude", "latitude"), temperature, {"units": "K"}),
            "surface_pressure": (("time", "longitude", "latitude"), surface),
        },
        coords={"time": times, "level": [500, 850], "longitude": lon, "latitude": lat},
    ).chunk(time=16).to_zarr(store, zarr_format=2)

    monkeypatch.setattr(module, "READ_BLOCK_BYTES", 3 * 16 * 2 * lon.size * lat.size * 4)  # 3 chunks a block
    monkeypatch.setattr(module, "OUTPUT_CHUNK_BYTES", 50 * lon.size * lat.size * 4)  # 50 days a chunk
    blocks = []
    real_read = module._read_block

    def read(variable, start, stop, stored=None):
        assert stored is not None  # read as stored, put in the readers' layout in memory
        blocks.append((variable.name, start, stop))
        return real_read(variable, start, stop, stored)

    monkeypatch.setattr(module, "_read_block", read)
    real_sum, scratch_seen = module._sum_slots, []

    def sum_slots(task, job):  # which variables' scratch files are on disk when a task of pass 1 starts
        files = (Path(job.out) / module.SCRATCH).iterdir()
        scratch_seen.append((task.name, {path.name.split(".")[0] for path in files}))
        return real_sum(task, job)

    monkeypatch.setattr(module, "_sum_slots", sum_slots)
    write_climatology(store, tmp_path / "clim.zarr")
    # one variable after the other: the scratch disk holds one variable's means at most
    assert {name for name, _ in scratch_seen} == {"temperature", "surface_pressure"}
    assert all(present <= {name} for name, present in scratch_seen), scratch_seen

    clim = open_climatology(tmp_path / "clim.zarr")
    assert clim.attrs["climatology_method"] == "dayofyear_hour"
    # the readers put a store into the model's layout (data/store.py to_model_order): WB2's climatology layout
    assert clim["temperature"].dims == ("dayofyear", "hour", "level", "latitude", "longitude")
    assert clim["temperature"].dtype == np.float32 and clim["temperature"].attrs == {"units": "K"}
    np.testing.assert_array_equal(clim.latitude.values, lat)  # north to south, as stored and as the model's
    assert clim["temperature"].encoding["chunks"] == (50, 1, 1, lat.size, lon.size)
    compressors = zarr.open_group(tmp_path / "clim.zarr", mode="r")["temperature"].compressors
    configs = [c.to_dict()["configuration"] for c in compressors]
    assert [(c["cname"], c["shuffle"]) for c in configs] == [("lz4", "bitshuffle")]  # output.field_compressors
    starts = [start for name, start, _ in blocks if name == "temperature"]
    assert starts == list(range(0, times.size, 48))  # each chunk read once, in blocks of 3 chunks
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clim.zarr", "wb2.zarr"]
    assert not (tmp_path / "clim.zarr" / module.SCRATCH).exists()

    for name, values in (("temperature", temperature), ("surface_pressure", surface)):
        expected = direct_climatology(values.astype(np.float64), times).swapaxes(-1, -2)  # (..., lat, lon)
        assert np.isfinite(expected).all()
        np.testing.assert_allclose(clim[name].values, expected, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "layout", ["latitude, longitude", "south to north", "longitudes from -180", "times in reverse", "years swapped"]
)
def test_streamed_climatology_is_the_same_in_every_store_layout(layout, tmp_path, monkeypatch):
    """The blocks are read as stored and put in the readers' layout in memory: every dim order, latitude
    direction and longitude convention, and times stored out of order (each takes its own slot: they took
    the sorted times' slots), gives the climatology of the model-ordered store, to the bit."""
    from s2forecast.evaluation import climatology as module
    from s2forecast.evaluation.climatology import write_climatology

    real_read, read_as_stored = module._read_block, []

    def read(variable, start, stop, stored=None):
        read_as_stored.append(stored is not None)
        return real_read(variable, start, stop, stored)

    monkeypatch.setattr(module, "_read_block", read)

    times = pd.date_range("2003-12-01", "2005-01-31T12", freq="12h")
    lat, lon = np.array([67.5, 22.5, -22.5, -67.5]), np.arange(0.0, 360.0, 60.0)
    rng = np.random.default_rng(5)
    values = 280.0 + rng.normal(size=(times.size, 2, lat.size, lon.size)).astype(np.float32)
    model = xr.Dataset(
        {"temperature": (("time", "level", "latitude", "longitude"), values, {"units": "K"})},
        coords={"time": times, "level": [500, 850], "latitude": lat, "longitude": lon},
    )
    model.chunk(time=8).to_zarr(tmp_path / "model.zarr", zarr_format=2)
    if layout == "latitude, longitude":
        other = model.transpose("time", "longitude", "level", "latitude")  # level between the spatial dims
    elif layout == "south to north":
        other = model.isel(latitude=slice(None, None, -1)).transpose("time", "level", "longitude", "latitude")
    elif layout == "longitudes from -180":
        other = model.roll(longitude=3, roll_coords=True)
        other = other.assign_coords(longitude=(other.longitude + 180.0) % 360.0 - 180.0)
    elif layout == "times in reverse":
        other = model.isel(time=slice(None, None, -1))
    else:  # 2004 and 2005 before Dec 2003: a slot's (at most two) times are summed in another order, exactly
        later = times >= pd.Timestamp("2004-01-01")
        other = model.isel(time=np.concatenate([np.flatnonzero(later), np.flatnonzero(~later)]))
    other.chunk(time=8).to_zarr(tmp_path / "other.zarr", zarr_format=2)
    write_climatology(tmp_path / "model.zarr", tmp_path / "model_clim.zarr")
    write_climatology(tmp_path / "other.zarr", tmp_path / "other_clim.zarr")
    expected, clim = open_climatology(tmp_path / "model_clim.zarr"), open_climatology(tmp_path / "other_clim.zarr")
    assert read_as_stored and all(read_as_stored)
    assert clim["temperature"].dims == expected["temperature"].dims
    xr.testing.assert_equal(clim["temperature"], expected["temperature"])


def test_streaming_to_an_existing_path_is_refused_and_leaves_it(tmp_path):
    """compute_climatology(out=...) never replaces what is there (the command goes through the output policy)."""
    times = pd.date_range("2020-01-01", periods=8, freq="6h")
    truth = xr.Dataset(
        {"t": (("time", "latitude", "longitude"), np.ones((8, 3, 4), np.float32))},
        coords={"time": times, "latitude": [60.0, 0.0, -60.0], "longitude": [0.0, 90.0, 180.0, 270.0]},
    )
    target = tmp_path / "mine"
    target.mkdir()
    (target / "keep.txt").write_text("user data")
    with pytest.raises(ValueError, match="exists: compute_climatology streams only to a new path"):
        compute_climatology(truth, out=target)
    assert (target / "keep.txt").read_text() == "user data" and len(list(target.iterdir())) == 1


def test_a_store_on_a_grid_no_command_takes_is_refused_before_the_reading(tmp_path):
    """A review found: climatology read the whole store and wrote a climatology of latitudes every
    other command refuses (cell centres shifted by a quarter cell)."""
    from s2forecast.evaluation.climatology import write_climatology

    times = pd.date_range("2020-01-01", periods=8, freq="6h")
    series(times, 280.0 + np.arange(8.0), lat=np.array([75.0, 15.0, -45.0])).to_zarr(tmp_path / "s.zarr", zarr_format=3)
    with pytest.raises(ValueError, match=r"^unsupported latitudes: 3 rows evenly spaced 60 deg from -45 to 75"):
        write_climatology(tmp_path / "s.zarr", tmp_path / "clim.zarr")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["s.zarr"]


@pytest.fixture(scope="module")
def one_time_per_chunk_store(tmp_path_factory):
    """A WB2-layout store with one time per chunk (as WB2's and s2forecast's): a 14-month 12-hourly record
    over a leap year's end (day 366) and a non-leap one's (Dec 31 counts in days 365 and 366), a
    one-channel variable with a missing value and a point missing at every time of one slot (its mean is
    NaN), and a two-level one."""
    times = pd.date_range("2004-12-01", "2006-01-31T12", freq="12h")
    lat, lon = np.array([60.0, 0.0, -60.0]), np.array([0.0, 90.0, 180.0, 270.0])
    rng = np.random.default_rng(7)
    seasonal = 10.0 * np.cos(2 * np.pi * times.day_of_year.to_numpy() / 366)
    surface = (1.0e5 + 50.0 * seasonal[:, None, None] + rng.normal(size=(times.size, lon.size, lat.size))).astype(
        np.float32
    )
    surface[100, 1, 2] = np.nan  # another year has this slot: a finite mean
    surface[times.get_indexer(pd.DatetimeIndex(["2005-03-05", "2006-01-05T12"])), 2, 0] = np.nan
    surface[times.get_indexer(pd.DatetimeIndex(["2005-01-05T12"])), 2, 0] = np.nan  # 2006-01-05T12's slot: all NaN
    temperature = (280.0 + seasonal[:, None, None, None] + rng.normal(size=(times.size, 2, lon.size, lat.size))).astype(
        np.float32
    )
    store = tmp_path_factory.mktemp("one_time_per_chunk") / "wb2.zarr"
    xr.Dataset(
        {
            "surface_pressure": (("time", "longitude", "latitude"), surface, {"units": "Pa"}),
            "temperature": (("time", "level", "longitude", "latitude"), temperature, {"units": "K"}),
        },
        coords={"time": times, "level": [500, 850], "longitude": lon, "latitude": lat},
    ).pipe(to_zarr_one_time_per_chunk, store)
    return store


@pytest.mark.parametrize("window_days", [61, 3])
def test_one_channel_variables_are_read_by_pass_two_alone(one_time_per_chunk_store, window_days, tmp_path, monkeypatch):
    """A one-channel variable stored one time per chunk skips pass 1 and its scratch (the scratch is as
    large as the output: more than a year of input at 0.25 deg): the task of each hour reads its times
    itself, each chunk once (the year's wrap-around and day 366 included), and writes the same climatology
    to the bit as through the scratch, NaN handling included; a variable of several channels per chunk
    still goes through pass 1."""
    from s2forecast.evaluation import climatology as module

    store, n_times = one_time_per_chunk_store, xr.open_zarr(one_time_per_chunk_store).sizes["time"]
    real_read, real_sum = module._read_block, module._sum_slots
    reads, summed = [], set()

    def read(variable, start, stop, stored=None):
        reads.append((variable.name, start, stop))
        return real_read(variable, start, stop, stored)

    def sum_slots(task, job):
        summed.add(task.name)
        return real_sum(task, job)

    monkeypatch.setattr(module, "_read_block", read)
    monkeypatch.setattr(module, "_sum_slots", sum_slots)
    write = module.write_climatology
    direct = open_climatology(write(store, tmp_path / "direct.zarr", window_days=window_days))
    assert summed == {"temperature"}
    surface_reads = sorted((start, stop) for name, start, stop in reads if name == "surface_pressure")
    assert surface_reads == [(t, t + 1) for t in range(n_times)]  # each chunk once

    monkeypatch.setattr(module, "_reads_store_itself", lambda variable, method: False)
    summed.clear()
    through_scratch = open_climatology(write(store, tmp_path / "scratch.zarr", window_days=window_days))
    assert summed == {"temperature", "surface_pressure"}
    assert direct.attrs["climatology_method"] == "dayofyear_hour"
    values = direct["surface_pressure"].values
    if window_days == 3:  # only the centre tap: the two slots NaN in every year at a point (Mar 5 0 h, held once,
        assert np.isnan(values).sum() == 2  # and Jan 5 12 h) stay NaN there, alone
    else:  # left out of the windows over it, the weights renormalized (WB2's weighted mean skips NaN)
        assert np.isfinite(values).all()
    for name in ("surface_pressure", "temperature"):
        np.testing.assert_array_equal(direct[name].values, through_scratch[name].values, err_msg=name)
    assert not (tmp_path / "direct.zarr" / module.SCRATCH).exists()


@pytest.mark.parametrize(("method", "period"), [("hour", {}), ("dayofyear_hour", {}), ("auto", {"start": "2005-01"})])
def test_store_read_by_pass_two_matches_the_in_memory_computation(one_time_per_chunk_store, method, period, tmp_path):
    """The per-hour means, the gap-filled days (a month left out, ``dayofyear_hour`` forced), a period
    that leaves store times out, and the NaN (a missing value, and a point missing at every time of a
    slot) of a variable read by pass 2 alone equal the in-memory computation's."""
    truth = xr.open_zarr(one_time_per_chunk_store)[["surface_pressure"]].drop_encoding().load()
    truth = truth.isel(time=(truth.time.dt.month != 4) | (truth.time.dt.year != 2005))
    streamed = compute_climatology(truth, method=method, out=tmp_path / "clim.zarr", **period)
    expected = compute_climatology(truth, method=method, **period)  # lazy == in memory: test_dask_input_stays_lazy...
    assert streamed.attrs["climatology_start"] == expected.attrs["climatology_start"]
    values, expected_values = streamed["surface_pressure"].values, expected["surface_pressure"].values
    np.testing.assert_array_equal(np.isnan(values), np.isnan(expected_values))
    np.testing.assert_allclose(values, expected_values, rtol=1e-6)


def test_slot_means_are_the_float64_means_rounded_once_whatever_the_count():
    """Pass 1's slot means (``_slot_means``): per point, the float64 sum of the finite values over the
    slot's times divided by their number, rounded to float32 once; NaN where none is finite. Slots of
    one time take that time's values directly (every slot of a one-year record): the same bits."""
    from s2forecast.evaluation import climatology as module

    rng = np.random.default_rng(3)
    n_times, points = 7, 50
    values = (280.0 + 40.0 * rng.normal(size=(n_times, 1, points))).astype(np.float32)
    values[1, 0, :5] = np.nan  # slot 0's second time: its mean is of its first time there
    values[3, 0, 5:8] = np.nan  # slot 1's only time: NaN there
    # slot 0: times 0, 1, 2; slot 1: time 3; slot 2: times 4 and 5 (5 in slots 2 and 3, as a Dec 31);
    # slot 3: times 5 and 6; slot 4: no time
    primary = np.array([0, 0, 0, 1, 2, 3, 3])
    extra = np.array([-1, -1, -1, -1, -1, 2, -1])
    counts = np.array([3, 1, 2, 2, 0])
    data = xr.Dataset({"t": (("time", "latitude", "longitude"), values.reshape(n_times, 5, 10))})
    data = data.assign_coords(time=pd.date_range("2001-01-01", periods=n_times, freq="6h"))
    job = module._Job(data, "unused", primary, extra, counts, "dayofyear_hour", np.array([0]), 61)

    means = module._slot_means(job, "t", range(5), [(0, 4), (4, 7)], iter([values[:4], values[4:]]))

    members = [[0, 1, 2], [3], [4, 5], [5, 6], []]
    for slot, times in enumerate(members):
        block = values[times].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            expected = (np.nansum(block, axis=0) / np.isfinite(block).sum(axis=0)).astype(np.float32)
        assert means.dtype == np.float32
        np.testing.assert_array_equal(means[slot], expected, err_msg=f"slot {slot}")
    assert np.isnan(means[1, 0, 5:8]).all() and np.isnan(means[4]).all()


def test_a_climatology_without_consolidated_metadata_opens_without_a_warning(tmp_path):
    """xarray's four-line warning about consolidated metadata was printed at every evaluate with such a
    --climatology (forecast and truth open through the same quiet fallback)."""
    path = tmp_path / "clim.zarr"
    clim = xr.Dataset(
        {"t2m": (("dayofyear", "hour", "latitude", "longitude"), np.ones((366, 1, 3, 3), np.float32))},
        coords={"dayofyear": np.arange(1, 367), "hour": [0], "latitude": LAT, "longitude": LON},
    )
    clim.to_zarr(path, zarr_format=3, consolidated=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert open_climatology(path)["t2m"].shape == (366, 1, 3, 3)
