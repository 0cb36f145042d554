"""The benchmark script runs end to end on a tiny case and prints the documented keys."""

import argparse
import contextlib
import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parents[2] / "scripts" / "bench_attention.py"
KEYS = {"op", "impl", "nlat", "nlon", "batch", "channels", "heads", "theta", "dtype", "device"}
KEYS |= {"fwd_ms", "fwd_bwd_ms", "peak_mem_mb"}


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_attention", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    # importable by name: torch 2.11's flex_attention traces score_mod with dynamo, which
    # re-imports the module of the function's globals
    sys.modules.setdefault("bench_attention", module)
    spec.loader.exec_module(module)
    return module


def assert_case_row(row):
    """A case's JSON line: no error, the documented keys, positive timings."""
    assert "error" not in row, row
    assert KEYS <= row.keys()
    assert row["fwd_ms"] > 0 and row["fwd_bwd_ms"] > 0


@pytest.mark.slow  # the benchmark's case in a subprocess
def test_bench_attention_prints_json_lines(capsys):
    """A case runs in a process of its own (python + torch: ~4 s each), which takes --threads: one
    implementation here; test_bench_attention_rounds_interleave runs every CPU one through the same
    ``--case`` command line, in this process."""
    load_script().main(["--nlat", "8", "--nlon", "16", "--channels", "16", "--heads", "2", "--device", "cpu",
                        "--repeats", "1", "--op", "neighborhood", "--impl", "s2forecast",
                        "--threads", "1"])  # fmt: skip
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["impl"] for row in rows] == ["s2forecast"]
    for row in rows:
        assert_case_row(row)
        assert row["threads"] == 1 and row["load_1min"] >= 0  # the case's process took --threads
        assert row["process_s"] >= row["fwd_ms"] / 1e3  # its process timed as a whole


@pytest.mark.parametrize("shape, theta", [((8, 16), 0.6), ((12, 15), 1.2), ((16, 32), 0.25)])
def test_flex_block_tables_cover_exactly_the_disks(shape, theta):
    """Every neighbor pair lies in a listed block; a block marked full holds only neighbors."""
    from s2forecast.geometry import Grid
    from s2forecast.ops.neighborhood import neighborhood_mask_from_distances

    bench = load_script()
    grid = Grid(*shape)
    block = 16
    (kv_num, kv_idx, full_num, full_idx), _ = bench.flex_block_mask_tables(grid, theta, block_size=block)
    mask = neighborhood_mask_from_distances(grid, theta)
    n = grid.npoints
    blocks = -(-n // block)
    padded = torch.zeros(blocks * block, blocks * block, dtype=torch.bool)
    padded[:n, :n] = mask
    per_block = padded.reshape(blocks, block, blocks, block)
    for qb in range(blocks):
        listed = set(kv_idx[0, 0, qb, : kv_num[0, 0, qb]].tolist())
        full = set(full_idx[0, 0, qb, : full_num[0, 0, qb]].tolist())
        assert not listed & full
        touched = {kb for kb in range(blocks) if per_block[qb, :, kb].any()}
        assert touched <= listed | full, (qb, touched - listed - full)
        for kb in full:
            assert per_block[qb, :, kb].all()
    assert kv_idx.shape[-1] == full_idx.shape[-1] == blocks  # a BlockMask reads its KV length off the width


def test_flex_attention_equals_reference():
    from s2forecast.geometry import Grid
    from s2forecast.ops import neighborhood_attention

    bench = load_script()
    grid = Grid(12, 24, "legendre-gauss")
    theta = 0.5
    q, k, v = (torch.randn(1, 2, grid.npoints, 16) for _ in range(3))
    flex = bench.flex_neighborhood_attention(grid, theta, torch.device("cpu"))
    assert torch.allclose(flex(q, k, v), neighborhood_attention(q, k, v, grid, theta), atol=1e-5)


@pytest.mark.slow  # inductor compiles the kernel (C++ on CPU): ~5 s
@pytest.mark.skipif(not shutil.which("c++"), reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_flex_attention_equals_reference():
    """The compiled kernel, which the GPU benchmark times: with a block table narrower than the
    key blocks it failed (a device-side assert on an H200; inductor's "KV seqlen must be
    smaller than the block_mask size" on CPU)."""
    from s2forecast.geometry import Grid
    from s2forecast.ops import neighborhood_attention

    bench = load_script()
    grid = Grid(16, 32)
    theta = bench.default_theta(grid.nlat)
    q, k, v = (torch.randn(2, 2, grid.npoints, 16) for _ in range(3))
    flex = bench.flex_neighborhood_attention(grid, theta, torch.device("cpu"), compile=True)
    assert torch.allclose(flex(q, k, v), neighborhood_attention(q, k, v, grid, theta), atol=1e-5)


def test_config_cases():
    bench = load_script()
    args = argparse.Namespace(
        config=["a", "b"], nlat=None, nlon=None, grid="equiangular", op=None, impl=None, device="cuda",
        dtype="bfloat16", channels=1, heads=1, batch=1, theta=None, position_embedding="none", threads=None,
    )  # fmt: skip
    cases = list(bench.cases_for(args))
    assert {(c["config"], c["op"], c["impl"]) for c in cases} == {
        (config, "neighborhood", impl)
        for config in "ab"
        for impl in ["s2forecast", "s2forecast-fused", "torch-harmonics", "flex-attention"]
    } | {(config, "global", "sdpa-dense") for config in "ab"}
    b = next(c for c in cases if c["config"] == "b")
    assert (b["nlat"], b["channels"], b["heads"], b["batch"]) == (180, 64, 1, 1)
    assert b["theta"] == pytest.approx(math.pi / 179)


def test_bench_attention_rounds_interleave(capsys, monkeypatch):
    """Round r runs every case before round r+1 starts. Each case's process is run in this one
    (its ``--case`` command line through ``main``): test_bench_attention_prints_json_lines runs
    one as a process; here their order counts, and each line is checked as that test checks it."""
    bench = load_script()
    commands = []

    def in_this_process(command, **kwargs):
        commands.append(command)
        assert command[:3] == [sys.executable, bench.__file__, "--case"]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            bench.main(command[2:])
        return subprocess.CompletedProcess(command, 0, out.getvalue(), "")

    monkeypatch.setattr(bench.subprocess, "run", in_this_process)
    argv = ["--nlat", "8", "--nlon", "16", "--channels", "16", "--heads", "2", "--device", "cpu", "--repeats", "1"]
    bench.main([*argv, "--op", "neighborhood", "--rounds", "2"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    impls = ["s2forecast", "s2forecast-reference", "torch-harmonics", "sdpa-dense"]
    assert [(row["impl"], row["round"]) for row in rows] == [(impl, r) for r in (0, 1) for impl in impls]
    assert len(commands) == 8
    for row in rows:  # every CPU implementation's line, as its process would print it
        assert_case_row(row)


@pytest.mark.parametrize("option", [["--rounds", "0"], ["--threads", "0"], ["--batch", "0"], ["--heads", "0"]])
def test_bench_attention_refuses_bad_counts(option, capsys):
    with pytest.raises(SystemExit) as exit_status:
        load_script().main(option)
    captured = capsys.readouterr()
    assert exit_status.value.code == 2 and f"{option[0]} must be at least 1, got 0" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(("options", "message"), [
    (["--nlat", "0", "--nlon", "0"], "--nlat 0 --nlon 0: a grid needs at least 2 latitudes and 1 longitude"),
    (["--channels", "7", "--heads", "2"], "--channels 7 is not a multiple of --heads 2"),
    (["--device", "nosuch"], "--device 'nosuch': "),
])  # fmt: skip
def test_bench_attention_refuses_bad_sizes_before_any_case(options, message, capsys):
    """--nlat 0 ran the default grids; the others ran every case into a traceback, exit 0."""
    with pytest.raises(SystemExit) as exit_status:
        load_script().main(options)
    captured = capsys.readouterr()
    assert exit_status.value.code == 2 and captured.out == ""
    (line,) = [line for line in captured.err.splitlines() if "error:" in line]
    assert message in line and "Traceback" not in captured.err


def test_bench_skeleton_cases_and_bad_counts(tmp_path, capsys):
    """scripts/bench_skeleton.py (README's skeleton figures): each case in this process, and its
    options' bad values in one line."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_skeleton", SCRIPT.parent / "bench_skeleton.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for case in (["store", 3], ["forecast", 2, 2]):
        bench.main(["--case", json.dumps(case)])
        row = json.loads(capsys.readouterr().out)
        assert row["wall_s"] >= 0 and row["peak_rss_mb"] > 0
    for option, message in (("--steps", "give whole numbers"), ("--inits", "give whole numbers")):
        with pytest.raises(SystemExit, match=f"{option} 'x': {message}"):
            bench.main([option, "x"])
    with pytest.raises(SystemExit, match="--leads '0': each must be >= 1"):
        bench.main(["--leads", "0"])
    # a case killed without a word (the OOM killer's SIGKILL) was an IndexError (a review found it)
    killed = subprocess.CompletedProcess([], -9, "", "")
    assert bench.last_line(killed) == "exit status -9 (killed?)"


def test_a_failed_case_keeps_its_cause(capsys, monkeypatch):
    """A compile error ends its stderr with advice; the row keeps the error that caused it, and the
    whole stderr goes to the caller's log (gpu_check keeps each benchmark's)."""
    bench = load_script()
    stderr = (
        "SOLUTION: Use torch.compile(flex_attention)(...)\n"  # a warning before the error: no error
        'Traceback (most recent call last):\n  File "x.py", line 1\n'
        "torch._inductor.exc.InductorError: LoweringException: wrapped\n"
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144\n\n"
        "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n"
    )
    monkeypatch.setattr(
        bench.subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(command, 1, "", stderr)
    )
    bench.main(["--nlat", "8", "--nlon", "16", "--device", "cpu", "--op", "neighborhood", "--impl", "s2forecast"])
    captured = capsys.readouterr()
    (row,) = [json.loads(line) for line in captured.out.splitlines()]
    assert row["error"] == [
        "torch._inductor.exc.InductorError: LoweringException: wrapped",
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144",
        "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace",
    ]
    assert captured.err == stderr
    warned = (
        "SOLUTION: Use torch.compile(flex_attention)(...)\nTraceback (most recent call last):\nRuntimeError: boom\n"
    )
    assert bench.failure(warned) == ["RuntimeError: boom"]


def test_global_flex_candidate_equals_our_global_attention():
    """The FlexAttention candidate for global attention (uncompiled on CPU: forward only) is
    eq. (26): log w as score_mod, with the shift by max log w that softmax ignores."""
    from s2forecast.geometry import Grid
    from s2forecast.ops import global_attention

    bench = load_script()
    grid = Grid(6, 12, "legendre-gauss")
    q, k, v = (torch.randn(1, 2, grid.npoints, 8, dtype=torch.float64) for _ in range(3))
    attend = bench.global_candidate("flex-attention", grid, torch.device("cpu"))
    expected = global_attention(q, k, v, grid)
    assert torch.allclose(attend(q, k, v), expected, rtol=0, atol=1e-7)  # float32 log w; unweighted: 0.3 off
    with pytest.raises(RuntimeError):  # cuDNN candidates need CUDA: no silent other path
        bench.global_candidate("s2forecast-cudnn", grid, torch.device("cpu"))(q, k, v)


def test_bench_attention_refuses_an_unknown_position_embedding(capsys):
    with pytest.raises(SystemExit) as exit_status:
        load_script().main(["--position-embedding", "bogus"])
    captured = capsys.readouterr()
    assert exit_status.value.code == 2 and "--position-embedding must be one of none, ape," in captured.err
    assert "got 'bogus'" in captured.err and captured.out == ""


def test_an_implementation_that_runs_no_case_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_status:
        load_script().main(["--op", "neighborhood", "--impl", "s2forecast-cudnn", "--device", "cpu"])
    captured = capsys.readouterr()
    assert exit_status.value.code == 2 and "--impl s2forecast-cudnn runs no case with these options" in captured.err
    assert captured.out == ""
