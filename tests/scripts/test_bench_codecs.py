"""scripts/bench_codecs.py prints a line per variable and codec: ratio and throughputs of the buffer it decodes back."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

SCRIPT = Path(__file__).parents[2] / "scripts" / "bench_codecs.py"


def test_bench_codecs_prints_a_line_per_variable_and_codec(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_codecs", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    smooth = np.broadcast_to(np.linspace(250.0, 300.0, 32, dtype=np.float32), (3, 16, 32))
    xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), smooth.copy()),
            "land_sea_mask": (("latitude", "longitude"), np.ones((16, 32), np.float32)),  # 2-D: left out
        }
    ).to_zarr(tmp_path / "s.zarr", zarr_format=2)
    bench.main([str(tmp_path / "s.zarr"), "--repeat", "1"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(row["variable"], row["codec"]) for row in rows] == [("t2m", "lz4+shuffle"), ("t2m", "lz4+bitshuffle")]
    for row in rows:
        assert row["shape"] == [3, 16, 32] and row["ratio"] > 1.0  # a smooth field compresses
        assert row["encode_gb_s"] > 0 and row["decode_gb_s"] > 0


def test_a_directory_that_is_no_store_is_one_line(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_codecs", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit) as exit_status:
        bench.main([str(tmp_path)])
    assert exit_status.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {tmp_path} is not a zarr store (GroupNotFoundError" in err and "Traceback" not in err
