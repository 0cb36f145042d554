"""Training losses on (..., channels, nlat, nlon) fields: area- and channel-weighted.

``weights`` below is the product of the per-channel loss weights (mean 1) and the grid's
quadrature weights (mean 1), broadcastable to (channels, nlat, nlon): a loss is the weighted
mean over every point, channel, step and sample, so losses of different grids compare.
"""

import torch

from s2forecast.user_errors import UserError


def weighted_mse(prediction: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted mean squared error of (..., channels, nlat, nlon) tensors."""
    return ((prediction.float() - target.float()).square() * weights).mean()


def fair_crps(members: torch.Tensor, target: torch.Tensor, member_dim: int = 1) -> torch.Tensor:
    """Pointwise fair (unbiased) ensemble CRPS.

    CRPS_fair = 1/M sum_i |x_i - y| - 1/(2 M (M - 1)) sum_i sum_j |x_i - x_j|, the estimator
    whose expectation is the CRPS of the distribution the M members are drawn from (Ferro 2014;
    WeatherBench2's ``CRPS``, AIFS-CRPS's loss with alpha = 1). The pair sum is computed from
    the sorted members, sum_ij |x_i - x_j| = 2 sum_k (2k - M - 1) x_(k), in O(M log M).

    Args:
        members: (..., M, ...) with the M >= 2 members along ``member_dim``.
        target: ``members`` without ``member_dim``.

    Returns:
        The CRPS per point, shaped like ``target`` (float32 or wider).
    """
    m = members.shape[member_dim]
    if m < 2:
        raise UserError(f"the fair CRPS needs at least 2 ensemble members, got {m}")
    dtype = torch.promote_types(members.dtype, torch.float32)  # bf16 autocast outputs are scored in fp32
    members = members.to(dtype)
    skill = (members - target.to(dtype).unsqueeze(member_dim)).abs().mean(dim=member_dim)
    ordered = members.sort(dim=member_dim).values
    shape = [1] * members.ndim
    shape[member_dim] = m
    rank = torch.arange(1, m + 1, device=members.device, dtype=members.dtype).reshape(shape)
    pair_sum = 2 * ((2 * rank - m - 1) * ordered).sum(dim=member_dim)
    return skill - pair_sum / (2 * m * (m - 1))


def ensemble_loss(
    members: torch.Tensor, target: torch.Tensor, weights: torch.Tensor, mse_weight: float = 0.0
) -> torch.Tensor:
    """Weighted fair CRPS of an ensemble, plus ``mse_weight`` times the weighted MSE of its mean.

    Args:
        members: (batch, members, ..., channels, nlat, nlon).
        target: (batch, ..., channels, nlat, nlon).
        weights: broadcastable to (channels, nlat, nlon); see the module docstring.
        mse_weight: >= 0; the ensemble mean's MSE pulls the mean to the truth (AIFS-CRPS uses
            CRPS alone; some runs mix in a little MSE for the first epochs).
    """
    if mse_weight < 0:
        raise UserError(f"mse_weight must be >= 0, got {mse_weight}")
    loss = (fair_crps(members, target) * weights).mean()
    if mse_weight:
        loss = loss + mse_weight * weighted_mse(members.float().mean(dim=1), target, weights)
    return loss
