"""``Forecaster.ensemble_rollout``: members as a batch dimension, reproducible from a generator
(issue 26: the one member copying of training and inference)."""

import pytest
import torch

from s2forecast.geometry import Grid
from s2forecast.models.data_spec import DataSpec
from s2forecast.models.forecaster import Forecaster

SPEC = DataSpec(channels=("a", "b"), static_channels=("s",), forcing_channels=("f",), grid=Grid(8, 16), history=2,
                step_hours=1.0, rollout_steps=1, mean=(0.0, 1.0), std=(1.0, 2.0), tendency_std=(0.5, 0.5))  # fmt: skip


def forecaster(noise_channels: int) -> Forecaster:
    model = Forecaster("spherical", {"embed_dim": 8, "num_layers": 1, "noise_channels": noise_channels}, SPEC)
    for block in model.net.modules():  # a trained modulation: the noise changes the forecast
        if getattr(block, "modulation", None) is not None:
            torch.nn.init.normal_(block.modulation.weight, std=0.3)
    return model.eval()


def inputs(batch: int = 2, steps: int = 3):
    generator = torch.Generator().manual_seed(1)
    states = torch.randn(batch, 2, 2, 8, 16, generator=generator)
    static = torch.randn(batch, 1, 8, 16, generator=generator)
    forcings = torch.randn(batch, 2 + steps, 1, 8, 16, generator=generator)
    return states, static, forcings


def run(model, members, seed, steps=3, batch=2):
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        return torch.stack(list(model.ensemble_rollout(*inputs(batch, steps), steps, members, generator)), dim=2)


def test_shapes_and_members_differ():
    model = forecaster(2)
    out = run(model, members=3, seed=0)
    assert out.shape == (2, 3, 3, 2, 8, 16)  # (batch, members, steps, channels, nlat, nlon)
    assert torch.isfinite(out).all()
    assert (out[:, 0] - out[:, 1]).abs().max() > 1e-4 and (out[:, 1] - out[:, 2]).abs().max() > 1e-4


@pytest.mark.parametrize("members", [1, 3])
def test_reproducible_from_a_generator(members):
    model = forecaster(2)
    a, again, other = run(model, members, 5), run(model, members, 5), run(model, members, 6)
    assert torch.equal(a, again) and not torch.allclose(a, other)
    state = torch.random.get_rng_state()
    run(model, members, 5)
    assert torch.equal(torch.random.get_rng_state(), state)  # with a generator, the global state is untouched


def test_members_are_copies_along_the_batch():
    """Member j of sample i is the rollout of the inputs repeated member-major per sample, with the
    same draws: what training's CRPS and `rollout --members` both use."""
    model = forecaster(2)
    states, static, forcings = (x.repeat_interleave(3, dim=0) for x in inputs())
    with torch.no_grad():
        flat = torch.stack(list(model.rollout(states, static, forcings, 3, torch.Generator().manual_seed(5))), dim=1)
    torch.testing.assert_close(run(model, 3, 5), flat.unflatten(0, (2, 3)), rtol=0, atol=0)


def test_deterministic_model_one_member_is_the_rollout():
    model = forecaster(0)
    assert not model.stochastic and model.sample_noise(2) is None
    with torch.no_grad():
        plain = torch.stack(list(model.rollout(*inputs(), 3)), dim=1)
    torch.testing.assert_close(run(model, 1, None)[:, 0], plain, rtol=0, atol=0)
    with pytest.raises(ValueError, match="members must be an integer >= 1, got 0"):
        next(model.ensemble_rollout(*inputs(), 3, 0))


def test_yielded_states_feed_the_next_step():
    """Changing a yielded lead in place changes what the rollout continues from (the NaN policy of
    inference relies on it)."""
    model = forecaster(0)
    with torch.no_grad():
        leads = model.ensemble_rollout(*inputs(), 2, 1)
        first = next(leads)
        first[0] = 0.0
        second = next(leads)
        zeroed = inputs()[0][:1].clone()
        zeroed = torch.cat([zeroed[:, 1:], torch.zeros_like(zeroed[:, :1])], dim=1)
        expected = model.step(zeroed, inputs()[1][:1], inputs()[2][:1, 1:4])
    # a batch of 1 against the rollout's batch of 2: with several threads torch may sum in another order
    torch.testing.assert_close(second[0, 0], expected[0], rtol=1e-5, atol=1e-6)


def test_members_do_not_copy_the_forcings_of_every_step():
    """The forcings of all steps, (batch, history + steps, ...), were repeated once per member before
    the first step (a review measured 1.5 -> 3.9 GB for 8 members at 91x180, 256 steps): each
    step's are repeated now. Forcings of 10**7 steps that only a view holds (one time, expanded)
    would take 31 GB as copies."""
    model = forecaster(2)
    states, static, forcings = inputs(batch=2, steps=1)
    endless = forcings[:, :1].expand(2, 10**7, 1, 8, 16)  # the same forcing at every time, no memory
    with torch.no_grad():
        leads = model.ensemble_rollout(states, static, endless, 2, 3, torch.Generator().manual_seed(5))
        first = next(leads)
    assert first.shape == (2, 3, 2, 8, 16) and torch.isfinite(first).all()


def test_bad_members_generators_and_forcings_are_one_line():
    """A review found: 3 generators for 2 samples x 3 members were shared out by consecutive rows
    (generator 1 drew for sample 0's member 2 and sample 1's member 0); members of 2.0 or "3" failed
    in torch; forcings of another batch named "batch", not the states' 2."""
    model = forecaster(2)
    states, static, forcings = inputs()
    generators = [torch.Generator().manual_seed(i) for i in range(6)]
    for count in (2, 6):  # one per sample, or one per member
        next(model.ensemble_rollout(states, static, forcings, 3, 3, generators[:count]))
    with pytest.raises(ValueError, match=(r"^3 generators for 2 samples x 3 member\(s\): give one generator, one per "
                                          r"sample \(2\) or one per member \(6\)$")):  # fmt: skip
        next(model.ensemble_rollout(states, static, forcings, 3, 3, generators[:3]))
    for members in (2.0, True, "3"):
        with pytest.raises(ValueError, match=rf"^members must be an integer >= 1, got {members!r}$"):
            next(model.ensemble_rollout(states, static, forcings, 3, members))
    with pytest.raises(ValueError, match=r"^forcings of shape \(1, 5, 1, 8, 16\): this model takes \(2, times, 1,"):
        next(model.rollout(states, static, forcings[:1], 3))


def test_a_step_of_inputs_of_another_shape_is_one_line():
    """The public step did not check its inputs: forcings at the input times alone (not the target's)
    failed deep in the DISCO convolution (RuntimeError: shape '[1, 1, 8, 9, 4, 8]' is invalid)."""
    model = forecaster(2)
    states, static, forcings = inputs()
    history = states.shape[1]
    assert model.step(states, static, forcings[:, : history + 1]).shape == (2, 2, 8, 16)
    with pytest.raises(ValueError, match=rf"^forcings of shape \(2, {history}, 1, 8, 16\): this model takes \(2, "
                                         rf"{history + 1}, 1, 8, 16\)"):  # fmt: skip
        model.step(states, static, forcings[:, :history])
    with pytest.raises(ValueError, match=r"^static of shape \(2, 8, 16\): this model takes"):
        model.step(states, static[:, 0], forcings[:, : history + 1])
