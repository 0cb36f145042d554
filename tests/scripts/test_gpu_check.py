"""scripts/gpu_check.py: one run end to end on a tiny CPU benchmark, the goals it computes,
merging parts, and its one-line errors."""

import importlib.util
import json
import os
import time
import tomllib
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parents[2] / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def neighborhood_row(config, impl, fwd_bwd_ms, dtype="float32", **extra):
    return {"benchmark": "n", "command": "c", "config": config, "op": "neighborhood", "impl": impl, "dtype": dtype,
            "fwd_bwd_ms": fwd_bwd_ms, **extra}  # fmt: skip


# a benchmark script's contract with gpu_check: options in, JSON lines out (bench_attention.py's
# own output is tested in test_bench_script.py; here only gpu_check's running and reporting)
STUB_BENCHMARK = """
import json, sys, time
start = time.perf_counter()
sum(range(10_000))
print("warming up")
print(json.dumps({"op": "global", "impl": "sdpa-dense", "argv": sys.argv[1:],
                  "fwd_bwd_ms": (time.perf_counter() - start) * 1e3}))
"""


@pytest.mark.slow  # the environment probe imports torch in a subprocess
def test_run_writes_report_of_a_tiny_benchmark(gpu_check, tmp_path, monkeypatch):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "bench_stub.py").write_text(STUB_BENCHMARK)
    monkeypatch.setattr(gpu_check, "SCRIPTS", scripts)
    monkeypatch.setitem(gpu_check.BENCHMARKS, "global", [("tiny-global", "bench_stub.py", ["--op", "global"])])
    out = tmp_path / "out"
    gpu_check.main(["run", "--parts", "global", "--out", str(out), "--repeats", "1"])
    report = json.loads((out / "gpu_check-global.json").read_text())
    assert report["environment"]["torch"] and report["environment"]["device"] == "cpu"
    (row,) = report["benchmarks"]
    assert row["benchmark"] == "tiny-global" and row["fwd_bwd_ms"] > 0
    assert row["argv"] == ["--op", "global", "--repeats", "1"]  # the options reach the script
    assert row["command"] == "python scripts/bench_stub.py --op global --repeats 1"
    assert "warming up" in (out / "tiny-global.log").read_text()
    markdown = (out / "gpu_check-global.md").read_text()
    assert "tiny-global" in markdown and "not run" in markdown  # the other goals had no benchmark


def test_run_reports_what_its_budget_left_out(gpu_check, tmp_path, monkeypatch):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "bench_stub.py").write_text(STUB_BENCHMARK)
    monkeypatch.setattr(gpu_check, "SCRIPTS", scripts)
    monkeypatch.setattr(gpu_check, "environment", lambda env: ENVIRONMENT)  # its probe: test above
    monkeypatch.setitem(gpu_check.BENCHMARKS, "global", [("tiny-global", "bench_stub.py", ["--op", "global"])])
    out = tmp_path / "out"
    gpu_check.main(["run", "--parts", "global", "tests", "--out", str(out), "--budget", "0"])
    report = json.loads((out / "gpu_check-global-tests.json").read_text())
    (row,) = report["benchmarks"]
    assert row == {"benchmark": "tiny-global", "error": ["not run: --budget spent"]}
    assert report["tests"]["not_run"] == ["every module: --budget spent"]
    markdown = (out / "gpu_check-global-tests.md").read_text()
    assert "| tiny-global |  |  | error: not run: --budget spent" in markdown
    assert "- not run: `every module: --budget spent`" in markdown


def test_only_gives_the_order_of_the_benchmarks(gpu_check):
    benchmarks = [(name, "bench.py", []) for name in ("n-a-f32", "n-a-bf16", "n-c-bf16", "n-c-f32")]
    order = [b[0] for b in gpu_check.selected(benchmarks, ["c-bf16", "a-", "bf16"])]
    assert order == ["n-c-bf16", "n-a-f32", "n-a-bf16"]  # each once, in --only's order
    assert gpu_check.selected(benchmarks, None) == benchmarks
    named = [(name, "bench.py", []) for name in ("g-s2forecast", "g-s2forecast-fused", "g-s2forecast-cudnn")]
    assert [b[0] for b in gpu_check.selected(named, ["g-s2forecast"])] == ["g-s2forecast"]  # a whole name: alone
    assert len(gpu_check.selected(named, ["g-s2f"])) == 3


def test_the_global_goal_reads_the_global_rows(gpu_check):
    """Set-up (b)'s dense SDPA row is op "global" at 180x360, C=64, 1 head too; the global
    goal compares the global part's rows."""
    common = {"op": "global", "nlat": 180, "channels": 64, "heads": 1, "dtype": "bfloat16"}
    rows = [
        {**common, "impl": "sdpa-dense", "config": "b", "attn_fwd_bwd_ms": 1.0},
        {**common, "impl": "sdpa-dense", "attn_fwd_bwd_ms": 9.0},
        {**common, "impl": "s2forecast", "attn_fwd_bwd_ms": 10.0},
    ]
    (goal,) = [t for t in gpu_check.targets(rows) if t["goal"].startswith("global bf16 180x360 C=64")]
    assert goal["measured"] == 0.9


CUDA_MODULE = """
import time
import pytest

@pytest.mark.cuda
def test_passes():
    pass

@pytest.mark.cuda
def test_fails():
    assert 1 == 2, "the kernel differs"

@pytest.mark.cuda
def test_slow():
    time.sleep({sleep})
"""


@pytest.mark.slow  # pytest in subprocesses
def test_cuda_tests_run_per_module_and_keep_what_finished(gpu_check, tmp_path, monkeypatch):
    """One run's failure was lost when its time ran out (pytest writes tracebacks and JUnit at
    the end): each module now runs alone, within what is left of the time."""
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_a.py").write_text(CUDA_MODULE.format(sleep=0))
    (root / "tests" / "test_b.py").write_text(CUDA_MODULE.format(sleep=60))  # cut by the time limit
    (root / "tests" / "test_c.py").write_text("def test_no_cuda_marker(): pass\n")
    monkeypatch.setattr(gpu_check, "ROOT", root)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # a second's start instead of several
    summary = gpu_check.run_tests(out, env, timeout=8)  # test_a needs ~1.5 s, test_b would need 60
    assert summary["passed"] == 2 and summary["failures"] == 1  # test_a's pass and slow, and its failure
    assert summary["failed_tests"] == ["tests.test_a::test_fails"]
    assert summary["not_run"] == ["tests/test_b.py (cut at the time limit)"] and summary["returncode"] == 1
    log = (out / "pytest_cuda.log").read_text()
    assert "the kernel differs" in log and "test_no_cuda_marker" not in log  # a traceback; only modules with cuda tests
    assert "- failed: `tests.test_a::test_fails`" in gpu_check.markdown(
        {"environment": ENVIRONMENT, "tests": summary, "targets": [], "benchmarks": []}
    )


@pytest.mark.slow  # pytest in subprocesses
def test_a_module_that_only_names_the_marker_is_no_failure(gpu_check, tmp_path, monkeypatch):
    """A module that names the marker (in a string) but has no cuda test selects nothing under
    ``-m cuda``: pytest's exit 5, not a failed run."""
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_a.py").write_text("import pytest\n\n@pytest.mark.cuda\ndef test_passes():\n    pass\n")
    (root / "tests" / "test_d.py").write_text('TEMPLATE = "@pytest.mark.cuda"\n\ndef test_plain():\n    pass\n')
    monkeypatch.setattr(gpu_check, "ROOT", root)
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    summary = gpu_check.run_tests(tmp_path, env, timeout=30)
    assert (summary["returncode"], summary["passed"], summary["not_run"]) == (0, 1, [])


def test_pinned_version_builds_without_setuptools_scm(gpu_check, tmp_path):
    (tmp_path / "torch_harmonics").mkdir()
    (tmp_path / "pyproject.toml").write_text(PEER_PYPROJECT)
    gpu_check.pin_version(tmp_path, "0.9.2")
    pyproject = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == "0.9.2" and "dynamic" not in pyproject["project"]
    assert pyproject["build-system"]["requires"] == ["setuptools"]
    assert "setuptools_scm" not in pyproject["tool"] and pyproject["tool"]["ruff"] == {"line-length": 120}
    assert (tmp_path / "torch_harmonics" / "_version.py").read_text() == "version = '0.9.2'\n"


# torch-harmonics 0.9.2's pyproject.toml, shortened
PEER_PYPROJECT = """[build-system]
requires = [ "setuptools", "setuptools-scm"]
build-backend = "setuptools.build_meta"

[project]
name = "torch_harmonics"
dynamic = ["version"]

[tool.setuptools_scm]
version_file = "torch_harmonics/_version.py"
fallback_version = "0.0.0"

[tool.ruff]
line-length = 120
"""


def test_targets_compare_with_the_goals(gpu_check):
    rows = [
        neighborhood_row("a", "s2forecast-fused", 2.0),
        neighborhood_row("a", "torch-harmonics", 30.0),  # 15x: goal 10x met
        neighborhood_row("a", "flex-attention", 1.0),  # faster than ours: goal missed
        neighborhood_row("b", "s2forecast-fused", 1.0, dtype="bfloat16"),
        neighborhood_row("b", "torch-harmonics", 6.0, dtype="bfloat16"),  # 6x: goal 5x met, in bf16
        neighborhood_row("c", "s2forecast-fused", 5.0, dtype="bfloat16", attn_fwd_over_floor=8.0),
        {"benchmark": "train-swe-128x256", "impl": "s2forecast", "samples_per_s": 40.0},
        {"benchmark": "train-swe-128x256", "impl": "torch-harmonics", "samples_per_s": 10.0},
    ]
    found = {target["goal"]: target for target in gpu_check.targets(rows)}
    peer = found["(a) fwd+bwd fp32: torch-harmonics / s2forecast-fused"]
    assert peer["measured"] == 15.0 and peer["met"] is True
    flex = found["(a) fwd+bwd fp32: flex-attention / s2forecast-fused"]
    assert flex["measured"] == 0.5 and flex["met"] is False
    floor = found["(c) bf16 memory floor / forward (>= 0.25: within 4x)"]
    assert floor["measured"] == 0.12 and floor["met"] is False
    assert found["SWE training bf16 samples/s: s2forecast / torch-harmonics"]["measured"] == 4.0
    assert found["(b) fwd+bwd fp32: torch-harmonics / s2forecast-fused"]["met"] is None  # not run
    assert found["(b) fwd+bwd bf16: torch-harmonics / s2forecast-fused"]["measured"] == 6.0


def test_benchmark_errors_are_kept_not_scored(gpu_check):
    rows = [neighborhood_row("b", "s2forecast-fused", None, error=["CUDA out of memory"])]
    found = {target["goal"]: target for target in gpu_check.targets(rows)}
    assert found["(b) fwd+bwd fp32: torch-harmonics / s2forecast-fused"]["met"] is None


ENVIRONMENT = {"device": "GPU X", "torch": "2.11", "cuda": "13.0", "triton": "3.6", "torch_harmonics": "0.9.2",
               "python": "3.12", "date": "2026-11-23"}  # fmt: skip


def test_report_merges_parts_from_one_device(gpu_check, tmp_path):
    environment = ENVIRONMENT
    first = {"environment": environment, "parts": ["tests"], "benchmarks": [], "tests": {"command": "pytest -m cuda",
             "returncode": 0, "seconds": 3, "passed": 4, "failures": 0, "errors": 0, "skipped": 0}}  # fmt: skip
    rows = [neighborhood_row("a", "s2forecast-fused", 2.0), neighborhood_row("a", "torch-harmonics", 8.0)]
    second = {"environment": environment, "parts": ["neighborhood"], "benchmarks": rows}
    paths = []
    for i, part in enumerate((first, second)):
        paths.append(tmp_path / f"part{i}.json")
        paths[-1].write_text(json.dumps(part))
    gpu_check.main(["report", *map(str, paths), "--out", str(tmp_path / "merged")])
    merged = json.loads((tmp_path / "merged" / "gpu_check.json").read_text())
    assert merged["parts"] == ["tests", "neighborhood"] and merged["tests"]["passed"] == 4
    target = next(t for t in merged["targets"] if t["goal"].startswith("(a) fwd+bwd fp32: torch-harmonics"))
    assert target["measured"] == 4.0 and target["met"] is False

    other = dict(second, environment=dict(environment, device="GPU Y"))
    paths[1].write_text(json.dumps(other))
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["report", *map(str, paths), "--out", str(tmp_path / "again")])
    assert exit_info.value.code == 2
    assert not (tmp_path / "again" / "gpu_check.json").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["build-peer", "--source", "{tmp}", "--dest", "{tmp}/w", "--cpu"], "has no setup.py"),
        (["run", "--wheels", "{tmp}", "--out", "{tmp}/o", "--parts", "global"], "no .whl files there"),
        (["report", "{tmp}/missing.json", "--out", "{tmp}/o"], "not a gpu_check JSON report"),
        (["run", "--out", "{tmp}/user", "--parts", "global"], "holds files that gpu_check did not write"),
        (["build-peer", "--source", "{tmp}", "--dest", "{tmp}/w", "--cpu", "--cuda-arch", "9.0"], "one of --cpu and"),
        pytest.param(
            ["build-peer", "--source", "{tmp}/peer", "--dest", "{tmp}/w"],
            "no CUDA device: pass --cuda-arch",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the build would start"),
        ),
        (["run", "--out", "{tmp}/o", "--parts", "global", "--budget", "-1"], "--budget must be"),
        (["run", "--out", "{tmp}/o", "--parts", "global", "--timeout", "-5"], "--timeout must be more than 0 seconds"),
        (["run", "--out", "{tmp}/o", "--parts", "global", "--only", "zzz"], "--only zzz names no benchmark of global"),
    ],
)
def test_bad_inputs_give_one_line(gpu_check, tmp_path, capsys, argv, message):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    (tmp_path / "peer").mkdir()
    (tmp_path / "peer" / "setup.py").write_text("raise SystemExit('never run')")
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main([arg.format(tmp=tmp_path) for arg in argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1 and "Traceback" not in error
    assert (tmp_path / "user" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "user").iterdir()) == ["notes.txt"]


def test_a_module_cut_short_does_not_report_an_earlier_runs_results(gpu_check, tmp_path, monkeypatch):
    """In a reused --out, the JUnit file of an earlier run's module was counted as this run's when the
    module was cut at the time limit (pytest writes none then)."""
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_a.py").write_text(CUDA_MODULE.format(sleep=0))
    monkeypatch.setattr(gpu_check, "ROOT", root)
    out = tmp_path / "out"
    out.mkdir()
    (out / "pytest_cuda_0.xml").write_text(  # the earlier run's: one failure
        '<testsuites><testsuite tests="1" failures="1" errors="0" skipped="0">'
        '<testcase classname="tests.test_a" name="test_fails"><failure/></testcase></testsuite></testsuites>'
    )

    def cut(command, timeout, **options):
        raise gpu_check.subprocess.TimeoutExpired(command, timeout)

    monkeypatch.setattr(gpu_check.subprocess, "run", cut)
    summary = gpu_check.run_tests(out, dict(os.environ), timeout=30)
    assert summary["not_run"] == ["tests/test_a.py (cut at the time limit)"]
    assert (summary["failures"], summary["failed_tests"], summary["tests"]) == (0, [], 0)


CHILD_BENCHMARK = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_benchmark_cut_at_its_timeout_takes_its_processes_with_it(gpu_check, tmp_path):
    """bench_attention runs each case in a process of its own: on timeout that process kept running
    (and would hold the GPU while the next benchmarks were timed)."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "bench_child.py").write_text(CHILD_BENCHMARK)
    out = tmp_path / "out"
    out.mkdir()
    original = gpu_check.SCRIPTS
    gpu_check.SCRIPTS = scripts
    try:
        (row,) = gpu_check.run_benchmark("child", "bench_child.py", [], 1, out, dict(os.environ), timeout=2)
    finally:
        gpu_check.SCRIPTS = original
    assert row["error"] == ["timed out after 2 s"]
    child = int((out / "child.log").read_text().split()[0])
    for _ in range(50):  # reaped by init once killed
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        raise AssertionError(f"the benchmark's child {child} outlived its timeout")


def test_report_adds_up_the_tests_of_each_lease(gpu_check, tmp_path):
    tests = {"command": "pytest -m cuda", "seconds": 3, "tests": 5, "passed": 4, "failures": 1, "errors": 0,
             "skipped": 0, "failed_tests": ["tests.test_k::test_kernel"], "not_run": [], "returncode": 1}  # fmt: skip
    spent = {"command": "pytest -m cuda", "returncode": "not run", "seconds": 0,
             "not_run": ["every module: --budget spent"]}  # fmt: skip
    second = dict(tests, failures=0, passed=5, failed_tests=[], returncode=0)
    paths = []
    for i, part in enumerate((tests, spent, second)):
        paths.append(tmp_path / f"part{i}.json")
        paths[-1].write_text(
            json.dumps({"environment": ENVIRONMENT, "parts": ["tests"], "benchmarks": [], "tests": part})
        )
    gpu_check.main(["report", *map(str, paths[:2]), "--out", str(tmp_path / "one")])
    merged = json.loads((tmp_path / "one" / "gpu_check.json").read_text())["tests"]
    assert merged == tests  # the lease whose budget was spent adds nothing (it replaced the first's)
    gpu_check.main(["report", *map(str, paths), "--out", str(tmp_path / "all")])
    merged = json.loads((tmp_path / "all" / "gpu_check.json").read_text())["tests"]
    assert (merged["tests"], merged["passed"], merged["failures"], merged["returncode"]) == (10, 9, 1, 1)
    assert merged["failed_tests"] == ["tests.test_k::test_kernel"]


def test_a_goal_reads_the_measured_row_of_a_case_another_lease_failed(gpu_check):
    rows = [
        neighborhood_row("a", "s2forecast-fused", 2.0, dtype="bfloat16"),
        neighborhood_row("a", "flex-attention", None, dtype="bfloat16", error=["out of memory"]),  # lease 1
        neighborhood_row("a", "flex-attention", 21.0, dtype="bfloat16"),  # lease 2
    ]
    found = {target["goal"]: target for target in gpu_check.targets(rows)}
    assert found["(a) fwd+bwd bf16: flex-attention / s2forecast-fused"]["measured"] == 10.5


def test_the_budget_counts_the_wheels_installation(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "environment", lambda env: ENVIRONMENT)
    monkeypatch.setattr(gpu_check, "install_wheels", lambda directories, site: time.sleep(1.5))
    monkeypatch.setitem(gpu_check.BENCHMARKS, "global", [("tiny-global", "bench_stub.py", ["--op", "global"])])
    out = tmp_path / "out"
    gpu_check.main(["run", "--parts", "global", "--out", str(out), "--budget", "31", "--wheels", str(tmp_path),
                    "--site", str(tmp_path / "site")])  # fmt: skip
    (row,) = json.loads((out / "gpu_check-global.json").read_text())["benchmarks"]
    assert row == {"benchmark": "tiny-global", "error": ["not run: --budget spent"]}  # 29.5 s left: under 30
