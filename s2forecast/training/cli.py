"""``s2forecast fit | validate | test | predict``: LightningCLI over ForecastModule and the
DataModules, configured by YAML (``--config``; ``--print_config`` prints the full, reproducible
configuration of a run).

Defaults: CSV logging under ``runs/<name>/version_N`` (the shipped configs set ``name`` to
their file name), checkpoints of the best (lowest ``val/loss``) and the last epoch,
``seed_everything: 0``. The DataModule is chosen by ``data.class_path``
(``s2forecast.datamodules.SWEDataModule`` or ``ERA5DataModule``); what the model needs to know
about it (channels, grid, normalization) is linked into ``model.data`` when both are built.

Checkpoints are read weights-only (``s2forecast.training.checkpoints``): Lightning's
``weights_only`` argument is not an option, URLs are refused, and a checkpoint that needs more
than tensors and plain values is refused with one line. ``--ckpt_path last`` resumes the newest
``last.ckpt`` of this run's experiment, ``<save_dir>/<name>/*/checkpoints/`` of its logger (the
latest version of ``runs/<name>``), never another experiment's; a run with none is an error.
Resuming is exact, mid-epoch included (``s2forecast.datamodules.datamodule.ResumableLoader``).
"""

import sys

from jsonargparse import lazy_instance
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.strategies import Strategy

from s2forecast.datamodules import FieldDataModule
from s2forecast.training.checkpoints import WeightsOnlyCheckpointIO, last_checkpoint, read_checkpoint
from s2forecast.training.forecast_module import ForecastModule, data_info

COMMANDS = ("fit", "validate", "test", "predict")
SPECIAL_CKPT_PATHS = ("last", "best", "hpc")  # --ckpt_path values Lightning resolves itself


class ForecastCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data", "model.data", compute_fn=data_info, apply_on="instantiate")

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Lightning's subcommands without their ``weights_only`` argument: checkpoints are
        always read weights-only."""
        return {name: skip | {"weights_only"} for name, skip in LightningCLI.subcommands().items()}

    def _parse_ckpt_path(self) -> None:
        """Lightning's reading of the model's hyper-parameters from ``--ckpt_path`` before the
        model is built, through ``read_checkpoint`` (so a URL or an unsafe file fails here, with
        one line). "last" is resolved once the logger exists (``_prepare_checkpoint_loading``)."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path is None or str(ckpt_path) in SPECIAL_CKPT_PATHS:
            return
        hparams = dict(read_checkpoint(ckpt_path).get("hyper_parameters", {}))
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        try:
            self.config = self.parser.parse_object({subcommand: {"model": hparams}}, self.config)
        except SystemExit:
            sys.stderr.write("Parsing of ckpt_path hyperparameters failed!\n")
            raise

    def _prepare_checkpoint_loading(self) -> None:
        """Every checkpoint Lightning loads goes through ``read_checkpoint``; ``--ckpt_path last``
        becomes the newest last.ckpt of this run's experiment."""
        strategy = self.trainer.strategy
        config = self.config_init[self.subcommand]
        if config.get("ckpt_path") and type(strategy).load_checkpoint is not Strategy.load_checkpoint:
            raise ValueError(
                f"--ckpt_path with the {type(strategy).__name__} strategy: its checkpoint loading does not go through "
                "s2forecast's weights-only reader; resume with the default, ddp or single-device strategies"
            )
        if not isinstance(strategy.checkpoint_io, WeightsOnlyCheckpointIO):
            strategy.checkpoint_io = WeightsOnlyCheckpointIO(strategy.checkpoint_io)
        if config.get("ckpt_path") == "last":
            config["ckpt_path"] = str(last_checkpoint(self.trainer))

    before_fit = before_validate = before_test = before_predict = _prepare_checkpoint_loading


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
