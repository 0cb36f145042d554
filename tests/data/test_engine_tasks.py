"""``s2forecast.data.engine`` in this process: results in the order of the tasks, at most ``window`` tasks
outstanding, a failing task's error raised only once the tasks already running have finished, and the
option checks of ``Engine`` (the cluster side: tests/commands/test_distributed.py)."""

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

from s2forecast.data import engine as engine_module
from s2forecast.data.engine import BACKGROUND_THREADS, Engine, Shared, background
from s2forecast.user_errors import UserError


def test_results_come_in_the_order_of_the_tasks():
    def late_first(item, offset):
        time.sleep(0.02 * (5 - item))  # the first tasks finish last
        return item + offset

    with Engine() as engine:
        assert list(engine.map(late_first, range(6), 10)) == [10, 11, 12, 13, 14, 15]


def test_at_most_window_tasks_are_outstanding():
    started, consumed = [], []

    def task(item):
        started.append(item)
        return item

    with Engine() as engine:
        for item in engine.map(task, range(10), window=3):
            time.sleep(0.01)  # every started task has had time to run
            assert len(started) - len(consumed) <= 3
            consumed.append(item)
    assert consumed == list(range(10))


def test_a_shared_value_reaches_every_task_unwrapped():
    table = {"a": 1}
    with Engine() as engine:
        shared = engine.share(table)
        assert isinstance(shared, Shared)
        assert list(engine.map(lambda key, values: values[key], ["a", "a"], shared)) == [1, 1]


def test_an_error_waits_for_the_running_tasks_and_drops_the_rest():
    running, done, lock = [], [], threading.Lock()

    def task(item):
        with lock:
            running.append(item)
        if item == 0:
            raise UserError("task 0 failed")
        time.sleep(0.2)
        done.append(item)
        return item

    with Engine() as engine, pytest.raises(UserError, match="task 0 failed"):
        list(engine.map(task, range(20), window=2))
        # the task running beside task 0 finished before the error came out; none started after
    assert done == running[1:] and len(running) <= 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scheduler": "tcp://127.0.0.1:8786", "workers": 2}, "--scheduler tcp://127.0.0.1:8786 and --workers 2 "
         "exclude each other"),
        ({"workers": 0}, "--workers must be an integer >= 1, got 0"),
        ({"workers": True}, "--workers must be an integer >= 1, got True"),
    ],
)  # fmt: skip
def test_bad_engine_arguments(options, message):
    with pytest.raises(UserError, match=message):
        Engine(**options)


def test_workers_are_bounded_by_the_cores_and_may_be_numpy_integers(monkeypatch):
    monkeypatch.setattr(engine_module, "usable_cores", lambda: 3)
    with pytest.raises(UserError) as error:  # 100000 processes would exhaust the machine before any work
        Engine(workers=100000)
    assert str(error.value) == (
        "--workers 100000 is more than this machine can run: this process may use 3 core(s), so at most 12 local "
        "worker processes (4 per core); for more, start workers on other machines and give their scheduler with "
        "--scheduler"
    )
    with Engine(workers=np.int64(12)) as engine:  # at the bound, as a numpy integer: no cluster before the first task
        assert engine.workers == 12 and type(engine.workers) is int


def test_without_dask_distributed_the_options_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    with pytest.raises(UserError, match=r"--workers needs dask.distributed, which is not installed: pip install "):
        Engine(workers=2)
    with Engine() as engine:  # this process needs no dask.distributed
        assert list(engine.map(abs, [-1, -2])) == [1, 2]


def test_background_threads_are_made_once_and_waited_for_on_leaving():
    done = []

    def work(item):
        time.sleep(0.01)
        done.append(item)
        return item

    for round_ in range(3):  # tasks after tasks: the same threads, none made or joined per task
        with background() as reader:
            futures = [reader.submit(work, round_ * 10 + i) for i in range(6)]
        assert all(future.done() for future in futures)  # finished on leaving, as an executor's with
        names = {t.name for t in threading.enumerate() if t.name.startswith("s2forecast-background")}
        assert 1 <= len(names) <= BACKGROUND_THREADS
    assert sorted(done) == [r * 10 + i for r in range(3) for i in range(6)]


def test_background_on_an_error_drops_what_has_not_started_and_waits_for_the_rest():
    gate, started, finished = threading.Event(), [], []

    def slow(item):
        started.append(item)
        gate.wait(5)
        finished.append(item)

    with pytest.raises(RuntimeError, match="task failed"):
        with background() as writer:
            for i in range(3 * BACKGROUND_THREADS):
                writer.submit(slow, i)
            threading.Timer(0.05, gate.set).start()
            raise RuntimeError("task failed")
    # leaving waited for the writes that had started (none is still writing) and dropped the others
    assert sorted(finished) == sorted(started) and len(started) <= BACKGROUND_THREADS


GIVEN_BACK = """
import sys
import numpy as np
from s2forecast.data.engine import reuse_freed_memory
applied = reuse_freed_memory() if sys.argv[1] == "reuse" else None
def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20
block = np.ones(2**25)  # a 256 MB read block, its pages touched
held = resident_mb()
del block
print(applied, held - resident_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_are_kept_for_the_next_one():
    """By default glibc gives a freed 256 MB block back to the kernel (the next one is zeroed and faulted
    in again); after reuse_freed_memory it keeps it for the next allocation. Measured in a subprocess (the
    setting is process-wide) as the resident memory given back when the block is freed."""
    import subprocess

    def given_back(mode):
        out = subprocess.run([sys.executable, "-c", GIVEN_BACK, mode], capture_output=True, text=True, check=True)
        applied, megabytes = out.stdout.split()
        return applied, float(megabytes)

    default, reused = given_back("default"), given_back("reuse")
    assert default[0] == "None" and reused[0] == "True"
    assert default[1] > 200, default  # the 256 MB went back to the kernel
    assert reused[1] < 20, reused  # kept


def test_the_stats_command_reuses_freed_memory(monkeypatch, tmp_path):
    """``s2forecast stats`` asks for it before reading (a spy here: the setting is process-wide)."""
    from s2forecast.commands import stats as command
    from s2forecast.data import engine as engine_module

    calls = []
    monkeypatch.setattr(engine_module, "reuse_freed_memory", lambda: calls.append(True) or True)

    def compute_stats(*args, **kwargs):
        assert calls, "reuse_freed_memory was not called before the statistics"
        raise SystemExit(0)

    monkeypatch.setattr("s2forecast.data.stats.compute_stats", compute_stats)
    args = command.argparse.Namespace(store="x.zarr", start=None, end=None, step_hours=None, out=None,
                                      storage_options=None, overwrite=False, no_progress=True, scheduler=None,
                                      workers=None)  # fmt: skip
    with pytest.raises(SystemExit):
        command.run(args)
    assert calls == [True]


def test_ctrl_c_while_a_local_cluster_starts_is_raised_once_it_has():
    """Raised inside ``LocalCluster``, it left a half-made cluster whose closing at exit failed with a
    traceback; the threads started meanwhile (the cluster's, which spawn its workers) keep SIGINT
    blocked, and so do the workers: a terminal's Ctrl-C reaches them too."""
    handler = signal.getsignal(signal.SIGINT)
    mask = []
    with pytest.raises(KeyboardInterrupt):
        with engine_module._ctrl_c_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a handler runs between bytecodes: here, it would have
            thread = threading.Thread(target=lambda: mask.extend(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
            thread.start()
            thread.join()
    assert signal.SIGINT in mask
    assert signal.getsignal(signal.SIGINT) is handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


# --- on a running scheduler (in this process: threads as workers) ---------------------------------------
RUNNING = {"now": 0, "most": 0}
RUNNING_LOCK = threading.Lock()


def _count_while_sleeping(item):
    with RUNNING_LOCK:
        RUNNING["now"] += 1
        RUNNING["most"] = max(RUNNING["most"], RUNNING["now"])
    time.sleep(0.3)
    with RUNNING_LOCK:
        RUNNING["now"] -= 1
    return item


def test_workers_that_register_after_the_command_started_get_tasks():
    """The tasks in flight were counted once, from the workers registered at the start: workers started
    beside the command (README's SLURM recipe) sat idle."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        RUNNING.update(now=0, most=0)
        with Engine(scheduler=cluster.scheduler_address) as engine:
            results = engine.map(_count_while_sleeping, range(16))
            assert next(results) == 0
            cluster.scale(3)
            engine.connect().wait_for_workers(3, timeout=60)
            assert list(results) == list(range(1, 16))
        assert RUNNING["most"] == 3


def test_a_scheduler_without_workers_is_one_line_in_time(monkeypatch, capsys):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(engine_module, "WORKERS_TIMEOUT_S", 2)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        engine = Engine(scheduler=cluster.scheduler_address)
        start = time.monotonic()
        with pytest.raises(UserError) as error:
            engine.connect()
        assert time.monotonic() - start < 20
    assert str(error.value) == (
        f"the dask scheduler at {cluster.scheduler_address} has no workers (none registered within 2 s): start them "
        "with `dask worker ADDRESS` (or `--scheduler-file FILE`), or use --workers N for a local cluster"
    )
    assert (
        capsys.readouterr().err
        == f"s2forecast: waiting for a worker of the dask scheduler at {cluster.scheduler_address}\n"
    )
    assert engine._client is None  # disconnected


def test_a_scheduler_lost_while_waiting_for_workers_is_said_so(monkeypatch, capsys):
    """It ended with distributed's own "Timed out trying to connect ..." and no word of what to do."""
    pytest.importorskip("distributed")
    monkeypatch.setattr(engine_module, "WORKERS_TIMEOUT_S", 2)

    class LostClient:
        status, waits = "running", 0

        def wait_for_workers(self, n, timeout):
            self.waits += 1
            if self.waits == 1:  # the quiet first wait
                raise TimeoutError
            self.status = "closed"  # as a client whose scheduler stopped
            raise OSError("Timed out trying to connect to tcp://127.0.0.1:18786 after 20 s")

    engine = Engine(scheduler="tcp://127.0.0.1:18786")
    engine._client = client = LostClient()
    lost = r"^lost the dask scheduler at tcp://127.0.0.1:18786 during the computation \(OSError: Timed out trying"
    with pytest.raises(UserError, match=lost + r" to connect .*\); nothing was written: start one with"):
        engine._wait_for_workers(client)
    assert "waiting for a worker" in capsys.readouterr().err
