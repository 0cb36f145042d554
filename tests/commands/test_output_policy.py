"""The output policy (``s2forecast.output``) on every command that writes, through ``s2forecast``.

Every writing command (rollout to NetCDF and zarr, climatology, evaluate with its CSV and plots,
stats, convert-era5, generate-swe) must: refuse an output that is, contains or lies inside an
input, the current directory or a parent of it; refuse an existing path without --overwrite and
a path s2forecast did not write even with it; replace its own artifact with --overwrite; never
leave a half-written output (kill -9, full disk, read-only directory), cleaning a killed run's
leftovers on the next run; refuse an incomplete store or a path that is not a store; and fail,
writing nothing, when a store is rewritten while it reads it. Each refusal is one line, and
"nothing changed" is checked on a listing with content hashes of the directories involved.
"""

import errno
import hashlib
import os
import re
import shutil
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
import zarr

from s2forecast import output as output_module
from s2forecast.cli import main as cli
from s2forecast.data import compute_stats, generate_swe, open_store
from s2forecast.data import stats as stats_module
from s2forecast.data import swe as swe_module
from s2forecast.data.writer import StoreWriter
from s2forecast.evaluation import climatology as climatology_module
from s2forecast.evaluation import evaluate as evaluate_module
from s2forecast.inference import initial_conditions as initial_conditions_module
from s2forecast.inference import rollout as rollout_module
from s2forecast.output import (
    GENERATION_ATTR,
    MARKER_ATTR,
    MARKER_FILE,
    Output,
    artifact_attributes,
    artifact_kind,
    clean_leftovers,
    remove_if_still_ours,
    written_by_s2forecast,
)
from s2forecast.user_errors import UserError

# a tiny, fast shallow-water store: two trajectories of two states, two solver steps between them
SWE = ["--nlat", "8", "--nlon", "16", "--trajectories", "2", "--steps", "1", "--solver-dt-seconds", "1800",
       "--no-progress"]  # fmt: skip


# --- inputs shared by the module ----------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    root: Path
    store: Path  # SWE store with stats, 8x16, 2 trajectories of 4 times
    ckpt: Path  # a checkpoint trained on it for one step
    forecast: Path  # a rollout of it (NetCDF)
    era5: Path  # a CDS-like ERA5 NetCDF (t2m, 4 times on a 5x8 grid)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Inputs:
    import pytorch_lightning as pl

    from s2forecast.training import ForecastModule, data_info
    from s2forecast.training.datamodule import SWEDataModule

    root = tmp_path_factory.mktemp("inputs")
    store = generate_swe(root / "swe.zarr", 8, 16, trajectories=2, steps=3, solver_dt_seconds=1800, progress=False)
    compute_stats(store)
    data = SWEDataModule(str(store), train_trajectories=(0, 2), val_trajectories=None, test_trajectories=None,
                         batch_size=4)  # fmt: skip
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(model, datamodule=data)
    ckpt = root / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    times = open_store(store)["time"].values[:2]
    forecast = rollout_module.rollout(ckpt, store, 2, times, root / "forecast.nc", progress=False)
    times = np.datetime64("2020-01-01T00", "ns") + np.arange(4) * np.timedelta64(6, "h")
    lat, lon = np.linspace(90.0, -90.0, 5), np.arange(8) * 45.0
    t2m = 280.0 + np.random.default_rng(0).normal(size=(4, 5, 8)).astype(np.float32)
    era5 = xr.Dataset(
        {"t2m": (("valid_time", "latitude", "longitude"), t2m, {"units": "K"})},
        coords={"valid_time": times, "latitude": lat, "longitude": lon},
    )
    era5.to_netcdf(root / "era5.nc")
    return Inputs(root, store, ckpt, forecast, root / "era5.nc")


# --- the writing commands -----------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """A writing command: its output's name and how to call it."""

    name: str
    out: str
    resumable: bool = False  # a store writer: an existing store of its own is resumed, not refused

    def argv(self, inputs: Inputs, out, *extra) -> list[str]:
        out = str(out)
        args = {
            "rollout": ["rollout", "--ckpt", str(inputs.ckpt), "--store", str(inputs.store), "--steps", "2",
                        "--init-times", "2000-01-01T01", "--out", out, "--no-progress"],
            "climatology": ["climatology", str(inputs.store), "--out", out],
            "evaluate": ["evaluate", "--forecast", str(inputs.forecast), "--truth", str(inputs.store), "--out", out,
                         "--variables", "vorticity", "--no-plots", "--no-progress"],
            "convert-era5": ["convert-era5", str(inputs.era5), "--out", out, "--time-chunk", "1", "--no-progress"],
            "generate-swe": ["generate-swe", "--out", out, *SWE],
        }[self.name.split(":")[0]]  # fmt: skip
        if self.name == "rollout:zarr":
            args += ["--format", "zarr"]
        if self.name == "evaluate:plots":
            args.remove("--no-plots")
        return [*args, *extra]

    def inputs_of(self, inputs: Inputs) -> list[Path]:
        return {
            "rollout": [inputs.store, inputs.ckpt],
            "climatology": [inputs.store],
            "evaluate": [inputs.forecast, inputs.store],
            "convert-era5": [inputs.era5],
            "generate-swe": [],
        }[self.name.split(":")[0]]


COMMANDS = [
    Command("rollout", "f.nc"),
    Command("rollout:zarr", "f.zarr"),
    Command("climatology", "c.zarr"),
    Command("evaluate", "m.nc"),
    Command("convert-era5", "s.zarr", resumable=True),
    Command("generate-swe", "s.zarr", resumable=True),
]
BY_NAME = {command.name: command for command in COMMANDS}
ALL = pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])


def refused(argv, capsys) -> str:
    """Run ``s2forecast ARGV``, expect a user error, and return its one line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        cli([str(a) for a in argv])
    assert exit.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"s2forecast {argv[0]}: error: ")
    return lines[0]


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` (hidden ones too) with its content hash ("dir" for directories)."""
    listing = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        listing[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return listing


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob("*") if ".s2forecast-tmp-" in p.name or ".s2forecast-old-" in p.name]


def foreign(path: Path, kind: str) -> None:
    if kind == "file":
        path.write_text("my notes\n")
    else:
        path.mkdir()
        (path / "results.txt").write_text("my results\n")


def own_store(inputs: Inputs, tmp_path: Path) -> Path:
    """A copy of the input store (with its stats) for a test to rewrite."""
    return Path(shutil.copytree(inputs.store, tmp_path / "own.zarr"))


# --- refusals -----------------------------------------------------------------------------------


@ALL
@pytest.mark.parametrize("kind", ["file", "dir"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_foreign_path_is_never_replaced(inputs, tmp_path, capsys, command, kind, overwrite):
    out = tmp_path / command.out
    foreign(out, kind)
    before = snapshot(tmp_path)
    message = refused(command.argv(inputs, out, *(["--overwrite"] if overwrite else [])), capsys)
    # with or without --overwrite: advice to pass it would only lead to this refusal
    assert f"--out {out} exists and was not written by s2forecast" in message and "even with --overwrite" in message
    assert snapshot(tmp_path) == before


@pytest.mark.slow  # the PNG plots
def test_evaluate_replaces_its_csv_and_plots_only(inputs, tmp_path, capsys):
    """The CSV beside the metrics is ours only while our metrics file records its hash; the plots
    directory only while it holds nothing but the files its marker lists."""
    out, csv, plots = tmp_path / "m.nc", tmp_path / "m.csv", tmp_path / "m_plots"
    argv = BY_NAME["evaluate"].argv(inputs, out, "--overwrite")
    argv.remove("--no-plots")
    cli(argv)
    assert (plots / MARKER_FILE).is_file() and any(p.suffix == ".png" for p in plots.iterdir())
    assert generation(plots) != generation(out)  # both carry a marker, each its own generation
    ours = csv.read_bytes()
    for change, path, why in (
        # the user's table where ours was: judged by the hash our metrics file records, not by a marker
        (lambda: csv.write_text("variable,value\nmine,1\n"), csv, "its contents are not what s2forecast wrote "
         "there: it was edited or replaced"),
        (lambda: (plots / "notes.txt").write_text("mine\n"), plots, "it holds notes.txt, which s2forecast did not "
         "write"),  # the user's file in our plots
        (lambda: (shutil.rmtree(plots), foreign(plots, "dir")), plots, "it has no s2forecast marker"),  # theirs
    ):  # fmt: skip
        change()
        before = snapshot(tmp_path)
        assert f"{path} exists and was not written by s2forecast ({why})" in refused(argv, capsys)
        assert snapshot(tmp_path) == before
        csv.write_bytes(ours)
    shutil.rmtree(plots)
    cli(argv)  # ours again: replaced
    assert leftovers(tmp_path) == []


@ALL
@pytest.mark.parametrize("where", [".", ".."])
def test_out_is_the_current_directory_or_a_parent(inputs, tmp_path, capsys, monkeypatch, command, where):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(work)
    before = snapshot(tmp_path)
    message = refused(command.argv(inputs, where, "--overwrite"), capsys)
    assert f"--out {where} is the current directory or one of its parents" in message
    assert snapshot(tmp_path) == before


def test_out_ending_in_dot_dot_is_refused(tmp_path, capsys):
    """A review found: --out s.zarr/time/.. (s.zarr itself) passed every check; the temporary siblings went
    inside the artifact being replaced, and the commit failed with 'Device or resource busy'."""
    from s2forecast.output import check_target

    (tmp_path / "s.zarr" / "time").mkdir(parents=True)
    for out in (tmp_path / "s.zarr" / "time" / "..", f"{tmp_path}/s.zarr/."):
        with pytest.raises(UserError, match=rf"^--out {re.escape(str(out))} ends in '.' or '..'; name the output "
                           rf"itself, e.g. --out {re.escape(os.path.normpath(out))}$"):  # fmt: skip
            check_target(out)
    check_target(tmp_path / "s.zarr" / "time" / ".." / "t.nc")  # a '..' inside the path is a directory's


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.name != "generate-swe"], ids=lambda c: c.name)
@pytest.mark.parametrize("relation", ["is", "inside", "contains"])
def test_out_collides_with_an_input(inputs, capsys, command, relation):
    sources = command.inputs_of(inputs)  # generate-swe reads none
    before = snapshot(inputs.root)
    if relation == "is":
        for source in sources:
            assert f"--out {source} is the input" in refused(command.argv(inputs, source, "--overwrite"), capsys)
    elif relation == "inside":
        out = sources[0] / command.out
        assert f"--out {out} lies inside the input" in refused(command.argv(inputs, out, "--overwrite"), capsys)
    else:
        out = inputs.root
        assert f"--out {out} contains the input" in refused(command.argv(inputs, out, "--overwrite"), capsys)
    assert snapshot(inputs.root) == before


# --- replacing our own artifacts ----------------------------------------------------------------


def generation(path: Path) -> str:
    attrs = artifact_attributes(path)
    assert attrs is not None and MARKER_ATTR in attrs, f"{path} carries no s2forecast marker"
    return attrs[GENERATION_ATTR]


def disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


FULL_DISK_POINTS = {  # a write each command makes after claiming its output
    "rollout": (rollout_module.ForecastFile, "write"),
    "rollout:zarr": (rollout_module.ForecastFile, "write"),
    "climatology": (xr.Dataset, "to_zarr"),
    "evaluate": (xr.Dataset, "to_netcdf"),
    "convert-era5": (StoreWriter, "mark_written"),  # flags each slab written (a worker may write its data)
    "generate-swe": (StoreWriter, "write"),
}


@ALL
def test_overwrite_replaces_only_a_whole_new_artifact(inputs, tmp_path, capsys, monkeypatch, command):
    """An artifact s2forecast wrote: kept without --overwrite, kept whole when the disk fills up
    while it is being replaced, replaced by a new generation with --overwrite."""
    out = tmp_path / command.out
    cli(command.argv(inputs, out))
    first = generation(out)
    before = snapshot(tmp_path)
    if command.resumable:  # a rerun resumes the complete store: nothing to do
        cli(command.argv(inputs, out))
    else:
        assert "already exists; pass --overwrite" in refused(command.argv(inputs, out), capsys)
    assert snapshot(tmp_path) == before

    with monkeypatch.context() as patch:
        patch.setattr(*FULL_DISK_POINTS[command.name], disk_full)
        message = refused(command.argv(inputs, out, "--overwrite"), capsys)
    assert f"could not write {out}: No space left on device" in message
    assert snapshot(tmp_path) == before  # the old artifact whole, no temporary left

    cli(command.argv(inputs, out, "--overwrite"))
    assert generation(out) != first
    assert leftovers(tmp_path) == []


# --- outputs of another kind --------------------------------------------------------------------

STORE = "a data store written by s2forecast convert-era5 or generate-swe"
FORECAST = "a forecast written by s2forecast rollout"
OTHER_KIND = [  # (the command that wrote --out, the command given that --out, what is there, what it writes)
    ("convert-era5", "rollout", STORE, "a forecast"),  # the typo that destroyed a conversion
    ("convert-era5", "rollout:zarr", STORE, "a forecast"),
    ("convert-era5", "stats", STORE, "normalization statistics"),
    ("generate-swe", "climatology", STORE, "a climatology"),
    ("rollout:zarr", "convert-era5", FORECAST, "a data store"),
    ("rollout:zarr", "climatology", FORECAST, "a climatology"),
    ("rollout", "evaluate", FORECAST, "evaluation metrics"),
    ("climatology", "generate-swe", "a climatology written by s2forecast climatology", "a data store"),
    ("evaluate", "rollout", "evaluation metrics written by s2forecast evaluate", "a forecast"),
]


def writer_argv(inputs: Inputs, name: str, out: Path, *extra) -> list[str]:
    if name == "stats":
        return ["stats", str(inputs.store), "--out", str(out), "--no-progress", *extra]
    return BY_NAME[name].argv(inputs, out, *extra)


@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "plain"])
@pytest.mark.parametrize("maker, writer, there, own", OTHER_KIND, ids=[f"{w}-over-{m}" for m, w, *_ in OTHER_KIND])
def test_overwrite_never_replaces_another_kind_of_output(
    inputs, tmp_path, capsys, maker, writer, there, own, overwrite
):
    """``--overwrite`` replaces only an output of the kind the command writes: one mistyped ``--out``
    must not replace hours of conversion by a forecast. Without it, the same line, not a suggestion
    to pass ``--overwrite`` (which would not help)."""
    out = tmp_path / BY_NAME[maker].out
    cli(BY_NAME[maker].argv(inputs, out))
    before = snapshot(tmp_path)
    message = refused(writer_argv(inputs, writer, out, *(["--overwrite"] if overwrite else [])), capsys)
    assert message.endswith(
        f"error: --out {out} is {there}; --overwrite replaces only {own}, never another kind of output: choose "
        f"another --out, or remove {out} yourself if it should go"
    ), message
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "plain"])
@pytest.mark.parametrize("maker, writer", [("convert-era5", "generate-swe"), ("generate-swe", "convert-era5")])
def test_a_store_is_replaced_or_resumed_only_by_the_command_that_made_it(
    inputs, tmp_path, capsys, maker, writer, overwrite
):
    """Both commands write data stores, but a mistyped ``generate-swe --overwrite --out era5.zarr`` must
    not replace hours of conversion by a toy store (nor a conversion resume into a SWE store)."""
    out = tmp_path / BY_NAME[maker].out
    cli(BY_NAME[maker].argv(inputs, out))
    before = snapshot(tmp_path)
    message = refused(BY_NAME[writer].argv(inputs, out, *(["--overwrite"] if overwrite else [])), capsys)
    assert message.endswith(
        f"error: --out {out} is a data store written by s2forecast {maker}; {writer} replaces or resumes only a store "
        f"{writer} wrote, never another command's: choose another --out, or remove {out} yourself if it should go"
    ), message
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("maker, writer", [("rollout:zarr", "rollout"), ("generate-swe", "generate-swe")])
def test_overwrite_replaces_an_output_of_its_kind_that_another_command_wrote(inputs, tmp_path, maker, writer):
    """A forecast replaces a forecast whatever its format, a store the store its own command made."""
    out = tmp_path / BY_NAME[maker].out
    cli(BY_NAME[maker].argv(inputs, out))
    first, kind = generation(out), artifact_kind(out)
    cli(BY_NAME[writer].argv(inputs, out, "--overwrite"))
    assert generation(out) != first and artifact_kind(out) == kind
    assert leftovers(tmp_path) == []


def test_stats_out_replaces_only_statistics(inputs, tmp_path, capsys):
    out = tmp_path / "stats.zarr"
    cli(writer_argv(inputs, "stats", out))
    first = generation(out)
    assert "already exists; pass --overwrite" in refused(writer_argv(inputs, "stats", out), capsys)
    cli(writer_argv(inputs, "stats", out, "--overwrite"))
    assert generation(out) != first and artifact_kind(out) == "stats"


def test_stats_replaces_only_its_own_stats_group(inputs, tmp_path, capsys, monkeypatch):
    store = own_store(inputs, tmp_path)
    first = generation(store / "stats")
    with monkeypatch.context() as patch:
        patch.setattr(xr.Dataset, "to_zarr", disk_full)
        before = snapshot(store)
        assert "No space left on device" in refused(["stats", store], capsys)
        assert snapshot(store) == before  # the old statistics whole
    cli(["stats", str(store)])
    assert generation(store / "stats") != first and leftovers(store) == []
    shutil.rmtree(store / "stats")
    xr.Dataset({"mean": ("channel", [1.0])}).to_zarr(store, group="stats", zarr_format=3)  # a user's group
    before = snapshot(store)
    message = refused(["stats", store], capsys)
    assert f"{store / 'stats'} exists and was not written by s2forecast stats" in message
    assert snapshot(store) == before
    # a link to statistics s2forecast wrote elsewhere: refused as the link it is (it said "no marker")
    shutil.rmtree(store / "stats")
    cli(["stats", str(store), "--out", str(tmp_path / "elsewhere.zarr")])
    (store / "stats").symlink_to(tmp_path / "elsewhere.zarr")
    before, elsewhere = snapshot(store), snapshot(tmp_path / "elsewhere.zarr")
    message = refused(["stats", store], capsys)
    assert message.endswith(f"{store / 'stats'} exists and is a symbolic link; it is never replaced: move it away "
                            "yourself to store statistics in this store")  # fmt: skip
    assert snapshot(store) == before and snapshot(tmp_path / "elsewhere.zarr") == elsewhere


# --- crashes ------------------------------------------------------------------------------------


def run_and_kill(argv, hook_target, hook_name, calls_before_kill: int) -> None:
    """Run ``s2forecast ARGV`` in a forked child that SIGKILLs itself when ``hook_target.hook_name``
    is called for the ``calls_before_kill + 1``-th time (mid-write); wait for it to die."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            import dask.threaded

            torch.set_num_threads(1)  # no thread pool is inherited across fork: start fresh ones
            dask.threaded.default_pool = None
            dask.threaded.pools.clear()
            real = getattr(hook_target, hook_name)
            calls = []

            def killing(*args, **kwargs):
                calls.append(1)
                if len(calls) > calls_before_kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(*args, **kwargs)

            setattr(hook_target, hook_name, killing)
            cli([str(a) for a in argv])
        finally:
            os._exit(3)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"s2forecast {argv[0]} did not reach the write it was to be killed in")
        time.sleep(0.05)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, "the writer finished or failed instead"


KILL_POINTS = {  # where each writer is killed: (object, attribute, calls that go through first)
    "rollout": (rollout_module.ForecastFile, "write", 1),  # after the first of two steps
    "rollout:zarr": (rollout_module.ForecastFile, "write", 1),
    "climatology": (Output, "commit", 0),  # written in full, not yet renamed into place
    "evaluate": (Output, "commit", 0),
    "convert-era5": (StoreWriter, "mark_written", 1),  # after the first of four time slabs
    "generate-swe": (StoreWriter, "write", 1),  # after the first of two trajectories
}


@ALL
def test_kill_9_leaves_no_half_written_output(inputs, tmp_path, capsys, command):
    out = tmp_path / command.out
    run_and_kill(command.argv(inputs, out), *KILL_POINTS[command.name])
    if command.resumable:  # the store is there, marked incomplete: readers refuse it, a rerun resumes it
        message = refused(["climatology", out, "--out", tmp_path / "c.zarr"], capsys)
        assert f"store {out} is incomplete" in message
        cli(command.argv(inputs, out))
        assert open_store(out).attrs["s2forecast_complete"] == "true"
    else:
        assert not out.exists() and len(leftovers(tmp_path)) >= 1
        cli(command.argv(inputs, out))  # cleans the killed run's leftovers
        assert generation(out)
    assert leftovers(tmp_path) == []


def test_kill_9_while_stats_writes_keeps_the_old_stats(inputs, tmp_path):
    store = own_store(inputs, tmp_path)
    old = snapshot(store / "stats")
    run_and_kill(["stats", store], Output, "commit", 0)
    assert snapshot(store / "stats") == old and len(leftovers(store)) == 1
    cli(["stats", str(store)])
    assert leftovers(store) == [] and (store / "stats").is_dir()


def test_kill_9_while_overwriting_a_store_keeps_the_old_store(inputs, tmp_path, capsys):
    out = tmp_path / "s.zarr"
    command = BY_NAME["generate-swe"]
    cli(command.argv(inputs, out))
    before = snapshot(out)
    run_and_kill([*command.argv(inputs, out), "--overwrite", "--seed", "1"], StoreWriter, "write", 1)
    assert snapshot(out) == before and len(leftovers(tmp_path)) == 1  # readers still see the old store
    cli([*command.argv(inputs, out), "--overwrite", "--seed", "1"])
    assert leftovers(tmp_path) == [] and snapshot(out) != before


@ALL
@pytest.mark.parametrize("how", ["chmod", "oserror"])
def test_read_only_directory(inputs, tmp_path, capsys, monkeypatch, command, how):
    directory = tmp_path / "locked"
    directory.mkdir()
    if how == "chmod":
        if os.geteuid() == 0:
            pytest.skip("root ignores directory permissions; the 'oserror' case checks the same message path")
        directory.chmod(0o555)
    else:  # what creating the temporary output meets in a read-only directory
        for method in ("touch", "mkdir"):
            real = getattr(Path, method)

            def refuse(self, *args, _real=real, **kwargs):
                if ".s2forecast-tmp-" in self.name:
                    raise PermissionError(errno.EACCES, "Permission denied", str(self))
                return _real(self, *args, **kwargs)

            monkeypatch.setattr(Path, method, refuse)
    try:
        message = refused(command.argv(inputs, directory / command.out), capsys)
    finally:
        directory.chmod(0o755)
    assert f"directory {directory} is not writable (Permission denied)" in message
    assert list(directory.iterdir()) == []


# --- readers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """A store whose writer was interrupted after the first of its two trajectories."""
    real = swe_module.integrate
    calls = []

    def interrupt(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    path = tmp_path_factory.mktemp("interrupted") / "part.zarr"
    swe_module.integrate = interrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            generate_swe(path, 8, 16, trajectories=2, steps=3, solver_dt_seconds=1800, batch=1, progress=False)
    finally:
        swe_module.integrate = real
    return path


def reader_argv(reader: str, inputs: Inputs, store: Path, out: Path) -> list:
    return {
        "rollout": ["rollout", "--ckpt", inputs.ckpt, "--store", store, "--steps", "2", "--init-times",
                    "2000-01-01T01", "--out", out, "--no-progress"],
        "climatology": ["climatology", store, "--out", out],
        "stats": ["stats", store],
        "evaluate": ["evaluate", "--forecast", inputs.forecast, "--truth", store, "--out", out, "--variables",
                     "vorticity", "--no-plots", "--no-progress"],
    }[reader]  # fmt: skip


READERS = pytest.mark.parametrize("reader", ["rollout", "climatology", "stats", "evaluate"])


@READERS
def test_incomplete_store_is_refused(inputs, tmp_path, capsys, interrupted, reader):
    out = tmp_path / ("o.zarr" if reader == "climatology" else "o.nc")
    before = snapshot(interrupted.parent)
    message = refused(reader_argv(reader, inputs, interrupted, out), capsys)
    assert f"store {interrupted} is incomplete" in message and "rerun the same convert-era5 / generate-swe" in message
    assert snapshot(interrupted.parent) == before and list(tmp_path.iterdir()) == []


@READERS
def test_a_directory_that_is_not_a_store_is_refused(inputs, tmp_path, capsys, reader):
    plain = tmp_path / "plain"
    foreign(plain, "dir")
    message = refused(reader_argv(reader, inputs, plain, tmp_path / "o.nc"), capsys)
    assert f"{plain} is not a zarr store (no zarr.json or .zgroup metadata)" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


REWRITE_POINTS = {  # a function each reader calls after opening the store and before it finishes reading
    "rollout": (initial_conditions_module, "read_initial_conditions"),
    "climatology": (climatology_module, "compute_climatology"),
    "stats": (stats_module, "_weighted_moments"),
    "evaluate": (evaluate_module, "_score"),
}


@READERS
def test_store_rewritten_while_it_is_read(inputs, tmp_path, capsys, monkeypatch, reader):
    store = own_store(inputs, tmp_path)
    opened = generation(store)
    target, name = REWRITE_POINTS[reader]
    real = getattr(target, name)
    once = threading.Lock()  # stats and climatology read parts in two threads (s2forecast.data.engine)

    def rewrite_then_read(*args, **kwargs):
        with once:
            if generation(store) == opened:  # another command overwrites the store mid-read
                generate_swe(store, 8, 16, trajectories=2, steps=3, seed=1, solver_dt_seconds=1800, overwrite=True,
                             progress=False)  # fmt: skip
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, rewrite_then_read)
    out = tmp_path / ("o.zarr" if reader == "climatology" else "o.nc")
    message = refused(reader_argv(reader, inputs, store, out), capsys)
    assert f"store {store} was rewritten while it was read (generation {opened} -> " in message
    assert not out.exists() and leftovers(tmp_path) == []
    if reader == "stats":
        assert not (store / "stats").exists()  # the new store has no statistics, and got none of the old data's


@pytest.mark.parametrize("rewritten", ["forecast", "climatology"])
def test_evaluate_refuses_a_forecast_or_climatology_rewritten_while_it_is_read(
    inputs, tmp_path, capsys, monkeypatch, rewritten
):
    forecast, climatology = tmp_path / "forecast.nc", tmp_path / "clim.zarr"
    shutil.copy(inputs.forecast, forecast)  # a forecast rollout wrote (its marker and generation)
    cli(["climatology", str(inputs.store), "--out", str(climatology)])
    target = {"forecast": forecast, "climatology": climatology}[rewritten]
    opened = generation(target)
    rewrite = {
        "forecast": ["rollout", "--ckpt", inputs.ckpt, "--store", inputs.store, "--steps", "2", "--init-times",
                     "2000-01-01T00,2000-01-01T01", "--out", forecast, "--overwrite", "--no-progress"],
        "climatology": ["climatology", inputs.store, "--out", climatology, "--overwrite"],
    }[rewritten]  # fmt: skip
    real = evaluate_module._score

    def rewrite_then_score(*args, **kwargs):
        if generation(target) == opened:  # another command replaces the input mid-read
            cli([str(arg) for arg in rewrite])
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, "_score", rewrite_then_score)
    out = tmp_path / "m.nc"
    argv = ["evaluate", "--forecast", forecast, "--truth", inputs.store, "--climatology", climatology, "--out", out,
            "--variables", "vorticity", "--no-plots", "--no-progress"]  # fmt: skip
    message = refused(argv, capsys)
    assert f"{rewritten} {target} was rewritten while it was read (generation {opened} -> " in message
    assert not out.exists() and not out.with_suffix(".csv").exists() and leftovers(tmp_path) == []


def test_dataset_refuses_a_store_rewritten_since_it_was_built(inputs, tmp_path):
    """A DataLoader worker reopens the store: it must be the one the dataset was built on."""
    from s2forecast.data.fields import FieldDataset, SampleSpec

    store = own_store(inputs, tmp_path)
    dataset = FieldDataset(store, SampleSpec(("vorticity",), static=(), step_hours=1.0))
    opened = generation(store)
    generate_swe(store, 8, 16, trajectories=2, steps=3, seed=1, solver_dt_seconds=1800, overwrite=True, progress=False)
    compute_stats(store)
    with pytest.raises(ValueError, match=f"store {store} was rewritten while it was read \\(generation {opened} -> "):
        dataset[0]


# --- links, locks, names (a review's attacks) ----------------------------------------------------


def test_inputs_reached_through_symbolic_links_are_read(inputs, tmp_path):
    """A link to shared data is a common way to point at it: every reading command failed with "was
    rewritten while it was read (generation ... -> None)", the generation of a link being None."""
    store, forecast = tmp_path / "store-link.zarr", tmp_path / "forecast-link.nc"
    store.symlink_to(inputs.store, target_is_directory=True)
    forecast.symlink_to(inputs.forecast)
    cli(["stats", str(store), "--out", str(tmp_path / "s.zarr")])
    cli(["climatology", str(store), "--out", str(tmp_path / "c.zarr")])
    cli(["rollout", "--ckpt", str(inputs.ckpt), "--store", str(store), "--steps", "1", "--init-times",
         "2000-01-01T01", "--out", str(tmp_path / "f.nc"), "--no-progress"])  # fmt: skip
    cli(["evaluate", "--forecast", str(forecast), "--truth", str(store), "--climatology", str(tmp_path / "c.zarr"),
         "--out", str(tmp_path / "m.nc"), "--variables", "vorticity", "--no-plots", "--no-progress"])  # fmt: skip
    for name in ("s.zarr", "c.zarr", "f.nc", "m.nc"):
        assert written_by_s2forecast(tmp_path / name), name


@pytest.mark.parametrize("where", ["file in an array", "directory in an array", "file in a chunk-free group"])
def test_a_users_file_anywhere_inside_a_zarr_output_makes_it_foreign(inputs, tmp_path, capsys, where):
    out = tmp_path / "f.zarr"
    cli(BY_NAME["rollout:zarr"].argv(inputs, out))
    if where == "file in an array":
        (out / "vorticity" / "my_notes.txt").write_text("mine\n")
    elif where == "directory in an array":
        (out / "vorticity" / "my_analysis").mkdir()
        (out / "vorticity" / "my_analysis" / "fig.png").write_bytes(b"png")
    else:
        (out / ".backup.s2forecast-notes").write_text("named like a sibling, but not one\n")
    before = snapshot(tmp_path)
    message = refused(BY_NAME["rollout:zarr"].argv(inputs, out, "--overwrite"), capsys)
    named = {"file in an array": "vorticity/my_notes.txt", "directory in an array": "vorticity/my_analysis",
             "file in a chunk-free group": ".backup.s2forecast-notes"}[where]  # fmt: skip
    assert f"exists and was not written by s2forecast (it holds {named}, which s2forecast did not write)" in message
    assert snapshot(tmp_path) == before


ZARR_COMMANDS = [command for command in COMMANDS if command.out.endswith(".zarr")]


@pytest.mark.parametrize("command", ZARR_COMMANDS, ids=[c.name for c in ZARR_COMMANDS])
@pytest.mark.parametrize("how", ["xarray group", "zarr array", "xarray variable"])
def test_zarr_nodes_a_user_added_inside_a_zarr_output_make_it_foreign(inputs, tmp_path, capsys, command, how):
    """Arrays and groups added after s2forecast wrote the output are the user's: --overwrite deleted them
    with the output (they are zarr nodes, which were all taken for s2forecast's own)."""
    out = tmp_path / command.out
    cli(command.argv(inputs, out))
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # consolidated metadata outside the v3 spec
        if how == "xarray group":  # xarray consolidates the root's metadata again, listing it there
            xr.Dataset({"mine": ("x", np.arange(3.0))}).to_zarr(out, group="my_analysis", mode="a")
        elif how == "zarr array":
            zarr.open_group(out, mode="a").create_array("my_analysis", shape=(2,), dtype="f8")[:] = [1.0, 2.0]
        else:
            xr.Dataset({"my_analysis": ("x", np.arange(3.0))}).to_zarr(out, mode="a")
    assert not written_by_s2forecast(out)
    before = snapshot(tmp_path)
    message = refused(command.argv(inputs, out, "--overwrite"), capsys)
    # xarray's to_zarr(mode="a") of a Dataset also writes its (empty) attributes over the root's: the marker goes
    why = "it has no s2forecast marker" if how == "xarray variable" else "it holds my_analysis, which s2forecast did"
    assert f"--out {out} exists and was not written by s2forecast ({why}" in message
    assert snapshot(tmp_path) == before


def test_another_commands_store_inside_an_output_makes_it_foreign(inputs, tmp_path, capsys):
    swe = tmp_path / "s.zarr"
    cli(BY_NAME["generate-swe"].argv(inputs, swe))
    cli(BY_NAME["convert-era5"].argv(inputs, swe / "era5.zarr"))
    capsys.readouterr()
    before = snapshot(tmp_path)
    message = refused(BY_NAME["generate-swe"].argv(inputs, swe, "--overwrite"), capsys)
    assert "(it holds era5.zarr, which s2forecast did not write)" in message
    assert snapshot(tmp_path) == before


def test_an_array_a_user_added_to_a_stores_statistics_is_kept(inputs, tmp_path, capsys):
    store = own_store(inputs, tmp_path)
    cli(["stats", str(store)])  # its statistics group, written by this version
    zarr.open_group(store / "stats", mode="a").create_array("my_sigma", shape=(2,), dtype="f8")[:] = [1.0, 2.0]
    before = snapshot(tmp_path)
    message = refused(["stats", str(store)], capsys)
    assert message == (
        f"s2forecast stats: error: {store / 'stats'} exists and was not written by s2forecast stats (it holds "
        "my_sigma, which s2forecast did not write); it is never replaced: move it away yourself to store "
        "statistics in this store"
    )
    # the store's own refusal names the array, not the stats group s2forecast wrote
    message = refused(BY_NAME["generate-swe"].argv(inputs, store, "--overwrite"), capsys)
    assert "(it holds stats/my_sigma, which s2forecast did not write)" in message
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("where", ["vorticity/USER_NOTES.txt", "USER_NOTES.txt"])
def test_a_users_file_saved_inside_the_output_while_it_is_replaced_is_kept(inputs, tmp_path, capsys, where):
    """The output is judged when the run starts and again at its end: a file saved inside a zarr
    forecast during a rollout --overwrite (in an array: no stamp of the root changes) went with it."""
    out = tmp_path / "f.zarr"
    cli(BY_NAME["rollout:zarr"].argv(inputs, out))
    real_commit = Output.commit

    def commit(self):  # the user saves a file into the forecast being replaced, before it is
        if self.path == out:
            (out / where).write_text("my analysis\n")
        return real_commit(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Output, "commit", commit)
        message = refused(BY_NAME["rollout:zarr"].argv(inputs, out, "--overwrite"), capsys)
    assert f"(it holds {where}, which s2forecast did not write)" in message
    assert (out / where).read_text() == "my analysis\n" and written_by_s2forecast(out) is False
    assert leftovers(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["f.zarr"]


def test_a_live_run_in_another_pid_namespace_keeps_its_temporary(tmp_path):
    """A run whose PID this process cannot see (a container sharing the host name) holds its lock
    sibling: its temporary output is not a leftover. Once the lock is free, it is."""
    import fcntl
    import socket

    host = socket.gethostname()
    pid = 4_000_000  # above any pid_max: no process of this namespace has it
    tmp = tmp_path / f".f.nc.s2forecast-tmp-{pid}-{host}"
    tmp.write_bytes(b"a forecast being written")
    lock = tmp_path / f".f.nc.s2forecast-lock-{pid}-{host}"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        clean_leftovers(tmp_path / "f.nc")
        assert tmp.exists() and lock.exists()
    clean_leftovers(tmp_path / "f.nc")  # the run died: its lock is free
    assert not tmp.exists() and not lock.exists()


def test_only_s2forecasts_own_set_aside_copy_is_put_back(tmp_path):
    """A user's file named like a set-aside copy (".f.nc.s2forecast-old-PID-HOST") became f.nc."""
    import socket

    mine = tmp_path / f".f.nc.s2forecast-old-4000000-{socket.gethostname()}"
    mine.write_text("my notes\n")
    clean_leftovers(tmp_path / "f.nc")
    assert mine.read_text() == "my notes\n" and not (tmp_path / "f.nc").exists()


def test_a_home_directory_path_is_expanded(inputs, tmp_path, monkeypatch):
    """A quoted "~/m.nc" (or one from Python) made a directory "./~", committed an empty CSV there and
    left the real results as temporaries in the home directory."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    cli(["evaluate", "--forecast", str(inputs.forecast), "--truth", str(inputs.store), "--out", "~/m.nc",
         "--variables", "vorticity", "--no-plots", "--no-progress"])  # fmt: skip
    assert sorted(p.name for p in home.iterdir()) == ["m.csv", "m.nc"] and list(work.iterdir()) == []
    assert written_by_s2forecast(home / "m.nc") and (home / "m.csv").stat().st_size > 0


@pytest.mark.parametrize("command", ["rollout", "generate-swe"])
def test_a_name_too_long_with_the_temporary_suffix_says_so(inputs, tmp_path, capsys, command):
    out = tmp_path / ("x" * 233 + ".nc")  # fits NAME_MAX (255); with ".NAME.s2forecast-tmp-PID-HOST" it does not
    message = refused(BY_NAME[command].argv(inputs, out), capsys)
    assert "characters is too long for the file system once s2forecast's temporary suffix is added" in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["rollout", "generate-swe", "climatology", "convert-era5"])
def test_a_missing_output_directory_is_named_as_missing(inputs, tmp_path, capsys, command):
    """The writers of stores (generate-swe, convert-era5) took their lock first and said the missing
    directory was 'not writable (No such file or directory)'."""
    message = refused(BY_NAME[command].argv(inputs, tmp_path / "nodir" / "x.zarr"), capsys)
    assert message.endswith(f"output directory {tmp_path / 'nodir'} does not exist; create it first or choose another "
                            "--out"), message  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_without_flock_the_commands_write_and_leave_no_lock(inputs, tmp_path, monkeypatch):
    """On a file system without flock (Lustre mounted noflock, some FUSE/CIFS) every writing command
    was refused as 'not writable (Function not implemented)', leaving a lock file; PIDs then tell."""
    import fcntl

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    cli(BY_NAME["rollout"].argv(inputs, tmp_path / "f.nc"))
    cli(BY_NAME["generate-swe"].argv(inputs, tmp_path / "s.zarr"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.nc", "s.zarr"]


def test_a_store_path_from_python_expands_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    store = generate_swe("~/s.zarr", 8, 16, trajectories=1, steps=1, solver_dt_seconds=1800, progress=False)
    assert Path(store) == tmp_path / "s.zarr" and written_by_s2forecast(tmp_path / "s.zarr")


def test_a_missing_directory_left_by_dotdot_is_one_line_and_creates_nothing(inputs, tmp_path, capsys, monkeypatch):
    """evaluate (which makes a missing parent) made ./sub and then blamed permissions ("File exists")."""
    monkeypatch.chdir(tmp_path)
    message = refused(BY_NAME["evaluate"].argv(inputs, "sub/../m.nc"), capsys)
    assert message.endswith(
        "--out sub/../m.nc: its directory sub/.. does not exist, and s2forecast does not create a directory only to "
        "leave it by '..': write the path without it, e.g. --out m.nc"
    ), message
    assert list(tmp_path.iterdir()) == []


def test_a_path_another_run_writes_is_refused_while_its_lock_is_held(inputs, tmp_path, capsys):
    """An --overwrite conversion replaced a store another run was filling in place: the result was
    marked complete with both runs' data. A run's lock sibling now makes the path busy."""
    import fcntl
    import socket

    out = tmp_path / "s.zarr"
    lock = tmp_path / f".s.zarr.s2forecast-lock-4000000-{socket.gethostname()}"  # another run's, held
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for name in ("convert-era5", "generate-swe", "rollout"):
            message = refused(BY_NAME[name].argv(inputs, out, "--overwrite"), capsys)
            assert message.endswith(
                f"--out {out} is being written by another run (process-host 4000000-{socket.gethostname()}, lock "
                f"{lock.name}); let it finish or stop it, then rerun"
            ), message
    cli(BY_NAME["generate-swe"].argv(inputs, out))  # released: the killed run's lock is a leftover
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


def test_a_killed_runs_siblings_with_this_processs_pid_are_leftovers(inputs, tmp_path):
    """A restarted container is PID 1 again: its killed run's siblings bore this process's PID and were
    taken for its own, so every rerun failed ("directory not writable (File exists)")."""
    import socket

    host = socket.gethostname()
    for role in ("tmp", "lock"):
        (tmp_path / f".f.nc.s2forecast-{role}-{os.getpid()}-{host}").write_bytes(b"left by a killed run")
    cli(BY_NAME["rollout"].argv(inputs, tmp_path / "f.nc"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.nc"]


def test_zarrs_own_partial_write_left_by_a_kill_does_not_make_a_store_foreign(inputs, tmp_path):
    """A kill amid zarr's atomic write of zarr.json leaves zarr.<hex>.partial: the store was then
    "not written by s2forecast" for good; a rerun finishes it and removes the partial file."""
    out = tmp_path / "s.zarr"
    cli(BY_NAME["generate-swe"].argv(inputs, out))
    partial = out / "zarr.json.0123456789abcdef0123456789abcdef.partial"
    partial.write_text("{")
    assert written_by_s2forecast(out)
    cli(BY_NAME["generate-swe"].argv(inputs, out))  # resumes (complete: nothing to do)
    assert not partial.exists() and written_by_s2forecast(out)


def test_statistics_rewritten_but_not_consolidated_read_whole(inputs, tmp_path, monkeypatch):
    """A run killed between writing the stats group and consolidating the store's metadata paired the
    old attributes (tendency step, period) with the new values."""
    from s2forecast.data.stats import load_stats

    store = own_store(inputs, tmp_path)
    compute_stats(store)
    monkeypatch.setattr(stats_module.zarr, "consolidate_metadata", lambda *a, **k: (_ for _ in ()).throw(
        KeyboardInterrupt()))  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        compute_stats(store, step_hours=2)
    monkeypatch.undo()
    assert load_stats(store, ["vorticity"]).tendency_step_hours == 2.0


def test_a_store_whose_lock_cannot_be_made_is_one_line(inputs, tmp_path, capsys, monkeypatch):
    from s2forecast import output as output_module

    def denied(path):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(output_module, "hold_lock", denied)  # a read-only directory (root ignores modes)
    message = refused(BY_NAME["generate-swe"].argv(inputs, tmp_path / "s.zarr"), capsys)
    assert message.endswith(f"cannot write --out {tmp_path / 's.zarr'}: directory {tmp_path} is not writable "
                            "(Permission denied); choose another --out"), message  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_a_partial_file_in_a_store_of_someone_else_is_left_alone(inputs, tmp_path, capsys):
    """The .partial clean-up ran before the store was judged s2forecast's."""
    out = tmp_path / "s.zarr"
    out.mkdir()
    (out / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    partial = out / "notes.0123456789abcdef0123456789abcdef.partial"
    partial.write_text("mine\n")
    before = snapshot(tmp_path)
    assert "exists and was not written by s2forecast" in refused(BY_NAME["generate-swe"].argv(inputs, out), capsys)
    assert snapshot(tmp_path) == before


def test_in_store_stats_wait_for_no_writer_of_the_store(inputs, tmp_path, capsys):
    """stats STORE during a generate-swe/convert-era5 --overwrite of STORE installed the old data's
    statistics in the new store (its temporary group, a path inside STORE, followed the swap). The
    store's writer holds its lock from start to finish: stats refuses while it is held."""
    import fcntl
    import socket

    store = tmp_path / "s.zarr"
    cli(BY_NAME["generate-swe"].argv(inputs, store))
    lock = tmp_path / f".s.zarr.s2forecast-lock-4000000-{socket.gethostname()}"  # a writer's, held
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        message = refused(["stats", str(store), "--no-progress"], capsys)
        assert f"the store {store} is being written by another run (process-host 4000000-" in message
    assert not (store / "stats").exists()
    cli(["stats", str(store), "--no-progress"])  # the writer gone: its lock is a leftover
    assert xr.open_zarr(store, group="stats")["mean"].size > 0


def test_a_set_aside_copy_is_removed_under_a_temporary_name(tmp_path, monkeypatch):
    """A kill while the replaced copy was removed could leave its arrays without its root marker under
    the 'old' name, which no run removes (judged foreign); under the tmp name the next run removes it."""
    out, removed = tmp_path / "o.zarr", []
    for value in (1.0, 2.0):
        output = Output(out, "climatology", directory=True, overwrite=True)
        with output:
            xr.Dataset({"x": ("t", np.full(3, value))}).assign_attrs(output.attrs).to_zarr(output.tmp, zarr_format=3)
            if value == 2.0:
                monkeypatch.setattr(output_module, "remove_own", lambda path: removed.append(Path(path).name))
            output.commit()
    assert removed == [output.tmp.name]  # the old copy goes under the (free again) tmp name
    monkeypatch.undo()
    clean_leftovers(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.zarr"] and float(xr.open_zarr(out)["x"][0]) == 2.0


def test_results_without_plots_remove_the_earlier_plots_only_if_still_ours(tmp_path):
    """evaluate --no-plots --overwrite removed the earlier plots directory, judged s2forecast's when
    the run started, with a file the user saved into it during the run."""
    plots = tmp_path / "m_plots"
    output = Output(plots, "plots", directory=True)
    with output:  # its temporary directory is made when claimed
        (output.tmp / "a.png").write_bytes(b"png")
        output.write_marker_file()
        output.commit()
    assert written_by_s2forecast(plots)
    (plots / "my_notes.txt").write_text("mine\n")
    assert remove_if_still_ours(plots) is False and (plots / "my_notes.txt").read_text() == "mine\n"
    (plots / "my_notes.txt").unlink()
    assert remove_if_still_ours(plots) is True and list(tmp_path.iterdir()) == []


def test_a_killed_run_not_yet_reaped_is_dead(tmp_path):
    """A review: a run killed with SIGKILL and not yet reaped (a zombie: `timeout -s KILL`, a container
    whose PID 1 does not reap) still answers os.kill, so its temporary output survived the next run."""
    import socket
    import subprocess
    import sys

    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc: a zombie cannot be told from a live process here")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        child.send_signal(signal.SIGKILL)
        for _ in range(200):  # until the kernel has made it a zombie (not reaped: no wait)
            if Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.01)
        tmp = tmp_path / f".f.nc.s2forecast-tmp-{child.pid}-{socket.gethostname()}"
        tmp.write_bytes(b"what the killed run wrote")
        clean_leftovers(tmp_path / "f.nc")
        assert not tmp.exists()
    finally:
        child.wait()
