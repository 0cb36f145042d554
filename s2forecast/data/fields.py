"""The zarr -> xarray streaming core shared by every DataModule.

A sample is ``history`` input states ending at the initialization time t0 and ``rollout``
target states at t0 + step, ..., t0 + rollout * step, for every channel (a single-level
variable, or one level of a pressure-level variable), plus static fields and analytic
forcings at every one of those times. Only the chunks of those time steps are read: the store
is opened with xarray's lazy indexing (no dask graph per sample), once per worker process, in the
model's dim order and latitude direction whatever the store's (``store.open_store``). A sample's
chunks (every variable at every one of its times) are read by ``read_threads`` threads at once, so
the latency of a remote store (one HTTP request per chunk) does not add up over them; zarr 3 does
its I/O and decompression outside the GIL.
"""

import numbers
import os
import warnings
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import dask
import numpy as np
import torch
import xarray as xr

from s2forecast.data.forcings import forcing_channels, forcing_fields
from s2forecast.data.plausibility import check_store_plausible
from s2forecast.data.stats import ChannelStats, channel_names, check_time_axis, load_stats
from s2forecast.data.store import STATIC_VARIABLES, check_units, describe, open_store
from s2forecast.geometry import Grid
from s2forecast.output import GENERATION_ATTR, rewritten_error
from s2forecast.times import format_time, format_times, parse_end, parse_time
from s2forecast.user_errors import UserError

NAN_POLICIES = ("fail", "skip")
MAX_STEP_SECONDS = 100 * 366 * 86400  # a model step of a century; datetime64[ns] spans 584 years


def check_read_threads(read_threads) -> int:
    """``read_threads`` as an int >= 1, or a one-line UserError naming the value."""
    if isinstance(read_threads, bool) or not isinstance(read_threads, numbers.Integral) or read_threads < 1:
        raise UserError(
            f"read_threads must be an integer >= 1 (1: read a sample's chunks one after another), got {read_threads!r}"
        )
    return int(read_threads)  # a numpy integer (a value computed in a script) as the int the pool takes


_WARNED: set[tuple] = set()  # (statistics, their tendency step, the samples' step) already warned of

# the dims of a variable a model reads, in the order ``open_store`` puts them (any order in the store)
MODEL_DIMS = (("time", "level", "latitude", "longitude"), ("time", "latitude", "longitude"))


@dataclass
class Batch:
    """A batch of samples: tensors plus what they mean.

    Attributes:
        inputs: (batch, history, channels, nlat, nlon) normalized states.
        targets: (batch, rollout, channels, nlat, nlon) normalized states.
        static: (batch, static_channels, nlat, nlon) normalized static fields.
        forcings: (batch, history + rollout, forcing_channels, nlat, nlon), at the input
            times then the target times.
        init_times: (batch,) int64 initialization times (the last input) in ns since 1970.
        channels, static_channels, forcing_channels: names, e.g. "temperature/850".
        grid: the grid of every field (rows north -> south).
        step_hours: hours between consecutive states.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    static: torch.Tensor
    forcings: torch.Tensor
    init_times: torch.Tensor
    channels: tuple[str, ...] = field(default=())
    static_channels: tuple[str, ...] = field(default=())
    forcing_channels: tuple[str, ...] = field(default=())
    grid: Grid | None = None
    step_hours: float = 0.0

    TENSORS = ("inputs", "targets", "static", "forcings", "init_times")

    def to(self, *args, **kwargs) -> "Batch":
        return self._apply(lambda t: t.to(*args, **kwargs))

    def pin_memory(self) -> "Batch":
        return self._apply(lambda t: t.pin_memory())

    def _apply(self, fn) -> "Batch":
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update({name: fn(getattr(self, name)) for name in self.TENSORS})
        return Batch(**values)

    @property
    def init_datetimes(self) -> np.ndarray:
        return self.init_times.cpu().numpy().astype("datetime64[ns]")


@dataclass(frozen=True)
class SampleSpec:
    """What one sample holds; see the module docstring.

    Attributes:
        variables: store variables, each a channel or one channel per selected level.
        levels: pressure levels (hPa) of the pressure-level variables; None: all in the store
            (empty: refused where it would leave out a pressure-level variable).
        static: static fields; "auto": the store's land_sea_mask / geopotential_at_surface.
        forcings: names from ``s2forecast.data.forcings.FORCINGS``.
        history: input states (>= 1).
        step_hours: hours between states; a multiple of the store's time step when there are
            targets (inputs alone may be spaced wider: each needed time is looked up).
        rollout: target states (>= 1 to train or score; 0 for the inputs of forecasts alone).
    """

    variables: tuple[str, ...]
    levels: tuple[int, ...] | None = None
    static: tuple[str, ...] | str = "auto"
    forcings: tuple[str, ...] = ()
    history: int = 1
    step_hours: float = 6.0
    rollout: int = 1

    def __post_init__(self):
        # one name for a tuple of one ("vorticity" was read as its letters)
        for name in ("variables", "forcings") + (() if self.static == "auto" else ("static",)):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, (getattr(self, name),))
        # a name twice made a channel twice: trained on, then refused by the forecast file's layout
        for name in ("variables", "levels", "forcings") + (() if self.static == "auto" else ("static",)):
            values = list(getattr(self, name) or ())
            twice = sorted({str(v) for v in values if values.count(v) > 1})
            if twice:
                raise UserError(f"{name} {twice} are listed twice; list each once")


class SplitRangeError(UserError):
    """A split's range (its period or trajectories) holds no sample of the store: the caller that
    knows which option gave the range names it."""


class FieldDataset(torch.utils.data.Dataset):
    """Samples of ``spec`` from the store at ``path`` whose times all lie in [start, end]
    (and, for stores with a ``trajectory`` coordinate, in one trajectory in ``trajectories``).

    Args:
        path: store in the s2forecast layout, with statistics (``s2forecast stats``).
        spec: the sample layout.
        start, end: inclusive time range of the split (strings or datetimes); None: open.
        trajectories: (first, stop) trajectory indices for stores with trajectories.
        nan_policy: "fail" raises on a non-finite value naming variable and time; "skip"
            warns and serves the next valid sample instead.
        stats, static_stats: normalization statistics of the channels and static fields (e.g. a
            checkpoint's); default: those in the store (``s2forecast stats``), or in
            ``stats_path`` (``s2forecast stats STORE --out STATS``).
        storage_options: fsspec options when ``path`` is a URL.
        given_static: static fields in physical units, name -> (nlat, nlon) on this store's grid,
            used instead of the store's (e.g. the ones a checkpoint was trained with, for initial
            conditions that have none); names of ``spec.static`` not given come from the store.
        read_threads: chunks of a sample read at once (threads per process); 1: one after another.
            The values are the same whatever the number.

    Raises:
        ValueError: missing statistics, variables or levels; with targets (``spec.rollout`` >
            0), a step that is not a multiple of the store's time step or that the time axis
            does not have, or no sample in range.
    """

    def __init__(
        self,
        path: str | Path,
        spec: SampleSpec,
        start=None,
        end=None,
        trajectories: tuple[int, int] | None = None,
        nan_policy: str = "fail",
        stats: ChannelStats | None = None,
        static_stats: ChannelStats | None = None,
        stats_path: str | Path | None = None,
        storage_options: dict | None = None,
        given_static: dict[str, np.ndarray] | None = None,
        read_threads: int = 1,
    ):
        self.read_threads = check_read_threads(read_threads)
        if nan_policy not in NAN_POLICIES:
            raise UserError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
        if spec.history < 1 or spec.rollout < 0:
            raise UserError(f"need history >= 1 and rollout >= 0, got {spec.history} and {spec.rollout}")
        if not spec.variables:  # nothing to read: a sample of no channel
            raise UserError("variables is empty: a sample needs at least one; list the store variables to predict")
        self.path, self.spec, self.nan_policy = str(path), spec, nan_policy
        self.storage_options = storage_options
        ds = open_store(self.path, storage_options=storage_options)
        self.generation = ds.attrs.get(GENERATION_ATTR)  # every later read must see the same store
        info = describe(ds, self.path)
        self.grid = info.grid
        self.lat_deg, self.lon_deg = ds["latitude"].values, ds["longitude"].values

        missing = [v for v in spec.variables if v not in info.variables]
        if missing:
            raise UserError(f"variables {missing} are not in {path}; it has {list(info.variables)}")
        for name in spec.variables:
            check_units(name, ds[name].attrs.get("units"), path)
            if ds[name].dims not in MODEL_DIMS:  # open_store ordered them: other dims remain
                expected = " or ".join(map(str, MODEL_DIMS))
                raise UserError(
                    f"variable {name} of {path} has dims {ds[name].dims}; a model reads {expected}: select or drop "
                    "the other dims in a store of its own"
                )
        self.levels = self._check_levels(ds, spec)
        self.channels = tuple(
            c for v in spec.variables for c in channel_names(v, self.levels if "level" in ds[v].dims else None)
        )
        # where each variable's channels start in a state: threads write their own slices of it
        widths = [len(self.levels) if "level" in ds[v].dims else 1 for v in spec.variables]
        self._first_channel = dict(zip(spec.variables, np.cumsum([0, *widths[:-1]]).tolist(), strict=True))
        self.given_static = {}
        if spec.static == "auto":
            self.static_names = tuple(s for s in STATIC_VARIABLES if s in info.static)
        else:
            self.given_static = self._check_given_static(given_static or {}, spec.static, info.grid, path)
            absent = [s for s in spec.static if s not in info.static and s not in self.given_static]
            if absent:
                raise UserError(f"static fields {absent} are not in {path}; it has {list(info.static)}")
            self.static_names = tuple(spec.static)
        self.forcing_channels = tuple(forcing_channels(spec.forcings))
        self.stats = stats if stats is not None else load_stats(path, list(self.channels), stats_path=stats_path)
        if static_stats is None and self.static_names:
            static_stats = load_stats(path, list(self.static_names), constant_ok=True, stats_path=stats_path)
        self.static_stats = static_stats

        self.times = info.times.astype("datetime64[ns]")
        check_time_axis(self.times, self.path)  # samples are found by bisection
        self.step = self._check_step(self.times, spec.step_hours)
        self.offsets = np.arange(-(spec.history - 1), spec.rollout + 1)  # in steps, relative to t0
        # (time,) trajectory of each time (SWE stores), None for a record: no sample spans two trajectories
        self.trajectory = trajectory = ds["trajectory"].values if "trajectory" in ds.coords else None
        if trajectories is not None and trajectory is None:
            raise UserError(f"{path} has no 'trajectory' coordinate to split by; split it by start/end dates")
        try:
            self.samples = self._sample_indices(start, end, trajectory, trajectories)
        except UserError as error:
            raise SplitRangeError(str(error)) from None
        # values in the units they claim, judged on the first sample's first state alone: cheap, and
        # mislabeled units (°C as K) are wrong at every time
        own_static = [name for name in self.static_names if name not in self.given_static]
        first = int(self.samples[0][0]) if len(self.samples) else 0  # none: initial conditions without history
        check_store_plausible(ds, self.path, [*spec.variables, *own_static], first)
        computed = self.stats.tendency_step_hours
        mismatch = (str(stats_path or path), float(computed), float(spec.step_hours))
        if stats is None and spec.rollout > 0 and not np.isclose(computed, spec.step_hours) and mismatch not in _WARNED:
            # e.g. hourly ERA5 with stats' default step and a 6 h model: the tendency scale is off. Once a
            # process (a DataModule opens the store for each split)
            _WARNED.add(mismatch)
            warnings.warn(
                f"the statistics of {stats_path or path} hold tendencies over {computed:g} h, but samples are "
                f"{spec.step_hours:g} h apart, so the model's tendency scaling is off; recompute them with "
                f"`s2forecast stats ... --step-hours {spec.step_hours:g}`",
                stacklevel=1,
            )
        self._store: xr.Dataset | None = None
        self._pid = None
        self._created_pid = os.getpid()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = None
        self._static_cache: np.ndarray | None = None

    # --- construction checks -------------------------------------------------------------
    @staticmethod
    def _check_given_static(given: dict, names, grid, path) -> dict[str, np.ndarray]:
        checked = {}
        for name, values in given.items():
            if name not in names:
                continue
            values = np.asarray(values, np.float32)
            if values.shape != grid.shape:
                raise UserError(
                    f"static field {name} has shape {values.shape}, but {path} is on a {grid.nlat}x{grid.nlon} "
                    f"grid; put {name} on that grid in the store"
                )
            checked[name] = values
        return checked

    def _check_levels(self, ds, spec):
        if "level" not in ds.coords:
            if spec.levels:
                raise UserError(f"levels {list(spec.levels)} requested but {self.path} has no level dimension")
            return None
        available = [int(x) for x in ds["level"].values]
        dropped = [name for name in spec.variables if "level" in ds[name].dims]
        if spec.levels is not None and not len(spec.levels) and dropped:
            raise UserError(
                f"levels is empty, which would leave out every level of {dropped}: give the pressure levels (hPa) to "
                f"use, or None for all of the store's {available}"
            )
        levels = available if spec.levels is None else [int(x) for x in spec.levels]
        absent = [x for x in levels if x not in available]
        if absent:
            raise UserError(f"levels {absent} hPa are not in {self.path}; it has {available}")
        self._level_index = [available.index(x) for x in levels]
        return tuple(levels)

    def _check_step(self, times: np.ndarray, step_hours: float) -> np.timedelta64:
        if not 0 < step_hours * 3600 < MAX_STEP_SECONDS:  # nanoseconds would wrap around (1e13 h became 6 h)
            raise UserError(f"step_hours={step_hours} is not a step between 0 and {MAX_STEP_SECONDS / 3600:g} hours")
        # to the millisecond, as generate-swe lays out its times (1/7 h: 514.286 s, not 514 s)
        step = np.timedelta64(int(round(step_hours * 3_600_000)), "ms").astype("timedelta64[ns]")
        if self.spec.rollout == 0:  # initial conditions: whatever the spacing, e.g. one analysis a day for a 6 h
            return step  # model; each needed input time is looked up (time_indices), missing ones named there
        if times.size < 2:
            raise UserError(f"{self.path} has {times.size} time step(s); a sample needs at least two")
        base = np.timedelta64(int(np.gcd.reduce(np.diff(times).astype(np.int64))), "ns")  # finest common spacing
        if step <= np.timedelta64(0, "ns") or step % base != np.timedelta64(0, "ns"):
            raise UserError(
                f"step_hours={step_hours} is not a multiple of the time step of {self.path} "
                f"({base / np.timedelta64(1, 'h'):g} h)"
            )
        return step

    def _sample_indices(self, start, end, trajectory, trajectories) -> np.ndarray:
        times = self.times
        lo = parse_time(start, "the period's start") if start is not None else times[0]
        hi = parse_end(end, "the period's end") if end is not None else times[-1]  # "2017-12-31": all of that day
        if start is not None and end is not None and lo > hi:
            raise UserError(f"the period [{start}, {end}] starts after it ends; give it as [start, end]")
        needed = times[:, None] + self.offsets[None, :] * self.step  # (time, offsets)
        position = np.searchsorted(times, needed).clip(max=times.size - 1)
        exists = times[position] == needed
        valid = exists.all(axis=1) & (needed >= lo).all(axis=1) & (needed <= hi).all(axis=1)
        if trajectory is not None:
            same = (trajectory[position] == trajectory[:, None]).all(axis=1)
            valid &= same
            if trajectories is not None:
                valid &= (trajectory >= trajectories[0]) & (trajectory < trajectories[1])
                self._check_trajectories_inside(trajectory, trajectories)
        if self.spec.rollout == 0:  # initial conditions: an init time without its history is named when asked for
            return position[valid]
        # the store's whole range too, when no period narrows it (what the model is told of the data): a spacing
        # message blamed the gaps between trajectories for samples longer than them all
        if not valid.any() and trajectory is not None and (trajectories is not None or start is end is None):
            whole = (int(trajectory.min()), int(trajectory.max()) + 1) if trajectory.size else (0, 0)
            raise UserError(self._no_trajectory_sample(trajectory, trajectories or whole))
        if not valid.any():
            span = (self.offsets.max() - self.offsets.min()) * self.step
            inside = times[(times >= lo) & (times <= hi)]
            no_sample = (
                f"no sample of {self.spec.history} input and {self.spec.rollout} target states "
                f"{self.spec.step_hours:g} h apart in {self.path} between {format_time(lo)} and "
                f"{end.strip() if isinstance(end, str) else format_time(hi)}"
            )
            if not inside.size:
                raise UserError(
                    f"{no_sample}: it has no time there (it holds {format_time(times[0])} .. {format_time(times[-1])})"
                )
            if inside[-1] - inside[0] < span:  # the period, not the step: its spacings would point at the wrong thing
                hours = span / np.timedelta64(1, "h")
                raise UserError(
                    f"{no_sample}: a sample spans {hours:g} h and the store's times there ({format_time(inside[0])} .. "
                    f"{format_time(inside[-1])}) {(inside[-1] - inside[0]) / np.timedelta64(1, 'h'):g} h; "
                    f"give a period at least {hours:g} h long"
                )
            in_range = (times >= lo) & (times <= hi)
            diffs = np.unique(np.diff(inside))
            spacing = [float(d / np.timedelta64(1, "h")) for d in diffs]
            first_missing = next(
                (format_time(needed[i][~exists[i]][0]) for i in np.flatnonzero(in_range) if not exists[i].all()), None
            )
            missing = f"; e.g. {first_missing} does not exist" if first_missing else ""
            if self.step % diffs.min() == np.timedelta64(0):  # the axis has the step: its gaps leave no room
                raise UserError(
                    f"{no_sample}: the record has gaps there (spacings {spacing} h{missing}), and no "
                    f"{len(self.offsets)} consecutive states {self.spec.step_hours:g} h apart fit between them; "
                    "choose another time range"
                )
            raise UserError(
                f"{no_sample}: the time axis there has spacings {spacing} h{missing}. Choose a step the axis has, or "
                "another time range."
            )
        # index of every needed time for each valid t0
        return position[valid]

    def _check_trajectories_inside(self, trajectory: np.ndarray, trajectories: tuple[int, int]) -> None:
        """Refuse a range that runs past the store's trajectories (it was cut short in silence: [30, 40)
        of 32 trajectories served 30 and 31); a range wholly outside is named by ``_no_trajectory_sample``."""
        first, stop = trajectories
        lowest, highest = int(trajectory.min()), int(trajectory.max())
        if stop > first and (first < lowest or stop > highest + 1) and first <= highest and stop > lowest:
            raise UserError(
                f"trajectories [{first}, {stop}) run past {self.path}: it holds trajectories {lowest}..{highest}; "
                f"give a range inside them, e.g. [{max(first, lowest)}, {min(stop, highest + 1)}) (stop excluded)"
            )

    def _no_trajectory_sample(self, trajectory: np.ndarray, trajectories: tuple[int, int]) -> str:
        """Why trajectories [first, stop) hold no sample: an empty range, none of the store's, or too short."""
        first, stop = trajectories
        held = np.unique(trajectory)
        if stop <= first:
            return f"trajectories [{first}, {stop}) is an empty range: give [first, stop), first < stop (stop excluded)"
        inside = held[(held >= first) & (held < stop)]
        if inside.size == 0:
            return (
                f"trajectories [{first}, {stop}) are not in {self.path}: it holds trajectories {held.min()}.."
                f"{held.max()} (give [first, stop), stop excluded)"
            )
        longest = max(int((trajectory == k).sum()) for k in inside)
        return (
            f"no sample of {self.spec.history} input and {self.spec.rollout} target states {self.spec.step_hours:g} h "
            f"apart fits in trajectories [{first}, {stop}) of {self.path}: the longest holds {longest} times; lower "
            "the history, rollout steps or step, or choose other trajectories"
        )

    # --- reading -------------------------------------------------------------------------
    @property
    def store(self) -> xr.Dataset:
        """The store, opened once per process (DataLoader workers get their own handle).

        Raises:
            ValueError: the store was rewritten since this dataset was built.
        """
        if self._store is None or self._pid != os.getpid():
            if os.getpid() != self._created_pid:
                # a DataLoader worker: dask's threaded scheduler, inherited through fork, never ran a
                # task here (reading a store in WeatherBench2's order, transposed by dask, hung); this
                # process's reads run in parallel in its own read_threads pool anyway
                dask.config.set(scheduler="synchronous")
            store = open_store(self.path, storage_options=self.storage_options)
            if store.attrs.get(GENERATION_ATTR) != self.generation:
                raise rewritten_error(self.path, self.generation, store.attrs.get(GENERATION_ATTR))
            self._store = store
            self._pid = os.getpid()
        return self._store

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_store"] = None  # workers reopen
        state["_pool"] = None  # threads do not survive pickling or fork: each process starts its own
        return state

    def __len__(self) -> int:
        return len(self.samples)

    def read_states(self, time_indices: np.ndarray) -> np.ndarray:
        """(len(time_indices), channels, nlat, nlon) float32 physical values.

        One read per (time, variable): a chunk of the store (a field, or all levels of one), each
        written into its own slice of the result, so the order of the reads does not matter.
        """
        ds = self.store
        out = np.empty((len(time_indices), len(self.channels), *self.grid.shape), dtype=np.float32)
        variables = {name: ds[name].variable for name in self.spec.variables}

        def read(t: int, name: str) -> None:
            # an integer index is a basic selection: zarr reads that one chunk, no fancy indexing
            values = variables[name][int(time_indices[t])].values
            if values.ndim == 3:  # (level, lat, lon)
                values = values[self._level_index]
            else:
                values = values[None]
            c = self._first_channel[name]
            out[t, c : c + len(values)] = values

        jobs = [(t, name) for t in range(len(time_indices)) for name in self.spec.variables]
        if self.read_threads == 1 or len(jobs) == 1:
            for job in jobs:
                read(*job)
        else:
            futures = [self.thread_pool.submit(read, *job) for job in jobs]
            wait(futures)  # all of them, even after an error: the pool is reused by the next sample
            for future in futures:
                future.result()  # raises the first error, in reading order
        if not np.isfinite(out).all():
            self._raise_non_finite(out, time_indices)
        return out

    @property
    def thread_pool(self) -> ThreadPoolExecutor:
        """The reading threads of this process (DataLoader workers start their own)."""
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = ThreadPoolExecutor(self.read_threads, thread_name_prefix="s2forecast-read")
            self._pool_pid = os.getpid()
        return self._pool

    def _raise_non_finite(self, states: np.ndarray, time_indices: np.ndarray) -> None:
        t, c = np.argwhere(~np.isfinite(states).all(axis=(2, 3)))[0]
        channel = self.channels[c]
        when = format_time(self.times[time_indices[t]])
        # zarr reads a chunk missing from the store (a deleted file, HTTP 404 at a URL) as NaN
        missing = " (NaN at every point: is a chunk missing from the store?)" if np.isnan(states[t, c]).all() else ""
        raise NonFiniteData(f"{channel} has non-finite values at {when} in {self.path}{missing}")

    def __getitem__(self, index: int) -> dict:
        if not -len(self) <= index < len(self):  # Python's iteration over a dataset ends at IndexError
            raise IndexError(f"sample {index} of a dataset of {len(self)}")
        index %= len(self)
        for attempt in range(len(self)):
            i = (index + attempt) % len(self)
            try:
                return self._sample(i)
            except NonFiniteData as error:
                if self.nan_policy == "fail":
                    raise UserError(f"{error}; set nan_policy='skip' to skip such samples") from None
                init = format_time(self.times[self.samples[i][self.spec.history - 1]])
                warnings.warn(f"skipping the sample of init time {init}: {error}", stacklevel=1)  # ours: one line
        raise UserError(f"every sample of {self.path} in this split has non-finite values")

    def _sample(self, i: int) -> dict:
        time_indices = self.samples[i]
        states = self.normalized_states(time_indices)
        history = self.spec.history
        return {
            "inputs": torch.from_numpy(states[:history]),
            "targets": torch.from_numpy(states[history:]),
            "static": torch.from_numpy(self.static_fields()),
            "forcings": torch.from_numpy(self.forcings_at(self.times[time_indices])),
            "init_times": torch.tensor(self.times[time_indices[history - 1]].astype("int64")),
        }

    def time_indices(self, times: np.ndarray, source: str | None = None) -> np.ndarray:
        """Positions of ``times`` on the store's time axis; raises naming the ones it lacks, and
        ``source`` (what the user gave, e.g. the file this store was converted from) or the store."""
        position = np.searchsorted(self.times, times).clip(max=self.times.size - 1)
        missing = times[self.times[position] != times]
        if missing.size:
            raise UserError(
                f"time(s) {format_times(missing)} are not in {source or f'the store {self.path}'} (it covers "
                f"{format_time(self.times[0])} .. {format_time(self.times[-1])})"
            )
        return position

    def normalized_states(self, time_indices: np.ndarray) -> np.ndarray:
        """(len(time_indices), channels, nlat, nlon) float32 states in normalized units.

        Raises:
            NonFiniteData: a value that is finite but beyond float32 once normalized (1e33 where the
                std is 1e-5), naming the channel and time, as a non-finite value in the store is.
        """
        states = self.read_states(time_indices)
        mean, std = self.stats.mean[:, None, None], self.stats.std[:, None, None]
        try:
            with np.errstate(over="raise"):  # numpy's own flag check: no extra pass over the states
                states -= mean
                states /= std
        except FloatingPointError:
            with np.errstate(over="ignore"):
                states = (self.read_states(time_indices) - mean) / std
            t, c = np.argwhere(~np.isfinite(states).all(axis=(2, 3)))[0]
            raise NonFiniteData(
                f"{self.channels[c]} at {format_time(self.times[time_indices[t]])} in {self.path} is beyond float32 "
                f"once normalized (mean {self.stats.mean[c]:g}, std {self.stats.std[c]:g}): check its values and units"
            ) from None
        return states

    def forcings_at(self, times: np.ndarray) -> np.ndarray:
        """(len(times), forcing_channels, nlat, nlon) float32 forcings (analytic: any time)."""
        return np.stack([forcing_fields(self.spec.forcings, t, self.lat_deg, self.lon_deg) for t in times])

    def static_fields(self) -> np.ndarray:
        """(static_channels, nlat, nlon) float32 normalized static fields, read once."""
        if self._static_cache is None:
            if not self.static_names:
                self._static_cache = np.zeros((0, *self.grid.shape), np.float32)
            else:
                fields = np.stack([self.physical_static(name) for name in self.static_names])
                for name, field in zip(self.static_names, fields, strict=True):
                    if not np.isfinite(field).all():  # else "q contains NaN" deep in the model, naming nothing
                        raise UserError(
                            f"static field {name} of {self.path} has {int((~np.isfinite(field)).sum())} NaN or "
                            "infinite points; fill them, or leave it out of the static fields"
                        )
                stats = self.static_stats
                self._static_cache = (fields - stats.mean[:, None, None]) / stats.std[:, None, None]
        return self._static_cache

    def physical_static(self, name: str) -> np.ndarray:
        """(nlat, nlon) float32 static field ``name`` in its units: the given one, else the store's."""
        if name in self.given_static:
            return self.given_static[name]
        return self.store[name].values.astype(np.float32)

    def collate(self, samples: list[dict]) -> Batch:
        """Stack samples into a ``Batch`` carrying the channel names and grid."""
        stacked = {key: torch.stack([s[key] for s in samples]) for key in samples[0]}
        return Batch(
            **stacked,
            channels=self.channels,
            static_channels=self.static_names,
            forcing_channels=self.forcing_channels,
            grid=self.grid,
            step_hours=self.spec.step_hours,
        )


class NonFiniteData(UserError):
    """A NaN or infinite value in a field the sample needs."""
