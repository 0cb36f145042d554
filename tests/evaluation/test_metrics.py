import math
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.evaluation import (
    MissingTruthWarning,
    acc,
    bias,
    climatology_at_valid_times,
    climatology_forecast,
    latitude_weights,
    mse,
    nearest_hours,
    persistence_forecast,
    rmse,
    rmse_sqrt_before_mean,
    truth_at_valid_times,
    weighted_mean,
)
from s2forecast.evaluation.metrics import spatial_mean

HOURS = np.array([0, 6, 12, 18])


def lat_coord(values):
    values = np.asarray(values, dtype=np.float64)
    return xr.DataArray(values, dims="latitude", coords={"latitude": values})


def equiangular(nlat):
    return np.linspace(90.0, -90.0, nlat)


def midpoint(nlat):
    return 90.0 - (np.arange(nlat) + 0.5) * 180.0 / nlat


def make_truth(times, lat, nlon=4, levels=None, rng=None, value=None):
    """Dataset with a 2-D field and (optionally) a level field, dims (time, [level], latitude, longitude)."""
    times = pd.DatetimeIndex(times)
    lon = np.arange(nlon) * 360.0 / nlon
    coords = {"time": times, "latitude": lat, "longitude": lon}
    shape = (len(times), len(lat), nlon)
    data = {}
    if value is None:
        data["2m_temperature"] = (("time", "latitude", "longitude"), rng.normal(size=shape))
    else:
        data["2m_temperature"] = (("time", "latitude", "longitude"), np.full(shape, value, dtype=np.float64))
    if levels is not None:
        coords["level"] = levels
        shape = (len(times), len(levels), len(lat), nlon)
        field = rng.normal(size=shape) if value is None else np.full(shape, value, dtype=np.float64)
        data["geopotential"] = (("time", "level", "latitude", "longitude"), field)
    return xr.Dataset(data, coords=coords)


def make_forecast(init_times, leads, lat, nlon=4, levels=None, rng=None):
    init_times = pd.DatetimeIndex(init_times)
    leads = pd.to_timedelta(leads)
    lon = np.arange(nlon) * 360.0 / nlon
    coords = {"time": init_times, "prediction_timedelta": leads, "latitude": lat, "longitude": lon}
    shape = (len(init_times), len(leads), len(lat), nlon)
    data = {"2m_temperature": (("time", "prediction_timedelta", "latitude", "longitude"), rng.normal(size=shape))}
    if levels is not None:
        coords["level"] = levels
        shape = (len(init_times), len(leads), len(levels), len(lat), nlon)
        data["geopotential"] = (
            ("time", "prediction_timedelta", "level", "latitude", "longitude"),
            rng.normal(size=shape),
        )
    return xr.Dataset(data, coords=coords)


def make_climatology(lat, nlon=4, levels=None, rng=None, doys=None, hours=HOURS):
    doys = np.arange(1, 367) if doys is None else np.asarray(doys)
    lon = np.arange(nlon) * 360.0 / nlon
    coords = {"dayofyear": doys, "hour": hours, "latitude": lat, "longitude": lon}
    shape = (len(doys), len(hours), len(lat), nlon)
    data = {"2m_temperature": (("dayofyear", "hour", "latitude", "longitude"), rng.normal(size=shape))}
    if levels is not None:
        coords["level"] = levels
        shape = (len(doys), len(hours), len(levels), len(lat), nlon)
        data["geopotential"] = (("dayofyear", "hour", "level", "latitude", "longitude"), rng.normal(size=shape))
    return xr.Dataset(data, coords=coords)


# --- latitude weights ------------------------------------------------------------------


def test_pole_row_weight_at_1p5_degrees():
    weights = latitude_weights(lat_coord(equiangular(121))).values
    expected_pole = (1.0 - math.sin(math.radians(89.25))) / (2.0 / 121)  # half cell over mean cell area
    assert weights[0] == pytest.approx(0.00518, abs=5e-6)
    assert weights[0] == pytest.approx(expected_pole, rel=1e-9)
    assert weights[-1] == pytest.approx(weights[0], rel=1e-12)
    assert weights.mean() == pytest.approx(1.0, abs=1e-12)


def test_weights_without_poles_equal_normalized_cosine():
    lat = midpoint(32)
    assert lat[0] == pytest.approx(87.1875)
    weights = latitude_weights(lat_coord(lat)).values
    cosine = np.cos(np.deg2rad(lat))
    np.testing.assert_allclose(weights, cosine / cosine.mean(), rtol=1e-12)


@pytest.mark.parametrize("nlat", [121, 32])
def test_weights_follow_input_order(nlat):
    lat = equiangular(nlat) if nlat % 2 else midpoint(nlat)
    north_first = latitude_weights(lat_coord(lat))
    south_first = latitude_weights(lat_coord(lat[::-1]))
    np.testing.assert_array_equal(south_first["latitude"].values, lat[::-1])
    np.testing.assert_allclose(south_first.values, north_first.values[::-1], rtol=1e-14)
    assert north_first.dims == ("latitude",)


@pytest.mark.parametrize(("nlat", "nlon", "kind"), [(121, 240, "equiangular"), (32, 64, "equiangular-midpoint")])
def test_weights_match_grid_area_weights(nlat, nlon, kind):
    from s2forecast.geometry import Grid

    grid = Grid(nlat, nlon, kind)
    lat = grid.lats_deg.numpy()
    reference = grid.area_weights.numpy()
    if reference.ndim == 2:
        reference = reference[:, 0]
    np.testing.assert_allclose(latitude_weights(lat_coord(lat)).values, reference, rtol=1e-12)


def test_weights_reject_bad_latitudes():
    with pytest.raises(ValueError, match="duplicate"):
        latitude_weights(lat_coord([0.0, 0.0, 10.0]))
    with pytest.raises(ValueError, match="90"):
        latitude_weights(lat_coord([0.0, 1.5708 * 100]))


def test_weighted_mean_hand_computed():
    lat = np.array([-45.0, 45.0])  # bounds -90, 0, 90: equal weights
    x = xr.DataArray([[1.0, 3.0], [5.0, 7.0]], dims=("latitude", "longitude"), coords={"latitude": lat})
    assert float(weighted_mean(x)) == pytest.approx(4.0)
    lat = np.array([-60.0, 0.0, 60.0])  # bounds -90, -30, 30, 90: weights 0.5, 1, 0.5 (times sin 30 = 0.5)
    x = xr.DataArray(np.array([[0.0], [4.0], [8.0]]), dims=("latitude", "longitude"), coords={"latitude": lat})
    assert float(weighted_mean(x)) == pytest.approx((0.5 * 0 + 1.0 * 4 + 0.5 * 8) / 2.0)
    x[0, 0] = np.nan
    assert np.isnan(float(weighted_mean(x)))
    assert float(weighted_mean(x, skipna=True)) == pytest.approx((4.0 + 0.5 * 8) / 1.5)


def test_spatial_mean_per_region_with_and_without_nan():
    """A field without NaN (one contraction) and the same field with a NaN outside every region (the
    NaN-aware path) have the same region means; a NaN inside a region spoils that region's mean only."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5))  # (time, lead, lat, lon)
    weights = np.zeros((2, 4, 5))
    weights[0, :2] = rng.random((2, 5))
    weights[1, 2:, :4] = rng.random((2, 4))  # point (3, 4) is in no region
    weights /= weights.sum(axis=(1, 2), keepdims=True)
    expected = np.einsum("rij,abij->rab", weights, x)
    np.testing.assert_allclose(spatial_mean(x, weights), expected, rtol=1e-13)
    holed = x.copy()
    holed[:, :, 3, 4] = np.nan
    np.testing.assert_allclose(spatial_mean(holed, weights), expected, rtol=1e-13)
    holed[0, 0, 0, 0] = np.nan  # in region 0 only
    result = spatial_mean(holed, weights)
    assert np.isnan(result[0, 0, 0]) and np.isfinite(result[1, 0, 0]) and np.isfinite(result[0, 1, 0])


def test_weighted_mean_aligns_weights_by_value():
    lat = equiangular(7)
    x = xr.DataArray(
        np.arange(7.0)[:, None] * np.ones((1, 3)), dims=("latitude", "longitude"), coords={"latitude": lat}
    )
    reversed_weights = latitude_weights(lat_coord(lat[::-1]))
    assert float(weighted_mean(x, reversed_weights)) == pytest.approx(float(weighted_mean(x)), rel=1e-14)


# --- hand-computed scores --------------------------------------------------------------


def _setup(rng, lat=None):
    lat = equiangular(7) if lat is None else lat
    init = pd.date_range("2020-01-01", periods=3, freq="12h")
    leads = pd.to_timedelta([6, 12], "h")
    truth = make_truth(pd.date_range("2020-01-01", periods=12, freq="6h"), lat, rng=rng)
    forecast = truth_at_valid_times(truth, make_forecast(init, leads, lat, rng=rng)).drop_vars("valid_time")
    return truth, forecast


def test_constant_error_gives_rmse_and_bias_equal_to_it():
    truth, forecast = _setup(np.random.default_rng(0))
    scores_rmse = rmse(forecast + 2.5, truth)["2m_temperature"]
    np.testing.assert_allclose(scores_rmse.values, 2.5, rtol=1e-12)
    np.testing.assert_allclose(bias(forecast - 1.5, truth)["2m_temperature"].values, -1.5, rtol=1e-12)
    np.testing.assert_allclose(mse(forecast + 2.0, truth)["2m_temperature"].values, 4.0, rtol=1e-12)
    assert scores_rmse.dims == ("prediction_timedelta",)
    np.testing.assert_array_equal(scores_rmse["n_init_times"].values, [3, 3])


def test_perfect_forecast_rmse_zero_acc_one():
    rng = np.random.default_rng(1)
    truth, forecast = _setup(rng)
    clim = make_climatology(equiangular(7), rng=rng)
    np.testing.assert_allclose(rmse(forecast, truth)["2m_temperature"].values, 0.0, atol=1e-15)
    np.testing.assert_allclose(acc(forecast, truth, clim)["2m_temperature"].values, 1.0, rtol=1e-12)


def as_truth(field):
    """Turn a forecast-layout DataArray with distinct valid times into a truth Dataset."""
    valid = (field.time + field.prediction_timedelta).transpose("time", "prediction_timedelta").values.ravel()
    values = field.transpose("time", "prediction_timedelta", ...).values.reshape(valid.size, *field.shape[2:])
    coords = {"time": valid, "latitude": field.latitude.values, "longitude": field.longitude.values}
    truth = xr.Dataset({field.name: (("time", "latitude", "longitude"), values)}, coords=coords)
    return truth.sortby("time")


def test_anomaly_sign_flip_gives_acc_minus_one_with_valid_time_climatology():
    rng = np.random.default_rng(2)
    lat = equiangular(7)
    init = pd.DatetimeIndex(["2020-12-31T00", "2020-12-31T18"])
    leads = pd.to_timedelta([6, 18], "h")  # crosses midnight and the year end
    clim = make_climatology(lat, rng=rng)
    clim["2m_temperature"] = clim["2m_temperature"] * 50.0  # climatology varies strongly between slots
    c_valid = climatology_forecast(clim, init, leads)["2m_temperature"].drop_vars("valid_time")
    anomaly = xr.DataArray(rng.normal(size=c_valid.shape), dims=c_valid.dims, coords=c_valid.coords)
    forecast = (c_valid + anomaly).rename("2m_temperature")
    # with the climatology at the valid time, f' = -o' exactly; at the init time ACC would be near +1
    scores = acc(forecast.to_dataset(), as_truth((c_valid - anomaly).rename("2m_temperature")), clim)
    np.testing.assert_allclose(scores["2m_temperature"].values, -1.0, rtol=1e-12)
    # anomalies scaled by any positive factor keep ACC = 1 (it is a correlation)
    scaled = (c_valid + 3.0 * anomaly).rename("2m_temperature")
    scores = acc(scaled, as_truth(forecast), clim)
    np.testing.assert_allclose(scores.values, 1.0, rtol=1e-12)


def test_acc_is_uncentered():
    rng = np.random.default_rng(3)
    truth, forecast = _setup(rng)
    clim = make_climatology(equiangular(7), rng=rng)
    clim = clim.copy(data={"2m_temperature": np.zeros(clim["2m_temperature"].shape)})
    # f' = o' + 5: a centered ACC (spatial means removed) would be exactly 1; the uncentered one is not
    scores = acc(forecast + 5.0, truth, clim)["2m_temperature"].values
    assert np.all(scores < 0.5)


def test_rmse_is_sqrt_of_mean_mse_not_mean_of_sqrt():
    truth, forecast = _setup(np.random.default_rng(4))
    errors = xr.DataArray([1.0, 3.0, 1.0], dims="time", coords={"time": forecast.time})
    shifted = forecast + errors
    np.testing.assert_allclose(rmse(shifted, truth)["2m_temperature"].values, math.sqrt(11.0 / 3.0), rtol=1e-12)
    np.testing.assert_allclose(rmse_sqrt_before_mean(shifted, truth)["2m_temperature"].values, 5.0 / 3.0, rtol=1e-12)


# --- against an independent numpy implementation ----------------------------------------


def numpy_weights(lat):
    """Cell-area weights straight from the formula (any latitude order)."""
    order = np.argsort(lat)
    asc = np.deg2rad(lat[order])
    edges = np.concatenate([[-np.pi / 2], (asc[1:] + asc[:-1]) / 2, [np.pi / 2]])
    area = np.sin(edges[1:]) - np.sin(edges[:-1])
    out = np.empty_like(area)
    out[order] = area / area.mean()
    return out


def numpy_scores(forecast, truth, clim, variable):
    """RMSE, bias, ACC per (lead, [level]) with explicit loops, indexing everything by value."""
    f = forecast[variable]
    lat_f = forecast.latitude.values
    w = numpy_weights(lat_f)
    perm_truth = np.array([np.flatnonzero(np.isclose(truth.latitude.values, x))[0] for x in lat_f])
    perm_clim = np.array([np.flatnonzero(np.isclose(clim.latitude.values, x))[0] for x in lat_f])
    truth_times = pd.DatetimeIndex(truth.time.values)
    doys = list(clim.dayofyear.values)
    hours = list(clim.hour.values)

    def mean_w(x):  # x (..., nlat, nlon)
        return (x * w[:, None]).sum(axis=(-2, -1)) / (w.sum() * x.shape[-1])

    n_init, n_lead = f.sizes["time"], f.sizes["prediction_timedelta"]
    sq, err, cor = [], [], []
    for i in range(n_init):
        row_sq, row_err, row_cor = [], [], []
        for k in range(n_lead):
            valid = pd.Timestamp(f.time.values[i] + f.prediction_timedelta.values[k])
            fk = f.values[i, k]
            ok = truth[variable].values[truth_times.get_loc(valid)][..., perm_truth, :]
            ck = clim[variable].values[doys.index(valid.day_of_year), hours.index(valid.hour)][..., perm_clim, :]
            row_sq.append(mean_w((fk - ok) ** 2))
            row_err.append(mean_w(fk - ok))
            fa, oa = fk - ck, ok - ck
            row_cor.append(mean_w(fa * oa) / np.sqrt(mean_w(fa**2) * mean_w(oa**2)))
        sq.append(row_sq)
        err.append(row_err)
        cor.append(row_cor)
    sq, err, cor = np.array(sq), np.array(err), np.array(cor)
    return np.sqrt(sq.mean(axis=0)), err.mean(axis=0), cor.mean(axis=0)


@pytest.mark.parametrize(
    ("lat", "forecast_north_first", "truth_north_first", "clim_north_first"),
    [
        (equiangular(121), True, False, False),  # 1.5 deg rows with poles
        (equiangular(121), False, True, True),
        (midpoint(32), True, True, False),  # WB2 64x32 rows, no poles
        (midpoint(32), False, False, True),
    ],
)
def test_scores_match_numpy_reference(lat, forecast_north_first, truth_north_first, clim_north_first):
    rng = np.random.default_rng(5)

    def oriented(north_first):
        return lat if north_first else lat[::-1]

    levels = [500, 850]
    nlon = 8
    init = pd.DatetimeIndex(["2019-12-31T00", "2019-12-31T12", "2020-02-28T18"])
    leads = pd.to_timedelta([6, 30], "h")
    valid = np.unique((init.values[:, None] + leads.values[None, :]).ravel())
    truth = make_truth(valid, oriented(truth_north_first), nlon=nlon, levels=levels, rng=rng)
    truth = truth.isel(time=rng.permutation(truth.sizes["time"]))  # truth order is irrelevant
    forecast = make_forecast(init, leads, oriented(forecast_north_first), nlon=nlon, levels=levels, rng=rng)
    stamps = pd.DatetimeIndex(valid)
    doys = np.unique(np.concatenate([stamps.day_of_year, [1, 100, 366]]))
    clim = make_climatology(oriented(clim_north_first), nlon=nlon, levels=levels, rng=rng, doys=doys)
    # make anomalies correlated so that ACC is far from 0
    forecast = forecast + 0.5 * truth_at_valid_times(truth, forecast).drop_vars("valid_time")

    got_rmse, got_bias, got_acc = rmse(forecast, truth), bias(forecast, truth), acc(forecast, truth, clim)
    for variable in ("2m_temperature", "geopotential"):
        ref_rmse, ref_bias, ref_acc = numpy_scores(forecast, truth, clim, variable)
        if variable == "geopotential":
            assert got_rmse[variable].dims == ("prediction_timedelta", "level")
        np.testing.assert_allclose(got_rmse[variable].values, ref_rmse, rtol=1e-10)
        np.testing.assert_allclose(got_bias[variable].values, ref_bias, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got_acc[variable].values, ref_acc, rtol=1e-9, atol=1e-12)


def test_dask_inputs_give_the_same_scores():
    rng = np.random.default_rng(6)
    lat = equiangular(9)
    truth, forecast = _setup(rng, lat)
    forecast = forecast + rng.normal(size=forecast["2m_temperature"].shape)
    clim = make_climatology(lat, rng=rng)
    lazy = acc(forecast.chunk(time=1), truth.chunk(time=2), clim.chunk(dayofyear=30))
    assert lazy["2m_temperature"].chunks is not None
    np.testing.assert_allclose(lazy.compute()["2m_temperature"], acc(forecast, truth, clim)["2m_temperature"])
    np.testing.assert_allclose(
        rmse(forecast.chunk(time=1), truth.chunk(time=3)).compute()["2m_temperature"],
        rmse(forecast, truth)["2m_temperature"],
    )


# --- valid-time alignment and missing truth ------------------------------------------------


def test_truth_at_valid_times_uses_init_plus_lead_and_forecast_latitude_order():
    rng = np.random.default_rng(7)
    lat = equiangular(5)
    times = pd.date_range("2020-12-31", periods=8, freq="6h")
    truth = make_truth(times, lat[::-1], rng=rng)
    forecast = make_forecast(times[:2], pd.to_timedelta([0, 18], "h"), lat, rng=rng)
    out = truth_at_valid_times(truth, forecast)
    assert out["2m_temperature"].dims == ("time", "prediction_timedelta", "latitude", "longitude")
    np.testing.assert_array_equal(out.latitude.values, lat)
    expected = truth["2m_temperature"].sel(time="2021-01-01T00").values[::-1]  # init Dec 31 06 UTC + 18 h
    np.testing.assert_array_equal(out["2m_temperature"].isel(time=1, prediction_timedelta=1).values, expected)
    assert out.valid_time.values[1, 1] == np.datetime64("2021-01-01T00")


def test_missing_truth_is_nan_and_reported():
    rng = np.random.default_rng(8)
    lat = equiangular(5)
    init = pd.date_range("2020-01-01", periods=4, freq="6h")
    leads = pd.to_timedelta([6, 12, 48], "h")
    times = pd.date_range("2020-01-01", periods=8, freq="6h")  # last valid 2020-01-02T18: 48 h lead never covered
    truth = make_truth(times.delete(3), lat, rng=rng)  # 2020-01-01T18 missing
    forecast = make_forecast(init, leads, lat, rng=rng)

    observed = truth_at_valid_times(truth, forecast)["2m_temperature"]
    assert observed.shape == (4, 3, 5, 4)
    assert np.isnan(observed.isel(time=2, prediction_timedelta=0)).all()  # 12 UTC + 6 h
    assert np.isnan(observed.isel(prediction_timedelta=2)).all()

    with pytest.warns(MissingTruthWarning, match="1 lead"):
        scores = rmse(forecast, truth)["2m_temperature"]
    np.testing.assert_array_equal(scores["n_init_times"].values, [3, 3, 0])
    assert np.isnan(scores.values[2])
    # partial leads average only over the init times with truth
    for k, missing_init in ((0, 2), (1, 1)):
        keep = [i for i in range(4) if i != missing_init]
        sub = forecast.isel(time=keep, prediction_timedelta=[k])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            expected = rmse(sub, truth)["2m_temperature"].values[0]
        assert scores.values[k] == pytest.approx(expected, rel=1e-12)


def test_nan_values_in_data_propagate_unlike_missing_times():
    rng = np.random.default_rng(9)
    truth, forecast = _setup(rng)
    forecast["2m_temperature"][0, 0, 0, 0] = np.nan
    scores = rmse(forecast, truth)["2m_temperature"].values
    assert np.isnan(scores[0]) and np.isfinite(scores[1])
    assert np.all(np.isfinite(rmse(forecast, truth, skipna=True)["2m_temperature"].values))


def test_mismatched_inputs_raise_clear_errors():
    rng = np.random.default_rng(10)
    truth, forecast = _setup(rng)
    with pytest.raises(ValueError, match="regrid"):
        rmse(forecast, make_truth(truth.time.values, equiangular(9), rng=rng))
    with pytest.raises(ValueError, match="lacks forecast variable"):
        rmse(forecast.assign(x=forecast["2m_temperature"]), truth)
    with pytest.raises(ValueError, match="prediction_timedelta"):
        rmse(forecast.isel(prediction_timedelta=0), truth)
    lev_truth = make_truth(truth.time.values, equiangular(7), levels=[500], rng=rng)
    lev_forecast = make_forecast(forecast.time.values, [np.timedelta64(6, "h")], equiangular(7), levels=[850], rng=rng)
    with pytest.raises(ValueError, match=r"level\(s\) \[850\]"):
        rmse(lev_forecast, lev_truth)
    with pytest.raises(ValueError, match="dayofyear value"):
        acc(forecast, truth, make_climatology(equiangular(7), rng=rng, doys=[100]))


def test_dataarray_inputs():
    rng = np.random.default_rng(11)
    truth, forecast = _setup(rng)
    scores = rmse(forecast["2m_temperature"] + 1.0, truth)
    assert isinstance(scores, xr.DataArray)
    np.testing.assert_allclose(scores.values, 1.0)
    np.testing.assert_allclose(rmse(forecast["2m_temperature"] + 1.0, truth["2m_temperature"]).values, 1.0)


# --- climatology lookup and baselines ---------------------------------------------------


def encoded_climatology(hours=HOURS, lat=None):
    """Constant fields whose value is 100 * dayofyear + hour."""
    lat = equiangular(3) if lat is None else lat
    doy = np.arange(1, 367)
    value = 100.0 * doy[:, None] + np.asarray(hours)[None, :]
    data = np.broadcast_to(value[:, :, None, None], (366, len(hours), len(lat), 2)).copy()
    return xr.Dataset(
        {"2m_temperature": (("dayofyear", "hour", "latitude", "longitude"), data)},
        coords={"dayofyear": doy, "hour": hours, "latitude": lat, "longitude": [0.0, 180.0]},
    )


@pytest.mark.parametrize(
    ("valid", "doy", "hour"),
    [
        ("2021-01-01T06", 1, 6),
        ("2020-12-31T18", 366, 18),  # leap year: Dec 31 is day 366
        ("2021-12-31T12", 365, 12),
        ("2020-02-29T00", 60, 0),
        ("2020-03-01T00", 61, 0),  # dates after Feb 28 shift by one in leap years (time.dt.dayofyear)
        ("2021-03-01T00", 60, 0),
    ],
)
def test_climatology_lookup_by_dayofyear_and_hour(valid, doy, hour):
    out = climatology_at_valid_times(encoded_climatology(), [np.datetime64(valid)])
    assert float(out["2m_temperature"][0, 0, 0]) == 100 * doy + hour
    assert out["valid_time"].values[0] == np.datetime64(valid)


def test_climatology_forecast_uses_valid_time_across_midnight_and_year_end():
    clim = encoded_climatology()
    forecast = climatology_forecast(clim, ["2020-12-31T18"], pd.to_timedelta([0, 6, 24, 30], "h"))
    assert forecast["2m_temperature"].dims == ("time", "prediction_timedelta", "latitude", "longitude")
    values = forecast["2m_temperature"][0, :, 0, 0].values
    np.testing.assert_array_equal(values, [366 * 100 + 18, 100 * 1 + 0, 100 * 1 + 18, 100 * 2 + 0])


def test_nearest_hour_on_the_clock():
    np.testing.assert_array_equal(nearest_hours([0, 5, 6, 7, 17, 18, 19, 23], [0, 12]), [0, 0, 0, 12, 12, 12, 0, 0])
    np.testing.assert_array_equal(nearest_hours([3, 21], [0]), [0, 0])
    np.testing.assert_array_equal(nearest_hours([6, 18], [0, 6, 12, 18]), [6, 18])
    # 23 h is nearest to 00 h of the next day (doy 2), not of its own day 23 h earlier; Dec 31 23 h of a
    # leap year to Jan 1 00 h; 02 h back to 00 h of its own day
    times = ["2021-01-01T07", "2021-01-01T23", "2020-12-31T23", "2021-03-01T02", "2020-02-28T22"]
    out = climatology_at_valid_times(encoded_climatology(hours=[0, 12]), times)
    np.testing.assert_array_equal(out["2m_temperature"][:, 0, 0].values, [112, 200, 100, 6000, 6000])


def test_persistence_forecast_and_baselines():
    rng = np.random.default_rng(12)
    lat = equiangular(5)
    times = pd.date_range("2020-01-01", periods=10, freq="6h")
    truth = make_truth(times, lat, rng=rng)
    leads = pd.to_timedelta([0, 6, 12], "h")
    persistence = persistence_forecast(truth, times[:3], leads)
    assert persistence["2m_temperature"].dims == ("time", "prediction_timedelta", "latitude", "longitude")
    for k in range(3):
        np.testing.assert_array_equal(persistence["2m_temperature"][:, k].values, truth["2m_temperature"][:3].values)
    scores = rmse(persistence, truth)["2m_temperature"].values
    assert scores[0] == 0.0 and scores[1] > 0.0

    clim = make_climatology(lat[::-1], rng=rng)
    baseline = climatology_forecast(clim, times[:3], leads, like=truth)
    np.testing.assert_array_equal(baseline.latitude.values, lat)
    assert np.all(np.isfinite(rmse(baseline, truth)["2m_temperature"].values))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isnan(acc(baseline.drop_vars("valid_time"), truth, clim)["2m_temperature"].values).all()
