import argparse
import math
import os
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.commands.evaluate import arguments as add_arguments
from s2forecast.commands.evaluate import run
from s2forecast.evaluation import (
    MissingTruthWarning,
    acc,
    bias,
    compute_climatology,
    plots,
    rmse,
    scoring,
    truth_at_valid_times,
)
from s2forecast.evaluation import evaluate as evaluate_module
from s2forecast.evaluation.climatology import ClimatologyWarning, acc_caveat
from s2forecast.evaluation.evaluate import evaluate, format_table
from s2forecast.evaluation.report import open_results
from s2forecast.times import format_time
from s2forecast.user_errors import UserError

LAT = np.linspace(90.0, -90.0, 7)  # equiangular with poles, north -> south as written by the store writers
LON = np.arange(12) * 30.0
LEVELS = [500, 850]
TIMES = pd.date_range("2020-01-01", periods=12, freq="6h")  # 3 days, 6-hourly
LEADS = pd.to_timedelta([6, 12, 24], unit="h")
INITS = TIMES[:4]


def wb2_weights(lat):
    """WB2 cell-area weights, written out independently of the metrics module."""
    ascending = np.sort(np.deg2rad(lat))
    bounds = np.concatenate([[-np.pi / 2], (ascending[1:] + ascending[:-1]) / 2, [np.pi / 2]])
    cell = np.sin(bounds[1:]) - np.sin(bounds[:-1])
    weights = cell / cell.mean()
    return weights[np.argsort(np.argsort(lat))]  # back to the order of ``lat``


def make_truth():
    rng = np.random.default_rng(0)
    nt = TIMES.size
    level_height = np.array([5500.0, 1450.0])[None, :, None, None]  # m, at LEVELS (500, 850 hPa)
    base = 9.81 * level_height + 3000.0 * np.cos(np.deg2rad(LAT))[None, None, :, None]
    z = base + 300.0 * rng.normal(size=(nt, len(LEVELS), LAT.size, LON.size))
    t2m = 280.0 + 5.0 * rng.normal(size=(nt, LAT.size, LON.size))
    return xr.Dataset(
        {
            "geopotential": (("time", "level", "latitude", "longitude"), z, {"units": "m**2 s**-2"}),
            "2m_temperature": (("time", "latitude", "longitude"), t2m, {"units": "K"}),
            "written": (("time",), np.ones(nt, dtype=bool)),
        },
        coords={"time": TIMES, "level": LEVELS, "latitude": LAT, "longitude": LON},
        attrs={"grid_kind": "equiangular", "s2forecast_complete": "true"},
    )


@pytest.fixture(scope="module")
def truth_ds():
    return make_truth()


@pytest.fixture(scope="module")
def truth_path(tmp_path_factory, truth_ds):
    path = tmp_path_factory.mktemp("truth") / "truth.zarr"
    truth_ds.to_zarr(path, zarr_format=3, consolidated=True)
    return path


def perfect_forecast(truth_ds, inits=INITS, leads=LEADS):
    """The truth at the valid times, in forecast layout (time, prediction_timedelta, [level], lat, lon)."""
    coords = {"time": inits, "prediction_timedelta": leads, "level": LEVELS, "latitude": LAT, "longitude": LON}
    dims = {"geopotential": tuple(coords), "2m_temperature": ("time", "prediction_timedelta", "latitude", "longitude")}
    template = xr.Dataset({name: (d, np.zeros([len(coords[k]) for k in d])) for name, d in dims.items()}, coords=coords)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingTruthWarning)
        forecast = truth_at_valid_times(truth_ds.drop_vars("written"), template)  # keeps a valid_time coordinate
    for name in forecast.data_vars:
        forecast[name].attrs = dict(truth_ds[name].attrs)
    return forecast


def write_nc(forecast, path):
    forecast.to_netcdf(path)
    return path


@pytest.fixture(scope="module")
def perfect_path(tmp_path_factory, truth_ds):
    return write_nc(perfect_forecast(truth_ds), tmp_path_factory.mktemp("forecast") / "perfect.nc")


def score(metrics, variable, metric, model, level=None, region="global"):
    data = metrics[variable].sel(metric=metric, source=model, region=region)
    return (data.sel(level=level) if level is not None else data).values


# --- scores --------------------------------------------------------------------------------------


def test_perfect_forecast_and_baselines_stream_exactly(tmp_path, truth_path, perfect_path, truth_ds, monkeypatch):
    monkeypatch.setattr(scoring, "BLOCK_BYTES", 1)  # one init time per block: exercises the combination
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingTruthWarning)  # every valid time is in the truth
        metrics = evaluate(perfect_path, truth_path, tmp_path / "metrics.nc", plots=False, progress=False)
    for variable in ("geopotential", "2m_temperature"):
        np.testing.assert_allclose(score(metrics, variable, "rmse", "forecast"), 0.0, atol=1e-9)
        np.testing.assert_allclose(score(metrics, variable, "bias", "forecast"), 0.0, atol=1e-9)
        np.testing.assert_allclose(score(metrics, variable, "acc", "forecast"), 1.0, rtol=1e-12)
        assert np.all(np.isnan(score(metrics, variable, "acc", "climatology")))  # f' = 0: undefined
    np.testing.assert_array_equal(metrics["n_init_times"].values, [INITS.size] * LEADS.size)

    # the streamed scores equal the metrics module applied to everything at once
    truth = truth_ds.drop_vars("written")
    persistence = truth.sel(time=INITS).expand_dims(prediction_timedelta=LEADS).transpose("time", ...)
    clim = compute_climatology(truth)
    for name, expected in (("rmse", rmse(persistence, truth)), ("bias", bias(persistence, truth))):
        for variable in ("geopotential", "2m_temperature"):
            got = score(metrics, variable, name, "persistence")
            np.testing.assert_allclose(
                got, expected[variable].transpose("prediction_timedelta", ...).values, rtol=1e-12
            )
    expected_acc = acc(persistence, truth, clim)
    np.testing.assert_allclose(
        score(metrics, "geopotential", "acc", "persistence"),
        expected_acc["geopotential"].transpose("prediction_timedelta", ...).values,
        rtol=1e-12,
    )
    assert metrics.attrs["climatology_method"] == "hour"  # 3 days of 6-hourly data: per-hour means
    assert "truth" in metrics.attrs["climatology_source"]


def test_an_init_time_larger_than_a_block_is_scored_in_ranges_of_leads(tmp_path, truth_path, truth_ds, monkeypatch):
    """When one init time's forecast (all leads) exceeds ``BLOCK_BYTES``, a task scores one init time and
    a range of its leads (memory independent of the number of leads): the same scores and counts."""
    rng = np.random.default_rng(2)
    forecast = perfect_forecast(truth_ds)
    noisy = forecast.copy(deep=True)
    for name in noisy.data_vars:
        noisy[name] = noisy[name] + rng.normal(scale=0.5, size=noisy[name].shape)
    path = tmp_path / "noisy.zarr"
    noisy.to_zarr(path, zarr_format=3, consolidated=True)
    whole = evaluate(path, truth_path, tmp_path / "whole.nc", plots=False, progress=False)
    per_lead = max(noisy[name].isel(time=0, prediction_timedelta=0).size * 8 for name in noisy.data_vars)
    monkeypatch.setattr(scoring, "BLOCK_BYTES", 2 * per_lead)  # 2 of the 3 leads, then the third
    blocks = []
    real = scoring._score_block
    monkeypatch.setattr(scoring, "_score_block", lambda block, job: blocks.append(block) or real(block, job))
    split = evaluate(path, truth_path, tmp_path / "split.nc", plots=False, progress=False)
    assert {(b.lead.start, b.lead.stop) for b in blocks} == {(0, 2), (2, 3)}
    assert all(b.init.stop - b.init.start == 1 for b in blocks) and len(blocks) == 2 * INITS.size
    for name in ("geopotential", "2m_temperature"):
        xr.testing.assert_allclose(split[name], whole[name], rtol=1e-12)
        assert np.isfinite(score(split, name, "rmse", "forecast")).all()
    xr.testing.assert_equal(split["n_init_times"], whole["n_init_times"])


def test_persistence_rmse_matches_numpy_with_wb2_weights(tmp_path, truth_path, perfect_path, truth_ds):
    metrics = evaluate(perfect_path, truth_path, tmp_path / "metrics.nc", plots=False, progress=False)
    k, steps = 2, 4  # lead 24 h = 4 steps of 6 h
    o = truth_ds["geopotential"].sel(level=500).values  # (time, lat, lon)
    w = wb2_weights(LAT)[None, :, None]
    mse_per_init = [np.sum(w * (o[i] - o[i + steps]) ** 2) / (np.sum(w) * LON.size) for i in range(INITS.size)]
    expected = math.sqrt(np.mean(mse_per_init))
    got = score(metrics, "geopotential", "rmse", "persistence", level=500)[k]
    assert got == pytest.approx(expected, rel=1e-12)
    assert w[0, 0, 0] == pytest.approx((1 - math.cos(math.radians(15))) / (2 / 7))  # pole rows: half cells


def test_persistence_leaves_out_an_init_time_missing_from_the_truth(tmp_path, truth_path, truth_ds):
    """Persistence's forecast is the truth at the init time: one init time missing from the truth made it NaN
    at every lead (WeatherBench2's time mean skips it). It averages over the other init times, counted apart."""
    path = tmp_path / "truth.zarr"
    truth_ds.isel(time=slice(1, None)).to_zarr(path, zarr_format=3, consolidated=True)  # no 2020-01-01T00
    forecast = write_nc(perfect_forecast(truth_ds), tmp_path / "forecast.nc")
    with pytest.warns(MissingTruthWarning, match=r"1 init time\(s\) \(2020-01-01T00\) are not in the truth .*: "
                      r"persistence, whose forecast is the truth at the init time, leaves them out"):  # fmt: skip
        metrics = evaluate(forecast, path, tmp_path / "metrics.nc", plots=False, progress=False)
    k, steps = 2, 4  # lead 24 h = 4 steps of 6 h
    o = truth_ds["geopotential"].sel(level=500).values
    w = wb2_weights(LAT)[None, :, None]
    mse = [np.sum(w * (o[i] - o[i + steps]) ** 2) / (np.sum(w) * LON.size) for i in range(1, INITS.size)]
    assert score(metrics, "geopotential", "rmse", "persistence", level=500)[k] == pytest.approx(
        math.sqrt(np.mean(mse)), rel=1e-12
    )
    assert metrics["n_init_times"].values.tolist() == [4, 4, 4]  # the forecast's valid times are all there
    assert metrics["n_init_times_persistence"].values.tolist() == [3, 3, 3]
    assert np.allclose(score(metrics, "2m_temperature", "rmse", "forecast"), 0.0)
    full = evaluate(forecast, truth_path, tmp_path / "full.nc", plots=False, progress=False)
    assert "n_init_times_persistence" not in full  # only where persistence averages over fewer init times


@pytest.mark.parametrize("offset", [2.5, -40.0])
def test_constant_offset_and_latitude_order(tmp_path, truth_path, truth_ds, offset):
    shifted = perfect_forecast(truth_ds) + offset
    north_first = tmp_path / "north.zarr"
    shifted.to_zarr(north_first, zarr_format=3, consolidated=True)
    south_first = write_nc(shifted.isel(latitude=slice(None, None, -1)), tmp_path / "south.nc")
    a = evaluate(north_first, truth_path, tmp_path / "a.nc", plots=False, progress=False)
    b = evaluate(south_first, truth_path, tmp_path / "b.nc", plots=False, progress=False)
    for variable in ("geopotential", "2m_temperature"):
        np.testing.assert_allclose(score(a, variable, "rmse", "forecast"), abs(offset), rtol=1e-9)
        np.testing.assert_allclose(score(a, variable, "bias", "forecast"), offset, rtol=1e-9)
        xr.testing.assert_allclose(a[variable], b[variable], rtol=1e-12)


def test_missing_valid_times_are_reported(tmp_path, truth_path, truth_ds):
    leads = pd.to_timedelta([6, 60, 72], unit="h")  # from the 4 inits of day 1: 60 h partly, 72 h never in truth
    forecast = perfect_forecast(truth_ds, leads=leads)
    filler = truth_ds.drop_vars("written").isel(time=0, drop=True)  # plausible values where truth is missing
    path = write_nc(forecast.fillna(filler), tmp_path / "forecast.nc")
    with pytest.warns(MissingTruthWarning, match=r"lead\(s\) 72 h have no truth"):
        metrics = evaluate(path, truth_path, tmp_path / "metrics.nc", plots=False, progress=False)
    np.testing.assert_array_equal(metrics["n_init_times"].values, [4, 2, 0])
    for model in ("forecast", "persistence", "climatology"):
        assert np.all(np.isnan(score(metrics, "geopotential", "rmse", model)[2]))
        assert np.all(np.isfinite(score(metrics, "geopotential", "rmse", model)[:2]))
    np.testing.assert_allclose(score(metrics, "2m_temperature", "rmse", "forecast")[:2], 0.0, atol=1e-9)
    assert "n/a" in format_table(metrics)


@pytest.mark.slow  # about 8 s
def test_swe_store_with_trajectories(tmp_path, monkeypatch):
    """SWE stores: hourly, no headline fields, a ``trajectory`` coordinate and ``written`` variable (ignored);
    their maps have no coastlines (the Earth's were drawn on the shallow-water planet)."""
    coastlines = []
    monkeypatch.setattr(plots, "draw_coastlines", lambda *args, **kwargs: coastlines.append(args))
    rng = np.random.default_rng(3)
    times = pd.date_range("2000-01-01", periods=13, freq="h").append(pd.date_range("2000-01-02", periods=13, freq="h"))
    shape = (times.size, LAT.size, LON.size)
    truth = xr.Dataset(
        {
            name: (("time", "latitude", "longitude"), 1e-5 * rng.normal(size=shape))
            for name in ("vorticity", "divergence")
        },
        coords={"time": times, "trajectory": ("time", np.repeat([0, 1], 13)), "latitude": LAT, "longitude": LON},
        attrs={"grid_kind": "equiangular", "s2forecast_complete": "true"},
    )
    truth["written"] = ("time", np.ones(times.size, dtype=bool))
    store = tmp_path / "swe.zarr"
    truth.to_zarr(store, zarr_format=3, consolidated=True)
    inits = times[[0, 13]]
    forecast = (
        truth[["vorticity"]]
        .sel(time=inits)
        .drop_vars("trajectory")
        .expand_dims(prediction_timedelta=pd.to_timedelta([1, 2], unit="h"))
    )
    forecast = forecast.transpose("time", ...)
    metrics = evaluate(forecast, store, tmp_path / "m.nc", map_leads=["2h"], progress=False)
    assert list(metrics.data_vars) == ["vorticity", "vorticity_nonfinite_forecast", "vorticity_nonfinite_truth",
                                       "n_init_times", "vorticity_sh_power", "vorticity_zonal_power"]  # fmt: skip
    assert metrics.attrs["climatology_method"] in ("hour", "mean")
    np.testing.assert_allclose(
        score(metrics, "vorticity", "rmse", "forecast"), score(metrics, "vorticity", "rmse", "persistence")
    )
    assert format_table(metrics).splitlines()[1].startswith("vorticity")
    assert len(metrics.attrs["plot_files"]) == 5  # scores, spectra, maps; a scorecard per baseline
    assert coastlines == []


def test_a_valid_time_in_another_trajectory_is_no_truth(tmp_path):
    """A forecast from the last time of trajectory 0 run 12 h reaches 2000-01-02T00, the first time of
    trajectory 1: another run, not its future. It counts as missing truth (it was scored: RMSE 36.6
    at such leads against 2.8 at 1 h in a review's SWE rollout)."""
    rng = np.random.default_rng(4)
    times = pd.date_range("2000-01-01", periods=13, freq="h").append(pd.date_range("2000-01-02", periods=13, freq="h"))
    truth = xr.Dataset(
        {"vorticity": (("time", "latitude", "longitude"), 1e-5 * rng.normal(size=(times.size, LAT.size, LON.size)))},
        coords={"time": times, "trajectory": ("time", np.repeat([0, 1], 13)), "latitude": LAT, "longitude": LON},
        attrs={"grid_kind": "equiangular", "s2forecast_complete": "true"},
    )
    store = tmp_path / "swe.zarr"
    truth.to_zarr(store, zarr_format=3, consolidated=True)

    def forecast(inits):
        leads = pd.to_timedelta([1, 12], unit="h")
        at_init = truth.sel(time=inits).drop_vars("trajectory")
        return at_init.expand_dims(prediction_timedelta=leads).transpose("time", ...)

    with pytest.warns(
        MissingTruthWarning,
        match=r"no data at 2 of 4 .init time, lead. valid times \(1 of them in "
        r"another trajectory than their init time's\)",
    ):
        both = evaluate(forecast(times[[0, 12]]), store, tmp_path / "both.nc", plots=False, progress=False)
    np.testing.assert_array_equal(both["n_init_times"].values, [1, 1])
    first = evaluate(forecast(times[[0]]), store, tmp_path / "first.nc", plots=False, progress=False)
    rmse = [score(metrics, "vorticity", "rmse", "forecast") for metrics in (both, first)]
    np.testing.assert_allclose(*rmse, rtol=1e-12)
    with pytest.raises(UserError, match=r"that the truth store .* holds are in another trajectory than their init "):
        evaluate(forecast(times[[12]]).isel(prediction_timedelta=[1]), store, tmp_path / "none.nc", progress=False)


# --- outputs -------------------------------------------------------------------------------------


@pytest.mark.slow  # the PNG plots: about 30 s
def test_outputs_netcdf_csv_table_and_plots(tmp_path, truth_path, perfect_path):
    out = tmp_path / "run" / "metrics.nc"
    # the climatology computed from the 3 days of truth: ACC is marked as not meaningful (issue 28)
    years = (TIMES[-1] - TIMES[0]) / pd.Timedelta(days=365.25)  # 2.75 days
    expected = rf"2020-01-01T00\.\.2020-01-03T18: {years:.2g} years \(< 10\), contains the verified times\).*; give "
    expected += r"one with --climatology, or choose the truth's years with --climatology-start/--climatology-end"
    with pytest.warns(ClimatologyWarning, match=expected):
        metrics = evaluate(perfect_path, truth_path, out, map_leads=[6, "24h"], progress=False)
    assert sorted(p.name for p in tmp_path.joinpath("run").iterdir()) == ["metrics.csv", "metrics.nc", "metrics_plots"]

    written = open_results(out)
    regions = written["region"].values.tolist()
    assert regions[:5] == ["global", "tropics", "extra-tropics", "northern-hemisphere", "southern-hemisphere"]
    assert "europe" in regions and len(regions) == 13  # WB2's standard set; no land-sea mask in this truth
    assert written["geopotential"].dims == ("metric", "source", "region", "lead_time", "level")
    assert written["2m_temperature"].dims == ("metric", "source", "region", "lead_time")
    assert written["metric"].values.tolist() == ["rmse", "acc", "bias"]
    assert written["source"].values.tolist() == ["forecast", "persistence", "climatology"]
    np.testing.assert_array_equal(written["lead_time"].values, LEADS.values)
    assert written["level"].values.tolist() == LEVELS
    assert written["lead_hours"].values.tolist() == [6.0, 12.0, 24.0]
    assert written["n_init_times"].dims == ("lead_time",)
    assert written["geopotential"].attrs["metric_units"] == "rmse: m**2 s**-2; acc: 1; bias: m**2 s**-2"
    assert written.attrs["Conventions"] == "CF-1.8"
    assert written.attrs["forecast"] == str(perfect_path.resolve())
    assert written.attrs["truth"] == str(truth_path.resolve())
    assert written.attrs["history"].endswith(
        f"evaluate({str(perfect_path.resolve())!r}, {str(truth_path.resolve())!r}, ...) (Python)"
    )
    assert written.attrs["climatology_method"] == "hour"
    assert "climatology_start" in written.attrs and "created" in written.attrs
    xr.testing.assert_allclose(written["geopotential"], metrics["geopotential"])
    assert written.attrs["acc_caveat"].startswith("ACC not meaningful: climatology 2020-01-01T00..2020-01-03T18")
    written.close()
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]

    csv = pd.read_csv(out.with_suffix(".csv"))
    assert csv.columns.tolist() == ["variable", "level", "region", "lead_hours", "source", "metric", "value", "units",
                                    "rank"]  # fmt: skip
    assert csv["rank"].isna().all()  # a deterministic forecast has no rank histogram
    assert len(csv) == (len(LEVELS) + 1) * LEADS.size * 3 * 3 * 13
    row = csv[(csv.variable == "geopotential") & (csv.level == 500) & (csv.lead_hours == 24) & (csv.region == "global")]
    row = row[(row.source == "persistence") & (row.metric == "rmse")]
    assert row.value.item() == pytest.approx(score(metrics, "geopotential", "rmse", "persistence", 500)[2])
    assert row.units.item() == "m**2 s**-2"
    assert csv[csv.variable == "2m_temperature"].level.isna().all()

    table = format_table(metrics)
    lines = table.splitlines()
    first_z500 = next(i for i, line in enumerate(lines) if line.startswith("Z500"))
    first_t2m = next(i for i, line in enumerate(lines) if line.startswith("T2M"))
    first_other = next(i for i, line in enumerate(lines) if line.startswith("geopotential 850"))
    assert first_z500 < first_t2m < first_other
    assert "24h" in lines[0] and "RMSE persistence" in table and "ACC*" in table
    assert lines[-1] == f"* {written.attrs['acc_caveat']}" and "contains the verified times" in lines[-1]

    files = [os.fspath(p) for p in metrics.attrs["plot_files"]]
    plot_dir = out.parent / "metrics_plots"
    assert len(files) == 11  # (Z500, Z850, T2M) x (scores, spectra, maps) + 2 scorecards
    for name in ("geopotential_500hPa_scores.png", "geopotential_850hPa_maps.png", "2m_temperature_maps.png",
                 "2m_temperature_spectra.png", "scorecard_persistence.png"):  # fmt: skip
        path = plot_dir / name
        assert os.fspath(path) in files
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000


def test_acc_caveat_needs_ten_years_outside_the_verified_times():
    wb2 = {"climatology_start": "1990-01-01T00:00:00", "climatology_end": "2019-12-31T18:00:00"}
    assert acc_caveat(wb2, np.array(["2020-01-01T06"], "datetime64[ns]")) is None
    inside = acc_caveat(wb2, np.array(["2019-12-31T18", "2020-01-01"], "datetime64[ns]"))
    assert inside == "climatology 1990-01-01T00..2019-12-31T18: contains the verified times"
    short = {"climatology_start": "2015-01-01", "climatology_end": "2019-12-31"}
    assert acc_caveat(short, np.array(["2020-01-01"], "datetime64[ns]")).endswith(": 5 years (< 10)")
    assert acc_caveat({}, np.array(["2020-01-01"], "datetime64[ns]")) is None  # a period not recorded: unknown


def test_open_forecast_numeric_leads_and_map_lead_errors(tmp_path, truth_path, truth_ds):
    forecast = perfect_forecast(truth_ds)
    hours = forecast.assign_coords(prediction_timedelta=[6.0, 12.0, 24.0])
    hours["prediction_timedelta"].attrs["units"] = "hours"
    opened = evaluate_module.open_forecast(hours)
    np.testing.assert_array_equal(opened["prediction_timedelta"].values, LEADS.values)
    assert "valid_time" not in opened.variables
    unitless = forecast.assign_coords(prediction_timedelta=[6.0, 12.0, 24.0])
    with pytest.raises(ValueError, match="prediction_timedelta' must be timedelta64"):
        evaluate_module.open_forecast(unitless)
    with pytest.raises(ValueError, match=r"map lead\(s\) 18 h are not forecast leads; available: 6, 12, 24 h"):
        evaluate(forecast, truth_path, tmp_path / "m.nc", map_leads=[18], progress=False)
    # WB2's other name of the lead dim is accepted (issue 28); another name is refused, naming the fix
    renamed = evaluate_module.open_forecast(forecast.rename(prediction_timedelta="lead_time"))
    xr.testing.assert_identical(renamed, evaluate_module.open_forecast(forecast))
    with pytest.raises(ValueError, match="no .prediction_timedelta. dim.*lead_time -> prediction_timedelta"):
        evaluate_module.open_forecast(forecast.rename(prediction_timedelta="step"))
    # no leads (bench_scale --leads 0 wrote one): the table failed with an IndexError after the scoring
    with pytest.raises(ValueError, match=r"^the forecast has no 'prediction_timedelta' \(leads\): there is nothing"):
        evaluate_module.open_forecast(forecast.isel(prediction_timedelta=slice(0)))
    with pytest.raises(ValueError, match=r"^the forecast has no 'time' \(init times\) and no 'prediction_timedelta'"):
        evaluate_module.open_forecast(forecast.isel(time=slice(0), prediction_timedelta=slice(0)))


def test_a_variable_name_too_long_for_its_result_files_is_refused_before_the_work(tmp_path, truth_ds):
    """A name NetCDF takes (<= 256 bytes) was scored, then writing <name>_nonfinite_forecast into the
    results (or its plots' files) failed: a traceback, all the work lost (a review found it). The
    longest plot file of a field with levels holds its largest level: an ensemble's
    <name>_850hPa_rank_histogram.png, a deterministic forecast's <name>_850hPa_spectra.png; without
    plots only the results' names count (a later review found names refused for plots never drawn)."""
    from s2forecast.evaluation.report import check_plot_file_names

    deterministic = perfect_forecast(truth_ds)
    ensemble = deterministic.expand_dims(realization=2).transpose("time", "prediction_timedelta", "realization", ...)
    cases = [  # forecast, field, plots, the most bytes of its name, the limit reached first
        (deterministic, "geopotential", True, 236, "plot file name ..._spectra.png has 256 bytes, more than 255"),
        (deterministic, "geopotential", False, 237, "name in the results ..._nonfinite_forecast has 257 bytes, "
         "more than 256"),
        (deterministic, "2m_temperature", True, 237, "name in the results ..._nonfinite_forecast has 257 bytes"),
        (ensemble, "geopotential", True, 229, "plot file name ..._rank_histogram.png has 256 bytes, more than 255"),
    ]  # fmt: skip
    for forecast, field, drawn, most, message in cases:
        for length in (most, most + 1):
            name = "é" * (length // 2) + "t" * (length % 2)  # bytes, not characters
            renamed, truth = forecast.rename({field: name}), truth_ds.rename({field: name})
            if length == most:
                inputs = evaluate_module.EvaluationInputs.open(renamed, truth)
                check_plot_file_names(inputs.forecast, inputs.variables) if drawn else None
                continue
            with pytest.raises(ValueError) as error:
                evaluate(renamed, truth, tmp_path / "m.nc", plots=drawn, progress=False)
            assert str(error.value).startswith(f"forecast variable {name[:40]}... is too long a name: its {message}")
            assert list(tmp_path.iterdir()) == []


def test_wb2_climatology_zarr_is_accepted(tmp_path, truth_path, perfect_path, truth_ds):
    clim = compute_climatology(truth_ds.drop_vars("written"))
    clim.attrs = {}
    path = tmp_path / "clim.zarr"
    clim.isel(latitude=slice(None, None, -1)).to_zarr(path, zarr_format=3, consolidated=True)  # WB2: south first
    given = evaluate(perfect_path, truth_path, tmp_path / "a.nc", climatology=path, plots=False, progress=False)
    computed = evaluate(perfect_path, truth_path, tmp_path / "b.nc", plots=False, progress=False)
    xr.testing.assert_allclose(given["geopotential"], computed["geopotential"], rtol=1e-12)
    assert given.attrs["climatology_source"] == str(path.resolve())


def test_cli_prints_table_and_files(tmp_path, truth_path, perfect_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "m.nc"
    args = parser.parse_args(
        ["--forecast", str(perfect_path), "--truth", str(truth_path), "--out", str(out), "--no-plots", "--no-progress"]
    )
    run(args)
    printed = capsys.readouterr().out
    assert printed.lstrip().split()[0] == "6h" and "Z500" in printed
    assert str(out.resolve()) in printed and "m.csv" in printed


def test_climatology_end_given_as_a_date_is_all_of_that_day(tmp_path, truth_path, perfect_path):
    """As climatology's --end: ``--climatology-end 2020-01-02`` was read as 2020-01-02T00 alone."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "m.nc"
    args = parser.parse_args(["--forecast", str(perfect_path), "--truth", str(truth_path), "--out", str(out),
                              "--no-plots", "--no-progress", "--climatology-end", "2020-01-02"])  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClimatologyWarning)
        run(args)
    assert open_results(out).attrs["climatology_n_times"] == 8  # 4 times a day, Jan 1 and 2


def test_overwrite_without_plots_removes_the_earlier_runs_plots(tmp_path, truth_path, perfect_path, truth_ds):
    """--overwrite replaces the results (metrics, CSV, plots): new results without plots left the earlier run's
    plots beside them, plots of other fields. A directory of the user's by that name is left alone."""
    out = tmp_path / "m.nc"
    evaluate(perfect_path, truth_path, out, progress=False, variables=["2m_temperature"])
    assert any((tmp_path / "m_plots").iterdir())
    evaluate(perfect_path, truth_path, out, progress=False, overwrite=True, plots=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.csv", "m.nc"]
    (tmp_path / "m_plots").mkdir()
    (tmp_path / "m_plots" / "mine.txt").write_text("the user's")
    evaluate(perfect_path, truth_path, out, progress=False, overwrite=True, plots=False)
    assert (tmp_path / "m_plots" / "mine.txt").read_text() == "the user's"


# --- errors --------------------------------------------------------------------------------------


def test_missing_variable(tmp_path, truth_path, truth_ds):
    forecast = perfect_forecast(truth_ds).rename({"2m_temperature": "vorticity"})
    path = write_nc(forecast, tmp_path / "f.nc")
    with pytest.raises(ValueError, match=r"\['vorticity'\] are not in the truth store"):
        evaluate(path, truth_path, tmp_path / "m.nc", plots=False, progress=False)
    with pytest.raises(ValueError, match="not forecast variables"):
        evaluate(path, truth_path, tmp_path / "m.nc", variables=["temperature"], plots=False, progress=False)
    assert not (tmp_path / "m.nc").exists()


def test_a_forecast_with_no_valid_time_in_the_truth_is_refused_and_replaces_nothing(tmp_path, truth_path, truth_ds):
    """Every score would be NaN at exit 0 (and ``--overwrite`` would have replaced good results with them)."""
    later = perfect_forecast(truth_ds).assign_coords(time=INITS + pd.Timedelta(days=400))
    path = write_nc(later, tmp_path / "f.nc")
    out = tmp_path / "m.nc"
    out.write_bytes(b"results of an earlier evaluation")
    with pytest.raises(UserError) as error:
        evaluate(path, truth_path, out, plots=False, progress=False, overwrite=True)
    assert str(error.value) == (
        "none of the forecast's valid times (2021-02-04T06 .. 2021-02-05T18) is in the truth store "
        f"{truth_path.resolve()} (2020-01-01T00 .. 2020-01-03T18): every score would be NaN; evaluate against a "
        "truth that covers them"
    )
    assert out.read_bytes() == b"results of an earlier evaluation"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.nc", "m.nc"]


def test_different_grid(tmp_path, truth_path, truth_ds):
    forecast = perfect_forecast(truth_ds).isel(latitude=slice(1, -1))  # no poles: a different grid
    path = write_nc(forecast, tmp_path / "f.nc")
    with pytest.raises(ValueError, match="different grids: forecast 5 latitudes"):
        evaluate(path, truth_path, tmp_path / "m.nc", plots=False, progress=False)
    assert not (tmp_path / "m.nc").exists()
    # the same forecast written in -180..180 (issue 29): read in the truth's column order, a perfect score
    west = perfect_forecast(truth_ds).roll(longitude=6, roll_coords=True)
    west = west.assign_coords(
        longitude=np.where(west["longitude"] >= 180.0, west["longitude"] - 360.0, west["longitude"])
    )
    metrics = evaluate(write_nc(west, tmp_path / "g.nc"), truth_path, tmp_path / "m.nc", plots=False, progress=False)
    np.testing.assert_allclose(score(metrics, "2m_temperature", "rmse", "forecast"), 0.0, atol=1e-9)


def test_missing_paths(tmp_path, truth_path, perfect_path):
    missing = tmp_path / "nope.nc"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        evaluate(missing, truth_path, tmp_path / "m.nc", progress=False)
    with pytest.raises(FileNotFoundError, match="nope.zarr"):
        evaluate(perfect_path, tmp_path / "nope.zarr", tmp_path / "m.nc", progress=False)
    with pytest.raises(FileNotFoundError, match="clim.zarr"):
        evaluate(perfect_path, truth_path, tmp_path / "m.nc", climatology=tmp_path / "clim.zarr", progress=False)


def test_unwritable_output(tmp_path, truth_path, perfect_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    calls = []
    monkeypatch.setattr(evaluate_module, "_score", lambda *args: calls.append(args))
    with pytest.raises(PermissionError, match="not writable"):
        evaluate(perfect_path, truth_path, blocker / "m.nc", progress=False)
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        with pytest.raises(PermissionError, match="not writable"):
            evaluate(perfect_path, truth_path, locked / "m.nc", progress=False)
        assert list(locked.iterdir()) == []
    assert calls == []  # refused before any scoring
    with pytest.raises(ValueError, match=r"ending in \.nc"):
        evaluate(perfect_path, truth_path, tmp_path / "m.csv", progress=False)


def test_repeated_levels_other_dims_and_unordered_leads(tmp_path, truth_path, truth_ds):
    """A repeated level and a vertical dim not named 'level' passed the checks and failed mid-scoring
    (an internal error; 'is a file damaged?'); leads out of order were plotted as zigzags."""
    forecast = perfect_forecast(truth_ds).drop_vars("valid_time")
    twice = xr.concat([forecast[["geopotential"]]] * 2, dim="level")
    with pytest.raises(UserError, match=r"^forecast 'level' has duplicate values \[500, 850\]; drop them$"):
        evaluate(twice, truth_path, tmp_path / "a.nc", plots=False, progress=False)
    heights = forecast[["2m_temperature"]].expand_dims(height=[10.0, 100.0], axis=2)
    truth = truth_ds.drop_vars("written")[["2m_temperature"]].expand_dims(height=[10.0, 100.0], axis=1)
    with pytest.raises(UserError, match=r"variable '2m_temperature' has dim\(s\) \['height'\] besides time, "
                       r"prediction_timedelta, a member dim, level, latitude and longitude; select one value "
                       r"\(forecast.sel\(height=...\)\), or rename it: 'level' for a vertical one, one of "
                       r"realization, number, member if it indexes ensemble members"):  # fmt: skip
        evaluate(heights, truth, tmp_path / "b.nc", plots=False, progress=False)
    assert list(tmp_path.iterdir()) == []
    shuffled = forecast.isel(prediction_timedelta=[2, 0, 1])
    results = evaluate(shuffled, truth_path, tmp_path / "c.nc", plots=False, progress=False, regions=["global"])
    ordered = evaluate(forecast, truth_path, tmp_path / "d.nc", plots=False, progress=False, regions=["global"])
    assert results["lead_hours"].values.tolist() == [6.0, 12.0, 24.0]  # as the plots draw them
    xr.testing.assert_allclose(results["geopotential"], ordered["geopotential"])


def test_a_forecast_in_another_calendar_and_repeated_truth_times_are_named(tmp_path, truth_ds, perfect_path):
    """A noleap forecast was 'time must be datetime64, got dtype object'; a truth time given twice was
    'truth time has duplicate values', naming neither the calendar nor the time nor the fix."""
    forecast = xr.open_dataset(perfect_path).load()
    hours = (forecast["time"].values - forecast["time"].values[0]) / np.timedelta64(1, "h")
    forecast = forecast.assign_coords(time=("time", hours, {"units": "hours since 2020-01-01", "calendar": "noleap"}))
    forecast["time"].encoding = {}
    noleap = write_nc(forecast.drop_vars("valid_time", errors="ignore"), tmp_path / "noleap.nc")
    with pytest.raises(UserError, match=r"^the forecast's 'time' \(init time\) uses the calendar 'noleap' \(times "
                       r"such as 2020-01-01 00:00:00, .*convert the times to it$"):  # fmt: skip
        evaluate(noleap, truth_ds, tmp_path / "a.nc", plots=False, progress=False)
    twice = xr.concat([truth_ds.isel(time=[0, 1, 1]), truth_ds.isel(time=slice(2, None))], dim="time")
    repeated = format_time(truth_ds["time"].values[1])
    with pytest.raises(UserError, match=rf"^truth time {repeated} appears more than once \(1 repeated time\(s\) in "
                       r"all\); a score would count it twice: remove the repeated"):  # fmt: skip
        evaluate(perfect_path, twice, tmp_path / "b.nc", plots=False, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noleap.nc"]


def test_the_acc_warning_advises_on_the_climatology_that_was_used(tmp_path, truth_path, perfect_path, truth_ds):
    """With --climatology given, it advised giving one with --climatology or choosing the truth's years."""
    path = tmp_path / "clim.zarr"
    compute_climatology(truth_ds.drop_vars("written")).to_zarr(path, zarr_format=3, consolidated=True)
    # (computed from the truth, the advice names both options: test_outputs_netcdf_csv_table_and_plots)
    with pytest.warns(ClimatologyWarning, match=r"^ACC is not meaningful here \(climatology .*; give --climatology "
                      r"such a climatology$"):  # fmt: skip
        evaluate(perfect_path, truth_path, tmp_path / "m.nc", climatology=path, plots=False, progress=False)


def test_fields_are_scored_in_the_order_of_their_names(tmp_path, truth_path, truth_ds):
    """A NetCDF forecast lists its variables as written, zarr by name: the table, results and plots of
    one forecast came out in another order in each format."""
    forecast = perfect_forecast(truth_ds).drop_vars("valid_time")
    names = list(forecast.data_vars)
    backwards = forecast[sorted(names, reverse=True)]
    metrics = evaluate(backwards, truth_path, tmp_path / "m.nc", plots=False, progress=False)
    scored = [name for name in metrics.data_vars if "metric" in metrics[name].dims]
    assert scored == sorted(names) and sorted(names) != sorted(names, reverse=True)


def test_a_large_climatology_computed_in_memory_is_said(monkeypatch):
    """evaluate without --climatology computes a day-of-year climatology in memory: 1.6 GB at 91x180
    against 0.29 GB with a file, 12 GB a channel at 0.25 deg (a review measured it). Above a size
    the command says how to stream it instead."""
    from s2forecast.evaluation import inputs as inputs_module

    times = pd.date_range("2003-01-01", "2003-12-31T12", freq="12h")
    truth = xr.Dataset(
        {"t": (("time", "latitude", "longitude"), np.ones((times.size, 3, 4), np.float32), {"units": "K"})},
        coords={"time": times, "latitude": [60.0, 0.0, -60.0], "longitude": [0.0, 90.0, 180.0, 270.0]},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 366 x 2 x 12 float32s: below the size
        clim, attrs = inputs_module._climatology_from_truth(truth, None, ["t"], None)
    assert attrs["climatology_method"] == "dayofyear_hour" and clim["t"].shape == (366, 2, 3, 4)
    monkeypatch.setattr(inputs_module, "COMPUTED_CLIMATOLOGY_WARN_BYTES", 1000)
    said = r"^the climatology computed from the truth takes 38136 bytes in memory, several times that at its peak: "
    with pytest.warns(UserWarning, match=said + r"write it once with `s2forecast climatology TRUTH --out clim\.zarr`"):
        inputs_module._climatology_from_truth(truth, None, ["t"], None)
