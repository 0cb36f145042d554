"""Damaged or hostile stores are refused in one line, with nothing printed after it (issue 29): a
zarr chunk size of 0 (zarr: ZeroDivisionError), a time coordinate of strings (numpy:
_UFuncNoLoopError) and a pickle codec (asyncio: "Task exception was never retrieved" tracebacks)."""

import gc
import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from s2forecast.cli import main
from s2forecast.data.store import open_store


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main([str(arg) for arg in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit.value.code == 2 and len(lines) == 1, lines
    return lines[0]


def zero_time_chunks(store, name: str) -> None:
    """Edit ``name``'s zarr v3 metadata (its own and the consolidated copy): chunks of 0 time steps."""
    own = store / name / "zarr.json"
    meta = json.loads(own.read_text())
    meta["chunk_grid"]["configuration"]["chunk_shape"][0] = 0
    own.write_text(json.dumps(meta))
    root = json.loads((store / "zarr.json").read_text())
    root["consolidated_metadata"]["metadata"][name]["chunk_grid"]["configuration"]["chunk_shape"][0] = 0
    (store / "zarr.json").write_text(json.dumps(root))


def forecast_of(truth: xr.Dataset) -> xr.Dataset:
    forecast = truth[["vorticity"]].isel(time=[0]).drop_vars(["trajectory"], errors="ignore")
    return forecast.expand_dims(prediction_timedelta=[np.timedelta64(1, "h")], axis=1).drop_encoding()


def test_a_chunk_size_of_zero_is_refused(swe_store, tmp_path, capsys):
    store = tmp_path / "chunk0.zarr"
    shutil.copytree(swe_store, store)
    zero_time_chunks(store, "vorticity")
    expected = f"variable vorticity of {store} has a zarr chunk size of 0 along time in its metadata (chunks (0, 8, "
    with pytest.raises(ValueError, match=r"chunk size of 0 along time .*: the store is damaged; rewrite it"):
        open_store(store)
    forecast = tmp_path / "forecast.zarr"
    forecast_of(xr.open_zarr(swe_store)).to_zarr(forecast, zarr_format=3, consolidated=True)
    for argv in (["stats", store, "--out", tmp_path / "s.zarr"],
                 ["evaluate", "--forecast", forecast, "--truth", store, "--out", tmp_path / "m.nc", "--no-plots",
                  "--no-progress"]):  # fmt: skip
        assert expected in refused(argv, capsys)
    zero_time_chunks(forecast, "vorticity")  # a damaged zarr forecast too
    message = refused(["evaluate", "--forecast", forecast, "--truth", swe_store, "--out", tmp_path / "m.nc",
                       "--no-plots", "--no-progress"], capsys)  # fmt: skip
    assert f"variable vorticity of {forecast} has a zarr chunk size of 0 along time" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunk0.zarr", "forecast.zarr"]


def test_a_time_coordinate_of_strings_is_refused(swe_store, tmp_path, capsys):
    ds = xr.open_zarr(swe_store).load().drop_encoding()
    ds = ds.assign_coords(time=[str(t)[:19] for t in ds["time"].values])
    ds.attrs = {}
    store = tmp_path / "strings.zarr"
    with pytest.warns(UserWarning):  # zarr: fixed-length strings have no zarr v3 specification
        ds.to_zarr(store, zarr_format=3, consolidated=True)
    for argv in (["stats", store, "--out", tmp_path / "s.zarr"], ["climatology", store, "--out", tmp_path / "c.zarr"]):
        message = refused(argv, capsys)
        assert (
            f"the time coordinate of store {store} holds <U19 values such as ['2000-01-01T00:00:00'], not dates "
            "(datetime64): rewrite the store" in message
        ), message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["strings.zarr"]


@pytest.mark.parametrize("calendar", ["noleap", "360_day"])
def test_another_calendar_is_named(swe_store, tmp_path, capsys, calendar):
    """Such times are CF-encoded already: the advice to CF-encode them did not help."""
    ds = xr.open_zarr(swe_store).load().drop_encoding()
    ds.attrs = {}
    hours = (ds["time"].values - ds["time"].values[0]) / np.timedelta64(1, "h")
    ds = ds.assign_coords(time=("time", hours, {"units": "hours since 2000-01-01", "calendar": calendar}))
    store = tmp_path / "calendar.zarr"
    ds.to_zarr(store, zarr_format=3, consolidated=True)
    for argv in (["stats", store, "--out", tmp_path / "s.zarr"], ["climatology", store, "--out", tmp_path / "c.zarr"]):
        message = refused(argv, capsys)
        named = (
            f"the time coordinate of store {store} uses the calendar {calendar!r} (times such as 2000-01-01 00:00:00"
        )
        assert named in message, message
        assert message.endswith(
            "s2forecast reads the real-world calendar only (standard, gregorian, proleptic_gregorian: ERA5's); "
            "convert the times to it"
        ), message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calendar.zarr"]


def test_another_calendar_in_a_netcdf_input_is_named(tmp_path, capsys):
    """convert-era5 (and rollout's NetCDF initial conditions) printed the cftime values' numpy repr, whose
    newline cut the message to 'time values [cftime.DatetimeNoLeap(...' and told to add CF units it had."""
    ds = xr.open_dataset(Path(__file__).parent / "era5_sample_slice.nc").load()
    hours = (ds["valid_time"].values - ds["valid_time"].values[0]) / np.timedelta64(1, "h")
    ds = ds.assign_coords(valid_time=("valid_time", hours, {"units": "hours since 2026-03-25", "calendar": "noleap"}))
    ds["valid_time"].encoding = {}
    source = tmp_path / "noleap.nc"
    ds.to_netcdf(source)
    message = refused(["convert-era5", source, "--out", tmp_path / "era5.zarr"], capsys)
    assert message.startswith(f"s2forecast convert-era5: error: {source}: the time coordinate uses the calendar "
                              "'noleap' (times such as 2026-03-25 00:00:00, 2026-03-25 08:00:00)"), message  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noleap.nc"]


def test_dates_before_1678_are_said_to_be_out_of_range(swe_store, tmp_path, capsys):
    """Real-world dates that datetime64[ns] cannot hold: the advice to CF-encode them (they were) did not help."""
    ds = xr.open_zarr(swe_store).load().drop_encoding()
    ds.attrs = {}
    hours = (ds["time"].values - ds["time"].values[0]) / np.timedelta64(1, "h")
    ds = ds.assign_coords(time=("time", hours, {"units": "hours since 1600-01-01", "calendar": "standard"}))
    store = tmp_path / "old.zarr"
    ds.to_zarr(store, zarr_format=3, consolidated=True)
    message = refused(["stats", store, "--out", tmp_path / "s.zarr"], capsys)
    assert message.endswith(
        f"the time coordinate of store {store} holds dates such as 1600-01-01 00:00:00, 1600-01-01 01:00:00, outside "
        "the dates a datetime64[ns] time axis holds (1677-09-21 .. 2262-04-11)"
    ), message


def test_a_pickle_codec_is_refused_without_asyncio_tracebacks(swe_store, tmp_path, caplog):
    store = tmp_path / "pickle.zarr"
    ds = xr.open_zarr(swe_store).load().drop_encoding()
    ds.attrs = {}
    ds.to_zarr(store, zarr_format=2, consolidated=True)
    consolidated = json.loads((store / ".zmetadata").read_text())
    for name in ds.data_vars:  # every variable: zarr reads them concurrently and abandons the others
        meta = json.loads((store / name / ".zarray").read_text())
        meta["filters"] = [{"id": "pickle", "protocol": 5}]
        (store / name / ".zarray").write_text(json.dumps(meta))
        consolidated["metadata"][f"{name}/.zarray"] = meta
    (store / ".zmetadata").write_text(json.dumps(consolidated))
    with caplog.at_level(logging.ERROR):
        with pytest.raises(ValueError, match=f"cannot read the zarr store {store}: .*pickle"):
            open_store(store)
        for _ in range(5):  # the abandoned reads finish on zarr's thread, then are collected
            time.sleep(0.05)
            gc.collect()
    assert not [record for record in caplog.records if "never retrieved" in record.getMessage()]


def test_a_store_without_times_and_a_static_field_per_time_is_one_line(tmp_path, capsys):
    """An IndexError on the empty time axis (taking such a static field at its first time, or stats' period)."""
    lat, lon = np.linspace(90, -90, 5), np.arange(8) * 45.0
    ds = xr.Dataset(
        {"land_sea_mask": (("time", "latitude", "longitude"), np.zeros((0, 5, 8), np.float32)),
         "2m_temperature": (("time", "latitude", "longitude"), np.zeros((0, 5, 8), np.float32), {"units": "K"})},
        coords={"time": np.array([], "datetime64[ns]"), "latitude": lat, "longitude": lon},
    )  # fmt: skip
    ds.to_zarr(tmp_path / "empty.zarr", zarr_format=3, consolidated=True)
    message = refused(["stats", tmp_path / "empty.zarr", "--out", tmp_path / "s.zarr"], capsys)
    assert (
        message == f"s2forecast stats: error: store {tmp_path / 'empty.zarr'} holds no time steps (its time dimension "
        "is empty); write it again"
    )


def test_cftime_dates_of_the_real_world_calendar_are_named_as_such():
    """They were said to be outside the dates datetime64[ns] holds, whatever their year."""
    import cftime

    from s2forecast.times import cftime_problem

    recent = [cftime.DatetimeProlepticGregorian(2020, 1, 1), cftime.DatetimeProlepticGregorian(2020, 1, 2)]
    assert cftime_problem(np.array(recent)).startswith("holds cftime dates of the real-world calendar (times such as "
                                                       "2020-01-01 00:00:00, 2020-01-02 00:00:00)")  # fmt: skip
    old = [cftime.DatetimeProlepticGregorian(1600, 1, 1)]
    assert "outside the dates a datetime64[ns] time axis holds" in cftime_problem(np.array(old))
    # starting inside the range and running past it: was told to open them without use_cftime, which fails
    late = [cftime.DatetimeProlepticGregorian(year, 1, 1) for year in (2250, 2261, 2263, 2269)]
    assert cftime_problem(np.array(late)).startswith("holds dates such as 2263-01-01 00:00:00, 2269-01-01 00:00:00, "
                                                     "outside the dates a datetime64[ns] time axis holds")  # fmt: skip
    # undecoded numbers beside a calendar attribute: not cftime dates (they had no .year: an AttributeError)
    assert cftime_problem(np.array([0, 6]), "standard") is None


def test_stats_warn_of_a_missing_chunk(swe_store, tmp_path):
    """A deleted chunk file (or an HTTP 404 at a URL) reads as NaN: stats left that time out of the
    means in silence (a review found it); the other times' statistics are still right."""
    from s2forecast.data import compute_stats
    from s2forecast.times import format_time

    store = tmp_path / "store.zarr"
    shutil.copytree(swe_store, store)
    shutil.rmtree(store / "stats", ignore_errors=True)
    (chunk,) = [path for path in (store / "geopotential_height" / "c" / "3").rglob("*") if path.is_file()]
    chunk.unlink()  # time 3: its one chunk
    third = format_time(xr.open_zarr(swe_store)["time"].values[3])
    with pytest.warns(UserWarning, match=rf"variable geopotential_height is NaN at every point at {third} \(1 time"):
        stats = compute_stats(store, progress=False)
    assert np.isfinite(stats["mean"].values).all()
    from s2forecast.training.datamodule import SWEDataModule
    from s2forecast.user_errors import UserError

    data = SWEDataModule(str(store), train_trajectories=(0, 1), val_trajectories=(1, 2), stats=str(swe_store / "stats"))
    data.setup("fit")
    missing = r"\(NaN at every point: is a chunk missing from the store\?\)"
    with pytest.raises(UserError, match=rf"at {third} in .* {missing}"):
        [data.datasets["train"][i] for i in range(len(data.datasets["train"]))]


def test_zarrs_abandoned_reads_are_not_logged():
    """A chunk read at a URL reset part-way left 20 lines of asyncio's 'Task was destroyed but it is
    pending!' around the one-line error (a review found it); asyncio's other records stay."""
    from s2forecast.data.store import _AbandonedZarrReads

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, None)

    keep = _AbandonedZarrReads().filter
    pending = "Task was destroyed but it is pending!\ntask: <Task pending coro=<run() running at {}>>"
    assert not keep(record(pending.format("/x/zarr/core/common.py")))
    assert keep(record(pending.format("/home/me/app.py")))
