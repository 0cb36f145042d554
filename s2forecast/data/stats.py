"""Per-channel normalization statistics of a store: ``s2forecast stats STORE.zarr``.

For every channel (a single-level variable, or one level of a pressure-level variable) and
static field: the area-weighted mean and standard deviation over a time range, and the same
for its one-step tendency x(t + step) - x(t) (models that predict increments normalize them
with it). Weights are WeatherBench2's cell areas (``Grid.area_weights``). The result is the
``stats`` group of the store, read back by ``load_stats``; DataModules refuse a store without
it.

Streamed: each variable is read once, in blocks of a few time steps (``time_chunk``), each
block reduced to per-channel ``Moments`` (count, weight, mean, M2 in float64) that combine with
Chan et al.'s update. A block's tendencies pair its times with earlier ones in the block or
carried over from the blocks before (the times within one tendency step of its start), so
memory is a few blocks whatever the record length. The next block is read while one is reduced.

The blocks are grouped in parts (``PART_BLOCKS`` blocks of one variable), the tasks of an
``s2forecast.data.engine.Engine``: in this process or on dask.distributed workers, each part
reduced to its ``Moments`` (a part also reads the few earlier times its first tendencies need),
combined on the client in the order of the parts: the same numbers wherever the parts ran.

The group is written beside the old one and renamed into place (``s2forecast.output.Output``),
replacing only a ``stats`` group s2forecast wrote; the store must not have been rewritten
while it was read (its generation is checked before the group is written). Statistics of a
store s2forecast did not write (WeatherBench2, ARCO-ERA5, any URL) go to their own zarr at
``out`` (``s2forecast stats STORE --out STATS.zarr``; DataModules take ``stats: STATS.zarr``):
nothing is ever written into such a store.
"""

import contextlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
import zarr
from tqdm.auto import tqdm

from s2forecast.data.engine import Engine, background
from s2forecast.data.moments import Moments
from s2forecast.data.plausibility import check_store_plausible
from s2forecast.data.store import (
    COMPLETE_ATTR,
    StoreInfo,
    check_store_unchanged,
    describe,
    describe_not_fields,
    is_url,
    open_as_stored,
    open_store,
)
from s2forecast.geometry.quadrature import cell_area_weights
from s2forecast.output import (
    GENERATION_ATTR,
    Output,
    claim_lock,
    clean_leftovers,
    release_lock,
    why_foreign,
    written_by_s2forecast,
    zarr_attributes,
)
from s2forecast.provenance import describe_input, history, python_call
from s2forecast.times import format_time, parse_end, parse_time
from s2forecast.user_errors import UserError, one_line

STATS_GROUP = "stats"
STAT_NAMES = ("mean", "std", "tendency_mean", "tendency_std")
# float64 bytes of one variable's block of time steps in the reductions: large enough that a
# block's numpy calls cost more than their overhead, small enough that a few blocks (the one
# read ahead, the float64 copy, its squares, its tendencies) stay well under a GB at 0.25 deg
CHUNK_BYTES = 16 * 2**20
# blocks per part, the unit of work of ``Engine.map``: long enough that the earlier times a part reads
# for its first tendencies (those of the part before) are few, short enough to spread over workers
PART_BLOCKS = 32


def channel_names(variable: str, levels) -> list[str]:
    """'temperature' with levels (500, 850) -> ['temperature/500', 'temperature/850']."""
    return [f"{variable}/{int(level)}" for level in levels] if levels is not None else [variable]


def time_chunk(ds: xr.Dataset) -> int:
    """Time steps per block so that the largest time-dependent variable's block holds about
    ``CHUNK_BYTES`` of float64 (at least one step)."""
    per_time = max((ds[name].size // ds.sizes["time"] for name in ds.data_vars if "time" in ds[name].dims), default=1)
    return max(1, CHUNK_BYTES // (8 * max(per_time, 1)))


def time_step(times: np.ndarray) -> np.timedelta64:
    """The store's time step: the most common spacing of its time axis."""
    if times.size < 2:
        raise UserError("a store needs at least two times to define a time step")
    spacing, counts = np.unique(np.diff(times), return_counts=True)
    return spacing[counts.argmax()]


def compute_stats(
    path: str | Path,
    start=None,
    end=None,
    step_hours: float | None = None,
    out: str | Path | None = None,
    storage_options: dict | None = None,
    overwrite: bool = False,
    progress: bool = False,
    engine: Engine | None = None,
) -> xr.Dataset:
    """Statistics of the store at ``path`` over times in [start, end], written to its ``stats``
    group (or to ``out``) and returned. Everything is checked and computed before anything is
    written, so a refused run leaves earlier statistics as they were.

    Args:
        path: the store (a local path or URL; ``storage_options`` for fsspec); its times must be
            ascending and unique (every reader assumes so).
        out: a zarr of its own for the statistics; required for a store s2forecast did not
            write (never written into). An existing ``out`` is replaced only with ``overwrite``
            and only if s2forecast wrote it.
        start, end: inclusive time range inside the store, start before end (anything
            ``pandas.Timestamp`` parses); default all.
        engine: where the parts run (``s2forecast.data.engine``; default this process): the same
            statistics either way.
        step_hours: tendency step, positive; default the store's time step. At least one pair
            of times in the range must be that far apart (within one trajectory), so on a
            regular store it is a multiple of the time step.

    Returns:
        Dataset over ``channel`` with ``mean``, ``std``, ``tendency_mean``, ``tendency_std``
        (NaN for static fields' tendencies) and attributes start, end, tendency_step_hours.

    Raises:
        ValueError: bad arguments, unordered or repeated times, infinite values or a channel
            without a finite value in the range (naming the variable, level and first bad time).
    """
    ds = open_store(path, chunks=None, storage_options=storage_options)  # lazy: blocks read on demand
    info = describe(ds, str(path))
    if info.not_fields:
        warnings.warn(
            f"{path}: left out of the statistics, not gridded fields: {describe_not_fields(ds, list(info.not_fields))}",
            stacklevel=2,
        )
    beyond = [name for name in info.variables if set(ds[name].dims) - set(FIELD_DIMS)]
    if beyond:  # e.g. an ensemble's member dim: no model reads them (FieldDataset refuses them by name)
        warnings.warn(
            f"{path}: left out of the statistics, dims other than {FIELD_DIMS}: "
            + ", ".join(f"{name} {ds[name].dims}" for name in beyond),
            stacklevel=2,
        )
        ds = ds.drop_vars(beyond)
        info = describe(ds, str(path))
    if not info.variables:
        raise UserError(f"{path} has no field of dims (time, [level], latitude, longitude): no statistics to compute")
    if out is None:
        if is_url(path):
            raise UserError(
                f"{path} is a URL: nothing is written into it; put its statistics in a local store of their own: "
                f"s2forecast stats {path} --out STATS.zarr (and stats: STATS.zarr in the DataModule)"
            )
        if not _in_s2forecast_layout(path):
            raise UserError(
                f"{path} was not written by s2forecast, so nothing is written into it; put its statistics in a "
                f"store of their own: s2forecast stats {path} --out STATS.zarr (and stats: STATS.zarr in the "
                "DataModule)"
            )
        _check_replaceable(Path(path))
    # --out claimed before the reading and held to the end: a bad one is refused first, and a second run on it
    # is refused at once ("being written by another run"), not after computing everything
    claim = dict(kind="stats", directory=True, inputs=() if is_url(path) else (path,), overwrite=overwrite)
    with contextlib.nullcontext() if out is None else Output(out, **claim) as out_output:
        # the blocks are read in the store's own dim order (a reduction needs no transposed copy): open_store's
        # model order makes WeatherBench2's (time, level, longitude, latitude) a dask array that transposes
        stored = open_as_stored(path, storage_options)
        stats = _statistics(ds, stored[list(ds.data_vars)], info, path, start, end, step_hours, progress, engine)
        check_store_unchanged(path, ds)
        if out_output is not None:
            stats.assign_attrs(out_output.attrs).to_zarr(out_output.tmp, mode="w", zarr_format=3, consolidated=True)
            out_output.commit()
            return stats
    # under the store's own lock, which its writer (generate-swe, convert-era5 --overwrite) holds from start
    # to finish: a store replaced meanwhile would get these statistics of the old data, with no error; what a
    # killed run left beside the store (its lock) goes first
    clean_leftovers(Path(path))
    claim_lock(Path(path), "the store")
    try:
        check_store_unchanged(path, ds)
        write_stats(path, stats)
    finally:
        release_lock(Path(path))
    return stats


def _statistics(
    ds: xr.Dataset,
    stored: xr.Dataset,
    info: StoreInfo,
    path,
    start,
    end,
    step_hours,
    progress: bool,
    engine: Engine | None,
) -> xr.Dataset:
    """The statistics of ``compute_stats``, checked (nothing written); the blocks read from ``stored``
    (the same variables as ``ds``, in the store's dim order and latitude direction)."""
    times = ds["time"].values
    check_time_axis(times, path)
    lo, hi = _period(start, end, times, path)
    selected = times[(times >= lo) & (times <= hi)]
    if selected.size == 0:
        raise UserError(
            f"no times of {path} lie in [{format_time(lo)}, {format_time(hi)}]; the store covers "
            f"{format_time(times[0])} .. {format_time(times[-1])}"
        )
    step = _tendency_step(step_hours, times)
    pairs = selected[np.isin(selected + step, times) & (selected + step <= hi)]
    if "trajectory" in ds.coords:  # never difference across two trajectories
        trajectory = ds["trajectory"].to_series()
        pairs = pairs[trajectory.loc[pairs].values == trajectory.loc[pairs + step].values]
    if info.variables and pairs.size == 0:
        raise UserError(_no_pairs(path, step, time_step(times), selected))

    # Grid rows run north -> south; label them so the weights follow either store order
    north_to_south = np.sort(ds["latitude"].values)[::-1]
    area = cell_area_weights(info.grid.latitudes_deg)  # Grid.area_weights in numpy: stats imports no torch
    weights = xr.DataArray(area, dims="latitude", coords={"latitude": north_to_south})
    weights = weights.sel(latitude=stored["latitude"].values).values  # (lat,) in the order blocks are read
    first = int(np.searchsorted(times, selected[0]))
    selection = slice(first, first + selected.size)  # selected times are consecutive in the store
    check_store_plausible(ds.isel(time=selection), path, info.variables + info.static)  # °C labelled K, ...
    engine = engine if engine is not None else Engine()
    job = engine.share(_Job(stored, selection, selected, step, weights, time_chunk(ds)))
    parts = [part for name in info.variables for part in _parts(name, selected, pairs, step, time_chunk(ds))]
    names, rows, time_dependent = [], [], []
    # a bar on a terminal only (disable=None): logs and pipes get the result lines alone
    bar = tqdm(total=len(parts) + len(info.static), desc="stats", unit="part", disable=None if progress else True)
    with bar, contextlib.closing(engine.map(_weighted_moments, parts, job)) as results:
        for name in info.variables + info.static:
            var = ds[name]
            levels = var["level"].values if "level" in var.dims else None
            if "time" in var.dims:
                fields = tendencies = Moments.empty(var.sizes.get("level", 1))
                infinite, empty = [], []
                for _ in range(sum(part.name == name for part in parts)):  # this variable's parts, in time order
                    part_fields, part_tendencies, part_infinite, part_empty = next(results)
                    fields, tendencies = fields.combine(part_fields), tendencies.combine(part_tendencies)
                    infinite.append(part_infinite)
                    empty.append(part_empty)
                    bar.update()
                infinite = np.concatenate(infinite)
                _warn_empty(path, name, _per_level(np.concatenate(empty), var, selected))
            else:
                x = _block(stored[name])
                fields, tendencies = Moments.of(x, weights, _lat_axis(stored[name])), None
                infinite = np.isinf(x).any((-2, -1))[0]  # (channel,)
                bar.update()
            mean, std = fields.finalize()
            t_mean, t_std = tendencies.finalize() if tendencies is not None else (np.full_like(mean, np.nan),) * 2
            _check_finite(path, name, _per_level(infinite, var, selected), _per_level(fields.count > 0, var), selected)
            names += channel_names(name, levels)
            time_dependent += [name in info.variables] * len(channel_names(name, levels))
            rows.append(np.stack([mean, std, t_mean, t_std]))
    values = np.concatenate(rows, axis=1)
    _check_stats(path, names, values, np.array(time_dependent))
    stats = xr.Dataset(
        {key: ("channel", values[i]) for i, key in enumerate(STAT_NAMES)},
        coords={"channel": np.array(names, dtype=object)},
        attrs={
            "start": str(selected[0]),
            "end": str(selected[-1]),
            "times": int(selected.size),
            "tendency_pairs": int(pairs.size),
            "tendency_step_hours": float(step / np.timedelta64(1, "h")),
            "weights": "WeatherBench2 cell areas",
            "source": describe_input(path),
            **({"source_generation": ds.attrs[GENERATION_ATTR]} if GENERATION_ATTR in ds.attrs else {}),
            "history": history(python_call("compute_stats", path)),
        },
    )
    return stats


# --- checks: arguments and data, all before anything is written ---------------------------------


def _hours(step: np.timedelta64) -> str:
    return f"{step / np.timedelta64(1, 'h'):g}"


def check_time_axis(times: np.ndarray, path) -> None:
    """Times unique and ascending. Readers look times up by bisection, so a store with repeated or
    unordered times is refused rather than deduplicated or sorted here: that would give statistics
    of a store that every other reader misreads."""
    unique, counts = np.unique(times, return_counts=True)
    if (counts > 1).any():
        repeated = unique[counts > 1]
        raise UserError(
            f"store {path}: time {format_time(repeated[0])} appears {int(counts[counts > 1][0])} times "
            f"({repeated.size} repeated time(s) in all); rewrite the store without the repeated time steps"
        )
    backwards = np.flatnonzero(np.diff(times) < np.timedelta64(0, "ns"))
    if backwards.size:
        i = int(backwards[0])
        raise UserError(
            f"store {path}: its times are not in ascending order: {format_time(times[i + 1])} comes after "
            f"{format_time(times[i])} (position {i + 1}); rewrite the store with its times sorted"
        )
    # samples and tendencies pair times exactly: a time a few ms off its step pairs with nothing
    ns = times.astype("datetime64[ns]").astype(np.int64)
    off = np.flatnonzero(ns % 1_000_000_000)
    if off.size:
        warnings.warn(
            f"{off.size} time(s) of {path} are not whole seconds (e.g. {format_time(times[off[0]])}): samples and "
            "tendencies pair times exactly, so those pair with nothing; round them "
            "(ds.assign_coords(time=ds['time'].dt.round('1s')))",
            stacklevel=2,
        )


def _parse_time(value, option: str) -> np.datetime64:
    try:
        pd.Timestamp(value)
    except (ValueError, TypeError):
        raise UserError(f"{option} {value!r} is not a date; use e.g. 2020-01-01 or 2020-01-01T06") from None
    return parse_time(value, option)  # refuses a date datetime64[ns] cannot hold (numpy would wrap it around)


def _period(start, end, times: np.ndarray, path) -> tuple[np.datetime64, np.datetime64]:
    """[start, end] parsed (an end such as ``2017-12-31`` is all of that day: ``times.parse_end``), inside
    the store's times, start not after end."""
    first, last = times[0], times[-1]
    if first == last:
        raise UserError(
            f"the store {path} has one time ({format_time(first)}); statistics need two at least (the tendencies "
            "are differences between times)"
        )
    lo = _parse_time(start, "--start") if start is not None else first
    # a date names a period (--end 2017: all of 2017): refused only where that period misses the store
    for option, value in (("--start", start), ("--end", end)):
        if value is not None and (_parse_time(value, option) > last or parse_end(value, option) < first):
            covers = f"{format_time(first)} .. {format_time(last)}"
            raise UserError(f"{option} {value} is outside the store {path}, which covers {covers}")
    lo = max(lo, first)
    hi = min(parse_end(end, "--end"), last) if end is not None else last
    if lo > hi:
        raise UserError(f"--start {format_time(lo)} is after --end {end}")
    return lo, hi


def _tendency_step(step_hours: float | None, times: np.ndarray) -> np.timedelta64:
    """The tendency step: ``step_hours`` (a positive, finite number of hours) or the store's time step."""
    if step_hours is None:
        return time_step(times)
    seconds = float(step_hours) * 3600.0
    if not np.isfinite(seconds) or round(seconds) <= 0:
        raise UserError(
            f"--step-hours must be a positive number of hours, got {step_hours:g}; the store's time step is "
            f"{_hours(time_step(times))} h"
        )
    span = (times[-1] - times[0]) / np.timedelta64(1, "s") if times.size else 0.0
    if seconds > span:  # (also before nanoseconds overflow: 1e13 h wrapped around to 6 h)
        raise UserError(
            f"--step-hours {step_hours:g} is longer than the whole record ({span / 3600:g} h from "
            f"{format_time(times[0])}): no two times are that far apart; the store's time step is "
            f"{_hours(time_step(times))} h"
        )
    return np.timedelta64(int(round(seconds * 1000)), "ms").astype("timedelta64[ns]")  # as generate-swe's times


def _no_pairs(path, step: np.timedelta64, store_step: np.timedelta64, selected: np.ndarray) -> str:
    if step % store_step != np.timedelta64(0, "ns"):
        return (
            f"--step-hours {_hours(step)} is not a multiple of the time step of {path} ({_hours(store_step)} h): no "
            f"two of its times are {_hours(step)} h apart; use {_hours(store_step)}, {_hours(2 * store_step)}, ..."
        )
    return (
        f"no two times of {path} between {format_time(selected[0])} and {format_time(selected[-1])} are "
        f"{_hours(step)} h apart (within one trajectory); choose a longer period or a shorter --step-hours"
    )


def _warn_empty(path, name: str, empty: xr.DataArray) -> None:
    """Warn of fields that are NaN at every point, left out of the means: a chunk missing from the
    store (a deleted file, HTTP 404 at a URL) reads so, as zarr reads a chunk never written.

    Args:
        empty: (time, [level]) bool, NaN at every point.
    """
    times = empty.any("level") if "level" in empty.dims else empty
    if times.any():
        first = format_time(times["time"].values[int(np.argmax(times.values))])
        warnings.warn(
            f"{path}: variable {name} is NaN at every point at {first} ({int(times.sum())} time(s) in all), left out "
            "of the statistics; if the store should hold values there, a chunk is missing (a deleted file, HTTP 404 "
            "at a URL: zarr reads a missing chunk as NaN)",
            stacklevel=1,
        )


def _check_finite(path, name: str, infinite: xr.DataArray, has_value: xr.DataArray, selected: np.ndarray) -> None:
    """No infinite value, and some finite value in every channel (NaN alone are skipped by the means).

    Args:
        infinite: (time, [level]) or ([level]) for static fields: any infinite value in the field.
        has_value: ([level]): any non-NaN value over the period.
    """
    levels = infinite["level"].values if "level" in infinite.dims else [None]
    for k, level in enumerate(levels):
        where = f"variable {name}" + (f" at {int(level)} hPa" if level is not None else "")
        bad = infinite.isel(level=k).values if level is not None else infinite.values
        if bad.any():
            if "time" in infinite.dims:
                first = infinite["time"].values[np.flatnonzero(bad)[0]]
                at = f"at {format_time(first)} (the first of {int(bad.sum())} such times)"
            else:
                at = "(a static field)"
            raise UserError(
                f"{path}: {where} has infinite values {at}; replace them (NaN marks missing values) or leave "
                "those times out with --start/--end"
            )
        present = has_value.isel(level=k).values if level is not None else has_value.values
        if not present:
            raise UserError(
                f"{path}: {where} has only NaN values between {format_time(selected[0])} and "
                f"{format_time(selected[-1])}; its statistics are undefined: fill it or drop the variable from the "
                "store"
            )


def _check_stats(path, channels: list[str], values: np.ndarray, time_dependent: np.ndarray) -> None:
    """Finite statistics (static fields have no tendency): catches what the data checks cannot, e.g. overflow.

    Args:
        values: (4, channel) in the order of ``STAT_NAMES``.
        time_dependent: (channel,) bool.
    """
    required = np.isfinite(values)
    required[2:, ~time_dependent] = True
    bad = np.flatnonzero(~required.all(0))
    if bad.size:
        k = int(bad[0])
        listed = ", ".join(f"{key} {value:g}" for key, value in zip(STAT_NAMES, values[:, k], strict=True))
        raise UserError(f"{path}: the statistics of {channels[k]} are not finite ({listed}); check its values")


FIELD_DIMS = ("time", "level", "latitude", "longitude")  # of a variable the statistics are of


def _in_s2forecast_layout(path) -> bool:
    """A local store an s2forecast writer made: its artifact marker, or the completeness flag
    every store writer has set since the first layout (stores of older versions have no marker).
    Stores of others (WeatherBench2, ARCO-ERA5) have neither and are never written into."""
    attrs = zarr_attributes(Path(path)) or {}
    return COMPLETE_ATTR in attrs or written_by_s2forecast(Path(path))  # the flag first: no walk of a big store


def _check_replaceable(path: Path) -> None:
    if not (path / "zarr.json").is_file():  # a v2 copy of one of ours (to_zarr(zarr_format=2) keeps its flag)
        raise UserError(
            f"{path} is not a zarr v3 store: statistics are written into s2forecast's own (v3) stores only; put "
            f"them in a store of their own: s2forecast stats {path} --out STATS.zarr (and stats: STATS.zarr in the "
            "DataModule)"
        )
    group = path / STATS_GROUP
    reason = why_foreign(group) if os.path.lexists(group) else None
    if reason is not None:
        why = "is a symbolic link" if group.is_symlink() else f"was not written by s2forecast stats ({reason})"
        raise UserError(
            f"{group} exists and {why}; it is never replaced: move it away yourself to store statistics in this store"
        )


def write_stats(path: str | Path, stats: xr.Dataset) -> None:
    """Replace the ``stats`` group of the store at ``path`` by ``stats``, atomically; a ``stats``
    group that s2forecast did not write is never replaced."""
    _check_replaceable(Path(path))
    option = "stats group"
    try:
        output = Output(Path(path) / STATS_GROUP, "stats", directory=True, overwrite=True, option=option)
        with output:
            stats.assign_attrs(output.attrs).to_zarr(output.tmp, mode="w", zarr_format=3, consolidated=False)
            output.commit()
    except PermissionError as error:  # a store that cannot be written: there is no other stats group to choose
        raise UserError(
            f"{str(error).removesuffix(f'; choose another {option}')}; write the statistics elsewhere with --out "
            "STATS.zarr"
        ) from None
    with warnings.catch_warnings():  # consolidated metadata is outside the v3 spec; we use it on purpose
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(path, zarr_format=3)


def _block(var: xr.DataArray) -> np.ndarray:
    """(time, channel, *spatial) of a variable (or its block) as read: its dtype, latitude and longitude
    in the store's order (``_lat_axis``; reducing them as stored spares a transposed copy): channel
    is the level, or one channel for a single-level field; a static field gets time 1."""
    spatial = [d for d in var.dims if d in ("latitude", "longitude")]
    order = [var.dims.index(d) for d in ("time", "level", *spatial) if d in var.dims]
    x = var.values.transpose(order)  # a view when time and level lead, as in every store we know
    if "level" not in var.dims:
        x = x[:, None] if "time" in var.dims else x[None, None]
    return x


def _rows(array: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``array[index]`` along the first axis: a view when ``index`` is a run of consecutive rows."""
    if index.size and (np.diff(index) == 1).all():
        return array[index[0] : index[-1] + 1]
    return array[index]


def _lat_axis(var: xr.DataArray) -> int:
    """The axis of ``_block(var)`` that latitude runs along (2, or 3 in WeatherBench2's order)."""
    return 2 if [d for d in var.dims if d in ("latitude", "longitude")][0] == "latitude" else 3


@dataclass(frozen=True)
class _Job:
    """What every part of one ``compute_stats`` shares (sent to each worker once).

    ds: the store, opened lazily; selection: its positions of ``times``, the selected times
    (ascending); step: the tendency step; weights: (lat,) in the store's row order; block: time
    steps read at once.
    """

    ds: xr.Dataset
    selection: slice
    times: np.ndarray
    step: np.timedelta64
    weights: np.ndarray
    block: int


@dataclass(frozen=True)
class _Part:
    """One task of ``compute_stats``: the times ``start:stop`` (positions in the selection) of one variable.

    pairs: the times t (ascending) whose tendency x(t + step) - x(t) counts and whose later time is
    in the part; carry: positions (before ``start``) of the earlier times of those pairs that lie
    before the part, read first (the only times read by two parts).
    """

    name: str
    start: int
    stop: int
    pairs: np.ndarray
    carry: np.ndarray


def _parts(name: str, times: np.ndarray, pairs: np.ndarray, step: np.timedelta64, block: int) -> list[_Part]:
    """The parts of one variable over the selected ``times``: ``PART_BLOCKS`` blocks each."""
    size = block * PART_BLOCKS
    parts = []
    for start in range(0, times.size, size):
        stop = min(start + size, times.size)
        mine = pairs[(pairs + step >= times[start]) & (pairs + step <= times[stop - 1])]
        earlier = np.searchsorted(times, mine)
        parts.append(_Part(name, start, stop, mine, earlier[earlier < start]))
    return parts


def _weighted_moments(part: _Part, job: _Job) -> tuple[Moments, Moments, np.ndarray, np.ndarray]:
    """Moments of the fields of one part and of the tendencies whose later time is in it, and where
    values are infinite or all NaN, in one pass (a task of ``Engine.map``).

    Returns:
        (fields, tendencies, infinite, empty): (time, channel) bool over the part's times, any
        infinite value; NaN at every point (a chunk missing from the store reads so).
    """
    var = job.ds[part.name].isel(time=job.selection)
    times, step, weights, block, pairs = job.times, job.step, job.weights, job.block, part.pairs
    later_times = pairs + step
    channels, lat_axis = var.sizes.get("level", 1), _lat_axis(var)
    fields, tendencies = Moments.empty(channels), Moments.empty(channels)
    infinite = np.zeros((part.stop - part.start, channels), dtype=bool)
    empty = np.zeros_like(infinite)
    # earlier times of tendencies whose later time comes in a later block: first those before this part
    carry_times, carry = times[part.carry], (_block(var.isel(time=part.carry)) if part.carry.size else None)
    # float64 scratch of one block, reused: fields' deviations, tendencies, theirs (no page faults per block)
    size = block * channels * int(np.prod([var.sizes[d] for d in ("latitude", "longitude")]))
    work, differences = np.empty(size), np.empty(size)
    with background() as reader:  # the next block is read (decompressed) while this one is reduced
        pending = reader.submit(_block, var.isel(time=slice(part.start, min(part.start + block, part.stop))))
        for start in range(part.start, part.stop, block):
            x = pending.result()
            if start + block < part.stop:
                pending = reader.submit(_block, var.isel(time=slice(start + block, min(start + 2 * block, part.stop))))
            block_times = times[start : start + x.shape[0]]
            moments = Moments.of(x, weights, lat_axis, out=work)
            rows = slice(start - part.start, start - part.start + x.shape[0])
            if not (np.isfinite(moments.mean).all() and np.isfinite(moments.m2).all()):
                # only then: it costs a pass
                infinite[rows] = np.isinf(x).any((-2, -1))
            if moments.count.sum() < x.size:  # some NaN: only then look for fields of nothing else
                empty[rows] = np.isnan(x).all((-2, -1))
            fields = fields.combine(moments)
            later = np.flatnonzero(np.isin(block_times, later_times))
            if later.size:
                earlier = block_times[later] - step
                here = np.searchsorted(block_times, earlier)
                inside = (here < block_times.size) & (block_times[np.minimum(here, block_times.size - 1)] == earlier)
                # x(t) of each tendency's later x(t + step): views when they are consecutive rows of one
                # array (a new 0.05 GB array per block costs page faults)
                if inside.all():
                    before = _rows(x, here)
                elif not inside.any():
                    before = _rows(carry, np.searchsorted(carry_times, earlier))
                else:
                    before = np.empty((later.size, *x.shape[1:]), dtype=x.dtype)
                    before[inside] = x[here[inside]]
                    before[~inside] = carry[np.searchsorted(carry_times, earlier[~inside])]
                # in float64: the difference of two float32 values is exact there
                tendency = differences[: before.size].reshape(before.shape)
                np.subtract(_rows(x, later), before, dtype=np.float64, out=tendency)
                tendencies = tendencies.combine(Moments.of(tendency, weights, lat_axis, out=work))
                del tendency, before
            # keep the earlier times a later block pairs with: within one step of this block's end
            known_times = np.concatenate([carry_times, block_times])
            keep = np.isin(known_times, pairs) & (known_times + step > block_times[-1])
            n = carry_times.size
            if keep[n:].all() and not keep[:n].any():
                carry = x  # all of this block and nothing before it: no copy
            else:  # copies, so that x is freed
                carry = np.concatenate([carry[keep[:n]], x[keep[n:]]]) if n else x[keep]
            carry_times = known_times[keep]
            del x
    return fields, tendencies, infinite, empty


def _per_level(values: np.ndarray, var: xr.DataArray, times: np.ndarray | None = None) -> xr.DataArray:
    """(time, channel) or (channel,) per-channel values as the DataArray ``_check_finite`` reads:
    ``level`` for a pressure-level variable, ``time`` where values has it."""
    dims, coords = [], {}
    if values.ndim == 2:
        dims, coords = ["time"], {"time": times}
    if "level" in var.dims:
        dims.append("level")
        coords["level"] = var["level"].values
    else:
        values = values[..., 0]
    return xr.DataArray(values, dims=dims, coords=coords)


@dataclass(frozen=True)
class ChannelStats:
    """Normalization statistics for a list of channels, as float32 arrays (channels,)."""

    channels: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    tendency_mean: np.ndarray
    tendency_std: np.ndarray
    tendency_step_hours: float


def _check_not_stale(stats: xr.Dataset, store, stats_path) -> None:
    """Refuse statistics written with ``--out`` from this very store before it was rewritten (the
    store's generation then differs from the one they record); statistics of another store, or of a
    store without generations (WeatherBench2's), are the user's choice."""
    recorded = stats.attrs.get("source_generation")
    if recorded is None or is_url(str(store)) or stats.attrs.get("source") != describe_input(store):
        return
    now = (zarr_attributes(Path(store)) or {}).get(GENERATION_ATTR)
    if now is not None and str(now) != str(recorded):
        raise UserError(
            f"the statistics {stats_path} were computed from {store} before it was rewritten (generation "
            f"{recorded}, now {now}): compute them again, `s2forecast stats {store} --out {stats_path} --overwrite`"
        )


def load_stats(
    path: str | Path, channels: list[str], constant_ok: bool = False, stats_path: str | Path | None = None
) -> ChannelStats:
    """The statistics of ``channels`` from the store's ``stats`` group, or from ``stats_path``
    (statistics written with ``s2forecast stats STORE --out STATS``).

    ``constant_ok`` (static fields): a channel with zero spread gets std 1 instead of an error.

    Raises:
        ValueError: no statistics (says how to compute them), or channels missing from them.
    """
    path, stats_path = (p if p is None or is_url(str(p)) else Path(p).expanduser() for p in (path, stats_path))
    store = path
    channels = [channels] if isinstance(channels, str) else list(channels)  # a tuple is a key of one to xarray
    try:
        if stats_path is not None:
            stats = xr.open_zarr(stats_path, chunks=None)
            path = stats_path  # what the messages below name
        else:
            # not the root's consolidated metadata: a run killed between writing the group and consolidating
            # would pair the old attributes (tendency step, period) with the new values
            stats = xr.open_zarr(path, group=STATS_GROUP, chunks=None, consolidated=False)
        stats["channel"]
    except (FileNotFoundError, KeyError, ValueError, OSError) as error:
        where = Path(stats_path) if stats_path is not None else Path(path) / STATS_GROUP
        if not is_url(str(where)) and where.exists() and not isinstance(error, KeyError):  # there, but unreadable
            raise UserError(
                f"cannot read the statistics {where}: {type(error).__name__}: {one_line(str(error)) or 'no reason'}; "
                f"write them again with `s2forecast stats`"
                + (f" (--out {stats_path} --overwrite)" if stats_path is not None else f" on {path}")
            ) from None
        if stats_path is not None:
            raise UserError(f"{stats_path} holds no statistics; write them with `s2forecast stats STORE --out "
                             f"{stats_path}`") from None  # fmt: skip
        raise UserError(
            f"{path} has no normalization statistics; compute them with `s2forecast stats {path} "
            "--start ... --end ...` over the training period (or --out STATS.zarr, then stats: STATS.zarr)"
        ) from None
    known = list(stats["channel"].values)
    missing = [c for c in channels if c not in known]
    if missing and stats_path is not None:
        raise UserError(
            f"the statistics {stats_path} lack channels {missing} of {store}; compute them for this store: "
            f"`s2forecast stats {store} --out {stats_path} --overwrite`"
        )
    if missing:
        raise UserError(f"statistics of {path} lack channels {missing}; rerun `s2forecast stats {path}`")
    if stats_path is not None:
        _check_not_stale(stats, store, stats_path)
    sel = stats.sel(channel=channels)
    std = sel["std"].values
    if constant_ok:
        std = np.where(std > 0, std, 1.0)
    if np.any(~np.isfinite(std)) or np.any(std <= 0):
        bad = [c for c, s in zip(channels, std, strict=True) if not np.isfinite(s) or s <= 0]
        raise UserError(f"channels {bad} of {path} have zero or undefined spread; drop them from the inputs")
    return ChannelStats(
        tuple(channels),
        sel["mean"].values.astype(np.float32),
        std.astype(np.float32),
        sel["tendency_mean"].values.astype(np.float32),
        sel["tendency_std"].values.astype(np.float32),
        float(stats.attrs["tendency_step_hours"]),
    )
