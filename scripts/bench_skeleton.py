#!/usr/bin/env python
"""Time and peak memory of creating an empty store, before any data: prints a JSON line per case.

The skeletons whose cost once grew with the record (README, "Scale"): ``StoreWriter.create`` of a
store of 4 variables (2 surface, 2 on 2 pressure levels) x ``--steps`` 6-hourly steps, as
``convert-era5`` and ``generate-swe`` make it, and a ``rollout --format zarr`` forecast file
(``ForecastFile``) of ``--inits`` init times x ``--leads`` leads x 4 variables. Each case runs in a
process of its own; ``peak_rss_mb`` is that process's peak (python and the imports included),
``wall_s`` the creation alone. The grid is small (the skeleton's cost is per chunk, not per point).

    python scripts/bench_skeleton.py --steps 2000,40000 --inits 1000 --leads 40
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = (32, 64)


def store_case(path: Path, steps: int) -> float:
    import numpy as np
    import xarray as xr

    from s2forecast.data.writer import StoreWriter, lazy_empty

    lat, lon = np.linspace(90.0, -90.0, GRID[0]), np.arange(GRID[1]) * 360.0 / GRID[1]
    times = np.datetime64("2000-01-01", "ns") + np.arange(steps) * np.timedelta64(6, "h")
    surface, upper = ("time", "latitude", "longitude"), ("time", "level", "latitude", "longitude")
    fields = {name: lazy_empty((steps, *GRID), surface) for name in ("2m_temperature", "mean_sea_level_pressure")}
    fields |= {name: lazy_empty((steps, 2, *GRID), upper) for name in ("temperature", "geopotential")}
    template = xr.Dataset(fields, coords={"time": times, "level": [500, 850], "latitude": lat, "longitude": lon},
                          attrs={"grid_kind": "equiangular"})  # fmt: skip
    start = time.perf_counter()
    StoreWriter(path, {"bench": 1}).create(template)
    return time.perf_counter() - start


def forecast_case(path: Path, inits: int, leads: int) -> float:
    import numpy as np

    from s2forecast.inference.forecast_file import ChannelLayout, ForecastFile

    names = ["2m_temperature", "mean_sea_level_pressure", "temperature/500", "geopotential/500"]
    units = {name.split("/")[0]: {"units": "K"} for name in names}
    times = np.datetime64("2000-01-01T00", "ns") + np.arange(inits) * np.timedelta64(6, "h")
    lead_times = np.arange(1, leads + 1) * np.timedelta64(6, "h")
    lat, lon = np.linspace(90.0, -90.0, GRID[0]), np.arange(GRID[1]) * 360.0 / GRID[1]
    start = time.perf_counter()
    ForecastFile(path, "zarr", ChannelLayout.from_channels(names), times, lead_times, lat, lon, units, {"title": "b"})
    return time.perf_counter() - start


def last_line(result: subprocess.CompletedProcess) -> str:
    """A failed case's message: its stderr's last line, or its exit status when it printed nothing
    (killed by the kernel's OOM killer: SIGKILL)."""
    return (result.stderr.strip().splitlines() or [f"exit status {result.returncode} (killed?)"])[-1]


def run_case(argv: list[str]) -> dict:
    """One case in a process of its own: its wall time and peak RSS."""
    result = subprocess.run([sys.executable, __file__, "--case", json.dumps(argv)], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"case {argv} failed: {last_line(result)}")
    return json.loads(result.stdout)


def counts(text: str, option: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise SystemExit(f"{option} {text!r}: give whole numbers, e.g. 2000,40000") from None
    if not values or min(values) < 1:
        raise SystemExit(f"{option} {text!r}: each must be >= 1")
    return values


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="2000,40000", help="record lengths of the store skeleton")
    parser.add_argument("--inits", default="1000", help="init times of the forecast file")
    parser.add_argument("--leads", default="40", help="leads of the forecast file")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: one case in this process
    args = parser.parse_args(argv)
    if args.case:
        kind, *sizes = json.loads(args.case)
        with tempfile.TemporaryDirectory() as work:  # the script's own: removed whole
            path = Path(work) / "skeleton.zarr"
            wall = store_case(path, *sizes) if kind == "store" else forecast_case(path, *sizes)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
        print(json.dumps({"wall_s": round(wall, 2), "peak_rss_mb": round(peak_mb)}))
        return
    cases = [["store", steps] for steps in counts(args.steps, "--steps")]
    cases += [["forecast", inits, leads] for inits in counts(args.inits, "--inits")
              for leads in counts(args.leads, "--leads")]  # fmt: skip
    for case in cases:
        sizes = {"steps": case[1]} if case[0] == "store" else {"inits": case[1], "leads": case[2]}
        print(json.dumps({"case": case[0], **sizes, "grid": f"{GRID[0]}x{GRID[1]}", **run_case(case)}), flush=True)


if __name__ == "__main__":
    main()
