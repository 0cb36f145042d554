"""Attention backends as objects (s2forecast.ops.backends): the registry and "auto", honest
availability, prepared states, and no process-wide caches in s2forecast.ops."""

import functools
import importlib
import inspect
import pkgutil
import threading

import pytest
import torch

import s2forecast.ops
from s2forecast.geometry import Grid
from s2forecast.ops import ball_sparse_attention, default_radius, global_attention, neighborhood_attention
from s2forecast.ops.backends import BACKENDS, backend_names, choose
from s2forecast.ops.cuda.tables import interpreting
from s2forecast.ops.prepared import flatten, unflatten

try:  # triton.jit picks interpreted or compiled kernels when they are first imported: here, under
    # conftest's TRITON_INTERPRET, not in test_available_on_cpu_is_honest's TRITON_INTERPRET=0
    # (which a pytest-xdist worker may run before any other test of the fused kernels)
    importlib.import_module("s2forecast.ops.cuda.fused_indexed_attention")
except ImportError:  # no Triton: the fused backends say they are not available
    pass

BALL = {"ball_size": 32, "block_size": 4, "top_k": 2, "group_size": 4}


def qkv(grid, dtype=torch.float32, batch=1, heads=2, head_dim=16):
    return tuple(torch.randn(batch, heads, grid.npoints, head_dim, dtype=dtype) for _ in range(3))


def prepare(backend, grid, device="cpu", dtype=torch.float32):
    if backend.op == "neighborhood":
        return backend.prepare(grid, default_radius(grid), device, dtype)
    if backend.op == "ball":
        return backend.prepare(grid, BALL["ball_size"], BALL["block_size"], None, device, dtype)
    return backend.prepare(grid, device, dtype)


def call(backend, q, k, v, state, grid, scale=None):
    if backend.op == "ball":
        return backend(q, k, v, state, scale, top_k=BALL["top_k"], group_size=BALL["group_size"])
    if backend.op == "global":
        return backend(q, k, v, state, scale, grid_q=grid, grid_kv=grid)
    return backend(q, k, v, state, scale)


ALL = [(op, name) for op, backends in BACKENDS.items() for name in backends]


# --- no caches ------------------------------------------------------------------------------
def _ops_modules():
    for info in pkgutil.walk_packages(s2forecast.ops.__path__, "s2forecast.ops."):
        try:
            yield importlib.import_module(info.name)
        except ImportError:  # the Triton modules where Triton is missing
            continue


def _values(container):
    return container.values() if isinstance(container, dict) else container


def test_ops_hold_no_caches():
    """No functools cache on any function or method of s2forecast.ops, and no thread-local or
    module-level dict that could keep tensors for the life of the process."""
    cached, stores = [], []
    modules = list(_ops_modules())
    assert len(modules) >= 12  # every module was inspected (the walk found the package)
    for module in modules:
        for name, value in vars(module).items():
            # a store starts empty at import, or holds tensors; constant tables do neither
            store = isinstance(value, dict | list) and not name.startswith("__")
            store = store and (not value or any(isinstance(v, torch.Tensor) for v in _values(value)))
            if isinstance(value, threading.local) or store:
                stores.append(f"{module.__name__}.{name}")
            members = [value]
            if inspect.isclass(value) and value.__module__ == module.__name__:
                members += list(vars(value).values())
            for member in members:
                target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if hasattr(target, "cache_info") or isinstance(member, functools.cached_property):
                    cached.append(f"{module.__name__}.{name}")
    assert not cached, cached
    assert not stores, stores


def test_the_cache_check_can_fail(monkeypatch):
    """The check above sees a cached function and a scratch store (so it is not vacuous)."""
    import s2forecast.ops.neighborhood as module

    monkeypatch.setattr(module, "spherical_neighborhood", functools.lru_cache(module.spherical_neighborhood))
    with pytest.raises(AssertionError, match="spherical_neighborhood"):
        test_ops_hold_no_caches()
    monkeypatch.undo()
    monkeypatch.setattr(module, "_scratch", threading.local(), raising=False)
    with pytest.raises(AssertionError, match="_scratch"):
        test_ops_hold_no_caches()


def test_functional_ops_prepare_afresh():
    """Two calls on one grid build two structures (nothing is kept between calls)."""
    from s2forecast.ops.neighborhood import spherical_neighborhood

    grid = Grid(8, 16)
    assert spherical_neighborhood(grid, 0.5) is not spherical_neighborhood(grid, 0.5)


# --- choosing -------------------------------------------------------------------------------
def test_auto_on_cpu_is_blocked_even_under_the_interpreter():
    assert choose("neighborhood", "auto", "cpu").name == "blocked"
    assert choose("neighborhood", "auto", "cpu", torch.float64).name == "blocked"
    assert choose("ball", "auto", "cpu").name == "reference"
    assert choose("global", "auto", "cpu").name == "sdpa"
    # naming a backend returns it even where it cannot run: it raises its own error then
    assert choose("neighborhood", "fused", "cpu").name == "fused"


@pytest.mark.parametrize("op, fallback", [("neighborhood", "blocked"), ("ball", "reference")])
def test_auto_on_cuda_is_fused_except_float64(monkeypatch, op, fallback):
    """Today's rule, checked without a GPU: "auto" asks only whether the device is CUDA and Triton
    is there (CUDA availability is stubbed; no tensor is made)."""
    pytest.importorskip("triton")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cuda = torch.device("cuda")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert choose(op, "auto", cuda, dtype).name == "fused"
    assert choose(op, "auto", cuda, torch.float64).name == fallback
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CUDA device here, but none
    assert choose(op, "auto", cuda, torch.float32).name == fallback


@pytest.mark.parametrize("op", list(BACKENDS))
def test_bad_name_is_one_line_naming_the_valid_ones(op):
    with pytest.raises(ValueError) as error:
        choose(op, "triton", "cpu")
    message = str(error.value)
    assert "\n" not in message and "'triton'" in message and "backend must be one of" in message
    assert all(repr(name) in message for name in backend_names(op))
    assert backend_names(op)[0] == "auto" and set(backend_names(op)[1:]) == set(BACKENDS[op])


def test_functional_ops_reject_bad_names():
    grid = Grid(8, 16)
    q, k, v = qkv(grid)
    with pytest.raises(ValueError, match=r"neighborhood attention backend must be one of .*'blocked'.*got 'sdpa'"):
        neighborhood_attention(q, k, v, grid, 0.5, backend="sdpa")
    with pytest.raises(ValueError, match=r"ball sparse attention backend must be one of .*got 'blocked'"):
        ball_sparse_attention(q, k, v, grid, backend="blocked", **BALL)


# --- availability ---------------------------------------------------------------------------
@pytest.mark.parametrize("interpret", ["0", "1"])
@pytest.mark.parametrize("op, name", ALL)
def test_available_on_cpu_is_honest(monkeypatch, interpret, op, name):
    """available("cpu") is True exactly when the backend runs on CPU tensors (the fused ones:
    only under the Triton interpreter, and with Triton installed)."""
    if name == "fused" and interpret == "1" and not interpreting():
        pytest.skip("the kernels were compiled for a GPU (TRITON_INTERPRET was not set at import)")
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    backend = choose(op, name, "cpu")
    grid = Grid(8, 16)
    q, k, v = qkv(grid, heads=1)  # whether it runs: one head (the interpreter runs a program per head)
    try:
        call(backend, q, k, v, prepare(backend, grid), grid)
        ran = True
    except (ValueError, ImportError):
        ran = False
    assert backend.available("cpu") is ran


@pytest.mark.parametrize("op", ["neighborhood", "ball"])
def test_the_interpreter_refuses_bfloat16_in_one_line(op):
    """Triton's CPU interpreter multiplies bfloat16's raw bits in tl.dot (Triton issue 11584): the fused
    kernels returned outputs of 1e8 there, with no error, against the reference's O(1)."""
    if not interpreting():
        pytest.skip("the kernels were compiled for a GPU (TRITON_INTERPRET was not set at import)")
    grid = Grid(8, 16)
    q, k, v = qkv(grid, dtype=torch.bfloat16, heads=1)
    backend = choose(op, "fused", "cpu")
    with pytest.raises(ValueError, match=r"^Triton's CPU interpreter cannot run the fused kernel in bfloat16 .*"
                                         r"use float32 or float16 there, or backend='reference'$"):  # fmt: skip
        call(backend, q, k, v, prepare(backend, grid), grid)


@pytest.mark.parametrize("op, name", ALL)
def test_available_on_cuda_needs_a_gpu(op, name):
    if name == "fused":
        assert not choose(op, name).available("cuda") or torch.cuda.is_available()
    else:  # pure PyTorch runs wherever torch does
        assert choose(op, name).available("cuda") and choose(op, name).available("cpu")


# --- prepared states ------------------------------------------------------------------------
@pytest.mark.parametrize("op, name", ALL)
def test_prepare_puts_every_tensor_on_the_device(op, name):
    backend = choose(op, name)
    tensors, _ = flatten(prepare(backend, Grid(8, 16), device="meta"))
    assert tensors and all(t.is_meta for t in tensors)


@pytest.mark.parametrize("op, name", [(op, name) for op, name in ALL if name != "fused"])
def test_prepared_log_weights_follow_the_inputs_precision(op, name):
    """float64 inputs get float64 log weights, lower precisions float32 (the ops' bias_dtype)."""
    backend = choose(op, name)
    for dtype, expected in ((torch.float64, torch.float64), (torch.bfloat16, torch.float32)):
        tensors, _ = flatten(prepare(backend, Grid(8, 16), dtype=dtype))
        floats = {t.dtype for t in tensors if t.is_floating_point()}
        assert expected in floats and not floats & {torch.bfloat16, torch.float16}


# the fused kernels run through Triton's interpreter here: seconds each, so make test-fast leaves them out
ALL_FUSED_SLOW = [pytest.param(op, name, marks=pytest.mark.slow) if name == "fused" else (op, name) for op, name in ALL]


@pytest.mark.parametrize("op, name", ALL_FUSED_SLOW)
def test_backend_objects_equal_the_functional_ops(op, name):
    """A backend called on its prepared state gives the functional op's output and gradients."""
    grid = Grid(8, 16)
    backend = choose(op, name)
    state = prepare(backend, grid)
    # one head: what is compared is the state's plumbing (the fused kernels run twice, interpreted)
    tensors = tuple(t.requires_grad_() for t in qkv(grid, heads=1))
    out = call(backend, *tensors, state, grid)
    if op == "neighborhood":
        expected = neighborhood_attention(*tensors, grid, default_radius(grid), backend=name)
    elif op == "ball":
        expected = ball_sparse_attention(*tensors, grid, backend=name, **BALL)
    else:
        expected = global_attention(*tensors, grid)
    assert torch.allclose(out, expected, atol=1e-6, rtol=0)
    grads = torch.autograd.grad(out.square().sum(), tensors)
    expected_grads = torch.autograd.grad(expected.square().sum(), tensors)
    for a, b in zip(grads, expected_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("op, name", ALL)
def test_backends_refuse_bad_scales_and_integer_inputs(op, name):
    """Before any kernel runs: one line naming the value, not float()'s or SDPA's error."""
    grid = Grid(8, 16)
    backend = choose(op, name)
    state = prepare(backend, grid)
    q, k, v = qkv(grid)
    for scale in ["a", float("nan"), torch.ones(2)]:
        with pytest.raises(ValueError, match=r"^scale must be a finite number \(the logit scale; None for 1/sqrt"):
            call(backend, q, k, v, state, grid, scale)
    with pytest.raises(ValueError, match=r"^q, k, v must be floating point .*, got torch.int64$"):
        call(backend, q.long(), k.long(), v.long(), state, grid)


@pytest.mark.slow  # the fused backend through the Triton interpreter
def test_neighborhood_backends_agree_on_one_state_each():
    """blocked, fused (interpreted) and reference from their own states give one answer."""
    grid = Grid(9, 20, "legendre-gauss")
    q, k, v = qkv(grid, heads=1)  # the states are made without the head count
    outputs = {}
    for name in BACKENDS["neighborhood"]:
        backend = choose("neighborhood", name)
        if not backend.available("cpu"):
            continue
        outputs[name] = backend(q, k, v, prepare(backend, grid), scale=0.4)
    reference = outputs.pop("reference")
    assert outputs and all(torch.allclose(out, reference, atol=1e-5, rtol=0) for out in outputs.values())


def test_flatten_round_trip():
    grid = Grid(8, 16)
    for op, name in ALL:
        backend = choose(op, name)
        state = prepare(backend, grid)
        tensors, skeleton = flatten(state)
        rebuilt_tensors, _ = flatten(unflatten(skeleton, tensors))
        assert len(rebuilt_tensors) == len(tensors)
        assert all(a is b for a, b in zip(rebuilt_tensors, tensors, strict=True))
        assert type(unflatten(skeleton, tensors)) is type(state)
