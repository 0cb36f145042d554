"""A run's config.yaml is saved next to its checkpoints and never over a file (a run without a
logger replaced the user's own config.yaml in the working directory, then failed on the learning
rate monitor; every WandbLogger run replaced the previous run's), and with the WandbLogger, whose
directory is the project's, `--ckpt_path last` resumes only the run of the same name."""

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import wandb
import yaml
from pytorch_lightning.loggers import CSVLogger
from session_fixtures import tiny_args

from s2forecast.cli import main as cli
from s2forecast.training.checkpoints import last_checkpoint
from s2forecast.training.cli import refuse_used_log_dirs
from s2forecast.training.cli import run as lightning  # raises what `s2forecast` reports in one line
from s2forecast.training.run_config import RunConfig

REPO = Path(__file__).parents[2]
USERS_CONFIG = "# my own config, with my comments\ntrainer:\n  logger: false\n"


class Parser:
    """What RunConfig needs of the CLI's parser: ``dump``."""

    def dump(self, config, skip_none=True):
        return yaml.safe_dump(config)


def save(trainer, config: dict) -> RunConfig:
    callback = RunConfig(Parser(), config)
    callback.setup(trainer, None, "fit")
    return callback


def test_run_config_goes_next_to_the_checkpoints_and_never_over_a_file(tmp_path):
    csv = SimpleNamespace(is_global_zero=True, default_root_dir=str(tmp_path), loggers=[
        CSVLogger(tmp_path / "runs", name="alpha", version=0)])  # fmt: skip
    callback = save(csv, {"run": 1})
    written = tmp_path / "runs" / "alpha" / "version_0" / "config.yaml"
    assert yaml.safe_load(written.read_text()) == {"run": 1}
    assert callback.created == [written.parent, written.parent.parent, written.parent.parent.parent]
    # a logger whose directory is the project's (WandbLogger): <save_dir>/<project>/<run id>
    wandb_like = SimpleNamespace(save_dir=str(tmp_path / "runs"), name="project", version="x1y2z3")
    save(SimpleNamespace(is_global_zero=True, default_root_dir=str(tmp_path), loggers=[wandb_like]), {"run": 2})
    assert yaml.safe_load((tmp_path / "runs" / "project" / "x1y2z3" / "config.yaml").read_text()) == {"run": 2}
    assert not (tmp_path / "runs" / "config.yaml").exists()

    with pytest.warns(UserWarning, match=rf"configuration is not saved: {written} exists and this run did not wri"):
        again = save(csv, {"run": 3})  # the same version again (a fixed trainer.logger.init_args.version)
    assert yaml.safe_load(written.read_text()) == {"run": 1} and again.created == []

    (tmp_path / "config.yaml").write_text(USERS_CONFIG)  # without a logger: default_root_dir, the user's file
    no_logger = SimpleNamespace(is_global_zero=True, default_root_dir=str(tmp_path), loggers=[])
    with pytest.warns(UserWarning, match="give each run a trainer.default_root_dir of its own"):
        save(no_logger, {"run": 4})
    assert (tmp_path / "config.yaml").read_text() == USERS_CONFIG
    save(SimpleNamespace(is_global_zero=True, default_root_dir=str(tmp_path / "new"), loggers=[]), {"run": 5})
    assert yaml.safe_load((tmp_path / "new" / "config.yaml").read_text()) == {"run": 5}
    save(SimpleNamespace(is_global_zero=False, default_root_dir=str(tmp_path / "rank1"), loggers=[]), {"run": 6})
    assert not (tmp_path / "rank1").exists()  # the first process alone writes


def test_fit_without_a_logger_trains_and_keeps_the_users_config(swe_store, tmp_path, recwarn):
    """The reviewer's case: `trainer.logger: false` started where the user's config.yaml is."""
    (tmp_path / "config.yaml").write_text(USERS_CONFIG)
    cli(["fit", *tiny_args(swe_store, tmp_path, "--trainer.logger", "false", "--trainer.max_epochs", "1")])
    assert (tmp_path / "config.yaml").read_text() == USERS_CONFIG
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 5
    warned = [str(w.message) for w in recwarn if "configuration is not saved" in str(w.message)]
    assert len(warned) == 1 and str(tmp_path / "config.yaml") in warned[0], warned
    assert not (tmp_path / "runs").exists()  # logged nothing


def records(path: Path) -> str:
    return torch.load(path, weights_only=True, mmap=True)["callbacks"]["RunName"]["name"]


def fake_checkpoint(path: Path, name: str | None, mtime: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"callbacks": {"RunName": {"name": name}} if name else {}, "global_step": 1}, path)
    os.utime(path, (mtime, mtime))
    return path


def test_ckpt_path_last_of_a_project_directory_takes_the_runs_own(tmp_path):
    """A logger whose directory is the project's: only checkpoints recording the run's name."""
    project, now = tmp_path / "runs" / "s2forecast", time.time()
    alpha = fake_checkpoint(project / "id1" / "checkpoints" / "last.ckpt", "alpha", now - 30)
    fake_checkpoint(project / "id2" / "checkpoints" / "last.ckpt", "beta", now - 20)  # newer, another run
    fake_checkpoint(project / "id3" / "checkpoints" / "last.ckpt", None, now - 10)  # no record: whose?
    (project / "id4" / "checkpoints").mkdir(parents=True)
    (project / "id4" / "checkpoints" / "last.ckpt").write_bytes(b"being written")  # unreadable: not its
    trainer = SimpleNamespace(logger=SimpleNamespace(save_dir=str(tmp_path / "runs"), name="s2forecast"))
    assert last_checkpoint(trainer, "alpha") == alpha
    with pytest.raises(
        ValueError, match=r"no last.ckpt of the run named 'gamma' in .*s2forecast/\*/checkpoints \(4 of"
    ):
        last_checkpoint(trainer, "gamma")
    with pytest.raises(ValueError, match="the run has no name to find its checkpoints by; set trainer.logger.init_"):
        last_checkpoint(trainer, None)


def test_wandb_runs_keep_their_configs_and_resume_only_their_own(swe_store, tmp_path, monkeypatch):
    """Offline wandb: each run's config.yaml lies next to its checkpoints (none in save_dir), and
    `--ckpt_path last` takes the run of the same name, not the newest of the project."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")

    def args(name, *extra):
        wandb = ["--config", str(REPO / "configs" / "logger_wandb.yaml"), "--trainer.logger.init_args.name", name,
                 "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")]  # fmt: skip
        return ["fit", *tiny_args(swe_store, tmp_path, *wandb, "--trainer.max_epochs", "1", *extra)]

    for name, width in (("alpha", "16"), ("beta", "8")):
        cli(args(name, "--model.network.embed_dim", width))
        wandb.finish()  # as the end of an `s2forecast fit` process: else the next logger reuses this run
    project = tmp_path / "runs" / "s2forecast"
    lasts = {records(path): path for path in project.glob("*/checkpoints/last.ckpt")}
    assert sorted(lasts) == ["alpha", "beta"]
    for name, width in (("alpha", 16), ("beta", 8)):
        config = yaml.safe_load((lasts[name].parents[1] / "config.yaml").read_text())
        assert config["model"]["network"]["embed_dim"] == width
        assert config["trainer"]["logger"]["init_args"]["name"] == name
    assert not list((tmp_path / "runs").glob("*.yaml"))

    before = sorted(project.iterdir())
    with pytest.raises(ValueError, match=r"no last.ckpt of the run named 'gamma' in .*s2forecast/\*/checkpoints"):
        lightning(args("gamma", "--ckpt_path", "last"))
    assert sorted(project.iterdir()) == before  # nothing left of the refused run
    resumed = lightning(args("alpha", "--ckpt_path", "last"))  # beta's is newer: not alpha's
    wandb.finish()
    assert resumed.config_init["fit"]["ckpt_path"] == str(lasts["alpha"])


def test_a_fixed_logger_version_of_an_earlier_run_is_refused(swe_store, mse_run_1_epoch, tmp_path):
    """--trainer.logger.init_args.version 0 of an earlier run: Lightning replaced its metrics.csv and
    hparams.yaml ('Previous log files in this directory will be deleted'), its config.yaml kept."""
    import shutil

    shutil.copytree(mse_run_1_epoch.root / "runs", tmp_path / "runs")
    version = next((tmp_path / "runs").rglob("metrics.csv")).parent
    before = {path: path.read_bytes() for path in version.rglob("*") if path.is_file()}
    for command in ("fit", "validate"):
        extra = ["--trainer.logger.init_args.version", version.name]
        if command == "validate":
            extra += ["--ckpt_path", str(next(version.rglob("last.ckpt")))]
        with pytest.raises(ValueError) as error:
            lightning([command, *tiny_args(swe_store, tmp_path), "--trainer.max_epochs", "1", *extra])
        assert str(error.value) == (
            f"log directory {version} holds an earlier run's records, which this run would replace; leave "
            "trainer.logger.init_args.version out (a new version_N) or give an unused one"
        )
    assert {path: path.read_bytes() for path in version.rglob("*") if path.is_file()} == before
    assert sorted(p.name for p in version.parent.iterdir()) == [version.name]


def test_every_rank_refuses_a_used_log_directory(tmp_path):
    """Not rank 0 alone: the other ranks of a DDP job would wait for it in the process group's set-up."""
    logger = CSVLogger(tmp_path, name="runs", version=0)
    Path(logger.log_dir).mkdir(parents=True)
    (Path(logger.log_dir) / "metrics.csv").write_text("step\n")
    for rank in (0, 1):
        trainer = SimpleNamespace(loggers=[logger], is_global_zero=rank == 0, global_rank=rank)
        with pytest.raises(ValueError, match="holds an earlier run's records"):
            refuse_used_log_dirs(trainer)
