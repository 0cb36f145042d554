"""Checkpoints in Lightning: restoring weights-only, and finding a run's ``last.ckpt``.

Every checkpoint Lightning restores goes through ``s2forecast.models.checkpoint.read_checkpoint``
(``WeightsOnlyCheckpointIO``): weights-only, local files only (see that module).

``--ckpt_path last`` resumes the newest ``last.ckpt`` of the run's own experiment, the
directory ``<save_dir>/<name>`` of the first logger (``runs/<name>`` with the default
CSVLogger), in any of its versions (``<save_dir>/<name>/*/checkpoints/``); without a logger,
``<default_root_dir>/checkpoints``. Each start of a CSVLogger run makes a new ``version_N``, so
resuming means "the latest version of this experiment", never another experiment's directory.
Other loggers do not name their directory after the run: the WandbLogger's ``name`` is its
project's, shared by every run of the project (``<save_dir>/<project>/<run id>/checkpoints``).
So every checkpoint records the name the run was given (``trainer.logger.init_args.name``;
``RunName``), and with such a logger ``last`` takes only the checkpoints that record this run's
name (those of before the record, or saved weights-only, are not found: pass the file).

A run that stops at ``max_steps`` in the middle of an epoch still runs Lightning's end of that
epoch, and a checkpoint saved then (``save_last`` at the end of training) records the epoch as
completed although its last batch never came: resumed with a larger ``max_steps``, Lightning
would start the next epoch and the rest of this one would never be trained.
``reopen_cut_epoch`` marks such an epoch as in progress when the checkpoint is loaded, so the
resumed run serves the rest of it, in its order (``datamodule.ResumableLoader``).
"""

import os
import re
from pathlib import Path

from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO
from pytorch_lightning import Callback
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

from s2forecast.models.checkpoint import read_checkpoint
from s2forecast.user_errors import UserError

LAST = re.compile(r"^last(-v\d+)?\.ckpt$")  # Lightning versions the name when two callbacks save "last"
# in every checkpoint a fit saves: what a fit may replace or rotate away (with the run-name record of
# checkpoints saved before it existed); a user's own checkpoint in the same directory is left alone
FIT_CHECKPOINT_KEY = "s2forecast_fit_checkpoint"


class WeightsOnlyCheckpointIO(CheckpointIO):
    """Lightning's checkpoint IO with every load through ``read_checkpoint``, whatever
    ``weights_only`` Lightning passes (None, or False for URLs), and removals and replacements
    limited to checkpoints.

    Lightning removes the checkpoints a ModelCheckpoint no longer keeps by the paths in its state,
    which a resumed run restores from the checkpoint: a crafted one (``local://`` paths, or
    ``..``, which Lightning's check that a path is in the callback's directory lets through) had
    any file or directory removed, recursively (a review found it). So a path is removed, as one
    file, only if this process saved it or it is a checkpoint file in a directory this process
    saves into (``remove_checkpoint``); a file that is there already is replaced only when it is a
    checkpoint a fit saved (an earlier run's, at a callback's fixed dirpath) or a link (the link itself).
    A fit's checkpoints are those with ``FIT_CHECKPOINT_KEY`` (or, saved before it, a ``RunName``
    record or ForecastModule's ``rollout`` and ``static_fields``): a checkpoint of the user's own
    (``torch.save``) at such a path is never replaced or removed.
    """

    def __init__(self, inner: CheckpointIO):
        self.inner = inner
        self.saved: set[str] = set()  # the files this process saved (``_local_path``)

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        target = _local_path(path)
        if target is None:
            raise UserError(f"checkpoint path {path}: checkpoints are saved to local paths; give a directory")
        replaced = os.path.lexists(target) and target not in self.saved and not os.path.islink(target)
        if replaced and not _is_fit_checkpoint(target):  # (a link is replaced itself, never written through)
            raise UserError(
                f"{target} is there and is not a checkpoint an s2forecast fit saved; saving one would replace it: "
                "give the checkpoint callback another dirpath or filename"
            )
        checkpoint = {**checkpoint, FIT_CHECKPOINT_KEY: 1}  # a copy: Lightning's dict stays as it made it
        self.inner.save_checkpoint(checkpoint, target, storage_options=storage_options)
        self.saved.add(target)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return read_checkpoint(path, map_location)

    def remove_checkpoint(self, path) -> None:
        """Remove ``path`` if this process saved it, or if it is a checkpoint file (not a link) in a
        directory this process saves into (an earlier run's top-k or last at a fixed dirpath, which
        Lightning rotates as before); anything else, directories and URLs included, is left."""
        target = _local_path(path)
        if target is None or not os.path.isfile(target) or os.path.islink(target):
            return
        ours = target in self.saved
        rotated = os.path.dirname(target) in {os.path.dirname(saved) for saved in self.saved}
        if ours or (rotated and target.endswith(".ckpt") and _is_fit_checkpoint(target)):
            os.unlink(target)
            self.saved.discard(target)

    def teardown(self) -> None:
        self.inner.teardown()


def _local_path(path) -> str | None:
    """A local ``path`` with its directory's real path (``~``, ``..`` and links resolved) and its own
    name kept (a link is the link, not its target); None for a URL (``local://``, ``file://`` and any
    other protocol)."""
    text = os.fspath(path)
    if "://" in text:
        return None
    expanded = os.path.expanduser(text)
    return os.path.join(os.path.realpath(os.path.dirname(expanded) or "."), os.path.basename(expanded))


def _is_fit_checkpoint(path: str) -> bool:
    try:
        checkpoint = read_checkpoint(path, mmap=True)
    except (UserError, OSError, ValueError):
        return False
    if FIT_CHECKPOINT_KEY in checkpoint:
        return True
    # saved before the key: a run-name record, or (a run without a logger has none) ForecastModule's own keys
    return "RunName" in (checkpoint.get("callbacks") or {}) or {"rollout", "static_fields"} <= checkpoint.keys()


class RunName(Callback):
    """Records the name the run was given in its checkpoints (``checkpoint["callbacks"]["RunName"]``),
    for ``--ckpt_path last`` (module docstring)."""

    def __init__(self, name: str):
        self.name = name

    @property
    def state_key(self) -> str:
        return "RunName"  # fixed: the key ``recorded_run_name`` reads

    def state_dict(self) -> dict:
        return {"name": self.name}


def _readable(path: Path) -> dict:
    """The checkpoint at ``path``, its tensors not read; {} for a file that cannot be read (e.g. one
    another run is writing)."""
    try:
        return read_checkpoint(path, mmap=True)
    except (UserError, FileNotFoundError):
        return {}


def _resumable(path: Path) -> bool:
    """Whether ``path`` holds the training state a resumed fit needs (not saved weights-only)."""
    checkpoint = _readable(path)
    return "optimizer_states" in checkpoint and "loops" in checkpoint


def recorded_run_name(path: Path) -> str | None:
    """The run name ``path`` records (``RunName``); None for a checkpoint of before the record,
    one saved weights-only, or a file that cannot be read (e.g. one another run is writing)."""
    return ((_readable(path).get("callbacks") or {}).get("RunName") or {}).get("name")


def last_checkpoint(trainer, run_name: str | None = None) -> Path:
    """The newest ``last.ckpt`` (or Lightning's ``last-vN.ckpt``) of ``trainer``'s experiment, in
    any of its versions; with a logger other than the CSV and TensorBoard loggers, the newest that
    records ``run_name``: see the module docstring. Raises a UserError when there is none."""
    logger = trainer.logger
    if logger is None:
        where = Path(trainer.default_root_dir).expanduser() / "checkpoints"
        directories = [where]
    else:
        save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
        experiment = Path(save_dir).expanduser() / str(logger.name)  # "~/runs": $HOME/runs, as Lightning
        where = experiment / "*" / "checkpoints"
        directories = list(experiment.glob("*/checkpoints"))
    found = [path for directory in directories for path in directory.glob("last*.ckpt") if LAST.match(path.name)]
    found.sort(key=lambda path: path.stat().st_mtime, reverse=True)
    # a run resumes from a full checkpoint: another ModelCheckpoint's weights-only last.ckpt may be newer
    found = [path for path in found if _resumable(path)] or found
    if logger is None or isinstance(logger, CSVLogger | TensorBoardLogger):
        if not found:
            raise UserError(
                f"--ckpt_path last: no last.ckpt in {where}; start without --ckpt_path, set "
                "trainer.logger.init_args.name to the experiment to resume, or pass a checkpoint file"
            )
        return found[0]
    # the directory is the project's, not the run's: only the run's own checkpoints
    kind = type(logger).__name__
    if run_name is None:
        raise UserError(
            f"--ckpt_path last with the {kind}: the run has no name to find its checkpoints by; set "
            "trainer.logger.init_args.name to the name of the run to resume, or pass a checkpoint file"
        )
    mine = next((path for path in found if recorded_run_name(path) == run_name), None)
    if mine is None:
        raise UserError(
            f"--ckpt_path last: no last.ckpt of the run named {run_name!r} in {where} ({len(found)} of other runs "
            f"of the {kind}'s project); start without --ckpt_path, set trainer.logger.init_args.name to the name of "
            "the run to resume, or pass a checkpoint file"
        )
    return mine


class LastAtStop(ModelCheckpoint):
    """Lightning's ModelCheckpoint, which also saves the last checkpoint when a fit stops
    between two validations (``max_steps`` in the middle of an epoch): Lightning's saves it at
    the end of training only if it never saved one, so the steps after the last validation were
    lost, and a resume trained them again."""

    def on_train_end(self, trainer, pl_module) -> None:
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):  # skips a step already saved
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        if not trainer.fast_dev_run:  # Lightning's own saves the last one even then, into the working directory
            super().on_train_end(trainer, pl_module)


def _fit_progress(checkpoint: dict) -> tuple[dict | None, dict | None]:
    """The epoch and batch progress counters of the fit loop that ``checkpoint`` records."""
    loop = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    return loop.get("epoch_progress"), loop.get("epoch_loop.batch_progress")


def refuse_a_cut_optimizer_step(checkpoint: dict) -> None:
    """A checkpoint saved between the micro-batches of an optimizer step (``accumulate_grad_batches``
    > 1, recorded by ``ForecastModule``: a validation at a fraction of the epoch, a save on SIGTERM)
    lacks the gradients of the step's batches so far, which no checkpoint holds: a fit resumed from it
    steps without them and is not the run it continues (a review found it silent). Refused."""
    accumulate = checkpoint.get("accumulate_grad_batches", 1)
    _, batches = _fit_progress(checkpoint)
    if accumulate <= 1 or not batches or batches.get("is_last_batch", True):
        return  # Lightning steps on an epoch's last batch, a whole accumulation or not
    done = batches["current"]["processed"]
    if done % accumulate:
        raise UserError(
            f"the checkpoint was saved after batch {done} of its epoch, inside an optimizer step of "
            f"trainer.accumulate_grad_batches {accumulate}: the gradients of the step's {done % accumulate} batch(es) "
            "so far are in no checkpoint, and a fit resumed from it would not be the run it continues; resume from "
            "a checkpoint saved between steps (at an epoch's end, or every_n_train_steps)"
        )


def end_epoch_of_last_batch(checkpoint: dict) -> None:
    """A checkpoint saved on an epoch's last batch, before the epoch's end (``every_n_train_steps`` on
    that step, or ``last`` of a run killed during that epoch's validation), is recorded as an epoch
    whose batches and end are done (then ``count_finished_epoch``'s form). Lightning (2.6) took it
    for a restart mid-epoch: it went on to the next epoch without ``on_train_epoch_start`` (the
    rollout schedule) and without resetting its batch count, which ended that epoch early on fewer
    ranks (a review found both)."""
    epochs, batches = _fit_progress(checkpoint)
    if not epochs or not batches or not batches.get("is_last_batch"):
        return
    counters = (epochs["current"], epochs["total"])
    if all(c["ready"] == c["started"] == c["processed"] + 1 == c["completed"] + 1 for c in counters):
        for counter in counters:
            counter["processed"] = counter["ready"]


def count_finished_epoch(checkpoint: dict) -> None:
    """An epoch whose batches and end were done when ``checkpoint`` was saved (the last
    checkpoint, saved at its validation, before Lightning counts the epoch completed) is
    recorded as completed. Lightning (2.6) restores such a checkpoint as "resumed on epoch
    end" and completes the epoch, except when ``max_steps`` is set: then it restarts the
    epoch's end, counts the epoch processed a second time, and the resumed fit's next epoch
    ran no batch (it trained nothing)."""
    epochs, batches = _fit_progress(checkpoint)
    if not epochs or not batches or not batches.get("is_last_batch"):
        return
    counters = (epochs["current"], epochs["total"])
    if not all(c["ready"] == c["started"] == c["processed"] == c["completed"] + 1 for c in counters):
        return
    for counter in counters:
        counter["completed"] = counter["processed"]
    # and the next epoch's batches start from none, as Lightning's reset of a new epoch leaves them
    batches["current"] = dict.fromkeys(batches["current"], 0)
    batches["is_last_batch"] = False


def reopen_cut_epoch(checkpoint: dict) -> None:
    """Mark the epoch of ``checkpoint`` as in progress if Lightning recorded it as completed
    although its last batch was never served (a stop at ``max_steps``; module docstring): the
    state of a checkpoint saved after that batch within the epoch."""
    epochs, batches = _fit_progress(checkpoint)
    if not epochs or not batches or batches.get("is_last_batch", True) or not batches["current"]["completed"]:
        return
    if epochs["current"]["completed"] < epochs["current"]["ready"]:
        return  # saved within the epoch: Lightning resumes it itself
    for counter in ("total", "current"):
        epochs[counter]["processed"] -= 1
        epochs[counter]["completed"] -= 1
    checkpoint["epoch"] = checkpoint.get("epoch", 1) - 1
