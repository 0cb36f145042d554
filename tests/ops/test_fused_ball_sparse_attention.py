"""The fused (Triton) path of ball sparse attention against its PyTorch reference.

Without CUDA, conftest sets TRITON_INTERPRET=1 and the kernels run on CPU tensors through the
interpreter, so grids stay small. Both backends share the ordering, the coarse tokens and the
block selection; they differ in how each branch attends (index lists read by the kernel vs
gathered copies and SDPA), which is what these tests compare.
"""

import pytest
import torch
import torch.nn.functional as F

from s2forecast.geometry import Grid
from s2forecast.nn.ball_attention import S2BallSparseAttention
from s2forecast.ops import ball_sparse_attention
from s2forecast.ops.ball_sparse_attention import BRANCHES

pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def random_qkv(grid, batch=1, heads=2, head_dim=16, head_dim_v=None, dtype=torch.float32, device=DEVICE):
    shapes = [(batch, heads, grid.npoints, d) for d in (head_dim, head_dim, head_dim_v or head_dim)]
    return [torch.randn(s, dtype=dtype, device=device, requires_grad=True) for s in shapes]


def outputs_and_grads(inputs, grid, grad_out, **kwargs):
    out = ball_sparse_attention(*inputs, grid, **kwargs)
    return (out, *torch.autograd.grad(out, inputs, grad_out))


def assert_fused_matches_reference(inputs, grid, atol, reference_dtype=torch.float64, **kwargs):
    """Fused in the inputs' dtype against the reference in ``reference_dtype``. The selection
    is shared code run on scores in the inputs' precision: from float32 inputs it picks the
    same blocks as from float64 ones (the tolerance is far below any flip), but from float16
    scores a near tie can pick another block than float64 would, so half-precision inputs
    are compared with the reference in their own dtype (same blocks, two roundings)."""
    grad_out = torch.randn(inputs[0].shape[:-1] + inputs[2].shape[-1:], device=inputs[0].device)
    fused = outputs_and_grads(inputs, grid, grad_out.to(inputs[0].dtype), backend="fused", **kwargs)
    as_reference = [t.detach().to(reference_dtype).requires_grad_() for t in inputs]
    reference = outputs_and_grads(as_reference, grid, grad_out.to(reference_dtype), backend="reference", **kwargs)
    for name, got, want in zip(["out", "dq", "dk", "dv"], fused, reference, strict=True):
        assert got.dtype == inputs[0].dtype
        error = (got.double() - want.double()).abs().max().item()
        assert error <= atol, f"{name}: max error {error:.2e} > {atol:.0e}"


# --- interpreter on CPU (and compiled on GPU): small grids -------------------------------------
@pytest.mark.parametrize(
    "kind, shape, sizes",
    [
        # paper compression; group selection; the flat compression is one tile of all queries
        ("equiangular", (8, 16), dict(ball_size=32, block_size=8, top_k=4, group_size=8)),
        # multi-level compression (3 levels), selection by descent, groups of 2 (tiles below BLOCK_M)
        pytest.param(
            "legendre-gauss",
            (12, 24),
            dict(ball_size=32, block_size=4, top_k=3, group_size=2, compression_window=8),
            marks=pytest.mark.slow,
        ),
        # 180 points in 12 balls of 16: padding slots, partial coarse tokens; selection blocks of 2 blocks
        pytest.param(
            "equiangular-midpoint",
            (12, 15),
            dict(ball_size=16, block_size=2, select_block=4, top_k=5, group_size=4),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_fused_matches_reference(kind, shape, sizes):
    grid = Grid(*shape, kind)
    # the interpreter runs a program per head: the 3-level case, the slowest, takes one (the
    # others check the per-head offsets with two)
    heads = 1 if sizes.get("compression_window") else 2
    assert_fused_matches_reference(random_qkv(grid, heads=heads), grid, atol=1e-4, **sizes)


@pytest.mark.parametrize("branch", ["compression", "selection"])  # the ball branch is SDPA on both backends
def test_each_fused_branch_matches_reference(branch):
    """head_dim 24 (padded to 32 in the kernel), head_dim_v 8, two batches, custom scale."""
    grid = Grid(12, 24)
    inputs = random_qkv(grid, batch=2, heads=1, head_dim=24, head_dim_v=8)
    sizes = dict(ball_size=64, block_size=8, top_k=2, group_size=8, compression_window=16)
    assert_fused_matches_reference(inputs, grid, atol=1e-4, branches=(branch,), scale=0.3, **sizes)


@pytest.mark.slow  # the Triton interpreter: seconds; the per-branch checks stay in test-fast
def test_fused_half_precision():
    grid = Grid(8, 16)
    inputs = random_qkv(grid, dtype=torch.float16)
    sizes = dict(ball_size=32, block_size=4, top_k=2, group_size=8, compression_window=8)
    assert_fused_matches_reference(inputs, grid, atol=2e-2, reference_dtype=torch.float16, **sizes)


@pytest.mark.slow  # the Triton interpreter: seconds; the per-branch checks stay in test-fast
def test_fused_gradients_on_strided_inputs():
    """q, k, v as views of one projection (the layer's layout) give the same values and gradients
    on both backends (the op copies them into slot order first; the kernel's own stride handling
    is tested on strided k and v below)."""
    grid = Grid(8, 16)
    qkv = torch.randn(1, grid.npoints, 3, 2, 16, device=DEVICE, requires_grad=True)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (batch, heads, N, d), non-contiguous
    sizes = dict(ball_size=32, block_size=4, top_k=2, compression_window=8)
    fused = ball_sparse_attention(q, k, v, grid, backend="fused", **sizes)
    (grad_fused,) = torch.autograd.grad(fused.square().sum(), qkv)
    reference = ball_sparse_attention(q, k, v, grid, backend="reference", **sizes)
    (grad_reference,) = torch.autograd.grad(reference.square().sum(), qkv)
    assert torch.allclose(fused, reference, atol=1e-5)
    assert torch.allclose(grad_fused, grad_reference, atol=1e-4)


def test_fused_layer_equals_reference_layer():
    grid = Grid(8, 16, "legendre-gauss")
    fused = S2BallSparseAttention(16, 2, grid, ball_size=32, block_size=4, compression_window=8, backend="fused")
    reference = S2BallSparseAttention(16, 2, grid, ball_size=32, block_size=4, compression_window=8)
    reference.load_state_dict(fused.state_dict())
    x = torch.randn(1, 16, *grid.shape, device=DEVICE)
    assert torch.allclose(fused.to(DEVICE)(x), reference.to(DEVICE)(x), atol=1e-5)
    with pytest.raises(ValueError, match="backend must be one of"):
        S2BallSparseAttention(16, 2, grid, ball_size=32, backend="triton")


def test_indexed_attention_lists_per_head_and_skipped_entries():
    """The kernel on its own: per-(batch, head) key lists with skipped (-1) entries, a key of
    weight zero, strided k and v, against dense masked SDPA in float64, outputs and gradients."""
    from s2forecast.ops.cuda.fused_indexed_attention import fused_indexed_attention

    batch, heads, tiles, rows, keys, listed = 2, 2, 3, 24, 50, 20
    # k and v as strided views of one (batch, keys, 2, heads, 16) tensor; v uses 8 of its 16 channels
    q = torch.randn(batch, heads, tiles * rows, 16, device=DEVICE, requires_grad=True)
    kv = torch.randn(batch, keys, 2, heads, 16, device=DEVICE, requires_grad=True)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1, :, :8].transpose(1, 2)
    index = torch.stack([torch.randperm(keys)[:listed] for _ in range(batch * heads * tiles)])
    index = index.view(batch, heads, tiles, listed).to(DEVICE)
    index[0, 1, 2, :7] = -1
    log_w = torch.randn(keys, device=DEVICE)
    log_w[index[1, 0, 0, 0]] = float("-inf")
    out = fused_indexed_attention(q, k, v, index, log_w, scale=0.3)
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    allowed = torch.zeros(batch, heads, tiles * rows, keys, dtype=torch.bool, device=DEVICE)
    for b in range(batch):
        for h in range(heads):
            for t in range(tiles):
                listed_keys = index[b, h, t][index[b, h, t] >= 0]
                allowed[b, h, t * rows : (t + 1) * rows, listed_keys] = True
    mask = torch.where(allowed, log_w, float("-inf")).double()
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=0.3)
    want = torch.autograd.grad(expected, (q, k, v), grad_out.double())
    assert torch.allclose(out.double(), expected, atol=1e-5)
    for name, a, b in zip("qkv", got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-5), f"d{name}: {(a - b).abs().max()}"
    with pytest.raises(ValueError, match="72 queries do not split into 5 tiles"):
        fused_indexed_attention(q, k, v, index[0, 0, :, :5].T, log_w, scale=0.3)


# --- GPU only: the compiled kernels at full size -------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("window", [None, 256])
def test_cuda_128x256_matches_reference(dtype, atol, window):
    """Ball and compression branches (the selection is shared code; in bf16 close scores may
    pick other blocks, so it is compared in float32 only)."""
    grid = Grid(128, 256)
    branches = BRANCHES if dtype == torch.float32 else ("ball", "compression")
    inputs = random_qkv(grid, batch=2, heads=4, head_dim=32, dtype=dtype)
    assert_fused_matches_reference(inputs, grid, atol=atol, branches=branches, compression_window=window)


@pytest.mark.cuda
def test_cuda_quarter_degree_runs_and_matches_reference(monkeypatch):
    """0.25 degree (1,038,240 points), multi-level compression: forward and backward on the fused
    path, compared with the PyTorch path in float32.

    Both run the same selection code on the same inputs, so they must select the same blocks
    (checked first: a near tie flipped by nondeterministic arithmetic would move a query's whole
    selection branch). With the selection fixed, float32 is far inside the tolerance: the
    PyTorch path in float32 against itself in float64 differs by 1.6e-5 at most (dk, dv) at
    361x720 on CPU, where float32 and float64 selections differ for ~20 query groups
    (scripts/ball_sparse_precision.py)."""
    import importlib

    module = importlib.import_module("s2forecast.ops.ball_sparse_attention")
    descend, selections = module.descend_select_blocks, []

    def recorded(*args, **kwargs):
        selections.append(descend(*args, **kwargs))
        return selections[-1]

    monkeypatch.setattr(module, "descend_select_blocks", recorded)
    grid = Grid(721, 1440)
    inputs = random_qkv(grid, batch=1, heads=4, head_dim=16)
    grad_out = torch.randn_like(inputs[2])
    fused = outputs_and_grads(inputs, grid, grad_out, backend="fused", compression_window=256)
    reference = outputs_and_grads(inputs, grid, grad_out, backend="reference", compression_window=256)
    (fused_blocks, fused_ok), (reference_blocks, reference_ok) = selections
    differ = (fused_blocks != reference_blocks) | (fused_ok != reference_ok)
    assert not differ.any(), f"the two runs selected other blocks for {int(differ.any(-1).sum())} query groups"
    for name, got, want in zip(["out", "dq", "dk", "dv"], fused, reference, strict=True):
        error = (got - want).abs()
        bad = ~(error <= 1e-3)  # NaN counts as bad
        where = bad.nonzero()[:3].tolist()
        assert not bad.any(), (
            f"{name}: max error {error.nan_to_num(float('inf')).max().item():.2e} at {int(bad.sum())} of "
            f"{error.numel()} entries ({int(got.isnan().sum())} NaN fused, {int(want.isnan().sum())} NaN reference), "
            f"first at (batch, head, point, channel) {where}; max |{name}| {want.abs().max().item():.3g}"
        )


def test_autotune_skips_tiles_taller_than_a_query_tile():
    """On a GPU the kernels autotune; tiles of more rows than a selection group only waste work."""
    import triton

    from s2forecast.ops.cuda.fused_indexed_attention import _prune

    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": 32}) for m in (16, 32, 64, 128)]
    assert [c.kwargs["BLOCK_M"] for c in _prune(configs, {"rows_per_tile": 8})] == [16]
    assert [c.kwargs["BLOCK_M"] for c in _prune(configs, {"rows_per_tile": 40})] == [16, 32, 64]
    assert len(_prune(configs, {"rows_per_tile": 256})) == 4
