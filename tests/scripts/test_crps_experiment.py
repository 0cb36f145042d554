"""scripts/crps_experiment.py without training: its variants are committed configs, and its tables
and plot summarize the measured lines of issues 17 and 30 (docs/results/crps_experiment.jsonl) as
the README shows them."""

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


def merged(configs: list[Path]) -> dict:
    """The model and data options the layered YAML files set, the later file winning."""
    out = {"network": {}, "model": {}, "data": {}}
    for path in configs:
        config = yaml.safe_load(path.read_text())
        model = dict(config.get("model") or {})
        out["network"].update(model.pop("network", None) or {})
        out["model"].update(model)
        out["data"].update((config.get("data") or {}).get("init_args") or {})
    return out


def test_variants_are_configs_layered_on_the_crps_config():
    """The CRPS config holds the best variant ("losses"); issue 17's model ("crps") is it with the
    fair-CRPS overlay, and the noise variants add their own config on top of that, as they ran."""
    script = load_script()
    assert {"mse", "crps", "losses"} < set(script.VARIANTS) and len(script.VARIANTS) - 2 >= 3  # >= 3 new ones
    base, fair = script.VARIANTS["losses"], script.VARIANTS["crps"]
    assert base == [*script.MSE, REPO / "configs" / "swe" / "s2_neighborhood_crps.yaml"]
    assert fair[: len(base)] == base and len(fair) == len(base) + 1
    for name, configs in script.VARIANTS.items():
        assert all(path.is_file() for path in configs), name
        if name not in ("mse", "crps", "losses"):
            assert configs[: len(fair)] == fair and len(configs) == len(fair) + 1
            assert "network" in yaml.safe_load(configs[-1].read_text())["model"]  # a noise of its own
    best, issue17 = merged(base), merged(fair)
    assert best["model"]["crps_alpha"] == 0.95 and best["model"]["crps_spectral_weight"] == 0.02
    assert best["model"]["rollout_max"] == best["data"]["rollout_steps"] == 2
    assert issue17["model"]["crps_alpha"] == 1.0 and issue17["model"]["crps_spectral_weight"] == 0.0
    assert issue17["model"]["rollout_max"] == issue17["data"]["rollout_steps"] == 1
    assert issue17["network"] == best["network"]  # the same noise: only the loss differs


def test_tables_of_the_measured_lines(tmp_path):
    script = load_script()
    rows = [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]
    text = script.table(rows)
    assert "| losses | 1 | 24 | 36.01 | 19.11 | 0.94 | 0.767 | 0.413 | 0.93 |" in text  # the README's row
    assert len(text.splitlines()) == 2 + 6 * 4  # mse, 4 CRPS variants and a second seed x leads 1, 6, 12, 24
    targets = script.targets(rows).splitlines()  # a line per variant and seed, against the MSE run of seed 0
    runs = [line.split(" | ")[:2] for line in targets[2:]]
    assert runs == [["| crps", "0"], ["| fgn", "0"], ["| white_ar1", "0"], ["| losses", "0"], ["| losses", "1"]]
    second = [row for row in rows if row["model"] == "losses" and row["seed"] == 1]
    mse = {row["lead_hours"]: row for row in rows if row["model"] == "mse"}
    worst = max(row[f"crps_{f}"] / mse[row["lead_hours"]][f"crps_{f}"] for row in second for f in script.FIELDS)
    ratios = [row[f"crps_{f}"] / mse[row["lead_hours"]][f"crps_{f}"] for row in second for f in script.FIELDS]
    assert targets[-1].endswith(f"| {worst:.3f} | {sum(ratios) / len(ratios):.3f} |")  # the worst, and the mean
    readme = (REPO / "README.md").read_text()
    assert text in readme and script.targets(rows) in readme  # the README shows these tables
    script.plot(rows, tmp_path / "crps.png")
    assert (tmp_path / "crps.png").stat().st_size > 10_000


def test_a_failing_command_stops_the_experiment_in_one_line(tmp_path, capfd):
    """A command that fails (here: a store that does not exist) ends the script with one line naming
    the command, after the command's own message; no traceback."""
    script = load_script()
    with pytest.raises(SystemExit, match=r"crps_experiment: `s2forecast stats` failed \(exit 2\)"):
        script.run(["stats", str(tmp_path / "missing.zarr"), "--no-progress"])
    err = capfd.readouterr().err
    assert "no zarr store at" in err and "Traceback" not in err


def test_a_mistyped_store_does_not_block_its_work_directory(tmp_path, monkeypatch, capsys):
    """A review: --store swe_typo.zarr recorded its options in --work before any command ran, and the rerun
    with the store fixed was refused as "runs of other options" although --work held nothing else."""
    script = load_script()
    work, store = tmp_path / "work", tmp_path / "swe.zarr"
    monkeypatch.setattr("sys.argv", ["crps_experiment.py", "--store", str(tmp_path / "typo.zarr"), "--work", str(work)])
    with pytest.raises(SystemExit) as exit:
        script.main()
    assert exit.value.code == 2 and f"--store {tmp_path / 'typo.zarr'}: no such store" in capsys.readouterr().err
    assert not work.exists()
    # options of an earlier run recorded, nothing made with them: the new ones replace them
    store.mkdir()
    work.mkdir()
    (work / "options.json").write_text(json.dumps({"store": "elsewhere.zarr"}) + "\n")

    class Started(Exception):
        pass

    monkeypatch.setattr(script, "train", lambda *args: (_ for _ in ()).throw(Started()))
    monkeypatch.setattr("sys.argv", ["crps_experiment.py", "--store", str(store), "--work", str(work)])
    with pytest.raises(Started):
        script.main()
    assert json.loads((work / "options.json").read_text())["store"] == str(store)
    (work / "runs").mkdir()  # something made with them: kept, and other options refused
    monkeypatch.setattr("sys.argv", ["crps_experiment.py", "--store", str(store), "--work", str(work), "--steps", "9"])
    with pytest.raises(SystemExit):
        script.main()
    assert "holds runs of other options {'steps': (360, 9)}" in capsys.readouterr().err


def test_a_table_of_other_lines_is_one_line(tmp_path, monkeypatch, capsys):
    script = load_script()
    (tmp_path / "bad.jsonl").write_text('{"model": "mse"}\nnot json\n')
    monkeypatch.setattr("sys.argv", ["crps_experiment.py", "--table", str(tmp_path / "bad.jsonl")])
    with pytest.raises(SystemExit) as exit:
        script.main()
    err = capsys.readouterr().err
    assert exit.value.code == 2 and f"--table {tmp_path / 'bad.jsonl'}: not the JSON lines of a run" in err, err
    assert "Traceback" not in err
