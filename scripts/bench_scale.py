#!/usr/bin/env python
"""Wall time and peak memory of s2forecast commands on a WeatherBench2-layout store; prints JSON lines.

Writes a synthetic store as WeatherBench2 publishes ERA5: dims ``(time, level, longitude,
latitude)``, zarr v2, one time step per chunk, latitudes north to south, values in each
variable's canonical units and plausible ranges (``data.plausibility``). Then runs every case
(a named command line, ``CASES``, in CASES order) in a subprocess of its own, and a raw read of
its input in the same run, and prints per command:

    {"case", "workers", "wall_s", "cpu_s", "peak_rss_mb", "store_mb", "data_mb", "input_mb", "mb_per_s",
     "raw", "raw_wall_s", "raw_cpu_s", "raw_peak_rss_mb", "raw_mb_per_s", "ratio", "ratio_net", "input_bytes",
     "imports_s", "raw_imports_s", "grid",
     "channels", "steps", "load"}   (+ "inits", "leads" for evaluate and rollout, "plots" for evaluate,
     "output_write_s", "output_write_cpu_s" for climatology)

evaluate and rollout have null ``input_mb``, ``mb_per_s``, ``raw*`` and ``ratio*``: what they read is a
forecast or a checkpoint plus some steps of the truth, not a whole input that a raw read could be
timed on, so they have no read-throughput figure (their wall time and peak RSS are what counts).

The cases:
    stats, climatology   of the store.
    convert-era5  of CDS-style NetCDF files that the script writes from the store (untimed) as
                  the new CDS API delivers them: dims ``valid_time, pressure_level, latitude,
                  longitude``, ECMWF short names (z, t, u, v, q, w; t2m, u10, v10, msl, sp), an
                  ``expver`` coordinate and a scalar ``number``, one file per pressure-level
                  variable and one for the surface variables per ``--file-steps`` steps, not
                  compressed. Its raw read is those files (``xr.open_dataset(f).mean()`` each);
                  inputs and output are deleted after the case (unless ``--keep``).
    evaluate      ``--inits`` init times (every store time from the first) x ``--leads`` 6-h
                  leads x the store's channels, plots included, against the climatology of the
                  ``climatology`` case (built untimed when that case is not run). The forecast
                  is the truth plus noise growing with the lead, a zarr store written (untimed)
                  with rollout's ``ForecastFile``.
    rollout       ``--inits`` init times x ``--leads`` steps of a small planar transformer
                  (patches of ~1/90 of the longitudes: a 45x90 latent grid at 0.25 deg; cheap to
                  build at any grid, unlike the DISCO filters of the spherical one), zarr
                  output; its checkpoint is made untimed as ``fit`` saves one, untrained,
                  with the statistics of the ``stats`` case (computed untimed when not run).
``--inits`` takes a list (8,16): evaluate and rollout run once per count (peak vs inits).

``input_mb`` is the bytes on disk a case's raw read reads (the store, or for convert-era5 its
NetCDF inputs; the store's raw read is timed once per store, before the first case that needs it);
``mb_per_s`` is input_mb over the wall time; ``ratio`` = mb_per_s / raw_mb_per_s (1: as fast as
reading the input). Wall time, CPU time (user + system, all threads, imports included) and peak
RSS come from ``/usr/bin/time -f "%e %U %S %M"``; the ``*peak_rss_mb`` fields are MiB (2**20 bytes:
its KiB / 1024), the sizes (``store_mb``, ``data_mb``, ``input_mb``, ``mb_per_s``) 10**6 bytes.
``startup`` (python, importing torch and
s2forecast.cli) is printed too; ``ratio_net`` is the ratio with each side's import time taken off
(what the case imports before its work, ``Case.imports``, and xarray's for the baseline), timed
once: null when either side took less than its imports (on a busy machine), never negative.

``output_write_s`` / ``output_write_cpu_s`` (climatology): the wall and CPU seconds of writing its
output again, chunk by chunk from memory, with its chunks and compressors (each chunk read first,
untimed): what writing the output alone costs, against ``raw_cpu_s`` for reading the input. The
copy needs as much free disk as the output (3.5 GB a channel at 0.25 deg) and is removed at once.

Everything is written in a directory the run makes inside ``--workdir`` (default /tmp), one
subdirectory per record length (``steps_N``: its store and every case's output), removed after that
length; ``--keep`` keeps them all and names the run's directory in the ``startup`` line
(``"workdir"``). Nothing else in ``--workdir`` is written or removed.

``--workers 2`` runs each case that takes it (all but rollout) again with ``--workers 2`` (a local
dask.distributed cluster of 2 worker processes, ``s2forecast.data.engine``; ``workers`` is 0 for
one process). Its wall time includes starting the cluster; its peak RSS is that of the largest
process (the command or one worker: ``time`` reports the largest of a process and the children it
waited for), not their sum.

Adding a command: a ``Case`` in ``CASES``: its argv after ``s2forecast`` given a ``Run``, and an
untimed preparation if it needs inputs other than the store.

Examples:
    python scripts/bench_scale.py                                  # 64x32, 16 steps, stats
    python scripts/bench_scale.py --grid 121x240 --steps 32,64,128  # one store per length
    python scripts/bench_scale.py --grid 721x1440 --steps 64 --cases climatology,evaluate,rollout --inits 8,16
    python scripts/bench_scale.py --grid 721x1440 --steps 32,64 --cases stats,convert-era5 --era5-channels
    python scripts/bench_scale.py --grid 121x240 --steps 64 --workers 2  # one process, then 2 workers
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.data.convert_era5 import ERA5_NAMES
from s2forecast.data.plausibility import GRAVITY, standard_height
from s2forecast.data.store import VARIABLES, cf_attributes, open_store
from s2forecast.inference.forecast_file import ChannelLayout, ForecastFile

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


@dataclass
class Run:
    """What a case is given: the store, its own scratch directory, ``root`` (where every case of
    this record length has its directory), and the sizes asked for."""

    store: Path
    work: Path
    root: Path
    steps: int
    inits: int = 0
    leads: int = 0
    file_steps: int = 16
    keep: bool = False


@dataclass(frozen=True)
class Case:
    """A command: its argv after ``s2forecast``; ``prepare`` (untimed) writes its other inputs and
    returns the files its raw read reads instead of the store (None: the store); ``uses_inits``:
    run once per ``--inits`` count, and no throughput (a forecast or checkpoint plus parts of the
    truth are read, not the store: no raw read measures them); ``report``: extra JSON keys;
    ``cleanup``: after the case."""

    argv: Callable[[Run], list[str]]
    prepare: Callable[[Run], list[Path] | None] | None = None
    uses_inits: bool = False
    report: Callable[[Run], dict] | None = None
    cleanup: Callable[[Run], None] | None = None
    distributed: bool = True  # takes --workers N (the data engine)
    imports: str | None = None  # what the command imports before its work, for ratio_net (None: STARTUP)


def _case_dir(run: Run, case: str) -> Path:
    return run.root / f"{case}_{run.steps}"


def _init_times(run: Run) -> list[str]:
    """The first ``run.inits`` store times, which every lead's valid time follows in the store."""
    if run.inits + run.leads > run.steps:
        raise SystemExit(f"--inits {run.inits} + --leads {run.leads} need at least that many --steps, got {run.steps}")
    times = xr.open_zarr(run.store)["time"].values[: run.inits]
    return [str(t)[:19] for t in times]


def _output_of(run: Run, case: str, name: str) -> Path:
    """The output ``name`` of ``case`` for this store: made by that case when it ran before (CASES
    order), else now, untimed, in that case's directory."""
    path = _case_dir(run, case) / name
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        measure(s2forecast_argv(CASES[case].argv(replace(run, work=path.parent))))
    return path


def write_cds_files(run: Run) -> list[Path]:
    """The store as CDS NetCDF files (new API layout, ECMWF short names), one per pressure-level
    variable and one of the surface variables per ``run.file_steps`` steps, written from dask
    chunks of one time step (memory: a step of one variable)."""
    short = {name: code for code, name in ERA5_NAMES.items()}
    ds = xr.open_zarr(run.store)
    missing = [name for name in ds.data_vars if name not in short]
    if missing:
        raise SystemExit(f"convert-era5: {missing} have no ECMWF short name; known: {sorted(short)}")
    inputs = run.work / "cds"
    inputs.mkdir()
    pressure = [name for name in ds.data_vars if "level" in ds[name].dims]
    surface = [name for name in ds.data_vars if "level" not in ds[name].dims]
    groups = [[name] for name in pressure] + ([surface] if surface else [])
    files = []
    for start in range(0, run.steps, run.file_steps):
        part = ds.isel(time=slice(start, start + run.file_steps))
        for names in groups:
            cds = part[names].rename({name: short[name] for name in names}).rename(time="valid_time")
            if "level" in cds.dims:  # hPa as floats, as the new CDS API writes them
                cds = cds.rename(level="pressure_level")
                cds = cds.assign_coords(pressure_level=cds["pressure_level"].astype(np.float64))
            # as the CDS delivers them: (valid_time, [pressure_level,] latitude, longitude), expver, number
            cds = cds.transpose("valid_time", ..., "latitude", "longitude")
            cds = cds.assign_coords(expver=("valid_time", np.full(cds.sizes["valid_time"], "0001")), number=0)
            stamp = pd.Timestamp(cds["valid_time"].values[0]).strftime("%Y%m%dT%H")
            path = inputs / f"era5_{'pressure_' + short[names[0]] if names[0] in pressure else 'surface'}_{stamp}.nc"
            encoding = {v: {"dtype": "float32", "chunksizes": (1, *cds[v].shape[1:])} for v in cds.data_vars}
            encoding["valid_time"] = {"units": "seconds since 1970-01-01", "dtype": "int64"}
            cds.attrs = {"Conventions": "CF-1.7", "institution": "European Centre for Medium-Range Weather Forecasts"}
            cds.to_netcdf(path, engine="netcdf4", encoding=encoding)
            files.append(path)
    return files


def remove_cds(run: Run) -> None:
    if not run.keep:
        shutil.rmtree(run.work / "cds", ignore_errors=True)
        shutil.rmtree(run.work / "era5.zarr", ignore_errors=True)


def write_forecast(run: Run) -> None:
    """A forecast in rollout's layout (``ForecastFile``, zarr): the truth at each valid time plus
    noise of 1 % of each channel's spread per lead, so that scores grow with the lead."""
    _output_of(run, "climatology", "clim.zarr")  # before the timed command, which names it
    truth = open_store(run.store)
    channels = [
        f"{name}/{level}" if "level" in truth[name].dims else name
        for name in truth.data_vars
        for level in (truth["level"].values if "level" in truth[name].dims else [None])
    ]
    layout = ChannelLayout.from_channels(channels)
    init_times = np.array(_init_times(run), dtype="datetime64[ns]")
    leads = (np.arange(1, run.leads + 1) * np.timedelta64(6, "h")).astype("timedelta64[ns]")
    lat, lon = truth["latitude"].values, truth["longitude"].values
    units = {name: dict(truth[name].attrs) for name in layout.variables}
    forecast = ForecastFile(run.work / "forecast.zarr", "zarr", layout, init_times, leads, lat, lon, units, {})
    rng = np.random.default_rng(1)
    for i, init in enumerate(init_times):
        for j, lead in enumerate(leads):
            state = truth.sel(time=init + lead)
            fields = np.concatenate([state[name].values.reshape(-1, len(lat), len(lon)) for name in layout.variables])
            spread = fields.std(axis=(1, 2), keepdims=True)
            noise = rng.standard_normal(fields.shape, dtype=np.float32)
            forecast.write(i, j, (fields + 0.01 * (j + 1) * spread * noise)[None])
    forecast.close()


def count_plots(run: Run) -> dict:
    return {"inits": run.inits, "leads": run.leads, "plots": len(list(run.work.rglob("*.png")))}


# the arrays of the zarr group argv[1] written again into argv[2], chunk by chunk, with the same chunks and
# compressors; prints the seconds (wall, CPU of all threads) spent in the writes alone (each chunk read first)
REWRITE = """
import itertools, json, resource, sys, time
import zarr
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
source, target = zarr.open_group(sys.argv[1], mode="r"), zarr.open_group(sys.argv[2], mode="w", zarr_format=3)
wall = cpu_s = 0.0
for name, array in source.arrays():
    copy = target.create_array(name, shape=array.shape, chunks=array.chunks, dtype=array.dtype,
                               compressors=array.compressors, fill_value=array.fill_value)
    if hasattr(copy, "with_config"):  # as the climatology writes: zarr >= 3.1.6
        copy = copy.with_config({"write_empty_chunks": True})
    for start in itertools.product(*[range(0, n, c) for n, c in zip(array.shape, array.chunks)]):
        region = tuple(slice(i, min(i + c, n)) for i, c, n in zip(start, array.chunks, array.shape))
        values = array[region]
        t0, c0 = time.perf_counter(), cpu()
        copy[region] = values
        wall, cpu_s = wall + time.perf_counter() - t0, cpu_s + cpu() - c0
print(json.dumps({"output_write_s": round(wall, 4), "output_write_cpu_s": round(cpu_s, 4)}))
"""


def rewrite_output(path: Path) -> dict:
    """``output_write_s`` and ``output_write_cpu_s`` of the zarr output at ``path`` (``REWRITE``, in a
    subprocess), the copy removed after."""
    copy = path.with_name(path.name + ".rewritten")
    try:
        result = subprocess.run([sys.executable, "-c", REWRITE, str(path), str(copy)], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"rewriting {path} failed: {result.stderr[-2000:]}")
        return json.loads(result.stdout.splitlines()[-1])
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def make_checkpoint(run: Run) -> None:
    """An untrained planar transformer for the store's channels, saved as ``fit`` saves it (the
    ForecastModule's state and hyperparameters), so that ``rollout --ckpt`` takes it."""
    import pytorch_lightning as pl
    import torch

    from s2forecast.training import ForecastModule, data_info
    from s2forecast.training.datamodule import ERA5DataModule

    truth = xr.open_zarr(run.store)
    surface = [name for name in truth.data_vars if "level" not in truth[name].dims]
    pressure = [name for name in truth.data_vars if "level" in truth[name].dims]
    first, last = (str(t)[:19] for t in truth["time"].values[[0, -1]])
    data = ERA5DataModule(
        str(run.store), variables=surface + pressure, static=[], train_period=(first, last), val_period=None,
        test_period=None, num_workers=0, stats=str(_output_of(run, "stats", "stats.zarr")),
    )  # fmt: skip
    nlon = truth.sizes["longitude"]
    network = {"embed_dim": 16, "num_layers": 1, "num_heads": 1, "patch_size": max(1, round(nlon / 90))}
    network |= {"attention": "window", "window": 3}
    model = ForecastModule(architecture="planar", network=network, data=data_info(data), warmup_steps=1)
    state = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    torch.save({**state, "pytorch-lightning_version": pl.__version__}, run.work / "model.ckpt")


def evaluate_argv(run: Run) -> list[str]:
    argv = ["evaluate", "--forecast", str(run.work / "forecast.zarr"), "--truth", str(run.store)]
    argv += ["--climatology", str(_output_of(run, "climatology", "clim.zarr"))]
    return argv + ["--out", str(run.work / "metrics.nc"), "--no-progress"]


def rollout_argv(run: Run) -> list[str]:
    argv = ["rollout", "--ckpt", str(run.work / "model.ckpt"), "--store", str(run.store), "--steps", str(run.leads)]
    argv += ["--init-times", ",".join(_init_times(run)), "--out", str(run.work / "forecast.zarr")]
    return argv + ["--format", "zarr", "--device", "cpu", "--no-progress"]


# case name -> Case; cases run in this order (evaluate after climatology, whose output it scores with)
CASES = {
    "stats": Case(
        lambda run: ["stats", str(run.store), "--out", str(run.work / "stats.zarr"), "--no-progress"],
        # no torch (test_cli_startup); dask.array and zarr, as the command loads them before reading (and the
        # baseline's RAW_STARTUP): else part of the command's imports would count as its work in ratio_net
        imports="import s2forecast.cli, s2forecast.data.stats, s2forecast.geometry, dask.array, zarr",
    ),
    "climatology": Case(
        lambda run: ["climatology", str(run.store), "--out", str(run.work / "clim.zarr"), "--no-progress"],
        imports="import s2forecast.cli, s2forecast.evaluation.climatology, s2forecast.data.store, dask.array, zarr",
        report=lambda run: rewrite_output(run.work / "clim.zarr"),
    ),
    "evaluate": Case(
        evaluate_argv,
        prepare=write_forecast,
        uses_inits=True,
        report=count_plots,
    ),
    "rollout": Case(
        rollout_argv,
        prepare=make_checkpoint,
        uses_inits=True,
        report=lambda run: {"inits": run.inits, "leads": run.leads},
        distributed=False,  # torchrun splits a rollout, not dask
    ),
    "convert-era5": Case(
        lambda run: ["convert-era5", str(run.work / "cds"), "--out", str(run.work / "era5.zarr"), "--no-progress"],
        prepare=write_cds_files,
        cleanup=remove_cds,
        imports="import s2forecast.cli, s2forecast.data.convert_era5, netCDF4, dask.array, zarr",  # no torch
    ),
}

# --variables, --levels, --surface of ERA5 as trained on: 5 variables x 13 levels (WB2's) + 5 surface = 70 channels
ERA5_70 = (
    "geopotential,temperature,u_component_of_wind,v_component_of_wind,specific_humidity",
    "50,100,150,200,250,300,400,500,600,700,850,925,1000",
    "2m_temperature,10m_u_component_of_wind,10m_v_component_of_wind,mean_sea_level_pressure,surface_pressure",
)
RAW = "import sys, xarray as xr; xr.open_zarr(sys.argv[1]).mean().compute()"
# NetCDF inputs: each file streamed one time step per dask chunk, as the zarr store is
RAW_NETCDF = (
    "import sys, xarray as xr\n"
    "for path in sys.argv[1:]: xr.open_dataset(path, chunks={'valid_time': 1}).mean().compute()"
)
RAW_STARTUP = "import xarray, dask.array, zarr"
# a row's throughput keys: null for the cases that use --inits
READ_KEYS = (
    "input_bytes",
    "input_mb",
    "mb_per_s",
    "raw",
    "raw_wall_s",
    "raw_cpu_s",
    "raw_peak_rss_mb",
    "raw_mb_per_s",
    "ratio",
    "ratio_net",
    "imports_s",
    "raw_imports_s",
)
# what a case imports before its work (ratio_net), unless its Case says otherwise: python + torch
STARTUP = "import torch, torch_harmonics, s2forecast.cli, s2forecast.geometry"


def parse_grid(text: str) -> tuple[int, int]:
    """'721x1440' (or '1440x721') -> (721, 1440): the smaller number is the latitude count."""
    try:
        a, b = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--grid {text!r}: give two numbers, e.g. 721x1440") from None
    if min(a, b) < 2:
        raise SystemExit(f"--grid {text!r}: a grid needs at least 2 latitudes and 2 longitudes, e.g. 721x1440")
    return min(a, b), max(a, b)


def counts(text: str, option: str, minimum: int = 1) -> list[int]:
    """'32,64' -> [32, 64]: whole numbers >= ``minimum``, else one line naming ``option``."""
    try:
        values = [int(x) for x in str(text).split(",") if x]
    except ValueError:
        raise SystemExit(f"{option} {text!r}: give whole numbers, e.g. 32 or 32,64") from None
    if not values or min(values) < minimum:
        raise SystemExit(f"{option} {text!r}: each must be >= {minimum}")
    return values


def one(values: list[int], name: str) -> int:
    if len(values) != 1:
        raise SystemExit(f"--{name.replace('_', '-')} {values}: give one number")
    return values[0]


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


def measure(argv: list[str]) -> tuple[float, float, float, str]:
    """(wall s, peak RSS MB, CPU s, stderr tail) of ``argv`` under ``/usr/bin/time``: its child is forked
    from the small ``time`` process, so the peak is the command's own (a child forked from this
    script would count this script's memory as well: Linux keeps the pre-exec peak)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        command = ["/usr/bin/time", "-f", "%e %U %S %M", "-o", report.name, *argv]
        result = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode == 2:  # s2forecast's one-line user error (of these options): passed on as it is
            raise SystemExit((result.stderr.strip().splitlines() or [f"exit status {result.returncode} (killed?)"])[-1])
        if result.returncode != 0:
            raise RuntimeError(f"{argv[:4]} failed ({result.returncode}): {result.stderr[-2000:]}")
        wall, user, system, peak_kb = report.read().split()[-4:]
    return float(wall), float(peak_kb) / 1024, float(user) + float(system), result.stderr[-500:]


def throughput(input_bytes: int, wall: float, startup: float, raw: str, raw_time, raw_startup: float) -> dict:
    """The ``READ_KEYS`` of a case that took ``wall`` s (``startup`` of it its imports) on ``input_bytes``,
    against a raw read of the same input of ``raw_time`` = (wall s, peak RSS MB, CPU s), ``raw_startup``
    of it xarray's imports."""
    raw_wall, raw_rss, raw_cpu = raw_time
    raw_rate = input_bytes / 1e6 / raw_wall
    return {
        "input_bytes": int(input_bytes),  # input_mb and the rates round to 0.0 at tiny grids
        "input_mb": round(input_bytes / 1e6, 1),
        "mb_per_s": round(input_bytes / 1e6 / wall, 1),
        "raw": raw,
        "raw_wall_s": round(raw_wall, 2),
        "raw_cpu_s": round(raw_cpu, 2),
        "raw_peak_rss_mb": round(raw_rss),
        "raw_mb_per_s": round(raw_rate, 1),
        "ratio": round(input_bytes / 1e6 / wall / raw_rate, 3),
        # the same without the imports (s2forecast's torch, the baseline's xarray): the reading (null when
        # either side took less than its imports alone, timed once: a startup that varies with the load)
        "ratio_net": round((raw_wall - raw_startup) / (wall - startup), 3)
        if raw_wall > raw_startup and wall > startup
        else None,
        "imports_s": round(startup, 2),  # what ratio_net takes off each side
        "raw_imports_s": round(raw_startup, 2),
    }


def s2forecast_argv(args: list[str]) -> list[str]:
    return [sys.executable, "-c", "import sys; from s2forecast.cli import main; main(sys.argv[1:])", *args]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="64x32", help="latitudes x longitudes (default 64x32: 32 x 64)")
    parser.add_argument("--variables", default="geopotential,temperature", help="pressure-level variables")
    parser.add_argument("--levels", default="500,850", help="pressure levels in hPa")
    parser.add_argument("--surface", default="", help="surface variables, e.g. 2m_temperature")
    parser.add_argument(
        "--era5-channels",
        action="store_true",
        help="ERA5's 70 channels of issue 27 (instead of the three above)",
    )
    parser.add_argument("--steps", default="16", help="record length(s) in time steps: 16 or 32,64,128")
    parser.add_argument("--cases", default="stats", help=f"comma-separated, of {list(CASES)}")
    parser.add_argument("--inits", default="8", help="init times of evaluate and rollout: 8 or 8,16 (a run each)")
    parser.add_argument("--leads", default="8", help="6-h leads (rollout steps) of evaluate and rollout")
    parser.add_argument("--file-steps", default="16", help="time steps per NetCDF input of convert-era5")
    parser.add_argument("--workers", default="", help="worker counts: each case also runs with --workers N, e.g. 2")
    parser.add_argument(
        "--workdir", default=None, help="an existing directory in which the run makes its own (default /tmp)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the stores and outputs")
    args = parser.parse_args(argv)

    nlat, nlon = parse_grid(args.grid)
    if args.era5_channels:
        args.variables, args.levels, args.surface = ERA5_70
    variables = [v for v in args.variables.split(",") if v]
    levels = counts(args.levels, "--levels") if args.levels else []
    steps_list, inits = counts(args.steps, "--steps"), counts(args.inits, "--inits")
    args.leads, args.file_steps = (one(counts(getattr(args, name), f"--{name.replace('_', '-')}"), name)
                                   for name in ("leads", "file_steps"))  # fmt: skip
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
        raise SystemExit(f"unknown cases {unknown}; known: {list(CASES)}")
    cases = [c for c in CASES if c in cases]  # each case's inputs are made by the cases before it
    if {"evaluate", "rollout"} & set(cases) and max(inits) + args.leads > min(steps_list):
        # before the store (minutes at 0.25 deg) and the cases before these
        raise SystemExit(
            f"--inits {max(inits)} + --leads {args.leads} need at least that many --steps, got {min(steps_list)}"
        )

    parent = Path(args.workdir or "/tmp")
    if not parent.is_dir():
        raise SystemExit(f"--workdir {parent} is not a directory; give an existing one (the run makes its own inside)")
    # a directory of this run's own: nothing of the user's in --workdir is written over or removed
    root = Path(tempfile.mkdtemp(prefix="bench_scale_", dir=parent))
    try:
        startup, startup_rss, _, _ = measure([sys.executable, "-c", STARTUP])
        raw_startup = measure([sys.executable, "-c", RAW_STARTUP])[0]
        row = {"case": "startup", "wall_s": round(startup, 2), "peak_rss_mb": round(startup_rss)}
        print(json.dumps({**row, **({"workdir": str(root)} if args.keep else {})}))
        startups = {None: startup}  # by a case's imports (torch's or not)
        for spec in (CASES[case] for case in cases):
            if spec.imports not in startups:
                startups[spec.imports] = measure([sys.executable, "-c", spec.imports])[0]
        for steps in steps_list:
            length = root / f"steps_{steps}"  # this record length's store and outputs, removed whole after it
            length.mkdir()
            store = length / f"wb2_{nlat}x{nlon}_{steps}.zarr"
            write_store(store, nlat, nlon, steps, variables, levels, surface)
            size = store_bytes(store)
            data = 4 * steps * nlat * nlon * (len(variables) * len(levels) + len(surface))
            store_raw = None  # (wall s, peak MB, CPU s) of the store's raw read, once a case needs it
            base = Run(store, length, length, steps, leads=args.leads, file_steps=args.file_steps, keep=args.keep)
            for case in cases:
                spec = CASES[case]
                runs = [(count, n) for count in (inits if spec.uses_inits else [0]) for n in workers]
                for count, nworkers in runs:
                    if nworkers and not spec.distributed:
                        continue
                    work = _case_dir(base, case)
                    if spec.uses_inits:
                        work = work.with_name(f"{work.name}_{count}x{args.leads}")
                    if nworkers:
                        work = work.with_name(f"{work.name}_workers{nworkers}")
                    shutil.rmtree(work, ignore_errors=True)
                    work.mkdir()
                    run = replace(base, work=work, inits=count)
                    inputs = spec.prepare(run) if spec.prepare else None
                    if spec.uses_inits:
                        baseline = None
                    elif inputs is None:
                        store_raw = store_raw or measure([sys.executable, "-c", RAW, str(store)])[:3]
                        baseline = size, "zarr", store_raw
                    else:  # the case reads these files, not the store: its baseline reads them
                        raw_time = measure([sys.executable, "-c", RAW_NETCDF, *map(str, inputs)])[:3]
                        baseline = sum(path.stat().st_size for path in inputs), "netcdf", raw_time
                    options = ["--workers", str(nworkers)] if nworkers else []
                    wall, rss, cpu, _ = measure(s2forecast_argv(spec.argv(run) + options))
                    extra = spec.report(run) if spec.report else {}
                    if spec.cleanup:
                        spec.cleanup(run)
                    if baseline is None:
                        reading = dict.fromkeys(READ_KEYS)
                    else:
                        input_size, raw, raw_time = baseline
                        reading = throughput(input_size, wall, startups[spec.imports], raw, raw_time, raw_startup)
                    row = {
                        "case": case,
                        "workers": nworkers,
                        "wall_s": round(wall, 2),
                        "cpu_s": round(cpu, 2),
                        "peak_rss_mb": round(rss),
                        "store_mb": round(size / 1e6, 1),
                        "data_mb": round(data / 1e6, 1),
                        **reading,
                        "grid": f"{nlat}x{nlon}",
                        "channels": len(variables) * len(levels) + len(surface),
                        "steps": steps,
                        **extra,
                        "load": round(os.getloadavg()[0], 2),
                    }
                    print(json.dumps(row), flush=True)
            if not args.keep:  # a 0.25 deg climatology is ~6 GB a channel: free the disk before the next length
                shutil.rmtree(length)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
