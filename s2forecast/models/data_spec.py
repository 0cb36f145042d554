"""The data a Forecaster was trained on: channel names, grid, time step and normalization.

A checkpoint carries it (as plain values, ``to_dict``: the ``data`` hyper-parameter of
``training.ForecastModule``), so a checkpoint forecasts without its training store. Checkpoints
of every earlier version hold the same keys; those from before static statistics were stored
lack ``static_mean`` and ``static_std``.
"""

import math
from dataclasses import MISSING, asdict, dataclass, fields, replace
from numbers import Real

from s2forecast.geometry import Grid
from s2forecast.user_errors import UserError


@dataclass(frozen=True)
class DataSpec:
    """What a Forecaster knows about its data.

    Attributes:
        channels: state channels, e.g. ("temperature/850", "2m_temperature").
        static_channels: static fields given as inputs (orography, land-sea mask).
        forcing_channels: forcings computed from time and place (e.g. "toa_radiation", "time_of_day_sin").
        grid: the training grid (rows north -> south).
        history: input states per step.
        step_hours: hours between states.
        rollout_steps: targets per training sample of the DataModule.
        mean, std: (channels,) normalization of the states, physical units.
        tendency_std: (channels,) std of the one-step tendency, physical units.
        static_mean, static_std: (static_channels,) normalization of the static fields; None in
            checkpoints from before they were stored.
        store: the training store (path or URL), for the record.
    """

    channels: tuple[str, ...]
    static_channels: tuple[str, ...]
    forcing_channels: tuple[str, ...]
    grid: Grid
    history: int
    step_hours: float
    rollout_steps: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    tendency_std: tuple[float, ...]
    static_mean: tuple[float, ...] | None = None
    static_std: tuple[float, ...] | None = None
    store: str | None = None

    def __post_init__(self):
        as_tuple = ("channels", "static_channels", "forcing_channels", "mean", "std", "tendency_std")
        for name in as_tuple + ("static_mean", "static_std"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if not isinstance(self.grid, Grid):
            object.__setattr__(self, "grid", Grid(*self.grid))
        # a statistic per channel: a short one broadcasts silently (e.g. one mean for every channel)
        per_channel = [("mean", self.channels), ("std", self.channels), ("tendency_std", self.channels)]
        per_channel += [("static_mean", self.static_channels), ("static_std", self.static_channels)]
        for name, channels in per_channel:
            value = getattr(self, name)
            if value is not None and len(value) != len(channels):
                raise UserError(f"data {name} has {len(value)} values for {len(channels)} channels {list(channels)}")
        # what normalization divides by: a std of 0 or NaN made every input inf or NaN (NaN tendency_std: scale 1)
        for name, valid in (("mean", math.isfinite), ("std", lambda v: math.isfinite(v) and v > 0),
                            ("tendency_std", lambda v: math.isnan(v) or v >= 0)):  # fmt: skip
            bad = [v for v in getattr(self, name) if not (isinstance(v, Real) and not isinstance(v, bool) and valid(v))]
            if bad:
                rule = {"mean": "finite numbers", "std": "finite numbers > 0", "tendency_std": "numbers >= 0 or NaN"}
                raise UserError(f"data {name} must be {rule[name]} (one per channel), got {bad[:3]}")

    @classmethod
    def from_dict(cls, data: dict) -> "DataSpec":
        """The spec of a checkpoint's ``data`` hyper-parameter (``to_dict``, of this or an earlier
        version). Raises KeyError for a missing key, TypeError for an unknown one."""
        required = [f.name for f in fields(cls) if f.default is MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise KeyError(f"the checkpoint's data description lacks {missing}")
        return cls(**data)

    def to_dict(self) -> dict:
        """Plain JSON-able values (lists, numbers, strings): a checkpoint is read weights-only."""
        values = asdict(self)
        values["grid"] = [self.grid.nlat, self.grid.nlon, self.grid.kind]
        for name, value in values.items():
            if isinstance(value, tuple):
                values[name] = list(value)
        if self.static_mean is None:  # as checkpoints without static statistics have always been
            del values["static_mean"], values["static_std"]
        return values

    def on_grid(self, grid: Grid) -> "DataSpec":
        """The same data on another grid."""
        return replace(self, grid=grid)
