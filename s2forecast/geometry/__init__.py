"""Grids, quadrature, rotations and distances on the unit sphere."""

from s2forecast.geometry.distance import geodesic_distance, haversine, within_radius
from s2forecast.geometry.grid import GRID_KINDS, Grid
from s2forecast.geometry.rotations import random_rotation, rotation_matrix

__all__ = [
    "GRID_KINDS",
    "Grid",
    "geodesic_distance",
    "haversine",
    "random_rotation",
    "rotation_matrix",
    "within_radius",
]
