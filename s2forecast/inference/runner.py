"""Runs a Forecaster from initial states to physical forecasts, lead by lead.

The ``Runner`` holds what is the same for every batch: the model, its device, the precision
(bfloat16 autocast or float32) and what to do with a forecast that goes non-finite (the NaN
policy): "fail" raises at the first one; "write" keeps going, writes that forecast as NaN from
then on and lists every forecast (initialization time, member) that did, with the step and
the first such channel (``nonfinite``).
"""

from collections.abc import Iterator

import numpy as np
import torch

from s2forecast.inference.initial_conditions import InitialStates
from s2forecast.models.forecaster import Forecaster
from s2forecast.times import format_time
from s2forecast.user_errors import UserError

NAN_POLICIES = ("fail", "write")


class Runner:
    """A model on a device, at a precision, with a NaN policy.

    Args:
        model: the forecaster (on ``device``, in eval mode).
        device: where it runs ("cpu", "cuda:1", ...).
        bf16: bfloat16 autocast.
        nan_policy: "fail" or "write" (module docstring).
    """

    def __init__(self, model: Forecaster, device: str = "cpu", bf16: bool = False, nan_policy: str = "fail"):
        if nan_policy not in NAN_POLICIES:
            raise UserError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
        self.model, self.device, self.bf16, self.nan_policy = model, device, bf16, nan_policy
        self.nonfinite: list[str] = []  # "init ..., step k (+h h), channel" of every forecast that went non-finite

    def forecast(
        self,
        states: InitialStates,
        init_times: np.ndarray,
        leads: np.ndarray,
        members: int = 0,
        generator: torch.Generator | list[torch.Generator] | None = None,
    ) -> Iterator[np.ndarray]:
        """Physical float32 forecasts (batch, [members,] channels, nlat, nlon) at each of ``leads``.

        Args:
            states: the initial states of ``init_times`` (batch = len(init_times)); inputs with a
                members axis (batch, members, history, ...) give each member its own
                (``perturbations.member_states``), else every member starts from the same.
            init_times: (batch,) datetime64, for the messages.
            leads: (steps,) timedelta64 lead times of the steps.
            members: ensemble members per initialization time (a members axis); 0: one forecast
                of each, no members axis.
            generator: the noise of a stochastic model (on ``device``), or one per
                initialization time (each draws that time's members); None draws from the
                global random state.

        Raises:
            ValueError: a non-finite forecast, with the "fail" policy.
        """
        copies = max(members, 1)  # forecasts per initialization time
        states = states.to(self.device)
        device = torch.device(self.device)
        dead = torch.zeros(len(init_times) * copies, dtype=torch.bool, device=device)  # went non-finite ("write")
        predictions = self.model.ensemble_rollout(states.inputs, states.static, states.forcings, len(leads), copies,
                                                  generator)  # fmt: skip
        for k in range(len(leads)):
            # per step, not around the loop: a caller that stops iterating keeps its own grad mode
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
                prediction = next(predictions).flatten(0, 1)  # (batch x members, ...): the next step's input
                physical = self.model.to_physical(prediction).cpu().numpy()
            physical[dead.cpu().numpy()] = np.nan
            bad = ~np.isfinite(physical).all(axis=(2, 3)) & ~dead.cpu().numpy()[:, None]
            if bad.any():
                lead = leads[k] / np.timedelta64(1, "h")
                found = []  # every forecast that went non-finite at this step, at its first such channel
                for b in np.flatnonzero(bad.any(axis=1)):
                    member = f", member {b % copies}" if members else ""
                    channel = self.model.channels[np.flatnonzero(bad[b])[0]]
                    found.append(f"init {format_time(init_times[b // copies])}{member}, step {k + 1} (+{lead:g} h), "
                                 f"{channel}")  # fmt: skip
                if self.nan_policy == "fail":
                    raise UserError(f"non-finite forecast at {found[0]}; pass --nan write to keep going")
                self.nonfinite.extend(found)
                dead |= torch.from_numpy(bad.any(axis=1)).to(dead.device)
            yield physical.reshape(len(init_times), copies, *physical.shape[1:]) if members else physical
            # a forecast that went non-finite is written as NaN from then on; the rollout continues
            # from the tensor it yielded, so zeroing it here keeps NaN out of the next steps
            prediction[dead] = 0.0
