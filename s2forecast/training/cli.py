"""``s2forecast fit | validate | test | predict``: LightningCLI over ForecastModule and the
DataModules, configured by YAML (``--config``; ``--print_config`` prints the full, reproducible
configuration of a run).

Defaults: CSV logging under ``runs/``, checkpoints of the best (lowest ``val/loss``) and the
last epoch, ``seed_everything: 0``; ``--ckpt_path last`` resumes from the newest ``last.ckpt``
under the logger's directory. The DataModule is chosen by ``data.class_path``
(``s2forecast.datamodules.SWEDataModule`` or ``ERA5DataModule``); what the model needs to know
about it (channels, grid, normalization) is linked into ``model.data`` when both are built.
"""

import sys
from pathlib import Path

from jsonargparse import lazy_instance
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.loggers import CSVLogger

from s2forecast.datamodules import FieldDataModule
from s2forecast.training.forecast_module import ForecastModule, data_info

COMMANDS = ("fit", "validate", "test", "predict")


class ForecastCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data", "model.data", compute_fn=data_info, apply_on="instantiate")

    def _resolve_last_checkpoint(self) -> None:
        """``--ckpt_path last``: the newest last.ckpt under the logger's directory. Lightning looks
        only in the new run's checkpoint directory, which a new logger version leaves empty."""
        config = self.config_init[self.subcommand]
        if config.get("ckpt_path") != "last":
            return
        root = Path(self.trainer.logger.save_dir if self.trainer.logger else self.trainer.default_root_dir)
        found = sorted(root.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise ValueError(f"--ckpt_path last: no last.ckpt under {root}; pass the checkpoint's path instead")
        config["ckpt_path"] = str(found[-1])

    before_fit = before_validate = before_test = before_predict = _resolve_last_checkpoint


def trainer_defaults() -> dict:
    """CSV logging under runs/ (replace with ``trainer.logger``), and always-present callbacks:
    checkpoints of the best (lowest val/loss) and the last epoch, learning-rate logging."""
    return {
        "logger": lazy_instance(CSVLogger, save_dir="runs"),
        "callbacks": [
            ModelCheckpoint(monitor="val/loss", mode="min", save_last=True, filename="best-{epoch}-{step}"),
            LearningRateMonitor(logging_interval="step"),
        ],
    }


def run(argv: list[str]) -> None:
    """Run a Lightning subcommand; ``argv`` starts with one of ``COMMANDS``."""
    ForecastCLI(
        ForecastModule,
        FieldDataModule,
        subclass_mode_data=True,
        args=None if argv == sys.argv[1:] else argv,  # LightningCLI warns when both are given
        trainer_defaults=trainer_defaults(),
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
    )
