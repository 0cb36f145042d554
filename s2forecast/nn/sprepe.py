"""SpRePE: spherical reflection position embedding ("SpRePE: a spherical geometry-aware
position embedding for vision transformers").

The query and key channels of each head are split into triplets; triplet m of a token at
position p (unit vector) is multiplied by the Householder reflection R_m(p) = I - 2 v v^T,
v = (n_m - p) / |n_m - p|, which swaps p and the triplet's auxiliary point n_m. In a score,
R_m(p_i)^T R_m(p_j) is the rotation about the normal of the plane through n_m, p_i and p_j
that maps p_j to p_i, so q.k carries the relative position on the sphere while each token only
needs its own position, like RoPE. Unlike RoPE's offsets, that rotation also depends on n_m,
which stays where it is: a score is unchanged when positions, auxiliary points and q/k triplets
rotate together (``tests/nn/test_position_embedding.py``), not when only the positions do (the
paper's construction; rotating a grid onto itself changes scores).

R x = x - 2 v (v . x) is the paper's elementwise eq. (5) (diagonal 1 - 2 v_a^2, off-diagonal
-2 v_a v_b) written with the three coefficients v per (position, triplet); they are
precomputed per grid (or recomputed from the learnable auxiliary points, O(N * channels)).
"""

import math

import torch
from torch import nn

from s2forecast.geometry import Grid
from s2forecast.nn.geometric_buffers import GeometricBuffers
from s2forecast.ops.validation import check_grid
from s2forecast.user_errors import UserError

MASKS = ("fixed", "adaptive", "learnable", "none")
AUX_POINTS = ("random", "grid", "learnable", "identical")
# |n - p| below this is the degenerate case p = n (grid points are much farther apart)
DEGENERATE_DISTANCE = 1e-6


def fibonacci_sphere(count: int) -> torch.Tensor:
    """(count, 3) float64 unit vectors spread evenly over the sphere (Fibonacci lattice)."""
    i = torch.arange(count, dtype=torch.float64) + 0.5
    z = 1.0 - 2.0 * i / count
    lon = math.pi * (3.0 - math.sqrt(5.0)) * i
    r = torch.sqrt(1.0 - z * z)
    return torch.stack([r * torch.cos(lon), r * torch.sin(lon), z], dim=-1)


def householder_vectors(points: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
    """Unit vectors v of the reflections swapping each position with each auxiliary point.

    Args:
        points: (N, 3) unit positions p.
        aux: (..., 3) unit auxiliary points n.

    Returns:
        (..., N, 3) with v = (n - p) / |n - p|. Where p = n any mirror through p swaps them;
        we take the deterministic v = normalize(n x e), e the coordinate axis least aligned
        with n, so the result is finite (and so is its gradient). It is made from n, not p: the
        copies of a pole along its grid row (x, y ~ 1e-16, their signs varying) get one mirror.
    """
    diff = aux[..., None, :] - points  # (..., N, 3)
    norm = torch.linalg.vector_norm(diff, dim=-1, keepdim=True)
    degenerate = norm < DEGENERATE_DISTANCE
    # rounded: a pole's x = y = 0 tie is not broken by 1e-16 (its mirror would jump between axes)
    axis = torch.nn.functional.one_hot(torch.round(aux.detach().abs() * 1e6).argmin(dim=-1), 3).to(aux.dtype)
    fallback = torch.linalg.cross(aux, axis, dim=-1)[..., None, :]  # (..., 1, 3)
    fallback = fallback / torch.linalg.vector_norm(fallback, dim=-1, keepdim=True)
    safe_norm = torch.where(degenerate, torch.ones_like(norm), norm)  # no 0/0 in the gradient either
    return torch.where(degenerate, fallback.expand_as(diff), diff / safe_norm)


def reflect_triplets(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Apply R = I - 2 v v^T to consecutive channel triplets.

    Args:
        x: (batch, heads, N, 3 * triplets) queries or keys.
        v: (heads, N, triplets, 3) unit vectors (or zero: identity).
    """
    t = x.unflatten(-1, (-1, 3))
    return (t - 2.0 * v * (t * v).sum(dim=-1, keepdim=True)).flatten(-2)


class SpRePE(GeometricBuffers):
    """Spherical reflection position embedding acting on (q, k) of an attention layer.

    Args:
        num_heads: attention heads.
        head_dim: query/key channels per head; triplets 0..head_dim//3-1 can carry positions.
        grid: grid of the queries.
        grid_kv: grid of the keys; defaults to ``grid``.
        mask: which channels carry the embedding (paper, sec. 3.3 and app. F):
            "fixed": the first floor(ratio * head_dim) channels, rounded down to a multiple
            of 3 (the paper's best, ratio 7/8); "adaptive": per token
            ratio_i = clip(ratio_max * cos(lat_i), ratio_min, ratio_max), fewer channels where
            tokens crowd near the poles; "learnable": q = (1 - s) q + s R q with
            s = sigmoid(parameter per token and channel), initialized at s = 1/2;
            "none": every whole triplet.
        ratio, ratio_min, ratio_max: the fractions of ``head_dim`` for the masks above.
        aux_points: "grid" (the layer's points evenly spread, a Fibonacci lattice of
            heads x triplets points from north to south, each head taking a consecutive run of
            it: a band of latitudes), "random" (uniform, from ``seed``), "learnable" (initialized
            at random, normalized to unit length in every forward) or "identical" (all triplets
            share one point: the paper's ablation). Every head has its own points, and the
            points of one head are distinct (distinct planes, the paper's non-degeneracy). The
            points are not saved with the weights: a checkpoint is read with the points of this
            code.
        seed: seed of the random auxiliary points (use a different one per layer).
    """

    acts_on = "qk"

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        grid: Grid,
        grid_kv: Grid | None = None,
        mask: str = "fixed",
        ratio: float = 7 / 8,
        ratio_min: float = 0.5,
        ratio_max: float = 1.0,
        aux_points: str = "grid",
        seed: int = 0,
    ):
        super().__init__()
        if mask not in MASKS:
            raise UserError(f"mask must be one of {MASKS}, got {mask!r}")
        if aux_points not in AUX_POINTS:
            raise UserError(f"aux_points must be one of {AUX_POINTS}, got {aux_points!r}")
        for name, value in (("ratio", ratio), ("ratio_min", ratio_min), ("ratio_max", ratio_max)):
            if not 0.0 <= value <= 1.0:
                raise UserError(f"{name} must be in [0, 1], got {value}")
        if mask == "adaptive" and ratio_min > ratio_max:  # options of the adaptive mask alone
            raise UserError(f"ratio_min ({ratio_min}) must not exceed ratio_max ({ratio_max})")
        self.grid = check_grid(grid, "grid")
        self.grid_kv = self.grid if grid_kv is None else check_grid(grid_kv, "grid_kv")
        self.num_heads, self.head_dim = num_heads, head_dim
        self.mask, self.aux_points = mask, aux_points
        self.ratio_min, self.ratio_max = ratio_min, ratio_max
        ratio = ratio if mask == "fixed" else (ratio_max if mask == "adaptive" else 1.0)
        self.triplets = int(ratio * head_dim + 1e-9) // 3  # floor(0.7 * 90) is 63, not 62.99999999999999
        if self.triplets == 0:
            raise UserError(f"head_dim={head_dim} with ratio {ratio} leaves no channel triplet for SpRePE")

        self.seed = seed
        if aux_points == "learnable":
            self.aux = nn.Parameter(self._initial_aux_points().to(torch.get_default_dtype()))
        self._register_geometry()  # aux (fixed points), points_q/k (learnable points) or v_q/k
        for name in ("q", "k"):
            self.register_buffer(f"active_{name}", self._active_triplets(name), persistent=False)

        if mask == "learnable":
            self.mask_logits_q = nn.Parameter(torch.zeros(self.grid.npoints, 3 * self.triplets))
            same = self.grid_kv == self.grid
            self.mask_logits_k = None if same else nn.Parameter(torch.zeros(self.grid_kv.npoints, 3 * self.triplets))

    def _geometry(self) -> dict[str, torch.Tensor]:
        """Float64 positions (learnable auxiliary points: v is computed per forward), or the
        fixed auxiliary points and the Householder vectors, (heads, N, triplets, 3), masked."""
        positions = {"q": self.grid.unit_vectors.reshape(-1, 3)}
        if self.grid_kv != self.grid:  # else the keys' are the queries' (``vectors``)
            positions["k"] = self.grid_kv.unit_vectors.reshape(-1, 3)
        if self.aux_points == "learnable":
            return {f"points_{name}": points for name, points in positions.items()}
        aux = self._initial_aux_points()  # (heads, triplets, 3)
        geometry = {"aux": aux}
        for name, points in positions.items():
            v = householder_vectors(points, aux).permute(0, 2, 1, 3)
            active = self._active_triplets(name)  # (N, triplets) or None
            geometry[f"v_{name}"] = v if active is None else v * active[None, :, :, None]
        return geometry

    def _initial_aux_points(self) -> torch.Tensor:
        """(heads, triplets, 3) float64 unit auxiliary points (the initial ones when learnable)."""
        count = self.num_heads * self.triplets
        if self.aux_points == "grid":
            points = fibonacci_sphere(count)
        elif self.aux_points == "identical":
            points = fibonacci_sphere(1).expand(count, 3)
        else:
            generator = torch.Generator().manual_seed(self.seed)
            points = torch.randn(count, 3, generator=generator, dtype=torch.float64)
            points = points / torch.linalg.vector_norm(points, dim=-1, keepdim=True)
        return points.reshape(self.num_heads, self.triplets, 3).clone()

    def _active_triplets(self, name: str) -> torch.Tensor | None:
        """(N, triplets) float 0/1 mask of the density-adaptive mask, None otherwise."""
        if self.mask != "adaptive":
            return None
        grid = self.grid if name == "q" else self.grid_kv
        cos_lat = torch.cos(torch.deg2rad(grid.lats_deg)).clamp(min=0.0)  # area per token ~ cos(lat)
        rho = (self.ratio_max * cos_lat).clamp(self.ratio_min, self.ratio_max)
        rho = rho[:, None].expand(grid.shape).reshape(-1)
        count = torch.floor(rho * self.head_dim + 1e-9).long() // 3  # whole triplets per token
        active = torch.arange(self.triplets)[None, :] < count[:, None]
        return active.float()

    def channels(self) -> int:
        """Number of leading channels per head that carry the embedding (3 * triplets)."""
        return 3 * self.triplets

    def vectors(self, name: str) -> torch.Tensor:
        """(heads, N, triplets, 3) Householder vectors for queries ("q") or keys ("k")."""
        if name == "k" and self.grid_kv == self.grid:
            name = "q"  # one grid: one set of vectors, stored (or, of learnable points, computed) once
        if self.aux_points != "learnable":
            return getattr(self, f"v_{name}")
        aux = self.aux / torch.linalg.vector_norm(self.aux, dim=-1, keepdim=True)
        v = householder_vectors(getattr(self, f"points_{name}"), aux).permute(0, 2, 1, 3)
        active = getattr(self, f"active_{name}")
        return v if active is None else v * active[None, :, :, None]

    def embed(self, x: torch.Tensor, name: str, vectors: torch.Tensor | None = None) -> torch.Tensor:
        """x: (batch, heads, N, head_dim) -> same shape and dtype, positions applied in float32,
        or in float64 for float64 inputs (exact with a float64 module: ``.double()``). ``vectors``:
        ``self.vectors(name)``, when already computed."""
        c = self.channels()
        head = x[..., :c].to(torch.promote_types(x.dtype, torch.float32))
        reflected = reflect_triplets(head, self.vectors(name) if vectors is None else vectors)
        if self.mask == "learnable":
            logits = self.mask_logits_q if name == "q" or self.mask_logits_k is None else self.mask_logits_k
            gate = torch.sigmoid(logits)
            reflected = head + gate * (reflected - head)
        return torch.cat([reflected.to(x.dtype), x[..., c:]], dim=-1)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q: (batch, heads, N_q, head_dim) on ``grid``; k: (batch, heads, N_k, head_dim) on ``grid_kv``."""
        for name, t, grid in (("q", q, self.grid), ("k", k, self.grid_kv)):
            if t.shape[1] != self.num_heads or t.shape[2] != grid.npoints or t.shape[3] != self.head_dim:
                raise UserError(
                    f"SpRePE expects {name} of shape (batch, {self.num_heads}, {grid.npoints}, {self.head_dim}), "
                    f"got {tuple(t.shape)}"
                )
        v_q = self.vectors("q")
        v_k = v_q if self.grid_kv == self.grid else self.vectors("k")  # learnable points: computed once
        return self.embed(q, "q", v_q), self.embed(k, "k", v_k)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, head_dim={self.head_dim}, channels={self.channels()}, "
            f"mask={self.mask!r}, aux_points={self.aux_points!r}"
        )
