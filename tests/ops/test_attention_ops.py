import importlib
import math

import pytest
import torch
import torch.nn.functional as F

from s2forecast.geometry import Grid
from s2forecast.ops import (
    ball_sparse_attention,
    default_radius,
    global_attention,
    neighborhood_attention,
    spherical_neighborhood,
)
from s2forecast.ops.global_attention import attention_with_folded_key_bias
from s2forecast.ops.neighborhood import neighborhood_mask_from_distances
from s2forecast.ops.quadrature_bias import log_quadrature_weights

KINDS = ["equiangular", "equiangular-midpoint", "legendre-gauss"]


def qkv(grid_q, grid_kv=None, batch=2, heads=3, head_dim=8, dtype=torch.float32):
    grid_kv = grid_kv or grid_q
    q = torch.randn(batch, heads, grid_q.npoints, head_dim, dtype=dtype, requires_grad=True)
    k = torch.randn(batch, heads, grid_kv.npoints, head_dim, dtype=dtype, requires_grad=True)
    v = torch.randn(batch, heads, grid_kv.npoints, head_dim, dtype=dtype, requires_grad=True)
    return q, k, v


def dense_reference(q, k, v, grid_kv, mask=None):
    """Eq. (26)/(27) as dense SDPA with a float mask: log w inside the support, -inf outside."""
    log_w = log_quadrature_weights(grid_kv, "cpu", torch.float64).to(q.dtype)
    bias = log_w.expand(q.shape[2], -1)
    if mask is not None:
        bias = torch.where(mask, bias, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def assert_same_outputs_and_gradients(op, reference, inputs, atol=1e-5):
    out = op(*inputs)
    ref = reference(*inputs)
    assert torch.allclose(out, ref, atol=atol, rtol=0), (out - ref).abs().max()
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, grad)
    want = torch.autograd.grad(ref, inputs, grad)
    for name, a, b in zip("qkv", got, want, strict=True):
        assert torch.allclose(a, b, atol=atol, rtol=0), f"d{name}: {(a - b).abs().max()}"


# --- neighborhood structure ------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(8, 16), (16, 32), pytest.param((33, 64), marks=pytest.mark.slow), (12, 15)])
def test_arcs_equal_pairwise_distance_mask(kind, shape):
    grid = Grid(*shape, kind)
    for theta in [grid.lat_spacing, default_radius(grid), 0.9, 2.5, math.pi]:
        neighborhood = spherical_neighborhood(grid, theta)
        assert torch.equal(neighborhood.dense_mask(), neighborhood_mask_from_distances(grid, theta)), theta


def test_polar_rows_are_whole_rows():
    grid = Grid(33, 64)
    neighborhood = spherical_neighborhood(grid, default_radius(grid))
    assert neighborhood.arc_length[0].max() == 64  # the north pole row sees whole rows
    assert neighborhood.neighbors_per_row[0] > neighborhood.neighbors_per_row[16]
    # a radius of one grid spacing reaches the row above and below on the same meridian
    one = spherical_neighborhood(grid, grid.lat_spacing)
    assert one.neighbors_per_row[16] == 5  # itself, 2 along the row, 2 along the meridian


def test_a_radius_just_below_pi_leaves_out_the_antipodes():
    """The round-off slack was on the haversine, flat near pi: 6e-5 rad of slack there, and the poles
    of a 181x360 grid were each other's neighbors at pi - 5e-5 (a review found it)."""
    poles = Grid(2, 3)  # each north point is pi from each south point
    for theta in (math.pi - 5e-5, math.pi * (1 - 1e-6)):
        assert spherical_neighborhood(poles, theta).neighbors_per_row.tolist() == [3, 3], theta
    assert spherical_neighborhood(poles, math.pi).neighbors_per_row.tolist() == [6, 6]
    grid = Grid(181, 360)
    assert int((spherical_neighborhood(grid, math.pi - 5e-5).half_width[0] >= 0).sum()) == 180  # not the south pole


def test_structure_is_rebuilt_not_cached():
    """ops hold no cache: each call builds the same structure afresh (layers keep theirs)."""
    grid = Grid(16, 32)
    first, again = spherical_neighborhood(grid, 0.3), spherical_neighborhood(Grid(16, 32), 0.3)
    assert first is not again and first.band_rows == again.band_rows
    assert torch.equal(first.row_start, again.row_start) and torch.equal(first.half_width, again.half_width)


# --- ops vs dense masked SDPA ------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_global_attention_equals_dense_sdpa(kind):
    grid = Grid(12, 24, kind)
    inputs = qkv(grid)
    assert_same_outputs_and_gradients(
        lambda q, k, v: global_attention(q, k, v, grid), lambda q, k, v: dense_reference(q, k, v, grid), inputs
    )


@pytest.mark.parametrize(
    "grid_q, grid_kv", [(Grid(8, 16), Grid(16, 32)), (Grid(16, 32, "legendre-gauss"), Grid(8, 16))]
)
def test_global_attention_between_grids(grid_q, grid_kv):
    inputs = qkv(grid_q, grid_kv)
    assert_same_outputs_and_gradients(
        lambda q, k, v: global_attention(q, k, v, grid_q, grid_kv),
        lambda q, k, v: dense_reference(q, k, v, grid_kv),
        inputs,
    )


def test_folded_bias_path_equals_mask_path():
    """The GPU half-precision path (log w in an extra q/k channel) checked on CPU in fp32."""
    grid = Grid(10, 20)
    q, k, v = qkv(grid, head_dim=12)
    log_w = log_quadrature_weights(grid, "cpu", torch.float32)
    folded = attention_with_folded_key_bias(q, k, v, log_w, 12**-0.5)
    assert torch.allclose(folded, dense_reference(q, k, v, grid), atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("shape, heads, head_dim", [((64, 128), 1, 64), ((180, 360), 8, 32)])
def test_bfloat16_fold_on_gpu_against_fp32_mask_path(shape, heads, head_dim):
    """The fold (bf16 on CUDA) against the fp32 mask path, outputs and gradients."""
    grid = Grid(*shape)
    q, k, v = (t.detach().cuda() for t in qkv(grid, batch=1, heads=heads, head_dim=head_dim))
    grad = torch.randn_like(q)
    low = [t.bfloat16().requires_grad_() for t in (q, k, v)]
    high = [t.requires_grad_() for t in (q, k, v)]
    out_low = global_attention(*low, grid)
    out_high = global_attention(*high, grid)  # fp32 on CUDA: the log-w mask path
    grads_low = torch.autograd.grad(out_low, low, grad.bfloat16())
    grads_high = torch.autograd.grad(out_high, high, grad)

    def relative(a, b):
        return ((a.float() - b).norm() / b.norm()).item()

    assert relative(out_low, out_high) < 1e-2
    for name, a, b in zip("qkv", grads_low, grads_high, strict=True):
        assert relative(a, b) < 2e-2, name


@pytest.mark.cuda
@pytest.mark.parametrize("head_dim", [32, 64, 128])
def test_bfloat16_fold_keeps_flash_attention_eligible(head_dim):
    """With only FlashAttention allowed, SDPA raises if the folded inputs are not eligible."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    grid = Grid(32, 64)
    q, k, v = (t.detach().cuda().bfloat16().requires_grad_() for t in qkv(grid, head_dim=head_dim))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = global_attention(q, k, v, grid)
        out.float().square().sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(8, 16), (16, 32), pytest.param((33, 64), marks=pytest.mark.slow)])
def test_neighborhood_attention_equals_dense_sdpa(kind, shape):
    grid = Grid(*shape, kind)
    for theta in [default_radius(grid), 0.6]:
        mask = neighborhood_mask_from_distances(grid, theta)
        inputs = qkv(grid, batch=1, heads=2)
        assert_same_outputs_and_gradients(
            lambda q, k, v, t=theta: neighborhood_attention(q, k, v, grid, t),
            lambda q, k, v, m=mask: dense_reference(q, k, v, grid, m),
            inputs,
        )


def test_neighborhood_attention_chunked_recompute(monkeypatch):
    """Row chunks recomputed in the backward give the same outputs and gradients."""
    grid = Grid(16, 32)
    theta = default_radius(grid)
    inputs = qkv(grid)
    expected = neighborhood_attention(*inputs, grid, theta)
    expected_grads = torch.autograd.grad(expected.square().sum(), inputs)
    monkeypatch.setattr(
        importlib.import_module("s2forecast.ops.neighborhood_attention"), "CHUNK_BYTES", 1
    )  # one query row per chunk
    out = neighborhood_attention(*inputs, grid, theta)
    grads = torch.autograd.grad(out.square().sum(), inputs)
    assert torch.allclose(out, expected, atol=1e-6)
    for a, b in zip(grads, expected_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_whole_sphere_radius_is_global_attention():
    grid = Grid(8, 16, "legendre-gauss")
    q, k, v = qkv(grid)
    assert torch.allclose(neighborhood_attention(q, k, v, grid, math.pi), global_attention(q, k, v, grid), atol=1e-6)


def test_custom_scale_and_value_dim():
    grid = Grid(8, 16)
    q, k, _ = qkv(grid, head_dim=8)
    v = torch.randn(2, 3, grid.npoints, 5)
    mask = neighborhood_mask_from_distances(grid, 0.7)
    log_w = log_quadrature_weights(grid, "cpu", torch.float32)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.where(mask, log_w, float("-inf")), scale=0.5)
    assert torch.allclose(neighborhood_attention(q, k, v, grid, 0.7, scale=0.5), ref, atol=1e-5)


def test_float64_inputs_are_exact():
    grid = Grid(8, 16)
    q, k, v = qkv(grid, dtype=torch.float64)
    mask = neighborhood_mask_from_distances(grid, 0.8)
    assert torch.allclose(neighborhood_attention(q, k, v, grid, 0.8), dense_reference(q, k, v, grid, mask), atol=1e-12)
    assert torch.allclose(global_attention(q, k, v, grid), dense_reference(q, k, v, grid), atol=1e-12)


# --- symmetry -----------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["global", "neighborhood"])
def test_exact_equivariance_under_longitude_rolls(op):
    grid = Grid(16, 32, "legendre-gauss")
    q, k, v = (t.detach() for t in qkv(grid))

    def attend(q, k, v):
        if op == "global":
            return global_attention(q, k, v, grid)
        return neighborhood_attention(q, k, v, grid, default_radius(grid))

    def roll(t, shift):
        return t.unflatten(2, grid.shape).roll(shift, dims=3).flatten(2, 3)

    for shift in [1, 5, 31]:
        rolled = attend(roll(q, shift), roll(k, shift), roll(v, shift))
        assert torch.allclose(rolled, roll(attend(q, k, v), shift), atol=1e-6)


# --- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("theta", [0.0, -0.1, math.pi + 0.01, float("nan"), float("inf"), "wide"])
def test_bad_radius(theta):
    grid = Grid(8, 16)
    with pytest.raises(ValueError, match="theta"):
        neighborhood_attention(*qkv(grid), grid, theta)


def test_bad_shapes_and_grids():
    grid = Grid(8, 16)
    q, k, v = qkv(grid)
    with pytest.raises(ValueError, match="128 points but its grid 9x16"):
        global_attention(q, k, v, Grid(9, 16))
    with pytest.raises(ValueError, match="pass the key/value grid"):
        global_attention(q, k, v, grid, Grid(4, 8))
    with pytest.raises(ValueError, match="share head_dim"):
        global_attention(q, k[..., :4], v, grid)
    with pytest.raises(ValueError, match="same number of points"):
        neighborhood_attention(q, k, v[:, :, :-1], grid, 0.3)
    with pytest.raises(ValueError, match="share \\(batch, heads\\)"):
        neighborhood_attention(q, k[:, :2], v[:, :2], grid, 0.3)
    with pytest.raises(ValueError, match="shape \\(batch, heads"):
        global_attention(q[0], k[0], v[0], grid)
    with pytest.raises(ValueError, match="dtype"):
        global_attention(q.double(), k, v, grid)
    with pytest.raises(ValueError, match="Grid"):
        neighborhood_attention(q, k, v, (8, 16), 0.3)
    # empty dims: a ZeroDivisionError (head_dim 0) or a reshape error (batch 0) in some ops, not in others
    for a, b, c in [(q[..., :0], k[..., :0], v), (q[:0], k[:0], v[:0]), (q, k, v[..., :0])]:
        for op in (global_attention, lambda *x: neighborhood_attention(*x, 0.3)):
            with pytest.raises(ValueError, match=r"q, k, v must have at least one batch, head and channel per head"):
                op(a, b, c, grid)
    with pytest.raises(ValueError, match=r"bias must broadcast to \(batch, heads, N_q, N_kv\) = \(2, 3, 128, 128\), "
                       r"got \(3, 1, 128, 128\)"):  # fmt: skip
        global_attention(q, k, v, grid, bias=torch.zeros(3, 1, 128, 128))  # SDPA's own error before


def test_bad_scale_and_integer_inputs():
    grid = Grid(8, 16)
    q, k, v = (t.detach() for t in qkv(grid))
    ops = {
        "global": lambda q, k, v, **kw: global_attention(q, k, v, grid, **kw),
        "neighborhood": lambda q, k, v, **kw: neighborhood_attention(q, k, v, grid, 0.4, **kw),
        "ball": lambda q, k, v, **kw: ball_sparse_attention(q, k, v, grid, ball_size=32, **kw),
    }
    for name, op in ops.items():
        with pytest.raises(ValueError, match=r"^scale must be a finite number .* got 'a'$"):
            op(q, k, v, scale="a")
        for dtype in (torch.int64, torch.int32):
            with pytest.raises(ValueError, match=rf"^q, k, v must be floating point .*, got {dtype}$"):
                op(q.to(dtype), k.to(dtype), v.to(dtype))
        assert torch.allclose(op(q, k, v, scale=torch.tensor(0.3)), op(q, k, v, scale=0.3)), name


@pytest.mark.parametrize("op", ["global", "neighborhood"])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_nan_inputs(op, which):
    grid = Grid(8, 16)
    inputs = [t.detach().clone() for t in qkv(grid)]
    inputs[which][0, 0, 3, 1] = float("nan")
    with pytest.raises(ValueError, match=f"{'qkv'[which]} contains NaN"):
        if op == "global":
            global_attention(*inputs, grid)
        else:
            neighborhood_attention(*inputs, grid, 0.4)


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_infinite_inputs_even_when_they_cancel(value):
    """The finiteness check sums first: +inf and -inf sum to NaN, one inf to inf; both caught."""
    grid = Grid(8, 16)
    q, k, v = (t.detach().clone() for t in qkv(grid))
    k[0, 0, 3, 1] = value
    k[0, 0, 5, 2] = -value
    with pytest.raises(ValueError, match="k contains NaN or infinite values"):
        neighborhood_attention(q, k, v, grid, 0.4)
    k[0, 0, 5, 2] = 0.0
    with pytest.raises(ValueError, match="k contains NaN or infinite values"):
        global_attention(q, k, v, grid)


def test_finite_inputs_whose_sum_overflows_are_accepted():
    """Large finite float16 values overflow a sum; that alone is no error."""
    grid = Grid(8, 16)
    q, k = (torch.randn(1, 1, grid.npoints, 4, dtype=torch.float16) for _ in range(2))
    v = torch.full((1, 1, grid.npoints, 4), 6e4, dtype=torch.float16)
    assert not torch.isfinite(v.sum())  # the case the elementwise fallback exists for
    out = neighborhood_attention(q, k, v, grid, 0.4)
    assert torch.allclose(out.float(), v.float(), rtol=1e-3)


@pytest.mark.parametrize("op", ["global", "neighborhood", "ball_sparse"])
def test_bf16_error_is_that_of_rounding_the_inputs_and_output(op):
    """The log-weight bias is formed less its largest value: log w itself (-10 to -5 at 33x64),
    rounded to bf16, made 2.6x the error of rounding inputs and output alone (a review found it)."""
    grid = Grid(33, 64)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, grid.npoints, 16, generator=g, dtype=torch.float64) for _ in range(3))

    def attend(q, k, v):
        if op == "global":
            return global_attention(q, k, v, grid)
        if op == "neighborhood":
            return neighborhood_attention(q, k, v, grid, theta=0.3, backend="reference")
        return ball_sparse_attention(q, k, v, grid, ball_size=64, branches=("ball",))

    exact = attend(q, k, v)
    rounded = [t.bfloat16() for t in (q, k, v)]
    floor = attend(*(t.double() for t in rounded)).bfloat16().double()  # inputs and output rounded, exact in between
    half = attend(*rounded).double()

    def error(out):
        return float((out - exact).norm() / exact.norm())

    assert error(half) < 1.3 * error(floor), (error(half), error(floor))
