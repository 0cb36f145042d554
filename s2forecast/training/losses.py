"""Training losses on (..., channels, nlat, nlon) fields: area- and channel-weighted.

``weights`` below is the product of the per-channel loss weights (mean 1) and the grid's
quadrature weights (mean 1), broadcastable to (channels, nlat, nlon): a loss is the weighted
mean over every point, channel, step and sample, so losses of different grids compare.
"""

import math

import torch

from s2forecast.user_errors import UserError


def weighted_mse(prediction: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted mean squared error of (..., channels, nlat, nlon) tensors."""
    dtype = torch.promote_types(torch.promote_types(prediction.dtype, target.dtype), torch.float32)  # float64 stays
    return ((prediction.to(dtype) - target.to(dtype)).square() * weights).mean()


def almost_fair_crps(
    members: torch.Tensor, target: torch.Tensor, alpha: float = 1.0, member_dim: int = 1
) -> torch.Tensor:
    """Pointwise almost-fair ensemble CRPS (AIFS-CRPS, Lang et al. 2024).

    afCRPS_alpha = alpha CRPS_fair + (1 - alpha) CRPS_standard, with
    CRPS = 1/M sum_i |x_i - y| - c/2 sum_i sum_j |x_i - x_j|, c = 1/(M (M - 1)) for the fair
    (unbiased) estimator, whose expectation is the CRPS of the distribution the M members are drawn
    from (Ferro 2014; WeatherBench2's ``CRPS``), and c = 1/M**2 for the standard one (the CRPS of the
    M members' own empirical distribution, which rewards too little spread). Per sample, the
    fair CRPS is blind to how far apart members that bracket the truth are (two members on
    either side of it score 0 at any distance); alpha slightly below 1 (e.g. 0.95) removes that
    blind spot. alpha = 1 is the fair CRPS, alpha = 0 the standard one. The pair sum is computed
    from the sorted members, sum_ij |x_i - x_j| = 2 sum_k (2k - M - 1) x_(k), in O(M log M).

    Args:
        members: (..., M, ...) with the M >= 2 members along ``member_dim``.
        target: ``members`` without ``member_dim``.
        alpha: in [0, 1].

    Returns:
        The CRPS per point, shaped like ``target`` (float32 or wider).
    """
    m = members.shape[member_dim]
    if m < 2:
        raise UserError(f"the fair CRPS needs at least 2 ensemble members, got {m}")
    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"crps_alpha must be in [0, 1] (1: the fair CRPS, 0: the standard one), got {alpha}")
    dtype = torch.promote_types(members.dtype, torch.float32)  # bf16 autocast outputs are scored in fp32
    members = members.to(dtype)
    skill = (members - target.to(dtype).unsqueeze(member_dim)).abs().mean(dim=member_dim)
    ordered = members.sort(dim=member_dim).values
    shape = [1] * members.ndim
    shape[member_dim] = m
    rank = torch.arange(1, m + 1, device=members.device, dtype=members.dtype).reshape(shape)
    pair_sum = 2 * ((2 * rank - m - 1) * ordered).sum(dim=member_dim)
    coefficient = alpha / (m * (m - 1)) + (1.0 - alpha) / m**2
    return skill - 0.5 * coefficient * pair_sum


def fair_crps(members: torch.Tensor, target: torch.Tensor, member_dim: int = 1) -> torch.Tensor:
    """Pointwise fair CRPS: ``almost_fair_crps`` with alpha = 1."""
    return almost_fair_crps(members, target, 1.0, member_dim)


def spectral_crps(
    members: torch.Tensor,
    target: torch.Tensor,
    analysis: torch.nn.Module,
    channel_weights: torch.Tensor,
    alpha: float = 1.0,
) -> torch.Tensor:
    """Channel-weighted almost-fair CRPS of the fields' spherical harmonic coefficients.

    The CRPS of the real and of the imaginary part of every orthonormal coefficient c_lm, summed
    over the degrees l the ``analysis`` resolves exactly (``nn.SphericalHarmonicAnalysis``: l < nlat
    on Legendre-Gauss grids, l < (nlat + 1) // 2 on equiangular ones, where the grid's quadrature
    is exact; finer scales on equiangular grids are not scored by this term, only on the grid) and
    orders m = -l..l (those of m < 0, the conjugates of m > 0 for a real
    field, counted by doubling m > 0) and divided by sqrt(4 pi): for a field that is constant
    over the sphere (l = 0 only) it is the grid CRPS. Every scale counts by its amplitude, not by
    its area as on the grid, so members that blur small scales pay for it (FourCastNet 3).

    Args:
        members: (batch, members, ..., channels, nlat, nlon).
        target: (batch, ..., channels, nlat, nlon).
        analysis: ``s2forecast.nn.SphericalHarmonicAnalysis`` of the fields' grid (its own
            quadrature).
        channel_weights: (channels,), mean 1.
        alpha: of ``almost_fair_crps``.
    """
    scores = almost_fair_crps(torch.view_as_real(analysis(members)), torch.view_as_real(analysis(target)), alpha)
    orders = torch.ones(scores.shape[-2], device=scores.device, dtype=scores.dtype)
    orders[1:] = 2.0  # m > 0 stands for +-m
    per_channel = (scores * orders[:, None]).sum(dim=(-3, -2, -1)) / math.sqrt(4 * math.pi)
    return (per_channel * channel_weights).mean()


def ensemble_loss(
    members: torch.Tensor,
    target: torch.Tensor,
    weights: torch.Tensor,
    mse_weight: float = 0.0,
    alpha: float = 1.0,
) -> torch.Tensor:
    """Weighted almost-fair CRPS of an ensemble, plus ``mse_weight`` times the weighted MSE of its mean.

    Args:
        members: (batch, members, ..., channels, nlat, nlon).
        target: (batch, ..., channels, nlat, nlon).
        weights: broadcastable to (channels, nlat, nlon); see the module docstring.
        mse_weight: >= 0; the ensemble mean's MSE pulls the mean to the truth (AIFS-CRPS uses
            CRPS alone; some runs mix in a little MSE for the first epochs).
        alpha: of ``almost_fair_crps`` (1: the fair CRPS).
    """
    if mse_weight < 0:
        raise UserError(f"mse_weight must be >= 0, got {mse_weight}")
    loss = (almost_fair_crps(members, target, alpha) * weights).mean()
    if mse_weight:
        loss = loss + mse_weight * weighted_mse(members.to(loss.dtype).mean(dim=1), target, weights)
    return loss
