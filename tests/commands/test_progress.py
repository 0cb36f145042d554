"""Commands show their progress on stderr, on a terminal only, and not with --no-progress (issues 18, 28)."""

import shutil
import sys
from pathlib import Path

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

    """With gradient accumulation a batch ends every micro-batch: it printed step 0 before any step, each
    step twice, and the micro-batch loss Lightning divides by the accumulation (half of train/loss)."""
    loss_line = ["--trainer.callbacks+=s2forecast.training.callbacks.LossLine", "--trainer.callbacks.every_n_steps"]
    accumulate = ["--trainer.accumulate_grad_batches", "2"]
    cli(["fit", *tiny_args(swe_store, tmp_path, "--trainer.max_epochs", "1", *accumulate, *loss_line, "1")])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert lines and lines[0].startswith("step 1  epoch 0  train/loss ") and lines[0].endswith(" s"), lines
    steps = [line.split()[1] for line in lines]
    assert steps == [str(k) for k in range(1, len(steps) + 1)] and len(steps) >= 2, steps
    # the learning rate of the step shown, not the next one's: the last line said 0 (the cosine's end)
    assert all(float(line.split("  lr ")[1].split()[0]) > 0 for line in lines), lines
    with pytest.raises(SystemExit):
        cli(["fit", *tiny_args(swe_store, tmp_path / "x", *loss_line, "0")])
    assert "every_n_steps must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("terminal", [True, False])
def test_bars_are_drawn_on_a_terminal_only(mse_run_1_epoch, swe_store, tmp_path, capsys, monkeypatch, terminal):
    """generate-swe, convert-era5, rollout and evaluate draw their bars on a terminal, and not into
    a redirected log, where every redraw was a line of carriage returns (issue 28)."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    sample = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"
    forecast = tmp_path / "f.nc"
    commands = [
        ["generate-swe", "--out", tmp_path / "swe.zarr", "--nlat", "8", "--nlon", "16", "--trajectories", "1",
         "--steps", "1"],
        ["convert-era5", sample, "--out", tmp_path / "era5.zarr", "--variables", "t2m"],
        ["rollout", "--ckpt", mse_run_1_epoch.checkpoint, "--store", swe_store, "--steps", "1", "--init-times",
         "2000-01-01T00", "--out", forecast],
        ["evaluate", "--forecast", forecast, "--truth", swe_store, "--out", tmp_path / "m.nc", "--no-plots",
         "--regions", "global"],
    ]  # fmt: skip
    for argv in commands:
        cli([str(a) for a in argv])
        err = capsys.readouterr().err
        assert ("100%" in err) == terminal, (argv[0], err)
