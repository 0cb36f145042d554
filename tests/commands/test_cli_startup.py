"""Issue 15/18: one table of subcommands in workflow order, help without the heavy imports,
the cached help of the Lightning commands, and the start-up benchmark script."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from s2forecast import cli, help_cache
from s2forecast.commands import COMMANDS

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "pytorch_lightning", "lightning", "xarray", "torch_harmonics", "wandb")
WORKFLOW = ["generate-swe", "convert-era5", "stats", "fit", "validate", "test", "rollout", "climatology", "evaluate"]


def python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


# what a fresh process prints and imports when it answers `s2forecast ARGS --help`
HELP_PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from s2forecast.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(ARGS + ["--help"])
        except SystemExit as exit:
            assert exit.code in (0, None), exit.code
    heavy = sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))
    print(json.dumps({"help": out.getvalue(), "heavy": heavy}))
    """
)


def probe_help(args: list[str], env: dict | None = None) -> dict:
    code = HELP_PROBE.replace("ARGS", repr(args)).replace("HEAVY", repr(HEAVY))
    result = python(code, env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1]) | {"stderr": result.stderr}


def test_top_level_help_lists_commands_in_workflow_order_one_line_each():
    result = subprocess.run(
        [sys.executable, "-m", "s2forecast.cli", "--help"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    positions = []
    for name in WORKFLOW:
        row = [i for i, line in enumerate(lines) if line.split()[:1] == [name]]
        assert len(row) == 1, f"{name} not listed once: {result.stdout}"
        assert len(lines[row[0]].split()) > 2, f"{name}: no help on its line"
        positions.append(row[0])
    assert positions == sorted(positions), "commands not in workflow order"
    listed = {line.split()[0] for line in lines if line.startswith("    ") and line.split()}
    assert {command.name for command in COMMANDS} <= listed


def test_every_command_has_arguments_and_runner():
    """Each row of the table names functions that exist (the table is the one way to add a command)."""
    for command in COMMANDS:
        assert command.help and len(command.help) <= 60, command  # one line in `s2forecast --help`
        assert command.lightning or callable(command.arguments), command
        assert callable(command.run), command


def test_help_of_every_argparse_command_imports_nothing_heavy():
    names = [command.name for command in COMMANDS if not command.lightning]
    for args in [[], *([name] for name in names)]:
        answer = probe_help(args)
        assert answer["heavy"] == [], f"s2forecast {' '.join(args)} --help imported {answer['heavy']}"
        assert answer["help"].startswith("usage: s2forecast"), answer["help"]
        if args:  # the command's own options are listed
            assert "--" in answer["help"].split("options:")[1]


@pytest.mark.slow  # subprocesses of the CLI
def test_lightning_help_is_cached_and_then_imports_nothing_heavy(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "100"}
    first = probe_help(["fit"], env)  # renders with LightningCLI (slow) and caches
    assert "building this help once" in first["stderr"]
    assert "--print_config" in first["help"] and "--model.lr" in first["help"] and "--trainer" in first["help"]
    assert [path.name.startswith("fit-") for path in (tmp_path / "s2forecast" / "help").glob("*.txt")] == [True]
    second = probe_help(["fit"], env)
    assert second["heavy"] == [] and second["stderr"] == ""
    assert second["help"] == first["help"]


def test_print_config_still_goes_to_lightning(tmp_path, capsys):
    """Only a bare `COMMAND --help` is answered from the cache."""
    config = REPO / "configs" / "swe" / "s2_global.yaml"
    with pytest.raises(SystemExit) as exit:
        cli.main(["fit", "--config", str(config), "--print_config"])
    assert exit.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "model:" in printed and "trainer:" in printed and "s2forecast.training.datamodule.SWEDataModule" in printed
    assert not help_cache.is_plain_help(["fit", "--config", str(config), "--help"])


@pytest.fixture
def fake_render(monkeypatch, tmp_path):
    """The slow rendering replaced by a counter, the cache in tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = []

    def render(command):
        calls.append(command)
        return f"help of {command} #{len(calls)}\n"

    monkeypatch.setattr(help_cache, "render_help", render)
    return calls


def test_stale_cache_is_rendered_again(fake_render, capsys):
    help_cache.print_help("validate")
    help_cache.print_help("validate")
    assert fake_render == ["validate"] and capsys.readouterr().out == "help of validate #1\n" * 2
    path = help_cache.cache_file("validate")
    key, _, text = path.read_text().partition("\n")
    path.write_text(key.replace("jsonargparse=", "jsonargparse=0.0.0-") + "\n" + text)  # another version
    help_cache.print_help("validate")
    assert fake_render == ["validate", "validate"] and capsys.readouterr().out == "help of validate #2\n"
    assert path.read_text().partition("\n")[0].startswith(help_cache.cache_key("validate") + " sha256=")


def test_warm_renders_only_missing_or_stale_help(fake_render, capsys):
    help_cache.warm(["fit", "test"])
    help_cache.warm(["fit", "test", "validate"])  # fit and test are cached already
    assert fake_render == ["fit", "test", "validate"] and capsys.readouterr().out == ""
    help_cache.print_help("fit")
    assert fake_render == ["fit", "test", "validate"] and capsys.readouterr().out == "help of fit #1\n"


def test_cache_key_changes_with_the_source(monkeypatch, tmp_path):
    package = tmp_path / "s2forecast"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("WIDTH = 8\n")
    monkeypatch.setattr("s2forecast.__file__", str(package / "__init__.py"))
    before = help_cache.cache_key("fit")
    assert help_cache.cache_key("fit") == before
    (package / "model.py").write_text("WIDTH = 16\n")
    assert help_cache.cache_key("fit") != before


def test_cache_key_changes_with_jsonargparse_settings(monkeypatch):
    """A review found: JSONARGPARSE_DEFAULT_ENV adds each option's variable to the help, and the
    help cached without it was printed."""
    monkeypatch.delenv("JSONARGPARSE_DEFAULT_ENV", raising=False)
    before = help_cache.cache_key("fit")
    monkeypatch.setenv("JSONARGPARSE_DEFAULT_ENV", "true")
    assert help_cache.cache_key("fit") != before


def test_unwritable_cache_still_prints_help(fake_render, monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    help_cache.print_help("test")
    assert capsys.readouterr().out == "help of test #1\n"
    assert blocker.is_file() and blocker.read_text() == "a file where the cache directory would go"  # untouched


def test_bench_cli_prints_one_json_line_per_command(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_cli.py"), "--repeats", "2", "--commands", "stats", "grid"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["command"] for line in lines] == ["s2forecast stats --help", "s2forecast grid --help"]
    assert all(0 < line["min_s"] <= line["median_s"] <= line["max_s"] and line["repeats"] == 2 for line in lines)


def test_cache_file_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert help_cache.cache_file("fit").parent == tmp_path / "s2forecast" / "help"
    assert help_cache.cache_file("fit").name.startswith("fit-")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for relative_or_unset in ("relative/dir", ""):
        monkeypatch.setenv("XDG_CACHE_HOME", relative_or_unset)
        assert help_cache.cache_file("fit").parent == tmp_path / "home" / ".cache" / "s2forecast" / "help"


def test_stats_and_climatology_of_a_store_import_no_torch(tmp_path):
    """The data commands that only read a store do not load torch (4-5 s and ~0.8 GB a process on
    this machine): the grid is recognised and weighted in numpy (``Grid.from_coords``,
    ``Grid.latitudes_deg``); torch comes with the first tensor a Grid makes."""
    import xarray as xr

    lat, lon = np.linspace(90.0, -90.0, 9), np.arange(16) * 22.5
    times = pd.date_range("2000-01-01", periods=8, freq="6h")
    values = 280.0 + np.random.default_rng(0).normal(size=(times.size, 2, lon.size, lat.size)).astype(np.float32)
    xr.Dataset(
        {"temperature": (("time", "level", "longitude", "latitude"), values, {"units": "K"})},
        coords={"time": times, "level": [500, 850], "longitude": lon, "latitude": lat},
    ).to_zarr(tmp_path / "wb2.zarr", zarr_format=2)
    code = textwrap.dedent(
        f"""
        import sys
        from s2forecast.cli import main
        main(["stats", {str(tmp_path / "wb2.zarr")!r}, "--out", {str(tmp_path / "stats.zarr")!r}, "--no-progress"])
        main(["climatology", {str(tmp_path / "wb2.zarr")!r}, "--out", {str(tmp_path / "clim.zarr")!r}, "--no-progress"])
        print(sorted({{name.split(".")[0] for name in sys.modules}} & {{"torch", "torch_harmonics"}}))
        """
    )
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "stats.zarr").is_dir() and (tmp_path / "clim.zarr").is_dir()
