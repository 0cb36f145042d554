"""``s2forecast rollout``: forecasts from a checkpoint, written as NetCDF/zarr."""

import argparse

from s2forecast.commands.arguments import (
    device,
    local_output,
    nonnegative_int,
    path_or_url,
    positive_float,
    positive_int,
    resolve_device,
    storage_options,
    timestamp,
    timestamps,
)

HELP = "forecasts from a checkpoint, written as NetCDF/zarr"


def arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument(
        "--out", required=True, type=local_output, help="FORECAST.nc, or a .zarr directory with --format zarr"
    )
    parser.add_argument("--format", choices=["netcdf", "zarr"], default="netcdf")
    parser.add_argument(
        "--shards", type=positive_int, metavar="N",
        help="with --format zarr: write zarr v3 shards of N initialization times (one file per N times and lead, "
        "instead of one per time, lead and member); N must divide --batch-size",
    )  # fmt: skip
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


def run(args: argparse.Namespace) -> None:
    from s2forecast.inference.ranks import Ranks
    from s2forecast.inference.rollout import RolloutOptions, init_times_from, rollout, source_times

    options = RolloutOptions(
        fmt=args.format, batch_size=args.batch_size, device=resolve_device(args.device), bf16=args.bf16,
        nan_policy=args.nan, other_grid=args.other_grid, store_stats=args.store_stats, members=args.members,
        seed=args.seed, overwrite=args.overwrite, storage_options=args.storage_options, shards=args.shards or 0,
    )  # fmt: skip
    available = source_times(args.store, args.storage_options)  # after the options: bad ones fail before any read
    times = init_times_from(args.init_times, args.start, args.end, args.every, available)
    ranks = Ranks.from_environment()  # torchrun / srun: every process runs this command, rank 0 reports
    out = rollout(args.ckpt, args.store, args.steps, times, args.out, options, not args.no_progress, ranks)
    if ranks.rank == 0:
        print(f"wrote {out}: {len(times)} initialization times x {args.steps} steps")
