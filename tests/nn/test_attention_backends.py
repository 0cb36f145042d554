"""The layers' attention backends: chosen when built or moved, never per forward; the prepared
state is non-persistent buffers that follow .to() and stay out of the state_dict."""

import copy
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import s2forecast.nn.attention as attention_module
from s2forecast.geometry import Grid
from s2forecast.nn import S2Attention, S2BallSparseAttention, S2NeighborhoodAttention
from s2forecast.ops import ball_sparse_attention, default_radius, global_attention, neighborhood_attention
from s2forecast.ops.backends import BallSparseBackend, BlockedNeighborhood

GRID = Grid(8, 16)
BALL = {"ball_size": 32, "block_size": 4, "top_k": 2, "group_size": 4}
LAYERS = {
    "neighborhood": lambda **kw: S2NeighborhoodAttention(16, 2, GRID, **kw),
    "ball": lambda **kw: S2BallSparseAttention(16, 2, GRID, **BALL, **kw),
    "global": lambda **kw: S2Attention(16, 2, GRID, Grid(4, 8), **kw),
}


def functional(layer, q, k, v):
    """The functional op the layer stands for, prepared on the fly."""
    if isinstance(layer, S2NeighborhoodAttention):
        return neighborhood_attention(q, k, v, layer.grid, layer.theta, backend=layer.backend)
    return global_attention(q, k, v, layer.grid_out, layer.grid_in)


@pytest.mark.parametrize("kind", list(LAYERS))
def test_state_is_buffers_outside_the_state_dict(kind):
    layer = LAYERS[kind]()
    buffers = dict(layer.named_buffers())
    assert buffers  # the prepared state is there...
    state_dict = layer.state_dict()
    assert set(state_dict) == {name for name, _ in layer.named_parameters()}  # ...but not saved
    fresh = LAYERS[kind]()
    assert fresh.load_state_dict(state_dict, strict=True)  # a weights-only checkpoint loads


@pytest.mark.parametrize("kind", list(LAYERS))
def test_buffers_follow_to_device(kind):
    layer = LAYERS[kind]().to("meta")
    assert all(b.is_meta for b in layer.buffers()) and all(p.is_meta for p in layer.parameters())


@pytest.mark.parametrize("kind", list(LAYERS))
def test_float64_layer_prepares_float64_log_weights(kind):
    """.double() prepares again in float64 (not a float32 state cast up), so the layer equals the
    float64 op; lower precisions keep float32 log weights, the ops' bias precision."""
    layer = LAYERS[kind]().double()
    assert {b.dtype for b in layer.buffers() if b.is_floating_point()} == {torch.float64}
    x = torch.randn(1, 16, *GRID.shape, dtype=torch.float64)
    if kind == "global":
        query = torch.randn(1, 16, 4, 8, dtype=torch.float64)
        q, k, v = layer._project(query, x, x, layer.grid_out, layer.grid_in)
        out = layer._attention_backend(q, k, v, layer._state(), grid_q=layer.grid_out, grid_kv=layer.grid_in)
        assert torch.equal(out, functional(layer, q, k, v))
    elif kind == "neighborhood":
        q, k, v = layer._project(x, None, None, GRID, GRID)
        assert torch.equal(layer._attention_backend(q, k, v, layer._state()), functional(layer, q, k, v))
    else:
        q, k, v = layer._project(x, None, None, GRID, GRID)
        out = layer._attention_backend(q, k, v, layer._state(), top_k=2, group_size=4)
        assert torch.equal(out, ball_sparse_attention(q, k, v, GRID, **BALL))
    half = LAYERS[kind]().to(torch.bfloat16)
    dtypes = {b.dtype for b in half.buffers()}
    # (the ball ordering keeps its centres and radii, diagnostics, in float64)
    assert torch.float32 in dtypes and torch.bfloat16 not in dtypes


def test_chosen_and_prepared_once_not_per_forward(monkeypatch):
    chosen, prepared = [], []
    choose = attention_module.choose
    monkeypatch.setattr(attention_module, "choose", lambda *a: chosen.append(a) or choose(*a))
    prepare = BlockedNeighborhood.prepare
    monkeypatch.setattr(BlockedNeighborhood, "prepare", lambda self, *a: prepared.append(a) or prepare(self, *a))
    layer = S2NeighborhoodAttention(16, 2, GRID)
    assert layer.attention_backend.name == "blocked" and len(chosen) == len(prepared) == 1
    x = torch.randn(1, 16, *GRID.shape)
    for _ in range(3):
        layer(x).sum().backward()
    assert len(chosen) == len(prepared) == 1  # no decision, no precompute per forward
    layer.to("cpu").float()
    assert len(prepared) == 1  # same device and dtype: the buffers stay
    layer.double()
    assert len(prepared) == 2 and prepared[-1][-1] == torch.float64


def test_ball_backends_share_one_state(monkeypatch):
    """fused and reference ball sparse attention prepare the same state: switching keeps it."""
    prepared = []
    prepare = BallSparseBackend.prepare
    monkeypatch.setattr(BallSparseBackend, "prepare", lambda self, *a: prepared.append(a) or prepare(self, *a))
    layer = S2BallSparseAttention(16, 2, GRID, **BALL)
    buffers = list(layer.buffers())
    layer.backend = "fused"
    assert layer.attention_backend.name == "fused" and len(prepared) == 1
    assert all(a is b for a, b in zip(layer.buffers(), buffers, strict=True))


def test_setting_backend_chooses_again():
    layer = S2NeighborhoodAttention(16, 2, GRID, backend="reference")
    x = torch.randn(1, 16, *GRID.shape)
    expected = layer(x)
    layer.backend = "blocked"
    assert layer.backend == "blocked" and layer.attention_backend.name == "blocked"
    assert torch.allclose(layer(x), expected, atol=1e-5)
    layer.backend = "auto"
    assert layer.attention_backend.name == "blocked"
    with pytest.raises(ValueError, match=r"backend must be one of \('auto', 'blocked', 'fused', 'reference'\)"):
        layer.backend = "cuda"
    with pytest.raises(ValueError, match="backend must be one of"):
        S2BallSparseAttention(16, 2, GRID, backend="blocked", **BALL)


@pytest.mark.parametrize("kind", list(LAYERS))
def test_deepcopy_keeps_the_state(kind):
    layer = LAYERS[kind]()
    copied = copy.deepcopy(layer)
    x = torch.randn(1, 16, *GRID.shape)
    args = (torch.randn(1, 16, 4, 8), x, x) if kind == "global" else (x,)
    assert torch.equal(copied(*args), layer(*args))
    assert all(a is not b for a, b in zip(copied.buffers(), layer.buffers(), strict=True))


def test_repr_names_the_running_backend():
    assert "backend=blocked" in repr(S2NeighborhoodAttention(16, 2, GRID))
    assert "backend=reference" in repr(S2BallSparseAttention(16, 2, GRID, **BALL))


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["neighborhood", "ball"])
def test_moving_to_cuda_chooses_the_fused_backend(kind):
    layer = LAYERS[kind]()
    x = torch.randn(1, 16, *GRID.shape)
    expected = layer(x)
    assert layer.attention_backend.name in ("blocked", "reference")
    layer.cuda()
    assert layer.attention_backend.name == "fused"
    assert all(b.is_cuda for b in layer.buffers())
    assert torch.allclose(layer(x.cuda()).cpu(), expected, atol=1e-4)
    layer.double()  # the kernels take no float64: auto falls back
    assert layer.attention_backend.name in ("blocked", "reference")
    layer.float().cpu()
    assert layer.attention_backend.name in ("blocked", "reference")
    assert all(not b.is_cuda for b in layer.buffers())


@pytest.mark.cuda
def test_global_layer_on_cuda():
    layer = LAYERS["global"]()
    x, query = torch.randn(1, 16, *GRID.shape), torch.randn(1, 16, 4, 8)
    expected = layer(query, x, x)
    layer.cuda()
    assert all(b.is_cuda for b in layer.buffers())
    assert torch.allclose(layer(query.cuda(), x.cuda(), x.cuda()).cpu(), expected, atol=1e-5)


def test_layer_equals_functional_op_with_default_radius():
    layer = S2NeighborhoodAttention(16, 2, GRID)
    x = torch.randn(1, 16, *GRID.shape)
    q, k, v = layer._project(x, None, None, GRID, GRID)
    direct = neighborhood_attention(q, k, v, GRID, default_radius(GRID))
    assert torch.equal(layer._attention_backend(q, k, v, layer._state()), direct)


def test_blocked_scratch_is_kept_per_layer_and_thread():
    """The blocked backend reuses its gather scratch from call to call (a fresh set per call is
    ~1.5x slower on CPU), keeps one per thread, and a copy of the layer starts without it."""
    layer = S2NeighborhoodAttention(16, 2, Grid(16, 32))
    reference = S2NeighborhoodAttention(16, 2, Grid(16, 32), backend="reference")
    reference.load_state_dict(layer.state_dict())
    inputs = [torch.randn(1, 16, 16, 32) for _ in range(4)]

    def scratch():
        return {slot: t.data_ptr() for slot, t in layer.attention_backend._local.workspace.items()}

    with torch.no_grad():
        layer(inputs[0])
        first = scratch()
        layer(inputs[1])
        assert first and scratch() == first
        assert not hasattr(copy.deepcopy(layer).attention_backend._local, "workspace")
        with ThreadPoolExecutor(2) as pool:  # one layer in two threads at once: no shared scratch
            outs = list(pool.map(lambda x: [layer(x) for _ in range(3)], inputs))
        for x, repeats in zip(inputs, outs, strict=True):
            expected = reference(x)
            assert all(torch.allclose(out, expected, atol=1e-5, rtol=0) for out in repeats)
