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
from argparse import ArgumentError
from pathlib import Path

from jsonargparse import Namespace, lazy_instance
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.loggers import CSVLogger

from s2forecast.datamodules import FieldDataModule
from s2forecast.training.config_errors import ConfigError, config_error, config_files, yaml_problem
from s2forecast.training.forecast_module import ForecastModule, data_info

COMMANDS = ("fit", "validate", "test", "predict")
JSONARGPARSE_WRAPPERS = ("Call to compute_fn of link", "Does not validate against any of the Union subtypes")


class ForecastCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data", "model.data", compute_fn=data_info, apply_on="instantiate")

    def parse_arguments(self, parser, args) -> None:
        """Parse ``args`` into ``self.config``; a configuration error becomes a one-line ConfigError
        (the parsers are built with ``exit_on_error=False``, so jsonargparse raises instead of
        printing the usage and a many-line message)."""
        if isinstance(args, dict | Namespace):
            return super().parse_arguments(parser, args)
        args = sys.argv[1:] if args is None else list(args)
        try:
            self.config = parser.parse_args(args)
        except ArgumentError as error:
            subparser = self._subcommand_parsers.get(args[0], parser) if args else parser
            keys = [action.dest for action in subparser._actions]
            raise config_error(str(error), keys, args) from error
        except UnicodeDecodeError as error:  # a binary file given as --config
            problems = [problem for problem in map(yaml_problem, config_files(args)) if problem]
            raise ConfigError(problems[0] if problems else f"a --config file is not UTF-8 text: {error}") from error

    def instantiate_classes(self) -> None:
        """Build the objects. What a constructor or ``data_info`` raises (e.g. for a store that does
        not exist) is reported as itself: jsonargparse wraps it in "Call to compute_fn of link ..."
        or "Does not validate against any of the Union subtypes" with the whole configuration."""
        try:
            super().instantiate_classes()
        except ValueError as error:
            cause = error
            while cause.__cause__ is not None and str(cause).startswith(JSONARGPARSE_WRAPPERS):
                cause = cause.__cause__
            if cause is error:
                raise
            raise cause from None

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
    """Run a Lightning subcommand; ``argv`` starts with one of ``COMMANDS``.

    Raises:
        ConfigError: a configuration error (unknown key, wrong type, bad class_path, missing
            key, missing or invalid YAML file), in one line.
    """
    no_exit = {"exit_on_error": False}  # raise, so that `s2forecast` can report one line
    ForecastCLI(
        ForecastModule,
        FieldDataModule,
        subclass_mode_data=True,
        args=argv,
        trainer_defaults=trainer_defaults(),
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"prog": "s2forecast", **no_exit, **{command: dict(no_exit) for command in COMMANDS}},
    )
