"""Noise inputs of stochastic (ensemble) forecasters: members differ by the noise each one draws.

Two sources, both unit variance, both drawn from a ``torch.Generator`` when given one (so that
ensembles are reproducible from a seed), both optionally correlated in time:

- ``SphericalNoise``: Gaussian random fields on the sphere (FourCastNet 3, AIFS-CRPS) with the
  isotropic spectrum of torch-harmonics' ``GaussianRandomFieldS2``: coefficient std of degree l
  proportional to (l (l + 1) + tau**2)**(-alpha/2). alpha = 2, tau = 3 (the default) is smooth;
  alpha = 0 is white (every degree as strong as every other per coefficient: small scales get
  noise too); tau = 0 is a pure power law. That torch-harmonics class fixes nlon = 2 nlat and
  draws from the global random state only; here the field lives on any grid of
  ``s2forecast.geometry.Grid``.
- ``VectorNoise``: a low-dimensional Gaussian vector per sample, global, not spatial (FGN's
  32-dimensional noise feeding conditional layer norms).

Temporal correlation over the steps of a rollout: a first-order autoregression (AR(1)) with
correlation ``correlation`` = rho, noise_t = rho noise_{t-1} + sqrt(1 - rho**2) eps_t, which
keeps the unit variance of every step; rho = 0 draws independent noise every step, rho = 1
keeps a member's first draw for its whole rollout. The caller carries the previous step's noise
(``Forecaster.rollout``).
"""

import math

import torch
from torch import nn
from torch_harmonics import InverseRealSHT

from s2forecast.geometry import Grid
from s2forecast.user_errors import UserError


def check_noise_options(channels: int, correlation: float) -> None:
    if channels < 1:
        raise UserError(f"noise channels must be >= 1, got {channels}")
    if not 0.0 <= correlation <= 1.0:
        raise UserError(
            f"noise_correlation must be in [0, 1] (the AR(1) correlation of the noise between rollout steps), "
            f"got {correlation}"
        )


def autoregressive(fresh: torch.Tensor, previous: torch.Tensor | None, correlation: float) -> torch.Tensor:
    """The AR(1) step rho * previous + sqrt(1 - rho**2) * fresh; ``fresh`` itself at the first step
    or for rho = 0 (so that uncorrelated noise is the plain draw, bit for bit)."""
    if previous is None or correlation == 0.0:
        return fresh
    return correlation * previous.to(fresh.dtype) + math.sqrt(1.0 - correlation**2) * fresh


class SphericalNoise(nn.Module):
    """Isotropic Gaussian random fields on ``grid``, scaled to unit variance per point.

    Args:
        grid: where the fields live (an ``equiangular-midpoint`` grid is not supported by
            torch-harmonics' SHT; use the model's latent grid).
        channels: independent fields per sample.
        alpha: spectral decay (larger: smoother fields; 0: white; < 0: blue).
        tau: inverse length scale (larger: shorter correlation length), in units of 1/radius;
            0: a pure power law in l (l + 1).
        correlation: AR(1) correlation between rollout steps (module docstring).
    """

    def __init__(self, grid: Grid, channels: int, alpha: float = 2.0, tau: float = 3.0, correlation: float = 0.0):
        super().__init__()
        check_noise_options(channels, correlation)
        if not (math.isfinite(alpha) and math.isfinite(tau) and tau >= 0):
            raise UserError(f"noise_alpha must be finite and noise_tau >= 0, got {alpha} and {tau}")
        self.grid, self.channels, self.correlation = grid, channels, correlation
        # degrees below the longitudes' Nyquist order: every (l, m <= l) kept, so isotropic, unit
        # variance at every point. With nlat >= nlon / 2 + 1, lmax = nlat kept that order, which
        # irfft takes once (not as a +-m pair): white noise had 0.94-0.99 per point at 9x16-33x64
        lmax = min(grid.nlat, (grid.nlon + 1) // 2)
        if lmax < 2:  # degree 0 alone, zeroed below: a variance of 0, and NaN noise
            raise UserError(
                f"field noise on a {grid.nlat}x{grid.nlon} grid has no degree above 0 to draw (it needs at least 2 "
                "rows and 3 columns): give it a finer latent grid (a smaller scale_factor) or noise_kind 'vector'"
            )
        self.isht = InverseRealSHT(grid.nlat, grid.nlon, lmax=lmax, mmax=lmax, grid=grid.kind, norm="ortho")
        lmax, mmax = self.isht.lmax, self.isht.mmax
        degree = torch.arange(lmax, dtype=torch.float64)[:, None].expand(lmax, mmax)
        base = degree * (degree + 1) + tau**2
        std = torch.tril(base.clamp(min=1.0) ** (-alpha / 2.0))  # clamp: l = 0 with tau = 0 (zeroed below)
        std[0, 0] = 0.0  # no global mean: members differ in patterns, not in offsets
        # a real field from complex coefficients: m > 0 carry the power of +-m (half in each part)
        std[:, 1:] *= 0.5**0.5
        # unit variance per point, averaged over the sphere: sum over (l, m) of the coefficient
        # variances, (4 pi)^-1 per orthonormal harmonic, twice for the two parts of m > 0
        variance = (std[:, :1].square().sum() + 2 * 2 * std[:, 1:].square().sum()) / (4 * torch.pi)
        self.register_buffer("std", (std / variance.sqrt()).float(), persistent=False)

    def forward(
        self, batch: int, generator: torch.Generator | None = None, previous: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(batch, channels, nlat, nlon) fields; ``generator`` (on the module's device) for
        reproducibility; ``previous``: the last step's fields, for the temporal correlation."""
        shape = (batch, self.channels, *self.std.shape, 2)
        xi = torch.randn(shape, generator=generator, device=self.std.device, dtype=self.std.dtype)
        coefficients = torch.view_as_complex(xi) * self.std
        with torch.autocast(self.std.device.type, enabled=False):  # torch-harmonics' ISHT has no bf16 complex
            fields = self.isht(coefficients)
        return autoregressive(fields, previous, self.correlation)


class VectorNoise(nn.Module):
    """A standard normal vector per sample (FGN), shaped as a (batch, channels, 1, 1) field so that
    what a field conditions (pointwise) it conditions everywhere alike.

    Args:
        channels: its dimension (FGN: 32).
        correlation: AR(1) correlation between rollout steps (module docstring).
    """

    def __init__(self, channels: int, correlation: float = 0.0):
        super().__init__()
        check_noise_options(channels, correlation)
        self.channels, self.correlation = channels, correlation
        self.register_buffer("anchor", torch.zeros(()), persistent=False)  # the device and dtype to draw on

    def forward(
        self, batch: int, generator: torch.Generator | None = None, previous: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(batch, channels, 1, 1); arguments as ``SphericalNoise.forward``."""
        fresh = torch.randn(
            (batch, self.channels, 1, 1), generator=generator, device=self.anchor.device, dtype=self.anchor.dtype
        )
        return autoregressive(fresh, previous, self.correlation)
