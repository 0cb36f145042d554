"""The longitude-blocked CPU path of neighborhood attention against the row-band reference."""

import importlib
import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from s2forecast.geometry import Grid
from s2forecast.nn import S2NeighborhoodAttention
from s2forecast.ops import default_radius, neighborhood_attention, spherical_neighborhood
from s2forecast.ops.neighborhood import neighborhood_mask_from_distances
from s2forecast.ops.neighborhood_attention import neighborhood_attention_blocked, neighborhood_attention_reference
from s2forecast.ops.neighborhood_blocks import longitude_blocks

attention_module = importlib.import_module("s2forecast.ops.neighborhood_attention")

# (shape, kind): odd sizes, block sizes that do not divide nlon, every quadrature
GRIDS = [
    ((8, 16), "equiangular"),
    ((7, 13), "equiangular"),
    ((12, 15), "legendre-gauss"),
    ((9, 20), "equiangular-midpoint"),
    ((16, 32), "equiangular"),
]


def radii(grid):
    """One grid spacing, the default, a wide disk and the whole sphere."""
    return [grid.lat_spacing, default_radius(grid), 1.3, math.pi]


def inputs(grid, batch=2, heads=3, head_dim=8, head_dim_v=8, dtype=torch.float32):
    shapes = [(batch, heads, grid.npoints, d) for d in (head_dim, head_dim, head_dim_v)]
    return tuple(torch.randn(shape, dtype=dtype, requires_grad=True) for shape in shapes)


def assert_matches_reference(grid, theta, tensors, block=None, atol=1e-5):
    neighborhood = spherical_neighborhood(grid, theta)
    scale = tensors[0].shape[-1] ** -0.5
    out = neighborhood_attention_blocked(*tensors, longitude_blocks(neighborhood, block), scale)
    ref = neighborhood_attention_reference(*tensors, neighborhood, scale)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.allclose(out, ref, atol=atol, rtol=0), (out - ref).abs().max()
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, tensors, grad)
    want = torch.autograd.grad(ref, tensors, grad)
    for name, a, b in zip("qkv", got, want, strict=True):
        assert torch.allclose(a, b, atol=atol, rtol=0), f"d{name}: {(a - b).abs().max()}"


# --- layout ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, kind", GRIDS)
@pytest.mark.parametrize("block", [None, 1, 3, 4, 8, 64])
def test_blocks_hold_each_neighbor_exactly_once(shape, kind, block):
    """Every (query, key) pair marked inside is a neighbor, and every neighbor is marked once:
    a key listed twice would count twice in the softmax."""
    grid = Grid(*shape, kind)
    nlat, nlon = grid.shape
    for theta in radii(grid):
        blocks = longitude_blocks(spherical_neighborhood(grid, theta), block)
        count = torch.zeros(grid.npoints, grid.npoints, dtype=torch.int64)
        rows_seen = []
        for group in blocks.groups:
            rows = group.rows.numel()
            keys = group.key_points(0, rows)  # (nblocks, rows, K)
            inside = group.inside(0, rows)  # (rows, block, K)
            for r, row in enumerate(group.rows.tolist()):
                for b in range(group.nblocks):
                    for i in range(group.block):
                        col = b * group.block + i
                        if col >= nlon:  # the wrapped repeat of a column: its output is dropped
                            continue
                        count[row * nlon + col].index_add_(0, keys[b, r], inside[r, i].long())
            rows_seen += group.rows.tolist()
        assert sorted(rows_seen) == list(range(nlat))
        first_positions = [g.query_points(0, g.rows.numel()) for g in blocks.groups]
        firsts = torch.cat([points[first] for points, first in first_positions])
        assert torch.equal(firsts.sort().values, torch.arange(grid.npoints))  # each query once
        expected = neighborhood_mask_from_distances(grid, theta).long()
        assert torch.equal(count, expected), (block, theta)


def test_block_size_follows_the_disk():
    """Whole-row blocks near the poles, where the disks cover whole rows; short blocks at the
    equator, where they are narrow arcs."""
    grid = Grid(64, 128)
    blocks = longitude_blocks(spherical_neighborhood(grid, default_radius(grid)))
    block_of_row = {row: group.block for group in blocks.groups for row in group.rows.tolist()}
    assert block_of_row[0] == block_of_row[63] == 128
    assert block_of_row[32] < 32
    # and the keys scored per query are well below the whole rows of the band (896 here)
    scored = sum(g.rows.numel() * g.nblocks * g.block * g.keys for g in blocks.groups) / grid.npoints
    assert scored < 0.4 * 7 * 128


def test_layout_is_rebuilt_not_cached():
    grid = Grid(16, 32)
    first = longitude_blocks(spherical_neighborhood(grid, 0.4))
    again = longitude_blocks(spherical_neighborhood(Grid(16, 32), 0.4))
    assert first is not again and len(first.groups) == len(again.groups)
    for a, b in zip(first.groups, again.groups, strict=True):
        assert a.block == b.block and torch.equal(a.rows, b.rows) and torch.equal(a.key_offset, b.key_offset)


@pytest.mark.parametrize("block", [0, -4, 2.5, "8", True])
def test_bad_block_size_is_one_clear_error(block):
    neighborhood = spherical_neighborhood(Grid(8, 16), 0.5)
    with pytest.raises(ValueError, match=r"block must be a positive number of longitudes, got"):
        longitude_blocks(neighborhood, block)


# --- outputs and gradients ------------------------------------------------------------------
@pytest.mark.parametrize("shape, kind", GRIDS)
def test_blocked_equals_reference(shape, kind):
    grid = Grid(*shape, kind)
    for theta in radii(grid):
        assert_matches_reference(grid, theta, inputs(grid))


@pytest.mark.parametrize("block", [1, 3, 5, 16])
def test_forced_block_sizes_equal_reference(block):
    grid = Grid(7, 13)
    assert_matches_reference(grid, default_radius(grid), inputs(grid, heads=2), block=block)


@pytest.mark.parametrize("heads, head_dim, head_dim_v", [(1, 4, 4), (4, 8, 5), (2, 16, 12)])
def test_heads_and_value_dims(heads, head_dim, head_dim_v):
    grid = Grid(12, 15, "legendre-gauss")
    tensors = inputs(grid, batch=1, heads=heads, head_dim=head_dim, head_dim_v=head_dim_v)
    assert_matches_reference(grid, 0.5, tensors)


@pytest.mark.parametrize("shape, kind", GRIDS[:3])
def test_float64_matches_reference_to_rounding(shape, kind):
    grid = Grid(*shape, kind)
    for theta in radii(grid):
        assert_matches_reference(grid, theta, inputs(grid, dtype=torch.float64), atol=1e-12)


@pytest.mark.slow  # gradcheck: about 9 s on CPU
def test_gradcheck_float64():
    grid = Grid(5, 7)
    blocks = longitude_blocks(spherical_neighborhood(grid, 0.9), 3)  # a wrapped last block
    tensors = inputs(grid, batch=1, heads=2, head_dim=3, head_dim_v=2, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda q, k, v: neighborhood_attention_blocked(q, k, v, blocks, 0.7), tensors)


def test_one_row_chunks_equal_whole_groups(monkeypatch):
    """Splitting the groups by memory (one query row per SDPA call) changes nothing."""
    grid = Grid(16, 32)
    tensors = inputs(grid)
    blocks = longitude_blocks(spherical_neighborhood(grid, default_radius(grid)))
    out = neighborhood_attention_blocked(*tensors, blocks, 0.3)
    grads = torch.autograd.grad(out.square().sum(), tensors)
    monkeypatch.setattr(attention_module, "BLOCK_CHUNK_BYTES", 1)
    out_chunked = neighborhood_attention_blocked(*tensors, blocks, 0.3)
    grads_chunked = torch.autograd.grad(out_chunked.square().sum(), tensors)
    assert torch.allclose(out_chunked, out, atol=1e-6, rtol=0)
    for a, b in zip(grads_chunked, grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_reference_chunked_recompute_still_agrees(monkeypatch):
    """The oracle itself, with its row chunks recomputed in the backward, against the dense mask."""
    grid = Grid(9, 20, "equiangular-midpoint")
    theta = default_radius(grid)
    tensors = inputs(grid, dtype=torch.float64)
    neighborhood = spherical_neighborhood(grid, theta)
    whole = neighborhood_attention_reference(*tensors, neighborhood, 0.5)
    monkeypatch.setattr(attention_module, "CHUNK_BYTES", 1)
    chunked = neighborhood_attention_reference(*tensors, neighborhood, 0.5)
    assert torch.allclose(chunked, whole, atol=1e-12, rtol=0)


def test_scratch_buffers_never_leak_into_results():
    """The gathers reuse scratch tensors: an output or gradient of one call stays as it was
    through later calls on other grids and inputs."""
    grid, other = Grid(16, 32), Grid(12, 24)
    tensors = inputs(grid)
    blocks = longitude_blocks(spherical_neighborhood(grid, 0.4))
    out = neighborhood_attention_blocked(*tensors, blocks, 0.3)
    grads = torch.autograd.grad(out.square().sum(), tensors)
    kept = [t.clone() for t in (out, *grads)]
    other_blocks = longitude_blocks(spherical_neighborhood(other, 0.9))
    for _ in range(2):
        other_tensors = inputs(other, batch=3, head_dim=16, head_dim_v=4)
        again = neighborhood_attention_blocked(*other_tensors, other_blocks, 0.2)
        torch.autograd.grad(again.sum(), other_tensors)
    for before, now in zip(kept, (out, *grads), strict=True):
        assert torch.equal(before, now)


def test_threads_do_not_share_scratch_buffers():
    """Two threads attending at once (scratch tensors are per thread) both get the reference."""
    grid = Grid(16, 32)
    neighborhood = spherical_neighborhood(grid, default_radius(grid))
    blocks = longitude_blocks(neighborhood)
    cases = [tuple(t.detach() for t in inputs(grid, heads=h)) for h in (1, 2, 3, 4)]
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda qkv: [neighborhood_attention_blocked(*qkv, blocks, 0.3) for _ in range(3)], cases))
    for qkv, repeats in zip(cases, outs, strict=True):
        ref = neighborhood_attention_reference(*qkv, neighborhood, 0.3)
        assert all(torch.allclose(out, ref, atol=1e-5, rtol=0) for out in repeats)


def test_backward_keeps_only_the_inputs():
    """Memory: nothing but q, k, v is saved for the backward (no gathered keys, no mask)."""
    grid = Grid(16, 32)
    tensors = inputs(grid)
    out = neighborhood_attention_blocked(*tensors, longitude_blocks(spherical_neighborhood(grid, 0.4)), 0.3)
    saved = out.grad_fn.saved_tensors
    assert len(saved) == 3 and all(s.data_ptr() == t.data_ptr() for s, t in zip(saved, tensors, strict=True))


# --- which path runs -----------------------------------------------------------------------
def test_auto_runs_the_blocked_path_on_cpu_and_reference_stays_selectable():
    grid = Grid(12, 15, "legendre-gauss")
    theta = default_radius(grid)
    q, k, v = (t.detach() for t in inputs(grid))
    scale = q.shape[-1] ** -0.5
    neighborhood = spherical_neighborhood(grid, theta)
    blocked = neighborhood_attention_blocked(q, k, v, longitude_blocks(neighborhood), scale)
    reference = neighborhood_attention_reference(q, k, v, neighborhood, scale)
    assert torch.equal(neighborhood_attention(q, k, v, grid, theta), blocked)
    assert torch.equal(neighborhood_attention(q, k, v, grid, theta, backend="reference"), reference)


def test_layer_default_equals_reference_backend():
    grid = Grid(9, 20)
    torch.manual_seed(1)
    layer = S2NeighborhoodAttention(16, 2, grid)
    reference = S2NeighborhoodAttention(16, 2, grid, backend="reference")
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(2, 16, *grid.shape, requires_grad=True)
    out, ref = layer(x), reference(x)
    assert torch.allclose(out, ref, atol=1e-5, rtol=0)
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    (grad_ref,) = torch.autograd.grad(ref.square().sum(), x)
    assert torch.allclose(grad, grad_ref, atol=1e-5, rtol=0)


def test_bfloat16_under_autocast_matches_reference():
    """Forward and the backward's recomputation in the inputs' dtype, as the reference does."""
    grid = Grid(8, 16)
    tensors = tuple(t.detach().bfloat16().requires_grad_() for t in inputs(grid, heads=2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert_matches_reference(grid, 0.6, tensors, atol=3e-2)
