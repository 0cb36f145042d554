"""Ball sparse attention layer on fields of shape (batch, channels, nlat, nlon)."""

import torch
from torch import nn

from s2forecast.geometry import Grid
from s2forecast.nn.attention import SphericalAttentionLayer
from s2forecast.ops.ball_sparse_attention import BRANCHES, check_ball_sparse_sizes, check_branches
from s2forecast.ops.validation import check_grid


class S2BallSparseAttention(SphericalAttentionLayer):
    """Ball sparse attention (BSA): gated sum of ball, compression and selection attention.

    Every branch is quadrature-weighted softmax attention over a ball-tree ordering of the grid;
    see ``s2forecast.ops.ball_sparse_attention``. The gates are sigmoid(linear(x)) of the query
    input, one per active branch, token and head. Input and output (batch, channels, nlat, nlon)
    on ``grid``.

    Args:
        in_channels, num_heads, out_channels, qk_channels, bias, use_qknorm, dropout,
        position_embedding: as for ``S2Attention`` (position embeddings acting on (q, k) only).
        grid: grid of the input and output fields.
        ball_size: tokens per ball of the ball-tree ordering (paper: 256).
        block_size: tokens pooled into one coarse token (paper: 8); divides ``ball_size``.
        top_k: selected blocks per query group (paper: 4).
        group_size: consecutive queries sharing one selection (paper: 8); divides ``ball_size``.
        branches: active branches, a non-empty subset of ``("ball", "compression", "selection")``;
            the sizes of inactive ones are ignored, as in ``s2forecast.ops.ball_sparse_attention``.
        select_block: tokens per selection block, a multiple of ``block_size``; defaults to it.
        compression_window: None: every query attends to all N / block_size coarse tokens (the
            paper; cost N^2 / block_size). An int: multi-level coarse tokens with this many per
            level and ball, O(N log N) (``s2forecast.ops.compression_hierarchy``); for grids
            where the paper's compression is too costly, e.g. 256 at 0.25 degree.
        backend: "auto" (fused Triton kernels on CUDA, PyTorch elsewhere), "fused" or "reference";
            chosen again when the layer moves to another device or dtype. The ball-tree ordering
            and the coarse-token tables are prepared once, as non-persistent buffers.
    """

    kind = "ball sparse attention"
    op = "ball"

    def __init__(
        self,
        in_channels: int,
        num_heads: int,
        grid: Grid,
        ball_size: int = 256,
        block_size: int = 8,
        top_k: int = 4,
        group_size: int = 8,
        branches: tuple[str, ...] = BRANCHES,
        out_channels: int | None = None,
        qk_channels: int | None = None,
        bias: bool = True,
        use_qknorm: bool = False,
        dropout: float = 0.0,
        position_embedding: nn.Module | None = None,
        select_block: int | None = None,
        compression_window: int | None = None,
        backend: str = "auto",
    ):
        super().__init__(
            in_channels, num_heads, out_channels, qk_channels, bias, use_qknorm, dropout, position_embedding
        )
        self.grid = check_grid(grid, "grid")
        self.branches = check_branches(branches)
        self.select_block = check_ball_sparse_sizes(
            grid, ball_size, block_size, select_block, top_k, group_size, self.branches, compression_window
        )
        self.ball_size = ball_size
        self.block_size = block_size
        self.top_k = top_k
        self.group_size = group_size
        self.compression_window = compression_window
        self.gate_proj = nn.Linear(in_channels, len(self.branches) * num_heads, bias=True)
        self._init_backend(backend, self.grid, self.grid)

    def _prepare(self, backend, device, dtype):
        coarse = "compression" in self.branches or "selection" in self.branches
        block_size = self.block_size if coarse else None  # the ball branch alone: no coarse tokens
        return backend.prepare(self.grid, self.ball_size, block_size, self.compression_window, device, dtype)

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None, value: torch.Tensor | None = None):
        """query, key and value (defaults: query) all on ``grid``; the gates come from ``query``."""
        q, k, v = self._project(query, key, value, self.grid, self.grid)
        batch, n = query.shape[0], self.grid.npoints
        gate_logits = self.gate_proj(query.flatten(2).transpose(1, 2))  # (batch, N, branches * heads)
        gate = torch.sigmoid(gate_logits).view(batch, n, len(self.branches), self.num_heads)
        gate = gate.permute(2, 0, 3, 1).unsqueeze(-1)  # (branches, batch, heads, N, 1)
        gates = tuple(gate[self.branches.index(b)] if b in self.branches else None for b in BRANCHES)
        out = self._attention_backend(
            q, k, v, self._state(), select_block=self.select_block, top_k=self.top_k, group_size=self.group_size,
            gates=gates, branches=self.branches,
        )  # fmt: skip
        return self._merge(out, self.grid)

    def extra_repr(self) -> str:
        return (
            f"grid={self.grid}, num_heads={self.num_heads}, branches={self.branches}, ball_size={self.ball_size}, "
            f"block_size={self.block_size}, select_block={self.select_block}, top_k={self.top_k}, "
            f"group_size={self.group_size}, compression_window={self.compression_window}, "
            f"backend={self._attention_backend.name}"
        )
