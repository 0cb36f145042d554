"""Random fields on the sphere, the noise input of stochastic (ensemble) forecasters.

Members of an ensemble differ by the noise each one draws (FourCastNet 3, AIFS-CRPS): a smooth
Gaussian random field on the sphere, with the isotropic Matérn-like spectrum of torch-harmonics'
``GaussianRandomFieldS2`` (coefficient std of degree l: sigma * (l (l + 1) + tau**2)**(-alpha/2)).
That class itself fixes nlon = 2 nlat and draws from the global random state only; here the
field lives on any grid of ``s2forecast.geometry.Grid`` and draws from a ``torch.Generator``
when given one, so that ensembles are reproducible from a seed.
"""

import torch
from torch import nn
from torch_harmonics import InverseRealSHT

from s2forecast.geometry import Grid
from s2forecast.user_errors import UserError


class SphericalNoise(nn.Module):
    """Isotropic Gaussian random fields on ``grid``, scaled to unit variance per point.

    Args:
        grid: where the fields live (an ``equiangular-midpoint`` grid is not supported by
            torch-harmonics' SHT; use the model's latent grid).
        channels: independent fields per sample.
        alpha: spectral decay (larger: smoother fields).
        tau: inverse length scale (larger: shorter correlation length), in units of 1/radius.
    """

    def __init__(self, grid: Grid, channels: int, alpha: float = 2.0, tau: float = 3.0):
        super().__init__()
        if channels < 1:
            raise UserError(f"noise channels must be >= 1, got {channels}")
        self.grid, self.channels = grid, channels
        self.isht = InverseRealSHT(grid.nlat, grid.nlon, lmax=grid.nlat, grid=grid.kind, norm="ortho")
        lmax, mmax = self.isht.lmax, self.isht.mmax
        degree = torch.arange(lmax, dtype=torch.float64)[:, None].expand(lmax, mmax)
        std = torch.tril((degree * (degree + 1) + tau**2) ** (-alpha / 2.0))
        std[0, 0] = 0.0  # no global mean: members differ in patterns, not in offsets
        # a real field from complex coefficients: m > 0 carry the power of +-m (half in each part)
        std[:, 1:] *= 0.5**0.5
        # unit variance per point, averaged over the sphere: sum over (l, m) of the coefficient
        # variances, (4 pi)^-1 per orthonormal harmonic, twice for the two parts of m > 0
        variance = (std[:, :1].square().sum() + 2 * 2 * std[:, 1:].square().sum()) / (4 * torch.pi)
        self.register_buffer("std", (std / variance.sqrt()).float(), persistent=False)

    def forward(self, batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(batch, channels, nlat, nlon) fields; ``generator`` (on the module's device) for reproducibility."""
        shape = (batch, self.channels, *self.std.shape, 2)
        xi = torch.randn(shape, generator=generator, device=self.std.device, dtype=self.std.dtype)
        coefficients = torch.view_as_complex(xi) * self.std
        return self.isht(coefficients)
