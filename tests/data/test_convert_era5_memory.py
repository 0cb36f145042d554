"""``convert-era5``'s memory does not grow with the record (issue 27): the lazy record it shares with
every slab (and every dask worker) and the dask graph of each slab stay the same size whether the
inputs hold 4 or 40 time steps a file. A dask graph of the whole record took ~9 KB per time step and
variable: 19 GB for 40 years of hourly data and 6 variables, before any data was read."""

import pickle
import tracemalloc

import dask
import numpy as np
import xarray as xr
from test_convert_era5 import LAT, LON, cds_file, convert, six_hourly

from s2forecast.data.convert_era5 import valid_times
from s2forecast.data.engine import Engine
from s2forecast.data.store import open_store


def inputs(tmp_path, steps: int):
    """Two files per variable group, the second with latitudes south -> north and longitudes
    -180..135 (reordered by convert-era5), of ``steps`` 6-hourly steps each."""
    first = six_hourly("2020-01-01", steps)
    second = first + steps * np.timedelta64(6, "h")
    return [
        cds_file(tmp_path / "pl_1.nc", first, ("t", "u"), levels=(850, 500, 1000), seed=1),
        cds_file(tmp_path / "pl_2.nc", second, ("t", "u"), levels=(850, 500, 1000), lat=LAT[::-1], seed=2),
        cds_file(tmp_path / "sfc_1.nc", first, ("t2m",), seed=3),
        cds_file(tmp_path / "sfc_2.nc", second, ("t2m",), lat=LAT[::-1], lon=LON - 180, seed=4),
    ]


def measure(tmp_path, monkeypatch, steps: int) -> tuple[int, set[int]]:
    """(bytes of the pickled work shared by every slab, dask tasks of each slab's computation) of a
    conversion in slabs of 2 steps, keeping the 500 and 1000 hPa levels."""
    shared, tasks = [], set()
    share, compute = Engine.share, xr.Dataset.compute

    def spy_share(self, value):
        shared.append(len(pickle.dumps(value)))
        return share(self, value)

    def spy_compute(self, **kwargs):
        keys = set(dask.core.flatten(self.__dask_keys__()))
        tasks.add(len(self.__dask_graph__().cull(keys)))
        return compute(self, **kwargs)

    monkeypatch.setattr(Engine, "share", spy_share)
    monkeypatch.setattr(xr.Dataset, "compute", spy_compute)
    directory = tmp_path / str(steps)
    directory.mkdir()
    out = convert(inputs(directory, steps), directory / "era5.zarr", levels=[500, 1000], time_chunk=2)
    monkeypatch.undo()
    assert open_store(out).sizes["time"] == 2 * steps
    assert len(shared) == 1 and tasks
    return shared[0], tasks


def test_the_work_of_a_conversion_does_not_grow_with_the_record(tmp_path, monkeypatch):
    short_bytes, short_tasks = measure(tmp_path, monkeypatch, 4)
    long_bytes, long_tasks = measure(tmp_path, monkeypatch, 40)
    # per extra time step and variable, the times and the file each comes from (a few dozen bytes),
    # not a dask graph (~9 KB)
    per_step = (long_bytes - short_bytes) / (3 * 2 * (40 - 4))
    assert per_step < 200, (short_bytes, long_bytes, per_step)
    assert long_tasks == short_tasks, (short_tasks, long_tasks)  # each slab's graph is the slab's


def test_a_time_step_file_is_flattened_without_an_index_per_element(tmp_path):
    """A cfgrib time x step file (4 forecasts x 12 steps of 91 x 180): listing its valid times
    (``rollout --store FILE``) reads its coordinates and one value per field, and a conversion holds
    less than the file's data. xarray's vectorized indexing of the lazy file held an int64 index per
    element and dimension (twice the float32 data per dimension: 24 MB here)."""
    init = np.datetime64("2020-01-01T06", "ns") + np.arange(4) * np.timedelta64(12, "h")
    step = (np.arange(1, 13) * np.timedelta64(1, "h")).astype("timedelta64[ns]")
    tp = np.random.default_rng(0).uniform(0.0, 0.002, (4, 12, 91, 180)).astype(np.float32)
    path = tmp_path / "tp.nc"
    xr.Dataset(
        {"tp": (("time", "step", "latitude", "longitude"), tp, {"units": "m"})},
        coords={
            "time": init,
            "step": step,
            "valid_time": (("time", "step"), init[:, None] + step),
            "latitude": np.linspace(90.0, -90.0, 91),
            "longitude": np.arange(180) * 2.0,
        },
    ).to_netcdf(path)
    valid_times(path)  # imports and caches outside the measurement
    tracemalloc.start()
    try:
        times = valid_times(path)
        listing = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        out = convert([path], tmp_path / "tp.zarr", time_chunk=1)
        conversion = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(times, (init[:, None] + step).ravel())
    np.testing.assert_array_equal(open_store(out)["total_precipitation"].values, tp.reshape(48, 91, 180))
    assert listing < tp.nbytes / 8, (listing, tp.nbytes)
    assert conversion < tp.nbytes, (conversion, tp.nbytes)
