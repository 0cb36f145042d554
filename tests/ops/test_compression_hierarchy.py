"""Multi-level compression of ball sparse attention (``compression_window``): the token tables
partition the sphere, the branch equals attention to slot-pooled tokens built from the definition,
one level is the paper's compression, the descent finds a dominant block, gradients."""

import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from s2forecast.geometry import Grid
from s2forecast.nn.ball_attention import S2BallSparseAttention
from s2forecast.ops import ball_sparse_attention
from s2forecast.ops.ball_sparse_attention import coarse_levels, descend_select_blocks
from s2forecast.ops.ball_tree import ball_ordering
from s2forecast.ops.compression_hierarchy import compression_hierarchy


def qkv(grid, batch=2, heads=2, head_dim=8, dtype=torch.float64):
    return tuple(torch.randn(batch, heads, grid.npoints, head_dim, dtype=dtype, requires_grad=True) for _ in "qkv")


def covered_slots(hierarchy, ball, num_slots):
    """(num_slots,) how often the tokens that ``ball`` attends to cover each slot."""
    cover = torch.zeros(num_slots, dtype=torch.int64)
    for level in range(hierarchy.num_levels):
        tokens, valid = hierarchy.level_table(level)
        span = hierarchy.block_size ** (level + 1)
        for token in tokens[ball][valid[ball]].tolist():
            cover[token * span : (token + 1) * span] += 1
    return cover


@pytest.mark.parametrize(
    "num_balls, ball_size, block_size, window, levels",
    [(32, 256, 8, 64, 3), (37, 64, 4, 16, 4), (4056, 256, 8, 256, 4), (5, 16, 4, 4, 3), (12, 256, 8, None, 1)],
)
def test_every_ball_sees_every_slot_exactly_once(num_balls, ball_size, block_size, window, levels):
    hierarchy = compression_hierarchy(num_balls, ball_size, block_size, window)
    assert hierarchy.num_levels == levels
    slots = num_balls * ball_size
    for ball in sorted({0, 1, num_balls // 2, num_balls - 1}):
        cover = covered_slots(hierarchy, ball, hierarchy.level_sizes[-1] * block_size**levels)
        assert torch.equal(cover[:slots], torch.ones(slots, dtype=torch.int64)), ball
    for level in range(levels):  # no token lies wholly beyond the sequence (the last may straddle its end)
        tokens, valid = hierarchy.level_table(level)
        assert (tokens[valid] * block_size ** (level + 1) < slots).all()
    if window is not None:  # near-linear: the tokens per ball grow with the number of levels only
        assert hierarchy.table.shape[1] <= window + (levels - 1) * (window - window // block_size)
    # the ball's own blocks are level-1 tokens, so the ball branch and selection see them finely
    own = torch.arange(num_balls)[:, None] * (ball_size // block_size) + torch.arange(ball_size // block_size)
    tokens, valid = hierarchy.level_table(0)
    assert all(set(own[b].tolist()) <= set(tokens[b][valid[b]].tolist()) for b in range(num_balls))


def test_compression_window_checks():
    with pytest.raises(ValueError, match="compression_window=48 must be a multiple of ball_size/block_size=32"):
        compression_hierarchy(8, 256, 8, 48)
    with pytest.raises(ValueError, match="positive integer or None, got 0"):
        compression_hierarchy(8, 256, 8, 0)
    grid = Grid(16, 32)
    q, k, v = qkv(grid)
    with pytest.raises(ValueError, match="select_block=16 must equal block_size=8 with compression_window set"):
        ball_sparse_attention(q, k, v, grid, ball_size=64, select_block=16, compression_window=8)
    with pytest.raises(ValueError, match="compression_window=12"):
        S2BallSparseAttention(16, 2, grid, ball_size=64, compression_window=12)
    # numpy's integers, as the other sizes take them: "must be a positive integer or None, got np.int64(8)"
    numpy_sizes = ball_sparse_attention(q, k, v, grid, ball_size=np.int64(64), compression_window=np.int64(8))
    assert torch.equal(numpy_sizes, ball_sparse_attention(q, k, v, grid, ball_size=64, compression_window=8))


def slot_pooled_reference(q, k, v, grid, ball_size, block_size, window):
    """Compression from the definition: each ball's tokens are pooled straight from the slots they
    cover (w-weighted means, log of summed w), then plain softmax attention, in slot order."""
    ordering = ball_ordering(grid, ball_size)
    hierarchy = compression_hierarchy(ordering.num_balls, ball_size, block_size, window)
    w = grid.quadrature_weights.flatten().to(q.dtype)[ordering.gather_index].masked_fill(ordering.is_padding, 0.0)
    qs, ks, vs = (t[:, :, ordering.gather_index] for t in (q, k, v))
    out = torch.zeros_like(qs)
    for ball in range(ordering.num_balls):
        keys, values, log_w = [], [], []
        for level in range(hierarchy.num_levels):
            tokens, valid = hierarchy.level_table(level)
            span = block_size ** (level + 1)
            for token in tokens[ball][valid[ball]].tolist():
                cells = slice(token * span, min((token + 1) * span, ordering.padded_size))
                total = w[cells].sum()
                if total == 0:
                    continue  # padding only
                keys.append((ks[:, :, cells] * w[cells, None]).sum(2) / total)
                values.append((vs[:, :, cells] * w[cells, None]).sum(2) / total)
                log_w.append(total.log())
        rows = slice(ball * ball_size, (ball + 1) * ball_size)
        out[:, :, rows] = F.scaled_dot_product_attention(
            qs[:, :, rows], torch.stack(keys, 2), torch.stack(values, 2), attn_mask=torch.stack(log_w)[None, :]
        )
    return out[:, :, ordering.inverse]


@pytest.mark.parametrize(
    "kind, shape, ball_size, block_size, window",
    [
        ("equiangular", (16, 32), 32, 4, 8),  # 16 balls, 128 level-1 tokens: levels of 8 -> 3 levels
        ("legendre-gauss", (12, 24), 64, 8, 8),  # 288 points in 5 balls: padding slots and tokens
        ("equiangular-midpoint", (12, 15), 16, 4, 4),  # 180 points, 12 balls of 16, 4 levels
        ("equiangular", (8, 10), 16, 8, 8),  # 10 level-1 tokens: level 1 padded to 16 for level 2
    ],
)
def test_compression_equals_slot_pooled_reference(kind, shape, ball_size, block_size, window):
    grid = Grid(*shape, kind)
    inputs = qkv(grid)
    out = ball_sparse_attention(
        *inputs, grid, ball_size=ball_size, block_size=block_size, branches=("compression",), compression_window=window
    )
    ref = slot_pooled_reference(*inputs, grid, ball_size, block_size, window)
    assert torch.allclose(out, ref, atol=1e-12, rtol=0), (out - ref).abs().max()
    grad = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, inputs, grad), torch.autograd.grad(ref, inputs, grad), strict=True):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


@pytest.mark.parametrize("branches", [("compression",), ("selection",), ("ball", "compression", "selection")])
def test_window_covering_the_sequence_is_the_paper_compression(branches):
    grid = Grid(16, 32, "legendre-gauss")
    inputs = [t.detach() for t in qkv(grid)]
    sizes = dict(ball_size=64, block_size=8, top_k=4, branches=branches)
    flat = ball_sparse_attention(*inputs, grid, **sizes)
    one_level = ball_sparse_attention(*inputs, grid, **sizes, compression_window=64)  # 64 tokens = all of them
    assert torch.equal(flat, one_level)
    assert not torch.allclose(flat, ball_sparse_attention(*inputs, grid, **sizes, compression_window=8))


def descend(q, k, grid, ball_size, block_size, window, top_k, group_size):
    ordering = ball_ordering(grid, ball_size)
    hierarchy = compression_hierarchy(ordering.num_balls, ball_size, block_size, window)
    qs, ks = (t[:, :, ordering.gather_index] for t in (q, k))
    log_w = grid.quadrature_weights.flatten().log().to(q.dtype)[ordering.gather_index]
    log_w = log_w.masked_fill(ordering.is_padding, float("-inf"))
    levels = coarse_levels(ks, ks, log_w, block_size, hierarchy)
    return descend_select_blocks(qs, levels, hierarchy, ordering, top_k, group_size, q.shape[-1] ** -0.5), ordering


def test_descent_finds_a_dominant_block_from_every_ball():
    """All queries equal u and one key is 200 u: its block dominates every coarse level that
    contains it, so every group outside its ball must select it first."""
    grid = Grid(32, 64)
    u = torch.nn.functional.normalize(torch.randn(8, dtype=torch.float64), dim=0)
    q = u.expand(1, 1, grid.npoints, 8).clone()
    k = 0.1 * torch.randn(1, 1, grid.npoints, 8, dtype=torch.float64)
    point = 1234
    k[0, 0, point] = 200 * u
    (blocks, ok), ordering = descend(q, k, grid, ball_size=64, block_size=4, window=16, top_k=3, group_size=8)
    slot = int(ordering.inverse[point])
    group_ball = torch.arange(blocks.shape[2]) * 8 // 64
    outside = group_ball != slot // 64
    assert compression_hierarchy(ordering.num_balls, 64, 4, 16).num_levels == 4
    assert (blocks[0, 0, outside, 0] == slot // 4).all()
    assert ok[0, 0, outside].all()
    assert not (blocks[0, 0, ~outside] == slot // 4).any()  # the own ball's groups may not select it


@pytest.mark.parametrize(
    "kind, shape, ball_size, window, top_k",
    [
        ("equiangular", (32, 64), 32, 8, 5),
        ("legendre-gauss", (12, 15), 32, 8, 5),
        # top_k above the real candidates of a level: padding picks whose children lie past the level
        ("legendre-gauss", (10, 14), 16, 4, 9),
    ],
)
def test_descent_picks_distinct_blocks_outside_the_own_ball(kind, shape, ball_size, window, top_k):
    grid = Grid(*shape, kind)
    q, k, _ = (t.detach() for t in qkv(grid, dtype=torch.float32))
    (blocks, ok), ordering = descend(q, k, grid, ball_size, block_size=4, window=window, top_k=top_k, group_size=4)
    assert ok.all()
    assert blocks.shape == (2, 2, ordering.padded_size // 4, top_k)
    ball_of_group = torch.arange(blocks.shape[2]) * 4 // ball_size
    assert not (blocks // (ball_size // 4) == ball_of_group[:, None]).any()
    assert (blocks.sort(-1).values.diff(dim=-1) > 0).all()  # distinct
    real_blocks = (~ordering.is_padding).view(-1, 4).any(-1)
    assert real_blocks[blocks].all()


@pytest.mark.slow  # gradcheck of the reference path (backend auto on CPU): about 25 s
def test_hierarchical_layer_gradcheck():
    grid = Grid(8, 16)
    # head_dim 2: the numerical Jacobian costs two forwards per input element, and every
    # dimension takes the same path through the kernels
    inputs = [t.detach()[:1, :1, :, :2].requires_grad_() for t in qkv(grid)]

    def op(q, k, v):
        return ball_sparse_attention(q, k, v, grid, ball_size=16, block_size=4, top_k=2, compression_window=4)

    assert torch.autograd.gradcheck(op, inputs)


def test_hierarchical_layer_trains():
    grid = Grid(16, 32, "equiangular-midpoint")
    layer = S2BallSparseAttention(16, 2, grid, ball_size=32, block_size=4, compression_window=8)
    assert "compression_window=8" in repr(layer)
    x = torch.randn(2, 16, *grid.shape, requires_grad=True)
    layer(x).square().mean().backward()
    assert torch.isfinite(x.grad).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())


def test_window_sets_how_closely_compression_approximates_global_attention():
    """On smooth fields (spherical harmonics of degree <= 2) the compression branch alone is a
    quadrature of global attention. The multi-level one is a coarser quadrature whose coarsest
    cells cover 1/W to 8/W of the sphere, so its deviation is set by W. Measured at 32x64, balls
    of 64, relative L2 deviation from global attention: W=16 0.39, W=64 0.15, W=256 (= all 256
    level-1 tokens, the paper's compression) 0.023."""
    from test_ball_sparse_attention import smooth_qkv

    from s2forecast.ops import global_attention

    grid = Grid(32, 64)
    q, k, v = smooth_qkv(grid)
    exact = global_attention(q, k, v, grid)
    deviation = {
        window: float(
            (ball_sparse_attention(q, k, v, grid, ball_size=64, branches=("compression",), compression_window=window)
             - exact).norm() / exact.norm()
        )
        for window in (16, 64, 256)
    }  # fmt: skip
    assert deviation[256] < 0.03 < deviation[64] < deviation[16] < 0.5, deviation


def test_device_copies():
    """``to`` moves the tables (no copy where they are already) and keeps the metadata."""
    hierarchy = compression_hierarchy(32, 256, 8, 64)
    assert hierarchy.to("cpu") is hierarchy
    moved = hierarchy.to("meta")
    assert moved.table.is_meta and moved.valid.is_meta and not hierarchy.table.is_meta
    assert moved.columns == hierarchy.columns and moved.offsets == hierarchy.offsets


@pytest.mark.parametrize("balls_per_chunk", [1, 3])  # 3 does not divide the 16 balls
def test_descent_in_chunks_of_balls_is_the_same(monkeypatch, balls_per_chunk):
    bsa = sys.modules[descend_select_blocks.__module__]  # the module, not the function of the same name

    grid = Grid(16, 32)
    q, k, _ = (t.detach() for t in qkv(grid, dtype=torch.float32))
    whole, _ = descend(q, k, grid, ball_size=32, block_size=4, window=8, top_k=3, group_size=4)
    width = compression_hierarchy(16, 32, 4, 8).table.shape[1]
    per_ball = 2 * 2 * (32 // 4) * (width + 3 * 4) * 8  # batch * heads * groups * (width + K * l) * d
    monkeypatch.setattr(bsa, "DESCENT_CHUNK_ELEMENTS", balls_per_chunk * per_ball)
    chunked, _ = descend(q, k, grid, ball_size=32, block_size=4, window=8, top_k=3, group_size=4)
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])
