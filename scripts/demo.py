#!/usr/bin/env python
"""`make demo`: the whole loop on built-in data, in a few minutes on a laptop CPU.

1. generate a shallow-water store (32x64, torch-harmonics' solver) unless it exists,
   and its normalization statistics;
2. train the S2 neighborhood Transformer (configs/swe/s2_neighborhood.yaml, narrower) for
   a fixed wall-clock budget with `s2forecast fit`;
3. roll it out 12 hourly steps from initial conditions of held-out trajectories
   (`s2forecast rollout` -> NetCDF);
4. score it against persistence and climatology (`s2forecast evaluate`: RMSE, ACC, bias
   per lead, CSV, plots) and print the table and where the files are.

Everything lands in --workdir (default data/demo); rerunning reuses the store.
"""

import argparse
import time
from pathlib import Path

from s2forecast.cli import main as s2forecast

REPO = Path(__file__).resolve().parents[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="data/demo")
    parser.add_argument("--train-minutes", type=float, default=4.0, help="wall-clock training budget")
    parser.add_argument("--steps", type=int, default=12, help="rollout steps (hours)")
    args = parser.parse_args()

    start = time.perf_counter()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    store = work / "swe.zarr"
    if not store.exists():
        print(f"[1/4] shallow-water store {store}", flush=True)
        s2forecast(["generate-swe", "--out", str(store), "--nlat", "32", "--nlon", "64", "--trajectories", "18",
                    "--steps", "36", "--dt-hours", "1", "--seed", "0"])  # fmt: skip
        s2forecast(["stats", str(store)])
    else:
        print(f"[1/4] reusing {store}", flush=True)

    print(f"[2/4] training for {args.train_minutes:g} min", flush=True)
    runs = work / "runs"
    minutes = int(args.train_minutes)
    seconds = int(round((args.train_minutes - minutes) * 60))
    s2forecast([
        "fit", "--config", str(REPO / "configs" / "swe" / "s2_neighborhood.yaml"),
        "--data.init_args.store", str(store),
        "--data.init_args.train_trajectories", "[0, 15]",
        "--data.init_args.val_trajectories", "[15, 16]",
        "--data.init_args.test_trajectories", "[16, 18]",
        "--data.init_args.num_workers", "0",
        "--data.init_args.batch_size", "8",
        "--data.init_args.rollout_steps", "2",
        "--model.rollout_max", "2",
        "--model.rollout_every_epochs", "4",
        "--model.network.embed_dim", "64",
        "--model.lr", "2e-3",
        "--model.warmup_steps", "20",
        "--trainer.max_epochs", "1000",
        "--trainer.max_time", f"00:00:{minutes:02d}:{seconds:02d}",
        "--trainer.enable_progress_bar", "false",
        "--trainer.callbacks+=s2forecast.training.callbacks.LossLine",
        "--trainer.callbacks.every_n_steps", "25",
        "--trainer.logger.init_args.save_dir", str(runs),
        "--trainer.default_root_dir", str(work),
    ])  # fmt: skip
    checkpoint = max(runs.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)

    print(f"[3/4] rollout of {args.steps} steps from {checkpoint}", flush=True)
    from s2forecast.datamodules import open_store

    ds = open_store(store)
    times, trajectory = ds["time"].values, ds["trajectory"].values
    inits = []
    for k in (16, 17):  # held-out trajectories: an initial time every 6 h whose forecast stays inside
        own = times[trajectory == k]
        inits += list(own[: len(own) - args.steps : 6])
    forecast = work / "forecast.nc"
    s2forecast([
        "rollout", "--ckpt", str(checkpoint), "--store", str(store), "--steps", str(args.steps),
        "--init-times", ",".join(str(t) for t in inits), "--out", str(forecast), "--device", "cpu", "--overwrite",
    ])  # fmt: skip

    print("[4/4] scoring against persistence and climatology", flush=True)
    metrics = work / "metrics.nc"
    s2forecast(["evaluate", "--forecast", str(forecast), "--truth", str(store), "--out", str(metrics), "--overwrite"])
    print(f"\nfiles: store {store}, checkpoint {checkpoint}, forecast {forecast}, metrics {metrics} "
          f"(+ .csv, plots in {metrics.with_suffix('')}_plots/)")  # fmt: skip
    print(f"demo finished in {(time.perf_counter() - start) / 60:.1f} min")


if __name__ == "__main__":
    main()
