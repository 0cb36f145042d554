"""A path starting with ~ is the home directory wherever a user gives one: quoted on the command
line, after ``--option=`` (where the shell does not expand it), or in a YAML config. Only --out
expanded it: inputs were 'not found', and fit's run directory was split between $HOME/runs (Lightning's
checkpoints) and ./~/runs (config.yaml), which --ckpt_path last could not resume."""

import pytest
import xarray as xr
from session_fixtures import tiny_args

from s2forecast.cli import main as cli


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"  # the current directory: nothing may appear in it
    work.mkdir()
    monkeypatch.chdir(work)
    return home


def test_inputs_under_home(home, swe_store, mse_run_1_epoch):
    (home / "swe.zarr").symlink_to(swe_store)
    (home / "m.ckpt").symlink_to(mse_run_1_epoch.checkpoint)
    cli(["stats", "~/swe.zarr", "--out", "~/stats.zarr", "--no-progress"])
    first = str(xr.open_zarr(swe_store)["time"].values[0])[:13]
    cli(["rollout", "--ckpt=~/m.ckpt", "--store=~/swe.zarr", "--steps", "1", "--init-times", first,
         "--out", "~/f.nc", "--no-progress"])  # fmt: skip
    cli(["evaluate", "--forecast", "~/f.nc", "--truth", "~/swe.zarr", "--out", "~/m.nc", "--no-plots",
         "--no-progress"])  # fmt: skip
    assert {"stats.zarr", "f.nc", "m.nc"} <= {p.name for p in home.iterdir()}
    assert list((home.parent / "work").iterdir()) == []


@pytest.mark.slow  # a fit
def test_a_run_under_home_is_written_and_found_there(home, swe_store):
    args = tiny_args(swe_store, home, "--trainer.logger.init_args.save_dir", "~/runs", "--trainer.default_root_dir",
                     "~", "--data.init_args.store", "~/swe.zarr", "--trainer.max_epochs", "1")  # fmt: skip
    (home / "swe.zarr").symlink_to(swe_store)
    cli(["fit", *args])
    (run,) = (home / "runs").glob("*/version_0")
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    cli(["validate", *args, "--ckpt_path", "last"])  # the run's last checkpoint is found ("no last.ckpt" before)
    assert list((home.parent / "work").iterdir()) == []  # no ./~ directory


def test_from_python_a_home_input_is_the_one_outputs_are_checked_against(home):
    """The readers opened "~/s.zarr" in the home directory, while the check that an output does not lie
    inside an input, and the provenance, took it for ./~/s.zarr: a climatology could be written inside
    its own store, and the results named a path that does not exist."""
    from s2forecast.output import check_target
    from s2forecast.provenance import describe_input

    (home / "s.zarr").mkdir()
    with pytest.raises(ValueError, match=r"lies inside the input ~/s\.zarr; write outside it"):
        check_target(home / "s.zarr" / "clim.zarr", ["~/s.zarr"])
    assert describe_input("~/s.zarr") == str(home / "s.zarr")
