"""The losses of calibrated ensembles (issue 30): the almost-fair CRPS (AIFS-CRPS's alpha), the
spectral CRPS, and the ForecastModule options that switch them on."""

import math
import warnings

import numpy as np
import pytest
import torch
from torch_harmonics import InverseRealSHT

from s2forecast.geometry import Grid
from s2forecast.models.data_spec import DataSpec
from s2forecast.nn import SphericalHarmonicAnalysis
from s2forecast.training import ForecastModule
from s2forecast.training.losses import almost_fair_crps, ensemble_loss, fair_crps, spectral_crps


def crps_of_the_empirical_distribution(members: np.ndarray, y: float) -> float:
    """The standard CRPS by its definition, int (F(x) - 1{x >= y})^2 dx with F the members' empirical
    distribution function, integrated exactly (F is constant between the sorted points)."""
    points = np.sort(np.append(members, y))
    total = 0.0
    for left, right in zip(points[:-1], points[1:], strict=True):
        cdf = np.mean(members <= left)
        total += (cdf - float(y <= left)) ** 2 * (right - left)
    return total


def almost_fair_by_its_definition(members: np.ndarray, y: float, alpha: float) -> float:
    """AIFS-CRPS's afCRPS (Lang et al. 2024, eq. 4): 1 / (2 M (M - 1)) sum over pairs i != j of
    |x_i - y| + |x_j - y| - (1 - eps) |x_i - x_j|, eps = (1 - alpha) / M."""
    m, eps = len(members), (1 - alpha) / len(members)
    total = sum(
        abs(members[i] - y) + abs(members[j] - y) - (1 - eps) * abs(members[i] - members[j])
        for i in range(m) for j in range(m) if i != j
    )  # fmt: skip
    return total / (2 * m * (m - 1))


@pytest.mark.parametrize("m", [2, 3, 5])
def test_almost_fair_crps_against_direct_pairwise_computations(m):
    rng = np.random.default_rng(m)
    members, truth = rng.normal(size=(m, 7)), rng.normal(size=7)
    scores = {alpha: almost_fair_crps(torch.tensor(members)[None], torch.tensor(truth)[None], alpha)[0].numpy()
              for alpha in (0.0, 0.3, 0.95, 1.0)}  # fmt: skip
    np.testing.assert_allclose(scores[1.0], fair_crps(torch.tensor(members)[None], torch.tensor(truth)[None])[0])
    standard = [crps_of_the_empirical_distribution(members[:, k], truth[k]) for k in range(7)]
    np.testing.assert_allclose(scores[0.0], standard, rtol=1e-10, atol=1e-12)  # alpha 0: the standard CRPS
    for alpha in (0.3, 0.95, 1.0):
        direct = [almost_fair_by_its_definition(members[:, k], truth[k], alpha) for k in range(7)]
        np.testing.assert_allclose(scores[alpha], direct, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(scores[alpha], alpha * scores[1.0] + (1 - alpha) * scores[0.0], rtol=1e-10)
    with pytest.raises(ValueError, match=r"crps_alpha must be in \[0, 1\] .*got 1.5"):
        almost_fair_crps(torch.tensor(members)[None], torch.tensor(truth)[None], 1.5)


def test_losses_of_float64_inputs_are_float64():
    """A review found: weighted_mse(1 + 1e-9, 1) was 0 (float32); the MSE part of ensemble_loss too."""
    from s2forecast.training.losses import weighted_mse

    one = torch.ones(1, 1, 2, 2, dtype=torch.float64)
    assert weighted_mse(one + 1e-9, one, torch.ones(2, 2)).item() == pytest.approx(1e-18, rel=1e-6, abs=0)
    members = torch.stack([one + 1e-9, one + 1e-9], dim=1)
    with_mse, without = (ensemble_loss(members, one, torch.ones(2, 2), mse_weight=w) for w in (1.0, 0.0))
    assert with_mse.dtype == torch.float64 and (with_mse - without).item() == pytest.approx(1e-18, rel=1e-6, abs=0)
    assert weighted_mse(one.float(), one.bfloat16(), torch.ones(2, 2)).dtype == torch.float32


def test_ensemble_loss_takes_alpha():
    members, target, weights = torch.randn(2, 3, 2, 4, 8), torch.randn(2, 2, 4, 8), torch.rand(2, 4, 8)
    expected = (almost_fair_crps(members, target, 0.9) * weights).mean()
    torch.testing.assert_close(ensemble_loss(members, target, weights, alpha=0.9), expected)
    assert not torch.allclose(ensemble_loss(members, target, weights), expected)


GRID = Grid(17, 32)


def fields(*shape, seed=0):
    return torch.randn(*shape, *GRID.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_spectral_crps_is_zero_for_identical_fields_and_positive_otherwise():
    analysis, weights = SphericalHarmonicAnalysis(GRID), torch.tensor([0.5, 1.5], dtype=torch.float64)
    target = fields(2, 3, 2)  # (batch, steps, channels, nlat, nlon)
    members = target[:, None].expand(2, 4, 3, 2, *GRID.shape)
    assert float(spectral_crps(members, target, analysis, weights)) == 0.0
    perturbed = members + 0.1 * fields(2, 4, 3, 2, seed=1)
    for alpha in (0.0, 0.95, 1.0):
        assert float(spectral_crps(perturbed, target, analysis, weights, alpha)) > 0.0
    # members that differ from the truth in one coefficient of the smallest resolved scale: the
    # CRPS of that coefficient's real part, twice (it stands for m = +-1), over sqrt(4 pi)
    coefficients = torch.zeros(analysis.lmax, analysis.mmax, dtype=torch.complex128)
    coefficients[analysis.lmax - 1, 1] = 1.0
    isht = InverseRealSHT(*GRID.shape, lmax=analysis.lmax, mmax=analysis.mmax, grid=GRID.kind, csphase=False)
    pattern = isht(coefficients).double()
    amplitudes = torch.tensor([0.2, -0.5, 0.1, 0.4], dtype=torch.float64)
    members = target[:, None] + amplitudes[None, :, None, None, None, None] * pattern
    expected = 2 * almost_fair_crps(amplitudes[None], torch.zeros(1, dtype=torch.float64))[0] / math.sqrt(4 * math.pi)
    torch.testing.assert_close(spectral_crps(members, target, analysis, weights), expected, rtol=1e-6, atol=1e-9)


def test_spectral_crps_of_a_constant_offset_is_the_grid_crps():
    """The normalization: for members that differ from the truth by constants over the sphere
    (degree 0 only) the spectral CRPS is the area-mean grid CRPS."""
    analysis, weights = SphericalHarmonicAnalysis(GRID), torch.tensor([0.5, 1.5], dtype=torch.float64)
    target = fields(2, 2)
    offsets = torch.tensor([0.3, -1.0, 0.7], dtype=torch.float64)[None, :, None, None, None]
    members = target[:, None] + offsets
    quadrature = GRID.quadrature_weights.double().reshape(GRID.nlat, -1).expand(GRID.shape)
    quadrature = quadrature / quadrature.mean()
    grid_crps = (almost_fair_crps(members, target) * weights[:, None, None] * quadrature).mean()
    torch.testing.assert_close(spectral_crps(members, target, analysis, weights), grid_crps, rtol=1e-6, atol=0)


SPEC = DataSpec(channels=("a", "b"), static_channels=(), forcing_channels=(), grid=Grid(8, 16), history=1,
                step_hours=1.0, rollout_steps=2, mean=(0.0, 0.0), std=(1.0, 1.0), tendency_std=(1.0, 1.0))  # fmt: skip
NETWORK = {"embed_dim": 8, "num_layers": 1, "noise_channels": 2}


def module(**options) -> ForecastModule:
    return ForecastModule(network=NETWORK, data=SPEC.to_dict(), loss="crps", members=3, **options)


def test_module_loss_adds_the_spectral_crps():
    prediction, target = torch.randn(2, 3, 2, 2, 8, 16), torch.randn(2, 2, 2, 8, 16)  # rollout of 2 steps
    plain, alpha = module(), module(crps_alpha=0.9)
    spectral = module(crps_alpha=0.9, crps_spectral_weight=0.5)
    weights = plain.channel_weights[:, None, None] * plain.quadrature
    torch.testing.assert_close(alpha.loss(prediction, target), ensemble_loss(prediction, target, weights, alpha=0.9))
    extra = spectral_crps(prediction, target, spectral.analysis, spectral.channel_weights, 0.9)
    torch.testing.assert_close(spectral.loss(prediction, target), alpha.loss(prediction, target) + 0.5 * extra)
    assert plain.analysis is None and float(extra) > 0
    assert "analysis" not in "".join(spectral.state_dict())  # checkpoints as before


@pytest.mark.parametrize(
    "options, message",
    [
        ({"crps_alpha": 1.5}, r"crps_alpha must be in \[0, 1\] \(1: the fair CRPS, 0: the standard one\), got 1.5"),
        ({"crps_alpha": -0.1}, r"crps_alpha must be in \[0, 1\]"),
        ({"crps_spectral_weight": -1.0}, r"crps_spectral_weight must be a finite number >= 0 \(0: no spectral CRPS\)"),
        ({"crps_spectral_weight": float("inf")}, r"crps_spectral_weight must be a finite number >= 0 .*got inf"),
        ({"crps_mse_weight": float("inf")}, r"crps_mse_weight must be a finite number >= 0, got inf"),
    ],
)
def test_crps_options_bad_values(options, message):
    with pytest.raises(ValueError, match=message):
        module(**options)


def test_crps_options_of_an_mse_model_are_warned_of_and_build_nothing():
    """With model.loss mse they did nothing, without a word, and the spectral analysis (376 MB at 0.25°)
    was built anyway."""
    with pytest.warns(UserWarning) as caught:
        mse = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=SPEC.to_dict(), loss="mse",
                             crps_spectral_weight=0.5, crps_alpha=0.3)  # fmt: skip
    messages = [str(w.message) for w in caught if "has no effect: model.loss is 'mse'" in str(w.message)]
    assert messages == [
        f"model.{name} {value} has no effect: model.loss is 'mse' (it weights the CRPS loss); drop it or set "
        "model.loss: crps"
        for name, value in (("crps_alpha", 0.3), ("crps_spectral_weight", 0.5))
    ]
    assert mse.analysis is None
    # printed as ours, one line (with Lightning's cli.py as its place it got Lightning's format: a review found it)
    from s2forecast.warning_format import one_line_warnings

    with one_line_warnings("fit"):
        printed = [warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught]
    assert any(line.startswith("s2forecast fit: warning: model.crps_alpha 0.3 has no effect") for line in printed)
