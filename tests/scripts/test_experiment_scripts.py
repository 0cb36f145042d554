"""The experiment scripts' options (scripts/pe_ablation.py, crps_experiment.py, equivariance_resolution.py,
robustness.py, make_coastlines.py): bad values are one line, before any training, and a run never
replaces what it did not write (a review found tracebacks, a save that failed after training, a
user's weights replaced, and reruns labelled with options their models were not trained with)."""

import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parents[2] / "scripts"


def refused(script: str, *argv, monkeypatch, capsys) -> str:
    """The one line ``script`` (run in this process, as ``__main__``) ends with, exit status 2."""
    monkeypatch.setattr(sys, "argv", [script, *map(str, argv)])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(SCRIPTS / script), run_name="__main__")
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and "Traceback" not in "\n".join(lines) and len([x for x in lines if "error" in x]) == 1, lines
    return lines[-1]


def test_experiment_scripts_refuse_bad_options_in_one_line(tmp_path, swe_store, monkeypatch, capsys):
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "s2-neighborhood-nope-seed0.pt").write_bytes(b"mine")
    bad_lines = tmp_path / "bad.jsonl"
    bad_lines.write_text('{"model": "x"}\n')
    cases = [
        ("pe_ablation.py", ["--table", tmp_path / "missing.jsonl"], "--table"),
        ("pe_ablation.py", ["--store", tmp_path / "missing.zarr"], "no such store"),
        ("pe_ablation.py", ["--store", swe_store, "--models", "s2-neighborhood-nope", "--seeds", "0", "--out-dir",
                            weights], "which this run would replace"),
        # the 24 h scores need trajectories of 25 states (the tiny store's hold 8): this failed after training
        ("pe_ablation.py", ["--store", swe_store, "--models", "s2-neighborhood-nope", "--seeds", "0",
                            "--train-trajectories", "2"], "data.init_args.val_trajectories: no sample of 1 input "
                                                           "and 24 target states"),
        ("pe_ablation.py", ["--store", swe_store, "--models", "s2-neighborhood-nope", "--seeds", "0"],
         "data.init_args.val_trajectories [10, 3] is an empty range"),  # a traceback
        # one angle: the table's "rot. 90° / 0°" was 1 ± 0, never measured
        ("pe_ablation.py", ["--store", swe_store, "--angles", "1"], "--angles must be at least 2 (0 and 90 degrees)"),
        ("pe_ablation.py", ["--table", bad_lines], "not the JSON lines of a run of this script"),
        ("pe_ablation.py", ["--table", bad_lines, "--plot", weights / "s2-neighborhood-nope-seed0.pt"], "exists"),
        ("crps_experiment.py", ["--table", tmp_path / "missing.jsonl"], "--table"),
        ("equivariance_resolution.py", ["--grids", "32"], "give NLATxNLON sizes"),
        ("equivariance_resolution.py", ["--lines", tmp_path / "x.jsonl"], "give it with --plot PNG"),
        ("robustness.py", ["--ckpt", tmp_path / "missing.ckpt", "--store", swe_store], "no such file"),
        ("robustness.py", ["--ckpt", "x", "--store", swe_store, "--samples", "0"], "--samples must be >= 1"),
        ("make_coastlines.py", [tmp_path / "missing.json", tmp_path / "out.npz"], "no such file"),
        # tracebacks before (a review): a store that is not there, sizes the attention refuses, an empty split
        ("robustness.py", ["--ckpt", bad_lines, "--store", swe_store, "--other-store", tmp_path / "missing.zarr"],
         "--other-store"),
        ("robustness.py", ["--ckpt", bad_lines, "--store", swe_store], "use a checkpoint saved by s2forecast fit"),
        ("ball_sparse_precision.py", ["--nlat", "8", "--nlon", "16", "--compression-window", "16"],
         "must be a multiple of ball_size/block_size"),
        ("neighborhood_tiles.py", ["--nlat", "8", "--nlon", "16", "--theta", "-1"], "--theta is a radius in radians"),
        ("neighborhood_tiles.py", ["--nlat", "0", "--nlon", "0"], "--nlat and --nlon must be at least 2 and 1"),
        ("swe_ablation.py", ["--store", swe_store, "--train-trajectories", "5", "--models", "s2-global"],
         "data.init_args.val_trajectories [5, 3] is an empty range"),
        ("swe_ablation.py", ["--store", swe_store, "--epochs", "0"], "--epochs must be at least 1"),
        ("equivariance_resolution.py", ["--lines", tmp_path / "missing.jsonl", "--plot", tmp_path / "x.png"],
         "no such file"),
        ("equivariance_resolution.py", ["--grids", "8x16", "--plot", tmp_path / "notes.txt"], "give a .png path"),
        ("crps_experiment.py", ["--table", bad_lines, "--plot", bad_lines], "exists"),
    ]  # fmt: skip
    for script, argv, message in cases:
        assert message in refused(script, *argv, monkeypatch=monkeypatch, capsys=capsys), (script, argv)
    assert (weights / "s2-neighborhood-nope-seed0.pt").read_bytes() == b"mine"
    assert not (tmp_path / "out.npz").exists()


def test_crps_experiment_refuses_a_work_of_other_options(tmp_path, monkeypatch, capsys):
    """A rerun with another --steps (or --store) reused the models of the first and labelled their rows
    with the new steps (store); relative paths were read in the repository (the commands' working directory)."""
    work = tmp_path / "work"
    work.mkdir()
    before = {
        "store": str(tmp_path / "store.zarr"),
        "trajectories": 12,
        "train": 10,
        "steps": 2,
        "embed_dim": 64,
        "train_members": 0,
        "members": 8,
        "leads": 24,
        "init_hours": 13,
    }
    (work / "options.json").write_text(json.dumps(before))
    (work / "runs").mkdir()  # what the first run made with them
    (tmp_path / "store.zarr").mkdir()
    (tmp_path / "other.zarr").mkdir()
    monkeypatch.chdir(tmp_path)
    message = refused("crps_experiment.py", "--store", "store.zarr", "--work", "work", "--steps", "50",
                      monkeypatch=monkeypatch, capsys=capsys)  # fmt: skip
    assert f"--work {work} holds runs of other options {{'steps': (2, 50)}}" in message
    message = refused("crps_experiment.py", "--store", "other.zarr", "--work", "work", "--steps", "2",
                      monkeypatch=monkeypatch, capsys=capsys)  # fmt: skip
    assert f"holds runs of other options {{'store': ('{tmp_path}/store.zarr', '{tmp_path}/other.zarr')}}" in message
