"""Initial conditions of a checkpoint's model: a store, or ERA5 files from the CDS, read as
normalized states at initialization times.

Initial conditions may come from any store with the model's variables and levels, at any dates:
they are normalized with the checkpoint's statistics (a store of new dates has other statistics
than the training period's, and needs none of its own). ERA5 NetCDF or GRIB files as the CDS
delivers them are converted into a temporary store first (``convert-era5``: the same names,
units and value checks).
"""

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from s2forecast.data.convert_era5 import convert_era5, valid_times
from s2forecast.data.fields import FieldDataset, SampleSpec
from s2forecast.data.forcings import forcing_names
from s2forecast.data.stats import ChannelStats
from s2forecast.data.store import is_url, open_store
from s2forecast.inference.forecast_file import ChannelLayout
from s2forecast.models.forecaster import Forecaster
from s2forecast.output import check_unchanged
from s2forecast.times import format_time
from s2forecast.user_errors import UserError


@dataclass(frozen=True)
class InitialStates:
    """What a rollout of a batch of initialization times starts from (normalized).

    Attributes:
        inputs: (batch, history, channels, nlat, nlon) states up to each initialization time.
        static: (batch, static_channels, nlat, nlon).
        forcings: (batch, history + steps, forcing_channels, nlat, nlon) from the first input time on.
    """

    inputs: torch.Tensor
    static: torch.Tensor
    forcings: torch.Tensor

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
    # the static fields the model was trained with, unless the store is on another grid
    given = None if other_grid else {name: v.cpu().numpy() for name, v in model.static_fields.items()}
    try:
        dataset = FieldDataset(store, spec, stats=stats, static_stats=static, given_static=given,
                               storage_options=storage_options)  # fmt: skip
    except ValueError as error:
        if "no normalization statistics" in str(error) and not store_stats:  # static fields of an old checkpoint
            raise UserError(
                f"the checkpoint predates stored statistics of static fields {list(data.static_channels)}: compute "
                f"them on the store (`s2forecast stats {store}`) and pass --store-stats"
            ) from None
        if str(error).startswith(f"store {store}"):  # the store's own fault (its values, unwritten times)
            raise
        raise UserError(f"store {store} does not fit checkpoint: {error}") from None
    if list(dataset.channels) != list(data.channels):
        raise UserError(f"store channels {list(dataset.channels)} differ from the checkpoint's {list(data.channels)}")
    if dataset.grid != model.grid and not other_grid:
        raise UserError(
            f"store grid {dataset.grid} differs from the checkpoint's {model.grid}; pass --other-grid to run "
            "the model on the store's grid (spherical models without grid-bound position embeddings)"
        )
    return dataset


def input_indices(dataset: FieldDataset, t0: np.datetime64) -> np.ndarray:
    """Store positions of the ``history`` states an initialization at ``t0`` reads.

    Raises:
        ValueError: one of them is not in the store (names ``t0`` and the store's range).
    """
    offsets = np.arange(-(dataset.spec.history - 1), 1) * dataset.step
    try:
        return dataset.time_indices(t0 + offsets)
    except ValueError as error:
        raise UserError(
            f"initialization time {format_time(t0)} needs inputs that are not in the store: {error}"
        ) from None


def read_initial_conditions(dataset: FieldDataset, init_times: np.ndarray, steps: int) -> InitialStates:
    """The states ``steps`` steps from each of ``init_times`` start from (batch = len(init_times))."""
    history = dataset.spec.history
    states = [dataset.normalized_states(input_indices(dataset, t0)) for t0 in init_times]
    lead_offsets = np.arange(-(history - 1), steps + 1) * dataset.step
    static = dataset.static_fields()
    return InitialStates(
        inputs=torch.from_numpy(np.stack(states)),
        static=torch.from_numpy(np.repeat(static[None], len(init_times), axis=0)),  # writable, unlike a broadcast
        forcings=torch.from_numpy(np.stack([dataset.forcings_at(t0 + lead_offsets) for t0 in init_times])),
    )


def source_times(source: str | Path, storage_options: dict | None = None) -> np.ndarray:
    """(time,) datetime64[ns] times of a store, or valid times of an ERA5 NetCDF/GRIB file."""
    if is_era5_file(source):
        return valid_times(source)
    return open_store(source, storage_options=storage_options)["time"].values.astype("datetime64[ns]")


def is_era5_file(source: str | Path) -> bool:
    """Whether ``source`` names ERA5 NetCDF/GRIB (a local file) rather than a store (a directory or URL)."""
    return not is_url(source) and Path(source).is_file()


class InitialConditions:
    """The initial conditions a model forecasts from (``open``): its input reader, normalized.

    Attributes:
        source: what the user gave (a store, its URL, or an ERA5 file).
        dataset: the reader of the store (for an ERA5 file: of the store converted from it).
    """

    def __init__(self, source: str | Path, dataset: FieldDataset):
        self.source, self.dataset = source, dataset

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        source: str | Path,
        model: Forecaster,
        other_grid: bool = False,
        store_stats: bool = False,
        storage_options: dict | None = None,
    ) -> Iterator["InitialConditions"]:
        """The initial conditions at ``source`` for ``model`` (arguments as ``open_inputs``).

        For ERA5 NetCDF or GRIB files, a store converted from them in a temporary directory,
        removed on exit: only the model's variables and levels, and the static fields the
        checkpoint does not carry.
        """
        if not is_era5_file(source):
            yield cls(source, open_inputs(model, source, other_grid, store_stats, storage_options=storage_options))
            return
        layout = ChannelLayout.from_channels(model.data.channels)
        statics = [name for name in model.data.static_channels if name not in model.static_fields]
        variables = [*layout.variables, *statics]  # the checkpoint's own static fields are not needed
        with tempfile.TemporaryDirectory(prefix="s2forecast-initial-conditions-") as tmp:
            store = convert_era5([Path(source)], Path(tmp) / "initial_conditions.zarr", variables, layout.levels,
                                 progress=False)  # fmt: skip
            try:
                yield cls(source, open_inputs(model, store, other_grid, store_stats, storage_options=storage_options))
            except UserError as error:  # name the user's file, not the temporary store made of it
                if str(store) not in str(error):
                    raise
                raise type(error)(str(error).replace(str(store), f"{source} (converted)")) from None

    def check(self, init_times: np.ndarray) -> None:
        """Raises ValueError unless every initialization time has its inputs (before anything is written)."""
        for t0 in init_times:
            input_indices(self.dataset, t0)

    def check_unchanged(self) -> None:
        """Raises ValueError if the store was rewritten since it was opened (a URL is not checked)."""
        if not is_url(self.dataset.path):
            check_unchanged(self.dataset.path, self.dataset.generation)
