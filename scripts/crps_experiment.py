#!/usr/bin/env python
"""Issues 17 and 30's shallow-water experiment: the S2 neighborhood model trained with MSE against
the same model trained as an ensemble with the CRPS, in several variants, with the same budget.

Variants (``--variants``; each CRPS variant is ``s2_neighborhood_crps.yaml``, the best of issue 30's
experiment, possibly with overlays):
- ``mse``: ``configs/swe/s2_neighborhood.yaml``, deterministic, the reference;
- ``losses``: + ``s2_neighborhood_crps.yaml``: 8 smooth spherical noise fields into the adaptive
  norms, 4 members, almost-fair CRPS (alpha 0.95) + 0.02 spectral CRPS, 2-step rollouts from the
  4th epoch (the best of issue 30: the config's defaults);
- ``crps``: + ``s2_neighborhood_crps_fair.yaml``: the same noise, the fair CRPS alone, one step
  (issue 17's model);
- ``fgn``: + ``_fair`` + ``s2_neighborhood_crps_fgn.yaml``: a 32-dimensional noise vector into the norms;
- ``latent``: + ``_fair`` + ``s2_neighborhood_crps_latent.yaml``: the noise fields added to the latent state;
- ``white_ar1``: + ``_fair`` + ``s2_neighborhood_crps_white_ar1.yaml``: white noise fields, AR(1)
  rho = 0.5 over the rollout steps.

Every variant gets the same budget: ``--steps`` optimizer steps of the configs' batch (4) and
members (4), width ``--embed-dim``, 4 layers, on trajectories [0, train) of the store; each seed
of ``--seeds`` is a separate run (training seed and forecast seed). Everything goes through the
product's own commands, as a user would run them:
1. ``s2forecast fit`` of each variant and seed;
2. ``s2forecast rollout`` from every hour of the first ``--init-hours`` hours of each validation
   trajectory, ``--leads`` steps: the MSE model deterministic, the CRPS variants with
   ``--members`` members;
3. ``s2forecast evaluate`` against the store (CRPS, ensemble-mean RMSE, spread, spread-skill;
   the MSE model: RMSE, and its CRPS, which for one member is the MAE);
4. the spherical-harmonic power spectra of truth, the MSE forecast and one member at the last
   lead (``s2forecast.evaluation.spectra``).

One JSON line per variant, seed and lead (``--work`` keeps runs, forecasts and metrics; a
finished step is not redone); ``--table`` / ``--plot`` summarize the lines: the scores per lead,
and the issue's targets per variant.

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
SWE = REPO / "configs" / "swe"
MSE = [SWE / "s2_neighborhood.yaml"]
CRPS = [*MSE, SWE / "s2_neighborhood_crps.yaml"]
FAIR = [*CRPS, SWE / "s2_neighborhood_crps_fair.yaml"]
VARIANTS = {
    "mse": MSE,
    "crps": FAIR,
    "fgn": [*FAIR, SWE / "s2_neighborhood_crps_fgn.yaml"],
    "latent": [*FAIR, SWE / "s2_neighborhood_crps_latent.yaml"],
    "white_ar1": [*FAIR, SWE / "s2_neighborhood_crps_white_ar1.yaml"],
    "losses": CRPS,
}
FIELDS = ("geopotential_height", "vorticity")
# the options of the models, forecasts and scores a --work holds (its options.json)
SETTINGS = ("store", "trajectories", "train", "steps", "embed_dim", "train_members", "members", "leads", "init_hours")


def run(argv: list[str]) -> None:
    """One ``s2forecast`` command in a fresh process (as a user runs it); stops on failure."""
    command = [sys.executable, "-m", "s2forecast.cli", *map(str, argv)]
    print("+ s2forecast " + " ".join(map(str, argv)), file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=REPO, stdout=sys.stderr)  # stdout: only the JSON lines
    if done.returncode != 0:  # the command printed its own one-line error above
        raise SystemExit(f"crps_experiment: `s2forecast {argv[0]}` failed (exit {done.returncode}); rerun when fixed: "
                         "the steps already done are kept")  # fmt: skip


def trajectory_starts(store: Path) -> dict[int, np.datetime64]:
    ds = xr.open_zarr(store)
    trajectory, times = ds["trajectory"].values, ds["time"].values
    return {int(k): times[np.argmax(trajectory == k)] for k in np.unique(trajectory)}


def run_name(variant: str, seed: int) -> str:
    return f"{variant}_seed{seed}"


def train(variant: str, seed: int, args) -> Path:
    run_dir, name = args.work / "runs", run_name(variant, seed)
    checkpoint = next(iter(sorted((run_dir / name).glob("version_*/checkpoints/last.ckpt"))), None)
    if checkpoint is not None:
        return checkpoint
    started = time.perf_counter()
    configs = [part for config in VARIANTS[variant] for part in ("--config", config)]
    members = ["--model.members", str(args.train_members)] if args.train_members and variant != "mse" else []
    run(["fit", *configs,
         "--data.init_args.store", args.store, "--data.init_args.train_trajectories", f"[0, {args.train}]",
         "--data.init_args.val_trajectories", f"[{args.train}, {args.trajectories}]",
         "--data.init_args.test_trajectories", "null", "--data.init_args.num_workers", "0",
         "--model.network.embed_dim", str(args.embed_dim), "--model.network.num_layers", "4", *members,
         "--trainer.max_steps", str(args.steps), "--trainer.max_epochs", "-1", "--trainer.enable_progress_bar", "false",
         "--trainer.limit_val_batches", "0", "--trainer.logger.init_args.save_dir", run_dir,
         "--trainer.logger.init_args.name", name, "--seed_everything", str(seed)])  # fmt: skip
    (run_dir / name / "train_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    return next(iter(sorted((run_dir / name).glob("version_*/checkpoints/last.ckpt"))))


def forecast(variant: str, seed: int, checkpoint: Path, args) -> Path:
    out = args.work / f"forecast_{run_name(variant, seed)}.nc"
    if out.exists():
        return out
    starts = trajectory_starts(args.store)
    inits = [starts[k] + np.timedelta64(h, "h") for k in range(args.train, args.trajectories)
             for h in range(args.init_hours)]  # fmt: skip
    times = ",".join(str(t.astype("datetime64[h]")) for t in inits)
    members = ["--members", str(args.members), "--seed", str(seed)] if variant != "mse" else []
    run(["rollout", "--ckpt", checkpoint, "--store", args.store, "--steps", str(args.leads), "--init-times", times,
         "--out", out, "--no-progress", *members])  # fmt: skip
    return out


def scores(variant: str, seed: int, forecast_path: Path, args) -> Path:
    """``s2forecast evaluate`` of one run's forecast (global region). The MSE model's forecast is
    scored as an ensemble of two identical members, for which the fair CRPS is exactly the
    mean absolute error (the CRPS of a deterministic forecast) and the spread is 0."""
    out = args.work / f"metrics_{run_name(variant, seed)}.nc"
    if out.exists():
        return out
    if variant == "mse":
        single = xr.open_dataset(forecast_path)
        doubled = xr.concat([single, single], dim="realization").transpose("time", "prediction_timedelta", ...)
        forecast_path = args.work / f"forecast_{run_name(variant, seed)}_as_two_members.nc"
        doubled.to_netcdf(forecast_path)
    run(["evaluate", "--forecast", forecast_path, "--truth", args.store, "--out", out, "--regions", "global",
         "--no-progress", "--no-plots", "--map-leads", "1", str(args.leads)])  # fmt: skip
    return out


def summary(variant: str, seed: int, metrics_path: Path, args) -> list[dict]:
    """One JSON-able row per lead: ensemble-mean RMSE, CRPS, spread, spread-skill per field; and,
    at the last lead, the forecast's (one member's) spherical-harmonic power per degree and the
    truth's, and their ratio over the upper half of the degrees the truth resolves (1: small
    scales kept; < 1: blurred)."""
    from s2forecast.evaluation.report import open_results

    results = open_results(metrics_path)
    rows = []
    hours = results["lead_hours"].values
    train_seconds = (args.work / "runs" / run_name(variant, seed) / "train_seconds.txt").read_text().strip()
    for k, lead in enumerate(hours):
        row = {"model": variant, "seed": seed, "lead_hours": float(lead),
               "n_init_times": int(results["n_init_times"].values[k]), "train_seconds": float(train_seconds),
               "steps": args.steps}  # fmt: skip
        for field in FIELDS:
            field_scores = results[field].sel(source="forecast", region="global").isel(lead_time=k)
            for metric in ("ensemble_mean_rmse", "crps", "spread", "spread_skill"):
                row[f"{metric}_{field}"] = float(field_scores.sel(metric=metric))
        rows.append(row)
    for field in FIELDS:
        power = results[f"{field}_sh_power"].isel(spectrum_lead_time=-1)
        degrees, truth = power["degree"].values, power.sel(spectrum_source="truth").values
        resolved = resolved_degree(truth)
        small = (degrees >= resolved / 2) & (degrees <= resolved)
        ratio = power.sel(spectrum_source="forecast").values[small].sum() / power.sel(
            spectrum_source="truth").values[small].sum()  # fmt: skip
        rows[-1][f"small_scale_power_ratio_{field}"] = float(ratio)
        rows[-1]["small_scale_degrees"] = [int(degrees[small].min()), int(degrees[small].max())]
        rows[-1][f"sh_power_forecast_{field}"] = power.sel(spectrum_source="forecast").values.tolist()
        rows[-1][f"sh_power_truth_{field}"] = power.sel(spectrum_source="truth").values.tolist()
    return rows


def resolved_degree(truth: np.ndarray) -> int:
    """The highest degree with power above 1e-8 of the truth's peak over l >= 1 (the SWE solver's
    spectral truncation leaves round-off above it; l = 0, height's global mean, is no scale)."""
    return int(np.flatnonzero(truth > 1e-8 * truth[1:].max()).max())


def runs(rows: list[dict]) -> dict[str, list[list[dict]]]:
    """{variant: [the rows of one seed, by lead]}, in the order the variants first appear (rows of
    issue 17's file have no seed: seed 0)."""
    grouped: dict[str, dict[int, list[dict]]] = {}
    for row in rows:
        grouped.setdefault(row["model"], {}).setdefault(row.get("seed", 0), []).append(row)
    return {model: list(seeds.values()) for model, seeds in grouped.items()}


def table(rows: list[dict], leads=(1, 6, 12, 24)) -> str:
    """Markdown: per variant, seed and lead, ensemble-mean RMSE and CRPS of height (m) and
    vorticity (1e-6 s**-1), spread-skill (the leads in ``leads``, the first and the last)."""
    head = ("| model | seed | lead (h) | RMSE h (m) | CRPS h (m) | spread/skill h | RMSE ζ | CRPS ζ | spread/skill ζ |"
            "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    present = sorted({row["lead_hours"] for row in rows})
    shown = {lead for lead in leads if lead in present} | {present[0], present[-1]}
    lines = [head]
    for row in rows:
        if row["lead_hours"] not in shown:
            continue
        h, z = "geopotential_height", "vorticity"
        cells = [row["model"], str(row.get("seed", 0)), f"{row['lead_hours']:g}",
                 f"{row[f'ensemble_mean_rmse_{h}']:.2f}", f"{row[f'crps_{h}']:.2f}", f"{row[f'spread_skill_{h}']:.2f}",
                 f"{row[f'ensemble_mean_rmse_{z}'] * 1e6:.3f}", f"{row[f'crps_{z}'] * 1e6:.3f}",
                 f"{row[f'spread_skill_{z}']:.2f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(rows: list[dict]) -> str:
    """Markdown: issue 30's targets per variant and seed, against the MSE run of the same seed
    (or seed 0's): spread-skill range at leads >= 3 h (target 0.9-1.1); the range of a member's
    power over the truth's at the last lead over the degrees 4 <= l <= the truth's resolved degree,
    and how many of them are within 0.75-1.25 (target: all); the worst ensemble-mean RMSE over the
    MSE model's at leads >= 12 h (target <= 1); the worst CRPS over the MSE model's MAE (target
    <= 0.8), and its mean over every lead and field. Fields: h (height), ζ (vorticity)."""
    grouped = runs(rows)
    reference = {seed_rows[0].get("seed", 0): seed_rows for seed_rows in grouped.get("mse", [])}
    head = ("| model | seed | spread/skill h | spread/skill ζ | power ratio h | power ratio ζ | RMSE / MSE's | "
            "CRPS / MSE's MAE | mean CRPS / MAE |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    lines = [head]
    for model, seeds in grouped.items():
        if model == "mse":
            continue
        for mine in seeds:
            seed = mine[0].get("seed", 0)
            mse = reference.get(seed) or next(iter(reference.values()), None)
            cells = [model, str(seed)]
            for field in FIELDS:
                skill = [r[f"spread_skill_{field}"] for r in mine if r["lead_hours"] >= 3]
                cells.append(f"{min(skill):.2f}-{max(skill):.2f}" if skill else "-")
            for field in FIELDS:
                member = np.asarray(mine[-1][f"sh_power_forecast_{field}"])
                truth = np.asarray(mine[-1][f"sh_power_truth_{field}"])
                ratio = member[4 : resolved_degree(truth) + 1] / truth[4 : resolved_degree(truth) + 1]
                inside = int(((ratio >= 0.75) & (ratio <= 1.25)).sum())
                cells.append(f"{ratio.min():.2f}-{ratio.max():.3g} ({inside}/{ratio.size})" if ratio.size else "-")
            if mse is None:
                cells += ["-", "-", "-"]
            else:
                by_lead = {r["lead_hours"]: r for r in mse}
                pairs = [(r, by_lead[r["lead_hours"]]) for r in mine if r["lead_hours"] in by_lead]
                rmse = [r[f"ensemble_mean_rmse_{f}"] / m[f"ensemble_mean_rmse_{f}"]
                        for r, m in pairs if r["lead_hours"] >= 12 for f in FIELDS]  # fmt: skip
                crps = [r[f"crps_{f}"] / m[f"crps_{f}"] for r, m in pairs for f in FIELDS]
                # the mean over all leads and both fields: the tie-break of the best variant (README)
                cells += [f"{max(rmse):.3f}" if rmse else "-", f"{max(crps):.3f}" if crps else "-",
                          f"{np.mean(crps):.3f}" if crps else "-"]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """One row per field (height, vorticity): CRPS, ensemble-mean RMSE and spread-skill by lead,
    and one member's power over the truth's per degree at the last lead (the target band 0.75-1.25
    shaded); each variant's first seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(18, 7.5))
    colors = plt.get_cmap("tab10").colors
    grouped = runs(rows)
    units = {"geopotential_height": ("height", "m", 1.0), "vorticity": ("vorticity", "1e-6 s⁻¹", 1e6)}
    last = next(iter(grouped.values()))[0][-1]["lead_hours"]
    for row_axes, field in zip(axes, FIELDS, strict=True):
        label, unit, scale = units[field]
        truth = np.asarray(next(iter(grouped.values()))[0][-1][f"sh_power_truth_{field}"])
        top = resolved_degree(truth) + 1
        for i, (model, seeds) in enumerate(grouped.items()):
            mine, color = seeds[0], colors[i % len(colors)]
            hours = [r["lead_hours"] for r in mine]
            row_axes[0].plot(hours, [r[f"crps_{field}"] * scale for r in mine], color=color, label=model)
            row_axes[1].plot(hours, [r[f"ensemble_mean_rmse_{field}"] * scale for r in mine], color=color, label=model)
            if model != "mse":
                row_axes[2].plot(hours, [r[f"spread_skill_{field}"] for r in mine], color=color, label=model)
            power = np.asarray(mine[-1][f"sh_power_forecast_{field}"])
            row_axes[3].semilogy(np.arange(1, top), power[1:top] / truth[1:top], color=color,
                                 label=model if model == "mse" else f"{model}, one member")  # fmt: skip
        row_axes[2].axhspan(0.9, 1.1, color="0.9")
        row_axes[3].axhspan(0.75, 1.25, color="0.9")
        row_axes[3].axhline(1.0, color="k", lw=0.8)
        titles = (f"CRPS of {label} ({unit}; MSE model: MAE)", f"ensemble-mean RMSE of {label} ({unit})",
                  f"spread / skill of {label}", f"{label}: power / truth's per degree at {last:g} h")  # fmt: skip
        for ax, title in zip(row_axes, titles, strict=True):
            ax.set_title(title, fontsize=10)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
        for ax in row_axes[:3]:
            ax.set_xlabel("lead time (h)")
        row_axes[3].set_xlabel("total wavenumber l")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, help="SWE store (generate-swe + stats), e.g. 64x128, 12 trajectories")
    parser.add_argument("--work", type=Path, help="directory for runs, forecasts and metrics")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="which models to train and score (default: all)")  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="a run per variant and seed")
    parser.add_argument("--trajectories", type=int, default=12, help="trajectories in the store")
    parser.add_argument("--train", type=int, default=10, help="trajectories [0, train) train, the rest validate")
    parser.add_argument("--steps", type=int, default=360, help="optimizer steps of every model (the budget)")
    parser.add_argument("--embed-dim", type=int, default=64)
    parser.add_argument("--train-members", type=int, default=0,
                        help="members per sample in training (default: the configs', 4)")  # fmt: skip
    parser.add_argument("--members", type=int, default=8, help="members of the CRPS variants' forecasts")
    parser.add_argument("--leads", type=int, default=24, help="forecast steps (hours)")
    parser.add_argument("--init-hours", type=int, default=13,
                        help="initializations at hours 0..N-1 of every validation trajectory")  # fmt: skip
    parser.add_argument("--stage", choices=["forecast", "all"], default="all",
                        help="forecast: train and forecast only (scoring later)")  # fmt: skip
    parser.add_argument("--table", type=Path, help="print the Markdown tables of a file of JSON lines and exit")
    parser.add_argument("--plot", type=Path, help="with --table: PNG of the lines")
    args = parser.parse_args()
    if args.table:
        if not args.table.is_file():
            parser.error(f"--table {args.table}: no such file (the JSON lines of a run of this script)")
        if args.plot and args.plot.exists():
            parser.error(f"--plot {args.plot} exists; give another path or move it away")
        try:
            rows = [json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]
            print(table(rows) + "\n\n" + targets(rows))
        except (ValueError, KeyError, TypeError) as error:  # JSONDecodeError is a ValueError
            parser.error(f"--table {args.table}: not the JSON lines of a run of this script ({error!r})")
        if args.plot:
            plot(rows, args.plot)
        return
    if args.store is None or args.work is None:
        parser.error("--store and --work are needed to run the experiment (or --table to summarize one)")
    # the commands run in the repository (cwd=REPO): relative paths were read there, not here
    args.store, args.work = args.store.resolve(), args.work.resolve()
    if not args.store.exists():  # before --work records the options: a typo fixed is then a rerun like any other
        parser.error(f"--store {args.store}: no such store (make one with s2forecast generate-swe and stats)")
    args.work.mkdir(parents=True, exist_ok=True)
    # what a rerun reuses (checkpoints, forecasts, metrics) was made with these: other ones were labelled
    # with the new options (a review: --steps 50 rows of 2-step models)
    options = {name: str(value) if isinstance(value := getattr(args, name), Path) else value for name in SETTINGS}
    recorded = args.work / "options.json"
    made = [entry for entry in args.work.iterdir() if entry.name != recorded.name]  # nothing made: nothing to keep
    if made and recorded.exists() and (before := json.loads(recorded.read_text())) != options:
        changed = {name: (before.get(name), value) for name, value in options.items() if before.get(name) != value}
        parser.error(f"--work {args.work} holds runs of other options {changed} (before, now): rerun with those, or "
                     "give another --work")  # fmt: skip
    recorded.write_text(json.dumps(options) + "\n")
    for seed in args.seeds:
        for variant in args.variants:
            path = forecast(variant, seed, train(variant, seed, args), args)
            if args.stage == "all":
                for row in summary(variant, seed, scores(variant, seed, path, args), args):
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
