"""Robustness evaluations of a trained forecaster.

- ``rotation_errors``: one-step RMSE when the input fields are rigidly rotated by an angle
  alpha about the axis normal to the prime-meridian plane (the y axis), alpha from 0 to pi/2,
  with the truth rotated the same way (SpRePE paper, Fig. 4). A model that respects the
  sphere degrades little; a planar model, for which the poles move into the grid's interior,
  degrades a lot.
- ``resolution_errors``: one-step RMSE of the same weights on a store at another resolution
  (the neural-operator property of the spherical Transformer), against persistence.

Errors are area-weighted (WeatherBench2 cell areas) RMSEs in normalized units, averaged over
channels. Fields are rotated by bilinear interpolation in (latitude, longitude), periodic in
longitude, which adds a small smoothing error of its own even at alpha = 0 (it is the
identity there).
"""

import math

import numpy as np
import torch

from s2forecast.geometry import Grid, rotation_matrix


def rotate_fields(fields: torch.Tensor, grid: Grid, rotation: torch.Tensor) -> torch.Tensor:
    """f_rotated(p) = f(R^T p) for fields (..., nlat, nlon) on ``grid`` (north -> south)."""
    if fields.numel() == 0:
        return fields
    points = grid.unit_vectors.reshape(-1, 3).to(torch.float64)  # (N, 3)
    source = points @ rotation.to(torch.float64)  # R^T p for every p, as rows
    lat = torch.asin(source[:, 2].clamp(-1, 1))
    lon = torch.atan2(source[:, 1], source[:, 0]) % (2 * math.pi)
    # fractional row index on the grid's (possibly irregular) latitudes, rows north -> south
    lats = grid.lats.to(torch.float64)
    row = torch.from_numpy(np.interp(-lat.numpy(), -lats.numpy(), np.arange(grid.nlat, dtype=np.float64)))
    col = lon / (2 * math.pi / grid.nlon)
    r0 = row.floor().long().clamp(0, grid.nlat - 1)
    r1 = (r0 + 1).clamp(max=grid.nlat - 1)
    wr = (row - r0).clamp(0, 1)
    c0 = col.floor().long() % grid.nlon
    c1 = (c0 + 1) % grid.nlon
    wc = col - col.floor()
    flat = fields.reshape(*fields.shape[:-2], -1).to(torch.float64)

    def at(r, c):
        return flat[..., r * grid.nlon + c]

    value = (1 - wr) * ((1 - wc) * at(r0, c0) + wc * at(r0, c1)) + wr * ((1 - wc) * at(r1, c0) + wc * at(r1, c1))
    return value.reshape(fields.shape).to(fields.dtype)


def weighted_rmse(error: torch.Tensor, grid: Grid) -> float:
    """Area-weighted RMSE over (..., nlat, nlon), averaged over everything else."""
    weights = grid.area_weights.to(error.dtype)[:, None]
    return float(((error.square() * weights).mean() / weights.mean()).sqrt())


def rotation_errors(model, batch, angles_rad) -> list[dict]:
    """One-step normalized RMSE of ``model`` (a ``Forecaster``) on ``batch`` with inputs,
    static fields and target rotated by each angle about the y axis."""
    grid = model.grid
    rows = []
    with torch.no_grad():
        for alpha in angles_rad:
            rotation = rotation_matrix(torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64), float(alpha))
            inputs = rotate_fields(batch.inputs, grid, rotation)
            static = rotate_fields(batch.static, grid, rotation)
            target = rotate_fields(batch.targets[:, 0], grid, rotation)
            prediction = model.step(inputs, static, batch.forcings[:, : inputs.shape[1] + 1])
            rows.append({"alpha_rad": float(alpha), "rmse": weighted_rmse(prediction - target, grid)})
    return rows


def resolution_errors(model, batch, grid: Grid) -> dict:
    """One-step normalized RMSE of the model's weights applied on ``grid`` (the batch's grid)."""
    other = model.on_grid(grid)
    with torch.no_grad():
        prediction = other.step(batch.inputs, batch.static, batch.forcings[:, : batch.inputs.shape[1] + 1])
    target = batch.targets[:, 0]
    return {
        "grid": f"{grid.nlat}x{grid.nlon}",
        "rmse": weighted_rmse(prediction - target, grid),
        "persistence_rmse": weighted_rmse(batch.inputs[:, -1] - target, grid),
    }
