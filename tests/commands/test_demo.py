"""scripts/demo.py: its options' bad inputs and its verdict against persistence (the demo itself
is timed by `/usr/bin/time make demo`, see the README)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

SCRIPT = Path(__file__).parents[2] / "scripts" / "demo.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("demo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--train-steps", "0"], "argument --train-steps: must be an integer >= 1, got '0'"),
        (["--train-steps", "1e3"], "argument --train-steps: must be an integer >= 1, got '1e3'"),
        (["--steps", "-1"], "argument --steps: must be an integer >= 1, got '-1'"),
        (["--threads", "all"], "argument --threads: must be an integer >= 1, got 'all'"),
    ],
)
def test_bad_options_are_one_line(demo, capsys, tmp_path, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--workdir", str(tmp_path / "work"), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(message), err
    assert not (tmp_path / "work").exists()  # refused before anything is made


def metrics(path: Path, forecast_rmse: np.ndarray, persistence_rmse: np.ndarray) -> Path:
    """A results file as `s2forecast evaluate` writes it (``write_results``), one field, leads 1..n h,
    two regions (the verdict is the global one's)."""
    from s2forecast.evaluation.report import write_results

    leads = np.arange(1, forecast_rmse.size + 1)
    values = np.ones((2, 3, 2, leads.size))
    values[0, 0, 0], values[0, 1, 0] = forecast_rmse, persistence_rmse
    values[0, 0, 1] = 2.0  # europe: worse than persistence everywhere, not looked at
    write_results(
        xr.Dataset(
            {"geopotential_height": (("metric", "source", "region", "lead_time"), values)},
            coords={
                "metric": ["rmse", "acc"],
                "source": ["forecast", "persistence", "climatology"],
                "region": ["global", "europe"],
                "lead_time": leads * np.timedelta64(1, "h"),
                "lead_hours": ("lead_time", leads.astype(float)),
            },
        ),
        path,
    )
    return path


def test_verdict_against_persistence(demo, tmp_path):
    persistence = np.array([20.0, 30.0, 35.0])
    every, lines = demo.beats_persistence(metrics(tmp_path / "good.nc", np.array([2.0, 10.0, 30.0]), persistence))
    assert every and lines == ["geopotential_height: RMSE / persistence's 0.10 at 1 h .. 0.86 at 3 h"]
    every, lines = demo.beats_persistence(metrics(tmp_path / "bad.nc", np.array([2.0, 30.0, 36.0]), persistence))
    assert not every
    assert lines == [
        "geopotential_height: RMSE / persistence's 0.10 at 1 h .. 1.03 at 3 h; NOT below persistence at 2 h, 3 h"
    ]


def test_stage_times_add_up(demo, monkeypatch):
    clock = iter([0.0, 1.0, 5.0, 12.0])
    monkeypatch.setattr(demo.time, "perf_counter", lambda: next(clock))
    stages = demo.Stages(2)
    stages.begin("generate", "making a store")
    stages.begin("fit", "training")
    assert stages.summary() == "demo finished in 12 s (0.2 min): start-up 1 s, generate 4 s, fit 7 s"


class _AtFit(Exception):
    pass


@pytest.mark.parametrize(("made", "commands"), [
    ([], ["generate-swe", "stats"]),
    (["unfinished store"], ["generate-swe", "stats"]),  # generate-swe resumes it
    (["store"], ["stats"]),  # a run stopped before its statistics: it was stuck, fit refused the store
    (["store", "stats"], []),
])  # fmt: skip
def test_a_rerun_does_what_an_earlier_run_left_undone(demo, tmp_path, monkeypatch, made, commands):
    import s2forecast.cli

    store = tmp_path / "swe.zarr"
    if made:
        xr.Dataset(attrs={"s2forecast_complete": "false" if made == ["unfinished store"] else "true"}).to_zarr(store)
    if "stats" in made:
        (store / "stats").mkdir()
    ran = []

    def command(argv):
        if argv[0] == "fit":
            raise _AtFit
        ran.append(argv[0])

    monkeypatch.setattr(s2forecast.cli, "main", command)
    with pytest.raises(_AtFit):
        demo.main(["--workdir", str(tmp_path)])
    assert ran == commands
