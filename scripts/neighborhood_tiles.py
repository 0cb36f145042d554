#!/usr/bin/env python
"""Work of the fused neighborhood kernel's tiles, on CPU: one JSON line per set-up and tile size.

For each (BLOCK_M, BLOCK_N) the forward kernel (s2forecast/ops/cuda/neighborhood_kernels.py)
scores, per query tile of BLOCK_M longitudes and per partner row, the tile's span of keys
(the arc widened by the tile, or the whole row) in chunks of BLOCK_N. ``neighbor_pairs`` counts
the (query, key) pairs inside the disks (the work an effective FLOP rate counts: pairs x 4 x
head_dim per head), ``scored_pairs`` those the tiles compute, ``fraction`` their ratio.

    python scripts/neighborhood_tiles.py                        # issue 25's set-ups a, b, c
    python scripts/neighborhood_tiles.py --nlat 721 --nlon 1440 --tiles 16x16 64x32
"""

import argparse
import json
import math

import torch

from s2forecast.geometry import Grid
from s2forecast.ops import default_radius
from s2forecast.ops.cuda.tables import prepare_fused_neighborhood

TILES = ("16x16", "32x32", "64x32", "64x64", "128x64", "32x128", "64x128")  # the autotuner's sizes and 16x16
SETUPS = {"a": (128, 256, "default"), "b": (180, 360, "spacing"), "c": (721, 1440, "default")}


def tile_work(grid: Grid, theta: float, block_m: int, block_n: int) -> dict:
    """Neighbor pairs and pairs scored by (block_m, block_n) tiles on ``grid`` with radius ``theta``."""
    table = prepare_fused_neighborhood(grid, theta, "cpu").forward
    nlon = grid.nlon
    widths, count = table.widths.long(), table.count.long()
    valid = torch.arange(widths.shape[1])[None, :] < count[:, None]
    whole = 2 * widths + 1 >= nlon
    keys_per_query = torch.where(valid, torch.where(whole, nlon, 2 * widths + 1), 0).sum(dim=1)  # per row
    scored = 0
    for start in range(0, nlon, block_m):
        length = torch.where(whole, nlon, min(block_m, nlon - start) + 2 * widths)
        scored += int(torch.where(valid, torch.ceil(length / block_n) * block_n * block_m, 0).sum())
    pairs = int(keys_per_query.sum()) * nlon
    return {"neighbor_pairs": pairs, "scored_pairs": scored, "fraction": round(pairs / scored, 3)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nlat", type=int, help="with --nlon: this grid (radius: --theta or the default)")
    parser.add_argument("--nlon", type=int)
    parser.add_argument("--theta", type=float, help="radius in radians")
    parser.add_argument("--tiles", nargs="+", default=list(TILES), help="BLOCK_MxBLOCK_N, e.g. 64x32")
    args = parser.parse_args(argv)
    if (args.nlat is None) != (args.nlon is None):
        parser.error("--nlat and --nlon go together")
    # 0 was taken for "not given": the default set-ups ran, 0.25° among them, or the default radius
    if args.nlat is not None and (args.nlat < 2 or args.nlon < 1):
        parser.error(f"--nlat and --nlon must be at least 2 and 1, got {args.nlat} and {args.nlon}")
    if args.theta is not None and not 0 < args.theta <= math.pi:
        parser.error(f"--theta is a radius in radians in (0, pi], got {args.theta}")
    tiles = []
    for text in args.tiles:
        m, _, n = text.partition("x")
        if not (m.isdigit() and n.isdigit() and int(m) > 0 and int(n) > 0):
            parser.error(f"--tiles takes BLOCK_MxBLOCK_N with positive integers, e.g. 64x32; got {text!r}")
        tiles.append((int(m), int(n)))
    if args.nlat is not None:
        setups = {f"{args.nlat}x{args.nlon}": (args.nlat, args.nlon, "default" if args.theta is None else args.theta)}
    else:
        setups = SETUPS
    for name, (nlat, nlon, radius) in setups.items():
        grid = Grid(nlat, nlon)
        theta = {"default": default_radius(grid), "spacing": grid.lat_spacing}.get(radius, radius)
        for block_m, block_n in tiles:
            work = tile_work(grid, theta, block_m, block_n)
            print(json.dumps({"setup": name, "nlat": nlat, "nlon": nlon, "theta": theta, "BLOCK_M": block_m,
                              "BLOCK_N": block_n, **work}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
