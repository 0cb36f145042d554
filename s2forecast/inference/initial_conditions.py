"""Initial conditions of a checkpoint's model: a store, or ERA5 files from the CDS, read as
normalized states at initialization times.

Initial conditions may come from any store with the model's variables and levels, at any dates:
they are normalized with the checkpoint's statistics (a store of new dates has other statistics
than the training period's, and needs none of its own). ERA5 NetCDF or GRIB files as the CDS
delivers them are converted into a temporary store first (``convert-era5``: the same names,
units and value checks); an ensemble file (an ERA5 ``number`` dimension) gives one store per
selected member, whose states are the initial conditions of an ensemble (``select_ic_members``,
``inference.perturbations``).
"""

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from numbers import Integral
from pathlib import Path

import numpy as np
import torch

from s2forecast.data.convert_era5 import (
    MissingVariables,
    convert_era5,
    ensemble_members,
    file_grid,
    resolve_variables,
    valid_times,
)
from s2forecast.data.fields import FieldDataset, SampleSpec
from s2forecast.data.forcings import forcing_names
from s2forecast.data.stats import ChannelStats
from s2forecast.data.store import grid_of, is_url, open_store, require_time_dim
from s2forecast.geometry import Grid
from s2forecast.inference.forecast_file import ChannelLayout
from s2forecast.models.forecaster import Forecaster
from s2forecast.output import check_unchanged
from s2forecast.times import format_time
from s2forecast.user_errors import UserError


@dataclass(frozen=True)
class Forcings:
    """The analytic forcings of a batch of initialization times, (batch, history + steps,
    forcing_channels, nlat, nlon) from the first input time on, computed when indexed (as a tensor
    is: ``forcings[:, k : k + history + 1]``, as ``Forecaster.rollout`` takes them, gives a float32
    tensor on ``device``; ``tensor()`` all of them): those of every step at once grew with the steps
    (20 MB per initialization time and step at 0.25 deg with 5 forcing channels; a review measured
    1.07 -> 1.57 GB from 4 to 256 steps at 91x180). Not a ``torch.Tensor``: index it first.

    Attributes:
        times: (batch, history + steps) datetime64 valid times.
        at: (times,) -> (times, forcing_channels, nlat, nlon) float32 (``FieldDataset.forcings_at``).
        channels, grid: the forcing channels' count and (nlat, nlon).
    """

    times: np.ndarray
    at: Callable[[np.ndarray], np.ndarray]
    channels: int
    grid: tuple[int, int]
    device: str | torch.device = "cpu"
    dtype: torch.dtype = torch.float32
    # the last indexed times' fields: a rollout's consecutive windows overlap by history times
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.times.shape, self.channels, *self.grid)

    def __len__(self) -> int:
        return self.times.shape[0]

    def __getitem__(self, index) -> torch.Tensor:
        index = index if isinstance(index, tuple) else (index,)
        if any(part is None for part in index):
            raise IndexError("Forcings take ints, slices, index arrays and `...`; add axes (None) to the tensor")
        if sum(part is Ellipsis for part in index) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if any(part is Ellipsis for part in index):  # as full slices: the batch and time dims come first
            at = next(i for i, part in enumerate(index) if part is Ellipsis)
            index = (*index[:at], *(slice(None),) * (len(self.shape) - len(index) + 1), *index[at + 1 :])
        arrays = [isinstance(part, list | np.ndarray | torch.Tensor) and np.ndim(part) > 0 for part in index]
        if any(arrays[i] and np.ndim(part) > 1 and np.asarray(part).dtype == bool for i, part in enumerate(index)):
            raise IndexError("Forcings take masks of one dim each; index the tensor for a mask of several")
        if any(arrays[:2]) and any(arrays[2:]):  # numpy's and torch's rules for such a pair differ: a wrong shape
            raise IndexError("Forcings take index arrays in the batch and time dims or in the others, not both")
        times = self.times[index[:2]]  # the batch and time dims; the others index the fields
        flat = times.reshape(-1)
        missing = np.unique(flat[[t not in self._cache for t in flat]]) if flat.size else flat
        if missing.size:
            self._cache.update(zip(missing, self.at(missing), strict=True))
        fields = [self._cache[t] for t in flat]
        values = np.stack(fields) if fields else np.zeros((0, self.channels, *self.grid), np.float32)
        for stale in set(self._cache) - set(flat):
            del self._cache[stale]
        tensor = torch.from_numpy(values.reshape(*times.shape, self.channels, *self.grid)).to(self.device, self.dtype)
        return tensor[(slice(None),) * times.ndim + index[2:]] if len(index) > 2 else tensor

    def tensor(self) -> torch.Tensor:
        """All of them: (batch, history + steps, forcing_channels, nlat, nlon)."""
        return self[:, :]

    def to(self, device=None, dtype: torch.dtype | None = None) -> "Forcings":
        """On ``device`` and/or as ``dtype`` once indexed (``to(torch.float64)`` as a tensor's)."""
        if isinstance(device, torch.dtype):
            device, dtype = None, device
        return replace(self, device=self.device if device is None else device, dtype=dtype or self.dtype)


@dataclass(frozen=True)
class InitialStates:
    """What a rollout of a batch of initialization times starts from (normalized).

    Attributes:
        inputs: (batch, [members,] history, channels, nlat, nlon) states up to each
            initialization time; a members axis holds the members of an ensemble file.
        static: (batch, static_channels, nlat, nlon).
        forcings: (batch, history + steps, forcing_channels, nlat, nlon) from the first input time on,
            computed a window at a time (``Forcings``).
    """

    inputs: torch.Tensor
    static: torch.Tensor
    forcings: Forcings

    def to(self, device) -> "InitialStates":
        return InitialStates(self.inputs.to(device), self.static.to(device), self.forcings.to(device))


def checkpoint_stats(model: Forecaster) -> tuple[ChannelStats, ChannelStats | None]:
    """The normalization statistics stored in the checkpoint: its channels', and its static
    fields' (None for checkpoints of before they were stored, or without static fields)."""
    data = model.data
    zeros = np.zeros(len(data.channels), np.float32)
    std = np.asarray(data.std, np.float32)
    stats = ChannelStats(data.channels, np.asarray(data.mean, np.float32), std, zeros,
                         np.asarray(data.tendency_std, np.float32), float(data.step_hours))  # fmt: skip
    static = None
    if data.static_channels and data.static_mean is not None:
        mean, std = np.asarray(data.static_mean, np.float32), np.asarray(data.static_std, np.float32)
        zeros = np.zeros(len(data.static_channels), np.float32)
        static = ChannelStats(data.static_channels, mean, std, zeros, zeros, float(data.step_hours))
    return stats, static


def open_inputs(
    model: Forecaster,
    store: str | Path,
    other_grid: bool = False,
    store_stats: bool = False,
    targets: int = 0,
    storage_options: dict | None = None,
) -> FieldDataset:
    """The store as the model's input reader, normalized with the checkpoint's statistics.

    ``store_stats``: normalize with the store's own statistics instead. ``other_grid``: accept a
    store on another grid (the neural-operator property: the caller applies the weights there
    with ``Forecaster.on_grid``). ``targets``: truth states per sample (for scoring, e.g.
    ``evaluation.robustness``). ``storage_options``: fsspec options of a URL.

    Raises:
        ValueError: a variable, level or static field of the checkpoint missing from the store,
            another grid without ``other_grid``, or statistics that cannot be found.
    """
    data = model.data
    layout = ChannelLayout.from_channels(data.channels)
    spec = SampleSpec(
        layout.variables, layout.levels, data.static_channels, forcing_names(list(data.forcing_channels)),
        data.history, data.step_hours, targets,  # 0: inputs only, the truth is not needed to forecast
    )  # fmt: skip
    stats, static = (None, None) if store_stats else checkpoint_stats(model)
    # the static fields the model was trained with, unless the store is on another grid (--other-grid
    # on the training grid changes nothing: the store's own static fields were taken, or required)
    given = {name: v.cpu().numpy() for name, v in model.static_fields.items()}
    # the store's grid before the checkpoint's static fields, which were said not to fit it (without
    # static fields, FieldDataset's own grid is checked below: the store is opened once)
    store_grid = _store_grid(store, storage_options) if given else None
    if store_grid is not None and store_grid != model.grid:
        _check_other_grid(model, store_grid, other_grid)
        given = None
    try:
        dataset = FieldDataset(store, spec, stats=stats, static_stats=static, given_static=given,
                               storage_options=storage_options)  # fmt: skip
    except ValueError as error:
        if "no normalization statistics" in str(error) and store_stats:
            raise UserError(
                f"--store-stats normalizes with the statistics inside the store, and {store} holds none: write them "
                f"into it with `s2forecast stats {store}` (a store s2forecast wrote), or leave out --store-stats to "
                "normalize with the checkpoint's"
            ) from None
        if "no normalization statistics" in str(error) and not store_stats:  # static fields of an old checkpoint
            raise UserError(
                f"the checkpoint predates stored statistics of static fields {list(data.static_channels)}: compute "
                f"them on the store (`s2forecast stats {store}`) and pass --store-stats"
            ) from None
        if str(error).startswith(f"store {store}") or f" of store {store} " in str(error):  # the store's own fault
            raise  # (its values, times or units), not a mismatch with the checkpoint
        raise UserError(f"store {store} does not fit checkpoint: {error}") from None
    if list(dataset.channels) != list(data.channels):
        raise UserError(f"store channels {list(dataset.channels)} differ from the checkpoint's {list(data.channels)}")
    if dataset.grid != model.grid:
        _check_other_grid(model, dataset.grid, other_grid)
    return dataset


def _check_other_grid(model: Forecaster, grid: Grid, other_grid: bool) -> None:
    """Refuse a store on ``grid`` (not the checkpoint's) unless ``other_grid`` and the model can run there."""
    reason = model.bound_to_grid()
    if other_grid and reason is None:
        return
    fix = (
        f"{reason}: regrid the store to {model.grid}" if reason is not None
        else "pass --other-grid to run the model on the store's grid"
    )  # fmt: skip
    raise UserError(f"store grid {grid} differs from the checkpoint's {model.grid}; {fix}")


def input_indices(dataset: FieldDataset, t0: np.datetime64, source: str | Path | None = None) -> np.ndarray:
    """Store positions of the ``history`` states an initialization at ``t0`` reads; errors name
    ``source`` (what the user gave) when given, else the store.

    Raises:
        ValueError: one of them is not in the store (names ``t0`` and the store's range).
    """
    offsets = np.arange(-(dataset.spec.history - 1), 1) * dataset.step
    where = "the store" if source is None else "the file"
    try:
        positions = dataset.time_indices(t0 + offsets, None if source is None else str(source))
    except ValueError as error:
        message = f"initialization time {format_time(t0)} needs inputs that are not in {where}: {error}"
        if t0 not in dataset.times and dataset.times[0] <= t0 <= dataset.times[-1]:  # 03 h in a 6-hourly store
            message += "; initialization times are times of the store"
        raise UserError(message) from None
    if dataset.trajectory is not None and np.unique(dataset.trajectory[positions]).size > 1:
        # back-to-back trajectories of an SWE store: the history would be another run's state
        first = dataset.trajectory[positions[-1]]
        start = dataset.times[np.flatnonzero(dataset.trajectory == first)[0]]
        raise UserError(
            f"initialization time {format_time(t0)} needs the {dataset.spec.history} states up to it, but "
            f"{format_time(dataset.times[positions[0]])} is in another trajectory of {where} than it (trajectory "
            f"{first} starts at {format_time(start)}); samples never span two trajectories: start "
            f"{dataset.spec.history - 1} step(s) or more after a trajectory's start"
        )
    return positions


def read_initial_conditions(dataset: FieldDataset, init_times: np.ndarray, steps: int) -> InitialStates:
    """The states ``steps`` steps from each of ``init_times`` start from (batch = len(init_times))."""
    history = dataset.spec.history
    states = [dataset.normalized_states(input_indices(dataset, t0)) for t0 in init_times]
    lead_offsets = np.arange(-(history - 1), steps + 1) * dataset.step
    static = dataset.static_fields()
    times = np.stack([t0 + lead_offsets for t0 in init_times])
    return InitialStates(
        inputs=torch.from_numpy(np.stack(states)),
        static=torch.from_numpy(np.repeat(static[None], len(init_times), axis=0)),  # writable, unlike a broadcast
        forcings=Forcings(times, dataset.forcings_at, len(dataset.forcing_channels), dataset.grid.shape),
    )


def source_times(source: str | Path, storage_options: dict | None = None) -> np.ndarray:
    """(time,) datetime64[ns] times of a store, or valid times of an ERA5 NetCDF/GRIB file."""
    if is_era5_file(source):
        return valid_times(source)
    store = open_store(source, storage_options=storage_options)
    require_time_dim(store, f"store {source}")  # a KeyError was taken for a damaged file
    return store["time"].values.astype("datetime64[ns]")


def _store_grid(store, storage_options: dict | None):
    """The grid of ``store``, None where it cannot be opened or has none (``FieldDataset`` then says why)."""
    try:
        return grid_of(open_store(store, storage_options=storage_options))
    except (ValueError, OSError, KeyError):
        return None


def is_era5_file(source: str | Path) -> bool:
    """Whether ``source`` names ERA5 NetCDF/GRIB (a local file) rather than a store (a directory or URL)."""
    return not is_url(source) and Path(source).is_file()


def _check_era5_variables(variables: list[str], source) -> None:
    """A NetCDF/GRIB ``--store`` is read as ERA5 files (``convert_era5``): a model of other variables
    (e.g. shallow water) is told so, not that an option it never gave (--variables) is wrong."""
    others = [name for name in variables if not _is_era5_name(name)]
    if others:
        raise UserError(
            f"{source} is read as ERA5 NetCDF/GRIB files (as convert-era5 reads them), but the checkpoint's "
            f"variable(s) {', '.join(others)} are not ERA5 variables; pass a zarr store that holds them as --store"
        )


def _is_era5_name(name: str) -> bool:
    try:
        resolve_variables([name])
    except UserError:
        return False
    return True


def select_ic_members(value) -> str | tuple[int, ...] | None:
    """``--ic-members`` checked: None, ``"all"``, or member numbers (the values of an ERA5 file's
    ``number`` dimension) from "0,3,5", "2" or a sequence of integers.

    Raises:
        ValueError: not "all" nor integers >= 0, or a member given twice.
    """
    if value is None or value == "all":
        return value
    parts = [part.strip() for part in value.split(",")] if isinstance(value, str) else list(value)

    def number(part) -> int | None:
        if isinstance(part, str):
            return int(part) if part.isdigit() else None
        return int(part) if isinstance(part, Integral) and not isinstance(part, bool) and part >= 0 else None

    numbers = tuple(number(part) for part in parts)
    if not parts or None in numbers:
        raise UserError(
            f"--ic-members must be 'all' or member numbers >= 0 such as 0,3,5 (or one, e.g. 2), got {value!r}"
        )
    twice = sorted({n for n in numbers if numbers.count(n) > 1})
    if twice:
        raise UserError(f"--ic-members {value}: member(s) {twice} given twice; give each once")
    return numbers


class InitialConditions:
    """The initial conditions a model forecasts from (``open``): its input readers, normalized.

    Attributes:
        source: what the user gave (a store, its URL, or an ERA5 file).
        datasets: the readers of the store (for an ERA5 file: of the store converted from it),
            one per selected member of an ensemble file.
        members: the selected members of an ensemble file (values of its ``number`` dimension);
            None for a store or a file without members.
    """

    def __init__(self, source: str | Path, datasets: list[FieldDataset], members: tuple[int, ...] | None = None):
        self.source, self.datasets, self.members = source, tuple(datasets), members

    @property
    def dataset(self) -> FieldDataset:
        """The reader of the (first) initial conditions: grid, times, units."""
        return self.datasets[0]

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        source: str | Path,
        model: Forecaster,
        other_grid: bool = False,
        store_stats: bool = False,
        storage_options: dict | None = None,
        ic_members: str | tuple[int, ...] | None = None,
    ) -> Iterator["InitialConditions"]:
        """The initial conditions at ``source`` for ``model`` (arguments as ``open_inputs``).

        For ERA5 NetCDF or GRIB files, a store converted from them in a temporary directory,
        removed on exit: only the model's variables and levels, and the static fields the
        checkpoint does not carry. ``ic_members`` (``select_ic_members``): the members of an
        ensemble file to read, each into a store of its own; a file of one member needs none.

        Raises:
            ValueError: ``ic_members`` for a store or a file without members, members that are
                not in the file, or an ensemble file of several members without ``ic_members``.
        """
        ic_members = select_ic_members(ic_members)
        if not is_era5_file(source):
            if ic_members is not None:
                raise UserError(
                    "--ic-members applies to a NetCDF/GRIB file with an ensemble dimension (number, realization or "
                    f"member); {source} is a store, which holds one initial condition per time: leave --ic-members out"
                )
            yield cls(source, [open_inputs(model, source, other_grid, store_stats, storage_options=storage_options)])
            return
        if store_stats:  # before any member is converted: a converted file never holds statistics
            raise UserError(
                f"--store-stats normalizes with the statistics inside a store, and {source} is an ERA5 file, which "
                "holds none: leave out --store-stats (the checkpoint's statistics apply to any data of the model's "
                "variables), or pass as --store a store whose statistics `s2forecast stats` computed over a long "
                "period"
            )
        members = _file_members(Path(source), ic_members)
        layout = ChannelLayout.from_channels(model.data.channels)
        # on another grid the checkpoint's static fields do not apply: the file's are needed (open_inputs)
        elsewhere = other_grid and file_grid(source) != model.grid
        statics = [name for name in model.data.static_channels if elsewhere or name not in model.static_fields]
        variables = [*layout.variables, *statics]  # the checkpoint's own static fields are not needed
        _check_era5_variables(variables, source)
        with tempfile.TemporaryDirectory(prefix="s2forecast-initial-conditions-") as tmp:
            datasets, stores = [], []
            try:
                for member in members or [None]:
                    name = "initial_conditions.zarr" if member is None else f"initial_conditions_member_{member}.zarr"
                    stores.append(Path(tmp) / name)
                    store = convert_era5([Path(source)], stores[-1], variables, layout.levels, member=member,
                                         progress=False)  # fmt: skip
                    datasets.append(open_inputs(model, store, other_grid, store_stats, storage_options=storage_options))
                yield cls(source, datasets, tuple(members) or None)
            except MissingVariables as error:  # the CDS delivers surface and pressure-level fields apart
                raise UserError(
                    f"--store {source} holds {', '.join(error.held) or 'no ERA5 variable'}, but the checkpoint also "
                    f"needs {', '.join(error.missing)}: one ERA5 file holds either single-level or pressure-level "
                    f"fields; convert the files into one store (s2forecast convert-era5 {Path(source).name} OTHER.nc "
                    "--out ic.zarr) and pass it as --store"
                ) from None
            except UserError as error:  # name the user's file, not the temporary store made of it
                text = str(error)
                for store in stores:
                    text = text.replace(str(store), f"{source} (converted)")
                if text == str(error):
                    raise
                raise type(error)(text) from None

    def read(self, init_times: np.ndarray, steps: int) -> InitialStates:
        """The states ``steps`` steps from each of ``init_times`` start from, with a members axis
        (batch, members, history, ...) when several members of an ensemble file are selected."""
        states = [read_initial_conditions(dataset, init_times, steps) for dataset in self.datasets]
        if len(states) == 1:
            return states[0]
        inputs = torch.stack([state.inputs for state in states], dim=1)
        return InitialStates(inputs, states[0].static, states[0].forcings)  # the same for every member

    def check(self, init_times: np.ndarray) -> None:
        """Raises ValueError unless every initialization time has its inputs (before anything is written)."""
        for dataset in self.datasets:
            converted = str(self.source) != dataset.path  # an ERA5 file: name it, not the temporary store
            for t0 in init_times:
                input_indices(dataset, t0, self.source if converted else None)

    def with_inputs(self, init_times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``init_times`` split into those whose inputs are all in the store(s) (``input_indices``)
        and the others, each in the given order.

        Raises:
            ValueError: none of them has its inputs (the error of the first).
        """
        has = np.ones(len(init_times), dtype=bool)
        first_error = None
        for i, t0 in enumerate(init_times):
            try:
                self.check(np.asarray([t0]))
            except UserError as error:
                has[i], first_error = False, first_error or error
        if not has.any():
            raise first_error
        return init_times[has], init_times[~has]

    def check_unchanged(self) -> None:
        """Raises ValueError if the store was rewritten since it was opened (a URL is not checked)."""
        for dataset in self.datasets:
            if not is_url(dataset.path):
                check_unchanged(dataset.path, dataset.generation)


def _file_members(path: Path, ic_members: str | tuple[int, ...] | None) -> list[int]:
    """The members of the ERA5 file ``path`` to read ([]: a file without members)."""
    found = ensemble_members(path)
    chosen = ic_members if ic_members in (None, "all") else ",".join(map(str, ic_members))
    if not found:
        if ic_members is not None:
            raise UserError(
                f"--ic-members {chosen}: {path} has no ensemble members (no number, realization or member "
                "dimension), so it holds one initial condition per time; leave --ic-members out (--members K "
                "--perturbation gaussian makes an ensemble from it)"
            )
        return []
    if ic_members is None:
        if len(found) == 1:
            return found
        raise UserError(
            f"{path} is an ensemble of {len(found)} members ({found}); forecast them as the ensemble with "
            f"--ic-members all (or a selection such as --ic-members {','.join(map(str, found[:2]))}), "
            f"or one member with --ic-members {found[0]}"
        )
    if ic_members == "all":
        return found
    missing = [n for n in ic_members if n not in found]
    if missing:
        raise UserError(f"--ic-members {chosen}: member(s) {missing} not in {path}, whose members are {found}")
    return list(ic_members)
