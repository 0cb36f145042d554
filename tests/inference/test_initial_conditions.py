"""Forecasts from initial conditions a user brings: an ERA5 NetCDF file as the CDS delivers it,
at any date, normalized with the checkpoint's statistics (issue 15)."""

import hashlib

import numpy as np
import pandas as pd
import pytest
import pytorch_lightning as pl
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.data import compute_stats
from s2forecast.data.convert_era5 import convert_era5
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.datamodule import ERA5DataModule

LAT, LON = np.linspace(90.0, -90.0, 9), np.arange(16) * 22.5


def cds_t2m(path, times, seed=0):
    """2 m temperature (K) in the new CDS layout: (valid_time, latitude, longitude)."""
    rng = np.random.default_rng(seed)
    base = 288.0 - 30.0 * np.sin(np.radians(LAT))[:, None] ** 2 + np.zeros((9, 16))
    values = base[None] + rng.normal(0.0, 2.0, (len(times), 9, 16))
    ds = xr.Dataset({"t2m": (("valid_time", "latitude", "longitude"), values.astype(np.float32), {"units": "K"})},
                    coords={"valid_time": times, "latitude": LAT, "longitude": LON})  # fmt: skip
    ds.to_netcdf(path)
    return path


@pytest.fixture(scope="module")
def era5_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("ic")
    times = pd.date_range("2020-01-01", periods=12, freq="6h").values
    store = convert_era5([cds_t2m(root / "t2m.nc", times)], root / "era5.zarr", progress=False)
    compute_stats(store)
    data = ERA5DataModule(str(store), variables=["2m_temperature"], train_period=("2020-01-01", "2020-01-03"),
                          val_period=None, test_period=None, batch_size=2, num_workers=0)  # fmt: skip
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(model, datamodule=data)
    trainer.save_checkpoint(root / "model.ckpt")
    return root, store, root / "model.ckpt"


def run_rollout(ckpt, source, init, out, *extra):
    cli(["rollout", "--ckpt", str(ckpt), "--store", str(source), "--steps", "2", "--init-times", init,
         "--out", str(out), "--no-progress", *extra])  # fmt: skip
    return xr.open_dataset(out)


def test_netcdf_initial_conditions_forecast_as_the_store_does(era5_model, tmp_path, monkeypatch):
    root, store, ckpt = era5_model
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    from_store = run_rollout(ckpt, store, "2020-01-02T00", tmp_path / "a.nc")
    source = root / "t2m.nc"  # the file the store was converted from
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    from_file = run_rollout(ckpt, source, "2020-01-02T00", tmp_path / "b.nc")
    np.testing.assert_array_equal(from_file["2m_temperature"].values, from_store["2m_temperature"].values)
    assert from_file.attrs["initial_conditions"] == str(source)
    assert hashlib.sha256(source.read_bytes()).hexdigest() == digest  # read only
    assert list((tmp_path / "tmp").iterdir()) == []  # the converted store is gone


def test_initial_conditions_at_a_new_date_without_statistics(era5_model, tmp_path):
    root, store, ckpt = era5_model
    new = cds_t2m(tmp_path / "analysis_2031.nc", pd.date_range("2031-07-01", periods=1, freq="6h").values, seed=5)
    forecast = run_rollout(ckpt, new, "2031-07-01T00", tmp_path / "f.nc")
    assert pd.Timestamp(forecast["time"].values[0]) == pd.Timestamp("2031-07-01T00")
    assert np.isfinite(forecast["2m_temperature"].values).all()
    assert forecast["valid_time"].values[0, -1] == np.datetime64("2031-07-01T12:00", "ns")


def test_initial_conditions_missing_a_variable_is_one_line(era5_model, tmp_path, capsys):
    root, store, ckpt = era5_model
    ds = xr.open_dataset(cds_t2m(tmp_path / "x.nc", pd.date_range("2031-07-01", periods=1).values)).load()
    ds.rename(t2m="msl").assign(msl=lambda d: d.msl * 0 + 101000.0).to_netcdf(tmp_path / "msl.nc")
    with pytest.raises(SystemExit):
        run_rollout(ckpt, tmp_path / "msl.nc", "2031-07-01T00", tmp_path / "f.nc")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert len(err) == 1 and "2m_temperature" in err[0] and "not in the inputs" in err[0], err
    assert not (tmp_path / "f.nc").exists()


def test_errors_about_netcdf_initial_conditions_name_the_file(era5_model, tmp_path, capsys):
    root, store, ckpt = era5_model
    source = cds_t2m(tmp_path / "analysis.nc", pd.date_range("2031-07-01", periods=2, freq="6h").values)
    with pytest.raises(SystemExit):
        run_rollout(ckpt, source, "2031-07-02T00", tmp_path / "f.nc")
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"are not in the store {source} (converted) (it covers 2031-07-01T00 .." in err[0], err
    assert "s2forecast-initial-conditions-" not in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["analysis.nc"]
