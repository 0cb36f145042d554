"""Inputs of ``s2forecast evaluate``: open the forecast, the truth and the climatology, check them against each other.

:meth:`EvaluationInputs.open` opens and checks them all (each input opened by one function,
:func:`open_forecast`, :func:`open_truth`, then the climatology); the checks name the bad value
and the fix. Layouts: see :mod:`s2forecast.evaluation.evaluate`.
"""

import datetime
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.data.coordinates import coordinate_tolerance
from s2forecast.data.plausibility import check_plausible, has_canonical_units
from s2forecast.data.store import (
    COMPLETE_ATTR,
    is_url,
    naive_utc_times,
    normalize_units,
    open_store,
    open_url,
    open_zarr,
    rename_hint,
    require_time_dim,
    to_model_order,
)
from s2forecast.evaluation.climatology import compute_climatology, open_climatology
from s2forecast.evaluation.config import EvaluationConfig
from s2forecast.evaluation.metrics import (
    INIT_DIM,
    LEAD_DIM,
    MEMBER_DIMS,
    SPATIAL_DIMS,
    MissingTruthWarning,
    check_forecast_layout,
    check_members,
    check_truth_times,
    member_dim,
    truth_available,
)
from s2forecast.evaluation.regions import (
    LAND_REGIONS,
    LAND_SEA_MASK_NAMES,
    STANDARD_REGIONS,
    region_label,
    region_weights,
)
from s2forecast.evaluation.scoring import BLOCK_BYTES, empty_field_message
from s2forecast.output import GENERATION_ATTR, byte_size
from s2forecast.provenance import describe_input
from s2forecast.times import format_times
from s2forecast.user_errors import UserError, one_line

# --- opening and checking inputs ---------------------------------------------------------

LEAD_ALIAS = "lead_time"  # WeatherBench2's other name of the lead dim (its results files use it)


def _describe_source(source) -> str:
    return describe_input(source) if isinstance(source, str | os.PathLike) else "<in-memory Dataset>"


def _require_path(path, what: str) -> Path:
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path} does not exist")
    return path


NETCDF_SIGNATURES = (b"\x89HDF\r\n\x1a\n", b"CDF\x01", b"CDF\x02", b"CDF\x05")  # NetCDF4 (HDF5), NetCDF3
ZARR_METADATA = ("zarr.json", ".zgroup", ".zmetadata")  # zarr 3, zarr 2


def _check_readable(path: Path, what: str) -> None:
    """ValueError naming ``path`` unless it looks like a NetCDF file or a zarr store (a directory).

    Catches empty, text and other files, and directories that are not stores, before xarray
    fails on them with messages that do not name the file.
    """
    if path.is_dir():
        if not any((path / name).exists() for name in ZARR_METADATA):
            raise UserError(f"the {what} {path} is a directory but not a zarr store (no zarr.json or .zgroup in it)")
        return
    with open(path, "rb") as file:
        head = file.read(8)
    if not head:
        raise UserError(f"the {what} {path} is an empty file; write it again")
    if path.suffix != ".zarr" and not head.startswith(NETCDF_SIGNATURES):
        raise UserError(f"the {what} {path} is not a NetCDF file (it starts with {head[:4]!r}); check the path")


def _opened(open_fn, path: Path, what: str) -> xr.Dataset:
    """``open_fn(path)``; a file that starts right but cannot be read (truncated, damaged) is a
    ValueError naming it."""
    try:
        return open_fn(path)
    except OSError as error:
        if isinstance(error, FileNotFoundError | PermissionError | IsADirectoryError):
            raise
        reason = error.strerror or one_line(str(error))  # netCDF4: "NetCDF: HDF error"
        raise UserError(f"cannot read the {what} {path} ({reason}): is it truncated or damaged?") from error


def open_forecast(source: str | os.PathLike | xr.Dataset, storage_options: dict | None = None) -> xr.Dataset:
    """Open a forecast lazily (NetCDF: dask chunks of one init time; zarr: its own chunks).

    Args:
        source: path of a ``.nc`` file or a zarr store, the URL of a zarr store (``storage_options``:
            its fsspec options), or an opened Dataset.

    Returns:
        Dataset with dims ``(time, prediction_timedelta, [member], [level], latitude, longitude)``
        in this order whatever the file's (``store.to_model_order``), latitude north -> south,
        ``prediction_timedelta`` as timedelta64 (a ``lead_time`` dim, WB2's other name of it,
        is renamed), without a ``valid_time`` variable.

    Raises:
        FileNotFoundError: ``source`` does not exist.
        ValueError: the layout is not WB2's (names the missing dim and how to rename it).
    """
    if isinstance(source, xr.Dataset):
        forecast = naive_utc_times(source)  # tz-aware init times (from pandas) as UTC, as files hold them
    elif is_url(source):
        forecast = open_url(source, "forecast", storage_options, chunks={})
    else:
        path = _require_path(source, "forecast")
        _check_readable(path, "forecast")
        forecast = _opened(_open_forecast_file, path, "forecast")
    if forecast.attrs.get(COMPLETE_ATTR, "true") != "true":  # absent: another tool's file, taken as it is
        where = "" if isinstance(source, xr.Dataset) else f" {source}"
        raise UserError(
            f"the forecast{where} is incomplete ({COMPLETE_ATTR}={forecast.attrs[COMPLETE_ATTR]!r}): the rollout that "
            "wrote it did not finish (its final file is written at --out only when every process has); rerun it"
        )
    forecast = forecast.drop_vars("valid_time", errors="ignore")
    if LEAD_ALIAS in forecast.dims and LEAD_DIM not in forecast.dims:
        forecast = forecast.rename({LEAD_ALIAS: LEAD_DIM})
    check_forecast_layout(forecast)
    sizes = ((INIT_DIM, "init times"), (LEAD_DIM, "leads"))
    empty = [f"{dim!r} ({what})" for dim, what in sizes if not forecast.sizes[dim]]
    if empty:  # scored nothing, then failed in the table (a traceback)
        raise UserError(f"the forecast has no {' and no '.join(empty)}: there is nothing to score")
    if not forecast.indexes[INIT_DIM].is_unique:
        raise UserError("forecast 'time' (init time) has duplicate values; drop them")
    lead = forecast[LEAD_DIM]
    if not np.issubdtype(lead.dtype, np.timedelta64):
        units = lead.attrs.get("units")
        try:
            if not isinstance(units, str):
                raise UserError("no units")
            values = pd.to_timedelta(np.asarray(lead.values), unit=units).values
        except (ValueError, TypeError):
            raise UserError(
                f"forecast 'prediction_timedelta' must be timedelta64 or numbers with a time 'units' attribute "
                f"(e.g. 'hours'); got dtype {lead.dtype} with units {units!r}"
            ) from None
        forecast = forecast.assign_coords({LEAD_DIM: values})
    if not forecast.indexes[LEAD_DIM].is_unique:
        raise UserError("forecast 'prediction_timedelta' has duplicate values; drop them")
    if "level" in forecast.indexes and not forecast.indexes["level"].is_unique:  # (a traceback mid-scoring)
        levels = forecast.indexes["level"]
        raise UserError(f"forecast 'level' has duplicate values {sorted(set(levels[levels.duplicated()]))}; drop them")
    if not forecast.indexes[LEAD_DIM].is_monotonic_increasing:  # plots draw skill along the leads, in order
        forecast = forecast.sortby(LEAD_DIM)
    member = member_dim(forecast.dims)  # realization (WB2), number (ECMWF/cfgrib) or member
    if member is not None:
        check_members(forecast.sizes[member], member)
    return to_model_order(forecast, leading=(INIT_DIM, LEAD_DIM))


def _open_forecast_file(path: Path) -> xr.Dataset:
    if path.is_dir() or path.suffix == ".zarr":
        return open_zarr(path, chunks={})  # dask in the store's own chunks
    with warnings.catch_warnings():  # one init per dask chunk on purpose (streamed blocks); any file layout is fine
        warnings.filterwarnings("ignore", message="The specified chunks separate the stored chunks")
        return xr.open_dataset(path, chunks={INIT_DIM: 1})


def open_truth(source: str | os.PathLike | xr.Dataset, storage_options: dict | None = None) -> xr.Dataset:
    """Open a truth store lazily, without its ``written`` variable and other coordinates along time.
    ``storage_options``: fsspec options when ``source`` is a URL.

    Returns:
        Dataset with dims ``(time, [level], latitude, longitude)`` in this order whatever the
        store's, latitude north -> south (``store.to_model_order``).
    """
    if isinstance(source, xr.Dataset):
        truth = naive_utc_times(source)
    else:
        if is_url(source):
            truth = open_store(source, storage_options=storage_options)
        else:
            truth = open_store(_require_path(source, "truth store"))
    require_time_dim(truth, "the truth" if isinstance(source, xr.Dataset) else f"the truth store {source}")
    check_truth_times(truth)
    truth = truth.drop_vars("written", errors="ignore")
    if all(dim in truth.coords for dim in SPATIAL_DIMS):  # else _check_grid names the missing one
        truth = to_model_order(truth)
    # a store of trajectories keeps its ``trajectory``: a valid time of another one is no truth (``truth_available``)
    kept = (INIT_DIM, "trajectory")
    along_time = [name for name, c in truth.coords.items() if INIT_DIM in c.dims and name not in kept]
    return truth.drop_vars(along_time)


def check_name_bytes(forecast: xr.Dataset, variables: Sequence[str], what: str, most: int, suffix: str,
                     with_level: bool) -> None:  # fmt: skip
    """Refuse a variable whose ``what``, ``<name>[_<largest level>hPa]<suffix>`` (``with_level``), has
    more than ``most`` bytes: writing it would fail after the scoring, all its work lost."""
    for name in variables:
        levels = forecast["level"].values if with_level and "level" in forecast[name].dims else []
        stem = f"{name}_{int(max(levels))}hPa" if len(levels) else name  # report._file_stem's longest
        size = len(f"{stem}{suffix}".encode())
        if size > most:
            raise UserError(
                f"forecast variable {name[:40]}... is too long a name: its {what} ...{suffix} has {size} bytes, "
                f"more than {most}; leave it out (--variables) or rename it in the forecast"
            )


def _forecast_variables(forecast: xr.Dataset, variables: Sequence[str] | None) -> list[str]:
    scored = _scorable_variables(forecast, variables)
    # a NetCDF name has at most 256 bytes: the longest made of a field's in the results is this one
    check_name_bytes(forecast, scored, "name in the results", 256, "_nonfinite_forecast", with_level=False)
    return scored


def _scorable_variables(forecast: xr.Dataset, variables: Sequence[str] | None) -> list[str]:
    needed = {INIT_DIM, LEAD_DIM, *SPATIAL_DIMS}
    # by name: a NetCDF file lists its variables in the order they were written, zarr by name, and the
    # results, table and plots of one forecast came out in another order in each format
    scorable = sorted(name for name, var in forecast.data_vars.items() if needed <= set(var.dims))
    if variables is None:
        if not scorable:
            raise UserError(
                "the forecast has no variable with dims (time, prediction_timedelta, ..., latitude, longitude); it has "
                f"{ {name: var.dims for name, var in forecast.data_vars.items()} }"
            )
        return scorable
    variables = list(variables)
    absent = [name for name in variables if name not in scorable]
    if absent:
        raise UserError(f"variable(s) {absent} are not forecast variables of the forecast file; it has {scorable}")
    return variables


def _check_variables(forecast: xr.Dataset, truth: xr.Dataset, variables: list[str], name: str, where: str) -> None:
    """The truth (or climatology) holds every variable with the same non-time dims and every level."""
    member = member_dim(forecast.dims)
    lacking = [v for v in variables if member not in forecast[v].dims] if member else []
    if lacking:  # scored as members, their latitude axis was taken for the members' (a traceback)
        raise UserError(
            f"forecast variable(s) {lacking} have no {member!r} dim but the others do: an ensemble's fields all have "
            f"members; score them apart (--variables without them, or forecast[{lacking}] as a deterministic forecast)"
        )
    absent = [v for v in variables if v not in truth.data_vars]
    if absent:
        raise UserError(
            f"forecast variable(s) {absent} are not in the {name} {where} (it has {sorted(truth.data_vars)}); "
            "score a subset with --variables, or use a store that holds them"
        )
    for v in variables:
        expected = {d for d in forecast[v].dims if d not in (INIT_DIM, LEAD_DIM, *MEMBER_DIMS)}
        other = sorted(expected - {"level", *SPATIAL_DIMS})
        if other:  # scored fields are (time, lead, [member], [level], lat, lon): another dim failed mid-scoring
            raise UserError(
                f"variable {v!r} has dim(s) {other} besides time, prediction_timedelta, a member dim, level, latitude "
                f"and longitude; select one value (forecast.sel({other[0]}=...)), or rename it: 'level' for a "
                f"vertical one, one of {', '.join(MEMBER_DIMS)} if it indexes ensemble members"
            )
        have = {d for d in truth[v].dims if d not in (INIT_DIM, "dayofyear", "hour")}
        if expected != have:
            raise UserError(
                f"variable {v!r} has dims {forecast[v].dims} in the forecast but {truth[v].dims} in the {name} "
                f"{where}; they must agree apart from time (and prediction_timedelta){rename_hint(truth[v])}"
            )
        if "level" in expected:
            levels = forecast[v]["level"].values.tolist()
            missing = sorted(set(levels) - set(truth[v]["level"].values.tolist()))
            if missing:
                raise UserError(
                    f"the {name} {where} lacks level(s) {missing} of forecast variable {v!r}; it has "
                    f"{truth[v]['level'].values.tolist()}"
                )


def _check_units(forecast: xr.Dataset, other: xr.Dataset, variables: list[str], name: str, where: str) -> None:
    """Every variable in the same units in the forecast and the truth (or climatology), where both say."""
    for v in variables:
        mine, theirs = forecast[v].attrs.get("units"), other[v].attrs.get("units")
        if mine is None or theirs is None or normalize_units(str(mine)) == normalize_units(str(theirs)):
            continue
        raise UserError(
            f"forecast variable {v} has units {mine!r} but the {name} {where} has {theirs!r}; convert the forecast "
            f"to {theirs} before scoring"
        )


def _check_values(forecast: xr.Dataset, truth: xr.Dataset, variables: list[str], truth_name: str) -> None:
    """Forecast and truth values plausible in their units (``s2forecast.data.plausibility``),
    judged on the first, middle and last init time (first, middle, last lead) and truth time.
    Values in other than the canonical units of ``store.VARIABLES`` are not judged."""
    for v in variables:
        _check_not_all_nan(forecast[v], v)
        truth_units = truth[v].attrs.get("units")
        if has_canonical_units(v, forecast[v].attrs.get("units", truth_units)):
            labels = {INIT_DIM: "init time", LEAD_DIM: "lead"}
            member = member_dim(forecast[v].dims)
            judged = forecast[v] if member is None else forecast[v].isel({member: 0}, drop=True)  # the first member
            # units are judged at the first lead after 0 h (a 0 h lead is the analysis, WB2's forecasts hold one);
            # implausible later, and like no mislabeled unit, is a model that diverged: scored as it is
            leads = judged[LEAD_DIM].values
            first = int(np.argmax(leads > np.timedelta64(0))) if (leads > np.timedelta64(0)).any() else 0
            check_plausible(judged.isel({LEAD_DIM: [first]}), v, f"forecast variable {v}", (INIT_DIM, LEAD_DIM), labels)
            try:
                check_plausible(judged, v, f"forecast variable {v}", (INIT_DIM, LEAD_DIM), labels)
            except UserError as error:
                if "; the values look like" in str(error):  # degC labelled K at later leads: refused as ever
                    raise
                problem = str(error).split("; check the units")[0]
                warnings.warn(
                    f"{problem}, though plausible at the first lead: the forecast diverged, it seems (the values look "
                    "like no mislabeled unit); it is scored as it is",
                    stacklevel=2,
                )
        if has_canonical_units(v, truth_units):
            observed = truth[v].sel(level=forecast[v]["level"].values) if "level" in forecast[v].dims else truth[v]
            check_plausible(observed, v, f"truth store {truth_name}: variable {v}")


def _check_some_valid_time_in_truth(forecast: xr.Dataset, truth: xr.Dataset, truth_name: str) -> None:
    """Refuse a forecast none of whose valid times is in the truth: every score would be NaN, at exit 0
    (some valid times missing is a warning: ``count_init_times_with_truth``)."""
    valid = forecast[INIT_DIM].values[:, None] + forecast[LEAD_DIM].values[None, :]
    times = truth[INIT_DIM].values
    if truth_available(truth, forecast[INIT_DIM].values, forecast[LEAD_DIM].values).any():
        return
    if np.isin(valid, times).any():  # a store of trajectories: there, but another run's
        raise UserError(
            f"the forecast's valid times ({format_times(valid.min())} .. {format_times(valid.max())}) that the truth "
            f"store {truth_name} holds are in another trajectory than their init time's (another run, not this "
            "forecast's future): every score would be NaN; forecast within the init times' trajectories"
        )
    held = f"{format_times(times.min())} .. {format_times(times.max())}" if times.size else "no time"
    raise UserError(
        f"none of the forecast's valid times ({format_times(valid.min())} .. {format_times(valid.max())}) is in the "
        f"truth store {truth_name} ({held}): every score would be NaN; evaluate against a truth that covers them"
    )


def _check_not_all_nan(data: xr.DataArray, name: str) -> None:
    """Refuse a forecast whose first, middle or last init time x lead is NaN everywhere: its
    scores would be NaN at exit 0 (a field NaN in part, e.g. over land, is scored as it is)."""
    picks = {dim: sorted({0, data.sizes[dim] // 2, data.sizes[dim] - 1}) for dim in (INIT_DIM, LEAD_DIM)}
    picked = data.isel(picks)
    empty = picked.isnull().all(dim=("latitude", "longitude")).load()  # (init, lead, [member], [level])
    if bool(empty.any()):  # named with its member and level, as scoring names one of the other init times
        first = dict(zip(empty.dims, np.argwhere(empty.values)[0], strict=True))
        init, lead = empty[INIT_DIM].values[first.pop(INIT_DIM)], empty[LEAD_DIM].values[first.pop(LEAD_DIM)]
        raise UserError(empty_field_message(name, format_times([init]), lead, picked, first))


def _grid_summary(data: xr.Dataset) -> str:
    lat, lon = data["latitude"].values, data["longitude"].values
    return (
        f"{lat.size} latitudes {lat.min():g}..{lat.max():g}, {lon.size} longitudes {lon.min():g}..{lon.max():g}"
        if lat.size and lon.size
        else f"{lat.size} latitudes, {lon.size} longitudes"
    )


def _check_grid(forecast: xr.Dataset, other: xr.Dataset, name: str, where: str) -> None:
    """The same latitudes and longitudes as sets (any order), else a ValueError naming both grids."""
    for dim in SPATIAL_DIMS:
        if dim not in other.dims:
            raise UserError(f"the {name} {where} has no {dim!r} dim (dims {dict(other.sizes)}); rename it")
        a = np.sort(np.asarray(forecast[dim].values, dtype=np.float64))
        b = np.sort(np.asarray(other[dim].values, dtype=np.float64))
        tolerance = coordinate_tolerance(a)
        if a.shape != b.shape or not np.allclose(a, b, rtol=0.0, atol=tolerance):
            hint = ""
            same_shape = a.shape == b.shape
            if dim == "longitude" and same_shape and np.allclose(np.sort(a % 360), np.sort(b % 360), atol=tolerance):
                hint = " (longitudes differ only in convention: convert the forecast's to [0, 360) with lon % 360)"
            raise UserError(
                f"the forecast and the {name} {where} are on different grids: forecast {_grid_summary(forecast)}, "
                f"{name} {_grid_summary(other)}{hint}; regrid the forecast onto the {name}'s grid first"
            )


def _parse_leads(leads, available: np.ndarray) -> np.ndarray:
    """Leads given as hours (numbers), strings ('24h', '5D') or timedeltas, checked against ``available``.

    Returns:
        The matching entries of ``available`` (its dtype), in the order given.
    """
    values = []
    for lead in leads:
        if isinstance(lead, np.timedelta64 | datetime.timedelta | str):
            values.append(pd.to_timedelta(lead))
        elif isinstance(lead, int | float | np.integer | np.floating) and not isinstance(lead, bool):
            values.append(pd.to_timedelta(float(lead), unit="h"))
        else:
            raise UserError(f"map lead {lead!r} is neither hours (a number), a string like '24h' nor a timedelta")
        if pd.isna(values[-1]):
            raise UserError(f"map lead {lead!r} is not a lead time; give hours such as 24")
    wanted = np.asarray(pd.TimedeltaIndex(values).values).astype("timedelta64[ns]").astype(np.int64)
    have = np.asarray(available).astype("timedelta64[ns]").astype(np.int64)
    absent = [w for w in wanted if w not in set(have.tolist())]
    if absent:
        raise UserError(
            f"map lead(s) {', '.join(f'{w / 3.6e12:g}' for w in absent)} h are not forecast leads; available: "
            f"{', '.join(str(lead_hours(v)) for v in available)} h"
        )
    return np.asarray([available[np.flatnonzero(have == w)[0]] for w in wanted])


def lead_hours(lead) -> int | float:
    """A lead (timedelta64) in hours, an int when whole, else to 4 decimals (10 min: 0.1667), for messages
    and labels (the results' ``lead_hours`` coordinate keeps every digit)."""
    hours = float(np.timedelta64(lead, "ns").astype(np.int64)) / 3.6e12
    return int(hours) if hours == int(hours) else round(hours, 4)


def _is_path(source) -> bool:
    """A local input (a URL is read-only to s2forecast: no output can collide with it, and it has
    no generation to check)."""
    return isinstance(source, str | os.PathLike) and not is_url(source)


# --- climatology ---------------------------------------------------------------------------
# the results' climatology_source when no --climatology is given (evaluate's ACC advice tells them apart)
COMPUTED_CLIMATOLOGY = "computed from the truth store (s2forecast.evaluation.compute_climatology)"
# a day-of-year climatology computed in memory above this size is said (a review measured a peak
# of 7x its size; at 0.25 deg it is 12 GB a channel with four hours a day)
COMPUTED_CLIMATOLOGY_WARN_BYTES = 1 << 30

CLIMATOLOGY_ATTRS = (
    "climatology_method",
    "climatology_method_reason",
    "climatology_window_days",
    "climatology_start",
    "climatology_end",
    "climatology_n_times",
    "dayofyear_convention",
    "climatology_truth",
)


def _climatology_attrs(attrs: dict) -> dict:
    return {key: attrs[key] for key in CLIMATOLOGY_ATTRS if key in attrs}


def _climatology_from_truth(truth: xr.Dataset, levels, variables: list[str], period) -> tuple[xr.Dataset, dict]:
    """Compute the climatology of the forecast's variables and levels from the truth, in memory.

    For the ``hour`` and ``mean`` methods (the same for every day of year) one day-of-year slot
    is computed and broadcast over the 366 slots without copying; ``dayofyear_hour`` is
    computed whole.
    """
    subset = truth[variables]
    if levels is not None and "level" in subset.dims:
        subset = subset.sel(level=levels)
    per_step = sum(subset[v].isel({INIT_DIM: 0}).nbytes for v in variables)
    subset = subset.chunk({INIT_DIM: max(1, int(BLOCK_BYTES // 2 // max(per_step, 1)))})
    start, end = period if period is not None else (None, None)
    clim = compute_climatology(subset, start=start, end=end)
    info = _climatology_attrs(clim.attrs)
    if info["climatology_method"] in ("hour", "mean"):
        one = clim.isel(dayofyear=[0]).compute()
        days = clim["dayofyear"].values
        data = {
            name: (var.dims, np.broadcast_to(var.values, (days.size, *var.shape[1:])))
            for name, var in one.data_vars.items()
        }
        coords = {name: coord for name, coord in one.coords.items() if name != "dayofyear"}
        clim = xr.Dataset(data, coords={**coords, "dayofyear": days})
    else:
        if clim.nbytes > COMPUTED_CLIMATOLOGY_WARN_BYTES:  # 12 GB a channel at 0.25 deg, hourly
            warnings.warn(
                f"the climatology computed from the truth takes {byte_size(clim.nbytes)} in memory, several "
                "times that at its peak: write it once with `s2forecast climatology TRUTH --out clim.zarr` "
                "(streamed) and pass --climatology clim.zarr",
                UserWarning,
                stacklevel=2,
            )
        clim = clim.compute()
    attrs = {"climatology_source": COMPUTED_CLIMATOLOGY, **info}
    return clim, attrs


def _open_climatology(
    source, forecast: xr.Dataset, variables: list[str], storage_options: dict | None = None
) -> tuple[xr.Dataset, dict]:
    """Open a WB2-layout climatology (path, zarr URL or Dataset) and check it against the forecast."""
    from s2forecast.evaluation.climatology import validate_climatology

    if isinstance(source, xr.Dataset):
        clim, where = validate_climatology(source), "<in-memory Dataset>"
    elif is_url(source):
        try:
            clim = validate_climatology(open_url(source, "climatology", storage_options, chunks={}))
        except UserError as error:
            raise UserError(f"{source}: {error}" if source not in str(error) else str(error)) from None
        where = describe_input(source)  # without a password (outputs get shared)
    else:
        path = _require_path(source, "climatology")
        _check_readable(path, "climatology")
        clim, where = _opened(open_climatology, path, "climatology"), str(path.resolve())
    if all(dim in clim.coords for dim in SPATIAL_DIMS):  # else _check_grid names the missing one
        clim = to_model_order(clim, leading=("dayofyear", "hour"))
    _check_variables(forecast, clim, variables, "climatology", where)
    _check_grid(forecast, clim, "climatology", where)
    _check_units(forecast, clim, variables, "climatology", where)
    attrs = {"climatology_source": where, **_climatology_attrs(clim.attrs)}
    attrs.setdefault("climatology_method", "not recorded in the climatology file")
    return clim[variables], attrs


# --- missing truth ---------------------------------------------------------------------------


def count_init_times_with_truth(
    init_times: np.ndarray, leads: np.ndarray, truth: xr.Dataset, truth_name: str
) -> np.ndarray:
    """(n_lead,) init times per lead whose valid time is in the truth (``truth_available``: in a store of
    trajectories, in the init time's); warns (:class:`MissingTruthWarning`) about the rest, and about
    init times without truth (persistence NaN)."""
    truth_times = truth[INIT_DIM].values
    available = truth_available(truth, init_times, leads)
    counts = available.sum(axis=0)
    if not available.all():
        empty = [lead_hours(lead) for lead, n in zip(leads, counts, strict=True) if n == 0]
        partial = [lead_hours(lead) for lead, n in zip(leads, counts, strict=True) if 0 < n < init_times.size]
        effects = []  # only the kinds that occur: never "lead(s) [] h"
        if empty:
            effects.append(f"lead(s) {_hours_list(empty)} h have no truth at all (metrics NaN, n_init_times 0)")
        if partial:
            effects.append(f"lead(s) {_hours_list(partial)} h average over fewer init times")
        other_run = int((np.isin(init_times[:, None] + leads[None, :], truth_times) & ~available).sum())
        elsewhere = f" ({other_run} of them in another trajectory than their init time's)" if other_run else ""
        warnings.warn(
            f"the truth {truth_name} has no data at {int((~available).sum())} of {available.size} (init time, lead) "
            f"valid times{elsewhere}: {'; '.join(effects)}; see 'n_init_times' in the metrics file",
            MissingTruthWarning,
            stacklevel=3,
        )
    absent_init = ~np.isin(init_times, truth_times)
    if absent_init.any():
        warnings.warn(
            f"{int(absent_init.sum())} init time(s) ({format_times(init_times[absent_init], limit=3)}) are not in the "
            f"truth {truth_name}: persistence, whose forecast is the truth at the init time, leaves them out (see "
            "'n_init_times_persistence' in the metrics file)",
            MissingTruthWarning,
            stacklevel=3,
        )
    return counts


def _hours_list(hours: list, limit: int = 8) -> str:
    shown = ", ".join(str(h) for h in hours[:limit])
    return shown if len(hours) <= limit else f"{shown} and {len(hours) - limit} more"


def land_sea_mask(truth: xr.Dataset) -> xr.DataArray | None:
    """The truth's land fraction (latitude, longitude) in [0, 1] (variable ``land_sea_mask`` or ``lsm``,
    its first time if it has one), or None."""
    for name in LAND_SEA_MASK_NAMES:
        if name in truth.data_vars:
            mask = truth[name]
            if INIT_DIM in mask.dims:
                mask = mask.isel({INIT_DIM: 0}, drop=True)
            extra = [d for d in mask.dims if d not in SPATIAL_DIMS]
            if extra:
                raise UserError(f"the truth's {name!r} has dims {mask.dims}; a land-sea mask is (latitude, longitude)")
            return mask.astype(np.float64).load().clip(0.0, 1.0)
    return None


# --- the inputs of an evaluation, checked together -------------------------------------------


def default_regions(truth: xr.Dataset) -> list[str]:
    """WB2's standard regions, plus its land regions when the truth has a land-sea mask."""
    names = list(STANDARD_REGIONS)
    return names + list(LAND_REGIONS) if land_sea_mask(truth) is not None else names


@dataclass(frozen=True)
class EvaluationInputs:
    """The forecast, truth and climatology of an evaluation, opened lazily and checked against each other.

    Made by :meth:`open`; the climatology is added by :meth:`with_climatology`, a step of its own so
    that ``evaluate`` claims its outputs (``s2forecast.output``) after the cheap checks and before
    computing a climatology from the truth.

    Attributes:
        forecast: Dataset ``(time, prediction_timedelta, [member], [level], latitude, longitude)``.
        truth: Dataset ``(time, [level], latitude, longitude)``, time = valid time.
        variables: the scored forecast variables, each in the truth with the same dims, levels and units.
        levels: (level,) the forecast's levels when a scored variable has levels, else None.
        regions: region names; ``region_weights`` (region, lat, lon) on the forecast's grid order,
            WB2 latitude weights times each region's mask, each summing to 1.
        map_leads: (n,) timedelta64 leads of the map panels and spectra, among the forecast's.
        forecast_name, truth_name: how results files name the inputs (absolute path, URL or
            ``<in-memory Dataset>``).
        local_paths: the inputs that are local paths (no output may be one of them).
        generations: local input path -> (what it is, its s2forecast generation when opened): checked
            before outputs are committed (``s2forecast.output.check_unchanged``).
        climatology_source, climatology_period: the ``climatology`` argument (path, Dataset or None:
            computed from the truth) and the truth period of a computed one.
        climatology: Dataset ``(dayofyear, hour, [level], latitude, longitude)`` of the variables,
            None before :meth:`with_climatology`; ``climatology_attrs`` its provenance
            (``climatology_source``, ``climatology_method``, ...).
    """

    forecast: xr.Dataset
    truth: xr.Dataset
    variables: list[str]
    levels: np.ndarray | None
    regions: list[str]
    region_weights: np.ndarray
    map_leads: np.ndarray
    forecast_name: str
    truth_name: str
    local_paths: list
    generations: dict
    climatology_source: str | os.PathLike | xr.Dataset | None = None
    climatology_period: tuple | None = None
    climatology: xr.Dataset | None = None
    climatology_attrs: dict = field(default_factory=dict)
    storage_options: dict | None = None

    @classmethod
    def open(
        cls,
        forecast: str | os.PathLike | xr.Dataset,
        truth: str | os.PathLike | xr.Dataset,
        climatology: str | os.PathLike | xr.Dataset | None = None,
        *,
        config: EvaluationConfig | None = None,
        map_leads: Iterable | str | None = None,
        climatology_period: tuple | None = None,
        storage_options: dict | None = None,
    ) -> "EvaluationInputs":
        """Open forecast and truth and check them against each other; resolve the config's variables,
        regions and metrics for this forecast, and the map leads.

        Args:
            forecast: forecast file (``.nc`` or zarr) or Dataset, WB2 layout (:func:`open_forecast`).
            truth: truth store path or URL, or Dataset (:func:`open_truth`).
            climatology: WB2-layout climatology path or Dataset, opened by :meth:`with_climatology`;
                None: computed from the truth there (over ``climatology_period``, inclusive).
            config: variables, metrics, baselines and regions (default :class:`EvaluationConfig`).
            map_leads: hours (numbers), strings like ``"24h"`` or timedeltas; default the first and last lead.
            storage_options: fsspec options of the inputs given as URLs (truth, forecast, climatology).

        Raises:
            FileNotFoundError: an input path does not exist.
            ValueError: a variable, level or grid that the truth lacks, different units, implausible
                values, a bad region or map lead, a metric this forecast cannot have (messages name the fix).
        """
        config = EvaluationConfig() if config is None else config
        forecast_ds = open_forecast(forecast, storage_options)
        truth_ds = open_truth(truth, storage_options)
        generations = {}  # input path -> (what, generation when opened)
        if _is_path(forecast):
            generations[forecast] = ("forecast", forecast_ds.attrs.get(GENERATION_ATTR))
        if _is_path(truth):
            generations[truth] = ("truth store", truth_ds.attrs.get(GENERATION_ATTR))
        truth_name = _describe_source(truth)
        variables = _forecast_variables(forecast_ds, config.variables)
        _check_variables(forecast_ds, truth_ds, variables, "truth store", truth_name)
        _check_grid(forecast_ds, truth_ds, "truth store", truth_name)
        _check_units(forecast_ds, truth_ds, variables, "truth store", truth_name)
        _check_values(forecast_ds, truth_ds, variables, truth_name)
        _check_some_valid_time_in_truth(forecast_ds, truth_ds, truth_name)
        regions = default_regions(truth_ds) if config.regions is None else list(config.regions)
        mask = land_sea_mask(truth_ds) if any(name in LAND_REGIONS for name in regions) else None
        weights = region_weights(regions, forecast_ds["latitude"].values, forecast_ds["longitude"].values, mask)
        levels = forecast_ds["level"].values if any("level" in forecast_ds[v].dims for v in variables) else None
        leads = forecast_ds[LEAD_DIM].values
        if map_leads is None:
            map_leads = np.unique(leads[[0, -1]])
        else:
            map_leads = _parse_leads([map_leads] if isinstance(map_leads, str) else list(map_leads), leads)
        config.metrics_for(member_dim(forecast_ds.dims) is not None)  # a metric this forecast cannot have
        return cls(
            forecast=forecast_ds,
            truth=truth_ds,
            variables=variables,
            levels=levels,
            regions=[region_label(name) for name in regions],
            region_weights=weights,
            map_leads=map_leads,
            forecast_name=_describe_source(forecast),
            truth_name=truth_name,
            local_paths=[source for source in (forecast, truth, climatology) if _is_path(source)],
            generations=generations,
            climatology_source=climatology,
            climatology_period=climatology_period,
            storage_options=storage_options,
        )

    @property
    def ensemble(self) -> bool:
        """The forecast has a member dim."""
        return member_dim(self.forecast.dims) is not None

    def with_climatology(self) -> "EvaluationInputs":
        """These inputs with the climatology: the given one opened and checked against the forecast
        (variables, levels, grid, units), or computed from the truth (``compute_climatology``).

        Raises:
            FileNotFoundError: the climatology path does not exist.
            ValueError: it is not a WB2-layout climatology of the forecast's variables, levels and grid.
        """
        generations = dict(self.generations)
        if self.climatology_source is None:
            clim, attrs = _climatology_from_truth(self.truth, self.levels, self.variables, self.climatology_period)
        else:
            clim, attrs = _open_climatology(self.climatology_source, self.forecast, self.variables,
                                            self.storage_options)  # fmt: skip
            if _is_path(self.climatology_source):
                generations[self.climatology_source] = ("climatology", clim.attrs.get(GENERATION_ATTR))
        return replace(self, climatology=clim, climatology_attrs=attrs, generations=generations)

    def init_times_with_truth(self) -> np.ndarray:
        """(lead,) init times whose valid time is in the truth; warns about the valid times it lacks
        (:func:`count_init_times_with_truth`)."""
        init_times, leads = self.forecast[INIT_DIM].values, self.forecast[LEAD_DIM].values
        return count_init_times_with_truth(init_times, leads, self.truth, self.truth_name)
