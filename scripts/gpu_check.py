#!/usr/bin/env python
"""The GPU check in one command: the ``cuda`` tests, the benchmark set, one report.

A GPU machine often has an older PyTorch and no network, so the check runs in steps that each
take paths and options only:

    # 1. here, with network: wheels of what a bare GPU image lacks (its Python, its torch)
    python scripts/gpu_check.py wheels --dest .whl --python-version 3.12 --torch 2.11
    # 2. build torch-harmonics' CUDA extension from a source tree (PyPI wheels have none) into
    #    a wheel, outside the project tree: there, or here and carry the wheel (37 MB), with
    #    nvcc (CUDA_HOME), the GPU's torch in a virtual environment and --cuda-arch 9.0: 30 min
    #    on 2 cores here, against over 5 minutes of the GPU machine's 16 cores
    python scripts/gpu_check.py build-peer --source /path/to/torch-harmonics --version 0.9.2 --dest /tmp/peer-wheel
    # 3. there: install the wheels into a private site directory, run the parts, write
    #    DIR/gpu_check.json and DIR/gpu_check.md (--budget SECONDS: what would start later is
    #    reported as not run, so a leased GPU's time is never overrun)
    python scripts/gpu_check.py run --wheels .whl /tmp/peer-wheel --out DIR
    # when one run must be split over calls (--parts tests / neighborhood / global / ball /
    # train, --only NAME...), merge the JSON files of the parts into one report anywhere:
    python scripts/gpu_check.py report PART1.json PART2.json ... --out DIR

Parts of ``run`` (default: all, in this order):
  tests         ``pytest -m cuda`` (fused neighborhood and ball sparse kernels against the
                references in bf16/fp16/fp32, the bf16 fold of global attention)
  neighborhood  one benchmark per set-up, dtype and implementation
                (neighborhood-a-float32-s2forecast-fused, ...): set-ups (a) 128x256 C=128 4 heads
                B=4, (b) 180x360 C=64 1 head B=1 with theta one grid spacing, (c) 721x1440 C=256
                8 heads B=1; s2forecast-fused, torch-harmonics (CUDA extension), FlexAttention,
                dense global SDPA (not at (c)), the blocked PyTorch path; fp32 and bf16
  global        bf16 global attention (the fold) against plain SDPA without weights, 64x128
                and 180x360, C=64 1 head and C=256 8 heads; and the candidates for another
                path: our weights as a mask on SDPA's cuDNN backend (and cuDNN without
                weights), FlexAttention with log w as score_mod
  ball          ball sparse attention, fused against gather + SDPA, 180x360 and 721x1440, W=256
  train         the paper's SWE model at 128x256, batch 4, bf16 autocast, against
                torch-harmonics' example SphericalTransformer

The benchmarks are scripts/bench_attention.py and scripts/bench_train.py; their JSON lines are
kept whole in the report, and ``targets`` compares them with the goals below.
"""

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
PARTS = ("tests", "neighborhood", "global", "ball", "train")

# What the GPU image lacks of our dependencies (and of theirs), at the versions tested here.
GPU_MISSING = (
    "zarr", "numcodecs", "donfig", "google-crc32c", "dask", "partd", "locket", "netCDF4", "cftime",
    "jsonargparse", "docstring-parser", "typeshed-client",
)  # fmt: skip
# torch-harmonics releases are built for one torch minor version each.
TORCH_HARMONICS_FOR_TORCH = {"2.11": "0.9.2", "2.14": "0.9.3"}
WHEEL_PLATFORMS = (
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
    "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64",
)  # fmt: skip

# (name, script, arguments): every benchmark of a part.
BENCHMARKS = {
    # one benchmark per implementation, so that a short lease can run the competitors it lacks
    # (``--only neighborhood-c-bfloat16`` still runs them all); no dense global SDPA at (c):
    # 1e15 FLOP a forward
    "neighborhood": [
        (
            f"neighborhood-{config}-{dtype}-{impl}",
            "bench_attention.py",
            f"--config {config} --dtype {dtype} --impl {impl}".split(),
        )
        for config in ("a", "b", "c")
        for dtype in ("float32", "bfloat16")
        for impl in ("s2forecast-fused", "torch-harmonics", "flex-attention", "sdpa-dense", "s2forecast")
        if not (config == "c" and impl == "sdpa-dense")
    ],
    "global": [
        (
            f"global-{nlat}x{2 * nlat}-C{channels}-H{heads}-{impl}",
            "bench_attention.py",
            f"--op global --impl {impl} --nlat {nlat} --nlon {2 * nlat} --channels {channels} --heads {heads} "
            "--dtype bfloat16".split(),
        )
        for nlat in (64, 180)
        for channels, heads in ((64, 1), (256, 8))
        # then the candidates for another half-precision path (the fold lost at head_dim 64)
        for impl in ("s2forecast", "sdpa-dense", "s2forecast-cudnn", "sdpa-cudnn", "flex-attention")
    ],
    "ball": [
        (
            f"ball-{nlat}x{nlon}-{impl}",
            "bench_attention.py",
            f"--op ball --impl {impl} --nlat {nlat} --nlon {nlon} --compression-window 256 --channels 64 "
            "--heads 4 --dtype bfloat16".split(),
        )
        for nlat, nlon in ((180, 360), (721, 1440))  # 0.25 degrees: 721 x 1440, not 2 * nlat
        for impl in ("s2forecast-fused", "s2forecast")
    ],
    "train": [("train-swe-128x256", "bench_train.py", "--nlat 128 --nlon 256 --batch 4 --dtype bfloat16".split())],
}

# Goals (issue 13): (description, how to compute the measured value from the results, goal).
NEIGHBORHOOD_PEER_GOALS = {"a": 10.0, "b": 5.0, "c": 20.0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    wheels = commands.add_parser("wheels", help="download the wheels a GPU image lacks (needs network)")
    wheels.add_argument("--dest", type=Path, required=True)
    wheels.add_argument("--python-version", default="3.12", help="the GPU machine's Python, e.g. 3.12")
    wheels.add_argument("--torch", default="2.11", choices=sorted(TORCH_HARMONICS_FOR_TORCH), help="its torch minor")
    wheels.set_defaults(handler=download_wheels)

    peer = commands.add_parser("build-peer", help="build a torch-harmonics wheel with its CUDA extension")
    peer.add_argument("--source", type=Path, required=True, help="a torch-harmonics source tree (setup.py)")
    peer.add_argument("--dest", type=Path, required=True, help="directory for the wheel (outside the project)")
    peer.add_argument("--cpu", action="store_true", help="build the C++ extension only (a rehearsal without GPU)")
    peer.add_argument(
        "--cuda-arch", help="build the CUDA extension for this compute capability (e.g. 9.0 for H100/H200) on a "
        "machine without a GPU but with nvcc (CUDA_HOME); default: the GPU's own",
    )  # fmt: skip
    peer.add_argument(
        "--version", help="the release the tree is (e.g. 0.9.2): a tree without git metadata builds as 0.0.0"
    )
    peer.set_defaults(handler=build_peer)

    run = commands.add_parser("run", help="install wheels, run the parts, write the report")
    run.add_argument("--wheels", type=Path, nargs="*", default=[], help="directories of wheels to install first")
    run.add_argument("--site", type=Path, default=Path(tempfile.gettempdir()) / "s2forecast-gpu-site")
    run.add_argument("--out", type=Path, required=True, help="directory for gpu_check.json / .md and logs")
    run.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="run in this order")
    run.add_argument(
        "--only", nargs="+", help="run only the benchmarks whose names contain one of these, in this order"
    )
    run.add_argument("--repeats", type=int, default=10, help="timed repetitions per benchmark case")
    run.add_argument("--timeout", type=float, default=540, help="seconds per test run or benchmark")
    run.add_argument(
        "--budget", type=float, help="seconds for the whole run: what would start later is reported as not run"
    )
    run.set_defaults(handler=run_check)

    report = commands.add_parser("report", help="merge the JSON of several runs into one report")
    report.add_argument("parts", type=Path, nargs="+")
    report.add_argument("--out", type=Path, required=True)
    report.set_defaults(handler=merge_reports)

    args = parser.parse_args(argv)
    try:
        args.handler(args)
    except (OSError, ValueError, subprocess.CalledProcessError) as error:
        parser.exit(2, f"gpu_check {args.command}: error: {error}\n")


# --- wheels and the peer ------------------------------------------------------------------
def download_wheels(args: argparse.Namespace) -> None:
    """pip download of GPU_MISSING at this environment's versions, and the torch-harmonics
    release built for the GPU's torch."""
    pins = []
    for name in GPU_MISSING:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError as error:
            raise ValueError(f"{name} is not installed here; run `make install` first") from error
    pins.append(f"torch-harmonics=={TORCH_HARMONICS_FOR_TORCH[args.torch]}")
    platforms = [flag for name in WHEEL_PLATFORMS for flag in ("--platform", name)]
    args.dest.mkdir(parents=True, exist_ok=True)
    for pin in pins:  # one at a time: pip matches each wheel against the platform list
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                   args.python_version, "--implementation", "cp", *platforms, "-d", str(args.dest), pin]  # fmt: skip
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    print(json.dumps({"wheels": sorted(p.name for p in args.dest.glob("*.whl"))}))


def build_peer(args: argparse.Namespace) -> None:
    """``pip wheel`` of a torch-harmonics source tree against the installed torch, in a copy of
    the tree outside the project (the build writes into its source directory)."""
    import torch

    if args.cpu and args.cuda_arch:
        raise ValueError("--cpu builds no CUDA extension; pass one of --cpu and --cuda-arch")
    if not (args.source / "setup.py").is_file():
        raise ValueError(f"--source {args.source} has no setup.py; pass a torch-harmonics source tree")
    if not args.cpu and not args.cuda_arch and not torch.cuda.is_available():
        raise ValueError("no CUDA device: pass --cuda-arch (e.g. 9.0) to build for one, or --cpu for the C++ part only")
    env = dict(os.environ, MAX_JOBS=str(os.cpu_count() or 1))
    if not args.cpu:
        arch = args.cuda_arch or "{}.{}".format(*torch.cuda.get_device_capability())
        env |= {"TORCH_HARMONICS_BUILD_CUDA_EXTENSION": "1", "TORCH_CUDA_ARCH_LIST": arch}
        # torch's CUDA headers include cusparse.h, cublas_v2.h, ...: a minimal CUDA toolkit lacks
        # them, torch's own pip dependencies (nvidia-*) have them
        headers = [str(path) for path in cuda_library_headers()]
        env["CPATH"] = os.pathsep.join([*headers, *filter(None, [os.environ.get("CPATH")])])
    args.dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torch-harmonics-build-") as build:
        tree = Path(build) / "src"
        shutil.copytree(args.source, tree, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info"))
        if args.version:
            pin_version(tree, args.version)
        start = time.perf_counter()
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                   "-w", str(args.dest.resolve()), str(tree)]  # fmt: skip
        subprocess.run(command, check=True, env=env, cwd=build)
    print(json.dumps({"peer_wheel": sorted(p.name for p in args.dest.glob("torch_harmonics-*.whl")),
                      "cuda": not args.cpu, "build_s": round(time.perf_counter() - start, 1)}))  # fmt: skip


def cuda_library_headers() -> list[Path]:
    """The include directories of the CUDA libraries that torch's wheels depend on
    (site-packages/nvidia/cu13/include, nvidia/cusparse/include, ...), where installed."""
    try:
        import nvidia
    except ImportError:
        return []
    found = {header.parent for root in nvidia.__path__ for header in Path(root).glob("*/include/cusparse.h")}
    return sorted(found)


def pin_version(tree: Path, version: str) -> None:
    """Give the copied tree ``tree`` a static version: torch-harmonics takes it from git tags with
    setuptools-scm, and the copy has no git metadata (and a GPU image may lack setuptools-scm)."""
    (tree / "torch_harmonics" / "_version.py").write_text(f"version = {version!r}\n")
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text().replace('dynamic = ["version"]', f'version = "{version}"')
    text = re.sub(r"(?ms)^\[tool\.setuptools_scm\].*?(?=^\[|\Z)", "", text)
    pyproject.write_text(re.sub(r',\s*"setuptools[-_]scm[^"]*"', "", text))


def install_wheels(directories: list[Path], site: Path) -> None:
    """Every wheel of ``directories`` into ``site`` without the network; later directories win
    (a locally built torch-harmonics replaces the PyPI one)."""
    for directory in directories:
        wheels = sorted(str(p) for p in Path(directory).glob("*.whl"))
        if not wheels:
            raise ValueError(f"--wheels {directory}: no .whl files there")
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                   "--no-cache-dir", "--upgrade", "--target", str(site), *wheels]  # fmt: skip
        subprocess.run(command, check=True)


# --- running ------------------------------------------------------------------------------
def prepare_out(out: Path) -> None:
    """Create ``out``, or reuse a directory only this script has written into (its files are
    replaced; anything else there would be too)."""
    if out.exists() and any(out.iterdir()) and not any(out.glob("gpu_check*.json")):
        raise ValueError(f"--out {out} holds files that gpu_check did not write; pass a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)


def run_check(args: argparse.Namespace) -> None:
    # the budget is the whole run's, the wheels' installation included (a lease's time is spent either way)
    deadline = time.monotonic() + (args.budget if args.budget is not None else float("inf"))
    if args.budget is not None and args.budget < 0:
        raise ValueError(f"--budget must be at least 0 seconds, got {args.budget}")
    if args.timeout <= 0:
        raise ValueError(f"--timeout must be more than 0 seconds, got {args.timeout}")
    benchmarks = [b[0] for part in args.parts for b in BENCHMARKS.get(part, [])]
    if args.only and not selected([(name,) for name in benchmarks], args.only):  # it wrote an empty report, exit 0
        raise ValueError(f"--only {' '.join(args.only)} names no benchmark of {' '.join(args.parts)}: {benchmarks}")
    prepare_out(args.out)
    if args.wheels:
        args.site.mkdir(parents=True, exist_ok=True)
        install_wheels(args.wheels, args.site)
    paths = [str(args.site)] if args.wheels else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*paths, str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"

    def timeout():
        """--timeout, cut to what is left of --budget; None once under a minimum worth starting."""
        left = deadline - time.monotonic()
        return min(args.timeout, left) if left >= 30 else None

    report = {"environment": environment(env), "parts": args.parts, "benchmarks": []}
    for part in args.parts:  # in the order given: a short lease runs what matters most first
        if part == "tests" and timeout() is None:
            report["tests"] = {"command": "pytest -m cuda", "returncode": "not run", "seconds": 0,
                               "not_run": ["every module: --budget spent"]}  # fmt: skip
        elif part == "tests":
            report["tests"] = run_tests(args.out, env, timeout())
            print(json.dumps({"tests": report["tests"]}), flush=True)
        for name, script, arguments in selected(BENCHMARKS.get(part, []), args.only):
            if timeout() is None:
                report["benchmarks"].append({"benchmark": name, "error": ["not run: --budget spent"]})
                continue
            report["benchmarks"] += run_benchmark(name, script, arguments, args.repeats, args.out, env, timeout())
    whole = set(args.parts) == set(PARTS) and not args.only
    name = "gpu_check" if whole else "gpu_check-" + "-".join(args.parts + (args.only or []))
    write_report(report, args.out, name)


def selected(benchmarks: list[tuple], only: list[str] | None) -> list[tuple]:
    """The benchmarks named by ``only``, in its order (all, in their own order, without it): a
    whole name picks that benchmark alone (``...-s2forecast``, not ``...-s2forecast-fused`` too),
    any other text every name that contains it."""
    if not only:
        return benchmarks

    def named(text):
        return [b for b in benchmarks if b[0] == text] or [b for b in benchmarks if text in b[0]]

    return list({b[0]: b for text in only for b in named(text)}.values())


def environment(env: dict) -> dict:
    """Versions and device of the Python that the tests and benchmarks run with."""
    probe = r"""
import json, platform, torch
info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
try:
    import triton; info["triton"] = triton.__version__
except ImportError:
    info["triton"] = None
try:
    import torch_harmonics; from attention_helpers import cuda_kernels_is_available
    info["torch_harmonics"] = torch_harmonics.__version__
    info["torch_harmonics_cuda_extension"] = bool(cuda_kernels_is_available())
except ImportError as error:
    info["torch_harmonics"] = f"unavailable: {error}"
print(json.dumps(info))
"""
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise OSError(f"the environment does not import torch: {result.stderr.strip().splitlines()[-1:]}")
    return {**json.loads(result.stdout), "machine": platform.node(), "date": time.strftime("%Y-%m-%d")}


def run_tests(out: Path, env: dict, timeout: float) -> dict:
    """``pytest -m cuda`` in the project root, one module at a time within ``timeout`` seconds
    in all: a module cut short by the time loses only itself, and each finished module's
    failures are in the log with their tracebacks (one run's were lost with the run). Counts
    from the modules' JUnit XML files; modules left for lack of time are listed."""
    # only the modules with cuda tests: the others may import what a GPU image lacks (wandb, distributed)
    tests = (ROOT / "tests").rglob("test_*.py")
    modules = sorted(str(path.relative_to(ROOT)) for path in tests if "mark.cuda" in path.read_text())
    # the kernels' own tests first: what a lease cut short must not lose
    first = ("test_fused_neighborhood_attention.py", "test_fused_ball_sparse_attention.py")
    modules.sort(key=lambda module: first.index(Path(module).name) if Path(module).name in first else len(first))
    options = ["-m", "cuda", "-v", "-rfE", "--tb=short", "--durations=0", "-p", "no:cacheprovider"]
    deadline = time.monotonic() + timeout
    start = time.perf_counter()
    summary = {"command": " ".join(["pytest", *options, *modules]), "returncode": 0, "not_run": []}
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    failed = []
    with open(out / "pytest_cuda.log", "w") as log:
        for i, module in enumerate(modules):
            left = deadline - time.monotonic()
            if left < 5:
                summary["not_run"].append(module)
                summary["returncode"] = summary["returncode"] or "timeout"
                continue
            junit = out / f"pytest_cuda_{i}.xml"
            junit.unlink(missing_ok=True)  # an earlier run's in a reused --out: not this module's results
            command = [sys.executable, "-m", "pytest", *options, f"--junitxml={junit}", module]
            log.write(f"$ pytest {module}\n")
            log.flush()
            try:
                result = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=left)
                returncode = result.returncode
            except subprocess.TimeoutExpired:
                returncode = "timeout"
                summary["not_run"].append(f"{module} (cut at the time limit)")
            # 5: no test selected (the module only names the marker, e.g. in a string)
            summary["returncode"] = summary["returncode"] or (0 if returncode == 5 else returncode)
            if junit.is_file():
                suite = ElementTree.parse(junit).getroot()
                suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
                for key in counts:
                    counts[key] += int(suite.get(key, 0))
                failed += [
                    f"{case.get('classname')}::{case.get('name')}"
                    for case in suite.iter("testcase")
                    if case.find("failure") is not None or case.find("error") is not None
                ]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return summary | counts | {"passed": passed, "failed_tests": failed, "seconds": round(time.perf_counter() - start)}


def run_benchmark(name, script, arguments, repeats, out, env, timeout) -> list[dict]:
    """One benchmark script's JSON lines, each tagged with the benchmark's name and command."""
    command = [sys.executable, str(SCRIPTS / script), *arguments, "--repeats", str(repeats)]
    shown = " ".join(["python", f"scripts/{script}", *arguments, "--repeats", str(repeats)])
    # a session of its own: on timeout the processes it started (bench_attention's --case runs) go with it,
    # rather than hold the device while the next benchmarks are timed
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, _ = process.communicate()
        stderr = f"timed out after {timeout:.0f} s"
    (out / f"{name}.log").write_text(stdout + stderr)
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if not rows:
        rows = [{"error": stderr.strip().splitlines()[-1:] or ["no output"]}]
    rows = [{"benchmark": name, "command": shown, **row} for row in rows]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


# --- the report ---------------------------------------------------------------------------
def merge_reports(args: argparse.Namespace) -> None:
    merged = {"environment": None, "parts": [], "benchmarks": []}
    for path in args.parts:
        try:
            part = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: not a gpu_check JSON report ({error})") from error
        if merged["environment"] is None:
            merged["environment"] = part["environment"]
        elif part["environment"]["device"] != merged["environment"]["device"]:
            raise ValueError(f"{path} ran on {part['environment']['device']}, the others on another device")
        merged["parts"] += part["parts"]
        merged["benchmarks"] += part["benchmarks"]
        if "tests" in part:
            merged["tests"] = merge_tests(merged["tests"], part["tests"]) if "tests" in merged else part["tests"]
    prepare_out(args.out)
    write_report(merged, args.out, "gpu_check")


def merge_tests(first: dict, second: dict) -> dict:
    """The test summaries of two leases as one: counts added, lists joined, the first failing return code.
    A lease whose tests did not run (``returncode`` "not run": its budget was spent) adds nothing."""
    if second.get("returncode") == "not run":
        return first
    if first.get("returncode") == "not run":
        return second
    merged = dict(first)
    for key in ("tests", "passed", "failures", "errors", "skipped", "seconds"):
        merged[key] = first.get(key, 0) + second.get(key, 0)
    for key in ("failed_tests", "not_run"):
        merged[key] = first.get(key, []) + second.get(key, [])
    merged["returncode"] = first["returncode"] or second["returncode"]
    merged["command"] = " ; ".join(dict.fromkeys((first["command"], second["command"])))
    return merged


def write_report(report: dict, out: Path, name: str) -> None:
    report["targets"] = targets(report["benchmarks"])
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    (out / f"{name}.md").write_text(markdown(report))
    print(f"wrote {out / name}.json and .md", flush=True)


def _find(rows, **conditions):
    return [row for row in rows if all(row.get(key) == value for key, value in conditions.items())]


def _number(row, key):
    value = row.get(key) if row else None
    return value if isinstance(value, int | float) else None


def targets(rows: list[dict]) -> list[dict]:
    """Each goal of issue 13 with the measured value (None where its benchmark did not run)."""
    results = []

    def add(goal, measured, threshold):
        met = None if measured is None else measured >= threshold
        results.append({"goal": goal, "measured": None if measured is None else round(measured, 2),
                        "threshold": threshold, "met": met})  # fmt: skip

    def one(**conditions):
        """The latest measured row (merged leases in order): an error row, or an earlier lease's, does not
        hide another's measurement."""
        found = [row for row in _find(rows, **conditions) if "error" not in row]
        return found[-1] if found else None

    for config, goal in NEIGHBORHOOD_PEER_GOALS.items():
        for dtype, short in (("float32", "fp32"), ("bfloat16", "bf16")):  # users train in bf16-mixed
            ours = one(config=config, op="neighborhood", impl="s2forecast-fused", dtype=dtype)
            for peer, threshold in (("torch-harmonics", goal), ("flex-attention", 1.0)):
                theirs = one(config=config, op="neighborhood", impl=peer, dtype=dtype)
                a, b = _number(theirs, "fwd_bwd_ms"), _number(ours, "fwd_bwd_ms")
                add(f"({config}) fwd+bwd {short}: {peer} / s2forecast-fused", a / b if a and b else None, threshold)
    ours_c = one(config="c", op="neighborhood", impl="s2forecast-fused", dtype="bfloat16")
    over = _number(ours_c, "attn_fwd_over_floor")
    add("(c) bf16 memory floor / forward (>= 0.25: within 4x)", 1 / over if over else None, 0.25)
    for nlat in (64, 180):
        for channels, heads in ((64, 1), (256, 8)):
            # config=None: set-up (b)'s dense SDPA row is op "global" at 180x360 too
            conditions = dict(op="global", nlat=nlat, channels=channels, heads=heads, dtype="bfloat16", config=None)
            plain, ours = one(impl="sdpa-dense", **conditions), one(impl="s2forecast", **conditions)
            a, b = _number(plain, "attn_fwd_bwd_ms"), _number(ours, "attn_fwd_bwd_ms")
            add(f"global bf16 {nlat}x{2 * nlat} C={channels} H={heads}: SDPA / fold speed (fwd+bwd)",
                a / b if a and b else None, 0.9)  # fmt: skip
    for nlat, nlon in ((180, 360), (721, 1440)):
        fused, gathered = (
            one(op="ball", nlat=nlat, impl="s2forecast-fused"),
            one(op="ball", nlat=nlat, impl="s2forecast"),
        )
        a, b = _number(gathered, "fwd_bwd_ms"), _number(fused, "fwd_bwd_ms")
        add(
            f"ball {nlat}x{nlon} W=256: gather+SDPA / fused (>= 1: keep fused as auto)",
            a / b if a and b else None,
            1.0,
        )
    ours_train, peer_train = (
        one(benchmark="train-swe-128x256", impl="s2forecast"),
        one(benchmark="train-swe-128x256", impl="torch-harmonics"),
    )
    a, b = _number(ours_train, "samples_per_s"), _number(peer_train, "samples_per_s")
    add("SWE training bf16 samples/s: s2forecast / torch-harmonics", a / b if a and b else None, 3.0)
    return results


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"GPU check on {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), triton {env['triton']}, "
        f"torch-harmonics {env['torch_harmonics']} (CUDA extension: {env.get('torch_harmonics_cuda_extension')}), "
        f"Python {env['python']}, {env['date']}.",
        "",
    ]
    if "tests" in report:
        tests = report["tests"]
        lines += [f"`{tests['command']}`: {tests.get('passed')} passed, {tests.get('failures')} failed, "
                  f"{tests.get('errors')} errors, {tests.get('skipped')} skipped "
                  f"(exit {tests['returncode']}, {tests['seconds']} s)", ""]  # fmt: skip
        lines += [f"- failed: `{name}`" for name in tests.get("failed_tests", [])]
        lines += [f"- not run: `{name}`" for name in tests.get("not_run", [])]
        lines += [""] if tests.get("failed_tests") or tests.get("not_run") else []
    lines += ["| goal | measured | goal | met |", "|---|---|---|---|"]
    for target in report["targets"]:
        met = {True: "yes", False: "**no**", None: "not run"}[target["met"]]
        lines.append(f"| {target['goal']} | {target['measured']} | >= {target['threshold']} | {met} |")
    lines += [
        "",
        "| benchmark | op | impl | grid | C | heads | batch | dtype | fwd ms | fwd+bwd ms | op fwd ms "
        "| op fwd+bwd ms | peak MB | samples/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["benchmarks"]:
        if "error" in row:
            lines.append(f"| {row['benchmark']} | {row.get('op', '')} | {row.get('impl', '')} | error: "
                         f"{' '.join(row['error'])[:120]} |||||||||||")  # fmt: skip
            continue
        cells = [row["benchmark"], row.get("op", "train"), row.get("impl"), f"{row.get('nlat')}x{row.get('nlon')}",
                 row.get("channels", row.get("embed_dim")), row.get("heads"), row.get("batch"), row.get("dtype"),
                 row.get("fwd_ms"), row.get("fwd_bwd_ms", row.get("step_ms")), row.get("attn_fwd_ms"),
                 row.get("attn_fwd_bwd_ms"), row.get("peak_mem_mb"), row.get("samples_per_s")]  # fmt: skip
        lines.append("| " + " | ".join("" if cell is None else str(cell) for cell in cells) + " |")
    lines += ["", "Commands (each in the project root):", ""]
    commands = dict.fromkeys(row["command"] for row in report["benchmarks"] if "command" in row)
    lines += [f"- `{command}`" for command in commands]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
