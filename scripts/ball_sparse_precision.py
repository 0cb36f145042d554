#!/usr/bin/env python
"""How far two correct float32 computations of ball sparse attention can lie apart: the PyTorch
path in float32 against itself in float64, on the same inputs, with the float64 run replaying the
float32 run's block selection (of multi-level compression: ``descend_select_blocks``; the default)
or selecting its own (``--own-selection``).

The GPU test of the fused kernel at 0.25 deg compares two float32 paths with a 1e-3 tolerance;
this measures, on CPU, what float32 arithmetic alone and a selection flip each account for.
Prints one JSON line per output (out, dq, dk, dv).

    python scripts/ball_sparse_precision.py --nlat 361 --nlon 720           # 15.6 s + 35.0 s (README)
    python scripts/ball_sparse_precision.py --nlat 361 --nlon 720 --own-selection
"""

import argparse
import importlib
import json
import time

import torch

from s2forecast.geometry import Grid
from s2forecast.ops import ball_sparse_attention
from s2forecast.user_errors import UserError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nlat", type=int, default=361)
    parser.add_argument("--nlon", type=int, default=720)
    parser.add_argument("--compression-window", type=int, default=256)
    parser.add_argument("--own-selection", action="store_true", help="the float64 run selects its own blocks")
    args = parser.parse_args()
    try:
        measure(args)
    except UserError as error:  # the sizes: one line, as the commands say it
        parser.error(str(error))


def measure(args) -> None:
    module = importlib.import_module("s2forecast.ops.ball_sparse_attention")
    select, recorded, replayed = module.descend_select_blocks, [], []

    def record(*a, **k):
        recorded.append(select(*a, **k))
        return recorded[-1]

    def replay(*a, **k):
        replayed.append(1)
        return recorded.pop(0)

    torch.manual_seed(0)
    grid = Grid(args.nlat, args.nlon)
    inputs = [torch.randn(1, 4, grid.npoints, 16) for _ in range(3)]
    grad_out = torch.randn(1, 4, grid.npoints, 16)
    results, seconds = {}, {}
    for dtype in (torch.float32, torch.float64):
        same = dtype == torch.float64 and not args.own_selection
        module.descend_select_blocks = replay if same else record
        start = time.perf_counter()
        x = [t.to(dtype).requires_grad_() for t in inputs]
        out = ball_sparse_attention(*x, grid, backend="reference", compression_window=args.compression_window)
        results[dtype] = [out.detach(), *torch.autograd.grad(out, x, grad_out.to(dtype))]
        seconds[str(dtype)] = round(time.perf_counter() - start, 1)
    module.descend_select_blocks = select
    pairs = zip(results[torch.float32], results[torch.float64], strict=True)
    for name, (single, double) in zip(["out", "dq", "dk", "dv"], pairs, strict=True):
        error = (single.double() - double).abs()
        print(json.dumps({
            "grid": f"{args.nlat}x{args.nlon}", "output": name, "same_selection": not args.own_selection,
            "max_abs": round(double.abs().max().item(), 4), "max_error": float(f"{error.max().item():.3e}"),
            "entries_above_1e-3": int((error > 1e-3).sum()), "selections_replayed": len(replayed), "seconds": seconds,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
