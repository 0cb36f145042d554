"""``evaluate`` on real ERA5 (tests/data sample) with ensembles, regions and the CF results file."""

import warnings
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.evaluation.evaluate import PlotWarning, evaluate, format_table
from s2forecast.evaluation.metrics import METRICS
from s2forecast.evaluation.report import open_results

SAMPLE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"
LEADS = pd.to_timedelta([8, 15], unit="h")  # the sample's times: 2026-03-25T21, 03-26T05, 03-26T12


def wb2_weights(lat):
    order = np.argsort(lat)
    ascending = np.deg2rad(lat[order])
    bounds = np.concatenate([[-np.pi / 2], (ascending[1:] + ascending[:-1]) / 2, [np.pi / 2]])
    weights = np.empty(lat.size)
    weights[order] = np.sin(bounds[1:]) - np.sin(bounds[:-1])
    return weights


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    with xr.open_dataset(SAMPLE) as ds:
        data = ds[["t2m"]].load()
    data = data.rename(valid_time="time", t2m="2m_temperature").drop_vars(["number", "expver"])
    data["2m_temperature"] = data["2m_temperature"].astype(np.float64)
    data["2m_temperature"].attrs = {"units": "K"}
    data["land_sea_mask"] = (data["2m_temperature"].isel(time=0, drop=True) > 280.0).astype(np.float64)  # a mask
    data["written"] = ("time", np.ones(data.sizes["time"], dtype=bool))
    data.attrs = {"grid_kind": "equiangular", "s2forecast_complete": "true"}
    path = tmp_path_factory.mktemp("truth") / "era5.zarr"
    data.to_zarr(path, zarr_format=3, consolidated=True)
    return path, data.drop_vars(["written"])


def ensemble(data, m, name="number"):
    """(time=1, prediction_timedelta, member, lat, lon): the init-time field shifted in longitude per member."""
    field = data["2m_temperature"].isel(time=0).values
    members = np.stack([np.roll(field, k, axis=-1) + 0.5 * k for k in range(m)])
    values = np.broadcast_to(members, (1, LEADS.size, *members.shape)).copy()
    dims = ("time", "prediction_timedelta", name, "latitude", "longitude")
    coords = {"time": data.time.values[:1], "prediction_timedelta": LEADS, name: np.arange(m),
              "latitude": data.latitude, "longitude": data.longitude}  # fmt: skip
    return xr.Dataset({"2m_temperature": (dims, values, {"units": "K"})}, coords=coords)


@pytest.mark.parametrize("name", ["realization", "number", "member"])
def test_ensemble_scores_match_numpy(tmp_path, truth, name):
    path, data = truth
    m = 4
    forecast = ensemble(data, m, name)
    results = evaluate(forecast, path, tmp_path / "m.nc", plots=False, progress=False, regions=["global", "europe"])
    lat = data.latitude.values
    w = wb2_weights(lat)[:, None] * np.ones(data.sizes["longitude"])
    ens = forecast["2m_temperature"].values[0, 1]  # lead 15 h
    o = data["2m_temperature"].values[2]
    pairs = sum(np.abs(ens[i] - ens[j]) for i in range(m) for j in range(m))
    crps = np.sum(w * (np.mean(np.abs(ens - o), axis=0) - pairs / (2 * m * (m - 1)))) / w.sum()
    spread = np.sqrt(np.sum(w * np.var(ens, axis=0, ddof=1)) / w.sum())
    rmse = np.sqrt(np.sum(w * (ens.mean(axis=0) - o) ** 2) / w.sum())
    got = results["2m_temperature"].sel(source="forecast", region="global").isel(lead_time=1)
    assert got.sel(metric="crps").item() == pytest.approx(crps, rel=1e-10)
    assert got.sel(metric="spread").item() == pytest.approx(spread, rel=1e-10)
    assert got.sel(metric="ensemble_mean_rmse").item() == pytest.approx(rmse, rel=1e-10)
    assert got.sel(metric="rmse").item() == pytest.approx(rmse, rel=1e-10)  # deterministic scores: ensemble mean
    assert got.sel(metric="spread_skill").item() == pytest.approx(spread / rmse, rel=1e-10)
    # the baselines are one-member ensembles (WB2): CRPS = mean absolute error, spread 0
    persistence = results["2m_temperature"].sel(source="persistence", region="global").isel(lead_time=1)
    o0 = data["2m_temperature"].values[0]
    assert persistence.sel(metric="crps").item() == pytest.approx(np.sum(w * np.abs(o0 - o)) / w.sum(), rel=1e-10)
    assert persistence.sel(metric="spread").item() == 0.0 and persistence.sel(metric="spread_skill").item() == 0.0
    assert persistence.sel(metric="ensemble_mean_rmse").item() == persistence.sel(metric="rmse").item() > 0
    hist = results["2m_temperature_rank_histogram"].sel(region="global").isel(lead_time=1).values
    below, tied = (ens < o).sum(axis=0), (ens == o).sum(axis=0)  # float32 ERA5 values do tie: shared equally
    assert tied.any()
    share = [((r >= below) & (r <= below + tied)) / (tied + 1.0) for r in range(m + 1)]
    expected = np.array([np.sum(w * share[r]) for r in range(m + 1)]) / w.sum()
    np.testing.assert_allclose(hist, expected, rtol=1e-10)
    assert results.attrs["members"] == m and results.attrs["ensemble_dim"] == name
    assert "CRPS" in format_table(results)


def test_single_member_ensemble_is_refused(tmp_path, truth):
    path, data = truth
    with pytest.raises(ValueError, match="member dim 'number' has 1 member; CRPS and spread need at least 2"):
        evaluate(ensemble(data, 1), path, tmp_path / "m.nc", plots=False, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_variable_without_the_member_dim_is_one_line(tmp_path, truth):
    """Scored as members, its latitude axis was taken for the members' axis: an internal error."""
    path, data = truth
    forecast = ensemble(data, 3)
    forecast["deterministic_2m_temperature"] = forecast["2m_temperature"].isel(number=0, drop=True)
    with pytest.raises(ValueError) as error:
        evaluate(forecast, path, tmp_path / "m.nc", plots=False, progress=False)
    assert str(error.value) == (
        "forecast variable(s) ['deterministic_2m_temperature'] have no 'number' dim but the others do: an "
        "ensemble's fields all have members; score them apart (--variables without them, or "
        "forecast[['deterministic_2m_temperature']] as a deterministic forecast)"
    )
    assert list(tmp_path.iterdir()) == []
    # a field left out of the scores may lack the members (an ensemble mean beside the members)
    results = evaluate(forecast, path, tmp_path / "m.nc", plots=False, progress=False, variables=["2m_temperature"])
    assert "2m_temperature" in results and "deterministic_2m_temperature" not in results


def test_the_ensemble_metrics_refuse_one_member_in_python_too(truth):
    """``METRICS[...].compute`` gave NaN CRPS and spread for one member where evaluate refuses it; the
    ensemble mean's RMSE of one member is that member's."""
    _, data = truth
    one = ensemble(data, 1)["2m_temperature"]
    observed = data["2m_temperature"]  # by valid time
    for name in ("crps", "spread", "spread_skill"):
        with pytest.raises(ValueError, match="member dim 'number' has 1 member; CRPS and spread need at least 2"):
            METRICS[name].compute(one, observed)
    deterministic = one.isel(number=0, drop=True)
    xr.testing.assert_allclose(METRICS["rmse"].compute(one, observed), METRICS["rmse"].compute(deterministic, observed))


def test_regions_through_evaluate_and_land(tmp_path, truth):
    path, data = truth
    forecast = ensemble(data, 2).isel(number=0, drop=True)  # deterministic
    box = "30,60,-20,40"  # wraps through 0 E
    results = evaluate(forecast, path, tmp_path / "m.nc", plots=False, progress=False)
    assert "global_land" in results["region"].values.tolist()  # the store has a land-sea mask
    results = evaluate(forecast, path, tmp_path / "b.nc", plots=False, progress=False, regions=[box, "tropics_land"])
    lat, lon = data.latitude.values, data.longitude.values
    f, o = forecast["2m_temperature"].values[0, 0], data["2m_temperature"].values[1]
    rows = (lat >= 30) & (lat <= 60)
    cols = (lon >= 340) | (lon <= 40)
    w = wb2_weights(lat)[rows][:, None] * np.ones(cols.sum())
    expected = np.sqrt(np.sum(w * (f - o)[np.ix_(rows, cols)] ** 2) / w.sum())
    got = results["2m_temperature"].sel(metric="rmse", source="forecast", region=box).isel(lead_time=0).item()
    assert got == pytest.approx(expected, rel=1e-10)
    land = data["land_sea_mask"].values * (np.abs(lat) <= 20)[:, None] * wb2_weights(lat)[:, None]
    expected = np.sum(land * (f - o)) / land.sum()
    got = results["2m_temperature"].sel(metric="bias", source="forecast", region="tropics_land").isel(lead_time=0)
    assert got.item() == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize(
    ("regions", "message"),
    [
        (["europa"], "region 'europa' is neither a standard region"),
        (["60,30,0,10"], "lat0 60 > lat1 30; give the southern latitude first"),
        (["global", "global"], r"region\(s\) \['global'\] given twice"),
    ],
)
def test_bad_regions_are_refused_before_writing(tmp_path, truth, regions, message):
    path, data = truth
    forecast = ensemble(data, 2)
    with pytest.raises(ValueError, match=message):
        evaluate(forecast, path, tmp_path / "m.nc", plots=False, progress=False, regions=regions)
    assert list(tmp_path.iterdir()) == []


def test_results_file_is_cf(tmp_path, truth):
    """What cfchecker checks that applies here (it needs the udunits2 C library, not installable from pip)."""
    path, data = truth
    out = tmp_path / "m.nc"
    evaluate(ensemble(data, 3), path, out, plots=False, progress=False, regions=["global", "europe"])
    with netCDF4.Dataset(out) as nc:
        assert nc.Conventions == "CF-1.8" and " evaluate(" in nc.history
        for name, var in nc.variables.items():
            if var.dimensions == (name,):  # CF coordinate variables: numeric, monotonic
                assert np.issubdtype(var.dtype, np.number), name
                assert np.all(np.diff(var[:]) > 0), name
        for dim in ("metric", "source", "region"):  # string dims: CF 6.1 char label variables of their name
            label = nc.variables[dim]
            assert label.dtype == np.dtype("S1") and label.dimensions[0] == dim and label.ndim == 2
        field = nc.variables["2m_temperature"]
        assert set(field.coordinates.split()) >= {"metric", "source", "region"}
        assert field.metric_units.startswith("rmse: K; acc: 1; bias: K; ensemble_mean_rmse: K; crps: K")
        assert nc.variables["lead_time"].units == "hours"
        assert nc.variables["lead_time"].standard_name == "forecast_period"
        assert nc.variables["2m_temperature_rank_histogram"].units == "1"
        assert nc.variables["n_init_times"].units == "1"
    results = open_results(out)
    assert results["metric"].values.tolist()[:3] == ["rmse", "acc", "bias"]
    assert results["region"].values.tolist() == ["global", "europe"]
    np.testing.assert_array_equal(results["lead_time"].values, LEADS.values)
    assert np.isfinite(results["2m_temperature"].sel(metric="crps", source="forecast").values).all()


def test_cli_regions_option_and_one_line_errors(tmp_path, truth, capsys):
    from s2forecast.cli import main

    path, data = truth
    forecast = tmp_path / "f.nc"
    ensemble(data, 3).to_netcdf(forecast)
    out = tmp_path / "m.nc"
    args = ["evaluate", "--forecast", str(forecast), "--truth", str(path), "--out", str(out), "--no-plots"]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--regions", "europa"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "region 'europa' is neither a standard region" in err, err
    assert not out.exists()
    args += ["--no-progress", "--regions", "europe", "--regions=-10,10,350,10"]  # '-' starts an option otherwise
    main(args)
    assert "CRPS" in capsys.readouterr().out
    results = open_results(out)
    assert results["region"].values.tolist() == ["europe", "-10,10,350,10"]
    assert results.attrs["history"].endswith(" s2forecast " + " ".join(args))  # the whole command line
    assert "--regions=-10,10,350,10" in results.attrs["history"]


@pytest.mark.slow  # about 9 s
def test_spectra_and_scorecard_in_the_results(tmp_path, truth, monkeypatch):
    """The results file carries the spectra of forecast (its members' mean power) and truth at the map
    leads, equal to evaluation.spectra on the same fields; the scorecard cells are the relative
    RMSE differences of the results; every plot kind is written, an ensemble's included."""
    from s2forecast.evaluation import plots, spectra
    from s2forecast.evaluation.report import scorecard

    path, data = truth
    forecast = ensemble(data, 3)
    labels = []
    draw_maps = plots.plot_maps
    monkeypatch.setattr(plots, "plot_maps", lambda *a, **k: labels.append(k["forecast_label"]) or draw_maps(*a, **k))
    draw_scores = plots.plot_scores
    monkeypatch.setattr(plots, "plot_scores",
                        lambda *a, **k: labels.append(k["forecast_label"]) or draw_scores(*a, **k))  # fmt: skip
    out = tmp_path / "m.nc"
    evaluate(forecast, path, out, progress=False, regions=["global", "europe"])
    results = open_results(out)
    sh = results["2m_temperature_sh_power"]
    assert sh.dims == ("spectrum_source", "spectrum_lead_time", "degree")
    np.testing.assert_array_equal(results["spectrum_lead_time"].values, LEADS.values)
    members = spectra.spherical_harmonic_power(forecast["2m_temperature"]).mean(["time", "number"])
    np.testing.assert_allclose(sh.sel(spectrum_source="forecast").values, members.values)
    valid = data["2m_temperature"].sel(time=data.time.values[0] + LEADS.values)
    np.testing.assert_allclose(sh.sel(spectrum_source="truth").values, spectra.spherical_harmonic_power(valid).values)
    zonal = results["2m_temperature_zonal_power"].sel(spectrum_source="truth")
    expected = spectra.zonal_spectrum_band(spectra.zonal_energy_spectrum(valid))
    np.testing.assert_allclose(zonal.values, expected.values)
    cells, rows, hours = scorecard(results, "persistence")
    assert rows == ["T2M global", "T2M europe"] and hours.tolist() == [8.0, 15.0]
    rmse = results["2m_temperature"].sel(metric="rmse", region="europe")
    ours, theirs = rmse.sel(source="forecast").values, rmse.sel(source="persistence").values
    np.testing.assert_allclose(cells[1], 100 * (ours - theirs) / theirs)
    plots = sorted(p.name for p in (tmp_path / "m_plots").iterdir() if p.suffix == ".png")
    assert plots == ["2m_temperature_ensemble.png", "2m_temperature_maps.png", "2m_temperature_rank_histogram.png",
                     "2m_temperature_scores.png", "2m_temperature_spectra.png", "scorecard_climatology.png",
                     "scorecard_persistence.png"]  # fmt: skip
    assert labels == ["ensemble mean"] * 2  # the scores and maps say what they show


def test_maps_draw_the_land_sea_mask_as_coastlines(tmp_path, truth):
    from s2forecast.evaluation import plots

    _, data = truth
    field = data["2m_temperature"].isel(time=[1, 2]).rename(time="prediction_timedelta")
    field = field.assign_coords(prediction_timedelta=LEADS.values)
    plain = plots.plot_maps(field, field, tmp_path / "plain.png", title="T2M")
    coast = plots.plot_maps(field, field, tmp_path / "coast.png", title="T2M", land_sea_mask=data["land_sea_mask"])
    assert plain.read_bytes() != coast.read_bytes()


def test_ensemble_spectra_and_rank_histogram_in_the_csv(tmp_path, truth):
    """An ensemble's spectra average its members' power; its rank histogram is in the CSV
    (its plots: test_spectra_and_scorecard_in_the_results, tests/inference/test_ic_ensembles.py)."""
    from s2forecast.evaluation.report import compute_spectra

    path, data = truth
    forecast = ensemble(data, 3)
    anomaly = forecast - forecast.mean("number")
    forecast = forecast + anomaly * xr.DataArray([0.0, 0.5, 1.0], dims="number")  # members of different power
    out = tmp_path / "m.nc"
    results = evaluate(forecast, path, out, plots=False, progress=False, regions=["global"])

    csv = pd.read_csv(out.with_suffix(".csv"))
    rows = csv[csv.metric == "rank_histogram"].sort_values(["lead_hours", "rank"])
    hist = results["2m_temperature_rank_histogram"].sel(region="global")
    np.testing.assert_allclose(rows.value, hist.values.ravel(), rtol=1e-12)
    assert rows["rank"].tolist() == [0, 1, 2, 3] * LEADS.size and (rows.units == "1").all()

    # the spectra are the mean of the members' spectra, not one member's
    members = [compute_spectra(forecast.isel(number=[j]).squeeze("number", drop=True), data, ["2m_temperature"],
                               LEADS.values)["2m_temperature_sh_power"] for j in range(3)]  # fmt: skip
    got = results["2m_temperature_sh_power"].sel(spectrum_source="forecast").values
    np.testing.assert_allclose(got, np.mean([m.sel(spectrum_source="forecast").values for m in members], axis=0),
                               rtol=1e-10)  # fmt: skip
    assert not np.allclose(got, members[0].sel(spectrum_source="forecast").values, rtol=1e-3)
    assert "members' mean power" in results.attrs["spectra"]


def test_a_member_nan_everywhere_at_any_init_time_is_refused(tmp_path, swe_store):
    """One blown-up member at the 2nd of 4 init times (the check before scoring looks at the first, middle
    and last only) left no point of that init time: every forecast score of every lead was n/a, exit 0."""
    truth = xr.open_zarr(swe_store)
    times = truth["time"].values[:4]
    field = truth["vorticity"].values[1:5]  # the truth 1 h after each init time
    values = np.stack([field, field + 1e-6], axis=1)[:, None]  # (time, lead, member, lat, lon)
    values[1, :, 0] = np.nan
    forecast = xr.Dataset(
        {"vorticity": (("time", "prediction_timedelta", "realization", "latitude", "longitude"), values,
                       {"units": "s**-1"})},
        coords={"time": times, "prediction_timedelta": [np.timedelta64(1, "h")], "latitude": truth["latitude"],
                "longitude": truth["longitude"]},
    )  # fmt: skip
    second = str(times[1])[:13]
    forecast = forecast.assign_coords(realization=[1, 2])  # named by its label, not its position
    with pytest.raises(ValueError, match=rf"^forecast variable vorticity is NaN everywhere at init time {second} "
                       r"lead 1 h \(realization=1\): every score of that lead would be NaN"):  # fmt: skip
        evaluate(forecast, swe_store, tmp_path / "m.nc", plots=False, progress=False)
    # each member finite over half the sphere, never both at one point: the points are left out all the same
    values[1, :, 0] = field[1]
    west = np.arange(values.shape[-1]) < values.shape[-1] // 2
    values[1, :, 0][..., west] = np.nan
    values[1, :, 1][..., ~west] = np.nan
    with pytest.raises(ValueError, match=rf"^forecast variable vorticity is NaN everywhere in all members at once at "
                       rf"init time {second} lead 1 h: every score"):  # fmt: skip
        evaluate(forecast.copy(data={"vorticity": values}), swe_store, tmp_path / "m.nc", plots=False, progress=False)
    # at the first init time, the check before scoring said the whole variable was NaN, naming no member
    values[1] = field[1][None, None]
    values[0, :, 1] = np.nan
    first = str(times[0])[:13]
    with pytest.raises(ValueError, match=rf"^forecast variable vorticity is NaN everywhere at init time {first} "
                       r"lead 1 h \(realization=2\): every score of that lead would be NaN"):  # fmt: skip
        evaluate(forecast.copy(data={"vorticity": values}), swe_store, tmp_path / "m.nc", plots=False, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_rank_histogram_alone_and_the_ensemble_mean_rmse_are_defined():
    """metrics=("rank_histogram",) scored everything, then failed building the table of scalar scores
    (a traceback); ensemble_mean_rmse had no definition in the results."""
    from s2forecast.evaluation.config import EvaluationConfig

    with pytest.raises(ValueError, match=r"^metrics \['rank_histogram'\] hold no score of one number per lead; add "):
        EvaluationConfig(metrics=("rank_histogram",))
    assert "EnsembleMeanMSE" in METRICS["ensemble_mean_rmse"].definition


def test_a_deterministic_forecast_scored_with_the_ensemble_metrics_keeps_its_plots(tmp_path, swe_store):
    """Scored as a one-member ensemble, as documented, but its plots read the ensemble's 'members'
    attribute: a KeyError dropped every plot, with a PlotWarning (a review found it)."""
    from s2forecast.evaluation.config import DETERMINISTIC, ENSEMBLE, EvaluationConfig

    truth = xr.open_zarr(swe_store)
    forecast = xr.Dataset(
        {"vorticity": (("time", "prediction_timedelta", "latitude", "longitude"),
                       truth["vorticity"].values[1:4, None] * 1.1, {"units": "s**-1"})},
        coords={"time": truth["time"].values[:3], "prediction_timedelta": [np.timedelta64(1, "h")],
                "latitude": truth["latitude"], "longitude": truth["longitude"]},
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlotWarning)
        results = evaluate(forecast, swe_store, tmp_path / "m.nc", progress=False,
                           config=EvaluationConfig(metrics=DETERMINISTIC + ENSEMBLE, regions=("global",)))  # fmt: skip
    names = [Path(path).name for path in results.attrs["plot_files"]]
    assert "vorticity_scores.png" in names and not [name for name in names if "ensemble" in name]
