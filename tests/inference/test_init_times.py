"""Initialization times of `s2forecast rollout`: each once, and from one source (issue 29)."""

import numpy as np
import pytest

from s2forecast.cli import main
from s2forecast.inference.rollout import init_times_from, rollout


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
    assert init_times_from(None, "2000-01-01T01", "2000-01-01T02", None, available).size == 2


@pytest.mark.parametrize(
    ("times", "steps", "expected"),
    [
        (["--init-times", "2000-01-01T00"], "1000000000000",
         "--steps 1000000000000 of 1 h span 1.14e+08 years from 2000-01-01T00, past 2262-04-11"),
        (["--start", "2000-01-01", "--end", "2200-01-01", "--every", "0.001"], "1",
         "--start 2000-01-01T00 --end 2200-01-01T00 --every 0.001 make 1577858401 initialization times, more than "
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
