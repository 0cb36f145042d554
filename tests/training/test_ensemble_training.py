"""Probabilistic forecasts end to end (issue 17): an ensemble model trained with the fair CRPS
through the Lightning CLI, `rollout --members` writing the realization dimension, reproducible
from a seed, and `evaluate` scoring it with CRPS and spread; issue 30's variant configs fitted and
forecast the same way."""

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
import yaml
from session_fixtures import tiny_args

from s2forecast.cli import main as cli
from s2forecast.evaluation.report import open_results


@pytest.fixture(scope="module")
def ensemble_checkpoint(crps_run):
    checkpoint = crps_run.checkpoint  # `fit` of tiny_args with the CRPS options, once per session
    state = torch.load(checkpoint, weights_only=True)
    assert state["global_step"] > 0 and state["hyper_parameters"]["loss"] == "crps"
    assert any(".modulation." in key for key in state["state_dict"])
    return checkpoint


def rollout(checkpoint, store, out, *extra):
    cli(["rollout", "--ckpt", str(checkpoint), "--store", str(store), "--steps", "2", "--init-times",
         "2000-01-01T00,2000-01-01T01,2000-01-01T02", "--batch-size", "2", "--out", str(out), "--no-progress",
         *extra])  # fmt: skip
    return xr.open_dataset(out)


def test_rollout_members_are_reproducible_and_scored(ensemble_checkpoint, swe_store, tmp_path):
    a = rollout(ensemble_checkpoint, swe_store, tmp_path / "a.nc", "--members", "3", "--seed", "5")
    assert a["vorticity"].dims == ("time", "prediction_timedelta", "realization", "latitude", "longitude")
    assert a.sizes["realization"] == 3 and np.isfinite(a["vorticity"].values).all()
    values = a["vorticity"].values
    assert np.abs(values[:, :, 0] - values[:, :, 1]).max() > 0  # members differ (a freshly trained modulation: little)
    again = rollout(ensemble_checkpoint, swe_store, tmp_path / "b.nc", "--members", "3", "--seed", "5")
    np.testing.assert_array_equal(again["vorticity"].values, values)
    other = rollout(ensemble_checkpoint, swe_store, tmp_path / "c.nc", "--members", "3", "--seed", "6")
    assert not np.array_equal(other["vorticity"].values, values)

    cli(["evaluate", "--forecast", str(tmp_path / "a.nc"), "--truth", str(swe_store), "--out", str(tmp_path / "m.nc"),
         "--no-plots", "--no-progress"])  # fmt: skip
    metrics = open_results(tmp_path / "m.nc")
    scores = metrics["vorticity"].sel(source="forecast", region="global")
    assert np.isfinite(scores.sel(metric="crps")).all() and (scores.sel(metric="spread") > 0).all()


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit):
        cli([str(a) for a in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert len(lines) == 1, lines
    return lines[0]


ENSEMBLE_OPTIONS = ["--model.loss", "crps", "--model.members", "2", "--model.network.noise_channels", "2"]


def test_ensemble_options_bad_values(swe_store, mse_run_1_epoch, tmp_path, capsys):
    base = tiny_args(swe_store, tmp_path, "--trainer.max_epochs", "1")
    assert "needs a stochastic network: set model.network.noise_channels" in refused(
        ["fit", *base, "--model.loss", "crps", "--model.members", "2"], capsys)  # fmt: skip
    assert "model.loss 'crps' needs model.members >= 2, got 1" in refused(
        ["fit", *base, "--model.loss", "crps", "--model.network.noise_channels", "2"], capsys)  # fmt: skip
    assert "model.loss must be one of ('mse', 'crps'), got 'mae'" in refused(["fit", *base, "--model.loss", "mae"],
                                                                             capsys)  # fmt: skip
    assert "noise_kind must be one of ('field', 'vector'), got 'gaussian'" in refused(
        ["fit", *base, *ENSEMBLE_OPTIONS, "--model.network.noise_kind", "gaussian"], capsys)  # fmt: skip
    assert not (tmp_path / "runs").exists()
    deterministic = mse_run_1_epoch.checkpoint  # a deterministic model: `fit` of tiny_args, once per session
    message = refused(["rollout", "--ckpt", deterministic, "--store", swe_store, "--steps", "1", "--init-times",
                       "2000-01-01T00", "--out", tmp_path / "f.nc", "--members", "2"], capsys)  # fmt: skip
    assert "the checkpoint's model is deterministic (no network.noise_channels)" in message
    assert not (tmp_path / "f.nc").exists()


def test_checkpoints_with_ensemble_size_resume_as_members(swe_store):
    """Hyper-parameters of before issue 26 (``ensemble_size``) build this version's module."""
    from s2forecast.training import ForecastModule, data_info
    from s2forecast.training.datamodule import SWEDataModule
    from s2forecast.training.forecast_module import current_hparams

    data = data_info(SWEDataModule(str(swe_store), train_trajectories=(0, 2), val_trajectories=None,
                                   test_trajectories=None))  # fmt: skip
    old = {"network": {"embed_dim": 8, "num_layers": 1, "noise_channels": 2}, "data": data, "loss": "crps",
           "ensemble_size": 3}  # fmt: skip
    module = ForecastModule(**current_hparams(old))
    assert module.hparams.members == 3 and "ensemble_size" not in module.hparams
    assert "ensemble_size" in old  # the checkpoint's own dict is left as it is


CONFIGS = Path(__file__).parents[2] / "configs" / "swe"
VARIANTS = {  # issue 30's noise variants on the CRPS config (whose loss options are the best variant's)
    "fgn": ["s2_neighborhood_crps_fgn.yaml"],
    "white-ar1": ["s2_neighborhood_crps_white_ar1.yaml"],
}


@pytest.mark.parametrize("configs", VARIANTS.values(), ids=VARIANTS.keys())
def test_variant_configs_fit_and_forecast(configs, swe_store, tmp_path):
    """`fit` with each variant's config on the CRPS config (tiny: width 16, 2 members, 2 epochs, the
    second with 2-step rollouts: multi-step CRPS), then a reproducible 2-member `rollout`."""
    layered = [part for name in ["s2_neighborhood_crps.yaml", *configs] for part in ("--config", str(CONFIGS / name))]
    cli(["fit", *tiny_args(swe_store, tmp_path, *layered, "--model.members", "2", "--model.network.embed_dim", "16",
                           "--model.network.num_layers", "2", "--model.rollout_every_epochs", "1",
                           "--trainer.max_epochs", "2")])  # fmt: skip
    checkpoint = next((tmp_path / "runs").rglob("last.ckpt"))
    state = torch.load(checkpoint, weights_only=True)
    hparams = state["hyper_parameters"]
    assert state["global_step"] > 0 and state["rollout"] == 2 and hparams["loss"] == "crps"
    network, model = {}, {}  # what the layered configs set, the later one winning
    for name in ["s2_neighborhood_crps.yaml", *configs]:
        section = yaml.safe_load((CONFIGS / name).read_text())["model"]
        network.update(section.pop("network", {}))
        model.update(section)
    for overridden in ("rollout_every_epochs", "members"):  # above
        model.pop(overridden)
    assert model["crps_alpha"] < 1 and model["crps_spectral_weight"] > 0  # the best variant's loss
    assert {key: hparams["network"][key] for key in network} == network
    assert {key: hparams[key] for key in model} == model
    a = rollout(checkpoint, swe_store, tmp_path / "a.nc", "--members", "2", "--seed", "3")
    b = rollout(checkpoint, swe_store, tmp_path / "b.nc", "--members", "2", "--seed", "3")
    np.testing.assert_array_equal(a["vorticity"].values, b["vorticity"].values)
    assert np.isfinite(a["vorticity"].values).all()


def test_training_noise_comes_from_the_seed_and_step_not_the_global_random_state(ensemble_checkpoint, swe_store):
    """A resumed run restarts the global random state at the seed, so noise drawn from it differed
    from the uninterrupted run's (weights 1e-3 apart after 10 steps). The noise of a step depends on
    the seed, the stage and the batch only; the global random state is neither used nor advanced."""
    from s2forecast.training import ForecastModule
    from s2forecast.training.datamodule import SWEDataModule

    module = ForecastModule.load_from_checkpoint(ensemble_checkpoint, weights_only=True)
    data = SWEDataModule(str(swe_store), train_trajectories=(0, 2), val_trajectories=None, test_trajectories=None,
                         batch_size=2)  # fmt: skip
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    module.rollout = 1

    def members(batch_idx, stage="train"):
        return module.ensemble(batch, 1, module.noise_generator(batch_idx, stage))

    torch.manual_seed(0)
    first = members(0)
    torch.rand(7)  # another global random state, the same seed
    assert torch.equal(members(0), first)
    torch.manual_seed(0)
    torch.rand(7)
    before = torch.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # self.log without a Trainer
        module.training_step(batch, 0)
    assert torch.equal(torch.get_rng_state(), before)  # the global random state neither used nor advanced
    assert not torch.equal(first[:, 0], first[:, 1])  # the members differ
    assert not torch.equal(members(0, "val"), first)  # validation draws its own
    torch.manual_seed(1)
    assert not torch.equal(members(0), first)  # another seed, other noise
