"""Artifacts shared by the whole test session: tiny stores and tiny trained checkpoints, each built
once per session instead of once per test file. Under pytest-xdist (``-n``) the workers share
them too: the first to need one builds it under a file lock, the others wait and read it.

They are inputs, never outputs: a test that writes into one (runs `stats` on the store, resumes a
run, ...) must copy it into its own ``tmp_path`` first. Each fixture records a content hash of
its files and checks it at the end of the session, so a test that modifies a shared artifact
fails there (file modes cannot guard them: the tests may run as root).

conftest.py imports the fixtures from here; test files import the helpers (``tiny_args``, ...).
"""

import csv
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock  # a torch dependency

REPO = Path(__file__).parents[1]
CONFIG = REPO / "configs" / "swe" / "s2_neighborhood.yaml"


def tiny_args(store, tmp_path, *extra):
    """fit arguments for a 2-epoch run of a width-16 model on the tiny store, logs in tmp_path."""
    return [
        "--config", str(CONFIG),
        "--data.init_args.store", str(store),
        "--data.init_args.train_trajectories", "[0, 2]",
        "--data.init_args.val_trajectories", "[2, 3]",
        "--data.init_args.test_trajectories", "[2, 3]",
        "--data.init_args.num_workers", "0",
        "--data.init_args.batch_size", "2",
        "--data.init_args.rollout_steps", "2",
        "--model.network.embed_dim", "16",
        "--model.network.num_layers", "2",
        "--model.warmup_steps", "2",
        "--model.rollout_max", "2",
        "--model.rollout_every_epochs", "1",
        "--trainer.max_epochs", "2",
        "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
        "--trainer.default_root_dir", str(tmp_path),
        *extra,
    ]  # fmt: skip


def last_val_scores(root: Path) -> dict[str, float]:
    """The last logged value of each val/ key in the metrics.csv under ``root``."""
    (metrics,) = Path(root).rglob("metrics.csv")
    scores = {}
    with metrics.open() as lines:
        for row in csv.DictReader(lines):
            scores |= {key: float(value) for key, value in row.items() if key.startswith("val/") and value}
    return scores


def tree_digest(path: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under path (or of path itself), directories as ''."""
    path = Path(path)
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(path.rglob("*"))
    }


def unchanged(path: Path, before: dict[str, str], what: str) -> None:
    """Session teardown: the shared artifact's files are those it was built with."""
    after = tree_digest(path)
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, (
        f"a test modified the shared {what} at {path} (session_fixtures.py): {changed[:10]}; "
        "copy it into tmp_path before writing to it"
    )


@dataclass(frozen=True)
class Run:
    """A finished `s2forecast fit` run of ``tiny_args``: its directory (runs/ under it) and last.ckpt."""

    root: Path
    checkpoint: Path


def build_once(tmp_path_factory, name: str, build) -> Path:
    """``build(path)`` once per session, xdist workers included: the workers' base temporary
    directories (popen-gwN) share a parent, which is this run's own."""
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent
    path, done = root / name, root / f"{name}.done"
    with FileLock(root / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)  # a build that failed in another worker
            build(path)
            done.touch()
    return path


def fit_run(tmp_path_factory, name: str, store, *extra) -> Run:
    """`s2forecast fit` of ``tiny_args(store, ..., *extra)``, once per session."""
    from s2forecast.cli import main as cli

    root = build_once(tmp_path_factory, name, lambda path: cli(["fit", *tiny_args(store, path, *extra)]))
    return Run(root, next((root / "runs").rglob("last.ckpt")))


# --- the fixtures (imported by conftest.py) ------------------------------------------------------


@pytest.fixture(scope="session")
def swe_store(tmp_path_factory):
    """A tiny shallow-water store with statistics (8x16, 3 trajectories of 6 steps)."""
    from s2forecast.data import compute_stats, generate_swe

    def build(path):
        generate_swe(path, 8, 16, trajectories=3, steps=6, progress=False)
        compute_stats(path)

    path = build_once(tmp_path_factory, "swe.zarr", build)
    before = tree_digest(path)
    yield path
    unchanged(path, before, "SWE store")


@pytest.fixture(scope="session")
def mse_run_1_epoch(swe_store, tmp_path_factory):
    """`s2forecast fit` of ``tiny_args`` for one epoch (5 steps): a deterministic MSE model."""
    run = fit_run(tmp_path_factory, "mse_1_epoch", swe_store, "--trainer.max_epochs", "1")
    before = tree_digest(run.root)
    yield run
    unchanged(run.root, before, "1-epoch run")


@pytest.fixture(scope="session")
def mse_run_2_epochs(swe_store, tmp_path_factory):
    """`s2forecast fit` of ``tiny_args`` as they are: two epochs (10 steps), rollout 2 in the second."""
    run = fit_run(tmp_path_factory, "mse_2_epochs", swe_store)
    before = tree_digest(run.root)
    yield run
    unchanged(run.root, before, "2-epoch run")


ENSEMBLE = ["--model.loss", "crps", "--model.members", "2", "--model.network.noise_channels", "2",
            "--trainer.max_epochs", "1"]  # fmt: skip


@pytest.fixture(scope="session")
def crps_run(swe_store, tmp_path_factory):
    """`s2forecast fit` of ``tiny_args`` with the fair CRPS: a 2-member ensemble model, one epoch."""
    run = fit_run(tmp_path_factory, "crps", swe_store, *ENSEMBLE)
    before = tree_digest(run.root)
    yield run
    unchanged(run.root, before, "CRPS run")
