"""Issue 29: a run stopped by max_steps in the middle of an epoch and continued with a larger
max_steps (`--ckpt_path last`) trains the rest of that epoch, in its order, at the learning rates
of the larger run: it ends bit-identical to a run that went to the larger max_steps at once."""

import math
import os
import signal

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from session_fixtures import tiny_args

from s2forecast.cli import main as cli
from s2forecast.training.checkpoints import read_checkpoint, refuse_a_cut_optimizer_step

# no validation: Lightning then saves last.ckpt when training ends, after closing the cut epoch.
# warmup_steps 6: the schedules of a 7-step and a 10-step fit agree on steps 0-6 (warm-up, then
# the peak at step 6), so the 10-step run is the reference for every step; from step 7 the cosine
# decays to 0 at step 7 in the 7-step plan but only at step 10 in the 10-step one.
COMMON = ["--data.init_args.val_trajectories", "null", "--trainer.limit_val_batches", "0",
          "--model.warmup_steps", "6", "--trainer.callbacks+=test_resume_max_steps.Seen"]  # fmt: skip


class Seen(pl.Callback):
    """(step, batch index, samples, learning rate) of every training batch."""

    rows: list[tuple] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        Seen.rows.append((trainer.global_step, batch_idx, batch.init_times.tolist(), lr))


def identical(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            identical(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


EMA = ["--trainer.callbacks+=s2forecast.training.callbacks.EMAWeightAveraging"]


# 3: inside the warm-up, whose ramp a cap squeezed into 3 steps. EMA: the last checkpoint, saved
# at the end of training after the average replaced the weights, resumed from the average
@pytest.mark.parametrize("stop, extra", [(7, []), (3, []), (7, EMA)], ids=["mid-epoch", "in-warm-up", "ema"])
def test_raising_max_steps_mid_epoch_continues_the_epoch_and_the_schedule(swe_store, tmp_path, stop, extra):
    Seen.rows = []
    cli(["fit", *tiny_args(swe_store, tmp_path / "straight", *COMMON, *extra, "--trainer.max_steps", "10")])
    straight = Seen.rows
    Seen.rows = []
    split = tiny_args(swe_store, tmp_path / "split", *COMMON, *extra)
    cli(["fit", *split, "--trainer.max_steps", str(stop)])
    (cut,) = (tmp_path / "split").rglob("last.ckpt")
    assert read_checkpoint(cut)["global_step"] == stop  # mid-epoch (5 batches an epoch)
    cli(["fit", *split, "--trainer.max_steps", "10", "--ckpt_path", "last"])
    assert [row[:2] for row in Seen.rows[stop:]] == [(step, step % 5) for step in range(stop, 10)]  # the epoch's rest
    assert Seen.rows == straight  # every step's samples, at the 10-step run's learning rates
    a = read_checkpoint(next((tmp_path / "straight").rglob("last.ckpt")))
    b = read_checkpoint(max((tmp_path / "split").rglob("last*.ckpt"), key=lambda p: p.stat().st_mtime))
    assert a["global_step"] == b["global_step"] == 10
    keys = ("state_dict", "optimizer_states", "lr_schedulers", "rollout", "epoch")
    for key in keys + (("current_model_state",) if extra else ()):
        identical(a[key], b[key], key)


# With validation on. "epoch end": the last checkpoint of an epoch is saved at its validation,
# before Lightning counts the epoch completed; resumed with max_steps set, Lightning (2.6) counted
# that epoch twice and the next one served no batch: the fit ended at once, having trained nothing.
# "between validations": stopped at step 7 (epoch 1, 2 of its 5 batches), the last checkpoint
# held step 5, of epoch 0's validation, and the resume trained steps 6 and 7 again (both found by
# a review). min_lr_ratio 1: the two fits' learning-rate plans agree.
@pytest.mark.parametrize("first", [["--trainer.max_epochs", "1"], ["--trainer.max_steps", "7"]],
                         ids=["epoch end", "between validations"])  # fmt: skip
def test_a_validated_fit_resumed_with_max_steps_goes_on_as_the_uninterrupted_one(swe_store, tmp_path, first):
    validated = ["--model.min_lr_ratio", "1", "--trainer.callbacks+=test_resume_max_steps.Seen"]
    Seen.rows = []
    cli(["fit", *tiny_args(swe_store, tmp_path / "straight", *validated, "--trainer.max_steps", "10")])
    straight = Seen.rows
    Seen.rows = []
    split = tiny_args(swe_store, tmp_path / "split", *validated)
    cli(["fit", *split, *first])
    (cut,) = (tmp_path / "split").rglob("last.ckpt")
    assert read_checkpoint(cut)["global_step"] == len(Seen.rows)  # every step of the first fit saved
    cli(["fit", *split, "--trainer.max_steps", "10", "--ckpt_path", "last"])
    assert Seen.rows == straight  # the rest, batch for batch, at the same rates
    a = read_checkpoint(next((tmp_path / "straight").rglob("last.ckpt")))
    b = read_checkpoint(max((tmp_path / "split").rglob("last*.ckpt"), key=lambda p: p.stat().st_mtime))
    assert a["global_step"] == b["global_step"] == 10
    for key in ("state_dict", "optimizer_states", "epoch"):
        identical(a[key], b[key], key)


def test_a_fit_resumed_without_its_ema_callback_goes_on_from_the_trained_weights(swe_store, tmp_path, recwarn,
                                                                                monkeypatch):  # fmt: skip
    """It went on from the average (the checkpoint's state_dict) with the optimizer state of the trained
    weights, in silence (a review found it): now from ``current_model_state``, with a warning."""
    run = tiny_args(swe_store, tmp_path, *COMMON)
    cli(["fit", *run, *EMA, "--trainer.max_steps", "2"])
    (checkpoint,) = tmp_path.rglob("last.ckpt")
    saved = read_checkpoint(checkpoint)
    assert any(not torch.equal(saved["state_dict"][k], v) for k, v in saved["current_model_state"].items())
    started = []
    monkeypatch.setattr(Seen, "on_train_start", lambda self, trainer, module: started.append(
        {k: v.clone() for k, v in module.state_dict().items()}), raising=False)  # fmt: skip
    cli(["fit", *run, "--trainer.max_steps", "3", "--ckpt_path", str(checkpoint)])
    identical(started[0], saved["current_model_state"], "weights at the resume")
    assert any("trained with EMAWeightAveraging and this fit has no such callback" in str(w.message) for w in recwarn)


class Signal(pl.Callback):
    """Sends ``signum`` to this process after the second training step (a terminal's Ctrl-C, or the
    SIGTERM of timeout, scancel or a preemption)."""

    signum = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 2:
            os.kill(os.getpid(), Signal.signum)

    def on_validation_batch_end(self, trainer, *args):
        if not trainer.training:  # validate's own run, not fit's validation
            os.kill(os.getpid(), Signal.signum)


@pytest.mark.parametrize(("command", "signum", "status", "line"), [
    ("fit", signal.SIGINT, 130, "s2forecast fit: interrupted"),
    ("fit", signal.SIGTERM, 143, "s2forecast fit: stopped by SIGTERM at step 2, unfinished; resume from its last "
     "checkpoint with --ckpt_path last"),
    ("validate", signal.SIGTERM, 143, "s2forecast validate: stopped by SIGTERM, unfinished; run it again"),
])  # fmt: skip
def test_a_run_stopped_by_a_signal_says_so_and_exits_as_a_shell_would(
    swe_store, mse_run_1_epoch, tmp_path, capsys, monkeypatch, command, signum, status, line
):
    """Lightning ended a Ctrl-C with exit status 1 (a bug's, with no 'interrupted' line) and a SIGTERM
    with 0, as a finished run: `fit && rollout` went on (a review found both); validate was told to
    resume from a checkpoint, which only fit does."""
    monkeypatch.setattr(Signal, "signum", signum)
    handler = signal.getsignal(signal.SIGINT)
    # as in a fresh `s2forecast` process: an earlier test in this worker may have left SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as exit_info:
            # validate: with its validation batches, of a checkpoint
            run = COMMON[:-1] if command == "fit" else ["--ckpt_path", str(mse_run_1_epoch.checkpoint)]
            cli([command, *tiny_args(swe_store, tmp_path, *run, "--trainer.max_steps", "5",
                                     "--trainer.callbacks+=test_resume_max_steps.Signal")])  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores SIGINT once it has taken one
    assert exit_info.value.code == status
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(line)


def test_a_checkpoint_inside_an_accumulated_optimizer_step_is_refused(swe_store, tmp_path, capsys):
    """A review found: a checkpoint saved between the micro-batches of a step (a validation at a fraction
    of the epoch, a save on SIGTERM) resumed in silence, without the step's first gradients, to other
    weights than the uninterrupted run's."""
    run = tiny_args(swe_store, tmp_path, *COMMON[:-1], "--trainer.accumulate_grad_batches", "2")
    cli(["fit", *run, "--trainer.max_steps", "1"])
    (checkpoint,) = tmp_path.rglob("last.ckpt")
    saved = read_checkpoint(checkpoint)
    progress = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert saved["accumulate_grad_batches"] == 2 and progress["current"]["processed"] == 2
    refuse_a_cut_optimizer_step(saved)  # saved between steps: taken
    for counter in ("current", "total"):  # as a save after the next batch leaves it: one batch into step 2
        progress[counter] = {key: value + 1 for key, value in progress[counter].items()}
    torch.save(saved, tmp_path / "cut.ckpt")
    with pytest.raises(SystemExit) as exit_info:
        cli(["fit", *run, "--trainer.max_steps", "2", "--ckpt_path", str(tmp_path / "cut.ckpt")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "s2forecast fit: error: the checkpoint was saved after batch 3 of its epoch, inside an optimizer step of "
        "trainer.accumulate_grad_batches 2: the gradients of the step's 1 batch(es) so far are in no checkpoint, and "
        "a fit resumed from it would not be the run it continues; resume from a checkpoint saved between steps (at "
        "an epoch's end, or every_n_train_steps)"
    )


def test_a_resume_with_another_batch_size_ends_its_decay_with_the_fit(swe_store, tmp_path):
    """The plan spanned max_epochs x the epoch's steps at the new batch size, not the steps taken plus
    those left: after 3 steps of batch 2, batch 4 trained its last 2 steps at lr 0 (and batch 1 ended
    the fit at 12% of the peak: a review found both). Now each fit's decay ends with it."""
    run = tiny_args(swe_store, tmp_path, *COMMON[:4], "--trainer.callbacks+=test_resume_max_steps.Seen")
    cli(["fit", *run, "--trainer.max_steps", "3"])  # 5 batches of 2 an epoch: stopped mid-epoch 0
    (checkpoint,) = tmp_path.rglob("last.ckpt")
    Seen.rows = []
    cli(["fit", *run, "--data.init_args.batch_size", "4", "--ckpt_path", str(checkpoint)])
    steps = [3, 4, 5]  # the rest of epoch 0 (1 batch of 4), then epoch 1 (2)
    assert [step for step, *_ in Seen.rows] == steps
    # the cosine from the warm-up's end (step 2, peak 1e-3) to the fit's end (step 6: 0.0)
    decay = [1e-3 * 0.5 * (1 + math.cos(math.pi * (step - 2) / (6 - 2))) for step in steps]
    np.testing.assert_allclose([lr for *_, lr in Seen.rows], decay, rtol=1e-12)


def test_a_checkpoint_of_an_epochs_last_batch_resumes_as_the_uninterrupted_run(swe_store, tmp_path):
    """A review found: a checkpoint saved on an epoch's last batch, before the epoch's end (here by
    every_n_train_steps on step 5 of 5), was taken by Lightning for a restart mid-epoch: the next epoch
    ran without on_train_epoch_start (rollout 1 where the schedule says 2) and, on fewer ranks, ended early."""
    every = ["--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.every_n_train_steps=5",
             "--trainer.callbacks.save_top_k=-1", "--trainer.callbacks.filename=step{step}"]  # fmt: skip
    run = tiny_args(swe_store, tmp_path / "straight", *COMMON[:4], *every)
    cli(["fit", *run])  # 2 epochs of 5 steps, rollout 2 in the second
    (cut,) = (tmp_path / "straight").rglob("step*=5.ckpt")
    assert read_checkpoint(cut)["loops"]["fit_loop"]["epoch_loop.batch_progress"]["is_last_batch"]
    cli(["fit", *tiny_args(swe_store, tmp_path / "resumed", *COMMON[:4]), "--ckpt_path", str(cut)])
    (straight,), (resumed,) = ((tmp_path / name).rglob("last.ckpt") for name in ("straight", "resumed"))
    a, b = read_checkpoint(straight), read_checkpoint(resumed)
    assert a["global_step"] == b["global_step"] == 10 and a["rollout"] == b["rollout"] == 2
    for key in ("state_dict", "optimizer_states", "lr_schedulers"):
        identical(a[key], b[key], key)


def test_fast_dev_run_saves_no_last_checkpoint(monkeypatch, tmp_path):
    """Lightning's ModelCheckpoint.on_train_end saves the last checkpoint even under fast_dev_run, whose
    dummy logger sends it to the working directory: a new last-vN.ckpt there at every trial run."""
    from types import SimpleNamespace

    from pytorch_lightning.callbacks import ModelCheckpoint

    from s2forecast.training.checkpoints import LastAtStop

    ends = []
    monkeypatch.setattr(ModelCheckpoint, "on_train_end", lambda self, trainer, module: ends.append(trainer))
    monkeypatch.setattr(LastAtStop, "_should_skip_saving_checkpoint", lambda self, trainer: True)
    callback = LastAtStop(dirpath=tmp_path, save_last=True)
    callback.on_train_end(SimpleNamespace(fast_dev_run=1), None)
    assert ends == []
    callback.on_train_end(SimpleNamespace(fast_dev_run=False), None)  # a real fit: Lightning's end runs
    assert len(ends) == 1


def test_fast_dev_run_says_it_wrote_no_checkpoint(capsys, recwarn):
    """Not "the last checkpoint holds the final weights": there is none."""
    from types import SimpleNamespace

    from s2forecast.training.cli import ForecastCLI

    trainer = SimpleNamespace(checkpoint_callback=object(), is_global_zero=True, fast_dev_run=1, global_step=1)
    ForecastCLI.after_fit(SimpleNamespace(trainer=trainer))
    assert capsys.readouterr().out == "fast_dev_run: no checkpoint written\n" and not recwarn.list
