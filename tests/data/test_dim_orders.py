"""Stores in every dim order and latitude direction researchers have (issues 27, 28): WeatherBench2's
public ERA5 stores are (time, level, longitude, latitude), its 0.25 degree ones north -> south and
the others south -> north; ARCO-ERA5 is (time, level, latitude, longitude) north -> south. Every
reader puts them in the model's order at the boundary (``store.to_model_order``): statistics,
training and rollout (from a store, and from a NetCDF file in WB2's names and order) give what the
canonical store gives."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import pytorch_lightning as pl
import torch
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.data import compute_stats
from s2forecast.data.fields import FieldDataset, SampleSpec
from s2forecast.data.stats import load_stats
from s2forecast.data.store import open_store
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.datamodule import ERA5DataModule

CANONICAL = ("time", "level", "latitude", "longitude")
# (dim order, latitude direction): WB2 0.25 deg, WB2 coarser grids, the canonical dims south -> north,
# and a permutation nobody writes on purpose (time not first)
LAYOUTS = [
    pytest.param(("time", "level", "longitude", "latitude"), "north", id="wb2-0.25deg"),
    pytest.param(("time", "level", "longitude", "latitude"), "south", id="wb2-coarse"),
    pytest.param(CANONICAL, "south", id="ascending"),
    pytest.param(("longitude", "level", "time", "latitude"), "south", id="permuted"),
]
VARIABLES = ["geopotential", "temperature", "2m_temperature"]
LEVELS = [500, 850]
INIT = "2020-01-02T06"


def era5_like(times: int = 12) -> xr.Dataset:
    """A tiny ERA5 in the canonical layout: 8x16 cell-centred grid north -> south, two levels,
    plausible values (store.VARIABLES units), a land-sea mask."""
    rng = np.random.default_rng(0)
    lat = np.linspace(78.75, -78.75, 8)
    lon = np.arange(16) * 22.5
    time = pd.date_range("2020-01-01", periods=times, freq="6h").values
    shape3, shape2 = (times, 2, 8, 16), (times, 8, 16)
    z = np.array([5500.0, 1450.0])[None, :, None, None] * 9.80665 + rng.normal(0, 100, shape3)
    t = np.array([252.0, 275.0])[None, :, None, None] + rng.normal(0, 3, shape3)
    t2m = 288.0 - 30.0 * np.sin(np.radians(lat))[None, :, None] ** 2 + rng.normal(0, 2, shape2)
    lsm = (rng.random((8, 16)) > 0.7).astype(np.float32)
    return xr.Dataset(
        {
            "geopotential": (CANONICAL, z.astype(np.float32), {"units": "m**2 s**-2"}),
            "temperature": (CANONICAL, t.astype(np.float32), {"units": "K"}),
            "2m_temperature": (("time", "latitude", "longitude"), t2m.astype(np.float32), {"units": "K"}),
            "land_sea_mask": (("latitude", "longitude"), lsm, {"units": "1"}),
        },
        coords={"time": time, "level": np.array(LEVELS, np.int64), "latitude": lat, "longitude": lon},
    )


def in_layout(ds: xr.Dataset, dims: tuple[str, ...], latitude: str) -> xr.Dataset:
    """``ds`` with every variable in the order of ``dims`` (those it has) and latitudes running
    from the ``latitude`` pole ("north" or "south")."""
    ds = ds.sortby("latitude", ascending=latitude == "south")
    return ds.transpose(*dims, missing_dims="ignore")


def write_store(ds: xr.Dataset, path, dims=CANONICAL, latitude="north"):
    """``ds`` as a zarr store in that layout, one time step per chunk (as WB2's)."""
    ds = in_layout(ds, dims, latitude)
    encoding = {
        name: {"chunks": tuple(1 if d == "time" else ds.sizes[d] for d in var.dims)}
        for name, var in ds.data_vars.items()
    }
    ds.to_zarr(path, zarr_format=2, consolidated=True, encoding=encoding)
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(root, canonical store, its statistics, data) shared by the module."""
    root = tmp_path_factory.mktemp("dim_orders")
    data = era5_like()
    canonical = write_store(data, root / "canonical.zarr")
    stats = root / "canonical_stats.zarr"
    compute_stats(canonical, out=stats)
    return root, canonical, stats, data


def spec(rollout: int = 2) -> SampleSpec:
    return SampleSpec(tuple(VARIABLES), tuple(LEVELS), "auto", (), 1, 6.0, rollout)


@pytest.mark.parametrize(("dims", "latitude"), [*LAYOUTS, pytest.param(CANONICAL, "north", id="arco")])
def test_every_reader_sees_the_canonical_store(stores, tmp_path, dims, latitude):
    root, canonical, stats, data = stores
    path = write_store(data, tmp_path / "store.zarr", dims, latitude)
    ds = open_store(path)
    assert ds["geopotential"].dims == CANONICAL
    assert ds["land_sea_mask"].dims == ("latitude", "longitude")
    assert float(ds["latitude"][0]) > float(ds["latitude"][-1])
    if dims != CANONICAL:  # transposed lazily, in the store's chunks: one time step per read
        assert ds["geopotential"].chunks[0] == (1,) * 12
    ours = FieldDataset(path, spec(), stats_path=stats)
    theirs = FieldDataset(canonical, spec(), stats_path=stats)
    assert ours.channels == theirs.channels and ours.grid == theirs.grid
    for i in range(len(theirs)):
        np.testing.assert_array_equal(ours.read_states(ours.samples[i]), theirs.read_states(theirs.samples[i]))
    np.testing.assert_array_equal(ours.static_fields(), theirs.static_fields())
    # statistics of the store in its own layout: those of the canonical one (up to summation order)
    compute_stats(path, out=tmp_path / "stats.zarr")
    mine, reference = (load_stats(p, list(theirs.channels), stats_path=s) for p, s in
                       ((path, tmp_path / "stats.zarr"), (canonical, stats)))  # fmt: skip
    np.testing.assert_allclose(mine.mean, reference.mean, rtol=1e-6)
    np.testing.assert_allclose(mine.std, reference.std, rtol=1e-5)


def test_float32_coordinates_are_read_as_the_float64_ones(stores, tmp_path):
    """A review found: float32 coordinates of the very same values gave other forcings (1e-7), forecasts
    (an ulp) and spectra frequencies than float64 ones, and results of the two did not align."""
    root, canonical, stats, data = stores
    single = {name: data[name].astype(np.float32) for name in ("latitude", "longitude")}
    path = write_store(data.assign_coords(single), tmp_path / "store.zarr", latitude="south")
    ours, theirs = open_store(path), open_store(canonical)
    for name in ("latitude", "longitude"):
        assert ours[name].dtype == np.float64
        xr.testing.assert_identical(ours[name], theirs[name])
    with_forcing = replace(spec(), forcings=("toa_radiation",))
    times = theirs["time"].values[:3]
    np.testing.assert_array_equal(
        FieldDataset(path, with_forcing, stats_path=stats).forcings_at(times),
        FieldDataset(canonical, with_forcing, stats_path=stats).forcings_at(times),
    )


def train(store, stats, out):
    """Two optimizer steps of a width-8 model on ``store`` (the canonical statistics); its checkpoint."""
    pl.seed_everything(0, verbose=False)
    data = ERA5DataModule(str(store), variables=VARIABLES, levels=LEVELS, forcings=[], rollout_steps=1,
                          train_period=("2020-01-01", "2020-01-03T18"), val_period=None, test_period=None,
                          batch_size=2, num_workers=0, pin_memory=False, stats=str(stats))  # fmt: skip
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, accelerator="cpu")  # fmt: skip
    trainer.fit(model, datamodule=data)
    trainer.save_checkpoint(out)
    return out


@pytest.fixture(scope="module")
def canonical_model(stores):
    root, canonical, stats, _ = stores
    return train(canonical, stats, root / "canonical.ckpt")


def rollout(ckpt, source, out):
    cli(["rollout", "--ckpt", str(ckpt), "--store", str(source), "--steps", "2", "--init-times", INIT,
         "--out", str(out), "--no-progress"])  # fmt: skip
    return xr.open_dataset(out).load()


@pytest.fixture(scope="module")
def canonical_forecast(stores, canonical_model):
    root, canonical, _, _ = stores
    return rollout(canonical_model, canonical, root / "canonical_forecast.nc")


@pytest.mark.parametrize(("dims", "latitude"), LAYOUTS)
def test_training_and_rollout_match_the_canonical_store(stores, canonical_model, canonical_forecast, tmp_path,
                                                        dims, latitude):  # fmt: skip
    root, canonical, stats, data = stores
    path = write_store(data, tmp_path / "store.zarr", dims, latitude)
    trained = torch.load(train(path, stats, tmp_path / "model.ckpt"), map_location="cpu", weights_only=True)
    reference = torch.load(canonical_model, map_location="cpu", weights_only=True)
    assert trained["state_dict"].keys() == reference["state_dict"].keys()
    for name, weights in reference["state_dict"].items():
        torch.testing.assert_close(trained["state_dict"][name], weights, rtol=0, atol=0, msg=name)
    forecast = rollout(canonical_model, path, tmp_path / "forecast.nc")  # the canonical model, this store
    for name in VARIABLES:
        assert forecast[name].dims == canonical_forecast[name].dims
        np.testing.assert_array_equal(forecast[name].values, canonical_forecast[name].values)
        np.testing.assert_array_equal(forecast["latitude"].values, canonical_forecast["latitude"].values)


@pytest.mark.parametrize(("dims", "latitude"), LAYOUTS[:2])
def test_netcdf_initial_conditions_in_wb2_names_and_order(stores, canonical_model, canonical_forecast, tmp_path,
                                                          dims, latitude):  # fmt: skip
    """A NetCDF of initial conditions as WeatherBench2 names and orders them (``geopotential``,
    ``temperature``, ``level``; no static fields: the checkpoint has them) forecasts what the store does."""
    _, _, _, data = stores
    state = data[VARIABLES].sel(time=[np.datetime64(INIT)])
    path = tmp_path / "initial_conditions.nc"
    in_layout(state, dims, latitude).to_netcdf(path)
    assert {"geopotential", "temperature", "level"} <= set(xr.open_dataset(path).variables)
    forecast = rollout(canonical_model, path, tmp_path / "forecast.nc")
    for name in VARIABLES:
        np.testing.assert_array_equal(forecast[name].values, canonical_forecast[name].values)


def test_variables_that_are_not_fields_are_left_out_with_a_warning(stores, tmp_path):
    """A store made from CDS NetCDF files keeps expver (a string per time) and time_bnds ((time, nv)
    datetimes): stats and climatology crashed summing them (a traceback). They are left out, named in a
    warning, and every result is the canonical store's."""
    from s2forecast.evaluation.climatology import write_climatology

    root, canonical, stats, data = stores
    times = data["time"].values
    leftovers = data.assign(
        expver=("time", np.array(["0001"] * times.size)),
        time_bnds=(("time", "nv"), np.stack([times - np.timedelta64(6, "h"), times], axis=1)),
        global_mean=("time", np.arange(times.size, dtype=np.float64)),  # numbers, but no grid
    )
    path = write_store(leftovers, tmp_path / "cds.zarr", ("time", "level", "longitude", "latitude", "nv"), "south")
    named = r"not gridded fields: expver \(time\) <U4, global_mean \(time\) float64, time_bnds \(time, nv\) datetime64"
    with pytest.warns(UserWarning, match=r"left out of the statistics, " + named):
        compute_stats(path, out=tmp_path / "stats.zarr")
    xr.testing.assert_allclose(xr.open_zarr(tmp_path / "stats.zarr").load(), xr.open_zarr(stats).load(), rtol=1e-6)
    with pytest.warns(UserWarning, match=r"left out of the climatology, " + named):
        write_climatology(path, tmp_path / "clim.zarr")
    write_climatology(canonical, tmp_path / "canonical_clim.zarr")
    clim, expected = (xr.open_zarr(tmp_path / p).load() for p in ("clim.zarr", "canonical_clim.zarr"))
    assert set(clim.data_vars) == set(expected.data_vars) == {"geopotential", "temperature", "2m_temperature"}
    xr.testing.assert_allclose(clim, expected, rtol=1e-6)
    ours, theirs = FieldDataset(path, spec(), stats_path=stats), FieldDataset(canonical, spec(), stats_path=stats)
    np.testing.assert_array_equal(ours.read_states(ours.samples[0]), theirs.read_states(theirs.samples[0]))


def test_dataloader_workers_read_a_store_in_wb2_order(stores, tmp_path):
    """A store in WeatherBench2's order is transposed by dask: DataLoader workers forked after the parent
    had used dask's threaded scheduler never had a task run, and num_workers=2 (ERA5DataModule's
    default) hung (a review found it). The workers' samples are the parent's."""
    root, canonical, stats, data = stores
    path = write_store(data, tmp_path / "store.zarr", *LAYOUTS[0].values)
    dataset = FieldDataset(path, spec(), stats_path=stats)
    expected = [dataset[i] for i in range(len(dataset))]  # dask's threaded scheduler runs here first
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, timeout=60)
    served = list(loader)  # a hang is a RuntimeError after 60 s
    assert len(served) == len(expected) > 0
    for got, want in zip(served, expected, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]), err_msg=key)
