"""Ensemble forecasts in evaluate (issue 16): fair CRPS, spread, spread-skill and the ensemble
mean's scores, against numpy written from the definitions, on ensembles made from real ERA5."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from test_regions import wb2_area_weights

from s2forecast.cli import main as cli
from s2forecast.data.convert_era5 import convert_era5
from s2forecast.evaluation.evaluate import evaluate

ERA5_SLICE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"
M = 4


@pytest.fixture(scope="module")
def era5(tmp_path_factory):
    root = tmp_path_factory.mktemp("ensemble")
    store = convert_era5([ERA5_SLICE], root / "era5.zarr", progress=False)
    truth = xr.open_zarr(store)["2m_temperature"].load()
    t0 = truth["time"].values[0]
    leads = truth["time"].values[1:] - t0
    rng = np.random.default_rng(1)
    members = truth.values[0][None, None, None] + rng.normal(0, 2.0, (1, leads.size, M, *truth.shape[1:]))
    return root, store, truth, t0, leads, members


def ensemble_file(path, t0, leads, members, truth, dim):
    ds = xr.Dataset(
        {"2m_temperature": (("time", "prediction_timedelta", dim, "latitude", "longitude"), members.astype(np.float32),
                            {"units": "K"})},
        coords={"time": [t0], "prediction_timedelta": leads, dim: np.arange(members.shape[2]),
                "latitude": truth["latitude"].values, "longitude": truth["longitude"].values},
    )  # fmt: skip
    ds.to_netcdf(path)
    return path


@pytest.mark.parametrize("dim", ["realization", "number", "member"])
def test_ensemble_scores_match_their_definitions(era5, tmp_path, dim):
    root, store, truth, t0, leads, members = era5
    forecast = ensemble_file(tmp_path / "ens.nc", t0, leads, members, truth, dim)
    metrics = evaluate(forecast, store, tmp_path / "m.nc", plots=False, progress=False)
    assert metrics["metric"].values.tolist() == [
        "rmse", "acc", "bias", "ensemble_mean_rmse", "crps", "spread", "spread_skill"
    ]  # fmt: skip
    lat = truth["latitude"].values
    w = wb2_area_weights(lat)[:, None] * np.ones(truth.sizes["longitude"])
    x = members.astype(np.float32).astype(np.float64)
    for k in range(leads.size):
        y = truth.values[k + 1].astype(np.float64)
        ens = x[0, k]  # (M, lat, lon)
        skill = sum(np.abs(ens[i] - y) for i in range(M)) / M
        pairs = sum(np.abs(ens[i] - ens[j]) for i in range(M) for j in range(M))
        crps = (w * (skill - pairs / (2 * M * (M - 1)))).sum() / w.sum()
        variance = sum((ens[i] - ens.mean(0)) ** 2 for i in range(M)) / (M - 1)
        spread = np.sqrt((w * variance).sum() / w.sum())
        rmse = np.sqrt((w * (ens.mean(0) - y) ** 2).sum() / w.sum())
        got = metrics["2m_temperature"].sel(source="forecast", region="global").isel(lead_time=k)
        np.testing.assert_allclose(float(got.sel(metric="crps")), crps, rtol=1e-6)
        np.testing.assert_allclose(float(got.sel(metric="spread")), spread, rtol=1e-6)
        np.testing.assert_allclose(float(got.sel(metric="rmse")), rmse, rtol=1e-6)
        np.testing.assert_allclose(float(got.sel(metric="spread_skill")), spread / rmse, rtol=1e-6)
        persistence = metrics["2m_temperature"].sel(source="persistence", region="global").isel(lead_time=k)
        mae = (w * np.abs(truth.values[0].astype(np.float64) - y)).sum() / w.sum()
        np.testing.assert_allclose(float(persistence.sel(metric="crps")), mae, rtol=1e-6)  # CRPS of one forecast
        assert float(persistence.sel(metric="spread")) == 0.0


def test_single_member_ensemble_is_one_line(era5, tmp_path, capsys):
    root, store, truth, t0, leads, members = era5
    forecast = ensemble_file(tmp_path / "one.nc", t0, leads, members[:, :, :1], truth, "number")
    with pytest.raises(SystemExit):
        cli(["evaluate", "--forecast", str(forecast), "--truth", str(store), "--out", str(tmp_path / "m.nc"),
             "--no-plots", "--no-progress"])  # fmt: skip
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert (
        len(err) == 1 and "the forecast's member dim 'number' has 1 member; CRPS and spread need at least 2" in err[0]
    )
    assert not (tmp_path / "m.nc").exists()
