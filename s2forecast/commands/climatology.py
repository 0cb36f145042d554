"""``s2forecast climatology``: day-of-year x hour climatology of a store (WeatherBench2)."""

import argparse

from s2forecast.commands.arguments import engine, engine_options, local_output, path_or_url, storage_options

HELP = "day-of-year x hour climatology of a store (WeatherBench2)"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", type=path_or_url, help="a store: local path or URL, zarr v2 or v3")
    parser.add_argument("--out", required=True, type=local_output, help="CLIM.zarr")
    parser.add_argument("--start", help="first time of the period")
    parser.add_argument("--end", help="last time, inclusive")
    parser.add_argument("--overwrite", action="store_true", help="replace a climatology s2forecast wrote at --out")
    storage_options(parser)
    engine_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> None:
    from s2forecast.data.engine import reuse_freed_memory
    from s2forecast.evaluation.climatology import write_climatology

    reuse_freed_memory()  # a new array per block read and per output chunk: faulted in anew each time otherwise
    with engine(args, ("store", "out")) as runner:
        out = write_climatology(args.store, args.out, args.start, args.end, overwrite=args.overwrite,
                                progress=not args.no_progress, storage_options=args.storage_options,
                                engine=runner)  # fmt: skip
    import xarray as xr

    attrs = xr.open_zarr(out).attrs  # a record too short for WB2's method falls back: say so
    print(f"wrote {out}: method {attrs['climatology_method']} ({attrs['climatology_method_reason']})")
