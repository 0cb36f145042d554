"""Noise sources of stochastic forecasters (issue 30): the spectrum of ``SphericalNoise`` per
degree, FGN's ``VectorNoise``, and the AR(1) correlation of both across rollout steps."""

import math

import pytest
import torch

from s2forecast.geometry import Grid
from s2forecast.nn import SphericalHarmonicAnalysis, SphericalNoise, VectorNoise

# Gauss-Legendre: the analysis recovers every coefficient the noise synthesizes (degrees < nlat)
# exactly, so the measured power per degree differs from the configured one by sampling only
GAUSS = Grid(12, 24, "legendre-gauss")


def configured_power(alpha: float, tau: float, degrees: int) -> torch.Tensor:
    """The power per degree the noise should have: (2l + 1) coefficients of std^2 proportional to
    (l (l + 1) + tau^2)^-alpha, none at l = 0, summing to 1 (unit variance per point)."""
    degree = torch.arange(degrees, dtype=torch.float64)
    power = (2 * degree + 1) * (degree * (degree + 1) + tau**2).clamp(min=1.0) ** (-alpha)
    power[0] = 0.0
    return power / power.sum()


@pytest.mark.parametrize("alpha, tau", [(0.0, 0.0), (1.0, 0.0), (2.0, 3.0)], ids=["white", "power-law", "default"])
def test_spherical_noise_has_the_configured_power_per_degree(alpha, tau):
    samples = 4096
    noise = SphericalNoise(GAUSS, channels=1, alpha=alpha, tau=tau)
    fields = noise(samples, torch.Generator().manual_seed(0))[:, 0].double()
    analysis = SphericalHarmonicAnalysis(GAUSS)
    assert analysis.lmax == GAUSS.nlat  # every degree the noise has
    coefficients = analysis(fields)  # (samples, lmax, mmax)
    twice = torch.ones(analysis.mmax, dtype=torch.float64)
    twice[1:] = 2.0
    measured = (coefficients.abs().square() * twice).sum(dim=-1).mean(dim=0) / (4 * math.pi)
    expected = configured_power(alpha, tau, analysis.lmax)
    assert float(measured[0]) < 1e-10  # no global mean
    # the power of degree l in one field is a sum of 2l + 1 independent squared Gaussians: its
    # relative standard deviation is sqrt(2 / (2l + 1)), over `samples` fields sqrt(2 / ((2l + 1)
    # samples)); 4 of them (every degree inside: a chance of ~1e-3 for the 11 degrees together)
    degree = torch.arange(1, analysis.lmax, dtype=torch.float64)
    tolerance = 4 * torch.sqrt(2 / ((2 * degree + 1) * samples))
    relative = measured[1:] / expected[1:] - 1
    assert (relative.abs() < tolerance).all(), list(zip(degree.tolist(), relative.tolist(), strict=True))


def chain(noise, steps: int, batch: int, seed: int = 0) -> torch.Tensor:
    """(steps, batch, ...) noise of ``steps`` rollout steps, each continuing from the last."""
    generator, previous, out = torch.Generator().manual_seed(seed), None, []
    for _ in range(steps):
        previous = noise(batch, generator, previous)
        out.append(previous)
    return torch.stack(out).double()


@pytest.mark.parametrize("shape", [(9, 16), (17, 32), (33, 64), (16, 32), (9, 17)])
def test_spherical_noise_has_unit_variance_at_every_point(shape, monkeypatch):
    """Exact: the fields are linear in the draw, so the identity as the draw gives each coefficient's
    field. Grids with nlat >= nlon / 2 + 1 kept the longitudes' Nyquist order, which irfft takes once
    (not as a +-m pair): white noise had 0.94 at 9x16 (a review found it)."""
    noise = SphericalNoise(Grid(*shape), 1, alpha=0.0, tau=3.0).double()
    count = noise.std.numel() * 2
    monkeypatch.setattr(torch, "randn", lambda size, **kw: torch.eye(count, dtype=kw["dtype"]).reshape(size))
    fields = noise(count)[:, 0]  # (draw, nlat, nlon)
    variance = fields.square().sum(0)
    torch.testing.assert_close(variance, torch.ones_like(variance), rtol=1e-6, atol=1e-6)  # std is kept in float32


@pytest.mark.parametrize("source", ["field", "vector"])
def test_noise_correlation_across_steps_is_rho(source):
    rho, steps, batch, channels = 0.6, 4, 1024, 4
    noise = SphericalNoise(Grid(16, 32), channels, correlation=rho) if source == "field" else VectorNoise(channels, rho)
    x = chain(noise, steps, batch)  # (steps, batch, channels, ...)
    variance = x.square().mean(dim=tuple(range(1, x.ndim)))
    lag1 = (x[1:] * x[:-1]).sum() / x[:-1].square().sum()
    lag2 = (x[2:] * x[:-2]).sum() / x[:-2].square().sum()
    # pooled estimates over (steps - 1) x batch x channels fields: even if every field were a
    # single independent number, the std of lag1 would be sqrt((1 - rho^2) / 12288) = 0.007;
    # 0.03 is 4 of those (the field's many points only shrink it)
    assert abs(float(lag1) - rho) < 0.03 and abs(float(lag2) - rho**2) < 0.03
    # unit variance at every step (AR(1) keeps it); the field's own scale is checked to 5 % elsewhere
    assert (variance - 1).abs().max() < 0.1, variance


def test_uncorrelated_noise_is_the_plain_draw_and_rho_one_keeps_it():
    grid = Grid(16, 32)
    independent = chain(SphericalNoise(grid, 2), 3, 4, seed=5)
    generator = torch.Generator().manual_seed(5)
    plain = torch.stack([SphericalNoise(grid, 2)(4, generator) for _ in range(3)])  # no previous step
    assert torch.equal(independent, plain.double())  # rho = 0: bit for bit the draws of before issue 30
    frozen = chain(VectorNoise(3, correlation=1.0), 3, 4)
    assert torch.equal(frozen[0], frozen[2]) and not torch.equal(frozen[0, 0], frozen[0, 1])


def test_spherical_noise_under_bf16_autocast_is_the_float32_draw():
    """A review found: torch-harmonics' inverse SHT under bf16 autocast raised (no bf16 complex), so a
    CRPS model with field noise could not train with bf16-mixed nor roll out with --bf16."""
    noise = SphericalNoise(Grid(8, 16), 2)
    plain = noise(3, torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = noise(3, torch.Generator().manual_seed(0))
    assert mixed.dtype == torch.float32 and torch.equal(mixed, plain)


def test_vector_noise_shapes_and_reproducibility():
    noise = VectorNoise(32)
    a = noise(5, torch.Generator().manual_seed(1))
    assert a.shape == (5, 32, 1, 1) and a.dtype == torch.float32
    assert torch.equal(a, noise(5, torch.Generator().manual_seed(1)))
    assert not torch.equal(a, noise(5, torch.Generator().manual_seed(2)))
    assert not torch.equal(a[0], a[1])  # samples (members) differ


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: VectorNoise(0), "noise channels must be >= 1, got 0"),
        (lambda: VectorNoise(4, correlation=1.5), r"noise_correlation must be in \[0, 1\] .*got 1.5"),
        (lambda: SphericalNoise(Grid(8, 16), 2, correlation=-0.1), r"noise_correlation must be in \[0, 1\]"),
        (
            lambda: SphericalNoise(Grid(8, 16), 2, tau=-1.0),
            "noise_alpha must be finite and noise_tau >= 0, got 2.0 and -1.0",
        ),
        (lambda: SphericalNoise(Grid(8, 16), 2, alpha=math.inf), "noise_alpha must be finite"),
        # degree 0 alone (zeroed): NaN noise, refused later as "q contains NaN" naming no option
        (lambda: SphericalNoise(Grid(8, 2), 2), "field noise on a 8x2 grid has no degree above 0 to draw"),
        (lambda: SphericalNoise(Grid(2, 2), 2), "field noise on a 2x2 grid has no degree above 0 .* noise_kind"),
    ],
)
def test_noise_bad_options(build, message):
    with pytest.raises(ValueError, match=message):
        build()
