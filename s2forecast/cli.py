"""The ``s2forecast`` command. Subcommands are added as the framework grows (fit, rollout, ...).

A user error (a bad value, path or file, a configuration error: ``s2forecast.user_errors``)
ends the command with one line, ``s2forecast COMMAND: error: ...``, and exit status 2;
``--debug`` (anywhere on the command line) also prints the traceback. Other exceptions are
bugs and keep their traceback.
"""

import argparse
import difflib
import json
import math
import re
import sys
import traceback

from s2forecast import __version__
from s2forecast.arguments import (
    device,
    json_object,
    nonnegative_int,
    positive_float,
    positive_int,
    timestamp,
    timestamps,
)
from s2forecast.times import format_time
from s2forecast.user_errors import user_error_message

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
DEBUG = "--debug"


class CommandParser(argparse.ArgumentParser):
    """argparse, with usage errors in one line (argparse prints the whole usage first)."""

    def error(self, message: str):
        if match := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message):
            close = difflib.get_close_matches(match[1], re.findall(r"'([^']*)'", match[2]), n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def grid_info(args: argparse.Namespace) -> None:
    """Print a grid's geometry and its neighborhood-attention structure as JSON."""
    from s2forecast.geometry import Grid
    from s2forecast.ops import default_radius, spherical_neighborhood

    grid = Grid(args.nlat, args.nlon, args.kind)
    theta = default_radius(grid) if args.theta is None else args.theta
    neighborhood = spherical_neighborhood(grid, theta)
    counts = neighborhood.neighbors_per_row.float()
    print(
        json.dumps(
            {
                "nlat": grid.nlat,
                "nlon": grid.nlon,
                "kind": grid.kind,
                "points": grid.npoints,
                "lat_spacing_deg": round(math.degrees(grid.lat_spacing), 6),
                "first_lat_deg": float(grid.lats_deg[0]),
                "theta_rad": theta,
                "band_rows": neighborhood.band_rows,
                "neighbors_mean": round(float(counts.mean()), 2),
                "neighbors_max": int(counts.max()),
            }
        )
    )


def generate_swe(args: argparse.Namespace) -> None:
    """Integrate shallow-water trajectories into a store."""
    from s2forecast.datamodules.swe import generate_swe as generate

    path = generate(
        args.out, args.nlat, args.nlon, args.grid, args.trajectories, args.steps, args.dt_hours, args.seed,
        args.solver_dt_seconds, overwrite=args.overwrite, progress=not args.no_progress,
    )  # fmt: skip
    print(f"wrote {path}")


def store_stats(args: argparse.Namespace) -> None:
    """Compute and store normalization statistics."""
    from s2forecast.datamodules.stats import compute_stats

    stats = compute_stats(args.store, args.start, args.end, args.step_hours, out=args.out,
                          storage_options=args.storage_options, overwrite=args.overwrite)  # fmt: skip
    print(stats.to_dataframe().to_string(float_format=lambda x: f"{x:.6g}"))
    period = f"{format_time(stats.attrs['start'])} .. {format_time(stats.attrs['end'])}"
    where = args.out if args.out is not None else f"{args.store}/stats"
    print(f"stored in {where} ({stats.attrs['times']} times {period})")


def forecast_rollout(args: argparse.Namespace) -> None:
    """Roll a checkpoint out from initial conditions in a store."""
    from s2forecast.inference.rollout import init_times_from, rollout, source_times

    available = source_times(args.store)
    times = init_times_from(args.init_times, args.start, args.end, args.every, available)
    out = rollout(
        args.ckpt, args.store, args.steps, times, args.out, "zarr" if args.format == "zarr" else "netcdf",
        args.batch_size, args.device, args.bf16, args.nan, progress=not args.no_progress, other_grid=args.other_grid,
        overwrite=args.overwrite, store_stats=args.store_stats,
    )  # fmt: skip
    print(f"wrote {out}: {len(times)} initialization times x {args.steps} steps")


def store_climatology(args: argparse.Namespace) -> None:
    """Day-of-year x hour climatology of a store (WeatherBench2 layout)."""
    from s2forecast.evaluation.climatology import write_climatology

    out = write_climatology(args.store, args.out, args.start, args.end, overwrite=args.overwrite)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = DEBUG in argv
    argv = [arg for arg in argv if arg != DEBUG]
    command = argv[0] if argv and argv[0] in LIGHTNING_COMMANDS else None
    try:
        if command is not None:
            from s2forecast.training.cli import run

            run(argv)  # LightningCLI: `s2forecast fit --help`
            return
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            sys.exit(2)
        command = args.command
        args.handler(args)
    except Exception as error:
        message = user_error_message(error)
        if message is None:
            raise  # a bug: the traceback is what a report needs
        if debug:
            traceback.print_exception(error)
        sys.stderr.write(f"s2forecast {command}: error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand but the Lightning ones (which LightningCLI parses)."""
    parser = CommandParser(
        prog="s2forecast",
        description="Data-driven forecasting on the sphere.",
        epilog="A user error ends a command with one line; add --debug anywhere to see its traceback.",
    )
    parser.add_argument("--version", action="version", version=f"s2forecast {__version__}")
    parser.add_argument(DEBUG, action="store_true", help="print the traceback of an error (any command)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in LIGHTNING_COMMANDS:
        commands.add_parser(
            name, help=f"Lightning's {name} on a YAML config (`s2forecast {name} --help`)", add_help=False
        )

    grid = commands.add_parser("grid", help="describe a grid and its attention neighborhoods")
    grid.add_argument("--nlat", type=positive_int, required=True)
    grid.add_argument("--nlon", type=positive_int, required=True)
    grid.add_argument(
        "--kind", default="equiangular", choices=["equiangular", "equiangular-midpoint", "legendre-gauss"]
    )
    grid.add_argument("--theta", type=float, help="neighborhood radius in radians (default: the paper's)")
    grid.set_defaults(handler=grid_info)

    from s2forecast.datamodules import convert_era5

    convert = commands.add_parser(
        "convert-era5", help="convert ERA5 NetCDF/GRIB files from the Copernicus CDS into a store"
    )
    convert_era5.add_arguments(convert)
    convert.set_defaults(handler=convert_era5.run)

    swe = commands.add_parser("generate-swe", help="integrate shallow-water trajectories into a store")
    swe.add_argument("--out", required=True, help="zarr store to write")
    swe.add_argument("--nlat", type=positive_int, default=32)
    swe.add_argument("--nlon", type=positive_int, default=64)
    swe.add_argument("--grid", default="equiangular", choices=["equiangular", "legendre-gauss"])
    swe.add_argument("--trajectories", type=int, default=8, help="independent random initial conditions")
    swe.add_argument("--steps", type=int, default=48, help="stored steps per trajectory after the initial state")
    swe.add_argument("--dt-hours", type=float, default=1.0, help="hours between stored states")
    swe.add_argument("--seed", type=nonnegative_int, default=0)
    swe.add_argument("--solver-dt-seconds", type=float, default=150.0, help="longest solver time step")
    swe.add_argument("--overwrite", action="store_true", help="replace a store s2forecast wrote instead of resuming it")
    swe.add_argument("--no-progress", action="store_true")
    swe.set_defaults(handler=generate_swe)

    stats = commands.add_parser("stats", help="per-channel mean/std of fields and tendencies, stored with the store")
    stats.add_argument("store", help="a store: local path or URL (gs://, s3://, https://), zarr v2 or v3")
    stats.add_argument(
        "--out", help="write the statistics to this zarr of their own (required for a store s2forecast did not write)"
    )
    stats.add_argument("--overwrite", action="store_true", help="replace statistics s2forecast wrote at --out")
    stats.add_argument(
        "--storage-options", type=json_object, help='fsspec options of a URL, e.g. \'{"token": "anon"}\''
    )
    stats.add_argument("--start", help="first time (e.g. 1979-01-01); default: the first in the store")
    stats.add_argument("--end", help="last time, inclusive; default: the last in the store")
    stats.add_argument("--step-hours", type=float, help="tendency step; default: the store's time step")
    stats.set_defaults(handler=store_stats)

    roll = commands.add_parser("rollout", help="autoregressive forecasts from a checkpoint, written as NetCDF/zarr")
    roll.add_argument("--ckpt", required=True, help="checkpoint (e.g. runs/.../checkpoints/last.ckpt)")
    roll.add_argument(
        "--store", required=True,
        help="initial conditions: a store, or ERA5 NetCDF/GRIB from the CDS (any dates; no statistics needed)",
    )  # fmt: skip
    roll.add_argument("--steps", type=positive_int, required=True, help="model steps per forecast")
    roll.add_argument(
        "--init-times", type=timestamps, help="comma-separated initialization times, e.g. 2020-01-01T00,2020-01-02T00"
    )
    roll.add_argument("--start", type=timestamp, help="first initialization time (with --end)")
    roll.add_argument("--end", type=timestamp, help="last initialization time, inclusive")
    roll.add_argument(
        "--every", type=positive_float, help="hours between initialization times (default: every store time)"
    )
    roll.add_argument("--out", required=True, help="FORECAST.nc, or a .zarr directory with --format zarr")
    roll.add_argument("--format", choices=["netcdf", "zarr"], default="netcdf")
    roll.add_argument("--batch-size", type=positive_int, default=4, help="initialization times per batch")
    roll.add_argument("--device", type=device, default="cuda" if _cuda() else "cpu", help="cpu, cuda, cuda:1, ...")
    roll.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    roll.add_argument("--nan", choices=["fail", "write"], default="fail", help="on a non-finite forecast value")
    roll.add_argument(
        "--other-grid", action="store_true", help="run on a store at another resolution than training (S2 models)"
    )
    roll.add_argument(
        "--store-stats", action="store_true",
        help="normalize with the store's own statistics (default: the checkpoint's, so any store of the model's "
        "variables works as initial conditions)",
    )  # fmt: skip
    roll.add_argument("--overwrite", action="store_true", help="replace a forecast s2forecast wrote at --out")
    roll.add_argument("--no-progress", action="store_true")
    roll.set_defaults(handler=forecast_rollout)

    clim = commands.add_parser("climatology", help="day-of-year x hour climatology of a store (WeatherBench2 layout)")
    clim.add_argument("store")
    clim.add_argument("--out", required=True, help="CLIM.zarr")
    clim.add_argument("--start", help="first time of the period")
    clim.add_argument("--end", help="last time, inclusive")
    clim.add_argument("--overwrite", action="store_true", help="replace a climatology s2forecast wrote at --out")
    clim.set_defaults(handler=store_climatology)

    from s2forecast.evaluation import evaluate

    score = commands.add_parser("evaluate", help="RMSE, ACC and bias per lead against persistence and climatology")
    evaluate.add_arguments(score)
    score.set_defaults(handler=evaluate.run)
    return parser


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
