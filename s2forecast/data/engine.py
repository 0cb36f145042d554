"""Where the data work runs: in this process, or on dask.distributed workers (``--workers``, ``--scheduler``).

The commands that stream over stores (``stats``, ``climatology``, ``evaluate``, ``convert-era5``)
cut their work into tasks: a picklable function applied to a small description of one chunk of
the work (index ranges into a store, never its arrays) that returns the chunk's partial result
(``Moments``, metric ``Statistics``, ...) or writes a region of an output the client created.
``Engine.map`` runs the tasks and hands their results back in the order of the chunks, and the
client combines them. In one process and on a cluster the same function reduces the same chunks,
and the client combines the same partial results in the same order: the same numbers.

- ``Engine()``: the tasks run in this process, ``THREADS`` at a time (one reads its chunk while
  another reduces).
- ``Engine(workers=N)``: a ``distributed.LocalCluster`` of N worker processes of one thread each,
  started at the first task and closed with the engine.
- ``Engine(scheduler=ADDRESS)``: a running ``dask scheduler`` (``tcp://host:8786``, or the JSON
  file its ``--scheduler-file`` wrote) whose workers the user started (README, "Scale"). They
  must see the same files as this process (a shared file system), by the same absolute paths
  (the commands make their paths absolute), and run the same s2forecast.

Worker processes are spawned: a Python script that makes ``Engine(workers=N)`` needs the
``if __name__ == "__main__":`` guard (each worker imports the script's main module).

Memory stays bounded: at most ``window`` tasks are submitted and not yet consumed. A worker that
dies is replaced and its tasks run again elsewhere (dask.distributed reschedules them; a task
that kills several workers, the scheduler's ``distributed.scheduler.allowed-failures``, fails
the run). A scheduler that cannot be reached, or that is lost during the work, is a ``UserError``
in one line; the commands write their outputs under the output policy (``s2forecast.output``),
so such a run leaves nothing behind.
"""

import contextlib
import importlib.util
import json
import logging
import numbers
import os
import signal
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from s2forecast.user_errors import UserError, one_line

WORKERS_PER_CORE = 4  # --workers' bound: beyond one per core only reads that wait on a network gain
THREADS = 2  # tasks at once in this process: one reads while the other reduces
BACKGROUND_THREADS = 3 * THREADS  # per task: one read ahead and two writes behind (climatology pass 2)
CONNECT_TIMEOUT_S = 20  # how long to wait for a --scheduler to answer
# how long to wait for a --scheduler's first worker (workers started beside the command, as in README's
# SLURM recipe, take seconds to import and register; one that never comes must not hang the command)
WORKERS_TIMEOUT_S = 120
DRAIN_TIMEOUT_S = 60  # how long a failed run waits for its tasks still running on workers
INSTALL = "pip install distributed, the version of your dask (in a clone of s2forecast: pip install '.[distributed]')"
START_ONE = "start one with `dask scheduler` (and `dask worker ADDRESS`), or use --workers N for a local cluster"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: taskset, a SLURM allocation), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _check_workers(workers) -> int:
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise UserError(f"--workers must be an integer >= 1, got {workers!r}")
    cores = usable_cores()
    most = WORKERS_PER_CORE * cores
    if workers > most:  # each worker is a process of its own: thousands would exhaust the machine, not speed it up
        raise UserError(
            f"--workers {workers} is more than this machine can run: this process may use {cores} core(s), so at "
            f"most {most} local worker processes ({WORKERS_PER_CORE} per core); for more, start workers on other "
            "machines and give their scheduler with --scheduler"
        )
    return int(workers)


@contextlib.contextmanager
def _ctrl_c_held():
    """Ctrl-C held back while a local cluster starts, and raised when it has (the engine then closes
    it). A KeyboardInterrupt inside ``LocalCluster`` left a half-made cluster, whose closing at exit
    failed with a traceback; and the worker processes, which a terminal's Ctrl-C reaches as well
    (it goes to the whole process group), printed KeyboardInterrupt tracebacks or failed to start.

    SIGINT is blocked in this thread, so in the threads the cluster starts (its event loop, its
    process starters) and in the worker processes they spawn, which inherit the mask for good: the
    command's own process takes Ctrl-C, says "interrupted" and stops them. A press that reaches a
    thread started before (zarr's, fsspec's) is recorded by the handler, not raised. Only from the
    main thread of a POSIX system (elsewhere neither can be set)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    # multiprocessing starts its resource tracker with SIGINT blocked, then unblocks it in the calling
    # thread, whatever the mask was: started before, it leaves the mask alone
    resource_tracker.ensure_running()
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending press is taken here (recorded)
        signal.signal(signal.SIGINT, previous)
        if pressed:
            raise KeyboardInterrupt


class Shared:
    """A value every task of a ``map`` receives (``Engine.share``): sent to each worker once, not per task."""

    def __init__(self, value):
        self.value = value


class Engine:
    """Runs tasks in this process or on dask.distributed workers (module docstring).

    Cheap to make: a cluster is started, or the scheduler reached, at the first ``share`` or
    ``map``, so that a command checks its inputs and claims its outputs before. Use it as a
    context manager (``close`` on exit).

    Args:
        scheduler: the address of a running dask scheduler (``tcp://host:8786``, ``host:8786``)
            or the JSON scheduler file of ``dask scheduler --scheduler-file``.
        workers: worker processes of a local cluster started for this engine (>= 1, at most
            ``WORKERS_PER_CORE`` per core of this machine).

    Raises:
        UserError: both given, ``workers`` < 1 or too many, or dask.distributed not installed.
    """

    def __init__(self, scheduler: str | None = None, workers: int | None = None):
        if scheduler is not None and workers is not None:
            raise UserError(
                f"--scheduler {scheduler} and --workers {workers} exclude each other: use a running scheduler "
                "(--scheduler) or a local cluster (--workers), not both"
            )
        if workers is not None:
            workers = _check_workers(workers)
        if scheduler is not None or workers is not None:
            try:
                import distributed  # noqa: F401
            except ImportError:
                option = "--scheduler" if scheduler is not None else "--workers"
                raise UserError(f"{option} needs dask.distributed, which is not installed: {INSTALL}") from None
        self.scheduler, self.workers = scheduler, workers
        self._client = self._cluster = None
        self._pool: ThreadPoolExecutor | None = None

    @property
    def distributed(self) -> bool:
        return self.scheduler is not None or self.workers is not None

    @property
    def where(self) -> str:
        """Where the tasks run, for messages."""
        if self.scheduler is not None:
            return f"the dask scheduler at {self.scheduler}"
        if self.workers is not None:
            return f"a local dask cluster of {self.workers} worker process(es)"
        return "this process"

    # --- connecting ---------------------------------------------------------------------------

    def connect(self):
        """The ``distributed.Client``, connected at the first call (a command that creates its output
        before its first task calls it first); None in this process."""
        if not self.distributed:
            return None
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _connect(self):
        """The client; not dask's default scheduler: the command's own dask computations (opening
        files, small reductions) stay in this process, only the tasks of ``map`` go to the workers."""
        from distributed import Client, LocalCluster

        _quiet_logs()
        if self.workers is not None:
            # workers spill to dask's temporary directory (the system's), never to the current directory
            # the scheduler's HTTP server on a free local port: by default 8787 on every interface, with a
            # 4-line warning whenever 8787 is taken (another cluster, a Jupyter dashboard)
            with _ctrl_c_held():
                self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                             dashboard_address=None, silence_logs=logging.ERROR,
                                             scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})  # fmt: skip
                self._client = Client(self._cluster, set_as_default=False)  # closed by close() after a Ctrl-C
            return self._client
        try:
            address = _scheduler_file(self.scheduler) if self.scheduler.endswith(".json") else self.scheduler
            if address.startswith("ucx://") and importlib.util.find_spec("distributed_ucxx") is None:
                raise UserError(
                    f"--scheduler {self.scheduler}: the ucx protocol needs the distributed-ucxx package (e.g. pip "
                    "install distributed-ucxx-cu12); or give the scheduler's tcp:// address"
                )
            # first a bounded exchange of its own: Client's handshake has no deadline (an address that accepts
            # but never answers as a scheduler, e.g. the dashboard's port, hung it), and a Client that fails to
            # start spends 2 x its timeout closing itself, after the error line, with a traceback
            _probe_scheduler(address, CONNECT_TIMEOUT_S)
            client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except UserError:
            raise
        except Exception as error:  # OSError (timed out, refused), ValueError (no port), garbage answers
            reason = one_line(str(error)) or type(error).__name__
            raise UserError(f"cannot reach the dask scheduler at {self.scheduler}: {reason}; {START_ONE}") from None
        self._client = client
        self._wait_for_workers(client)
        return client

    def _wait_for_workers(self, client) -> None:
        """Wait (up to ``WORKERS_TIMEOUT_S``) for the scheduler's first worker: without one the tasks
        would wait forever, in silence (a `dask worker` that failed to start)."""
        quiet = min(5, WORKERS_TIMEOUT_S / 2)  # workers registering as the command starts: no news
        try:
            with self._lost_scheduler(), contextlib.suppress(TimeoutError):
                client.wait_for_workers(1, timeout=quiet)
                return
            print(f"s2forecast: waiting for a worker of the dask scheduler at {self.scheduler}", file=sys.stderr)
            with self._lost_scheduler():  # the scheduler stopped during the wait: one line saying so
                client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S - quiet)
        except TimeoutError:
            self.close()
            raise UserError(
                f"the dask scheduler at {self.scheduler} has no workers (none registered within "
                f"{WORKERS_TIMEOUT_S:g} s): start them with `dask worker ADDRESS` (or `--scheduler-file FILE`), "
                "or use --workers N for a local cluster"
            ) from None

    def close(self) -> None:
        """Disconnect; stop a local cluster this engine started."""
        client, cluster, self._client, self._cluster = self._client, self._cluster, None, None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        with contextlib.suppress(Exception):  # a lost scheduler: nothing left to tell it
            if client is not None:
                client.close(timeout=5)
        if cluster is not None:
            cluster.close(timeout=20)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    # --- running tasks ------------------------------------------------------------------------

    def share(self, value) -> Shared:
        """``value`` as an argument of every task of a ``map``: sent to each worker once, not per task.

        On a cluster it is the result of a task of its own (not scattered data): were every worker
        holding it to die, the scheduler would make it again."""
        client = self.connect()
        shared = Shared(value)
        if client is None:
            return shared
        with self._lost_scheduler():
            return client.submit(_identity, shared, pure=False)

    def map(self, function: Callable, items: Iterable, *args, window: int | None = None) -> Iterator:
        """``function(item, *args)`` for each item, yielded in the order of ``items``.

        Args:
            function: a module-level function (workers import it by name); its arguments and
                result are pickled to and from the workers.
            args: the same for every task; ``share`` large ones.
            window: tasks submitted and not yet consumed (default: ``THREADS`` here, twice the
                workers' threads on a cluster); bounds the memory of results waiting their turn.

        Raises:
            what a task raised (a ``UserError`` on a worker is one here); ``UserError`` when the
            scheduler is lost or a task kills worker after worker.
        """
        client = self.connect()
        if client is None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="s2forecast-task")
            submit, fixed = self._pool.submit, window or THREADS

            def limit():
                return fixed
        else:

            def limit():
                """Counted again whenever the window fills: workers that register after the command
                started (started beside it, as in README's SLURM recipe) get tasks too."""
                if window:
                    return window
                with self._lost_scheduler():
                    return max(2, 2 * sum(client.nthreads().values()))

            def submit(function, item, *args):
                return client.submit(_on_worker, function, item, *args, pure=False)

        pending: deque = deque()
        current = limit()
        try:
            for item in items:
                pending.append(submit(_call, function, item, *args))
                if len(pending) >= current:
                    current = limit()
                if len(pending) >= current:
                    yield self._result(pending.popleft())
            while pending:
                yield self._result(pending.popleft())
        finally:
            self._drain(pending)

    def _drain(self, pending: deque) -> None:
        """After an error (or when the consumer stops early): let the tasks that already run finish, so
        that none writes into an output the caller is about to discard; drop the others."""
        if not pending:
            return
        if self._client is None:
            for future in pending:
                future.cancel()  # those not started yet
            wait(pending)
            return
        from distributed import wait as wait_distributed

        with contextlib.suppress(Exception):  # a lost scheduler: nothing to wait for
            wait_distributed(list(pending), timeout=DRAIN_TIMEOUT_S)
        with contextlib.suppress(Exception):
            self._client.cancel(list(pending))

    def _result(self, future):
        if self._client is None:
            return future.result()
        with self._lost_scheduler():
            return future.result()

    @contextlib.contextmanager
    def _lost_scheduler(self):
        """Lost connections and workers killed too often, as one-line ``UserError``s."""
        from concurrent.futures import CancelledError

        from distributed.scheduler import KilledWorker

        try:
            yield
        except KilledWorker as error:
            raise UserError(
                f"a task killed dask worker after worker on {self.where} ({one_line(str(error))}): "
                "out of memory? give the workers more memory (dask worker --memory-limit) or use fewer per machine"
            ) from None
        except (CancelledError, OSError) as error:
            if isinstance(error, OSError) and self._client is not None and self._client.status == "running":
                raise  # a task's own OSError (a file it could not read): the worker's error, as it is
            raise UserError(
                f"lost {self.where} during the computation ({type(error).__name__}: "
                f"{one_line(str(error)) or 'connection closed'}); nothing was written: {START_ONE}, then rerun"
            ) from None


class Background:
    """A task's handle on this process's background threads (``background``): ``submit`` as an executor's."""

    def __init__(self, pool: ThreadPoolExecutor):
        self._pool, self._futures = pool, []

    def submit(self, function: Callable, *args):
        self._futures = [future for future in self._futures if not future.done()]
        future = self._pool.submit(function, *args)
        self._futures.append(future)
        return future


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:  # a forked child has none of the parent's threads
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def reuse_freed_memory() -> bool:
    """Have this process's malloc (glibc) keep the large blocks it frees for the next ones, instead
    of giving each back to the kernel and faulting the next one in again, page by page.

    A data command allocates a new array of 0.1-1 GB for each block it reads. By default glibc maps
    each with mmap and unmaps it when it is freed, so every block is zeroed and faulted in anew:
    13.1 s of system time in a 26.0 s ``stats`` of 70 channels at 0.25 deg on this project's 2-core
    machine, against 3.2 s and 21.0 s with the same setting from the environment
    (``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4000000000``; peak RSS 1237 -> 1314 MB), and 21.1 s
    in ``scripts/bench_scale.py`` with this call. The memory goes back to the system when the process
    ends. Call it where a command starts. Returns whether it applied
    (glibc only).

    Not on dask.distributed workers, on purpose: a worker's nanny pauses and then restarts a worker
    by the RSS of its process, and dask has glibc hand freed memory back at once
    (``MALLOC_TRIM_THRESHOLD_=65536`` in ``distributed.nanny.pre-spawn-environ``) so that RSS shows
    the memory in use. Blocks kept here would count as used and get busy workers paused."""
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's malloc.h
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


@contextlib.contextmanager
def background() -> Iterator[Background]:
    """Threads for a task's read-ahead and write-behind (``with background() as reader:
    reader.submit(read, ...)``): the process's ``BACKGROUND_THREADS``, made at the first use and
    kept, so that no task makes or joins a thread. (Tasks that made a ``ThreadPoolExecutor`` of
    their own hung now and then on dask workers: a joined thread that never finished exiting.)
    On leaving, what the task submitted has finished (on an error, what had not started is
    dropped), as when leaving an executor's ``with``: nothing writes after the task."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(BACKGROUND_THREADS, thread_name_prefix="s2forecast-background")
    handle = Background(_pool)
    try:
        yield handle
    except BaseException:
        for future in handle._futures:
            future.cancel()
        raise
    finally:
        wait(handle._futures)


def _identity(value):
    return value


def _call(function: Callable, item, *args):
    """``function(item, *args)`` with each ``Shared`` argument unwrapped."""
    return function(item, *(arg.value if isinstance(arg, Shared) else arg for arg in args))


def _on_worker(call: Callable, function: Callable, item, *args):
    """A task on a dask worker. Dask arrays inside it are computed right there, in the task's thread
    (the worker's default would send them to the scheduler as tasks of their own, and wait): set for
    the worker process once, not per task, so that tasks in a worker's other threads never see it
    switched back."""
    import dask

    if dask.config.get("scheduler", None) != "synchronous":
        dask.config.set(scheduler="synchronous")
    return call(function, item, *args)


def _scheduler_file(path: str) -> str:
    """The address the scheduler file at ``path`` holds."""
    if Path(path).is_dir():
        raise UserError(f"--scheduler {path} is a directory, not a dask scheduler file (JSON with an 'address')")
    if not Path(path).is_file():
        raise UserError(
            f"--scheduler {path}: no such scheduler file (it is written by `dask scheduler --scheduler-file "
            f"{path}`); give the scheduler's address (tcp://HOST:8786) or the file it wrote"
        )
    try:
        address = json.loads(Path(path).read_text())["address"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"--scheduler {path} is not a dask scheduler file (JSON with an 'address')") from None
    if not isinstance(address, str):
        raise UserError(f"--scheduler {path} is not a dask scheduler file: its 'address' is {address!r}, not a string")
    return address


# dask decoding another protocol's bytes as its frames (an SSH banner: "Unable to allocate 2.82 EiB")
NOT_DASK = "what answers there does not speak dask's protocol: not a dask scheduler (an SSH or HTTP port?)"


def _probe_scheduler(address: str, timeout_s: float) -> None:
    """Connect to ``address`` and ask who is there, all within ``timeout_s`` (dask's connection
    handshake included); raises OSError / ValueError unless a dask scheduler answers."""
    import asyncio
    import socket

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.security import Security

    total, deadline = timeout_s, time.monotonic() + timeout_s
    scheme, location = parse_address(address)
    if scheme == "tcp":  # nothing listening is known at once: dask's connect retries it until its timeout
        host, port = parse_host_port(location)
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except ConnectionRefusedError:
            raise OSError(f"nothing listens at {host}:{port} (connection refused): is the scheduler running?") from None
        except socket.gaierror:  # known at once: dask's connect would retry it until its timeout
            raise OSError(f"unknown host {host!r} (its name does not resolve): check the address") from None
        except OSError:
            pass  # unreachable, timed out, unknown host: dask's connect below says which
    timeout_s = max(deadline - time.monotonic(), 0.1)  # the whole probe within the caller's timeout

    async def ask() -> None:
        args = Security().get_connection_args("client")  # dask's TLS settings, for a tls:// address
        try:
            comm = await connect(address, timeout=timeout_s, **args)
        except (MemoryError, struct.error, UnicodeDecodeError) as error:
            raise OSError(NOT_DASK) from error
        try:
            await comm.write({"op": "identity", "reply": True})
            answer = await comm.read()
        except (MemoryError, ValueError, TypeError, struct.error, UnicodeDecodeError) as error:
            raise OSError(NOT_DASK) from error
        finally:
            comm.abort()
        if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
            raise OSError(f"what answers there is not a dask scheduler ({str(answer)[:80]})")

    async def bounded() -> None:
        try:
            await asyncio.wait_for(ask(), timeout_s)
        except TimeoutError:
            raise OSError(f"no dask scheduler answered within {total:g} s (is it the dashboard's port?)") from None

    asyncio.run(bounded())


def _quiet_logs() -> None:
    """dask.distributed's own log lines (reconnection attempts, closing workers) would bury the
    one line a lost scheduler ends with: only its critical messages are shown."""
    for name in ("distributed", "distributed.client", "distributed.scheduler", "distributed.nanny",
                 "distributed.worker", "distributed.core", "distributed.batched"):  # fmt: skip
        logging.getLogger(name).setLevel(logging.CRITICAL)
