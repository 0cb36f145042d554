import json
import subprocess
import sys

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
