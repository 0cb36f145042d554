"""scripts/bench_scale.py runs every case end to end at a tiny grid and prints one JSON line per command."""

import contextlib
import importlib.util
import io
import json
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "scripts" / "bench_scale.py"
KEYS = {"case", "wall_s", "cpu_s", "raw_cpu_s", "peak_rss_mb", "store_mb", "data_mb", "input_mb", "mb_per_s"}
KEYS |= {"raw", "raw_wall_s"}
KEYS |= {"raw_peak_rss_mb", "raw_mb_per_s", "ratio", "ratio_net", "grid", "channels", "steps", "load", "workers"}
READ_KEYS = ["input_mb", "mb_per_s", "raw", "raw_wall_s", "raw_cpu_s", "raw_peak_rss_mb", "raw_mb_per_s", "ratio"]
READ_KEYS += ["ratio_net", "input_bytes", "imports_s", "raw_imports_s"]  # the throughput keys
CASES = ["stats", "climatology", "evaluate", "rollout", "convert-era5"]  # the order they run in


def load_script():
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.slow  # one store, every case (evaluate draws its plots)
def test_bench_scale_prints_a_line_per_case(tmp_path, capsys, monkeypatch):
    # two pressure-level variables (a CDS file each) and a surface one, at one level: evaluate draws
    # 3 plots a channel, most of this test's time
    argv = ["--grid", "16x9", "--steps", "4", "--surface", "2m_temperature"]
    argv += ["--variables", "geopotential,temperature", "--levels", "500"]
    argv += ["--cases", ",".join(reversed(CASES)), "--inits", "2", "--leads", "2", "--file-steps", "3"]
    argv += ["--workdir", str(tmp_path), "--keep"]
    # The script's own work runs in this process. Of what it measures, `stats` and the raw reads run in
    # processes of their own under /usr/bin/time; the other commands run here, and the timed imports are
    # not run (each measured process imports python, xarray and often torch: 25 of this test's 41 s).
    bench = load_script()
    measure, command = bench.measure, bench.s2forecast_argv([])

    def measured_here(argv):
        if argv[: len(command)] == command and argv[len(command)] != "stats":
            from s2forecast.cli import main

            wall, cpu = time.perf_counter(), time.process_time()
            with contextlib.redirect_stdout(io.StringIO()):  # as measure's stdout=DEVNULL
                main(argv[len(command) :])
            return time.perf_counter() - wall, 1.0, time.process_time() - cpu, ""
        if argv[2] in (bench.STARTUP, bench.RAW_STARTUP) or argv[2] in (case.imports for case in bench.CASES.values()):
            return 0.5, 1.0, 0.5, ""
        return measure(argv)

    monkeypatch.setattr(bench, "measure", measured_here)
    bench.main(argv)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["case"] == "startup" and rows[0]["wall_s"] > 0
    assert [row["case"] for row in rows[1:]] == CASES
    run = Path(rows[0]["workdir"])  # the run's own directory in --workdir, kept (--keep)
    assert run.parent == tmp_path and [p.name for p in tmp_path.iterdir()] == [run.name]
    work = run / "steps_4"
    store_path = work / "wb2_9x16_4.zarr"
    cds = sorted((work / "convert-era5_4" / "cds").iterdir())
    for row in rows[1:]:
        assert KEYS <= row.keys(), row
        assert row["grid"] == "9x16" and row["channels"] == 3 and row["steps"] == 4
        assert row["data_mb"] == round(4 * 4 * 9 * 16 * 3 / 1e6, 1)
        assert row["workers"] == 0  # one process (--workers N adds rows with dask.distributed workers)
        assert row["wall_s"] > 0 and row["peak_rss_mb"] > 0 and row["cpu_s"] > 0
        if row["case"] in ("evaluate", "rollout"):
            # a forecast or checkpoint plus parts of the truth: no raw read of that input, no throughput
            assert {key: row[key] for key in READ_KEYS} == dict.fromkeys(READ_KEYS), row
            continue
        # both times are printed to 0.01 s (a 0.19 s case: 3 % of rounding), the ratio from the unrounded ones
        rounding = 0.005 / row["raw_wall_s"] + 0.005 / row["wall_s"]
        assert row["raw_wall_s"] > 0
        assert row["ratio"] == pytest.approx(row["raw_wall_s"] / row["wall_s"], rel=0.02 + rounding), row
        assert row["raw_cpu_s"] > 0  # python's start alone takes some
        # each case's throughput is against a raw read of its own input: the NetCDF files for convert-era5
        read = cds if row["case"] == "convert-era5" else [f for f in store_path.rglob("*") if f.is_file()]
        assert row["raw"] == ("netcdf" if row["case"] == "convert-era5" else "zarr")
        assert row["input_bytes"] == sum(f.stat().st_size for f in read)
        assert row["input_mb"] == round(row["input_bytes"] / 1e6, 1)
    by_case = {row["case"]: row for row in rows[1:]}
    assert by_case["stats"]["peak_rss_mb"] > 50  # /usr/bin/time's report of a python process of its own
    assert by_case["evaluate"]["inits"] == by_case["rollout"]["inits"] == 2
    assert by_case["evaluate"]["leads"] == by_case["rollout"]["leads"] == 2
    assert by_case["climatology"]["output_write_s"] > 0 and by_case["climatology"]["output_write_cpu_s"] >= 0
    assert not list(tmp_path.rglob("*.rewritten"))  # the timed copy of the climatology is removed
    assert by_case["evaluate"]["plots"] == len(list((work / "evaluate_4_2x2").rglob("*.png"))) > 0

    # the store is in WeatherBench2's layout, and stats read it
    store = xr.open_zarr(store_path)
    assert store["geopotential"].dims == ("time", "level", "longitude", "latitude")
    assert store["geopotential"].encoding["chunks"][0] == 1 and store["latitude"].values[0] == 90
    assert (store_path / ".zgroup").exists()  # zarr v2
    stats = xr.open_zarr(work / "stats_4" / "stats.zarr")
    channels = ["geopotential/500", "temperature/500", "2m_temperature"]
    assert sorted(stats["channel"].values) == sorted(channels)
    # convert-era5's inputs: the new CDS layout, per variable and per 3 steps; converted, they are the store
    assert [f.name for f in cds] == [f"era5_{kind}_20000101T{h}.nc" for kind in ("pressure_t", "pressure_z", "surface")
                                     for h in ("00", "18")]  # fmt: skip
    with xr.open_dataset(cds[2]) as z:
        assert z["z"].dims == ("valid_time", "pressure_level", "latitude", "longitude") and z.sizes["valid_time"] == 3
    converted = xr.open_zarr(work / "convert-era5_4" / "era5.zarr")
    for name, wb2 in store.data_vars.items():
        np.testing.assert_array_equal(converted[name].values, wb2.transpose(*converted[name].dims).values)
    # evaluate scored the forecast; rollout forecast 2 init times x 2 leads
    assert (work / "evaluate_4_2x2" / "metrics.nc").is_file()
    forecast = xr.open_zarr(work / "rollout_4_2x2" / "forecast.zarr")
    assert forecast.sizes["time"] == 2 and forecast.sizes["prediction_timedelta"] == 2


def test_rewrite_copies_each_array_with_its_chunks_and_compressors(tmp_path):
    """REWRITE (the climatology's output_write_s): the copy it times is the output, chunk for chunk."""
    import subprocess
    import sys

    import zarr

    from s2forecast.output import field_compressors

    bench = load_script()
    source = zarr.open_group(tmp_path / "clim.zarr", mode="w", zarr_format=3)
    values = np.random.default_rng(0).normal(size=(7, 2, 5, 6)).astype(np.float32)
    array = source.create_array("t", shape=values.shape, chunks=(3, 1, 5, 6), dtype="float32",
                                compressors=field_compressors())  # fmt: skip
    array[...] = values
    argv = [sys.executable, "-c", bench.REWRITE, str(tmp_path / "clim.zarr"), str(tmp_path / "copy.zarr")]
    result = subprocess.run(argv, capture_output=True, text=True, check=True)
    times = json.loads(result.stdout)
    assert times["output_write_s"] > 0 and times["output_write_cpu_s"] >= 0
    copy = zarr.open_group(tmp_path / "copy.zarr", mode="r")["t"]
    np.testing.assert_array_equal(copy[...], values)
    assert copy.chunks == (3, 1, 5, 6) and str(copy.compressors) == str(array.compressors)
    assert len([f for f in (tmp_path / "copy.zarr" / "t").rglob("*") if f.is_file()]) == 1 + 3 * 2  # zarr.json, chunks


@pytest.mark.parametrize(("workers", "message"), [("two", "give worker counts"), ("0", "must be >= 1")])
def test_bench_scale_refuses_bad_worker_counts(tmp_path, workers, message):
    with pytest.raises(SystemExit, match=message):
        load_script().main(["--workers", workers, "--workdir", str(tmp_path)])
    assert not list(tmp_path.iterdir())  # refused before any store is written


def test_bench_scale_refuses_a_workdir_that_is_no_directory(tmp_path):
    (tmp_path / "file").write_text("mine")
    for workdir in (tmp_path / "file", tmp_path / "missing"):
        with pytest.raises(SystemExit, match=rf"--workdir {workdir} is not a directory; give an existing one"):
            load_script().main(["--workdir", str(workdir)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"] and (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize("keep", [False, True], ids=["removed", "kept"])
def test_bench_scale_removes_only_what_it_wrote_in_a_given_workdir(tmp_path, capsys, monkeypatch, keep):
    """--workdir names a directory of the user's: the run writes in a directory of its own there, removed
    unless --keep. Directories of the user's named like the run's stores and case directories were written
    over (--keep) or removed (a glob, without it)."""
    bench = load_script()
    # the s2forecast commands run in this process, writing what they write; the timed imports and raw
    # reads (no output) are not run: 5 processes of python + torch less (test_bench_scale_prints_a_line_per_case
    # measures them)
    command = bench.s2forecast_argv([])

    def in_this_process(argv):
        if argv[: len(command)] == command:
            from s2forecast.cli import main

            with contextlib.redirect_stdout(io.StringIO()):  # as measure's stdout=DEVNULL
                main(argv[len(command) :])
        return 1.0, 1.0, 1.0, ""

    monkeypatch.setattr(bench, "measure", in_this_process)
    workdir = tmp_path / "mine"
    workdir.mkdir()
    mine = ["notes.txt", "stats_2", "stats_20_final", "wb2_4x8_2.zarr", "steps_2"]
    for name in mine[1:]:
        (workdir / name).mkdir()
        (workdir / name / "notes.txt").write_text("keep me")
    (workdir / "notes.txt").write_text("keep me")
    bench.main(["--grid", "8x4", "--steps", "2", "--levels", "500", "--variables", "temperature",
                "--cases", "stats", "--workdir", str(workdir), *(["--keep"] if keep else [])])  # fmt: skip
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["case"] for row in rows] == ["startup", "stats"]
    runs = sorted(set(p.name for p in workdir.iterdir()) - set(mine))
    assert len(runs) == keep and ("workdir" in rows[0]) == keep
    if keep:
        assert Path(rows[0]["workdir"]) == workdir / runs[0] and (workdir / runs[0] / "steps_2" / "stats_2").is_dir()
    assert (workdir / "notes.txt").read_text() == "keep me"
    for name in mine[1:]:
        assert [p.name for p in (workdir / name).iterdir()] == ["notes.txt"], name


@pytest.mark.parametrize(
    ("raw_wall", "wall", "ratio_net"),
    [(1.2, 2.0, None), (3.0, 0.4, None), (3.0, 3.5, 0.5)],  # raw read, command < its imports; both above
)
def test_ratio_net_is_null_when_either_side_took_less_than_its_imports(tmp_path, capsys, monkeypatch, raw_wall, wall,
                                                                      ratio_net):  # fmt: skip
    """ratio_net = (raw read - xarray's imports) / (command - its imports), the imports timed once: on a
    busy machine either side can take less than them, and the ratio is then null, not negative."""
    bench = load_script()
    # seconds by the code each measured python runs; the stats command itself takes `wall`
    seconds = {bench.STARTUP: 4.0, bench.RAW_STARTUP: 1.5, bench.RAW: raw_wall, bench.CASES["stats"].imports: 0.5}

    def measure(argv):
        taken = seconds.get(argv[2], wall)
        return taken, 100.0, taken, ""

    monkeypatch.setattr(bench, "measure", measure)
    bench.main(["--grid", "8x4", "--steps", "2", "--levels", "500", "--variables", "temperature",
                "--cases", "stats", "--workdir", str(tmp_path)])  # fmt: skip
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (row["case"], row["raw_wall_s"], row["wall_s"]) == ("stats", raw_wall, wall)
    assert row["ratio_net"] == ratio_net  # (raw - 1.5) / (command - 0.5): 1.5 / 3.0, not its inverse
    assert row["ratio"] == round(raw_wall / wall, 3)  # the raw read's time over the command's
    assert (row["imports_s"], row["raw_imports_s"]) == (0.5, 1.5)


@pytest.mark.parametrize(("option", "message"), [
    (["--steps", "8,x"], "--steps '8,x': give whole numbers"), (["--levels", "500,abc"], "give whole numbers"),
    (["--inits", "0"], "--inits '0': each must be >= 1"), (["--file-steps", "0"], "must be >= 1"),
    (["--leads", "2,3"], "give one number"),
    (["--grid", "0x0"], "--grid '0x0': a grid needs at least 2 latitudes and 2 longitudes"),  # ZeroDivisionError
    # refused before the store and the earlier cases (minutes at 0.25 deg), not inside the case
    (["--steps", "8,16", "--cases", "stats,evaluate", "--inits", "4,8", "--leads", "4"],
     r"--inits 8 \+ --leads 4 need at least that many --steps, got 8"),
])  # fmt: skip
def test_bench_scale_refuses_bad_counts_in_one_line(tmp_path, monkeypatch, option, message):
    script = load_script()

    def measured(*args, **kwargs):
        raise AssertionError("the run started before its options were checked")

    monkeypatch.setattr(script, "measure", measured)
    with pytest.raises(SystemExit, match=message):
        script.main([*option, "--workdir", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_a_commands_user_error_is_its_one_line(tmp_path, monkeypatch):
    """... not a RuntimeError traceback wrapping it (--grid 1x4, --steps 0 reached the commands)."""
    bench = load_script()

    def refused(*args, **kwargs):
        return bench.subprocess.CompletedProcess(args, 2, "", "s2forecast stats: error: x\n")

    monkeypatch.setattr(bench.subprocess, "run", refused)
    with pytest.raises(SystemExit, match="^s2forecast stats: error: x$"):
        bench.measure(["python", "-c", "pass"])
