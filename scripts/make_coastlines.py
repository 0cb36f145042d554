#!/usr/bin/env python
"""Make ``s2forecast/evaluation/coastlines_110m.npz``, the coastlines drawn on evaluate's maps.

Input: ``land-110m.json`` of the npm package world-atlas 2.0.2 (``npm pack world-atlas@2.0.2``),
Natural Earth's 1:110m land (version 4.1.0; Natural Earth is public domain) as TopoJSON: arcs
of quantized, delta-encoded (longitude, latitude) points. Output: the arcs as polylines,
float32 degrees, one NaN row between polylines, without the cut edges that run along the
antimeridian (they are no coastline) and split where an arc crosses it.

    npm pack world-atlas@2.0.2 && tar xzf world-atlas-2.0.2.tgz
    python scripts/make_coastlines.py package/land-110m.json s2forecast/evaluation/coastlines_110m.npz
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SOURCE = (
    "Natural Earth 1:110m land boundaries, version 4.1.0 (public domain, naturalearthdata.com), "
    "from land-110m.json of world-atlas 2.0.2 (Copyright 2013-2019 Michael Bostock; ISC license: "
    "Permission to use, copy, modify, and/or distribute this software for any purpose with or without "
    "fee is hereby granted, provided that the above copyright notice and this permission notice appear "
    "in all copies.) by scripts/make_coastlines.py"
)
ANTIMERIDIAN_DEG = 179.99  # |longitude| of points on the antimeridian (quantized to 0.0036 degrees)


def decode_arcs(topology: dict) -> list[np.ndarray]:
    """TopoJSON arcs as (points, 2) arrays of (longitude, latitude) degrees."""
    scale, translate = np.array(topology["transform"]["scale"]), np.array(topology["transform"]["translate"])
    return [np.cumsum(np.asarray(arc, dtype=np.float64), axis=0) * scale + translate for arc in topology["arcs"]]


def coastline_pieces(arc: np.ndarray) -> list[np.ndarray]:
    """Split an arc where a segment runs along the antimeridian (a cut edge of the land polygons)
    or jumps across it (-180 to 180); pieces of one point are dropped."""
    on_meridian = np.abs(arc[:, 0]) >= ANTIMERIDIAN_DEG
    cut_edge = on_meridian[:-1] & on_meridian[1:]
    jump = np.abs(np.diff(arc[:, 0])) > 180.0
    breaks = np.flatnonzero(cut_edge | jump) + 1
    return [piece for piece in np.split(arc, breaks) if len(piece) > 1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topojson", type=Path, help="world-atlas land-110m.json")
    parser.add_argument("out", type=Path, help="the .npz to write (must not exist)")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(
            f"{parser.prog}: error: {args.out} exists; remove it first to remake it",
            file=sys.stderr,
        )
        return 2
    if not args.topojson.is_file():
        print(
            f"{parser.prog}: error: {args.topojson}: no such file; download world-atlas' land-110m.json",
            file=sys.stderr,
        )
        return 2
    topology = json.loads(args.topojson.read_text())
    pieces = [piece for arc in decode_arcs(topology) for piece in coastline_pieces(arc)]
    separated = [np.vstack([piece, [[np.nan, np.nan]]]) for piece in pieces]
    points = np.vstack(separated)[:-1].astype(np.float32)  # (points, 2), NaN rows between polylines
    np.savez_compressed(args.out, longitude=points[:, 0], latitude=points[:, 1], source=np.array(SOURCE))
    print(f"{args.out}: {len(pieces)} polylines, {np.isfinite(points[:, 0]).sum()} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
