"""``s2forecast grid``: describe a grid and its attention neighborhoods."""

import argparse
import json
import math

from s2forecast.commands.arguments import positive_int

HELP = "describe a grid and its attention neighborhoods"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nlat", type=positive_int, required=True, help="latitudes (rows), e.g. 721 at 0.25 deg")
    parser.add_argument("--nlon", type=positive_int, required=True, help="longitudes (columns), e.g. 1440")
    parser.add_argument(
        "--kind", default="equiangular", choices=["equiangular", "equiangular-midpoint", "legendre-gauss"],
        help="where the rows lie (default: equiangular, poles included, as ERA5 and WeatherBench2)",
    )  # fmt: skip
    parser.add_argument("--theta", type=float, help="neighborhood radius in radians (default: the paper's)")


def run(args: argparse.Namespace) -> None:
    """Print the grid's geometry and its neighborhood-attention structure as JSON."""
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
