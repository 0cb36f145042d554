"""Score a forecast file against a truth store: ``s2forecast evaluate``.

Reads a forecast in WeatherBench2 (WB2) layout (what ``s2forecast rollout`` writes), a
truth store (``s2forecast.datamodules.store`` layout) and optionally a WB2-layout
climatology, and writes per variable, level and lead time the latitude-weighted RMSE,
ACC and bias (``docs/metrics.md``, computed with :mod:`s2forecast.evaluation.metrics`)
of three models:

    forecast      the forecast file;
    persistence   ``f_t(tau) = o_t``, the truth at the init time;
    climatology   ``f_t(tau) = c(t + tau)``.

Inputs:
    forecast: NetCDF (opened with dask chunks of one init time) or zarr; dims ``(time,
        prediction_timedelta, [level], latitude, longitude)``, ``time`` the init time
        (datetime64), ``prediction_timedelta`` the lead (timedelta64, or numbers with a
        ``units`` attribute such as ``hours``); latitude in either order; a ``valid_time``
        coordinate is ignored. Variable names and units as in the truth store: differing
        ``units`` attributes are refused, and values implausible in their units (Celsius
        labelled K, ...: :mod:`s2forecast.datamodules.plausibility`) in forecast or truth too.
    truth: a store opened with :func:`~s2forecast.datamodules.store.open_store` (its
        ``written`` variable and coordinates along ``time`` such as ``trajectory`` are
        ignored), dims ``(time, [level], latitude, longitude)``, ``time`` the valid time.
    climatology: WB2 layout ``(dayofyear, hour, [level], latitude, longitude)``; by default
        computed from the truth store with :func:`~s2forecast.evaluation.climatology.compute_climatology`
        (which falls back to per-hour or overall means for short records; the method is
        recorded in the output's attributes).

Outputs (``out`` = ``METRICS.nc``):
    METRICS.nc: one variable per forecast variable, dims ``(metric, model,
        prediction_timedelta, [level])`` with ``metric`` in (rmse, acc, bias) and ``model``
        in (forecast, persistence, climatology); ``n_init_times (prediction_timedelta)``:
        init times whose valid time is in the truth (0 for a lead with no truth, whose
        metrics are NaN); coordinate ``lead_hours``; provenance attributes. Written
        atomically (temporary file in the same directory, then ``os.replace``).
    METRICS.csv: long format, columns ``variable, level, lead_hours, model, metric, value``.
    METRICS_plots/: PNGs of RMSE and ACC versus lead time and forecast/truth/error maps
        (:mod:`s2forecast.evaluation.plots`).

Scoring streams: init times are read in blocks (about ``BLOCK_BYTES`` of forecast per
variable), every block is scored with the metrics module and the per-block means are
combined weighted by their number of init times, which is exactly the mean over all init
times (WB2: RMSE = sqrt of the MSE averaged over init times; ACC and bias averaged over
init times).
"""

import argparse
import contextlib
import datetime
import os
import sys
import warnings
from collections.abc import Hashable, Iterable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.datamodules.plausibility import check_plausible, has_canonical_units
from s2forecast.datamodules.store import is_url, normalize_units
from s2forecast.evaluation.climatology import compute_climatology, open_climatology
from s2forecast.evaluation.metrics import (
    INIT_DIM,
    LEAD_DIM,
    MEMBER_DIMS,
    SPATIAL_DIMS,
    MissingTruthWarning,
    acc,
    bias,
    check_forecast_layout,
    climatology_forecast,
    crps,
    ensemble_variance,
    latitude_weights,
    mae,
    member_dim,
    mse,
    nearest_hours,
    persistence_forecast,
    truth_at_valid_times,
)
from s2forecast.evaluation.regions import parse_region, region_weights
from s2forecast.output import (
    GENERATION_ATTR,
    MARKER_ATTR,
    Output,
    check_target,
    check_unchanged,
    file_sha256,
    netcdf_attributes,
)
from s2forecast.times import format_times
from s2forecast.user_errors import one_line

METRICS = ("rmse", "acc", "bias")
# an ensemble forecast adds its CRPS (fair), spread (sqrt of the mean unbiased ensemble variance)
# and spread-skill ratio (spread / RMSE of the ensemble mean); rmse, acc and bias are those of the
# ensemble mean. A deterministic baseline's CRPS is its mean absolute error, its spread 0.
ENSEMBLE_METRICS = (*METRICS, "crps", "spread", "spread_skill")
MODELS = ("forecast", "persistence", "climatology")
# (label, variable, level or None): the WB2 headline scores, listed first in the table
HEADLINE = (("Z500", "geopotential", 500), ("T850", "temperature", 850), ("T2M", "2m_temperature", None))
# further WB2 headline levels, plotted besides Z500 and T850 when a variable has many levels
HEADLINE_LEVELS = {
    "geopotential": (500,),
    "temperature": (850,),
    "specific_humidity": (700,),
    "u_component_of_wind": (850,),
    "v_component_of_wind": (850,),
}
MAX_PLOT_LEVELS = 3  # plot every level of a variable with at most this many, else its headline levels
MAX_TABLE_LEADS = 8
BLOCK_BYTES = 64 * 2**20  # forecast bytes (float64) per variable read and scored at once


# --- opening and checking inputs ---------------------------------------------------------


def _describe_source(source) -> str:
    if is_url(source):
        return source
    return str(Path(source).resolve()) if isinstance(source, str | os.PathLike) else "<in-memory Dataset>"


def _require_path(path, what: str) -> Path:
    path = Path(path)
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
            raise ValueError(f"the {what} {path} is a directory but not a zarr store (no zarr.json or .zgroup in it)")
        return
    with open(path, "rb") as file:
        head = file.read(8)
    if not head:
        raise ValueError(f"the {what} {path} is an empty file; write it again")
    if path.suffix != ".zarr" and not head.startswith(NETCDF_SIGNATURES):
        raise ValueError(f"the {what} {path} is not a NetCDF file (it starts with {head[:4]!r}); check the path")


def _opened(open_fn, path: Path, what: str) -> xr.Dataset:
    """``open_fn(path)``; a file that starts right but cannot be read (truncated, damaged) is a
    ValueError naming it."""
    try:
        return open_fn(path)
    except OSError as error:
        if isinstance(error, FileNotFoundError | PermissionError | IsADirectoryError):
            raise
        reason = error.strerror or one_line(str(error))  # netCDF4: "NetCDF: HDF error"
        raise ValueError(f"cannot read the {what} {path} ({reason}): is it truncated or damaged?") from error


def open_forecast(source: str | os.PathLike | xr.Dataset) -> xr.Dataset:
    """Open a forecast lazily (NetCDF: dask chunks of one init time; zarr: its own chunks).

    Args:
        source: path of a ``.nc`` file or a zarr store, or an opened Dataset.

    Returns:
        Dataset with dims ``(time, prediction_timedelta, [level], latitude, longitude)``,
        ``prediction_timedelta`` as timedelta64, without a ``valid_time`` variable.

    Raises:
        FileNotFoundError: ``source`` does not exist.
        ValueError: the layout is not WB2's (names the missing dim and how to rename it).
    """
    if isinstance(source, xr.Dataset):
        forecast = source
    else:
        path = _require_path(source, "forecast")
        _check_readable(path, "forecast")
        forecast = _opened(_open_forecast_file, path, "forecast")
    forecast = forecast.drop_vars("valid_time", errors="ignore")
    check_forecast_layout(forecast)
    if not forecast.indexes[INIT_DIM].is_unique:
        raise ValueError("forecast 'time' (init time) has duplicate values; drop them")
    lead = forecast[LEAD_DIM]
    if not np.issubdtype(lead.dtype, np.timedelta64):
        units = lead.attrs.get("units")
        try:
            if not isinstance(units, str):
                raise ValueError("no units")
            values = pd.to_timedelta(np.asarray(lead.values), unit=units).values
        except (ValueError, TypeError):
            raise ValueError(
                f"forecast 'prediction_timedelta' must be timedelta64 or numbers with a time 'units' attribute "
                f"(e.g. 'hours'); got dtype {lead.dtype} with units {units!r}"
            ) from None
        forecast = forecast.assign_coords({LEAD_DIM: values})
    if not forecast.indexes[LEAD_DIM].is_unique:
        raise ValueError("forecast 'prediction_timedelta' has duplicate values; drop them")
    return forecast


def _open_forecast_file(path: Path) -> xr.Dataset:
    if path.is_dir() or path.suffix == ".zarr":
        try:
            return xr.open_zarr(path, consolidated=True)
        except (KeyError, ValueError, FileNotFoundError):
            return xr.open_zarr(path, consolidated=False)
    with warnings.catch_warnings():  # one init per dask chunk on purpose (streamed blocks); any file layout is fine
        warnings.filterwarnings("ignore", message="The specified chunks separate the stored chunks")
        return xr.open_dataset(path, chunks={INIT_DIM: 1})


def open_truth(source: str | os.PathLike | xr.Dataset, storage_options: dict | None = None) -> xr.Dataset:
    """Open a truth store lazily, without its ``written`` variable and other coordinates along time.
    ``storage_options``: fsspec options when ``source`` is a URL.

    Returns:
        Dataset with dims ``(time, [level], latitude, longitude)`` (latitude north -> south when
        opened from a path).
    """
    if isinstance(source, xr.Dataset):
        truth = source
    else:
        from s2forecast.datamodules.store import is_url, open_store

        if is_url(source):
            truth = open_store(source, storage_options=storage_options)
        else:
            truth = open_store(_require_path(source, "truth store"))
    if INIT_DIM not in truth.dims:
        raise ValueError(f"the truth has no 'time' dim (dims {dict(truth.sizes)}); its time must be the valid time")
    if not np.issubdtype(truth[INIT_DIM].dtype, np.datetime64):
        raise ValueError(f"truth 'time' must be datetime64, got dtype {truth[INIT_DIM].dtype}")
    if not truth.indexes[INIT_DIM].is_unique:
        raise ValueError("truth 'time' has duplicate values")
    truth = truth.drop_vars("written", errors="ignore")
    along_time = [name for name, coord in truth.coords.items() if INIT_DIM in coord.dims and name != INIT_DIM]
    return truth.drop_vars(along_time)


def _forecast_variables(forecast: xr.Dataset, variables: Sequence[str] | None) -> list[str]:
    needed = {INIT_DIM, LEAD_DIM, *SPATIAL_DIMS}
    scorable = [name for name, var in forecast.data_vars.items() if needed <= set(var.dims)]
    if variables is None:
        if not scorable:
            raise ValueError(
                "the forecast has no variable with dims (time, prediction_timedelta, ..., latitude, longitude); it has "
                f"{ {name: var.dims for name, var in forecast.data_vars.items()} }"
            )
        return scorable
    variables = list(variables)
    absent = [name for name in variables if name not in scorable]
    if absent:
        raise ValueError(f"variable(s) {absent} are not forecast variables of the forecast file; it has {scorable}")
    return variables


def _check_variables(forecast: xr.Dataset, truth: xr.Dataset, variables: list[str], name: str, where: str) -> None:
    """The truth (or climatology) holds every variable with the same non-time dims and every level."""
    absent = [v for v in variables if v not in truth.data_vars]
    if absent:
        raise ValueError(
            f"forecast variable(s) {absent} are not in the {name} {where} (it has {sorted(truth.data_vars)}); "
            "score a subset with --variables, or use a store that holds them"
        )
    for v in variables:
        expected = {d for d in forecast[v].dims if d not in (INIT_DIM, LEAD_DIM, *MEMBER_DIMS)}
        have = {d for d in truth[v].dims if d not in (INIT_DIM, "dayofyear", "hour")}
        if expected != have:
            raise ValueError(
                f"variable {v!r} has dims {forecast[v].dims} in the forecast but {truth[v].dims} in the {name} "
                f"{where}; they must agree apart from time (and prediction_timedelta)"
            )
        if "level" in expected:
            levels = forecast[v]["level"].values.tolist()
            missing = sorted(set(levels) - set(truth[v]["level"].values.tolist()))
            if missing:
                raise ValueError(
                    f"the {name} {where} lacks level(s) {missing} of forecast variable {v!r}; it has "
                    f"{truth[v]['level'].values.tolist()}"
                )


def _check_units(forecast: xr.Dataset, other: xr.Dataset, variables: list[str], name: str, where: str) -> None:
    """Every variable in the same units in the forecast and the truth (or climatology), where both say."""
    for v in variables:
        mine, theirs = forecast[v].attrs.get("units"), other[v].attrs.get("units")
        if mine is None or theirs is None or normalize_units(str(mine)) == normalize_units(str(theirs)):
            continue
        raise ValueError(
            f"forecast variable {v} has units {mine!r} but the {name} {where} has {theirs!r}; convert the forecast "
            f"to {theirs} before scoring"
        )


def _check_values(forecast: xr.Dataset, truth: xr.Dataset, variables: list[str], truth_name: str) -> None:
    """Forecast and truth values plausible in their units (``s2forecast.datamodules.plausibility``),
    judged on the first, middle and last init time (first, middle, last lead) and truth time.
    Values in other than the canonical units of ``store.VARIABLES`` are not judged."""
    for v in variables:
        _check_not_all_nan(forecast[v], v)
        truth_units = truth[v].attrs.get("units")
        if has_canonical_units(v, forecast[v].attrs.get("units", truth_units)):
            labels = {INIT_DIM: "init time", LEAD_DIM: "lead"}
            check_plausible(forecast[v], v, f"forecast variable {v}", (INIT_DIM, LEAD_DIM), labels)
        if has_canonical_units(v, truth_units):
            observed = truth[v].sel(level=forecast[v]["level"].values) if "level" in forecast[v].dims else truth[v]
            check_plausible(observed, v, f"truth store {truth_name}: variable {v}")


def _check_not_all_nan(data: xr.DataArray, name: str) -> None:
    """Refuse a forecast whose first, middle or last init time x lead is NaN everywhere: its
    scores would be NaN at exit 0 (a field NaN in part, e.g. over land, is scored as it is)."""
    picks = {dim: sorted({0, data.sizes[dim] // 2, data.sizes[dim] - 1}) for dim in (INIT_DIM, LEAD_DIM)}
    empty = data.isel(picks).isnull().all(dim=("latitude", "longitude"))
    empty = empty.any(dim=[d for d in empty.dims if d not in picks]).load()  # any level
    if bool(empty.any()):
        i, j = np.argwhere(empty.transpose(INIT_DIM, LEAD_DIM).values)[0]
        init, lead = empty[INIT_DIM].values[i], empty[LEAD_DIM].values[j]
        raise ValueError(
            f"forecast variable {name} is NaN everywhere at init time {format_times([init])} lead {_hours(lead):g} h; "
            "check the forecast file (a failed or unfinished model run?)"
        )


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
            raise ValueError(f"the {name} {where} has no {dim!r} dim (dims {dict(other.sizes)}); rename it")
        a = np.sort(np.asarray(forecast[dim].values, dtype=np.float64))
        b = np.sort(np.asarray(other[dim].values, dtype=np.float64))
        if a.shape != b.shape or not np.allclose(a, b, rtol=0.0, atol=1e-6):
            hint = ""
            if dim == "longitude" and a.shape == b.shape and np.allclose(np.sort(a % 360), np.sort(b % 360), atol=1e-6):
                hint = " (longitudes differ only in convention: convert the forecast's to [0, 360) with lon % 360)"
            raise ValueError(
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
            raise ValueError(f"map lead {lead!r} is neither hours (a number), a string like '24h' nor a timedelta")
        if pd.isna(values[-1]):
            raise ValueError(f"map lead {lead!r} is not a lead time; give hours such as 24")
    wanted = np.asarray(pd.TimedeltaIndex(values).values).astype("timedelta64[ns]").astype(np.int64)
    have = np.asarray(available).astype("timedelta64[ns]").astype(np.int64)
    absent = [w for w in wanted if w not in set(have.tolist())]
    if absent:
        raise ValueError(
            f"map lead(s) {', '.join(f'{w / 3.6e12:g}' for w in absent)} h are not forecast leads; available: "
            f"{', '.join(str(_hours(v)) for v in available)} h"
        )
    return np.asarray([available[np.flatnonzero(have == w)[0]] for w in wanted])


def _hours(lead) -> float:
    hours = float(np.timedelta64(lead, "ns").astype(np.int64)) / 3.6e12
    return int(hours) if hours == int(hours) else hours


def _is_path(source) -> bool:
    """A local input (a URL is read-only to s2forecast: no output can collide with it, and it has
    no generation to check)."""
    return isinstance(source, str | os.PathLike) and not is_url(source)


def _claim_outputs(out: Path, inputs: list, overwrite: bool, plots: bool) -> list[Output]:
    """The metrics NetCDF, its CSV and (with ``plots``) its plots directory, claimed under the
    output policy before any computation (``s2forecast.output``); returned in the order they are
    committed: plots, CSV, then the NetCDF that vouches for them."""
    check_target(out, inputs)  # first: `--out .` or an input is refused as such, whatever its name
    if out.suffix != ".nc":
        raise ValueError(f"--out must name a NetCDF file ending in .nc (e.g. metrics.nc), got {out}")
    claimed = []
    policy = {"inputs": inputs, "overwrite": overwrite, "make_parent": True}
    try:
        claimed.append(Output(out, "metrics", **policy))
        owned = partial(_csv_of_metrics, out)  # a CSV is ours when our metrics file records its hash
        claimed.append(Output(out.with_suffix(".csv"), "metrics", owned=owned, option="metrics CSV", **policy))
        if plots:
            plot_dir = out.with_name(f"{out.stem}_plots")
            claimed.append(Output(plot_dir, "plots", directory=True, option="plots directory", **policy))
    except BaseException:
        for output in claimed:
            output.discard()
        raise
    return claimed[::-1]


def _csv_of_metrics(metrics_path: Path, csv_path: Path) -> bool:
    attrs = netcdf_attributes(metrics_path) or {}
    if MARKER_ATTR not in attrs or not csv_path.is_file() or csv_path.is_symlink():
        return False
    return attrs.get("csv_sha256") == file_sha256(csv_path)


# --- climatology ---------------------------------------------------------------------------

CLIMATOLOGY_ATTRS = (
    "climatology_method",
    "climatology_method_reason",
    "climatology_window_days",
    "climatology_start",
    "climatology_end",
    "climatology_n_times",
    "dayofyear_convention",
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
        clim = clim.compute()
    attrs = {"climatology": "computed from the truth store (s2forecast.evaluation.compute_climatology)", **info}
    return clim, attrs


def _open_climatology(source, forecast: xr.Dataset, variables: list[str]) -> tuple[xr.Dataset, dict]:
    """Open a WB2-layout climatology (path or Dataset) and check it against the forecast."""
    from s2forecast.evaluation.climatology import validate_climatology

    if isinstance(source, xr.Dataset):
        clim, where = validate_climatology(source), "<in-memory Dataset>"
    else:
        path = _require_path(source, "climatology")
        _check_readable(path, "climatology")
        clim, where = _opened(open_climatology, path, "climatology"), str(path.resolve())
    _check_variables(forecast, clim, variables, "climatology", where)
    _check_grid(forecast, clim, "climatology", where)
    _check_units(forecast, clim, variables, "climatology", where)
    attrs = {"climatology": where, **_climatology_attrs(clim.attrs)}
    attrs.setdefault("climatology_method", "not recorded in the climatology file")
    return clim[variables], attrs


# --- scoring -------------------------------------------------------------------------------


def _missing_truth(init_times: np.ndarray, leads: np.ndarray, truth_times: np.ndarray, truth_name: str) -> np.ndarray:
    """(n_lead,) init times per lead whose valid time is in the truth; warns about the rest."""
    valid = init_times[:, None] + leads[None, :]
    available = np.isin(valid, truth_times)
    counts = available.sum(axis=0)
    if not available.all():
        empty = [_hours(lead) for lead, n in zip(leads, counts, strict=True) if n == 0]
        partial = [_hours(lead) for lead, n in zip(leads, counts, strict=True) if 0 < n < init_times.size]
        effects = []  # only the kinds that occur: never "lead(s) [] h"
        if empty:
            effects.append(f"lead(s) {_hours_list(empty)} h have no truth at all (metrics NaN, n_init_times 0)")
        if partial:
            effects.append(f"lead(s) {_hours_list(partial)} h average over fewer init times")
        warnings.warn(
            f"the truth {truth_name} has no data at {int((~available).sum())} of {available.size} (init time, lead) "
            f"valid times: {'; '.join(effects)}; see 'n_init_times' in the metrics file",
            MissingTruthWarning,
            stacklevel=3,
        )
    absent_init = ~np.isin(init_times, truth_times)
    if absent_init.any():
        warnings.warn(
            f"{int(absent_init.sum())} init time(s) ({format_times(init_times[absent_init], limit=3)}) are not in the "
            f"truth {truth_name}: persistence is NaN for every lead",
            MissingTruthWarning,
            stacklevel=3,
        )
    return counts


def _hours_list(hours: list, limit: int = 8) -> str:
    shown = ", ".join(str(h) for h in hours[:limit])
    return shown if len(hours) <= limit else f"{shown} and {len(hours) - limit} more"


def _blocks(n: int, per_item_bytes: int) -> list[slice]:
    size = int(min(max(1, BLOCK_BYTES // max(per_item_bytes, 1)), n))
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def _select_levels(data: xr.DataArray, levels) -> xr.DataArray:
    return data.sel(level=levels) if levels is not None and "level" in data.dims else data


def _score_block(
    forecast: xr.DataArray,
    truth: xr.DataArray,
    clim: xr.DataArray,
    init_times: np.ndarray,
    leads: np.ndarray,
    weights: list[xr.DataArray],
    member: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-block means of one variable, per region (``weights``: one (latitude, longitude) array each);
    ``member``: the ensemble dim of an ensemble forecast (adds crps and the ensemble variance).

    Args:
        forecast: (time, prediction_timedelta, [level], latitude, longitude) in memory.
        truth: (time, [level], latitude, longitude), every available time the block needs.
        clim: (dayofyear, hour, [level], latitude, longitude), the slots the block needs.

    Returns:
        values (metric, model, prediction_timedelta, region, [level]) with metric (mse, acc,
        bias), and n_init_times (prediction_timedelta,) they are means over.
    """
    ensemble = forecast
    if member is not None:
        forecast = forecast.mean(member)  # deterministic scores are those of the ensemble mean
    models = {
        "forecast": forecast,
        "persistence": persistence_forecast(truth, init_times, leads),
        "climatology": climatology_forecast(clim, init_times, leads, like=forecast),
    }
    values, counts = [], None
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", MissingTruthWarning)  # reported once for the whole forecast
        for model in MODELS:
            per_metric = [[], [], []] + ([[], []] if member is not None else [])
            for w in weights:
                scores = [mse(models[model], truth, weights=w), acc(models[model], truth, clim, weights=w),
                          bias(models[model], truth, weights=w)]  # fmt: skip
                if member is not None and model == "forecast":
                    scores += [crps(ensemble, truth, member, weights=w),
                               ensemble_variance(ensemble, truth, member, weights=w)]  # fmt: skip
                elif member is not None:  # a deterministic baseline: CRPS = MAE, no spread
                    error = mae(models[model], truth, weights=w)
                    scores += [error, xr.zeros_like(error)]
                if counts is None:
                    counts = scores[0]["n_init_times"].values
                for i, score in enumerate(scores):
                    per_metric[i].append(score.transpose(LEAD_DIM, ...).values)
            values.append([np.stack(regional, axis=1) for regional in per_metric])  # (lead, region, [level])
    return np.asarray(values).swapaxes(0, 1), counts


def _score(
    forecast: xr.Dataset,
    truth: xr.Dataset,
    clim: xr.Dataset,
    variables: list[str],
    levels,
    progress: bool,
    weights: list[xr.DataArray] | None = None,
    member: str | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Stream over blocks of init times; return per variable (metric, model, lead, region, [level])
    and counts. ``weights``: (latitude, longitude) weights per region (default: global)."""
    from tqdm.auto import tqdm

    init_times = forecast[INIT_DIM].values
    leads = forecast[LEAD_DIM].values
    truth_times = truth[INIT_DIM].values
    if weights is None:
        weights = [latitude_weights(forecast["latitude"])]
    per_init = max(forecast[v].isel({INIT_DIM: 0}).size * 8 for v in variables)
    sums = {v: 0.0 for v in variables}
    counts = np.zeros(leads.size, dtype=np.int64)
    with tqdm(total=init_times.size, desc="evaluate", unit="init", disable=not progress) as bar:
        for block in _blocks(init_times.size, per_init):
            init = init_times[block]
            valid = (init[:, None] + leads[None, :]).ravel()
            needed = np.union1d(init, valid)
            present = needed[np.isin(needed, truth_times)]
            stamps = pd.DatetimeIndex(valid)
            doys = np.unique(np.asarray(stamps.day_of_year))
            hours = np.unique(nearest_hours(np.asarray(stamps.hour), clim["hour"].values))
            block_counts = None
            for v in variables:
                f = forecast[v].isel({INIT_DIM: block}).astype(np.float64).load()
                o = _select_levels(truth[v], levels).sel({INIT_DIM: present}).astype(np.float64).load()
                c = _select_levels(clim[v], levels).sel(dayofyear=doys, hour=hours).astype(np.float64).load()
                values, n = _score_block(f, o, c, init, leads, weights, member)
                if block_counts is None:
                    block_counts = n
                per_lead = n.reshape((n.size,) + (1,) * (values.ndim - 3))
                sums[v] = sums[v] + np.where(per_lead > 0, values * per_lead, 0.0)
            counts += block_counts
            bar.update(init.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = counts.astype(np.float64)
        means = {}
        for v, summed in sums.items():
            shape = (counts.size,) + (1,) * (np.ndim(summed) - 3)
            mean = np.where(total.reshape(shape) > 0, summed / total.reshape(shape), np.nan)
            mean[0] = np.sqrt(mean[0])  # metric 0 accumulates the MSE: rmse = sqrt(mean over init times of the MSE)
            if member is not None:  # metric 4 accumulates the ensemble variance: spread = its sqrt
                mean[4] = np.sqrt(mean[4])
                mean = np.concatenate([mean, (mean[4] / mean[0])[None]])  # spread-skill ratio
            means[v] = mean
    return means, counts


def _metrics_dataset(
    forecast: xr.Dataset,
    truth: xr.Dataset,
    variables: list[str],
    means: dict[str, np.ndarray],
    counts: np.ndarray,
    levels,
    regions: Sequence[str] = ("global",),
    ensemble: bool = False,
) -> xr.Dataset:
    """The metrics Dataset: per variable (metric, model, region, prediction_timedelta, [level]) and
    n_init_times."""
    leads = forecast[LEAD_DIM].values
    data_vars = {}
    for v in variables:
        dims = ("metric", "model", LEAD_DIM, "region") + (("level",) if "level" in forecast[v].dims else ())
        source = {**truth[v].attrs, **forecast[v].attrs}
        units = source.get("units", "")
        data_vars[v] = xr.DataArray(
            means[v],
            dims=dims,
            attrs={
                "long_name": f"skill scores of {source.get('long_name', v)}",
                "field_units": units,
                "comment": f"rmse and bias in the field's units ({units or 'unknown'}); acc is dimensionless",
            },
        ).transpose("metric", "model", "region", LEAD_DIM, ...)
    coords = {
        "metric": np.array(ENSEMBLE_METRICS if ensemble else METRICS),
        "model": np.array(MODELS),
        "region": ("region", np.array(list(regions)), {"long_name": "region of the scores (evaluation.regions)"}),
        LEAD_DIM: leads,
        "lead_hours": (
            LEAD_DIM,
            np.array([float(_hours(lead)) for lead in leads]),
            {"long_name": "lead time in hours"},
        ),
    }
    if levels is not None:
        coords["level"] = ("level", np.asarray(levels), {"units": "hPa"})
    metrics = xr.Dataset(data_vars, coords=coords)
    metrics["n_init_times"] = xr.DataArray(
        counts,
        dims=(LEAD_DIM,),
        attrs={"long_name": "init times whose valid time is in the truth (the metrics average over them)"},
    )
    return metrics


# --- outputs -------------------------------------------------------------------------------


def metrics_table(metrics: xr.Dataset) -> pd.DataFrame:
    """Long format: columns ``variable, level, region, lead_hours, model, metric, value`` (level NaN
    for surface fields)."""
    rows = []
    lead_hours = metrics["lead_hours"].values
    for v in _score_variables(metrics):
        data = metrics[v]
        levels = data["level"].values if "level" in data.dims else [None]
        for level in levels:
            field = (data.sel(level=level) if level is not None else data).transpose("metric", "model", "region", ...)
            for i, metric in enumerate(data["metric"].values):
                for j, model in enumerate(data["model"].values):
                    for r, region in enumerate(data["region"].values):
                        for k, hours in enumerate(lead_hours):
                            value = field.values[i, j, r, k]
                            rows.append((v, level, str(region), hours, str(model), str(metric), float(value)))
    columns = ["variable", "level", "region", "lead_hours", "model", "metric", "value"]
    table = pd.DataFrame(rows, columns=columns)
    levels = table["level"].dropna()
    if np.all(np.mod(levels.to_numpy(dtype=np.float64), 1) == 0):
        table["level"] = table["level"].astype("Int64")  # 500, not 500.0; empty for surface fields
    if np.all(np.mod(lead_hours, 1) == 0):
        table["lead_hours"] = table["lead_hours"].astype(np.int64)
    return table


def _score_variables(metrics: xr.Dataset) -> list[Hashable]:
    return [v for v in metrics.data_vars if "metric" in metrics[v].dims]


def field_label(variable: str, level=None) -> str:
    """Short name of a field: ``Z500``, ``T850``, ``T2M`` for the headline ones, else ``variable level``."""
    for label, name, headline_level in HEADLINE:
        if variable == name and (level is None if headline_level is None else level == headline_level):
            return label
    return str(variable) if level is None else f"{variable} {int(level)}"


def table_fields(metrics: xr.Dataset) -> list[tuple[str, Hashable, object]]:
    """(label, variable, level) of every scored field, the headline ones (Z500, T850, T2M) first."""
    fields = []
    for v in _score_variables(metrics):
        levels = metrics[v]["level"].values.tolist() if "level" in metrics[v].dims else [None]
        fields.extend((field_label(v, level), v, level) for level in levels)
    order = {(name, level): rank for rank, (_, name, level) in enumerate(HEADLINE)}
    return sorted(fields, key=lambda field: order.get((field[1], field[2]), len(HEADLINE)))


def _table_leads(n: int, max_leads: int) -> np.ndarray:
    if n <= max_leads:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, max_leads)).astype(int))


def _format_value(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.4g}"


def headline_region(metrics: xr.Dataset) -> xr.Dataset:
    """The scores of one region for the table and plots: global if scored, else the first."""
    if "region" not in metrics.dims:
        return metrics
    regions = list(metrics["region"].values)
    return metrics.sel(region="global" if "global" in regions else regions[0])


def format_table(metrics: xr.Dataset, max_leads: int = MAX_TABLE_LEADS) -> str:
    """A compact text table: per field, forecast RMSE, persistence RMSE and forecast ACC per lead.

    Headline fields (Z500, T850, T2M) come first; at most ``max_leads`` leads, evenly chosen.
    """
    metrics = headline_region(metrics)
    leads = _table_leads(metrics.sizes[LEAD_DIM], max_leads)
    headers = [f"{_hours(metrics[LEAD_DIM].values[k])}h" for k in leads]
    rows = []
    for label, v, level in table_fields(metrics):
        data = metrics[v].sel(level=level) if level is not None else metrics[v]
        units = metrics[v].attrs.get("field_units", "")
        name = f"{label} [{units}]" if units else label
        quantities = [
            ("RMSE", "rmse", "forecast"),
            ("RMSE persistence", "rmse", "persistence"),
            ("ACC", "acc", "forecast"),
        ]
        if "crps" in metrics["metric"].values:
            quantities += [("CRPS", "crps", "forecast"), ("spread/skill", "spread_skill", "forecast")]
        for i, (quantity, metric, model) in enumerate(quantities):
            values = data.sel(metric=metric, model=model).values[leads]
            rows.append((name if i == 0 else "", quantity, [_format_value(x) for x in values]))
    rows.append(("init times", "", [str(int(n)) for n in metrics["n_init_times"].values[leads]]))
    width_name = max(len(row[0]) for row in rows)
    width_quantity = max(len(row[1]) for row in rows)
    width = max(9, *(len(h) for h in headers), *(len(x) for row in rows for x in row[2])) + 1
    lines = [" " * (width_name + width_quantity + 2) + "".join(h.rjust(width) for h in headers)]
    for name, quantity, cells in rows:
        lines.append(f"{name:<{width_name}}  {quantity:<{width_quantity}}" + "".join(x.rjust(width) for x in cells))
    return "\n".join(lines)


def _plot_levels(variable: str, levels: Sequence | None) -> list:
    """Levels plotted for a variable: all when few, else its headline levels (or the middle one)."""
    if levels is None:
        return [None]
    levels = list(levels)
    if len(levels) <= MAX_PLOT_LEVELS:
        return levels
    chosen = [lev for lev in HEADLINE_LEVELS.get(variable, (500,)) if lev in levels]
    return chosen or [levels[len(levels) // 2]]


def _file_stem(variable: str, level) -> str:
    return variable if level is None else f"{variable}_{int(level)}hPa"


def _make_plots(
    metrics: xr.Dataset,
    forecast: xr.Dataset,
    truth: xr.Dataset,
    variables: list[str],
    map_leads: np.ndarray,
    plot_dir: Path,
) -> list[Path]:
    from s2forecast.evaluation import plots

    metrics = headline_region(metrics)
    plot_dir.mkdir(exist_ok=True)
    files = []
    init = forecast[INIT_DIM].values[:1]
    valid = init[0] + map_leads
    present = valid[np.isin(valid, truth[INIT_DIM].values)]
    for v in variables:
        levels = metrics["level"].values.tolist() if "level" in metrics[v].dims else None
        units = metrics[v].attrs.get("field_units", "")
        f = forecast[v].isel({INIT_DIM: [0]}).sel({LEAD_DIM: map_leads})
        if levels is not None:
            f = f.sel(level=_plot_levels(v, levels))
        f = f.astype(np.float64).load()
        o = _select_levels(truth[v], f["level"].values if "level" in f.dims else None).sel({INIT_DIM: present})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingTruthWarning)
            o = truth_at_valid_times(o.astype(np.float64).load(), f).drop_vars("valid_time")
        for level in _plot_levels(v, levels):
            label = field_label(v, level)
            scores = metrics[v].sel(level=level) if level is not None else metrics[v]
            path = plot_dir / f"{_file_stem(v, level)}_scores.png"
            files.append(plots.plot_scores(scores, path, title=label, units=units))
            fl = f.isel({INIT_DIM: 0}) if level is None else f.isel({INIT_DIM: 0}).sel(level=level)
            ol = o.isel({INIT_DIM: 0}) if level is None else o.isel({INIT_DIM: 0}).sel(level=level)
            path = plot_dir / f"{_file_stem(v, level)}_maps.png"
            title = f"{label}, init time {pd.Timestamp(init[0]):%Y-%m-%d %H:%M}"
            files.append(plots.plot_maps(fl, ol, path, title=title, units=units))
    return files


# --- the command -----------------------------------------------------------------------------


def evaluate(
    forecast: str | os.PathLike | xr.Dataset,
    truth: str | os.PathLike | xr.Dataset,
    out: str | os.PathLike,
    climatology: str | os.PathLike | xr.Dataset | None = None,
    variables: Sequence[str] | None = None,
    map_leads: Iterable | None = None,
    plots: bool = True,
    progress: bool = True,
    climatology_period: tuple | None = None,
    overwrite: bool = False,
    regions: Sequence[str] = ("global",),
    storage_options: dict | None = None,
) -> xr.Dataset:
    """Score a forecast against the truth, with persistence and climatology baselines; write the results.

    Args:
        forecast: forecast file (``.nc`` or zarr) or Dataset, WB2 layout (module docstring).
        truth: truth store path or Dataset, dims ``(time, [level], latitude, longitude)``.
        out: the metrics NetCDF to write (``.nc``); ``<stem>.csv`` and ``<stem>_plots/`` go beside it.
        climatology: WB2-layout climatology (zarr/NetCDF path or Dataset); default: computed
            from the truth with :func:`compute_climatology` (its method is recorded).
        variables: forecast variables to score (default: all with dims (time, prediction_timedelta, ...)).
        map_leads: leads of the map panels (hours as numbers, strings like ``"24h"``, or
            timedeltas); default the first and last lead.
        plots: write the PNGs.
        progress: show a progress bar over init times.
        climatology_period: ``(start, end)`` of the truth used for a computed climatology
            (inclusive, e.g. ``("1990", "2017")``); default the whole store.
        overwrite: replace existing outputs that s2forecast wrote (``s2forecast.output``: never
            an input, never a file or directory s2forecast did not write).
        regions: names of ``evaluation.regions.PREDEFINED`` (WeatherBench2's) or boxes
            "lat0,lat1,lon0,lon1"; the metrics get a ``region`` dimension in this order.
        storage_options: fsspec options of a ``truth`` URL (e.g. credentials).

    Returns:
        The metrics Dataset as written: per variable ``(metric, model, prediction_timedelta,
        [level])``, ``n_init_times (prediction_timedelta)``; in memory ``attrs["plot_files"]``
        lists the PNGs written.

    Raises:
        FileNotFoundError: an input path does not exist.
        PermissionError: ``out`` cannot be written (checked before any computation).
        FileExistsError: an output exists and ``overwrite`` is not set.
        ValueError: grids differ, a forecast variable or level is not in the truth or the
            climatology, units differ between them, values are implausible in their units
            (degC labelled K, ...), an input is not in the expected layout, an output collides
            with an input or with a path s2forecast may not replace, or an input was rewritten
            during the evaluation.
    """
    out = Path(out)
    regions = list(dict.fromkeys(regions))  # once each, in the order given
    if not regions:
        raise ValueError("no region to score; e.g. --regions global tropics")
    parsed_regions = [parse_region(name) for name in regions]  # before any reading: bad names fail at once
    forecast_ds = open_forecast(forecast)
    member = member_dim(forecast_ds)
    if member is not None and forecast_ds.sizes[member] < 2:
        raise ValueError(
            f"the forecast is an ensemble of {forecast_ds.sizes[member]} member along {member!r}; CRPS and spread need "
            f"at least two (drop the {member!r} dimension to score one forecast deterministically)"
        )
    truth_ds = open_truth(truth, storage_options)
    generations = {}  # input path -> (what, generation when opened): checked before the outputs are committed
    if _is_path(forecast):
        generations[forecast] = ("forecast", forecast_ds.attrs.get(GENERATION_ATTR))
    if _is_path(truth):
        generations[truth] = ("truth store", truth_ds.attrs.get(GENERATION_ATTR))
    truth_name = _describe_source(truth)
    variables = _forecast_variables(forecast_ds, variables)
    _check_variables(forecast_ds, truth_ds, variables, "truth store", truth_name)
    _check_grid(forecast_ds, truth_ds, "truth store", truth_name)
    _check_units(forecast_ds, truth_ds, variables, "truth store", truth_name)
    _check_values(forecast_ds, truth_ds, variables, truth_name)
    levels = forecast_ds["level"].values if any("level" in forecast_ds[v].dims for v in variables) else None
    leads = forecast_ds[LEAD_DIM].values
    if map_leads is None:
        map_leads = np.unique(leads[[0, -1]])
    else:
        map_leads = _parse_leads([map_leads] if isinstance(map_leads, str) else list(map_leads), leads)
    inputs = [source for source in (forecast, truth, climatology) if _is_path(source)]
    outputs = _claim_outputs(out, inputs, overwrite, plots)
    with contextlib.ExitStack() as stack:  # on any error every temporary output goes, nothing at --out changes
        for output in outputs:
            stack.enter_context(output)
        metrics = _score_and_write(
            forecast, forecast_ds, truth_ds, truth_name, climatology, variables, levels, map_leads,
            progress=progress, period=climatology_period, generations=generations, outputs=outputs,
            regions=parsed_regions, member=member,
        )  # fmt: skip
        for output in outputs:
            output.commit()
    return metrics


def _score_and_write(
    forecast, forecast_ds, truth_ds, truth_name, climatology, variables, levels, map_leads,
    *, progress: bool, period, generations: dict, outputs: list[Output], regions: list, member: str | None,
) -> xr.Dataset:  # fmt: skip
    """``evaluate`` once its inputs are open and its outputs claimed (``_claim_outputs``): score,
    write every output at its temporary path, and check that no input was rewritten meanwhile."""
    plots_output, csv_output, metrics_output = outputs if len(outputs) == 3 else (None, *outputs)
    out = metrics_output.path
    leads = forecast_ds[LEAD_DIM].values
    if climatology is None:
        clim, clim_attrs = _climatology_from_truth(truth_ds, levels, variables, period)
    else:
        clim, clim_attrs = _open_climatology(climatology, forecast_ds, variables)
        if _is_path(climatology):
            generations[climatology] = ("climatology", clim.attrs.get(GENERATION_ATTR))
    init_times = forecast_ds[INIT_DIM].values
    expected = _missing_truth(init_times, leads, truth_ds[INIT_DIM].values, truth_name)

    land_sea_mask = truth_ds["land_sea_mask"] if "land_sea_mask" in truth_ds.data_vars else None
    lat_weights = latitude_weights(forecast_ds["latitude"])
    lon = forecast_ds["longitude"].values
    weights = [region_weights(region, lat_weights, lon, land_sea_mask) for region in regions]
    means, counts = _score(forecast_ds, truth_ds, clim, variables, levels, progress, weights, member)
    if not np.array_equal(counts, expected):
        raise RuntimeError(f"internal error: init times per lead {counts.tolist()} != expected {expected.tolist()}")
    metrics = _metrics_dataset(forecast_ds, truth_ds, variables, means, counts, levels, [r.name for r in regions],
                               ensemble=member is not None)  # fmt: skip
    if member is not None:
        metrics.attrs["ensemble"] = f"{forecast_ds.sizes[member]} members along {member!r}"
        forecast_ds = forecast_ds.mean(member)  # the maps show the ensemble mean
    csv_path = csv_output.path
    plot_dir = out.with_name(f"{out.stem}_plots")
    metrics.attrs = {
        "title": "forecast skill scores (s2forecast evaluate)",
        "Conventions": "CF-1.8",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "forecast": _describe_source(forecast),
        "truth": truth_name,
        **{key: value if isinstance(value, int | float) else str(value) for key, value in clim_attrs.items()},
        "init_time_first": str(pd.Timestamp(init_times.min())),
        "init_time_last": str(pd.Timestamp(init_times.max())),
        "n_init_times_forecast": int(init_times.size),
        "rmse_definition": "sqrt(mean over init times of the latitude-weighted MSE) (WeatherBench2); of the "
        "ensemble mean for an ensemble",
        "crps_definition": "fair ensemble CRPS 1/M sum|x_i - y| - 1/(2M(M-1)) sum|x_i - x_j|, latitude-weighted, "
        "mean over init times (WeatherBench2); MAE for the deterministic baselines (ensembles only)",
        "spread_definition": "sqrt(mean over init times of the latitude-weighted unbiased ensemble variance); "
        "spread_skill = spread / rmse of the ensemble mean (ensembles only)",
        "acc_definition": "uncentered anomaly correlation per init time w.r.t. the climatology at the valid time, "
        "averaged over init times (WeatherBench2); undefined (NaN) for the climatology model",
        "bias_definition": "mean over init times of the latitude-weighted mean of forecast - truth",
        "latitude_weights": "cell area: sin(upper bound) - sin(lower bound), normalized to mean 1 (WeatherBench2)",
        "persistence": "f_t(tau) = truth at the init time t",
        "missing_truth": "leads whose valid time is missing from the truth average over fewer init times "
        "(n_init_times); metrics are NaN where n_init_times is 0",
        "csv": str(csv_path.resolve()),
    }
    if plots_output is not None:
        metrics.attrs["plots_dir"] = str(plot_dir.resolve())
    from s2forecast import __version__

    metrics.attrs["s2forecast_version"] = __version__
    metrics_table(metrics).to_csv(csv_output.tmp, index=False)
    metrics.attrs.update({**metrics_output.attrs, "csv_sha256": file_sha256(csv_output.tmp)})
    metrics.to_netcdf(metrics_output.tmp, format="NETCDF4")
    files = []
    if plots_output is not None:
        written = _make_plots(metrics, forecast_ds, truth_ds, variables, map_leads, plots_output.tmp)
        files = [plot_dir / path.name for path in written]
    for path, (what, generation) in generations.items():
        check_unchanged(path, generation, what)
    metrics.attrs["plot_files"] = [str(path) for path in files]
    return metrics


def _region_names(names: list[str]) -> list[str]:
    """``wb2`` stands for every predefined region without a land mask (WB2's "all", minus land)."""
    from s2forecast.evaluation.regions import WITHOUT_LAND

    return [region for name in names for region in (WITHOUT_LAND if name == "wb2" else [name])]


def run(args: argparse.Namespace) -> None:
    """Run ``evaluate`` with parsed ``args`` (see :func:`add_arguments`); print the table and the files."""
    period = None
    if args.climatology_start is not None or args.climatology_end is not None:
        if args.climatology is not None:
            raise ValueError("--climatology-start/--climatology-end apply to a computed climatology, not --climatology")
        period = (args.climatology_start, args.climatology_end)
    metrics = evaluate(
        args.forecast,
        args.truth,
        args.out,
        climatology=args.climatology,
        variables=args.variables,
        map_leads=args.map_leads,
        plots=args.plots,
        progress=args.progress,
        climatology_period=period,
        overwrite=args.overwrite,
        regions=_region_names(args.regions),
        storage_options=args.storage_options,
    )
    print(format_table(metrics))
    print(f"climatology: {metrics.attrs['climatology']} (method {metrics.attrs['climatology_method']})")
    print(f"wrote {Path(args.out).resolve()}")
    print(f"wrote {metrics.attrs['csv']}")
    if metrics.attrs["plot_files"]:
        print(f"wrote {len(metrics.attrs['plot_files'])} plots in {metrics.attrs['plots_dir']}")
    sys.stdout.flush()
