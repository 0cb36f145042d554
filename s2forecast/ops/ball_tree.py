"""Ball-tree ordering of grid points: consecutive blocks of the ordered sequence are compact balls.

Ball sparse attention (``s2forecast.ops.ball_sparse_attention``) needs a sequence order in
which every run of ``ball_size`` points (and, nested inside, every run of a smaller power-of-two
block) covers a compact patch of the sphere. A lat-lon grid flattened row-major is not such an
order: a row near a pole is a tiny circle, a row at the equator spans the globe.

Construction (Erwin-style ball tree on the 3-D unit vectors of the grid points):
    The padded sequence has ``num_balls * ball_size`` slots, ``num_balls = ceil(N / ball_size)``.
    A node owns a contiguous range of slots and a set of points (never more points than slots).
    It is split in two along the Cartesian axis on which its points spread most (max - min):
    points sorted by that coordinate (ties broken by grid index), the first ones to the left
    child. While a node spans several balls the split falls on a ball boundary (left child:
    ``floor(balls / 2)`` balls); inside a ball the slots are halved. Points go to the children in
    proportion to their slots (rounded), so with N a multiple of ``ball_size`` and a power-of-two
    ball size every split is a median split. The recursion runs down to single slots, so every
    power-of-two block inside a ball is itself a subtree: nested compactness.

Padding: when N is not a multiple of ``ball_size`` the ``num_balls * ball_size - N`` spare slots
are padding. Proportional allocation spreads them evenly over the balls and over the slots in
each ball (never a whole ball of padding; each ball holds ``N / num_balls`` points up to
rounding). A padding slot has ``permutation == -1``; the attention op gives it zero quadrature
weight (log-weight ``-inf``), so it is never attended to, and discards its output.

The ordering is deterministic (no randomness; ties broken by grid index) and not cached: the
layers keep what they derive from it as buffers (``s2forecast.ops.backends``). It is NOT
invariant under longitude rolls of the grid: rolling moves points across the median planes, so
the balls of a rolled field are not the rolled balls.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from s2forecast.geometry import Grid
from s2forecast.ops.validation import check_grid
from s2forecast.user_errors import UserError


@dataclass(frozen=True, eq=False)
class BallOrdering:
    """A ball-tree permutation of the points of ``grid`` into ``num_balls`` balls of ``ball_size`` slots.

    Attributes:
        grid: the grid whose points (flattened row-major) are ordered.
        ball_size: slots per ball.
        num_balls: ``ceil(grid.npoints / ball_size)``.
        permutation: (padded_size,) int64, the grid index held by each slot, ``-1`` at padding.
        inverse: (npoints,) int64, the slot of each grid point: ``permutation[inverse] == arange(N)``.
        centers: (num_balls, 3) float64 unit vectors, the normalized mean of each ball's points.
        radii: (num_balls,) float64, the largest geodesic distance (radians) from a ball's
            centre to its points.
    """

    grid: Grid
    ball_size: int
    num_balls: int
    permutation: torch.Tensor
    inverse: torch.Tensor
    centers: torch.Tensor
    radii: torch.Tensor

    @property
    def padded_size(self) -> int:
        """Slots in the ordered sequence, ``num_balls * ball_size``."""
        return self.num_balls * self.ball_size

    @property
    def num_padding(self) -> int:
        return self.padded_size - self.grid.npoints

    @property
    def is_padding(self) -> torch.Tensor:
        """(padded_size,) bool, True at padding slots."""
        return self.permutation < 0

    @property
    def gather_index(self) -> torch.Tensor:
        """(padded_size,) int64 grid index per slot with padding mapped to point 0 (for ``index_select``;
        the padding rows must then be masked, e.g. by zero quadrature weight)."""
        return self.permutation.clamp_min(0)

    def __repr__(self) -> str:
        return (
            f"BallOrdering(grid={self.grid}, ball_size={self.ball_size}, num_balls={self.num_balls}, "
            f"num_padding={self.num_padding}, mean_radius={float(self.radii.mean()):.4g})"
        )


def ball_ordering(grid: Grid, ball_size: int) -> BallOrdering:
    """The ball-tree ordering of ``grid`` with balls of ``ball_size`` slots (CPU tensors).

    Args:
        grid: an ``s2forecast.geometry.Grid``.
        ball_size: slots per ball, a positive integer. A power of two keeps every power-of-two
            block inside a ball a subtree of the ball tree (nested compactness).

    Returns:
        A ``BallOrdering``; see the module docstring for the construction and the padding.
    """
    check_grid(grid, "grid")
    if isinstance(ball_size, bool) or not isinstance(ball_size, int | np.integer) or ball_size < 1:
        raise UserError(f"ball_size must be a positive integer, got {ball_size!r}")
    return _ball_ordering(grid, int(ball_size))


def _ball_ordering(grid: Grid, ball_size: int) -> BallOrdering:
    xyz = grid.unit_vectors.reshape(-1, 3).numpy()
    permutation = ball_tree_permutation(xyz, ball_size)
    num_balls = permutation.size // ball_size
    inverse = np.empty(grid.npoints, dtype=np.int64)
    valid = permutation >= 0
    inverse[permutation[valid]] = np.flatnonzero(valid)
    centers, radii = blocks_centers_and_radii(
        torch.from_numpy(xyz[permutation.clip(min=0)]), ball_size, torch.from_numpy(valid)
    )
    return BallOrdering(
        grid=grid,
        ball_size=ball_size,
        num_balls=num_balls,
        permutation=torch.from_numpy(permutation),
        inverse=torch.from_numpy(inverse),
        centers=centers,
        radii=radii,
    )


def ball_tree_permutation(points: np.ndarray, ball_size: int) -> np.ndarray:
    """Slot order of ``points`` from a ball tree; see the module docstring.

    Args:
        points: (N, D) float coordinates (unit vectors for the sphere).
        ball_size: slots per ball.

    Returns:
        (ceil(N / ball_size) * ball_size,) int64: the point index held by each slot, -1 at padding.

    Vectorized level by level (one segmented sort per tree level, about log2(N) levels), so
    the 0.25 degree grid (1,038,240 points) takes seconds, once per process.
    """
    points = np.asarray(points, dtype=np.float64)
    n = points.shape[0]
    if n == 0:
        raise UserError("cannot order an empty point set")
    num_balls = math.ceil(n / ball_size)
    order = np.arange(n, dtype=np.int64)  # points, grouped by node in node order
    # per node: first position in ``order``, point count, first slot, slot count
    start = np.zeros(1, dtype=np.int64)
    count = np.full(1, n, dtype=np.int64)
    slot0 = np.zeros(1, dtype=np.int64)
    slots = np.full(1, num_balls * ball_size, dtype=np.int64)
    while (slots > 1).any():
        # sort the points of every node along its axis of largest spread
        nonempty = count > 0
        first = start[nonempty]
        coords = points[order]
        spread = np.maximum.reduceat(coords, first, axis=0) - np.minimum.reduceat(coords, first, axis=0)
        axis = np.zeros(start.size, dtype=np.int64)
        axis[nonempty] = spread.argmax(axis=1)
        node_of_point = np.repeat(np.arange(start.size), count)
        key = coords[np.arange(n), axis[node_of_point]]
        order = order[np.lexsort((order, key, node_of_point))]

        # split slots (on ball boundaries while a node spans several balls) and points proportionally
        split = slots > 1
        left_slots = np.where(slots > ball_size, (slots // ball_size) // 2 * ball_size, slots // 2)
        rounded = (2 * count * left_slots + slots) // (2 * slots)
        lower = np.maximum(0, count - (slots - left_slots))
        upper = np.minimum(left_slots, count)
        left_count = np.clip(rounded, lower, upper)

        children = np.where(split, 2, 1)
        parent = np.repeat(np.arange(start.size), children)
        is_right = np.zeros(parent.size, dtype=bool)
        is_right[np.cumsum(children)[split] - 1] = True
        is_left_child = np.repeat(split, children) & ~is_right
        new_start = start[parent] + np.where(is_right, left_count[parent], 0)
        new_slot0 = slot0[parent] + np.where(is_right, left_slots[parent], 0)
        new_count = np.where(is_left_child, left_count[parent], count[parent])
        new_count = np.where(is_right, count[parent] - left_count[parent], new_count)
        new_slots = np.where(is_left_child, left_slots[parent], slots[parent])
        new_slots = np.where(is_right, slots[parent] - left_slots[parent], new_slots)
        start, count, slot0, slots = new_start, new_count, new_slot0, new_slots

    permutation = np.full(num_balls * ball_size, -1, dtype=np.int64)
    filled = count == 1
    permutation[slot0[filled]] = order[start[filled]]
    real_per_ball = (permutation >= 0).reshape(num_balls, ball_size).sum(axis=1)
    if real_per_ball.min() < 1 or not np.array_equal(np.sort(permutation[permutation >= 0]), np.arange(n)):
        raise RuntimeError("ball tree construction failed: not a permutation with a point in every ball")
    return permutation


def blocks_centers_and_radii(
    points: torch.Tensor, size: int, valid: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre and radius of every run of ``size`` consecutive unit vectors (a diagnostic).

    Args:
        points: (M, 3) unit vectors in sequence order, M a multiple of ``size``.
        size: block length.
        valid: optional (M,) bool; False entries (padding) are ignored.

    Returns:
        centers (M/size, 3), the normalized mean of each block's valid points, and radii
        (M/size,), the largest geodesic distance in radians from the centre to those points
        (0 for a block without valid points).
    """
    points = points.to(torch.float64)
    if points.shape[0] % size != 0:
        raise UserError(f"{points.shape[0]} points do not split into blocks of {size}")
    valid = torch.ones(points.shape[0], dtype=torch.bool) if valid is None else valid.to(torch.bool)
    blocks = points.view(-1, size, 3)
    mask = valid.view(-1, size)
    mean = (blocks * mask[..., None]).sum(1)
    centers = mean / torch.linalg.vector_norm(mean, dim=-1, keepdim=True).clamp_min(1e-300)
    cross = torch.linalg.vector_norm(torch.linalg.cross(blocks, centers[:, None].expand_as(blocks), dim=-1), dim=-1)
    distance = torch.atan2(cross, (blocks * centers[:, None]).sum(-1))
    radii = torch.where(mask, distance, 0.0).amax(dim=1)
    return centers, radii
