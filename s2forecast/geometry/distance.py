"""Great-circle distances on the unit sphere."""

import math

import torch

# Relative slack on the radius when testing "distance <= radius", so that a radius equal to a
# grid spacing includes the neighbors that lie exactly that far away despite round-off.
RADIUS_RTOL = 1e-9


def haversine(colat1: torch.Tensor, lon1: torch.Tensor, colat2: torch.Tensor, lon2: torch.Tensor) -> torch.Tensor:
    """hav(d) = sin^2(d / 2) of the great-circle distance d between two points (broadcasting).

    Accurate for small and large distances alike (no arccos of a number close to 1).
    Angles in radians.
    """
    return (
        torch.sin(0.5 * (colat1 - colat2)) ** 2
        + torch.sin(colat1) * torch.sin(colat2) * torch.sin(0.5 * (lon1 - lon2)) ** 2
    )


def within_radius(hav: torch.Tensor, radius: float) -> torch.Tensor:
    """Whether haversines ``hav`` belong to distances <= ``radius`` (radians). A neighbour exactly
    ``radius`` away is kept for haversines of float64 coordinates (the grid's); of float32 ones, the
    coordinates' round-off (1e-4 of a 0.25 deg spacing) decides. The slack is the radius's: on the
    haversine, flat near pi, it reached 6e-5 rad there (a radius just below pi held the antipodes)."""
    if radius >= math.pi:  # the whole sphere, antipodes whose haversine rounds above 1 included
        return torch.ones_like(hav, dtype=torch.bool)
    return hav <= math.sin(0.5 * min(math.pi, radius * (1.0 + RADIUS_RTOL))) ** 2


def geodesic_distance(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Great-circle distance in radians between unit vectors ``u`` and ``v`` of shape (..., 3).

    Uses atan2(|u x v|, u . v), which stays accurate near 0 and pi.
    """
    u, v = torch.broadcast_tensors(u, v)
    cross = torch.linalg.vector_norm(torch.linalg.cross(u, v, dim=-1), dim=-1)
    return torch.atan2(cross, (u * v).sum(-1))
