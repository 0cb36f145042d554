#!/usr/bin/env python
"""Wall time and peak memory of s2forecast commands on a WeatherBench2-layout store; prints JSON lines.

Writes a synthetic store as WeatherBench2 publishes ERA5: dims ``(time, level, longitude,
latitude)``, zarr v2, one time step per chunk, latitudes north to south, values in each
variable's canonical units and plausible ranges (``data.plausibility``). Then runs every case
(a named command line, ``CASES``) in a subprocess of its own, and a raw read of the same store
(``xr.open_zarr(store).mean()``, dask's threads) in the same run, and prints per command:

    {"case", "workers", "wall_s", "peak_rss_mb", "store_mb", "data_mb", "mb_per_s", "raw_wall_s",
     "raw_peak_rss_mb", "raw_mb_per_s", "ratio", "ratio_net", "grid", "channels", "steps", "load"}

``mb_per_s`` is store bytes on disk over the wall time; ``ratio`` = mb_per_s / raw_mb_per_s (1:
as fast as reading the store). Wall time and peak RSS come from ``/usr/bin/time -f "%e %M"``.
``startup`` (python, importing s2forecast.cli, data.stats and geometry: torch) is printed too:
the fixed cost inside every case's wall time; ``ratio_net`` is the ratio with each side's import
time (s2forecast's, and xarray's for the baseline) taken off.

``--workers 2`` runs every case again with ``--workers 2`` (a local dask.distributed cluster of 2
worker processes, ``s2forecast.data.engine``; ``workers`` is 0 for one process). Its wall time
includes starting the cluster; its peak RSS is that of the largest process (the command or one
worker: ``time`` reports the largest of a process and the children it waited for), not their sum.

Adding a command: a function (store, workdir) -> argv after ``s2forecast`` in ``CASES``.

Examples:
    python scripts/bench_scale.py                                  # 64x32, 16 steps, stats
    python scripts/bench_scale.py --grid 121x240 --steps 32,64,128  # one store per length
    python scripts/bench_scale.py --grid 721x1440 --steps 32,64 --workdir /tmp/bench_scale --keep
    python scripts/bench_scale.py --grid 121x240 --steps 64 --workers 2  # one process, then 2 workers
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.data.plausibility import GRAVITY, standard_height
from s2forecast.data.store import VARIABLES, cf_attributes

REPO = Path(__file__).resolve().parents[1]

# variable -> (centre, amplitude of the large-scale pattern, noise) in its canonical units
SURFACE_VALUES = {
    "2m_temperature": (280.0, 30.0, 1.0),
    "mean_sea_level_pressure": (101_000.0, 2_000.0, 100.0),
    "surface_pressure": (98_000.0, 3_000.0, 100.0),
    "10m_u_component_of_wind": (0.0, 10.0, 1.0),
    "10m_v_component_of_wind": (0.0, 10.0, 1.0),
    "total_precipitation_6hr": (0.001, 0.0009, 0.0),
}
LEVEL_VALUES = {
    "temperature": (250.0, 30.0, 1.0),
    "u_component_of_wind": (5.0, 15.0, 1.0),
    "v_component_of_wind": (0.0, 10.0, 1.0),
    "specific_humidity": (0.005, 0.004, 0.0001),
    "vertical_velocity": (0.0, 0.2, 0.02),
}


def level_values(name: str, level: int) -> tuple[float, float, float]:
    if name == "geopotential":  # g * (ISA height +- 300 m): range > g * 150 m near the ground
        return GRAVITY * standard_height(level), GRAVITY * 300.0, GRAVITY * 5.0
    return LEVEL_VALUES[name]


# case name -> argv after `s2forecast`, given the store and a scratch directory
CASES = {
    "stats": lambda store, work: ["stats", str(store), "--out", str(work / "stats.zarr"), "--no-progress"],
    "climatology": lambda store, work: ["climatology", str(store), "--out", str(work / "clim.zarr"), "--no-progress"],
}

RAW = "import sys, xarray as xr; xr.open_zarr(sys.argv[1]).mean().compute()"
RAW_STARTUP = "import xarray, dask.array, zarr"
STARTUP = "import s2forecast.cli, s2forecast.data.stats, s2forecast.geometry"  # what a case imports before its work


def parse_grid(text: str) -> tuple[int, int]:
    """'721x1440' (or '1440x721') -> (721, 1440): the smaller number is the latitude count."""
    try:
        a, b = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--grid {text!r}: give two numbers, e.g. 721x1440") from None
    return min(a, b), max(a, b)


def write_store(path: Path, nlat: int, nlon: int, steps: int, variables: list[str], levels: list[int], surface):
    """A WB2-layout zarr v2 store, (time, level, longitude, latitude), one time per chunk, written
    one time step at a time (memory: one step of all variables)."""
    lat = np.linspace(90.0, -90.0, nlat)  # north to south, as WB2's 0.25 deg stores
    lon = np.arange(nlon) * (360.0 / nlon)
    times = pd.date_range("2000-01-01", periods=steps, freq="6h").values
    # (lon, lat) pattern: a zonal gradient plus waves; moved east one column per step
    pattern = (np.cos(np.deg2rad(lat))[None, :] * 2 - 1) + 0.3 * np.sin(np.deg2rad(3 * lon))[:, None]
    pattern = pattern.astype(np.float32)
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((4, nlon, nlat), dtype=np.float32)

    def field(t: int, centre: float, amplitude: float, sigma: float, k: int) -> np.ndarray:
        return centre + amplitude * np.roll(pattern, t + k, axis=0) + sigma * noise[(t + k) % 4]

    coords = {"time": times, "level": np.array(levels, dtype=np.int64), "longitude": lon, "latitude": lat}
    template = {}
    for name in variables:
        shape = (steps, len(levels), nlon, nlat)
        template[name] = (("time", "level", "longitude", "latitude"), _lazy(shape), cf_attributes(name))
    for name in surface:
        template[name] = (("time", "longitude", "latitude"), _lazy((steps, nlon, nlat)), cf_attributes(name))
    ds = xr.Dataset(template, coords=coords)
    encoding = {name: {"chunks": (1, *ds[name].shape[1:])} for name in ds.data_vars}
    ds.to_zarr(path, mode="w", compute=False, encoding=encoding, zarr_format=2, consolidated=True)
    for t in range(steps):
        data = {}
        for k, name in enumerate(variables):
            data[name] = (
                ("time", "level", "longitude", "latitude"),
                np.stack([field(t, *level_values(name, lev), k + j) for j, lev in enumerate(levels)])[None],
            )
        for k, name in enumerate(surface):
            data[name] = (("time", "longitude", "latitude"), field(t, *SURFACE_VALUES[name], k)[None])
        xr.Dataset(data).to_zarr(path, region={"time": slice(t, t + 1)}, zarr_format=2)


def _lazy(shape):
    import dask.array as da

    return da.zeros(shape, dtype=np.float32, chunks=(1, *shape[1:]))


def store_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, peak RSS MB, stderr tail) of ``argv`` under ``/usr/bin/time``: its child is forked
    from the small ``time`` process, so the peak is the command's own (a child forked from this
    script would count this script's memory as well: Linux keeps the pre-exec peak)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        command = ["/usr/bin/time", "-f", "%e %M", "-o", report.name, *argv]
        result = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{argv[:4]} failed ({result.returncode}): {result.stderr[-2000:]}")
        wall, peak_kb = report.read().split()[-2:]
    return float(wall), float(peak_kb) / 1024, result.stderr[-500:]


def s2forecast_argv(args: list[str]) -> list[str]:
    return [sys.executable, "-c", "import sys; from s2forecast.cli import main; main(sys.argv[1:])", *args]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="64x32", help="latitudes x longitudes (default 64x32: 32 x 64)")
    parser.add_argument("--variables", default="geopotential,temperature", help="pressure-level variables")
    parser.add_argument("--levels", default="500,850", help="pressure levels in hPa")
    parser.add_argument("--surface", default="", help="surface variables, e.g. 2m_temperature")
    parser.add_argument("--steps", default="16", help="record length(s) in time steps: 16 or 32,64,128")
    parser.add_argument("--cases", default="stats", help=f"comma-separated, of {sorted(CASES)}")
    parser.add_argument("--workers", default="", help="worker counts: each case also runs with --workers N, e.g. 2")
    parser.add_argument("--workdir", default=None, help="where stores go (default a temporary directory in /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the stores and outputs")
    args = parser.parse_args(argv)

    nlat, nlon = parse_grid(args.grid)
    variables = [v for v in args.variables.split(",") if v]
    levels = [int(x) for x in args.levels.split(",") if x]
    surface = [v for v in args.surface.split(",") if v]
    cases = [c for c in args.cases.split(",") if c]
    try:
        workers = [0] + [int(n) for n in args.workers.split(",") if n]
    except ValueError:
        raise SystemExit(f"--workers {args.workers!r}: give worker counts, e.g. 2 or 1,2") from None
    if min(workers[1:], default=1) < 1:
        raise SystemExit(f"--workers {args.workers!r}: each count must be >= 1")
    for name in variables + surface:
        if name not in VARIABLES or (name in variables and name not in LEVEL_VALUES and name != "geopotential"):
            raise SystemExit(f"no synthetic values for {name!r}; known: geopotential, {sorted(LEVEL_VALUES)}")
        if name in surface and name not in SURFACE_VALUES:
            raise SystemExit(f"no synthetic surface values for {name!r}; known: {sorted(SURFACE_VALUES)}")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; known: {sorted(CASES)}")

    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench_scale_", dir="/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        startup, startup_rss, _ = measure([sys.executable, "-c", STARTUP])
        raw_startup, _, _ = measure([sys.executable, "-c", RAW_STARTUP])
        print(json.dumps({"case": "startup", "wall_s": round(startup, 2), "peak_rss_mb": round(startup_rss)}))
        for steps in [int(x) for x in args.steps.split(",")]:
            store = root / f"wb2_{nlat}x{nlon}_{steps}.zarr"
            write_store(store, nlat, nlon, steps, variables, levels, surface)
            size = store_bytes(store)
            data = 4 * steps * nlat * nlon * (len(variables) * len(levels) + len(surface))
            raw_wall, raw_rss, _ = measure([sys.executable, "-c", RAW, str(store)])
            raw_rate = size / 1e6 / raw_wall
            for case, count in ((case, count) for case in cases for count in workers):
                work = root / (f"{case}_{steps}" + (f"_workers{count}" if count else ""))
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir()
                options = ["--workers", str(count)] if count else []
                wall, rss, _ = measure(s2forecast_argv(CASES[case](store, work) + options))
                row = {
                    "case": case,
                    "workers": count,
                    "wall_s": round(wall, 2),
                    "peak_rss_mb": round(rss),
                    "store_mb": round(size / 1e6, 1),
                    "data_mb": round(data / 1e6, 1),
                    "mb_per_s": round(size / 1e6 / wall, 1),
                    "raw_wall_s": round(raw_wall, 2),
                    "raw_peak_rss_mb": round(raw_rss),
                    "raw_mb_per_s": round(raw_rate, 1),
                    "ratio": round(size / 1e6 / wall / raw_rate, 3),
                    # the same without the imports (s2forecast's torch, the baseline's xarray): the reading
                    "ratio_net": round((raw_wall - raw_startup) / max(wall - startup, 1e-3), 3),
                    "grid": f"{nlat}x{nlon}",
                    "channels": len(variables) * len(levels) + len(surface),
                    "steps": steps,
                    "load": round(os.getloadavg()[0], 2),
                }
                print(json.dumps(row), flush=True)
            if not args.keep:
                shutil.rmtree(store)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
