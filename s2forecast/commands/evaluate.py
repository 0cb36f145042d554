"""``s2forecast evaluate``: score forecasts against truth, persistence, climatology."""

import argparse
import sys
from pathlib import Path

from s2forecast.commands.arguments import (
    engine,
    engine_options,
    local_output,
    nonnegative_float,
    path_or_url,
    period_end,
    storage_options,
    timestamp,
)
from s2forecast.user_errors import UserError

HELP = "score forecasts against truth, persistence, climatology"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--forecast", required=True, type=path_or_url, metavar="FORECAST.nc",
        help="forecast NetCDF or zarr (WB2 layout); a zarr store may be a URL",
    )  # fmt: skip
    parser.add_argument(
        "--truth", required=True, type=path_or_url, metavar="STORE.zarr",
        help="truth store: a local path or URL (gs://, s3://, https://), zarr v2 or v3",
    )  # fmt: skip
    parser.add_argument(
        "--climatology",
        type=path_or_url,
        metavar="CLIM.zarr",
        help="WB2-layout climatology (dayofyear, hour, [level], latitude, longitude), e.g. a WeatherBench2 "
        "climatology zarr, local or at a URL (default: computed from the truth store)",
    )
    parser.add_argument(
        "--climatology-start",
        type=timestamp,
        metavar="DATE",
        help="first truth time of a computed climatology (default: the first)",
    )
    parser.add_argument(
        "--climatology-end",
        type=period_end,
        metavar="DATE",
        help="last truth time of a computed climatology, inclusive (a date: all of that day, as climatology's --end)",
    )
    parser.add_argument("--out", required=True, type=local_output, metavar="METRICS.nc", help="metrics NetCDF to write")
    parser.add_argument("--variables", nargs="+", metavar="NAME", help="forecast variables to score (default: all)")
    parser.add_argument(
        "--regions", nargs="+", action="extend", metavar="REGION",
        help="regions to score: WeatherBench2 names (global, tropics, extra-tropics, northern-hemisphere, "
        "southern-hemisphere, europe, north-america, north-atlantic, north-pacific, east-asia, ausnz, arctic, "
        "antarctic; global_land, tropics_land, extra-tropics_land with a land-sea mask) or boxes "
        "LAT0,LAT1,LON0,LON1 in degrees, named or not (alps=44,48,5,16 is labelled alps) (longitudes compared "
        "mod 360: 340,20 wraps through 0 E, 170,-170 crosses the dateline; one starting with '-' as "
        "--regions=-10,10,350,10; the option may be repeated) (default: all WeatherBench2 regions)",
    )  # fmt: skip
    parser.add_argument(
        "--map-leads",
        nargs="+",
        type=nonnegative_float,
        metavar="HOURS",
        help="leads of the map panels (default: first and last)",
    )
    parser.add_argument(
        "--nan", choices=["skip", "error"], default="skip",
        help="NaN or infinite forecast or truth values: skip scores the finite points, counts the others per lead "
        "(in the metrics file) and warns; error refuses them (default: skip)",
    )  # fmt: skip
    parser.add_argument("--no-plots", dest="plots", action="store_false", help="write no PNGs")
    storage_options(parser)
    engine_options(parser)
    parser.add_argument(
        "--overwrite", action="store_true", help="replace metrics, CSV and plots that s2forecast wrote before"
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def run(args: argparse.Namespace) -> None:
    """Score, then print the table and the files written."""
    from s2forecast.evaluation.config import EvaluationConfig
    from s2forecast.evaluation.evaluate import evaluate
    from s2forecast.evaluation.report import format_table

    period = None
    if args.climatology_start is not None or args.climatology_end is not None:
        if args.climatology is not None:
            raise UserError("--climatology-start/--climatology-end apply to a computed climatology, not --climatology")
        period = (args.climatology_start, args.climatology_end)
    config = EvaluationConfig(variables=args.variables, regions=args.regions)  # the default metrics and baselines
    with engine(args, ("forecast", "truth", "climatology", "out")) as runner:
        metrics = evaluate(
            args.forecast,
            args.truth,
            args.out,
            climatology=args.climatology,
            map_leads=args.map_leads,
            plots=args.plots,
            progress=args.progress,
            climatology_period=period,
            overwrite=args.overwrite,
            storage_options=args.storage_options,
            config=config,
            engine=runner,
            nan=args.nan,
        )
    print(format_table(metrics))
    print(f"climatology: {metrics.attrs['climatology_source']} (method {metrics.attrs['climatology_method']})")
    print(f"wrote {Path(args.out).resolve()}")
    print(f"wrote {metrics.attrs['csv']}")
    if metrics.attrs["plot_files"]:
        print(f"wrote {len(metrics.attrs['plot_files'])} plots in {metrics.attrs['plots_dir']}")
    sys.stdout.flush()
