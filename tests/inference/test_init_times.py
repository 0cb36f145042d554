"""Initialization times of `s2forecast rollout`: each once, and from one source (issue 29)."""

import datetime

import numpy as np
import pytest
import xarray as xr

from s2forecast.cli import main
from s2forecast.inference.rollout import RolloutOptions, init_times_from, rollout
from s2forecast.user_errors import UserError


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main([str(arg) for arg in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit.value.code == 2 and len(lines) == 1, lines
    return lines[0]


def rollout_args(run, store, out, *times):
    return ["rollout", "--ckpt", run.checkpoint, "--store", store, "--steps", "1", "--out", out, "--no-progress",
            *times]  # fmt: skip


@pytest.mark.parametrize(
    "times",
    [["--init-times", "2000-01-01T00,2000-01-01T00"], ["--init-times", "2000-01-01T01,2000-01-01,2000-01-01T00"]],
)
def test_repeated_init_times_are_refused(mse_run_1_epoch, swe_store, tmp_path, capsys, times):
    message = refused(rollout_args(mse_run_1_epoch, swe_store, tmp_path / "f.nc", *times), capsys)
    assert "initialization time 2000-01-01T00 is given 2 times; list each initialization time once" in message
    assert list(tmp_path.iterdir()) == []


def test_repeated_init_times_are_refused_by_the_library(mse_run_1_epoch, swe_store, tmp_path):
    times = np.array(["2000-01-01T00", "2000-01-01T01", "2000-01-01T00"], dtype="datetime64[ns]")
    with pytest.raises(ValueError, match="2000-01-01T00 is given 2 times"):
        rollout(mse_run_1_epoch.checkpoint, swe_store, 1, times, tmp_path / "f.nc", progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--start", "2000-01-01T00", "--end", "2000-01-01T03"], "--start and --end"),
        (["--end", "2000-01-01T03"], "--end"),
        (["--start", "2000-01-01T00", "--end", "2000-01-01T03", "--every", "1"], "--start and --end and --every"),
    ],
)
def test_init_times_with_a_range_are_refused(mse_run_1_epoch, swe_store, tmp_path, capsys, extra, named):
    argv = rollout_args(mse_run_1_epoch, swe_store, tmp_path / "f.nc", "--init-times", "2000-01-01T00", *extra)
    message = refused(argv, capsys)
    assert f"--init-times lists the initialization times, so {named} would be ignored" in message
    assert list(tmp_path.iterdir()) == []


def test_init_times_alone_and_a_range_alone_still_work():
    assert list(init_times_from(["2000-01-01T06"])) == [np.datetime64("2000-01-01T06", "ns")]
    available = np.arange(4).astype("timedelta64[h]") + np.datetime64("2000-01-01T00", "ns")
    assert list(init_times_from(available[:2])) == list(available[:2])  # an array: its truth value raised
    assert init_times_from(None, "2000-01-01T01", "2000-01-01T02", None, available).size == 2


def test_an_end_written_as_a_date_is_all_of_that_day():
    """WeatherBench2's 2020 is 732 inits at 00 and 12 h: ``--end 2020-12-31`` stopped at Dec 31 00 h (731)."""
    year = init_times_from(None, "2020-01-01", "2020-12-31", 12.0)
    assert year.size == 732 and year[-1] == np.datetime64("2020-12-31T12", "ns")
    available = np.arange(48, dtype=np.int64).astype("timedelta64[h]") + np.datetime64("2000-01-01T00", "ns")
    assert init_times_from(None, "2000-01-01", "2000-01-01", None, available).size == 24
    assert init_times_from(None, "2000-01-01T00", "2000-01-01T05", None, available).size == 6  # an hour is exact
    with pytest.raises(UserError, match=r"--end 1999-12-31 is before --start 2000-01-01T00; swap them"):
        init_times_from(None, "2000-01-01", "1999-12-31", None, available)


@pytest.mark.parametrize(
    ("times", "steps", "expected"),
    [
        (["--init-times", "2000-01-01T00"], "1000000000000",
         "--steps 1000000000000 of 1 h span 1.14e+08 years from 2000-01-01T00, past 2262-04-11"),
        (["--start", "2000-01-01", "--end", "2200-01-01", "--every", "0.001"], "1",
         "--start 2000-01-01T00 --end 2200-01-01 --every 0.001 make 1577880000 initialization times, more than "
         "the 21 times of the store"),
        (["--start", "2000-01-01", "--end", "3000-01-01"], "1",
         "argument --end: '3000-01-01' is outside the dates a datetime64[ns] time axis holds"),
    ],
)  # fmt: skip
def test_axes_too_long_to_make_are_refused_with_their_size(mse_run_1_epoch, swe_store, tmp_path, capsys, times,
                                                           steps, expected):  # fmt: skip
    argv = rollout_args(mse_run_1_epoch, swe_store, tmp_path / "f.nc", *times)
    argv[argv.index("--steps") + 1] = steps
    message = refused(argv, capsys)
    assert expected in message and "out of memory" not in message, message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("every", [1e8, 5e12, 1e300])
def test_an_every_longer_than_the_span_selects_the_start_alone(every):
    """Neither wrapped around datetime64[ns] (an empty selection) nor an OverflowError."""
    available = np.arange(33).astype("timedelta64[h]") + np.datetime64("2000-01-01T00", "ns")
    selected = init_times_from(None, "2000-01-01T01", "2000-01-01T05", every, available)
    assert selected.dtype == np.dtype("datetime64[ns]") and list(selected) == [np.datetime64("2000-01-01T01", "ns")]
    assert list(init_times_from(None, "2000-01-01T01", "2000-01-01T05", 2, available)) == [
        np.datetime64(f"2000-01-01T0{h}", "ns") for h in (1, 3, 5)
    ]


def test_a_huge_every_on_the_command_line_forecasts_from_the_start(mse_run_1_epoch, swe_store, tmp_path, capsys):
    argv = rollout_args(mse_run_1_epoch, swe_store, tmp_path / "f.nc", "--start", "2000-01-01T01", "--end",
                        "2000-01-01T05", "--every", "1e300")  # fmt: skip
    main([str(arg) for arg in argv])
    assert "wrote" in capsys.readouterr().out
    with xr.open_dataset(tmp_path / "f.nc") as written:
        assert list(written["time"].values) == [np.datetime64("2000-01-01T01", "ns")]


@pytest.mark.parametrize(
    ("every", "message"),
    [
        (float("inf"), "--every must be a positive number of hours (at least 1 s), got inf"),
        (float("nan"), "--every must be a positive number of hours (at least 1 s), got nan"),
        (1e-5, "--every must be a positive number of hours (at least 1 s), got 1e-05"),
        (-1.0, "--every must be a positive number of hours (at least 1 s), got -1.0"),
    ],
)
def test_bad_every_is_one_user_error(every, message):
    with pytest.raises(UserError) as error:
        init_times_from(None, "2000-01-01T01", "2000-01-01T05", every, None)
    assert str(error.value) == message


@pytest.mark.parametrize("argv_every", ["1e400", "0", "-1", "x"])
def test_bad_every_on_the_command_line(argv_every, mse_run_1_epoch, swe_store, tmp_path, capsys):
    argv = rollout_args(mse_run_1_epoch, swe_store, tmp_path / "f.nc", "--start", "2000-01-01T01", "--end",
                        "2000-01-01T05", "--every", argv_every)  # fmt: skip
    assert f"argument --every: must be a number > 0, got '{argv_every}'" in refused(argv, capsys)
    assert list(tmp_path.iterdir()) == []


def test_the_library_takes_init_times_as_strings(mse_run_1_epoch, swe_store, tmp_path):
    """Strings (a time zone converted to UTC), datetimes or datetime64 of any unit: one forecast."""
    checkpoint = mse_run_1_epoch.checkpoint
    given = {
        "str.nc": ["2000-01-01T01", "2000-01-01T05+02:00"],
        "hours.nc": np.array(["2000-01-01T01", "2000-01-01T03"], dtype="datetime64[h]"),
        "mixed.zarr": [datetime.datetime(2000, 1, 1, 1), "2000-01-01T03"],
    }
    for name, times in given.items():
        options = RolloutOptions(fmt="zarr" if name.endswith(".zarr") else "netcdf")
        out = rollout(checkpoint, swe_store, 2, times, tmp_path / name, options, progress=False)
        with xr.open_zarr(out) if name.endswith(".zarr") else xr.open_dataset(out) as written:
            expected = np.array(["2000-01-01T01", "2000-01-01T03"], dtype="datetime64[ns]")
            np.testing.assert_array_equal(written["time"].values, expected)
            np.testing.assert_array_equal(written["valid_time"].values[:, 1], expected + np.timedelta64(2, "h"))


@pytest.mark.parametrize(
    ("times", "message"),
    [
        (["2000-01-01T01", "yesterday"], "initialization time 'yesterday' is not a time; write it as YYYY-MM-DD or "
         "YYYY-MM-DDTHH, e.g. 2020-01-01T06"),
        (np.array(["3000-01-01"], dtype="datetime64[D]"), "is outside the dates a datetime64[ns] time axis holds"),
        (["2000-01-01T01", "2000-01-01 01:00"], "initialization time 2000-01-01T01 is given 2 times"),
    ],
)  # fmt: skip
def test_bad_init_times_of_the_library_are_one_user_error(times, message, mse_run_1_epoch, swe_store, tmp_path):
    with pytest.raises(UserError) as error:
        rollout(mse_run_1_epoch.checkpoint, swe_store, 1, times, tmp_path / "f.nc", progress=False)
    assert message in str(error.value)
    assert list(tmp_path.iterdir()) == []
