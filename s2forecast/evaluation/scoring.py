"""Scoring a forecast, streamed over blocks of init times, and the results-file layout of ``s2forecast evaluate``.

RESULTS LAYOUT (the contract with plots/spectra; WeatherBench2's results layout plus a ``source`` dim):

    one NetCDF per evaluation, one data variable per field (``geopotential``, ``2m_temperature``, ...)
    with dims ``(metric, source, region, lead_time[, level])``:
        metric     str: the evaluation's metrics (``evaluation.config``), by default ``rmse``, ``acc``,
                   ``bias`` (deterministic; on the ensemble mean for an ensemble), and for an ensemble
                   forecast also ``ensemble_mean_rmse``, ``crps``, ``spread``, ``spread_skill``; the
                   persistence and climatology sources are scored as one-member ensembles (WB2's
                   convention: crps = their mean absolute error, spread = spread_skill = 0,
                   ensemble_mean_rmse = rmse);
        source     str: ``forecast``, then the baselines, by default ``persistence``, ``climatology``;
        region     str: WB2's region names (``global``, ``tropics``, ``extra-tropics``,
                   ``northern-hemisphere``, ``southern-hemisphere``, ``europe``, ...), a user box
                   ``"lat0,lat1,lon0,lon1"`` and ``global_land`` etc. when the truth has a land-sea mask;
        lead_time  timedelta64 (WB2's name; was ``prediction_timedelta``), with ``lead_hours`` (float) beside it;
        level      hPa, only on fields with levels.
    ``n_init_times(lead_time)``: init times whose valid time is in the truth.
    ``<field>_rank_histogram(region, lead_time[, level], rank)`` for an ensemble of M members (by default):
        area-weighted frequency of the truth's rank (number of members below it; ties shared
        equally), ``rank`` = 0..M, summing to 1; NaN where a member or the truth is NaN.
    Per field variable: attribute ``field_units`` and ``metric_units`` ("rmse: K; acc: 1; ...").
    Global attributes: ``history`` (the command line), ``forecast``, ``truth`` (URLs verbatim), climatology
    provenance, ``Conventions: CF-1.8``.
    ``metric``, ``source`` and ``region`` are string indexes (``.sel(metric="rmse")``), in memory and
    as ``xr.open_dataset`` reads the file (on disk CF label variables named after their dim:
    :func:`s2forecast.evaluation.report.write_results`).

Scoring streams (:func:`score`): init times are read in blocks; every block is aligned once (the
forecast, the truth at the valid times, persistence, the climatology at the valid times) and each
source's block goes through the metric engine of :mod:`s2forecast.evaluation.metrics`: statistics
computed once per block and shared between metrics, summed over the init times with truth
(:class:`~s2forecast.evaluation.metrics.Statistics`), added up over the blocks and finalized once.
"""

import warnings

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.evaluation.metrics import (
    INIT_DIM,
    LEAD_DIM,
    MissingTruthWarning,
    Statistics,
    align_like,
    check_members,
    climatology_forecast,
    compute_statistics,
    get_metric,
    member_dim,
    metric_units,
    nearest_hours,
    persistence_forecast,
    truth_at_valid_times,
)

LEAD_TIME = "lead_time"  # WB2's results name of the lead dim
BLOCK_BYTES = 64 * 2**20  # forecast bytes (float64) per variable read and scored at once


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
        persistence = persistence_forecast(align_like(truth, plain, "truth"), init, leads)
    climatology = climatology_forecast(clim, init, leads, like=plain).drop_vars("valid_time")
    plain_order = [d for d in order if d != member] + ["latitude", "longitude"]
    arrays = {name: data.transpose(*plain_order).values for name, data in
              (("truth", observed), ("persistence", persistence), ("climatology", climatology))}  # fmt: skip
    available = np.isin(init[:, None] + leads[None, :], truth[INIT_DIM].values)
    return forecast.values, arrays, available


def score(
    forecast: xr.Dataset,
    truth: xr.Dataset,
    clim: xr.Dataset,
    variables,
    weights: np.ndarray,
    region_names,
    metrics,
    sources,
    progress: bool = False,
) -> xr.Dataset:
    """Score every source on every region; return the results Dataset (module docstring layout).

    Args:
        forecast: Dataset (time, prediction_timedelta, [member], [level], latitude, longitude), lazy.
        truth: Dataset (time, [level], latitude, longitude), time = valid time, lazy.
        clim: Dataset (dayofyear, hour, [level], latitude, longitude).
        variables: the forecast variables to score.
        weights: (region, lat, lon) region weights on the forecast's grid order, each summing to 1.
        region_names: the regions' names.
        metrics: metric names (``metrics.METRICS``): the ``metric`` coordinate, and the rank
            histogram's own variable; metrics that need members are scored for the forecast only.
        sources: ``forecast`` and the baselines (``persistence``, ``climatology``), in results order.
    """
    from tqdm.auto import tqdm

    init_times = forecast[INIT_DIM].values
    leads = forecast[LEAD_DIM].values
    member = member_dim(forecast.dims)
    if member:
        check_members(forecast.sizes[member], member)
    metrics = [get_metric(name) for name in metrics]
    extra_dims = {key: metric.statistic_dims for metric in metrics for key in metric.provides}
    totals: dict[tuple[str, str], Statistics] = {}  # (variable, source) -> statistics of the blocks so far
    per_init = max(forecast[v].isel({INIT_DIM: 0}).size * 8 for v in variables)
    truth_times = truth[INIT_DIM].values
    with tqdm(total=init_times.size, desc="evaluate", unit="init", disable=None if progress else True) as bar:
        for block in _blocks(init_times.size, per_init):
            init = init_times[block]
            valid = (init[:, None] + leads[None, :]).ravel()
            needed = np.union1d(init, valid)
            present = needed[np.isin(needed, truth_times)]
            stamps = pd.DatetimeIndex(valid)
            doys = np.unique(np.asarray(stamps.day_of_year))
            hours = np.unique(nearest_hours(np.asarray(stamps.hour), clim["hour"].values))
            for v in variables:
                f = forecast[v].isel({INIT_DIM: block}).astype(np.float64).load()
                levels = f["level"].values if "level" in f.dims else None
                o = truth[v] if levels is None else truth[v].sel(level=levels)
                o = o.sel({INIT_DIM: present}).astype(np.float64).load()
                c = clim[v] if levels is None else clim[v].sel(level=levels)
                c = c.sel(dayofyear=doys, hour=hours).astype(np.float64).load()
                values, arrays, available = _aligned_block(f, o, c, init, leads, levels)
                available = xr.DataArray(available, dims=(INIT_DIM, LEAD_DIM))
                dims = ("region", INIT_DIM, LEAD_DIM) + (() if levels is None else ("level",))
                for source in sources:
                    x, axis = (values, 2 if member else None) if source == "forecast" else (arrays[source], None)
                    wanted = [metric for metric in metrics if axis is not None or not metric.needs_members]
                    stats = compute_statistics(wanted, x, arrays["truth"], weights, axis, arrays["climatology"])
                    labelled = {key: xr.DataArray(stat, dims=dims + extra_dims[key]) for key, stat in stats.items()}
                    chunk = Statistics.of_chunk(labelled, available)
                    totals[v, source] = totals[v, source] + chunk if (v, source) in totals else chunk
            bar.update(init.size)
    return _results_dataset(forecast, truth, variables, totals, metrics, sources, region_names, member)


def _results_dataset(forecast, truth, variables, totals, metrics, sources, region_names, member) -> xr.Dataset:
    leads = forecast[LEAD_DIM].values
    scalar = [metric for metric in metrics if not metric.statistic_dims]
    names = [metric.name for metric in scalar]
    histogram = next((metric for metric in metrics if metric.name == "rank_histogram"), None)
    data_vars = {}
    for v in variables:
        level = ("level",) if "level" in forecast[v].dims else ()
        order = ("region", LEAD_DIM, *level)
        field_units = str({**truth[v].attrs, **forecast[v].attrs}.get("units", ""))
        table = np.stack(
            [np.stack([totals[v, s].finalize(metric).transpose(*order).values for s in sources]) for metric in scalar]
        )
        long_name = {**truth[v].attrs, **forecast[v].attrs}.get("long_name", v)
        data_vars[v] = xr.DataArray(
            table,
            dims=("metric", "source", "region", LEAD_TIME, *level),
            attrs={
                "long_name": f"skill scores of {long_name}",
                "field_units": field_units,
                "metric_units": "; ".join(f"{n}: {metric_units(n, field_units) or 'unknown'}" for n in names),
            },
        )
        if histogram is not None:
            hist = totals[v, "forecast"].finalize(histogram).transpose(*order, "rank").values
            data_vars[f"{v}_rank_histogram"] = xr.DataArray(
                hist,
                dims=("region", LEAD_TIME, *level, "rank"),
                attrs={
                    "long_name": f"rank histogram of {long_name}: area-weighted frequency of the truth's rank "
                    "(members below it; ties shared equally)",
                    "units": "1",
                },
            )
    coords = {
        "metric": names,
        "source": list(sources),
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
    if histogram is not None:
        coords["rank"] = (
            "rank",
            np.arange(forecast.sizes[member] + 1),
            {"long_name": "number of ensemble members below the truth", "units": "1"},
        )
    results = xr.Dataset(data_vars, coords=coords)
    results["n_init_times"] = xr.DataArray(
        totals[variables[0], "forecast"].counts.values,
        dims=(LEAD_TIME,),
        attrs={"long_name": "init times whose valid time is in the truth (the scores average over them)", "units": "1"},
    )
    if member:
        results.attrs["members"] = int(forecast.sizes[member])
        results.attrs["ensemble_dim"] = member
    return results
