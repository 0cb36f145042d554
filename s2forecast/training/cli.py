"""``s2forecast fit | validate | test | predict``: LightningCLI over ForecastModule and the
DataModules, configured by YAML (``--config``; ``--print_config`` prints the full, reproducible
configuration of a run).

Defaults: CSV logging under ``runs/<name>/version_N`` (the shipped configs set ``name`` to
their file name), checkpoints of the best (lowest ``val/loss``) and the last epoch,
``seed_everything: 0``. The DataModule is chosen by ``data.class_path``
(``s2forecast.training.datamodule.SWEDataModule`` or ``ERA5DataModule``); what the model needs to know
about it (channels, grid, normalization) is linked into ``model.data`` when both are built.

Checkpoints are read weights-only (``s2forecast.training.checkpoints``): Lightning's
``weights_only`` argument is not an option, URLs are refused, and a checkpoint that needs more
than tensors and plain values is refused with one line. ``--ckpt_path last`` resumes the newest
``last.ckpt`` of this run's experiment, ``<save_dir>/<name>/*/checkpoints/`` of its logger (the
latest version of ``runs/<name>``), never another experiment's (with the WandbLogger, whose
directory is the project's, the newest that records this run's name); a run with none is an
error. Resuming is exact, mid-epoch included (``s2forecast.training.datamodule.ResumableLoader``).
The run's configuration is saved next to its checkpoints, never over a file (``run_config``).
A run without a logger (``trainer.logger: false``) logs nothing, the learning rate included.
"""

import logging
import os
import re
import signal
import sys
import warnings
from argparse import ArgumentError
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytorch_lightning
import yaml
from jsonargparse import ActionConfigFile, Namespace, lazy_instance
from jsonargparse._actions import _ActionPrintConfig  # its deferral (no public API)
from pytorch_lightning.callbacks import LearningRateMonitor, OnExceptionCheckpoint
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
from pytorch_lightning.strategies import Strategy
from pytorch_lightning.utilities.exceptions import SIGTERMException

from s2forecast.training.checkpoint_model import describe, differences
from s2forecast.training.checkpoints import (
    LastAtStop,
    RunName,
    WeightsOnlyCheckpointIO,
    last_checkpoint,
    read_checkpoint,
)
from s2forecast.training.config_code import refuse_code, safe_parsing
from s2forecast.training.config_errors import ConfigError, config_error, config_files, overlays_alone, yaml_problem
from s2forecast.training.datamodule import FieldDataModule
from s2forecast.training.forecast_module import ForecastModule, current_hparams, data_info
from s2forecast.training.run_config import RunConfig, new_directories
from s2forecast.user_errors import UserError
from s2forecast.warning_format import keep_one_line_warnings

keep_one_line_warnings()  # lightning_fabric replaced the warnings' format when it was imported

# Lightning's own use of a deprecated torch API: nothing a user can act on
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
# epochs shorter than log_every_n_steps: their metrics are still logged at the epoch's end
warnings.filterwarnings(
    "ignore", message=r"The number of training batches \(\d+\) is smaller than the logging interval"
)
# ModelCheckpoint's hint, when training ended before any validation, to call log('val/loss') in the
# LightningModule: nothing a user can act on; after_fit says what happened instead
warnings.filterwarnings(
    "ignore", message=r"`ModelCheckpoint\(monitor='val/loss'\)` could not find the monitored key in the returned "
    r"metrics: \[(?![^\]]*'val/)"  # the returned metrics hold no val/ key: no validation ran
)  # fmt: skip
# Lightning's log lines that are no news: an advertisement, and devices this machine does not have
NOT_NEWS = ("💡 Tip", "GPU available: False", "TPU available: False", "HPU available: False")


class _NoNews(logging.Filter):
    """Drops Lightning's log lines that start with one of ``NOT_NEWS``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NOT_NEWS)


logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_NoNews())

COMMANDS = ("fit", "validate", "test")  # no predict: it wrote nothing; forecasts are `s2forecast rollout`
SPECIAL_CKPT_PATHS = ("last", "best", "hpc")  # --ckpt_path values Lightning resolves itself
CKPT_PATH_HELP = {
    "fit": "a checkpoint file of s2forecast fit to resume (its weights, optimizer and position in the data), or "
    "'last': the newest last.ckpt of this experiment (trainer.logger's save_dir and name)",
    "validate": "the checkpoint file to score (runs/NAME/version_N/checkpoints/last.ckpt or best-*.ckpt), or 'last': "
    "the newest last.ckpt of this experiment; required unless model.init_from names the weights",
}
CKPT_PATH_HELP["test"] = CKPT_PATH_HELP["validate"]
RUN_RECORDS = ("config.yaml", "hparams.yaml")  # what a run writes into its log directory before any result
JSONARGPARSE_WRAPPERS = ("Call to compute_fn of link", "Does not validate against any of the Union subtypes")


def merged(base: dict, layer: dict) -> dict:
    """``layer`` over ``base``, nested dictionaries merged key by key (a value that is not a
    dictionary on both sides is ``layer``'s)."""
    out = dict(base)
    for key, value in layer.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class LayeredConfigFile(ActionConfigFile):
    """``--config``: each file layers over what came before, nested dictionaries included, so that
    ``--config base.yaml --config crps.yaml`` with only ``model.network: {noise_channels: 8}`` in
    the second keeps the base's network options (jsonargparse alone replaces a whole dictionary
    value such as ``model.network``). A dictionary under a ``class_path`` that the file changes is
    replaced, as jsonargparse discards that class's init_args."""

    @staticmethod
    def apply_config(parser, cfg, dest, value) -> None:
        before = {key: value for key, value in cfg.items() if isinstance(value, dict | str)}
        ActionConfigFile.apply_config(parser, cfg, dest, value)
        for key, layer in cfg.items():
            base, owner = before.get(key), key.rpartition(".")[0]
            same_class = before.get(f"{owner}.class_path") == cfg.get(f"{owner}.class_path") if owner else True
            if isinstance(layer, dict) and isinstance(base, dict) and same_class:
                cfg[key] = merged(base, layer)


NESTED_NETWORK_OPTION = "--model.network."


def nested_options_as_layers(args: list[str]) -> list[str]:
    """``--model.network.ball_options.top_k 1`` (an option inside a network option) as a
    configuration layer, ``--config {model: {network: {ball_options: {top_k: 1}}}}``, which
    ``LayeredConfigFile`` merges key by key. jsonargparse alone replaces the whole
    ``ball_options`` of the config files with ``{top_k: '1'}``, a string."""
    out, i = [], 0
    while i < len(args):
        key, equals, value = args[i].partition("=")
        path = key.removeprefix(NESTED_NETWORK_OPTION).split(".") if key.startswith(NESTED_NETWORK_OPTION) else []
        if len(path) < 2:
            out.append(args[i])
            i += 1
            continue
        if not equals:
            if i + 1 == len(args) or args[i + 1].startswith("--"):  # -1 is a value
                raise ConfigError(f"{key} needs a value, e.g. {key} 1")
            value, i = args[i + 1], i + 1
        i += 1
        if not all(path):
            raise ConfigError(f"{key}: an empty name between dots; write e.g. --model.network.ball_options.top_k 1")
        try:
            layer = yaml.safe_load(value)
        except yaml.YAMLError as error:
            reason = str(error).splitlines()[0]
            raise ConfigError(f"{key} {value!r} is not a YAML value ({reason}); quote it for a string") from None
        for name in reversed(path):
            layer = {name: layer}
        out += ["--config", yaml.safe_dump({"model": {"network": layer}}, default_flow_style=True).strip()]
    return out


def _check_ckpt_path(subcommand: str | None, ckpt_path, init_from) -> None:
    """``--ckpt_path`` values a separate s2forecast process cannot use, and validate/test without a
    checkpoint, which scored the model as built (untrained) as if it were one (a review found it)."""
    text = None if ckpt_path is None else str(ckpt_path)
    if text is not None and (text == "best" or re.match(r"registry(:|$)", text, re.IGNORECASE)):  # Lightning's rule
        raise UserError(
            f"--ckpt_path {text} is Lightning's value for a checkpoint of the same Python process or its model "
            "registry; pass the checkpoint file (runs/NAME/version_N/checkpoints/best-*.ckpt or last.ckpt) or last"
        )
    if subcommand in ("validate", "test") and text is None and init_from is None:
        raise UserError(
            f"{subcommand} scores a checkpoint: pass --ckpt_path FILE (runs/NAME/version_N/checkpoints/last.ckpt) or "
            "--ckpt_path last (this experiment's newest); without one the model would be untrained"
        )


class ForecastCLI(LightningCLI):
    def init_parser(self, **kwargs) -> LightningArgumentParser:
        """Lightning's parser, with ``--config`` files layered (``LayeredConfigFile``)."""
        kwargs.setdefault("dump_header", [f"pytorch_lightning=={pytorch_lightning.__version__}"])
        parser = self.parser_class(**kwargs)
        parser.add_argument(
            "-c",
            "--config",
            action=LayeredConfigFile,
            help="Path to a configuration file in json or yaml format; each layers over those before it "
            "(nested dictionaries merged).",
        )
        return parser

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data", "model.data", compute_fn=data_info, apply_on="instantiate")
        # Lightning types these Union[float, int, None], float first: `1` (one batch, in its docs) was parsed as
        # 1.0, which Lightning reads as every batch. Int first: 1 is one batch, 1.0 and 0.5 fractions
        limits = {f"trainer.limit_{stage}_batches" for stage in ("train", "val", "test", "predict")}
        for action in parser._actions:
            if getattr(action, "dest", None) in limits and hasattr(action, "_typehint"):
                action._typehint = int | float | None
        for name in ("optimizer", "lr_scheduler"):  # null in every config.yaml written before they were removed
            parser.add_argument(
                f"--{name}", type=Any, default=None,
                help="not an option: the optimizer (AdamW) and its schedule are the model's (model.lr, "
                "model.weight_decay, model.warmup_steps); only null is accepted, as in earlier config.yaml files",
            )  # fmt: skip
        parser.add_argument(
            "--model_from_ckpt", type=bool, default=False,
            help="take the model's hyper-parameters from the --ckpt_path file instead of the config's model section "
            "(without it they must be the checkpoint's: training/checkpoint_model.py)",
        )  # fmt: skip

    def setup_parser(self, *args, **kwargs) -> None:
        """Lightning's parsers, with ``--ckpt_path`` helped as s2forecast reads it (Lightning's help
        offers a registry, URLs and "best", which a separate process cannot use)."""
        super().setup_parser(*args, **kwargs)
        for name, parser in getattr(self, "_subcommand_parsers", {}).items():
            for action in parser._actions:
                if getattr(action, "dest", None) == "ckpt_path":
                    action.help = CKPT_PATH_HELP[name]

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Lightning's subcommands but predict, without their ``weights_only`` argument:
        checkpoints are always read weights-only."""
        return {name: skip | {"weights_only"} for name, skip in LightningCLI.subcommands().items() if name in COMMANDS}

    def parse_arguments(self, parser, args) -> None:
        """Parse ``args`` into ``self.config``; a configuration error becomes a one-line ConfigError
        (the parsers are built with ``exit_on_error=False``, so jsonargparse raises instead of
        printing the usage and a many-line message)."""
        if isinstance(args, dict | Namespace):
            return super().parse_arguments(parser, args)
        args = sys.argv[1:] if args is None else list(args)
        layered = nested_options_as_layers(args)
        try:
            try:  # --print_config waits for _parse_ckpt_path: model_from_ckpt replaces the model section
                with _ActionPrintConfig.skip_print_config():
                    self.config = parser.parse_args(layered)
            except ArgumentError as strict:
                if not _ActionPrintConfig.is_print_config_requested(parser) or overlays_alone(args):
                    raise
                # not a whole run's config (`fit --print_config` alone prints a template): print
                # it as jsonargparse does, before its checks; a config it refuses too is reported
                # as without --print_config (that error names the file and the key meant)
                try:
                    self.config = parser.parse_args(layered)
                except ArgumentError:
                    raise strict from None
        except ArgumentError as error:
            subparser = self._subcommand_parsers.get(args[0], parser) if args else parser
            keys = [action.dest for action in subparser._actions]
            raise config_error(error, keys, args) from error
        except UnicodeDecodeError as error:  # a binary file given as --config
            problems = [problem for problem in map(yaml_problem, config_files(args)) if problem]
            raise ConfigError(problems[0] if problems else f"a --config file is not UTF-8 text: {error}") from error

    def before_instantiate_classes(self) -> None:
        """No function named in the configuration (``config_code``): checked after the
        checkpoint's hyper-parameters are merged in, before anything is built."""
        refuse_code(self.config)

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

    def instantiate_trainer(self, **kwargs):
        """Lightning's Trainer, with a ``RunName`` record of the run's name in its checkpoints, and
        without the default LearningRateMonitor in a run without a logger (Lightning's refuses
        such a run; it would log nowhere)."""
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except RuntimeError as error:  # Lightning's check of the callbacks, a configuration's mistake
            if match := re.match(r"Found more than one stateful callback of type `(\w+)`", str(error)):
                raise UserError(
                    f"trainer.callbacks: two {match[1]} callbacks with the same settings (their checkpointed state "
                    "would collide); give them different monitor / every_n_* / train_time_interval settings, or keep "
                    "one"
                ) from None
            raise
        precision = str(trainer.precision)
        requested = str(self._get(self.config_init, "trainer", {}).get("precision"))
        if requested in ("16", "16-mixed") and precision.startswith("bf16"):  # Lightning's switch on a CPU
            # (to bf16-mixed, with a warning in its own format, while the run's config.yaml said 16-mixed)
            raise UserError(f"trainer.precision {requested} needs a GPU; on a CPU use bf16-mixed")
        if precision.startswith("64") or (precision.endswith("-true") and precision != "32-true"):
            # Lightning's double and half plugins convert the batch, and cannot convert our frozen Batch
            raise UserError(
                f"trainer.precision {precision} is not supported (training or scoring); use 32-true, or bf16-mixed / "
                "16-mixed (on a GPU)"
            )
        accumulate, every = trainer.accumulate_grad_batches, trainer.val_check_interval
        if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
            # -1 divided each loss by -1 (gradient ascent, exit 0); 0 divided by zero in Lightning
            raise UserError(f"trainer.accumulate_grad_batches must be an integer >= 1, got {accumulate!r}")
        if accumulate > 1 and isinstance(every, int) and every % accumulate:
            # a validation (and its checkpoint) between the micro-batches of a step: a resume from it loses
            # the step's earlier gradients and is not the uninterrupted run
            raise UserError(
                f"trainer.val_check_interval {every} is not a multiple of trainer.accumulate_grad_batches "
                f"{accumulate}: its checkpoints would fall inside an optimizer step; use a multiple of {accumulate}"
            )
        if any(isinstance(callback, OnExceptionCheckpoint) for callback in trainer.callbacks):
            # it resumes in silence from <dirpath>/<filename>.ckpt (a file this run never wrote), replaces it, and
            # removes it at the end of every run (a review found another run's checkpoint lost)
            raise UserError(
                "trainer.callbacks: OnExceptionCheckpoint resumes from, replaces and removes a file at its dirpath "
                "that this run did not write; use ModelCheckpoint's save_on_exception: true instead"
            )
        if not trainer.loggers:
            monitors = [c for c in self.trainer_defaults.get("callbacks", []) if isinstance(c, LearningRateMonitor)]
            trainer.callbacks = [c for c in trainer.callbacks if not any(c is monitor for monitor in monitors)]
        name = self._run_name(trainer)
        if name is not None:
            trainer.callbacks.insert(0, RunName(name))
        return trainer

    def _run_name(self, trainer) -> str | None:
        """The name the run was given: the CSV and TensorBoard loggers' ``name`` (their experiment
        directory), else ``trainer.logger.init_args.name`` of the first logger in the config (the
        WandbLogger's run name; its ``name`` is the project's). None without one."""
        if isinstance(trainer.logger, CSVLogger | TensorBoardLogger):
            return str(trainer.logger.name)
        config = self.config[self.subcommand] if self.subcommand else self.config
        logger = config.get("trainer", {}).get("logger")
        logger = logger[0] if isinstance(logger, list) and logger else logger
        name = (logger.get("init_args") or {}).get("name") if isinstance(logger, dict | Namespace) else None
        return None if name is None else str(name)

    def _parse_ckpt_path(self) -> None:
        """The checkpoint's model (``_merge_checkpoint_model``), then ``--print_config``'s print,
        deferred by ``parse_arguments`` so that it shows the model the run uses."""
        subcommand = self.config.get("subcommand")
        if not (self.config[subcommand] if subcommand else self.config).get("model_from_ckpt"):
            _ActionPrintConfig.print_config_if_requested(self.parser, self.config)  # reads no checkpoint
        self._merge_checkpoint_model()
        _ActionPrintConfig.print_config_if_requested(self.parser, self.config)

    def _merge_checkpoint_model(self) -> None:
        """With ``--model_from_ckpt true``, Lightning's reading of the model's hyper-parameters
        from ``--ckpt_path`` before the model is built, through ``read_checkpoint`` (so a URL or an
        unsafe file fails here, with one line); without it the config's model is built and
        compared with the checkpoint's once the file is known (``_prepare_checkpoint_loading``)."""
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else {}
        ckpt_path = config.get("ckpt_path")
        _check_ckpt_path(subcommand, ckpt_path, (config.get("model") or {}).get("init_from"))
        for name in ("optimizer", "lr_scheduler"):
            if config.get(name) is not None:  # Lightning's, which replaced the model's (a review found it)
                raise UserError(
                    f"--{name} is not an option: the optimizer (AdamW) and its schedule are the model's; set "
                    "model.lr, model.weight_decay, model.warmup_steps"
                )
        if ckpt_path is not None and str(ckpt_path) not in SPECIAL_CKPT_PATHS:
            # a URL, a missing or unsafe file: one line before anything is built
            self._ckpt_hparams = (str(ckpt_path), read_checkpoint(ckpt_path).get("hyper_parameters") or {})
        model = config.get("model")
        if ckpt_path is not None and model is not None and model.get("init_from") is not None:
            # the weights come from --ckpt_path: a fine-tuning's starting checkpoint is not read (it may be
            # gone, or the config's "required" placeholder, which refuses a run that would start from scratch)
            model["init_from"] = None
        if not config.get("model_from_ckpt"):
            return
        if ckpt_path is None or str(ckpt_path) in SPECIAL_CKPT_PATHS:
            raise UserError(
                f"--model_from_ckpt true needs a checkpoint file in --ckpt_path, got {ckpt_path}; pass the file "
                "(runs/NAME/version_N/checkpoints/last.ckpt)"
            )
        hparams = current_hparams(self._ckpt_hparams[1])
        hparams.pop("_instantiator", None)
        hparams.pop("init_from", None)  # the weights come from the checkpoint (that file may be gone)
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
            raise UserError(
                f"--ckpt_path with the {type(strategy).__name__} strategy: its checkpoint loading does not go through "
                "s2forecast's weights-only reader; resume with the default, ddp or single-device strategies"
            )
        if not isinstance(strategy.checkpoint_io, WeightsOnlyCheckpointIO):
            strategy.checkpoint_io = WeightsOnlyCheckpointIO(strategy.checkpoint_io)
        if config.get("ckpt_path") == "last":
            config["ckpt_path"] = str(last_checkpoint(self.trainer, self._run_name(self.trainer)))
            # the run's config.yaml (RunConfig, written later) records the checkpoint it resumed from:
            # "last" would resume a refit from this run's own last checkpoint
            self.config[self.subcommand]["ckpt_path"] = config["ckpt_path"]
        if config.get("ckpt_path") and str(config["ckpt_path"]) not in SPECIAL_CKPT_PATHS:
            self._check_checkpoint_model(str(config["ckpt_path"]))

    def _check_checkpoint_model(self, path: str) -> None:
        """The model built must be the checkpoint's (``checkpoint_model``): never another's
        weights or schedule without a word, never a size-mismatch traceback."""
        checkpoint = read_checkpoint(path, mmap=True)
        missing = [key for key in ("pytorch-lightning_version", "state_dict") if key not in checkpoint]
        if self.subcommand == "fit" and not missing:  # resuming needs the training state too
            missing = [key for key in ("optimizer_states", "loops") if key not in checkpoint]
        if missing:
            raise UserError(
                f"--ckpt_path {path} is not a full checkpoint of s2forecast fit (no {', '.join(missing)}: saved "
                "weights-only, or exported); start from its weights with --model.init_from, or validate/test it"
                + (" with a checkpoint that has them" if self.subcommand != "fit" else "")
            )
        known = getattr(self, "_ckpt_hparams", None)
        theirs = known[1] if known and known[0] == path else checkpoint.get("hyper_parameters") or {}
        theirs = current_hparams(theirs)
        found = differences(dict(self.model.hparams), theirs, self.subcommand) if theirs else []
        if found:
            raise UserError(f"--ckpt_path {path} is another model than this run's: {describe(found)}")
        expected = set(self.model.state_dict())
        absent = sorted(expected - set(checkpoint["state_dict"]))
        if absent:
            raise UserError(
                f"--ckpt_path {path} lacks {len(absent)} weight(s) of this model, e.g. {absent[0]}: it was saved by "
                "another version or edited; use a checkpoint of this model"
            )

    def _check_processes(self) -> None:
        """Processes that torchrun or srun started must be the trainer's: with the default
        ``trainer.devices`` (1 on a CPU) each would train alone, all writing one log folder. srun
        counts only where Lightning reads SLURM (not in an interactive ``srun --pty bash``)."""
        from lightning_fabric.plugins.environments import SLURMEnvironment

        env = os.environ
        if "WORLD_SIZE" in env:
            launcher, started, per_node = "torchrun", env["WORLD_SIZE"], env.get("LOCAL_WORLD_SIZE")
        elif SLURMEnvironment.detect() and "SLURM_STEP_NUM_TASKS" in env:
            launcher, started = "srun", env["SLURM_STEP_NUM_TASKS"]
            nodes = env.get("SLURM_STEP_NUM_NODES", "1")
            per_node = str(int(started) // int(nodes)) if started.isdigit() and nodes.isdigit() and int(nodes) else None
        else:
            tasks = env.get("SLURM_STEP_NUM_TASKS", "1")
            if tasks.isdigit() and int(tasks) > 1 and self.trainer.world_size == 1:
                # a job named bash or interactive (srun --pty bash, often salloc): Lightning then ignores SLURM,
                # and cannot tell this shell's one process from `srun -n N s2forecast fit`'s N
                warnings.warn(
                    f"the SLURM job step has {tasks} tasks but its job name {env.get('SLURM_JOB_NAME')!r} makes "
                    f"Lightning ignore SLURM: if srun started this command {tasks} times, each trains on its own; "
                    "name the job otherwise (--job-name) and pass --trainer.devices/--trainer.num_nodes",
                    stacklevel=1,
                )
            return
        trainer = self.trainer
        if not started.isdigit() or int(started) <= 1 or trainer.world_size == int(started):
            return
        per_node = int(per_node) if per_node and per_node.isdigit() and int(per_node) > 0 else int(started)
        raise UserError(
            f"{launcher} started {started} processes but the trainer runs {trainer.world_size} (trainer.devices "
            f"{trainer.num_devices} x trainer.num_nodes {trainer.num_nodes}): each would train on its own; pass "
            f"--trainer.devices {per_node} --trainer.num_nodes {max(int(started) // per_node, 1)} (processes per node "
            "x nodes), or start one process"
        )

    def _before_run(self) -> None:
        self._check_processes()
        self._prepare_checkpoint_loading()
        if not sys.stdout.isatty() and self.trainer.progress_bar_callback is not None:
            # tqdm's nested bars move the cursor with ANSI escapes: garbage in a log file
            self.trainer.progress_bar_callback.disable()

    before_fit = before_validate = before_test = before_predict = _before_run

    def after_fit(self) -> None:
        """Say where the checkpoints went."""
        callback = self.trainer.checkpoint_callback
        if callback is None or not self.trainer.is_global_zero:
            return
        if self.trainer.fast_dev_run:  # a trial run: Lightning saves nothing, and neither do we
            print("fast_dev_run: no checkpoint written")
            return
        if self.trainer.global_step == 0 and not callback.last_model_path:
            warnings.warn(
                f"fit trained no step, so it wrote no checkpoint (trainer.max_steps {self.trainer.max_steps}, "
                f"trainer.max_epochs {self.trainer.max_epochs}, {self.trainer.num_training_batches} training "
                "batches an epoch); raise them, or use `s2forecast validate` to score a model",
                stacklevel=1,
            )
            return
        if callback.best_model_path:
            score = callback.best_model_score
            value = f" {callback.monitor} {float(score):.6g}" if score is not None and callback.monitor else ""
            print(f"best checkpoint{value}: {callback.best_model_path}")
        elif callback.monitor:
            warnings.warn(
                f"no best checkpoint: training ended before any validation computed {callback.monitor} (no "
                "val_period or val_trajectories, trainer.limit_val_batches 0, or trainer.max_steps reached within the "
                "first epoch); the last checkpoint holds the final weights",
                stacklevel=1,
            )
        if callback.last_model_path:
            print(f"last checkpoint: {callback.last_model_path}")

    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning's run; a run that fails before it logs or checkpoints anything leaves no log
        directory behind (the next run takes that version_N, as the README's paths assume)."""
        refuse_used_log_dirs(self.trainer)
        created = new_log_dirs(self.trainer)
        try:
            with warnings.catch_warnings():
                if subcommand != "fit":  # validate and test restore ModelCheckpoint's state, which they never use
                    warnings.filterwarnings("ignore", message="The dirpath has changed from", category=UserWarning)
                    # nor EMA's (the ERA5 configs hold it): Lightning's advice, to remove the callback,
                    # does not fit a config shared with fit
                    warnings.filterwarnings("ignore", message="You're using the WeightAveraging callback, but loading")
                super()._run_subcommand(subcommand)
        except BaseException as error:
            if self.trainer.is_global_zero:
                # and the WandbLogger's run directory, known only once its run started
                created += [path for c in self.trainer.callbacks if isinstance(c, RunConfig) for path in c.created]
                remove_unused_log_dirs(sorted(set(created), key=lambda path: len(path.parts), reverse=True))
            # Lightning ends a run stopped by SIGTERM (timeout, scancel, preemption) with exit status 0, as a
            # finished one, and a Ctrl-C with 1, a bug's status: 143 and 130 (cli.py's "interrupted"), as a shell's
            if isinstance(error, SIGTERMException):
                if self.trainer.is_global_zero:
                    advice = (f" at step {self.trainer.global_step}, unfinished; resume from its last checkpoint with "
                              "--ckpt_path last" if subcommand == "fit" else ", unfinished; run it again")  # fmt: skip
                    sys.stderr.write(f"s2forecast {subcommand}: stopped by SIGTERM{advice}\n")
                raise SystemExit(128 + signal.SIGTERM) from None
            if isinstance(error, SystemExit) and self.trainer.interrupted:
                raise KeyboardInterrupt from None
            raise


def refuse_used_log_dirs(trainer) -> None:
    """A CSV or TensorBoard log directory that already holds files (a fixed
    ``trainer.logger.init_args.version`` of an earlier run) is refused: Lightning would replace that
    run's metrics.csv and hparams.yaml with this one's. Checked on every rank, before any writes: a
    refusal on rank 0 alone left the others waiting for it in the process group's set-up (under
    ``srun``, which does not end a job step when one task fails, until the group's timeout)."""
    for logger in trainer.loggers:
        if isinstance(logger, CSVLogger | TensorBoardLogger):
            log_dir = Path(logger.log_dir)
            if log_dir.is_dir() and any(entry.is_file() for entry in log_dir.iterdir()):
                raise UserError(
                    f"log directory {log_dir} holds an earlier run's records, which this run would replace; leave "
                    "trainer.logger.init_args.version out (a new version_N) or give an unused one"
                )


def new_log_dirs(trainer) -> list[Path]:
    """The log directories of ``trainer``'s CSV and TensorBoard loggers that do not exist yet, with
    their parents that do not exist either, deepest first."""
    created = set()
    for logger in trainer.loggers:
        if isinstance(logger, CSVLogger | TensorBoardLogger):
            created.update(new_directories(Path(logger.log_dir).absolute()))
    return sorted(created, key=lambda path: len(path.parts), reverse=True)


def remove_unused_log_dirs(created: list[Path]) -> None:
    """Remove the directories of ``created`` (this run made them; deepest first) that hold nothing
    but empty directories and the records a run writes before any result (``RUN_RECORDS``)."""
    for path in created:
        if not path.is_dir():
            continue
        entries = list(path.rglob("*"))
        files = [entry for entry in entries if not entry.is_dir() or entry.is_symlink()]
        if any(entry.name not in RUN_RECORDS or entry.parent != path or entry.is_symlink() for entry in files):
            continue  # a checkpoint, logged metrics or anything else: kept
        for entry in files:
            entry.unlink()
        for directory in sorted(set(entries) - set(files), key=lambda p: len(p.parts), reverse=True):
            directory.rmdir()
        path.rmdir()


def _lazy_instance(class_type: type, **kwargs):
    """jsonargparse's ``lazy_instance``, called on a thread of its own: it calls ``inspect.stack()``,
    which reads every frame of its caller's stack (50 ms a run under pytest-xdist, 1 ms at a shell);
    a new thread's stack is a few frames. The lazy class is still made in this module."""
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(lambda: lazy_instance(class_type, **kwargs)).result()


def trainer_defaults() -> dict:
    """CSV logging under runs/ (replace with ``trainer.logger``), and always-present callbacks:
    checkpoints of the best (lowest val/loss) and the last epoch, learning-rate logging (dropped
    in a run without a logger: ``ForecastCLI.instantiate_trainer``)."""
    return {
        "logger": _lazy_instance(CSVLogger, save_dir="runs"),
        "callbacks": [
            LastAtStop(monitor="val/loss", mode="min", save_last=True, filename="best-{epoch}-{step}"),
            LearningRateMonitor(logging_interval="step"),
        ],
    }


def run(argv: list[str], execute: bool = True) -> ForecastCLI:
    """Run a Lightning subcommand; ``argv`` starts with one of ``COMMANDS``. ``execute=False``: only
    build the model, DataModule and Trainer (``argv`` without the subcommand).

    Raises:
        ConfigError: a configuration error (unknown key, wrong type, bad class_path, missing
            key, missing or invalid YAML file), in one line.
    """
    # raise, so that `s2forecast` can report one line; no abbreviations (--trainer.max_epoch was max_epochs, in
    # silence), as the other commands take none
    no_exit = {"exit_on_error": False, "allow_abbrev": False}
    safe_parsing()
    return ForecastCLI(
        ForecastModule,
        FieldDataModule,
        subclass_mode_data=True,
        args=argv,
        trainer_defaults=trainer_defaults(),
        seed_everything_default=0,
        save_config_callback=RunConfig,
        # the model's optimizer and schedule (model.lr, weight_decay, warmup_steps): Lightning's --optimizer and
        # --lr_scheduler replaced them while the checkpoint recorded model.lr (a review found it)
        auto_configure_optimizers=False,
        parser_kwargs={"prog": "s2forecast", **no_exit, **{command: dict(no_exit) for command in COMMANDS}},
        run=execute,
    )
