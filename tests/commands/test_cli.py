import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from s2forecast.cli import main


def test_help_lists_subcommands():
    result = subprocess.run([sys.executable, "-m", "s2forecast.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "grid" in result.stdout


def test_grid_subcommand(capsys):
    main(["grid", "--nlat", "64", "--nlon", "128"])
    info = json.loads(capsys.readouterr().out)
    assert info["points"] == 8192 and info["band_rows"] == 7
    assert info["neighbors_max"] > info["neighbors_mean"] > 100


def test_grid_subcommand_bad_radius(capsys):
    try:
        main(["grid", "--nlat", "8", "--nlon", "16", "--theta", "-1"])
    except SystemExit as exit:
        assert exit.code == 2
    assert "theta must be" in capsys.readouterr().err


def test_rollout_format_follows_the_out_suffix(tmp_path, capsys):
    """Issue 28: --out x.zarr writes zarr without --format; a contradiction is refused in one line."""
    from s2forecast.output import output_format

    assert output_format("f.zarr", None) == "zarr" and output_format("f.ZARR/", None) == "zarr"
    assert output_format("f.nc", None) == output_format("forecast", None) == "netcdf"
    assert output_format("forecast", "zarr") == "zarr" and output_format("f.nc", "netcdf") == "netcdf"
    out = tmp_path / "f.nc"
    with pytest.raises(SystemExit) as exit:
        main(["rollout", "--ckpt", str(tmp_path / "c.ckpt"), "--store", str(tmp_path), "--steps", "1",
              "--format", "zarr", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert exit.value.code == 2 and err == [
        f"s2forecast rollout: error: --format zarr with --out {out}, a name for netcdf: give --out a .zarr name, "
        "or --format netcdf"
    ]
    assert list(tmp_path.iterdir()) == []


def test_our_warnings_are_one_line_without_source():
    """Issue 28: MissingTruthWarning printed a stray source line (Python's warning format)."""
    import warnings

    import s2forecast
    from s2forecast.cli import one_line_warnings
    from s2forecast.evaluation.metrics import MissingTruthWarning

    original = warnings.formatwarning
    ours = str(Path(s2forecast.__file__).parent / "evaluation" / "inputs.py")  # a plain UserWarning of ours
    with one_line_warnings("evaluate"):
        text = warnings.formatwarning("the truth has no data", UserWarning, ours, 416, "warnings.warn(")
        caller = warnings.formatwarning("no truth", MissingTruthWarning, "/home/me/script.py", 9, "evaluate(")
        other = warnings.formatwarning("something", UserWarning, "/site-packages/zarr/api.py", 3, "warn(x)")
    assert text == "s2forecast evaluate: warning: the truth has no data\n"
    assert caller == "s2forecast evaluate: warning: no truth\n"  # our class, wherever stacklevel points
    assert other == original("something", UserWarning, "/site-packages/zarr/api.py", 3, "warn(x)")
    assert warnings.formatwarning is original


def test_lightnings_warning_at_every_resume_is_said_in_one_line():
    """`fit --ckpt_path last` printed Lightning's raw warning (its file and line) that best_model_score
    and others 'won't be reloaded': a resumed run logs to a new version_N. In a process of its own, as
    the command: importing Lightning inside the command replaces the warnings' format (a first fix
    held only where Lightning was imported before, as in pytest's process)."""
    import subprocess
    import sys

    script = (
        "from s2forecast.warning_format import one_line_warnings\n"
        "with one_line_warnings('fit'):\n"
        "    import s2forecast.training.cli  # imports Lightning, as fit does\n"
        "    import warnings\n"
        "    from pytorch_lightning.callbacks import model_checkpoint\n"
        "    where = model_checkpoint.__file__  # as ModelCheckpoint warns it, from a file of Lightning's\n"
        "    warnings.warn_explicit(\"The dirpath has changed from '/r/v0/checkpoints' to '/r/v1/checkpoints', "
        "therefore `best_model_score`, `kth_best_model_path`, `kth_value`, `last_model_path` and `best_k_models` "
        "won't be reloaded. Only `best_model_path` will be reloaded.\", UserWarning, where, 566)\n"
        "    warnings.warn_explicit('another of Lightning', UserWarning, where, 567)\n"
        "    warnings.warn('a warning of another library')  # through Lightning's format, back to ours: recursed\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    said = (
        "s2forecast fit: warning: resumed from a checkpoint in '/r/v0/checkpoints'; this run writes its checkpoints "
        "to '/r/v1/checkpoints' and tracks its best one (best-*.ckpt) anew there: the earlier run's stay where they are"
    )
    assert said in lines and "dirpath has changed" not in result.stderr, result.stderr
    assert any("another of Lightning" in line and "s2forecast fit" not in line for line in lines)  # its format
    assert any(line.endswith("UserWarning: a warning of another library") for line in lines), result.stderr
