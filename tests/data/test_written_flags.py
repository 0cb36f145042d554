"""A store whose ``written`` flags say time steps were never written is refused by every reader,
even when its completeness attribute is missing (issue 29: stats read 169 unwritten "times")."""

import re
import shutil

import numpy as np
import pytest
import xarray as xr
import zarr

from s2forecast.cli import main
from s2forecast.data.fields import FieldDataset, SampleSpec
from s2forecast.data.store import open_store

MESSAGE = "has 4 of 21 time steps that were never written (its 'written' flags; the first at 2000-01-01T02)"


@pytest.fixture
def interrupted(swe_store, tmp_path):
    """The SWE store as an interrupted writer leaves it, without its completeness attribute."""
    store = tmp_path / "interrupted.zarr"
    shutil.copytree(swe_store, store)
    group = zarr.open_group(str(store), mode="r+")
    del group.attrs["s2forecast_complete"]
    written = group["written"][:]
    written[2:6] = False
    group["written"][:] = written
    zarr.consolidate_metadata(str(store))
    return store


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main([str(arg) for arg in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit.value.code == 2 and len(lines) == 1, lines
    return lines[0]


def test_open_store_refuses_unwritten_times(interrupted):
    with pytest.raises(ValueError, match=re.escape(MESSAGE)):
        open_store(interrupted)
    with pytest.raises(ValueError, match=re.escape(MESSAGE)):
        FieldDataset(interrupted, SampleSpec(("geopotential_height",), static=(), step_hours=1.0))


def test_a_store_with_every_time_written_opens_without_its_attribute(swe_store, tmp_path):
    store = tmp_path / "old.zarr"
    shutil.copytree(swe_store, store)
    group = zarr.open_group(str(store), mode="r+")
    del group.attrs["s2forecast_complete"]
    zarr.consolidate_metadata(str(store))
    assert open_store(store).sizes["time"] == 21


def test_every_command_refuses_unwritten_times(interrupted, mse_run_1_epoch, tmp_path, capsys):
    before = sorted(p.name for p in (interrupted / "stats").iterdir())
    truth = xr.open_zarr(interrupted)
    forecast = truth[["vorticity"]].isel(time=[0]).expand_dims(prediction_timedelta=[np.timedelta64(1, "h")], axis=1)
    forecast.drop_vars(["written", "trajectory"], errors="ignore").to_netcdf(tmp_path / "forecast.nc")
    commands = {
        "stats": ["stats", interrupted],
        "climatology": ["climatology", interrupted, "--out", tmp_path / "clim.zarr"],
        "rollout": ["rollout", "--ckpt", mse_run_1_epoch.checkpoint, "--store", interrupted, "--steps", "1",
                    "--init-times", "2000-01-01T00", "--out", tmp_path / "f.nc", "--no-progress"],
        "evaluate": ["evaluate", "--forecast", tmp_path / "forecast.nc", "--truth", interrupted, "--out",
                     tmp_path / "m.nc", "--no-plots", "--no-progress"],
    }  # fmt: skip
    for name, argv in commands.items():
        message = refused(argv, capsys)
        assert MESSAGE in message and "rerun the same" in message, (name, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forecast.nc", "interrupted.zarr"]
    assert sorted(p.name for p in (interrupted / "stats").iterdir()) == before
