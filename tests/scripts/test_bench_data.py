"""scripts/bench_data.py's options: a store made before is reused only when it is the one asked for,
and bad values are one line (a review: a stale store's sizes were printed as the options')."""

import importlib.util
import re
import shutil
from pathlib import Path

import pytest


def load_script():
    spec = importlib.util.spec_from_file_location("bench_data", Path(__file__).parents[2] / "scripts" / "bench_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_store_of_other_sizes_is_refused_and_bad_values_are_one_line(tmp_path, capsys):
    bench = load_script()
    store = tmp_path / "s.zarr"
    bench.make_store(store, 6, 8, 16, 1)
    (tmp_path / "mine").mkdir()  # a directory of the user's, not a store
    for argv, message in (
        (["--times", "80", "--grid", "8x16", "--levels", "1"], "holds 6 times of 8x16 at 1 levels, not --times 80"),
        (["--grid", "16"], "--grid '16' \\(NLATxNLON\\) and --read-threads '1' \\(1,16\\) take numbers"),
        (["--samples", "0"], "must be >= 1"),
        (["--workers", "-1"], "--workers -1: must be >= 0"),
        (["--levels", "14"], "--levels <= 13, got 80 and 14"),  # it made a store of 13, then refused it
        (["--times", "1"], "--times must be >= 2"),  # compute_stats' traceback
        (["--store", str(tmp_path / "mine")], "--store .*mine is not a store of this benchmark"),  # a traceback
    ):
        with pytest.raises(SystemExit):
            bench.main(["--store", str(store), *argv])
        assert len(re.findall(message, capsys.readouterr().err)) == 1, argv


def test_an_interrupted_build_leaves_no_store_to_reuse(tmp_path, capsys, monkeypatch):
    """A Ctrl-C while the store was built (its statistics last) left a store that every later run reused
    and failed on with a traceback (a review found it): it is built under another name and renamed."""
    bench = load_script()
    store = tmp_path / "s.zarr"

    def interrupted(path, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "compute_stats", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bench.make_store(store, 6, 8, 16, 1)
    assert not store.exists()
    monkeypatch.undo()
    bench = load_script()
    bench.make_store(store, 6, 8, 16, 1)  # the leftover of the interrupted build is its own: replaced
    assert (store / "stats").is_dir() and [p.name for p in tmp_path.iterdir()] == ["s.zarr"]
    shutil.rmtree(store / "stats")  # a damaged store given as --store: one line, not a traceback
    with pytest.raises(SystemExit):
        bench.main(["--store", str(store), "--times", "6", "--grid", "8x16", "--levels", "1", "--samples", "1"])
    err = capsys.readouterr().err
    assert re.search(r"--store .*s\.zarr: .*has no normalization statistics.*give another --store", err), err
