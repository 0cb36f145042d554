"""ViT-style planar baseline: the (lat, lon) array treated as a flat image.

    fields (batch, in_channels, nlat, nlon)
      -> patch embedding (Conv2d, kernel = stride = patch_size; the grid padded to a multiple)
      -> learned absolute position embedding (zero-initialized; "ape", the default), or a
         relative one on q/k in every layer ("rope": axial RoPE; "sprepe": SpRePE at the patch
         centres, taken as the cell-centred grid of the patch array), or none
      -> num_layers pre-norm blocks of plain softmax attention (no quadrature weights) over all
         patches ("global") or a square window of (2 * window + 1)^2 patches clamped at the
         array edges, without longitude wrap ("window"), and an MLP
      -> ConvTranspose2d back to the grid, cropped.

For ablations against ``SphericalTransformer`` at a matched width, depth and parameter
budget. It is bound to its training resolution (learned embedding table and fixed patching).
"""

import torch
import torch.nn.functional as F
from torch import nn

from s2forecast.geometry import Grid
from s2forecast.models.spherical_transformer import PreNormBlock
from s2forecast.nn.position_embedding import build_position_embedding
from s2forecast.user_errors import UserError

PLANAR_ATTENTION = ("global", "window")
PLANAR_EMBEDDINGS = ("ape", "none", "rope", "sprepe")


class PlanarAttention(nn.Module):
    """Multi-head self-attention on (batch, channels, h, w) images with an optional boolean mask."""

    def __init__(self, channels: int, num_heads: int, mask: torch.Tensor | None, position_embedding=None):
        super().__init__()
        self.position_embedding = position_embedding
        if channels % num_heads:
            raise UserError(f"channels={channels} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, channels)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)
        q, k, v = self.qkv(tokens).view(batch, h * w, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        if self.position_embedding is not None:
            q, k = self.position_embedding(q, k)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)
        out = self.out(out.transpose(1, 2).reshape(batch, h * w, channels))
        return out.transpose(1, 2).reshape(batch, channels, h, w)


def window_mask(h: int, w: int, window: int) -> torch.Tensor:
    """(h*w, h*w) True where two patches are within ``window`` rows and columns (no wrap)."""
    rows = torch.arange(h).repeat_interleave(w)
    cols = torch.arange(w).repeat(h)
    near_rows = (rows[:, None] - rows[None, :]).abs() <= window
    near_cols = (cols[:, None] - cols[None, :]).abs() <= window
    return near_rows & near_cols


class PlanarTransformer(nn.Module):
    """See the module docstring.

    Args:
        grid: the data grid (only its shape matters to this model).
        in_channels, out_channels: as for ``SphericalTransformer``.
        embed_dim, num_layers, num_heads, mlp_ratio, activation, norm: as for
            ``SphericalTransformer``.
        patch_size: patch edge in grid points (plays the role of ``scale_factor``).
        attention: "global" or "window".
        window: window half-width in patches; 3 gives the 7x7 window that the spherical
            neighborhood radius (7/sqrt(pi)) * spacing matches in area at the equator.
    """

    def __init__(
        self,
        grid: Grid,
        in_channels: int,
        out_channels: int,
        embed_dim: int = 128,
        num_layers: int = 4,
        num_heads: int = 1,
        patch_size: int = 2,
        attention: str = "window",
        window: int = 3,
        mlp_ratio: float = 2.0,
        activation: str = "gelu",
        norm: str = "instance",
        position_embedding: str = "ape",
        position_embedding_options: dict | None = None,
    ):
        super().__init__()
        if position_embedding not in PLANAR_EMBEDDINGS:
            raise UserError(f"position_embedding must be one of {PLANAR_EMBEDDINGS}, got {position_embedding!r}")
        if attention not in PLANAR_ATTENTION:
            raise UserError(f"attention must be one of {PLANAR_ATTENTION}, got {attention!r}")
        self.grid, self.patch_size = grid, patch_size
        self.patches = (-(-grid.nlat // patch_size), -(-grid.nlon // patch_size))
        if self.patches == (1, 1) and norm == "instance":  # every forward failed in torch's instance norm
            raise UserError(
                f"patch_size {patch_size} makes the {grid.nlat}x{grid.nlon} grid one patch, which norm 'instance' "
                f"cannot normalize; use patch_size < {max(grid.nlat, grid.nlon)} (or norm 'layer')"
            )
        self.embed = nn.Conv2d(in_channels, embed_dim, patch_size, stride=patch_size)
        absolute = position_embedding == "ape"
        if position_embedding in ("ape", "none") and position_embedding_options:  # as build_position_embedding
            raise UserError(
                f"position embedding {position_embedding!r} takes options [], got {sorted(position_embedding_options)}"
            )
        self.position = nn.Parameter(torch.zeros(1, embed_dim, *self.patches)) if absolute else None
        mask = window_mask(*self.patches, window) if attention == "window" else None
        patch_grid = None
        if position_embedding in ("rope", "sprepe"):  # positions of the patches as a grid of their own
            if min(self.patches) < 2:
                raise UserError(
                    f"patch_size {patch_size} leaves a {self.patches[0]}x{self.patches[1]} array of patches, too few "
                    f"for position embedding {position_embedding!r}; use patch_size <= {grid.nlat // 2}"
                )
            patch_grid = Grid(*self.patches, "equiangular-midpoint")
        blocks = []
        for i in range(num_layers):
            relative = None
            if position_embedding in ("rope", "sprepe"):
                relative = build_position_embedding(
                    position_embedding, grid=patch_grid, channels=embed_dim, num_heads=num_heads,
                    head_dim=embed_dim // num_heads, seed=i, **(position_embedding_options or {}),
                )  # fmt: skip
            attention_layer = PlanarAttention(embed_dim, num_heads, mask, relative)
            blocks.append(PreNormBlock(attention_layer, embed_dim, mlp_ratio, activation, norm))
        self.blocks = nn.ModuleList(blocks)
        self.unembed = nn.ConvTranspose2d(embed_dim, out_channels, patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, in_channels, nlat, nlon) -> (batch, out_channels, nlat, nlon)."""
        nlat, nlon = x.shape[-2:]
        if (nlat, nlon) != self.grid.shape:
            raise UserError(f"PlanarTransformer was built for {self.grid.shape}, got fields of {(nlat, nlon)}")
        pad_lat, pad_lon = self.patches[0] * self.patch_size - nlat, self.patches[1] * self.patch_size - nlon
        h = self.embed(F.pad(x, (0, pad_lon, 0, pad_lat)))
        if self.position is not None:
            h = h + self.position
        for block in self.blocks:
            h = block(h)
        return self.unembed(h)[..., :nlat, :nlon]
