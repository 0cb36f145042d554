"""Initial-condition ensembles for any checkpoint: the initial states of the members.

Member j of K starts from initial condition j mod M, where the M initial conditions are the
store's (M = 1) or the members selected from an ERA5 ensemble file (``--ic-members``), plus,
with a ``Perturbation``, its own random field. Each member is then rolled out once; a
stochastic model (``network.noise_channels``) also draws its own noise in every member and
step. So a deterministic model needs a perturbation or distinct IC-file members for its
members to differ.

A perturbation is drawn in normalized units with standard deviation ``scale``: in physical
units, ``scale`` times each channel's standard deviation from the checkpoint's normalization
statistics (``scale`` 0.05: 5 % of each channel's std). Every input time of a member (a model
with ``history`` > 1) gets the same field, so its input tendencies stay those of the analysis.

- ``gaussian``: independent N(0, scale²) at every grid point and channel (earth2studio's
  ``Gaussian`` perturbation).
- ``spherical-noise``: isotropic Gaussian random fields made of the grid's own spherical
  harmonics (``spherical_noise``): smooth, large-scale fields whose area mean is unperturbed.
"""

import functools
import math
from dataclasses import dataclass
from numbers import Real

import torch

from s2forecast.geometry import Grid
from s2forecast.user_errors import UserError

PERTURBATIONS = ("gaussian", "spherical-noise")
DEFAULT_SCALE = 0.05  # earth2studio's default noise amplitude, here in units of each channel's std
# below it the noise is under float32's resolution of normalized values (about 1e-7 at 1): members
# of a deterministic model came out identical, or the noise was exactly 0 (1e-50)
MIN_SCALE = 1e-6
ALPHA, TAU = 2.0, 3.0  # spectral decay and inverse length scale of torch-harmonics' GaussianRandomFieldS2


def max_degree(grid: Grid) -> int:
    """L, the highest degree of ``spherical_noise`` on ``grid``: (min(nlat, nlon) - 1) // 2, half
    the degrees the grid resolves, which every grid kind's quadrature integrates exactly (so
    ``evaluate``'s spectra see all of it) and within the longitudes' Nyquist limit."""
    return max(1, (min(grid.nlat, grid.nlon) - 1) // 2)


def spherical_noise(grid: Grid, shape: tuple[int, ...], generator: torch.Generator | None = None,
                    device="cpu") -> torch.Tensor:  # fmt: skip
    """Isotropic Gaussian random fields on ``grid``, band-limited, unit variance per point.

    f = sum over degrees 1 <= l <= L (``max_degree``) and orders |m| <= l of c_lm Y_lm, with
    Y_lm the orthonormal spherical harmonics at the grid's own latitudes (torch-harmonics'
    ``legpoly`` there, then an inverse real FFT: what its ``InverseRealSHT`` computes, on every
    grid kind, WB2's cell-centred ones too) and c_lm ~ N(0, s_l²) with the spectrum of
    torch-harmonics' ``GaussianRandomFieldS2``, s_l ∝ (l (l + 1) + τ²)^(-α/2), α = 2, τ = 3:
    the variance per degree, (2l + 1) s_l², decays as l^-3. No l = 0 (area means stay) and no
    power above L. Scaled so that the variance per point, averaged over the sphere, is 1.

    Args:
        grid: the model's grid.
        shape: leading dims, e.g. (members, channels).
        generator: on ``device``; the same generator state gives the same fields.

    Returns:
        (*shape, nlat, nlon) float32 on ``device``, rows north -> south as the grid's.
    """
    lmax = max_degree(grid)
    degree = torch.arange(lmax + 1, dtype=torch.float64)
    order = torch.arange(lmax + 1, dtype=torch.float64)
    std = (degree * (degree + 1) + TAU**2) ** (-ALPHA / 2)
    std = torch.where(order[None, :] <= degree[:, None], std[:, None], 0.0)  # (l, m): m <= l
    std[0] = 0.0  # no l = 0: the area mean is not perturbed
    # area mean of E f²: sum over l of (2l + 1) s_l² / (4 pi) (|m| <= l, each +-m pair once per sign)
    std /= math.sqrt(float(((2 * degree + 1) * std[:, 0] ** 2).sum()) / (4 * math.pi))
    # a real field from complex c_lm: m = 0 takes the real part (variance s²), m > 0 half in each part
    std[:, 1:] *= 0.5**0.5
    legendre = legendre_table(grid, str(device))
    xi = torch.randn((*shape, lmax + 1, lmax + 1, 2), generator=generator, device=device)
    coefficients = xi * std.float().to(device)[..., None]  # (..., l, m, real/imaginary)
    # a real table for both parts: half the memory of a complex one
    parts = torch.einsum("...lmc,mlj->...jmc", coefficients, legendre)
    fourier = torch.view_as_complex(parts.contiguous())
    # irfft "forward": f = F_0 + 2 Re sum_{m > 0} F_m exp(i m lon), the m < 0 half of a real field
    return torch.fft.irfft(fourier, n=grid.nlon, dim=-1, norm="forward")


@functools.lru_cache(maxsize=1)  # a rollout draws on one grid and device, once per init time
def legendre_table(grid: Grid, device: str) -> torch.Tensor:
    """(m, l, nlat) float32 orthonormal associated Legendre functions P_lm(cos colat) at the grid's
    latitudes, l, m <= ``max_degree``: 2 pi int P_lm(x)² dx = 1, so Y_lm = P_lm exp(i m lon) is
    orthonormal. Kept: rebuilt for every draw, it was a float64 table of 750 MB and 0.8 s at
    0.25° (721x1440), per init time."""
    from torch_harmonics.legendre import legpoly

    lmax = max_degree(grid)
    legendre = legpoly(lmax + 1, lmax + 1, torch.cos(grid.colats), norm="ortho", csphase=False)
    return legendre.to(device, torch.float32)


@dataclass(frozen=True)
class Perturbation:
    """Noise added to the members' normalized initial states (module docstring).

    Attributes:
        kind: ``gaussian`` or ``spherical-noise``.
        scale: standard deviation in units of each channel's std (finite, >= ``MIN_SCALE``).

    Raises:
        ValueError: an unknown kind, or a scale that is not a finite number >= ``MIN_SCALE``.
    """

    kind: str
    scale: float = DEFAULT_SCALE

    def __post_init__(self):
        if self.kind not in PERTURBATIONS:
            raise UserError(f"unknown perturbation {self.kind!r}; use one of {', '.join(PERTURBATIONS)}")
        if not (isinstance(self.scale, Real) and not isinstance(self.scale, bool) and math.isfinite(self.scale)
                and self.scale >= MIN_SCALE):  # fmt: skip
            raise UserError(
                f"--perturbation-scale must be a finite number >= {MIN_SCALE:g} (in units of each channel's std, e.g. "
                f"{DEFAULT_SCALE}; smaller noise is lost in float32 rounding), got {self.scale!r}"
            )

    def draw(self, shape: tuple[int, ...], grid: Grid, generator: torch.Generator | None = None,
             device="cpu") -> torch.Tensor:  # fmt: skip
        """(*shape, nlat, nlon) float32 noise of standard deviation ``scale`` (normalized units)."""
        if self.kind == "gaussian":
            return self.scale * torch.randn((*shape, *grid.shape), generator=generator, device=device)
        return self.scale * spherical_noise(grid, shape, generator, device)

    def describe(self, statistics: str = "the checkpoint's statistics") -> str:
        """What the forecast file's ``ensemble`` attribute says; ``statistics``: those the inputs
        are normalized with, whose std the noise is in units of."""
        return f"{self.kind}, scale {self.scale:g} x each channel's std ({statistics})"


def member_states(
    inputs: torch.Tensor,
    members: int,
    grid: Grid,
    perturbation: Perturbation | None = None,
    generator: torch.Generator | list[torch.Generator] | None = None,
) -> torch.Tensor:
    """The normalized initial states of ``members`` members of every initialization time.

    Args:
        inputs: (batch, history, channels, nlat, nlon) one initial condition per time, or
            (batch, M, history, channels, nlat, nlon) M initial conditions per time (IC-file
            members); ``members`` must then be a multiple of M.
        members: K, the ensemble size.
        grid: the fields' grid.
        perturbation: added to every member (a draw each), the same at every input time.
        generator: of the perturbation, on the device of ``inputs``; or one per initialization
            time, each drawing that time's members (independent of the batch).

    Returns:
        (batch, K, history, channels, nlat, nlon): member j is initial condition j mod M, perturbed.
    """
    if inputs.dim() == 5:
        inputs = inputs[:, None]
    batch, m = inputs.shape[:2]
    if members < 1 or members % m:
        raise UserError(f"{members} members cannot share {m} initial conditions equally; use a multiple of {m}")
    states = inputs.repeat(1, members // m, *([1] * (inputs.dim() - 2)))  # member j: initial condition j mod M
    if perturbation is not None:
        shape = (members, states.shape[3])
        if isinstance(generator, list | tuple):
            if len(generator) != batch:  # one drew for every time: they shared a perturbation
                raise UserError(f"{len(generator)} generators for {batch} initialization times: give one per time")
            noise = torch.stack([perturbation.draw(shape, grid, g, states.device) for g in generator])
        else:
            noise = perturbation.draw((batch, *shape), grid, generator, states.device)
        states = states + noise[:, :, None].to(states.dtype)
    return states
