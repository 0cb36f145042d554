"""A sample's chunks read by several threads at once (``read_threads``, issue 27): the same
batches as sequential reads, from a local store and over HTTP, and concurrent requests to a
real 127.0.0.1 server that delays each one (the server counts them; nothing is timed)."""

import functools
import http.server
import threading
import time

import numpy as np
import pytest
import torch
from test_datamodules import six_hourly, synthetic_store
from test_remote_stores import QuietHandler, wb2_store

from s2forecast.cli import main as cli
from s2forecast.data import FieldDataset, SampleSpec, compute_stats
from s2forecast.geometry import Grid
from s2forecast.training.datamodule import ERA5DataModule
from s2forecast.user_errors import UserError


def batches(module: ERA5DataModule) -> list:
    return [(b.inputs, b.targets, b.static, b.forcings, b.init_times) for b in module.val_dataloader()]


def assert_identical(first: list, second: list) -> None:
    assert len(first) == len(second) > 0
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.shape == y.shape and torch.equal(x, y)  # bit for bit, NaN-free data


@pytest.fixture(scope="module")
def local_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("local") / "era5.zarr"
    synthetic_store(path, Grid(7, 12), six_hourly(12), south_to_north=True, levels=(500, 700, 850))
    compute_stats(path)
    return path


@pytest.mark.parametrize("workers", [0, 1])
def test_threads_read_the_same_batches_as_sequential_reads(local_store, workers):
    common = dict(
        variables=["temperature", "2m_temperature"], levels=[850, 500], history=2, rollout_steps=2,
        train_period=None, val_period=("2020-01-01", "2020-01-03T18"), test_period=None, forcings=["time_of_day"],
        batch_size=3, num_workers=workers,
    )  # fmt: skip
    sequential = batches(ERA5DataModule(str(local_store), read_threads=1, **common))
    threaded = batches(ERA5DataModule(str(local_store), read_threads=4, **common))
    assert_identical(sequential, threaded)
    assert sequential[0][0].shape == (3, 2, 3, 7, 12)  # levels 850, 500 then the surface field


class DelayedHandler(QuietHandler):
    """Answers every request after ``delay`` seconds and records how many were in flight at once."""

    delay = 0.02
    lock = threading.Lock()
    in_flight = 0
    most_in_flight = 0
    requests = 0

    def _delayed(self, serve):
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.requests += 1
            cls.most_in_flight = max(cls.most_in_flight, cls.in_flight)
        try:
            time.sleep(cls.delay)
        finally:
            # counted while waiting only: once it answers, a sequential reader's next request may
            # arrive before this thread could count this one done
            with cls.lock:
                cls.in_flight -= 1
        serve()

    def do_GET(self):
        self._delayed(super().do_GET)

    def do_HEAD(self):
        self._delayed(super().do_HEAD)

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.most_in_flight = cls.requests = 0


@pytest.fixture(scope="module")
def delayed_store(tmp_path_factory):
    """A WB2-layout zarr v2 store over HTTP from 127.0.0.1, each request delayed, and its stats."""
    root = tmp_path_factory.mktemp("delayed")
    wb2_store(root / "era5_64x32.zarr")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(DelayedHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/era5_64x32.zarr"
    stats = root / "stats.zarr"
    compute_stats(url, out=stats)
    yield url, stats
    server.shutdown()


@pytest.mark.slow  # a delayed HTTP server; the local-store equality stays in test-fast
def test_threads_over_http_read_the_same_batches_with_requests_in_flight_at_once(delayed_store):
    url, stats = delayed_store
    common = dict(
        variables=["2m_temperature", "geopotential"], levels=[500], history=2, rollout_steps=1, stats=str(stats),
        train_period=None, val_period=("2020-01-01", "2020-01-02T12"), test_period=None, forcings=[],
        batch_size=2, num_workers=0,
    )  # fmt: skip

    def read(read_threads: int) -> list:
        module = ERA5DataModule(url, read_threads=read_threads, **common)
        assert module.dataset("val").store is not None  # opened (zarr fetches metadata concurrently): count chunks
        DelayedHandler.reset()
        return batches(module)

    sequential = read(1)
    assert DelayedHandler.requests >= 6 and DelayedHandler.most_in_flight == 1  # one chunk after another
    threaded = read(4)
    # 2 variables x 3 times per sample: requests overlap (the server would otherwise see one at a time)
    assert DelayedHandler.requests >= 6 and DelayedHandler.most_in_flight > 1
    assert_identical(sequential, threaded)


def test_an_error_in_a_reading_thread_reaches_the_caller(local_store):
    spec = SampleSpec(("2m_temperature", "temperature"), (500,), (), (), 2, 6.0, 1)
    dataset = FieldDataset(local_store, spec, read_threads=4)
    expected = dataset[0]["inputs"]
    levels, dataset._level_index = dataset._level_index, [7]  # a level the store lacks: fails in a thread
    with pytest.raises(IndexError):
        dataset[0]
    dataset._level_index = levels  # the same pool serves the next sample
    assert torch.equal(dataset[0]["inputs"], expected)


@pytest.mark.parametrize("bad", [0, -2, 1.5, "4", True, None])
def test_bad_read_threads_are_one_line(local_store, bad):
    with pytest.raises(UserError, match=r"read_threads must be an integer >= 1") as error:
        ERA5DataModule(str(local_store), read_threads=bad)
    assert repr(bad) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(UserError, match=r"read_threads must be an integer >= 1"):
        FieldDataset(local_store, SampleSpec(("2m_temperature",)), read_threads=bad)


def test_read_threads_may_be_a_numpy_integer(local_store):
    # a count computed in a script (np.int64) is an integer like any other
    dataset = FieldDataset(local_store, SampleSpec(("2m_temperature",)), read_threads=np.int64(3))
    assert dataset.read_threads == 3 and type(dataset.read_threads) is int
    assert ERA5DataModule(str(local_store), read_threads=np.int32(2)).read_threads == 2


def test_read_threads_from_the_command_line(local_store, capsys, tmp_path):
    argv = ["fit", "--data", "s2forecast.training.datamodule.ERA5DataModule", "--data.init_args.read_threads", "0",
            "--data.init_args.store", str(local_store), "--trainer.default_root_dir", str(tmp_path)]  # fmt: skip
    with pytest.raises(SystemExit) as exit:
        cli(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if "read_threads" in line]
    assert exit.value.code == 2 and len(lines) == 1 and "got 0" in lines[0], lines
