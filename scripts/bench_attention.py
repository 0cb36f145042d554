#!/usr/bin/env python
"""Benchmark spherical attention layers; prints one JSON line per case.

Every implementation runs the same layer (q/k/v/output projections with identical weights)
and differs only in the attention op:
  s2forecast        s2forecast.nn.S2Attention / S2NeighborhoodAttention; neighborhood: the
                    longitude-blocked PyTorch path (what backend="auto" runs on CPU), on
                    any device
  s2forecast-reference  neighborhood: the row-band PyTorch reference (backend="reference"),
                    the tests' oracle
  s2forecast-fused  S2NeighborhoodAttention / S2BallSparseAttention on our fused Triton
                    kernels (CUDA only)
  torch-harmonics   torch_harmonics.AttentionS2 / NeighborhoodAttentionS2 ("peer_kernels"
                    says whether its compiled extension was available)
  flex-attention    torch's FlexAttention with the same disks as a block-sparse mask built
                    from the per-row arcs and log w as score_mod (compiled on CUDA); global:
                    log w as score_mod, no mask
  sdpa-dense        global: plain SDPA without quadrature weights (the speed floor);
                    neighborhood: dense SDPA with the full N x N float mask (small N only)
  s2forecast-cudnn  global, CUDA: our log-weight mask on SDPA's cuDNN backend (a candidate
                    for the half-precision path, against the fold of "s2forecast")
  sdpa-cudnn        global, CUDA: plain SDPA without weights on the cuDNN backend

Global attention is left out above 16,384 points on a CPU and 300,000 on a GPU (0.25 degrees is
~1e15 FLOP a forward) unless --nlat/--nlon name the grid; --config runs the neighborhood
implementations and dense global SDPA (not at (c)).

Ops: global, neighborhood, and ball (s2forecast.nn.S2BallSparseAttention with the BSA paper's
defaults, or with --compression-window its multi-level compression; s2forecast only: no peer
has it on the sphere).

fwd_ms / fwd_bwd_ms / peak_mem_mb time the layer. Except for torch-harmonics, whose op is not
separable from its layer, attn_fwd_ms / attn_fwd_bwd_ms time the attention op alone on
(batch, heads, N, channels/heads) inputs, and on CUDA floor_ms is the memory floor of that op:
the bytes of q, k, v and the output over the device's measured copy bandwidth.

Each case runs in a fresh subprocess so that peak memory is its own: CUDA
max_memory_allocated, or on CPU the growth of the process's peak resident set. --rounds N runs
the whole set N times, interleaved (case 1, 2, ..., then 1, 2, ... again), so that the load of a
shared machine weighs on every competitor alike; each line carries its round, the torch
threads (--threads sets them for every competitor, torch-harmonics' OpenMP kernels included)
and the 1-minute load average when the case started.

Examples:
    python scripts/bench_attention.py                       # the default set
    python scripts/bench_attention.py --nlat 128 --nlon 256 --batch 4 --op neighborhood
    python scripts/bench_attention.py --config a --dtype bfloat16   # issue 3's set-ups a, b, c
    python scripts/bench_attention.py --op ball --impl s2forecast --nlat 180 --nlon 360  # ball sparse
    python scripts/bench_attention.py --device cpu --op neighborhood --threads 2 --rounds 3
"""

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F

IMPLS = ("s2forecast", "s2forecast-reference", "s2forecast-fused", "torch-harmonics", "flex-attention", "sdpa-dense",
         "s2forecast-cudnn", "sdpa-cudnn")  # fmt: skip
NEIGHBORHOOD_ONLY = ("s2forecast-reference", "s2forecast-fused")
GLOBAL_ONLY = ("s2forecast-cudnn", "sdpa-cudnn")
GPU_ONLY = ("s2forecast-fused", "flex-attention", "s2forecast-cudnn", "sdpa-cudnn")
# Issue 3's set-ups: the paper's SWE model, torch-harmonics' benchmark, ERA5 at 0.25 degrees.
CONFIGS = {
    "a": {"nlat": 128, "nlon": 256, "channels": 128, "heads": 4, "batch": 4, "theta": None},
    "b": {"nlat": 180, "nlon": 360, "channels": 64, "heads": 1, "batch": 1, "theta": "spacing"},
    "c": {"nlat": 721, "nlon": 1440, "channels": 256, "heads": 8, "batch": 1, "theta": None},
}
DENSE_MAX_POINTS = 16384  # the dense neighborhood mask is N^2 floats
CPU_GLOBAL_MAX_POINTS = 16384  # global attention beyond this takes minutes on a CPU
GPU_GLOBAL_MAX_POINTS = 300_000  # 0.25 degrees (1.04e6 points) is ~1e15 FLOP a forward: minutes a case


def build_layer(case):
    from torch_harmonics import AttentionS2, NeighborhoodAttentionS2

    from s2forecast.geometry import Grid
    from s2forecast.nn import S2Attention, S2BallSparseAttention, S2NeighborhoodAttention
    from s2forecast.nn.position_embedding import build_position_embedding

    grid = Grid(case["nlat"], case["nlon"], case["grid"])
    channels, heads = case["channels"], case["heads"]
    pe = build_position_embedding(
        case.get("position_embedding", "none"), grid=grid, channels=channels, num_heads=heads,
        head_dim=channels // heads,
    )  # fmt: skip
    # our layers choose their backend by name: the blocked path (s2forecast) on any device
    backend = {"s2forecast-fused": "fused", "s2forecast-reference": "reference"}.get(case["impl"], "blocked")
    if case["op"] == "global":
        ours = S2Attention(channels, heads, grid, position_embedding=pe)
    elif case["op"] == "ball":
        ours = S2BallSparseAttention(
            channels, heads, grid, position_embedding=pe, compression_window=case.get("compression_window"),
            backend="fused" if backend == "fused" else "reference",
        )  # fmt: skip
    else:
        ours = S2NeighborhoodAttention(
            channels, heads, grid, theta=case["theta"], backend=backend, position_embedding=pe
        )
    if case["impl"] in ("s2forecast", "s2forecast-fused", "s2forecast-reference"):
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

    class ProjectedOp(torch.nn.Module):
        """Our projections around another attention op."""

        def __init__(self):
            super().__init__()
            self.layer = ours
            self.op = attention_op(case, torch.device(case["device"]), getattr(torch, case["dtype"]))

        def forward(self, x):
            q, k, v = self.layer._project(x, None, None, grid, grid)
            return self.layer._merge(self.op(q, k, v), grid)

    return ProjectedOp()


def attention_op(case, device, dtype=torch.float32):
    """The attention op of ``case`` as a function of (batch, heads, N, head_dim) q, k, v; our
    backends' state is prepared once here, as a layer does, not per call."""
    from s2forecast.geometry import Grid
    from s2forecast.ops.backends import choose

    grid = Grid(case["nlat"], case["nlon"], case["grid"])
    if case["op"] == "global" and case["impl"] in ("flex-attention", *GLOBAL_ONLY):
        return global_candidate(case["impl"], grid, device)
    if case["impl"] == "flex-attention":
        return flex_neighborhood_attention(grid, case["theta"], device)
    if case["impl"] == "sdpa-dense":
        if case["op"] == "global":
            return F.scaled_dot_product_attention
        from s2forecast.ops.neighborhood import spherical_neighborhood
        from s2forecast.ops.quadrature_bias import log_quadrature_weights

        inside = spherical_neighborhood(grid, case["theta"]).dense_mask().to(device)
        log_w = log_quadrature_weights(grid, device, torch.float32)
        mask = torch.where(inside, log_w[None, :], float("-inf"))
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))
    if case["op"] == "global":
        backend = choose("global", "sdpa", device, dtype)
        state = backend.prepare(grid, device, dtype)
        return lambda q, k, v: backend(q, k, v, state, grid_q=grid, grid_kv=grid)
    fused = case["impl"] == "s2forecast-fused"
    if case["op"] == "ball":
        window = case.get("compression_window")  # None: the paper's defaults
        backend = choose("ball", "fused" if fused else "reference", device, dtype)
        state = backend.prepare(grid, 256, 8, window, device, dtype)
        return lambda q, k, v: backend(q, k, v, state)
    # s2forecast: the blocked path on any device
    name = "fused" if fused else "blocked" if case["impl"] == "s2forecast" else "reference"
    backend = choose("neighborhood", name, device, dtype)
    state = backend.prepare(grid, case["theta"], device, dtype)
    return lambda q, k, v: backend(q, k, v, state)


def global_candidate(impl, grid, device, compile=None):
    """Other paths for global attention in half precision, to choose from on a GPU (our fold
    widens head_dim by one channel, which at head_dim 64 takes FlashAttention's next tile size):
    ``s2forecast-cudnn`` our log-weight mask (1, 1, 1, N) on SDPA's cuDNN backend (on Hopper
    faster than FlashAttention for training shapes, and it takes a bias), ``sdpa-cudnn`` plain
    SDPA on the same backend (its baseline), ``flex-attention`` FlexAttention with log w as
    score_mod (``torch.compile``d on CUDA). A backend that cannot serve the case raises."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from s2forecast.ops.quadrature_bias import log_quadrature_weights

    log_w = log_quadrature_weights(grid, device, torch.float32)
    log_w = log_w - log_w.max()  # softmax is shift invariant; small values round least
    if impl == "flex-attention":
        from torch.nn.attention.flex_attention import flex_attention

        attend = _flex(flex_attention, device, compile)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + log_w[kv_idx]

        return lambda q, k, v: attend(q, k, v, score_mod=score_mod)

    def on_cudnn(q, k, v):
        mask = log_w.to(q.dtype).view(1, 1, 1, -1) if impl == "s2forecast-cudnn" else None
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return on_cudnn


def flex_block_mask_tables(grid, theta, block_size=128):
    """FlexAttention block tables of the disks, built from the per-row arcs.

    ``create_block_mask`` would evaluate all N^2 (query, key) pairs; here, for each block of
    ``block_size`` flat query indices, the key blocks come from the arcs of its query rows.
    A key block is full (no mask_mod call) when every query row of the query block sees every
    key row of the key block whole.

    Returns (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices) as int32 with
    leading (1, 1) batch and head dims, and the (nlat, nlat) half-width table (-1: no key,
    >= nlon // 2: the whole row).
    """
    from s2forecast.ops.neighborhood import spherical_neighborhood

    nlat, nlon = grid.shape
    npoints = nlat * nlon
    neighborhood = spherical_neighborhood(grid, theta)
    half_width = torch.full((nlat, nlat), -1, dtype=torch.int64)
    half_width.scatter_(1, neighborhood.key_rows, neighborhood.half_width)
    whole = (2 * half_width + 1 >= nlon).tolist()
    partners = [[(kr, hw) for kr, hw in enumerate(row) if hw >= 0] for row in half_width.tolist()]
    num_blocks = -(-npoints // block_size)
    partial, full = [], []
    for qb in range(num_blocks):
        first, last = qb * block_size, min(npoints, (qb + 1) * block_size) - 1
        blocks = set()
        for qr in range(first // nlon, last // nlon + 1):
            c0, c1 = max(first, qr * nlon) - qr * nlon, min(last, qr * nlon + nlon - 1) - qr * nlon
            for kr, hw in partners[qr]:
                if 2 * hw + 1 >= nlon or c1 - c0 + 2 * hw + 1 >= nlon:
                    spans = [(kr * nlon, kr * nlon + nlon - 1)]
                else:
                    lo, hi = c0 - hw, c1 + hw  # wrapped column interval
                    spans = [(kr * nlon + max(lo, 0), kr * nlon + min(hi, nlon - 1))]
                    if lo < 0:
                        spans.append((kr * nlon + nlon + lo, kr * nlon + nlon - 1))
                    if hi >= nlon:
                        spans.append((kr * nlon, kr * nlon + hi - nlon))
                for a, b in spans:
                    blocks.update(range(a // block_size, b // block_size + 1))
        q_rows = range(first // nlon, last // nlon + 1)
        full_blocks = set()
        if last - first + 1 == block_size:  # a ragged last block keeps the mask
            for kb in blocks:
                k_rows = range(kb * block_size // nlon, ((kb + 1) * block_size - 1) // nlon + 1)
                if (kb + 1) * block_size <= npoints and all(whole[qr][kr] for qr in q_rows for kr in k_rows):
                    full_blocks.add(kb)
        partial.append(sorted(blocks - full_blocks))
        full.append(sorted(full_blocks))

    def table(lists):
        # as wide as the key blocks: a BlockMask's KV length is read off this width (a narrower
        # table failed in the compiled kernel: a device-side assert on an H200, "KV seqlen must
        # be smaller than the block_mask size" from inductor on CPU)
        indices = torch.zeros(1, 1, num_blocks, num_blocks, dtype=torch.int32)
        for i, x in enumerate(lists):
            indices[0, 0, i, : len(x)] = torch.tensor(x, dtype=torch.int32)
        counts = torch.tensor([len(x) for x in lists], dtype=torch.int32).reshape(1, 1, num_blocks)
        return counts, indices

    return (*table(partial), *table(full)), half_width


def flex_neighborhood_attention(grid, theta, device, compile=None):
    """FlexAttention over the disks of radius ``theta``: mask_mod tests the wrapped longitude
    offset against the half-width table, score_mod adds log w of the key row; ``torch.compile``d
    (its fused kernel) by default on CUDA only."""
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    from s2forecast.ops.quadrature_bias import log_row_weights

    nlat, nlon = grid.shape
    (kv_num, kv_idx, full_num, full_idx), half_width = flex_block_mask_tables(grid, theta)
    half_width = half_width.to(device)
    log_w = log_row_weights(grid, device, torch.float32)

    def mask_mod(b, h, q_idx, kv_idx):
        offset = (q_idx % nlon - kv_idx % nlon).abs()
        return torch.minimum(offset, nlon - offset) <= half_width[q_idx // nlon, kv_idx // nlon]

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + log_w[kv_idx // nlon]

    block_mask = BlockMask.from_kv_blocks(
        kv_num.to(device), kv_idx.to(device), full_num.to(device), full_idx.to(device),
        mask_mod=mask_mod, seq_lengths=(grid.npoints, grid.npoints),
    )  # fmt: skip
    attend = _flex(flex_attention, device, compile)
    return lambda q, k, v: attend(q, k, v, score_mod=score_mod, block_mask=block_mask)


def _flex(flex_attention, device, compile=None):
    """FlexAttention ``torch.compile``d (its fused kernel), by default on CUDA only."""
    compile = device.type == "cuda" if compile is None else compile
    return torch.compile(flex_attention, dynamic=False) if compile else flex_attention


def run_case(case, repeats):
    if case.get("threads"):
        torch.set_num_threads(case["threads"])  # also OpenMP's, which torch-harmonics' CPU kernels use
    device = torch.device(case["device"])
    dtype = getattr(torch, case["dtype"])
    torch.manual_seed(0)
    layer = build_layer(case).to(device)
    x = torch.randn(case["batch"], case["channels"], case["nlat"], case["nlon"], device=device)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)

    def forward():
        with torch.no_grad(), autocast:
            layer(x)

    def forward_backward():
        with autocast:
            out = layer(x)
        out.float().square().mean().backward()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = {**case, "threads": torch.get_num_threads(), "load_1min": round(os.getloadavg()[0], 2)}
    result |= {"fwd_ms": timed(forward, repeats, device), "fwd_bwd_ms": timed(forward_backward, repeats, device)}
    if device.type == "cuda":
        result["peak_mem_mb"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
    else:
        result["peak_mem_mb"] = round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024, 1)
    if case["impl"] == "torch-harmonics":
        from attention_helpers import cuda_kernels_is_available, optimized_kernels_is_available

        if device.type == "cuda":
            result["peer_kernels"] = "cuda-extension" if cuda_kernels_is_available() else "no-cuda-extension"
        else:
            result["peer_kernels"] = "cpu-extension" if optimized_kernels_is_available() else "torch"
    else:
        del layer
        result.update(time_op(case, repeats, device, dtype))
    if case["impl"] == "s2forecast-fused" and device.type == "cuda":
        result["triton_configs"] = chosen_configs()
    return result


def chosen_configs():
    """The tile configuration each of our autotuned kernels chose for this case (the last key it
    ran with), by kernel: what the next tuning starts from."""
    import triton

    from s2forecast.ops.cuda import fused_indexed_attention, fused_neighborhood_attention

    chosen = {}
    for module in (fused_neighborhood_attention, fused_indexed_attention):
        for name, kernel in vars(module).items():
            if isinstance(kernel, triton.runtime.Autotuner) and getattr(kernel, "best_config", None):
                chosen[f"{module.__name__.rsplit('.', 1)[-1]}.{name}"] = str(kernel.best_config)
    return chosen


def time_op(case, repeats, device, dtype):
    """attn_fwd_ms, attn_fwd_bwd_ms of the op alone and, on CUDA, its memory floor."""
    op = attention_op(case, device, dtype)
    npoints = case["nlat"] * case["nlon"]
    shape = (case["batch"], case["heads"], npoints, case["channels"] // case["heads"])
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)

    def forward():
        with torch.no_grad():
            op(q.detach(), k.detach(), v.detach())

    def forward_backward():
        torch.autograd.grad(op(q, k, v), (q, k, v), grad)

    result = {
        "attn_fwd_ms": timed(forward, repeats, device),
        "attn_fwd_bwd_ms": timed(forward_backward, repeats, device),
    }
    if device.type == "cuda":
        gbps = copy_bandwidth_gbps(device)
        floor_ms = 4 * q.numel() * q.element_size() / (gbps * 1e9) * 1e3
        result |= {"copy_gbps": round(gbps, 1), "floor_ms": round(floor_ms, 4)}
        result["attn_fwd_over_floor"] = round(result["attn_fwd_ms"] / floor_ms, 2)
    return result


def copy_bandwidth_gbps(device, nbytes=2**30):
    """Device memory bandwidth measured by a large device-to-device copy (read + write)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), 10, device)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def timed(fn, repeats, device):
    """Median milliseconds of ``fn`` after one warm-up call (which also compiles and caches)."""

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    try:
        fn()
    except NotImplementedError as error:  # e.g. FlexAttention has no backward on CPU
        return f"not implemented: {error}"[:100]
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(1e3 * (time.perf_counter() - start))
    return round(statistics.median(times), 4)


def peer_without_gpu_kernels(device):
    """Why torch-harmonics is not measured on ``device`` (its PyPI wheel has no CUDA extension,
    and timing its plain-PyTorch fallback on a GPU compares nothing), or None."""
    if not device.startswith("cuda"):
        return None
    from attention_helpers import cuda_kernels_is_available

    if cuda_kernels_is_available():
        return None
    return "torch-harmonics has no CUDA extension here: build it (scripts/gpu_check.py build-peer)"


def default_theta(nlat):
    return 7.0 / math.sqrt(math.pi) * math.pi / (nlat - 1)


def cases_for(args):
    from s2forecast.geometry import Grid

    if args.config:
        setups = [CONFIGS[name] for name in args.config]
    else:
        sizes = [(args.nlat, args.nlon)] if args.nlat is not None else [(64, 128), (128, 256)]
        setups = [
            {"nlat": nlat, "nlon": nlon, "channels": args.channels, "heads": args.heads, "batch": args.batch,
             "theta": args.theta}
            for nlat, nlon in sizes
        ]  # fmt: skip
    on_cpu = args.device == "cpu"
    for setup in setups:
        grid = Grid(setup["nlat"], setup["nlon"], args.grid)
        theta = {None: default_theta(grid.nlat), "spacing": grid.lat_spacing}.get(setup["theta"], setup["theta"])
        n = grid.npoints
        for op in [args.op] if args.op else ["neighborhood", "global"]:
            for impl in [args.impl] if args.impl else IMPLS:
                if (op == "global" and impl in NEIGHBORHOOD_ONLY) or (op != "global" and impl in GLOBAL_ONLY):
                    continue
                if op == "ball" and impl not in ("s2forecast", "s2forecast-fused"):
                    continue  # ours only: no peer has ball sparse attention on the sphere
                if not args.impl and on_cpu and impl in GPU_ONLY:
                    continue  # GPU implementations; force with --impl (fused: TRITON_INTERPRET=1)
                if not args.impl and not on_cpu and impl == "s2forecast-reference":
                    continue  # the CPU table's before/after; on a GPU the fused kernel is the default
                if args.config and not args.op and (op == "global") != (impl == "sdpa-dense"):
                    continue  # the set-ups compare neighborhood ops with dense global SDPA
                global_max = CPU_GLOBAL_MAX_POINTS if on_cpu else GPU_GLOBAL_MAX_POINTS
                if op == "global" and n > global_max and args.nlat is None:
                    continue
                if impl == "sdpa-dense" and op == "neighborhood" and n > DENSE_MAX_POINTS:
                    continue
                if args.position_embedding != "none" and not impl.startswith("s2forecast"):
                    continue
                yield {
                    "op": op,
                    "impl": impl,
                    "nlat": grid.nlat,
                    "nlon": grid.nlon,
                    "grid": args.grid,
                    "batch": setup["batch"],
                    "channels": setup["channels"],
                    "heads": setup["heads"],
                    "theta": theta,
                    "dtype": args.dtype,
                    "device": args.device,
                    "position_embedding": args.position_embedding,
                    "threads": args.threads,
                    **({"compression_window": args.compression_window} if op == "ball" else {}),
                    **({"config": setup_name(setup)} if args.config else {}),
                }


def setup_name(setup):
    return next(name for name, config in CONFIGS.items() if config is setup)


def main(argv=None):
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
    parser.add_argument("--op", choices=["global", "neighborhood", "ball"])
    parser.add_argument("--impl", choices=IMPLS)
    parser.add_argument("--config", nargs="+", choices=sorted(CONFIGS), help="issue 3's set-ups (a, b, c)")
    parser.add_argument(
        "--position-embedding", default="none",
        help="a relative embedding inside our layers (SpRePE overhead: sprepe, rope, ...); other impls are skipped",
    )  # fmt: skip
    parser.add_argument(
        "--compression-window", type=int,
        help="ball op: multi-level compression with this many coarse tokens per level (default: the paper's)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1, help="run the whole set this many times, interleaved")
    parser.add_argument("--threads", type=int, help="torch (and OpenMP) threads of every case; default torch's")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one JSON case in this process
    args = parser.parse_args(argv)
    if (args.nlat is None) != (args.nlon is None):
        parser.error("--nlat and --nlon go together")
    if args.config and args.nlat is not None:
        parser.error("--config sets the grid; leave out --nlat/--nlon")
    if args.nlat is not None and (args.nlat < 2 or args.nlon < 1):
        parser.error(f"--nlat {args.nlat} --nlon {args.nlon}: a grid needs at least 2 latitudes and 1 longitude")
    check_sizes(parser, args, ("channels", "heads", "batch"), "channels")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.position_embedding != "none":  # s2forecast.nn imports torch-harmonics (4 s), which each case pays
        from s2forecast.nn.position_embedding import POSITION_EMBEDDINGS

        if args.position_embedding not in POSITION_EMBEDDINGS:
            parser.error(f"--position-embedding must be one of {', '.join(POSITION_EMBEDDINGS)}, "
                         f"got {args.position_embedding!r}")  # fmt: skip

    if args.case:
        print(json.dumps(run_case(json.loads(args.case), args.repeats)), flush=True)
        return
    cases = list(cases_for(args))
    if not cases and args.impl:
        parser.error(f"--impl {args.impl} runs no case with these options: --help lists the ops each "
                     "implementation serves (and global attention's size limits)")  # fmt: skip
    for round_ in range(args.rounds):
        for case in cases:
            case = {**case, **({"round": round_} if args.rounds > 1 else {})}
            if case["impl"] == "torch-harmonics" and (missing := peer_without_gpu_kernels(case["device"])):
                print(json.dumps({**case, "error": [missing]}), flush=True)
                continue
            command = [sys.executable, __file__, "--case", json.dumps(case), "--repeats", str(args.repeats)]
            print_case(case, command)


def check_sizes(parser: argparse.ArgumentParser, args, counts: tuple[str, ...], width: str) -> None:
    """Refuse, before any case, counts below 1, a ``width`` (channels) that ``--heads`` does not divide and
    an unknown ``--device``: each case ran into a traceback (exit 0)."""
    for name in counts:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    option = f"--{width.replace('_', '-')}"
    if getattr(args, width) % args.heads:
        parser.error(f"{option} {getattr(args, width)} is not a multiple of --heads {args.heads}: each head takes "
                     f"{width} / heads of them")  # fmt: skip
    try:
        torch.device(args.device)
    except RuntimeError as error:
        parser.error(f"--device {args.device!r}: {error}")


def print_case(case: dict, command: list[str]) -> None:
    """Run ``command``, one case in a process of its own, and print its JSON line, with the process's
    time (what a case costs a short GPU lease); a failed case prints its error lines, and its whole
    stderr goes to this process's (gpu_check keeps each benchmark's log)."""
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        print(json.dumps({**case, "error": failure(result.stderr)}), flush=True)
    else:
        row = json.loads(result.stdout.strip().splitlines()[-1])
        print(json.dumps({**row, "process_s": round(time.perf_counter() - start, 1)}), flush=True)


def failure(stderr: str) -> list[str]:
    """The last two exception lines of a failed case's ``stderr`` ("Name: message" unindented; a
    compile error's cause follows the one that wraps it) and its last line (torch.compile ends with
    advice, not with the error)."""
    lines = stderr.strip().splitlines()
    marks = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    after = lines[marks[-1] if marks else 0 :]  # warnings before it ("SOLUTION: ...") are no error
    errors = [line for line in after if re.match(r"[A-Za-z_][\w.]*: \S", line)]
    return list(dict.fromkeys(errors[-2:] + lines[-1:]))


if __name__ == "__main__":
    main()
