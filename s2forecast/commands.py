"""The subcommands of ``s2forecast``: their arguments, and the function that runs each one.

One way to build every subcommand: a ``Command`` names its argument definitions (functions
below, which import nothing heavy, so that ``s2forecast --help`` and ``s2forecast CMD --help``
start at once) and the function that runs it, as "module:function", imported only when the
command runs. The Lightning commands (fit, validate, test) are parsed by LightningCLI.
Commands are listed in the order of the workflow: data, statistics, training, forecasts,
scores.
"""

import argparse
from dataclasses import dataclass
from pathlib import Path

from s2forecast.arguments import (
    device,
    json_object,
    nonnegative_float,
    nonnegative_int,
    path_or_url,
    positive_float,
    positive_int,
    timestamp,
    timestamps,
)

CONVERT_TIME_CHUNK = 4  # time steps per written slab of convert-era5 (its unit of resumption)
SWE_BATCH = 16  # shallow-water trajectories integrated together by generate-swe


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    arguments: object  # (parser) -> None; None for the Lightning commands (LightningCLI parses them)
    run: str  # "module:function" taking the parsed arguments (or, for Lightning, the argv)

    @property
    def lightning(self) -> bool:
        return self.arguments is None


def generate_swe(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="zarr store to write")
    parser.add_argument("--nlat", type=positive_int, default=32)
    parser.add_argument("--nlon", type=positive_int, default=64)
    parser.add_argument("--grid", default="equiangular", choices=["equiangular", "legendre-gauss"])
    parser.add_argument("--trajectories", type=int, default=8, help="independent random initial conditions")
    parser.add_argument("--steps", type=int, default=48, help="stored steps per trajectory after the initial state")
    parser.add_argument("--dt-hours", type=float, default=1.0, help="hours between stored states")
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--solver-dt-seconds", type=float, default=150.0, help="longest solver time step")
    parser.add_argument(
        "--batch",
        type=positive_int,
        default=SWE_BATCH,
        metavar="N",
        help=f"trajectories integrated together (default {SWE_BATCH}); each holds (steps + 1) x 3 x nlat x nlon "
        "float32 values in memory until written",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a store s2forecast wrote instead of resuming it"
    )
    parser.add_argument("--no-progress", action="store_true")


def convert_era5(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="ERA5 NetCDF files from the Copernicus CDS (or cfgrib-readable GRIB), or directories of them; "
        "split by month and/or variable is fine",
    )
    parser.add_argument("--out", required=True, type=Path, metavar="STORE.zarr", help="zarr store to write")
    parser.add_argument(
        "--variables",
        nargs="+",
        metavar="NAME",
        help="variables to convert, WeatherBench2 or ECMWF short names (default: all found)",
    )
    parser.add_argument(
        "--levels", nargs="+", type=positive_int, metavar="HPA", help="pressure levels to keep (default: all)"
    )
    parser.add_argument(
        "--member", type=nonnegative_int, help="ensemble member (value of the 'number' dimension) to convert"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing store that s2forecast wrote instead of resuming it (never anything else)",
    )
    parser.add_argument(
        "--time-chunk",
        type=positive_int,
        default=CONVERT_TIME_CHUNK,
        metavar="N",
        help=f"time steps written per slab, in parallel (default {CONVERT_TIME_CHUNK})",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-options", type=json_object, help='fsspec options of a URL, e.g. \'{"token": "anon"}\''
    )


def stats(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="a store: local path or URL (gs://, s3://, https://), zarr v2 or v3")
    parser.add_argument(
        "--out", help="write the statistics to this zarr of their own (required for a store s2forecast did not write)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace statistics s2forecast wrote at --out")
    storage_options(parser)
    parser.add_argument("--start", help="first time (e.g. 1979-01-01); default: the first in the store")
    parser.add_argument("--end", help="last time, inclusive; default: the last in the store")
    parser.add_argument("--step-hours", type=float, help="tendency step; default: the store's time step")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def climatology(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="a store: local path or URL, zarr v2 or v3")
    parser.add_argument("--out", required=True, help="CLIM.zarr")
    parser.add_argument("--start", help="first time of the period")
    parser.add_argument("--end", help="last time, inclusive")
    parser.add_argument("--overwrite", action="store_true", help="replace a climatology s2forecast wrote at --out")
    storage_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def rollout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="checkpoint (e.g. runs/.../checkpoints/last.ckpt)")
    parser.add_argument(
        "--store", required=True, type=path_or_url,
        help="initial conditions: a store (path or URL), or ERA5 NetCDF/GRIB from the CDS (any dates; no "
        "statistics needed)",
    )  # fmt: skip
    parser.add_argument("--steps", type=positive_int, required=True, help="model steps per forecast")
    parser.add_argument(
        "--init-times", type=timestamps, help="comma-separated initialization times, e.g. 2020-01-01T00,2020-01-02T00"
    )
    parser.add_argument("--start", type=timestamp, help="first initialization time (with --end)")
    parser.add_argument("--end", type=timestamp, help="last initialization time, inclusive")
    parser.add_argument(
        "--every", type=positive_float, help="hours between initialization times (default: every store time)"
    )
    parser.add_argument("--out", required=True, help="FORECAST.nc, or a .zarr directory with --format zarr")
    parser.add_argument("--format", choices=["netcdf", "zarr"], default="netcdf")
    parser.add_argument("--batch-size", type=positive_int, default=4, help="initialization times per batch")
    parser.add_argument("--device", type=device, default="auto", help="auto (cuda if there is one), cpu, cuda:1, ...")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    parser.add_argument("--nan", choices=["fail", "write"], default="fail", help="on a non-finite forecast value")
    parser.add_argument(
        "--other-grid", action="store_true", help="run on a store at another resolution than training (S2 models)"
    )
    parser.add_argument(
        "--store-stats", action="store_true",
        help="normalize with the store's own statistics (default: the checkpoint's, so any store of the model's "
        "variables works as initial conditions)",
    )  # fmt: skip
    parser.add_argument(
        "--members", type=nonnegative_int, default=0,
        help="ensemble members per initialization time (a model trained with loss: crps), written along realization",
    )  # fmt: skip
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the ensemble members' noise")
    parser.add_argument("--overwrite", action="store_true", help="replace a forecast s2forecast wrote at --out")
    storage_options(parser)
    parser.add_argument("--no-progress", action="store_true")


def evaluate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--forecast", required=True, type=Path, metavar="FORECAST.nc", help="forecast NetCDF or zarr (WB2 layout)"
    )
    parser.add_argument(
        "--truth", required=True, type=path_or_url, metavar="STORE.zarr",
        help="truth store: a local path or URL (gs://, s3://, https://), zarr v2 or v3",
    )  # fmt: skip
    parser.add_argument(
        "--climatology",
        type=Path,
        metavar="CLIM.zarr",
        help="WB2-layout climatology (dayofyear, hour, [level], latitude, longitude), e.g. a WeatherBench2 "
        "climatology zarr (default: computed from the truth store)",
    )
    parser.add_argument(
        "--climatology-start",
        type=timestamp,
        metavar="DATE",
        help="first truth time of a computed climatology (default: the first)",
    )
    parser.add_argument(
        "--climatology-end", type=timestamp, metavar="DATE", help="last truth time of a computed climatology, inclusive"
    )
    parser.add_argument("--out", required=True, type=Path, metavar="METRICS.nc", help="metrics NetCDF to write")
    parser.add_argument("--variables", nargs="+", metavar="NAME", help="forecast variables to score (default: all)")
    parser.add_argument(
        "--regions", nargs="+", action="extend", metavar="REGION",
        help="regions to score: WeatherBench2 names (global, tropics, extra-tropics, northern-hemisphere, "
        "southern-hemisphere, europe, north-america, north-atlantic, north-pacific, east-asia, ausnz, arctic, "
        "antarctic; global_land, tropics_land, extra-tropics_land with a land-sea mask) or boxes "
        "LAT0,LAT1,LON0,LON1 in degrees (lon0 > lon1 wraps through 0 E; one starting with '-' as "
        "--regions=-10,10,350,10; the option may be repeated) (default: all WeatherBench2 regions)",
    )  # fmt: skip
    parser.add_argument(
        "--map-leads",
        nargs="+",
        type=nonnegative_float,
        metavar="HOURS",
        help="leads of the map panels (default: first and last)",
    )
    parser.add_argument("--no-plots", dest="plots", action="store_false", help="write no PNGs")
    storage_options(parser)
    parser.add_argument(
        "--overwrite", action="store_true", help="replace metrics, CSV and plots that s2forecast wrote before"
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def grid(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nlat", type=positive_int, required=True)
    parser.add_argument("--nlon", type=positive_int, required=True)
    parser.add_argument(
        "--kind", default="equiangular", choices=["equiangular", "equiangular-midpoint", "legendre-gauss"]
    )
    parser.add_argument("--theta", type=float, help="neighborhood radius in radians (default: the paper's)")


COMMANDS = (
    Command("generate-swe", "integrate shallow-water trajectories into a store", generate_swe,
            "s2forecast.datamodules.swe:run"),
    Command("convert-era5", "convert ERA5 files from the Copernicus CDS into a store", convert_era5,
            "s2forecast.datamodules.convert_era5:run"),
    Command("stats", "normalization statistics of a store (into it, or --out)", stats,
            "s2forecast.datamodules.stats:run"),
    Command("fit", "train a model from a YAML config (Lightning)", None,
            "s2forecast.training.cli:run"),
    Command("validate", "score a checkpoint on the validation split (Lightning)", None, "s2forecast.training.cli:run"),
    Command("test", "score a checkpoint on the test split (Lightning)", None, "s2forecast.training.cli:run"),
    Command("rollout", "forecasts from a checkpoint, written as NetCDF/zarr", rollout,
            "s2forecast.inference.rollout:run"),
    Command("climatology", "day-of-year x hour climatology of a store (WeatherBench2)", climatology,
            "s2forecast.evaluation.climatology:run"),
    Command("evaluate", "score forecasts against truth, persistence, climatology", evaluate,
            "s2forecast.evaluation.evaluate:run"),
    Command("grid", "describe a grid and its attention neighborhoods", grid, "s2forecast.geometry.grid:run"),
)  # fmt: skip
