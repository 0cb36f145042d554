"""scripts/ball_sparse_precision.py at a tiny size: with the float32 run's selection replayed the
float64 run differs by float32 rounding only; with each run's own selection (--own-selection) it may
differ more (not checked here: at a tiny size the selections may coincide)."""

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "ball_sparse_precision.py"


def run(monkeypatch, capsys, *extra) -> dict:
    spec = importlib.util.spec_from_file_location("ball_sparse_precision", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["ball_sparse_precision.py", "--nlat", "16", "--nlon", "32",
                                      "--compression-window", "32", *extra])  # fmt: skip
    module.main()
    return {line["output"]: line for line in map(json.loads, capsys.readouterr().out.splitlines())}


def test_replayed_selection_leaves_only_rounding(monkeypatch, capsys):
    same = run(monkeypatch, capsys)
    assert list(same) == ["out", "dq", "dk", "dv"]
    for line in same.values():
        assert line["same_selection"] and line["selections_replayed"] > 0, line
        assert 0 < line["max_error"] < 1e-5 * max(line["max_abs"], 1.0), line
    own = run(monkeypatch, capsys, "--own-selection")
    assert all(not line["same_selection"] and line["selections_replayed"] == 0 for line in own.values())
    importlib_module = sys.modules.get("s2forecast.ops.ball_sparse_attention")
    assert importlib_module.descend_select_blocks.__name__ == "descend_select_blocks"  # restored
