"""Measuring how rotation-equivariant a layer on the sphere is.

The relative rotation error of a layer L for a rotation R is

    ||L(f o R^T) - L(f) o R^T|| / ||L(f) o R^T||     (quadrature-weighted L2 norms on the grid)

on a smooth input f (sums of sines of linear functions of the unit vector, so f o R^T is
evaluated exactly at the grid points). The rotated output L(f) o R^T is interpolated
bilinearly in (colatitude, longitude), which adds an error of its own that vanishes with the
grid spacing. An exactly equivariant continuous operator discretized on the grid gives an
error that falls with resolution; a planar layer (index windows, no quadrature) does not.
"""

import math
from collections.abc import Callable

import torch

from s2forecast.geometry import Grid


def smooth_field(points: torch.Tensor, channels: int, seed: int = 7) -> torch.Tensor:
    """(channels, ...) smooth functions of unit vectors ``points`` (..., 3), float64."""
    g = torch.Generator().manual_seed(seed)
    directions = torch.randn(channels, 3, generator=g, dtype=torch.float64)
    phases = torch.rand(channels, generator=g, dtype=torch.float64) * 2 * math.pi
    angles = torch.einsum("...i,ci->c...", points.double(), directions)
    return torch.sin(angles + phases.view(-1, *[1] * (points.dim() - 1)))


def interpolate(field: torch.Tensor, grid: Grid, points: torch.Tensor) -> torch.Tensor:
    """Bilinear interpolation in (colatitude, longitude) of ``field`` (C, nlat, nlon) at ``points`` (..., 3)."""
    colat = torch.acos(points[..., 2].clamp(-1, 1))
    lon = torch.atan2(points[..., 1], points[..., 0]) % (2 * math.pi)
    colats = grid.colats.to(colat.dtype)
    i1 = torch.searchsorted(colats, colat.contiguous()).clamp(1, grid.nlat - 1)
    i0 = i1 - 1
    a = ((colat - colats[i0]) / (colats[i1] - colats[i0])).clamp(0, 1)
    x = lon / (2 * math.pi / grid.nlon)
    j0 = x.floor().long() % grid.nlon
    j1 = (j0 + 1) % grid.nlon
    b = x - x.floor()
    f = field.double()
    top = (1 - b) * f[:, i0, j0] + b * f[:, i0, j1]
    bottom = (1 - b) * f[:, i1, j0] + b * f[:, i1, j1]
    return (1 - a) * top + a * bottom


def rotation_error(
    apply: Callable[[torch.Tensor], torch.Tensor], grid: Grid, rotation: torch.Tensor, channels: int
) -> float:
    """Relative rotation error (module docstring) of ``apply``: (1, channels, nlat, nlon) ->
    (1, C_out, nlat, nlon) on ``grid``, for the 3x3 ``rotation``."""
    points = grid.unit_vectors.double()
    rotated_points = points @ rotation.double()  # R^T u, as rows
    x = smooth_field(points, channels)[None]
    x_rotated = smooth_field(rotated_points, channels)[None]
    with torch.no_grad():
        y = apply(x)[0]
        y_rotated = apply(x_rotated)[0]
    expected = interpolate(y, grid, rotated_points)
    w = grid.quadrature_weights.double().reshape(grid.nlat, -1)
    return math.sqrt(float((w * (y_rotated - expected) ** 2).sum() / (w * expected**2).sum()))
