"""The configuration of a run, saved next to its checkpoints, never over a file.

``s2forecast fit | validate | test`` save the run's full configuration (what ``--print_config``
prints) as ``config.yaml`` in the run's own directory, the one that holds its ``checkpoints/``
(``run_directory``): ``<save_dir>/<name>/<version>`` of its first logger (``runs/<name>/version_N``
with the CSVLogger, ``<save_dir>/<project>/<run id>`` with the WandbLogger), or
``trainer.default_root_dir`` without a logger. Lightning's own callback writes into
``trainer.log_dir`` instead: the WandbLogger's ``save_dir``, where each run replaced the previous
run's file, or, without a logger, the working directory, where it replaced the user's own
``config.yaml``. Here the file is created exclusively: where one exists already (a run without a
logger in a directory that has one, a logger given a fixed version), it is left as it is and the
configuration is not saved, with one warning line.
"""

import warnings
from pathlib import Path

from pytorch_lightning.cli import SaveConfigCallback


def run_directory(trainer) -> Path:
    """The directory of ``trainer``'s run: where ModelCheckpoint puts ``checkpoints/`` by default
    (``<save_dir>/<name>/<version>`` of the first logger; ``default_root_dir`` without one). For
    the WandbLogger the version is the run's id, known once its experiment started (Lightning
    starts it before the callbacks' ``setup``)."""
    # expanded as Lightning expands them: "~/runs" wrote the checkpoints to $HOME/runs, config.yaml to ./~/runs
    if not trainer.loggers:
        return Path(trainer.default_root_dir).expanduser()
    logger = trainer.loggers[0]
    save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return Path(save_dir).expanduser() / str(logger.name) / version


def new_directories(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist, deepest first."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    return missing


class RunConfig(SaveConfigCallback):
    """Lightning's SaveConfigCallback, writing ``config.yaml`` into ``run_directory`` and never over
    a file (module docstring). ``created``: the directories it made (a run that fails before any
    result removes them, ``cli.remove_unused_log_dirs``)."""

    def __init__(self, parser, config, config_filename: str = "config.yaml", **kwargs):
        kwargs.pop("overwrite", None)  # never: the file is created exclusively
        super().__init__(parser, config, config_filename, **kwargs)
        self.created: list[Path] = []

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.already_saved:
            return
        self.already_saved = True  # on every rank: only the first process writes
        if not trainer.is_global_zero:
            return
        path = run_directory(trainer).absolute() / self.config_filename
        text = self.parser.dump(self.config, skip_none=False)
        self.created = new_directories(path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("x", encoding="utf-8") as file:  # exclusive: fails if it exists
                file.write(text)
        except FileExistsError:
            fix = "a trainer.default_root_dir of its own" if not trainer.loggers else "a new logger version (or none)"
            warnings.warn(
                f"the run's configuration is not saved: {path} exists and this run did not write it (left as it is); "
                f"give each run {fix} to keep its config.yaml next to its checkpoints",
                stacklevel=1,
            )
