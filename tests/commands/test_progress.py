"""stats and climatology show their progress on stderr, and not with --no-progress (issue 18)."""

import shutil
import sys

import pytest

from s2forecast.cli import main as cli


@pytest.mark.parametrize("command", ["stats", "climatology"])
def test_progress_on_stderr_unless_turned_off(swe_store, tmp_path, capsys, monkeypatch, command):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # bars are for terminals (a pipe gets none)
    store = tmp_path / "s.zarr"
    shutil.copytree(swe_store, store)
    argv = {"stats": ["stats", str(store)], "climatology": ["climatology", str(store), "--out", str(tmp_path / "c")]}
    cli(argv[command])
    captured = capsys.readouterr()
    assert "100%" in captured.err and "100%" not in captured.out
    cli([*argv[command], "--no-progress", *(["--overwrite"] if command == "climatology" else [])])
    assert "%" not in capsys.readouterr().err


def test_loss_line_shows_training_progress_without_a_bar(swe_store, tmp_path, capsys):
    from session_fixtures import tiny_args

    loss_line = ["--trainer.callbacks+=s2forecast.training.callbacks.LossLine", "--trainer.callbacks.every_n_steps"]
    cli(["fit", *tiny_args(swe_store, tmp_path, "--trainer.max_epochs", "1", *loss_line, "2")])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert lines and lines[0].startswith("step 2  epoch 0  train/loss ") and lines[0].endswith(" s"), lines
    with pytest.raises(SystemExit):
        cli(["fit", *tiny_args(swe_store, tmp_path / "x", *loss_line, "0")])
    assert "every_n_steps must be >= 1, got 0" in capsys.readouterr().err
