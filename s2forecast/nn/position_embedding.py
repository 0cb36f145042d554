"""Position embeddings behind one interface, selectable by name (``build_position_embedding``).

Every embedding says where it acts through ``acts_on``:
  "tokens"  absolute: ``forward(x)`` adds a field to features (batch, channels, nlat, nlon);
            the model applies it once to its tokens.
  "qk"      relative through q and k: ``forward(q, k) -> (q, k)`` on (batch, heads, N, head_dim)
            inside every attention layer (SpRePE, axial RoPE).
  "scores"  relative through the logits: ``forward() -> (heads, N_q, N_k)`` additive bias, for
            global attention only (RPE, geodesic ALiBi); it costs an N_q x N_k tensor per head.
``"none"`` (NoPE) builds no module.
"""

import math

import torch
from torch import nn
from torch_harmonics.legendre import legpoly

from s2forecast.geometry import Grid, geodesic_distance
from s2forecast.nn.geometric_buffers import GeometricBuffers
from s2forecast.nn.sprepe import SpRePE
from s2forecast.ops.validation import check_grid
from s2forecast.user_errors import UserError

POSITION_EMBEDDINGS = ("none", "ape", "spectral-ape", "rope", "rpe", "alibi", "sprepe")


class LearnedAbsolutePositionEmbedding(nn.Module):
    """APE: a learned field per channel added to the tokens, (channels, nlat, nlon) parameters
    initialized from N(0, 0.02^2) as in ViT."""

    acts_on = "tokens"

    def __init__(self, channels: int, grid: Grid):
        super().__init__()
        self.grid = check_grid(grid, "grid")
        self.embedding = nn.Parameter(torch.randn(channels, *grid.shape) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, nlat, nlon)."""
        return x + self.embedding.to(x.dtype)


def real_spherical_harmonics(grid: Grid, count: int) -> torch.Tensor:
    """(count, nlat, nlon) float64 real spherical harmonics on ``grid``: entry c has degree
    l = floor(sqrt(c)) and order m = c - l^2 - l (cos(m lon) for m >= 0, sin(|m| lon) for
    m < 0), orthonormal on the sphere."""
    lmax = math.isqrt(max(count - 1, 0)) + 1
    # torch-harmonics' associated Legendre functions, (m, l, nlat), orthonormal together
    # with e^{i m lon}/sqrt(2 pi): the real harmonics take 1 (m = 0) or sqrt(2) cos/sin
    plm = legpoly(lmax, lmax, torch.cos(grid.colats), norm="ortho", csphase=False).to(torch.float64)
    out = torch.empty(count, *grid.shape, dtype=torch.float64)
    for c in range(count):
        degree = math.isqrt(c)
        order = c - degree * degree - degree
        if order == 0:
            azimuthal = torch.ones_like(grid.lons)
        elif order > 0:
            azimuthal = math.sqrt(2.0) * torch.cos(order * grid.lons)
        else:
            azimuthal = math.sqrt(2.0) * torch.sin(-order * grid.lons)
        out[c] = plm[abs(order), degree][:, None] * azimuthal[None, :]
    return out


class SpectralPositionEmbedding(GeometricBuffers):
    """Spectral APE of the attention paper's spherical transformer: channel c carries the real
    spherical harmonic of degree floor(sqrt(c)), order c - l^2 - l, scaled to max |.| = 1;
    fixed, no parameters. A harmonic that vanishes at every grid point (sin(m lon) at the
    longitudes' Nyquist order m = nlon / 2, P_l at the Gauss nodes of l = nlat) gives a zero
    channel, not its round-off scaled to 1."""

    acts_on = "tokens"

    def __init__(self, channels: int, grid: Grid):
        super().__init__()
        self.grid = check_grid(grid, "grid")
        self.channels = channels
        self._register_geometry()

    def _geometry(self) -> dict[str, torch.Tensor]:
        harmonics = real_spherical_harmonics(self.grid, self.channels)
        peak = harmonics.abs().amax(dim=(-1, -2), keepdim=True)
        # orthonormal harmonics peak at O(1) (at least 1 / sqrt(4 pi)): 1e-8 is round-off, not a field
        return {"embedding": torch.where(peak > 1e-8, harmonics / peak.clamp_min(1e-8), 0.0)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, channels, nlat, nlon)."""
        return x + self.embedding.to(x.dtype)


class AxialRotaryEmbedding(GeometricBuffers):
    """Axial 2-D RoPE: the first half of each head's channels rotates with the row (latitude)
    index, the second half with the column (longitude) index, at frequencies
    base^(-k / (head_dim/4)), k = 0..head_dim/4-1 (Heo et al. 2024, axial variant). The
    planar baseline: scores depend on index offsets, not on distances on the sphere.

    Args:
        head_dim: multiple of 4.
        grid: grid of queries and keys (one grid: index offsets need a shared index).
        base: frequency base (100 for images in Heo et al.).
    """

    acts_on = "qk"

    def __init__(self, head_dim: int, grid: Grid, base: float = 100.0):
        super().__init__()
        if head_dim % 4 != 0:
            raise UserError(f"axial RoPE needs head_dim divisible by 4, got {head_dim}")
        self.grid = check_grid(grid, "grid")
        if not base > 1:  # base <= 0 gives NaN frequencies; base <= 1 no range of scales
            raise UserError(f"RoPE base must be > 1, got {base}")
        self.head_dim, self.base = head_dim, base
        self._register_geometry()

    def _geometry(self) -> dict[str, torch.Tensor]:
        """cos and sin of the angles, (N, head_dim/2)."""
        grid, quarter = self.grid, self.head_dim // 4
        freqs = self.base ** (-torch.arange(quarter, dtype=torch.float64) / quarter)
        rows = torch.arange(grid.nlat, dtype=torch.float64)[:, None].expand(grid.shape).reshape(-1)
        cols = torch.arange(grid.nlon, dtype=torch.float64)[None, :].expand(grid.shape).reshape(-1)
        angles = torch.cat([rows[:, None] * freqs, cols[:, None] * freqs], dim=-1)
        return {"cos": torch.cos(angles), "sin": torch.sin(angles)}

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, heads, N, head_dim); channel pairs (2i, 2i+1) rotate by angle i, in float32
        or, for float64 inputs, in float64 (exact with a float64 module: ``.double()``)."""
        pairs = x.to(torch.promote_types(x.dtype, torch.float32)).unflatten(-1, (-1, 2))
        real, imag = pairs[..., 0], pairs[..., 1]
        out = torch.stack([real * self.cos - imag * self.sin, real * self.sin + imag * self.cos], dim=-1)
        return out.flatten(-2).to(x.dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if q.shape[2] != self.grid.npoints or k.shape[2] != self.grid.npoints:
            raise UserError(f"axial RoPE is built for {self.grid.npoints} points, got q {q.shape}, k {k.shape}")
        return self.rotate(q), self.rotate(k)


class RelativePositionBias(nn.Module):
    """RPE: a learned logit bias per head and (row offset, column offset), a
    (heads, 2*nlat-1, 2*nlon-1) table initialized at zero (Liu et al. 2021). Global attention
    on one grid only."""

    acts_on = "scores"

    def __init__(self, num_heads: int, grid: Grid):
        super().__init__()
        self.grid = check_grid(grid, "grid")
        nlat, nlon = grid.shape
        self.table = nn.Parameter(torch.zeros(num_heads, 2 * nlat - 1, 2 * nlon - 1))
        rows = torch.arange(nlat)[:, None].expand(grid.shape).reshape(-1)
        cols = torch.arange(nlon)[None, :].expand(grid.shape).reshape(-1)
        index = (rows[:, None] - rows[None, :] + nlat - 1) * (2 * nlon - 1) + (cols[:, None] - cols[None, :] + nlon - 1)
        self.register_buffer("index", index, persistent=False)  # (N, N) into the flattened table

    def forward(self) -> torch.Tensor:
        """(heads, N, N) logit bias."""
        return self.table.flatten(1)[:, self.index]


class GeodesicALiBi(GeometricBuffers):
    """ALiBi with geodesic distance: head h adds -slope_h * d(p_i, p_j) / distance_unit_rad to
    the logits, with ALiBi's geometric slopes 2^(-8 (h+1) / heads). Fixed, no parameters;
    global attention only (the neighborhood kernel takes no score bias).

    Args:
        distance_unit_rad: the distance (radians) of one unit of the bias; default: the key
            grid's latitude spacing. A model moved to another grid keeps its training value
            (``SphericalTransformer.on_grid``): the bias per radian is then the same.
    """

    acts_on = "scores"

    def __init__(self, num_heads: int, grid: Grid, grid_kv: Grid | None = None, distance_unit_rad: float | None = None):
        super().__init__()
        self.grid = check_grid(grid, "grid")
        self.grid_kv = self.grid if grid_kv is None else check_grid(grid_kv, "grid_kv")
        self.num_heads = num_heads
        if distance_unit_rad is None:
            distance_unit_rad = self.grid_kv.lat_spacing
        if not (isinstance(distance_unit_rad, int | float) and 0 < distance_unit_rad <= math.pi):
            raise UserError(f"ALiBi's distance_unit_rad must be in (0, pi] radians, got {distance_unit_rad!r}")
        self.distance_unit_rad = float(distance_unit_rad)
        self._register_geometry()

    def _geometry(self) -> dict[str, torch.Tensor]:
        heads = self.num_heads
        slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=torch.float64) / heads)
        return {
            "slopes": slopes / self.distance_unit_rad,
            "points_q": self.grid.unit_vectors.reshape(-1, 3),
            "points_k": self.grid_kv.unit_vectors.reshape(-1, 3),
        }

    def forward(self) -> torch.Tensor:
        """(heads, N_q, N_k) logit bias in the slopes' dtype; the distance table is computed on
        the fly (not kept)."""
        distance = geodesic_distance(self.points_q[:, None, :], self.points_k[None, :, :]).to(self.slopes.dtype)
        return -self.slopes[:, None, None] * distance


def build_position_embedding(
    name: str,
    *,
    grid: Grid,
    channels: int,
    num_heads: int,
    head_dim: int,
    grid_kv: Grid | None = None,
    seed: int = 0,
    **options,
) -> nn.Module | None:
    """The position embedding called ``name`` (one of ``POSITION_EMBEDDINGS``) for a layer.

    Args:
        name: "none", "ape", "spectral-ape", "rope", "rpe", "alibi" or "sprepe".
        grid: grid of the tokens (of the queries for relative embeddings).
        channels: token channels (absolute embeddings).
        num_heads, head_dim: of the attention layer (relative embeddings).
        grid_kv: grid of the keys when it differs (SpRePE, ALiBi).
        seed: per-layer seed (SpRePE's random auxiliary points).
        options: extra arguments of the embedding (SpRePE: mask, ratio, ratio_min,
            ratio_max, aux_points; RoPE: base; ALiBi: distance_unit_rad).
    """
    if name not in POSITION_EMBEDDINGS:
        raise UserError(f"position embedding must be one of {POSITION_EMBEDDINGS}, got {name!r}")
    allowed = {"sprepe": {"mask", "ratio", "ratio_min", "ratio_max", "aux_points"}, "rope": {"base"},
               "alibi": {"distance_unit_rad"}}.get(name, set())  # fmt: skip
    if set(options) - allowed:
        raise UserError(f"position embedding {name!r} takes options {sorted(allowed)}, got {sorted(options)}")
    if name != "sprepe" and name != "alibi" and grid_kv is not None and grid_kv != grid:
        raise UserError(f"position embedding {name!r} needs queries and keys on one grid")
    if name == "none":
        return None
    if name == "ape":
        return LearnedAbsolutePositionEmbedding(channels, grid)
    if name == "spectral-ape":
        return SpectralPositionEmbedding(channels, grid)
    if name == "rope":
        return AxialRotaryEmbedding(head_dim, grid, **options)
    if name == "rpe":
        return RelativePositionBias(num_heads, grid)
    if name == "alibi":
        return GeodesicALiBi(num_heads, grid, grid_kv, **options)
    return SpRePE(num_heads, head_dim, grid, grid_kv, seed=seed, **options)
