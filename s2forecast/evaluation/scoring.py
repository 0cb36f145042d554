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
    ``n_init_times(lead_time)``: init times whose valid time is in the truth;
    ``n_init_times_persistence(lead_time)``, only where it differs: those whose init time is in the truth
    too (persistence's forecast is the truth at the init time; its scores average over these).
    ``<field>_nonfinite_forecast(lead_time)``, ``<field>_nonfinite_truth(lead_time)``: NaN or infinite values
        left out of the scores (``score``'s ``nan``), over the init times with truth; the truth's at the valid
        times (with the points the climatology lacks there) and, for persistence, at the init times.
    ``<field>_rank_histogram(region, lead_time[, level], rank)`` for an ensemble of M members (by default):
        area-weighted frequency of the truth's rank (number of members below it; ties shared
        equally), ``rank`` = 0..M, summing to 1; NaN where a member or the truth is NaN.
    Per field variable: attribute ``field_units`` and ``metric_units`` ("rmse: K; acc: 1; ...").
    Global attributes: ``history`` (the command line), ``forecast``, ``truth`` (URLs without secrets), climatology
    provenance, ``Conventions: CF-1.8``.
    ``metric``, ``source`` and ``region`` are string indexes (``.sel(metric="rmse")``), in memory and
    as ``xr.open_dataset`` reads the file (on disk CF label variables named after their dim:
    :func:`s2forecast.evaluation.report.write_results`).

Scoring streams (:func:`score`): init times are read in blocks (one init time and a range of its
leads when one init time alone is larger than ``BLOCK_BYTES``); every block is aligned once (the
forecast, the truth at the valid times, persistence, the climatology at the valid times) and each
source's block goes through the metric engine of :mod:`s2forecast.evaluation.metrics`: statistics
computed once per block and shared between metrics, summed over the init times with truth
(:class:`~s2forecast.evaluation.metrics.Statistics`), added up over the blocks and finalized once.
The blocks are the tasks of an ``s2forecast.data.engine.Engine`` (this process, or dask.distributed
workers); their statistics are added up on the client in the order of the blocks, per range of
leads, and the ranges joined along the leads.
"""

import contextlib
import warnings
from dataclasses import dataclass

import numpy as np
import xarray as xr

from s2forecast.data.engine import Engine
from s2forecast.evaluation.metrics import (
    INIT_DIM,
    LEAD_DIM,
    MissingTruthWarning,
    Statistics,
    align_like,
    check_members,
    climatology_forecast,
    climatology_slots,
    compute_statistics,
    get_metric,
    member_dim,
    metric_units,
    persistence_forecast,
    truth_at_valid_times,
    truth_available,
)
from s2forecast.times import format_time
from s2forecast.user_errors import UserError

LEAD_TIME = "lead_time"  # WB2's results name of the lead dim
BLOCK_BYTES = 64 * 2**20  # forecast bytes (float64) per variable read and scored at once
NAN_POLICIES = ("skip", "error")  # non-finite forecast or truth values: scored around (and counted), or refused


class NonFiniteWarning(UserWarning):
    """Some forecast or truth values are NaN or infinite: the scores leave those points out."""


@dataclass(frozen=True)
class _Block:
    """A task of :func:`score`: the init times ``init`` (positions) at the leads ``lead`` (positions)."""

    init: slice
    lead: slice


def _blocks(n_init: int, n_lead: int, per_lead_bytes: int) -> list[_Block]:
    """Blocks whose forecast (float64, per variable) fills about ``BLOCK_BYTES``: several init times with
    all their leads, or, when one init time's leads are larger (0.25 deg, 2 levels, 8 leads: 133 MB), one
    init time and a range of its leads, so that a task's memory does not grow with the number of leads."""
    per_init = per_lead_bytes * n_lead
    if per_init <= BLOCK_BYTES or n_lead == 1:
        size = int(min(max(1, BLOCK_BYTES // max(per_init, 1)), n_init))
        return [_Block(slice(start, min(start + size, n_init)), slice(0, n_lead)) for start in range(0, n_init, size)]
    size = int(max(1, BLOCK_BYTES // max(per_lead_bytes, 1)))
    return [
        _Block(slice(i, i + 1), slice(start, min(start + size, n_lead)))
        for i in range(n_init)
        for start in range(0, n_lead, size)
    ]


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
    available = truth_available(truth, init, leads)
    return forecast.values, arrays, available


def _drop_nonfinite(values: np.ndarray, member_axis: int | None) -> np.ndarray:
    """``values`` with NaN wherever a value is not finite; with ``member_axis``, at a point where any
    member is not finite every member is NaN: the ensemble scores (CRPS, spread, rank) need all M
    members, so that point is left out for that init time rather than scored with fewer members."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return values
    if member_axis is not None:
        bad = np.broadcast_to(bad.any(axis=member_axis, keepdims=True), values.shape)
    return np.where(bad, np.nan, values)


def _nonfinite_per_lead(values: np.ndarray, available: np.ndarray) -> np.ndarray:
    """(lead,) non-finite values of ``values`` (time, lead, ...) among the (time, lead) with truth."""
    bad = ~np.isfinite(values).reshape(*values.shape[:2], -1)
    return (bad.sum(axis=2) * available).sum(axis=0)


def _refuse_nonfinite(what: str, variable: str, values: np.ndarray, available: np.ndarray, init, leads) -> None:
    bad = (~np.isfinite(values)).reshape(*values.shape[:2], -1).any(axis=2) & available
    i, k = np.argwhere(bad)[0]
    if what == "persistence":  # the truth at the init time
        where, what = f"{format_time(init[i])} (an init time: persistence's forecast)", "truth"
    else:
        where = f"init time {format_time(init[i])} lead {leads[k] / np.timedelta64(1, 'h'):g} h"
    raise UserError(
        f"the {what} of variable {variable} has NaN or infinite values at {where}; fix the {what}, or pass --nan "
        "skip to score the finite points and count the others"
    )


def _report_nonfinite(nonfinite: dict, leads: np.ndarray) -> None:
    """One warning per variable with non-finite values, naming how many and at which leads."""
    for v, (forecast, truth) in nonfinite.items():
        if not (forecast.any() or truth.any()):
            continue
        hours = ", ".join(f"{x:g}" for x in leads[(forecast + truth) > 0] / np.timedelta64(1, "h"))
        warnings.warn(
            f"{v}: {int(forecast.sum())} NaN or infinite forecast value(s) and {int(truth.sum())} in the truth (or "
            f"the climatology) at "
            f"lead(s) {hours} h are left out of the scores (the area weights renormalised over the finite points of "
            f"each init time; a point where one ensemble member is not finite is left out for every member); counts "
            f"per lead in '{v}_nonfinite_forecast' and '{v}_nonfinite_truth' of the metrics file (--nan error refuses "
            "them)",
            NonFiniteWarning,
            stacklevel=3,
        )


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
    engine: Engine | None = None,
    nan: str = "skip",
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
        engine: where the blocks of init times are scored (``s2forecast.data.engine``; default this
            process); their statistics are added up here in the order of the blocks: the same scores.
        nan: non-finite (NaN or infinite) forecast or truth values, and points the climatology lacks
            where the truth has a value (left out as the truth's, so every source covers the same
            points; a climatology with no value at a scored time is refused): "skip" leaves those points out of
            each init time's area means, its weights renormalised over the finite points
            (WeatherBench2's skipna), counts them per lead and warns (:class:`NonFiniteWarning`);
            "error" refuses them. A point where one ensemble member is not finite is left out for
            every member; an init time whose field has no finite point in a region leaves that
            region's score NaN at that lead.
    """
    if nan not in NAN_POLICIES:
        raise UserError(f"nan must be one of {NAN_POLICIES}, got {nan!r}")
    from tqdm.auto import tqdm

    init_times = forecast[INIT_DIM].values
    member = member_dim(forecast.dims)
    if member:
        check_members(forecast.sizes[member], member)
    metrics = [get_metric(name) for name in metrics]
    # (variable, source, first lead of the block) -> statistics of the blocks so far; joined along the leads at the end
    totals: dict[tuple[str, str, int], Statistics] = {}
    per_lead = max(forecast[v].isel({INIT_DIM: 0, LEAD_DIM: 0}).size * 8 for v in variables)
    blocks = _blocks(init_times.size, forecast.sizes[LEAD_DIM], per_lead)
    engine = engine if engine is not None else Engine()
    job = engine.share(_Job(forecast, truth, clim, list(variables), weights, metrics, list(sources), nan))
    leads = forecast[LEAD_DIM].values
    nonfinite = {v: np.zeros((2, leads.size), np.int64) for v in variables}  # (forecast, truth) per lead
    with (
        tqdm(total=init_times.size, desc="evaluate", unit="init", disable=None if progress else True) as bar,
        contextlib.closing(engine.map(_score_block, blocks, job)) as results,
    ):
        for block, (chunk, found) in zip(blocks, results, strict=True):
            for (v, source), statistics in chunk.items():
                key = (v, source, block.lead.start)
                totals[key] = totals[key] + statistics if key in totals else statistics
            for v in variables:
                nonfinite[v][:, block.lead] += found[v]
            if block.lead.stop == leads.size:
                bar.update(block.init.stop - block.init.start)
    _report_nonfinite(nonfinite, leads)
    starts = sorted({block.lead.start for block in blocks})
    joined = {
        (v, source): Statistics.concat([totals[v, source, start] for start in starts], LEAD_DIM)
        for v, source, _ in totals
    }
    return _results_dataset(forecast, truth, variables, joined, metrics, sources, region_names, member, nonfinite)


@dataclass(frozen=True)
class _Job:
    """What every block of one ``score`` shares (sent to each worker once): its arguments."""

    forecast: xr.Dataset
    truth: xr.Dataset
    clim: xr.Dataset
    variables: list
    weights: np.ndarray
    metrics: list
    sources: list
    nan: str = "skip"


def _score_block(block: _Block, job: _Job) -> tuple[dict[tuple[str, str], Statistics], dict[str, np.ndarray]]:
    """The statistics of one block of init times and leads, per (variable, source), and its non-finite
    values per variable ((forecast, truth) x lead counts): a task of ``Engine.map``. The block is
    aligned once (forecast, truth at the valid times, persistence, climatology there), its
    non-finite values counted (or refused) and left out, and each source goes through the metric
    engine."""
    forecast, truth, clim, metrics = job.forecast, job.truth, job.clim, job.metrics
    leads = forecast[LEAD_DIM].values[block.lead]
    member = member_dim(forecast.dims)
    extra_dims = {key: metric.statistic_dims for metric in metrics for key in metric.provides}
    init = forecast[INIT_DIM].values[block.init]
    valid = (init[:, None] + leads[None, :]).ravel()
    needed = np.union1d(init, valid)
    truth_times = truth[INIT_DIM].values
    present = needed[np.isin(needed, truth_times)]
    slot_doys, slot_hours = climatology_slots(valid, clim["hour"].values)
    doys, hours = np.unique(slot_doys), np.unique(slot_hours)
    chunk, nonfinite = {}, {}
    for v in job.variables:
        f = forecast[v].isel({INIT_DIM: block.init, LEAD_DIM: block.lead}).astype(np.float64).load()
        levels = f["level"].values if "level" in f.dims else None
        o = truth[v] if levels is None else truth[v].sel(level=levels)
        o = o.sel({INIT_DIM: present}).astype(np.float64).load()
        c = clim[v] if levels is None else clim[v].sel(level=levels)
        c = c.sel(dayofyear=doys, hour=hours).astype(np.float64).load()
        values, arrays, available = _aligned_block(f, o, c, init, leads, levels)
        _refuse_empty_fields(values, available, v, init, leads, member, f)
        with_init = available & np.isin(init, truth_times)[:, None]  # persistence has a forecast
        clim_values = arrays["climatology"]
        _refuse_empty_truth(arrays["truth"], available, v, init, leads, levels)  # first: a computed climatology's cause
        _refuse_empty_climatology(clim_values, available, v, init, leads)
        if job.nan == "error":  # where the truth has a value: a point both lack (land in an SST truth) is the truth's
            clim_only = np.where(np.isfinite(arrays["truth"]), clim_values, 0.0)
            if _nonfinite_per_lead(clim_only, available).any():
                _refuse_nonfinite("climatology", v, clim_only, available, init, leads)
        # a point the climatology lacks (a land-masked SST) is left out of every source's scores, as one the
        # truth lacks: the climatology baseline and ACC would otherwise cover fewer points than the others
        arrays["truth"] = np.where(np.isfinite(clim_values), arrays["truth"], np.nan)
        counted = (("forecast", values, available, 0), ("truth", arrays["truth"], available, 1),
                   ("persistence", arrays["persistence"], with_init, 1))  # fmt: skip
        nonfinite[v] = np.zeros((2, leads.size), np.int64)
        for what, data, scored, into in counted:
            found = _nonfinite_per_lead(data, scored)
            if job.nan == "error" and found.any():
                _refuse_nonfinite(what, v, data, scored, init, leads)
            nonfinite[v][into] += found
        # a point the forecast lacks (in any member) is left out of the baselines' scores too, after the
        # counting (it is the forecast's, not the truth's): they would otherwise cover more points than it
        forecast_gaps = ~np.isfinite(values)
        if forecast_gaps.any():
            forecast_gaps = forecast_gaps.any(axis=2) if member else forecast_gaps
            arrays["truth"] = np.where(forecast_gaps, np.nan, arrays["truth"])
        values = _drop_nonfinite(values, 2 if member else None)
        arrays = {name: _drop_nonfinite(array, None) for name, array in arrays.items()}
        available = xr.DataArray(available, dims=(INIT_DIM, LEAD_DIM))
        # persistence averages over the init times that have its forecast (the truth at the init time) too, as
        # WeatherBench2's time mean skips NaN: one init time missing from the truth left it NaN at every lead
        with_init = xr.DataArray(with_init, dims=(INIT_DIM, LEAD_DIM))
        dims = ("region", INIT_DIM, LEAD_DIM) + (() if levels is None else ("level",))
        for source in job.sources:
            x, axis = (values, 2 if member else None) if source == "forecast" else (arrays[source], None)
            wanted = [metric for metric in metrics if axis is not None or not metric.needs_members]
            stats = compute_statistics(
                wanted, x, arrays["truth"], job.weights, axis, arrays["climatology"], skipna=True
            )  # only the dropped non-finite values are NaN
            labelled = {key: xr.DataArray(stat, dims=dims + extra_dims[key]) for key, stat in stats.items()}
            chunk[v, source] = Statistics.of_chunk(labelled, with_init if source == "persistence" else available)
    return chunk, nonfinite


def _refuse_empty_climatology(values: np.ndarray, available: np.ndarray, name: str, init, leads) -> None:
    """Refuse a climatology with no finite value (of any level) at a scored valid time: every point left
    out there, every source's scores of that lead would be NaN, blamed on the truth."""
    empty = ~np.isfinite(values).reshape(*values.shape[:2], -1).any(axis=2) & available
    if empty.any():
        i, k = np.argwhere(empty)[0]
        valid = init[i] + leads[k]
        raise UserError(
            f"the climatology of variable {name} has no finite value at the valid time {format_time(valid)} (init time "
            f"{format_time(init[i])} lead {leads[k] / np.timedelta64(1, 'h'):g} h); check the climatology (the "
            "--climatology file, or without one the truth it is computed from)"
        )


def _refuse_empty_truth(values: np.ndarray, available: np.ndarray, name: str, init, leads, levels) -> None:
    """Refuse a truth field (of any level) with no finite value at a scored valid time (a time the store
    lists but holds no data for): every point left out, each source's scores of its leads would be NaN,
    averaged over init times that ``n_init_times`` still counts."""
    finite = np.isfinite(values).any(axis=(-2, -1)).reshape(*values.shape[:2], -1)  # (time, lead, levels)
    empty = ~finite.all(axis=-1) & available
    if not empty.any():
        return
    i, k = np.argwhere(empty)[0]
    level = "" if levels is None else f" at level {levels[int(np.argmin(finite[i, k]))]}"
    raise UserError(
        f"the truth of variable {name}{level} has no finite value at the valid time {format_time(init[i] + leads[k])} "
        f"(init time {format_time(init[i])} lead {leads[k] / np.timedelta64(1, 'h'):g} h): a time the store lists "
        "but holds no data for? Score a forecast of init times whose leads end before it "
        "(forecast.drop_sel(time=...)), or fill that time in the truth store"
    )


def _refuse_empty_fields(
    values: np.ndarray, available: np.ndarray, name: str, init, leads, member, forecast: xr.DataArray
) -> None:
    """Refuse a forecast field (of any member and level) with no finite value at a scored (init time,
    lead), or members with no finite point in common (a point not finite in one member is left out of
    all): left out point by point (``nan`` "skip"), they left no point of their init time, whose NaN
    area mean made every score of that lead NaN (one blown-up member of one init time of four did).
    Before scoring, ``inputs`` checks the first, middle and last init time only (cheap: lazily)."""
    finite = np.isfinite(values).any(axis=(-2, -1)).reshape(*values.shape[:2], -1)  # (time, lead, members x levels)
    empty = ~finite.all(axis=-1) & available
    together = ""
    if member and not empty.any():  # every member finite somewhere, but never all at one point
        common = np.isfinite(values).all(axis=2).any(axis=(-2, -1)).reshape(*values.shape[:2], -1)
        empty = ~common.all(axis=-1) & available
        together = " in all members at once"
    if not empty.any():
        return
    i, k = np.argwhere(empty)[0]
    extra = [dim for dim in (member, "level") if dim and dim in forecast.dims]  # values' order after (time, lead)
    position = np.unravel_index(int(np.argmin(finite[i, k])), [forecast.sizes[dim] for dim in extra])
    which = dict(zip(extra, position, strict=True)) if not together else {}
    raise UserError(empty_field_message(name, format_time(init[i]), leads[k], forecast, which, together))


def empty_field_message(name: str, init: str, lead, forecast: xr.DataArray, which: dict, together: str = "") -> str:
    """Why a forecast field with no finite value at an (init time, lead) is refused, naming it: ``which``
    the positions of its member and level (``together``: no point finite in all members at once)."""
    labels = ", ".join(f"{dim}={forecast[dim].values[index]}" for dim, index in which.items())
    return (
        f"forecast variable {name} is NaN everywhere{together} at init time {init} lead "
        f"{lead / np.timedelta64(1, 'h'):g} h{f' ({labels})' if labels else ''}: every score of that lead would be "
        "NaN; check the forecast file (a failed or unfinished model run?), or leave that init time out "
        "(forecast.drop_sel(time=...))"
    )


def _results_dataset(
    forecast, truth, variables, totals, metrics, sources, region_names, member, nonfinite
) -> xr.Dataset:
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
        for what, count in zip(("forecast", "truth"), nonfinite[v], strict=True):
            data_vars[f"{v}_nonfinite_{what}"] = xr.DataArray(
                count,
                dims=(LEAD_TIME,),
                attrs={
                    "long_name": f"NaN or infinite values of the {what} of {long_name} left out of the scores, per "
                    "lead over the init times with truth"
                    + (
                        " (at the valid times, with the points the climatology lacks there, and at the init times "
                        "for persistence)"
                        if what == "truth"
                        else ""
                    ),
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
    if "persistence" in sources:
        persisted = totals[variables[0], "persistence"].counts.values
        if not np.array_equal(persisted, results["n_init_times"].values):  # some init times are not in the truth
            results["n_init_times_persistence"] = xr.DataArray(
                persisted,
                dims=(LEAD_TIME,),
                attrs={"long_name": "init times whose init and valid times are in the truth (persistence's scores "
                       "average over them)", "units": "1"},
            )  # fmt: skip
    if member:
        results.attrs["members"] = int(forecast.sizes[member])
        results.attrs["ensemble_dim"] = member
    return results
