"""``s2forecast fit | validate | test | predict``: LightningCLI over ForecastModule and the
DataModules, configured by YAML (``--config``; ``--print_config`` prints the full, reproducible
configuration of a run).

Defaults: CSV logging under ``runs/``, checkpoints of the best (lowest ``val/loss``) and the
last epoch, ``seed_everything: 0``. The DataModule is chosen by ``data.class_path``
(``s2forecast.datamodules.SWEDataModule`` or ``ERA5DataModule``); what the model needs to know
about it (channels, grid, normalization) is linked into ``model.data`` when both are built.
"""

import sys

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
