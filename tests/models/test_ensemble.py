"""Stochastic forecasters (issue 17): the fair CRPS, spherical noise fields, noise conditioning."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from s2forecast.geometry import Grid
from s2forecast.models.spherical_transformer import SphericalTransformer
from s2forecast.nn import SphericalNoise
from s2forecast.training.losses import ensemble_loss, fair_crps, weighted_mse

ERA5_SLICE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"


def crps_pairwise(members: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """The fair CRPS by its definition, member by member and pair by pair: members (M, ...)."""
    m = members.shape[0]
    skill = sum(np.abs(members[i] - truth) for i in range(m)) / m
    spread = sum(np.abs(members[i] - members[j]) for i in range(m) for j in range(m))
    return skill - spread / (2 * m * (m - 1))


@pytest.mark.parametrize("m", [2, 3, 5])
def test_fair_crps_matches_its_definition_on_real_era5(m):
    """Members: real 2 m temperatures of other times of the ERA5 slice, plus noise; truth: the first time."""
    with xr.open_dataset(ERA5_SLICE) as ds:
        t2m = ds["t2m"].values.astype(np.float64)  # (3, lat, lon) K
    rng = np.random.default_rng(m)
    members = np.stack([t2m[1 + i % 2] + rng.normal(0.0, 1.5, t2m.shape[1:]) for i in range(m)])
    expected = crps_pairwise(members, t2m[0])
    got = fair_crps(torch.tensor(members)[None], torch.tensor(t2m[0])[None])[0]
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_fair_crps_is_unbiased_for_the_crps_of_the_distribution():
    """Members drawn from N(0, 1): the mean fair CRPS over many draws is the closed-form CRPS of
    N(0, 1) at y (Gneiting & Raftery 2007), even with 2 members, where the plain estimator is biased."""
    y = torch.tensor([-1.3, 0.0, 0.4, 2.0])
    members = torch.randn(200_000, 2, 4, generator=torch.Generator().manual_seed(0))
    mean = fair_crps(members, y.expand(200_000, 4)).mean(dim=0)
    phi = torch.exp(-0.5 * y**2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + torch.erf(y / math.sqrt(2)))
    exact = y * (2 * cdf - 1) + 2 * phi - 1 / math.sqrt(math.pi)
    torch.testing.assert_close(mean, exact, atol=5e-3, rtol=0)


def test_fair_crps_gradients_and_member_errors():
    members = torch.randn(2, 4, 3, 8, 16, requires_grad=True)
    target = torch.randn(2, 3, 8, 16)
    fair_crps(members, target).mean().backward()
    assert torch.isfinite(members.grad).all() and members.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="the fair CRPS needs at least 2 ensemble members, got 1"):
        fair_crps(members[:, :1], target)


def test_ensemble_loss_is_weighted_crps_plus_the_mean_mse():
    members, target = torch.randn(2, 3, 2, 4, 8), torch.randn(2, 2, 4, 8)
    weights = torch.rand(2, 4, 8)
    crps = (fair_crps(members, target) * weights).mean()
    torch.testing.assert_close(ensemble_loss(members, target, weights), crps)
    mixed = crps + 0.5 * weighted_mse(members.mean(dim=1), target, weights)
    torch.testing.assert_close(ensemble_loss(members, target, weights, mse_weight=0.5), mixed)
    with pytest.raises(ValueError, match="mse_weight must be >= 0, got -1"):
        ensemble_loss(members, target, weights, mse_weight=-1)


@pytest.mark.parametrize("grid", [Grid(16, 32), Grid(17, 48), Grid(12, 24, "legendre-gauss")], ids=str)
def test_spherical_noise_has_unit_variance_and_is_reproducible(grid):
    noise = SphericalNoise(grid, channels=3)
    fields = noise(512, torch.Generator().manual_seed(1)).double()
    assert fields.shape == (512, 3, *grid.shape)
    weights = grid.quadrature_weights.double().reshape(grid.nlat, -1).expand(grid.shape)
    weights = weights / weights.sum()
    variance = (fields.square() * weights).sum(dim=(-2, -1)).mean()
    assert abs(float(variance) - 1.0) < 0.05
    assert abs(float((fields * weights).sum(dim=(-2, -1)).mean())) < 0.02  # no global mean
    again = noise(512, torch.Generator().manual_seed(1))
    assert torch.equal(again, noise(512, torch.Generator().manual_seed(1)))
    assert not torch.equal(again, noise(512, torch.Generator().manual_seed(2)))


def test_spherical_noise_is_smooth_and_isotropic():
    """Correlation falls with geodesic distance, the same along a meridian and along the equator."""
    grid = Grid(33, 64)
    fields = SphericalNoise(grid, channels=1)(4096, torch.Generator().manual_seed(0))[:, 0].double()
    equator = grid.nlat // 2
    along_equator = [float((fields[:, equator, 0] * fields[:, equator, k]).mean()) for k in (1, 2, 4)]
    along_meridian = [float((fields[:, equator, 0] * fields[:, equator + k, 0]).mean()) for k in (1, 2, 4)]
    assert along_equator[0] > along_equator[1] > along_equator[2] > 0
    np.testing.assert_allclose(along_equator, along_meridian, atol=0.06)  # same spacing: 360/64 = 180/32 deg


def test_noise_conditioning_starts_as_the_deterministic_model():
    grid = Grid(16, 32)
    torch.manual_seed(0)
    stochastic = SphericalTransformer(grid, 3, 2, embed_dim=16, num_layers=2, noise_channels=4)
    deterministic = SphericalTransformer(grid, 3, 2, embed_dim=16, num_layers=2)
    missing, unexpected = deterministic.load_state_dict(stochastic.state_dict(), strict=False)
    assert missing == [] and all(".modulation." in key for key in unexpected) and unexpected
    x = torch.randn(2, 3, *grid.shape)
    torch.testing.assert_close(stochastic(x), deterministic(x))  # zero-initialized modulation

    for block in stochastic.blocks:  # as after some training
        torch.nn.init.normal_(block.modulation.weight, std=0.1)
    noise = stochastic.sample_noise(2, torch.Generator().manual_seed(3))
    assert noise.shape == (2, 4, *stochastic.latent.shape)
    torch.testing.assert_close(stochastic(x, noise), stochastic(x, noise.clone()))
    other = stochastic.sample_noise(2, torch.Generator().manual_seed(4))
    assert (stochastic(x, noise) - stochastic(x, other)).abs().max() > 1e-3  # members differ
    assert stochastic.on_grid(Grid(32, 64))(torch.randn(1, 3, 32, 64)).shape == (1, 2, 32, 64)
    assert deterministic.sample_noise(2) is None


def test_noise_channels_bad_value():
    with pytest.raises(ValueError, match="noise_channels must be >= 0, got -1"):
        SphericalTransformer(Grid(16, 32), 3, 2, embed_dim=16, num_layers=1, noise_channels=-1)
