"""scripts/probe_inputs.py, the re-runnable bad-input probe of issue 14: a few cases end to end."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).parents[2]


# issue 29's training-side cases: a planted symlink must not lose the user's file, the help must
# not show a crafted cache, a store in another longitude convention must forecast the same
TRAINING_CASES = ["fit --help <- symlink", "fit --help <- crafted cache with the old key", "store_lon_west",
                  "LambdaCallback on_fit_start: builtins.print"]  # fmt: skip


@pytest.mark.slow  # the probe script, end to end (one run: each builds its workspace by training a model)
def test_probe_runs_and_judges_cases(tmp_path, capsys, monkeypatch):
    only = ["control", "rollout --steps 0", "rollout ckpt <- ckpt_malicious", *TRAINING_CASES]
    # in this process, as the probe runs its cases in its own (a process of its own cost 8 s of imports)
    monkeypatch.chdir(tmp_path)
    returncode = load_probe().main(["--workdir", str(tmp_path), *(arg for name in only for arg in ("--only", name))])
    result = SimpleNamespace(returncode=returncode, stdout=capsys.readouterr().out, stderr="")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    cases, summary = lines[:-1], lines[-1]["summary"]
    by_name = {case["name"]: case for case in cases}
    training = {name: case for name, case in by_name.items() if any(text in name for text in TRAINING_CASES)}
    assert sorted(set(by_name) - set(training)) == ["good evaluate (control)", "good rollout (control)",
                                                    "rollout --steps 0", "rollout ckpt <- ckpt_malicious"]  # fmt: skip
    assert by_name["good rollout (control)"]["outcome"] == by_name["good evaluate (control)"]["outcome"] == "ok"
    refused = by_name["rollout --steps 0"]
    assert refused["outcome"] == "error" and "s2forecast rollout: error: " in refused["message"], refused
    assert "--steps" in refused["message"] and not refused["lost"] and not refused["leftovers"]
    malicious = by_name["rollout ckpt <- ckpt_malicious"]
    assert malicious["outcome"] == "error" and not malicious["code_ran"], malicious
    assert summary["cases"] == 8 and summary["code_executions"] == 0, summary
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # its workspace is gone

    assert len(training) == 4, sorted(training)
    for name, case in training.items():
        assert not case["lost"] and not case["silent"] and not case["leftovers"], case
        assert case["outcome"] == ("error" if "LambdaCallback" in name else "ok"), case
    assert summary["tracebacks"] == summary["silent_wrong_results"] == summary["lost_or_replaced"] == 0


def test_probe_lists_its_matrix():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "probe_inputs.py"), "--list"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    names = result.stdout.splitlines()
    assert len(names) >= 200 and len(set(names)) == len(names)
    assert "rollout ckpt <- ckpt_malicious" in names and "convert-era5 <- era5_degC_as_K" in names


def test_probe_counts_warnings_apart_from_the_error_line():
    """A warning before an error (s2forecast's own one-line format, or Python's with its source line) is
    counted as a warning, not as a second error line that would be judged a traceback."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("probe_inputs", REPO / "scripts" / "probe_inputs.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    stderr = (
        "s2forecast rollout: warning: /data has 16384 bytes free; the forecast takes up to 18432 bytes uncompressed\n"
        "/site-packages/lib.py:12: UserWarning: something\n"
        "  warnings.warn('something')\n"
        "s2forecast rollout: error: could not write /data/f.nc: No space left on device\n"
    )
    lines, warned = probe._without_warnings(stderr)
    assert lines == ["s2forecast rollout: error: could not write /data/f.nc: No space left on device"]
    assert warned == 2


def load_probe():
    import importlib.util

    spec = importlib.util.spec_from_file_location("probe_inputs", REPO / "scripts" / "probe_inputs.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe


@pytest.mark.parametrize(("code", "line", "outcome"), [
    (2, "s2forecast rollout: error: --steps 0 must be >= 1", "error"),
    (1, "Killed", "traceback"),  # any one line and exit code passed as a refusal
    (2, "RuntimeError: boom", "traceback"),
])  # fmt: skip
def test_probe_takes_only_exit_2_with_the_commands_line_for_a_refusal(tmp_path, monkeypatch, code, line, outcome):
    import s2forecast.cli

    def command(argv):
        print(line, file=sys.stderr)
        raise SystemExit(code)

    probe = load_probe()
    (tmp_path / "ws").mkdir()
    monkeypatch.setattr(s2forecast.cli, "main", command)
    assert probe.run_case(probe.Case("a case", ["rollout"]), {}, tmp_path, 0).outcome == outcome


@pytest.mark.parametrize(("argv", "message"), [
    (["--only", "zzz"], "--only zzz names no case: --list lists them"),
    (["--workdir", "{tmp}/missing"], "--workdir {tmp}/missing is not a directory; give an existing one"),
])  # fmt: skip
def test_probe_refuses_what_would_probe_nothing_before_building(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_status:
        load_probe().main([arg.format(tmp=tmp_path) for arg in argv])
    assert exit_status.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f": error: {message.format(tmp=tmp_path)}")
    assert list(tmp_path.iterdir()) == []
