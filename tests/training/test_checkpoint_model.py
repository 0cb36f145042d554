"""Issue 29: --ckpt_path with a config that describes another model is refused naming every
hyper-parameter that differs (it used to score or train the checkpoint's model without a word,
or fail with a size-mismatch traceback); --model_from_ckpt true takes the checkpoint's model."""

import csv
import inspect

import pytest
import yaml
from session_fixtures import ENSEMBLE, tiny_args

from s2forecast.cli import main as cli
from s2forecast.training import ForecastModule
from s2forecast.training.checkpoint_model import DATA_KEYS, FIT_KEYS, MODEL_KEYS, NOT_COMPARED, differences
from s2forecast.training.checkpoints import read_checkpoint

VALIDATE = ["--trainer.max_epochs", "1"]

CASES = {  # name: (subcommand, checkpoint fixture, extra arguments, words of the one line)
    "mse config, crps checkpoint": (
        "validate", "crps_run", [],
        ["model.network.noise_channels 0 in this run, 2 in the checkpoint", "model.members 1 in this run, 2",
         "model.loss 'mse' in this run, 'crps' in the checkpoint", "--model_from_ckpt true"],
    ),
    "crps config, mse checkpoint": (
        "validate", "mse_run_1_epoch", ENSEMBLE, ["model.loss 'crps' in this run, 'mse' in the checkpoint"],
    ),
    "other width (shapes differ)": (
        "fit", "mse_run_1_epoch", ["--model.network.embed_dim", "8"],
        ["model.network.embed_dim 8 in this run, 16 in the checkpoint"],
    ),
    "planar config, spherical checkpoint": (
        "fit", "mse_run_1_epoch", ["--model.architecture", "planar", "--model.network", '{"embed_dim": 16}'],
        ["model.architecture 'planar' in this run, 'spherical' in the checkpoint; give the config"],
    ),
    "resumed with another schedule": (
        "fit", "mse_run_1_epoch", ["--model.lr", "0.01"], ["model.lr 0.01 in this run, 0.001 in the checkpoint"],
    ),
    "another fair-CRPS share": (
        "validate", "crps_run", [*ENSEMBLE, "--model.crps_alpha", "0.5"],
        ["model.crps_alpha 0.5 in this run, 1.0 in the checkpoint"],
    ),
    "another spectral CRPS weight": (
        "validate", "crps_run", [*ENSEMBLE, "--model.crps_spectral_weight", "0.1"],
        ["model.crps_spectral_weight 0.1 in this run, 0.0 in the checkpoint"],
    ),
    "other channels": (
        "validate", "mse_run_1_epoch", ["--data.init_args.variables", "[vorticity, divergence]"],
        ["model.data.channels ['vorticity', 'divergence'] in this run, ['geopotential_height', 'vorticity', "
         "'divergence'] in the checkpoint; run it on data like the checkpoint's"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_another_model_than_the_checkpoint_is_one_line(case, swe_store, tmp_path, capsys, request):
    subcommand, fixture, extra, words = CASES[case]
    checkpoint = request.getfixturevalue(fixture).checkpoint
    with pytest.raises(SystemExit) as exit:
        cli([subcommand, *tiny_args(swe_store, tmp_path, *extra), "--ckpt_path", str(checkpoint)])
    err = capsys.readouterr().err
    line = err.splitlines()[-1]
    assert exit.value.code == 2 and "Traceback" not in err, err[-3000:]
    assert line.startswith(f"s2forecast {subcommand}: error: --ckpt_path {checkpoint} is another model than this run's")
    for word in words:
        assert word in line, (word, line)
    assert not list(tmp_path.rglob("metrics.csv")) and not list(tmp_path.rglob("*.ckpt"))  # nothing scored or trained


def val_loss(root) -> float:
    (metrics,) = root.rglob("metrics.csv")
    rows = [row for row in csv.DictReader(metrics.open()) if row.get("val/loss")]
    return float(rows[-1]["val/loss"])


def test_model_from_ckpt_takes_the_checkpoints_model(swe_store, mse_run_1_epoch, tmp_path):
    """The config says width 8; the checkpoint's width-16 model is what is scored, exactly as
    with the config it was trained with."""
    checkpoint = str(mse_run_1_epoch.checkpoint)
    cli(["validate", *tiny_args(swe_store, tmp_path / "own"), "--ckpt_path", checkpoint])
    other = tiny_args(swe_store, tmp_path / "taken", "--model.network.embed_dim", "8", "--model.lr", "0.5")
    cli(["validate", *other, "--ckpt_path", checkpoint, "--model_from_ckpt", "true"])
    assert val_loss(tmp_path / "own" / "runs") == val_loss(tmp_path / "taken" / "runs")


@pytest.mark.parametrize("given", ["on the command line", "in a config file"])
def test_print_config_with_model_from_ckpt_prints_the_checkpoints_model(
    swe_store, mse_run_1_epoch, tmp_path, capsys, given
):
    """--print_config printed the config's model section (width 8), which the run replaces with
    the checkpoint's (width 16): the config it prints is the one the run uses."""
    checkpoint = str(mse_run_1_epoch.checkpoint)
    other = tiny_args(swe_store, tmp_path, "--model.network.embed_dim", "8", "--model.lr", "0.5")
    (tmp_path / "from_ckpt.yaml").write_text("model_from_ckpt: true\n")
    in_file = ["--config", str(tmp_path / "from_ckpt.yaml")]
    flag = ["--model_from_ckpt", "true"] if given == "on the command line" else in_file
    with pytest.raises(SystemExit) as exit_info:
        cli(["validate", *other, "--ckpt_path", checkpoint, *flag, "--print_config"])
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    hparams = read_checkpoint(checkpoint)["hyper_parameters"]
    assert printed["model"]["network"] == hparams["network"] and printed["model"]["network"]["embed_dim"] == 16
    assert printed["model"]["lr"] == hparams["lr"] != 0.5
    assert printed["ckpt_path"] == checkpoint and not (tmp_path / "runs").exists()


def test_print_config_reads_no_checkpoint_without_model_from_ckpt(swe_store, tmp_path, capsys):
    """The print waits for the checkpoint's model only where the run takes it: otherwise it
    prints before any checkpoint is read, as jsonargparse does (and `fit --print_config` alone
    still prints a template)."""
    missing = str(tmp_path / "missing.ckpt")
    for argv in (["fit", *tiny_args(swe_store, tmp_path), "--ckpt_path", missing, "--model_from_ckpt", "false",
                  "--print_config"], ["fit", "--print_config"]):  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            cli(argv)
        assert exit_info.value.code == 0
        assert "seed_everything:" in capsys.readouterr().out


def test_validate_does_not_warn_of_the_checkpoint_callbacks_directory(swe_store, mse_run_1_epoch, tmp_path, recwarn):
    """validate restores ModelCheckpoint's state from --ckpt_path, and Lightning warned that its
    best_model_score etc. would not be reloaded in the new run's directory: noise for a run that
    saves no checkpoint (the probe counted it on every validate)."""
    cli(["validate", *tiny_args(swe_store, tmp_path), "--ckpt_path", str(mse_run_1_epoch.checkpoint)])
    assert val_loss(tmp_path / "runs") > 0
    assert not [w for w in recwarn if "dirpath has changed" in str(w.message)], [str(w.message) for w in recwarn]


def test_validate_ignores_the_training_schedule(swe_store, mse_run_1_epoch, tmp_path):
    """lr, warm-up and the rollout schedule do not change what validate scores: not compared."""
    extra = ["--model.lr", "0.5", "--model.warmup_steps", "7", "--model.rollout_every_epochs", "0"]
    cli(["validate", *tiny_args(swe_store, tmp_path, *extra), "--ckpt_path", str(mse_run_1_epoch.checkpoint)])
    assert val_loss(tmp_path / "runs") > 0


def test_model_from_ckpt_needs_a_checkpoint_file(swe_store, tmp_path, capsys):
    for ckpt in (["--ckpt_path", "last"], []):
        with pytest.raises(SystemExit) as exit:
            cli(["fit", *tiny_args(swe_store, tmp_path), *ckpt, "--model_from_ckpt", "true"])
        assert exit.value.code == 2
        assert "--model_from_ckpt true needs a checkpoint file in --ckpt_path" in capsys.readouterr().err


def test_differences_resolve_network_defaults_and_skip_what_old_checkpoints_lack():
    data = {"channels": ["a"], "grid": [8, 16, "equiangular"], "mean": [1.0], "std": [2.0]}
    ours = {"architecture": "spherical", "network": {"embed_dim": 128}, "loss": "mse", "lr": 1e-3, "data": data}
    theirs = {"architecture": "spherical", "network": None, "lr": 1e-3, "data": {**data, "mean": [1.0 + 1e-9]}}
    assert differences(ours, theirs, "fit") == []  # embed_dim 128 is the default; no "loss" in an old checkpoint
    theirs["data"]["std"] = [2.5]
    assert differences(ours, theirs, "validate") == ["model.data.std[0] 2.0 in this run, 2.5 in the checkpoint"]


def test_every_model_argument_is_compared_or_said_not_to_be():
    """A new ForecastModule option (crps_alpha, crps_spectral_weight were missed) is either one
    that --ckpt_path compares, or listed as not compared: never left out without a word."""
    arguments = list(inspect.signature(ForecastModule).parameters)
    classified = MODEL_KEYS + FIT_KEYS + NOT_COMPARED
    assert sorted(arguments) == sorted(classified) and len(set(classified)) == len(classified)
    assert not set(DATA_KEYS) & set(arguments)  # those are model.data's keys
