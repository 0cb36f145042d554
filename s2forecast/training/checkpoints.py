"""Checkpoints in Lightning: restoring weights-only, and finding a run's ``last.ckpt``.

Every checkpoint Lightning restores goes through ``s2forecast.models.checkpoint.read_checkpoint``
(``WeightsOnlyCheckpointIO``): weights-only, local files only (see that module).

``--ckpt_path last`` resumes the newest ``last.ckpt`` of the run's own experiment, the
directory ``<save_dir>/<name>`` of the first logger (``runs/<name>`` with the default
CSVLogger; for the WandbLogger ``name`` is its project), in any of its versions
(``<save_dir>/<name>/*/checkpoints/``); without a logger, ``<default_root_dir>/checkpoints``.
Each start of a CSVLogger run makes a new ``version_N``, so resuming means "the latest version
of this experiment", never another experiment's directory.
"""

import re
from pathlib import Path

from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO

from s2forecast.models.checkpoint import read_checkpoint
from s2forecast.user_errors import UserError

LAST = re.compile(r"^last(-v\d+)?\.ckpt$")  # Lightning versions the name when two callbacks save "last"


class WeightsOnlyCheckpointIO(CheckpointIO):
    """Lightning's checkpoint IO with every load through ``read_checkpoint``, whatever
    ``weights_only`` Lightning passes (None, or False for URLs); saving and removing are left
    to the IO it wraps."""

    def __init__(self, inner: CheckpointIO):
        self.inner = inner

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return read_checkpoint(path, map_location)

    def remove_checkpoint(self, path) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


def last_checkpoint(trainer) -> Path:
    """The newest ``last.ckpt`` (or Lightning's ``last-vN.ckpt``) of ``trainer``'s experiment, in
    any of its versions: see the module docstring. Raises ValueError when there is none."""
    logger = trainer.logger
    if logger is None:
        where = Path(trainer.default_root_dir) / "checkpoints"
        directories = [where]
    else:
        save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
        experiment = Path(save_dir) / str(logger.name)
        where = experiment / "*" / "checkpoints"
        directories = list(experiment.glob("*/checkpoints"))
    found = [path for directory in directories for path in directory.glob("last*.ckpt") if LAST.match(path.name)]
    if not found:
        raise UserError(
            f"--ckpt_path last: no last.ckpt in {where}; start without --ckpt_path, set "
            "trainer.logger.init_args.name to the experiment to resume, or pass a checkpoint file"
        )
    return max(found, key=lambda path: path.stat().st_mtime)
