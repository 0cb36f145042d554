"""Ball sparse attention (BSA) on the sphere: pure-PyTorch reference.

BSA ("Ball Sparse Attention for Large-scale Geometries", after NSA) mixes three sparse
branches, each a quadrature-weighted softmax attention like eq. (26) of the attention paper
(logits q.k * scale + log w_j), over a sequence ordered by a ball tree
(``s2forecast.ops.ball_tree``), so that consecutive runs of tokens are compact patches:

  ball         full attention among the ``ball_size`` tokens of each ball (block diagonal).
  compression  every block of ``block_size`` consecutive tokens is pooled into one coarse
               token: key and value are the w-weighted means of the block's keys and values,
               its log-weight is log(sum of w in the block), so a coarse token stands for the
               area of its block and the coarse softmax is again a quadrature. Every query
               attends to every coarse token (global receptive field).
  selection    every group of ``group_size`` consecutive queries (1: per query) picks the
               ``top_k`` selection blocks (``select_block`` consecutive tokens, a multiple of
               ``block_size``) with the highest coarse score, EXCLUDING the blocks of the
               group's own ball (the ball branch covers them), and attends at full resolution,
               with quadrature weights, to the tokens of those blocks.

  output = g_ball * out_ball + g_cmp * out_cmp + g_sel * out_sel   (gates per query and head)

Selection details:
  - coarse logit of query t and compression block j: s_tj = scale * q_t.k_cmp_j + log W_j,
    i.e. the compression branch's logits. A selection block J of r = select_block / block_size
    compression blocks scores logsumexp_{j in J} s_tj: the log of its unnormalized coarse
    attention mass, NSA's summed importance (r = 1: the coarse logit itself).
  - groups: the scores of a group are those of its mean query (mean over the group's real,
    non-padding queries; BSA's pooled q_p). Since s is linear in q this equals the group mean
    of s_tj when r = 1.
  - selection is per (batch, head, group); scores and the top-k carry no gradient (as in NSA);
    gradients flow through the attention over the selected tokens.
  - a selected block with a score of -inf (only possible when fewer than ``top_k`` blocks outside
    the own ball have any real point, or padding) is masked out.

Padding: with N not a multiple of ``ball_size`` the ordering has padding slots (see
``ball_tree``). They get quadrature weight 0 (log-weight -inf): never attended to, never pooled
(a block made only of padding gets W = 0 and is neither attended to nor selected), and their
outputs are dropped when the result is put back into grid order. Every ball holds real points,
so no softmax is empty.

Gates: ``gates=None`` weighs every active branch by 1 (plain sum). ``S2BallSparseAttention``
computes them as sigmoid(linear(x)) per token and head.

Longitude rolls: the ball-tree ordering is not invariant under longitude rolls, so BSA is not
exactly roll-equivariant (unlike global and neighborhood attention). The ball branch at a point
is equivariant exactly when its ball, rolled, is again a ball; with ``ball_size >= N`` the ball
branch alone is global attention and exactly equivariant.

Multi-level compression (``compression_window=W``, ``s2forecast.ops.compression_hierarchy``):
the compression branch attends to coarse tokens that grow with ball-tree distance (each point of
the sphere still represented exactly once per query, so still a quadrature), and the selection
finds its blocks by a top-k descent of the levels (``descend_select_blocks``) instead of scoring
all N / l blocks: greedy, it never reaches a block whose coarse parent scores low, so for W < N / l
its blocks are not always the exact top-k. W >= N / l is the paper's compression exactly.

Costs per (batch, head), N points, head_dim d, ball size S, block size l, group size g,
top_k K, selection block l', L levels of W coarse tokens:
  ball         N * S * d            logits N * S (not materialized by SDPA's fused kernels)
  compression  N * (N / l) * d      the paper's: quadratic / l
               N * L * W * d        multi-level (L = 1 + ceil(log_l(N / (l * W))))
  scoring      (N / g) * (N / l) * d; the (N / g) x (N / l) score matrix is materialized in
               chunks under no_grad (``SCORE_CHUNK_ELEMENTS``); multi-level: (N / g) * L * (W + K * l) * d
  selection    N * K * l' * d; gathered keys/values (B, H, N/g, K*l', d) are materialized by
               the reference backend, not by the fused one
No N x N tensor is built.
"""

import math
from dataclasses import replace
from typing import NamedTuple

import torch
import torch.nn.functional as F

from s2forecast.geometry import Grid
from s2forecast.ops.ball_tree import BallOrdering, ball_ordering
from s2forecast.ops.compression_hierarchy import CompressionHierarchy, check_compression_window, compression_hierarchy
from s2forecast.ops.prepared import to_device
from s2forecast.ops.quadrature_bias import bias_dtype, log_quadrature_weights
from s2forecast.ops.validation import check_attention_inputs, check_positive_int, check_scale
from s2forecast.user_errors import UserError

BRANCHES = ("ball", "compression", "selection")
# elements of one chunk of the (batch, heads, groups, coarse blocks) selection-score tensor
SCORE_CHUNK_ELEMENTS = 2**24
# scored key elements per chunk of the multi-level descent (larger: fewer launches on a GPU)
DESCENT_CHUNK_ELEMENTS = 2**27


class BallSparseState(NamedTuple):
    """What ball sparse attention precomputes for a grid and its sizes, on one device.

    Attributes:
        ordering: the ball-tree ordering (its tensors on the device).
        index: (M,) int64 grid point of every slot (padding: point 0), M = padded N.
        log_w: (M,) log quadrature weight of every slot, -inf at padding, in bias_dtype(inputs).
        hierarchy: the coarse-token levels (tables on the device; none with a single level,
            where every ball attends to every token); None without coarse tokens (the ball
            branch alone).
    """

    ordering: BallOrdering
    index: torch.Tensor
    log_w: torch.Tensor
    hierarchy: CompressionHierarchy | None


def prepare_ball_sparse(
    grid: Grid,
    ball_size: int,
    block_size: int | None,
    compression_window: int | None,
    device="cpu",
    dtype=torch.float32,
) -> BallSparseState:
    """The state of ``ball_sparse_attention`` on ``device`` for inputs of ``dtype`` (sizes as
    there; ``check_ball_sparse_sizes`` validates them). ``block_size=None``: no coarse tokens,
    for the ball branch alone (``compression_window`` is then ignored)."""
    ordering = to_device(ball_ordering(grid, ball_size), device)
    index = ordering.gather_index
    log_w = log_quadrature_weights(grid, device, bias_dtype(dtype)).index_select(0, index)
    log_w = log_w.masked_fill(ordering.is_padding, float("-inf"))
    if block_size is None:
        return BallSparseState(ordering, index, log_w, None)
    hierarchy = compression_hierarchy(ordering.num_balls, ball_size, block_size, compression_window)
    if hierarchy.num_levels == 1:  # the single level reads no table: keep none on the device
        hierarchy = replace(hierarchy, table=hierarchy.table[:, :0], valid=hierarchy.valid[:, :0])
    return BallSparseState(ordering, index, log_w, to_device(hierarchy, device))


def attend_ball_sparse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: BallSparseState,
    scale: float | None = None,
    select_block: int | None = None,
    top_k: int = 4,
    group_size: int = 8,
    gates=None,
    branches: tuple[str, ...] = BRANCHES,
    fused: bool = False,
) -> torch.Tensor:
    """``ball_sparse_attention`` on a prepared ``state``: validates q, k, v, the sizes against
    the state's grid and the gates, then attends (Triton kernels for the gathers when ``fused``).
    Shapes as for ``ball_sparse_attention``."""
    ordering, index, log_w, hierarchy = state
    grid, ball_size = ordering.grid, ordering.ball_size
    check_attention_inputs(q, k, v, grid, grid)
    branches = check_branches(branches)
    coarse = "compression" in branches or "selection" in branches
    if coarse and hierarchy is None:
        raise UserError(
            f"branches={branches} need coarse tokens, but this state was prepared without (block_size=None); "
            "prepare it with the layer's block_size"
        )
    block_size = hierarchy.block_size if coarse else None
    window = hierarchy.window if coarse and hierarchy.num_levels > 1 else None
    select_block = check_ball_sparse_sizes(
        grid, ball_size, block_size, select_block, top_k, group_size, branches, window
    )
    gates = _check_gates(gates, q)
    scale = check_scale(scale, q.shape[-1])
    log_w = log_w.to(q.device, bias_dtype(q.dtype))
    qs, ks, vs = (t.index_select(2, index) for t in (q, k, v))  # (batch, heads, padded N, d)

    outputs = {}
    if "ball" in branches:
        outputs["ball"] = _ball_branch(qs, ks, vs, log_w, ball_size, scale)
    if "compression" in branches or "selection" in branches:
        levels = coarse_levels(ks, vs, log_w, block_size, hierarchy)
        if "compression" in branches:
            outputs["compression"] = _compression_branch(qs, levels, hierarchy, ball_size, scale, fused)
        if "selection" in branches:
            if hierarchy.num_levels == 1:
                k_cmp, _, log_w_cmp = levels[0]
                blocks, block_ok = select_blocks(
                    qs, k_cmp, log_w_cmp, ordering, block_size, select_block, top_k, group_size, scale
                )
            else:
                blocks, block_ok = descend_select_blocks(qs, levels, hierarchy, ordering, top_k, group_size, scale)
            outputs["selection"] = _selection_branch(qs, ks, vs, log_w, blocks, block_ok, select_block, scale, fused)

    out = None
    for name, gate in zip(BRANCHES, gates, strict=True):
        if name not in outputs:
            continue
        term = outputs[name] if gate is None else outputs[name] * gate.index_select(2, index)
        out = term if out is None else out + term
    return out.index_select(2, ordering.inverse).to(q.dtype)


# --- configuration checks -------------------------------------------------------------------
def check_branches(branches) -> tuple[str, ...]:
    """The active branches as a tuple in canonical order; ValueError for unknown or no branches."""
    if isinstance(branches, str):
        branches = (branches,)
    branches = tuple(branches)
    unknown = [b for b in branches if b not in BRANCHES]
    if unknown or not branches or len(set(branches)) != len(branches):
        raise UserError(f"branches must be a non-empty subset of {BRANCHES} without repeats, got {branches!r}")
    return tuple(b for b in BRANCHES if b in branches)


def check_ball_sparse_sizes(
    grid: Grid, ball_size, block_size, select_block, top_k, group_size, branches=BRANCHES, compression_window=None
) -> int | None:
    """Validate the BSA sizes the active ``branches`` use, for ``grid``; returns ``select_block``
    (default ``block_size``; None without the selection branch).

    Sizes of inactive branches are not looked at: ``block_size`` and ``compression_window`` belong
    to the compression and selection branches, ``select_block``, ``top_k`` and ``group_size`` to
    the selection. Blocks and groups must tile balls exactly, so that no block or group straddles
    two balls (the own-ball exclusion of the selection is per group).
    """
    ball_size = check_positive_int("ball_size", ball_size)
    selection = "selection" in branches
    if "compression" not in branches and not selection:
        return None
    block_size = check_positive_int("block_size", block_size)
    if ball_size % block_size != 0:
        raise UserError(
            f"ball_size={ball_size} must be a multiple of block_size={block_size} so that compression blocks "
            "tile the balls; powers of two (e.g. ball_size=256, block_size=8) work best"
        )
    check_compression_window(compression_window, ball_size, block_size)
    if not selection:
        return None
    select_block = block_size if select_block is None else check_positive_int("select_block", select_block)
    if top_k == 0:  # the way one would try to switch selection off
        raise UserError(
            "top_k must be a positive integer, got 0; to leave out selection drop 'selection' from branches"
        )
    top_k = check_positive_int("top_k", top_k)
    group_size = check_positive_int("group_size", group_size)
    if select_block % block_size != 0 or ball_size % select_block != 0:
        raise UserError(
            f"select_block={select_block} must be a multiple of block_size={block_size} and divide "
            f"ball_size={ball_size}; the default select_block=None uses block_size"
        )
    if ball_size % group_size != 0:
        raise UserError(
            f"group_size={group_size} must divide ball_size={ball_size} so that a selection group lies in one "
            "ball; use a power of two such as block_size"
        )
    if compression_window is not None and select_block != block_size:
        raise UserError(
            f"select_block={select_block} must equal block_size={block_size} with compression_window set: the "
            "multi-level selection picks level-1 coarse tokens; leave select_block=None"
        )
    num_balls = math.ceil(grid.npoints / ball_size)
    outside = (num_balls - 1) * (ball_size // select_block)
    if top_k > outside:
        raise UserError(
            f"top_k={top_k} exceeds the {outside} selection blocks outside a query's ball (grid "
            f"{grid.nlat}x{grid.nlon} = {grid.npoints} points in {num_balls} ball(s) of {ball_size}); "
            "lower top_k or ball_size, or drop 'selection' from branches"
        )
    return select_block


def _check_gates(gates, q: torch.Tensor):
    if gates is None:
        return (None, None, None)
    if not isinstance(gates, tuple | list) or len(gates) != len(BRANCHES):
        raise UserError("gates must be None or a tuple (g_ball, g_cmp, g_sel) of tensors (or None)")
    expected = (*q.shape[:3], 1)
    for name, gate in zip(BRANCHES, gates, strict=True):
        if gate is not None and (not isinstance(gate, torch.Tensor) or tuple(gate.shape) != expected):
            got = tuple(gate.shape) if isinstance(gate, torch.Tensor) else type(gate).__name__
            raise UserError(f"the {name} gate must have shape (batch, heads, nlat*nlon, 1) = {expected}, got {got}")
        if gate is not None and not gate.is_cuda and not torch.isfinite(gate).all():  # as q, k, v (not on CUDA)
            raise UserError(f"the {name} gate contains NaN or infinite values")
    return tuple(gates)


# --- sequence layout ------------------------------------------------------------------------
def slot_log_weights(grid: Grid, ball_size: int, device="cpu", dtype=torch.float32) -> torch.Tensor:
    """(padded N,) log quadrature weight of every slot of the ball ordering, -inf at padding."""
    ordering = ball_ordering(grid, ball_size)
    log_w = log_quadrature_weights(grid, device, dtype).index_select(0, ordering.gather_index.to(device))
    return log_w.masked_fill(ordering.is_padding.to(device), float("-inf"))


# --- branches -------------------------------------------------------------------------------
def fused_indexed_attention(q, k, v, key_index, log_w, scale):
    """The Triton path (imported on first use: Triton is only needed for the fused backend)."""
    from s2forecast.ops.cuda.fused_indexed_attention import fused_indexed_attention as fused

    return fused(q, k, v, key_index, log_w, scale)


def _ball_branch(qs, ks, vs, log_w, ball_size: int, scale: float) -> torch.Tensor:
    """Block-diagonal attention: (batch, heads, padded N, d) -> (batch, heads, padded N, d_v)."""
    batch, heads, length, _ = qs.shape
    balls = length // ball_size

    def split(t):
        return t.reshape(batch * heads, balls, ball_size, t.shape[-1])

    mask = log_w.view(1, balls, 1, ball_size).to(qs.dtype)
    out = F.scaled_dot_product_attention(split(qs), split(ks), split(vs), attn_mask=mask, scale=scale)
    return out.reshape(batch, heads, length, -1)


def compress_blocks(ks: torch.Tensor, vs: torch.Tensor, log_w: torch.Tensor, block_size: int):
    """Quadrature-weighted mean pooling of consecutive blocks (ball order).

    Args:
        ks: (batch, heads, M, d) keys, vs: (batch, heads, M, d_v) values, M a multiple of block_size.
        log_w: (M,) log quadrature weight per token (-inf at padding).

    Returns:
        k_cmp (batch, heads, M/block_size, d), v_cmp (..., d_v): w-weighted block means;
        log_w_cmp (M/block_size,): log of the summed weights (-inf for a block of padding only).
    """
    weights = torch.exp(log_w).view(-1, block_size)
    total = weights.sum(-1)
    share = (weights / total[:, None].clamp_min(torch.finfo(total.dtype).tiny)).to(ks.dtype)  # 0 in a padding block

    def pool(t):
        return (t.unflatten(2, (-1, block_size)) * share[:, :, None]).sum(-2)

    return pool(ks), pool(vs), torch.log(total)


def coarse_levels(ks, vs, log_w, block_size: int, hierarchy: CompressionHierarchy):
    """Coarse keys, values and log-weights of every level of ``hierarchy``, level 1 first.

    Level 1 pools ``block_size`` slots, each level above pools ``block_size`` tokens of the one
    below; every level is padded with weightless tokens to its ``hierarchy.level_sizes`` entry
    (which the table's offsets count), so every token holds the w-weighted mean of its slots.
    Returns a list of (k (batch, heads, n, d), v (..., d_v), log_w (n,)).
    """
    levels = []
    k, v, lw = ks, vs, log_w
    for size in hierarchy.level_sizes:
        k, v, lw = compress_blocks(k, v, lw, block_size)
        missing = size - k.shape[2]  # weightless tokens so that the level above pools whole blocks
        if missing:
            k, v = F.pad(k, (0, 0, 0, missing)), F.pad(v, (0, 0, 0, missing))
            lw = F.pad(lw, (0, missing), value=float("-inf"))
        levels.append((k, v, lw))
    return levels


def _compression_branch(
    qs, levels, hierarchy: CompressionHierarchy, ball_size: int, scale: float, fused: bool = False
) -> torch.Tensor:
    """Attention of every query to its coarse tokens: (batch, heads, M, d) -> (batch, heads, M, d_v).

    One level: one key set shared by all queries, plain SDPA on either backend. Several levels:
    per-ball key lists, read through the table by the fused kernel or gathered for SDPA.
    """
    if hierarchy.num_levels == 1:
        k_cmp, v_cmp, log_w_cmp = levels[0]
        mask = log_w_cmp.view(1, 1, 1, -1).to(qs.dtype)
        return F.scaled_dot_product_attention(qs, k_cmp, v_cmp, attn_mask=mask, scale=scale)
    batch, heads, length, _ = qs.shape
    balls = length // ball_size
    table = hierarchy.table
    k_all, v_all = (torch.cat([level[i] for level in levels], dim=2) for i in (0, 1))
    log_w_all = torch.cat([level[2] for level in levels])
    if fused:
        listed = table.masked_fill(~hierarchy.valid, -1)
        return fused_indexed_attention(qs, k_all, v_all, listed, log_w_all, scale)

    def gather(t):  # (batch, heads, tokens, d) -> (batch * heads, balls, width, d)
        picked = t.index_select(2, table.flatten())
        return picked.reshape(batch * heads, balls, table.shape[1], t.shape[-1])

    bias = log_w_all[table].masked_fill(~hierarchy.valid, float("-inf"))
    mask = bias.view(1, balls, 1, -1).to(qs.dtype)
    q_balls = qs.reshape(batch * heads, balls, ball_size, qs.shape[-1])
    out = F.scaled_dot_product_attention(q_balls, gather(k_all), gather(v_all), attn_mask=mask, scale=scale)
    return out.reshape(batch, heads, length, -1)


def _group_queries(qs: torch.Tensor, ordering: BallOrdering, group_size: int, dtype: torch.dtype) -> torch.Tensor:
    """(batch, heads, M, d) -> (batch, heads, M / group_size, d): the mean of each group's real queries."""
    groups = qs.shape[2] // group_size
    real = (~ordering.is_padding).to(qs.device, dtype).view(groups, group_size)
    weights = real / real.sum(-1, keepdim=True).clamp_min(1.0)
    return (qs.to(dtype).unflatten(2, (groups, group_size)) * weights[:, :, None]).sum(-2)


@torch.no_grad()
def descend_select_blocks(
    qs: torch.Tensor,
    levels,
    hierarchy: CompressionHierarchy,
    ordering: BallOrdering,
    top_k: int,
    group_size: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k level-1 blocks per query group by a descent of the coarse-token levels.

    At the top level a group scores the tokens its ball attends to and keeps the ``top_k`` best;
    one level down the candidates are the ball's tokens at that level plus the children of the
    kept tokens, and so on down to level 1, where the blocks of the group's own ball are excluded.
    Scores are the compression logits of the group's mean query (scale * q.k + log W: the log of
    a token's unnormalized coarse attention mass), so a token's children can only win where its
    mass is large. Per group this scores O(levels * (window + top_k * block_size)) tokens.

    Returns:
        blocks (batch, heads, M/group_size, top_k) int64 level-1 token (= selection block)
        indices, sorted by decreasing score, and ok (same shape), False where the score is -inf.
    """
    batch, heads, length, head_dim = qs.shape
    per_ball = ordering.ball_size // group_size
    work = torch.promote_types(qs.dtype, torch.float32)
    q_group = _group_queries(qs, ordering, group_size, work)  # (batch, heads, groups, d)
    with torch.autocast(qs.device.type, enabled=False):
        levels = [(k.to(work), log_w.to(work)) for k, _, log_w in levels]
        # balls per chunk, so that the scored keys of a chunk stay under DESCENT_CHUNK_ELEMENTS
        per_chunk_ball = batch * heads * per_ball * (hierarchy.table.shape[1] + top_k * hierarchy.block_size) * head_dim
        chunk = max(1, DESCENT_CHUNK_ELEMENTS // per_chunk_ball)
        num_balls = ordering.num_balls
        picks = [
            _descend(q_group[:, :, first * per_ball : min(num_balls, first + chunk) * per_ball], levels, hierarchy,
                     first, min(num_balls, first + chunk), ordering.ball_size, top_k, scale)
            for first in range(0, num_balls, chunk)
        ]  # fmt: skip
    return torch.cat([p[0] for p in picks], dim=2), torch.cat([p[1] for p in picks], dim=2)


def _descend(q_group, levels, hierarchy: CompressionHierarchy, first: int, last: int, ball_size, top_k, scale):
    """``descend_select_blocks`` for the groups of balls ``first`` .. ``last - 1``.

    q_group: (batch, heads, groups of these balls, d); levels: per level (keys, log-weights).
    """
    per_ball = q_group.shape[2] // (last - first)
    block_size = hierarchy.block_size
    device = q_group.device
    q_ball = q_group.unflatten(2, (-1, per_ball))  # (batch, heads, balls, groups per ball, d)
    ball_of_group = torch.arange(q_group.shape[2], device=device) // per_ball
    children = torch.arange(block_size, device=device)
    kept = top = None
    for level in reversed(range(hierarchy.num_levels)):
        k, log_w = levels[level]
        tokens, valid = (t[first:last] for t in hierarchy.level_table(level))  # (balls, width)
        bias = log_w[tokens].masked_fill(~valid, float("-inf"))
        if level == 0:  # the ball's own blocks belong to the ball branch
            own = tokens // (ball_size // block_size) == torch.arange(first, last, device=device)[:, None]
            bias = bias.masked_fill(own, float("-inf"))
        keys = k.index_select(2, tokens.flatten()).unflatten(2, tokens.shape)  # (batch, heads, balls, width, d)
        scores = (scale * q_ball @ keys.transpose(-1, -2) + bias[:, None]).flatten(2, 3)  # (..., groups, width)
        width = tokens.shape[1]
        if kept is not None:  # the children of the tokens kept one level up (never in the own ball)
            below = (kept[..., None] * block_size + children).flatten(-2)  # (batch, heads, groups, K * l)
            # children of -inf picks (padding, when fewer than K real candidates) may lie past
            # the level's end: clamp for the reads, mask their scores
            dead = ~torch.isfinite(top).repeat_interleave(block_size, dim=-1)
            below = below.masked_fill(dead, 0)
            child_keys = k.gather(2, below.flatten(2)[..., None].expand(-1, -1, -1, k.shape[-1]))
            child_scores = scale * (child_keys.view(*below.shape, -1) @ q_group[..., None]).squeeze(-1)
            child_scores = (child_scores + log_w[below]).masked_fill(dead, float("-inf"))
            scores = torch.cat([scores, child_scores], dim=-1)
        top, index = scores.topk(min(top_k, scores.shape[-1]), dim=-1)
        picked = tokens[ball_of_group[:, None], index.clamp_max(width - 1)]  # (batch, heads, groups, K)
        if kept is not None:
            picked = torch.where(index < width, picked, below.gather(-1, (index - width).clamp_min(0)))
        kept = picked
    return kept, torch.isfinite(top)


@torch.no_grad()
def select_blocks(
    qs: torch.Tensor,
    k_cmp: torch.Tensor,
    log_w_cmp: torch.Tensor,
    ordering: BallOrdering,
    block_size: int,
    select_block: int,
    top_k: int,
    group_size: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k selection blocks of every query group, outside the group's own ball.

    Args:
        qs: (batch, heads, M, d) queries in ball order (M = padded N).
        k_cmp: (batch, heads, M/block_size, d) coarse keys; log_w_cmp: (M/block_size,) their log-weights.

    Returns:
        blocks (batch, heads, M/group_size, top_k) int64 selection-block indices (block J holds
        tokens J*select_block ... (J+1)*select_block - 1), sorted by decreasing score, and
        ok (same shape) bool, False for a selection with score -inf (to be masked).
    """
    batch, heads, length, _ = qs.shape
    groups = length // group_size
    per_block = select_block // block_size
    num_sel = length // select_block
    ball_of_group = torch.arange(groups, device=qs.device) * group_size // ordering.ball_size
    ball_of_block = torch.arange(num_sel, device=qs.device) * select_block // ordering.ball_size
    work = torch.promote_types(qs.dtype, torch.float32)
    k_work, bias = k_cmp.to(work), log_w_cmp.to(work)
    q_group = _group_queries(qs, ordering, group_size, work)  # (batch, heads, groups, d)
    chunk = max(1, SCORE_CHUNK_ELEMENTS // max(1, batch * heads * k_cmp.shape[2]))
    blocks, scores = [], []
    with torch.autocast(qs.device.type, enabled=False):  # float32 scores also under autocast
        for first in range(0, groups, chunk):
            last = min(groups, first + chunk)
            # (batch, heads, chunk, M/block_size)
            logits = scale * q_group[:, :, first:last] @ k_work.transpose(-1, -2) + bias
            if per_block > 1:
                logits = torch.logsumexp(logits.unflatten(-1, (num_sel, per_block)), dim=-1)
            own = ball_of_group[first:last, None] == ball_of_block[None, :]
            top, idx = logits.masked_fill(own, float("-inf")).topk(top_k, dim=-1)
            blocks.append(idx)
            scores.append(top)
    return torch.cat(blocks, dim=2), torch.isfinite(torch.cat(scores, dim=2))


def _selection_branch(
    qs, ks, vs, log_w, blocks, block_ok, select_block: int, scale: float, fused: bool = False
) -> torch.Tensor:
    """Attention of every query group to the tokens of its selected blocks.

    qs, ks: (batch, heads, M, d); vs (..., d_v); blocks, block_ok: (batch, heads, M/g, top_k).
    Returns (batch, heads, M, d_v).
    """
    batch, heads, length, _ = qs.shape
    groups, top_k = blocks.shape[2:]
    group_size = length // groups
    tokens = (blocks[..., None] * select_block + torch.arange(select_block, device=qs.device)).flatten(-2)
    if fused:
        tokens = tokens.masked_fill(~block_ok.repeat_interleave(select_block, dim=-1), -1)
        return fused_indexed_attention(qs, ks, vs, tokens, log_w, scale)
    flat = tokens.flatten(2)  # (batch, heads, groups * top_k * select_block)

    def gather(t):
        picked = t.gather(2, flat[..., None].expand(-1, -1, -1, t.shape[-1]))
        return picked.reshape(batch * heads, groups, top_k * select_block, t.shape[-1])

    bias = log_w[tokens] + torch.where(block_ok, 0.0, float("-inf")).to(log_w.dtype).repeat_interleave(
        select_block, dim=-1
    )
    mask = bias.reshape(batch * heads, groups, 1, top_k * select_block).to(qs.dtype)
    q_groups = qs.reshape(batch * heads, groups, group_size, qs.shape[-1])
    out = F.scaled_dot_product_attention(q_groups, gather(ks), gather(vs), attn_mask=mask, scale=scale)
    return out.reshape(batch, heads, length, -1)
