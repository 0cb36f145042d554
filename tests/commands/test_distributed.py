"""``--scheduler`` and ``--workers`` (issue 27): stats, climatology, evaluate and convert-era5 on a local
dask.distributed cluster of 2 worker processes give the outputs of one process; a worker killed by its
pid mid-computation changes nothing; a dead scheduler is one line and leaves no output; bad options
are one line and leave every file as it was.

One cluster serves the module (``cluster``); each command's work is cut into several tasks (the
sizes that decide it are made small), so that both workers take part.
"""

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import distributed
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.data import engine as engine_module
from s2forecast.data import stats as stats_module
from s2forecast.evaluation import climatology as climatology_module
from s2forecast.evaluation import scoring as scoring_module

REPO = Path(__file__).parents[2]
LAT, LON = np.linspace(78.75, -78.75, 8), np.arange(16) * 22.5  # a cell-centred 8x16 grid, north to south
TIMES = pd.date_range("2003-07-01", "2004-06-30", freq="D")  # every day of year: a smoothed climatology
LEADS = np.array([24, 48], dtype="timedelta64[h]").astype("timedelta64[ns]")


@pytest.fixture(scope="module")
def cluster():
    """A local cluster of 2 worker processes, one thread each: its scheduler's address."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as local:  # fmt: skip
        yield local.scheduler_address


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A year of a WeatherBench2-layout store (zarr v2, (time, level, longitude, latitude), one time per
    chunk, a NaN), a forecast of it (6 init times, 2 leads) and two CDS ERA5 NetCDF files."""
    root = tmp_path_factory.mktemp("distributed")
    rng = np.random.default_rng(0)
    season = 10.0 * np.cos(2 * np.pi * TIMES.day_of_year.to_numpy() / 366)
    temperature = 260.0 + season[:, None, None, None] + rng.normal(size=(TIMES.size, 2, LON.size, LAT.size))
    t2m = 285.0 + season[:, None, None] + rng.normal(size=(TIMES.size, LON.size, LAT.size))
    t2m[100, 3, 2] = np.nan  # a missing value: skipped by the means, counted by the climatology
    truth = xr.Dataset(
        {
            "temperature": (("time", "level", "longitude", "latitude"), temperature.astype(np.float32), {"units": "K"}),
            "2m_temperature": (("time", "longitude", "latitude"), t2m.astype(np.float32), {"units": "K"}),
        },
        coords={"time": TIMES, "level": np.array([500, 850]), "longitude": LON, "latitude": LAT},
    )
    encoding = {name: {"chunks": (1, *truth[name].shape[1:])} for name in truth.data_vars}
    truth.to_zarr(root / "wb2.zarr", zarr_format=2, encoding=encoding, consolidated=True)

    inits = TIMES.values[10:16]
    field = truth["temperature"].transpose("time", "level", "latitude", "longitude")
    valid = np.stack([field.sel(time=inits + lead).values for lead in LEADS], axis=1)
    forecast = xr.Dataset(
        {"temperature": (("time", "prediction_timedelta", "level", "latitude", "longitude"),
                         valid + rng.normal(size=valid.shape).astype(np.float32), {"units": "K"})},
        coords={"time": inits, "prediction_timedelta": LEADS, "level": [500, 850], "latitude": LAT, "longitude": LON},
    )  # fmt: skip
    forecast.to_netcdf(root / "forecast.nc")

    for month, start in (("01", "2020-01-01"), ("02", "2020-02-01")):
        times = pd.date_range(start, periods=4, freq="6h").values
        shape = (times.size, 2, LAT.size, LON.size)
        xr.Dataset(
            {
                "t": (("valid_time", "pressure_level", "latitude", "longitude"), 260 + rng.normal(size=shape),
                      {"units": "K"}),
                "t2m": (("valid_time", "latitude", "longitude"), 285 + rng.normal(size=(times.size, LAT.size,
                        LON.size)), {"units": "K"}),
            },
            coords={"valid_time": times, "pressure_level": [500.0, 850.0], "latitude": LAT, "longitude": LON},
        ).to_netcdf(root / f"era5_{month}.nc")  # fmt: skip
    return root


@pytest.fixture
def small_tasks(monkeypatch):
    """Every command's work in several tasks (sizes decided in this process, where the tasks are made)."""
    monkeypatch.setattr(stats_module, "CHUNK_BYTES", 10 * 2 * LAT.size * LON.size * 8)  # 10 time steps a block ...
    monkeypatch.setattr(stats_module, "PART_BLOCKS", 5)  # ... 5 blocks a part: 8 parts per variable
    monkeypatch.setattr(climatology_module, "SUMS_BYTES", 100 * 2 * LAT.size * LON.size * 8)  # 100 days a task
    monkeypatch.setattr(scoring_module, "BLOCK_BYTES", 1)  # one init time per block


def argv(command: str, inputs: Path, out: Path, *options) -> list[str]:
    return {
        "stats": ["stats", inputs / "wb2.zarr", "--out", out, "--no-progress"],
        "climatology": ["climatology", inputs / "wb2.zarr", "--out", out, "--no-progress"],
        "evaluate": ["evaluate", "--forecast", inputs / "forecast.nc", "--truth", inputs / "wb2.zarr", "--out", out,
                     "--climatology", inputs / "clim.zarr", "--no-plots", "--no-progress", "--regions", "global",
                     "tropics"],
        "convert-era5": ["convert-era5", inputs / "era5_01.nc", inputs / "era5_02.nc", "--out", out, "--time-chunk",
                         "2", "--no-progress"],
    }[command] + list(options)  # fmt: skip


OUT = {"stats": "stats.zarr", "climatology": "clim.zarr", "evaluate": "metrics.nc", "convert-era5": "era5.zarr"}


def run(command: str, inputs: Path, out: Path, *options) -> xr.Dataset:
    """``s2forecast COMMAND ... OPTIONS``; its output, loaded."""
    if command == "evaluate" and not (inputs / "clim.zarr").exists():
        cli([str(a) for a in argv("climatology", inputs, inputs / "clim.zarr")])
    cli([str(a) for a in argv(command, inputs, out, *options)])
    if command == "evaluate":
        from s2forecast.evaluation.report import open_results

        return open_results(out).load()
    return xr.open_zarr(out).load()


def assert_same(one: xr.Dataset, other: xr.Dataset) -> None:
    """The same variables with the same values, bit for bit (NaN where NaN)."""
    assert sorted(one.data_vars) == sorted(other.data_vars)
    for name in one.data_vars:
        if np.issubdtype(one[name].dtype, np.number):
            np.testing.assert_array_equal(one[name].values, other[name].values, err_msg=name)


@pytest.mark.parametrize("command", ["stats", "climatology", "evaluate", "convert-era5"])
def test_two_workers_give_the_output_of_one_process(inputs, cluster, small_tasks, tmp_path, command):
    alone = run(command, inputs, tmp_path / f"alone_{OUT[command]}")
    spread = run(command, inputs, tmp_path / OUT[command], "--scheduler", cluster)
    assert_same(alone, spread)
    assert np.isfinite(alone[list(alone.data_vars)[0]].values).any()
    assert leftovers(tmp_path) == []


def test_relative_paths_reach_workers_started_in_another_directory(inputs, cluster, tmp_path, monkeypatch):
    """The cluster's workers run in the directory the tests started in; the command runs in another
    (climatology's workers write into its temporary output)."""
    (tmp_path / "wb2.zarr").symlink_to(inputs / "wb2.zarr")
    monkeypatch.chdir(tmp_path)
    alone = run("climatology", Path("."), Path("alone.zarr"))
    assert_same(alone, run("climatology", Path("."), Path("clim.zarr"), "--scheduler", cluster))
    assert leftovers(tmp_path) == []


@pytest.mark.slow  # starts a cluster of its own
def test_workers_option_starts_a_local_cluster(inputs, small_tasks, tmp_path, monkeypatch):
    """... and says nothing of dask's dashboard port: 8787 taken (another cluster, a Jupyter dashboard)
    printed 'Port 8787 is already in use' in 4 lines (a review found it). Its workers leave a Ctrl-C to
    the command: a terminal sends it to every process of the group, and each worker died printing a
    KeyboardInterrupt traceback (here each task sends it to its own worker; before, the run failed once
    its tasks had killed workers 3 times)."""
    import socket

    alone = run("stats", inputs, tmp_path / "alone.zarr")
    real = stats_module._weighted_moments

    def ctrl_c(part, job):
        import os
        import signal

        os.kill(os.getpid(), signal.SIGINT)
        return real(part, job)

    monkeypatch.setattr(stats_module, "_weighted_moments", ctrl_c)
    with socket.socket() as taken, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(OSError):  # taken already: the same case
            taken.bind(("0.0.0.0", 8787))
            taken.listen()
        spread = run("stats", inputs, tmp_path / "stats.zarr", "--workers", "2")
    assert_same(alone, spread)
    assert not [w for w in caught if "8787" in str(w.message)]


def slowed(monkeypatch, seconds: float) -> None:
    """Each part of ``stats`` takes ``seconds`` longer: the wrapper is a closure, so it travels to the
    workers by value and calls the real function there."""
    real = stats_module._weighted_moments

    def slow(part, job):
        import time

        time.sleep(seconds)
        return real(part, job)

    monkeypatch.setattr(stats_module, "_weighted_moments", slow)


def busy_worker(client, timeout: float = 120) -> tuple[str, int]:
    """(address, pid) of a worker running one of the tasks of the engine, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for address, keys in client.processing().items():
            if any(str(key).startswith("_on_worker") for key in keys):
                return address, client.run(os.getpid, workers=[address])[address]
        time.sleep(0.05)
    raise AssertionError("no worker ran a task")


@pytest.mark.slow  # half a second per part, on purpose
def test_a_worker_killed_mid_computation_changes_nothing(inputs, cluster, small_tasks, tmp_path, monkeypatch):
    alone = run("stats", inputs, tmp_path / "alone.zarr")
    slowed(monkeypatch, 0.5)
    killed = []

    def kill_a_busy_worker():
        with distributed.Client(cluster, set_as_default=False) as client:
            address, pid = busy_worker(client)
            os.kill(pid, signal.SIGKILL)
            killed.append((address, pid))

    killer = threading.Thread(target=kill_a_busy_worker)
    killer.start()
    spread = run("stats", inputs, tmp_path / "stats.zarr", "--scheduler", cluster)
    killer.join()
    assert killed, "no worker was killed"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0][1], 0)  # that worker process is gone: its tasks ran again on the others
    assert_same(alone, spread)


def start(argv: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **kwargs)  # fmt: skip


@pytest.mark.slow  # a scheduler, a worker and the command in processes of their own
def test_a_dead_scheduler_is_one_line_and_leaves_no_output(inputs, tmp_path):
    scheduler_file = tmp_path / "scheduler.json"
    scheduler = start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                       "--scheduler-file", str(scheduler_file)])  # fmt: skip
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        worker = start(["distributed.cli.dask_worker", address, "--nthreads", "1", "--no-dashboard"])
        work = tmp_path / "work"
        work.mkdir()
        out = work / "stats.zarr"
        # the command, its parts slowed down so that the scheduler dies while they run
        driver = textwrap.dedent(f"""
            import time
            from s2forecast.cli import main
            from s2forecast.data import stats
            real = stats._weighted_moments
            def slow(part, job):
                import time
                time.sleep(1.0)
                return real(part, job)
            stats._weighted_moments, stats.CHUNK_BYTES, stats.PART_BLOCKS = slow, 1, 50
            main(["stats", {str(inputs / "wb2.zarr")!r}, "--out", {str(out)!r}, "--no-progress", "--scheduler",
                  {address!r}])
        """)
        command = subprocess.Popen([sys.executable, "-c", driver], cwd=work, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
        with distributed.Client(address, set_as_default=False) as client:
            busy_worker(client)
            scheduler.kill()
        _, err = command.communicate(timeout=120)
        assert command.returncode == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"s2forecast stats: error: lost the dask scheduler at {address} during the "), err
        assert "nothing was written" in lines[0] and "start one with `dask scheduler`" in lines[0]
        assert list(work.iterdir()) == [], "the temporary output is gone"
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.kill()
                process.wait()


# --- bad options: one line, every file as it was -------------------------------------------------


def refused(argv, capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        cli([str(a) for a in argv])
    assert exit.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"s2forecast {argv[0]}: error: ")
    return lines[0]


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
    }


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob("*") if ".s2forecast-tmp-" in p.name or ".s2forecast-old-" in p.name]


COMMANDS = pytest.mark.parametrize("command", ["stats", "climatology", "evaluate", "convert-era5"])


@COMMANDS
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--workers", "0"], "argument --workers: must be an integer >= 1, got '0'"),
        (["--workers", "-1"], "argument --workers: must be an integer >= 1, got '-1'"),
        (["--workers", "abc"], "argument --workers: must be an integer >= 1, got 'abc'"),
        (["--scheduler", "garbage"], "argument --scheduler: 'garbage' is not a dask scheduler address; give "
         "tcp://HOST:PORT (e.g. tcp://node01:8786, what `dask scheduler` prints) or the JSON file of"),
        (["--scheduler", "tcp://host:99999"], "argument --scheduler: 'tcp://host:99999' is not a dask scheduler"),
        (["--scheduler", "tcp://127.0.0.1:8786", "--workers", "2"], "argument --workers: not allowed with argument "
         "--scheduler"),
    ],
)  # fmt: skip
def test_bad_engine_options_are_one_line(inputs, tmp_path, capsys, command, options, message):
    before = snapshot(inputs)
    assert message in refused(argv(command, inputs, tmp_path / OUT[command], *options), capsys)
    assert snapshot(inputs) == before and list(tmp_path.iterdir()) == []


@COMMANDS
def test_an_unreachable_scheduler_is_one_line_and_leaves_no_output(inputs, tmp_path, capsys, monkeypatch, command):
    monkeypatch.setattr(engine_module, "CONNECT_TIMEOUT_S", 1)
    if command == "evaluate" and not (inputs / "clim.zarr").exists():
        cli([str(a) for a in argv("climatology", inputs, inputs / "clim.zarr")])
    before = snapshot(inputs)
    message = refused(argv(command, inputs, tmp_path / OUT[command], "--scheduler", "tcp://127.0.0.1:1"), capsys)
    assert "cannot reach the dask scheduler at tcp://127.0.0.1:1: " in message
    assert message.endswith("start one with `dask scheduler` (and `dask worker ADDRESS`), or use --workers N for a "
                            "local cluster")  # fmt: skip
    assert snapshot(inputs) == before and list(tmp_path.iterdir()) == []


def test_an_address_where_nothing_listens_is_one_line_at_once(inputs, tmp_path, capfd):
    """dask's connect retried a refused connection for the whole timeout (20 s) and then blamed the
    dashboard's port."""
    import socket
    import time

    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(SystemExit):
        cli([str(a) for a in argv("stats", inputs, tmp_path / "s.zarr", "--scheduler", f"tcp://127.0.0.1:{port}")])
    assert time.monotonic() - start < 10
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and f"nothing listens at 127.0.0.1:{port} (connection refused)" in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_host_is_one_line_at_once(inputs, tmp_path, capfd):
    """A name that does not resolve is known at once; dask's connect retried it for 20 s and then asked
    whether it was the dashboard's port."""
    import time

    start = time.monotonic()
    with pytest.raises(SystemExit):
        cli(
            [str(a) for a in argv("stats", inputs, tmp_path / "s.zarr", "--scheduler", "tcp://nosuchhost.invalid:8786")]
        )
    assert time.monotonic() - start < 10
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "unknown host 'nosuchhost.invalid' (its name does not resolve)" in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_address_that_never_answers_as_a_scheduler_is_one_line_in_time(inputs, tmp_path, capfd, monkeypatch):
    """A port that accepts but never answers as a dask scheduler (the dashboard's, a mistyped one) hung
    Client's handshake, which has no deadline, beyond Ctrl-C; a scheduler file whose address is not one
    gave the line and then 40 s and a traceback of the half-started Client closing itself."""
    import socket
    import time

    monkeypatch.setattr(engine_module, "CONNECT_TIMEOUT_S", 2)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepts, never answers
        address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(SystemExit):
            cli([str(a) for a in argv("stats", inputs, tmp_path / "s.zarr", "--scheduler", address)])
        assert time.monotonic() - start < 30  # hung without end before
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "no dask scheduler answered within 2 s (is it the dashboard's port?)" in err, err
    (tmp_path / "scheduler.json").write_text('{"address": "garbage"}')
    start = time.monotonic()
    with pytest.raises(SystemExit):
        cli([str(a) for a in argv("stats", inputs, tmp_path / "s.zarr", "--scheduler", tmp_path / "scheduler.json")])
    assert time.monotonic() - start < 20  # 42 s before
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "missing port number in address 'garbage'" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scheduler.json"]


def test_a_scheduler_file_that_is_not_there_is_one_line(inputs, tmp_path, capsys):
    message = refused(argv("stats", inputs, tmp_path / "s.zarr", "--scheduler", tmp_path / "scheduler.json"), capsys)
    assert f"--scheduler {tmp_path / 'scheduler.json'}: no such scheduler file" in message
    assert list(tmp_path.iterdir()) == []


def test_a_directory_given_as_the_scheduler_file_is_one_line(inputs, tmp_path, capsys):
    (tmp_path / "scheduler.json").mkdir()
    message = refused(argv("stats", inputs, tmp_path / "s.zarr", "--scheduler", tmp_path / "scheduler.json"), capsys)
    assert message.endswith(f"--scheduler {tmp_path / 'scheduler.json'} is a directory, not a dask scheduler file "
                            "(JSON with an 'address')")  # fmt: skip
    assert [p.name for p in tmp_path.iterdir()] == ["scheduler.json"]


def test_a_ucx_address_without_its_package_names_it(inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed_ucxx", None)  # not installed (find_spec: None)
    message = refused(argv("stats", inputs, tmp_path / "s.zarr", "--scheduler", "ucx://127.0.0.1:8786"), capsys)
    needs = "the ucx protocol needs the distributed-ucxx package (e.g. pip install distributed-ucxx-cu12)"
    assert message.endswith(f"--scheduler ucx://127.0.0.1:8786: {needs}; or give the scheduler's tcp:// address")
    assert list(tmp_path.iterdir()) == []


def test_without_dask_distributed_the_options_name_the_extra(inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    for options in (["--workers", "2"], ["--scheduler", "tcp://127.0.0.1:8786"]):
        message = refused(argv("stats", inputs, tmp_path / "s.zarr", *options), capsys)
        needs = f"{options[0]} needs dask.distributed, which is not installed: pip install distributed, the version"
        assert needs in message
    assert list(tmp_path.iterdir()) == []


def test_home_paths_reach_the_workers_expanded(tmp_path, monkeypatch):
    """With --scheduler the paths become absolute for workers started elsewhere: a quoted '~/x.nc'
    (convert-era5's inputs have no type that expands it) became <cwd>/~/x.nc (a review found it)."""
    import argparse

    from s2forecast.commands.arguments import engine

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(scheduler="tcp://127.0.0.1:1", workers=None, inputs=["~/a.nc", "b.nc"], out="~/s.zarr")
    engine(args, ("inputs", "out"))  # connects only when the work starts
    assert args.inputs == [str(tmp_path / "home" / "a.nc"), str(tmp_path / "b.nc")]
    assert args.out == str(tmp_path / "home" / "s.zarr")


def test_an_ssh_port_given_as_the_scheduler_says_it_is_not_one(inputs, tmp_path, capsys):
    """dask decoded an SSH banner as a frame header: 'Unable to allocate 2.82 EiB for an array' (a
    review found it)."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"

        def banner():  # every connection (the probe's first only checks that one is taken)
            while True:
                connection, _ = listener.accept()
                with connection:
                    connection.sendall(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5\r\n" * 4)
                    with contextlib.suppress(OSError):
                        connection.recv(1024)

        server = threading.Thread(target=banner, daemon=True)
        server.start()
        message = refused(argv("stats", inputs, tmp_path / "s.zarr", "--scheduler", address), capsys)
    assert "does not speak dask's protocol: not a dask scheduler (an SSH or HTTP port?)" in message, message
    assert "EiB" not in message and sorted(p.name for p in tmp_path.iterdir()) == []
