#!/usr/bin/env python
"""Benchmark training throughput of spherical Transformers; prints one JSON line per case.

One training step is forward, MSE loss (in float32), backward and an AdamW step, on random
(batch, channels, nlat, nlon) input and target tensors that stay on the device (no data
loading). ``--warmup`` steps are not timed; of the ``--steps`` timed ones, step_ms is the
median and samples_per_s = batch / median step time. ``--dtype bfloat16`` runs the steps
under autocast (weights and optimizer states stay float32).

Models (the attention paper's SWE configuration, configs/swe/s2_neighborhood.yaml: width 128,
4 pre-norm blocks, 1 head, MLP ratio 2, GELU, instance norm, latent grid downsampled by 2 on
an equiangular grid, DISCO (3, 3) Morlet encoder and decoder, no position embedding, neighborhood
radius (7/sqrt(pi)) * pi/(nlat_latent - 1)):
  s2forecast       s2forecast.models.SphericalTransformer; --backend picks its neighborhood
                   attention kernel ("auto", "fused", "reference")
  torch-harmonics  torch_harmonics.examples.models.SphericalTransformer with the same
                   width, depth, heads, downsampling, norm, MLP, encoder/decoder and
                   radius, grid_internal="equiangular", pos_embed="none" and bias=True

The two are matched as far as torch-harmonics' constructor allows. Its attention projections
have biases only with bias=True (ours always have them), and its MLP's output layer has no
bias (not settable), so it has 128 parameters per block fewer ("params" reports both counts).
torch-harmonics widens its neighborhood cutoff by a factor 1.001; it is given radius / 1.001
so that both models attend over the same disks. Its latent grid has (nlat - 1) // 2 + 1 rows
against our nlat // 2, which agree for even nlat.

torch-harmonics' PyPI wheel ships only its CPU (OpenMP) attention kernels, not its CUDA
ones; "peer_kernels" records what it ran with: on CPU "cpu-extension" (its optimized kernel)
or "torch" (its pure-torch fallback), on CUDA "cuda-extension" or "no-cuda-extension".

Each case runs in a fresh subprocess so that peak memory is its own: peak_mem_mb is the
growth during the warm-up and timed steps (activations, gradients, optimizer states) over
the memory held once the model and tensors are built, by CUDA max_memory_allocated, or on
CPU by the process's peak resident set (ru_maxrss).

On a CPU shared with other work, torch's default of one OpenMP thread per core can be
oversubscribed, and a step then slows down by up to 100x; --threads sets the thread count.

Examples:
    python scripts/bench_train.py                        # both models, 128x256, batch 4
    python scripts/bench_train.py --impl s2forecast --backend reference --steps 3
    python scripts/bench_train.py --attention global --nlat 64 --nlon 128 --dtype bfloat16
"""

import argparse
import json
import math
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, however the script is started
from bench_attention import check_sizes, print_case  # noqa: E402

IMPLS = ("s2forecast", "torch-harmonics")
# torch-harmonics' neighborhood attention includes points up to theta_cutoff * (1 + 1e-3)
TH_CUTOFF_WIDENING = 1.001


def latent_radius(nlat_latent):
    """The attention paper's radius (7/sqrt(pi)) * pi/(nlat_latent - 1) on an equiangular grid."""
    return 7.0 / math.sqrt(math.pi) * math.pi / (nlat_latent - 1)


def build_model(case):
    """The model of ``case`` (on the CPU) and its latent grid shape."""
    from s2forecast.geometry import Grid

    grid = Grid(case["nlat"], case["nlon"], "equiangular")
    common = {"embed_dim": case["embed_dim"], "num_layers": case["num_layers"], "num_heads": case["heads"]}
    if case["impl"] == "s2forecast":
        from s2forecast.models import SphericalTransformer

        model = SphericalTransformer(
            grid, case["channels"], case["channels"], **common, scale_factor=case["scale_factor"],
            latent_kind="equiangular", attention=case["attention"], norm="instance", activation="gelu",
            mlp_ratio=2.0, encoder_kernel_shape=(3, 3), basis_type="morlet", position_embedding="none",
            theta=latent_radius(max(2, grid.nlat // case["scale_factor"])), backend=case["backend"],
        )  # fmt: skip
        return model, model.latent.shape
    from torch_harmonics.examples.models import SphericalTransformer

    nlat_latent = (grid.nlat - 1) // case["scale_factor"] + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SphericalTransformer(
            img_size=grid.shape, grid="equiangular", grid_internal="equiangular", scale_factor=case["scale_factor"],
            in_chans=case["channels"], out_chans=case["channels"], **common, activation_function="gelu",
            encoder_kernel_shape=(3, 3), filter_basis_type="morlet", use_mlp=True, mlp_ratio=2.0, drop_rate=0.0,
            drop_path_rate=0.0, normalization_layer="instance_norm", pos_embed="none", upsample_sht=False,
            attention_mode=case["attention"], bias=True,
            theta_cutoff=latent_radius(nlat_latent) / TH_CUTOFF_WIDENING,
        )  # fmt: skip
    return model, (model.h, model.w)


def peer_kernels(device):
    from attention_helpers import cuda_kernels_is_available, optimized_kernels_is_available

    if device.type == "cuda":
        return "cuda-extension" if cuda_kernels_is_available() else "no-cuda-extension"
    return "cpu-extension" if optimized_kernels_is_available() else "torch"


def run_case(case, warmup, steps):
    if case.get("threads"):
        torch.set_num_threads(case["threads"])
    device = torch.device(case["device"])
    dtype = getattr(torch, case["dtype"])
    torch.manual_seed(0)
    model, latent = build_model(case)
    model = model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    shape = (case["batch"], case["channels"], case["nlat"], case["nlon"])
    x = torch.randn(shape, device=device)
    target = torch.randn(shape, device=device)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            out = model(x)
        loss = F.mse_loss(out.float(), target)
        loss.backward()
        optimizer.step()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    if device.type == "cuda":
        sync()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    if device.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024  # KiB on Linux
    median = statistics.median(times)
    result = {
        **case,
        "latent": list(latent),
        "threads": torch.get_num_threads(),
        "params": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "samples_per_s": round(case["batch"] / median, 4),
        "step_ms": round(1e3 * median, 3),
        "peak_mem_mb": round(peak, 1),
    }
    if case["impl"] == "torch-harmonics":
        result["peer_kernels"] = peer_kernels(device)
    return result


def cases_for(args):
    for impl in [args.impl] if args.impl else IMPLS:
        yield {
            "impl": impl,
            "nlat": args.nlat,
            "nlon": args.nlon,
            "channels": args.channels,
            "batch": args.batch,
            "embed_dim": args.embed_dim,
            "num_layers": args.num_layers,
            "heads": args.heads,
            "scale_factor": args.scale_factor,
            "attention": args.attention,
            "dtype": args.dtype,
            "device": args.device,
            **({"backend": args.backend} if impl == "s2forecast" else {}),
            **({"threads": args.threads} if args.threads else {}),
        }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nlat", type=int, default=128)
    parser.add_argument("--nlon", type=int, default=256)
    parser.add_argument("--channels", type=int, default=3, help="input = output channels (SWE: 3)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--embed-dim", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--scale-factor", type=int, default=2)
    parser.add_argument("--attention", default="neighborhood", choices=["neighborhood", "global"])
    parser.add_argument(
        "--backend", default="auto", choices=["auto", "fused", "reference"],
        help="s2forecast's neighborhood attention backend",
    )  # fmt: skip
    parser.add_argument("--impl", choices=IMPLS, help="run one model only")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="bfloat16: autocast")
    parser.add_argument("--steps", "--repeats", type=int, default=5, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one JSON case in this process
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    if args.threads is not None and args.threads < 1:  # 0 ran with torch's default
        parser.error(f"--threads must be at least 1, got {args.threads}")
    counts = ("nlat", "nlon", "channels", "batch", "embed_dim", "num_layers", "heads", "scale_factor")
    check_sizes(parser, args, counts, "embed_dim")

    if args.case:
        print(json.dumps(run_case(json.loads(args.case), args.warmup, args.steps)), flush=True)
        return
    for case in cases_for(args):
        if case["impl"] == "torch-harmonics" and peer_kernels(torch.device(case["device"])) == "no-cuda-extension":
            error = "torch-harmonics has no CUDA extension here: build it (scripts/gpu_check.py build-peer)"
            print(json.dumps({**case, "error": [error]}), flush=True)
            continue
        command = [sys.executable, __file__, "--case", json.dumps(case), "--steps", str(args.steps)]
        command += ["--warmup", str(args.warmup)]
        print_case(case, command)


if __name__ == "__main__":
    main()
