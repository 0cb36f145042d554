"""``s2forecast stats``: normalization statistics of a store (into it, or --out)."""

import argparse

from s2forecast.commands.arguments import engine, engine_options, local_output, path_or_url, storage_options

HELP = "normalization statistics of a store (into it, or --out)"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "store", type=path_or_url, help="a store: local path or URL (gs://, s3://, https://), zarr v2 or v3"
    )
    parser.add_argument(
        "--out",
        type=local_output,
        help="write the statistics to this zarr of their own (required for a store s2forecast did not write); "
        "without it they go into the store's own stats group, replacing any earlier ones",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace statistics s2forecast wrote at --out")
    storage_options(parser)
    parser.add_argument("--start", help="first time (e.g. 1979-01-01); default: the first in the store")
    parser.add_argument(
        "--end", help="last time, inclusive (a date: all of that day, e.g. 2017-12-31); default: the last in the store"
    )
    parser.add_argument("--step-hours", type=float, help="tendency step; default: the store's time step")
    engine_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> None:
    from s2forecast.data.engine import reuse_freed_memory
    from s2forecast.data.stats import compute_stats
    from s2forecast.times import format_time

    reuse_freed_memory()  # a new block array per read: faulted in anew each time otherwise
    with engine(args, ("store", "out")) as runner:
        stats = compute_stats(args.store, args.start, args.end, args.step_hours, out=args.out,
                              storage_options=args.storage_options, overwrite=args.overwrite,
                              progress=not args.no_progress, engine=runner)  # fmt: skip
    print(stats.to_dataframe().to_string(float_format=lambda x: f"{x:.6g}"))
    period = f"{format_time(stats.attrs['start'])} .. {format_time(stats.attrs['end'])}"
    where = args.out if args.out is not None else f"{args.store}/stats"
    tendencies = f"tendencies over {stats.attrs['tendency_step_hours']:g} h from {stats.attrs['tendency_pairs']} pairs"
    print(f"stored in {where} ({stats.attrs['times']} times {period}; {tendencies})")
