"""The Forecaster and the inference package need no Lightning and no training code (issue 15)."""

import json
import subprocess
import sys

import pytest
import torch

from s2forecast.models.forecaster import Forecaster
from s2forecast.training import ForecastModule, data_info

PACKAGES = ["s2forecast.models.forecaster", "s2forecast.inference.rollout", "s2forecast.evaluation",
            "s2forecast.evaluation.evaluate"]  # fmt: skip
# one interpreter: each package in turn, and what training-side modules it brought in
IMPORTS = """
import importlib, json, sys
training = ("pytorch_lightning", "lightning", "s2forecast.training")
found = {}
for package in sys.argv[1:]:
    importlib.import_module(package)
    found[package] = sorted(m for m in sys.modules if m.startswith(training))
print(json.dumps(found))
"""


@pytest.mark.slow  # an interpreter that imports torch
def test_imports_no_training_and_no_lightning():
    result = subprocess.run([sys.executable, "-c", IMPORTS, *PACKAGES], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {package: [] for package in PACKAGES}


def test_forecaster_from_checkpoint_is_the_trained_model(swe_store, tmp_path):
    """A checkpoint saved by Lightning gives a Forecaster with the same weights and outputs, also
    from a checkpoint whose keys are those of before the Forecaster (net.*)."""
    import pytorch_lightning as pl

    from s2forecast.training.datamodule import SWEDataModule

    data = SWEDataModule(str(swe_store), train_trajectories=(0, 2), val_trajectories=None, test_trajectories=None,
                         batch_size=2, rollout_steps=2)  # fmt: skip
    module = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(module, datamodule=data)
    checkpoint = tmp_path / "model.ckpt"
    trainer.save_checkpoint(checkpoint)
    forecaster = Forecaster.from_checkpoint(checkpoint)
    assert not forecaster.training
    batch = next(iter(data.train_dataloader()))
    module.eval()
    with torch.no_grad():
        expected = module(batch, 2)
        got = torch.stack(list(forecaster.rollout(batch.inputs, batch.static, batch.forcings, 2)), dim=1)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)

    old = torch.load(checkpoint, weights_only=True)  # as saved before the Forecaster existed
    old["state_dict"] = {k.removeprefix("forecaster."): v for k, v in old["state_dict"].items()}
    torch.save(old, tmp_path / "old.ckpt")
    with torch.no_grad():
        again = Forecaster.from_checkpoint(tmp_path / "old.ckpt").step(batch.inputs, batch.static,
                                                                        batch.forcings[:, :2])  # fmt: skip
    torch.testing.assert_close(again, expected[:, 0], rtol=0, atol=0)
    resumed = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    resumed.load_state_dict(old["state_dict"])  # Lightning's resume of an old checkpoint
    assert all(torch.equal(a, b) for a, b in zip(resumed.parameters(), module.parameters(), strict=True))


def test_a_checkpoint_that_does_not_fit_says_what_does_not(mse_run_1_epoch, tmp_path):
    """Not "Error(s) in loading state_dict for Forecaster:" alone; and statistics of the wrong length
    were loaded and broadcast (one mean for every channel)."""
    state = torch.load(mse_run_1_epoch.checkpoint, weights_only=True)
    weight = next(key for key in state["state_dict"] if key.endswith("encoder.weight"))
    cases = {
        "missing.ckpt": (lambda s: s["state_dict"].pop(weight), rf"missing \['{weight.removeprefix('forecaster.')}'\]"),
        "extra.ckpt": (lambda s: s["state_dict"].update({"forecaster.net.extra": torch.zeros(1)}), r"\['net.extra'\]"),
        "mean.ckpt": (lambda s: s["hyper_parameters"]["data"].update(mean=[0.0]), r"data mean has 1 values for 3"),
        # normalized by: inf or NaN inputs, "Could not infer dtype of NoneType"; static fields: AttributeError
        "std.ckpt": (lambda s: s["hyper_parameters"]["data"].update(std=[0.0, 1.0, 1.0]),
                     r"data std must be finite numbers > 0 \(one per channel\), got \[0.0\]"),
        "none.ckpt": (lambda s: s["hyper_parameters"]["data"].update(mean=[None, 0.0, 0.0]),
                      r"data mean must be finite numbers \(one per channel\), got \[None\]"),
        "static.ckpt": (lambda s: s.update(static_fields=[1]), r"its static_fields are list \[1\], not fields by name"),
    }  # fmt: skip
    for name, (damage, message) in cases.items():
        damaged = torch.load(mse_run_1_epoch.checkpoint, weights_only=True)
        damage(damaged)
        torch.save(damaged, tmp_path / name)
        with pytest.raises(ValueError, match=rf"{name} is not a forecaster checkpoint: .*{message}") as error:
            Forecaster.from_checkpoint(tmp_path / name)
        assert "\n" not in str(error.value)


def test_not_a_forecaster_checkpoint(tmp_path):
    torch.save({"state_dict": {}, "hyper_parameters": {}}, tmp_path / "x.ckpt")
    with pytest.raises(ValueError, match="x.ckpt is not a checkpoint of s2forecast fit"):
        Forecaster.from_checkpoint(tmp_path / "x.ckpt")
