#!/usr/bin/env python
"""Robustness of a trained forecaster (s2forecast.evaluation.robustness); prints JSON lines.

  rotation     one-step RMSE (normalized units, area-weighted) with inputs and truth rigidly
               rotated by alpha about the axis normal to the prime-meridian plane, alpha in
               [0, pi/2] (SpRePE paper, Fig. 4)
  resolution   one-step RMSE of the same weights on a store at another resolution, with
               persistence for reference (spherical models only; grid-bound embeddings refuse)

Example:
    python scripts/robustness.py --ckpt runs/.../last.ckpt --store data/swe.zarr --angles 7 \\
        --other-store data/swe_64x128.zarr
"""

import argparse
import json
from pathlib import Path

import numpy as np

from s2forecast.data.fields import FieldDataset
from s2forecast.evaluation.robustness import resolution_errors, rotation_errors
from s2forecast.inference.rollout import load_forecaster, open_inputs
from s2forecast.user_errors import UserError


def batch_of(dataset: FieldDataset, samples: int):
    """``samples`` one-step samples spread over ``dataset``, as one Batch."""
    picks = np.linspace(0, len(dataset) - 1, min(samples, len(dataset))).astype(int)
    return dataset.collate([dataset[int(i)] for i in picks])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--angles", type=int, default=7, help="angles from 0 to pi/2")
    parser.add_argument("--other-store", help="a store at another resolution (same variables)")
    args = parser.parse_args()
    if args.samples < 1 or args.angles < 2:  # 0 samples: an IndexError; 0 angles printed nothing, exit 0
        parser.error(f"--samples must be >= 1 and --angles >= 2 (0 and pi/2 at least), got {args.samples} and "
                     f"{args.angles}")  # fmt: skip
    for option, path in (("--ckpt", args.ckpt), ("--store", args.store), ("--other-store", args.other_store)):
        if path is not None and "://" not in path and not Path(path).exists():
            parser.error(f"{option} {path}: no such file or store")
    try:
        measure(args)
    except UserError as error:  # the checkpoint or a store does not fit: one line, as the commands say it
        parser.error(str(error))


def measure(args) -> None:
    model = load_forecaster(args.ckpt)
    dataset = open_inputs(model, args.store, targets=1)  # the checkpoint's channels, history, step, one target
    batch = batch_of(dataset, args.samples)
    for row in rotation_errors(model, batch, np.linspace(0, np.pi / 2, args.angles)):
        print(json.dumps({"test": "rotation", **row}), flush=True)
    if args.other_store:
        # same sample layout on the other grid; normalized with that store's own statistics
        other = FieldDataset(args.other_store, dataset.spec)
        result = resolution_errors(model, batch_of(other, args.samples), other.grid)
        print(json.dumps({"test": "resolution", **result}), flush=True)


if __name__ == "__main__":
    main()
