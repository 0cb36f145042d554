import os

import pytest
import torch

# the shared stores and trained checkpoints, built once per session (tests/session_fixtures.py)
from session_fixtures import crps_run, mse_run_1_epoch, mse_run_2_epochs, swe_store  # noqa: F401

if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    # pytest-xdist (make test): the workers share the cores, so each gets its share of threads
    # (torch's default is one per core in every worker: oversubscribed); subprocesses inherit it.
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

if not torch.cuda.is_available():
    # Run the Triton kernels of s2forecast.ops.cuda through the interpreter on CPU. Must be set
    # before the kernels are first imported (triton.jit reads it when it decorates).
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    """Triton's interpreter before 3.8 turns 1-element arrays into loop bounds with int(),
    which numpy 2.4 refuses: say so once instead of failing every kernel test."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    import triton

    def version(text):
        return tuple(int(part) for part in text.split(".")[:2])

    if version(triton.__version__) < (3, 8) and version(np.__version__) >= (2, 4):
        raise pytest.UsageError(
            f"triton {triton.__version__}'s interpreter (the CPU kernel tests) needs numpy < 2.4, found "
            f"{np.__version__}: pip install 'numpy<2.4', or triton >= 3.8"
        )


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
