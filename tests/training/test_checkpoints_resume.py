"""Checkpoints are read weights-only on every path (the CLI, Lightning's restore, rollout; URLs
refused), and `--ckpt_path last` resumes the run's own experiment exactly, mid-epoch included."""

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger
from session_fixtures import last_val_scores, tiny_args

from s2forecast.cli import main as cli
from s2forecast.data import open_store
from s2forecast.inference.rollout import load_forecaster, rollout
from s2forecast.training.checkpoints import last_checkpoint, read_checkpoint
from s2forecast.training.cli import run as lightning  # raises what `s2forecast` reports in one line
from s2forecast.training.datamodule import EpochShuffleSampler, ResumableLoader
from s2forecast.user_errors import UserError

REPO = Path(__file__).parents[2]


# --- a checkpoint that runs code ------------------------------------------------------------
class RunsCode:
    """Unpickling this calls open(marker, "w"): it creates the file ``marker``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def crafted_checkpoint(path: Path, marker: Path) -> Path:
    """A checkpoint-shaped file whose hyper-parameters run code when unpickled."""
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": RunsCode(marker)}, "global_step": 0}, path)
    return path


def test_the_crafted_checkpoint_runs_code_when_fully_unpickled(tmp_path):
    """The threat the tests below guard against is real: plain torch.load runs the payload."""
    marker = tmp_path / "marker"
    checkpoint = crafted_checkpoint(tmp_path / "evil.ckpt", marker)
    torch.load(checkpoint, weights_only=False)  # deliberately unsafe, on our own file in tmp_path
    assert marker.exists()


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_crafted_checkpoint_is_refused_everywhere(swe_store, tmp_path):
    marker = tmp_path / "marker"
    evil = crafted_checkpoint(tmp_path / "evil.ckpt", marker)
    before = evil.read_bytes()

    with pytest.raises(ValueError, match="refused: it references .*open.* weights-only") as error:
        read_checkpoint(evil)
    assert str(evil) in one_line(error)
    for command in ("validate", "fit"):  # --ckpt_path FILE: read before anything is built
        with pytest.raises(ValueError, match="refused: it references") as error:
            lightning([command, *tiny_args(swe_store, tmp_path), "--ckpt_path", str(evil)])
        one_line(error)
    with pytest.raises(ValueError, match="refused: it references") as error:
        rollout(evil, swe_store, 2, open_store(swe_store)["time"].values[:1], tmp_path / "f.nc", progress=False)
    one_line(error)
    with pytest.raises(ValueError, match="refused"):
        load_forecaster(evil)  # scripts/robustness.py's loader

    # --ckpt_path last: the file Lightning itself loads (through the strategy's checkpoint IO)
    own = tmp_path / "runs" / "s2_neighborhood" / "version_0" / "checkpoints"
    own.mkdir(parents=True)
    (own / "last.ckpt").write_bytes(before)
    with pytest.raises(ValueError, match="refused: it references") as error:
        lightning(["fit", *tiny_args(swe_store, tmp_path), "--ckpt_path", "last"])
    assert str(own / "last.ckpt") in one_line(error)

    assert not marker.exists()
    assert evil.read_bytes() == before and (own / "last.ckpt").read_bytes() == before
    assert not (tmp_path / "f.nc").exists()


def test_a_resumed_run_removes_only_checkpoints_it_saved(swe_store, mse_run_1_epoch, tmp_path):
    """A review found: a crafted checkpoint, weights-only-safe (strings and tensors), named paths in its
    ModelCheckpoint state that the resumed run removed, recursively: a `local://` URL (not the "file"
    protocol Lightning checks against the callback's directory) and a `..` path it lets through."""
    victims = [tmp_path / f"victim_{n}" for n in range(3)]
    for victim in victims:
        victim.mkdir()
        (victim / "precious.txt").write_text("keep me")
    saved = torch.load(mse_run_1_epoch.checkpoint, weights_only=True)
    state = saved["callbacks"][next(key for key in saved["callbacks"] if key.startswith("LastAtStop"))]
    state.pop("dirpath")  # no dirpath: Lightning takes the paths below as its own
    own = tmp_path / "runs" / "s2_neighborhood" / "version_0" / "checkpoints"  # the resumed run's directory
    climb = f"{own}/{os.path.relpath(victims[2], own)}"  # in it, as Lightning sees it (`..` not resolved)
    state["last_model_path"] = f"local://{victims[0]}"
    state["kth_best_model_path"] = f"local://{victims[1]}"
    state["best_k_models"] = {f"local://{victims[1]}": torch.tensor(1e9), climb: torch.tensor(1e9)}
    state["kth_value"] = state["best_model_score"] = torch.tensor(1e9)
    torch.save(saved, tmp_path / "crafted.ckpt")
    cli(["fit", *tiny_args(swe_store, tmp_path), "--ckpt_path", str(tmp_path / "crafted.ckpt")])  # epoch 2 of 2
    assert all((victim / "precious.txt").read_text() == "keep me" for victim in victims)
    kept = sorted(path.name for path in (tmp_path / "runs").rglob("*.ckpt"))
    assert kept == ["best-epoch=1-step=10.ckpt", "last.ckpt"], kept  # what this run saved, and kept


def test_the_checkpoint_io_replaces_and_removes_only_checkpoints(tmp_path):
    """Removed: what this process saved, and a fit's checkpoint files in a directory it saves into (an earlier
    run's top-k at a fixed dirpath, rotated as Lightning does); nothing else, not a checkpoint of the user's own
    (a review: one was replaced and another removed). Replaced: a fit's checkpoints and links (the link itself:
    a later review found the target written through)."""
    from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

    from s2forecast.training.checkpoints import WeightsOnlyCheckpointIO

    io = WeightsOnlyCheckpointIO(TorchCheckpointIO())
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir(), elsewhere.mkdir()
    mine, earlier, notes = run / "mine.ckpt", run / "earlier.ckpt", run / "notes.ckpt"
    older, users = run / "older.ckpt", run / "users.ckpt"  # a fit's of before the key; the user's own
    loggerless = run / "loggerless.ckpt"  # before the key, of a run without a logger (no run name)
    torch.save({"state_dict": {}, "global_step": 1000, "s2forecast_fit_checkpoint": 1}, earlier)
    torch.save({"state_dict": {}, "callbacks": {"RunName": {"name": "run"}}}, older)
    torch.save({"state_dict": {}, "callbacks": {}, "rollout": 1, "static_fields": {}}, loggerless)
    for path in (users, elsewhere / "foundation.ckpt"):
        torch.save({"state_dict": {}, "global_step": 1000}, path)
    notes.write_text("my notes")
    (run / "last.ckpt").symlink_to(elsewhere / "foundation.ckpt")
    for path in (mine, mine, earlier, older, loggerless, run / "last.ckpt"):
        io.save_checkpoint({"state_dict": {"w": torch.ones(1)}, "global_step": 7}, path)
    assert not (run / "last.ckpt").is_symlink()  # the link was replaced, its target left
    assert torch.load(elsewhere / "foundation.ckpt", weights_only=True)["global_step"] == 1000
    assert torch.load(earlier, weights_only=True)["s2forecast_fit_checkpoint"] == 1  # and saved with the key
    for path in (notes, users):
        with pytest.raises(UserError, match=rf"{path.name} is there and is not a checkpoint an s2forecast fit saved; "
                           "saving one would replace it"):  # fmt: skip
            io.save_checkpoint({"state_dict": {}}, path)
    assert torch.load(users, weights_only=True)["global_step"] == 1000
    with pytest.raises(UserError, match=r"checkpoints are saved to local paths"):
        io.save_checkpoint({"state_dict": {}}, f"local://{run}/x.ckpt")
    other = run / "other.ckpt"  # an earlier run's, in the directory this one saves into
    torch.save({"state_dict": {}, "s2forecast_fit_checkpoint": 1}, other)
    (run / "link.ckpt").symlink_to(other)
    for path in (elsewhere / "foundation.ckpt", f"file://{mine}", run, notes, run / "link.ckpt", f"{run}/../run",
                 users):  # fmt: skip
        io.remove_checkpoint(path)  # another directory's, a URL, a directory, not a checkpoint, a link, the user's
    for path in (mine, other):
        io.remove_checkpoint(path)
    assert sorted(p.name for p in run.iterdir()) == ["earlier.ckpt", "last.ckpt", "link.ckpt", "loggerless.ckpt",
                                                     "notes.ckpt", "older.ckpt", "users.ckpt"]  # fmt: skip
    assert notes.read_text() == "my notes" and (elsewhere / "foundation.ckpt").exists()


def test_files_that_are_not_checkpoints_are_one_line(tmp_path):
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.ckpt refused: it is not a plain PyTorch checkpoint") as error:
        read_checkpoint(junk)
    one_line(error)
    truncated = tmp_path / "truncated.ckpt"
    torch.save({"state_dict": {"w": torch.ones(100)}}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:300])
    with pytest.raises(ValueError, match="truncated.ckpt is not a readable PyTorch checkpoint") as error:
        read_checkpoint(truncated)
    one_line(error)
    assert str(error.value).endswith("; pass a checkpoint written by s2forecast fit (a truncated copy: copy it again)")
    with pytest.raises(FileNotFoundError, match="no checkpoint file at"):
        read_checkpoint(tmp_path / "missing.ckpt")
    # a run's directory: the checkpoint in it is named (the message said only "no checkpoint file at")
    run = tmp_path / "run"
    (run / "version_0" / "checkpoints").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as error:
        read_checkpoint(run)
    assert str(error.value) == (f"no checkpoint file at {run}: it is a directory; pass a checkpoint file (s2forecast "
                                "fit writes RUN/version_N/checkpoints/last.ckpt)")  # fmt: skip
    torch.save({"state_dict": {}}, run / "version_0" / "checkpoints" / "last.ckpt")
    with pytest.raises(FileNotFoundError, match=r": it is a directory; pass a checkpoint file, e\.g\. .*run/version_0/"
                                                r"checkpoints/last\.ckpt$"):  # fmt: skip
        read_checkpoint(run)
    assert junk.read_bytes() == b"not a checkpoint" and len(truncated.read_bytes()) == 300


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):
        CountingHandler.requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


def test_urls_are_refused_before_any_request(swe_store, tmp_path):
    """Lightning would download an http(s) checkpoint and unpickle it with weights_only=False; we
    refuse every URL scheme before anything is fetched or built."""
    marker = tmp_path / "marker"
    served = tmp_path / "served"
    served.mkdir()
    crafted_checkpoint(served / "evil.ckpt", marker)
    handler = lambda *args: CountingHandler(*args, directory=str(served))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    CountingHandler.requests = []
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/evil.ckpt"
        for location in (url, (served / "evil.ckpt").as_uri()):  # http:// and file://
            with pytest.raises(ValueError, match="is a URL; .*download it first") as error:
                lightning(["validate", *tiny_args(swe_store, tmp_path), "--ckpt_path", location])
            assert location in one_line(error)
            with pytest.raises(ValueError, match="is a URL"):
                rollout(location, swe_store, 1, open_store(swe_store)["time"].values[:1], tmp_path / "f.nc")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert CountingHandler.requests == []
    assert not marker.exists()


@pytest.mark.parametrize("command", ["fit", "validate"])
def test_weights_only_is_not_an_option(swe_store, tmp_path, command, capsys):
    with pytest.raises(SystemExit):
        cli([command, *tiny_args(swe_store, tmp_path), "--weights_only", "false"])
    assert "weights_only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli([command, "--help"])
    assert "--ckpt_path" in (help_text := capsys.readouterr().out) and "weights_only" not in help_text


def test_checkpoints_that_are_not_full_fit_checkpoints_are_one_line(swe_store, mse_run_1_epoch, tmp_path):
    """A weights-only save (ModelCheckpoint(save_weights_only=True)), an exported state_dict, or one that
    lacks weights ended in Lightning's KeyError/RuntimeError traceback ('internal error'); a text file
    said 'KeyError: 101' without naming itself. And --ckpt_path last skips a newer weights-only last.ckpt."""
    full = torch.load(mse_run_1_epoch.checkpoint, weights_only=True)
    weights_only = {k: v for k, v in full.items() if k not in ("optimizer_states", "lr_schedulers", "loops")}
    cases = {
        "weights_only.ckpt": (weights_only, ("fit",), "no optimizer_states, loops"),
        "exported.ckpt": ({"state_dict": full["state_dict"]}, ("fit", "validate"), "no pytorch-lightning_version"),
    }
    for name, (state, commands, missing) in cases.items():
        torch.save(state, tmp_path / name)
        for command in commands:
            with pytest.raises(ValueError) as error:
                lightning([command, *tiny_args(swe_store, tmp_path), "--ckpt_path", str(tmp_path / name)])
            assert one_line(error).startswith(
                f"--ckpt_path {tmp_path / name} is not a full checkpoint of s2forecast fit ({missing}: saved "
                "weights-only, or exported); start from its weights with --model.init_from, or validate/test it"
            ), str(error.value)
    cut = {**full, "state_dict": dict(list(full["state_dict"].items())[1:])}
    torch.save(cut, tmp_path / "cut.ckpt")
    with pytest.raises(ValueError, match=r"cut.ckpt lacks 1 weight\(s\) of this model, e.g. ") as error:
        lightning(["validate", *tiny_args(swe_store, tmp_path), "--ckpt_path", str(tmp_path / "cut.ckpt")])
    one_line(error)
    (tmp_path / "text.ckpt").write_text("epoch,loss\n1,0.5\n")
    with pytest.raises(ValueError, match=r"text.ckpt (refused|is not a readable PyTorch checkpoint)") as error:
        read_checkpoint(tmp_path / "text.ckpt")
    one_line(error)

    # --ckpt_path last: another callback's weights-only last.ckpt, newer than the full one, is not taken
    own = tmp_path / "runs" / "s2_neighborhood" / "version_0" / "checkpoints"
    own.mkdir(parents=True)
    torch.save(full, own / "last-v1.ckpt")
    torch.save(weights_only, own / "last.ckpt")
    os.utime(own / "last.ckpt", (time.time() + 60, time.time() + 60))
    trainer = trainer_with(tmp_path / "runs", "s2_neighborhood")
    assert last_checkpoint(trainer) == own / "last-v1.ckpt"
    (own / "last-v1.ckpt").unlink()
    assert last_checkpoint(trainer) == own / "last.ckpt"  # nothing else: fit then says why in one line


# --- --ckpt_path last -----------------------------------------------------------------------------
def touch(path: Path, mtime: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    os.utime(path, (mtime, mtime))
    return path


def trainer_with(save_dir, name, root="."):
    return SimpleNamespace(logger=CSVLogger(save_dir, name=name), default_root_dir=str(root))


def test_ckpt_path_last_is_the_latest_version_of_the_same_experiment(tmp_path):
    runs, now = tmp_path / "runs", time.time()
    touch(runs / "alpha" / "version_0" / "checkpoints" / "last.ckpt", now - 30)
    newest_own = touch(runs / "alpha" / "version_1" / "checkpoints" / "last-v1.ckpt", now - 20)
    touch(runs / "alpha" / "version_1" / "checkpoints" / "last_copy.ckpt", now - 5)  # not Lightning's name
    touch(runs / "beta" / "version_0" / "checkpoints" / "last.ckpt", now - 10)  # newer, another experiment
    touch(runs / "alpha" / "version_2" / "metrics.csv", now)  # a version that saved nothing yet
    assert last_checkpoint(trainer_with(runs, "alpha")) == newest_own
    assert last_checkpoint(trainer_with(runs, "beta")) == runs / "beta" / "version_0" / "checkpoints" / "last.ckpt"
    with pytest.raises(ValueError, match=r"no last.ckpt in .*runs/gamma/\*/checkpoints; start without") as error:
        last_checkpoint(trainer_with(runs, "gamma"))
    one_line(error)
    no_logger = SimpleNamespace(logger=None, default_root_dir=str(tmp_path / "plain"))
    with pytest.raises(ValueError, match="plain/checkpoints"):
        last_checkpoint(no_logger)
    plain = touch(tmp_path / "plain" / "checkpoints" / "last.ckpt", now)
    assert last_checkpoint(no_logger) == plain


def test_ckpt_path_last_without_own_checkpoint_is_one_line(swe_store, tmp_path):
    other = touch(tmp_path / "runs" / "alpha" / "version_0" / "checkpoints" / "last.ckpt", time.time())
    with pytest.raises(ValueError, match="no last.ckpt in .*s2_neighborhood") as error:
        lightning(["fit", *tiny_args(swe_store, tmp_path), "--ckpt_path", "last"])
    one_line(error)
    assert other.exists() and not (tmp_path / "runs" / "s2_neighborhood").exists()


# --- exact resume -------------------------------------------------------------------------------
class KillAfterStep(pl.Callback):
    """kill -9 of its own process after optimizer step ``step``."""

    def __init__(self, step: int = 7):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class Probe(pl.Callback):
    """Records where each run starts training and whether training steps draw random numbers."""

    starts: list[dict] = []
    rng_unchanged: list[bool] = []

    def __init__(self):
        self.first = True

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.first:
            Probe.starts.append({"step": trainer.global_step, "batch": batch_idx, "ckpt": trainer.ckpt_path})
            self.first = False
        self.rng = torch.get_rng_state()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        Probe.rng_unchanged.append(torch.equal(self.rng, torch.get_rng_state()))


def assert_identical(a, b, where="checkpoint"):
    """Equal structure, bit-identical tensors."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_identical(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def newest_last(experiment: Path) -> Path:
    """Two ModelCheckpoints save "last" here: Lightning names the second one's last-v1.ckpt."""
    return max(experiment.rglob("last*.ckpt"), key=lambda p: p.stat().st_mtime)


@pytest.mark.slow  # kill -9 of a training subprocess, 3 runs
def test_resume_after_kill_mid_epoch_is_bit_identical(swe_store, tmp_path):
    """2 epochs of 5 steps, shuffled, with EMA weights. One run is killed (SIGKILL) after step 7,
    its last checkpoint being step 6 (epoch 1, batch 1); `--ckpt_path last` resumes it while
    another experiment's newer last.ckpt lies next to it. It ends bit-identical to a run that
    never stopped: weights, EMA weights, optimizer and scheduler."""
    every_3_steps = ["--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.every_n_train_steps=3",
                     "--trainer.callbacks.save_top_k=0", "--trainer.callbacks.save_last=true"]  # fmt: skip
    common = [*every_3_steps, "--trainer.callbacks+=s2forecast.training.callbacks.EMAWeightAveraging",
              "--trainer.callbacks+=test_checkpoints_resume.Probe", "--data.init_args.num_workers", "2"]  # fmt: skip
    straight = tiny_args(swe_store, tmp_path, *common, "--trainer.logger.init_args.name", "straight")
    split = tiny_args(swe_store, tmp_path, *common, "--trainer.logger.init_args.name", "split")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "training"), str(REPO / "tests")]),
    }
    log = tmp_path / "crash.log"
    with log.open("w") as output:
        kill = "--trainer.callbacks+=test_checkpoints_resume.KillAfterStep"
        crash = subprocess.Popen(
            [sys.executable, "-m", "s2forecast.cli", "fit", *split, kill],
            env=env, cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
        Probe.starts, Probe.rng_unchanged = [], []
        cli(["fit", *straight])  # meanwhile, the uninterrupted run
        crash.wait(timeout=300)
    assert crash.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    assert Probe.rng_unchanged and all(Probe.rng_unchanged)  # no dropout or other draws to restore

    runs = tmp_path / "runs"
    interrupted = newest_last(runs / "split")
    assert torch.load(interrupted, weights_only=True)["global_step"] == 6  # mid-epoch (5 steps an epoch)
    other = newest_last(runs / "straight")
    os.utime(other, (time.time() + 60, time.time() + 60))  # the newest last.ckpt under runs/
    other_state = (other.read_bytes(), other.stat().st_mtime_ns)

    Probe.starts = []
    cli(["fit", *split, "--ckpt_path", "last"])
    assert Probe.starts == [{"step": 6, "batch": 1, "ckpt": str(interrupted)}]
    assert (other.read_bytes(), other.stat().st_mtime_ns) == other_state

    a = read_checkpoint(other)  # weights-only: EMA, loader and loop states are plain
    b = read_checkpoint(newest_last(runs / "split"))
    assert a["global_step"] == b["global_step"] == 10 and "current_model_state" in a
    for key in ("state_dict", "current_model_state", "optimizer_states", "lr_schedulers", "rollout", "epoch"):
        assert_identical(a[key], b[key], key)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_two_nodes(argv: list[str], env: dict, cwd: Path) -> list[subprocess.CompletedProcess]:
    """``torchrun --nnodes 2 --nproc-per-node 1`` twice, as on two machines: one launcher per node,
    meeting at 127.0.0.1 (static rendezvous, gloo)."""
    env = {k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    port = str(free_port())
    launchers = [
        subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                          "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", port, *argv],
                         env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for node in (0, 1)
    ]  # fmt: skip
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=600), *p.communicate()) for p in launchers]


@pytest.mark.slow  # 2 runs of 2 DDP processes
def test_two_node_training_and_its_resume_mid_epoch_under_ddp(swe_store, tmp_path):
    """DDP on 2 CPU processes (gloo), each serving its own shard of the shuffled epoch.

    The uninterrupted run is launched as on two machines (two ``torchrun --nnodes 2`` launchers)
    and ends with the same weights on both ranks. Another run, launched by Lightning on one node
    (``--trainer.devices 2``), resumes with ``--ckpt_path last`` from the first run's mid-epoch
    checkpoint and ends bit-identical to it (Lightning saves rank 0's loader state; every rank's
    shard position is the same; the launcher does not change the numbers). The checkpoint is the
    uninterrupted run's own, as a run killed at that step leaves it: what a kill -9 leaves and how
    `--ckpt_path last` finds it is test_resume_after_kill_mid_epoch_is_bit_identical's (a killed DDP
    run here was a third run of 2 processes, 13 s)."""
    # every step's checkpoint kept, as step=N.ckpt
    every_step = ["--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.every_n_train_steps=1",
                  "--trainer.callbacks.save_top_k=-1", "--trainer.callbacks.save_last=true",
                  "--trainer.callbacks.filename={step}"]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "training"), str(REPO / "tests")]),
        "PROBE_DIR": str(tmp_path),
        "OMP_NUM_THREADS": "1",
    }

    def args(name, *extra):
        return tiny_args(swe_store, tmp_path, *every_step, "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu",
                         "--trainer.logger.init_args.name", name, *extra)  # fmt: skip

    nodes = torchrun_two_nodes(["-m", "s2forecast.cli", "fit", *args("straight", "--trainer.num_nodes", "2",
                                "--trainer.devices", "1", "--trainer.callbacks+=weight_probe.WeightProbe")],
                               env, tmp_path)  # fmt: skip
    assert [node.returncode for node in nodes] == [0, 0], nodes[0].stderr[-3000:] + nodes[1].stderr[-3000:]
    probes = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert [p["rank"] for p in probes] == [0, 1] and probes[0]["world_size"] == 2
    assert probes[0]["checksum"] == probes[1]["checksum"] and probes[0]["step"] == probes[1]["step"] > 0
    runs = tmp_path / "runs"
    steps = torch.load(newest_last(runs / "straight"), weights_only=True)["global_step"]
    assert steps == probes[0]["step"]
    # its validations scored each of the 5 samples once (the 2 processes pad their shares to 3 and
    # ran 2 batches each; the padding was scored): as one process scores its last checkpoint
    assert "sync_dist" not in nodes[0].stderr  # the module reduces its scores: no advice to reduce them
    cli(["validate", *tiny_args(swe_store, tmp_path / "one"), "--ckpt_path", str(newest_last(runs / "straight"))])
    one, two = last_val_scores(tmp_path / "one" / "runs"), last_val_scores(runs / "straight")
    assert "val/loss" in one and "val/rmse/geopotential_height/step2" in one and one.keys() == two.keys()
    for key in one:
        assert two[key] == pytest.approx(one[key], rel=1e-5), key
    per_epoch = steps // 2  # two epochs
    assert per_epoch >= 2, steps  # a mid-epoch step exists

    # the last checkpoint a run killed after step per_epoch + 2 leaves: epoch 1, batch 1
    (mid_epoch,) = runs.glob(f"straight/*/checkpoints/step={per_epoch + 1}.ckpt")
    assert torch.load(mid_epoch, weights_only=True)["global_step"] == per_epoch + 1
    (runs / "split" / "version_0" / "checkpoints").mkdir(parents=True)
    shutil.copy(mid_epoch, runs / "split" / "version_0" / "checkpoints" / "last.ckpt")
    resumed = subprocess.run([sys.executable, "-m", "s2forecast.cli", "fit", *args("split", "--trainer.devices", "2"),
                              "--ckpt_path", "last"], env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # it went on from the checkpoint: a run from scratch would end the same, but write every step
    written = sorted(int(p.stem[5:]) for p in runs.glob("split/*/checkpoints/step=*.ckpt"))
    assert written == list(range(per_epoch + 2, steps + 1)), written
    a = read_checkpoint(newest_last(runs / "straight"))
    b = read_checkpoint(newest_last(runs / "split"))
    assert a["global_step"] == b["global_step"] == steps
    for key in ("state_dict", "optimizer_states", "lr_schedulers", "rollout", "epoch"):
        assert_identical(a[key], b[key], key)


# --- the loader ------------------------------------------------------------------------------------
def epoch_batches(loader, epoch, set_epoch_after_iter=False):
    if not set_epoch_after_iter:
        loader.sampler.set_epoch(epoch)
    iterator = iter(loader)
    if set_epoch_after_iter:
        loader.sampler.set_epoch(epoch)
    return [batch.tolist() for batch in iterator]


def make_loader(workers=0, **sampler_options):
    data = torch.arange(11)
    sampler = EpochShuffleSampler(data, seed=3, **sampler_options)
    return ResumableLoader(data, batch_size=2, sampler=sampler, num_workers=workers, drop_last=True)


def test_loader_resumes_mid_epoch_in_lightnings_order_with_workers():
    """Lightning restores the state, calls iter() and only then set_epoch; with workers the
    indices are drawn early, which used to give the resumed epoch epoch 0's order."""
    full = epoch_batches(make_loader(), 1)
    assert len(full) == 5 and full != epoch_batches(make_loader(), 0)
    interrupted = make_loader(workers=2)
    interrupted.sampler.set_epoch(1)
    iterator = iter(interrupted)
    assert [next(iterator).tolist() for _ in range(2)] == full[:2]
    state = interrupted.state_dict()
    assert state.pop("samples_digest")  # of the samples' times (FieldDataset), else their number
    assert state == {"epoch": 1, "samples": 4, "batch_size": 2, "epoch_batches": 2, "ranks": 1, "seed": 3}

    resumed = make_loader(workers=2)
    resumed.load_state_dict(state)
    assert epoch_batches(resumed, 1, set_epoch_after_iter=True) == full[2:]
    assert epoch_batches(resumed, 2) == epoch_batches(make_loader(), 2)  # the next epoch is whole
    fresh = make_loader(workers=2)
    assert epoch_batches(fresh, 1, set_epoch_after_iter=True) == full

    finished = make_loader()
    finished.load_state_dict({"epoch": 1, "samples": 10})  # saved at the end of epoch 1
    assert epoch_batches(finished, 2) == epoch_batches(make_loader(), 2)
    old = make_loader(workers=2)  # a checkpoint of before "samples": batches of this batch size
    old.load_state_dict({"epoch": 1, "batches": 2})
    assert epoch_batches(old, 1, set_epoch_after_iter=True) == full[2:]


def test_a_resume_with_another_batch_size_goes_on_from_the_same_sample():
    """The position was saved in batches and restored with the new batch size: batch 2 -> 1 trained 3
    samples of the epoch twice, 2 -> 4 skipped 4. In samples, each one of the epoch is served once.
    Mid-epoch, a larger batch size whose rest of the epoch would outlast Lightning's count of the
    epoch's batches (restored: 2 of a 3-batch epoch of 3) is refused: Lightning would cut it short."""
    order = [i for batch in epoch_batches(make_loader(), 1) for i in batch]
    interrupted = make_loader()
    interrupted.sampler.set_epoch(1)
    iterator = iter(interrupted)
    seen = [i for _ in range(2) for i in next(iterator).tolist()]

    def resumed_with(batch_size):
        data = torch.arange(11)
        resumed = ResumableLoader(data, batch_size=batch_size, sampler=EpochShuffleSampler(data, seed=3),
                                  drop_last=True)  # fmt: skip
        resumed.load_state_dict(interrupted.state_dict())
        return resumed

    resumed = resumed_with(1)
    rest = [i for batch in epoch_batches(resumed, 1, set_epoch_after_iter=True) for i in batch]
    assert seen + rest[: len(order) - len(seen)] == order and len(rest) == 11 - 4  # none twice, none skipped
    assert 2 + len(rest) <= len(resumed)  # within Lightning's count of the epoch's batches
    with pytest.raises(ValueError, match=(
        r"the checkpoint stopped mid-epoch after 2 batches of 2; with data.init_args.batch_size 3 Lightning may "
        r"end that epoch after 1 more batches, leaving 3 of its samples untrained: resume with batch_size 2, or "
        r"change it at an epoch's end"
    )):  # fmt: skip
        resumed_with(3)
    finished = make_loader()
    finished.sampler.set_epoch(1)
    list(finished)
    at_the_end = ResumableLoader(torch.arange(11), batch_size=3, sampler=EpochShuffleSampler(torch.arange(11), seed=3),
                                 drop_last=True)  # fmt: skip
    at_the_end.load_state_dict(finished.state_dict())  # an epoch's end: any batch size


def test_a_resume_mid_epoch_on_another_number_of_ranks_is_refused():
    """The position is one in each rank's share of the epoch: resumed on 1 rank, a run of 2 trained
    a quarter of its epoch twice (on 2 from 1, or on 3 from 2, it skipped samples). At an epoch's end
    any number of ranks goes on, and checkpoints of before "ranks" are taken as they were."""
    two = [make_loader(num_replicas=2, rank=r) for r in (0, 1)]
    for loader in two:
        loader.sampler.set_epoch(1)
        next(iter(loader))
    state = two[0].state_dict()
    assert state["ranks"] == 2 and state["samples"] == 2
    with pytest.raises(UserError, match=(
        r"^the checkpoint stopped mid-epoch \(after 1 batches\) of a run on 2 process\(es\), and this run has 1: that "
        r"position holds only on 2; resume on 2 \(trainer.devices x trainer.num_nodes\), or from a checkpoint saved "
        r"at an epoch's end$"
    )):  # fmt: skip
        make_loader().load_state_dict(state)
    make_loader(num_replicas=2, rank=1).load_state_dict(state)  # the same number of ranks
    make_loader().load_state_dict({**state, "samples": 6})  # the end of the 2 shares of 6
    # the end of shares of 6 in batches of 4 (the last 2 dropped): on 3 ranks (shares of 4, one batch, none
    # dropped) it was taken for the middle of the epoch, judged by the resuming loader's drop_last (a review)
    data = torch.arange(11)
    three = ResumableLoader(data, batch_size=4, sampler=EpochShuffleSampler(data, seed=3, num_replicas=3),
                            drop_last=False)  # fmt: skip
    three.load_state_dict({**state, "samples": 4, "batch_size": 4})
    one = ResumableLoader(data, batch_size=8, sampler=EpochShuffleSampler(data, seed=3), drop_last=True)
    one.load_state_dict({**state, "samples": 4, "batch_size": 4})  # and with a batch size the rest would not fill
    make_loader().load_state_dict({key: value for key, value in state.items() if key != "ranks"})


def test_a_resume_mid_epoch_with_another_seed_or_other_samples_is_refused(swe_store):
    """The position is one in the epoch's permutation of the run's samples: with another data seed, or
    other training trajectories, the rest of the epoch trained samples twice and others never, in silence
    (a review found both). At an epoch's end they go on."""
    from s2forecast.training.datamodule import SWEDataModule

    def loader(seed=0, trajectories=(0, 2)):
        data = SWEDataModule(str(swe_store), train_trajectories=trajectories, val_trajectories=None,
                             test_trajectories=None, batch_size=2, seed=seed, num_workers=0)  # fmt: skip
        data.setup("fit")
        return data.train_dataloader()

    first = loader()
    first.sampler.set_epoch(1)
    next(iter(first))
    state = first.state_dict()
    assert state["seed"] == 0
    loader().load_state_dict(state)
    with pytest.raises(UserError, match=(
        r"^the checkpoint stopped mid-epoch \(after 1 batches\) of a run with data.init_args.seed 0 \(now 1\): the "
        r"rest of that epoch is a position in its permutation of its samples; resume with that run's data settings, "
        r"or from a checkpoint saved at an epoch's end$"
    )):  # fmt: skip
        loader(seed=1).load_state_dict(state)
    with pytest.raises(UserError, match=r"of a run with other training samples \(the split, the store's record"):
        loader(trajectories=(1, 3)).load_state_dict(state)  # as many samples, other ones
    loader(seed=1).load_state_dict({**state, "samples": len(first.sampler)})  # at the epoch's end


def test_sampler_shards_by_rank():
    shares = [list(EpochShuffleSampler(torch.arange(11), seed=3, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 6
    assert sorted(set(shares[0]) | set(shares[1])) == list(range(11))
    single = list(EpochShuffleSampler(torch.arange(11), seed=3))  # the shares interleave this order
    assert shares[0] == single[0::2] and shares[1][:5] == single[1::2]
