"""Ball sparse attention: the ball-tree ordering, each branch against a dense reference written
from the definition, gates, longitude rolls and the layer."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from s2forecast.geometry import Grid
from s2forecast.nn.attention import S2Attention
from s2forecast.nn.ball_attention import S2BallSparseAttention
from s2forecast.nn.position_embedding import real_spherical_harmonics
from s2forecast.ops import ball_sparse_attention, global_attention
from s2forecast.ops.backends import choose
from s2forecast.ops.ball_sparse_attention import BRANCHES
from s2forecast.ops.ball_tree import ball_ordering, ball_tree_permutation, blocks_centers_and_radii

KINDS = ["equiangular", "equiangular-midpoint", "legendre-gauss"]


def qkv(grid, batch=2, heads=3, head_dim=8, dtype=torch.float32):
    return tuple(torch.randn(batch, heads, grid.npoints, head_dim, dtype=dtype, requires_grad=True) for _ in "qkv")


def log_weights(grid, dtype):
    return grid.quadrature_weights.flatten().log().to(dtype)


def roll(t, grid, shift):
    return t.unflatten(2, grid.shape).roll(shift, dims=3).flatten(2, 3)


def assert_same_outputs_and_gradients(op, reference, inputs, atol):
    out, ref = op(*inputs), reference(*inputs)
    assert torch.allclose(out, ref, atol=atol, rtol=0), (out - ref).abs().max()
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, grad)
    want = torch.autograd.grad(ref, inputs, grad)
    for name, a, b in zip("qkv", got, want, strict=True):
        assert torch.allclose(a, b, atol=atol, rtol=0), f"d{name}: {(a - b).abs().max()}"


# --- dense references, from the definition, in grid order --------------------------------------
def masked_dense(q, k, v, grid, allowed):
    """Eq. (26) restricted to ``allowed`` (..., N, N) keys: SDPA with log w inside, -inf outside."""
    bias = torch.where(allowed, log_weights(grid, q.dtype), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def position_in_sequence(grid, ball_size):
    """(N,) slot of every grid point in the ball ordering."""
    return ball_ordering(grid, ball_size).inverse


def ball_reference(q, k, v, grid, ball_size):
    ball = position_in_sequence(grid, ball_size) // ball_size
    return masked_dense(q, k, v, grid, ball[:, None] == ball[None, :])


def pooled_keys(k, v, grid, ball_size, block_size):
    """Coarse tokens from the definition: per block of the sequence, w-weighted means of the keys
    and values of its grid points and the log of their summed weight (every block, -inf if empty)."""
    block = position_in_sequence(grid, ball_size) // block_size
    blocks = ball_ordering(grid, ball_size).padded_size // block_size
    w = grid.quadrature_weights.flatten().to(k.dtype)
    pool = torch.zeros(blocks, grid.npoints, dtype=k.dtype)
    pool[block, torch.arange(grid.npoints)] = w
    total = pool.sum(1)
    pool = pool / torch.where(total > 0, total, 1.0)[:, None]
    return pool @ k, pool @ v, total.log()


def compression_reference(q, k, v, grid, ball_size, block_size):
    k_cmp, v_cmp, log_total = pooled_keys(k, v, grid, ball_size, block_size)
    keep = torch.isfinite(log_total)
    return F.scaled_dot_product_attention(q, k_cmp[:, :, keep], v_cmp[:, :, keep], attn_mask=log_total[keep][None, :])


def selection_mask(q, k, grid, ball_size, block_size, select_block, top_k, group_size):
    """(batch, heads, N, N) bool: key j is in a block selected for the group of query i."""
    slot = position_in_sequence(grid, ball_size)
    group, sel_block, ball = slot // group_size, slot // select_block, slot // ball_size
    groups = ball_ordering(grid, ball_size).padded_size // group_size
    num_sel = ball_ordering(grid, ball_size).padded_size // select_block
    members = torch.zeros(groups, grid.npoints, dtype=q.dtype)
    members[group, torch.arange(grid.npoints)] = 1.0
    q_group = (members / members.sum(1, keepdim=True).clamp_min(1)) @ q.detach()  # mean of real queries
    k_cmp, _, log_total = pooled_keys(k.detach(), k.detach(), grid, ball_size, block_size)
    logits = q_group @ k_cmp.transpose(-1, -2) * q.shape[-1] ** -0.5 + log_total
    scores = torch.logsumexp(logits.unflatten(-1, (num_sel, -1)), dim=-1)  # per selection block
    group_ball = torch.arange(groups) * group_size // ball_size
    block_ball = torch.arange(num_sel) * select_block // ball_size
    scores = scores.masked_fill(group_ball[:, None] == block_ball[None, :], float("-inf"))
    top, idx = scores.topk(top_k, dim=-1)
    chosen = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, idx, torch.isfinite(top))
    allowed = chosen[:, :, group][..., sel_block]  # (batch, heads, N, N)
    assert not (allowed & (ball[:, None] == ball[None, :])).any(), "selection reached into the own ball"
    return allowed


def selection_reference(q, k, v, grid, ball_size, block_size, select_block, top_k, group_size):
    allowed = selection_mask(q, k, grid, ball_size, block_size, select_block, top_k, group_size)
    return masked_dense(q, k, v, grid, allowed)


# --- ordering ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape, ball_size", [((8, 16), 16), ((12, 24), 64), ((16, 32), 64), ((12, 15), 32)])
def test_ordering_is_a_padded_permutation(kind, shape, ball_size):
    grid = Grid(*shape, kind)
    ordering = ball_ordering(grid, ball_size)
    n = grid.npoints
    assert ordering.num_balls == -(-n // ball_size) and ordering.padded_size == ordering.num_balls * ball_size
    perm = ordering.permutation
    assert torch.equal(perm[perm >= 0].sort().values, torch.arange(n))
    assert int(ordering.is_padding.sum()) == ordering.num_padding == ordering.padded_size - n
    assert torch.equal(perm[ordering.inverse], torch.arange(n))
    real_per_ball = (~ordering.is_padding).view(-1, ball_size).sum(1)
    assert real_per_ball.max() - real_per_ball.min() <= 1  # padding spread evenly over the balls
    # centres and radii describe the balls
    xyz = grid.unit_vectors.reshape(-1, 3)[ordering.gather_index].view(-1, ball_size, 3)
    assert torch.allclose(ordering.centers.norm(dim=-1), torch.ones(ordering.num_balls, dtype=torch.float64))
    distance = torch.acos((xyz * ordering.centers[:, None]).sum(-1).clamp(-1, 1))
    distance = distance.masked_fill(ordering.is_padding.view(-1, ball_size), 0.0)
    assert torch.allclose(distance.amax(1), ordering.radii, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_balls_are_compact(kind):
    """Mean and largest ball radius vs. row-major blocks of the same size (rows are thin rings)."""
    for shape, size, ratio in [((16, 32), 16, 0.75), ((32, 64), 16, 0.5), ((32, 64), 32, 0.5)]:
        grid = Grid(*shape, kind)
        ordering = ball_ordering(grid, size)
        _, row_major = blocks_centers_and_radii(grid.unit_vectors.reshape(-1, 3), size)
        assert ordering.radii.mean() < ratio * row_major.mean(), (shape, size)
        assert ordering.radii.max() < ratio * row_major.max(), (shape, size)
    # nested: blocks of 8 inside balls of 64 are compact too
    grid = Grid(32, 64, kind)
    ordering = ball_ordering(grid, 64)
    _, nested = blocks_centers_and_radii(grid.unit_vectors.reshape(-1, 3)[ordering.gather_index], 8)
    _, row_major = blocks_centers_and_radii(grid.unit_vectors.reshape(-1, 3), 8)
    assert nested.mean() < 0.7 * row_major.mean()


def test_ordering_is_deterministic_and_not_cached():
    grid = Grid(12, 24, "legendre-gauss")
    first = ball_ordering(grid, 32)
    rebuilt = ball_ordering(Grid(12, 24, "legendre-gauss"), 32)
    assert rebuilt is not first and torch.equal(rebuilt.permutation, first.permutation)
    points = grid.unit_vectors.reshape(-1, 3).numpy()
    assert (ball_tree_permutation(points, 32) == first.permutation.numpy()).all()


def test_ordering_bad_arguments():
    with pytest.raises(ValueError, match="ball_size must be a positive integer, got 0"):
        ball_ordering(Grid(8, 16), 0)
    with pytest.raises(ValueError, match="Grid"):
        ball_ordering((8, 16), 16)


# --- branches vs dense references -----------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape, ball_size", [((8, 16), 128), ((8, 16), 256), ((12, 24), 512)])
def test_one_ball_is_global_attention(kind, shape, ball_size):
    """ball_size >= N, ball branch only: eq. (26) exactly (padding slots are masked)."""
    grid = Grid(*shape, kind)
    assert_same_outputs_and_gradients(
        lambda q, k, v: ball_sparse_attention(q, k, v, grid, ball_size=ball_size, branches=("ball",)),
        lambda q, k, v: global_attention(q, k, v, grid),
        qkv(grid),
        atol=1e-5,
    )


@pytest.mark.parametrize("ball_size", [35, 36])
def test_one_ball_needs_no_block_or_group_size(ball_size):
    """The ball branch alone ignores the coarse and selection sizes: one ball of 35 (or 36) slots
    on a 5x7 grid is global attention, though 35 is no multiple of the default block_size=8 and
    group_size=8; the layer is S2Attention."""
    grid = Grid(5, 7)
    assert_same_outputs_and_gradients(
        lambda q, k, v: ball_sparse_attention(q, k, v, grid, ball_size=ball_size, branches=("ball",)),
        lambda q, k, v: global_attention(q, k, v, grid),
        qkv(grid, dtype=torch.float64),
        atol=1e-12,
    )
    layer = S2BallSparseAttention(8, 2, grid, ball_size=ball_size, branches=("ball",)).double()
    with torch.no_grad():
        layer.gate_proj.weight.zero_()
        layer.gate_proj.bias.fill_(80.0)  # sigmoid(80) == 1 in float64
    plain = S2Attention(8, 2, grid).double()
    plain.load_state_dict(layer.state_dict(), strict=False)
    x = torch.randn(2, 8, *grid.shape, dtype=torch.float64)
    torch.testing.assert_close(layer(x), plain(x), rtol=0, atol=1e-12)


def test_compression_alone_needs_no_selection_sizes():
    grid = Grid(8, 16)
    q, k, v = qkv(grid)
    expected = ball_sparse_attention(q, k, v, grid, ball_size=32, branches=("compression",))
    # group_size=3 does not divide the balls and top_k=100 exceeds the blocks: selection sizes only
    got = ball_sparse_attention(q, k, v, grid, ball_size=32, group_size=3, top_k=100, branches=("compression",))
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="ball_size=36 must be a multiple of block_size=8"):
        ball_sparse_attention(q, k, v, grid, ball_size=36, branches=("compression",))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape, ball_size", [((8, 16), 32), ((12, 24), 64), ((16, 32), 64)])
def test_ball_branch_equals_block_diagonal_reference(kind, shape, ball_size):
    grid = Grid(*shape, kind)
    assert_same_outputs_and_gradients(
        lambda q, k, v: ball_sparse_attention(q, k, v, grid, ball_size=ball_size, branches=("ball",)),
        lambda q, k, v: ball_reference(q, k, v, grid, ball_size),
        qkv(grid),
        atol=1e-5,
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape, ball_size, block_size", [((8, 16), 32, 8), ((12, 24), 64, 8), ((16, 32), 64, 4)])
def test_compression_branch_equals_pooled_reference(kind, shape, ball_size, block_size):
    grid = Grid(*shape, kind)
    assert_same_outputs_and_gradients(
        lambda q, k, v: ball_sparse_attention(
            q, k, v, grid, ball_size=ball_size, block_size=block_size, branches=("compression",)
        ),
        lambda q, k, v: compression_reference(q, k, v, grid, ball_size, block_size),
        qkv(grid),
        atol=1e-5,
    )


def test_padding_blocks_carry_no_weight():
    """4x5 = 20 points in a ball of 256: padding spread over the slots leaves 12 blocks of 8 with
    no point (log-weight -inf), the other 20 blocks hold one point each."""
    grid = Grid(4, 5, "equiangular-midpoint")
    _, _, log_total = pooled_keys(torch.zeros(1, 1, 20, 1), torch.zeros(1, 1, 20, 1), grid, 256, 8)
    assert int(torch.isinf(log_total).sum()) == 12
    assert torch.isinf(log_total).any() and torch.allclose(log_total.exp().sum(), torch.tensor(4 * torch.pi))
    assert_same_outputs_and_gradients(
        lambda q, k, v: ball_sparse_attention(q, k, v, grid, ball_size=256, branches=("compression",)),
        lambda q, k, v: compression_reference(q, k, v, grid, 256, 8),
        qkv(grid),
        atol=1e-5,
    )


# selection in float64: the reference takes its own top-k, which must not flip on round-off
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "shape, ball_size, block_size, select_block, top_k, group_size",
    [
        ((8, 16), 32, 8, 8, 4, 1),  # per query
        ((12, 24), 64, 8, 8, 4, 8),  # group selection, padding (288 points in 5 balls of 64)
        ((16, 32), 64, 4, 8, 3, 4),  # selection blocks of two compression blocks
        ((12, 15), 32, 4, 16, 5, 2),  # 180 points, 12 padding slots
        ((4, 5), 16, 1, 1, 14, 2),  # 20 points, 2 balls: top_k exceeds the 10 real blocks outside a ball
    ],
)
def test_selection_branch_equals_masked_reference(kind, shape, ball_size, block_size, select_block, top_k, group_size):
    grid = Grid(*shape, kind)
    sizes = dict(ball_size=ball_size, block_size=block_size, select_block=select_block, top_k=top_k)
    assert_same_outputs_and_gradients(
        lambda q, k, v: ball_sparse_attention(q, k, v, grid, **sizes, group_size=group_size, branches=("selection",)),
        lambda q, k, v: selection_reference(q, k, v, grid, ball_size, block_size, select_block, top_k, group_size),
        qkv(grid, dtype=torch.float64),
        atol=1e-10,
    )


def test_selection_ignores_the_own_ball():
    """Changing the values of one ball leaves the selection output of that ball's queries unchanged."""
    grid = Grid(16, 32)
    q, k, v = (t.detach() for t in qkv(grid))
    ball = position_in_sequence(grid, 64) // 64
    inside = ball == 3
    changed = v.clone()
    changed[:, :, inside] += 10.0

    def attend(values):
        return ball_sparse_attention(q, k, values, grid, ball_size=64, top_k=4, group_size=8, branches=("selection",))

    before, after = attend(v), attend(changed)
    assert torch.equal(before[:, :, inside], after[:, :, inside])
    assert (before[:, :, ~inside] - after[:, :, ~inside]).abs().amax() > 1.0  # other balls do select ball 3


def test_all_branches_sum_with_unit_gates():
    grid = Grid(12, 24, "legendre-gauss")
    q, k, v = qkv(grid)
    sizes = dict(ball_size=64, block_size=8, top_k=4, group_size=8)
    total = ball_sparse_attention(q, k, v, grid, **sizes)
    parts = [ball_sparse_attention(q, k, v, grid, **sizes, branches=(b,)) for b in ("ball", "compression", "selection")]
    assert torch.allclose(total, sum(parts), atol=1e-5)


# --- gates ------------------------------------------------------------------------------------------
def test_gates_weigh_branches_and_receive_gradients():
    grid = Grid(12, 24)
    q, k, v = qkv(grid)
    sizes = dict(ball_size=64, block_size=8, top_k=4, group_size=8)
    gates = tuple(torch.rand(2, 3, grid.npoints, 1, requires_grad=True) for _ in range(3))
    parts = [ball_sparse_attention(q, k, v, grid, **sizes, branches=(b,)) for b in ("ball", "compression", "selection")]
    out = ball_sparse_attention(q, k, v, grid, **sizes, gates=gates)
    assert torch.allclose(out, sum(g * p for g, p in zip(gates, parts, strict=True)), atol=1e-5)

    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, gates, grad)
    for g, p in zip(got, parts, strict=True):
        assert torch.allclose(g, (grad * p).sum(-1, keepdim=True), atol=1e-5)
        assert g.abs().sum() > 0

    # a zero gate removes its branch
    zero_cmp = (gates[0], torch.zeros_like(gates[1]), gates[2])
    out = ball_sparse_attention(q, k, v, grid, **sizes, gates=zero_cmp)
    assert torch.allclose(out, gates[0] * parts[0] + gates[2] * parts[2], atol=1e-5)
    # a None gate is weight 1; gates of inactive branches are ignored
    out = ball_sparse_attention(q, k, v, grid, **sizes, gates=(None, gates[1], gates[2]), branches=("ball",))
    assert torch.allclose(out, parts[0], atol=1e-6)


# --- longitude rolls ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_one_ball_is_exactly_roll_equivariant(kind):
    grid = Grid(8, 16, kind)
    q, k, v = (t.detach() for t in qkv(grid))

    def attend(q, k, v):
        return ball_sparse_attention(q, k, v, grid, ball_size=grid.npoints, branches=("ball",))

    for shift in [1, 5, 13]:
        rolled = attend(*(roll(t, grid, shift) for t in (q, k, v)))
        assert torch.allclose(rolled, roll(attend(q, k, v), grid, shift), atol=1e-6)


def test_ball_branch_is_equivariant_where_balls_map_to_balls():
    """Ball order is not roll-invariant: the ball branch at point p commutes with a roll R exactly
    when R^-1(ball(p)) is the ball of R^-1(p), and differs elsewhere. A generic roll moves every
    ball; on this Gauss-Legendre grid quarter turns map every ball onto a ball (the tree's
    coordinate splits are symmetric under x -> y, y -> -x there)."""
    grid = Grid(16, 32, "legendre-gauss")
    q, k, v = (t.detach() for t in qkv(grid))
    ball = position_in_sequence(grid, 32) // 32
    balls = int(ball.max()) + 1
    lat, lon = torch.arange(grid.npoints) // grid.nlon, torch.arange(grid.npoints) % grid.nlon

    def attend(q, k, v):
        return ball_sparse_attention(q, k, v, grid, ball_size=32, branches=("ball",))

    originals = [frozenset(torch.nonzero(ball == b).flatten().tolist()) for b in range(balls)]
    for shift, expected in [(1, False), (3, False), (8, True), (16, True)]:
        back = lat * grid.nlon + (lon - shift) % grid.nlon  # R^-1(p)
        moved = [frozenset(back[ball == b].tolist()) for b in range(balls)]  # R^-1(ball b)
        maps = torch.tensor([moved[ball[p]] == originals[ball[back[p]]] for p in range(grid.npoints)])
        assert bool(maps.all()) == expected and bool(maps.any()) == expected, shift
        error = (attend(*(roll(t, grid, shift) for t in (q, k, v))) - roll(attend(q, k, v), grid, shift)).abs()
        error = error.amax(dim=(0, 1, 3))
        assert (error[maps] < 1e-5).all() and (error[~maps] > 1e-4).all(), shift


def smooth_qkv(grid, batch=1, heads=2, head_dim=8):
    """q, k, v built from spherical harmonics of degree <= 2: smooth fields."""
    harmonics = real_spherical_harmonics(grid, 9).float().flatten(1)  # (9, N)
    gen = torch.Generator().manual_seed(1)
    return tuple(
        torch.einsum("bhdc,cn->bhnd", torch.randn(batch, heads, head_dim, 9, generator=gen), harmonics) for _ in "qkv"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_roll_error_on_smooth_fields(kind):
    """Measured relative roll errors ||op(R x) - R op(x)|| / ||op(x)|| for smooth q, k, v (degree <= 2),
    balls of 64, shifts 1 and nlon/8, the three grid kinds:
      compression alone: 0.02-0.09 on 16x32, 0.001-0.013 on 32x64 (a quadrature of global
        attention: nearly equivariant, converging with resolution);
      all branches: 0.34-0.52 on 16x32, 0.24-0.37 on 32x64 (the ball and selection branches
        depend on the partition; the error shrinks as the balls shrink).
    """
    errors = {}
    for shape in [(16, 32), (32, 64)]:
        grid = Grid(*shape, kind)
        q, k, v = smooth_qkv(grid)
        for branches in [("compression",), BRANCHES]:
            reference = ball_sparse_attention(q, k, v, grid, ball_size=64, branches=branches)
            worst = 0.0
            for shift in [1, grid.nlon // 8]:
                rolled = ball_sparse_attention(
                    *(roll(t, grid, shift) for t in (q, k, v)), grid, ball_size=64, branches=branches
                )
                worst = max(worst, float((rolled - roll(reference, grid, shift)).norm() / reference.norm()))
            errors[shape, branches] = worst
    assert errors[(16, 32), ("compression",)] < 0.15 and errors[(32, 64), ("compression",)] < 0.02
    assert 1e-2 < errors[(32, 64), BRANCHES] < errors[(16, 32), BRANCHES] < 0.7


# --- bad input ---------------------------------------------------------------------------------------
def test_op_bad_arguments():
    grid = Grid(8, 16)
    q, k, v = qkv(grid)
    cases = [
        (dict(ball_size=60), "ball_size=60 must be a multiple of block_size=8"),
        (dict(ball_size=32, select_block=12), "select_block=12"),
        (dict(ball_size=32, group_size=3), "group_size=3"),
        (dict(ball_size=32, top_k=13), "top_k=13 exceeds the 12 selection blocks"),
        (dict(ball_size=256), "top_k=4 exceeds the 0 selection blocks"),
        (dict(ball_size=32, block_size=0), "block_size must be a positive integer, got 0"),
        (dict(ball_size=32, branches=("ball", "window")), "window"),
        (dict(ball_size=32, branches=()), "non-empty"),
        (dict(ball_size=32, gates=(None, None)), "gates must be"),
        (dict(ball_size=32, backend="triton"), "backend must be one of"),
        (dict(ball_size=32, gates=(torch.ones(2, 3, 128), None, None)), r"ball gate must have shape"),
        (dict(ball_size=32, gates=5), "gates must be None or a tuple"),  # a TypeError before
        (dict(ball_size=32, gates=(torch.full((2, 3, 128, 1), math.nan), None, None)), "ball gate contains NaN"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            ball_sparse_attention(q, k, v, grid, **kwargs)
    with pytest.raises(ValueError, match="128 points but its grid 9x16"):
        ball_sparse_attention(q, k, v, Grid(9, 16), ball_size=32)
    # a state prepared for the ball branch alone has no coarse tokens for the others
    backend = choose("ball", "reference")
    state = backend.prepare(grid, 32, None, None)
    assert backend(q, k, v, state, branches=("ball",)).shape == q.shape
    with pytest.raises(ValueError, match=r"need coarse tokens, but this state was prepared without"):
        backend(q, k, v, state, branches=("ball", "compression"))


# --- the layer ----------------------------------------------------------------------------------------
def test_layer_shapes_and_backward():
    grid = Grid(12, 24, "equiangular-midpoint")
    layer = S2BallSparseAttention(16, 4, grid, ball_size=64, top_k=4, out_channels=8, qk_channels=32)
    x = torch.randn(2, 16, *grid.shape, requires_grad=True)
    out = layer(x)
    assert out.shape == (2, 8, *grid.shape)
    out.square().mean().backward()
    assert torch.isfinite(x.grad).all()
    for name, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert layer.gate_proj.weight.grad.abs().sum() > 0
    assert S2BallSparseAttention(16, 4, grid, ball_size=64, branches=("ball", "selection")).gate_proj.out_features == 8


def test_layer_bf16_autocast_forward():
    grid = Grid(16, 32, "legendre-gauss")
    layer = S2BallSparseAttention(32, 4, grid, ball_size=64, group_size=4)
    x = torch.randn(2, 32, *grid.shape)
    expected = layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    # selections may differ where bf16 rounding reorders close scores: compare in bulk
    assert (out.float() - expected).norm() < 0.05 * expected.norm()


def test_layer_with_one_saturated_ball_is_s2attention():
    grid = Grid(8, 16)
    layer = S2BallSparseAttention(16, 2, grid, ball_size=128, branches=("ball",), use_qknorm=True)
    with torch.no_grad():
        layer.gate_proj.weight.zero_()
        layer.gate_proj.bias.fill_(40.0)  # sigmoid(40) == 1 in float32
    plain = S2Attention(16, 2, grid, use_qknorm=True)
    plain.load_state_dict(layer.state_dict(), strict=False)
    x = torch.randn(2, 16, *grid.shape)
    assert torch.allclose(layer(x), plain(x), atol=1e-5)


def test_layer_bad_arguments():
    grid = Grid(8, 16)

    class ScoreBias(nn.Module):
        acts_on = "scores"

    cases = [
        (dict(ball_size=60), "ball_size=60"),
        (dict(ball_size=32, top_k=100), "top_k=100"),
        (dict(ball_size=32, group_size=5), "group_size=5"),
        (dict(ball_size=32, select_block=12), "select_block=12"),
        (dict(ball_size=32, branches=("ball", "window")), "window"),
        (dict(ball_size=32, position_embedding=ScoreBias()), "ScoreBias biases the scores"),
        (dict(), "top_k=4 exceeds the 0 selection blocks outside a query's ball"),  # default ball_size=256 > N
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            S2BallSparseAttention(16, 2, grid, **kwargs)
    with pytest.raises(ValueError, match="Grid"):
        S2BallSparseAttention(16, 2, (8, 16), ball_size=32)
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        S2BallSparseAttention(10, 3, grid, ball_size=32)
    with pytest.raises(ValueError, match=r"shape \(batch, 16, 8, 16\)"):
        S2BallSparseAttention(16, 2, grid, ball_size=32)(torch.randn(1, 16, 9, 16))


def test_top_k_zero_says_how_to_leave_selection_out():
    with pytest.raises(ValueError, match=r"^top_k must be a positive integer, got 0; to leave out selection drop "
                       r"'selection' from branches$"):  # fmt: skip
        S2BallSparseAttention(8, 2, Grid(8, 16), ball_size=32, block_size=8, top_k=0)
