"""WeatherBench2-comparable skill metrics of gridded forecasts: RMSE, bias and ACC.

The definitions follow ``docs/metrics.md`` (WeatherBench2, WB2). Notation: forecast f,
truth o, climatology c, initialization time t, lead time tau.

Layouts (WB2):
    forecast: dims ``(time, prediction_timedelta, [level], latitude, longitude)``; ``time``
        is the initialization time (datetime64), ``prediction_timedelta`` the lead
        (timedelta64).
    truth: dims ``(time, [level], latitude, longitude)``; ``time`` is the valid time.
    climatology: dims ``(dayofyear, hour, [level], latitude, longitude)``, dayofyear 1..366
        as pandas/xarray ``time.dt.dayofyear`` numbers dates, hour of day 0..23.

Every function accepts DataArrays or Datasets (a Dataset is scored variable by variable;
the truth and climatology must hold every forecast variable). Latitude may run north ->
south or south -> north independently in forecast, truth and climatology: they are aligned
by coordinate value, never by position.

Missing truth: a valid time ``t + tau`` absent from the truth's ``time`` coordinate is
reported, not dropped silently. :func:`truth_at_valid_times` fills it with NaN; the metrics
average each lead only over the init times whose valid time is in the truth, return NaN
for a lead with no truth at all, attach the number of init times used per lead as the
coordinate ``n_init_times`` and emit a :class:`MissingTruthWarning`. NaN *values* inside
the data (as opposed to missing times) propagate to the metric unless ``skipna=True``,
which then skips them in the spatial mean only.
"""

import math
import warnings
from collections.abc import Hashable, Sequence

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.user_errors import UserError

Data = xr.DataArray | xr.Dataset

SPATIAL_DIMS = ("latitude", "longitude")
INIT_DIM = "time"
LEAD_DIM = "prediction_timedelta"


class MissingTruthWarning(UserWarning):
    """Some valid times of a forecast have no truth; the affected leads use fewer init times."""


# --- weights and spatial means ---------------------------------------------------------


def latitude_weights(latitude: xr.DataArray) -> xr.DataArray:
    """WB2 cell-area latitude weights, normalized to mean 1.

    Cell bounds are ``[-90, midpoints between adjacent latitudes (ascending), +90]`` and
    ``w_i = sin(upper_i) - sin(lower_i)``. Grids with poles give the pole rows half-cell
    weights (about 0.00518 at 1.5 deg); grids without poles give ``cos(lat) / mean(cos(lat))``
    when the rows are evenly spaced cell centres.

    Args:
        latitude: (nlat,) latitudes in degrees, any monotonic order (a coordinate such as
            ``ds.latitude``, a DataArray, or array-like: then the dim is ``latitude``).

    Returns:
        (nlat,) DataArray named ``latitude_weights`` on the input's latitude dim and
        coordinate, in the input's order.
    """
    if not isinstance(latitude, xr.DataArray):
        values = np.asarray(latitude, dtype=np.float64)
        latitude = xr.DataArray(values, dims=("latitude",), coords={"latitude": values})
    if latitude.ndim != 1:
        raise UserError(f"latitude must be 1-D, got dims {latitude.dims}")
    lats = np.asarray(latitude.values, dtype=np.float64)
    if lats.size < 1 or not np.all(np.isfinite(lats)):
        raise UserError(f"latitude must be a non-empty finite array, got {lats!r}")
    if np.abs(lats).max() > 90.0 + 1e-6:
        raise UserError(f"latitudes must be degrees in [-90, 90], got max |lat| = {np.abs(lats).max():g}")
    order = np.argsort(lats)
    ascending = np.deg2rad(np.clip(lats[order], -90.0, 90.0))
    if np.any(np.diff(ascending) == 0):
        raise UserError("latitude contains duplicate values")
    bounds = np.concatenate([[-math.pi / 2], 0.5 * (ascending[1:] + ascending[:-1]), [math.pi / 2]])
    cell = np.sin(bounds[1:]) - np.sin(bounds[:-1])
    weights = np.empty_like(cell)
    weights[order] = cell / cell.mean()
    dim = latitude.dims[0]
    coords = {dim: latitude[dim].values} if dim in latitude.coords else {}
    return xr.DataArray(weights, dims=(dim,), coords=coords, name="latitude_weights")


def weighted_mean(
    x: Data,
    weights: xr.DataArray | None = None,
    dims: Sequence[Hashable] = SPATIAL_DIMS,
    skipna: bool = False,
) -> Data:
    """Area-weighted mean ``sum_ij w_i x_ij / sum_ij w_i`` over ``dims``.

    Args:
        x: DataArray or Dataset with ``dims`` (default latitude and longitude).
        weights: weights over a subset of ``dims`` (default :func:`latitude_weights` of
            ``x.latitude``). Where ``weights`` carries a coordinate also on ``x`` it is
            aligned to ``x`` by value, so either latitude order works.
        dims: dims to average over.
        skipna: skip NaN values of ``x`` (the weights are then renormalized over the valid
            points); by default any NaN makes the mean NaN, as in WB2.

    Returns:
        ``x`` without ``dims``.
    """
    dims = tuple(dims)
    missing = [d for d in dims if d not in x.dims]
    if missing:
        raise UserError(f"weighted_mean: x has no dims {missing} (its dims are {tuple(x.dims)})")
    if weights is None:
        if "latitude" not in dims:
            raise UserError("weighted_mean needs explicit weights when 'latitude' is not among dims")
        weights = latitude_weights(x["latitude"])
    weights = _align_weights(weights, x)
    return x.weighted(weights).mean(dim=dims, skipna=skipna)


def _align_weights(weights: xr.DataArray, x: Data) -> xr.DataArray:
    for dim in weights.dims:
        if dim not in x.dims:
            raise UserError(f"weights have dim {dim!r} that x lacks (x dims: {tuple(x.dims)})")
        if dim in weights.coords and dim in x.coords:
            position = _matching_positions(np.asarray(weights[dim]), np.asarray(x[dim]), dim, "weights", "x")
            if not np.array_equal(position, np.arange(position.size)):
                weights = weights.isel({dim: position})
            weights = weights.assign_coords({dim: x[dim].values})
        elif weights.sizes[dim] != x.sizes[dim]:
            raise UserError(f"weights have {weights.sizes[dim]} {dim!r} entries, x has {x.sizes[dim]}")
    if bool(weights.isnull().any()):
        raise UserError("weights contain NaN")
    return weights


# --- alignment helpers -----------------------------------------------------------------


def _matching_positions(source: np.ndarray, target: np.ndarray, dim, source_name: str, target_name: str) -> np.ndarray:
    """Positions in ``source`` of each value of ``target`` (same set of values, any order)."""
    if source.shape != target.shape:
        raise UserError(
            f"{source_name} and {target_name} have different {dim!r} coordinates ({source.size} vs {target.size} "
            "values); regrid one of them onto the other's grid first"
        )
    source_order = np.argsort(source, kind="stable")
    target_order = np.argsort(target, kind="stable")
    if np.issubdtype(source.dtype, np.number) and np.issubdtype(target.dtype, np.number):
        same = np.allclose(source[source_order], target[target_order], rtol=0.0, atol=1e-6)
    else:
        same = np.array_equal(source[source_order], target[target_order])
    if not same:
        bad = np.flatnonzero(~np.isclose(source[source_order], target[target_order], rtol=0.0, atol=1e-6))
        i = bad[0] if bad.size else 0
        raise UserError(
            f"{source_name} and {target_name} have different {dim!r} values (e.g. {source[source_order][i]!r} vs "
            f"{target[target_order][i]!r}); regrid one of them onto the other's grid first"
        )
    position = np.empty_like(target_order)
    position[target_order] = source_order
    return position


def _align_like(data: Data, reference: Data, name: str) -> Data:
    """Select ``reference``'s variables and levels from ``data``; match its latitude/longitude order.

    Args:
        data: truth (dims time, ...) or climatology (dims dayofyear, hour, ...).
        reference: the forecast whose variables, levels and grid order are used.
        name: what ``data`` is, for error messages.
    """
    if isinstance(reference, xr.Dataset):
        if not isinstance(data, xr.Dataset):
            raise TypeError(f"the forecast is a Dataset, so the {name} must be a Dataset too (got a DataArray)")
        absent = [v for v in reference.data_vars if v not in data.data_vars]
        if absent:
            raise UserError(f"the {name} lacks forecast variable(s) {absent}; it has {list(data.data_vars)}")
        data = data[list(reference.data_vars)]
    elif isinstance(data, xr.Dataset):
        if reference.name is None or reference.name not in data.data_vars:
            raise UserError(
                f"the forecast is a DataArray named {reference.name!r} but the {name} is a Dataset with variables "
                f"{list(data.data_vars)}; pass the matching DataArray or name the forecast after a variable"
            )
        data = data[reference.name]
    for dim in SPATIAL_DIMS:
        if dim not in reference.dims:
            raise UserError(f"the forecast has no {dim!r} dim (dims {tuple(reference.dims)})")
        if dim not in data.dims:
            raise UserError(f"the {name} has no {dim!r} dim (dims {tuple(data.dims)}); rename it to {dim!r}")
        position = _matching_positions(np.asarray(data[dim]), np.asarray(reference[dim]), dim, name, "forecast")
        if not np.array_equal(position, np.arange(position.size)):
            data = data.isel({dim: position})
        data = data.assign_coords({dim: reference[dim].values})
    if "level" in reference.dims:
        if "level" not in data.dims:
            raise UserError(f"the forecast has a 'level' dim but the {name} does not")
        levels = reference["level"].values
        absent = [lev for lev in levels.tolist() if lev not in set(data["level"].values.tolist())]
        if absent:
            raise UserError(f"the {name} lacks forecast level(s) {absent}; it has {data['level'].values.tolist()}")
        data = data.sel(level=levels)
    return data


def check_forecast_layout(forecast: Data) -> None:
    """ValueError unless ``forecast`` has the WB2 dims and datetime64 init times."""
    for dim in (INIT_DIM, LEAD_DIM, *SPATIAL_DIMS):
        if dim not in forecast.dims:
            raise UserError(
                f"the forecast has no {dim!r} dim (dims {dict(forecast.sizes)}); expected the WB2 layout (time=init "
                "time, prediction_timedelta=lead, [level], latitude, longitude): rename e.g. init_time -> time, "
                "lead_time -> prediction_timedelta, lat -> latitude, lon -> longitude"
            )
    if not np.issubdtype(forecast[INIT_DIM].dtype, np.datetime64):
        raise UserError(f"forecast 'time' (init time) must be datetime64, got dtype {forecast[INIT_DIM].dtype}")


def _check_forecast(forecast: Data) -> None:
    check_forecast_layout(forecast)
    if not np.issubdtype(forecast[LEAD_DIM].dtype, np.timedelta64):
        raise UserError(f"forecast 'prediction_timedelta' must be timedelta64, got {forecast[LEAD_DIM].dtype}")


def _check_truth(truth: Data) -> None:
    if INIT_DIM not in truth.dims:
        raise UserError(f"the truth has no 'time' dim (dims {tuple(truth.dims)}); its time must be the valid time")
    if not np.issubdtype(truth[INIT_DIM].dtype, np.datetime64):
        raise UserError(f"truth 'time' must be datetime64, got dtype {truth[INIT_DIM].dtype}")
    if not truth.indexes[INIT_DIM].is_unique:
        raise UserError("truth 'time' has duplicate values; drop them (e.g. truth.drop_duplicates('time'))")


def valid_times(forecast: Data) -> xr.DataArray:
    """(time, prediction_timedelta) DataArray of valid times ``time + prediction_timedelta``."""
    _check_forecast(forecast)
    valid = forecast[INIT_DIM] + forecast[LEAD_DIM]
    return valid.transpose(INIT_DIM, LEAD_DIM).rename("valid_time")


def truth_at_valid_times(truth: Data, forecast: Data) -> Data:
    """The truth at every valid time of the forecast, in forecast layout.

    Args:
        truth: dims ``(time, [level], latitude, longitude)`` with ``time`` the valid time.
        forecast: WB2 forecast; only its coordinates (and variable names) are used.

    Returns:
        ``truth`` restricted to the forecast's variables and levels, with dims
        ``(time, prediction_timedelta, ...)`` where element ``[t, tau]`` is the truth at
        ``t + tau`` (2-D coordinate ``valid_time``), latitude/longitude in the forecast's
        order. Valid times absent from ``truth.time`` are NaN (integer data is promoted to
        float); they are not dropped.
    """
    _check_forecast(forecast)
    _check_truth(truth)
    truth = _align_like(truth, forecast, "truth")
    valid = valid_times(forecast)
    per_lead = []
    for k in range(forecast.sizes[LEAD_DIM]):
        at_lead = truth.reindex({INIT_DIM: valid.isel({LEAD_DIM: k}).values})
        per_lead.append(at_lead.assign_coords({INIT_DIM: forecast[INIT_DIM].values}))
    out = xr.concat(per_lead, dim=forecast[LEAD_DIM], coords="minimal", compat="override", join="override")
    out = out.transpose(INIT_DIM, LEAD_DIM, ...)
    return out.assign_coords(valid_time=valid)


def _truth_available(truth: Data, forecast: Data) -> xr.DataArray:
    """(time, prediction_timedelta) bool: is the valid time present in ``truth.time``."""
    valid = valid_times(forecast)
    present = np.isin(valid.values, truth[INIT_DIM].values)
    return xr.DataArray(present, dims=valid.dims, coords={INIT_DIM: valid[INIT_DIM], LEAD_DIM: valid[LEAD_DIM]})


def _report_missing(available: xr.DataArray) -> None:
    if bool(available.all()):
        return
    n_missing = int((~available).sum())
    per_lead = available.sum(INIT_DIM)
    empty = int((per_lead == 0).sum())
    partial = int(((per_lead > 0) & (per_lead < available.sizes[INIT_DIM])).sum())
    warnings.warn(
        f"the truth has no data for {n_missing} of {available.size} (init time, lead) valid times: {empty} lead(s) "
        f"have no truth at all (metric NaN) and {partial} lead(s) average over fewer init times; see the "
        "'n_init_times' coordinate of the result",
        MissingTruthWarning,
        stacklevel=3,
    )


def _mean_over_init_times(per_init: Data, available: xr.DataArray) -> Data:
    """Mean over ``time`` of init times with truth; NaN for leads with none; adds ``n_init_times``."""
    count = available.sum(INIT_DIM)
    total = per_init.where(available, 0.0).sum(INIT_DIM, skipna=False)
    mean = total / count.where(count > 0)
    return mean.assign_coords(n_init_times=count)


def _prepare(forecast: Data, truth: Data) -> tuple[Data, Data, xr.DataArray]:
    truth_valid = truth_at_valid_times(truth, forecast)
    available = _truth_available(truth, forecast)
    _report_missing(available)
    return forecast, truth_valid.drop_vars("valid_time"), available


# --- metrics ---------------------------------------------------------------------------


def mse(forecast: Data, truth: Data, skipna: bool = False, weights: xr.DataArray | None = None) -> Data:
    """Mean squared error ``mean_t mean_w((f_t(tau) - o_{t+tau})^2)``.

    Args:
        forecast: dims ``(time, prediction_timedelta, [level], latitude, longitude)``.
        truth: dims ``(time, [level], latitude, longitude)``, time = valid time.
        skipna: skip NaN values in the spatial mean (see :func:`weighted_mean`).
        weights: spatial weights (default WB2's latitude weights); a region's are the latitude
            weights times its mask (``evaluation.regions``).

    Returns:
        dims ``(prediction_timedelta, [level])`` plus coordinate ``n_init_times``.
    """
    forecast, observed, available = _prepare(forecast, truth)
    per_init = weighted_mean((forecast - observed) ** 2, weights, skipna=skipna)
    return _mean_over_init_times(per_init, available)


def rmse(forecast: Data, truth: Data, skipna: bool = False, weights: xr.DataArray | None = None) -> Data:
    """WB2 headline RMSE: ``sqrt(mean_t MSE_t(tau))`` (mean over init times, then sqrt).

    Same arguments and output dims as :func:`mse`. Not the WeatherBench1 ``mean_t sqrt(MSE_t)``,
    which is :func:`rmse_sqrt_before_mean`.
    """
    return np.sqrt(mse(forecast, truth, skipna=skipna, weights=weights))


def rmse_sqrt_before_mean(
    forecast: Data, truth: Data, skipna: bool = False, weights: xr.DataArray | None = None
) -> Data:
    """WeatherBench1 / climate-learn RMSE ``mean_t sqrt(MSE_t(tau))``, a different number from :func:`rmse`.

    Only for comparison with WeatherBench1 numbers; same arguments and output as :func:`mse`.
    """
    forecast, observed, available = _prepare(forecast, truth)
    per_init = np.sqrt(weighted_mean((forecast - observed) ** 2, weights, skipna=skipna))
    return _mean_over_init_times(per_init, available)


def bias(forecast: Data, truth: Data, skipna: bool = False, weights: xr.DataArray | None = None) -> Data:
    """Mean error ``mean_t mean_w(f_t(tau) - o_{t+tau})`` (positive: forecast too high).

    Same arguments and output dims as :func:`mse`.
    """
    forecast, observed, available = _prepare(forecast, truth)
    per_init = weighted_mean(forecast - observed, weights, skipna=skipna)
    return _mean_over_init_times(per_init, available)


def acc(
    forecast: Data, truth: Data, climatology: Data, skipna: bool = False, weights: xr.DataArray | None = None
) -> Data:
    """Uncentered anomaly correlation coefficient, per init time, then averaged over init times.

    ``c = climatology at the valid time t + tau``; ``f' = f - c``, ``o' = o - c``;
    ``ACC_t = mean_w(f' o') / sqrt(mean_w(f'^2) mean_w(o'^2))``; ``ACC = mean_t ACC_t``.
    No spatial mean of the anomalies is removed. A forecast equal to the climatology has
    ``f' = 0`` and an undefined (NaN) ACC.

    Args:
        forecast: dims ``(time, prediction_timedelta, [level], latitude, longitude)``.
        truth: dims ``(time, [level], latitude, longitude)``, time = valid time.
        climatology: dims ``(dayofyear, hour, [level], latitude, longitude)``, looked up with
            :func:`climatology_at_valid_times`.
        skipna: skip NaN values in the spatial means.

    Returns:
        dims ``(prediction_timedelta, [level])`` plus coordinate ``n_init_times``.
    """
    forecast, observed, available = _prepare(forecast, truth)
    clim = _align_like(climatology, forecast, "climatology")
    clim = climatology_at_valid_times(clim, valid_times(forecast)).drop_vars("valid_time", errors="ignore")
    clim = clim.copy()
    clim.attrs = {}  # keep the climatology's provenance attrs out of the scores
    f_anom = forecast - clim
    o_anom = observed - clim
    covariance = weighted_mean(f_anom * o_anom, weights, skipna=skipna)
    f_var = weighted_mean(f_anom**2, weights, skipna=skipna)
    o_var = weighted_mean(o_anom**2, weights, skipna=skipna)
    per_init = covariance / np.sqrt(f_var * o_var)
    return _mean_over_init_times(per_init, available)


# --- climatology lookup and baselines ----------------------------------------------------


def _as_time_array(values, dim: str, name: str, kind: str) -> xr.DataArray:
    if isinstance(values, xr.DataArray):
        out = values
    else:
        array = np.atleast_1d(np.asarray(values))
        if kind == "datetime":
            array = np.asarray(pd.DatetimeIndex(array).values)
        else:
            array = np.asarray(pd.to_timedelta(array).values)
        out = xr.DataArray(array, dims=(dim,), coords={dim: array})
    expected = np.datetime64 if kind == "datetime" else np.timedelta64
    if not np.issubdtype(out.dtype, expected):
        raise UserError(f"{name} must be {kind}64 values, got dtype {out.dtype}")
    if bool(out.isnull().any()):
        raise UserError(f"{name} contains NaT")
    return out


def nearest_hours(hours, available_hours) -> np.ndarray:
    """Map hours of day to the nearest of ``available_hours`` on the 24 h circle.

    Exact matches map to themselves; a tie (e.g. 6 h between 0 h and 12 h) goes to the
    earlier hour (the one at or before it, going back around midnight).

    Args:
        hours: (...) integer hours of day 0..23.
        available_hours: (n,) hours of day present in a climatology.

    Returns:
        (...) hours taken from ``available_hours``.
    """
    hours = np.asarray(hours, dtype=np.int64)
    available = np.sort(np.asarray(available_hours, dtype=np.int64))
    forward = (available[None, :] - hours.reshape(-1, 1)) % 24  # hours ahead to each candidate
    backward = (hours.reshape(-1, 1) - available[None, :]) % 24  # hours back to each candidate
    distance = np.minimum(forward, backward) * 2 + (forward < backward)  # ties -> the earlier (backward) one
    return available[np.argmin(distance, axis=1)].reshape(hours.shape)


def climatology_at_valid_times(climatology: Data, valid_time) -> Data:
    """Select a WB2-layout climatology at given valid times.

    The day of year is pandas/xarray ``time.dt.dayofyear`` of the valid time (WB2's
    convention: 1 = Jan 1, 60 = Feb 29 in leap years and Mar 1 otherwise, 366 = Dec 31 of
    leap years), the hour is ``time.dt.hour``. When the climatology lacks the valid hour
    (e.g. it holds only 00 and 12 UTC, or a single hour), the nearest available hour on
    the 24 h circle is used, ties going to the earlier hour (:func:`nearest_hours`); a
    single-hour climatology thus applies to every hour.

    Args:
        climatology: dims ``(dayofyear, hour, ...)`` (:func:`open_climatology` layout).
        valid_time: datetime64 DataArray of any dims (e.g. ``(time, prediction_timedelta)``)
            or 1-D array-like (then the output dim is ``time``).

    Returns:
        ``climatology`` with ``(dayofyear, hour)`` replaced by the dims of ``valid_time``
        (in front) and a ``valid_time`` coordinate.
    """
    for dim in ("dayofyear", "hour"):
        if dim not in climatology.dims:
            raise UserError(f"the climatology has no {dim!r} dim (dims {tuple(climatology.dims)}); expected WB2 layout")
    valid = _as_time_array(valid_time, INIT_DIM, "valid_time", "datetime")
    stamps = pd.DatetimeIndex(valid.values.ravel())
    doy = np.asarray(stamps.day_of_year, dtype=np.int64).reshape(valid.shape)
    hour = np.asarray(stamps.hour, dtype=np.int64).reshape(valid.shape)
    have_doy = set(np.asarray(climatology["dayofyear"].values).tolist())
    lacking = sorted(set(np.unique(doy).tolist()) - have_doy)
    if lacking:
        raise UserError(
            f"the climatology lacks dayofyear value(s) {lacking[:10]}{' ...' if len(lacking) > 10 else ''} needed "
            "for the valid times; a WB2-layout climatology must hold dayofyear 1..366"
        )
    hour = nearest_hours(hour, climatology["hour"].values)
    coords = {name: coord for name, coord in valid.coords.items() if name not in ("dayofyear", "hour")}
    indexers = {
        "dayofyear": xr.DataArray(doy, dims=valid.dims, coords=coords),
        "hour": xr.DataArray(hour, dims=valid.dims, coords=coords),
    }
    out = climatology.sel(indexers).drop_vars(["dayofyear", "hour"])
    out = out.transpose(*valid.dims, ...)
    if "valid_time" not in out.coords:
        out = out.assign_coords(valid_time=(valid.dims, valid.values))
    return out


def persistence_forecast(truth: Data, init_times, leads) -> Data:
    """Persistence baseline ``f_t(tau) = o_t`` in forecast layout.

    Args:
        truth: dims ``(time, [level], latitude, longitude)``.
        init_times: (n_init,) datetime64 init times (array-like or DataArray).
        leads: (n_lead,) timedelta64 leads (array-like, e.g. ``pd.to_timedelta([6, 12], "h")``).

    Returns:
        dims ``(time, prediction_timedelta, [level], latitude, longitude)``; NaN where the
        truth lacks an init time.
    """
    _check_truth(truth)
    init = _as_time_array(init_times, INIT_DIM, "init_times", "datetime")
    lead = _as_time_array(leads, LEAD_DIM, "leads", "timedelta")
    at_init = truth.reindex({INIT_DIM: init.values})
    return at_init.expand_dims({LEAD_DIM: lead.values}).transpose(INIT_DIM, LEAD_DIM, ...)


def climatology_forecast(climatology: Data, init_times, leads, like: Data | None = None) -> Data:
    """Climatology baseline ``f_t(tau) = c(t + tau)`` in forecast layout.

    Args:
        climatology: dims ``(dayofyear, hour, [level], latitude, longitude)``.
        init_times: (n_init,) datetime64 init times.
        leads: (n_lead,) timedelta64 leads.
        like: optional truth (or forecast) whose variables, levels and latitude/longitude
            order the baseline takes.

    Returns:
        dims ``(time, prediction_timedelta, [level], latitude, longitude)`` with a
        ``valid_time`` coordinate.
    """
    init = _as_time_array(init_times, INIT_DIM, "init_times", "datetime")
    lead = _as_time_array(leads, LEAD_DIM, "leads", "timedelta")
    if like is not None:
        climatology = _align_like(climatology, like, "climatology")
    valid = xr.DataArray(init.values[:, None] + lead.values[None, :], dims=(INIT_DIM, LEAD_DIM))
    valid = valid.assign_coords({INIT_DIM: init.values, LEAD_DIM: lead.values})
    return climatology_at_valid_times(climatology, valid)
