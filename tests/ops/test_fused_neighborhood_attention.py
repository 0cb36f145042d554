"""The fused neighborhood-attention kernels (s2forecast/ops/cuda) against the reference.

Without CUDA, conftest sets TRITON_INTERPRET=1 and the same kernel source runs on CPU
tensors; grids stay small because the interpreter executes every program in Python.
The tests marked ``cuda`` run the compiled kernels at full size on a GPU.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from s2forecast.geometry import Grid
from s2forecast.ops import default_radius, neighborhood_attention, spherical_neighborhood
from s2forecast.ops.neighborhood import neighborhood_mask_from_distances
from s2forecast.ops.neighborhood_attention import _attend_rows
from s2forecast.ops.quadrature_bias import log_quadrature_weights, log_row_weights

pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def tiles(monkeypatch):
    """Force one tile size on all three kernels (the interpreter's default is 16)."""
    import triton

    from s2forecast.ops.cuda import fused_neighborhood_attention as fused

    def force(block_m, block_n):
        config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=4, num_stages=2)
        for kernel in (fused._forward, fused._backward_query, fused._backward_key):
            monkeypatch.setattr(kernel, "configs", [config])
            monkeypatch.setattr(kernel, "cache", {})

    return force


def random_qkv(grid, batch=1, heads=1, head_dim=16, head_dim_v=None, dtype=torch.float32, device=DEVICE):
    shapes = [(batch, heads, grid.npoints, d) for d in (head_dim, head_dim, head_dim_v or head_dim)]
    return [torch.randn(s, dtype=dtype, device=device, requires_grad=True) for s in shapes]


def outputs_and_grads(backend, inputs, grid, theta, grad_out, **kwargs):
    out = neighborhood_attention(*inputs, grid, theta, backend=backend, **kwargs)
    return (out, *torch.autograd.grad(out, inputs, grad_out))


def assert_close_to_reference(inputs, grid, theta, atol=1e-4, **kwargs):
    grad_out = torch.randn(inputs[0].shape[:-1] + inputs[2].shape[-1:], device=inputs[0].device)
    fused = outputs_and_grads("fused", inputs, grid, theta, grad_out.to(inputs[0].dtype), **kwargs)
    reference = outputs_and_grads("reference", [t.double() for t in inputs], grid, theta, grad_out.double(), **kwargs)
    for name, got, want in zip(["out", "dq", "dk", "dv"], fused, reference, strict=True):
        assert got.dtype == inputs[0].dtype
        error = (got.double() - want).abs().max().item()
        assert error <= atol, f"{name}: max error {error:.2e} > {atol:.0e}"


# --- interpreter on CPU (and compiled on GPU): small grids, fp32, tolerance 1e-4 ---------------
# heads=2 in the fast cases checks the per-head offsets; the slow cases (tile and polar-row
# layouts, independent of the head) take one head: the interpreter runs a program per head.
@pytest.mark.parametrize(
    "shape, kind, radius, head_dim, block, heads",
    [
        ((8, 16), "equiangular", "default", 16, (16, 16), 2),  # tile == row
        ((8, 16), "legendre-gauss", "spacing", 32, (16, 16), 2),  # one grid spacing: 5 neighbors
        # two tiles per row, wrapped spans
        pytest.param((12, 32), "equiangular-midpoint", "default", 32, (16, 16), 1, marks=pytest.mark.slow),
        # polar caps: whole key rows (3 for the first row)
        pytest.param((12, 32), "legendre-gauss", "polar", 16, (32, 16), 1, marks=pytest.mark.slow),
        # pole rows, whole polar rows, two tiles per row (two grid spacings: 3 whole key rows for the pole)
        pytest.param((13, 32), "equiangular", "two-spacings", 64, (16, 16), 1, marks=pytest.mark.slow),
        # odd nlon, partial tiles
        pytest.param((12, 15), "equiangular", "polar", 16, (16, 16), 1, marks=pytest.mark.slow),
    ],
)
def test_fused_equals_reference(tiles, shape, kind, radius, head_dim, block, heads):
    grid = Grid(*shape, kind)
    theta = {
        "default": default_radius(grid),
        "spacing": grid.lat_spacing,
        "two-spacings": 2 * grid.lat_spacing,
        "polar": 0.9,
    }[radius]
    if radius in ("polar", "two-spacings"):  # the disks of the polar rows cover several whole rows
        assert (spherical_neighborhood(grid, theta).arc_length[0] == grid.nlon).sum() >= 2
    tiles(*block)
    assert_close_to_reference(random_qkv(grid, batch=1, heads=heads, head_dim=head_dim), grid, theta)


@pytest.mark.slow  # the Triton interpreter: seconds; test_fused_equals_reference stays in test-fast
def test_fused_equals_dense_masked_sdpa(tiles):
    grid = Grid(8, 16, "legendre-gauss")
    theta = 0.7
    tiles(16, 16)
    q, k, v = random_qkv(grid, batch=2, heads=1)
    mask = neighborhood_mask_from_distances(grid, theta).to(q.device)
    bias = torch.where(mask, log_quadrature_weights(grid, q.device, torch.float32), float("-inf"))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    grad_out = torch.randn_like(expected)
    got = neighborhood_attention(q, k, v, grid, theta, backend="fused")
    assert (got - expected).abs().max() <= 1e-5
    for a, b in zip(
        torch.autograd.grad(got, (q, k, v), grad_out), torch.autograd.grad(expected, (q, k, v), grad_out), strict=True
    ):
        assert (a - b).abs().max() <= 1e-5


@pytest.mark.slow  # the Triton interpreter: seconds; test_fused_equals_reference stays in test-fast
def test_whole_sphere_and_value_dim_and_scale(tiles):
    """theta = pi (every row whole), head_dim 24 (not a power of 2), head_dim_v 8, custom scale."""
    grid = Grid(6, 12)
    tiles(16, 16)
    inputs = random_qkv(grid, heads=2, head_dim=24, head_dim_v=8)
    assert_close_to_reference(inputs, grid, math.pi, scale=0.3)


@pytest.mark.parametrize("backend", ["fused", "blocked"])
def test_a_gradient_of_a_gradient_is_refused_not_partial(tiles, backend):
    """The kernels' backward is not differentiable: the fused one's gradients came out of Triton
    without a graph, so a gradient penalty silently left the attention's part out. Refused now, as
    the blocked backend's is (``reference`` differentiates twice)."""
    grid = Grid(4, 8)
    tiles(16, 16)
    q, k, v = random_qkv(grid, head_dim=8)
    out = neighborhood_attention(q, k, v, grid, default_radius(grid), backend=backend)
    (dq,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        (dq.sum() + q.square().sum()).backward()


@pytest.mark.slow  # the Triton interpreter: seconds; test_fused_equals_reference stays in test-fast
def test_strided_inputs(tiles):
    """q, k, v as the (batch, heads, N, head_dim) views of one (batch, N, 3*heads*head_dim)
    projection (gapped), k also broadcast over the batch (overlapping). The output and gradients
    are dense in the inputs' memory order: a layer merges heads and returns gradients as views."""
    grid = Grid(8, 16)
    tiles(16, 16)
    x = torch.randn(2, grid.npoints, 3, 2, 16, device=DEVICE)
    q, v = (x[:, :, i].transpose(1, 2).detach().requires_grad_() for i in (0, 2))
    k = x[:1, :, 1].transpose(1, 2).expand(2, -1, -1, -1).detach().requires_grad_()
    assert not q.is_contiguous() and k.stride(0) == 0
    assert_close_to_reference([q, k, v], grid, 0.5)
    out, dq, dk, dv = outputs_and_grads("fused", [q, k, v], grid, 0.5, torch.randn_like(q))
    for t in (out, dq, dv):
        assert t.transpose(1, 2).is_contiguous()
    assert dk.stride(0) == dk[0].numel()  # the broadcast dim outermost: each row contiguous


@pytest.mark.slow  # the Triton interpreter: seconds; test_fused_equals_reference stays in test-fast
def test_fused_float16(tiles):
    grid = Grid(8, 16)
    tiles(16, 16)
    assert_close_to_reference(random_qkv(grid, heads=2, dtype=torch.float16), grid, 0.6, atol=1e-2)


def test_fused_backend_errors():
    grid = Grid(8, 16)
    q, k, v = random_qkv(grid, dtype=torch.float64)
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        neighborhood_attention(q, k, v, grid, 0.5, backend="fused")
    with pytest.raises(ValueError, match="backend must be one of"):
        neighborhood_attention(q, k, v, grid, 0.5, backend="triton")
    q, k, v = random_qkv(grid, head_dim=272)
    with pytest.raises(ValueError, match="head_dim <= 256"):
        neighborhood_attention(q, k, v, grid, 0.5, backend="fused")


def test_partner_tables_are_transposes():
    from s2forecast.ops.cuda.tables import partner_tables

    grid = Grid(121, 240)
    forward, backward = partner_tables(grid, default_radius(grid), torch.device("cpu"))

    def dense(table):
        out = torch.full((grid.nlat, grid.nlat), -1, dtype=torch.int32)
        for row in range(grid.nlat):
            n = int(table.count[row])
            out[row, table.rows[row, :n].long()] = table.widths[row, :n]
        return out

    assert torch.equal(dense(forward), dense(backward).T)
    # heaviest rows first: polar rows (whole key rows) before the equator (short arcs)
    position = {row: i for i, row in enumerate(forward.order.tolist())}
    assert position[0] < position[grid.nlat // 2] and position[grid.nlat - 1] < position[grid.nlat // 2]


# --- compiled kernels on a GPU ---------------------------------------------------------------
def reference_on_rows(q, k, v, grid, theta, rows, grad_out):
    """fp32 reference output and gradients of sum(out * grad_out) restricted to query ``rows``."""
    neighborhood = spherical_neighborhood(grid, theta)
    batch, heads, _, head_dim = q.shape
    inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    as_rows = [t.reshape(batch * heads, grid.nlat, grid.nlon, -1) for t in inputs]
    log_w = log_row_weights(grid, q.device, torch.float32)
    outputs = [_attend_rows(*as_rows, neighborhood, log_w, head_dim**-0.5, r, r + 1) for r in rows]
    go = grad_out.float().reshape(batch * heads, grid.nlat, grid.nlon, -1)
    loss = sum((out * go[:, r : r + 1]).sum() for out, r in zip(outputs, rows, strict=True))
    return torch.cat(outputs, dim=1), torch.autograd.grad(loss, inputs)


# relative error of the fused kernel against the fp32 reference, outputs and gradients
GPU_TOLERANCES = {torch.bfloat16: (1e-2, 2e-2), torch.float16: (3e-3, 6e-3), torch.float32: (1e-5, 1e-4)}


@pytest.fixture
def two_configurations(monkeypatch):
    """The autotuner chooses between a small and a large tile of its list, not among all of them:
    it compiles every configuration it may choose for each dtype and head dim (three kernels
    each), and with the nine it had then this module outran 200 s on an H200 in its sixth test.
    Only the configuration it picks computes the result compared here;
    test_every_configuration_on_gpu compares each."""
    from s2forecast.ops.cuda import fused_neighborhood_attention as fused

    for kernel in (fused._forward, fused._backward_query, fused._backward_key):
        sizes = {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]): c for c in kernel.configs}
        monkeypatch.setattr(kernel, "configs", [sizes[32, 32], sizes[128, 64]])
        monkeypatch.setattr(kernel, "cache", {})


@pytest.mark.cuda
def test_every_configuration_on_gpu(monkeypatch):
    """Each tile configuration the autotuner may choose, alone (its warps and stages too), in
    float32 (so that a wrong mask shows far above rounding), on a grid whose rows split evenly
    into no tile: 120 points."""
    from s2forecast.ops.cuda import fused_neighborhood_attention as fused

    kernels = (fused._forward, fused._backward_query, fused._backward_key)
    grid = Grid(60, 120)
    inputs = random_qkv(grid, batch=1, heads=2, head_dim=32)
    for configs in zip(*(kernel.configs for kernel in kernels), strict=True):
        for kernel, config in zip(kernels, configs, strict=True):
            monkeypatch.setattr(kernel, "configs", [config])
            monkeypatch.setattr(kernel, "cache", {})
        assert_close_to_reference(inputs, grid, default_radius(grid), atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", list(GPU_TOLERANCES), ids=str)
@pytest.mark.parametrize("shape, batch, heads, head_dim", [((128, 256), 2, 4, 32), ((721, 1440), 1, 2, 32)])
def test_fused_on_gpu_against_fp32_reference(shape, batch, heads, head_dim, dtype, two_configurations):
    grid = Grid(*shape)
    theta = default_radius(grid)
    rows = [0, 1, 2, grid.nlat // 3, grid.nlat // 2, grid.nlat - 2, grid.nlat - 1]
    q, k, v = random_qkv(grid, batch, heads, head_dim, dtype=dtype, device="cuda")
    # the loss only sees the chosen rows, so the reference restricted to them gives every gradient
    grad_out = torch.zeros(batch, heads, grid.npoints, head_dim, device="cuda", dtype=dtype)
    on_rows = grad_out.view(batch, heads, grid.nlat, grid.nlon, head_dim)[:, :, rows]
    grad_out.view(batch, heads, grid.nlat, grid.nlon, head_dim)[:, :, rows] = torch.randn_like(on_rows)
    out = neighborhood_attention(q, k, v, grid, theta, backend="fused")
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    expected_out, expected_grads = reference_on_rows(q, k, v, grid, theta, rows, grad_out)
    got_out = out.reshape(batch * heads, grid.nlat, grid.nlon, head_dim)[:, rows].float()

    def relative(a, b):
        return ((a.float() - b).norm() / b.norm()).item()

    out_tolerance, grad_tolerance = GPU_TOLERANCES[dtype]
    assert relative(got_out, expected_out) < out_tolerance
    for name, a, b in zip("qkv", grads, expected_grads, strict=True):
        assert relative(a, b) < grad_tolerance, name


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-4), (torch.float16, 1e-2)])
def test_fused_on_gpu_full_grid(dtype, atol, two_configurations):
    """Head dim 64 here (32 above): both block widths of the head dim."""
    grid = Grid(128, 256, "legendre-gauss")
    inputs = random_qkv(grid, batch=2, heads=2, head_dim=64, dtype=dtype)
    assert_close_to_reference(inputs, grid, default_radius(grid), atol=atol)
