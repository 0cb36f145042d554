"""The noise injection variants of the spherical Transformer (issue 30): fields or an FGN vector,
into the adaptive norms or the latent state, with a configurable spectrum and AR(1) correlation
in time carried through ``Forecaster.rollout`` (training and inference alike)."""

import re

import pytest
import torch

from s2forecast.geometry import Grid
from s2forecast.models.data_spec import DataSpec
from s2forecast.models.forecaster import Forecaster
from s2forecast.models.spherical_transformer import SphericalTransformer

GRID = Grid(16, 32)
VARIANTS = {
    "field-norm": {"noise_channels": 4},
    "vector-norm": {"noise_channels": 32, "noise_kind": "vector"},
    "field-latent": {"noise_channels": 4, "noise_injection": "latent"},
    "white-ar1": {"noise_channels": 4, "noise_alpha": 0.0, "noise_tau": 0.0, "noise_correlation": 0.5},
}
NOISE_WEIGHTS = (".modulation.", "noise_projection.")  # what the noise enters through


def network(**options) -> SphericalTransformer:
    return SphericalTransformer(GRID, 3, 2, embed_dim=16, num_layers=2, **options)


def train_noise_entry(model: torch.nn.Module) -> None:
    """As after some training: the zero-initialized weights the noise enters through, random."""
    for name, parameter in model.named_parameters():
        if any(key in name for key in NOISE_WEIGHTS):
            torch.nn.init.normal_(parameter, std=0.3)


@pytest.mark.parametrize("options", VARIANTS.values(), ids=VARIANTS.keys())
def test_variant_shapes_zero_init_reproducibility_and_members(options):
    torch.manual_seed(0)
    stochastic, deterministic = network(**options), network()
    missing, unexpected = deterministic.load_state_dict(stochastic.state_dict(), strict=False)
    assert missing == [] and unexpected and all(any(key in k for key in NOISE_WEIGHTS) for k in unexpected)
    x = torch.randn(2, 3, *GRID.shape)
    torch.testing.assert_close(stochastic(x), deterministic(x), rtol=0, atol=0)  # zero-initialized entry

    noise = stochastic.sample_noise(2, torch.Generator().manual_seed(3))
    spatial = options.get("noise_kind", "field") == "field"
    assert noise.shape == (2, options["noise_channels"], *(stochastic.latent.shape if spatial else (1, 1)))
    assert torch.equal(noise, stochastic.sample_noise(2, torch.Generator().manual_seed(3)))

    train_noise_entry(stochastic)
    out = stochastic(x, noise)
    assert out.shape == (2, 2, *GRID.shape)
    torch.testing.assert_close(out, stochastic(x, noise.clone()), rtol=0, atol=0)
    other = stochastic.sample_noise(2, torch.Generator().manual_seed(4))
    assert (out - stochastic(x, other)).abs().max() > 1e-3  # other noise, other member
    same_input = stochastic(x[:1].expand(2, -1, -1, -1), noise)
    assert (same_input[0] - same_input[1]).abs().max() > 1e-3  # members of one sample differ
    assert stochastic.on_grid(Grid(32, 64))(torch.randn(1, 3, 32, 64)).shape == (1, 2, 32, 64)


def test_latent_injection_leaves_the_norms_unconditioned():
    model = network(noise_channels=4, noise_injection="latent")
    assert all(block.modulation is None for block in model.blocks) and model.noise_projection is not None
    assert network(noise_channels=4).noise_projection is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"noise_kind": "gaussian"}, re.escape("noise_kind must be one of ('field', 'vector'), got 'gaussian'")),
        ({"noise_injection": "input"}, re.escape("noise_injection must be one of ('norm', 'latent'), got 'input'")),
        ({"noise_correlation": 1.5}, r"noise_correlation must be in \[0, 1\]"),
        ({"noise_tau": -1.0}, "noise_tau >= 0"),
    ],
)
def test_noise_options_bad_values(options, message):
    with pytest.raises(ValueError, match=message):
        network(noise_channels=2, **options)


SPEC = DataSpec(channels=("a", "b"), static_channels=(), forcing_channels=(), grid=Grid(8, 16), history=1,
                step_hours=1.0, rollout_steps=1, mean=(0.0, 0.0), std=(1.0, 1.0), tendency_std=(1.0, 1.0))  # fmt: skip


def recorded_noise(correlation: float, members: int = 3, steps: int = 4, seed: int = 7) -> list[torch.Tensor]:
    """The noise every step of an ``ensemble_rollout`` received, (batch x members, channels, 1, 1) each."""
    options = {"embed_dim": 8, "num_layers": 1, "noise_channels": 6, "noise_kind": "vector"}
    model = Forecaster("spherical", options | {"noise_correlation": correlation}, SPEC).eval()
    seen, step = [], model.step

    def recording(states, static, forcings, noise=None):
        seen.append(noise)
        return step(states, static, forcings, noise)

    model.step = recording
    states = torch.randn(2, 1, 2, 8, 16)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed)
        list(model.ensemble_rollout(states, torch.zeros(2, 0, 8, 16), torch.zeros(2, 1 + steps, 0, 8, 16), steps,
                                    members, generator))  # fmt: skip
    return seen


def test_rollout_carries_the_noise_from_step_to_step():
    frozen = recorded_noise(1.0)  # rho = 1: a member keeps its first draw
    assert len(frozen) == 4 and all(torch.equal(noise, frozen[0]) for noise in frozen)
    assert not torch.equal(frozen[0][0], frozen[0][1])  # members differ
    independent = recorded_noise(0.0)
    assert not torch.equal(independent[0], independent[1])
    correlated = recorded_noise(0.5)
    assert torch.equal(correlated[0], independent[0])  # the same first draw from the same seed
    # each later step: 0.5 x the last one + sqrt(0.75) x a fresh draw, the fresh draws being those
    # of the uncorrelated rollout (the same generator sequence)
    for k in range(1, 4):
        torch.testing.assert_close(correlated[k], 0.5 * correlated[k - 1] + 0.75**0.5 * independent[k])
    again = recorded_noise(0.5)
    assert all(torch.equal(a, b) for a, b in zip(again, correlated, strict=True))  # reproducible from the seed
