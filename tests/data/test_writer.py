"""``StoreWriter``'s skeleton: the same on-disk layout whatever the record length, for a cost that
does not grow with it (issue 27)."""

import json

import numpy as np
import pytest
import xarray as xr
import zarr

from s2forecast.data.store import open_store
from s2forecast.data.writer import StoreWriter, lazy_empty, signature_changes

LAT, LON = np.linspace(90.0, -90.0, 5), np.arange(8) * 45.0


def template(n_times: int) -> xr.Dataset:
    """A store of ``n_times`` 6-hourly steps: a surface and a pressure-level field, a static one."""
    times = np.datetime64("2000-01-01", "ns") + np.arange(n_times) * np.timedelta64(6, "h")
    return xr.Dataset(
        {
            "2m_temperature": lazy_empty((n_times, 5, 8), ("time", "latitude", "longitude")),
            "temperature": lazy_empty((n_times, 2, 5, 8), ("time", "level", "latitude", "longitude")),
            "land_sea_mask": (("latitude", "longitude"), np.ones((5, 8), np.float32)),
        },
        coords={"time": times, "level": [500, 850], "latitude": LAT, "longitude": LON},
        attrs={"grid_kind": "equiangular"},
    )


def skeleton_tasks(tmp_path, monkeypatch, n_times: int, shards: int) -> int:
    """Tasks of the dask graph ``StoreWriter.create`` hands to ``to_zarr`` for the skeleton."""
    tasks = []
    original = xr.Dataset.to_zarr

    def to_zarr(self, *args, **kwargs):
        tasks.append(len(dict(self.__dask_graph__())))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(xr.Dataset, "to_zarr", to_zarr)
    StoreWriter(tmp_path / f"s{n_times}-{shards}.zarr", {"test": 1}, shards=shards).create(template(n_times))
    monkeypatch.undo()
    assert len(tasks) == 1
    return tasks[0]


@pytest.mark.parametrize("shards", [0, 2])
def test_the_skeleton_graph_does_not_grow_with_the_record(tmp_path, monkeypatch, shards):
    """One chunk per time step made the skeleton's graph (and memory, ~3.5 KB a step and variable)
    grow with the record: 4 variables x 40,000 steps took 0.7 GB and 13 s before any data."""
    short, long = (skeleton_tasks(tmp_path, monkeypatch, n, shards) for n in (4, 40))
    assert short == long, (short, long)


@pytest.mark.parametrize("shards", [0, 2])
def test_the_skeleton_layout_is_one_step_per_chunk(tmp_path, shards):
    """The zarr layout comes from the encoding, not from the placeholder's dask chunks: one time step
    per chunk, ``shards`` steps per shard, Blosc LZ4 with bit shuffle, NaN fill, CF attributes."""
    path = tmp_path / "s.zarr"
    with StoreWriter(path, {"test": 1}, shards=shards) as writer:
        writer.create(template(5))
        values = {
            "2m_temperature": np.arange(5 * 40, dtype=np.float32).reshape(5, 5, 8),
            "temperature": -np.arange(5 * 80, dtype=np.float32).reshape(5, 2, 5, 8),
        }
        slab = xr.Dataset({name: (template(5)[name].dims, v) for name, v in values.items()})
        writer.write(slab.isel(time=slice(0, 4)), 0)
        writer.write(slab.isel(time=slice(4, 5)), 4)
        writer.finish()
    group = zarr.open_group(path, mode="r", zarr_format=3)
    for name, shape in (("2m_temperature", (5, 8)), ("temperature", (2, 5, 8))):
        array = group[name]
        assert array.chunks == (1, *shape), name
        assert array.shards == ((shards, *shape) if shards else None), name
        codec = array.compressors[0].to_dict()
        assert (codec["name"], codec["configuration"]["cname"], codec["configuration"]["shuffle"]) == (
            "blosc", "lz4", "bitshuffle"
        )  # fmt: skip
        assert np.isnan(array.fill_value) and array.dtype == np.float32
        assert array.attrs["units"] == "K" and array.attrs["standard_name"] == "air_temperature"
    ds = open_store(path)
    for name, expected in values.items():
        np.testing.assert_array_equal(ds[name].values, expected)
    np.testing.assert_array_equal(ds["land_sea_mask"].values, np.ones((5, 8)))


def test_a_refused_resume_names_what_changed():
    """A rerun whose signature differs was refused without saying why (an input copied without its
    modification time, another --shards): the refusal names each change."""
    old = json.dumps({"inputs": [["/d/a.nc", 10, 1], ["/d/b.nc", 10, 1], ["/d/c.nc", 5, 1]], "levels": [500]})
    new = {"inputs": [["/d/a.nc", 10, 2], ["/d/b.nc", 10, 1], ["/d/e.nc", 5, 1]], "levels": [500], "shards": 2}
    assert signature_changes(old, json.dumps(new)) == (
        "input a.nc changed (size or modification time); input e.nc added; input c.nc left out; shards 2 now, none then"
    )
    assert signature_changes(None, json.dumps(new)) == "the store's record of them is unreadable"
    assert signature_changes("[1]", json.dumps(new)) == "the store's record of them is unreadable"
