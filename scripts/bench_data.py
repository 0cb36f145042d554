#!/usr/bin/env python
"""Throughput of ERA5DataModule against raw zarr reads of the same chunks; prints JSON lines.

Builds (once) a synthetic store in the s2forecast layout at 121x240 with 69 channels (5
pressure-level variables on 13 levels + 4 surface variables, 6-hourly), computes its stats,
then times, with the same DataLoader settings (workers, batch size, no shuffle):
  datamodule  ERA5DataModule.train_dataloader(): xarray lazy reads, normalization, forcings,
              Batch collation;
  raw-zarr    a Dataset that reads the same time steps of every array with zarr directly
              and stacks them (no normalization, no forcings, default collate).

Example:
    python scripts/bench_data.py --workers 2 --samples 64
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import xarray as xr
import zarr

from s2forecast.data import compute_stats
from s2forecast.data.store import WB2_LEVELS, cf_attributes
from s2forecast.geometry import Grid
from s2forecast.training.datamodule import ERA5_PRESSURE, ERA5_SURFACE, ERA5DataModule


def make_store(path: Path, times: int, nlat: int = 121, nlon: int = 240) -> None:
    grid = Grid(nlat, nlon, "equiangular")
    rng = np.random.default_rng(0)
    coords = {
        "time": pd.date_range("2020-01-01", periods=times, freq="6h").values,
        "level": np.array(WB2_LEVELS),
        "latitude": grid.lats_deg.numpy(),
        "longitude": grid.lons_deg.numpy(),
    }
    data = {}
    for name in ERA5_PRESSURE:
        values = rng.standard_normal((times, len(WB2_LEVELS), nlat, nlon), dtype=np.float32)
        data[name] = xr.Variable(("time", "level", "latitude", "longitude"), values, attrs=cf_attributes(name))
    for name in ERA5_SURFACE:
        values = rng.standard_normal((times, nlat, nlon), dtype=np.float32)
        data[name] = xr.Variable(("time", "latitude", "longitude"), values, attrs=cf_attributes(name))
    ds = xr.Dataset(data, coords=coords, attrs={"grid_kind": grid.kind, "s2forecast_complete": "true"})
    encoding = {name: {"chunks": (1, *ds[name].shape[1:])} for name in ds.data_vars}
    ds.to_zarr(path, mode="w", encoding=encoding, consolidated=True, zarr_format=3)
    compute_stats(path)


class RawZarr(torch.utils.data.Dataset):
    """The same time steps as the DataModule's samples, read with zarr only."""

    def __init__(self, path: Path, time_indices: np.ndarray, names: list[str]):
        self.path, self.time_indices, self.names = str(path), time_indices, names
        self.arrays = None

    def __len__(self):
        return len(self.time_indices)

    def __getitem__(self, i):
        if self.arrays is None:  # one handle per worker
            group = zarr.open_group(self.path, mode="r")
            self.arrays = [group[name] for name in self.names]
        out = []
        for t in self.time_indices[i]:
            out.append(np.concatenate([a[t].reshape(-1, *a.shape[-2:]) for a in self.arrays]))
        return torch.from_numpy(np.stack(out))


def throughput(loader, samples: int) -> float:
    """Samples per second over ``samples`` samples after the first batch (worker start-up)."""
    iterator = iter(loader)
    next(iterator)
    seen, start = 0, time.perf_counter()
    for batch in iterator:
        seen += len(batch.inputs) if hasattr(batch, "inputs") else len(batch)
        if seen >= samples:
            break
    return seen / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="/tmp/s2forecast_bench_data.zarr")
    parser.add_argument("--times", type=int, default=80, help="6-hourly times in the synthetic store")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    store = Path(args.store)
    if not store.exists():
        make_store(store, args.times)
    module = ERA5DataModule(
        str(store), train_period=("2020-01-01", "2100-01-01"), val_period=None, test_period=None,
        batch_size=args.batch_size, num_workers=args.workers, forcings=(),
    )  # fmt: skip
    dataset = module.dataset("train")
    raw = RawZarr(store, dataset.samples, list(module.spec.variables))
    raw_loader = torch.utils.data.DataLoader(
        raw, batch_size=args.batch_size, shuffle=False, num_workers=args.workers, persistent_workers=args.workers > 0
    )
    common = {"nlat": 121, "nlon": 240, "channels": len(dataset.channels), "workers": args.workers}
    common |= {"batch_size": args.batch_size, "samples": args.samples}
    for _ in range(args.repeats):
        for name, loader in (("datamodule", module._loader("train", shuffle=False)), ("raw-zarr", raw_loader)):
            rate = throughput(loader, args.samples)
            print(json.dumps({"impl": name, **common, "samples_per_s": round(rate, 2)}), flush=True)


if __name__ == "__main__":
    main()
