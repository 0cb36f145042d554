"""scripts/bench_scale.py runs end to end at a tiny grid and prints one JSON line per command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "scripts" / "bench_scale.py"
KEYS = {"case", "wall_s", "peak_rss_mb", "store_mb", "data_mb", "mb_per_s", "raw_wall_s", "raw_peak_rss_mb"}
KEYS |= {"raw_mb_per_s", "ratio", "ratio_net", "grid", "channels", "steps", "load", "workers"}


@pytest.mark.slow  # two stores, three subprocesses each
def test_bench_scale_prints_a_line_per_case_and_length(tmp_path):
    command = [sys.executable, str(SCRIPT), "--grid", "16x9", "--steps", "3,4", "--surface", "2m_temperature"]
    command += ["--workdir", str(tmp_path), "--keep"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[0]["case"] == "startup" and rows[0]["wall_s"] > 0
    assert [(row["case"], row["steps"]) for row in rows[1:]] == [("stats", 3), ("stats", 4)]
    for row in rows[1:]:
        assert KEYS <= row.keys(), row
        assert (
            row["grid"] == "9x16"
            and row["channels"] == 5
            and row["data_mb"] == round(4 * row["steps"] * 9 * 16 * 5 / 1e6, 1)
        )
        assert row["workers"] == 0  # one process (--workers N adds rows with dask.distributed workers)
        assert row["wall_s"] > 0 and row["peak_rss_mb"] > 0 and row["raw_wall_s"] > 0 and row["ratio"] > 0
    # the store is in WeatherBench2's layout, and stats read it
    store = xr.open_zarr(tmp_path / "wb2_9x16_4.zarr")
    assert store["geopotential"].dims == ("time", "level", "longitude", "latitude")
    assert store["geopotential"].encoding["chunks"][0] == 1 and store["latitude"].values[0] == 90
    assert (tmp_path / "wb2_9x16_4.zarr" / ".zgroup").exists()  # zarr v2
    stats = xr.open_zarr(tmp_path / "stats_4" / "stats.zarr")
    channels = ["geopotential/500", "geopotential/850", "temperature/500", "temperature/850", "2m_temperature"]
    assert sorted(stats["channel"].values) == sorted(channels)
