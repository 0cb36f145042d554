#!/usr/bin/env python
"""The SpRePE paper's claims on shallow water: position embeddings of spherical Transformers.

Trains, with one budget and the same seeds, the S2 neighborhood model with NoPE, RoPE (axial,
on row/column indices), SpRePE with the fixed mask (rho = 7/8) and SpRePE with the adaptive
mask, and the S2 global model with NoPE, RoPE and SpRePE (fixed mask), as in
``scripts/swe_ablation.py`` (same store layout, optimizer, schedule and clipping); and, as the
SpRePE paper does, a plain ViT (``PlanarTransformer``: 2x2 patches, unweighted global attention)
with its learned absolute table (APE), NoPE, RoPE and SpRePE (fixed mask). For every model and
seed it reports:
- the one-step validation loss (the training objective), L1 and L2 (normalized units);
- the rollout RMSE of geopotential height (m) and vorticity (s**-1) at 1, 6, 12 and 24 h
  (area-weighted, WeatherBench2's definition, over every validation init with 24 h of truth);
- one-step RMSE with inputs and truth rotated by alpha in [0, 90] degrees about the axis
  normal to the prime-meridian plane (SpRePE paper, Fig. 4; ``evaluation.robustness``).

One JSON line per model and seed; ``--table`` and ``--plot`` summarize a file of such lines
(mean and spread over seeds).

    python scripts/pe_ablation.py --store data/swe_64x128_36h.zarr --seeds 0 1 > pe.jsonl
    python scripts/pe_ablation.py --table pe.jsonl --plot docs/images/pe_rotation.png
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

PLANAR = {"architecture": "planar", "attention": "global", "patch_size": 2}
MODELS = {  # name -> network options on top of the common ones (architecture: spherical unless given)
    "s2-neighborhood-nope": {"attention": "neighborhood", "position_embedding": "none"},
    "s2-neighborhood-rope": {"attention": "neighborhood", "position_embedding": "rope"},
    "s2-neighborhood-sprepe-fixed": {"attention": "neighborhood", "position_embedding": "sprepe",
                                     "position_embedding_options": {"mask": "fixed"}},
    "s2-neighborhood-sprepe-adaptive": {"attention": "neighborhood", "position_embedding": "sprepe",
                                        "position_embedding_options": {"mask": "adaptive"}},
    "s2-global-nope": {"attention": "global", "position_embedding": "none"},
    "s2-global-rope": {"attention": "global", "position_embedding": "rope"},
    "s2-global-sprepe-fixed": {"attention": "global", "position_embedding": "sprepe",
                               "position_embedding_options": {"mask": "fixed"}},
    "planar-global-ape": PLANAR | {"position_embedding": "ape"},
    "planar-global-nope": PLANAR | {"position_embedding": "none"},
    "planar-global-rope": PLANAR | {"position_embedding": "rope"},
    "planar-global-sprepe-fixed": PLANAR | {"position_embedding": "sprepe",
                                            "position_embedding_options": {"mask": "fixed"}},
}  # fmt: skip
DEFAULT_MODELS = [name for name in MODELS if not name.startswith("planar")]  # the issue-19 set
LEADS_H = (1, 6, 12, 24)
COLORS = {"nope": "C0", "rope": "C1", "sprepe-fixed": "C2", "sprepe-adaptive": "C3", "ape": "C4"}  # one per embedding
FIELDS = ("geopotential_height", "vorticity")


def rollout_rmse(model, loader, leads_h: tuple[int, ...], step_hours: float) -> dict:
    """Area-weighted RMSE (physical units) per field at ``leads_h``: sqrt of the mean MSE over inits."""
    import torch

    steps = max(leads_h) / step_hours
    if steps != int(steps):
        raise ValueError(f"leads {leads_h} h are not multiples of the {step_hours} h step")
    steps = int(steps)
    area = model.area
    sums, count = 0.0, 0
    with torch.no_grad():
        for batch in loader:
            prediction = model.to_physical(model(batch, steps))
            truth = model.to_physical(batch.targets[:, :steps])
            sums = sums + ((prediction - truth).square() * area).mean(dim=(-2, -1)).sum(dim=0)  # (steps, channels)
            count += len(truth)
    rmse = (sums / count).sqrt()
    return {
        f"rmse_{field}_{lead}h": float(rmse[int(lead / step_hours) - 1, model.channels.index(field)])
        for field in FIELDS
        for lead in leads_h
    } | {"rollout_inits": count}


def train_and_score(name: str, seed: int, args) -> dict:
    import pytorch_lightning as pl
    import torch

    from s2forecast.data import open_store
    from s2forecast.evaluation.robustness import rotation_errors
    from s2forecast.training import ForecastModule, data_info
    from s2forecast.training.datamodule import SWEDataModule

    sys.path.insert(0, str(Path(__file__).parent))
    from swe_ablation import EpochLoss, score

    trajectories = int(open_store(args.store)["trajectory"].values.max()) + 1
    split = {"train_trajectories": (0, args.train_trajectories), "test_trajectories": None, "num_workers": 0}
    val = (args.train_trajectories, trajectories)
    pl.seed_everything(seed, verbose=False)
    data = SWEDataModule(str(args.store), val_trajectories=val, batch_size=args.batch_size, **split)
    network = {"embed_dim": args.embed_dim, "num_layers": args.num_layers, "num_heads": 1} | MODELS[name]
    architecture = network.pop("architecture", "spherical")
    if architecture == "spherical":
        network["scale_factor"] = 2  # 2x2 latent, as the ViT's 2x2 patches
    model = ForecastModule(architecture, network, data_info(data), lr=args.lr, warmup_steps=50)
    step_hours = float(data_info(data)["step_hours"])
    steps = int(max(LEADS_H) / step_hours)
    long = SWEDataModule(str(args.store), val_trajectories=val, batch_size=args.batch_size, rollout_steps=steps,
                         **split)  # fmt: skip
    long.setup("validate")  # before training: a store too short for the 24 h scores failed after it
    data.setup("fit")
    losses = EpochLoss()
    trainer = pl.Trainer(
        max_epochs=args.epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[losses], gradient_clip_val=1.0,
        num_sanity_val_steps=0, limit_val_batches=0,
    )  # fmt: skip
    start = time.perf_counter()
    trainer.fit(model, datamodule=data)
    seconds = time.perf_counter() - start
    model.eval()
    row = {"model": name, "seed": seed, "params": sum(p.numel() for p in model.parameters()),
           "optimizer_steps": trainer.global_step, "train_loss": sum(losses.losses) / len(losses.losses),
           **score(model, data.val_dataloader())}  # fmt: skip

    row |= rollout_rmse(model, long.val_dataloader(), LEADS_H, step_hours)

    batch = next(iter(data.val_dataloader()))
    angles = np.radians(np.linspace(0.0, 90.0, args.angles))
    row["rotation"] = [
        {"alpha_deg": round(float(np.degrees(r["alpha_rad"])), 3), "rmse": r["rmse"]}
        for r in rotation_errors(model.forecaster, batch, angles)
    ]
    row["train_seconds"] = round(seconds, 1)
    print(json.dumps(row), flush=True)  # before the weights: a failed save lost a trained model's row
    if args.out_dir:
        torch.save(model.state_dict(), weights_path(args.out_dir, name, seed))
    return row


def weights_path(out_dir: Path, name: str, seed: int) -> Path:
    return out_dir / f"{name}-seed{seed}.pt"


def summarize(rows: list[dict]) -> str:
    """Markdown table: mean ± half-range over seeds per model."""
    by_model: dict[str, list[dict]] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)
    columns = ["val_loss"] + [f"rmse_{f}_{lead}h" for f in FIELDS for lead in LEADS_H]
    symbol = {"geopotential_height": "h (m)", "vorticity": "ζ (1e-6 s⁻¹)"}
    heads = ["val loss"] + [f"{symbol[f]} {lead} h" for f in FIELDS for lead in LEADS_H]
    lines = ["| model | seeds | " + " | ".join(heads) + " | rot. 90° / 0° |", "|---|---:|" + "---:|" * (len(heads) + 1)]
    for name, group in by_model.items():
        cells = []
        for column in columns:
            values = np.array([r[column] for r in group])
            scale = 1e6 if "vorticity" in column else 1.0  # vorticity in 1e-6 s**-1
            mean, half = values.mean() * scale, (values.max() - values.min()) / 2 * scale
            cells.append(f"{mean:.4g} ± {half:.2g}")
        ratio = np.array([r["rotation"][-1]["rmse"] / r["rotation"][0]["rmse"] for r in group])
        cells.append(f"{ratio.mean():.3g} ± {(ratio.max() - ratio.min()) / 2:.2g}")
        lines.append(f"| {name} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {"s2-neighborhood": "S2 neighborhood attention", "s2-global": "S2 global attention",
              "planar-global": "planar ViT (global attention)"}  # fmt: skip
    panels = {key: title for key, title in panels.items() if any(r["model"].startswith(key) for r in rows)}
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), sharey=False, squeeze=False)
    axes = dict(zip(panels, axes[0], strict=True))
    by_model: dict[str, list[dict]] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)
    for name, group in by_model.items():
        ax = axes[next(key for key in panels if name.startswith(key))]
        angles = [r["alpha_deg"] for r in group[0]["rotation"]]
        curves = np.array([[r["rmse"] for r in row["rotation"]] for row in group])
        embedding = name.split("-", 2)[-1]
        color = COLORS.get(embedding)
        ax.plot(angles, curves.mean(axis=0), marker="o", color=color, label=embedding)
        ax.fill_between(angles, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.2)
    for key, ax in axes.items():
        ax.set_xlabel("rotation angle α (degrees)")
        ax.set_ylabel("one-step RMSE (normalized units)")
        ax.set_title(panels[key])
        ax.legend()
        ax.grid(alpha=0.3)
    steps = sorted({r["optimizer_steps"] for r in rows})
    fig.suptitle(f"Shallow water 64x128, {'/'.join(map(str, steps))} optimizer steps:\ninputs and truth rotated about "
                 "the y axis (mean and range over seeds)", fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=Path("data/swe_64x128_36h.zarr"))
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=DEFAULT_MODELS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--train-trajectories", type=int, default=10, help="the rest validate")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--embed-dim", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--angles", type=int, default=7, help="rotation angles from 0 to 90 degrees")
    parser.add_argument("--out-dir", type=Path, help="save each model's weights here")
    parser.add_argument("--table", type=Path, help="summarize this JSON-lines file instead of training")
    parser.add_argument("--plot", type=Path, help="with --table: the rotation plot (PNG)")
    args = parser.parse_args()
    if args.table:
        if not args.table.is_file():
            parser.error(f"--table {args.table}: no such file (the JSON lines of a run of this script)")
        if args.plot and args.plot.exists():
            parser.error(f"--plot {args.plot} exists; give another path or move it away")
        try:
            rows = [json.loads(line) for line in args.table.read_text().splitlines() if line.startswith("{")]
            print(summarize(rows))
        except (ValueError, KeyError, TypeError, IndexError) as error:  # JSONDecodeError is a ValueError
            parser.error(f"--table {args.table}: not the JSON lines of a run of this script ({error!r})")
        if args.plot:
            plot(rows, args.plot)
        return
    if args.angles < 2:  # the table's rotation column is the last angle's error over the first's (0 degrees)
        parser.error(f"--angles must be at least 2 (0 and 90 degrees), got {args.angles}")
    if not args.store.exists():
        parser.error(f"--store {args.store}: no such store (make one with s2forecast generate-swe)")
    if args.out_dir:  # checked before any training: the save came after the first model's minutes
        args.out_dir.mkdir(parents=True, exist_ok=True)
        taken = [str(path) for seed in args.seeds for name in args.models
                 if (path := weights_path(args.out_dir, name, seed)).exists()]  # fmt: skip
        if taken:
            parser.error(f"--out-dir {args.out_dir} holds {', '.join(taken)}, which this run would replace; give "
                         "another directory or move them away")  # fmt: skip
    from s2forecast.user_errors import UserError

    for seed in args.seeds:
        for name in args.models:
            try:
                train_and_score(name, seed, args)
            except UserError as error:  # the store or the options (checked before each model trains)
                parser.error(str(error))


if __name__ == "__main__":
    main()
