"""``s2forecast convert-era5``: convert ERA5 files from the Copernicus CDS into a store."""

import argparse

from s2forecast.commands.arguments import engine, engine_options, local_output, nonnegative_int, positive_int
from s2forecast.data.defaults import CONVERT_TIME_CHUNK
from s2forecast.user_errors import UserError

HELP = "convert ERA5 files from the Copernicus CDS into a store"
# a new store is written in place: it keeps the time steps written before Ctrl-C
INTERRUPTED = "rerun the same command to finish it (a new store keeps what was written; --overwrite starts again)"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="ERA5 NetCDF files from the Copernicus CDS (or cfgrib-readable GRIB), or directories of them; "
        "split by month and/or variable is fine",
    )
    parser.add_argument("--out", required=True, type=local_output, metavar="STORE.zarr", help="zarr store to write")
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
    parser.add_argument(
        "--shards",
        type=positive_int,
        metavar="N",
        help="write zarr v3 shards of N time steps (one file per N steps and variable, instead of one per step); "
        "N must divide --time-chunk",
    )
    engine_options(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def run(args: argparse.Namespace) -> None:
    from s2forecast.data.convert_era5 import convert_era5
    from s2forecast.data.writer import is_complete

    complete_before = not args.overwrite and is_complete(args.out)  # a rerun on it writes nothing
    try:
        with engine(args, ("inputs", "out")) as runner:
            out = convert_era5(
                args.inputs,
                args.out,
                variables=args.variables,
                levels=args.levels,
                member=args.member,
                overwrite=args.overwrite,
                progress=args.progress,
                time_chunk=args.time_chunk,
                shards=args.shards or 0,
                engine=runner,
            )
    except FileNotFoundError as error:
        raise UserError(str(error)) from error
    print(f"{out} was already complete: nothing to write" if complete_before else f"wrote {out}")
