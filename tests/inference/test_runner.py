"""The ``Runner``'s NaN policy and the ``InitialConditions``' errors (issue 26)."""

import numpy as np
import pytest
import torch

from s2forecast.geometry import Grid
from s2forecast.inference.initial_conditions import InitialConditions, InitialStates
from s2forecast.inference.runner import Runner
from s2forecast.models.data_spec import DataSpec
from s2forecast.models.forecaster import Forecaster

SPEC = DataSpec(channels=("a", "b"), static_channels=(), forcing_channels=(), grid=Grid(8, 16), history=1,
                step_hours=6.0, rollout_steps=1, mean=(0.0, 0.0), std=(1.0, 1.0), tendency_std=(1.0, 1.0))  # fmt: skip
INITS = np.array(["2020-01-01T00", "2020-01-01T06"], dtype="datetime64[ns]")
LEADS = np.arange(1, 4) * np.timedelta64(6, "h")


class PoisonedForecaster(Forecaster):
    """Persistence + 1, except a NaN at init 1, channel b, from step 2 on (not fed back: the runner must zero it)."""

    def step(self, states, static, forcings, noise=None):
        out = states[:, -1] + 1.0
        if getattr(self, "calls", 0) == 1:
            out[1, 1, 3, 4] = float("nan")
        self.calls = getattr(self, "calls", 0) + 1
        return out


def states() -> InitialStates:
    return InitialStates(torch.zeros(2, 1, 2, 8, 16), torch.zeros(2, 0, 8, 16), torch.zeros(2, 4, 0, 8, 16))


def test_nan_policy_fail_names_init_step_and_channel():
    runner = Runner(PoisonedForecaster("planar", {"embed_dim": 8, "num_layers": 1}, SPEC), nan_policy="fail")
    leads = runner.forecast(states(), INITS, LEADS)
    assert np.all(next(leads) == 1.0)
    with pytest.raises(ValueError, match=r"^non-finite forecast at init 2020-01-01T06, step 2 \(\+12 h\), b; pass "):
        next(leads)
    assert torch.is_grad_enabled()  # the runner's no_grad ends with each step, whatever the caller does


def test_nan_policy_write_keeps_the_forecast_nan_and_the_others_going():
    runner = Runner(PoisonedForecaster("planar", {"embed_dim": 8, "num_layers": 1}, SPEC), nan_policy="write")
    leads = list(runner.forecast(states(), INITS, LEADS, members=0))
    assert [lead.shape for lead in leads] == [(2, 2, 8, 16)] * 3
    np.testing.assert_array_equal(leads[2][0], 3.0)  # the other forecast goes on
    assert np.isnan(leads[1][1, 1, 3, 4]) and np.isfinite(leads[1][1]).sum() == 2 * 8 * 16 - 1  # as it came
    assert np.isnan(leads[2][1]).all()  # the whole forecast from then on
    assert runner.nonfinite == ["init 2020-01-01T06, step 2 (+12 h), b"]


class TwicePoisoned(Forecaster):
    """Persistence + 1, with NaN in both forecasts of the batch (channels a and b) at step 2."""

    def step(self, states, static, forcings, noise=None):
        out = states[:, -1] + 1.0
        if getattr(self, "calls", 0) == 1:
            out[0, 0, 1, 1] = float("nan")
            out[-1, 1, 3, 4] = float("inf")
        self.calls = getattr(self, "calls", 0) + 1
        return out


def test_nan_policy_write_lists_every_forecast_that_went_non_finite():
    runner = Runner(TwicePoisoned("planar", {"embed_dim": 8, "num_layers": 1}, SPEC), nan_policy="write")
    leads = list(runner.forecast(states(), INITS, LEADS))
    assert np.isnan(leads[2]).all()  # both dead from step 2 on
    assert runner.nonfinite == ["init 2020-01-01T00, step 2 (+12 h), a", "init 2020-01-01T06, step 2 (+12 h), b"]
    # members: the first and last member of the batch (member 0 of the first init, member 2 of the second)
    runner = Runner(TwicePoisoned("planar", {"embed_dim": 8, "num_layers": 1}, SPEC), nan_policy="write")
    leads = list(runner.forecast(states(), INITS, LEADS, members=3))
    assert runner.nonfinite == [
        "init 2020-01-01T00, member 0, step 2 (+12 h), a",
        "init 2020-01-01T06, member 2, step 2 (+12 h), b",
    ]
    assert np.isnan(leads[2][0, 0]).all() and np.isnan(leads[2][1, 2]).all() and np.isfinite(leads[2][0, 1:]).all()


def test_members_axis_and_bad_policy():
    runner = Runner(Forecaster("planar", {"embed_dim": 8, "num_layers": 1}, SPEC))
    leads = list(runner.forecast(states(), INITS, LEADS, members=3, generator=torch.Generator().manual_seed(0)))
    assert leads[0].shape == (2, 3, 2, 8, 16) and leads[0].dtype == np.float32
    with pytest.raises(ValueError, match=r"nan_policy must be one of \('fail', 'write'\), got 'skip'"):
        Runner(runner.model, nan_policy="skip")


def test_initial_conditions_errors(swe_store, tmp_path):
    from s2forecast.data import open_store

    data = DataSpec(channels=("geopotential_height", "vorticity", "divergence"), static_channels=(),
                    forcing_channels=(), grid=Grid(8, 16), history=1, step_hours=1.0, rollout_steps=1,
                    mean=(0.0,) * 3, std=(1.0,) * 3, tendency_std=(1.0,) * 3)  # fmt: skip
    model = Forecaster("spherical", {"embed_dim": 8, "num_layers": 1}, data)
    with InitialConditions.open(swe_store, model) as initial:
        first = open_store(swe_store)["time"].values[0].astype("datetime64[ns]")
        initial.check([first])
        with pytest.raises(ValueError, match=r"^initialization time 1999-01-01T00 needs inputs that are not in the "):
            initial.check([first, np.datetime64("1999-01-01T00", "ns")])
    other = Forecaster("spherical", {"embed_dim": 8, "num_layers": 1}, data.on_grid(Grid(16, 32)))
    with pytest.raises(ValueError, match=r"store grid .* differs from the checkpoint's .*; pass --other-grid to run"):
        with InitialConditions.open(swe_store, other):
            pass
    # grid-bound weights are not told to pass --other-grid (which failed next, naming no fix)
    for architecture, network, reason in (
        ("planar", {"embed_dim": 8, "num_layers": 1, "patch_size": 2},
         "the planar model is bound to its training grid"),
        ("spherical", {"embed_dim": 8, "num_layers": 1, "position_embedding": "ape"},
         "its position embedding 'ape' is tied to the training grid"),
    ):  # fmt: skip
        bound = Forecaster(architecture, network, data.on_grid(Grid(16, 32)))
        for other_grid in (False, True):
            with pytest.raises(ValueError) as error:
                with InitialConditions.open(swe_store, bound, other_grid=other_grid):
                    pass
            assert str(error.value).endswith(f"; {reason}: regrid the store to {Grid(16, 32)}"), str(error.value)
        with pytest.raises(ValueError, match=rf"^the model cannot run on .*: {reason}; regrid the data to "):
            bound.on_grid(Grid(8, 16))
    renamed = Forecaster("spherical", {"embed_dim": 8, "num_layers": 1}, DataSpec.from_dict(
        {**data.to_dict(), "channels": ["geopotential_height", "vorticity", "humidity"]}))  # fmt: skip
    with pytest.raises(ValueError, match=rf"^store {swe_store} does not fit checkpoint: .*humidity"):
        with InitialConditions.open(swe_store, renamed):
            pass
    with pytest.raises(ValueError, match=r"not a zarr store"):
        with InitialConditions.open(tmp_path, model):
            pass
