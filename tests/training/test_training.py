"""Models, ForecastModule and the `s2forecast fit | validate | test` command on a tiny SWE store."""

import shutil
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from session_fixtures import tiny_args

from s2forecast.cli import main as cli
from s2forecast.geometry import Grid
from s2forecast.models import PlanarTransformer, SphericalTransformer, build_network
from s2forecast.models.data_spec import DataSpec
from s2forecast.models.forecaster import Forecaster
from s2forecast.models.planar_transformer import window_mask
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.cli import run as lightning
from s2forecast.training.datamodule import SWEDataModule
from s2forecast.user_errors import UserError

REPO = Path(__file__).parents[2]
CONFIG = REPO / "configs" / "swe" / "s2_neighborhood.yaml"


# --- networks ------------------------------------------------------------------------------------
def test_paper_swe_model_size():
    model = SphericalTransformer(Grid(128, 256), 3, 3, embed_dim=128, num_layers=4)
    assert 0.50e6 < sum(p.numel() for p in model.parameters()) < 0.56e6  # the paper's ~0.53 M


@pytest.mark.parametrize("kind", ["equiangular", "legendre-gauss", "equiangular-midpoint"])
@pytest.mark.parametrize("attention", ["neighborhood", "global"])
def test_spherical_transformer_on_every_grid_kind(kind, attention):
    grid = Grid(12, 24, kind)
    model = SphericalTransformer(grid, 4, 3, embed_dim=16, num_layers=2, attention=attention, num_heads=2)
    x = torch.randn(2, 4, *grid.shape, requires_grad=True)
    out = model(x)
    assert out.shape == (2, 3, *grid.shape)
    out.square().mean().backward()
    assert torch.isfinite(x.grad).all()


def test_attention_pattern_and_other_resolution():
    grid = Grid(16, 32)
    model = SphericalTransformer(grid, 3, 3, embed_dim=16, num_layers=4, global_every=2, position_embedding="sprepe",
                                 num_heads=2)  # fmt: skip
    assert model.pattern == ["neighborhood", "global", "neighborhood", "global"]
    finer = model.on_grid(Grid(32, 64, "legendre-gauss"))
    assert finer(torch.randn(1, 3, 32, 64)).shape == (1, 3, 32, 64)
    assert torch.equal(finer.blocks[0].mlp.fc1.weight, model.blocks[0].mlp.fc1.weight)
    with pytest.raises(ValueError, match="tied to the training grid"):
        SphericalTransformer(grid, 3, 3, embed_dim=16, num_layers=1, position_embedding="ape").on_grid(Grid(8, 16))


def test_another_resolution_keeps_the_physical_radii():
    """on_grid recomputed theta and the DISCO cutoffs from the new grid (half of each on twice the rows):
    another function. With the training grid's radii, the outputs on 17x32 and on 33x64 (at the points
    they share) of a smooth field are 3.4 % apart, 13 % before (these weights)."""
    torch.manual_seed(0)
    coarse = SphericalTransformer(Grid(17, 32), 3, 3, embed_dim=16, num_layers=2).double()
    for parameter in coarse.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    fine = coarse.on_grid(Grid(33, 64)).double()
    assert (fine.theta, fine.encoder.theta_cutoff, fine.decoder.theta_cutoff) == (
        coarse.theta, coarse.encoder.theta_cutoff, coarse.decoder.theta_cutoff
    )  # fmt: skip

    def smooth(grid):
        lat, lon = torch.deg2rad(grid.lats_deg)[:, None], torch.deg2rad(grid.lons_deg)[None, :]
        waves = torch.sin(lat) + 0.3 * torch.cos(lat) ** 2 * torch.cos(2 * lon)
        fields = [torch.cos(lat) * torch.sin(lon), waves, torch.cos(lat) * torch.cos(lon + 0.5)]
        return torch.stack(fields)[None].double()

    with torch.no_grad():
        a, b = coarse(smooth(Grid(17, 32))), fine(smooth(Grid(33, 64)))[..., ::2, ::2]
    assert (a - b).norm() / a.norm() < 0.08


def test_another_resolution_keeps_alibis_bias_per_radian():
    """ALiBi's distance unit is the latent grid's spacing: on a grid of twice the rows the same weights
    biased each radian twice as much (another operator, with the model accepted as grid-free)."""
    from s2forecast.nn.position_embedding import GeodesicALiBi

    model = SphericalTransformer(Grid(16, 32), 3, 3, embed_dim=8, num_layers=1, num_heads=2, attention="global",
                                 position_embedding="alibi")  # fmt: skip
    finer = model.on_grid(Grid(32, 64))
    (coarse_bias,), (fine_bias,) = ([m for m in n.modules() if isinstance(m, GeodesicALiBi)] for n in (model, finer))
    assert fine_bias.grid_kv.shape == (16, 32) and coarse_bias.grid_kv.shape == (8, 16)
    assert torch.equal(fine_bias.slopes, coarse_bias.slopes)
    assert fine_bias.distance_unit_rad == Grid(8, 16).lat_spacing
    with pytest.raises(ValueError, match=r"ALiBi's distance_unit_rad must be in \(0, pi\] radians, got 0"):
        GeodesicALiBi(2, Grid(8, 16), distance_unit_rad=0)


def test_planar_transformer():
    grid = Grid(15, 30)
    for attention in ["window", "global"]:
        for embedding in ["ape", "sprepe", "rope", "none"]:
            model = PlanarTransformer(grid, 3, 2, embed_dim=16, num_layers=1, num_heads=2, attention=attention,
                                      position_embedding=embedding)  # fmt: skip
            assert model(torch.randn(1, 3, 15, 30)).shape == (1, 2, 15, 30)
    with pytest.raises(ValueError, match="built for"):
        model(torch.randn(1, 3, 16, 30))
    mask = window_mask(4, 5, 1)
    assert mask[0].view(4, 5).sum() == 4 and mask[7].view(4, 5).sum() == 9  # corner 2x2, interior 3x3
    assert not mask[0, 4]  # no longitude wrap


def test_build_network_errors():
    with pytest.raises(ValueError, match="architecture must be one of"):
        build_network("unet", Grid(8, 16), 3, 3)
    with pytest.raises(ValueError, match=r"\['depth'\] are not options"):
        build_network("spherical", Grid(8, 16), 3, 3, depth=4)


# --- the LightningModule ----------------------------------------------------------------------------
def test_loss_weights_and_initial_persistence(swe_store):
    module = SWEDataModule(str(swe_store), rollout_steps=2, train_trajectories=(0, 2), val_trajectories=None,
                           test_trajectories=None)  # fmt: skip
    info = data_info(module)
    info["channels"] = ["temperature/500", "temperature/1000", "geopotential_height"]
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=info)
    weights = torch.tensor([0.5, 1.0, 1.0])
    assert torch.allclose(model.channel_weights, weights / weights.mean())
    assert model.quadrature.mean().item() == pytest.approx(1.0)

    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(module))
    for p in model.net.decoder.parameters():
        torch.nn.init.zeros_(p)  # zero tendency: a residual model is then persistence
    batch = next(iter(module.train_dataloader()))
    prediction = model(batch, 2)
    assert torch.allclose(prediction[:, 0], batch.inputs[:, -1]) and torch.allclose(
        prediction[:, 1], batch.inputs[:, -1]
    )


def test_rollout_schedule():
    info = {"channels": ["a"], "static_channels": [], "forcing_channels": [], "grid": [8, 16, "equiangular"]}
    info |= {"history": 1, "step_hours": 1.0, "rollout_steps": 3, "mean": [0.0], "std": [1.0], "tendency_std": [1.0]}
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=info, rollout_start=1,
                           rollout_every_epochs=2, rollout_max=3)  # fmt: skip
    seen = []
    for epoch in range(7):
        model.trainer = None
        type(model).current_epoch = property(lambda self, e=epoch: e)
        model.on_train_epoch_start()
        seen.append(model.rollout)
    del type(model).current_epoch
    assert seen == [1, 1, 2, 2, 3, 3, 3]
    with pytest.raises(ValueError, match="model.rollout_start <= model.rollout_max"):
        ForecastModule(data=info, rollout_start=3, rollout_max=2)


THREE = {"channels": ["geopotential_height", "temperature/500", "temperature/850"], "static_channels": [],
         "forcing_channels": [], "grid": [8, 16, "equiangular"], "history": 1, "step_hours": 1.0, "rollout_steps": 1,
         "mean": [0.0] * 3, "std": [1.0] * 3, "tendency_std": [1.0] * 3}  # fmt: skip
KNOWN = "its variables are ['geopotential_height', 'temperature']"


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"geopotential_hieght": 10.0}, f"model.variable_weights names ['geopotential_hieght'], not variables of the "
         f"data; {KNOWN}"),  # a misspelt name was ignored
        ({"temperature/500": 2.0}, "model.variable_weights names ['temperature/500']"),  # a channel, not a variable
        ({"temperature": -3.0}, "model.variable_weights must be finite numbers >= 0, got {'temperature': -3.0}"),
        ({"temperature": float("nan")}, "model.variable_weights must be finite numbers >= 0, got {'temperature': nan}"),
        ({"temperature": float("inf")}, "must be finite numbers >= 0, got {'temperature': inf}"),
        ({"temperature": "2"}, "must be finite numbers >= 0, got {'temperature': '2'}"),
        ({"geopotential_height": 0.0, "temperature": 0}, "model.variable_weights gives every variable weight 0: the "
         "loss would be 0 / 0; give at least one variable a weight > 0 (unlisted variables weigh 1)"),  # NaN weights
    ],
)  # fmt: skip
def test_variable_weights_bad_values(weights, message):
    with pytest.raises(UserError) as error:
        ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=THREE, variable_weights=weights)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_variable_weights_good_values():
    """Zero for some variables, pressure weighting on top; the weights' mean is 1."""
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=THREE,
                           variable_weights={"geopotential_height": 0.0, "temperature": 3})  # fmt: skip
    weights = torch.tensor([0.0, 3 * 0.5, 3 * 0.85])
    torch.testing.assert_close(model.channel_weights, weights / weights.mean())


def test_fit_refuses_a_misspelt_variable_weight_in_one_line(swe_store, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path, "--model.variable_weights", '{"vorticty": 2}')])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "Traceback" not in err, err[-2000:]
    assert err.splitlines()[-1] == (
        "s2forecast fit: error: model.variable_weights names ['vorticty'], not variables of the data; its variables "
        "are ['geopotential_height', 'vorticity', 'divergence']"
    )
    assert list(tmp_path.iterdir()) == []  # refused before the run's directory is made


# --- the command --------------------------------------------------------------------------------------
def last_checkpoint(tmp_path) -> Path:
    found = sorted((tmp_path / "runs").rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
    assert found, list((tmp_path / "runs").rglob("*"))
    return found[-1]


def test_fit_checkpoints_and_safe_loading(mse_run_2_epochs):
    tmp_path = mse_run_2_epochs.root  # `fit` of tiny_args, once per session
    checkpoint = torch.load(last_checkpoint(tmp_path), weights_only=True)  # safe loading works
    assert checkpoint["global_step"] == 10 and checkpoint["rollout"] == 2  # 5 batches x 2 epochs
    assert any(p.name.startswith("best-") for p in (tmp_path / "runs").rglob("*.ckpt"))
    metrics = (next((tmp_path / "runs").rglob("metrics.csv"))).read_text()
    assert "val/rmse/geopotential_height/step2" in metrics and "train/loss" in metrics
    model = ForecastModule.load_from_checkpoint(last_checkpoint(tmp_path), weights_only=True)
    assert model.channels == ["geopotential_height", "vorticity", "divergence"]


def test_resume_is_exact(swe_store, mse_run_2_epochs, tmp_path):
    """A run that crashes after epoch 1 and is resumed with `--ckpt_path last` ends exactly where
    an uninterrupted run does (weights, optimizer, scheduler, rollout schedule, step counter). The
    resumed run starts at step 5 (a review found that a fit that ignored the checkpoint, retraining
    from step 0, passed the test)."""
    from weight_probe import Crash, FirstStep

    straight, split = mse_run_2_epochs.root, tmp_path / "split"  # straight: `fit` of tiny_args, once per session
    with pytest.raises(SystemExit) as exit_:  # a bug, for the command: its traceback, a report request, status 1
        cli(["fit", *tiny_args(swe_store, split, "--trainer.callbacks+=weight_probe.CrashAtEpoch")])
    assert exit_.value.code == 1 and isinstance(exit_.value.__context__, Crash)
    first = last_checkpoint(split)
    assert torch.load(first, weights_only=True)["global_step"] == 5
    FirstStep.steps = []
    cli(["fit", *tiny_args(swe_store, split, "--trainer.callbacks+=weight_probe.FirstStep"), "--ckpt_path", str(first)])
    assert FirstStep.steps == [5]
    a = torch.load(last_checkpoint(straight), weights_only=True)
    b = torch.load(last_checkpoint(split), weights_only=True)
    assert a["global_step"] == b["global_step"] == 10 and a["rollout"] == b["rollout"] == 2
    for key in ("state_dict", "optimizer_states", "lr_schedulers"):
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)  # bit for bit


def test_print_config_reproduces_a_run(swe_store, mse_run_1_epoch, tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli(["fit", *tiny_args(swe_store, tmp_path), "--print_config"])
    printed = capsys.readouterr().out
    config = yaml.safe_load(printed)
    assert config["model"]["network"]["embed_dim"] == 16 and config["trainer"]["max_epochs"] == 2
    # optimizer and lr_scheduler: null, as in every config.yaml written before they stopped being options
    assert config["optimizer"] is None and config["lr_scheduler"] is None
    path = tmp_path / "printed.yaml"
    path.write_text(printed)
    # the printed config alone builds the same run (the checkpoint's model: same hyper-parameters)
    cli(["validate", "--config", str(path), "--ckpt_path", str(mse_run_1_epoch.checkpoint)])


def test_print_config_refuses_an_unknown_key_as_the_run_does(tmp_path, capsys):
    """With --print_config the second, lenient parse's error ("Group 'model' does not accept option
    'lrr'") replaced the run's (file, key and "did you mean"): a review found it."""
    overlay = tmp_path / "typo.yaml"
    overlay.write_text("model: {lrr: 0.1}\n")
    messages = []
    for extra in ([], ["--print_config"]):
        with pytest.raises(SystemExit) as exit_status:
            cli(["fit", "--config", str(CONFIG), "--config", str(overlay), *extra])
        assert exit_status.value.code == 2
        messages.append(capsys.readouterr().err.strip().splitlines())
    assert (
        messages[0]
        == messages[1]
        == [f"s2forecast fit: error: unknown key 'model.lrr' in {overlay}; did you mean 'model.lr'?"]
    )


@pytest.mark.parametrize(
    "config", sorted(p.relative_to(REPO) for p in (REPO / "configs").rglob("*.yaml") if "logger" not in p.name)
)
def test_shipped_configs_parse(config, capsys):
    """Every shipped config parses; an overlay without a data class (e.g. the CRPS one) on the
    SWE base config it is meant to be layered on."""
    overlay = "class_path" not in (yaml.safe_load((REPO / config).read_text()).get("data") or {})
    base = ["--config", str(CONFIG)] if overlay else []
    if config.name.startswith("s2_neighborhood_crps_"):  # issue 30's variants go on the CRPS overlay
        base += ["--config", str(REPO / "configs" / "swe" / "s2_neighborhood_crps.yaml")]
    with pytest.raises(SystemExit):
        cli(["fit", *base, "--config", str(REPO / config), "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["data"]["class_path"].startswith("s2forecast.training.datamodule.")


@pytest.mark.slow  # wandb's offline run: seconds of start-up
def test_wandb_logger_offline(swe_store, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb = ["--config", str(REPO / "configs" / "logger_wandb.yaml"), "--trainer.max_epochs", "1"]
    args = tiny_args(swe_store, tmp_path, *wandb, "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"))
    cli(["fit", *args])
    runs = list((tmp_path / "runs").rglob("offline-run-*"))
    assert runs, list((tmp_path / "runs").rglob("*"))[:20]


@pytest.mark.parametrize("window", ["null", "4"])
def test_fit_with_ball_sparse_attention_layers(swe_store, tmp_path, window):
    """The BSA config's layer pattern trains end to end (tiny balls for the tiny latent grid),
    with the paper's compression and with multi-level compression."""
    config = REPO / "configs" / "swe" / "s2_neighborhood_ball.yaml"
    args = tiny_args(swe_store, tmp_path, "--trainer.max_epochs", "1")
    args[args.index(str(CONFIG))] = str(config)
    options = f'{{"ball_size": 16, "block_size": 4, "top_k": 1, "group_size": 4, "compression_window": {window}}}'
    cli(["fit", *args, "--model.network.ball_options", options, "--model.network.num_heads", "2",
         "--model.network.attention", "[neighborhood, ball]"])  # fmt: skip
    checkpoint = torch.load(last_checkpoint(tmp_path), weights_only=True)
    assert any("gate_proj" in key for key in checkpoint["state_dict"])


def test_ckpt_path_last_resumes_the_newest_run(swe_store, mse_run_1_epoch, tmp_path, capsys):
    shutil.copytree(mse_run_1_epoch.root / "runs", tmp_path / "runs")  # a 1-epoch run of tiny_args, copied
    resumed_from = last_checkpoint(tmp_path)
    cli(["fit", *tiny_args(swe_store, tmp_path), "--ckpt_path", "last"])  # a new logger version
    assert torch.load(last_checkpoint(tmp_path), weights_only=True)["global_step"] == 10
    printed = capsys.readouterr().out.splitlines()  # fit says where its checkpoints went (issue 28)
    assert f"last checkpoint: {last_checkpoint(tmp_path)}" in printed
    best = Path(next(line for line in printed if line.startswith("best checkpoint val/loss ")).split(": ", 1)[1])
    assert best.is_file() and best.parent == last_checkpoint(tmp_path).parent
    newest = max((tmp_path / "runs").rglob("metrics.csv"), key=lambda p: p.stat().st_mtime)
    import csv

    epochs = {row["epoch"] for row in csv.DictReader(newest.open()) if row["epoch"]}
    assert epochs == {"1"}  # the resumed run trained the second epoch only
    # its config.yaml names the checkpoint it resumed from: "last" would make a refit from it resume
    # from this run's own last checkpoint (a review found it)
    recorded = yaml.safe_load((newest.parent / "config.yaml").read_text())["ckpt_path"]
    assert Path(recorded) == resumed_from, recorded


def test_a_failed_fit_leaves_no_log_directory(swe_store, tmp_path):
    """A fit that fails before any result removes the version_N it made (config.yaml and hparams.yaml
    only), so the next run is version_N again; what was there before stays."""
    earlier = tmp_path / "runs" / "s2_neighborhood" / "version_0"
    earlier.mkdir(parents=True)
    (earlier / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="model.rollout_max is 3 steps but the data.s rollout_steps is 2"):
        lightning(["fit", *tiny_args(swe_store, tmp_path, "--model.rollout_start", "3", "--model.rollout_max", "3")])
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["version_0"] and (earlier / "notes.txt").is_file()
    shutil.rmtree(tmp_path / "runs")
    with pytest.raises(
        UserError, match=r"trajectories \[5, 6\) are not in"
    ):  # the DataModule's setup: an empty version_0
        lightning(["fit", *tiny_args(swe_store, tmp_path, "--data.init_args.val_trajectories", "[5, 6]")])
    assert not (tmp_path / "runs").exists()


def test_layered_configs_merge_the_network(swe_store, tmp_path):
    """The README's layering, `--config base --config s2_neighborhood_crps.yaml`, on a base whose
    network is not the default one: the CRPS overlay adds noise_channels to the base's network."""
    base = yaml.safe_load(CONFIG.read_text())
    base["model"]["network"].update(embed_dim=16, num_layers=2)
    base["data"]["init_args"].update(store=str(swe_store), train_trajectories=[0, 2], val_trajectories=[2, 3],
                                     test_trajectories=[2, 3], num_workers=0)  # fmt: skip
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    overlay = REPO / "configs" / "swe" / "s2_neighborhood_crps.yaml"
    layers = ["--config", str(tmp_path / "base.yaml"), "--config", str(overlay)]
    built = lightning([*layers, "--trainer.logger.init_args.save_dir", str(tmp_path)], execute=False)
    expected = {**base["model"]["network"], **yaml.safe_load(overlay.read_text())["model"]["network"]}
    assert built.model.hparams.network == expected
    wanted = Forecaster("spherical", expected, DataSpec.from_dict(built.model.hparams.data))
    assert sum(p.numel() for p in built.model.net.parameters()) == sum(p.numel() for p in wanted.net.parameters())


@pytest.mark.parametrize("limit", [["--trainer.max_steps", "0"], ["--trainer.max_epochs", "0"]])
def test_a_fit_of_no_step_says_it_wrote_no_checkpoint(swe_store, tmp_path, capsys, limit):
    """It warned of no best checkpoint and said "the last checkpoint holds the final weights":
    there was none."""
    with pytest.warns(UserWarning, match="fit trained no step, so it wrote no checkpoint") as caught:
        lightning(["fit", *tiny_args(swe_store, tmp_path, *limit)])
    assert not [w for w in caught if "no best checkpoint" in str(w.message) or "warmup_steps" in str(w.message)]
    assert "checkpoint:" not in capsys.readouterr().out and not list(tmp_path.rglob("*.ckpt"))


def test_a_rollout_max_never_reached_is_said(swe_store, tmp_path):
    """rollout_max 2 without rollout_every_epochs trained one step throughout, without a word."""
    args = tiny_args(swe_store, tmp_path, "--model.rollout_every_epochs", "0", "--trainer.max_epochs", "1")
    with pytest.warns(UserWarning, match="model.rollout_max 2 is never reached: model.rollout_every_epochs is 0"):
        lightning(["fit", *args])


def test_an_option_inside_a_network_option_overrides_only_itself(swe_store, tmp_path):
    """``--model.network.ball_options.top_k 1`` changes top_k and keeps the config's other ball
    options (jsonargparse alone replaced the whole ball_options with {top_k: '1'}, a string)."""
    ball = REPO / "configs" / "swe" / "s2_neighborhood_ball.yaml"
    options = yaml.safe_load(ball.read_text())["model"]["network"]["ball_options"]
    nested = ["--model.network.ball_options.ball_size", "16", "--model.network.ball_options.top_k=1"]
    args = tiny_args(swe_store, tmp_path, "--model.network.attention", "[neighborhood, ball]", *nested)
    args[1] = str(ball)  # tiny_args' --config
    built = lightning(args, execute=False)
    assert built.model.hparams.network["ball_options"] == {**options, "ball_size": 16, "top_k": 1}
    ball_layers = [block.attention for block in built.model.net.blocks if hasattr(block.attention, "top_k")]
    assert ball_layers and all(layer.top_k == 1 for layer in ball_layers)


def test_validate_with_the_ema_callback_of_a_run_config_says_nothing_of_it(swe_store, mse_run_1_epoch, tmp_path):
    """The ERA5 configs hold EMAWeightAveraging: validate/test printed Lightning's advice to remove
    it (a site-packages warning line) although the config is fit's too."""
    with warnings.catch_warnings(record=True) as caught:
        cli(["validate", *tiny_args(swe_store, tmp_path), "--ckpt_path", str(last_checkpoint(mse_run_1_epoch.root)),
             "--trainer.callbacks+=s2forecast.training.callbacks.EMAWeightAveraging"])  # fmt: skip
    assert not [w for w in caught if "WeightAveraging" in str(w.message)]


@pytest.mark.parametrize(("limit", "one_batch"), [("1", True), ("1.0", False)])
def test_a_limit_of_1_batch_is_one_batch(swe_store, tmp_path, limit, one_batch):
    """Lightning types limit_train_batches float first: `1` (one batch, as its docs say) was parsed as 1.0,
    every batch (a review's one-batch fit trained 24 steps)."""
    built = lightning(["fit", *tiny_args(swe_store, tmp_path, "--trainer.limit_train_batches", limit,
                                         "--trainer.limit_val_batches", "1")])  # fmt: skip
    assert type(built.trainer.limit_train_batches) is (int if one_batch else float)
    per_epoch = built.trainer.num_training_batches
    assert per_epoch == 1 if one_batch else per_epoch > 1
    assert built.trainer.global_step == 2 * per_epoch  # two epochs


TORCHRUN = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
SRUN = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": "0",
        "SLURM_JOB_NAME": "train"}  # fmt: skip


@pytest.mark.parametrize(("launcher", "fix"), [
    (TORCHRUN, "--trainer.devices 2 --trainer.num_nodes 1"),
    ({**TORCHRUN, "LOCAL_WORLD_SIZE": "1"}, "--trainer.devices 1 --trainer.num_nodes 2"),  # two nodes of one
    (SRUN, "--trainer.devices 2 --trainer.num_nodes 1"),
    ({**SRUN, "SLURM_STEP_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "1"}, "--trainer.devices 1 --trainer.num_nodes 2"),
])  # fmt: skip
def test_processes_that_the_trainer_does_not_use_are_refused(swe_store, tmp_path, monkeypatch, launcher, fix):
    """torchrun --nproc-per-node 2 with trainer.devices left at 1: each process trained the whole
    split alone, both writing into runs/ (a review found it); the line gives the numbers to pass."""
    for name, value in launcher.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match=rf"started 2 processes but the trainer runs 1 .*pass {fix} "):
        lightning(["fit", *tiny_args(swe_store, tmp_path)])
    assert not (tmp_path / "runs").exists()


def test_an_interactive_srun_shell_is_one_process(swe_store, tmp_path, monkeypatch):
    """Inside `srun -n 4 --pty bash` one process runs: Lightning ignores SLURM there, and the check of
    the processes only warns (it refused such a fit: a review found it), since `srun -n 4 s2forecast fit`
    in a salloc session named interactive looks the same and trains 4 times."""
    for name, value in {**SRUN, "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4", "SLURM_JOB_NAME": "bash"}.items():
        monkeypatch.setenv(name, value)
    with pytest.warns(UserWarning, match=r"has 4 tasks but its job name 'bash' makes Lightning ignore SLURM: if srun "
                      r"started this command 4 times, each trains on its own"):  # fmt: skip
        lightning(["fit", *tiny_args(swe_store, tmp_path, "--trainer.max_steps", "1", "--trainer.limit_val_batches",
                                     "0")])  # fmt: skip
    assert list((tmp_path / "runs").rglob("last.ckpt"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["validate"], r"validate scores a checkpoint: pass --ckpt_path FILE"),
        (["test"], r"test scores a checkpoint: pass --ckpt_path FILE"),
        (["validate", "--ckpt_path", "best"], r"--ckpt_path best is Lightning's value for a checkpoint of the same"),
        (["fit", "--ckpt_path", "registry:m:latest"], r"--ckpt_path registry:m:latest is Lightning's value"),
        (["fit", "--ckpt_path", "REGISTRY"], r"--ckpt_path REGISTRY is Lightning's value"),
        (["test", "--ckpt_path", "registry/last.ckpt"], r"no checkpoint file at registry/last.ckpt"),  # a path
    ],
)
def test_validate_and_test_need_a_checkpoint_they_can_read(swe_store, tmp_path, argv, message):
    """validate without --ckpt_path scored the untrained model as built, exit 0 (a review found it);
    'best' and the model registry are Lightning's values for its Python API, useless to a new process."""
    with pytest.raises((UserError, FileNotFoundError), match=message):  # a missing file: FileNotFoundError
        lightning([argv[0], *tiny_args(swe_store, tmp_path), *argv[1:]])
    assert not (tmp_path / "runs").exists()
