"""Issue 18: a normal run prints no warning the user cannot act on.

The tiny pipeline runs in a fresh Python process, as a user's commands do: Python's default
warning filters (not pytest's), Lightning's log lines on stderr."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "swe" / "s2_global.yaml"
# warnings that name a setting the user can change: allowed in a run
ACTIONABLE = re.compile(
    r"num_workers|--climatology|no best checkpoint: training ended before any validation|model\.warmup_steps"
)
NOISE = re.compile(r"Warning|warn|deprecat|💡|Tip:|litlogger|litmodels|^\S+\.py:\d+: ", re.I)

PIPELINE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from s2forecast.cli import main

    work = Path(sys.argv[1])
    store, config = str(work / "swe.zarr"), sys.argv[2]
    main(["generate-swe", "--out", store, "--nlat", "8", "--nlon", "16", "--trajectories", "3", "--steps", "6",
          "--no-progress"])
    main(["stats", store, "--no-progress"])
    main(["climatology", store, "--out", str(work / "clim.zarr"), "--no-progress"])
    main(["fit", "--config", config, "--data.init_args.store", store,
          "--data.init_args.train_trajectories", "[0, 2]", "--data.init_args.val_trajectories", "[2, 3]",
          "--data.init_args.test_trajectories", "null", "--data.init_args.batch_size", "2",
          "--model.network.embed_dim", "8", "--model.network.num_layers", "1", "--trainer.max_epochs", "1",
          "--trainer.logger.init_args.save_dir", str(work / "runs"),
          "--trainer.default_root_dir", str(work)])
    # a fit without validation: no Lightning hint about log('val/loss'), our line instead
    main(["fit", "--config", config, "--data.init_args.store", store,
          "--data.init_args.train_trajectories", "[0, 2]", "--data.init_args.val_trajectories", "null",
          "--data.init_args.batch_size", "2", "--model.network.embed_dim", "8", "--model.network.num_layers", "1",
          "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
          "--trainer.logger.init_args.save_dir", str(work / "runs_without_validation"),
          "--trainer.default_root_dir", str(work)])
    ckpt = str(next((work / "runs").rglob("last.ckpt")))
    for fmt, out in (("netcdf", "fc.nc"), ("zarr", "fc.zarr")):
        main(["rollout", "--ckpt", ckpt, "--store", store, "--steps", "2", "--device", "cpu", "--no-progress",
              "--init-times", "2000-01-01T00,2000-01-01T01", "--format", fmt, "--out", str(work / out)])
    main(["evaluate", "--forecast", str(work / "fc.zarr"), "--truth", store, "--climatology",
          str(work / "clim.zarr"), "--out", str(work / "m.nc"), "--no-plots", "--no-progress"])
    """
)


@pytest.mark.slow  # a whole pipeline in a subprocess
def test_tiny_pipeline_prints_no_warning_the_user_cannot_act_on(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}  # a user's defaults
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-c", PIPELINE, str(tmp_path), str(CONFIG)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and (tmp_path / "m.nc").is_file()
    assert "Trainable params" in result.stderr  # Lightning's log lines are seen here, so the next checks can fail
    noisy = [line for line in result.stderr.splitlines() if NOISE.search(line) and not ACTIONABLE.search(line)]
    assert noisy == [], result.stderr
    # issue 28: no news about devices the machine lacks, no progress-bar escapes in a redirected output
    assert "GPU available: False" not in result.stderr and "TPU available: False" not in result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    # our warnings are one line each, without the source line Python's format adds
    assert "s2forecast evaluate: warning: ACC is not meaningful here" in result.stderr
    assert "s2forecast fit: warning: no best checkpoint: training ended before any validation" in result.stderr


def test_noise_pattern_catches_what_was_printed_before():
    """The lines issue 18 found (shortened) are caught by the check above."""
    printed = [
        "/site-packages/s2forecast/inference/rollout.py:265: UserWarning: The given NumPy array is not writable",
        "/site-packages/zarr/api/asynchronous.py:247: ZarrUserWarning: Consolidated metadata is currently not part",
        "/site-packages/pytorch_lightning/utilities/_pytree.py:21: `isinstance(treespec, LeafSpec)` is deprecated",
        "💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger](...)",
    ]
    assert all(NOISE.search(line) and not ACTIONABLE.search(line) for line in printed)
    assert not NOISE.search("GPU available: False, used: False")
