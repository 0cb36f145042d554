"""The attention ops as functions on (batch, heads, nlat*nlon, head_dim) tensors: each call
chooses its backend (``s2forecast.ops.backends``) and prepares the backend's state for the
grid. Layers (``s2forecast.nn``) choose and prepare once and keep the state as buffers.

Apart from the implementations (``neighborhood_attention``, ``ball_sparse_attention``
modules), which the backends wrap: the backends import those, and these functions import the
backends.
"""

import torch

from s2forecast.geometry import Grid
from s2forecast.ops.backends import choose
from s2forecast.ops.ball_sparse_attention import BRANCHES, check_ball_sparse_sizes, check_branches
from s2forecast.ops.validation import check_grid, check_radius

__all__ = ["ball_sparse_attention", "neighborhood_attention"]


def neighborhood_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grid: Grid,
    theta: float,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Quadrature-weighted softmax attention over the keys within geodesic radius ``theta``.

    Prepares the backend's state (neighborhood structure, tables, log weights) on every call;
    ``s2forecast.nn.S2NeighborhoodAttention`` prepares it once and keeps it as buffers.

    Args:
        q: (batch, heads, nlat*nlon, head_dim) queries, flattened row-major over (lat, lon).
        k: (batch, heads, nlat*nlon, head_dim) keys on the same grid.
        v: (batch, heads, nlat*nlon, head_dim_v) values on the same grid.
        grid: the grid of queries, keys and values.
        theta: neighborhood radius in radians, 0 < theta <= pi.
        scale: logit scale; defaults to 1/sqrt(head_dim).
        backend: "fused" (Triton kernels; CUDA tensors, or CPU under TRITON_INTERPRET=1),
            "blocked" (pure PyTorch over longitude blocks), "reference" (pure PyTorch, whole key
            rows; the oracle) or "auto": fused on CUDA, blocked elsewhere (and for float64);
            see ``s2forecast.ops.backends``.

    Returns:
        (batch, heads, nlat*nlon, head_dim_v), same dtype as ``q``.
    """
    # a q that is no tensor gets its error from the backend's input checks
    device, dtype = (q.device, q.dtype) if isinstance(q, torch.Tensor) else ("cpu", torch.float32)
    chosen = choose("neighborhood", backend, device, dtype)
    check_grid(grid, "grid")
    theta = check_radius(theta)
    return chosen(q, k, v, chosen.prepare(grid, theta, device, dtype), scale)


def ball_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grid: Grid,
    ball_size: int = 256,
    block_size: int = 8,
    select_block: int | None = None,
    top_k: int = 4,
    group_size: int = 8,
    gates: tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None] | None = None,
    branches: tuple[str, ...] = BRANCHES,
    scale: float | None = None,
    compression_window: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Quadrature-weighted ball sparse attention; see the module docstring for the definition.

    Args:
        q: (batch, heads, nlat*nlon, head_dim) queries, flattened row-major over (lat, lon).
        k: (batch, heads, nlat*nlon, head_dim) keys on the same grid.
        v: (batch, heads, nlat*nlon, head_dim_v) values on the same grid.
        grid: the grid of queries, keys and values.
        ball_size: tokens per ball (the ball-tree ordering is built per call; the layer keeps it).
        block_size: tokens pooled into one coarse token; must divide ``ball_size``.
        select_block: tokens per selection block, a multiple of ``block_size`` dividing
            ``ball_size``; defaults to ``block_size``.
        top_k: selection blocks per query group; at most the number of selection blocks
            outside one ball.
        group_size: consecutive (ball-ordered) queries sharing one selection; must divide
            ``ball_size``. 1 selects per query.
        gates: ``(g_ball, g_cmp, g_sel)``, each (batch, heads, nlat*nlon, 1) in grid order or
            None (weight 1); None: every branch weighted 1. Gates of inactive branches are
            checked, not used.
        branches: the active branches, a non-empty subset of ``("ball", "compression", "selection")``.
            Sizes of inactive branches are ignored (not checked): ``block_size`` and
            ``compression_window`` serve compression and selection; ``select_block``,
            ``top_k`` and ``group_size`` the selection. The ball branch alone with one ball
            (``ball_size`` >= nlat*nlon) is global attention.
        scale: logit scale; defaults to 1/sqrt(head_dim).
        compression_window: None: the paper's compression, every query attends to all N /
            block_size coarse tokens (cost N^2 / block_size). An int: multi-level coarse tokens
            (``s2forecast.ops.compression_hierarchy``), ``compression_window`` tokens per level
            and ball, and selection by a top-k descent of the levels: cost O(N log N). Needs
            ``select_block == block_size``.
        backend: where the reference gathers keys per query tile (the multi-level compression
            and the selection), "fused" reads them through index lists with the Triton kernels
            of ``s2forecast.ops.cuda.fused_indexed_attention`` (CUDA tensors, or CPU under
            TRITON_INTERPRET=1) instead of materializing copies of K and V; "reference" gathers
            and calls SDPA; "auto": fused for CUDA tensors other than float64. The ball branch
            and the single-level compression need no gather and run on SDPA either way. The
            ordering and tables are prepared per call (``S2BallSparseAttention`` keeps them).

    Returns:
        (batch, heads, nlat*nlon, head_dim_v) in grid order, same dtype as ``q``.
    """
    # a q that is no tensor gets its error from the backend's input checks
    device, dtype = (q.device, q.dtype) if isinstance(q, torch.Tensor) else ("cpu", torch.float32)
    chosen = choose("ball", backend, device, dtype)
    check_grid(grid, "grid")
    branches = check_branches(branches)
    select_block = check_ball_sparse_sizes(
        grid, ball_size, block_size, select_block, top_k, group_size, branches, compression_window
    )
    coarse = "compression" in branches or "selection" in branches
    state = chosen.prepare(grid, ball_size, block_size if coarse else None, compression_window, device, dtype)
    return chosen(
        q, k, v, state, scale, select_block=select_block, top_k=top_k, group_size=group_size, gates=gates,
        branches=branches,
    )  # fmt: skip
