import os

import pytest
import torch

if not torch.cuda.is_available():
    # Run the Triton kernels of s2forecast.ops.cuda through the interpreter on CPU. Must be set
    # before the kernels are first imported (triton.jit reads it when it decorates).
    os.environ.setdefault("TRITON_INTERPRET", "1")


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
