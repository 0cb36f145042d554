"""WeatherBench2-comparable skill metrics of gridded forecasts: the metric engine and its xarray API.

The definitions are WeatherBench2's (WB2), each in its ``Metric`` class below. Notation: forecast f,
truth o, climatology c, initialization time t, lead time tau.

The engine has WB2's ``metrics.py`` shape: a :class:`Metric` is a small class with its name,
units and definition; its ``statistics`` map aligned numpy arrays of a chunk of init times to
per-init-time spatial means (every region at once); :class:`Statistics` sums them over the init
times whose valid time is in the truth (chunks combine by addition of sums and counts), and
``finalize`` turns their means into the score once (e.g. RMSE = sqrt(mean MSE)). :data:`METRICS`
is the registry by name. ``s2forecast evaluate`` streams blocks of init times through it
(``evaluation.scoring``); the xarray functions below (:func:`rmse`, :func:`acc`, ...;
:meth:`Metric.compute` for any registered metric) run the same classes over a whole forecast,
so each definition exists once.

Layouts (WB2):
    forecast: dims ``(time, prediction_timedelta, [member], [level], latitude, longitude)``; ``time``
        is the initialization time (datetime64), ``prediction_timedelta`` the lead (timedelta64),
        the member dim one of :data:`MEMBER_DIMS` (for the ensemble metrics).
    truth: dims ``(time, [level], latitude, longitude)``; ``time`` is the valid time.
    climatology: dims ``(dayofyear, hour, [level], latitude, longitude)``, dayofyear 1..366
        as pandas/xarray ``time.dt.dayofyear`` numbers dates, hour of day 0..23.

Every xarray function accepts DataArrays or Datasets (a Dataset is scored variable by variable;
the truth and climatology must hold every forecast variable). Latitude may run north ->
south or south -> north independently in forecast, truth and climatology: they are aligned
by coordinate value, never by position. Dask inputs give dask results.

Missing truth: a valid time ``t + tau`` absent from the truth's ``time`` coordinate is
reported, not dropped silently. :func:`truth_at_valid_times` fills it with NaN; the metrics
average each lead only over the init times whose valid time is in the truth, return NaN
for a lead with no truth at all, attach the number of init times used per lead as the
coordinate ``n_init_times`` and emit a :class:`MissingTruthWarning`. In a truth of separate
trajectories (a ``trajectory`` coordinate along ``time``: s2forecast's shallow-water stores) a valid
time in another trajectory than its init time's is missing truth too: another run, not this
forecast's future. NaN *values* inside
the data (as opposed to missing times) propagate to the metric unless ``skipna=True``,
which then skips them in the spatial mean only.
"""

import math
import warnings
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.data.coordinates import coordinate_tolerance
from s2forecast.data.store import require_time_dim
from s2forecast.times import cftime_problem, format_time
from s2forecast.user_errors import UserError

Data = xr.DataArray | xr.Dataset

SPATIAL_DIMS = ("latitude", "longitude")
INIT_DIM = "time"
LEAD_DIM = "prediction_timedelta"
MEMBER_DIMS = ("realization", "number", "member")  # WB2, ECMWF/cfgrib, generic


class MissingTruthWarning(UserWarning):
    """Some valid times of a forecast have no truth; the affected leads use fewer init times."""


def member_dim(dims) -> str | None:
    """The ensemble member dim among ``dims`` (one of ``MEMBER_DIMS``), or None.

    Raises:
        ValueError: more than one of them.
    """
    found = [d for d in MEMBER_DIMS if d in dims]
    if len(found) > 1:
        raise UserError(f"the forecast has several member dims {found}; keep one of {MEMBER_DIMS}")
    return found[0] if found else None


def check_members(members: int, dim: str) -> None:
    """ValueError for an "ensemble" of fewer than two members (the fair CRPS and spread need two)."""
    if members == 0:
        raise UserError(
            f"the forecast's member dim {dim!r} is empty: the file holds no forecast; check how it was written"
        )
    if members < 2:
        raise UserError(
            f"the forecast's member dim {dim!r} has {members} member; CRPS and spread need at least 2: "
            f"drop the dim (forecast.isel({dim}=0)) to score it as a deterministic forecast"
        )


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
            position = matching_positions(np.asarray(weights[dim]), np.asarray(x[dim]), dim, "weights", "x")
            if not np.array_equal(position, np.arange(position.size)):
                weights = weights.isel({dim: position})
            weights = weights.assign_coords({dim: x[dim].values})
        elif weights.sizes[dim] != x.sizes[dim]:
            raise UserError(f"weights have {weights.sizes[dim]} {dim!r} entries, x has {x.sizes[dim]}")
    if bool(weights.isnull().any()):
        raise UserError("weights contain NaN")
    return weights


# --- alignment helpers -----------------------------------------------------------------


def matching_positions(source: np.ndarray, target: np.ndarray, dim, source_name: str, target_name: str) -> np.ndarray:
    """Positions in ``source`` of each value of ``target`` (same set of values, any order)."""
    if source.shape != target.shape:
        raise UserError(
            f"{source_name} and {target_name} have different {dim!r} coordinates ({source.size} vs {target.size} "
            "values); regrid one of them onto the other's grid first"
        )
    source_order = np.argsort(source, kind="stable")
    target_order = np.argsort(target, kind="stable")
    numeric = np.issubdtype(source.dtype, np.number) and np.issubdtype(target.dtype, np.number)
    tolerance = coordinate_tolerance(target) if numeric else 0.0
    if numeric:
        same = np.allclose(source[source_order], target[target_order], rtol=0.0, atol=tolerance)
    else:
        same = np.array_equal(source[source_order], target[target_order])
    if not same:
        bad = np.flatnonzero(~np.isclose(source[source_order], target[target_order], rtol=0.0, atol=tolerance))
        i = bad[0] if bad.size else 0
        raise UserError(
            f"{source_name} and {target_name} have different {dim!r} values (e.g. {source[source_order][i]!r} vs "
            f"{target[target_order][i]!r}); regrid one of them onto the other's grid first"
        )
    position = np.empty_like(target_order)
    position[target_order] = source_order
    return position


def align_like(data: Data, reference: Data, name: str) -> Data:
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
        position = matching_positions(np.asarray(data[dim]), np.asarray(reference[dim]), dim, name, "forecast")
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
        if problem := cftime_problem(forecast[INIT_DIM].values, forecast[INIT_DIM].encoding.get("calendar")):
            raise UserError(f"the forecast's 'time' (init time) {problem}")
        raise UserError(f"forecast 'time' (init time) must be datetime64, got dtype {forecast[INIT_DIM].dtype}")


def _check_forecast(forecast: Data) -> None:
    check_forecast_layout(forecast)
    if not np.issubdtype(forecast[LEAD_DIM].dtype, np.timedelta64):
        raise UserError(f"forecast 'prediction_timedelta' must be timedelta64, got {forecast[LEAD_DIM].dtype}")


def _check_truth(truth: Data) -> None:
    require_time_dim(truth, "the truth")  # its time is the valid time
    check_truth_times(truth)


def check_truth_times(truth: Data) -> None:
    """Refuse a truth whose time axis is not datetime64 (naming a cftime calendar) or repeats a time."""
    if not np.issubdtype(truth[INIT_DIM].dtype, np.datetime64):
        if problem := cftime_problem(truth[INIT_DIM].values, truth[INIT_DIM].encoding.get("calendar")):
            raise UserError(f"the truth's 'time' {problem}")
        raise UserError(f"truth 'time' must be datetime64, got dtype {truth[INIT_DIM].dtype}")
    index = truth.indexes[INIT_DIM]
    if not index.is_unique:
        repeated = index[index.duplicated()]
        raise UserError(
            f"truth time {format_time(repeated[0])} appears more than once ({repeated.unique().size} repeated time(s) "
            "in all); a score would count it twice: remove the repeated time steps (e.g. "
            "truth.drop_duplicates('time'))"
        )


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
    available = _truth_available(truth, forecast)
    truth = align_like(truth.drop_vars("trajectory", errors="ignore"), forecast, "truth")
    valid = valid_times(forecast)
    per_lead = []
    for k in range(forecast.sizes[LEAD_DIM]):
        at_lead = truth.reindex({INIT_DIM: valid.isel({LEAD_DIM: k}).values})
        per_lead.append(at_lead.assign_coords({INIT_DIM: forecast[INIT_DIM].values}))
    out = xr.concat(per_lead, dim=forecast[LEAD_DIM], coords="minimal", compat="override", join="override")
    out = out.transpose(INIT_DIM, LEAD_DIM, ...)
    if not bool(available.all()):  # present in another trajectory only: no truth for this forecast
        out = out.where(available)
    return out.assign_coords(valid_time=valid)


def truth_available(truth: Data, init: np.ndarray, leads: np.ndarray) -> np.ndarray:
    """(init, lead) bool: has ``truth`` the valid time ``init + lead`` (datetime64, timedelta64), in
    the init time's trajectory when the truth has a ``trajectory`` coordinate along ``time`` (an
    init time not in the truth: any trajectory)."""
    times = truth[INIT_DIM].values
    valid = np.asarray(init)[:, None] + np.asarray(leads)[None, :]
    present = np.isin(valid, times)
    if "trajectory" not in truth.coords or truth["trajectory"].dims != (INIT_DIM,):
        return present
    order = np.argsort(times, kind="stable")
    sorted_times, trajectories = times[order], truth["trajectory"].values[order]

    def trajectory_of(t: np.ndarray) -> np.ndarray:
        position = np.searchsorted(sorted_times, t).clip(max=sorted_times.size - 1)
        return np.where(sorted_times[position] == t, trajectories[position], -1)

    own = trajectory_of(np.asarray(init))[:, None]
    return present & ((trajectory_of(valid) == own) | (own < 0))


def _truth_available(truth: Data, forecast: Data) -> xr.DataArray:
    """(time, prediction_timedelta) bool: :func:`truth_available` for the forecast's times."""
    valid = valid_times(forecast)
    present = truth_available(truth, forecast[INIT_DIM].values, forecast[LEAD_DIM].values)
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
        stacklevel=4,
    )


def _prepare(forecast: Data, truth: Data) -> tuple[Data, Data, xr.DataArray]:
    truth_valid = truth_at_valid_times(truth, forecast)
    available = _truth_available(truth, forecast)
    _report_missing(available)
    return forecast, truth_valid.drop_vars("valid_time"), available


# --- the metric engine: per-chunk statistics, summed over init times, finalized once ----------------


def spatial_mean(x: np.ndarray, weights: np.ndarray, skipna: bool = False) -> np.ndarray:
    """``(..., lat, lon)`` -> ``(region, ...)``: the mean per region, ``weights (region, lat, lon)`` each summing to 1.

    NaN inside a region makes its mean NaN (WB2, skipna=False); NaN outside it does not. With ``skipna``
    NaN points are left out and the weights renormalized over the others (NaN where none is left).
    """
    axes = ([1, 2], [x.ndim - 2, x.ndim - 1])
    missing = np.isnan(x)
    if not skipna and not missing.any():  # the usual case: one contraction, no NaN bookkeeping (10x faster)
        return np.tensordot(weights, x, axes=axes)
    mean = np.tensordot(weights, np.where(missing, 0.0, x), axes=axes)
    if skipna:
        if not missing.any():  # the same mean, without dividing by weights that sum to 1
            return mean
        with np.errstate(invalid="ignore", divide="ignore"):
            return mean / np.tensordot(weights, (~missing).astype(np.float64), axes=axes)
    inside = (weights > 0).astype(np.float64)
    return np.where(np.tensordot(inside, missing.astype(np.float64), axes=axes) > 0, np.nan, mean)


def _ensemble_mean(forecast: np.ndarray, member_axis: int | None) -> np.ndarray:
    return forecast if member_axis is None else forecast.mean(axis=member_axis)


class Metric:
    """A score (WB2's ``Metric``): per-init-time ``statistics`` of a chunk, summed over init times by
    :class:`Statistics`, then ``finalize`` of their means.

    Class attributes:
        name: the registry key and the ``metric`` label of results files.
        units: ``"field"`` (the field's units), ``"field**2"`` or ``"1"`` (:func:`metric_units`).
        definition: what results files record as ``<name>_definition``; None where another text
            states it (spread's states spread_skill; the rank histogram's is its variable's long_name).
        provides: the statistics ``statistics`` returns; metrics that share one (rmse and
            spread_skill: ``mse``) have it computed once (:func:`compute_statistics`).
        needs_climatology: ``statistics`` uses the climatology at the valid times (ACC's anomalies).
        needs_members: only for ensemble forecasts (the rank histogram).
        min_members: the members its ensemble statistics need (the fair CRPS and spread: 2).
        statistic_dims: dims a statistic has after the forecast's (the rank histogram's ``rank``).

    Arrays of ``statistics``: forecast ``(time, lead, [member], [level], lat, lon)`` with the member
    axis ``member_axis`` (None: deterministic, a one-member ensemble for the ensemble metrics), truth
    and climatology ``(time, lead, [level], lat, lon)``, weights ``(region, lat, lon)`` each summing to 1
    (:func:`spatial_mean`); statistics ``(region, time, lead, [level], *statistic_dims)``. Any leading
    dims work in place of ``(time, lead, [level])``, and a negative ``member_axis`` counts from the end.
    """

    name: ClassVar[str]
    units: ClassVar[str] = "field"
    definition: ClassVar[str | None] = None
    provides: ClassVar[tuple[str, ...]]
    needs_climatology: ClassVar[bool] = False
    needs_members: ClassVar[bool] = False
    min_members: ClassVar[int] = 1
    statistic_dims: ClassVar[tuple[str, ...]] = ()

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False) -> dict:
        raise NotImplementedError

    def finalize(self, means: Mapping):
        """The score from the means over init times of the statistics (numpy arrays or DataArrays)."""
        return means[self.name]

    def compute(
        self,
        forecast: Data,
        truth: Data,
        climatology: Data | None = None,
        skipna: bool = False,
        weights: xr.DataArray | None = None,
    ) -> Data:
        """This metric of a whole forecast, in xarray (what :func:`rmse`, :func:`acc`, ... are).

        Args:
            forecast: dims ``(time, prediction_timedelta, [member], [level], latitude, longitude)``.
            truth: dims ``(time, [level], latitude, longitude)``, time = valid time.
            climatology: dims ``(dayofyear, hour, [level], latitude, longitude)``, for metrics that
                need one (ACC); looked up at the valid times (:func:`climatology_at_valid_times`).
            skipna: skip NaN values in the spatial means (see :func:`spatial_mean`).
            weights: spatial weights over latitude and/or longitude (default WB2's latitude weights;
                a region's are the latitude weights times its mask, ``evaluation.regions``), aligned by
                coordinate value.

        Returns:
            dims ``(prediction_timedelta, [level], *statistic_dims)`` plus coordinate ``n_init_times``.
        """
        forecast, observed, available = _prepare(forecast, truth)
        clim = None
        if self.needs_climatology:
            if climatology is None:
                raise UserError(f"metric {self.name!r} needs a climatology")
            clim = align_like(climatology, forecast, "climatology")
            clim = climatology_at_valid_times(clim, valid_times(forecast)).drop_vars("valid_time", errors="ignore")
            clim = clim.copy()
            clim.attrs = {}  # keep the climatology's provenance attrs out of the scores

        def one(f: xr.DataArray, o: xr.DataArray, c: xr.DataArray | None) -> xr.DataArray:
            per_init = _per_init_statistics(self, f, o, c, _grid_weights(weights, f), skipna)
            return Statistics.of_chunk(per_init, available).finalize(self)

        if isinstance(forecast, xr.Dataset):
            return xr.Dataset(
                {v: one(forecast[v], observed[v], None if clim is None else clim[v]) for v in forecast.data_vars}
            )
        return one(forecast, observed, clim).rename(forecast.name)


class MSE(Metric):
    """Mean squared error ``mean_t mean_w((f_t(tau) - o_{t+tau})^2)``; an ensemble's mean is scored."""

    name = "mse"
    units = "field**2"
    definition = "mean over init times of the latitude-weighted mean of (forecast - truth)**2"
    provides = ("mse",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False):
        return {"mse": spatial_mean((_ensemble_mean(forecast, member_axis) - truth) ** 2, weights, skipna)}


class RMSE(MSE):
    """WB2's headline RMSE ``sqrt(mean_t MSE_t(tau))``: the mean over init times first, then the root
    (not WeatherBench1's ``mean_t sqrt(MSE_t)``, which is :class:`RMSESqrtBeforeMean`)."""

    name = "rmse"
    units = "field"
    definition = "sqrt(mean over init times of the latitude-weighted MSE) (WeatherBench2)"

    def finalize(self, means):
        return np.sqrt(means["mse"])


class RMSESqrtBeforeMean(Metric):
    """WeatherBench1 / climate-learn RMSE ``mean_t sqrt(MSE_t(tau))``, a different number from :class:`RMSE`."""

    name = "rmse_sqrt_before_mean"
    definition = "mean over init times of the per-init-time RMSE (WeatherBench1, climate-learn; not WeatherBench2's)"
    provides = ("rmse_sqrt_before_mean",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False):
        mse = spatial_mean((_ensemble_mean(forecast, member_axis) - truth) ** 2, weights, skipna)
        return {"rmse_sqrt_before_mean": np.sqrt(mse)}


class Bias(Metric):
    """Mean error ``mean_t mean_w(f_t(tau) - o_{t+tau})`` (positive: forecast too high)."""

    name = "bias"
    definition = "mean over init times of the latitude-weighted mean of forecast - truth"
    provides = ("bias",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False):
        return {"bias": spatial_mean(_ensemble_mean(forecast, member_axis) - truth, weights, skipna)}


class ACC(Metric):
    """Uncentered anomaly correlation per init time, averaged over init times (WB2).

    ``c`` = the climatology at the valid time ``t + tau``; ``f' = f - c``, ``o' = o - c``;
    ``ACC_t = mean_w(f' o') / sqrt(mean_w(f'^2) mean_w(o'^2))``; ``ACC = mean_t ACC_t``. No spatial
    mean of the anomalies is removed. A forecast equal to the climatology has ``f' = 0`` and an
    undefined (NaN) ACC.
    """

    name = "acc"
    units = "1"
    definition = (
        "uncentered anomaly correlation per init time w.r.t. the climatology at the valid time, averaged over "
        "init times (WeatherBench2); undefined (NaN) for the climatology source"
    )
    provides = ("acc",)
    needs_climatology = True

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False):
        f = _ensemble_mean(forecast, member_axis) - climatology
        o = truth - climatology
        covariance = spatial_mean(f * o, weights, skipna)
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "acc": covariance / np.sqrt(spatial_mean(f**2, weights, skipna) * spatial_mean(o**2, weights, skipna))
            }


class EnsembleMeanRMSE(RMSE):
    """RMSE of the ensemble mean (WB2 ``EnsembleMeanMSE``, then sqrt after the time mean)."""

    name = "ensemble_mean_rmse"
    definition = (
        "sqrt(mean over init times of the latitude-weighted MSE of the ensemble mean) (WeatherBench2 "
        "EnsembleMeanMSE); = rmse for the one-member baselines"
    )


class Spread(Metric):
    """sqrt(mean over init times of the area-weighted unbiased ensemble variance) (WB2 ``EnsembleVariance``);
    0 for a deterministic forecast."""

    name = "spread"
    min_members = 2
    definition = (
        "sqrt(mean over init times of the area-weighted unbiased ensemble variance); "
        "spread_skill = spread / ensemble_mean_rmse (WeatherBench2)"
    )
    provides = ("ensemble_variance",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False):
        if member_axis is None:
            return {"ensemble_variance": spatial_mean(0.0 * forecast, weights, skipna)}  # 0, NaN where the forecast is
        return {"ensemble_variance": spatial_mean(forecast.var(axis=member_axis, ddof=1), weights, skipna)}

    def finalize(self, means):
        return np.sqrt(means["ensemble_variance"])


class SpreadSkill(Metric):
    """Spread / ensemble-mean RMSE: WB2's spread-skill ratio (WB2 calls it biased). A reliable
    ensemble of M members gives sqrt(M / (M + 1)), not 1 (0.82 at M = 2, 0.94 at M = 8): the
    ensemble mean of M members errs by the truth's spread times sqrt(1 + 1/M)
    (``reliable_spread_skill``)."""

    name = "spread_skill"
    min_members = 2
    units = "1"
    definition = None  # stated in spread's
    provides = ("ensemble_variance", "mse")

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False):
        return {
            **Spread().statistics(forecast, truth, weights, member_axis, skipna=skipna),
            **MSE().statistics(forecast, truth, weights, member_axis, skipna=skipna),
        }

    def finalize(self, means):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(means["ensemble_variance"]) / np.sqrt(means["mse"])


def reliable_spread_skill(members: int) -> float:
    """The spread-skill ratio (``SpreadSkill``) of a reliable ``members``-member ensemble:
    sqrt(M / (M + 1)) (Fortin et al. 2014)."""
    return float(np.sqrt(members / (members + 1)))


class CRPS(Metric):
    """Fair (unbiased) CRPS, WB2's definition: ``mean_m |X_m - Y| - 1/(2M(M-1)) sum_{i,j} |X_i - X_j|``.

    The pair sum uses the sorted members, ``sum_{i,j}|X_i - X_j| = 2 sum_k (2k - M - 1) X_(k)``
    (k = 1..M), O(M log M) instead of O(M^2). A deterministic forecast has no pair term (WB2's
    ``_pointwise_crps_spread`` of one member is 0): its CRPS is its mean absolute error.
    """

    name = "crps"
    min_members = 2
    definition = (
        "fair CRPS mean_m |X_m - Y| - sum_ij |X_i - X_j| / (2 M (M - 1)), area-weighted, averaged over init times "
        "(WeatherBench2)"
    )
    provides = ("crps",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False):
        if member_axis is None:
            return {"crps": spatial_mean(np.abs(forecast - truth), weights, skipna)}
        m = forecast.shape[member_axis]
        skill = np.abs(forecast - np.expand_dims(truth, member_axis)).mean(axis=member_axis)
        ranked = np.sort(forecast, axis=member_axis)
        shape = [1] * forecast.ndim
        shape[member_axis] = m
        k = np.arange(1, m + 1, dtype=np.float64).reshape(shape)
        pair_sum = 2.0 * ((2.0 * k - m - 1.0) * ranked).sum(axis=member_axis)
        return {"crps": spatial_mean(skill - pair_sum / (2.0 * m * (m - 1)), weights, skipna)}


class RankHistogram(Metric):
    """Area-weighted frequency of the truth's rank among the members (WB2 ``RankHistogram``).

    The rank is the number of members below the truth; a truth equal to ``e`` members is shared
    equally among ranks ``below .. below + e`` (WB2 breaks such ties at random); a point where the
    truth or a member is NaN has no rank (NaN, as every other metric there). Statistic shape
    ``(region, time, lead, [level], rank)`` with ``rank`` = 0..M. Ensemble forecasts only.
    """

    name = "rank_histogram"
    units = "1"
    provides = ("rank_histogram",)
    needs_members = True
    statistic_dims = ("rank",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None, skipna=False):
        m = forecast.shape[member_axis]
        o = np.expand_dims(truth, member_axis)
        below = (forecast < o).sum(axis=member_axis)
        equal = (forecast == o).sum(axis=member_axis)
        ranks = np.arange(m + 1).reshape((m + 1,) + (1,) * truth.ndim)
        one_hot = ((ranks >= below) & (ranks <= below + equal)) / (equal + 1.0)  # (rank, ..., lat, lon)
        missing = np.isnan(truth) | np.isnan(forecast).any(axis=member_axis)  # comparisons with NaN are False
        one_hot = np.where(missing, np.nan, one_hot)
        return {"rank_histogram": np.moveaxis(spatial_mean(one_hot, weights, skipna), 1, -1)}


METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        RMSE(), ACC(), Bias(), EnsembleMeanRMSE(), CRPS(), Spread(), SpreadSkill(), RankHistogram(), MSE(),
        RMSESqrtBeforeMean(),
    )
}  # fmt: skip


def get_metric(name: str) -> Metric:
    """The registered metric ``name``; ValueError naming the known ones otherwise."""
    if name not in METRICS:
        raise UserError(f"unknown metric {name!r}; known metrics: {', '.join(METRICS)}")
    return METRICS[name]


def metric_units(name: str, field_units: str) -> str:
    """Units of metric ``name`` of a field in ``field_units`` (``"1"`` for ratios and frequencies)."""
    units = get_metric(name).units
    if units == "field**2":
        return f"({field_units})**2" if field_units else ""
    return field_units if units == "field" else units


def compute_statistics(
    metrics: Iterable[Metric], forecast, truth, weights, member_axis=None, climatology=None, skipna=False
) -> dict[str, np.ndarray]:
    """Every statistic the ``metrics`` need, each computed once (array conventions: :class:`Metric`).

    With ``skipna`` every statistic covers the same points: those where the truth and every member of
    the forecast are not NaN (:func:`_on_common_points`)."""
    if skipna:
        forecast, truth = _on_common_points(forecast, truth, member_axis)
    stats = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for metric in metrics:
            if not all(key in stats for key in metric.provides):
                stats.update(metric.statistics(forecast, truth, weights, member_axis, climatology, skipna))
    return stats


def _on_common_points(forecast: np.ndarray, truth: np.ndarray, member_axis: int | None):
    """``forecast`` and ``truth`` with NaN wherever either is NaN (every member where one member is).

    Left out point by point, each spatial mean would cover its own points: ACC's covariance only
    where both are finite but its forecast term also where only the truth is NaN (ACC above 1), or
    the spread where the truth is NaN but the RMSE beside it not."""
    missing = np.isnan(forecast)
    if member_axis is not None:
        missing = missing.any(axis=member_axis)
    missing = missing | np.isnan(truth)
    if not missing.any():
        return forecast, truth
    every_member = missing if member_axis is None else np.expand_dims(missing, member_axis)
    return np.where(every_member, np.nan, forecast), np.where(missing, np.nan, truth)


@dataclass(frozen=True)
class Statistics:
    """Metric statistics summed over the init times whose valid time is in the truth, and those init times
    counted per lead: what a chunk of init times contributes (:meth:`of_chunk`).

    Chunks combine by addition (:meth:`combine`, ``+``; in any order and grouping, e.g. across workers),
    and :meth:`finalize` makes a metric of the means: a metric of two chunks combined is that of one pass
    over both.

    Attributes:
        sums: statistic name -> DataArray with the per-init statistic's dims less ``time``
            (e.g. ``(region, prediction_timedelta, [level])``).
        counts: ``(prediction_timedelta,)`` init times summed per lead.
    """

    sums: Mapping[str, xr.DataArray]
    counts: xr.DataArray

    @classmethod
    def of_chunk(cls, per_init: Mapping[str, xr.DataArray], available: xr.DataArray) -> "Statistics":
        """Sum per-init-time statistics (dims ``time``, ``prediction_timedelta``, ...) over the init times
        where ``available`` ``(time, prediction_timedelta)`` says the truth has the valid time."""
        sums = {name: stat.where(available, 0.0).sum(INIT_DIM, skipna=False) for name, stat in per_init.items()}
        return cls(sums, available.sum(INIT_DIM))

    def combine(self, other: "Statistics") -> "Statistics":
        """The statistics of both chunks (their init times together)."""
        if set(self.sums) != set(other.sums):
            raise UserError(f"cannot combine statistics {sorted(self.sums)} with {sorted(other.sums)}")
        return Statistics(
            {name: total + other.sums[name] for name, total in self.sums.items()}, self.counts + other.counts
        )

    __add__ = combine

    @classmethod
    def concat(cls, parts: "list[Statistics]", dim: str) -> "Statistics":
        """The statistics of disjoint ranges of ``dim`` (e.g. leads scored by separate tasks), joined in order."""
        if len(parts) == 1:
            return parts[0]
        sums = {name: xr.concat([part.sums[name] for part in parts], dim) for name in parts[0].sums}
        return cls(sums, xr.concat([part.counts for part in parts], dim))

    def means(self) -> dict[str, xr.DataArray]:
        """Mean over the summed init times of each statistic; NaN for a lead without any."""
        count = self.counts.where(self.counts > 0)
        return {name: total / count for name, total in self.sums.items()}

    def finalize(self, metric: Metric | str) -> xr.DataArray:
        """The metric from the means, with the init times per lead as coordinate ``n_init_times``."""
        metric = get_metric(metric) if isinstance(metric, str) else metric
        with np.errstate(invalid="ignore", divide="ignore"):
            value = metric.finalize(self.means())
        return value.assign_coords(n_init_times=self.counts)


def _grid_weights(weights: xr.DataArray | None, x: xr.DataArray) -> np.ndarray:
    """(1, lat, lon) weights on ``x``'s grid, summing to 1: ``weights`` (default :func:`latitude_weights`)
    aligned to ``x`` by coordinate value and broadcast over the spatial dim they lack."""
    if weights is None:
        weights = latitude_weights(x["latitude"])
    weights = _align_weights(weights, x)
    extra = [d for d in weights.dims if d not in SPATIAL_DIMS]
    if extra:
        raise UserError(f"metric weights are over latitude and/or longitude; these have dims {extra} too")
    shape = [x.sizes[d] if d in weights.dims else 1 for d in SPATIAL_DIMS]
    own = weights.transpose(*[d for d in SPATIAL_DIMS if d in weights.dims]).values.reshape(shape)
    grid = np.broadcast_to(own.astype(np.float64), tuple(x.sizes[d] for d in SPATIAL_DIMS))
    return (grid / grid.sum())[None]


def _per_init_statistics(metric: Metric, forecast, truth, climatology, weights, skipna) -> dict[str, xr.DataArray]:
    """A metric's statistics per init time (dims of ``truth`` less latitude and longitude, plus the
    metric's ``statistic_dims``), lazily for dask inputs."""
    member = member_dim(forecast.dims)
    if member is None and metric.needs_members:
        raise UserError(f"metric {metric.name!r} needs an ensemble forecast (a member dim, one of {MEMBER_DIMS})")
    if member is not None and metric.min_members > 1:  # one member: CRPS and spread were NaN
        check_members(forecast.sizes[member], member)
    arrays = [forecast, truth] + ([] if climatology is None else [climatology])
    spatial = list(SPATIAL_DIMS)
    core = [[member, *spatial] if member else spatial] + [spatial] * (len(arrays) - 1)

    def per_init(f, o, c=None):
        as_float = [None if a is None else np.asarray(a, dtype=np.float64) for a in (f, o, c)]
        stats = compute_statistics([metric], *as_float[:2], weights, -3 if member else None, as_float[2], skipna)
        out = tuple(stats[name][0] for name in metric.provides)  # the one region
        return out if len(out) > 1 else out[0]

    n = len(metric.provides)
    sizes = {"rank": forecast.sizes[member] + 1} if "rank" in metric.statistic_dims else {}  # ranks 0..M
    out = xr.apply_ufunc(
        per_init,
        *arrays,
        input_core_dims=core,
        output_core_dims=[list(metric.statistic_dims)] * n,
        dask="parallelized",
        output_dtypes=[np.float64] * n,
        dask_gufunc_kwargs={"allow_rechunk": True, "output_sizes": sizes},
    )
    return dict(zip(metric.provides, out if n > 1 else (out,), strict=True))


# --- the metrics as xarray functions -------------------------------------------------------------


def mse(forecast: Data, truth: Data, skipna: bool = False, weights: xr.DataArray | None = None) -> Data:
    """Mean squared error ``mean_t mean_w((f_t(tau) - o_{t+tau})^2)`` (:class:`MSE`).

    Args:
        forecast: dims ``(time, prediction_timedelta, [level], latitude, longitude)``.
        truth: dims ``(time, [level], latitude, longitude)``, time = valid time.
        skipna: skip NaN values in the spatial mean (see :func:`spatial_mean`).
        weights: spatial weights (default WB2's latitude weights); a region's are the latitude
            weights times its mask (``evaluation.regions``).

    Returns:
        dims ``(prediction_timedelta, [level])`` plus coordinate ``n_init_times``.
    """
    return METRICS["mse"].compute(forecast, truth, skipna=skipna, weights=weights)


def rmse(forecast: Data, truth: Data, skipna: bool = False, weights: xr.DataArray | None = None) -> Data:
    """WB2 headline RMSE: ``sqrt(mean_t MSE_t(tau))`` (mean over init times, then sqrt; :class:`RMSE`).

    Same arguments and output dims as :func:`mse`. Not the WeatherBench1 ``mean_t sqrt(MSE_t)``,
    which is :func:`rmse_sqrt_before_mean`.
    """
    return METRICS["rmse"].compute(forecast, truth, skipna=skipna, weights=weights)


def rmse_sqrt_before_mean(
    forecast: Data, truth: Data, skipna: bool = False, weights: xr.DataArray | None = None
) -> Data:
    """WeatherBench1 / climate-learn RMSE ``mean_t sqrt(MSE_t(tau))``, a different number from :func:`rmse`.

    Only for comparison with WeatherBench1 numbers; same arguments and output as :func:`mse`.
    """
    return METRICS["rmse_sqrt_before_mean"].compute(forecast, truth, skipna=skipna, weights=weights)


def bias(forecast: Data, truth: Data, skipna: bool = False, weights: xr.DataArray | None = None) -> Data:
    """Mean error ``mean_t mean_w(f_t(tau) - o_{t+tau})`` (positive: forecast too high; :class:`Bias`).

    Same arguments and output dims as :func:`mse`.
    """
    return METRICS["bias"].compute(forecast, truth, skipna=skipna, weights=weights)


def acc(
    forecast: Data, truth: Data, climatology: Data, skipna: bool = False, weights: xr.DataArray | None = None
) -> Data:
    """Uncentered anomaly correlation coefficient per init time, averaged over init times (:class:`ACC`).

    Args:
        forecast: dims ``(time, prediction_timedelta, [level], latitude, longitude)``.
        truth: dims ``(time, [level], latitude, longitude)``, time = valid time.
        climatology: dims ``(dayofyear, hour, [level], latitude, longitude)``, looked up with
            :func:`climatology_at_valid_times`.
        skipna: skip NaN values in the spatial means.

    Returns:
        dims ``(prediction_timedelta, [level])`` plus coordinate ``n_init_times``.
    """
    return METRICS["acc"].compute(forecast, truth, climatology, skipna=skipna, weights=weights)


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


def climatology_slots(valid_times, available_hours) -> tuple[np.ndarray, np.ndarray]:
    """The (dayofyear, hour) slot of a climatology holding ``available_hours`` for each valid time:
    the nearest held hour (:func:`nearest_hours`), on the day that hour falls on: 22 h of Mar 1
    against a 00/06/12/18 climatology is 00 h of Mar 2, not of Mar 1 (22 h earlier).

    Args:
        valid_times: (...) datetime64 values.
        available_hours: (n,) hours of day the climatology holds.

    Returns:
        (dayofyear, hour), each (...) int64.
    """
    values = np.asarray(valid_times, dtype="datetime64[ns]")
    stamps = pd.DatetimeIndex(values.ravel())
    hours = np.asarray(stamps.hour, dtype=np.int64)
    chosen = nearest_hours(hours, available_hours)
    forward, backward = (chosen - hours) % 24, (hours - chosen) % 24
    offset = np.where(forward < backward, forward, -backward)  # as nearest_hours chose: ties go back
    target = stamps + pd.to_timedelta(offset, unit="h")
    return np.asarray(target.day_of_year, dtype=np.int64).reshape(values.shape), chosen.reshape(values.shape)


def climatology_at_valid_times(climatology: Data, valid_time) -> Data:
    """Select a WB2-layout climatology at given valid times.

    The day of year is pandas/xarray ``time.dt.dayofyear`` of the valid time (WB2's
    convention: 1 = Jan 1, 60 = Feb 29 in leap years and Mar 1 otherwise, 366 = Dec 31 of
    leap years), the hour is ``time.dt.hour``. When the climatology lacks the valid hour
    (e.g. it holds only 00 and 12 UTC, or a single hour), the nearest available hour on
    the 24 h circle is used, ties going to the earlier hour (:func:`nearest_hours`), on the day it
    falls on (:func:`climatology_slots`); a single-hour climatology thus applies to every hour.

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
    doy, hour = climatology_slots(valid.values, climatology["hour"].values)
    have_doy = set(np.asarray(climatology["dayofyear"].values).tolist())
    lacking = sorted(set(np.unique(doy).tolist()) - have_doy)
    if lacking:
        raise UserError(
            f"the climatology lacks dayofyear value(s) {lacking[:10]}{' ...' if len(lacking) > 10 else ''} needed "
            "for the valid times; a WB2-layout climatology must hold dayofyear 1..366"
        )
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
        climatology = align_like(climatology, like, "climatology")
    valid = xr.DataArray(init.values[:, None] + lead.values[None, :], dims=(INIT_DIM, LEAD_DIM))
    valid = valid.assign_coords({INIT_DIM: init.values, LEAD_DIM: lead.values})
    return climatology_at_valid_times(climatology, valid)
