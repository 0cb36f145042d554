import functools
import re
import warnings

import pytest
import torch
from torch import nn
from torch_harmonics import AttentionS2, NeighborhoodAttentionS2

from s2forecast.geometry import Grid
from s2forecast.nn import S2Attention, S2NeighborhoodAttention
from s2forecast.nn.ball_attention import S2BallSparseAttention
from s2forecast.ops import default_radius

# torch-harmonics builds its neighborhoods with d <= (1 + 1e-3) * theta_cutoff
TH_CUTOFF_WIDENING = 1.0 + 1e-3


def copy_peer_weights(ours: nn.Module, peer: nn.Module) -> None:
    """torch-harmonics stores 1x1-conv weights (out, in, 1, 1) and qk-norm weights as w - 1."""
    with torch.no_grad():
        for mine, theirs in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "proj")):
            layer = getattr(ours, mine)
            layer.weight.copy_(getattr(peer, f"{theirs}_weights").reshape(layer.weight.shape))
            layer.bias.copy_(getattr(peer, f"{theirs}_bias"))
        if peer.q_norm_weights is not None:
            peer.q_norm_weights.normal_(0, 0.1)
            peer.k_norm_weights.normal_(0, 0.1)
            ours.q_norm.weight.copy_(1 + peer.q_norm_weights)
            ours.k_norm.weight.copy_(1 + peer.k_norm_weights)


@pytest.mark.parametrize("kind", ["equiangular", "legendre-gauss"])
@pytest.mark.parametrize("use_qknorm", [False, True])
def test_neighborhood_attention_matches_torch_harmonics(kind, use_qknorm):
    grid = Grid(16, 32, kind)
    theta = default_radius(grid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = NeighborhoodAttentionS2(
            24, grid.shape, grid.shape, grid_in=kind, grid_out=kind, num_heads=3,
            theta_cutoff=theta / TH_CUTOFF_WIDENING, use_qknorm=use_qknorm,
        )  # fmt: skip
    ours = S2NeighborhoodAttention(24, 3, grid, theta=theta, use_qknorm=use_qknorm)
    copy_peer_weights(ours, peer)
    x = torch.randn(2, 24, *grid.shape)
    assert torch.allclose(ours(x), peer(x), atol=1e-5)


@pytest.mark.parametrize("kind", ["equiangular", "legendre-gauss"])
@pytest.mark.parametrize("shape_out", [(16, 32), (8, 16)])
def test_global_attention_matches_torch_harmonics(kind, shape_out):
    grid_in, grid_out = Grid(16, 32, kind), Grid(*shape_out, kind)
    peer = AttentionS2(24, 4, grid_in.shape, grid_out.shape, grid_in=kind, grid_out=kind, use_qknorm=True)
    ours = S2Attention(24, 4, grid_in, grid_out, use_qknorm=True)
    copy_peer_weights(ours, peer)
    x = torch.randn(2, 24, *grid_in.shape)
    query = torch.randn(2, 24, *grid_out.shape)
    assert torch.allclose(ours(query, x, x), peer(query, x, x), atol=1e-5)


@pytest.mark.parametrize("layer", ["global", "neighborhood"])
def test_bf16_autocast_forward_backward(layer):
    grid = Grid(16, 32)
    module = S2Attention(32, 4, grid) if layer == "global" else S2NeighborhoodAttention(32, 4, grid)
    x = torch.randn(2, 32, *grid.shape, requires_grad=True)
    expected = module(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(x)
    assert out.dtype == torch.bfloat16
    out.float().square().mean().backward()
    assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in module.parameters())
    assert (out.float() - expected).abs().max() < 0.05 * expected.abs().max()


class RecordingEmbedding(nn.Module):
    """Position embedding stand-in: checks shapes and rotates q by a fixed sign pattern."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, q, k):
        self.calls.append((tuple(q.shape), tuple(k.shape)))
        return -q, -k


def test_position_embedding_hook_sees_heads_layout():
    grid_in, grid_out = Grid(8, 16), Grid(4, 8)
    embedding = RecordingEmbedding()
    module = S2Attention(16, 2, grid_in, grid_out, position_embedding=embedding)
    plain = S2Attention(16, 2, grid_in, grid_out)
    plain.load_state_dict(module.state_dict())
    x, query = torch.randn(1, 16, *grid_in.shape), torch.randn(1, 16, *grid_out.shape)
    out = module(query, x, x)
    assert embedding.calls == [((1, 2, 32, 8), (1, 2, 128, 8))]
    assert torch.allclose(out, plain(query, x, x), atol=1e-6)  # (-q).(-k) = q.k


def test_ball_attention_takes_a_position_embedding():
    """The embedding sees (batch, heads, N, head_dim) of every point once, and q.k unchanged by it leaves
    the output unchanged (no test covered a position embedding on a ball layer)."""
    grid = Grid(8, 16)
    embedding = RecordingEmbedding()
    module = S2BallSparseAttention(16, 2, grid, ball_size=32, block_size=8, top_k=1, group_size=8,
                                   position_embedding=embedding, backend="reference")  # fmt: skip
    plain = S2BallSparseAttention(16, 2, grid, ball_size=32, block_size=8, top_k=1, group_size=8, backend="reference")
    plain.load_state_dict(module.state_dict())
    x = torch.randn(1, 16, *grid.shape)
    out = module(x)
    assert embedding.calls == [((1, 2, 128, 8), (1, 2, 128, 8))]
    assert torch.allclose(out, plain(x), atol=1e-6)


def test_dropout_only_in_training():
    grid = Grid(8, 16)
    module = S2NeighborhoodAttention(16, 2, grid, dropout=0.5)
    x = torch.randn(1, 16, *grid.shape)
    module.eval()
    assert torch.equal(module(x), module(x))
    module.train()
    assert not torch.equal(module(x), module(x))


def test_neighborhood_module_backends_agree():
    """backend="fused" (the Triton kernel; interpreted on CPU) and "reference" in one module."""
    grid = Grid(8, 16)
    module = S2NeighborhoodAttention(32, 2, grid, backend="reference")
    x = torch.randn(1, 32, *grid.shape)
    expected = module(x)
    module.backend = "fused"
    assert torch.allclose(module(x), expected, atol=1e-5)


LAYERS = {
    "global": S2Attention,
    "neighborhood": S2NeighborhoodAttention,
    "ball": functools.partial(S2BallSparseAttention, ball_size=32, branches=("ball",)),
}


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(num_heads=0), "num_heads must be a positive integer, got 0"),
        (dict(num_heads=-2), "num_heads must be a positive integer, got -2"),
        (dict(num_heads=2.0), "num_heads must be a positive integer, got 2.0"),
        (dict(num_heads=True), "num_heads must be a positive integer, got True"),
        (dict(in_channels=0), "in_channels must be a positive integer, got 0"),
        (dict(in_channels=-8), "in_channels must be a positive integer, got -8"),
        (dict(out_channels=0), "out_channels must be a positive integer, got 0"),
        (dict(qk_channels=-4), "qk_channels must be a positive integer, got -4"),
    ],
)
def test_layers_refuse_non_positive_sizes(layer, kwargs, message):
    arguments = dict(in_channels=8, num_heads=2, **{"grid_in" if layer == "global" else "grid": Grid(4, 8)})
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        LAYERS[layer](**{**arguments, **kwargs})


def test_module_bad_input():
    grid = Grid(8, 16)
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        S2Attention(10, 3, grid)
    with pytest.raises(ValueError, match="theta"):
        S2NeighborhoodAttention(8, 2, grid, theta=4.0)
    with pytest.raises(ValueError, match=r"shape \(batch, 8, 8, 16\)"):
        S2NeighborhoodAttention(8, 2, grid)(torch.randn(1, 8, 9, 16))
    with pytest.raises(ValueError, match="Grid"):
        S2Attention(8, 2, (8, 16))
    with pytest.raises(ValueError, match="backend must be one of"):
        S2NeighborhoodAttention(8, 2, grid, backend="cuda")


def test_neighborhood_radius_cannot_be_changed_after_construction():
    """Its neighborhoods are built at construction: a new theta was shown by repr and ignored (a review
    found it); it is refused now, and a layer of another radius is a new layer."""
    grid = Grid(8, 16)
    layer = S2NeighborhoodAttention(8, 2, grid, theta=1.5)
    with pytest.raises(AttributeError, match="theta"):
        layer.theta = 0.3
    assert layer.theta == 1.5 and "theta=1.5" in repr(layer)
    x = torch.randn(1, 8, *grid.shape)
    narrow = S2NeighborhoodAttention(8, 2, grid, theta=0.3)
    narrow.load_state_dict(layer.state_dict())
    assert not torch.allclose(narrow(x), layer(x))  # the radius matters: same weights, other outputs


@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_projects_q_k_v_in_one_product(bias):
    """layer(x) computes q, k, v in one matrix product (x read once); it equals the three
    projections that layer(x, key, value) with other tensors runs, gradients included. Wrapped
    or hooked projections (LoRA adapters, forward hooks) run as modules."""
    grid = Grid(8, 16)
    layer = S2NeighborhoodAttention(16, 2, grid, bias=bias, out_channels=8, qk_channels=12)
    x = torch.randn(2, 16, *grid.shape, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    one, separate = layer(x), layer(y, y.clone(), y.clone())
    assert torch.allclose(one, separate, atol=1e-6)
    grad = torch.randn_like(one)
    assert torch.allclose(*torch.autograd.grad(one, x, grad), *torch.autograd.grad(separate, y, grad), atol=1e-6)
    products = []
    linear = torch.nn.functional.linear
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.nn.functional, "linear", lambda *args: products.append(1) or linear(*args))
        layer(x)
    assert len(products) == 2  # q, k, v together, then the output projection

    class Adapted(nn.Linear):  # a LoRA-like wrapper: its output is not weight @ x + bias
        def forward(self, t):
            return super().forward(t) * 0.5

    adapted = Adapted(16, 12, bias=bias)
    adapted.load_state_dict(layer.k_proj.state_dict())
    plain_out = layer(x)
    layer.k_proj = adapted
    assert torch.allclose(layer(x), layer(x, x.clone(), x.clone()), atol=1e-6)
    assert not torch.allclose(layer(x), plain_out, atol=1e-3)
    layer.k_proj = nn.Linear(16, 12, bias=bias)
    hook = layer.q_proj.register_forward_hook(lambda module, inputs, output: output * 0)
    assert torch.allclose(layer(x), layer(x, x.clone(), x.clone()), atol=1e-6)
    hook.remove()
    calls = []
    hook = layer.v_proj.register_full_backward_hook(lambda module, grad_in, grad_out: calls.append(1))
    layer(x).sum().backward()
    hook.remove()
    hook = nn.modules.module.register_module_forward_hook(lambda module, inputs, output: calls.append(module))
    layer(x)
    hook.remove()
    assert calls[0] == 1 and sum(isinstance(c, nn.Linear) for c in calls[1:]) == 4  # every projection seen


def test_a_position_embedding_may_edit_q_and_k_in_place():
    """q, k, v of the one product are slices, each its own view: an embedding's in-place edit works
    (split's multi-output views would refuse it) and equals the three-product path."""

    class Doubling(nn.Module):
        def forward(self, q, k):
            q.mul_(2)
            return q, k

    grid = Grid(8, 16)
    layer = S2NeighborhoodAttention(16, 2, grid, position_embedding=Doubling())
    x = torch.randn(1, 16, *grid.shape, requires_grad=True)
    one = layer(x)
    assert torch.allclose(one, layer(x, x.clone(), x.clone()), atol=1e-6)
    one.sum().backward()
    assert x.grad.abs().sum() > 0
