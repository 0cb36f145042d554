#!/usr/bin/env python
"""`make demo`: the whole loop on built-in data, in under 3 minutes on a 2-core CPU.

1. generate a shallow-water store (32x64, torch-harmonics' solver, all trajectories in one
   batch) unless it exists, and its normalization statistics;
2. train the S2 neighborhood Transformer (configs/swe/s2_neighborhood.yaml, narrower) for a
   fixed number of optimizer steps with `s2forecast fit`, printing the training loss;
3. roll it out 12 hourly steps from initial conditions of held-out trajectories
   (`s2forecast rollout` -> NetCDF);
4. score it against persistence and climatology (`s2forecast evaluate`: RMSE, ACC, bias
   per lead, CSV, plots), print the table, whether the forecast beats persistence at every
   lead (exit status 1 if not), and how long each stage took.

Everything lands in --workdir (default data/demo); rerunning reuses the store.
"""

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAJECTORIES = 18  # 0-14 train, 15 validation, 16-17 held out for the forecasts


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="data/demo")
    parser.add_argument(
        "--train-steps",
        type=positive_int,
        default=400,
        help="optimizer steps of training, batches of 2 (a number of steps rather than a time, so that the result "
        "does not depend on the machine's load)",
    )
    parser.add_argument("--steps", type=positive_int, default=12, help="rollout steps (hours)")
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="torch threads (default 1: at this size a second thread gains little, and on a machine shared with "
        "other jobs torch's threads wait for each other and every step slows down many times)",
    )
    return parser.parse_args(argv)


class Stages:
    """Prints ``[i/n] what`` as each stage starts and keeps its wall-clock time (s)."""

    def __init__(self, count: int):
        self.count, self.seconds, self.start = count, {}, time.perf_counter()
        self._name, self._since = "start-up", self.start  # imports until the first stage

    def _close(self, now: float) -> None:
        if self._name is not None:
            self.seconds[self._name] = now - self._since
            self._name = None

    def begin(self, name: str, what: str) -> None:
        now = time.perf_counter()
        self._close(now)
        print(f"[{len(self.seconds)}/{self.count}] {what}", flush=True)
        self._name, self._since = name, now

    def summary(self) -> str:
        now = time.perf_counter()
        self._close(now)
        total = now - self.start
        parts = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.seconds.items())
        return f"demo finished in {total:.0f} s ({total / 60:.1f} min): {parts}"


def beats_persistence(metrics_path: Path) -> tuple[bool, list[str]]:
    """Whether the forecast's global RMSE is below persistence's at every lead for every field,
    and one line per field: the RMSE ratio forecast / persistence at the first and last lead."""
    from s2forecast.evaluation.report import open_results, table_fields

    lines, every = [], True
    with open_results(metrics_path) as metrics:
        for label, name, level in table_fields(metrics):
            rmse = (metrics[name].sel(level=level) if level is not None else metrics[name]).sel(
                metric="rmse", region="global"
            )
            forecast, persistence = rmse.sel(source="forecast").values, rmse.sel(source="persistence").values
            scored = metrics["lead_hours"].values > 0  # lead 0, if scored, is the initial state itself
            ratio, leads = forecast[scored] / persistence[scored], metrics["lead_hours"].values[scored]
            worse = [f"{lead:g} h" for lead, r in zip(leads, ratio, strict=True) if not r < 1]
            every &= not worse
            lines.append(
                f"{label}: RMSE / persistence's {ratio[0]:.2f} at {leads[0]:g} h .. {ratio[-1]:.2f} at "
                f"{leads[-1]:g} h" + (f"; NOT below persistence at {', '.join(worse)}" if worse else "")
            )
    return every, lines


def training_end() -> str:
    """The last time of the training trajectories (0-14): statistics of the held-out ones would leak
    them into the normalization."""
    from s2forecast.data.swe import trajectory_times

    times, trajectory = trajectory_times(TRAJECTORIES, 36, 1.0)
    return str(times[trajectory < 15].max().astype("datetime64[h]"))


def is_complete_store(store: Path) -> bool:
    """Whether generate-swe finished ``store`` (its completeness flag; an interrupted one lacks it)."""
    from s2forecast.data.store import COMPLETE_ATTR
    from s2forecast.output import zarr_attributes

    return (zarr_attributes(store) or {}).get(COMPLETE_ATTR) == "true"


def main(argv=None) -> int:
    args = parse_arguments(argv)
    stages = Stages(5)
    import torch

    from s2forecast.cli import main as s2forecast

    torch.set_num_threads(args.threads)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    store = work / "swe.zarr"
    # both run unless done: a run stopped between them (or amid generate-swe, which resumes) goes on
    if is_complete_store(store):
        stages.begin("generate", f"reusing {store}")
    else:
        stages.begin("generate", f"shallow-water store {store}: {TRAJECTORIES} trajectories of 36 h")
        s2forecast(["generate-swe", "--out", str(store), "--nlat", "32", "--nlon", "64", "--trajectories",
                    str(TRAJECTORIES), "--steps", "36", "--dt-hours", "1", "--seed", "0", "--batch",
                    str(TRAJECTORIES)])  # fmt: skip
    if (store / "stats").is_dir():
        stages.begin("stats", "reusing its statistics")
    else:
        stages.begin("stats", "its normalization statistics, of the training trajectories")
        s2forecast(["stats", str(store), "--end", training_end()])

    stages.begin("fit", f"training for {args.train_steps} steps (loss every 25 steps)")
    runs = work / "runs"
    s2forecast([
        "fit", "--config", str(REPO / "configs" / "swe" / "s2_neighborhood.yaml"),
        "--data.init_args.store", str(store),
        "--data.init_args.train_trajectories", "[0, 15]",
        "--data.init_args.val_trajectories", "[15, 16]",
        "--data.init_args.test_trajectories", "[16, 18]",
        "--data.init_args.num_workers", "0",
        "--data.init_args.batch_size", "2",
        "--model.network.embed_dim", "64",
        "--model.lr", "2e-3",
        "--model.warmup_steps", "20",
        "--trainer.max_epochs", "-1",
        "--trainer.max_steps", str(args.train_steps),
        "--trainer.enable_progress_bar", "false",
        "--trainer.callbacks+=s2forecast.training.callbacks.LossLine",
        "--trainer.callbacks.every_n_steps", "25",
        "--trainer.logger.init_args.save_dir", str(runs),
        "--trainer.default_root_dir", str(work),
    ])  # fmt: skip
    checkpoint = max(runs.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)

    stages.begin("rollout", f"rollout of {args.steps} steps from {checkpoint}")
    from s2forecast.data import open_store

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

    stages.begin("evaluate", "scoring against persistence and climatology")
    metrics = work / "metrics.nc"
    s2forecast(["evaluate", "--forecast", str(forecast), "--truth", str(store), "--out", str(metrics), "--overwrite"])
    every, lines = beats_persistence(metrics)
    print(f"\nfiles: store {store}, checkpoint {checkpoint}, forecast {forecast}, metrics {metrics} "
          f"(+ .csv, plots in {metrics.with_suffix('')}_plots/)")  # fmt: skip
    print("the forecast beats persistence at every lead:" if every else "the forecast does NOT beat persistence:")
    for line in lines:
        print(f"  {line}")
    print(stages.summary())
    return 0 if every else 1


if __name__ == "__main__":
    sys.exit(main())
