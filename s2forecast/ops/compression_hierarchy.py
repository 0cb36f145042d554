"""Multi-level coarse tokens for ball sparse attention: a compression branch of near-linear cost.

The paper's compression branch lets every query attend to all N / l coarse tokens (blocks of
``l = block_size`` slots of the ball-tree order): a global receptive field at quadratic cost,
N^2 / l. At 0.25 degree (N = 1,038,240) that is 1.3e11 logits per head and layer. This module
keeps the receptive field global but coarsens it with distance along the ball tree, like a
Barnes-Hut or H-matrix far field:

    level 1   coarse tokens of l slots (the paper's), level j: tokens of l**j slots, each the
              quadrature-weighted mean of its l children at level j - 1 (so again the
              w-weighted mean of its slots, with log-weight log(sum of w)).
    windows   at every level the tokens are cut into aligned windows of ``window`` tokens.
              A query in ball b attends, at level j, to the tokens of the level-j window that
              contains b, except those inside b's level-(j-1) window (covered finer). The top
              level J is the first with at most ``window`` tokens: one window, the whole sphere.

The windows of one ball partition the whole sequence, so every slot is represented exactly once,
by a coarse token whose log-weight is the log of its area: the branch is still a quadrature of
the integral over the sphere, with cells that grow with ball-tree distance. A query attends to
at most ``window + (J - 1) * (window - window / l)`` coarse tokens, J = 1 + ceil(log_l(N / (l *
window))): O(N log N) in all. With ``window >= N / l`` there is one level and the branch is the
paper's compression exactly.

Alignment: a window must hold whole balls at level 1 (``window`` a multiple of
``ball_size / block_size``) and whole level-(j-1) windows at level j (a multiple of ``block_size``).
Levels above 1 are zero-padded to a multiple of ``block_size`` tokens; padding tokens have
log-weight -inf and are never attended to.
"""

import math
import numbers
from dataclasses import dataclass, replace

import torch

from s2forecast.user_errors import UserError


@dataclass(frozen=True, eq=False)
class CompressionHierarchy:
    """Coarse tokens per level and the tokens every ball attends to.

    Attributes:
        block_size: slots pooled per level-1 token, and children per token above.
        window: tokens per window.
        level_sizes: tokens stored per level (levels below the top padded to a multiple of
            ``block_size``), level 1 first.
        offsets: first index of every level in the concatenation of all levels.
        table: (num_balls, width) int64, the coarse tokens (indices into the concatenation) that
            the queries of each ball attend to, level by level; ``columns[j]`` are level j + 1's.
        valid: (num_balls, width) bool, False at filler entries (rows shorter than ``width``).
        columns: per level, the slice of ``table`` columns holding that level's tokens.
    """

    block_size: int
    window: int
    level_sizes: tuple[int, ...]
    offsets: tuple[int, ...]
    table: torch.Tensor
    valid: torch.Tensor
    columns: tuple[slice, ...]

    @property
    def num_levels(self) -> int:
        return len(self.level_sizes)

    def to(self, device) -> "CompressionHierarchy":
        """This hierarchy with its tables on ``device`` (itself when they are there already)."""
        device = torch.device(device)
        if self.table.device == device:
            return self
        return replace(self, table=self.table.to(device), valid=self.valid.to(device))

    def level_table(self, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(num_balls, columns) token indices local to ``level`` (0-based) and their validity."""
        cols = self.columns[level]
        return self.table[:, cols] - self.offsets[level], self.valid[:, cols]


def check_compression_window(window, ball_size: int, block_size: int) -> int | None:
    """``window`` as an int (None: one level, the paper's compression); ValueError if misaligned."""
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 1:  # numpy's too
        raise UserError(f"compression_window must be a positive integer or None, got {window!r}")
    window = int(window)
    per_ball = ball_size // block_size
    step = math.lcm(per_ball, block_size)
    if window % step != 0:
        raise UserError(
            f"compression_window={window} must be a multiple of ball_size/block_size={per_ball} and of "
            f"block_size={block_size} (i.e. of {step}) so that windows hold whole balls and nest across levels; "
            "use None for the paper's single-level compression"
        )
    return window


def compression_hierarchy(num_balls: int, ball_size: int, block_size: int, window: int | None) -> CompressionHierarchy:
    """The coarse-token hierarchy of a ball-tree sequence of ``num_balls * ball_size`` slots (CPU
    tensors, not cached).

    Args:
        num_balls: balls in the sequence.
        ball_size: slots per ball, a multiple of ``block_size``.
        block_size: slots per level-1 token and children per token above.
        window: tokens per window; None (or at least the number of level-1 tokens) gives a single
            level where every ball attends to every level-1 token.
    """
    window = check_compression_window(window, ball_size, block_size)
    return _compression_hierarchy(num_balls, ball_size, block_size, window)


def _compression_hierarchy(num_balls: int, ball_size: int, block_size: int, window: int | None):
    sizes = [num_balls * ball_size // block_size]
    if window is None:
        window = sizes[0]
    while sizes[-1] > window:
        sizes.append(math.ceil(sizes[-1] / block_size))
    # levels below the top are padded so that each level pools exactly block_size children
    stored = [upper * block_size for upper in sizes[1:]] + [sizes[-1]]
    offsets = [0]
    for size in stored[:-1]:
        offsets.append(offsets[-1] + size)

    ball = torch.arange(num_balls)
    parts, masks, columns, first_column = [], [], [], 0
    for level, size in enumerate(sizes):
        if level == len(sizes) - 1:
            tokens = torch.arange(size).expand(num_balls, size)  # the top window: everything
        else:  # the ball's window at this level, in this level's tokens
            start = (ball * ball_size) // (window * block_size ** (level + 1)) * window
            tokens = start[:, None] + torch.arange(window)
        ok = tokens < size
        if level > 0:  # minus the ball's window one level down (window / l tokens at this level)
            below = (ball * ball_size) // (window * block_size**level) * (window // block_size)
            ok &= (tokens < below[:, None]) | (tokens >= below[:, None] + window // block_size)
        # valid entries first, then cut the columns no ball needs
        order = (~ok).to(torch.int8).argsort(dim=1, stable=True)
        width = int(ok.sum(1).max())
        tokens, ok = tokens.gather(1, order)[:, :width], ok.gather(1, order)[:, :width]
        parts.append(torch.where(ok, tokens, 0) + offsets[level])
        masks.append(ok)
        columns.append(slice(first_column, first_column + width))
        first_column += width
    return CompressionHierarchy(
        block_size=block_size,
        window=window,
        level_sizes=tuple(stored),
        offsets=tuple(offsets),
        table=torch.cat(parts, dim=1),
        valid=torch.cat(masks, dim=1),
        columns=tuple(columns),
    )
