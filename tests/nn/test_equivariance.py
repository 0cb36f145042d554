"""Approximate rotation equivariance of quadrature-weighted attention (the attention paper's
claim), against a planar baseline that ignores the sphere: unweighted attention in a square
index window (neighborhood) or over all points (global)."""

import pytest
import torch
import torch.nn.functional as F

from s2forecast.geometry import Grid, random_rotation
from s2forecast.nn import S2Attention, S2NeighborhoodAttention
from s2forecast.nn.equivariance import rotation_error

CHANNELS = 8
THETA = 0.35  # radians, fixed across resolutions so the continuous operator is the same
RESOLUTIONS = [(16, 32), (32, 64), (64, 128)]


def planar_window_mask(grid: Grid, radius_rows: int) -> torch.Tensor:
    """(N, N) square index window: |row offset| <= r (no wrap over the poles), |col offset| <= r (periodic)."""
    rows = torch.arange(grid.nlat).repeat_interleave(grid.nlon)
    cols = torch.arange(grid.nlon).repeat(grid.nlat)
    dcol = (cols[:, None] - cols[None, :]) % grid.nlon
    dcol = torch.minimum(dcol, grid.nlon - dcol)
    return ((rows[:, None] - rows[None, :]).abs() <= radius_rows) & (dcol <= radius_rows)


def apply_layer(layer, x: torch.Tensor, planar: bool) -> torch.Tensor:
    grid = layer.grid_in if isinstance(layer, S2Attention) else layer.grid
    if not planar:
        return layer(x)
    q, k, v = layer._project(x, None, None, grid, grid)
    mask = None
    if isinstance(layer, S2NeighborhoodAttention):
        mask = planar_window_mask(grid, max(1, round(layer.theta / grid.lat_spacing)))
    return layer._merge(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), grid)


def layer_rotation_error(layer_factory, shape, planar: bool) -> float:
    grid = Grid(*shape)
    torch.manual_seed(0)  # the same weights at every resolution
    layer = layer_factory(grid).double()
    rotation = random_rotation(torch.Generator().manual_seed(1))
    return rotation_error(lambda x: apply_layer(layer, x, planar), grid, rotation, CHANNELS)


LAYERS = {
    "neighborhood": lambda grid: S2NeighborhoodAttention(CHANNELS, 2, grid, theta=THETA),
    "global": lambda grid: S2Attention(CHANNELS, 2, grid),
}


SLOW = {"neighborhood"}  # ~10 s on CPU


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in LAYERS])
def test_rotation_equivariance_beats_planar_and_converges(name):
    spherical = [layer_rotation_error(LAYERS[name], shape, planar=False) for shape in RESOLUTIONS]
    planar = [layer_rotation_error(LAYERS[name], shape, planar=True) for shape in RESOLUTIONS]
    for shape, s2, flat in zip(RESOLUTIONS, spherical, planar, strict=True):
        print(f"{name} {shape[0]}x{shape[1]}: relative rotation error S2 {s2:.4f}, planar {flat:.4f}")
    assert all(s2 < flat for s2, flat in zip(spherical, planar, strict=True))
    assert spherical[0] > spherical[1] > spherical[2]
