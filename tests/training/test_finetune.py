"""Fine-tuning (issue 15): a new run from a checkpoint's network weights, with new data,
statistics, schedule and even another grid (S2 models); `--model.init_from CKPT`."""

from pathlib import Path

import pytest
import torch
from session_fixtures import tiny_args

from s2forecast.cli import main as cli
from s2forecast.data import compute_stats, generate_swe
from s2forecast.models.forecaster import forecaster_weights
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.checkpoints import read_checkpoint
from s2forecast.training.datamodule import SWEDataModule

REPO = Path(__file__).parents[2]
FINETUNE = REPO / "configs" / "swe" / "s2_neighborhood_finetune.yaml"


@pytest.fixture(scope="module")
def trained(mse_run_1_epoch):
    return mse_run_1_epoch.checkpoint  # `fit` of tiny_args for one epoch, once per session


@pytest.fixture(scope="module")
def finer_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("finer") / "swe_16x32.zarr"
    generate_swe(path, 16, 32, trajectories=3, steps=4, progress=False)
    compute_stats(path)
    return path


def finer_data(store) -> SWEDataModule:
    return SWEDataModule(str(store), train_trajectories=(0, 2), val_trajectories=(2, 3), test_trajectories=None,
                         batch_size=2, num_workers=0, rollout_steps=2)  # fmt: skip


def test_init_from_starts_from_the_checkpoint_weights_on_another_grid(trained, finer_store):
    checkpoint = read_checkpoint(trained)
    network = checkpoint["hyper_parameters"]["network"]
    model = ForecastModule(network=network, data=data_info(finer_data(finer_store)), init_from=str(trained))
    theirs = forecaster_weights(checkpoint["state_dict"])
    for name, parameter in model.forecaster.named_parameters():
        assert torch.equal(parameter, theirs[name]), name
    assert model.grid.shape == (16, 32) and model.forecaster.mean.shape[0] == 3  # this run's grid and statistics
    fresh = ForecastModule(network=network, data=data_info(finer_data(finer_store)))
    assert not all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(), strict=True))


def test_finetune_config_runs_through_the_cli(trained, finer_store, tmp_path):
    args = tiny_args(finer_store, tmp_path, "--config", str(FINETUNE), "--data.init_args.store", str(finer_store),
                     "--data.init_args.train_trajectories", "[0, 2]", "--data.init_args.val_trajectories", "[2, 3]",
                     "--data.init_args.test_trajectories", "null", "--trainer.max_epochs", "1",
                     "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
                     "--model.init_from", str(trained))  # fmt: skip
    cli(["fit", *args])
    out = read_checkpoint(next((tmp_path / "runs").rglob("last.ckpt")))
    assert out["hyper_parameters"]["init_from"] == str(trained)
    assert out["hyper_parameters"]["data"]["grid"][:2] == [16, 32] and out["global_step"] > 0


def test_a_finetuning_run_resumes_without_its_starting_checkpoint(trained, finer_store, tmp_path):
    """--ckpt_path last read --model.init_from again (its weights are replaced by the checkpoint's): a
    moved starting checkpoint was 'no checkpoint file', the config's placeholder 'init_from is required'."""
    start = tmp_path / "start.ckpt"
    start.write_bytes(Path(trained).read_bytes())
    args = tiny_args(finer_store, tmp_path, "--config", str(FINETUNE), "--data.init_args.store", str(finer_store),
                     "--data.init_args.train_trajectories", "[0, 2]", "--data.init_args.val_trajectories", "[2, 3]",
                     "--data.init_args.test_trajectories", "null", "--trainer.max_epochs", "1",
                     "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"))  # fmt: skip
    cli(["fit", *args, "--model.init_from", str(start)])
    start.unlink()  # the starting checkpoint cleaned up
    cli(["fit", *args, "--model.init_from", str(start), "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert read_checkpoint(max((tmp_path / "runs").rglob("last.ckpt"), key=lambda p: p.stat().st_mtime))["epoch"] == 1
    # without --model.init_from the config's "required" placeholder stands: read no more on a resume either
    cli(["validate", *args, "--ckpt_path", "last"])


def test_finetune_config_without_its_checkpoint_is_one_line(finer_store, tmp_path, capsys):
    """The overlay said init_from was required, but without it the run trained from scratch, silently
    (a review found it)."""
    args = tiny_args(finer_store, tmp_path, "--config", str(FINETUNE), "--data.init_args.store", str(finer_store),
                     "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"))  # fmt: skip
    with pytest.raises(SystemExit) as exit_status:
        cli(["fit", *args])
    assert exit_status.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert err == [
        "s2forecast fit: error: model.init_from is required by this config (fine-tuning): pass --model.init_from "
        "CKPT, a checkpoint of the model to fine-tune (without it this run would train from scratch)"
    ]
    assert not (tmp_path / "runs").exists()


def test_init_from_another_model_is_one_line(trained, finer_store, tmp_path, capsys):
    args = tiny_args(finer_store, tmp_path, "--data.init_args.train_trajectories", "[0, 2]",
                     "--data.init_args.val_trajectories", "[2, 3]", "--model.network.embed_dim", "12",
                     "--model.init_from", str(trained))  # fmt: skip
    with pytest.raises(SystemExit):
        cli(["fit", *args])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert len(err) == 1 and f"--model.init_from {trained} has network option embed_dim=" in err[0], err
    assert "this model 12 (1 option(s) differ: ['embed_dim']); fine-tuning needs the same architecture" in err[0]
    assert not (tmp_path / "runs").exists()
    # options that keep every weight's shape (or drop whole layers) loaded into another network silently
    for option, value in (("num_layers", "1"), ("num_heads", "2"), ("activation", "relu"), ("attention", "global")):
        with pytest.raises(SystemExit):
            cli(["fit", *tiny_args(finer_store, tmp_path, "--data.init_args.train_trajectories", "[0, 2]",
                                   "--data.init_args.val_trajectories", "[2, 3]", f"--model.network.{option}", value,
                                   "--model.init_from", str(trained))])  # fmt: skip
        assert f"network option {option}=" in capsys.readouterr().err, option
    assert not (tmp_path / "runs").exists()
    with pytest.raises(SystemExit):
        cli(["fit", *tiny_args(finer_store, tmp_path, "--model.init_from", str(tmp_path / "nothing.ckpt"))])
    assert "no checkpoint file at" in capsys.readouterr().err


def test_init_from_a_checkpoint_of_other_channels_of_the_same_number_is_one_line(trained, tmp_path, capsys):
    """The same variables in another order (or others of the same number) give weights of the same shapes:
    they loaded onto the wrong fields in silence (geopotential height's encoder weights read divergence)."""
    store = read_checkpoint(trained)["hyper_parameters"]["data"]["store"]
    reordered = "[divergence, vorticity, geopotential_height]"
    args = tiny_args(Path(store), tmp_path, "--data.init_args.variables", reordered, "--model.init_from", str(trained))
    with pytest.raises(SystemExit):
        cli(["fit", *args])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert err == [
        f"s2forecast fit: error: --model.init_from {trained} was trained with channels [geopotential_height, "
        "vorticity, divergence], this run has [divergence, vorticity, geopotential_height]: its weights are per "
        "channel, in order; fine-tuning needs the same channels in the same order (e.g. data.init_args.variables, "
        "levels)"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_grid_bound_position_embedding_is_not_fine_tuned_on_another_grid():
    """RoPE has no grid-shaped weight, so the shape check let its checkpoint onto another grid, where
    its offsets stand for other distances (rollout --other-grid refuses it)."""
    from s2forecast.geometry import Grid
    from s2forecast.models.data_spec import DataSpec
    from s2forecast.models.forecaster import Forecaster
    from s2forecast.training.forecast_module import _check_same_network

    def spec(grid):
        return DataSpec(channels=("vorticity",), static_channels=(), forcing_channels=(), grid=grid, history=1,
                        step_hours=1.0, rollout_steps=1, mean=(0.0,), std=(1.0,), tendency_std=(1.0,))  # fmt: skip

    network = {"embed_dim": 8, "num_layers": 1, "position_embedding": "rope"}
    finer = Forecaster("spherical", network, spec(Grid(16, 32)))
    hparams = {"architecture": "spherical", "network": network, "data": spec(Grid(8, 16)).to_dict()}
    with pytest.raises(ValueError, match=r"position embedding 'rope' is tied to the training grid .*8.*16.*, and this "
                       r"run's grid is .*16.*32.*: fine-tune it on its own grid"):  # fmt: skip
        _check_same_network(finer, hparams, "rope.ckpt")
    _check_same_network(finer, {**hparams, "data": spec(Grid(16, 32)).to_dict()}, "rope.ckpt")  # its own grid
    # SpRePE's learnable mask has a weight per latent point: its load failed on the 'same' options (a review)
    learnable = {**network, "position_embedding": "sprepe", "position_embedding_options": {"mask": "learnable"}}
    with pytest.raises(ValueError, match=r"position embedding 'sprepe' with mask 'learnable' \(a weight per latent "
                       r"point\) is tied to the training grid .*8.*16.*, and this run's grid is .*16.*32"):  # fmt: skip
        _check_same_network(Forecaster("spherical", learnable, spec(Grid(16, 32))),
                            {**hparams, "network": learnable}, "sprepe.ckpt")  # fmt: skip
