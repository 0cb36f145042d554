"""Score a forecast file against a truth store: ``s2forecast evaluate``.

Reads a forecast in WeatherBench2 (WB2) layout (what ``s2forecast rollout`` writes), a truth
store (``s2forecast.data.store`` layout) and optionally a WB2-layout climatology, and
writes one results file in WB2's results layout (:mod:`s2forecast.evaluation.scoring`): per
field, metric, source, region, lead time and level the scores of three sources:

    forecast      the forecast file (an ensemble: deterministic scores of its mean, plus CRPS,
                  spread, spread-skill, ensemble-mean RMSE and a rank histogram);
    persistence   ``f_t(tau) = o_t``, the truth at the init time;
    climatology   ``f_t(tau) = c(t + tau)``.

Modules: :mod:`~s2forecast.evaluation.inputs` (open and check), :mod:`~s2forecast.evaluation.scoring`
(metric objects, streaming over init times), :mod:`~s2forecast.evaluation.regions` (WB2 regions),
:mod:`~s2forecast.evaluation.report` (results file, CSV, table, plots); this module claims the
outputs and holds the command.

Inputs:
    forecast: NetCDF (opened with dask chunks of one init time) or zarr; dims ``(time,
        prediction_timedelta, [member], [level], latitude, longitude)``, ``time`` the init time
        (datetime64), ``prediction_timedelta`` the lead (timedelta64, or numbers with a ``units``
        attribute such as ``hours``), the member dim named ``realization`` (WB2), ``number``
        (ECMWF/cfgrib) or ``member``, at least 2 members; latitude in either order; a
        ``valid_time`` coordinate is ignored. Variable names and units as in the truth store.
    truth: a store opened with :func:`~s2forecast.data.store.open_store`, dims ``(time,
        [level], latitude, longitude)``, ``time`` the valid time; a ``land_sea_mask`` (or ``lsm``)
        variable adds WB2's land regions.
    climatology: WB2 layout ``(dayofyear, hour, [level], latitude, longitude)``; by default
        computed from the truth store (the method is recorded in the output's attributes).

Outputs (``out`` = ``METRICS.nc``):
    METRICS.nc: the results file (CF-1.8; layout in :mod:`s2forecast.evaluation.scoring`), the
        command and inputs in its attributes; written atomically.
    METRICS.csv: long format, columns ``variable, level, region, lead_hours, source, metric, value, units``.
    METRICS_plots/: PNGs per plotted field: RMSE and ACC versus lead time with the init times per
        lead (global), spectra of forecast and truth, forecast/truth/error maps; and scorecards of
        the forecast against persistence and climatology (RMSE change per field, region, lead).
    Spectra (:mod:`s2forecast.evaluation.spectra`) of forecast and truth at the map leads go into
    the results file as ``<field>_sh_power`` and ``<field>_zonal_power``.

Scoring streams: init times are read in blocks, every block is aligned once and scored by every
metric; per-init-time statistics are summed over the init times whose valid time is in the
truth and finalized once (WB2: RMSE = sqrt of the MSE averaged over init times).
"""

import contextlib
import datetime
import os
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.evaluation import report, scoring
from s2forecast.evaluation.inputs import (
    _check_grid,
    _check_units,
    _check_values,
    _check_variables,
    _climatology_from_truth,
    _describe_source,
    _forecast_variables,
    _is_path,
    _missing_truth,
    _open_climatology,
    _parse_leads,
    land_sea_mask,
    open_forecast,
    open_truth,
)
from s2forecast.evaluation.metrics import INIT_DIM, LEAD_DIM
from s2forecast.evaluation.regions import LAND_REGIONS, STANDARD_REGIONS, parse_box, region_weights
from s2forecast.evaluation.report import format_table, metrics_table
from s2forecast.output import (
    GENERATION_ATTR,
    MARKER_ATTR,
    Output,
    check_target,
    check_unchanged,
    file_sha256,
    netcdf_attributes,
)
from s2forecast.user_errors import UserError

__all__ = ["evaluate", "format_table", "metrics_table", "open_forecast", "open_truth"]


def default_regions(truth: xr.Dataset) -> list[str]:
    """WB2's standard regions, plus its land regions when the truth has a land-sea mask."""
    names = list(STANDARD_REGIONS)
    return names + list(LAND_REGIONS) if land_sea_mask(truth) is not None else names


def _check_regions(regions: Sequence[str]) -> list[str]:
    regions = list(regions)
    for name in regions:
        if name not in STANDARD_REGIONS and name not in LAND_REGIONS:
            parse_box(name)  # ValueError naming the standard regions and the box syntax
    duplicates = sorted({name for name in regions if regions.count(name) > 1})
    if duplicates:
        raise UserError(f"region(s) {duplicates} given twice; give each once")
    return regions


def _claim_outputs(out: Path, inputs: list, overwrite: bool, plots: bool) -> list[Output]:
    """The metrics NetCDF, its CSV and (with ``plots``) its plots directory, claimed under the
    output policy before any computation (``s2forecast.output``); returned in the order they are
    committed: plots, CSV, then the NetCDF that vouches for them."""
    check_target(out, inputs)  # first: `--out .` or an input is refused as such, whatever its name
    if out.suffix != ".nc":
        raise UserError(f"--out must name a NetCDF file ending in .nc (e.g. metrics.nc), got {out}")
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
    regions: Sequence[str] | None = None,
    command: str | None = None,
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
        regions: region names (:data:`~s2forecast.evaluation.regions.STANDARD_REGIONS`, the land
            regions) or boxes ``"lat0,lat1,lon0,lon1"``; default WB2's standard set (and its land
            regions when the truth has a land-sea mask).
        command: the command line recorded in the results file (default: the Python call).
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
    forecast_ds = open_forecast(forecast)
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
    regions = default_regions(truth_ds) if regions is None else _check_regions(regions)
    mask = land_sea_mask(truth_ds) if any(name in LAND_REGIONS for name in regions) else None
    weights = region_weights(regions, forecast_ds["latitude"].values, forecast_ds["longitude"].values, mask)
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
            regions=(regions, weights), command=command or f"evaluate({_describe_source(forecast)!r}, ...) (Python)",
        )  # fmt: skip
        for output in outputs:
            output.commit()
    return metrics


def _score_and_write(
    forecast, forecast_ds, truth_ds, truth_name, climatology, variables, levels, map_leads,
    *, progress: bool, period, generations: dict, outputs: list[Output], regions, command: str,
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

    metrics = _score(forecast_ds, truth_ds, clim, variables, regions, progress)
    counts = metrics["n_init_times"].values
    if not np.array_equal(counts, expected):
        raise RuntimeError(f"internal error: init times per lead {counts.tolist()} != expected {expected.tolist()}")
    ensemble_attrs = dict(metrics.attrs)  # ensemble size and dim
    spectra = report.compute_spectra(forecast_ds, truth_ds, variables, map_leads)
    metrics = metrics.merge(spectra)
    csv_path = csv_output.path
    plot_dir = out.with_name(f"{out.stem}_plots")
    metrics.attrs = {
        "title": "forecast skill scores (s2forecast evaluate)",
        "Conventions": "CF-1.8",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command,
        **ensemble_attrs,
        "forecast": _describe_source(forecast),
        "truth": truth_name,
        **{key: value if isinstance(value, int | float) else str(value) for key, value in clim_attrs.items()},
        "init_time_first": str(pd.Timestamp(init_times.min())),
        "init_time_last": str(pd.Timestamp(init_times.max())),
        "n_init_times_forecast": int(init_times.size),
        "rmse_definition": "sqrt(mean over init times of the latitude-weighted MSE) (WeatherBench2)",
        "acc_definition": "uncentered anomaly correlation per init time w.r.t. the climatology at the valid time, "
        "averaged over init times (WeatherBench2); undefined (NaN) for the climatology source",
        "crps_definition": "fair CRPS mean_m |X_m - Y| - sum_ij |X_i - X_j| / (2 M (M - 1)), area-weighted, "
        "averaged over init times (WeatherBench2)",
        "spread_definition": "sqrt(mean over init times of the area-weighted unbiased ensemble variance); "
        "spread_skill = spread / ensemble_mean_rmse (WeatherBench2)",
        "ensemble_metrics": "persistence and climatology are one-member ensembles (WeatherBench2): crps = their "
        "mean absolute error, spread = spread_skill = 0, ensemble_mean_rmse = rmse",
        "regions": "WeatherBench2 scripts/evaluate.py predefined_regions (box bounds inclusive); a box "
        "'lat0,lat1,lon0,lon1' wraps through 0 E when lon0 > lon1; land regions weight by the land fraction",
        "bias_definition": "mean over init times of the latitude-weighted mean of forecast - truth",
        "latitude_weights": "cell area: sin(upper bound) - sin(lower bound), normalized to mean 1 (WeatherBench2)",
        "persistence": "f_t(tau) = truth at the init time t",
        "missing_truth": "leads whose valid time is missing from the truth average over fewer init times "
        "(n_init_times); metrics are NaN where n_init_times is 0",
        "csv": str(csv_path.resolve()),
    }
    if spectra.data_vars:
        metrics.attrs["spectra"] = (
            f"<field>_sh_power: spherical-harmonic power per degree l (sum over l = area mean of the field squared); "
            f"<field>_zonal_power: WeatherBench2's zonal energy spectrum averaged over |latitude| 30-60 deg; forecast "
            f"(an ensemble's first member) and truth at the map leads, averaged over "
            f"{spectra.attrs['spectra_init_times']} init times (s2forecast.evaluation.spectra)"
        )
    if plots_output is not None:
        metrics.attrs["plots_dir"] = str(plot_dir.resolve())
    from s2forecast import __version__

    metrics.attrs["s2forecast_version"] = __version__
    metrics_table(metrics).to_csv(csv_output.tmp, index=False)
    metrics.attrs.update({**metrics_output.attrs, "csv_sha256": file_sha256(csv_output.tmp)})
    report.write_results(metrics, metrics_output.tmp)
    files = []
    if plots_output is not None:
        written = report._make_plots(metrics, forecast_ds, truth_ds, variables, map_leads, plots_output.tmp)
        files = [plot_dir / path.name for path in written]
    for path, (what, generation) in generations.items():
        check_unchanged(path, generation, what)
    metrics.attrs["plot_files"] = [str(path) for path in files]
    return metrics


def _score(forecast, truth, clim, variables, regions, progress) -> xr.Dataset:
    names, weights = regions
    return scoring.score(forecast, truth, clim, variables, weights, names, progress=progress)
