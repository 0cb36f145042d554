"""The benchmark script runs end to end on a tiny case and prints the documented keys."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "bench_attention.py"
KEYS = {"op", "impl", "nlat", "nlon", "batch", "channels", "heads", "theta", "dtype", "device"}
KEYS |= {"fwd_ms", "fwd_bwd_ms", "peak_mem_mb"}


def test_bench_attention_prints_json_lines():
    command = [sys.executable, str(SCRIPT), "--nlat", "8", "--nlon", "16", "--channels", "16", "--heads", "2"]
    command += ["--device", "cpu", "--repeats", "1", "--op", "neighborhood"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {row["impl"] for row in rows} == {"s2forecast", "torch-harmonics", "sdpa-dense"}
    for row in rows:
        assert "error" not in row, row
        assert KEYS <= row.keys()
        assert row["fwd_ms"] > 0 and row["fwd_bwd_ms"] > 0
