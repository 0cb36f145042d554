"""Issue 29: readers put longitudes in [0, 360), first column the smallest, so the same data
stored from -180 or from 0 (or any other first column) is the same input: the networks are
equivariant only to column shifts by a multiple of their latent stride, not to any shift."""

import shutil

import numpy as np
import xarray as xr
import zarr

from s2forecast.cli import main as cli
from s2forecast.data.store import open_store, to_model_order


def dataset(lon: np.ndarray, data: np.ndarray) -> xr.Dataset:
    coords = {"latitude": np.linspace(90.0, -90.0, data.shape[-2]), "longitude": lon}
    return xr.Dataset({"t": (("time", "latitude", "longitude"), data)}, coords=coords)


def test_any_convention_and_first_column_reads_as_zero_to_360():
    data = np.random.default_rng(0).normal(size=(2, 5, 30))
    from_zero = to_model_order(dataset(12.0 * np.arange(30), data))
    for shift in (15, 7, 1, -3):  # -180..168, -84..264, -12..336, 36..384: other conventions and first columns
        rotated = to_model_order(dataset(12.0 * (np.arange(30) - shift), np.roll(data, shift, axis=-1)))
        xr.testing.assert_identical(rotated, from_zero)
    assert from_zero["longitude"].values[0] == 0.0 and from_zero["longitude"].values[-1] == 348.0
    same = dataset(12.0 * np.arange(30), data)
    assert to_model_order(same)["t"].values is same["t"].values  # already in order: untouched


def test_float_noise_below_zero_east_is_the_first_column():
    """np.arange(-180, 180, 0.1) puts -1.02e-11 where 0 E is: taken mod 360 that is the last column, so
    every column moved by one (and the same grid written 0..359.9 was a "different grid")."""
    lon = np.arange(-180, 180, 0.1)
    assert -1e-9 < lon[1800] < 0  # the noise this test is about
    data = np.random.default_rng(2).normal(size=(1, 3, lon.size))
    read = to_model_order(dataset(lon, data))
    assert read["longitude"].values[0] == 0.0 and abs(read["longitude"].values[-1] - 359.9) < 1e-9
    assert np.array_equal(read["t"].values, np.roll(data, -1800, axis=-1))  # the 0 E column first
    noisy = to_model_order(dataset(np.arange(1440) * 0.25 - 3e-6, data[..., :1440]))  # a float32-like 0.25 deg
    assert noisy["longitude"].values[0] == 0.0 and np.array_equal(noisy["t"].values, data[..., :1440])


def test_reordering_is_lazy(tmp_path):
    data = np.random.default_rng(1).normal(size=(3, 5, 30)).astype(np.float32)
    dataset(np.arange(30) * 12.0 - 180.0, data).to_zarr(tmp_path / "west.zarr")
    ds = open_store(tmp_path / "west.zarr", chunks={})
    assert ds["t"].chunks is not None  # still dask: nothing read yet
    assert np.array_equal(ds["t"].isel(time=1).values, np.roll(data[1], -15, axis=-1))


def rotate_store(source, target, shift: int) -> None:
    """A copy of the store at ``source`` with its columns rolled by ``shift`` and longitudes
    written in (-180, 180]: the same data in another convention and first column."""
    shutil.copytree(source, target)
    group = zarr.open_group(str(target), mode="r+")
    lon = group["longitude"][:]
    rolled = np.roll(lon, shift)
    group["longitude"][:] = np.where(rolled > 180.0, rolled - 360.0, rolled)  # (-180, 180]
    for name in ("geopotential_height", "vorticity", "divergence"):
        group[name][:] = np.roll(group[name][:], shift, axis=-1)


def test_the_same_data_from_another_first_longitude_gives_the_same_forecast(swe_store, mse_run_1_epoch, tmp_path):
    """16 columns of 22.5 deg: -157.5..180 is a 7-column shift of 0..337.5, odd, which a network
    with scale_factor 2 is not equivariant to."""
    west = tmp_path / "west.zarr"
    rotate_store(swe_store, west, 7)
    assert zarr.open_group(str(west))["longitude"][0] == -157.5
    forecasts = []
    for store in (swe_store, west):
        out = tmp_path / f"{store.stem}.nc"
        cli(["rollout", "--ckpt", str(mse_run_1_epoch.checkpoint), "--store", str(store), "--steps", "2",
             "--init-times", "2000-01-01T00,2000-01-01T01", "--out", str(out), "--no-progress"])  # fmt: skip
        forecasts.append(xr.open_dataset(out).load())
    ours, theirs = forecasts
    aligned = theirs.assign_coords(longitude=np.mod(theirs["longitude"], 360.0)).sortby("longitude")
    for name in ("geopotential_height", "vorticity", "divergence"):
        assert np.array_equal(ours[name].values, aligned[name].values), name  # bit-identical
    assert np.array_equal(ours["longitude"].values, theirs["longitude"].values)  # both written 0..337.5
