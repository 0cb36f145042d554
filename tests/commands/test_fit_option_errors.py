"""Issue 29: network and rollout options the model cannot use end `s2forecast fit` with one line
naming the option (they were tracebacks: TypeError, ZeroDivisionError, or a failure at the first
training step), before any training step."""

from pathlib import Path

import pytest
from session_fixtures import tiny_args

from s2forecast.cli import main

CASES = {
    "embed_dim sixteen": (["--model.network.embed_dim", "sixteen"], "network option embed_dim", "'sixteen'"),
    "embed_dim -16": (["--model.network.embed_dim", "-16"], "network option embed_dim must be >= 1", "-16"),
    "num_heads 0": (["--model.network.num_heads", "0"], "network option num_heads must be >= 1", "got 0"),
    "num_heads 3": (["--model.network.num_heads", "3"], "embed_dim=16 is not divisible by num_heads=3", ""),
    # an option inside a network option (merged into the config's mapping, its value read as YAML)
    "ball_options.top_k abc": (
        ["--model.network.attention", "[neighborhood, ball]", "--model.network.ball_options.top_k", "abc"],
        "network option ball_options.top_k must be an integer",
        "'abc'",
    ),
    "position_embedding_options.ratio abc": (
        ["--model.network.position_embedding", "sprepe", "--model.network.position_embedding_options.ratio=abc"],
        "network option position_embedding_options.ratio must be a number",
        "'abc'",
    ),
    "ball_options.top_k [1,": (["--model.network.ball_options.top_k", "[1,"], "is not a YAML value", "'[1,'"),
    "ball_options.top_k without value": (
        ["--model.network.ball_options.top_k"],
        "--model.network.ball_options.top_k needs a value",
        "",
    ),
    "ball_options.top_k without value before an option": (  # took "--trainer.max_epochs" as its value
        ["--model.network.ball_options.top_k", "--trainer.max_epochs", "1"],
        "--model.network.ball_options.top_k needs a value",
        "",
    ),
    "history 0": (["--data.init_args.history", "0"], "data.init_args.history must be an integer >= 1", "got 0"),
    "step_hours 0": (["--data.init_args.step_hours", "0"], "data.init_args.step_hours must be a positive", "got 0"),
    "EMA decay 1.5": (
        ["--trainer.callbacks+=s2forecast.training.callbacks.EMAWeightAveraging", "--trainer.callbacks.decay", "1.5"],
        "EMAWeightAveraging decay must be in (0, 1)",
        "got 1.5",
    ),
    "rollout_every_epochs -1": (
        ["--model.rollout_every_epochs", "-1"],
        "model.rollout_every_epochs must be >= 0",
        "got -1",
    ),
    "precision 64-true": (  # Lightning's double plugin failed on the frozen Batch: "internal error"
        ["--trainer.precision", "64-true"],
        "trainer.precision 64-true is not supported (training or scoring)",
        "use 32-true",
    ),
    "precision 16 on a CPU": (["--trainer.precision", "16"], "trainer.precision 16 needs a GPU", "use bf16-mixed"),
    "two ModelCheckpoints of the same settings": (  # Lightning's RuntimeError: a traceback, "internal error"
        [
            "--trainer.callbacks+=ModelCheckpoint",
            "--trainer.callbacks.every_n_train_steps=1",
            "--trainer.callbacks+=ModelCheckpoint",
            "--trainer.callbacks.every_n_train_steps=1",
        ],
        "trainer.callbacks: two ModelCheckpoint callbacks with the same settings",
        "or keep one",
    ),
    "precision bf16-true": (  # the half plugin failed on it too
        ["--trainer.precision", "bf16-true"],
        "trainer.precision bf16-true is not supported (training or scoring)",
        "use 32-true",
    ),
    "validation inside an accumulated step": (  # a resume from its checkpoint lost the step's first gradients
        ["--trainer.accumulate_grad_batches", "2", "--trainer.val_check_interval", "3"],
        "trainer.val_check_interval 3 is not a multiple of trainer.accumulate_grad_batches 2",
        "use a multiple of 2",
    ),
    "validation at a fraction inside an accumulated step": (  # the same, silent (a review)
        ["--trainer.accumulate_grad_batches", "2", "--trainer.val_check_interval", "0.6"],
        "trainer.val_check_interval 0.6 validates after batch 3 of an epoch's 5, inside an optimizer step of "
        "trainer.accumulate_grad_batches 2",
        "use an integer val_check_interval, a multiple of 2",
    ),
    "max_epochs -1 without max_steps": (  # OverflowError (int of inf steps): "internal error"
        ["--trainer.max_epochs", "-1", "--trainer.max_steps", "-1"],
        "trainer.max_epochs -1 without trainer.max_steps trains until stopped",
        "set trainer.max_steps",
    ),
    "rollout_steps 0": (["--data.init_args.rollout_steps", "0"], "rollout_steps must be an integer >= 1", "got 0"),
    "an abbreviated option": (  # taken for --trainer.max_epochs in silence (the other commands take none)
        ["--trainer.max_epoch", "3"],
        "unknown option --trainer.max_epoch",
        "did you mean '--trainer.max_epochs'?",
    ),
    # a review: gradient ascent with exit status 0 (-1), a ZeroDivisionError in Lightning (0)
    "accumulate_grad_batches -1": (
        ["--trainer.accumulate_grad_batches", "-1"],
        "trainer.accumulate_grad_batches must be an integer >= 1",
        "got -1",
    ),
    "lr and weight_decay inf": (  # trained until the attention refused NaN, naming no key
        ["--model.lr", ".inf", "--model.weight_decay", ".inf"],
        "model.lr must be a finite positive number, got inf; model.weight_decay must be a finite number >= 0",
        "got inf",
    ),
    "rollout_steps longer than the trajectories": (  # blamed the store's spacings (the gaps between trajectories)
        ["--data.init_args.rollout_steps", "30"],
        "no sample of 1 input and 30 target states 1 h apart fits in trajectories",
        "the longest holds",
    ),
    "store that does not exist": (  # "no zarr store at data/nope.zarr": not which option, nor from where
        ["--data.init_args.store", "data/nope.zarr"],
        "data.init_args.store: no zarr store at data/nope.zarr (relative to the working directory ",
        "write one with `s2forecast generate-swe` or `s2forecast convert-era5`, or give the path of yours",
    ),
    "val_trajectories past the store": (  # named the range alone, not which split's
        ["--data.init_args.val_trajectories", "[2, 5]"],
        "data.init_args.val_trajectories: trajectories [2, 5) run past",
        "it holds trajectories 0..2",
    ),
    "rollout_max above rollout_steps": (
        ["--model.rollout_max", "3"],
        "model.rollout_max is 3 steps but the data's rollout_steps is 2",
        "raise data rollout_steps",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fit_refuses_in_one_line(case, swe_store, tmp_path, capsys):
    extra, message, value = CASES[case]
    with pytest.raises(SystemExit) as exit:
        main(["fit", *tiny_args(swe_store, tmp_path, *extra)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("s2forecast")]
    assert exit.value.code == 2, lines
    assert len(errors) == 1 and errors[0] == lines[-1] and "Traceback" not in "\n".join(lines), lines
    assert lines[-1].startswith("s2forecast fit: error: ") and message in lines[-1] and value in lines[-1], lines[-1]
    assert not list(tmp_path.rglob("*.ckpt"))  # refused before training


OVERLAYS_ALONE = [("s2_neighborhood_crps", "store"), ("s2_neighborhood_crps_fgn", "store"),
                  ("s2_neighborhood_crps_fgn", None), ("s2_neighborhood_crps_fgn", "--print_config")]  # fmt: skip


@pytest.mark.parametrize(("overlay", "extra"), OVERLAYS_ALONE)
def test_an_overlay_config_alone_is_named_as_one(overlay, extra, swe_store, tmp_path, capsys, monkeypatch):
    """Alone, its data keys were checked against the base FieldDataModule: "did you mean
    'data.init_args.spec.rollout'?" or "data.init_args.spec.variables ... is required"; an overlay
    without a data section, given alone, was told to give a config ("data is required"). With
    --print_config it printed a config of data null and the default loss, exit status 0."""
    config = Path(__file__).parents[2] / "configs" / "swe" / f"{overlay}.yaml"
    monkeypatch.chdir(tmp_path)
    args = {"store": ["--data.init_args.store", str(swe_store)], None: [], "--print_config": ["--print_config"]}[extra]
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(config), *args])
    out, err = capsys.readouterr()
    assert "trainer:" not in out  # no config printed (--print_config)
    assert err.strip().splitlines()[-1] == (
        f"s2forecast fit: error: no config gives data.class_path, so {config} is an overlay of another config (its "
        f"first lines name it): give the base config first, --config BASE.yaml --config {config}"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_typo_in_a_config_of_the_base_data_module_still_gets_its_suggestion(swe_store, tmp_path, capsys):
    config = tmp_path / "base.yaml"
    config.write_text("data:\n  init_args:\n    batch_sise: 2\n")
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(config), "--data.init_args.store", str(swe_store)])
    assert "did you mean 'data.init_args.batch_size'?" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["rollout_start", "rollout_max", "rollout_every_epochs"])
def test_fractional_rollout_counts_are_refused_by_the_module(option):
    """From Python (the CLI's types refuse them): rollout_every_epochs 1.5 made the rollout 2.0 steps,
    and range() failed at the first epoch."""
    from s2forecast.training.forecast_module import option_problems

    values = {"rollout_start": 1, "rollout_max": 2, "rollout_every_epochs": 1} | {option: 1.5}
    problems = option_problems({}, {}, "pressure", values["rollout_start"], values["rollout_max"], 1e-3, 0.0, 0, 0.1,
                               1, "mse", 0.0, 1.0, 0.0, None, values["rollout_every_epochs"])  # fmt: skip
    assert f"model.{option} must be a whole number, got 1.5" in problems


def test_a_period_too_short_in_a_trajectory_store_is_named_as_the_period(swe_store):
    """The trajectory message (for a store's whole range) took over periods too: 'the longest holds 7
    times' for a period shorter than the sample (a review found it)."""
    import xarray as xr

    from s2forecast.data.fields import FieldDataset, SampleSpec

    with xr.open_zarr(swe_store) as store:
        start, end = (str(t.astype("datetime64[h]")) for t in store["time"].values[[0, 2]])
    with pytest.raises(ValueError, match=r"a sample spans 4 h and the store's times there .* 2 h; give a period"):
        FieldDataset(swe_store, SampleSpec(variables=("vorticity",), history=1, rollout=4, step_hours=1.0),
                     start=start, end=end)  # fmt: skip
