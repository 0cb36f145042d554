#!/usr/bin/env python
"""Throughput of ERA5DataModule against raw zarr reads of the same chunks; prints JSON lines.

Builds (once) a synthetic store in the s2forecast layout, by default at 121x240 with 69 channels
(5 pressure-level variables on 13 levels + 4 surface variables, 6-hourly), computes its stats,
then times, with the same DataLoader settings (workers, batch size, no shuffle):
  datamodule  ERA5DataModule.train_dataloader(): xarray lazy reads, normalization, forcings,
              Batch collation; once per --read-threads value (chunks of a sample read at once);
  raw-zarr    a Dataset that reads the same time steps of every array with zarr directly,
              one chunk after another, and stacks them (no normalization, no forcings, default
              collate).
With --http-delay-ms the store is served instead from a local HTTP server on 127.0.0.1 that
answers every request that many ms late (a remote store's latency), and only the DataModule is
timed, once per --read-threads value (1: sequential chunk fetches).

Examples:
    python scripts/bench_data.py --workers 2 --samples 64 --read-threads 1,8
    python scripts/bench_data.py --workers 2 --samples 24 --read-threads 1,8,16 --http-delay-ms 20
"""

import argparse
import functools
import http.server
import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import xarray as xr
import zarr

from s2forecast.data import compute_stats
from s2forecast.data.plausibility import plausible_bounds
from s2forecast.data.store import WB2_LEVELS, cf_attributes
from s2forecast.geometry import Grid
from s2forecast.training.datamodule import ERA5_PRESSURE, ERA5_SURFACE, ERA5DataModule
from s2forecast.user_errors import UserError


def make_store(path: Path, times: int, nlat: int = 121, nlon: int = 240, levels: int = 13) -> None:
    grid = Grid(nlat, nlon, "equiangular")
    rng = np.random.default_rng(0)
    coords = {
        "time": pd.date_range("2020-01-01", periods=times, freq="6h").values,
        "level": np.array(WB2_LEVELS[:levels]),
        "latitude": grid.lats_deg.numpy(),
        "longitude": grid.lons_deg.numpy(),
    }

    def plausible(name: str, shape: tuple[int, ...], level: float | None = None) -> np.ndarray:
        """Noise about the middle of the variable's plausible median range (the readers check it)."""
        median = next((b for b in plausible_bounds(name, level) if b.statistic == "median"), None)
        centre, spread = (
            (0.0, 1.0) if median is None else ((median.low + median.high) / 2, (median.high - median.low) / 20)
        )
        return (centre + spread * rng.standard_normal(shape)).astype(np.float32)

    data = {}
    for name in ERA5_PRESSURE:
        values = np.stack([plausible(name, (times, nlat, nlon), level) for level in coords["level"]], axis=1)
        data[name] = xr.Variable(("time", "level", "latitude", "longitude"), values, attrs=cf_attributes(name))
    for name in ERA5_SURFACE:
        values = plausible(name, (times, nlat, nlon))
        data[name] = xr.Variable(("time", "latitude", "longitude"), values, attrs=cf_attributes(name))
    ds = xr.Dataset(data, coords=coords, attrs={"grid_kind": grid.kind, "s2forecast_complete": "true"})
    encoding = {name: {"chunks": (1, *ds[name].shape[1:])} for name in ds.data_vars}
    # built under a name of this script's own, renamed once whole: a Ctrl-C while building left a store
    # without statistics that every later run reused (and failed on)
    building = path.with_name(f".{path.name}.building")
    if building.exists():  # an earlier interrupted build's
        shutil.rmtree(building)
    ds.to_zarr(building, mode="w", encoding=encoding, consolidated=True, zarr_format=3)
    compute_stats(building)
    os.rename(building, path)


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


def throughput(loader, samples: int) -> tuple[int, float]:
    """(samples timed, samples per second) over up to ``samples`` samples after the first batch (worker
    start-up); fewer when the store ends first."""
    iterator = iter(loader)
    next(iterator)
    seen, start = 0, time.perf_counter()
    for batch in iterator:
        seen += len(batch.inputs) if hasattr(batch, "inputs") else len(batch)
        if seen >= samples:
            break
    if not seen:
        raise SystemExit(f"the store has no sample after the first batch: give more --times than {samples}")
    return seen, seen / (time.perf_counter() - start)


class DelayedHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files from a directory, each answer ``delay`` seconds late (a remote store's latency)."""

    delay = 0.02
    protocol_version = "HTTP/1.1"  # keep-alive, as cloud object stores

    prefix = "/"  # the store's path: nothing else of its directory (/tmp by default) is served

    def do_GET(self):
        time.sleep(self.delay)
        super().do_GET() if self.path.startswith(self.prefix) else self.send_error(404)

    def do_HEAD(self):
        time.sleep(self.delay)
        super().do_HEAD() if self.path.startswith(self.prefix) else self.send_error(404)

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # the default backlog (5) drops connections that concurrent readers open at once


def serve(store: Path, delay_ms: float) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1 (loopback only, a free port) of ``store`` (at /NAME/), until ``shutdown()``."""
    handler = type("Delayed", (DelayedHandler,), {"delay": delay_ms / 1000, "prefix": f"/{store.name}/"})
    server = Server(("127.0.0.1", 0), functools.partial(handler, directory=str(store.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default=None, help="default: /tmp/s2forecast_bench_data[_NLATxNLON_LEVELS].zarr")
    parser.add_argument("--times", type=int, default=80, help="6-hourly times in the synthetic store")
    parser.add_argument("--grid", default="121x240", help="NLATxNLON of the synthetic store")
    parser.add_argument("--levels", type=int, default=13, help="pressure levels (channels: 5 x levels + 4)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--read-threads", default="1", help="comma-separated values of the DataModule's read_threads")
    parser.add_argument("--http-delay-ms", type=float, default=None, help="serve over HTTP, each request this late")
    args = parser.parse_args(argv)

    try:
        nlat, nlon = (int(n) for n in args.grid.split("x"))
        threads = [int(n) for n in args.read_threads.split(",")]
    except ValueError:
        parser.error(f"--grid {args.grid!r} (NLATxNLON) and --read-threads {args.read_threads!r} (1,16) take numbers")
    if min(args.times, args.levels, args.batch_size, args.samples, args.repeats, nlat, nlon, *threads) < 1:
        parser.error("--times, --levels, --batch-size, --samples, --repeats, --read-threads and the grid must be >= 1")
    if args.workers < 0:
        parser.error(f"--workers {args.workers}: must be >= 0")
    if args.times < 2 or args.levels > len(WB2_LEVELS):  # statistics need two times; the store has WB2's levels
        parser.error(f"--times must be >= 2 and --levels <= {len(WB2_LEVELS)}, got {args.times} and {args.levels}")
    default = "/tmp/s2forecast_bench_data.zarr"
    if (nlat, nlon, args.levels) != (121, 240, 13):
        default = f"/tmp/s2forecast_bench_data_{nlat}x{nlon}_{args.levels}.zarr"
    store = Path(args.store or default)
    if not store.exists():
        make_store(store, args.times, nlat, nlon, args.levels)
    try:
        with xr.open_zarr(store) as existing:  # one made before is reused: only if it is the one asked for
            found = (existing.sizes["time"], existing.sizes["latitude"], existing.sizes["longitude"],
                     existing.sizes.get("level", 0))  # fmt: skip
    except (OSError, ValueError, KeyError) as error:  # zarr's GroupNotFoundError is a KeyError
        parser.error(f"--store {store} is not a store of this benchmark ({type(error).__name__}); give another --store")
    if found != (args.times, nlat, nlon, args.levels):
        parser.error(
            f"{store} holds {found[0]} times of {found[1]}x{found[2]} at {found[3]} levels, not --times {args.times} "
            f"--grid {nlat}x{nlon} --levels {args.levels}: give its sizes, or another --store"
        )
    server = None
    source = str(store)
    if args.http_delay_ms is not None:
        server = serve(store, args.http_delay_ms)
        source = f"http://127.0.0.1:{server.server_address[1]}/{store.name}"

    def module(read_threads: int) -> ERA5DataModule:
        return ERA5DataModule(
            source, train_period=("2020-01-01", "2100-01-01"), val_period=None, test_period=None,
            batch_size=args.batch_size, num_workers=args.workers, forcings=(), read_threads=read_threads,
        )  # fmt: skip

    try:
        modules = {n: module(n) for n in threads}
        dataset = modules[threads[0]].dataset("train")
    except UserError as error:  # e.g. a store of another program, or damaged
        parser.error(f"--store {store}: {error}; give another --store (or delete it: this script remakes its own)")
    loaders = [("datamodule", n, m._loader("train", shuffle=False)) for n, m in modules.items()]
    if server is None:
        raw = RawZarr(store, dataset.samples, list(dataset.spec.variables))
        raw_loader = torch.utils.data.DataLoader(
            raw, batch_size=args.batch_size, shuffle=False, num_workers=args.workers,
            persistent_workers=args.workers > 0,
        )  # fmt: skip
        loaders.append(("raw-zarr", 1, raw_loader))
    common = {"nlat": nlat, "nlon": nlon, "channels": len(dataset.channels), "workers": args.workers}
    common |= {"batch_size": args.batch_size, "http_delay_ms": args.http_delay_ms}
    try:
        for _ in range(args.repeats):
            for name, read_threads, loader in loaders:
                seen, rate = throughput(loader, args.samples)
                line = {"impl": name, "read_threads": read_threads, **common, "samples": seen,
                        "samples_per_s": round(rate, 2)}  # fmt: skip
                print(json.dumps(line), flush=True)
    finally:
        if server is not None:
            server.shutdown()


if __name__ == "__main__":
    main()
