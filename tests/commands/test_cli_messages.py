"""The ``s2forecast`` command reports every user error in one line, never a traceback.

A table of bad invocations of every subcommand: each must exit with status 2, print exactly one
line on stderr, ``s2forecast COMMAND: error: ...``, naming the bad value and the fix, and leave
every file as it was. ``--debug`` adds the traceback; a programming error keeps it.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import xarray as xr

from s2forecast.cli import main
from s2forecast.data import compute_stats, generate_swe, open_store
from s2forecast.geometry import Grid
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.datamodule import SWEDataModule

REPO = Path(__file__).parents[2]
RAW_TIME = re.compile(r"\d{15,}|\.0{9}")  # nanoseconds since 1970, or datetime64's ".000000000"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Good and bad inputs: a tiny SWE store with stats, a checkpoint and a forecast for it, an
    empty file, a text file, a truncated NetCDF, a directory that is not a store, an ERA5-like
    file in radians and YAML configs."""
    root = tmp_path_factory.mktemp("messages")
    store = root / "swe.zarr"
    generate_swe(store, 8, 16, trajectories=1, steps=4, progress=False)
    compute_stats(store)
    data = SWEDataModule(str(store), train_trajectories=(0, 1), val_trajectories=None, test_trajectories=None)
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    checkpoint = root / "model.ckpt"
    hparams = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    torch.save({**hparams, "pytorch-lightning_version": pl.__version__}, checkpoint)

    truth = open_store(store)
    times = truth["time"].values[:2]
    leads = np.array([1, 2], dtype="timedelta64[h]").astype("timedelta64[ns]")
    field = truth["vorticity"].values[:2]
    forecast = xr.Dataset(
        {"vorticity": (("time", "prediction_timedelta", "latitude", "longitude"), np.stack([field, field], 1))},
        coords={"time": times, "prediction_timedelta": leads, "latitude": truth["latitude"].values,
                "longitude": truth["longitude"].values},
    )  # fmt: skip
    forecast.to_netcdf(root / "forecast.nc")
    whole = (root / "forecast.nc").read_bytes()
    (root / "truncated.nc").write_bytes(whole[: len(whole) // 2])

    (root / "empty.nc").write_bytes(b"")
    (root / "text.nc").write_text("this is not a NetCDF file\n")
    (root / "not_a_store").mkdir()
    radians = xr.Dataset(
        {"t2m": (("valid_time", "latitude", "longitude"), np.full((1, 5, 8), 280.0, np.float32), {"units": "K"})},
        coords={"valid_time": np.array(["2020-01-01T00"], dtype="datetime64[ns]"),
                "latitude": np.radians(np.linspace(90.0, -90.0, 5)), "longitude": np.radians(np.arange(8) * 45.0)},
    )  # fmt: skip
    radians.to_netcdf(root / "radians.nc")

    base = (
        "trainer:\n  max_epochs: 1\n  logger: false\n  enable_progress_bar: false\n"
        f"  default_root_dir: {root / 'runs'}\n"
        "model:\n  network:\n    embed_dim: 8\n    num_layers: 1\n  warmup_steps: 1\n"
        "data:\n  class_path: s2forecast.training.datamodule.SWEDataModule\n  init_args:\n"
        f"    store: {store}\n    train_trajectories: [0, 1]\n    batch_size: 2\n    num_workers: 0\n"
    )
    configs = {
        "base": base,
        "key_typo": base.replace("warmup_steps: 1", "warmup_stpes: 1"),
        "trainer_typo": base.replace("max_epochs: 1", "max_epoch: 1"),
        "data_typo": base.replace("batch_size: 2", "batch_sise: 2"),
        "wrong_type": base.replace("warmup_steps: 1", "warmup_steps: abc"),
        "data_wrong_type": base.replace("batch_size: 2", "batch_size: many"),
        "bad_class": base.replace("SWEDataModule", "SWEDatamodule"),
        "no_module": base.replace("s2forecast.training.datamodule.SWEDataModule", "nomodule.Foo"),
        "no_store_key": "\n".join(line for line in base.splitlines() if "store:" not in line) + "\n",
        "missing_store": base.replace(str(store), str(root / "nowhere.zarr")),
        "not_a_store": base.replace(str(store), str(root / "not_a_store")),
        "bad_nan_policy": base.replace("num_workers: 0", "num_workers: 0\n    nan_policy: maybe"),
        "syntax": "trainer:\n  max_epochs: [1\nmodel: {}\n",
        "a_list": "- trainer\n- model\n",
    }
    paths = {name: root / f"{name}.yaml" for name in configs}
    for name, text in configs.items():
        paths[name].write_text(text)
    found = {"root": root, "store": store, "ckpt": checkpoint, "forecast": root / "forecast.nc"}
    found |= {name: root / f"{name}.nc" for name in ("empty", "text", "truncated", "radians")}
    found["not_a_store"] = root / "not_a_store"
    found |= {f"{name}_yaml": path for name, path in paths.items()}
    found["out"] = root / "out"  # never created: every case fails before writing
    return {name: str(path) for name, path in found.items()}


def snapshot(root: str) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under ``root``: a failed command must not write or delete any."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in Path(root).rglob("*")}


ROLLOUT = ["rollout", "--ckpt", "{ckpt}", "--store", "{store}", "--steps", "1", "--out", "{out}.nc", "--no-progress"]
EVALUATE = ["evaluate", "--truth", "{store}", "--out", "{out}.nc", "--no-plots", "--no-progress"]
INIT = ["--init-times", "2000-01-01T01"]

# (subcommand arguments, words the one line must contain)
CASES = {
    "unknown command": (["gird"], ["'gird'", "did you mean 'grid'"]),
    "grid nlat 0": (["grid", "--nlat", "0", "--nlon", "16"], ["--nlat", "'0'", ">= 1"]),
    "grid nlat text": (["grid", "--nlat", "abc", "--nlon", "16"], ["--nlat", "'abc'", "integer"]),
    "grid missing option": (["grid", "--nlat", "8"], ["--nlon", "required"]),
    "convert-era5 missing input": (["convert-era5", "{root}/nope.nc", "--out", "{out}.zarr"], ["nope.nc", "not exist"]),
    "convert-era5 empty file": (["convert-era5", "{empty}", "--out", "{out}.zarr"], ["empty.nc", "not a NetCDF"]),
    "convert-era5 text file": (["convert-era5", "{text}", "--out", "{out}.zarr"], ["text.nc", "not a NetCDF"]),
    "convert-era5 time chunk 0": (
        ["convert-era5", "{text}", "--out", "{out}.zarr", "--time-chunk", "0"],
        ["--time-chunk", "'0'", ">= 1"],
    ),
    "convert-era5 radians": (
        ["convert-era5", "{radians}", "--out", "{out}.zarr", "--no-progress"],
        ["radians", "1.571", "np.degrees"],
    ),
    "generate-swe trajectories 0": (["generate-swe", "--out", "{out}.zarr", "--trajectories", "0"], ["--trajectories"]),
    "generate-swe steps negative": (["generate-swe", "--out", "{out}.zarr", "--steps", "-3"], ["--steps must be >= 1"]),
    "generate-swe dt nan": (["generate-swe", "--out", "{out}.zarr", "--dt-hours", "nan"], ["--dt-hours", "nan"]),
    "stats directory not a store": (["stats", "{not_a_store}"], ["not_a_store", "not a zarr store"]),
    "stats text file": (["stats", "{text}"], ["text.nc", "not a zarr store"]),
    "stats missing store": (["stats", "{root}/nowhere.zarr"], ["nowhere.zarr"]),
    "stats bad time": (["stats", "{store}", "--start", "garbage"], ["--start", "'garbage'", "2020-01-01T06"]),
    "stats no times in range": (["stats", "{store}", "--start", "2030-01-01"], ["2030-01-01 is", "2000-01-01T00"]),
    "stats step 0": (["stats", "{store}", "--step-hours", "0"], ["--step-hours", "got 0"]),
    "rollout batch size 0": ([*ROLLOUT, *INIT, "--batch-size", "0"], ["--batch-size", "'0'", ">= 1"]),
    "rollout every 0": (
        [*ROLLOUT, "--start", "2000-01-01T00", "--end", "2000-01-01T02", "--every", "0"],
        ["--every", "'0'", "> 0"],
    ),
    "rollout steps 0": ([*ROLLOUT[:5], "--steps", "0", *ROLLOUT[7:], *INIT], ["--steps", "'0'"]),
    "rollout bad init time": ([*ROLLOUT, "--init-times", "2000-13-45"], ["--init-times", "'2000-13-45'"]),
    "rollout init time not in store": (
        [*ROLLOUT, "--init-times", "2030-01-01T06"],
        ["2030-01-01T06", "not in the store", "2000-01-01T00"],
    ),
    "rollout end before start": (
        [*ROLLOUT, "--start", "2000-01-01T03", "--end", "2000-01-01T01"],
        ["--end 2000-01-01T01", "--start 2000-01-01T03"],
    ),
    "rollout no store time in range": (
        [*ROLLOUT, "--start", "2030-01-01", "--end", "2030-01-02"],
        ["2030-01-01T00", "2000-01-01T00"],
    ),
    "rollout unknown device": ([*ROLLOUT, *INIT, "--device", "gpu0"], ["--device", "'gpu0'", "cpu"]),
    # a mistyped option got no suggestion, where fit's do (a review)
    "rollout mistyped option": ([*ROLLOUT, *INIT, "--member", "2"], ["--member 2; did you mean '--members'"]),
    "rollout checkpoint is text": ([*ROLLOUT[:2], "{text}", *ROLLOUT[3:], *INIT], ["checkpoint"]),
    "rollout checkpoint is empty": ([*ROLLOUT[:2], "{empty}", *ROLLOUT[3:], *INIT], ["checkpoint"]),
    "rollout store not a store": ([*ROLLOUT[:4], "{not_a_store}", *ROLLOUT[5:], *INIT], ["not_a_store"]),
    "climatology not a store": (["climatology", "{not_a_store}", "--out", "{out}.zarr"], ["not a zarr store"]),
    "climatology bad end": (["climatology", "{store}", "--out", "{out}.zarr", "--end", "soon"], ["'soon'"]),
    "evaluate empty forecast": ([*EVALUATE, "--forecast", "{empty}"], ["forecast", "empty.nc", "empty"]),
    "evaluate text forecast": ([*EVALUATE, "--forecast", "{text}"], ["forecast", "text.nc", "not a NetCDF"]),
    "evaluate truncated forecast": ([*EVALUATE, "--forecast", "{truncated}"], ["truncated.nc", "truncated"]),
    "evaluate directory forecast": ([*EVALUATE, "--forecast", "{not_a_store}"], ["not_a_store", "not a zarr store"]),
    "evaluate text truth": (
        ["evaluate", "--forecast", "{forecast}", "--truth", "{text}", "--out", "{out}.nc"],
        ["text.nc", "not a zarr store"],
    ),
    "evaluate empty climatology": (
        [*EVALUATE, "--forecast", "{forecast}", "--climatology", "{empty}"],
        ["climatology", "empty.nc", "empty"],
    ),
    "evaluate map lead nan": ([*EVALUATE, "--forecast", "{forecast}", "--map-leads", "nan"], ["--map-leads", "'nan'"]),
    "evaluate bad climatology start": (
        [*EVALUATE, "--forecast", "{forecast}", "--climatology-start", "someday"],
        ["--climatology-start", "'someday'"],
    ),
    "fit key typo": (
        ["fit", "--config", "{key_typo_yaml}"],
        ["'model.warmup_stpes'", "key_typo.yaml", "'model.warmup_steps'"],
    ),
    "fit trainer key typo": (
        ["fit", "--config", "{trainer_typo_yaml}"],
        ["'trainer.max_epoch'", "'trainer.max_epochs'"],
    ),
    "fit data key typo": (
        ["fit", "--config", "{data_typo_yaml}"],
        ["'data.init_args.batch_sise'", "'data.init_args.batch_size'"],
    ),
    "fit wrong type": (["fit", "--config", "{wrong_type_yaml}"], ["model.warmup_steps", "expected int", "'abc'"]),
    "fit data wrong type": (
        ["fit", "--config", "{data_wrong_type_yaml}"],
        ["data.init_args.batch_size", "expected int", "'many'"],
    ),
    "fit bad class_path": (
        ["fit", "--config", "{bad_class_yaml}"],
        [
            "'s2forecast.training.datamodule.SWEDatamodule'",
            "did you mean 's2forecast.training.datamodule.SWEDataModule'",
        ],
    ),
    "fit unknown module": (
        ["fit", "--config", "{no_module_yaml}"],
        [
            "'nomodule.Foo'",
            "s2forecast.training.datamodule.ERA5DataModule",
            "s2forecast.training.datamodule.SWEDataModule",
        ],
    ),
    "fit missing required key": (["fit", "--config", "{no_store_key_yaml}"], ["data.init_args.store", "required"]),
    "fit missing config file": (["fit", "--config", "{root}/absent.yaml"], ["absent.yaml", "does not exist"]),
    "fit invalid yaml": (["fit", "--config", "{syntax_yaml}"], ["invalid YAML", "syntax.yaml", "line 3"]),
    "fit yaml not a mapping": (["fit", "--config", "{a_list_yaml}"], ["a_list.yaml", "not a YAML mapping"]),
    "fit binary config": (["fit", "--config", "{ckpt}"], ["model.ckpt", "not a text YAML file"]),
    "fit option typo": (["fit", "--config", "{base_yaml}", "--modle.lr", "1"], ["--modle.lr", "'--model.lr'"]),
    "fit option wrong type": (
        ["fit", "--config", "{base_yaml}", "--trainer.max_epochs", "abc"],
        ["trainer.max_epochs", "expected int", "'abc'"],
    ),
    "fit option not in a literal": (
        ["fit", "--config", "{base_yaml}", "--trainer.precision", "7"],
        ["trainer.precision", "expected one of", "'bf16-mixed'", "got '7'"],
    ),
    "fit Lightning's optimizer option": (  # it replaced the model's optimizer, model.lr ignored (a review found it)
        ["fit", "--config", "{base_yaml}", "--optimizer", "SGD"],
        ["--optimizer is not an option", "are the model's; set model.lr, model.weight_decay, model.warmup_steps"],
    ),
    "fit no config": (["fit"], ["data is required", "--config"]),
    "fit storage options not printed": (  # credentials (a review found a token in the line)
        ["fit", "--config", "{base_yaml}", "--data.init_args.storage_options", '"s3cret"'],
        ["data.init_args.storage_options: expected dict, got '***'"],
    ),
    "fit value refused by the DataModule": (["fit", "--config", "{bad_nan_policy_yaml}"], ["nan_policy", "'maybe'"]),
    "fit store does not exist": (["fit", "--config", "{missing_store_yaml}"], ["nowhere.zarr"]),
    "fit store is not a store": (["fit", "--config", "{not_a_store_yaml}"], ["not_a_store", "not a zarr store"]),
    "validate key typo": (["validate", "--config", "{key_typo_yaml}"], ["'model.warmup_stpes'", "did you mean"]),
}


def run_in_process(argv: list[str], capsys) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    return exit.value.code, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("case", list(CASES))
def test_user_error_is_one_line(case, files, capsys, monkeypatch):
    template, words = CASES[case]
    monkeypatch.chdir(files["root"])  # the configs' relative outputs (if any) stay in tmp
    argv = [arg.format(**files) for arg in template]
    before = snapshot(files["root"])
    code, lines = run_in_process(argv, capsys)
    command = "s2forecast" if argv[0] == "gird" else f"s2forecast {argv[0]}"
    error_lines = [line for line in lines if line.startswith("s2forecast")]
    assert code == 2, lines
    # Lightning may log (e.g. "Seed set to 0") before a DataModule fails; nothing else may be printed
    assert len(error_lines) == 1 and lines[-1] == error_lines[0], lines
    assert lines[-1].startswith(f"{command}: error: "), lines
    assert len(lines) == 1 or argv[0] in ("fit", "validate"), lines
    print(lines[-1])  # pytest -s shows every message
    for word in words:
        assert word in lines[-1], (word, lines[-1])
    assert not RAW_TIME.search(lines[-1]), lines[-1]
    assert "Traceback" not in "\n".join(lines)
    assert snapshot(files["root"]) == before  # nothing written, replaced or deleted


def test_debug_shows_the_traceback(files, capsys):
    code, lines = run_in_process(["--debug", "stats", files["not_a_store"]], capsys)
    assert code == 2 and lines[0].startswith("Traceback") and len(lines) > 2
    assert lines[-1].startswith("s2forecast stats: error: ") and "not a zarr store" in lines[-1]
    code, lines = run_in_process(["fit", "--config", files["key_typo_yaml"], "--debug"], capsys)
    assert code == 2 and "Traceback" in lines[0] and "ConfigError" in "\n".join(lines)
    assert lines[-1].startswith("s2forecast fit: error: unknown key 'model.warmup_stpes'")


@pytest.mark.parametrize("error", [TypeError("a bug"), ValueError("a bug"), KeyError("a bug")])
def test_programming_error_keeps_its_traceback(monkeypatch, capsys, error):
    """Only UserError (and the third-party failures that mean bad input) is one line: a plain
    ValueError raised by s2forecast is a bug, printed with its traceback and a request to report it."""

    def broken(args):
        raise error

    monkeypatch.setattr("s2forecast.commands.grid.run", broken)
    with pytest.raises(SystemExit) as exit_:
        main(["grid", "--nlat", "8", "--nlon", "16"])
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err.startswith("Traceback") and f"{type(error).__name__}: " in err
    assert err.splitlines()[-1].startswith("s2forecast grid: internal error: this is a bug in s2forecast")
    assert "error: a bug" not in err


def test_raised_user_error_is_one_line(monkeypatch, capsys):
    from s2forecast.user_errors import UserError

    def refuses(args):
        raise UserError("--nlat 8 is too small for this; use --nlat 16 or more")

    monkeypatch.setattr("s2forecast.commands.grid.run", refuses)
    with pytest.raises(SystemExit) as exit_:
        main(["grid", "--nlat", "8", "--nlon", "16"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "s2forecast grid: error: --nlat 8 is too small for this; use --nlat 16 or more\n"


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("s2forecast.commands.grid.run", interrupted)
    for extra, traceback in (([], False), (["--debug"], True)):
        with pytest.raises(SystemExit) as exit_:
            main(["grid", "--nlat", "8", "--nlon", "16", *extra])
        err = capsys.readouterr().err
        assert exit_.value.code == 130 and err.endswith("s2forecast grid: interrupted\n")
        assert err.startswith("Traceback") == traceback and (err.count("\n") == 1) != traceback


def test_ctrl_c_of_a_store_writer_says_how_to_go_on(monkeypatch, capsys, tmp_path):
    """A review: "s2forecast generate-swe: interrupted" alone; the store it was writing is resumed by the
    same command."""

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("s2forecast.commands.generate_swe.run", interrupted)
    with pytest.raises(SystemExit) as exit_:
        main(["generate-swe", "--out", str(tmp_path / "swe.zarr")])
    assert exit_.value.code == 130 and capsys.readouterr().err == (
        "s2forecast generate-swe: interrupted; rerun the same command to finish it (a new store keeps what was "
        "written; --overwrite starts again)\n"
    )


def test_diverging_solver_is_one_line(tmp_path, capsys):
    """generate-swe on a 3x4 grid would blow up: refused before integrating, in one line."""
    argv = ["generate-swe", "--out", str(tmp_path / "s.zarr"), "--nlat", "3", "--nlon", "4", "--trajectories", "1"]
    code, lines = run_in_process([*argv, "--steps", "1", "--no-progress"], capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("s2forecast generate-swe: error: ")
    assert "--nlat must be >= 4, got 3" in lines[0]


@pytest.mark.parametrize(
    "error, expected",
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has ..."), "20.00 GiB"),
        (RuntimeError("CPUAllocator: can't allocate memory: you tried to allocate 80000000000 bytes"), "74.5 GiB"),
        (MemoryError(), "out of memory: "),
    ],
)
def test_out_of_memory_is_a_user_error(error, expected):
    from s2forecast.user_errors import user_error_message

    message = user_error_message(error)
    assert message.startswith("out of memory") and expected in message and "smaller" in message


class _BadSample(torch.utils.data.Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, index):
        from s2forecast.data.fields import NonFiniteData

        raise NonFiniteData("vorticity has non-finite values at 2000-01-01T03 in x.zarr")


def test_error_from_a_dataloader_worker_is_its_own_message():
    """torch re-raises a worker's error with the worker's traceback in the message: show its last line."""
    from s2forecast.user_errors import UserError, user_error_message

    with pytest.raises(UserError) as error:  # torch re-raises the worker's exception type
        next(iter(torch.utils.data.DataLoader(_BadSample(), num_workers=1)))
    assert "Traceback" in str(error.value)  # what the user would have seen
    assert user_error_message(error.value) == "vorticity has non-finite values at 2000-01-01T03 in x.zarr"


def test_missing_optional_package_is_a_user_error_but_not_a_missing_module_of_ours():
    from s2forecast.user_errors import user_error_message

    message = user_error_message(ModuleNotFoundError("No module named 'cfgrib'", name="cfgrib"))
    assert "'cfgrib'" in message and "install it" in message
    assert user_error_message(ModuleNotFoundError("No module named 's2forecast.x'", name="s2forecast.x")) is None


def cli_subprocess(*args: str, cwd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "s2forecast.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


@pytest.mark.slow  # subprocesses of the CLI
def test_real_stderr_is_one_line(files):
    result = cli_subprocess("stats", files["not_a_store"], cwd=files["root"])
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("s2forecast stats: error: ")
    result = cli_subprocess("fit", "--config", files["key_typo_yaml"], cwd=files["root"])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("s2forecast fit: error: unknown key")


@pytest.mark.parametrize(
    "lat, lon, which",
    [
        (np.linspace(90.0, -90.0, 8), np.arange(16) * 22.5, None),
        (np.radians(np.linspace(90.0, -90.0, 8)), np.radians(np.arange(16) * 22.5), "latitude/longitude"),
        (np.radians(np.linspace(-88.5, 88.5, 60)), np.radians(np.arange(120) * 3.0 - 180.0), "latitude/longitude"),
        (np.radians(np.linspace(90.0, -90.0, 8)), np.arange(16) * 22.5, "latitudes"),
        (np.linspace(90.0, -90.0, 8), np.radians(np.arange(16) * 22.5), "longitudes"),
    ],
)
def test_radians_are_not_called_a_regional_grid(lat, lon, which):
    if which is None:
        assert Grid.from_coords(lat, lon) == Grid(8, 16)
        return
    with pytest.raises(ValueError) as error:
        Grid.from_coords(lat, lon)
    message = str(error.value)
    assert message.startswith(f"{which} look like radians") and "np.degrees" in message
    assert "regional" not in message and "\n" not in message


@pytest.mark.parametrize(
    "leads, expected, absent",
    [
        ([1, 5], "lead(s) 5 h have no truth at all", "average over fewer"),  # +5 h never in the truth
        ([1, 2], "lead(s) 2 h average over fewer init times", "no truth at all"),  # +2 h of the second init missing
    ],
)
def test_missing_truth_warning_lists_only_leads_it_has(leads, expected, absent):
    from s2forecast.evaluation.inputs import count_init_times_with_truth
    from s2forecast.evaluation.metrics import MissingTruthWarning

    hour = np.timedelta64(1, "h")
    start = np.datetime64("2000-01-01T00", "ns")
    init_times, truth_times = start + np.array([0, 1]) * hour, start + np.array([0, 1, 2]) * hour
    truth = xr.Dataset(coords={"time": truth_times})
    with pytest.warns(MissingTruthWarning) as warned:
        count_init_times_with_truth(init_times, np.array(leads) * hour, truth, "truth.zarr")
    message = str(warned[0].message)
    assert expected in message and absent not in message and "[]" not in message
