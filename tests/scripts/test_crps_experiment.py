"""scripts/crps_experiment.py without training: its variants are committed configs, and its tables
and plot summarize the measured lines of issue 17 (docs/results/crps_experiment.jsonl) as the
README shows them."""

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).parents[2]
RESULTS = REPO / "docs" / "results" / "crps_experiment.jsonl"


def load_script():
    spec = importlib.util.spec_from_file_location("crps_experiment", REPO / "scripts" / "crps_experiment.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_variants_are_configs_layered_on_the_crps_config():
    script = load_script()
    assert {"mse", "crps"} < set(script.VARIANTS) and len(script.VARIANTS) - 2 >= 3  # >= 3 new ones
    crps = script.VARIANTS["crps"]
    for name, configs in script.VARIANTS.items():
        assert all(path.is_file() for path in configs), name
        if name not in ("mse", "crps"):
            assert configs[: len(crps)] == crps and len(configs) == len(crps) + 1
            assert "model" in yaml.safe_load(configs[-1].read_text())  # a model section of its own


def test_tables_of_the_measured_lines(tmp_path):
    script = load_script()
    rows = [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]
    text = script.table(rows)
    assert "| crps | 0 | 24 | 37.39 | 19.77 | 0.95 | 0.711 | 0.378 | 1.01 |" in text  # the README's row
    assert len(text.splitlines()) == 2 + 2 * 4  # two models x leads 1, 6, 12, 24
    # a second seed of the CRPS model: one more line of targets, against the MSE run of seed 0
    second = [dict(row, seed=1) for row in rows if row["model"] == "crps"]
    targets = script.targets(rows + second).splitlines()
    assert [line.split(" | ")[:2] for line in targets[2:]] == [["| crps", "0"], ["| crps", "1"]]
    crps_rows = [row for row in rows if row["model"] == "crps"]
    mse = {row["lead_hours"]: row for row in rows if row["model"] == "mse"}
    worst = max(row[f"crps_{f}"] / mse[row["lead_hours"]][f"crps_{f}"] for row in crps_rows for f in script.FIELDS)
    assert targets[2].endswith(f"| {worst:.3f} |")
    script.plot(rows + second, tmp_path / "crps.png")
    assert (tmp_path / "crps.png").stat().st_size > 10_000


def test_a_failing_command_stops_the_experiment_in_one_line(tmp_path, capfd):
    """A command that fails (here: a store that does not exist) ends the script with one line naming
    the command, after the command's own message; no traceback."""
    script = load_script()
    with pytest.raises(SystemExit, match=r"crps_experiment: `s2forecast stats` failed \(exit 2\)"):
        script.run(["stats", str(tmp_path / "missing.zarr"), "--no-progress"])
    err = capfd.readouterr().err
    assert "no zarr store at" in err and "Traceback" not in err
