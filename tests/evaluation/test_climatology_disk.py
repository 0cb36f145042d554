"""The climatology on a disk too small for it: a warning before any work, with the sizes it will take
(output before compression, pass 1's scratch), and a full disk mid-run is one line that leaves nothing."""

import errno
import types

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.evaluation import climatology as module
from s2forecast.evaluation.climatology import open_climatology
from s2forecast.output import DiskSpaceWarning

LAT, LON = np.array([60.0, 0.0, -60.0]), np.array([0.0, 90.0, 180.0, 270.0])


@pytest.fixture
def store(tmp_path):
    """WB2's layout, one time per chunk, 12-hourly over a year's end: a one-channel variable (read by
    pass 2 alone) and one of 2 levels (through pass 1 and its scratch)."""
    times = pd.date_range("2004-12-01", "2005-01-31T12", freq="12h")
    rng = np.random.default_rng(5)
    path = tmp_path / "data" / "wb2.zarr"
    xr.Dataset(
        {
            "surface_pressure": (("time", "longitude", "latitude"),
                                 (1e5 + rng.normal(size=(times.size, LON.size, LAT.size))).astype(np.float32)),
            "temperature": (("time", "level", "longitude", "latitude"),
                            (280 + rng.normal(size=(times.size, 2, LON.size, LAT.size))).astype(np.float32)),
        },
        coords={"time": times, "level": [500, 850], "longitude": LON, "latitude": LAT},
    ).chunk(time=1).to_zarr(path, zarr_format=2)  # fmt: skip
    return path


def test_a_disk_too_small_is_a_warning_with_the_sizes_before_any_work(store, tmp_path, monkeypatch, capsys):
    cli(["climatology", str(store), "--out", str(tmp_path / "ample.zarr"), "--no-progress"])
    assert "warning" not in capsys.readouterr().err  # this disk has room

    scratch_files = []
    real_sum = module._sum_slots

    def sum_slots(task, job):  # the size of each scratch file pass 1 writes
        real_sum(task, job)
        scratch_files.append(module._scratch(job.out, task.name, task.first, "means").stat().st_size)

    monkeypatch.setattr(module, "_sum_slots", sum_slots)
    monkeypatch.setattr(module.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=1000))
    out = tmp_path / "clim.zarr"
    with pytest.warns(DiskSpaceWarning) as warned:  # printed as one line by the CLI (one_line_warnings)
        cli(["climatology", str(store), "--out", str(out), "--no-progress"])
    # output before compression: 366 days x 2 hours x 3 channels x 12 points x 4 bytes, whatever the record;
    # scratch: what pass 1 wrote for the variable of 2 levels (the one-channel variable has none)
    output, scratch = 366 * 2 * 3 * LAT.size * LON.size * 4, sum(scratch_files)
    # two months: too short for day-of-year means, so a mean per hour (2 slots) of each of the 2 levels
    assert open_climatology(out).attrs["climatology_method"] == "hour"
    assert scratch == 4 * 2 * 2 * LAT.size * LON.size
    assert [str(w.message) for w in warned if w.category is DiskSpaceWarning] == [
        f"{tmp_path} has 1000 bytes free; this climatology takes up to {output} bytes of output before compression "
        f"(about half after, depending on the data) and {scratch} bytes of scratch while it runs; if the disk fills, "
        "the run stops with an error and leaves the output path as it was: free some space there or write the "
        "output to a larger disk"
    ]
    # a warning only: the same climatology
    xr.testing.assert_equal(open_climatology(out), open_climatology(tmp_path / "ample.zarr"))  # values, coords


def test_a_full_disk_mid_run_is_one_line_and_leaves_nothing(store, tmp_path, monkeypatch, capsys):
    calls = []
    real_write = module._write_means

    def write_means(task, job):
        calls.append(task)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(job.out))
        return real_write(task, job)

    monkeypatch.setattr(module, "_write_means", write_means)
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(SystemExit) as exit:
        cli(["climatology", str(store), "--out", str(tmp_path / "clim.zarr"), "--no-progress"])
    err = capsys.readouterr().err
    assert exit.value.code != 0 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("s2forecast climatology: error:") and "No space left" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "mine.txt"]  # no output, no temporary left
    assert (tmp_path / "mine.txt").read_text() == "keep"
