#!/usr/bin/env python
"""Benchmark spherical attention layers; prints one JSON line per case.

Every implementation runs the same layer (q/k/v/output projections with identical weights)
and differs only in the attention op:
  s2forecast        s2forecast.nn.S2Attention / S2NeighborhoodAttention
  torch-harmonics   torch_harmonics.AttentionS2 / NeighborhoodAttentionS2
  sdpa-dense        global: plain SDPA without quadrature weights (the speed floor);
                    neighborhood: dense SDPA with the full N x N float mask (small N only)

Each case runs in a fresh subprocess so that peak memory is its own: CUDA
max_memory_allocated, or on CPU the growth of the process's peak resident set.

Examples:
    python scripts/bench_attention.py                       # the default set
    python scripts/bench_attention.py --nlat 128 --nlon 256 --batch 4 --op neighborhood
"""

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F

IMPLS = ("s2forecast", "torch-harmonics", "sdpa-dense")
DENSE_MAX_POINTS = 16384  # the dense neighborhood mask is N^2 floats
CPU_GLOBAL_MAX_POINTS = 16384  # global attention beyond this takes minutes on a CPU


def build_layer(case):
    from torch_harmonics import AttentionS2, NeighborhoodAttentionS2

    from s2forecast.geometry import Grid
    from s2forecast.nn import S2Attention, S2NeighborhoodAttention

    grid = Grid(case["nlat"], case["nlon"], case["grid"])
    channels, heads = case["channels"], case["heads"]
    if case["op"] == "global":
        ours = S2Attention(channels, heads, grid)
    else:
        ours = S2NeighborhoodAttention(channels, heads, grid, theta=case["theta"])
    if case["impl"] == "s2forecast":
        return ours
    if case["impl"] == "torch-harmonics":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if case["op"] == "global":
                peer = AttentionS2(channels, heads, grid.shape, grid.shape, grid_in=grid.kind, grid_out=grid.kind)
            else:  # torch-harmonics widens its cutoff by 1e-3; undo it so both see the same disks
                peer = NeighborhoodAttentionS2(
                    channels, grid.shape, grid.shape, grid_in=grid.kind, grid_out=grid.kind,
                    num_heads=heads, theta_cutoff=case["theta"] / 1.001,
                )  # fmt: skip
        return peer

    # sdpa-dense: our projections around a dense SDPA call
    if case["op"] == "neighborhood":
        from s2forecast.ops.neighborhood import spherical_neighborhood
        from s2forecast.ops.quadrature_bias import log_quadrature_weights

        inside = spherical_neighborhood(grid, case["theta"]).dense_mask()
        log_w = log_quadrature_weights(grid, "cpu", torch.float32)
        mask = torch.where(inside, log_w[None, :], float("-inf"))
    else:
        mask = None

    class DenseSDPA(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = ours
            self.register_buffer("mask", mask)

        def forward(self, x):
            q, k, v = self.layer._project(x, None, None, grid, grid)
            bias = None if self.mask is None else self.mask.to(q.dtype)
            return self.layer._merge(F.scaled_dot_product_attention(q, k, v, attn_mask=bias), grid)

    return DenseSDPA()


def run_case(case, repeats):
    device = torch.device(case["device"])
    dtype = getattr(torch, case["dtype"])
    torch.manual_seed(0)
    layer = build_layer(case).to(device)
    x = torch.randn(case["batch"], case["channels"], case["nlat"], case["nlon"], device=device)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def forward():
        with torch.no_grad(), autocast:
            layer(x)

    def forward_backward():
        with autocast:
            out = layer(x)
        out.float().square().mean().backward()

    def timed(fn):
        fn()  # warm-up (also builds cached neighborhood structures)
        times = []
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times.append(1e3 * (time.perf_counter() - start))
        return statistics.median(times)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fwd_ms = timed(forward)
    fwd_bwd_ms = timed(forward_backward)
    if device.type == "cuda":
        peak_mb = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    return {**case, "fwd_ms": round(fwd_ms, 3), "fwd_bwd_ms": round(fwd_bwd_ms, 3), "peak_mem_mb": round(peak_mb, 1)}


def default_theta(nlat):
    return 7.0 / math.sqrt(math.pi) * math.pi / (nlat - 1)


def cases_for(args):
    sizes = [(args.nlat, args.nlon)] if args.nlat else [(64, 128), (128, 256)]
    ops = [args.op] if args.op else ["neighborhood", "global"]
    impls = [args.impl] if args.impl else list(IMPLS)
    for nlat, nlon in sizes:
        n = nlat * nlon
        for op in ops:
            if op == "global" and args.device == "cpu" and n > CPU_GLOBAL_MAX_POINTS and not args.nlat:
                continue
            for impl in impls:
                if impl == "sdpa-dense" and op == "neighborhood" and n > DENSE_MAX_POINTS:
                    continue
                yield {
                    "op": op,
                    "impl": impl,
                    "nlat": nlat,
                    "nlon": nlon,
                    "grid": args.grid,
                    "batch": args.batch,
                    "channels": args.channels,
                    "heads": args.heads,
                    "theta": args.theta if args.theta else default_theta(nlat),
                    "dtype": args.dtype,
                    "device": args.device,
                }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nlat", type=int, help="with --nlon, run this grid size only")
    parser.add_argument("--nlon", type=int)
    parser.add_argument(
        "--grid", default="equiangular", choices=["equiangular", "equiangular-midpoint", "legendre-gauss"]
    )
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--theta", type=float, help="radius in radians; default (7/sqrt(pi)) * pi/(nlat-1)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--op", choices=["global", "neighborhood"])
    parser.add_argument("--impl", choices=IMPLS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one JSON case in this process
    args = parser.parse_args()
    if (args.nlat is None) != (args.nlon is None):
        parser.error("--nlat and --nlon go together")

    if args.case:
        print(json.dumps(run_case(json.loads(args.case), args.repeats)), flush=True)
        return
    for case in cases_for(args):
        command = [sys.executable, __file__, "--case", json.dumps(case), "--repeats", str(args.repeats)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            print(json.dumps({**case, "error": result.stderr.strip().splitlines()[-1:]}), flush=True)
        else:
            print(result.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
