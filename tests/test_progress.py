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
