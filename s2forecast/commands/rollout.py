"""``s2forecast rollout``: forecasts from a checkpoint, written as NetCDF/zarr."""

import argparse

from s2forecast.commands.arguments import (
    device,
    ensemble_members,
    local_output,
    nonnegative_int,
    path_or_url,
    period_end,
    perturbation_scale,
    positive_float,
    positive_int,
    resolve_device,
    storage_options,
    timestamp,
    timestamps,
)
from s2forecast.output import output_format
from s2forecast.user_errors import UserError, is_out_of_memory

HELP = "forecasts from a checkpoint, written as NetCDF/zarr"
PERTURBATIONS = ("gaussian", "spherical-noise")  # = inference.perturbations.PERTURBATIONS (no torch for --help)
DEFAULT_SCALE = 0.05  # = inference.perturbations.DEFAULT_SCALE
FORMATS = ("netcdf", "zarr")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ckpt", required=True, type=path_or_url, help="checkpoint (e.g. runs/.../checkpoints/last.ckpt)"
    )
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
    parser.add_argument(
        "--end", type=period_end, help="last initialization time, inclusive (a date: all of that day, e.g. 2020-12-31)"
    )
    parser.add_argument(
        "--every", type=positive_float, help="hours between initialization times (default: every store time)"
    )
    parser.add_argument(
        "--out", required=True, type=local_output, help="FORECAST.nc (NetCDF) or FORECAST.zarr (a zarr directory)"
    )
    parser.add_argument(
        "--format", choices=FORMATS, help="default: from the --out suffix (.zarr: zarr, anything else: netcdf)"
    )
    parser.add_argument(
        "--shards", type=positive_int, metavar="N",
        help="with --format zarr: write zarr v3 shards of N initialization times (one file per N times and lead, "
        "instead of one per time, lead and member); N must divide --batch-size",
    )  # fmt: skip
    parser.add_argument(
        "--batch-size", type=positive_int, default=4, help="initialization times per batch (default: 4)"
    )
    parser.add_argument("--device", type=device, default="auto", help="auto (cuda if there is one), cpu, cuda:1, ...")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    parser.add_argument(
        "--nan", choices=["fail", "write"], default="fail",
        help="on a non-finite forecast value: stop, or write it (default: fail)",
    )  # fmt: skip
    parser.add_argument(
        "--other-grid", action="store_true", help="run on a store at another resolution than training (S2 models)"
    )
    parser.add_argument(
        "--store-stats", action="store_true",
        help="normalize with the statistics inside the store (`s2forecast stats`: a store, not an ERA5 file; "
        "default: the checkpoint's, so any store of the model's variables works as initial conditions)",
    )  # fmt: skip
    parser.add_argument(
        "--members", type=ensemble_members, default=0, metavar="K",
        help="ensemble members per initialization time, written along realization: members differ by their "
        "perturbed initial conditions (--perturbation), by the members of an ensemble file (--ic-members), and by "
        "the noise of a model trained with loss: crps (default: the number of --ic-members, else none)",
    )  # fmt: skip
    parser.add_argument(
        "--perturbation", choices=PERTURBATIONS,
        help="an initial-condition ensemble of any checkpoint: add to each member's initial state independent "
        "Gaussian noise per grid point, or smooth isotropic noise of the grid's spherical harmonics (degrees up to "
        "half the grid's); needs --members K >= 2",
    )  # fmt: skip
    parser.add_argument(
        "--perturbation-scale", type=perturbation_scale, metavar="S",
        help=f"std of the perturbation in units of each channel's std (the normalization statistics), at least "
        f"1e-6 (default: {DEFAULT_SCALE})",
    )  # fmt: skip
    parser.add_argument(
        "--ic-members", metavar="all|0,3,5|2",
        help="with a NetCDF/GRIB file of ensemble members (a number, realization or member dimension) as --store: "
        "the members to start from, as the ensemble (all, or a list), or one member (e.g. 2) as the initial condition",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=nonnegative_int, default=0,
        help="seed of the perturbations and of the members' model noise (default 0); with each initialization time "
        "it gives that time's members, whatever --batch-size or the other times",
    )  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace a forecast s2forecast wrote at --out")
    storage_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> None:
    from s2forecast.inference.ranks import Ranks
    from s2forecast.inference.rollout import RolloutOptions, init_times_from, rollout, source_times

    fmt = output_format(args.out, args.format)  # before any work: --format zarr --out x.nc is refused
    options = RolloutOptions(
        fmt=fmt, batch_size=args.batch_size, device=resolve_device(args.device), bf16=args.bf16,
        nan_policy=args.nan, other_grid=args.other_grid, store_stats=args.store_stats, members=args.members,
        perturbation=args.perturbation, perturbation_scale=args.perturbation_scale, ic_members=args.ic_members,
        seed=args.seed, overwrite=args.overwrite, storage_options=args.storage_options, shards=args.shards or 0,
        skip_without_inputs=not args.init_times and args.every is None,  # a range: its store times that can start
    )  # fmt: skip
    available = source_times(args.store, args.storage_options)  # after the options: bad ones fail before any read
    times = init_times_from(args.init_times, args.start, args.end, args.every, available)
    ranks = Ranks.from_environment()  # torchrun / srun: every process runs this command, rank 0 reports
    try:
        out = rollout(args.ckpt, args.store, args.steps, times, args.out, options, not args.no_progress, ranks)
    except Exception as error:
        if args.members and is_out_of_memory(error):  # members are a batch dimension, and one of the file's
            raise UserError(
                f"out of memory with --members {args.members} (forecast --batch-size {args.batch_size} init times at "
                "a time, each with every member): lower --members, or --batch-size"
            ) from None
        raise
    if ranks.rank == 0:
        print(f"wrote {out}: {written_sizes(out, fmt)}")


def written_sizes(out, fmt: str) -> str:
    """``N initialization times x S steps[ x K members]`` of the forecast file written (a range may
    have left some store times out: ``RolloutOptions.skip_without_inputs``)."""
    import xarray as xr

    with xr.open_zarr(out) if fmt == "zarr" else xr.open_dataset(out) as written:
        sizes = dict(written.sizes)
    members = sizes.get("realization", 0)
    steps = sizes["prediction_timedelta"]
    return f"{sizes['time']} initialization times x {steps} steps" + (f" x {members} members" if members else "")
