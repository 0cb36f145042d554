"""The metric engine (metrics.Metric, Statistics, the registry), EvaluationConfig and EvaluationInputs.

One code path: the xarray functions of ``evaluation.metrics`` and ``evaluate``'s streaming both run the
Metric classes; a metric of two chunks' statistics combined is the metric of one pass over both.
"""

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.evaluation import (
    METRICS,
    EvaluationConfig,
    MissingTruthWarning,
    Statistics,
    acc,
    compute_climatology,
    get_metric,
    rmse,
)
from s2forecast.evaluation.config import DETERMINISTIC, ENSEMBLE
from s2forecast.evaluation.evaluate import evaluate, format_table
from s2forecast.evaluation.inputs import EvaluationInputs
from s2forecast.evaluation.metrics import (
    climatology_at_valid_times,
    compute_statistics,
    latitude_weights,
    metric_units,
    truth_at_valid_times,
    valid_times,
)
from s2forecast.evaluation.regions import region_weights
from s2forecast.user_errors import UserError

LAT = np.linspace(90.0, -90.0, 9)
LON = np.arange(16) * 22.5
TIMES = pd.date_range("2020-01-01", periods=16, freq="6h")
LEADS = pd.to_timedelta([6, 12, 24], unit="h")
INITS = TIMES[:6]


def make_truth(seed=0, mask=False):
    rng = np.random.default_rng(seed)
    t2m = (
        280.0 + 20.0 * np.cos(np.deg2rad(LAT))[None, :, None] + 3.0 * rng.normal(size=(TIMES.size, LAT.size, LON.size))
    )
    truth = xr.Dataset(
        {"2m_temperature": (("time", "latitude", "longitude"), t2m, {"units": "K"})},
        coords={"time": TIMES, "latitude": LAT, "longitude": LON},
    )
    if mask:
        truth["land_sea_mask"] = (("latitude", "longitude"), (rng.random((LAT.size, LON.size)) > 0.5).astype(float))
    return truth


def make_forecast(truth, members=0, seed=1):
    """The truth at the valid times plus noise: (time, prediction_timedelta, [realization], latitude, longitude)."""
    rng = np.random.default_rng(seed)
    template = xr.Dataset(coords={"time": INITS, "prediction_timedelta": LEADS, "latitude": LAT, "longitude": LON})
    template["2m_temperature"] = xr.zeros_like(template["time"] + template["prediction_timedelta"], dtype=float)
    template["2m_temperature"] = template["2m_temperature"] * xr.ones_like(template["latitude"] * template["longitude"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingTruthWarning)
        forecast = truth_at_valid_times(truth[["2m_temperature"]], template).drop_vars("valid_time")
    if members:
        forecast = forecast.expand_dims(realization=np.arange(members), axis=2)
    field = forecast["2m_temperature"]
    forecast["2m_temperature"] = field + 1.5 * rng.normal(size=field.shape) + 0.3
    forecast["2m_temperature"].attrs = {"units": "K"}
    return forecast


@pytest.fixture(scope="module")
def truth():
    return make_truth()


@pytest.fixture(scope="module")
def climatology(truth):
    return compute_climatology(truth)


# --- the registry and the config -----------------------------------------------------------------


def test_registry_by_name_and_a_bad_name():
    assert get_metric("rmse") is METRICS["rmse"] and METRICS["crps"].name == "crps"
    with pytest.raises(UserError, match="unknown metric 'rsme'; known metrics: rmse, acc, bias, .*crps"):
        get_metric("rsme")
    for name, metric in METRICS.items():  # every metric says what it is
        assert metric.name == name and metric.units in ("field", "field**2", "1") and metric.provides
    assert metric_units("mse", "K") == "(K)**2" and metric_units("rmse", "K") == "K" and metric_units("acc", "K") == "1"


def test_config_defaults_and_names():
    config = EvaluationConfig()
    assert config.sources == ("forecast", "persistence", "climatology")
    assert config.metrics_for(ensemble=False) == DETERMINISTIC == ("rmse", "acc", "bias")
    assert config.metrics_for(ensemble=True) == DETERMINISTIC + ENSEMBLE + ("rank_histogram",)
    chosen = EvaluationConfig(metrics=["crps", "rmse"], baselines="climatology", regions="europe", variables=["a"])
    assert chosen.metrics == ("crps", "rmse") and chosen.baselines == ("climatology",)
    assert chosen.regions == ("europe",) and chosen.variables == ("a",)
    assert chosen.sources == ("forecast", "climatology") and chosen.metrics_for(ensemble=False) == ("crps", "rmse")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"metrics": ["rmse", "rsme"]}, "unknown metric 'rsme'; known metrics: rmse, acc, bias"),
        ({"metrics": []}, "no metric chosen; choose some of rmse, acc"),
        ({"metrics": ["rmse", "rmse"]}, r"metric\(s\) \['rmse'\] given twice"),
        (
            {"baselines": ["persistance"]},
            r"unknown baseline\(s\) \['persistance'\]; known baselines: persistence, clim",
        ),
        ({"regions": ["europa"]}, "region 'europa' is neither a standard region"),
        ({"regions": ["global", "global"]}, r"region\(s\) \['global'\] given twice"),
    ],
)
def test_config_refuses_bad_names(kwargs, message):
    with pytest.raises(UserError, match=message):
        EvaluationConfig(**kwargs)


def test_config_refuses_a_members_metric_for_a_deterministic_forecast():
    config = EvaluationConfig(metrics=["rmse", "rank_histogram"])
    assert config.metrics_for(ensemble=True) == ("rmse", "rank_histogram")
    with pytest.raises(UserError, match=r"metric\(s\) \['rank_histogram'\] need an ensemble forecast"):
        config.metrics_for(ensemble=False)


# --- one code path: chunks combine to one pass; the xarray functions are the engine ------------------


def engine_statistics(names, forecast, truth, climatology, weights, member_axis=None):
    """Per-init statistics of the engine on numpy arrays, labelled (region, time, lead[, rank])."""
    metrics = [METRICS[name] for name in names]
    f = forecast.values
    o = truth_at_valid_times(truth, forecast.isel(realization=0) if member_axis else forecast)
    o = o.drop_vars("valid_time").values
    c = climatology_at_valid_times(climatology, valid_times(forecast)).transpose("time", "prediction_timedelta", ...)
    stats = compute_statistics(metrics, f, o, weights, member_axis, c.values)
    extra = {key: metric.statistic_dims for metric in metrics for key in metric.provides}
    dims = ("region", "time", "prediction_timedelta")
    return {key: xr.DataArray(value, dims=dims + extra[key]) for key, value in stats.items()}


@pytest.mark.parametrize("members", [0, 5])
def test_two_chunks_combined_equal_one_pass(truth, climatology, members):
    forecast = make_forecast(truth, members)["2m_temperature"]
    names = ("rmse", "acc", "bias", "crps", "spread_skill", "mse", "rmse_sqrt_before_mean") + (
        ("rank_histogram",) if members else ()
    )
    weights = region_weights(["global", "tropics"], LAT, LON)
    clim = climatology["2m_temperature"]
    axis = 2 if members else None
    valid = (INITS.values[:, None] + LEADS.values[None, :]) <= TIMES.values[-1]
    available = xr.DataArray(valid, dims=("time", "prediction_timedelta"))
    whole = Statistics.of_chunk(engine_statistics(names, forecast, truth, clim, weights, axis), available)
    first, second = slice(0, 2), slice(2, None)
    parts = [
        Statistics.of_chunk(
            engine_statistics(names, forecast.isel(time=part), truth, clim, weights, axis), available.isel(time=part)
        )
        for part in (first, second)
    ]
    combined = parts[0] + parts[1]
    assert combined.counts.values.tolist() == whole.counts.values.tolist() == [INITS.size] * LEADS.size
    for name in names:
        np.testing.assert_allclose(combined.finalize(name).values, whole.finalize(name).values, rtol=1e-13)
        # combining is associative: the chunks in any order and grouping
        np.testing.assert_allclose(
            (parts[1].combine(parts[0])).finalize(name).values, whole.finalize(name).values, rtol=1e-13
        )


def test_statistics_of_different_metrics_do_not_combine(truth, climatology):
    forecast = make_forecast(truth)["2m_temperature"]
    weights = region_weights(["global"], LAT, LON)
    available = xr.DataArray(np.ones((INITS.size, LEADS.size), bool), dims=("time", "prediction_timedelta"))
    clim = climatology["2m_temperature"]
    a = Statistics.of_chunk(engine_statistics(["rmse"], forecast, truth, clim, weights), available)
    b = Statistics.of_chunk(engine_statistics(["bias"], forecast, truth, clim, weights), available)
    with pytest.raises(UserError, match=r"cannot combine statistics \['mse'\] with \['bias'\]"):
        a + b


def test_xarray_functions_are_the_engine(truth, climatology):
    """rmse(), acc() and Metric.compute give the very numbers of the engine's statistics, finalized."""
    forecast = make_forecast(truth)["2m_temperature"]
    lat_w = latitude_weights(forecast["latitude"])
    grid = np.broadcast_to(lat_w.values[:, None], (LAT.size, LON.size))
    weights = (grid / grid.sum())[None]  # the one region the xarray functions use
    clim = climatology["2m_temperature"]
    stats = engine_statistics(["rmse", "acc"], forecast, truth, clim, weights)
    valid = (INITS.values[:, None] + LEADS.values[None, :]) <= TIMES.values[-1]
    engine = Statistics.of_chunk(stats, xr.DataArray(valid, dims=("time", "prediction_timedelta")))
    np.testing.assert_array_equal(rmse(forecast, truth).values, engine.finalize("rmse").values[0])
    np.testing.assert_array_equal(acc(forecast, truth, clim).values, engine.finalize("acc").values[0])
    np.testing.assert_array_equal(METRICS["rmse"].compute(forecast, truth, weights=lat_w), engine.finalize("rmse")[0])
    lazy = METRICS["rmse"].compute(forecast.chunk(time=1), truth)  # dask sums the init-time chunks in a tree
    assert lazy.chunks is not None
    np.testing.assert_allclose(lazy.values, engine.finalize("rmse").values[0], rtol=1e-15)


def test_ensemble_metrics_in_xarray_match_evaluate(tmp_path, truth):
    forecast = make_forecast(truth, members=4)
    results = evaluate(forecast, truth, tmp_path / "m.nc", plots=False, progress=False, regions=["global"])
    scored = results["2m_temperature"].sel(source="forecast", region="global")
    for name in ("crps", "spread_skill", "ensemble_mean_rmse", "rmse"):
        got = METRICS[name].compute(forecast, truth)["2m_temperature"]
        np.testing.assert_allclose(got.values, scored.sel(metric=name).values, rtol=1e-12)
    histogram = METRICS["rank_histogram"].compute(forecast["2m_temperature"], truth)
    assert histogram.dims == ("prediction_timedelta", "rank")
    np.testing.assert_allclose(
        histogram.values, results["2m_temperature_rank_histogram"].sel(region="global").values, rtol=1e-12
    )
    with pytest.raises(UserError, match="metric 'rank_histogram' needs an ensemble forecast"):
        METRICS["rank_histogram"].compute(forecast.isel(realization=0), truth)


# --- the config through evaluate ---------------------------------------------------------------------


def test_evaluate_with_a_config(tmp_path, truth):
    forecast = make_forecast(truth)
    default = evaluate(forecast, truth, tmp_path / "a.nc", plots=False, progress=False)
    config = EvaluationConfig(
        metrics=("rmse", "mse", "crps"), baselines=("climatology",), regions=("tropics", "global")
    )
    chosen = evaluate(forecast, truth, tmp_path / "b.nc", progress=False, config=config)
    field = chosen["2m_temperature"]
    assert field["metric"].values.tolist() == ["rmse", "mse", "crps"]
    assert field["source"].values.tolist() == ["forecast", "climatology"]
    assert field["region"].values.tolist() == ["tropics", "global"]
    assert field.attrs["metric_units"] == "rmse: K; mse: (K)**2; crps: K"
    for source in ("forecast", "climatology"):
        np.testing.assert_array_equal(
            field.sel(metric="rmse", source=source, region="global").values,
            default["2m_temperature"].sel(metric="rmse", source=source, region="global").values,
        )
    np.testing.assert_allclose(field.sel(metric="mse").values, field.sel(metric="rmse").values ** 2, rtol=1e-12)
    # definitions come from the classes: the standard ones, and that of a metric chosen besides them
    assert default.attrs["rmse_definition"] == METRICS["rmse"].definition
    assert default.attrs["crps_definition"] == METRICS["crps"].definition and "mse_definition" not in default.attrs
    assert chosen.attrs["mse_definition"] == METRICS["mse"].definition and "persistence" not in chosen.attrs
    table = format_table(chosen)
    assert "RMSE persistence" not in table and "ACC" not in table and "CRPS" in table
    plots = sorted(path.rsplit("/", 1)[1] for path in chosen.attrs["plot_files"])
    assert plots == ["2m_temperature_maps.png", "2m_temperature_scores.png", "2m_temperature_spectra.png",
                     "scorecard_climatology.png"]  # fmt: skip
    with pytest.raises(UserError, match="give variables and regions in the EvaluationConfig"):
        evaluate(forecast, truth, tmp_path / "c.nc", progress=False, regions=["global"], config=config)
    assert not (tmp_path / "c.nc").exists()


# --- EvaluationInputs.open ---------------------------------------------------------------------------


def test_inputs_open_resolves_and_checks(tmp_path):
    truth = make_truth(mask=True)
    forecast = make_forecast(truth)
    inputs = EvaluationInputs.open(forecast, truth)
    assert inputs.variables == ["2m_temperature"] and inputs.levels is None
    assert inputs.regions[-3:] == ["global_land", "extra-tropics_land", "tropics_land"]  # the truth has a mask
    assert inputs.region_weights.shape == (len(inputs.regions), LAT.size, LON.size)
    np.testing.assert_allclose(inputs.region_weights.sum(axis=(1, 2)), 1.0)
    np.testing.assert_array_equal(inputs.map_leads, LEADS.values[[0, -1]])
    assert inputs.truth_name == "<in-memory Dataset>" and inputs.local_paths == [] and not inputs.ensemble
    assert inputs.climatology is None  # added by with_climatology, after evaluate claims its outputs
    with_clim = inputs.with_climatology()
    assert with_clim.climatology_attrs["climatology_method"] in ("hour", "mean")
    assert set(with_clim.climatology.data_vars) == {"2m_temperature"}
    assert inputs.init_times_with_truth().tolist() == [6, 6, 6]
    short = EvaluationInputs.open(forecast, truth.isel(time=slice(0, 9)))  # the truth ends 2020-01-03T00
    with pytest.warns(MissingTruthWarning, match=r"lead\(s\) 24 h average over fewer init times"):
        assert short.init_times_with_truth().tolist() == [6, 6, 5]

    path = tmp_path / "clim.zarr"
    with_clim.climatology.to_zarr(path, zarr_format=3, consolidated=True)
    given = EvaluationInputs.open(forecast, truth, path, map_leads=["12h"]).with_climatology()
    assert given.local_paths == [path] and path in given.generations
    assert given.climatology_attrs["climatology_source"] == str(path.resolve())
    np.testing.assert_array_equal(given.map_leads, LEADS.values[[1]])


@pytest.mark.parametrize(
    "change, kwargs, message",
    [
        (None, {"config": EvaluationConfig(variables=["t"])}, r"variable\(s\) \['t'\] are not forecast variables"),
        (None, {"map_leads": [18]}, r"map lead\(s\) 18 h are not forecast leads; available: 6, 12, 24 h"),
        (None, {"config": EvaluationConfig(regions=["10.2,10.3,0,1"])}, "holds no grid point of this grid"),
        (None, {"config": EvaluationConfig(metrics=["rmse", "rank_histogram"])}, "need an ensemble forecast"),
        ("grid", {}, "are on different grids"),
        ("units", {}, "has units 'degC' but the truth store"),
        ("no_mask", {"config": EvaluationConfig(regions=["global_land"])}, "needs a land-sea mask"),
    ],
)
def test_inputs_open_refuses(truth, change, kwargs, message):
    forecast = make_forecast(truth)
    if change == "grid":
        forecast = forecast.assign_coords(longitude=forecast.longitude + 1.0)
    if change == "units":
        forecast["2m_temperature"].attrs["units"] = "degC"
    with pytest.raises(UserError, match=message):
        EvaluationInputs.open(forecast, truth, **kwargs)


def test_inputs_with_climatology_checks_a_given_one(tmp_path, truth):
    forecast = make_forecast(truth)
    with pytest.raises(FileNotFoundError, match="clim.zarr"):
        EvaluationInputs.open(forecast, truth, tmp_path / "clim.zarr").with_climatology()
    wrong = make_truth().rename({"2m_temperature": "t"})
    with pytest.raises(UserError, match=r"forecast variable\(s\) \['2m_temperature'\] are not in the climatology"):
        EvaluationInputs.open(forecast, truth, compute_climatology(wrong)).with_climatology()


def test_with_skipna_every_statistic_covers_the_points_where_forecast_and_truth_both_are():
    """A point NaN in the truth (or in one member) is left out of every term of every score, not only of
    the terms that hold the truth: ACC's forecast term over more points than its covariance went above 1,
    and the spread covered points the RMSE beside it left out."""
    rng = np.random.default_rng(3)
    m, nlat, nlon = 4, 6, 8
    weights = np.full((1, nlat, nlon), 1.0 / (nlat * nlon))
    climatology = np.zeros((1, 1, nlat, nlon))
    truth = rng.normal(size=(1, 1, nlat, nlon))
    forecast = truth[:, :, None] + rng.normal(size=(1, 1, m, nlat, nlon))
    forecast[..., : nlat // 2, :] += 10.0 * rng.normal(size=(m, nlat // 2, nlon))  # where the truth will be NaN
    truth[..., : nlat // 2, :] = np.nan
    forecast[0, 0, 1, -1, 0] = np.nan  # one member: the point goes for every member and the truth
    common = np.isfinite(truth[0, 0]) & np.isfinite(forecast[0, 0]).all(axis=0)
    f, o, w = forecast[0, 0][:, common], truth[0, 0][common], weights[0][common]

    def mean(x):
        return np.sum(w * x) / np.sum(w)

    names = ["acc", "spread_skill", "crps"]
    stats = compute_statistics([METRICS[n] for n in names], forecast, truth, weights, 2, climatology, skipna=True)
    mean_f = f.mean(axis=0)
    assert stats["acc"][0, 0, 0] == pytest.approx(mean(mean_f * o) / np.sqrt(mean(mean_f**2) * mean(o**2)), rel=1e-12)
    assert stats["ensemble_variance"][0, 0, 0] == pytest.approx(mean(f.var(axis=0, ddof=1)), rel=1e-12)
    assert stats["mse"][0, 0, 0] == pytest.approx(mean((mean_f - o) ** 2), rel=1e-12)
    pairs = np.abs(f[:, None] - f[None, :]).sum(axis=(0, 1))
    crps = mean(np.abs(f - o).mean(axis=0) - pairs / (2 * m * (m - 1)))
    assert stats["crps"][0, 0, 0] == pytest.approx(crps, rel=1e-12)
    # one member: the truth's NaN reaches the forecast term of ACC too
    one = compute_statistics([METRICS["acc"]], forecast[:, :, 0], truth, weights, None, climatology, skipna=True)
    f0, o0 = forecast[0, 0, 0][np.isfinite(truth[0, 0])], truth[0, 0][np.isfinite(truth[0, 0])]
    w0 = weights[0][np.isfinite(truth[0, 0])]
    expected = np.sum(w0 * f0 * o0) / np.sqrt(np.sum(w0 * f0**2) * np.sum(w0 * o0**2))
    assert one["acc"][0, 0, 0] == pytest.approx(expected, rel=1e-12)
    assert abs(one["acc"][0, 0, 0]) <= 1.0
