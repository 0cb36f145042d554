"""The Forecaster: a network with its normalization, one model step and the rollout over it.

A plain ``nn.Module`` (no Lightning): what inference loads (``Forecaster.from_checkpoint``) and
what ``training.ForecastModule`` trains. One step maps ``history`` normalized states, the
static fields and the forcings at the input times and at the target time to the next state: by
default the network predicts the tendency in units of the tendency spread
(x_next = x_last + net(...) * tendency_std / std), so an untrained model starts near persistence
(a random tendency of about the tendencies' spread).
``rollout`` is a generator over that step (as graphcast's rollout), yielding one lead at a
time: training differentiates through it, inference writes each lead as it comes.
``ensemble_rollout`` rolls every sample out as ``members`` members of a stochastic network
(each draws its own noise, carried from step to step where the noise is correlated in time), for
the CRPS in training and for ensemble forecasts alike; members may also start from initial states
of their own (initial-condition ensembles of any model).

Normalization statistics and the data layout come from a ``DataSpec`` (built by
``training.data_info`` from the training DataModule, stored in every checkpoint), so a
checkpoint forecasts without its store; the static fields it was trained with (orography,
land-sea mask) are stored in the checkpoint too (``static_fields``), so initial conditions need
only the time-dependent variables.
"""

import copy
import numbers
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from s2forecast.geometry import Grid
from s2forecast.models import build_network
from s2forecast.models.checkpoint import read_checkpoint
from s2forecast.models.data_spec import DataSpec
from s2forecast.user_errors import UserError

# the random numbers of noise draws: one generator, one per group of consecutive samples, or None
# for the global random state
Generators = torch.Generator | list[torch.Generator] | None


class Forecaster(nn.Module):
    """Network + normalization + tendency scaling.

    Args:
        architecture: "spherical" (``SphericalTransformer``) or "planar" (``PlanarTransformer``).
        network: keyword arguments of the network (embed_dim, num_layers, attention, ...).
        data: the data layout and statistics.
        residual: predict the tendency (default) rather than the next state.
    """

    def __init__(self, architecture: str, network: dict | None, data: DataSpec, residual: bool = True):
        super().__init__()
        self.architecture, self.network_options, self.data, self.residual = architecture, network or {}, data, residual
        self.grid = data.grid
        self.channels = list(data.channels)
        self.history = int(data.history)
        n_static, n_forcing = len(data.static_channels), len(data.forcing_channels)
        in_channels = self.history * len(self.channels) + n_static + (self.history + 1) * n_forcing
        self.net = build_network(architecture, self.grid, in_channels, len(self.channels), **self.network_options)
        self._register_statistics(data)
        # name -> (nlat, nlon) float32 in physical units, on ``grid``: the training store's static
        # fields, saved with the checkpoint (empty for checkpoints from before they were saved)
        self.static_fields: dict[str, torch.Tensor] = {}

    def _register_statistics(self, data: DataSpec, device=None, dtype=torch.float32) -> None:
        """The normalization buffers (channels, 1, 1) of ``data``'s statistics: rebuilt from ``data``,
        not part of the weights (state_dict), in ``dtype`` (the model's)."""
        mean, std = torch.tensor(data.mean, dtype=torch.float64), torch.tensor(data.std, dtype=torch.float64)
        tendency_std = torch.tensor(data.tendency_std, dtype=torch.float64)
        scale = torch.where(torch.isfinite(tendency_std) & (tendency_std > 0), tendency_std / std, torch.ones_like(std))
        for name, values in (("mean", mean), ("std", std), ("tendency_scale", scale)):
            self.register_buffer(name, values[:, None, None].to(device, dtype), persistent=False)

    def with_statistics(self, mean, std, tendency_std) -> "Forecaster":
        """The same network normalizing with other statistics ((channels,) in physical units, e.g. a
        store's own: ``rollout --store-stats``), both ways: inputs normalized and outputs turned back
        into physical units with the same ones (mixing them offset forecasts by their difference).
        Shares the weights."""
        values = {name: tuple(float(v) for v in np.asarray(a).ravel()) for name, a in
                  (("mean", mean), ("std", std), ("tendency_std", tendency_std))}  # fmt: skip
        if any(len(v) != len(self.channels) for v in values.values()):
            raise UserError(f"statistics of {[len(v) for v in values.values()]} channels for {len(self.channels)}")
        other = copy.copy(self)  # the same submodules (weights); its own buffers and data
        other._buffers = dict(self._buffers)
        other.data = replace(self.data, **values)
        other._register_statistics(other.data, self.mean.device, self.mean.dtype)
        return other

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location="cpu") -> "Forecaster":
        """The forecaster of a checkpoint ``s2forecast fit`` wrote, in eval mode, read weights-only
        (``read_checkpoint``: nothing in the file runs) and without Lightning.

        Raises:
            ValueError: not a checkpoint of a forecaster (or of another version's networks).
        """
        state = read_checkpoint(path, map_location=map_location)
        hparams = state.get("hyper_parameters")
        if not isinstance(hparams, dict) or "state_dict" not in state or not hparams.get("data"):
            raise UserError(f"{path} is not a checkpoint of s2forecast fit (no hyper_parameters or state_dict)")
        try:
            data = DataSpec.from_dict(hparams["data"])
        except (TypeError, KeyError, UserError) as error:
            raise UserError(f"{path} is not a forecaster checkpoint: {_first_detail(error)}") from None
        try:
            model = cls(
                hparams.get("architecture", "spherical"), hparams.get("network"), data, hparams.get("residual", True)
            )
            missing, unexpected = model.load_state_dict(forecaster_weights(state["state_dict"]), strict=False)
            if missing or unexpected:
                raise KeyError(
                    f"its weights do not fit this network: missing {sorted(missing)[:3]}, unexpected "
                    f"{sorted(unexpected)[:3]} (a checkpoint of another s2forecast version or network)"
                )
            model.static_fields = checkpoint_static_fields(state, model)
        except UserError as error:  # e.g. network options this version does not have
            raise UserError(f"{path}: {error} (a checkpoint of another s2forecast version?)") from None
        except (TypeError, RuntimeError, KeyError) as error:  # other options or weights than this version's
            raise UserError(f"{path} is not a forecaster checkpoint: {_first_detail(error)}") from None
        return model.to(map_location).eval()

    def bound_to_grid(self) -> str | None:
        """Why these weights cannot run on another grid than the training one, or None."""
        if not hasattr(self.net, "on_grid"):
            return f"the {self.architecture} model is bound to its training grid"
        return self.net.bound_to_grid() if hasattr(self.net, "bound_to_grid") else None

    def on_grid(self, grid: Grid) -> "Forecaster":
        """The same weights on another data grid (spherical networks: ``SphericalTransformer.on_grid``)."""
        if grid == self.grid:  # (a planar network has no on_grid)
            return self
        if (reason := self.bound_to_grid()) is not None:
            raise UserError(f"the model cannot run on {grid}: {reason}; regrid the data to {self.grid}")
        other = Forecaster(self.architecture, self.network_options, self.data.on_grid(grid), self.residual)
        other.net = self.net.on_grid(grid)
        other.static_fields = {}  # the checkpoint's are on its own grid: another takes the store's
        return other.to(self.mean.device, self.mean.dtype).train(self.training)

    # --- the model step ------------------------------------------------------------------
    def step(
        self, states: torch.Tensor, static: torch.Tensor, forcings: torch.Tensor, noise: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Next normalized state (batch, channels, nlat, nlon).

        Args:
            states: (batch, history, channels, nlat, nlon) normalized states, oldest first.
            static: (batch, static_channels, nlat, nlon).
            forcings: (batch, history + 1, forcing_channels, nlat, nlon) at the input times and
                the target time.
            noise: the noise input of a stochastic network (``sample_noise``); None draws it.
        """
        self._check_inputs(states, static, forcings, 1, forcing_times=self.history + 1)
        # in the module's dtype, as normalize (float64 forcings of the API: the network refuses a mix)
        x = torch.cat([states.flatten(1, 2), static, forcings.flatten(1, 2)], dim=1).to(self.mean.dtype)
        out = self.net(x) if noise is None else self.net(x, noise)
        if self.residual:
            return states[:, -1] + out * self.tendency_scale
        return out

    @property
    def stochastic(self) -> bool:
        """Whether the network draws noise (``network.noise_channels`` > 0): members differ."""
        return getattr(self.net, "noise", None) is not None

    def sample_noise(
        self, batch: int, generator: Generators = None, previous: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """The noise input of ``batch`` forecasts (None for a deterministic network); ``generator``
        (on the model's device) for reproducible draws, None for the global random state, or a
        list of G generators: each draws for its own batch // G consecutive forecasts (the members
        of one initialization time), so that what one draws does not depend on the others;
        ``previous``: the last step's noise (``network.noise_correlation``: AR(1) in time)."""
        if not self.stochastic:
            return None
        if not isinstance(generator, list | tuple):
            return self.net.sample_noise(batch, generator, previous)
        rows = batch // len(generator)
        if rows * len(generator) != batch:
            raise ValueError(f"{len(generator)} generators cannot share {batch} forecasts equally")
        return torch.cat([
            self.net.sample_noise(rows, g, None if previous is None else previous[i * rows : (i + 1) * rows])
            for i, g in enumerate(generator)
        ])  # fmt: skip

    def rollout(
        self,
        states: torch.Tensor,
        static: torch.Tensor,
        forcings: torch.Tensor,
        steps: int,
        generator: Generators = None,
    ) -> Iterator[torch.Tensor]:
        """Normalized predictions (batch, channels, nlat, nlon) for leads 1..steps, one at a time.

        The next step starts from the tensor yielded: changing it in place (inference zeroes
        forecasts that went non-finite) changes what the rollout continues from.

        Args:
            states: (batch, history, channels, nlat, nlon) normalized initial states.
            static: (batch, static_channels, nlat, nlon).
            forcings: (batch, >= history + steps, forcing_channels, nlat, nlon) from the first
                input time on: a tensor, or what is sliced as one (``inference``'s ``Forcings``,
                computed a step's window at a time).
            generator: the noise of a stochastic network (``sample_noise``: one generator, or
                one per group of consecutive samples), one draw per step;
                each step's noise continues from the last one's (the AR(1) of
                ``network.noise_correlation``), so a rollout is reproducible from the generator.
        """
        self._check_inputs(states, static, forcings, steps)
        yield from self._rollout(states, static, forcings, steps, generator)

    def _rollout(self, states, static, forcings, steps, generator, copies: int = 1) -> Iterator[torch.Tensor]:
        """``rollout`` of checked inputs; ``copies``: states and static hold that many consecutive
        copies of each sample, ``forcings`` one (each step's are repeated: the forcings of every
        step, once per member, were members x the rollout's whole forcings)."""
        history = states.shape[1]
        if forcings.shape[1] < history + steps:
            raise UserError(f"forcings for {forcings.shape[1]} times; {steps} steps need {history + steps}")
        samples = len(states) // copies
        if isinstance(generator, list | tuple) and len(generator) not in (samples, len(states)):
            # another count was shared out by consecutive rows, groups that straddled two samples
            raise UserError(
                f"{len(generator)} generators for {samples} samples x {copies} member(s): give one generator, one per "
                f"sample ({samples}) or one per member ({len(states)})"
            )
        noise = None
        for k in range(steps):
            noise = self.sample_noise(len(states), generator, previous=noise)
            step_forcings = forcings[:, k : k + history + 1]
            if copies > 1:
                step_forcings = step_forcings.repeat_interleave(copies, dim=0)
            prediction = self.step(states, static, step_forcings, noise)
            yield prediction
            states = torch.cat([states[:, 1:], prediction[:, None].to(states.dtype)], dim=1)

    def _check_inputs(self, states, static, forcings, steps, forcing_times: int | None = None) -> None:
        """One line naming the shape this model takes: another one failed deep in the network (a
        convolution's RuntimeError), or was taken for too few forcings; ``forcing_times``: the
        number of forcing times required (a step's: history + 1), None for any."""
        if not isinstance(steps, numbers.Integral) or isinstance(steps, bool) or steps < 1:
            raise UserError(f"steps must be an integer >= 1, got {steps!r}")
        grid, data = self.grid.shape, self.data
        batch = states.shape[0] if states.dim() else None
        expected = {
            "states": (batch, self.history, len(self.channels), *grid),
            "static": (batch, len(data.static_channels), *grid),
            "forcings": (batch, forcing_times, len(data.forcing_channels), *grid),
        }
        for name, tensor in (("states", states), ("static", static), ("forcings", forcings)):
            shape, got = expected[name], tuple(tensor.shape)
            if len(got) != len(shape) or any(want not in (None, n) for n, want in zip(got, shape, strict=True)):
                wanted = ", ".join(
                    ("batch" if batch is None else str(batch)) if i == 0 else "times" if want is None else str(want)
                    for i, want in enumerate(shape)
                )  # the states' batch first
                raise UserError(
                    f"{name} of shape {got}: this model takes ({wanted}) (history {self.history}, channels "
                    f"{self.channels}, grid {self.grid.nlat}x{self.grid.nlon})"
                )

    def ensemble_rollout(
        self,
        states: torch.Tensor,
        static: torch.Tensor,
        forcings: torch.Tensor,
        steps: int,
        members: int,
        generator: Generators = None,
    ) -> Iterator[torch.Tensor]:
        """Normalized predictions (batch, members, channels, nlat, nlon) for leads 1..steps: every
        sample rolled out by ``members`` members, each drawing its own noise (members are a batch
        dimension: memory grows with batch x members). Arguments as ``rollout``, except ``states``:
        (batch, history, channels, nlat, nlon), where every member starts from the sample's
        states, or (batch, members, history, channels, nlat, nlon), each member its own
        (initial-condition ensembles: ``inference.perturbations``). The yielded tensors are views
        of what the next step starts from, as there.
        """
        if not isinstance(members, numbers.Integral) or isinstance(members, bool) or members < 1:
            raise UserError(f"members must be an integer >= 1, got {members!r}")
        batch = len(states)
        if states.dim() == 6:  # one initial state per member
            if states.shape[1] != members:
                raise UserError(f"states of {states.shape[1]} members for an ensemble of {members}")
            self._check_inputs(states[:, 0], static, forcings, steps)
            states = states.flatten(0, 1)
        else:
            self._check_inputs(states, static, forcings, steps)
            states = states.repeat_interleave(members, dim=0)
        static = static.repeat_interleave(members, dim=0)
        for prediction in self._rollout(states, static, forcings, steps, generator, copies=members):
            yield prediction.unflatten(0, (batch, members))

    def normalize(self, physical: torch.Tensor) -> torch.Tensor:
        """In the dtype of the statistics, the module's: float32, or float64 after ``.double()`` (a
        ``.float()`` rounded the float64 API's values to float32 and labelled them float64)."""
        return (physical.to(self.mean.dtype) - self.mean) / self.std

    def to_physical(self, normalized: torch.Tensor) -> torch.Tensor:
        return normalized.to(self.std.dtype) * self.std + self.mean


def checkpoint_static_fields(state: dict, model: Forecaster) -> dict[str, torch.Tensor]:
    """The static fields a checkpoint carries (name -> (nlat, nlon) float32), those of the
    model's static channels on its grid; {} when the checkpoint has none."""
    stored = state.get("static_fields") or {}
    if not isinstance(stored, dict) or not all(isinstance(v, torch.Tensor) for v in stored.values()):
        raise TypeError(f"its static_fields are {type(stored).__name__} {str(stored)[:60]}, not fields by name")
    wanted = set(model.data.static_channels)
    return {
        name: values.float() for name, values in stored.items()
        if name in wanted and tuple(values.shape) == model.grid.shape
    }  # fmt: skip


def forecaster_weights(state_dict: dict) -> dict:
    """A Forecaster's weights from a ForecastModule's state_dict (``forecaster.net.*``), or from a
    checkpoint of before the Forecaster existed (``net.*``)."""
    weights = {}
    for key, value in state_dict.items():
        if key.startswith("forecaster."):
            weights[key.removeprefix("forecaster.")] = value
        elif key.startswith("net."):
            weights[key] = value
    return weights


def _first_detail(error: BaseException) -> str:
    """The first line of ``error`` that says what is wrong: torch's load_state_dict puts a header
    ("Error(s) in loading state_dict for ...:") before the mismatched weight."""
    text = str(error)
    if isinstance(error, KeyError) and len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]  # str() of a KeyError quotes its message; other messages keep their quotes
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    details = [line for line in lines if not line.startswith("Error(s) in loading state_dict")]
    return (details or lines or [type(error).__name__])[0]
