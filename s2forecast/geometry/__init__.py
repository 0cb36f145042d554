"""Grids, quadrature, rotations and distances on the unit sphere.

``Grid`` and ``GRID_KINDS`` import without torch (readers recognise a store's grid with them); the
tensor functions load torch when first used.
"""

from s2forecast.geometry.grid import GRID_KINDS, Grid

_TORCH_FUNCTIONS = {
    "geodesic_distance": "s2forecast.geometry.distance",
    "haversine": "s2forecast.geometry.distance",
    "within_radius": "s2forecast.geometry.distance",
    "random_rotation": "s2forecast.geometry.rotations",
    "rotation_matrix": "s2forecast.geometry.rotations",
}


def __getattr__(name: str):
    if name in _TORCH_FUNCTIONS:
        import importlib

        return getattr(importlib.import_module(_TORCH_FUNCTIONS[name]), name)
    raise AttributeError(f"module 's2forecast.geometry' has no attribute {name!r}")


__all__ = ["GRID_KINDS", "Grid", *_TORCH_FUNCTIONS]


def __dir__() -> list[str]:  # the lazy functions too (tab completion)
    return sorted(set(globals()) | set(__all__))
