"""Metric objects (WeatherBench2 structure) and the results-file layout of ``s2forecast evaluate``.

RESULTS LAYOUT (the contract with plots/spectra; WeatherBench2's results layout plus a ``source`` dim):

    one NetCDF per evaluation, one data variable per field (``geopotential``, ``2m_temperature``, ...)
    with dims ``(metric, source, region, lead_time[, level])``:
        metric     str: ``rmse``, ``acc``, ``bias`` (deterministic; on the ensemble mean for an
                   ensemble), and for an ensemble forecast also ``ensemble_mean_rmse``, ``crps``,
                   ``spread``, ``spread_skill``; the persistence and climatology sources are scored
                   as one-member ensembles (WB2's convention: crps = their mean absolute error,
                   spread = spread_skill = 0, ensemble_mean_rmse = rmse);
        source     str: ``forecast``, ``persistence``, ``climatology`` (the old ``model`` dim);
        region     str: WB2's region names (``global``, ``tropics``, ``extra-tropics``,
                   ``northern-hemisphere``, ``southern-hemisphere``, ``europe``, ...), a user box
                   ``"lat0,lat1,lon0,lon1"`` and ``global_land`` etc. when the truth has a land-sea mask;
        lead_time  timedelta64 (WB2's name; was ``prediction_timedelta``), with ``lead_hours`` (float) beside it;
        level      hPa, only on fields with levels.
    ``n_init_times(lead_time)``: init times whose valid time is in the truth.
    ``<field>_rank_histogram(region, lead_time[, level], rank)`` for an ensemble of M members:
        area-weighted frequency of the truth's rank (number of members below it; ties shared
        equally), ``rank`` = 0..M, summing to 1; NaN where a member or the truth is NaN.
    Per field variable: attribute ``field_units`` and ``metric_units`` ("rmse: K; acc: 1; ...").
    Global attributes: ``command``, ``forecast``, ``truth``, climatology provenance, ``Conventions: CF-1.8``.
    In memory ``metric``, ``source`` and ``region`` are string indexes (``.sel(metric="rmse")``); on
    disk they are CF label (auxiliary coordinate) variables of a dimension without coordinate variable.
    Read a file with :func:`s2forecast.evaluation.report.open_results` (gives the indexes back).

Metrics (WeatherBench2 ``metrics.py`` structure): each metric is a small class whose
``statistics`` map aligned forecast/truth arrays of one block of init times to per-init-time
spatial means (over every region at once); the caller averages statistics over init times
(only where the truth exists) and calls ``finalize`` once: e.g. RMSE = sqrt(mean MSE), spread
= sqrt(mean ensemble variance), spread-skill = spread / ensemble-mean RMSE. Statistics shared
by metrics (the MSE of the ensemble mean, the ensemble variance) are computed once: a metric's
``statistics`` is skipped when the statistics it ``provides`` are already there. ``METRICS``
is the registry by name.

Array conventions of ``statistics``: forecast ``(time, lead, [member], [level], lat, lon)`` with
the member axis given by ``member_axis`` (None for deterministic), truth ``(time, lead, [level],
lat, lon)``, the climatology at the valid times shaped like the truth (ACC's anomalies), region
weights ``(region, lat, lon)`` each summing to 1; results ``(region, time, lead, [level])``
(plus ``rank`` last for the rank histogram). A deterministic forecast (``member_axis`` None) is
a one-member ensemble for the ensemble metrics.
"""

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.evaluation.metrics import (
    INIT_DIM,
    LEAD_DIM,
    MissingTruthWarning,
    _align_like,
    climatology_forecast,
    nearest_hours,
    persistence_forecast,
    truth_at_valid_times,
)
from s2forecast.user_errors import UserError

MEMBER_DIMS = ("realization", "number", "member")  # WB2, ECMWF/cfgrib, generic


def member_dim(dims) -> str | None:
    """The ensemble member dim among ``dims`` (one of ``MEMBER_DIMS``), or None.

    Raises:
        ValueError: more than one of them.
    """
    found = [d for d in MEMBER_DIMS if d in dims]
    if len(found) > 1:
        raise UserError(f"the forecast has several member dims {found}; keep one of {MEMBER_DIMS}")
    return found[0] if found else None


def check_members(n_members: int, dim: str) -> None:
    """ValueError for an "ensemble" of fewer than two members (the fair CRPS and spread need two)."""
    if n_members < 2:
        raise UserError(
            f"the forecast's member dim {dim!r} has {n_members} member; CRPS and spread need at least 2: "
            f"drop the dim (forecast.isel({dim}=0)) to score it as a deterministic forecast"
        )


def spatial_mean(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(..., lat, lon)`` -> ``(region, ...)`` with ``weights (region, lat, lon)`` summing to 1 per region.

    NaN inside a region propagates to its mean (WB2, skipna=False); NaN outside does not.
    """
    inside = weights > 0
    filled = np.where(np.isnan(x), 0.0, x)
    mean = np.tensordot(weights, filled, axes=([1, 2], [x.ndim - 2, x.ndim - 1]))
    nan = np.tensordot(
        inside.astype(np.float64), np.isnan(x).astype(np.float64), axes=([1, 2], [x.ndim - 2, x.ndim - 1])
    )
    return np.where(nan > 0, np.nan, mean)


@dataclass(frozen=True)
class Metric:
    """A score: per-init-time ``statistics`` (averaged by the caller over init times), then ``finalize``.

    ``units`` is ``"field"`` (the field's units) or ``"1"``; ``ensemble`` metrics are reported for
    ensemble forecasts only; ``provides`` names the statistics ``statistics`` returns.
    """

    name: ClassVar[str]
    units: ClassVar[str] = "field"
    ensemble: ClassVar[bool] = False
    provides: ClassVar[tuple[str, ...]]

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def finalize(self, means: dict[str, np.ndarray]) -> np.ndarray:
        return means[self.name]


def _ensemble_mean(forecast, member_axis):
    return forecast if member_axis is None else forecast.mean(axis=member_axis)


class RMSE(Metric):
    """sqrt(mean over init times of the area-weighted MSE) (WB2); an ensemble's mean is scored."""

    name = "rmse"
    provides = ("mse",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None):
        return {"mse": spatial_mean((_ensemble_mean(forecast, member_axis) - truth) ** 2, weights)}

    def finalize(self, means):
        return np.sqrt(means["mse"])


class Bias(Metric):
    """Mean over init times of the area-weighted mean of forecast - truth."""

    name = "bias"
    provides = ("bias",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None):
        return {"bias": spatial_mean(_ensemble_mean(forecast, member_axis) - truth, weights)}


class ACC(Metric):
    """Uncentered anomaly correlation per init time, averaged over init times (WB2).

    ``climatology`` is the climatology at the valid times, shaped like ``truth``.
    """

    name = "acc"
    units = "1"
    provides = ("acc",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None):
        f = _ensemble_mean(forecast, member_axis) - climatology
        o = truth - climatology
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = spatial_mean(f * o, weights) / np.sqrt(spatial_mean(f**2, weights) * spatial_mean(o**2, weights))
        return {"acc": acc}


class EnsembleMeanRMSE(RMSE):
    """RMSE of the ensemble mean (WB2 ``EnsembleMeanMSE``, then sqrt after the time mean)."""

    name = "ensemble_mean_rmse"
    ensemble = True


class Spread(Metric):
    """sqrt(mean over init times of the area-weighted unbiased ensemble variance) (WB2 ``EnsembleVariance``);
    0 for a deterministic forecast."""

    name = "spread"
    ensemble = True
    provides = ("ensemble_variance",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None):
        if member_axis is None:
            return {"ensemble_variance": spatial_mean(0.0 * forecast, weights)}  # 0, NaN where the forecast is
        return {"ensemble_variance": spatial_mean(forecast.var(axis=member_axis, ddof=1), weights)}

    def finalize(self, means):
        return np.sqrt(means["ensemble_variance"])


class SpreadSkill(Metric):
    """Spread / ensemble-mean RMSE (WB2's spread-skill ratio; 1 for a reliable ensemble)."""

    name = "spread_skill"
    units = "1"
    ensemble = True
    provides = ("ensemble_variance", "mse")

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None):
        return {
            **Spread().statistics(forecast, truth, weights, member_axis),
            **RMSE().statistics(forecast, truth, weights, member_axis),
        }

    def finalize(self, means):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(means["ensemble_variance"]) / np.sqrt(means["mse"])


class CRPS(Metric):
    """Fair (unbiased) CRPS, WB2's definition: ``mean_m |X_m - Y| - 1/(2M(M-1)) sum_{i,j} |X_i - X_j|``.

    The pair sum uses the sorted members, ``sum_{i,j}|X_i - X_j| = 2 sum_k (2k - M - 1) X_(k)``
    (k = 1..M), O(M log M) instead of O(M^2). A deterministic forecast has no pair term (WB2's
    ``_pointwise_crps_spread`` of one member is 0): its CRPS is its mean absolute error.
    """

    name = "crps"
    ensemble = True
    provides = ("crps",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None):
        if member_axis is None:
            return {"crps": spatial_mean(np.abs(forecast - truth), weights)}
        m = forecast.shape[member_axis]
        skill = np.abs(forecast - np.expand_dims(truth, member_axis)).mean(axis=member_axis)
        ranked = np.sort(forecast, axis=member_axis)
        shape = [1] * forecast.ndim
        shape[member_axis] = m
        k = np.arange(1, m + 1, dtype=np.float64).reshape(shape)
        pair_sum = 2.0 * ((2.0 * k - m - 1.0) * ranked).sum(axis=member_axis)
        return {"crps": spatial_mean(skill - pair_sum / (2.0 * m * (m - 1)), weights)}


class RankHistogram(Metric):
    """Area-weighted frequency of the truth's rank among the members (WB2 ``RankHistogram``).

    The rank is the number of members below the truth; a truth equal to ``e`` members is shared
    equally among ranks ``below .. below + e`` (WB2 breaks such ties at random); a point where the
    truth or a member is NaN has no rank (NaN, as every other metric there). Statistic shape
    ``(region, time, lead, [level], rank)`` with ``rank`` = 0..M. Ensemble forecasts only.
    """

    name = "rank_histogram"
    units = "1"
    ensemble = True
    provides = ("rank_histogram",)

    def statistics(self, forecast, truth, weights, member_axis=None, climatology=None):
        m = forecast.shape[member_axis]
        o = np.expand_dims(truth, member_axis)
        below = (forecast < o).sum(axis=member_axis)
        equal = (forecast == o).sum(axis=member_axis)
        ranks = np.arange(m + 1).reshape((m + 1,) + (1,) * truth.ndim)
        one_hot = ((ranks >= below) & (ranks <= below + equal)) / (equal + 1.0)  # (rank, ..., lat, lon)
        missing = np.isnan(truth) | np.isnan(forecast).any(axis=member_axis)  # comparisons with NaN are False
        one_hot = np.where(missing, np.nan, one_hot)
        return {"rank_histogram": np.moveaxis(spatial_mean(one_hot, weights), 1, -1)}


METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (RMSE(), ACC(), Bias(), EnsembleMeanRMSE(), CRPS(), Spread(), SpreadSkill(), RankHistogram())
}
DETERMINISTIC = ("rmse", "acc", "bias")
ENSEMBLE = ("ensemble_mean_rmse", "crps", "spread", "spread_skill")


def get_metric(name: str) -> Metric:
    """The registered metric ``name``; ValueError naming the known ones otherwise."""
    if name not in METRICS:
        raise UserError(f"unknown metric {name!r}; known metrics: {', '.join(METRICS)}")
    return METRICS[name]


def metric_units(name: str, field_units: str) -> str:
    """Units of metric ``name`` of a field in ``field_units`` (``"1"`` for ratios and frequencies)."""
    units = get_metric(name).units
    return field_units if units == "field" else units


# --- scoring a forecast: alignment once per block, aggregation once over init times -------------------

SOURCES = ("forecast", "persistence", "climatology")
LEAD_TIME = "lead_time"  # WB2's results name of the lead dim
BLOCK_BYTES = 64 * 2**20  # forecast bytes (float64) per variable read and scored at once


def metric_names(ensemble: bool) -> tuple[str, ...]:
    """The scalar metrics of a deterministic or an ensemble forecast (the ``metric`` coordinate)."""
    return DETERMINISTIC + ENSEMBLE if ensemble else DETERMINISTIC


def _blocks(n: int, per_item_bytes: int) -> list[slice]:
    size = int(min(max(1, BLOCK_BYTES // max(per_item_bytes, 1)), n))
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def _aligned_block(forecast, truth, clim, init, leads, levels):
    """numpy arrays of one block, every one in the forecast's latitude/longitude order.

    Returns:
        forecast (time, lead, [member], [level], lat, lon), then per source its forecast, the truth
        at the valid times (time, lead, [level], lat, lon), the climatology there (same), and the
        (time, lead) availability of the truth.
    """
    member = member_dim(forecast.dims)
    order = (INIT_DIM, LEAD_DIM) + ((member,) if member else ()) + (("level",) if "level" in forecast.dims else ())
    forecast = forecast.transpose(*order, "latitude", "longitude")
    plain = forecast.isel({member: 0}, drop=True) if member else forecast  # the layout of truth-like arrays
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingTruthWarning)  # reported once for the whole forecast
        observed = truth_at_valid_times(truth, plain).drop_vars("valid_time")
        persistence = persistence_forecast(_align_like(truth, plain, "truth"), init, leads)
    climatology = climatology_forecast(clim, init, leads, like=plain).drop_vars("valid_time")
    plain_order = [d for d in order if d != member] + ["latitude", "longitude"]
    arrays = {name: data.transpose(*plain_order).values for name, data in
              (("truth", observed), ("persistence", persistence), ("climatology", climatology))}  # fmt: skip
    available = np.isin(init[:, None] + leads[None, :], truth[INIT_DIM].values)
    return forecast.values, arrays, available


def score(forecast, truth, clim, variables, weights, region_names, progress=False):
    """Score every source on every region; return the results Dataset (module docstring layout).

    Args:
        forecast: Dataset (time, prediction_timedelta, [member], [level], latitude, longitude), lazy.
        truth: Dataset (time, [level], latitude, longitude), time = valid time, lazy.
        clim: Dataset (dayofyear, hour, [level], latitude, longitude).
        variables: the forecast variables to score.
        weights: (region, lat, lon) region weights on the forecast's grid order, each summing to 1.
        region_names: the regions' names.
    """
    from tqdm.auto import tqdm

    init_times = forecast[INIT_DIM].values
    leads = forecast[LEAD_DIM].values
    member = member_dim(forecast.dims)
    if member:
        check_members(forecast.sizes[member], member)
    names = metric_names(member is not None)
    sums = {v: {} for v in variables}  # variable -> (source, statistic) -> sum over available init times
    counts = np.zeros(leads.size, dtype=np.int64)
    per_init = max(forecast[v].isel({INIT_DIM: 0}).size * 8 for v in variables)
    truth_times = truth[INIT_DIM].values
    with tqdm(total=init_times.size, desc="evaluate", unit="init", disable=not progress) as bar:
        for block in _blocks(init_times.size, per_init):
            init = init_times[block]
            valid = (init[:, None] + leads[None, :]).ravel()
            needed = np.union1d(init, valid)
            present = needed[np.isin(needed, truth_times)]
            stamps = pd.DatetimeIndex(valid)
            doys = np.unique(np.asarray(stamps.day_of_year))
            hours = np.unique(nearest_hours(np.asarray(stamps.hour), clim["hour"].values))
            available = None
            for v in variables:
                f = forecast[v].isel({INIT_DIM: block}).astype(np.float64).load()
                levels = f["level"].values if "level" in f.dims else None
                o = truth[v] if levels is None else truth[v].sel(level=levels)
                o = o.sel({INIT_DIM: present}).astype(np.float64).load()
                c = clim[v] if levels is None else clim[v].sel(level=levels)
                c = c.sel(dayofyear=doys, hour=hours).astype(np.float64).load()
                values, arrays, available = _aligned_block(f, o, c, init, leads, levels)
                member_axis = 2 if member else None
                observed, clim_valid = arrays["truth"], arrays["climatology"]
                sources = {"forecast": (values, member_axis), "persistence": (arrays["persistence"], None),
                           "climatology": (arrays["climatology"], None)}  # fmt: skip
                for source, (x, axis) in sources.items():
                    wanted = list(names) + (["rank_histogram"] if source == "forecast" and member else [])
                    stats = {}
                    with np.errstate(invalid="ignore", divide="ignore"):
                        for n in wanted:
                            if all(key in stats for key in METRICS[n].provides):
                                continue  # a statistic shared by metrics is computed once
                            stats.update(METRICS[n].statistics(x, observed, weights, axis, clim_valid))
                    for key, stat in stats.items():
                        mask = available.reshape((1,) + available.shape + (1,) * (stat.ndim - 3))
                        summed = np.where(mask, stat, 0.0).sum(axis=1)
                        sums[v][source, key] = sums[v].get((source, key), 0.0) + summed
            counts += available.sum(axis=0)
            bar.update(init.size)
    return _results_dataset(forecast, truth, variables, sums, counts, names, region_names, member)


def _results_dataset(forecast, truth, variables, sums, counts, names, region_names, member):
    leads = forecast[LEAD_DIM].values
    data_vars = {}
    for v in variables:
        has_level = "level" in forecast[v].dims
        field_units = str({**truth[v].attrs, **forecast[v].attrs}.get("units", ""))
        with np.errstate(invalid="ignore", divide="ignore"):
            means = {}
            for (source, key), summed in sums[v].items():
                shape = (1, counts.size) + (1,) * (np.ndim(summed) - 2)
                means[source, key] = np.where(counts.reshape(shape) > 0, summed / counts.reshape(shape), np.nan)
        sample = next(iter(means.values()))
        blank = np.full(sample.shape[:2] + ((sample.shape[2],) if has_level else ()), np.nan)
        table = np.stack([np.stack([_finalize(n, source, means, blank) for source in SOURCES]) for n in names])
        dims = ("metric", "source", "region", LEAD_TIME) + (("level",) if has_level else ())
        long_name = {**truth[v].attrs, **forecast[v].attrs}.get("long_name", v)
        data_vars[v] = xr.DataArray(
            table,
            dims=dims,
            attrs={
                "long_name": f"skill scores of {long_name}",
                "field_units": field_units,
                "metric_units": "; ".join(f"{n}: {metric_units(n, field_units) or 'unknown'}" for n in names),
            },
        )
        if member:
            hist = means["forecast", "rank_histogram"]  # (region, lead, [level], rank)
            data_vars[f"{v}_rank_histogram"] = xr.DataArray(
                hist,
                dims=("region", LEAD_TIME) + (("level",) if has_level else ()) + ("rank",),
                attrs={
                    "long_name": f"rank histogram of {long_name}: area-weighted frequency of the truth's rank "
                    "(members below it; ties shared equally)",
                    "units": "1",
                },
            )
    coords = {
        "metric": list(names),
        "source": list(SOURCES),
        "region": list(region_names),
        LEAD_TIME: (LEAD_TIME, leads, {"standard_name": "forecast_period", "long_name": "lead time"}),
        "lead_hours": (LEAD_TIME, leads / np.timedelta64(1, "h"), {"long_name": "lead time", "units": "hours"}),
    }
    if any("level" in forecast[v].dims for v in variables):
        coords["level"] = (
            "level",
            forecast["level"].values,
            {"units": "hPa", "long_name": "pressure level", "standard_name": "air_pressure", "positive": "down"},
        )
    if member:
        coords["rank"] = (
            "rank",
            np.arange(forecast.sizes[member] + 1),
            {"long_name": "number of ensemble members below the truth", "units": "1"},
        )
    results = xr.Dataset(data_vars, coords=coords)
    results["n_init_times"] = xr.DataArray(
        counts,
        dims=(LEAD_TIME,),
        attrs={"long_name": "init times whose valid time is in the truth (the scores average over them)", "units": "1"},
    )
    if member:
        results.attrs["ensemble_size"] = int(forecast.sizes[member])
        results.attrs["ensemble_dim"] = member
    return results


def _finalize(name: str, source: str, means: dict, blank: np.ndarray) -> np.ndarray:
    """Metric ``name`` of ``source`` from its mean statistics; ``blank`` (NaN) where the source has none."""
    try:
        with np.errstate(invalid="ignore", divide="ignore"):
            return METRICS[name].finalize({key: mean for (s, key), mean in means.items() if s == source})
    except KeyError:
        return blank
