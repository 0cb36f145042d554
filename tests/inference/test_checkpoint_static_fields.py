"""Static fields travel with the checkpoint (issue 15): a model trained with a land-sea mask
forecasts from initial conditions that hold only its time-dependent variables."""

import numpy as np
import pandas as pd
import pytest
import pytorch_lightning as pl
import torch
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.data import compute_stats
from s2forecast.data.convert_era5 import convert_era5
from s2forecast.data.fields import FieldDataset, SampleSpec
from s2forecast.models.forecaster import Forecaster
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.datamodule import ERA5DataModule

LAT, LON = np.linspace(90.0, -90.0, 9), np.arange(16) * 22.5


def land_sea_mask() -> np.ndarray:
    """(9, 16) a mask that is not symmetric, so a flipped or shifted copy would show."""
    mask = np.zeros((9, 16), np.float32)
    mask[2:5, 3:9] = 1.0
    mask[6, 12:15] = 0.4
    return mask


def cds_file(path, times, with_mask: bool, seed=0):
    """2 m temperature (K) in the CDS layout, with or without the land-sea mask (time-invariant)."""
    rng = np.random.default_rng(seed)
    base = 288.0 - 30.0 * np.sin(np.radians(LAT))[:, None] ** 2 + np.zeros((9, 16))
    values = base[None] + rng.normal(0.0, 2.0, (len(times), 9, 16))
    variables = {"t2m": (("valid_time", "latitude", "longitude"), values.astype(np.float32), {"units": "K"})}
    if with_mask:
        mask = np.repeat(land_sea_mask()[None], len(times), axis=0)
        variables["lsm"] = (("valid_time", "latitude", "longitude"), mask, {"units": "1"})
    xr.Dataset(variables, coords={"valid_time": times, "latitude": LAT, "longitude": LON}).to_netcdf(path)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    times = pd.date_range("2020-01-01", periods=12, freq="6h").values
    store = convert_era5([cds_file(root / "era5.nc", times, with_mask=True)], root / "era5.zarr", progress=False)
    compute_stats(store)
    data = ERA5DataModule(str(store), variables=["2m_temperature"], train_period=("2020-01-01", "2020-01-03"),
                          val_period=None, test_period=None, batch_size=2, num_workers=0)  # fmt: skip
    assert data.static_channels == ("land_sea_mask",)
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(model, datamodule=data)
    trainer.save_checkpoint(root / "model.ckpt")
    return root, store, root / "model.ckpt"


def rollout(ckpt, source, out, init="2020-01-02T00", *extra):
    cli(["rollout", "--ckpt", str(ckpt), "--store", str(source), "--steps", "2", "--init-times", init,
         "--out", str(out), "--no-progress", *extra])  # fmt: skip
    return xr.open_dataset(out)


def test_checkpoint_carries_the_training_static_fields(trained):
    root, store, ckpt = trained
    state = torch.load(ckpt, weights_only=True)
    np.testing.assert_array_equal(state["static_fields"]["land_sea_mask"].numpy(), land_sea_mask())
    model = Forecaster.from_checkpoint(ckpt)
    assert list(model.static_fields) == ["land_sea_mask"]
    np.testing.assert_array_equal(model.static_fields["land_sea_mask"].numpy(), land_sea_mask())


def test_initial_conditions_without_static_fields_forecast_as_the_store(trained, tmp_path):
    root, store, ckpt = trained
    from_store = rollout(ckpt, store, tmp_path / "a.nc")
    bare = cds_file(tmp_path / "t2m_only.nc", pd.date_range("2020-01-01", periods=12, freq="6h").values, False)
    from_file = rollout(ckpt, bare, tmp_path / "b.nc")  # the same temperatures, no mask in the file
    np.testing.assert_array_equal(from_file["2m_temperature"].values, from_store["2m_temperature"].values)


def test_the_checkpoint_static_fields_are_used_not_the_store_ones(trained, tmp_path):
    """A store whose mask differs forecasts as the checkpoint's mask does (the model's inputs are
    the fields it was trained with)."""
    root, store, ckpt = trained
    other = cds_file(tmp_path / "other.nc", pd.date_range("2020-01-01", periods=12, freq="6h").values, True)
    ds = xr.open_dataset(other).load()
    ds["lsm"] = 1.0 - ds["lsm"]
    ds.to_netcdf(tmp_path / "flipped.nc")
    np.testing.assert_array_equal(
        rollout(ckpt, tmp_path / "flipped.nc", tmp_path / "a.nc")["2m_temperature"].values,
        rollout(ckpt, store, tmp_path / "b.nc")["2m_temperature"].values,
    )


def test_old_checkpoint_without_static_fields_needs_them_in_the_store(trained, tmp_path, capsys):
    root, store, ckpt = trained
    state = torch.load(ckpt, weights_only=True)
    del state["static_fields"]
    old = tmp_path / "old.ckpt"
    torch.save(state, old)
    assert Forecaster.from_checkpoint(old).static_fields == {}
    rollout(old, store, tmp_path / "ok.nc")  # the store has the mask: fine
    bare = cds_file(tmp_path / "t2m_only.nc", pd.date_range("2020-01-01", periods=12, freq="6h").values, False)
    with pytest.raises(SystemExit):
        rollout(old, bare, tmp_path / "f.nc")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "land_sea_mask" in err[0], err
    assert not (tmp_path / "f.nc").exists()


def test_given_static_field_on_another_grid_is_refused(trained):
    root, store, ckpt = trained
    spec = SampleSpec(("2m_temperature",), None, ("land_sea_mask",), (), 1, 6, 0)
    with pytest.raises(ValueError, match=r"static field land_sea_mask has shape \(4, 8\), but .* 9x16 grid"):
        FieldDataset(store, spec, given_static={"land_sea_mask": np.zeros((4, 8))})
    dataset = FieldDataset(store, spec, given_static={"land_sea_mask": np.ones((9, 16))})
    np.testing.assert_array_equal(dataset.physical_static("land_sea_mask"), np.ones((9, 16), np.float32))


def test_other_grid_initial_conditions_file_gives_its_own_static_fields(trained, tmp_path, capsys):
    """On another grid the checkpoint's mask does not apply: the file's is needed, and the conversion
    left it out (the checkpoint carries one): 'static fields ['land_sea_mask'] are not in ...'. Without
    --other-grid the refusal blamed the file's mask ('static field land_sea_mask has shape (9, 16), but
    ... is on a 17x32 grid': the checkpoint's shape, a review found) instead of naming the grids."""
    _, _, ckpt = trained
    lat, lon = np.linspace(90.0, -90.0, 17), np.arange(32) * 11.25
    times = pd.date_range("2020-01-01", periods=6, freq="6h").values
    rng = np.random.default_rng(3)
    t2m = 288.0 - 30.0 * np.sin(np.radians(lat))[None, :, None] ** 2 + rng.normal(0.0, 2.0, (6, 17, 32))
    mask = np.repeat((rng.random((1, 17, 32)) > 0.6).astype(np.float32), 6, axis=0)
    dims = ("valid_time", "latitude", "longitude")
    fields = {"t2m": (dims, t2m.astype(np.float32), {"units": "K"}), "lsm": (dims, mask, {"units": "1"})}
    xr.Dataset(fields, coords={"valid_time": times, "latitude": lat, "longitude": lon}).to_netcdf(tmp_path / "fine.nc")
    with pytest.raises(SystemExit):
        rollout(ckpt, tmp_path / "fine.nc", tmp_path / "f.nc", "2020-01-01T06")
    assert capsys.readouterr().err.strip().splitlines() == [
        "s2forecast rollout: error: store grid Grid(nlat=17, nlon=32, kind='equiangular') differs from the "
        "checkpoint's Grid(nlat=9, nlon=16, kind='equiangular'); pass --other-grid to run the model on the store's grid"
    ]
    forecast = rollout(ckpt, tmp_path / "fine.nc", tmp_path / "f.nc", "2020-01-01T06", "--other-grid")
    assert forecast["2m_temperature"].shape[-2:] == (17, 32) and np.isfinite(forecast["2m_temperature"]).all()


def test_other_grid_on_the_training_grid_changes_nothing(trained, tmp_path):
    """--other-grid decided on the flag, not on the grid: on the training grid it took a file's or a
    store's own mask instead of the checkpoint's (1.72 K apart in a review) and refused a file without
    one ('selected variables ['land_sea_mask'] are not in the inputs')."""
    root, store, ckpt = trained
    times = pd.date_range("2020-01-01", periods=12, freq="6h").values
    flipped = xr.open_dataset(cds_file(tmp_path / "other.nc", times, True)).load()
    flipped["lsm"] = 1.0 - flipped["lsm"]
    flipped.to_netcdf(tmp_path / "flipped.nc")
    flipped_store = convert_era5([tmp_path / "flipped.nc"], tmp_path / "flipped.zarr", progress=False)
    bare = cds_file(tmp_path / "t2m_only.nc", times, False)
    for n, source in enumerate((tmp_path / "flipped.nc", flipped_store, bare)):
        plain = rollout(ckpt, source, tmp_path / f"plain{n}.nc")["2m_temperature"].values
        other = rollout(ckpt, source, tmp_path / f"other{n}.nc", "2020-01-02T00", "--other-grid")
        np.testing.assert_array_equal(other["2m_temperature"].values, plain, err_msg=str(source))
