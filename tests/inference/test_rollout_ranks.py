"""`rollout` across processes (torchrun / srun): the init times split over ranks, one zarr store, the
one-process file; a killed rank leaves nothing readers take for a forecast, and a rerun completes it."""

import datetime
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import xarray as xr

from s2forecast.cli import build_parser
from s2forecast.cli import main as cli
from s2forecast.data import open_store
from s2forecast.evaluation.inputs import open_forecast
from s2forecast.inference.ranks import Ranks, collectively
from s2forecast.inference.rollout import FAILED_MARK, RolloutOptions
from s2forecast.user_errors import UserError

REPO = Path(__file__).parents[2]
OWN = ("s2forecast_generation", "history")  # global attributes that name the file itself
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# every rank records the first initialization time of each batch it writes
RECORDER = """
import os
from pathlib import Path
from s2forecast.inference import forecast_file
from s2forecast.cli import main

write = forecast_file.ForecastFile.write

def write_and_record(self, start, lead_index, fields):
    write(self, start, lead_index, fields)
    with open(Path(os.environ["RECORD"]) / f"rank{os.environ['RANK']}", "a") as f:
        f.write(f"{start}\\n")

forecast_file.ForecastFile.write = write_and_record
main()
"""

# rank 1 dies (SIGKILL, no cleanup) right after it wrote its first lead; rank 0 is then mid-way or waiting
KILLER = """
import os, signal
from s2forecast.inference import forecast_file
from s2forecast.cli import main

write = forecast_file.ForecastFile.write

def write_then_die(self, start, lead_index, fields):
    write(self, start, lead_index, fields)
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)

forecast_file.ForecastFile.write = write_then_die
main()
"""


def environment() -> dict:
    """This worktree's s2forecast, outside any process group of the test run itself, with as many
    threads as this process (the one-process file it is compared with is made here: another thread
    count sums in another order, and the files would differ in the last bits)."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES and not k.startswith("SLURM_")}
    return {**env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(torch.get_num_threads())}


def torchrun(*argv, script=None, **env) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone --nproc-per-node 2`` of ``s2forecast.cli`` (or ``script``)."""
    target = [str(script)] if script else ["-m", "s2forecast.cli"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *target, *argv]
    return subprocess.run(command, env={**environment(), **env}, capture_output=True, text=True, timeout=300)


def rollout_args(checkpoint, store, out, *extra) -> list[str]:
    times = open_store(store)["time"].values[:5]  # batches of 2: rank 0 gets times 0-1, rank 1 times 2-4
    inits = ",".join(str(t)[:19] for t in times)
    return ["rollout", "--ckpt", str(checkpoint), "--store", str(store), "--steps", "3", "--init-times", inits,
            "--batch-size", "2", "--format", "zarr", "--out", str(out), "--no-progress", *extra]  # fmt: skip


def assert_same_forecast(a: Path, b: Path) -> None:
    """Identical data variables, coordinates and attributes, but for those that name each file."""
    a, b = xr.open_zarr(a).load(), xr.open_zarr(b).load()
    assert {k: v for k, v in a.attrs.items() if k not in OWN} == {k: v for k, v in b.attrs.items() if k not in OWN}
    xr.testing.assert_identical(a.drop_attrs(deep=False), b.drop_attrs(deep=False))


def siblings(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.s2forecast-*"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(script: Path, argv: list[str], **env) -> list[subprocess.Popen]:
    """Ranks 0 and 1 of ``script`` started as srun starts them, without a launcher: each is told its
    rank and where to meet in its environment."""
    meeting = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), **env}
    return [
        subprocess.Popen([sys.executable, str(script), *argv],
                         env={**environment(), **meeting, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]  # fmt: skip


def recorded_run(checkpoint, store, out: Path, *extra, launcher: bool = True) -> None:
    """A 2-process rollout, under torchrun (or, without ``launcher``, as srun starts it), that
    succeeds with each rank writing its own whole batches."""
    script = out.parent / "recorder.py"
    script.write_text(RECORDER)
    record = out.parent / f"{out.name}.record"
    record.mkdir()
    argv = rollout_args(checkpoint, store, out, *extra)
    if launcher:
        done = torchrun(*argv, script=script, RECORD=str(record))
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.count("wrote ") == 1  # rank 0 reports
    else:
        ranks = start_ranks(script, argv, RECORD=str(record))
        outputs = [rank.communicate(timeout=300) for rank in ranks]
        assert [rank.returncode for rank in ranks] == [0, 0], outputs[0][1][-3000:] + outputs[1][1][-3000:]
        assert [out.count("wrote ") for out, _ in outputs] == [1, 0]  # rank 0 reports
    starts = [sorted(set((record / f"rank{rank}").read_text().split())) for rank in (0, 1)]
    assert starts == [["0"], ["2", "4"]]  # each rank its own whole batches
    assert siblings(out) == []


@pytest.mark.slow  # the deterministic model: test_a_killed_rank_..._and_a_rerun_completes_it
def test_two_processes_write_the_one_process_file_of_an_ensemble(crps_run, swe_store, tmp_path):
    extra = ("--members", "2", "--shards", "2")
    cli(rollout_args(crps_run.checkpoint, swe_store, tmp_path / "one.zarr", *extra))
    # without torchrun (a process less to start): the killed-rank test reruns under torchrun
    recorded_run(crps_run.checkpoint, swe_store, tmp_path / "two.zarr", *extra, launcher=False)
    assert_same_forecast(tmp_path / "one.zarr", tmp_path / "two.zarr")


@pytest.mark.slow
def test_a_killed_rank_leaves_nothing_readers_take_and_a_rerun_completes_it(
    mse_run_1_epoch, swe_store, tmp_path, capsys
):
    checkpoint, out = mse_run_1_epoch.checkpoint, tmp_path / "f.zarr"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    killed = torchrun(*rollout_args(checkpoint, swe_store, out), script=script)
    assert killed.returncode != 0
    assert "wrote " not in killed.stdout
    assert not os.path.lexists(out)  # the store, written in part, never took the final name
    with pytest.raises(FileNotFoundError):
        open_forecast(out)
    with pytest.raises(SystemExit) as exit_status:
        cli(["evaluate", "--forecast", str(out), "--truth", str(swe_store), "--out", str(tmp_path / "m.nc"),
             "--no-plots", "--no-progress"])  # fmt: skip
    assert exit_status.value.code == 2
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert not (tmp_path / "m.nc").exists()

    recorded_run(checkpoint, swe_store, out)  # the same command, no --overwrite needed
    # the killed run's temporary store was removed (recorded_run checks siblings)
    cli(rollout_args(checkpoint, swe_store, tmp_path / "one.zarr"))
    assert_same_forecast(tmp_path / "one.zarr", out)


@pytest.mark.slow
def test_without_a_launcher_the_survivor_of_a_killed_rank_fails_in_one_line(mse_run_1_epoch, swe_store, tmp_path):
    """As under srun, which leaves the other tasks running: rank 0 notices, removes its temporary store, exits 2."""
    out, script = tmp_path / "f.zarr", tmp_path / "killer.py"
    script.write_text(KILLER)
    ranks = start_ranks(script, rollout_args(mse_run_1_epoch.checkpoint, swe_store, out))
    (_, err0), _ = (rank.communicate(timeout=300) for rank in ranks)
    assert [rank.returncode for rank in ranks] == [2, -signal.SIGKILL]
    assert [line for line in err0.splitlines() if line.strip()] == [
        "s2forecast rollout: error: rank 0 of 2 lost contact with the other processes of this rollout (one of them "
        "stopped: see its log); nothing was written at --out, rerun the command"
    ]
    assert not os.path.lexists(out) and siblings(out) == []


def test_netcdf_from_two_processes_is_one_line(mse_run_1_epoch, swe_store, tmp_path, monkeypatch, capsys):
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    argv = rollout_args(mse_run_1_epoch.checkpoint, swe_store, tmp_path / "f.nc")
    argv[argv.index("zarr")] = "netcdf"
    with pytest.raises(SystemExit) as exit_status:
        cli(argv)  # refused before any process group is joined: this one process would wait forever
    assert exit_status.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [
        "s2forecast rollout: error: --format netcdf cannot be written by 2 processes (WORLD_SIZE 2): a NetCDF file "
        "has one writer; add --format zarr (and an --out such as forecast.zarr), or run one process"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, Ranks(0, 1, 0)),
        ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, Ranks(3, 4, 1)),
        ({"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "3", "SLURM_LOCALID": "0"}, Ranks(2, 3, 0)),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, Ranks(0, 1, 0)),  # a batch script, not an srun step
        ({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"}, Ranks(1, 2, 0)),
    ],
)
def test_ranks_from_the_environment(env, expected):
    assert Ranks.from_environment(env) == expected


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "environment variable RANK='x' must be an integer (set by torchrun or "
         "srun)"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is not below WORLD_SIZE=2; start the processes with torchrun or "
         "srun, which set both"),
    ],
)  # fmt: skip
def test_bad_rank_environment_is_one_line(env, message):
    with pytest.raises(UserError) as error:
        Ranks.from_environment(env)
    assert str(error.value) == message


@pytest.mark.parametrize("n_times, batch_size, world", [(5, 2, 2), (7, 3, 3), (2, 4, 3), (10, 1, 4)])
def test_slabs_are_whole_batches_that_cover_every_time_once(n_times, batch_size, world):
    slabs = [Ranks(rank, world).slab(n_times, batch_size) for rank in range(world)]
    assert [i for slab in slabs for i in slab] == list(range(n_times))
    assert all(slab.start % batch_size == 0 for slab in slabs if len(slab))
    assert all(slab.stop % batch_size == 0 or slab.stop == n_times for slab in slabs)


def test_one_process_errors_and_values_pass_through():
    one = Ranks()
    assert collectively(one, lambda: 3) == 3
    with pytest.raises(KeyError):
        collectively(one, lambda: {}["missing"])
    assert one.device("cuda") == "cuda" and Ranks(1, 2, 1).device("cpu") == "cpu"


def readme_commands(launcher: str) -> list[list[str]]:
    """Every command line of README.md that starts with ``launcher``, its continuation lines joined,
    split as a shell splits it."""
    text = (REPO / "README.md").read_text().replace("\\\n", " ")
    return [shlex.split(line) for line in text.splitlines() if line.strip().startswith(f"{launcher} ")]


def test_the_readme_torchrun_commands_give_the_cli_every_argument(monkeypatch, tmp_path):
    """torchrun's parser takes a prefix of one of its own options anywhere on the line (`--start`
    for `--start-method`): each README command must reach s2forecast.cli whole (``--`` after the
    module ends torchrun's options)."""
    from torch.distributed.run import parse_args

    monkeypatch.setenv("NODE_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.chdir(tmp_path)  # where the commands' relative --out would go
    commands = readme_commands("torchrun")
    assert any("rollout" in command for command in commands) and any("fit" in command for command in commands)
    for command in commands:
        launched = parse_args([os.path.expandvars(arg) for arg in command[1:]])  # SystemExit: torchrun refused it
        given = command[command.index("s2forecast.cli") + 1 :]
        assert launched.module and launched.training_script == "s2forecast.cli"
        assert launched.training_script_args == (given[1:] if given[0] == "--" else given), command
        if launched.training_script_args[0] == "rollout":  # our own parser takes it (fit: LightningCLI's)
            args = build_parser().parse_args(launched.training_script_args)
            assert (args.start, args.end, args.every, args.format) == ("2020-01-01T00", "2020-12-31", 12.0, "zarr")


def test_the_group_waits_for_slow_ranks_and_a_failed_meeting_is_one_line(monkeypatch):
    """A review found: torch's default 30 min timeout failed a run whose ranks with fewer batches waited
    longer for the others; two sruns of one job met on one port (a traceback, then a hang); a peer
    that never joined was a DistStoreError traceback."""
    import torch.distributed as dist

    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    calls, groups = [], []
    monkeypatch.setattr(dist, "init_process_group", lambda *args, **kwargs: calls.append(kwargs))
    monkeypatch.setattr(dist, "new_group", lambda *args, **kwargs: groups.append(kwargs))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)
    ports = set()
    for step in ("0", "1"):
        monkeypatch.setenv("SLURM_JOB_ID", "4242")
        monkeypatch.setenv("SLURM_STEP_ID", step)
        monkeypatch.setenv("SLURM_NNODES", "1")
        monkeypatch.delenv("MASTER_PORT", raising=False)
        with Ranks(0, 2).group():
            ports.add(os.environ["MASTER_PORT"])
    assert len(ports) == 2 and groups[0]["timeout"] >= datetime.timedelta(days=1)

    def refused(*args, **kwargs):
        raise dist.DistStoreError("Timed out after 1800 seconds waiting for clients. 1/2 clients joined.")

    monkeypatch.setattr(dist, "init_process_group", refused)
    with pytest.raises(UserError, match=r"^rank 0 of 2 could not meet the others at 127\.0\.0\.1:\d+ within 600 s "
                       r"\(DistStoreError: Timed out .*1/2 clients joined\.\); see the other processes' "
                       "logs"):  # fmt: skip
        with Ranks(0, 2).group():
            pass


def test_a_rank_that_never_starts_fails_the_meeting_soon(monkeypatch):
    """A review found: the collectives' 7-day timeout was also the meeting's, so a rank whose peer never
    started waited 7 days (holding its GPU) for a one-line error."""
    from s2forecast.inference import ranks

    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setattr(ranks, "MEETING_TIMEOUT", datetime.timedelta(seconds=1))
    begun = time.monotonic()
    with pytest.raises(UserError, match=r"^rank 0 of 2 could not meet the others at 127\.0\.0\.1:\d+ within 1 s "):
        with Ranks(0, 2).group():
            pass
    assert time.monotonic() - begun < 60


class ThreadRanks:
    """Rank ``rank`` of ranks that run as threads of this process: their collectives meet at a barrier
    (a process group is one per process), so that a test of what ranks tell each other stays in-process."""

    slab, check_all, many = Ranks.slab, Ranks.check_all, True

    def __init__(self, rank: int, table: list, barrier):
        self.rank, self.world, self.local_rank, self.table, self.barrier = rank, len(table), rank, table, barrier

    def device(self, device: str) -> str:
        return device

    @contextmanager
    def group(self):
        yield self

    def gather(self, value) -> list:
        self.table[self.rank] = value
        self.barrier.wait()
        values = list(self.table)
        self.barrier.wait()  # nobody writes the table again before every rank has read it
        return values

    def broadcast(self, value):
        return self.gather(value)[0]


def test_a_failed_rank_stops_the_others_before_their_next_batch(mse_run_1_epoch, swe_store, tmp_path, monkeypatch):
    """A review found: a rank whose forecasts failed told the others only at the next collective,
    which they reached after forecasting their whole share for nothing."""
    from s2forecast.inference import forecast_file
    from s2forecast.inference.rollout import rollout

    out, times = tmp_path / "f.zarr", open_store(swe_store)["time"].values[:6]  # batches of 1: 0-2 rank 0, 3-5 rank 1
    write, written = forecast_file.ForecastFile.write, []

    def write_or_fail(self, start, lead_index, fields):
        if start == 0:
            raise OSError("[Errno 28] No space left on device")
        written.append(start)
        write(self, start, lead_index, fields)
        for _ in range(200):  # rank 1 goes on once rank 0 has failed (without this, a race)
            if any(tmp.glob(f"{FAILED_MARK}*") for tmp in siblings(out)):
                break
            time.sleep(0.05)

    monkeypatch.setattr(forecast_file.ForecastFile, "write", write_or_fail)
    table, barrier, errors = [None, None], threading.Barrier(2, timeout=60), [None, None]

    def run(rank):
        try:
            rollout(mse_run_1_epoch.checkpoint, swe_store, 3, times, out, RolloutOptions(batch_size=1), False,
                    ThreadRanks(rank, table, barrier))  # fmt: skip
        except Exception as error:
            errors[rank] = error

    threads = [threading.Thread(target=run, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [str(error) for error in errors] == ["[Errno 28] No space left on device",
                                                "rank 0 of 2 failed: [Errno 28] No space left on device"]  # fmt: skip
    assert written == [3, 3, 3]  # rank 1's first batch (3 leads), then no other batch
    assert not os.path.lexists(out) and siblings(out) == []
