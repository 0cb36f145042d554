"""The training benchmark runs end to end on a tiny case and its two models are matched."""

import importlib.util
import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "bench_train.py"
KEYS = {"impl", "nlat", "nlon", "channels", "batch", "embed_dim", "num_layers", "attention", "dtype", "device"}
KEYS |= {"params", "steps", "samples_per_s", "step_ms", "peak_mem_mb"}
TINY = {"impl": "s2forecast", "nlat": 16, "nlon": 32, "channels": 3, "batch": 1, "embed_dim": 16, "num_layers": 2}
TINY |= {"heads": 1, "scale_factor": 2, "attention": "neighborhood", "dtype": "float32", "device": "cpu"}
TINY |= {"backend": "reference"}


def load_script():
    spec = importlib.util.spec_from_file_location("bench_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # the training benchmark's cases, each in a subprocess
def test_bench_train_prints_json_lines(monkeypatch, capsys):
    # one thread: on a shared 2-core machine OpenMP oversubscription can slow a step 100x
    command = [str(SCRIPT), "--nlat", "16", "--nlon", "32", "--batch", "1", "--steps", "1"]
    command += ["--warmup", "1", "--device", "cpu", "--threads", "1"]
    # the script as `python scripts/bench_train.py ...` runs it (as __main__, its argv), in this
    # process (torch is loaded here); it starts each case's process itself
    monkeypatch.setattr(sys, "argv", command)
    runpy.run_path(str(SCRIPT), run_name="__main__")
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["impl"] for row in rows] == ["s2forecast", "torch-harmonics"]
    for row in rows:
        assert "error" not in row, row
        assert KEYS <= row.keys()
        assert (row["nlat"], row["nlon"], row["channels"], row["batch"], row["steps"]) == (16, 32, 3, 1, 1)
        assert (row["embed_dim"], row["num_layers"], row["attention"]) == (128, 4, "neighborhood")
        assert row["params"] > 0 and row["samples_per_s"] > 0 and row["step_ms"] > 0
        assert row["process_s"] >= row["step_ms"] / 1e3  # its process timed as a whole
        assert row["peak_mem_mb"] >= 0
    assert rows[1]["peer_kernels"] in ("cpu-extension", "torch")


def test_models_match():
    """Same latent grid, same attention disks; torch-harmonics lacks only the MLP output bias."""
    import torch
    from torch_harmonics import NeighborhoodAttentionS2

    from s2forecast.nn import S2NeighborhoodAttention
    from s2forecast.ops.neighborhood import spherical_neighborhood

    bench = load_script()
    ours, ours_latent = bench.build_model(TINY)
    peer, peer_latent = bench.build_model({**TINY, "impl": "torch-harmonics"})
    assert tuple(ours_latent) == tuple(peer_latent) == (8, 16)
    count = {name: sum(p.numel() for p in model.parameters()) for name, model in [("ours", ours), ("peer", peer)]}
    assert count["ours"] - count["peer"] == TINY["num_layers"] * TINY["embed_dim"]
    ours_attn = [m for m in ours.modules() if isinstance(m, S2NeighborhoodAttention)]
    peer_attn = [m for m in peer.modules() if isinstance(m, NeighborhoodAttentionS2)]
    assert len(ours_attn) == len(peer_attn) == TINY["num_layers"]
    disks = spherical_neighborhood(ours.latent, ours_attn[0].theta).dense_mask()
    # torch-harmonics stores the neighbors of the queries at longitude 0 (the rest by rotation)
    assert peer_attn[0].psi_col_idx.numel() * ours.latent.nlon == int(disks.sum())
    out = peer(torch.randn(1, 3, 16, 32))
    assert out.shape == (1, 3, 16, 32)


@pytest.mark.parametrize(("options", "message"), [
    (["--embed-dim", "8", "--heads", "3"], "--embed-dim 8 is not a multiple of --heads 3"),
    (["--batch", "0"], "--batch must be at least 1, got 0"),
    (["--device", "nosuch"], "--device 'nosuch': "),
])  # fmt: skip
def test_bench_train_refuses_bad_options_in_one_line(options, message, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *options])
    with pytest.raises(SystemExit) as exit_status:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    captured = capsys.readouterr()
    assert exit_status.value.code == 2 and captured.out == "" and "Traceback" not in captured.err
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith(f"bench_train.py: error: {message}"), last
