#!/usr/bin/env python
"""Rotation-equivariance error of attention layers against resolution (issue 19).

For each layer and grid, the relative rotation error of ``s2forecast.nn.equivariance``
(quadrature-weighted, smooth input, mean over random rotations), with the same weights at
every resolution (same seed, a resolution-free layer) and a fixed continuous operator:
- global: S2Attention (quadrature-weighted) vs planar (unweighted SDPA over all points);
- neighborhood: S2NeighborhoodAttention with a fixed geodesic radius theta vs planar (a square
  index window of the same radius in grid spacings, unweighted);
- ball: S2BallSparseAttention with a fixed number of balls (8) and coarse tokens (256), so
  that a ball covers the same area at every resolution (no planar counterpart here: the BSA
  paper's point-cloud version is the same ball-tree construction);
- network: the whole SphericalTransformer (DISCO encoder to a 2x coarser grid, 2 blocks of
  neighborhood attention, DISCO decoder; fixed radii: theta, encoder and decoder cutoffs) with
  its default DISCO basis ("s2": harmonic, kernel 3x3, whose filters have a direction, measured
  from local north) vs "isotropic" filters (piecewise linear, kernel 3x1: radial only).
Prints one JSON line per (layer, variant, grid) and per (layer, variant) the fitted rate p of
error ~ nlat**-p (least squares in log-log); ``--plot`` draws error vs nlat.

    python scripts/equivariance_resolution.py --plot docs/images/equivariance_resolution.png
"""

import argparse
import functools
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from s2forecast.geometry import Grid, random_rotation
from s2forecast.models.spherical_transformer import SphericalTransformer
from s2forecast.nn import S2Attention, S2BallSparseAttention, S2NeighborhoodAttention
from s2forecast.nn.equivariance import rotation_error

CHANNELS, HEADS = 8, 2
THETA = 0.35  # radians: the neighborhood radius, the same continuous operator at every resolution


def planar_window(layer: S2NeighborhoodAttention, x: torch.Tensor) -> torch.Tensor:
    """Unweighted attention over the square index window |d row| <= r, |d col| <= r (periodic in
    longitude, clipped at the poles), r = theta in grid spacings; one query row at a time."""
    grid = layer.grid
    r = max(1, round(layer.theta / grid.lat_spacing))
    q, k, v = layer._project(x, None, None, grid, grid)  # (batch, heads, N, d)
    shape = q.shape[:2]
    q, k, v = (t.reshape(*shape, grid.nlat, grid.nlon, -1) for t in (q, k, v))
    cols = torch.arange(grid.nlon)
    offset = (cols[:, None] - cols[None, :]) % grid.nlon
    within = torch.minimum(offset, grid.nlon - offset) <= r  # (nlon queries, nlon keys)
    rows = []
    for i in range(grid.nlat):
        lo, hi = max(0, i - r), min(grid.nlat, i + r + 1)
        keys = k[:, :, lo:hi].reshape(*shape, -1, k.shape[-1])
        values = v[:, :, lo:hi].reshape(*shape, -1, v.shape[-1])
        mask = within.repeat(1, hi - lo)  # the same columns in every key row
        rows.append(F.scaled_dot_product_attention(q[:, :, i], keys, values, attn_mask=mask))
    out = torch.stack(rows, dim=2).reshape(*shape, grid.npoints, -1)
    return layer._merge(out, grid)


def planar_global(layer: S2Attention, x: torch.Tensor) -> torch.Tensor:
    grid = layer.grid_in
    q, k, v = layer._project(x, None, None, grid, grid)
    # query chunks: softmax is per query row, and at 256x512 a whole score matrix is 137 GB in float64
    out = torch.cat([F.scaled_dot_product_attention(chunk, k, v) for chunk in q.split(1024, dim=2)], dim=2)
    return layer._merge(out, grid)


def ball_layer(grid: Grid, variant: str) -> S2BallSparseAttention:
    n = grid.npoints
    return S2BallSparseAttention(CHANNELS, HEADS, grid, ball_size=n // 8, block_size=n // 256, top_k=2,
                                 group_size=8, backend="reference")  # fmt: skip


def network(grid: Grid, variant: str) -> SphericalTransformer:
    isotropic = {"encoder_kernel_shape": (3, 1), "basis_type": "piecewise linear"}
    basis = isotropic if variant == "isotropic" else {}
    return SphericalTransformer(grid, CHANNELS, CHANNELS, embed_dim=16, num_layers=2, num_heads=HEADS, theta=THETA,
                                encoder_cutoff=0.25, decoder_cutoff=0.4, backend="reference", **basis)  # fmt: skip


LAYERS = {  # name -> (factory(grid, variant), {variant: apply(layer, x)})
    "global": (lambda g, _: S2Attention(CHANNELS, HEADS, g), {"s2": lambda m, x: m(x), "planar": planar_global}),
    "neighborhood": (
        lambda g, _: S2NeighborhoodAttention(CHANNELS, HEADS, g, theta=THETA, backend="reference"),
        {"s2": lambda m, x: m(x), "planar": planar_window},
    ),
    "ball": (ball_layer, {"s2": lambda m, x: m(x)}),
    "network": (network, {"s2": lambda m, x: m(x), "isotropic": lambda m, x: m(x)}),  # variants of the network
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grids", nargs="+", default=["32x64", "64x128", "128x256", "256x512"])
    parser.add_argument("--layers", nargs="+", choices=list(LAYERS), default=list(LAYERS))
    parser.add_argument("--variants", nargs="+", choices=["s2", "planar", "isotropic"],
                        default=["s2", "planar", "isotropic"])  # fmt: skip
    parser.add_argument("--rotations", type=int, default=3, help="random rotations averaged")
    parser.add_argument("--plot", type=Path, help="PNG of error vs nlat")
    parser.add_argument("--lines", type=Path, nargs="+", help="plot (--plot) JSON lines of earlier runs; no measuring")
    args = parser.parse_args()
    if args.plot is not None and args.plot.suffix.lower() != ".png":  # matplotlib's error came after the measuring
        parser.error(f"--plot {args.plot}: give a .png path")
    if args.plot is not None and args.plot.exists():
        parser.error(f"--plot {args.plot} exists; give another path or move it away")
    if args.lines:
        if args.plot is None:  # README: --lines FILE ... --plot PNG redraws the figure
            parser.error("--lines redraws the figure of earlier runs: give it with --plot PNG")
        missing = [str(path) for path in args.lines if not path.is_file()]
        if missing:
            parser.error(f"--lines {' '.join(missing)}: no such file (the JSON lines of a run of this script)")
        try:
            results = results_from_lines(args.lines)
        except (ValueError, KeyError, TypeError) as error:  # JSONDecodeError is a ValueError
            parser.error(f"--lines: not the JSON lines of a run of this script ({error!r})")
        plot(results, args.plot)
        return
    try:
        shapes = [tuple(int(n) for n in g.split("x")) for g in args.grids]
    except ValueError:
        parser.error(f"--grids {' '.join(args.grids)}: give NLATxNLON sizes, e.g. 32x64")
    if any(len(shape) != 2 or min(shape) < 2 for shape in shapes):
        parser.error(f"--grids {' '.join(args.grids)}: give NLATxNLON sizes of at least 2x2, e.g. 32x64")
    rotations = [random_rotation(torch.Generator().manual_seed(s)) for s in range(1, args.rotations + 1)]
    results = {}
    for name in args.layers:
        factory, variants = LAYERS[name]
        for variant, apply in variants.items():
            if variant not in args.variants:
                continue
            errors = []
            for shape in shapes:
                grid = Grid(*shape)
                torch.manual_seed(0)  # the same weights at every resolution
                layer = factory(grid, variant).double().eval()
                run = functools.partial(apply, layer)
                error = float(np.mean([rotation_error(run, grid, r, CHANNELS) for r in rotations]))
                errors.append(error)
                print(json.dumps({"layer": name, "variant": variant, "grid": f"{shape[0]}x{shape[1]}",
                                  "relative_error": error}), flush=True)  # fmt: skip
            nlat = np.array([s[0] for s in shapes], dtype=float)
            rate = -np.polyfit(np.log(nlat), np.log(errors), 1)[0] if len(shapes) > 1 else math.nan
            results[(name, variant)] = (nlat, errors)
            print(json.dumps({"layer": name, "variant": variant, "fitted_rate": round(float(rate), 3)}), flush=True)
    if args.plot:
        plot(results, args.plot)


def results_from_lines(paths: list[Path]) -> dict:
    """{(layer, variant): (nlat, errors)} from the JSON lines of earlier runs (later lines win)."""
    points = {}
    for path in paths:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "grid" in row:
                points.setdefault((row["layer"], row["variant"]), {})[int(row["grid"].split("x")[0])] = row[
                    "relative_error"
                ]
    return {key: (np.array(sorted(by_nlat), dtype=float), [by_nlat[n] for n in sorted(by_nlat)])
            for key, by_nlat in points.items()}  # fmt: skip


def plot(results: dict, path: Path) -> None:
    """Error vs nlat, log-log, one line per (layer, variant) with its fitted rate in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for (name, variant), (nlat, errors) in results.items():
        style = "-" if variant == "s2" else "--"
        rate = -np.polyfit(np.log(nlat), np.log(errors), 1)[0] if len(nlat) > 1 else math.nan
        ax.loglog(nlat, errors, style, marker="o", label=f"{name} ({variant}): rate {rate:.2f}")
    ax.set_xlabel("nlat (grid nlat x 2 nlat)")
    ax.set_ylabel("relative rotation error")
    ax.set_title("Equivariance error vs resolution (mean of random rotations)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
