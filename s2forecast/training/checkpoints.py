"""Reading checkpoints without running code from them, and finding a run's ``last.ckpt``.

A checkpoint is a pickle, and unpickling can call any importable function. Every checkpoint
s2forecast reads (the CLI's ``--ckpt_path``, Lightning's restore through
``WeightsOnlyCheckpointIO``, ``s2forecast rollout``, the scripts) goes through
``read_checkpoint``: ``torch.load(..., weights_only=True)`` on a local file, so only tensors and
plain values (numbers, strings, lists, tuples, dicts) come out; anything else is refused with
one line. Our checkpoints hold nothing else (tested). URLs are refused rather than downloaded:
Lightning would fetch them with ``weights_only=False`` into a cache, once per DDP process, and a
local copy (``curl -fLo model.ckpt URL``) is what the user can keep, check and hash (rollout
records the checkpoint's sha256).

``--ckpt_path last`` resumes the newest ``last.ckpt`` of the run's own experiment, the
directory ``<save_dir>/<name>`` of the first logger (``runs/<name>`` with the default
CSVLogger; for the WandbLogger ``name`` is its project), in any of its versions
(``<save_dir>/<name>/*/checkpoints/``); without a logger, ``<default_root_dir>/checkpoints``.
Each start of a CSVLogger run makes a new ``version_N``, so resuming means "the latest version
of this experiment", never another experiment's directory.
"""

import pickle
import re
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
LAST = re.compile(r"^last(-v\d+)?\.ckpt$")  # Lightning versions the name when two callbacks save "last"


def local_checkpoint(path: str | Path) -> Path:
    """``path`` as an existing local file; raises ValueError for URLs, FileNotFoundError otherwise."""
    if URL.match(str(path)):
        raise ValueError(
            f"checkpoint {path} is a URL; s2forecast reads checkpoints from local files only: download it "
            "first (e.g. curl -fLo model.ckpt URL) and pass the file"
        )
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    return Path(path)


def read_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict:
    """The checkpoint at ``path``, loaded weights-only (tensors and plain values, no code).

    Raises:
        ValueError: a URL; a file whose pickle needs anything else (it is not loaded); a file
            that is not a PyTorch checkpoint.
        FileNotFoundError: no file at ``path``.
    """
    path = local_checkpoint(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL (\S+) was not an allowed global", str(error))
        what = f"it references {found.group(1)}" if found else "it is not a plain PyTorch checkpoint"
        raise ValueError(
            f"checkpoint {path} refused: {what}, and s2forecast loads checkpoints weights-only (tensors and plain "
            "values; it never runs code from a file); use a checkpoint saved by s2forecast fit"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        reason = str(error).splitlines()[0] if str(error) else "empty or truncated file"
        raise ValueError(f"{path} is not a readable PyTorch checkpoint ({reason})") from None
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dictionary")
    return checkpoint


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
        raise ValueError(
            f"--ckpt_path last: no last.ckpt in {where}; start without --ckpt_path, set "
            "trainer.logger.init_args.name to the experiment to resume, or pass a checkpoint file"
        )
    return max(found, key=lambda path: path.stat().st_mtime)
