"""Climatology in WeatherBench2 layout: per (day of year, hour of day) means, smoothed over the year.

Layout (WB2): dims ``(dayofyear, hour, [level], latitude, longitude)`` with ``dayofyear``
1..366 and ``hour`` the hours of day present in the data.

Day-of-year convention: WB2's, i.e. pandas/xarray ``time.dt.dayofyear`` of the date, both
when building the climatology and when :func:`~s2forecast.evaluation.metrics.climatology_at_valid_times`
looks it up. 1 = Jan 1; 60 = Feb 29 in leap years and Mar 1 otherwise (so dates after
Feb 28 sit one slot later in leap years: a one-day shift, far below the 61-day smoothing
scale); 366 = Dec 31 of leap years. Feb 29 therefore never needs a slot of its own: it
shares slot 60 with the Mar 1 of other years. The slot only leap years fill is 366; as in
WB2 (which fills each year's missing day 366 with its day 365) every non-leap year's Dec 31
is counted in slot 366 too, so slot 366 is the mean of every Dec 31 of the record. Any slot
still empty (a record with gaps) is filled from its neighbours by linear interpolation along
the periodic day-of-year axis.

Smoothing: WB2's triangular window, ``window_days`` (odd) taps, weights rising linearly
from 0 at the ends to 1 at the centre (the two end taps are zero, as in WB2), normalized
to mean 1, applied periodically over the 366 slots (Dec 31 neighbours Jan 1). A slot mean
that is NaN at a point (no finite value of that slot there) is left out of the windows over
it, the weights renormalized over the others; a point is NaN only where its whole window is.
For records made of whole years without NaN this equals WB2's ``compute_hourly_stat``; WB2
fills every NaN with the same year's day-365 value before its mean, s2forecast leaves NaN out.

Short records (``method="auto"``), recorded in ``attrs["climatology_method"]``:
    ``dayofyear_hour``: every day of year 1..365 has data at every hour present, but for
        gaps no longer than half the smoothing window (30 days of WB2's 61; none without
        smoothing), which are filled from their neighbours: the full smoothed climatology
        above. A year with a missing time step keeps its seasonal cycle.
    ``hour``: otherwise, if the hours present are evenly spaced around the clock (e.g. 0,
        6, 12, 18) and each occurs on at least two dates: the mean over all times per hour
        of day, identical for every day of year (a few days or months of data, or SWE runs
        with no seasons).
    ``mean``: otherwise (irregular hours, a single date, or a time axis that is not
        datetime64): the mean over all times, identical for every day of year and hour.
"""

import contextlib
import itertools
import shutil
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.data.coordinates import with_cf_coordinates
from s2forecast.data.engine import Engine, background
from s2forecast.data.store import (
    describe_not_fields,
    is_field,
    not_fields,
    open_zarr,
    require_time_dim,
    to_model_order,
)
from s2forecast.output import byte_size, field_compressors, warn_if_short_of_disk, zarr_attributes
from s2forecast.times import format_time, parse_end, parse_time
from s2forecast.user_errors import UserError

Data = xr.DataArray | xr.Dataset

CLIMATOLOGY_METHODS = ("auto", "dayofyear_hour", "hour", "mean")
DAYS_OF_YEAR = np.arange(1, 367)
DAYOFYEAR_CONVENTION = (
    "time.dt.dayofyear (WeatherBench2): 60 is Feb 29 in leap years and Mar 1 otherwise; "
    "366 holds every Dec 31 (leap and non-leap years)"
)
REQUIRED_DIMS = ("dayofyear", "hour", "latitude", "longitude")


def window_weights(window_days: int = 61) -> np.ndarray:
    """WB2 triangular window weights, normalized to mean 1.

    Args:
        window_days: odd number of taps (61 in WB2); 1 means no smoothing.

    Returns:
        (window_days,) weights; entry ``k`` weighs the day at offset ``k - window_days // 2``.
        The two end taps are zero (weights rise linearly from 0 to 1 and back, as in WB2).
    """
    if int(window_days) != window_days or window_days < 1 or window_days % 2 == 0 or window_days > 365:
        raise UserError(f"window_days must be an odd integer in [1, 365], got {window_days!r}")
    half = int(window_days) // 2
    if half == 0:
        return np.ones(1)
    weights = np.concatenate([np.linspace(0.0, 1.0, half + 1), np.linspace(1.0, 0.0, half + 1)[1:]])
    return weights / weights.mean()


def smooth_dayofyear(climatology: Data, window_days: int = 61) -> Data:
    """Smooth along ``dayofyear`` with the periodic WB2 triangular window.

    Args:
        climatology: any dims including ``dayofyear`` (all 366 slots, in order 1..366).
        window_days: odd window length, see :func:`window_weights`.

    Returns:
        Same dims and coordinates: ``sum_k w_k x[(d + k - half) mod 366] / sum_k w_k``, the sums
        over the finite ``x`` only (WB2's weighted mean skips NaN): NaN where the whole window is.
    """
    weights = window_weights(window_days)
    if weights.size == 1:
        return climatology
    n = climatology.sizes["dayofyear"]
    if n != DAYS_OF_YEAR.size:
        raise UserError(f"smoothing needs all 366 dayofyear slots, got {n}")
    weights = weights / weights.sum()

    def smooth(array: xr.DataArray) -> xr.DataArray:
        if array.chunks is not None:
            # one chunk along dayofyear (the window wraps around it), other dims to dask's default chunk bytes
            array = array.chunk({d: (-1 if d == "dayofyear" else "auto") for d in array.dims})
        out = xr.apply_ufunc(
            _periodic_window_sum,
            array,
            kwargs={"weights": weights},
            input_core_dims=[["dayofyear"]],
            output_core_dims=[["dayofyear"]],
            dask="parallelized",
            output_dtypes=[np.result_type(array.dtype, np.float32)],
            keep_attrs=True,
        )
        return out.transpose(*array.dims)

    return _map_arrays(climatology, smooth)


def _periodic_window_sum(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``out[..., d] = sum_k weights[k] * values[..., (d + k - half) mod n]`` along the last axis (weights
    summing to 1); where some values are NaN, over the finite ones, divided by the sum of their weights."""
    n, half = values.shape[-1], weights.size // 2
    missing = np.isnan(values)
    any_missing = bool(missing.any())
    dtype = np.result_type(values.dtype, np.float32)

    def window_sum(x: np.ndarray) -> np.ndarray:  # in float64: 59 float32 sums were ~10 roundings off
        padded = np.concatenate([x[..., n - half :], x, x[..., :half]], axis=-1)
        out = np.zeros(x.shape)
        for k, weight in enumerate(weights):
            if weight != 0.0:
                out += weight * padded[..., k : k + n]
        return out

    if not any_missing:
        return window_sum(values).astype(dtype, copy=False)
    finite_weight = window_sum((~missing).astype(dtype))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(finite_weight > 0.0, window_sum(np.where(missing, 0.0, values)) / finite_weight, np.nan)
    return mean.astype(dtype, copy=False)


def _map_arrays(data: Data, function) -> Data:
    return data.map(function, keep_attrs=True) if isinstance(data, xr.Dataset) else function(data)


def _fill_gaps_periodic(means: Data, present: np.ndarray) -> Data:
    """Fill empty dayofyear slots by linear interpolation between the nearest filled slots (periodic).

    Args:
        means: dims ``(dayofyear, ...)`` with 366 slots.
        present: (366,) bool, which slots have data.
    """
    if present.all():
        return means
    before, after, w_before = _neighbours(present, np.arange(present.size))
    w_b = xr.DataArray(w_before, dims="dayofyear")
    w_a = xr.DataArray(1.0 - w_before, dims="dayofyear")
    lower = means.isel(dayofyear=before).drop_vars("dayofyear")
    upper = means.isel(dayofyear=after).drop_vars("dayofyear")
    out = lower * w_b + upper * w_a
    return out.assign_coords(dayofyear=means["dayofyear"].values)


def _neighbours(present: np.ndarray, days):
    """The nearest filled slots at or before and at or after ``days`` (an index or an array of them),
    going around the year, and the linear-interpolation weight of the one before (1 on a filled slot).

    Args:
        present: (366,) bool, which slots have data.

    Returns:
        (before, after, w_before), each shaped as ``days``.
    """
    filled = np.flatnonzero(present)
    if filled.size == 0:
        raise UserError("no dayofyear slot has data")
    n = present.size
    after = filled[np.searchsorted(filled, days) % filled.size]
    before = filled[(np.searchsorted(filled, days, side="right") - 1) % filled.size]
    dist_before, dist_after = (days - before) % n, (after - days) % n
    total = dist_before + dist_after
    w_before = np.where(total == 0, 1.0, dist_after / np.where(total == 0, 1, total))
    return before, after, w_before


def _drop_time_coords(data: Data) -> Data:
    return data.drop_vars([name for name, coord in data.coords.items() if "time" in coord.dims])


def _even_around_the_clock(hours: np.ndarray) -> bool:
    steps = np.diff(np.concatenate([hours, hours[:1] + 24]))
    return bool(np.all(steps == steps[0]))


def _longest_gap(days: np.ndarray) -> int:
    """The longest run of days of year 1..365 that are not in ``days``, going around the year."""
    present = np.unique(days[(days >= 1) & (days <= 365)])
    if present.size == 0:
        return 365
    return int((np.diff(np.concatenate([present, present[:1] + 365])) - 1).max())


def _choose_method(stamps: pd.DatetimeIndex | None, window_days: int) -> tuple[str, str]:
    if stamps is None:
        return "mean", "the time axis is not datetime64, so it has no day of year or hour of day"
    doy = np.asarray(stamps.day_of_year)
    hour = np.asarray(stamps.hour)
    hours = np.unique(hour)
    days_per_hour = {int(h): len(set(doy[hour == h].tolist()) - {366}) for h in hours}
    if all(n == 365 for n in days_per_hour.values()):
        return "dayofyear_hour", "the record covers every day of year 1..365 at every hour present"
    worst = min(days_per_hour, key=days_per_hour.get)
    gaps = {h: _longest_gap(doy[hour == h]) for h in days_per_hour}
    widest = max(gaps, key=gaps.get)
    if gaps[widest] <= window_days // 2:  # filled from the neighbours, within the smoothing's half width
        return "dayofyear_hour", (
            f"the record covers every day of year 1..365 at every hour present but for gaps of at most "
            f"{gaps[widest]} day(s) (hour {widest}; hour {worst} has {days_per_hour[worst]} of 365 days), filled from "
            f"their neighbours: narrower than half the {window_days}-day smoothing window"
        )
    why = (
        f"the record does not cover every day of year 1..365 at every hour present (hour {worst} has "
        f"{days_per_hour[worst]} of 365; a gap of {gaps[widest]} days at hour {widest}, wider than half the "
        f"{window_days}-day smoothing window)"
    )
    dates_per_hour = {int(h): np.unique(stamps[hour == h].normalize()).size for h in hours}
    if not _even_around_the_clock(hours):
        return "mean", why + (
            f" and its hours of day {hours.tolist()} are not evenly spaced around the clock; using the mean over all"
            " times"
        )
    if min(dates_per_hour.values()) < 2:
        return "mean", why + " and some hour of day occurs on a single date; using the mean over all times"
    return "hour", why + "; using the mean per hour of day for every day of year"


def compute_climatology(
    truth: Data,
    start=None,
    end=None,
    window_days: int = 61,
    method: str = "auto",
    *,
    out=None,
    progress: bool = False,
    engine: Engine | None = None,
    read_from: xr.Dataset | None = None,
) -> Data:
    """Climatology of ``truth`` in WB2 layout (see the module docstring for the conventions).

    Without ``out``: works lazily on dask-backed data: nothing is loaded, the result is a dask
    graph made of per-(dayofyear, hour) groupby means and a periodic smoothing along dayofyear;
    write it with ``.to_zarr`` or call ``.compute()``. Its memory grows with the grid and the
    record: for small data.

    With ``out`` (a local zarr path): streams over ``truth`` once, one block of store chunks
    at a time, and writes the climatology to ``out`` (zarr v3) channel by channel; memory stays
    bounded by the grid, not the record (see :func:`_stream_climatology`). Returns it opened
    lazily (a Dataset). The same values as without ``out`` (to float32 round-off).

    Args:
        truth: dims ``(time, [level], latitude, longitude)``; variables without a ``time``
            dim (static fields) are left out.
        start, end: optional bounds of the period used (anything ``.sel(time=slice(...))``
            accepts, e.g. ``"1990"`` and ``"2019"``), inclusive.
        window_days: odd length of the triangular smoothing window (61 as in WB2).
        method: ``"auto"`` (choose by coverage), ``"dayofyear_hour"``, ``"hour"`` or ``"mean"``.
        out: where to stream the climatology to (see above): a new path or an empty directory
            (an existing one is refused: ``write_climatology`` replaces only what s2forecast wrote).
        progress: with ``out``, a progress bar on stderr (on a terminal only).
        engine: with ``out``, where the tasks of the two passes run (``s2forecast.data.engine``:
            this process by default, or dask.distributed workers that see ``out``); the same values.
        read_from: with ``out``, the store ``truth`` was opened from, in the store's own layout and
            without dask (``data.store.open_zarr(path, None)``): blocks are read from it and put into
            ``truth``'s layout in memory, 3x faster than through ``truth``'s dask graph when that
            transposes WeatherBench2's (longitude, latitude). Ignored where its variables, once in
            the readers' layout, do not match ``truth``'s dims and coordinates.

    Returns:
        dims ``(dayofyear 1..366, hour, [level], latitude, longitude)``; attrs
        ``climatology_method``, ``climatology_method_reason``, ``climatology_window_days``
        (0 when no smoothing along dayofyear was applied), ``dayofyear_convention``,
        ``climatology_start``, ``climatology_end``, ``climatology_n_times``.

    Raises:
        ValueError: a repeated truth time, a start or end that is not a date or a period with
            no truth time, or (when computed, for dask-backed data) an infinite value, naming
            the variable and time.
    """
    if method not in CLIMATOLOGY_METHODS:
        raise UserError(f"unknown climatology method {method!r}; use one of {CLIMATOLOGY_METHODS}")
    window_weights(window_days)  # validates early
    require_time_dim(truth, "the data")
    if isinstance(truth, xr.Dataset):
        static = [name for name, var in truth.data_vars.items() if "time" not in var.dims]
        odd = not_fields(truth)
        if odd:  # a climatology is of fields; summing expver's strings or time_bnds' datetimes fails deep inside
            warnings.warn(
                f"left out of the climatology, not gridded fields: {describe_not_fields(truth, odd)}", stacklevel=2
            )
        truth = truth.drop_vars(static + odd)
        if not truth.data_vars:
            raise UserError("the truth has no gridded field with a 'time' dim")
    elif not is_field(truth):
        raise UserError(f"{truth.name} {truth.dims} {truth.dtype} is not a gridded field: no climatology of it")
    _check_unique_times(truth)
    if out is not None and Path(out).exists() and (not Path(out).is_dir() or any(Path(out).iterdir())):
        raise UserError(
            f"{out} exists: compute_climatology streams only to a new path or an empty directory; use "
            "write_climatology (s2forecast climatology --overwrite) to replace a climatology s2forecast wrote"
        )
    if out is not None:
        # the period by position in the store's own order, so that each chunk is read once
        times = xr.Dataset(coords={"time": truth["time"].values}).sortby("time")
        period = _select_period(times, start, end)["time"].values
        positions = np.flatnonzero(np.isin(truth["time"].values, period))
        # the times of ``positions``, in the store's order as they are: each store position takes its slot by them
        in_store_order = truth["time"].values[positions]
        stamps = pd.DatetimeIndex(in_store_order) if np.issubdtype(period.dtype, np.datetime64) else None
        method, reason = _resolve_method(method, stamps, window_days)
        attrs = _climatology_attrs(truth.attrs, method, reason, window_days, period)
        data = truth.to_dataset(name=truth.name or "data") if isinstance(truth, xr.DataArray) else truth
        stored = _stored_plans(read_from, data) if read_from is not None else None
        return _stream_climatology(data, positions, stamps, method, window_days, attrs, out, progress, engine, stored)
    if not truth.indexes["time"].is_monotonic_increasing:  # a mean does not depend on the order: sort
        truth = truth.sortby("time")
    truth = _select_period(truth, start, end)

    is_datetime = np.issubdtype(truth["time"].dtype, np.datetime64)
    stamps = pd.DatetimeIndex(truth["time"].values) if is_datetime else None
    method, reason = _resolve_method(method, stamps, window_days)

    data = _drop_time_coords(_refuse_infinite(truth))
    if method == "dayofyear_hour":
        clim = smooth_dayofyear(_dayofyear_hour_means(data, stamps), window_days)
    elif method == "hour":
        hours = np.asarray(stamps.hour)
        clim = data.assign_coords(hour=("time", hours)).groupby("hour").mean(keep_attrs=True)
        clim = clim.expand_dims(dayofyear=DAYS_OF_YEAR)
    else:
        hours = np.unique(np.asarray(stamps.hour)) if stamps is not None else np.array([0])
        clim = data.mean("time", keep_attrs=True).expand_dims(dayofyear=DAYS_OF_YEAR, hour=hours)
    clim = clim.transpose("dayofyear", "hour", ...)
    clim = clim.assign_coords(dayofyear=DAYS_OF_YEAR, hour=clim["hour"].values.astype(np.int64))

    return clim.assign_attrs(_climatology_attrs(truth.attrs, method, reason, window_days, truth["time"].values))


def _resolve_method(method: str, stamps: pd.DatetimeIndex | None, window_days: int) -> tuple[str, str]:
    """The method used and why: ``method`` itself unless ``"auto"``."""
    auto_method, reason = _choose_method(stamps, window_days)
    if method == "auto":
        return auto_method, reason
    if stamps is None and method != "mean":
        raise UserError(f"method {method!r} needs a datetime64 time axis; use method='mean'")
    return method, f"requested method={method!r} ({reason})"


def _climatology_attrs(truth_attrs: dict, method: str, reason: str, window_days: int, times: np.ndarray) -> dict:
    """The truth's attrs and what describes the climatology; ``times``: the period's times, sorted."""
    attrs = dict(truth_attrs)
    attrs.update(
        climatology_method=method,
        climatology_method_reason=reason,
        climatology_window_days=int(window_days) if method == "dayofyear_hour" and window_days > 1 else 0,
        dayofyear_convention=DAYOFYEAR_CONVENTION,
        climatology_start=str(times[0]),
        climatology_end=str(times[-1]),
        climatology_n_times=int(times.size),
    )
    return attrs


# --- whether ACC against it means anything ------------------------------------------------------

MIN_ACC_YEARS = 10  # WeatherBench2 scores ACC against a 1990-2019 climatology


class ClimatologyWarning(UserWarning):
    """ACC's climatology is too short or contains the verified times: its ACC is not meaningful."""


def acc_caveat(attrs: dict, valid_times: np.ndarray) -> str | None:
    """Why ACC against the climatology described by ``attrs`` (``climatology_start``/``_end``, as
    :func:`compute_climatology` records them) is not meaningful for a forecast verified at
    ``valid_times``, or None (also when the climatology does not record its period).

    A climatology of a few years is mostly the weather of those years, not the climate, and one
    made of the verified times removes part of the very anomalies ACC correlates (persistence can
    then score ACC -1): e.g. ``"climatology 2020-01-01T00..2020-01-04T18: 0.01 years (< 10),
    contains the verified times"``.
    """
    try:
        start, end = (pd.Timestamp(attrs[key]) for key in ("climatology_start", "climatology_end"))
    except (KeyError, TypeError, ValueError):
        return None
    valid = pd.DatetimeIndex(np.asarray(valid_times).ravel())
    years = (end - start) / pd.Timedelta(days=365.25)
    reasons = [f"{years:.2g} years (< {MIN_ACC_YEARS})"] if years < MIN_ACC_YEARS else []
    if valid.size and valid.min() <= end and valid.max() >= start:
        reasons.append("contains the verified times")
    if not reasons:
        return None
    return f"climatology {format_time(start)}..{format_time(end)}: {', '.join(reasons)}"


# --- checks of the truth: each time once, finite values, a period inside the record ---------------


def _check_unique_times(truth: Data) -> None:
    """Each time once: a repeated time would count twice in every mean it falls in."""
    index = truth.indexes["time"]
    if not index.is_unique:
        repeated = index[index.duplicated()]
        raise UserError(
            f"truth time {format_time(repeated.values[0])} appears more than once ({repeated.unique().size} repeated "
            "time(s) in all); a climatology would count it twice: remove the repeated time steps"
        )


def _select_period(truth: Data, start, end) -> Data:
    """The truth in [start, end], inclusive, as ``.sel(time=slice(start, end))`` selects it ("2019" is
    the whole year); refuses what is not a date and a period holding no truth time."""
    if start is None and end is None:
        return truth
    is_datetime = np.issubdtype(truth["time"].dtype, np.datetime64)
    first, last = start, end
    if is_datetime:  # as datetime64 in UTC: a time zone (2020-01-01T06Z) is converted, not refused by pandas
        first = None if start is None else parse_time(start, "climatology start")
        last = None if end is None else parse_end(end, "climatology end")
    selected = truth.sel(time=slice(first, last))
    if selected.sizes["time"]:
        return selected
    if is_datetime and first is not None and last is not None and first > last:
        raise UserError(f"the climatology period starts ({start}) after it ends ({end}); swap start and end")
    times = truth["time"].values
    raise UserError(
        f"no truth times between start={start!r} and end={end!r}; the truth covers {format_time(times[0])} .. "
        f"{format_time(times[-1])}"
    )


def _refuse_infinite(data: Data) -> Data:
    """``data`` with a check that raises a ValueError naming the variable and time of an infinite value,
    which a climatology would smooth into every slot of its window (and an overall mean into all 366
    days). numpy-backed data are checked now; dask-backed data when computed, in the same pass over the
    data as the climatology itself. NaN (missing values) are left to the means, which skip them."""
    return _map_arrays(data, _infinite_checked)


def _infinite_checked(array: xr.DataArray) -> xr.DataArray:
    times, axis = array["time"].values, array.get_axis_num("time")
    name = f"variable {array.name}" if array.name is not None else "the truth"

    def check(block: np.ndarray, offset: int) -> None:
        infinite = np.isinf(block)
        if infinite.any():
            per_time = infinite.any(axis=tuple(i for i in range(block.ndim) if i != axis))
            raise _infinite_error(name, times[offset + int(np.flatnonzero(per_time)[0])])

    if array.chunks is None:
        check(np.asarray(array.values), 0)
        return array

    def checked(block: np.ndarray, block_info=None) -> np.ndarray:
        check(block, block_info[0]["array-location"][axis][0])
        return block

    return array.copy(data=array.data.map_blocks(checked, dtype=array.dtype))


def _infinite_error(name: str, time) -> UserError:
    return UserError(
        f"{name} has infinite values at {format_time(time)}; replace them (NaN marks missing values) or leave that "
        "time out of the climatology period"
    )


def _dayofyear_hour_means(data: Data, stamps: pd.DatetimeIndex) -> Data:
    """Raw (unsmoothed) mean per (dayofyear, hour) slot; dims ``(hour, dayofyear, ...)``.

    Non-leap years' Dec 31 also count in slot 366 (WB2 fills each year's day 366 with its
    day 365); slots still empty are filled from their neighbours (periodic).
    """
    doy = np.asarray(stamps.day_of_year)
    hour = np.asarray(stamps.hour)
    leap = np.asarray(stamps.is_leap_year)
    per_hour = []
    hours = np.unique(hour)
    for h in hours:
        at_hour = np.flatnonzero(hour == h)
        extra = at_hour[(doy[at_hour] == 365) & ~leap[at_hour]]
        index = np.concatenate([at_hour, extra])
        keys = np.concatenate([doy[at_hour], np.full(extra.size, 366)])
        means = _day_of_year_means(data, index, keys).reindex(dayofyear=DAYS_OF_YEAR)
        per_hour.append(_fill_gaps_periodic(means, np.isin(DAYS_OF_YEAR, keys)))
    return xr.concat(per_hour, dim=xr.DataArray(hours, dims="hour", name="hour"), coords="minimal")


def _day_of_year_means(data: Data, index: np.ndarray, keys: np.ndarray) -> Data:
    """Mean over the times ``index`` of ``data`` per day of year ``keys`` (one per index), NaN left out:
    ``(dayofyear, ...)`` for the days present. As ``groupby("dayofyear").mean()``, without its
    reduction per group: 732 of them (a year at 12 h) took 3 s whatever the field size."""
    order = np.argsort(keys, kind="stable")
    days, starts = np.unique(keys[order], return_index=True)

    def means(values: np.ndarray) -> np.ndarray:  # (..., time) -> (..., days), float64 sums
        finite = np.isfinite(values)
        sums = np.add.reduceat(np.where(finite, values, 0.0), starts, axis=-1, dtype=np.float64)
        counts = np.add.reduceat(finite, starts, axis=-1, dtype=np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):  # a day of no finite value: NaN
            return (sums / counts).astype(_mean_dtype(values.dtype))

    def of_array(array: xr.DataArray) -> xr.DataArray:
        if array.chunks is not None:  # each block all the times of a part of the field (dask's chunk size)
            array = array.chunk({d: -1 if d == "time" else "auto" for d in array.dims})
        result = xr.apply_ufunc(
            means,
            array,
            input_core_dims=[["time"]],
            output_core_dims=[["dayofyear"]],
            dask="parallelized",
            output_dtypes=[_mean_dtype(array.dtype)],
            dask_gufunc_kwargs={"output_sizes": {"dayofyear": days.size}},
            keep_attrs=True,
        )
        return result.transpose(*[("dayofyear" if d == "time" else d) for d in array.dims])

    sorted_times = data.isel(time=index[order])
    result = sorted_times.map(of_array, keep_attrs=True) if isinstance(data, xr.Dataset) else of_array(sorted_times)
    return result.assign_coords(dayofyear=days)


def _mean_dtype(dtype: np.dtype) -> np.dtype:
    """A mean's dtype: a float input's own, float64 for integers (as numpy's and xarray's mean)."""
    return dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float64)


# --- streaming: one pass over a store, bounded memory ------------------------------------------------

# times read at once per variable: whole store chunks, about this many bytes. A block is held while the
# next is read and assembled from its chunks (several copies on the way), so blocks cost memory and
# buy no speed: at 121x240 over 2 years 32 MiB peaked at 0.78-0.86 GB, 4 MiB at 0.45 GB, same wall time
READ_BLOCK_BYTES = 4 * 2**20
OUTPUT_CHUNK_BYTES = 16 * 2**20  # output chunk: (days, 1 hour, 1 level, latitude, longitude), about this size
SUMS_BYTES = 64 * 2**20  # float64 slot sums a task of the first pass holds: (slots, channel..., spatial...)
SPATIAL_DIMS = ("latitude", "longitude")
# points of a field the smoothing updates at once: its running sums (float64) stay in the CPU's cache.
# One channel-hour at 0.25 deg, output cast included: 2.0 s as whole fields (in place), 1.5 s in tiles
SMOOTHING_TILE = 65536
SCRATCH = ".climatology-scratch"  # inside the output being written; removed before it is complete


def _stream_climatology(
    data: xr.Dataset,
    positions: np.ndarray,
    stamps,
    method: str,
    window_days: int,
    attrs: dict,
    out,
    progress: bool,
    engine: Engine | None = None,
    stored: "dict[str, _Stored] | None" = None,
) -> xr.Dataset:
    """Write the climatology of ``data`` at ``positions`` (storage order) to the zarr ``out``, in two
    passes of tasks run by ``engine`` (this process by default, or dask.distributed workers, which
    then must see ``out``). ``stored``: each variable of ``data`` as stored, without dask, to read the
    blocks from (``_read_block``).

    1. Sums: per variable and range of consecutive slots ((dayofyear, hour), hour, or one slot for
       the mean), a task reads the times of those slots (per year one run of times, read in blocks
       of whole store chunks: with one time per chunk, as every s2forecast and WeatherBench2
       store, each chunk is read once) and adds them up per slot in float64, in time order (NaN
       left out and counted per point); it writes the means, in float32, to a scratch file of its
       own inside ``out`` (the means of a 0.25° variable are larger than memory).
    2. Means: per variable, channel (one index of the dims other than latitude/longitude) and
       hour, a task smooths the slot means along the periodic day of year with running sums (the
       triangular window is two boxes convolved) and writes them in output chunks.

    A variable of one channel stored one time per chunk (``_reads_store_itself``: WeatherBench2's
    surface fields, any variable of s2forecast's stores at one level) skips pass 1: its task of
    pass 2 reads the times of its hour itself (``_StoreSlotMeans``), each chunk once, and computes
    the same slot means. At 0.25° the scratch it saves (6 GB a channel, written and read back) is
    larger than a year of input.

    Each slot is summed by one task and each output chunk written by one: the same numbers
    wherever the tasks run. Memory per task: ``SUMS_BYTES`` of sums and one read block, or
    ~``window_days`` fields of one channel in float64 (~0.5 GB at 0.25°; ~0.75 GB when the task
    reads the store itself: it keeps the means of the ``window_days - 2`` days asked twice);
    independent of the record length. Scratch disk: 4 bytes x slots x channels x points of one
    variable at a time (the variables are done one after the other, each scratch removed once read).
    """
    from tqdm.auto import tqdm

    hours = np.unique(np.asarray(stamps.hour)) if stamps is not None else np.array([0])
    primary, extra, n_slots = _slots(stamps, positions, method, hours, data.sizes["time"])
    counts = np.bincount(primary[primary >= 0], minlength=n_slots) + np.bincount(extra[extra >= 0], minlength=n_slots)
    direct = {name for name in data.data_vars if _reads_store_itself(data[name], method)}
    sums = {name: [] if name in direct else _sum_tasks(data[name], n_slots, primary, extra) for name in data.data_vars}
    _warn_if_short_of_disk(data, hours.size, sums, Path(out))
    template = _output_template(data, hours, attrs)
    template.to_zarr(out, mode="w", zarr_format=3, consolidated=True, compute=False)
    scratch = Path(out) / SCRATCH
    means = {
        name: [
            _MeanTask(name, channel, h, _slots_per_task(data[name], n_slots), name in direct)
            for channel in range(_channels(data[name]))
            for h in range(hours.size)
        ]
        for name in data.data_vars
    }
    engine = engine if engine is not None else Engine()
    total = sum(len(tasks) for tasks in (*sums.values(), *means.values()))
    try:
        scratch.mkdir()
        job = _Job(data, str(Path(out).absolute()), primary, extra, counts, method, hours, window_days, stored)
        job = engine.share(job)
        with tqdm(total=total, desc="climatology", unit="task", disable=None if progress else True) as bar:

            def run(function, tasks) -> None:
                with contextlib.closing(engine.map(function, tasks, job)) as results:
                    for _ in results:
                        bar.update()

            # the variables that read the store themselves all at once (no scratch: as many tasks as can run),
            # then the others one after the other, each one's scratch removed once smoothed: the scratch disk
            # peaks at the largest variable's (6 GB a channel at 0.25 deg), not at all of them together
            run(_write_means, [task for name in data.data_vars if name in direct for task in means[name]])
            for name in [name for name in data.data_vars if name not in direct]:
                run(_sum_slots, sums[name])
                run(_write_means, means[name])
                for task in sums[name]:
                    _scratch(out, name, task.first, "means").unlink(missing_ok=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return xr.open_zarr(out)


def _warn_if_short_of_disk(data: xr.Dataset, n_hours: int, sums: dict[str, list], out: Path) -> None:
    """Warn, before any work, when the disk holding ``out`` has less free space than the climatology
    can take: its output before compression (366 days x ``n_hours`` per channel, whatever the record:
    6 GB a channel at 0.25 deg; Blosc LZ4 makes it about half, depending on the data) and, while it
    runs, the scratch of pass 1's largest variable (``sums``: its tasks). At 0.25 deg ERA5's 70
    channels take 0.43 TB before compression, and 79 GB of scratch for a variable of 13 levels."""

    def scratch_bytes(name: str) -> int:
        slots = sum(task.stop - task.first for task in sums[name])
        return 4 * slots * _channels(data[name]) * _points(data[name])

    output = sum(
        DAYS_OF_YEAR.size * n_hours * _channels(v) * _points(v) * np.result_type(v.dtype, np.float32).itemsize
        for v in data.data_vars.values()
    )
    scratch = max((scratch_bytes(name) for name in sums), default=0)
    what = (
        f"this climatology takes up to {byte_size(output)} of output before compression (about half after, "
        f"depending on the data) and {byte_size(scratch)} of scratch while it runs"
    )
    warn_if_short_of_disk(out, output + scratch, what)


def _slots(stamps, positions: np.ndarray, method: str, hours: np.ndarray, n_times: int):
    """Accumulator slot of each time (by store position; -1 outside the period), a second slot
    (Dec 31 of non-leap years also counts in day 366; else -1), and the number of slots.

    Slots: ``dayofyear_hour``: ``(dayofyear - 1) * len(hours) + hour index`` (366 x hours);
    ``hour``: the hour index; ``mean``: 0.
    """
    primary = np.full(n_times, -1, dtype=np.int64)
    extra = np.full(n_times, -1, dtype=np.int64)
    if method == "mean":
        primary[positions] = 0
        return primary, extra, 1
    hour = np.searchsorted(hours, np.asarray(stamps.hour))
    if method == "hour":
        primary[positions] = hour
        return primary, extra, hours.size
    doy = np.asarray(stamps.day_of_year)
    primary[positions] = (doy - 1) * hours.size + hour
    dec31 = (doy == 365) & ~np.asarray(stamps.is_leap_year)
    extra[positions[dec31]] = 365 * hours.size + hour[dec31]
    return primary, extra, DAYS_OF_YEAR.size * hours.size


def _order(variable: xr.DataArray) -> tuple[list[str], list[str]]:
    """The dims of a channel index (all but time, latitude, longitude) and the spatial dims, in the variable's order."""
    others = [d for d in variable.dims if d != "time"]
    return [d for d in others if d not in SPATIAL_DIMS], [d for d in others if d in SPATIAL_DIMS]


def _output_template(data: xr.Dataset, hours: np.ndarray, attrs: dict) -> xr.Dataset:
    """The climatology's layout, lazy (nothing computed): dims ``(dayofyear, hour, *other dims)``,
    chunks ``(days, 1, 1.., latitude, longitude)``."""
    import dask.array as da

    variables, encoding = {}, {}
    for name, variable in data.data_vars.items():
        dims = ("dayofyear", "hour", *[d for d in variable.dims if d != "time"])
        shape = (DAYS_OF_YEAR.size, hours.size, *[variable.sizes[d] for d in dims[2:]])
        dtype = np.result_type(variable.dtype, np.float32)
        channel, spatial = _order(variable)
        points = int(np.prod([variable.sizes[d] for d in spatial]))
        days = int(np.clip(OUTPUT_CHUNK_BYTES // max(points * dtype.itemsize, 1), 1, DAYS_OF_YEAR.size))
        chunks = (days, 1, *[1 if d in channel else variable.sizes[d] for d in dims[2:]])
        variables[name] = xr.DataArray(da.zeros(shape, dtype=dtype, chunks=chunks), dims=dims, attrs=variable.attrs)
        encoding[name] = {"chunks": chunks, "compressors": field_compressors()}
    coords = {name: coord for name, coord in data.coords.items() if "time" not in coord.dims}
    coords.update(dayofyear=DAYS_OF_YEAR, hour=hours.astype(np.int64))
    template = with_cf_coordinates(xr.Dataset(variables, coords=coords, attrs=attrs))
    for name, chunk_encoding in encoding.items():
        template[name].encoding = chunk_encoding
    return template


def _channels(variable: xr.DataArray) -> int:
    """The channels of a variable: the product of its dims other than time, latitude and longitude."""
    return int(np.prod([variable.sizes[d] for d in _order(variable)[0]]))


def _points(variable: xr.DataArray) -> int:
    return int(np.prod([variable.sizes[d] for d in _order(variable)[1]]))


@dataclass(frozen=True)
class _Job:
    """What every task of one ``_stream_climatology`` shares (sent to each worker once).

    data: the truth, lazy; out: the climatology being written (its scratch inside); primary,
    extra: (time,) slots of each store position (``_slots``); counts: (slot,) times per slot.
    """

    data: xr.Dataset
    out: str
    primary: np.ndarray
    extra: np.ndarray
    counts: np.ndarray
    method: str
    hours: np.ndarray
    window_days: int
    stored: "dict[str, _Stored] | None" = None  # the variables as stored, without dask (``_read_block``)


@dataclass(frozen=True)
class _SumTask:
    """Sum the slots ``first:stop`` of variable ``name`` over the store positions ``blocks`` hold (pass 1)."""

    name: str
    first: int
    stop: int
    blocks: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class _MeanTask:
    """Smooth and write the days of one channel and hour index of variable ``name`` (pass 2)."""

    name: str
    channel: int
    hour: int
    slots_per_task: int  # of pass 1: which scratch file holds a slot
    reads_store: bool = False  # reads its slots from the store (``_StoreSlotMeans``), not from pass 1's scratch


def _scratch(out, name: str, first: int, kind: str) -> Path:
    """The scratch file of pass 1 with the ``kind`` ("means") of the slots from ``first`` of a variable."""
    return Path(out) / SCRATCH / f"{name}.{first}.{kind}"


def _slots_per_task(variable: xr.DataArray, n_slots: int) -> int:
    """Consecutive slots a task of pass 1 sums: their sums fill about ``SUMS_BYTES`` (one slot at least)."""
    return int(np.clip(SUMS_BYTES // (8 * _channels(variable) * _points(variable)), 1, n_slots))


def _sum_tasks(variable: xr.DataArray, n_slots: int, primary: np.ndarray, extra: np.ndarray) -> list[_SumTask]:
    """The tasks of pass 1 for one variable: ranges of ``_slots_per_task`` consecutive slots, each with
    the read blocks of its times; none for slots without a time."""
    size = _slots_per_task(variable, n_slots)
    bounds, tasks = _chunk_bounds(variable), []
    for first in range(0, n_slots, size):
        stop = min(first + size, n_slots)
        mine = np.flatnonzero(((primary >= first) & (primary < stop)) | ((extra >= first) & (extra < stop)))
        if mine.size:
            tasks.append(_SumTask(variable.name, first, stop, tuple(_read_blocks(variable, mine, bounds))))
    return tasks


def _chunk_bounds(variable: xr.DataArray) -> np.ndarray:
    """(chunks + 1,) the store positions where the chunks along time start, and the end."""
    if variable.chunks is not None:
        return np.cumsum((0, *variable.chunks[variable.get_axis_num("time")]))
    return np.arange(0, variable.sizes["time"] + 1)


def _read_blocks(
    variable: xr.DataArray, positions: np.ndarray, bounds: np.ndarray | None = None
) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges that hold the store ``positions`` (ascending), read at once: consecutive
    store chunks (dask chunks along time) holding a position, about ``READ_BLOCK_BYTES`` each, never
    splitting a chunk, from the first position to the last in them. ``bounds``: ``_chunk_bounds(variable)``
    for callers that ask many times (it costs O(record) each)."""
    per_time = variable.dtype.itemsize * int(np.prod([n for d, n in variable.sizes.items() if d != "time"]))
    bounds = _chunk_bounds(variable) if bounds is None else bounds
    chunk = np.searchsorted(bounds, positions, side="right") - 1  # the chunk of each position
    blocks, start = [], int(positions[0])
    for i in range(1, positions.size):  # a new block at a chunk without positions, or past the budget
        if chunk[i] != chunk[i - 1] and (
            chunk[i] > chunk[i - 1] + 1 or (bounds[chunk[i] + 1] - start) * per_time > READ_BLOCK_BYTES
        ):
            blocks.append((start, int(positions[i - 1]) + 1))
            start = int(positions[i])
    blocks.append((start, int(positions[-1]) + 1))
    return blocks


def _read_block(variable: xr.DataArray, start: int, stop: int, stored: "_Stored | None" = None) -> np.ndarray:
    """(stop - start, channel, points) values of the store's times ``start:stop``, dims ``(time,
    channel..., spatial...)`` of ``variable`` flattened: the one read of these chunks.

    ``stored``: the same variable as stored, without dask (``_Stored``): its block is read as stored and
    put into ``variable``'s layout in memory. A year of a 121x240 WeatherBench2 variable of 2 levels read
    in 4 MiB blocks took 0.64 s so, 2.0 s through the transposing dask graph of ``open_store``."""
    if stored is not None:
        values = stored.read(start, stop)
    else:
        channel, spatial = _order(variable)
        block = variable.isel(time=slice(start, stop))
        values = np.ascontiguousarray(block.transpose("time", *channel, *spatial).values)
    return values.reshape(stop - start, _channels(variable), -1)


@dataclass(frozen=True)
class _Stored:
    """A variable as stored, without dask, and how a block of it becomes ``(time, channel..., spatial...)``
    of the readers' layout in numpy: an axis permutation and an index per axis (a reversal, or an array
    where longitudes are permuted), found once by putting the store's coordinates through
    ``data.store.to_model_order``. Through xarray for every block, as before, that cost 6 ms a 0.25 deg
    field: more than reading it."""

    variable: xr.Variable
    axes: tuple[int, ...]
    index: tuple[slice | np.ndarray, ...]

    @classmethod
    def of(cls, stored: xr.DataArray, model: xr.DataArray) -> "_Stored | None":
        """The plan for ``stored``, a variable of ``open_as_stored``, whose readers' layout is ``model``'s;
        None when the readers' layout of ``stored`` has other dims or latitudes/longitudes than ``model``."""
        empty = stored.isel(time=slice(0, 0))
        coords = {d: empty[d].values for d in SPATIAL_DIMS if d in empty.coords}
        # each dim's positions, as a variable of its own: to_model_order reorders them as it does the block
        probes = {f"position_of_{d}": (d, np.arange(n)) for d, n in empty.sizes.items()}
        ordered = to_model_order(xr.Dataset({"block": (empty.dims, empty.values), **probes}, coords=coords))
        if ordered["block"].dims != model.dims or any(
            not np.array_equal(ordered[d].values, model[d].values) for d in SPATIAL_DIMS if d in model.coords
        ):
            return None
        channel, spatial = _order(model)
        dims = ("time", *channel, *spatial)
        index = tuple(_as_slice(ordered[f"position_of_{d}"].values) for d in dims)
        return cls(stored.variable, tuple(empty.dims.index(d) for d in dims), index)

    def read(self, start: int, stop: int) -> np.ndarray:
        """The times ``start:stop``, dims ``(time, channel..., spatial...)``, C-contiguous."""
        view = self.variable.isel(time=slice(start, stop)).values.transpose(self.axes)
        for axis, index in enumerate(self.index):
            if isinstance(index, slice):
                view = view[(slice(None),) * axis + (index,)]
            else:
                view = np.take(view, index, axis=axis)
        return _contiguous(view)


def _as_slice(positions: np.ndarray) -> slice | np.ndarray:
    """``positions`` as the slice it is (all, or all reversed: a view), else as they are."""
    n = positions.size
    if np.array_equal(positions, np.arange(n)):
        return slice(None)
    if np.array_equal(positions, np.arange(n)[::-1]):
        return slice(None, None, -1)
    return positions


def _contiguous(view: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``view`` (``view`` itself if it is one). A transposed view is copied in
    blocks of 64 of its last axis: what each block reads stays in the CPU's cache (a 0.25 deg field
    transposed and reversed took 3.3 ms at once, 1.8 ms so)."""
    if view.flags.c_contiguous:
        return view
    out = np.empty(view.shape, dtype=view.dtype)
    if view.ndim < 2 or view.strides[-1] == view.itemsize:
        np.copyto(out, view)
    else:
        for i in range(0, view.shape[-1], 64):
            out[..., i : i + 64] = view[..., i : i + 64]
    return out


def _stored_plans(stored: xr.Dataset, data: xr.Dataset) -> "dict[str, _Stored] | None":
    """Each variable of ``data`` as read from ``stored`` (``_Stored``), or None unless every one is in
    ``stored`` with the same time axis, and in ``data``'s dims and latitude/longitude once put in the
    readers' layout."""
    plans = {}
    for name, variable in data.data_vars.items():
        if name not in stored.data_vars or "time" not in stored[name].dims:
            return None
        if not np.array_equal(stored["time"].values, variable["time"].values):
            return None
        plans[name] = _Stored.of(stored[name], variable)
        if plans[name] is None:
            return None
    return plans


def _sum_slots(task: _SumTask, job: _Job) -> None:
    """Pass 1 (a task of ``Engine.map``): the means of the slots ``task.first:task.stop`` (``_slot_means``),
    written to the scratch.

    Raises:
        UserError: an infinite value, naming the variable and its time.
    """
    variable = job.data[task.name]
    stored = job.stored[task.name] if job.stored is not None else None
    with contextlib.closing(_read_ahead(variable, task.blocks, stored)) as blocks:
        means = _slot_means(job, task.name, range(task.first, task.stop), task.blocks, blocks)
    # the means, in float32 (the output's precision; pass 2 smooths them in float64): half the scratch of
    # float64 sums, which at 0.25 deg is 12 GB per channel, written and read back
    means.tofile(_scratch(job.out, task.name, task.first, "means"))  # (slot, channel, point)


def _read_ahead(variable: xr.DataArray, blocks, stored: _Stored | None):
    """Yield the values of each ``[start, stop)`` of ``blocks`` (``_read_block``), the next one read in a
    background thread while one is used."""
    blocks = list(blocks)
    if not blocks:
        return
    with background() as reader:
        pending = reader.submit(_read_block, variable, *blocks[0], stored)
        for i in range(len(blocks)):
            values = pending.result()
            if i + 1 < len(blocks):
                pending = reader.submit(_read_block, variable, *blocks[i + 1], stored)
            yield values


def _slot_means(job: _Job, name: str, slots, blocks, values) -> np.ndarray:
    """The means of ``slots`` over their times in the store positions ``blocks`` hold, summed in float64 in
    time order, NaN left out and counted per point.

    Args:
        slots: the slots (ascending); a time counts in each of its slots (``job.primary``, ``job.extra``)
            among them, other times in the blocks are skipped.
        blocks: ``[start, stop)`` store positions; ``values`` yields their ``_read_block`` values in order.

    Returns:
        (slot, channel, point) float32 means, NaN where a point has no finite value.

    Raises:
        UserError: an infinite value, naming the variable and its time.
    """
    variable = job.data[name]
    times = variable["time"].values
    slots = np.asarray(slots)
    row = {int(slot): i for i, slot in enumerate(slots)}
    means = np.empty((slots.size, _channels(variable), _points(variable)), dtype=np.float32)
    # a slot of one time (every slot of a one-year record) is that time's values: the float32 its float64
    # sum / 1 rounds to, bit for bit (a NaN the mean of no finite value), without the float64 sum
    single = job.counts[slots] == 1
    sums = np.empty(means.shape) if not single.all() else None
    started = np.zeros(slots.size, dtype=bool)  # a slot's first time is copied, not added to zeros
    nans = None
    for (start, stop), block in zip(blocks, values, strict=True):
        for offset, position in enumerate(range(start, stop)):
            rows = [row[s] for s in (int(job.primary[position]), int(job.extra[position])) if s in row]
            if not rows:
                continue
            values_now = block[offset]
            if not np.isfinite(values_now.sum(dtype=np.float64)):  # one pass; the masks only for NaN or inf
                if np.isinf(values_now).any():
                    raise _infinite_error(f"variable {name}" if name is not None else "the truth", times[position])
                if not all(single[r] for r in rows):
                    missing = np.isnan(values_now)
                    nans = np.zeros(means.shape, dtype=np.int32) if nans is None else nans
                    for r in rows:
                        nans[r] += missing
                    values_now = np.where(missing, 0.0, values_now)
            for r in rows:
                if single[r]:
                    means[r] = block[offset]
                elif started[r]:
                    sums[r] += values_now
                else:
                    sums[r] = values_now
                    started[r] = True
    with np.errstate(invalid="ignore", divide="ignore"):  # no finite value at a point: NaN
        for r in np.flatnonzero(~single):
            if not started[r]:
                sums[r] = 0.0
            count = job.counts[slots[r]]
            np.divide(sums[r], count if nans is None else count - nans[r], out=means[r])  # in float64, rounded once
    return means


def _reads_store_itself(variable: xr.DataArray, method: str) -> bool:
    """Whether pass 2 reads this variable's slots from the store itself (``_StoreSlotMeans``), with no pass 1
    and no scratch: one channel, and one time per store chunk (as WeatherBench2's and s2forecast's stores), so
    that the task of each hour reads chunks no other task reads. Not for ``mean``, whose one slot every
    hour's task would read."""
    if method == "mean" or _channels(variable) != 1:
        return False
    return variable.chunks is None or all(size == 1 for size in variable.chunks[variable.get_axis_num("time")])


class _StoreSlotMeans:
    """Means per slot of a one-channel variable, read from the store by its task of pass 2 (see
    ``_reads_store_itself``): the same float32 means as pass 1 writes (``_slot_means``), so the same
    climatology, but without writing and reading back a scratch as large as the output (at 0.25 deg 6 GB
    per channel, more than a year of input).

    ``plan``: the slots the task asks for, in order. Each store chunk is read once: the slots sharing a
    time (a non-leap Dec 31 counts in days 365 and 366) are summed together, and a mean asked for again
    (the smoothing wraps around the year: ``window_days - 2`` days are asked twice) is kept until then.
    The next chunk is read while a slot is summed.
    """

    def __init__(self, job: _Job, task: _MeanTask, plan: list[int]):
        self.job, self.task = job, task
        self.variable = job.data[task.name]
        self.stored = job.stored[task.name] if job.stored is not None else None
        n_times = job.primary.size
        both = np.concatenate([job.primary, job.extra])
        position = np.concatenate([np.arange(n_times), np.arange(n_times)])
        order = np.lexsort((position, both))
        self._slot_of, self._position = both[order], position[order]  # positions by slot, each ascending
        self.uses, self.kept = Counter(plan), {}
        self.groups = list(dict.fromkeys(self._group(slot) for slot in plan))
        bounds = _chunk_bounds(self.variable)
        self.blocks = {group: self._blocks(group, bounds) for group in self.groups}
        self._stream = _read_ahead(self.variable, [b for group in self.groups for b in self.blocks[group]], self.stored)
        self._next = 0

    def _positions(self, slot: int) -> np.ndarray:
        lo, hi = np.searchsorted(self._slot_of, [slot, slot + 1])
        return self._position[lo:hi]

    def _group(self, slot: int) -> tuple[int, ...]:
        """``slot`` and the slots sharing a time with it."""
        positions = self._positions(slot)
        shared = np.concatenate([self.job.primary[positions], self.job.extra[positions], [slot]])
        return tuple(int(s) for s in np.unique(shared[shared >= 0]))

    def _blocks(self, group: tuple[int, ...], bounds: np.ndarray) -> list[tuple[int, int]]:
        positions = np.unique(np.concatenate([self._positions(slot) for slot in group]))
        return _read_blocks(self.variable, positions, bounds) if positions.size else []

    def __call__(self, slot: int) -> np.ndarray:
        """(points,) float32 mean over the times in ``slot`` (NaN where none is finite)."""
        if slot not in self.kept:
            group = self._group(slot)
            if self._next < len(self.groups) and self.groups[self._next] == group:
                self._next += 1
                values = itertools.islice(self._stream, len(self.blocks[group]))
            else:  # not planned (only when asked out of plan): read now
                values = (_read_block(self.variable, *block, self.stored) for block in self.blocks[group])
            means = _slot_means(self.job, self.task.name, group, self.blocks[group], values)
            wanted = [(s, mean[0]) for s, mean in zip(group, means, strict=True) if self.uses[s] > 0 or s == slot]
            self.kept.update(wanted)
        self.uses[slot] -= 1
        return self.kept[slot] if self.uses[slot] > 0 else self.kept.pop(slot)

    def close(self) -> None:
        self._stream.close()


class _SlotMeans:
    """Means per slot of one channel of a variable, read from the scratch files of pass 1 (only the
    channel's values of the slot: one positioned read per file)."""

    def __init__(self, job: _Job, task: _MeanTask):
        variable = job.data[task.name]
        self.out, self.task = job.out, task
        self.channels, self.points = _channels(variable), _points(variable)

    def __call__(self, slot: int) -> np.ndarray:
        """(points,) float32 mean over the times in ``slot`` (NaN where none is finite), as pass 1 wrote it:
        the running sums of pass 2 are float64 and add it exactly (reading it as float64 cost 36 % more)."""
        first = slot - slot % self.task.slots_per_task
        offset = ((slot - first) * self.channels + self.task.channel) * self.points * 4
        path = _scratch(self.out, self.task.name, first, "means")
        return np.fromfile(path, dtype=np.float32, count=self.points, offset=offset)

    def close(self) -> None:
        pass


def _write_means(task: _MeanTask, job: _Job) -> None:
    """Pass 2 (a task of ``Engine.map``): means, gap filling and smoothing of one channel and hour of a
    variable, written to its zarr array (dims ``(dayofyear, hour, *variable dims but time)``) one output
    chunk of days at a time, each chunk compressed and written in a thread while the next is computed
    (at most two chunks in flight)."""
    import zarr

    array = zarr.open_group(job.out, mode="r+")[task.name]
    if hasattr(array, "with_config"):  # zarr >= 3.1.6: each chunk written, not compared with the fill value first
        array = array.with_config({"write_empty_chunks": True})  # (half the CPU time of a whole chunk's write)
    with background() as pool, contextlib.closing(_output_chunks(array, job, task)) as chunks:
        pending = []
        for index, block in chunks:
            pending.append(pool.submit(array.__setitem__, index, block))
            if len(pending) > 1:
                pending.pop(0).result()  # raises a failed write (e.g. a full disk) here
        for write in pending:
            write.result()


def _output_chunks(array, job: _Job, task: _MeanTask):
    """Yield (zarr index, values) of each output chunk of :func:`_write_means`, in order."""
    variable = job.data[task.name]
    channel_dims = _order(variable)[0]
    dims = ["dayofyear", "hour", *[d for d in variable.dims if d != "time"]]
    sizes = variable.sizes
    at = dict(zip(channel_dims, np.unravel_index(task.channel, [variable.sizes[d] for d in channel_dims]), strict=True))
    h, n_hours = task.hour, job.hours.size
    means = _StoreSlotMeans(job, task, _planned_slots(job, task)) if task.reads_store else _SlotMeans(job, task)
    with contextlib.closing(means):
        if job.method == "dayofyear_hour":
            days = _smoothed_days(
                lambda d: _filled_mean(means, job.counts, d, h, n_hours), job.window_days, array.dtype
            )
        else:
            mean = means(h if job.method == "hour" else 0)
            days = (mean for _ in DAYS_OF_YEAR)
        days_per_chunk = array.chunks[0]
        for day, field in enumerate(days):
            if day % days_per_chunk == 0:  # a new buffer per chunk: the last one may still be being written
                buffer = np.empty((min(days_per_chunk, DAYS_OF_YEAR.size - day), field.size), dtype=array.dtype)
            buffer[day % days_per_chunk] = field
            if day % days_per_chunk == buffer.shape[0] - 1:
                region = {"dayofyear": slice(day + 1 - buffer.shape[0], day + 1), "hour": slice(h, h + 1)}
                region.update({d: slice(i, i + 1) for d, i in at.items()})
                chunk_shape = [buffer.shape[0] if d == "dayofyear" else 1 if d in region else sizes[d] for d in dims]
                yield tuple(region.get(d, slice(None)) for d in dims), buffer.reshape(chunk_shape)


def _planned_slots(job: _Job, task: _MeanTask) -> list[int]:
    """The slots :func:`_output_chunks` asks its means for, in order (``_StoreSlotMeans``' plan)."""
    h, n_hours = task.hour, job.hours.size
    if job.method != "dayofyear_hour":
        return [h if job.method == "hour" else 0]
    half, n = job.window_days // 2, DAYS_OF_YEAR.size
    days = range(n) if half <= 1 else range(1 - half, n + half - 1)  # as _smoothed_days asks for them
    present = _present(job.counts, h, n_hours)
    slots = []
    for day in days:
        day %= n
        neighbours = (day,) if present[day] else _neighbours(present, day)[:2]
        slots.extend(int(d) * n_hours + h for d in neighbours)
    return slots


def _present(counts: np.ndarray, h: int, n_hours: int) -> np.ndarray:
    """(366,) whether each day of year has a time at hour index ``h``."""
    return counts.reshape(DAYS_OF_YEAR.size, n_hours)[:, h] > 0


def _filled_mean(means, counts: np.ndarray, day: int, h: int, n_hours: int) -> np.ndarray:
    """Mean of slot (day 0..365, hour index h) from ``means`` (``_SlotMeans`` or ``_StoreSlotMeans``); an
    empty slot from its nearest filled neighbours (periodic), as :func:`_fill_gaps_periodic`."""
    present = _present(counts, h, n_hours)
    if present[day]:
        return means(day * n_hours + h)
    before, after, w_before = _neighbours(present, day)
    lower, upper = (means(int(slot) * n_hours + h).astype(np.float64) for slot in (before, after))
    return lower * w_before + upper * (1.0 - w_before)


def _smoothed_days(field, window_days: int, dtype=np.float64):
    """Yield the 366 smoothed days ``0..365`` of ``field(day)`` ((points,) float32 or float64, day taken
    mod 366), each a ``dtype`` array valid until the next is asked for (it is reused; rounded from the
    float64 sums).

    ``field`` is called for the consecutive days ``-half + 1 .. 365 + half - 1`` (mod 366), in this
    order, each once.

    The WB2 triangle with ``half = window_days // 2`` has nonzero weights ``(half - |j|) / half**2``
    (normalized) at offsets ``|j| < half``: two boxes of ``half`` days convolved, so
    ``S(d) = sum_{b<half} B(d - b) / half**2`` with ``B(e) = sum_{a<half} x(e + a)``, both kept as
    running sums (float64), updated in place: ``half`` boxes and ``half`` fields in memory. From the
    first field with a NaN on, NaN are carried as counts in a second row the same way (zero before it):
    their weighted sum (whole numbers, exact in float64) is the weight the window lacks, so a day is the
    mean over its window's finite fields, renormalized (as :func:`smooth_dayofyear`), NaN where none is.
    """
    half, n = window_days // 2, DAYS_OF_YEAR.size
    if half <= 1:  # window 1 or 3: only the centre tap is nonzero
        for day in range(n):
            yield field(day)
        return
    cache: dict[int, np.ndarray] = {}  # x(e) by unreduced e: read once, dropped once behind
    sums: dict[str, np.ndarray] = {}  # "box" B, "boxes" the last half B (B(e) at (e - first) % half), "total" S

    with_counts = False  # a second row of NaN counts, from the first field with a NaN on

    def x(e: int) -> np.ndarray:
        nonlocal with_counts
        if e not in cache:
            values = field(e % n)
            if not with_counts and np.isnan(values).any():  # zero counts for what came before
                with_counts = True
                for key, array in cache.items():
                    cache[key] = np.concatenate([array, np.zeros_like(array)])
                for key, array in sums.items():
                    sums[key] = np.concatenate([array, np.zeros_like(array)], axis=-2)
            cache[e] = np.stack([np.nan_to_num(values, nan=0.0), np.isnan(values)]) if with_counts else values[None]
        return cache[e]

    first = 1 - half  # B(first..0) make S(0)
    sums["box"] = np.zeros(x(first).shape)  # float64 whatever field's dtype: the sums never round to float32
    for a in range(half):
        added = x(first + a)
        sums["box"] += added
    sums["boxes"] = np.empty((half, *sums["box"].shape))
    sums["boxes"][0] = sums["box"]
    for e in range(first + 1, 1):
        entering, leaving = x(e + half - 1), x(e - 1)
        sums["box"] += entering
        sums["box"] -= leaving
        sums["boxes"][e - first] = sums["box"]
    sums["total"] = sums["boxes"][0].copy()
    for b in range(1, half):
        sums["total"] += sums["boxes"][b]
    smoothed = np.empty(sums["box"].shape[1:], dtype=dtype)
    tiles = [slice(a, a + SMOOTHING_TILE) for a in range(0, smoothed.size, SMOOTHING_TILE)]
    for day in range(n):
        entering, leaving = (x(day + half - 1), x(day - 1)) if day > 0 else (None, None)
        box, total = sums["box"], sums["total"]
        oldest = sums["boxes"][(day - first) % half]  # B(day - half), leaving the window
        for tile in tiles:  # one tile through every step: its running sums stay in the CPU's cache
            if day > 0:
                tile_box, tile_total = box[:, tile], total[:, tile]
                tile_box += entering[:, tile]
                tile_box -= leaving[:, tile]
                tile_total += tile_box
                tile_total -= oldest[:, tile]
                oldest[:, tile] = tile_box
            if total.shape[0] == 2:  # renormalized over the finite fields' weights; none (half**2 missing): NaN
                finite_weight = half**2 - total[1, tile]
                with np.errstate(invalid="ignore", divide="ignore"):
                    np.divide(total[0, tile], np.where(finite_weight > 0.5, finite_weight, np.nan), out=smoothed[tile])
            else:
                np.divide(total[0, tile], half**2, out=smoothed[tile])
        for stale in [e for e in cache if e < day]:
            del cache[stale]
        yield smoothed


def validate_climatology(climatology: Data) -> Data:
    """Check the WB2 layout and return ``climatology`` unchanged.

    Raises:
        ValueError: naming the missing dims or day-of-year/hour values and how to fix them.
    """
    missing = [dim for dim in REQUIRED_DIMS if dim not in climatology.dims]
    if missing:
        hints = {"lat": "latitude", "lon": "longitude", "doy": "dayofyear", "day_of_year": "dayofyear"}
        renames = {k: v for k, v in hints.items() if k in climatology.dims and v in missing}
        hint = f"; rename with .rename({renames})" if renames else ""
        if missing == ["hour"]:  # WB2's ACC takes a daily climatology; a single hour is used at every hour here
            hint += "; a daily climatology (one field per day of year): clim.expand_dims(hour=[0]), used at every hour"
        raise UserError(
            f"the climatology lacks dim(s) {missing} (it has {tuple(climatology.dims)}); expected WB2 layout "
            f"(dayofyear 1..366, hour, [level], latitude, longitude){hint}"
        )
    if isinstance(climatology, xr.Dataset):
        partial = {
            name: [d for d in ("dayofyear", "hour") if d not in var.dims]
            for name, var in climatology.data_vars.items()
            if not {"dayofyear", "hour"} <= set(var.dims)
        }
        if partial:
            raise UserError(f"climatology variables lack dims: {partial}; every variable needs dayofyear and hour")
        if not climatology.data_vars:
            raise UserError("the climatology has no data variables")
    doy = np.asarray(climatology["dayofyear"].values)
    absent = sorted(set(DAYS_OF_YEAR.tolist()) - set(doy.tolist()))
    if absent:
        raise UserError(
            f"the climatology lacks dayofyear value(s) {absent[:10]}{' ...' if len(absent) > 10 else ''}; "
            "it must hold every day of year 1..366"
        )
    hours = np.asarray(climatology["hour"].values)
    if hours.size == 0 or np.any((hours < 0) | (hours > 23)) or np.any(hours != np.round(hours)):
        raise UserError(f"climatology hours must be integers in 0..23, got {hours.tolist()}")
    if np.unique(hours).size != hours.size:
        raise UserError(f"climatology hours contain duplicates: {hours.tolist()}")
    return climatology


def open_climatology(path, **open_kwargs) -> xr.Dataset:
    """Open a WB2-layout climatology (ours or a WeatherBench2 climatology zarr) and validate it.

    Args:
        path: a zarr store (directory or URL); a ``.nc`` path is opened as netCDF.
        open_kwargs: passed to ``xarray.open_zarr`` (or ``open_dataset``), e.g. ``chunks``.

    Returns:
        Lazily opened Dataset with dims ``(dayofyear, hour, [level], latitude, longitude)``.
    """
    path_str = str(path)
    if path_str.endswith(".nc"):
        dataset = xr.open_dataset(path, **open_kwargs)
    else:
        if Path(path_str).exists() and zarr_attributes(path_str) is None:
            raise UserError(
                f"climatology {path_str} is not a zarr store (no zarr.json or .zgroup metadata); pass the store "
                "written by s2forecast climatology or a WeatherBench2 climatology"
            )
        try:  # consolidated metadata or none, without xarray's warning
            dataset = open_zarr(path, **open_kwargs)
        except FileNotFoundError as error:
            raise FileNotFoundError(f"no climatology zarr store at {path_str!r}") from error
    try:
        return validate_climatology(dataset)
    except ValueError as error:
        raise UserError(f"{path_str}: {error}") from None


def write_climatology(
    store,
    out,
    start=None,
    end=None,
    window_days: int = 61,
    overwrite: bool = False,
    progress: bool = False,
    storage_options: dict | None = None,
    engine: Engine | None = None,
):
    """``s2forecast climatology``: the climatology of a store, streamed over the store once with
    bounded memory (see :func:`compute_climatology` with ``out``), written to the zarr ``out``
    following ``s2forecast.output`` (never over the store, only over a climatology s2forecast
    wrote and only with ``overwrite``; under a temporary name, renamed when complete and only if
    the store was not rewritten meanwhile). ``storage_options``: fsspec options when ``store``
    is a URL. ``engine``: where the work runs (``s2forecast.data.engine``; dask.distributed workers
    write into the temporary output, which this process renames into place when complete).

    Raises:
        FileNotFoundError, ValueError: no store, not a store, an incomplete store, or an
            ``out`` the output policy refuses.
        FileExistsError: ``out`` exists and ``overwrite`` is not set.

    Returns:
        The path of the written climatology.
    """
    from s2forecast.data.plausibility import check_store_plausible
    from s2forecast.data.store import check_store_unchanged, grid_of, open_as_stored, open_store
    from s2forecast.output import Output
    from s2forecast.provenance import describe_input, history, python_call

    output = Output(out, "climatology", directory=True, inputs=(store,), overwrite=overwrite)
    with output:
        truth = open_store(store, chunks={}, storage_options=storage_options)  # complete stores only; dask: streamed
        require_time_dim(truth, f"store {store}")
        grid_of(truth)  # before the reading: a grid no other command takes makes a climatology nothing can use
        stored = open_as_stored(store, storage_options)
        source = truth.drop_vars([n for n in ("written", "trajectory") if n in truth.variables])
        check_store_plausible(source, store, list(source.data_vars))  # °C labelled K would make a "K" climatology
        # keep what describes the climatology, not the store's writer flags, marker and generation; the
        # source store's encodings (e.g. a zarr v2 store's Blosc compressor) do not apply to the zarr v3 written here
        attrs = {k: v for k, v in source.attrs.items() if not k.startswith("s2forecast_")}
        source = source.drop_encoding()
        source.attrs = {
            **attrs,
            "climatology_truth": describe_input(store),
            "history": history(python_call("write_climatology", store), attrs.get("history")),
            **output.attrs,
        }
        compute_climatology(source, start=start, end=end, window_days=window_days, out=output.tmp, progress=progress,
                            engine=engine, read_from=stored)  # fmt: skip
        check_store_unchanged(store, truth)
        return output.commit()
