"""Rotations of the sphere (for equivariance tests and rotated-input evaluations)."""

import math

import torch

from s2forecast.user_errors import UserError


def rotation_matrix(axis: torch.Tensor, angle: float) -> torch.Tensor:
    """(3, 3) float64 matrix rotating by ``angle`` radians about ``axis`` (right-hand rule)."""
    axis = torch.as_tensor(axis, dtype=torch.float64)
    norm = torch.linalg.vector_norm(axis)
    if not torch.isfinite(norm) or norm == 0:
        raise UserError(f"a rotation axis needs a finite, nonzero length; got {axis.tolist()}")
    axis = axis / norm
    x, y, z = axis.tolist()
    cross = torch.tensor([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]], dtype=torch.float64)
    return torch.eye(3, dtype=torch.float64) + math.sin(angle) * cross + (1.0 - math.cos(angle)) * cross @ cross


def random_rotation(generator: torch.Generator | None = None) -> torch.Tensor:
    """A (3, 3) float64 rotation drawn uniformly from SO(3) (QR of a Gaussian matrix)."""
    a = torch.randn(3, 3, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q
