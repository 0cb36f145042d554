#!/usr/bin/env python
"""Issue 17's shallow-water experiment: the S2 neighborhood model trained with MSE against the
same model trained as a 4-member ensemble with the fair CRPS, with the same optimizer steps.

Everything goes through the product's own commands, as a user would run them:
1. ``s2forecast fit`` twice: ``configs/swe/s2_neighborhood.yaml`` (MSE), and the same with
   ``configs/swe/s2_neighborhood_crps.yaml`` layered on (noise channels, loss crps, 4 members);
   both at the ablation's CPU size (width 64, 4 layers), on trajectories [0, train) of the store;
2. ``s2forecast rollout`` from every hour of the first 12 h of each validation trajectory, 24
   steps: the MSE model deterministic, the CRPS model with ``--members`` members;
3. ``s2forecast evaluate`` of both against the store (the CRPS model: CRPS, ensemble-mean RMSE,
   spread, spread-skill; the MSE model: RMSE, and its CRPS, which for one member is the MAE);
4. the spherical-harmonic power spectra of truth, the MSE forecast and one CRPS member at the
   last lead (``s2forecast.evaluation.spectra``).

One JSON line per model and lead (``--work`` keeps runs, forecasts and metrics; a finished step
is not redone); ``--table`` / ``--plot`` summarize the lines.

    python scripts/crps_experiment.py --store data/swe_64x128_36h.zarr --work runs/crps_experiment > crps.jsonl
    python scripts/crps_experiment.py --table crps.jsonl --plot docs/images/crps_experiment.png
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {
    "mse": [REPO / "configs/swe/s2_neighborhood.yaml"],
    "crps": [REPO / "configs/swe/s2_neighborhood.yaml", REPO / "configs/swe/s2_neighborhood_crps.yaml"],
}
FIELDS = ("geopotential_height", "vorticity")


def run(argv: list[str]) -> None:
    """One ``s2forecast`` command in a fresh process (as a user runs it); stops on failure."""
    command = [sys.executable, "-m", "s2forecast.cli", *map(str, argv)]
    print("+ s2forecast " + " ".join(map(str, argv)), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, cwd=REPO, stdout=sys.stderr)  # stdout: only the JSON lines


def trajectory_starts(store: Path) -> dict[int, np.datetime64]:
    ds = xr.open_zarr(store)
    trajectory, times = ds["trajectory"].values, ds["time"].values
    return {int(k): times[np.argmax(trajectory == k)] for k in np.unique(trajectory)}


def train(model: str, args) -> Path:
    run_dir = args.work / "runs"
    checkpoint = next(iter(sorted((run_dir / model).glob("version_*/checkpoints/last.ckpt"))), None)
    if checkpoint is not None:
        return checkpoint
    started = time.perf_counter()
    configs = [part for config in CONFIGS[model] for part in ("--config", config)]
    run(["fit", *configs,
         "--data.init_args.store", args.store, "--data.init_args.train_trajectories", f"[0, {args.train}]",
         "--data.init_args.val_trajectories", f"[{args.train}, {args.trajectories}]",
         "--data.init_args.test_trajectories", "null", "--data.init_args.num_workers", "0",
         "--model.network.embed_dim", str(args.embed_dim), "--model.network.num_layers", "4",
         "--trainer.max_steps", str(args.steps), "--trainer.max_epochs", "-1", "--trainer.enable_progress_bar", "false",
         "--trainer.limit_val_batches", "0", "--trainer.logger.init_args.save_dir", run_dir,
         "--trainer.logger.init_args.name", model, "--seed_everything", str(args.seed)])  # fmt: skip
    (run_dir / model / "train_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    return next(iter(sorted((run_dir / model).glob("version_*/checkpoints/last.ckpt"))))


def forecast(model: str, checkpoint: Path, args) -> Path:
    out = args.work / f"forecast_{model}.nc"
    if out.exists():
        return out
    starts = trajectory_starts(args.store)
    inits = [starts[k] + np.timedelta64(h, "h") for k in range(args.train, args.trajectories) for h in range(13)]
    times = ",".join(str(t.astype("datetime64[h]")) for t in inits)
    members = ["--members", str(args.members), "--seed", str(args.seed)] if model == "crps" else []
    run(["rollout", "--ckpt", checkpoint, "--store", args.store, "--steps", "24", "--init-times", times,
         "--out", out, "--no-progress", *members])  # fmt: skip
    return out


def scores(model: str, forecast_path: Path, args) -> Path:
    """``s2forecast evaluate`` of one model's forecast (global region). The MSE model's forecast is
    scored as an ensemble of two identical members, for which the fair CRPS is exactly the
    mean absolute error (the CRPS of a deterministic forecast) and the spread is 0."""
    out = args.work / f"metrics_{model}.nc"
    if out.exists():
        return out
    if model == "mse":
        single = xr.open_dataset(forecast_path)
        doubled = xr.concat([single, single], dim="realization").transpose("time", "prediction_timedelta", ...)
        forecast_path = args.work / "forecast_mse_as_two_members.nc"
        doubled.to_netcdf(forecast_path)
    run(["evaluate", "--forecast", forecast_path, "--truth", args.store, "--out", out, "--regions", "global",
         "--no-progress", "--map-leads", "1", "24"])  # fmt: skip
    return out


def summary(model: str, metrics_path: Path, args) -> list[dict]:
    """One JSON-able row per lead: ensemble-mean RMSE, CRPS, spread, spread-skill per field; and,
    at the last lead, the forecast's (one member's) spherical-harmonic power over the truth's in
    the upper half of the degrees the truth resolves (1: small scales kept; < 1: blurred)."""
    from s2forecast.evaluation.report import open_results

    results = open_results(metrics_path)
    rows = []
    hours = results["lead_hours"].values
    train_seconds = (args.work / "runs" / model / "train_seconds.txt").read_text().strip()
    for k, lead in enumerate(hours):
        row = {"model": model, "lead_hours": float(lead), "n_init_times": int(results["n_init_times"].values[k]),
               "train_seconds": float(train_seconds), "steps": args.steps}  # fmt: skip
        for field in FIELDS:
            scores = results[field].sel(source="forecast", region="global").isel(lead_time=k)
            for metric in ("ensemble_mean_rmse", "crps", "spread", "spread_skill"):
                row[f"{metric}_{field}"] = float(scores.sel(metric=metric))
        rows.append(row)
    for field in FIELDS:
        power = results[f"{field}_sh_power"].isel(spectrum_lead_time=-1)
        degrees, truth = power["degree"].values, power.sel(spectrum_source="truth").values
        # the truth's resolved band: degrees with power above 1e-8 of its peak (the SWE solver's
        # spectral truncation leaves round-off above it); small scales: its upper half
        resolved = degrees[truth > 1e-8 * truth.max()].max()
        small = (degrees >= resolved / 2) & (degrees <= resolved)
        ratio = power.sel(spectrum_source="forecast").values[small].sum() / power.sel(
            spectrum_source="truth").values[small].sum()  # fmt: skip
        rows[-1][f"small_scale_power_ratio_{field}"] = float(ratio)
        rows[-1]["small_scale_degrees"] = [int(degrees[small].min()), int(degrees[small].max())]
        rows[-1][f"sh_power_forecast_{field}"] = power.sel(spectrum_source="forecast").values.tolist()
        rows[-1][f"sh_power_truth_{field}"] = power.sel(spectrum_source="truth").values.tolist()
    return rows


def table(rows: list[dict], leads=(1, 6, 12, 24)) -> str:
    """Markdown: per model and lead, ensemble-mean RMSE and CRPS of height (m) and vorticity
    (1e-6 s**-1), spread-skill; the small-scale power ratio at the last lead."""
    head = ("| model | lead (h) | RMSE h (m) | CRPS h (m) | spread/skill h | RMSE ζ | CRPS ζ | spread/skill ζ |"
            "\n|---|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    lines = [head]
    for row in rows:
        if row["lead_hours"] not in leads:
            continue
        h, z = "geopotential_height", "vorticity"
        cells = [row["model"], f"{row['lead_hours']:g}", f"{row[f'ensemble_mean_rmse_{h}']:.2f}",
                 f"{row[f'crps_{h}']:.2f}", f"{row[f'spread_skill_{h}']:.2f}",
                 f"{row[f'ensemble_mean_rmse_{z}'] * 1e6:.3f}", f"{row[f'crps_{z}'] * 1e6:.3f}",
                 f"{row[f'spread_skill_{z}']:.2f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    styles = {"mse": ("tab:orange", "MSE model"), "crps": ("tab:blue", "CRPS ensemble (8 members)")}
    for model, (color, label) in styles.items():
        mine = [r for r in rows if r["model"] == model]
        hours = [r["lead_hours"] for r in mine]
        axes[0].plot(hours, [r["crps_vorticity"] * 1e6 for r in mine], color=color, label=label)
        axes[1].plot(hours, [r["ensemble_mean_rmse_vorticity"] * 1e6 for r in mine], color=color, label=label)
        if model == "crps":
            for field, style in (("vorticity", "-"), ("geopotential_height", "--")):
                axes[2].plot(hours, [r[f"spread_skill_{field}"] for r in mine], style, color=color, label=field)
        last = mine[-1]
        power = np.asarray(last["sh_power_forecast_vorticity"])
        member = "MSE model" if model == "mse" else "CRPS model, one member"
        axes[3].loglog(np.arange(1, power.size), power[1:], color=color, label=member)
    truth = np.asarray([r for r in rows if r["model"] == "mse"][-1]["sh_power_truth_vorticity"])
    axes[3].loglog(np.arange(1, truth.size), truth[1:], "k--", label="truth")
    axes[3].set_ylim(bottom=truth[1:].max() * 1e-6)
    axes[2].axhspan(0.8, 1.2, color="0.9")
    titles = ("CRPS of vorticity (1e-6 s⁻¹)", "ensemble-mean RMSE of vorticity (1e-6 s⁻¹)",
              "spread / skill (CRPS model)", "vorticity power per degree at 24 h")  # fmt: skip
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    for ax in axes[:3]:
        ax.set_xlabel("lead time (h)")
    axes[3].set_xlabel("total wavenumber l")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, help="SWE store (generate-swe + stats), e.g. 64x128, 12 trajectories")
    parser.add_argument("--work", type=Path, help="directory for runs, forecasts and metrics")
    parser.add_argument("--trajectories", type=int, default=12, help="trajectories in the store")
    parser.add_argument("--train", type=int, default=10, help="trajectories [0, train) train, the rest validate")
    parser.add_argument("--steps", type=int, default=360, help="optimizer steps of both models")
    parser.add_argument("--embed-dim", type=int, default=64)
    parser.add_argument("--members", type=int, default=8, help="members of the CRPS model's forecasts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stage", choices=["forecast", "all"], default="all",
                        help="forecast: train and forecast only (scoring later)")  # fmt: skip
    parser.add_argument("--table", type=Path, help="print the Markdown table of a file of JSON lines and exit")
    parser.add_argument("--plot", type=Path, help="with --table: PNG of the lines")
    args = parser.parse_args()
    if args.table:
        rows = [json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]
        print(table(rows))
        if args.plot:
            plot(rows, args.plot)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    for model in ("mse", "crps"):
        path = forecast(model, train(model, args), args)
        if args.stage == "all":
            for row in summary(model, scores(model, path, args), args):
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
