"""Outputs of ``s2forecast evaluate``: the CF results file, its CSV, the text table and the plots.

The results layout is described in :mod:`s2forecast.evaluation.scoring`. On disk the string
dims ``metric``, ``source`` and ``region`` are CF label variables of the dim's own name (char
arrays ``metric(metric, string<n>)``, CF 6.1; CF coordinate variables are numeric) listed in the
data variables' ``coordinates``: xarray reads them as string indexes, ``.sel(metric="rmse")``.
"""

import warnings
from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.evaluation.inputs import check_name_bytes, land_sea_mask, lead_hours
from s2forecast.evaluation.metrics import (
    INIT_DIM,
    LEAD_DIM,
    MissingTruthWarning,
    member_dim,
    truth_at_valid_times,
    truth_available,
)
from s2forecast.evaluation.scoring import LEAD_TIME, NonFiniteWarning

# rank: the rank histogram's (members below the truth, on its rows, metric "rank_histogram"); empty on the scores'
COLUMNS = ["variable", "level", "region", "lead_hours", "source", "metric", "value", "units", "rank"]
LABELLED_DIMS = ("metric", "source", "region", "spectrum_source")  # string dims, written as CF label variables
TIMEDELTA_COORDS = (LEAD_TIME, "spectrum_lead_time")  # written in hours, read back as timedelta64
SPECTRA_INITS = 8  # init times averaged in the spectra per lead: evenly spaced over those with truth at it


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
ENSEMBLE_PLOTTED = ("crps", "spread", "ensemble_mean_rmse", "spread_skill")  # plot_ensemble_scores' metrics


def metrics_table(metrics: xr.Dataset) -> pd.DataFrame:
    """Long format: columns ``variable, level, region, lead_hours, source, metric, value, units,
    rank`` (level empty for surface fields); an ensemble's rank histogram as rows of metric
    ``rank_histogram``, source ``forecast``, one per rank (rank empty on the other rows)."""
    frames = []
    for v in _score_variables(metrics):
        data = metrics[v].drop_vars("lead_hours").assign_coords(lead_time=metrics["lead_hours"].values)
        frame = data.rename(lead_time="lead_hours").to_dataframe(name="value").reset_index()
        units = dict(part.split(": ", 1) for part in data.attrs["metric_units"].split("; "))
        frame["units"] = frame["metric"].map(units)
        frames.append(frame.assign(variable=v))
        if f"{v}_rank_histogram" in metrics:
            hist = metrics[f"{v}_rank_histogram"].drop_vars("lead_hours")
            hist = hist.assign_coords(lead_time=metrics["lead_hours"].values).rename(lead_time="lead_hours")
            frame = hist.to_dataframe(name="value").reset_index()
            frames.append(frame.assign(variable=v, source="forecast", metric="rank_histogram", units="1"))
    table = pd.concat([frame.reindex(columns=COLUMNS) for frame in frames], ignore_index=True)
    table["rank"] = table["rank"].astype("Int64")  # 3, not 3.0; empty on the scores
    levels = table["level"].dropna()
    if np.all(np.mod(levels.to_numpy(dtype=np.float64), 1) == 0):
        table["level"] = table["level"].astype("Int64")  # 500, not 500.0; empty for surface fields
    if np.all(np.mod(table["lead_hours"].to_numpy(), 1) == 0):
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


def shown_region(metrics: xr.Dataset) -> str:
    """The region of the table and of the score plots: ``global`` when scored, else the first
    (then named in the table's header and the plots' titles)."""
    regions = metrics["region"].values.tolist()
    return "global" if "global" in regions else regions[0]


def _format_value(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.4g}"


def format_table(metrics: xr.Dataset, max_leads: int = MAX_TABLE_LEADS) -> str:
    """A compact text table: per field, forecast RMSE, persistence RMSE and forecast ACC per lead
    (those of them the results hold), and an ensemble's CRPS and spread/skill.

    The scores of :func:`shown_region`, named in the header when not ``global``. Headline fields
    (Z500, T850, T2M) come first; at most ``max_leads`` leads, evenly chosen.
    ACC is marked ``ACC*``, with a footnote, when the results carry an ``acc_caveat``.
    """
    leads = _table_leads(metrics.sizes[LEAD_TIME], max_leads)
    headers = [f"{lead_hours(metrics[LEAD_TIME].values[k])}h" for k in leads]
    region = shown_region(metrics)
    quantities = [("RMSE", "rmse", "forecast"), ("RMSE persistence", "rmse", "persistence"), ("ACC", "acc", "forecast"),
                  ("CRPS", "crps", "forecast"), ("spread/skill", "spread_skill", "forecast")]  # fmt: skip
    caveat = metrics.attrs.get("acc_caveat")
    if caveat:
        quantities = [("ACC*" if metric == "acc" else label, metric, source) for label, metric, source in quantities]
    have = (metrics["metric"].values.tolist(), metrics["source"].values.tolist())
    quantities = [
        (label, metric, source) for label, metric, source in quantities if metric in have[0] and source in have[1]
    ]
    rows = []
    for label, v, level in table_fields(metrics):
        data = metrics[v].sel(level=level) if level is not None else metrics[v]
        units = metrics[v].attrs.get("field_units", "")
        name = f"{label} [{units}]" if units else label
        for i, (quantity, metric, source) in enumerate(quantities):
            values = data.sel(metric=metric, source=source, region=region).values[leads]
            rows.append((name if i == 0 else "", quantity, [_format_value(x) for x in values]))
    rows.append(("init times", "", [str(int(n)) for n in metrics["n_init_times"].values[leads]]))
    nonfinite = [metrics[name].values for name in metrics.data_vars if "_nonfinite_" in str(name)]
    if any(count.any() for count in nonfinite):  # left out of the scores: say so beside them
        rows.append(("NaN/inf values", "skipped", [str(int(n)) for n in np.sum(nonfinite, axis=0)[leads]]))
    corner = "" if region == "global" else f"region {region}"  # which scores these are, when not global
    width_quantity = max(len(row[1]) for row in rows)
    width_name = max(*(len(row[0]) for row in rows), len(corner) - width_quantity - 2)
    width = max(9, *(len(h) for h in headers), *(len(x) for row in rows for x in row[2])) + 1
    lines = [corner.ljust(width_name + width_quantity + 2) + "".join(h.rjust(width) for h in headers)]
    for name, quantity, cells in rows:
        lines.append(f"{name:<{width_name}}  {quantity:<{width_quantity}}" + "".join(x.rjust(width) for x in cells))
    if caveat and any(metric == "acc" for _, metric, _ in quantities):
        lines.append(f"* {caveat}")
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


def check_plot_file_names(forecast: xr.Dataset, variables: Sequence[str]) -> None:
    """Refuse, before the scoring, a variable whose plot file name would have more than 255 bytes:
    the longest is ``<field>[_<level>hPa]_rank_histogram.png`` of an ensemble, ``..._spectra.png``
    of a deterministic forecast (``write_plots``)."""
    suffix = "_rank_histogram.png" if member_dim(forecast.dims) is not None else "_spectra.png"
    check_name_bytes(forecast, variables, "plot file name", 255, suffix, with_level=True)


def _select_levels(data: xr.DataArray, levels) -> xr.DataArray:
    return data.sel(level=levels) if levels is not None and "level" in data.dims else data


def write_plots(
    metrics: xr.Dataset,
    forecast: xr.Dataset,
    truth: xr.Dataset,
    variables: list[str],
    map_leads: np.ndarray,
    plot_dir: Path,
) -> list[Path]:
    """The PNGs of an evaluation in ``plot_dir`` (made if absent): per plotted field (:func:`_plot_levels`)
    its scores versus lead (:func:`shown_region`, named in the title when not global), spectra (when
    the results hold them) and the maps of the first init time at ``map_leads``; for an ensemble
    also its CRPS and spread-skill versus lead (``<field>_ensemble.png``, when the results hold
    them) and rank histograms (``<field>_rank_histogram.png``), its maps and spectra those of the
    ensemble mean and of the members; a scorecard against each baseline the results hold.

    Args:
        metrics: the results (``evaluation.scoring`` layout).
        forecast, truth: the evaluation's inputs (the maps' fields).
        variables: the scored variables.
        map_leads: (n,) timedelta64 leads of the maps.

    Returns:
        The files written.
    """
    from s2forecast.evaluation import plots

    plot_dir.mkdir(exist_ok=True)
    files = []
    # the maps' init time: the first with the most truth at the map leads (the first alone drew empty
    # truth and error panels when its valid times were missing, beside inits with all of theirs)
    inits = forecast[INIT_DIM].values
    available = truth_available(truth, inits, map_leads)  # (init, map lead)
    shown = int(np.argmax(available.sum(axis=1)))
    present = (inits[shown] + map_leads)[available[shown]]
    init = inits[shown : shown + 1]
    coast = land_sea_mask(truth)
    earth = "trajectory" not in truth.coords  # shallow-water trajectories: no Earth's coastlines on their maps
    region = shown_region(metrics)
    for v in variables:
        levels = metrics["level"].values.tolist() if "level" in metrics[v].dims else None
        units = metrics[v].attrs.get("field_units", "")
        f = forecast[v].isel({INIT_DIM: [shown]}).sel({LEAD_DIM: map_leads})
        member = member_dim(f.dims)
        if member is not None:
            f = f.mean(member)  # maps of the ensemble mean
        forecast_label = "forecast" if member is None else "ensemble mean"
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
            scores = scores.sel(region=region)
            scored = label if region == "global" else f"{label} ({region})"  # which scores, when not global
            path = plot_dir / f"{_file_stem(v, level)}_scores.png"
            counts = metrics["n_init_times"].values
            files.append(plots.plot_scores(scores, path, title=scored, units=units, n_init_times=counts,
                                           acc_caveat=metrics.attrs.get("acc_caveat"),
                                           forecast_label=forecast_label))  # fmt: skip
            # an ensemble's: a deterministic forecast scored with them (one member) has no "members" (KeyError)
            if "members" in metrics.attrs and set(ENSEMBLE_PLOTTED) <= set(metrics["metric"].values.tolist()):
                path = plot_dir / f"{_file_stem(v, level)}_ensemble.png"
                members = metrics.attrs["members"]  # an ensemble's (scoring)
                files.append(plots.plot_ensemble_scores(scores, path, scored, members, units, n_init_times=counts))
            if f"{v}_rank_histogram" in metrics:
                hist = metrics[f"{v}_rank_histogram"].sel(region=region)
                hist = hist.sel(level=level) if level is not None else hist
                path = plot_dir / f"{_file_stem(v, level)}_rank_histogram.png"
                files.append(plots.plot_rank_histograms(hist, path, title=f"{label} ({region})"))
            if f"{v}_sh_power" in metrics:
                sh, zonal = metrics[f"{v}_sh_power"], metrics[f"{v}_zonal_power"]
                if level is not None:
                    sh, zonal = sh.sel(level=level), zonal.sel(level=level)
                path = plot_dir / f"{_file_stem(v, level)}_spectra.png"
                name = "forecast" if member is None else "members (mean power)"
                files.append(plots.plot_spectra(sh, zonal, path, title=label, units=units, forecast_label=name))
            fl = f.isel({INIT_DIM: 0}) if level is None else f.isel({INIT_DIM: 0}).sel(level=level)
            ol = o.isel({INIT_DIM: 0}) if level is None else o.isel({INIT_DIM: 0}).sel(level=level)
            path = plot_dir / f"{_file_stem(v, level)}_maps.png"
            title = f"{label}, init time {pd.Timestamp(init[0]):%Y-%m-%d %H:%M}"
            files.append(plots.plot_maps(fl, ol, path, title=title, units=units, land_sea_mask=coast,
                                         forecast_label=forecast_label, earth=earth))  # fmt: skip
    baselines = [s for s in metrics["source"].values.tolist() if s != "forecast"]
    for baseline in baselines if "rmse" in metrics["metric"].values.tolist() else []:
        cells, rows, hours = scorecard(metrics, baseline)
        path = plot_dir / f"scorecard_{baseline}.png"
        scored = "ensemble-mean" if member_dim(forecast.dims) is not None else "forecast"  # an ensemble's RMSE
        title = f"{scored} RMSE vs {baseline} RMSE (%; blue: forecast better)"
        files.append(plots.plot_scorecard(cells, rows, hours, path, title))
    return files


def scorecard(
    metrics: xr.Dataset, baseline: str, max_leads: int = MAX_TABLE_LEADS
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The scorecard's cells: 100 (RMSE_forecast - RMSE_baseline) / RMSE_baseline per field
    (headline fields first) and region (rows) and lead (columns, at most ``max_leads``).

    Returns:
        cells (rows, leads), row labels (``"Z500 europe"``), lead hours (leads,).
    """
    leads = _table_leads(metrics.sizes[LEAD_TIME], max_leads)
    cells, rows = [], []
    for label, v, level in table_fields(metrics):
        data = metrics[v].sel(level=level) if level is not None else metrics[v]
        rmse = data.sel(metric="rmse").isel({LEAD_TIME: leads})
        for region in metrics["region"].values.tolist():
            ours, theirs = (rmse.sel(source=name, region=region).values for name in ("forecast", baseline))
            with np.errstate(invalid="ignore", divide="ignore"):
                cells.append(100.0 * (ours - theirs) / theirs)
            rows.append(f"{label} {region}")
    return np.asarray(cells), rows, metrics["lead_hours"].values[leads]


def compute_spectra(forecast: xr.Dataset, truth: xr.Dataset, variables: list[str], leads: np.ndarray) -> xr.Dataset:
    """Spectra of forecast and truth at ``leads`` (``evaluation.spectra``), each lead averaged over up
    to ``SPECTRA_INITS`` init times (evenly spaced over those whose valid time at that lead is in the
    truth); of an ensemble, the mean power of its members (each member keeps the small scales that
    the ensemble mean averages out). A lead without truth for any init time has NaN spectra and is a
    :class:`MissingTruthWarning`.

    Returns:
        per field ``<field>_sh_power`` (spectrum_source, spectrum_lead_time, [level], degree) and
        ``<field>_zonal_power`` (spectrum_source, spectrum_lead_time, [level], frequency),
        spectrum_source = forecast, truth; the coordinate ``spectra_n_init_times`` (spectrum_lead_time)
        and the attribute ``spectra_init_times`` (:func:`_spectra_init_times`) count the init times
        chosen; each field's ``init_times_averaged`` those averaged, less the ones where its forecast
        or truth has a NaN or inf (a :class:`NonFiniteWarning`); an empty Dataset when no lead has truth.
    """
    from s2forecast.evaluation import spectra

    init_times = forecast[INIT_DIM].values
    chosen = []  # per lead: the init times averaged
    available = truth_available(truth, init_times, np.asarray(leads))  # (init, lead), once for every lead
    for k in range(len(leads)):
        have = init_times[available[:, k]]
        positions = np.round(np.linspace(0, have.size - 1, min(SPECTRA_INITS, have.size))).astype(int)
        chosen.append(have[np.unique(positions)])
    counts = np.array([c.size for c in chosen])
    if (counts == 0).any():
        warnings.warn(
            f"the truth has no data at map lead(s) {', '.join(f'{lead_hours(lead)} h' for lead in leads[counts == 0])}"
            " for any init time: their spectra are " + ("left out" if (counts == 0).all() else "NaN"),
            MissingTruthWarning,
            stacklevel=3,
        )
    if not counts.any():
        return xr.Dataset()
    result = {}
    try:
        for v in variables:
            # one init time at a time, its spectra summed: memory of one init time's fields whatever the number
            # (at 0.25 deg, 8 init times at once held ~1.2 GB of fields and Fourier coefficients)
            totals = [None] * leads.size  # per lead: the sum of its init times' spectra
            averaged = np.zeros_like(counts)  # per lead: the init times in that sum
            some = None
            for init in np.unique(np.concatenate(chosen)):
                at = [k for k, c in enumerate(chosen) if np.isin(init, c)]  # the leads that average this init time
                one = _init_spectra(forecast[v], truth[v], init, leads[at])
                for j, k in enumerate(at):
                    with xr.set_options(keep_attrs=True):  # the sum keeps the spectra's units
                        lead = one.isel({LEAD_DIM: j})
                        some = lead
                        # a field with a NaN or inf (forecast or truth, any level or member) has no spectrum:
                        # that init time is left out of the lead's mean, not the lead made NaN by it
                        if not all(np.isfinite(lead[name].values).all() for name in ("sh_power", "zonal_power")):
                            continue
                        totals[k] = lead if totals[k] is None else totals[k] + lead
                        averaged[k] += 1
            left_out = counts - averaged
            if left_out.any():
                warnings.warn(
                    f"{v}: {int(left_out.sum())} of {int(counts.sum())} (init time, map lead) fields have NaN or "
                    f"infinite values: left out of its spectra, averaged over {_spectra_init_times(averaged, leads)} "
                    "init times (a lead of none: NaN)",
                    NonFiniteWarning,
                    stacklevel=3,
                )
            with xr.set_options(keep_attrs=True):  # a lead of no init time: NaN
                means = [some.where(False).assign_coords({LEAD_DIM: lead}) if total is None else total / n
                         for total, n, lead in zip(totals, averaged, leads, strict=True)]  # fmt: skip
                pair = xr.concat(means, dim=LEAD_DIM, coords="minimal", compat="override")
            pair = pair.transpose("source", LEAD_DIM, ...)
            pair = pair.rename(source="spectrum_source", **{LEAD_DIM: "spectrum_lead_time"})
            pair["spectrum_lead_time"].attrs["long_name"] = "lead time of the spectra"
            used = _spectra_init_times(averaged, leads)
            for name in ("sh_power", "zonal_power"):
                result[f"{v}_{name}"] = pair[name].assign_attrs(init_times_averaged=used)
    finally:  # the grid's Legendre table (0.75 GB at 0.25 deg) is not needed by the plots that come next
        spectra.release_tables()
    n_init = ("spectrum_lead_time", counts, {"long_name": "init times averaged in the spectra", "units": "1"})
    return (
        xr.Dataset(result)
        .assign_coords(spectra_n_init_times=n_init)
        .assign_attrs(spectra_init_times=_spectra_init_times(counts, leads))
    )


def _spectra_init_times(counts: np.ndarray, leads: np.ndarray) -> int | str:
    """The init times averaged in the spectra: their number when the same at every lead (``8``),
    else per lead (``"1 (lead 0 h), 0 (lead 30 h)"``)."""
    if (counts == counts[0]).all():
        return int(counts[0])
    return ", ".join(f"{n} (lead {lead_hours(lead)} h)" for n, lead in zip(counts, leads, strict=True))


def _init_spectra(forecast: xr.DataArray, truth: xr.DataArray, init: np.datetime64, leads: np.ndarray) -> xr.Dataset:
    """``spectra.spectra`` of one init time of a variable's ``forecast`` at ``leads`` and its truth."""
    from s2forecast.evaluation import spectra

    f = forecast.sel({INIT_DIM: [init], LEAD_DIM: leads}).astype(np.float64).load()
    member = member_dim(f.dims)
    levels = f["level"].values if "level" in f.dims else None
    o = _select_levels(truth, levels).sel({INIT_DIM: np.unique(init + leads)}).astype(np.float64).load()
    o = truth_at_valid_times(o, f.isel({member: 0}, drop=True) if member else f).drop_vars("valid_time")
    o = o.transpose(*(d for d in f.dims if d != member))
    with np.errstate(invalid="ignore"):  # a field with a NaN or inf has NaN spectra (the scores count them)
        return spectra.spectra(f, o, member_dim=member)


def write_results(results: xr.Dataset, path: Path) -> None:
    """Write the results Dataset as CF-1.8 NetCDF4: each string dim ``d`` as a character label
    variable ``d(d, string<n>)`` (CF 6.1; coordinate variables are numeric), listed in the
    ``coordinates`` of the variables along it, so that CF checks pass and plain xarray reads it as
    the dim's index (``xr.open_dataset(path).geopotential.sel(metric="rmse")``)."""
    encoded = results.copy()
    encoding = {}
    labelled = [dim for dim in LABELLED_DIMS if dim in encoded.dims]
    for dim in labelled:
        encoded[dim] = encoded[dim].astype(str)
        encoded[dim].attrs.setdefault("long_name", f"{dim} name")
        encoding[dim] = {"dtype": "S1"}
    for name, var in encoded.variables.items():
        if np.issubdtype(var.dtype, np.timedelta64):
            encoding[name] = {"units": "hours", "dtype": "float64"}
        if name in encoded.coords and np.issubdtype(encoding.get(name, {}).get("dtype", var.dtype), np.floating):
            encoding.setdefault(name, {})["_FillValue"] = None  # coordinates have no missing values (CF 2.5.1)
    for var in encoded.data_vars.values():
        # xarray lists the non-dimension coordinates of a variable in its ``coordinates``; add the labels
        auxiliary = [c for c in encoded.coords if c not in encoded.dims and set(encoded[c].dims) <= set(var.dims)]
        coordinates = [*auxiliary, *(dim for dim in labelled if dim in var.dims)]
        if coordinates:
            var.encoding["coordinates"] = " ".join(coordinates)  # read by xarray's CF encoder, not the backend
    encoded.to_netcdf(path, format="NETCDF4", encoding=encoding)


def open_results(path) -> xr.Dataset:
    """Open a results file written by :func:`write_results`, with ``lead_time`` a timedelta and
    ``lead_hours`` in hours (``xr.open_dataset`` alone gives the same labels and values)."""
    results = xr.open_dataset(path, decode_timedelta=False)  # lead_hours stays hours, lead_time is decoded below
    for name in TIMEDELTA_COORDS:
        lead = results.get(name)
        if lead is not None and lead.attrs.get("units") == "hours":
            # rounded to the nanosecond: hours of 20 minutes are not exact in float64 (pandas gave 1 ns off)
            nanoseconds = np.rint(np.asarray(lead.values, dtype=np.float64) * 3.6e12).astype(np.int64)
            results = results.assign_coords({name: (name, nanoseconds.astype("timedelta64[ns]"), {
                k: v for k, v in lead.attrs.items() if k not in ("units", "dtype")})})  # fmt: skip
    for dim in LABELLED_DIMS:
        if f"{dim}_name" in results.variables:  # files written before issue 28: labels beside the dim
            labels = results[f"{dim}_name"].values.astype(str)
            results = results.drop_vars(f"{dim}_name").assign_coords({dim: labels})
    return results
