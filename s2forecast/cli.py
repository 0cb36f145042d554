"""The ``s2forecast`` command. Subcommands are added as the framework grows (fit, rollout, ...)."""

import argparse
import json
import math
import sys

from s2forecast import __version__


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="s2forecast", description="Data-driven forecasting on the sphere.")
    parser.add_argument("--version", action="version", version=f"s2forecast {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    grid = commands.add_parser("grid", help="describe a grid and its attention neighborhoods")
    grid.add_argument("--nlat", type=int, required=True)
    grid.add_argument("--nlon", type=int, required=True)
    grid.add_argument(
        "--kind", default="equiangular", choices=["equiangular", "equiangular-midpoint", "legendre-gauss"]
    )
    grid.add_argument("--theta", type=float, help="neighborhood radius in radians (default: the paper's)")
    grid.set_defaults(handler=grid_info)

    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        sys.exit(2)
    try:
        args.handler(args)
    except ValueError as error:
        parser.exit(2, f"s2forecast {args.command}: error: {error}\n")


if __name__ == "__main__":
    main()
