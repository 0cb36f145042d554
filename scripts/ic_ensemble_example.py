#!/usr/bin/env python
"""The README's initial-condition ensemble plots (docs/images/ic_ensemble_*.png): an ensemble of
the deterministic model that ``make demo`` trains, made and scored with the commands a user runs.

Steps: ``s2forecast rollout --members 10 --perturbation spherical-noise --perturbation-scale 0.05
--seed 0`` of the demo's checkpoint from the demo's initial conditions (held-out shallow-water
trajectories 16 and 17, an initial time every 6 h, 12 hourly steps), then ``s2forecast evaluate
--regions global``, whose ensemble plots (CRPS, spread and spread-skill versus lead; rank
histograms) of the geopotential height are copied to ``--images``.

    python scripts/demo.py --workdir data/demo        # make demo: store, statistics, checkpoint
    python scripts/ic_ensemble_example.py --demo data/demo --work /tmp/ic_ensemble --images docs/images

``--work`` (created; must not exist) keeps the forecast, results and every plot; ``--images``
receives the two plots, never replacing an existing file.
"""

import argparse
import shutil
import sys
from pathlib import Path

FIELD = "geopotential_height"
MEMBERS, SCALE, STEPS = 10, 0.05, 12
EXAMPLES = {  # file evaluate writes -> name in --images
    f"{FIELD}_ensemble.png": "ic_ensemble_scores.png",
    f"{FIELD}_rank_histogram.png": "ic_ensemble_rank_histogram.png",
}


def demo_init_times(store: Path) -> list[str]:
    """The demo's initial conditions: every 6 h of trajectories 16 and 17 whose forecast stays inside."""
    from s2forecast.data import open_store

    ds = open_store(store)
    times, trajectory = ds["time"].values, ds["trajectory"].values
    inits = []
    for k in (16, 17):
        own = times[trajectory == k]
        inits += [str(t) for t in own[: len(own) - STEPS : 6]]
    return inits


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, required=True, help="the work directory of scripts/demo.py")
    parser.add_argument("--work", type=Path, required=True, help="working directory to create (must not exist)")
    parser.add_argument("--images", type=Path, help="directory to copy the ensemble plots into")
    args = parser.parse_args(argv)
    store = args.demo / "swe.zarr"
    checkpoints = sorted((args.demo / "runs").rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
    if not store.is_dir() or not checkpoints:
        print(
            f"{parser.prog}: error: no demo store and checkpoint in {args.demo}; run scripts/demo.py first",
            file=sys.stderr,
        )
        return 2
    if args.work.exists():
        print(
            f"{parser.prog}: error: --work {args.work} exists; give a new directory",
            file=sys.stderr,
        )
        return 2
    if args.images is not None:
        taken = [args.images / name for name in EXAMPLES.values() if (args.images / name).exists()]
        if taken:
            print(
                f"{parser.prog}: error: {', '.join(map(str, taken))} exist; remove them first to remake them",
                file=sys.stderr,
            )
            return 2

    from s2forecast.cli import main as s2forecast

    args.work.mkdir(parents=True)
    forecast, metrics = args.work / "ensemble.nc", args.work / "metrics.nc"
    s2forecast(["rollout", "--ckpt", str(checkpoints[-1]), "--store", str(store), "--steps", str(STEPS),
                "--init-times", ",".join(demo_init_times(store)), "--members", str(MEMBERS), "--perturbation",
                "spherical-noise", "--perturbation-scale", str(SCALE), "--seed", "0", "--device", "cpu",
                "--out", str(forecast), "--no-progress"])  # fmt: skip
    s2forecast(["evaluate", "--forecast", str(forecast), "--truth", str(store), "--out", str(metrics),
                "--regions", "global", "--no-progress"])  # fmt: skip
    if args.images is not None:
        args.images.mkdir(parents=True, exist_ok=True)
        for written, name in EXAMPLES.items():
            shutil.copyfile(metrics.with_name(f"{metrics.stem}_plots") / written, args.images / name)
            print(f"copied {written} -> {args.images / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
