"""``s2forecast generate-swe``: integrate shallow-water trajectories into a store."""

import argparse

from s2forecast.commands.arguments import local_output, nonnegative_int, positive_int
from s2forecast.data.defaults import SWE_BATCH

HELP = "integrate shallow-water trajectories into a store"
# a new store is written in place: it keeps the time steps written before Ctrl-C
INTERRUPTED = "rerun the same command to finish it (a new store keeps what was written; --overwrite starts again)"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=local_output, help="zarr store to write")
    parser.add_argument("--nlat", type=positive_int, default=32, help="latitudes (default %(default)s)")
    parser.add_argument("--nlon", type=positive_int, default=64, help="longitudes (default %(default)s)")
    parser.add_argument(
        "--grid", default="equiangular", choices=["equiangular", "legendre-gauss"], help="(default %(default)s)"
    )
    parser.add_argument(
        "--trajectories", type=int, default=8, help="independent random initial conditions (default %(default)s)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=48,
        help="stored steps per trajectory after the initial state (default %(default)s)",
    )
    parser.add_argument("--dt-hours", type=float, default=1.0, help="hours between stored states (default %(default)s)")
    parser.add_argument(
        "--seed", type=nonnegative_int, default=0, help="seed of the initial conditions (default %(default)s)"
    )
    parser.add_argument(
        "--solver-dt-seconds", type=float, default=150.0, help="longest solver time step (default %(default)s)"
    )
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
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> None:
    from s2forecast.data.swe import generate_swe
    from s2forecast.data.writer import is_complete

    complete_before = not args.overwrite and is_complete(args.out)  # a rerun on it writes nothing
    path = generate_swe(
        args.out, args.nlat, args.nlon, args.grid, args.trajectories, args.steps, args.dt_hours, args.seed,
        args.solver_dt_seconds, args.batch, overwrite=args.overwrite, progress=not args.no_progress,
    )  # fmt: skip
    print(f"{path} was already complete: nothing to write" if complete_before else f"wrote {path}")
