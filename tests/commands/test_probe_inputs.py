"""scripts/probe_inputs.py, the re-runnable bad-input probe of issue 14: a few cases end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]


@pytest.mark.slow  # the probe script, end to end
def test_probe_runs_and_judges_cases(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "probe_inputs.py"), "--workdir", str(tmp_path), "--only", "control",
         "--only", "rollout --steps 0", "--only", "rollout ckpt <- ckpt_malicious"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    cases, summary = lines[:-1], lines[-1]["summary"]
    by_name = {case["name"]: case for case in cases}
    assert sorted(by_name) == ["good evaluate (control)", "good rollout (control)", "rollout --steps 0",
                               "rollout ckpt <- ckpt_malicious"]  # fmt: skip
    assert by_name["good rollout (control)"]["outcome"] == by_name["good evaluate (control)"]["outcome"] == "ok"
    refused = by_name["rollout --steps 0"]
    assert refused["outcome"] == "error" and "s2forecast rollout: error: " in refused["message"], refused
    assert "--steps" in refused["message"] and not refused["lost"] and not refused["leftovers"]
    malicious = by_name["rollout ckpt <- ckpt_malicious"]
    assert malicious["outcome"] == "error" and not malicious["code_ran"], malicious
    assert summary["cases"] == 4 and summary["code_executions"] == 0 and result.returncode == 0, result.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []  # its workspace is gone


def test_probe_lists_its_matrix():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "probe_inputs.py"), "--list"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    names = result.stdout.splitlines()
    assert len(names) >= 200 and len(set(names)) == len(names)
    assert "rollout ckpt <- ckpt_malicious" in names and "convert-era5 <- era5_degC_as_K" in names


@pytest.mark.slow  # the probe script, end to end
def test_probe_judges_lost_files_wrong_forecasts_and_printed_text(tmp_path):
    """Issue 29's training-side cases: a planted symlink must not lose the user's file, the help
    must not show a crafted cache, a store in another longitude convention must forecast the same."""
    only = ["fit --help <- symlink", "fit --help <- crafted cache with the old key", "store_lon_west",
            "LambdaCallback on_fit_start: builtins.print"]  # fmt: skip
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "probe_inputs.py"), "--workdir", str(tmp_path),
         *(arg for name in only for arg in ("--only", name))],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    cases, summary = {case["name"]: case for case in lines[:-1]}, lines[-1]["summary"]
    assert len(cases) == 4 and result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name, case in cases.items():
        assert not case["lost"] and not case["silent"] and not case["leftovers"], case
        assert case["outcome"] == ("error" if "LambdaCallback" in name else "ok"), case
    assert summary["tracebacks"] == summary["silent_wrong_results"] == summary["lost_or_replaced"] == 0
