#!/usr/bin/env python
"""The attention paper's SWE ablation (its Table 3) at a chosen budget: S2 neighborhood, S2
global, planar window and planar global Transformers (and, with --models, ball sparse
attention alone or alternating with neighborhood layers) trained on the same shallow-water
store for the same number of optimizer steps, then scored on the validation trajectories.

Prints one JSON line per model and a Markdown table: parameters, training loss (mean of the
last epoch), validation loss (the training objective: quadrature-weighted MSE in normalized
units) and the validation L1 and L2 errors (quadrature-weighted mean absolute error and root
mean square error of the normalized one-step prediction), and wall time.

Example (CPU-sized; generates the store if it is missing):
    python scripts/swe_ablation.py --store data/swe_64x128.zarr --nlat 64 --nlon 128 --epochs 4
"""

import argparse
import json
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from s2forecast.data import compute_stats, generate_swe, open_store
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.datamodule import SWEDataModule
from s2forecast.user_errors import UserError

MULTILEVEL = {"compression_window": 32}
MODELS = {
    "s2-neighborhood": ("spherical", {"attention": "neighborhood", "scale_factor": 2}),
    "s2-global": ("spherical", {"attention": "global", "scale_factor": 2}),
    "s2-ball": ("spherical", {"attention": "ball", "scale_factor": 2}),
    "s2-neighborhood-ball": (
        "spherical",
        {"attention": ["neighborhood", "ball", "neighborhood", "ball"], "scale_factor": 2},
    ),
    # multi-level compression (compression_window=32: 60 coarse tokens per ball instead of 256)
    "s2-ball-multilevel": ("spherical", {"attention": "ball", "scale_factor": 2, "ball_options": MULTILEVEL}),
    "s2-neighborhood-ball-multilevel": (
        "spherical",
        {"attention": ["neighborhood", "ball"] * 2, "scale_factor": 2, "ball_options": MULTILEVEL},
    ),
    "planar-window": ("planar", {"attention": "window", "window": 3, "patch_size": 2}),
    "planar-global": ("planar", {"attention": "global", "patch_size": 2}),
}


def score(model: ForecastModule, loader) -> dict:
    """Validation loss, L1 and L2 of one-step predictions, quadrature-weighted, normalized units."""
    model.eval()
    totals = {"loss": 0.0, "l1": 0.0, "l2": 0.0}
    count = 0
    with torch.no_grad():
        for batch in loader:
            prediction = model(batch, 1)[:, 0]
            target = batch.targets[:, 0]
            error = prediction - target
            weights = model.quadrature
            totals["loss"] += model.loss(prediction[:, None], target[:, None]).item() * len(target)
            totals["l1"] += (error.abs() * weights).mean().item() * len(target)
            totals["l2"] += (error.square() * weights).mean().item() * len(target)
            count += len(target)
    return {"val_loss": totals["loss"] / count, "val_l1": totals["l1"] / count, "val_l2": (totals["l2"] / count) ** 0.5}


class EpochLoss(pl.Callback):
    """Mean training loss of the last epoch."""

    def on_train_epoch_start(self, trainer, module):
        self.losses = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="data/swe_64x128.zarr")
    parser.add_argument("--nlat", type=int, default=64, help="for a store that is generated (not an existing one)")
    parser.add_argument("--nlon", type=int, default=128, help="for a store that is generated")
    parser.add_argument("--trajectories", type=int, default=12, help="for a store that is generated")
    parser.add_argument("--steps-per-trajectory", type=int, default=24, help="for a store that is generated")
    parser.add_argument("--train-trajectories", type=int, default=10, help="the rest validate")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--embed-dim", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--models",
        nargs="+",
        choices=list(MODELS),
        default=["s2-neighborhood", "s2-global", "planar-window", "planar-global"],
    )
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--precision", default="32-true")
    args = parser.parse_args()

    if args.epochs < 1:  # no epoch: no training loss to report (an AttributeError)
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    try:
        rows = train_all(args)
    except UserError as error:  # the store or the splits: one line, before any training
        parser.error(str(error))
    print("\n| model | params | train loss | val loss | val L1 | val L2 | train s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['params']:,} | {r['train_loss']:.4f} | {r['val_loss']:.4f} | {r['val_l1']:.4f} "
              f"| {r['val_l2']:.4f} | {r['train_seconds']:.0f} |")  # fmt: skip


def train_all(args) -> list[dict]:
    store = Path(args.store)
    if not store.exists():
        generate_swe(store, args.nlat, args.nlon, trajectories=args.trajectories, steps=args.steps_per_trajectory)
        compute_stats(store)
    opened = open_store(store)
    trajectories = int(opened["trajectory"].values.max()) + 1
    grid = f"{opened.sizes['latitude']}x{opened.sizes['longitude']}"  # the store's: --nlat/--nlon make a new one only
    rows = []
    for name in args.models:
        architecture, options = MODELS[name]
        pl.seed_everything(0, verbose=False)
        data = SWEDataModule(
            str(store), train_trajectories=(0, args.train_trajectories),
            val_trajectories=(args.train_trajectories, trajectories), test_trajectories=None,
            batch_size=args.batch_size, num_workers=0,
        )  # fmt: skip
        network = {"embed_dim": args.embed_dim, "num_layers": args.num_layers, "num_heads": 1, **options}
        model = ForecastModule(architecture, network, data_info(data), lr=args.lr, warmup_steps=50)
        losses = EpochLoss()
        trainer = pl.Trainer(
            max_epochs=args.epochs, accelerator=args.accelerator, precision=args.precision, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, callbacks=[losses], gradient_clip_val=1.0,
            num_sanity_val_steps=0, limit_val_batches=0,
        )  # fmt: skip
        start = time.perf_counter()
        trainer.fit(model, datamodule=data)
        seconds = time.perf_counter() - start
        row = {
            "model": name,
            "grid": grid,
            "params": sum(p.numel() for p in model.parameters()),
            "optimizer_steps": trainer.global_step,
            "train_loss": sum(losses.losses) / len(losses.losses),
            **score(model, data.val_dataloader()),
            "train_seconds": round(seconds, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
