"""Reading checkpoints without running code from them.

A checkpoint is a pickle, and unpickling can call any importable function. Every checkpoint
s2forecast reads (``Forecaster.from_checkpoint``, the CLI's ``--ckpt_path``, Lightning's
restore through ``training.checkpoints.WeightsOnlyCheckpointIO``, the scripts) goes through
``read_checkpoint``: ``torch.load(..., weights_only=True)`` on a local file, so only tensors and
plain values (numbers, strings, lists, tuples, dicts) come out; anything else is refused with
one line. Our checkpoints hold nothing else (tested). URLs are refused rather than downloaded:
Lightning would fetch them with ``weights_only=False`` into a cache, once per DDP process, and a
local copy (``curl -fLo model.ckpt URL``) is what the user can keep, check and hash (rollout
records the checkpoint's sha256). This module imports no Lightning: inference needs none.
"""

import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from s2forecast.urls import is_url
from s2forecast.user_errors import UserError


def local_checkpoint(path: str | Path) -> Path:
    """``path`` as an existing local file; raises ValueError for URLs, FileNotFoundError otherwise."""
    if is_url(str(path)):
        raise UserError(
            f"checkpoint {path} is a URL; s2forecast reads checkpoints from local files only: download it "
            "first (e.g. curl -fLo model.ckpt URL) and pass the file"
        )
    local = Path(path).expanduser()  # a quoted or YAML "~/run/last.ckpt" is the home directory, as --out's
    if local.is_dir():  # a run's directory: name a checkpoint in it (bounded: a large tree is not walked)
        patterns = ("*/checkpoints/last.ckpt", "checkpoints/last.ckpt", "last.ckpt")
        found = next((ckpt for pattern in patterns for ckpt in sorted(local.glob(pattern))), None)
        hint = f", e.g. {found}" if found else " (s2forecast fit writes RUN/version_N/checkpoints/last.ckpt)"
        raise FileNotFoundError(f"no checkpoint file at {path}: it is a directory; pass a checkpoint file{hint}")
    if not local.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    return local


def read_checkpoint(path: str | Path, map_location: Any = "cpu", mmap: bool = False) -> dict:
    """The checkpoint at ``path``, loaded weights-only (tensors and plain values, no code);
    ``mmap``: its tensors mapped from the file, read only where used (to look at other entries).

    Raises:
        ValueError: a URL; a file whose pickle needs anything else (it is not loaded); a file
            that is not a PyTorch checkpoint.
        FileNotFoundError: no file at ``path``.
    """
    path = local_checkpoint(path)
    try:
        with warnings.catch_warnings():  # a foreign pickle's protocol notice: it is refused next anyway
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL (\S+) was not an allowed global", str(error))
        what = f"it references {found.group(1)}" if found else "it is not a plain PyTorch checkpoint"
        raise UserError(
            f"checkpoint {path} refused: {what}, and s2forecast loads checkpoints weights-only (tensors and plain "
            "values; it never runs code from a file); use a checkpoint saved by s2forecast fit"
        ) from None
    except (RuntimeError, EOFError, OSError, KeyError, IndexError) as error:  # Key/IndexError: a text file
        reason = str(error).splitlines()[0] if str(error) else "empty or truncated file"
        reason = reason if not isinstance(error, KeyError | IndexError) else f"{type(error).__name__}: {reason}"
        raise UserError(
            f"{path} is not a readable PyTorch checkpoint ({reason}); pass a checkpoint written by s2forecast fit (a "
            "truncated copy: copy it again)"
        ) from None
    if not isinstance(checkpoint, dict):
        raise UserError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dictionary")
    return checkpoint
