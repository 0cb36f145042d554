"""Score a forecast file against a truth store: ``s2forecast evaluate``.

Reads a forecast in WeatherBench2 (WB2) layout (what ``s2forecast rollout`` writes), a truth
store (``s2forecast.data.store`` layout) and optionally a WB2-layout climatology, and
writes one results file in WB2's results layout (:mod:`s2forecast.evaluation.scoring`): per
field, metric, source, region, lead time and level the scores of the forecast and the baselines
(what is scored: :class:`~s2forecast.evaluation.config.EvaluationConfig`; by default):

    forecast      the forecast file (an ensemble: deterministic scores of its mean, plus CRPS,
                  spread, spread-skill, ensemble-mean RMSE and a rank histogram);
    persistence   ``f_t(tau) = o_t``, the truth at the init time;
    climatology   ``f_t(tau) = c(t + tau)``.

Modules: :mod:`~s2forecast.evaluation.config` (what is scored: variables, metrics, baselines,
regions by name), :mod:`~s2forecast.evaluation.inputs` (open and check: ``EvaluationInputs``),
:mod:`~s2forecast.evaluation.metrics` (the metric engine), :mod:`~s2forecast.evaluation.scoring`
(streaming over init times, the results layout), :mod:`~s2forecast.evaluation.regions` (WB2
regions), :mod:`~s2forecast.evaluation.report` (results file, CSV, table, plots); this module
claims the outputs and holds the command.

Inputs:
    forecast: NetCDF (opened with dask chunks of one init time) or zarr; dims ``(time,
        prediction_timedelta, [member], [level], latitude, longitude)``, ``time`` the init time
        (datetime64), ``prediction_timedelta`` the lead (timedelta64, or numbers with a ``units``
        attribute such as ``hours``), the member dim named ``realization`` (WB2), ``number``
        (ECMWF/cfgrib) or ``member``, at least 2 members; the dims in any order (WeatherBench2's
        ``(..., longitude, latitude)`` too) and latitude in either direction (both are put in
        the model's layout when opened: ``store.to_model_order``); a ``valid_time`` coordinate
        is ignored. Variable names and units as in the truth store.
    truth: a store opened with :func:`~s2forecast.data.store.open_store`, dims ``(time,
        [level], latitude, longitude)`` in any order, ``time`` the valid time; a ``land_sea_mask`` (or ``lsm``)
        variable adds WB2's land regions.
    climatology: WB2 layout ``(dayofyear, hour, [level], latitude, longitude)``; by default
        computed from the truth store (the method is recorded in the output's attributes).

Outputs (``out`` = ``METRICS.nc``):
    METRICS.nc: the results file (CF-1.8; layout in :mod:`s2forecast.evaluation.scoring`), the
        command and inputs in its attributes; written atomically.
    METRICS.csv: long format, columns ``variable, level, region, lead_hours, source, metric, value, units, rank``.
    METRICS_plots/: PNGs per plotted field: RMSE and ACC versus lead time with the init times per
        lead (global), spectra of forecast and truth, forecast/truth/error maps; and scorecards of
        the forecast against persistence and climatology (RMSE change per field, region, lead).
        Plots that cannot be drawn are a :class:`PlotWarning`: the results file and CSV are
        written without them (computed scores are never lost to a plot).
    Spectra (:mod:`s2forecast.evaluation.spectra`) of forecast and truth at the map leads go into
    the results file as ``<field>_sh_power`` and ``<field>_zonal_power``.

Scoring streams: init times are read in blocks, every block is aligned once and scored by every
metric; per-init-time statistics are summed over the init times whose valid time is in the
truth and finalized once (WB2: RMSE = sqrt of the MSE averaged over init times).
"""

import contextlib
import datetime
import os
import warnings
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.data.engine import Engine
from s2forecast.evaluation import report, scoring
from s2forecast.evaluation.climatology import MIN_ACC_YEARS, ClimatologyWarning, acc_caveat
from s2forecast.evaluation.config import BASELINES, DETERMINISTIC, ENSEMBLE, EvaluationConfig
from s2forecast.evaluation.inputs import COMPUTED_CLIMATOLOGY, EvaluationInputs, open_forecast, open_truth
from s2forecast.evaluation.metrics import INIT_DIM, LEAD_DIM, METRICS, nearest_hours
from s2forecast.evaluation.report import format_table, metrics_table
from s2forecast.output import (
    MARKER_ATTR,
    Output,
    artifact_kind,
    check_local,
    check_target,
    check_unchanged,
    file_sha256,
    netcdf_attributes,
    remove_if_still_ours,
    written_by_s2forecast,
)
from s2forecast.provenance import history_line
from s2forecast.user_errors import UserError, one_line

__all__ = ["EvaluationConfig", "EvaluationInputs", "evaluate", "format_table", "metrics_table", "open_forecast",
           "open_truth"]  # fmt: skip


# what the results' attributes say besides the metrics' own definitions (``Metric.definition``)
NOTES = {
    "ensemble_metrics": "persistence and climatology are one-member ensembles (WeatherBench2): crps = their "
    "mean absolute error, spread = spread_skill = 0, ensemble_mean_rmse = rmse",
    "regions": "WeatherBench2 scripts/evaluate.py predefined_regions (box bounds inclusive); a box "
    "'lat0,lat1,lon0,lon1' runs east from lon0 to lon1, longitudes compared mod 360 (340,20 wraps through 0 E, "
    "170,-170 crosses the dateline); land regions weight by the land fraction",
    "latitude_weights": "cell area: sin(upper bound) - sin(lower bound), normalized to mean 1 (WeatherBench2)",
}
MISSING_TRUTH = (
    "leads whose valid time is missing from the truth average over fewer init times (n_init_times); metrics are "
    "NaN where n_init_times is 0"
)

NONFINITE = {
    "skip": "NaN or infinite forecast and truth values are left out of each init time's area means, the weights "
    "renormalised over the finite points (WeatherBench2's skipna); a point where one ensemble member is not finite "
    "is left out for every member; counts per lead: <field>_nonfinite_forecast, <field>_nonfinite_truth",
    "error": "refused (--nan error): the scored forecast and truth values are all finite",
}


def _substituted_hours(
    climatology: xr.Dataset | None, init_times: np.ndarray, leads: np.ndarray, truth_times: np.ndarray
) -> str:
    """ "valid hour 3 -> 0, ..." for the valid hours a climatology of several hours lacks (its nearest
    held hour is used: ``metrics.climatology_slots``), of the valid times that are scored (in
    ``truth_times``); "" when it holds them all, or one hour (a mean that applies to every hour, by design)."""
    if climatology is None or climatology.sizes.get("hour", 0) < 2:
        return ""
    held = np.asarray(climatology["hour"].values, dtype=np.int64)
    valid = (init_times[:, None] + leads[None, :]).ravel()
    valid = np.unique(pd.DatetimeIndex(valid[np.isin(valid, truth_times)]).hour)
    lacking = valid[~np.isin(valid, held)]
    if lacking.size == 0:
        return ""
    used = nearest_hours(lacking, held).tolist()
    pairs = ", ".join(f"{h} -> {n}" for h, n in zip(lacking.tolist(), used, strict=True))
    return f"valid hour {pairs} (the climatology holds hours {sorted(held.tolist())})"


def _claim_outputs(out: Path, inputs: list, overwrite: bool, plots: bool) -> list[Output]:
    """The metrics NetCDF, its CSV and (with ``plots``) its plots directory, claimed under the
    output policy before any computation (``s2forecast.output``); returned in the order plots, CSV,
    NetCDF (``evaluate`` commits them the other way round: the NetCDF vouches for the CSV)."""
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
    storage_options: dict | None = None,
    config: EvaluationConfig | None = None,
    engine: Engine | None = None,
    nan: str = "skip",
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
        storage_options: fsspec options of a ``truth`` URL (e.g. credentials).
        config: the variables, metrics, baselines and regions by name (:class:`EvaluationConfig`);
            default the one made of ``variables`` and ``regions`` (give those in the config instead
            when you pass one).
        engine: where the blocks of init times are scored (``s2forecast.data.engine``: this process by
            default, or dask.distributed workers); the same scores either way.
        nan: NaN or infinite forecast or truth values: "skip" scores the finite points (each init
            time's area weights renormalised over them, WeatherBench2's skipna), records the counts
            per lead as ``<field>_nonfinite_forecast`` and ``<field>_nonfinite_truth`` and warns
            (:class:`~s2forecast.evaluation.scoring.NonFiniteWarning`); "error" refuses them.

    Returns:
        The metrics Dataset as written: per variable ``(metric, source, region, lead_time, [level])``,
        ``n_init_times (lead_time)``; in memory ``attrs["plot_files"]`` lists the PNGs written.

    Raises:
        FileNotFoundError: an input path does not exist.
        PermissionError: ``out`` cannot be written (checked before any computation).
        FileExistsError: an output exists and ``overwrite`` is not set.
        ValueError: grids differ, a forecast variable or level is not in the truth or the
            climatology, units differ between them, values are implausible in their units
            (degC labelled K, ...), an input is not in the expected layout, an unknown metric,
            baseline or region, an output collides with an input or with a path s2forecast may not
            replace, or an input was rewritten during the evaluation.
    """
    if config is None:
        config = EvaluationConfig(variables=variables, regions=regions)
    elif variables is not None or regions is not None:
        raise UserError("give variables and regions in the EvaluationConfig when you pass one, not beside it")
    if nan not in scoring.NAN_POLICIES:
        raise UserError(f"nan must be one of {scoring.NAN_POLICIES}, got {nan!r}")
    check_local(out)
    out = Path(out).expanduser()
    inputs = EvaluationInputs.open(
        forecast, truth, climatology, config=config, map_leads=map_leads, climatology_period=climatology_period,
        storage_options=storage_options,
    )  # fmt: skip
    if plots:
        report.check_plot_file_names(inputs.forecast, inputs.variables)
    outputs = _claim_outputs(out, inputs.local_paths, overwrite, plots)
    earlier_plots = _earlier_plots(out, overwrite)
    with contextlib.ExitStack() as stack:  # on any error every temporary output goes, nothing at --out changes
        for output in outputs:
            stack.enter_context(output)
        metrics, written = _score_and_write(inputs.with_climatology(), config, outputs, progress=progress,
                                            engine=engine, nan=nan)  # fmt: skip
        # An earlier CSV is ours while the earlier metrics file records its hash: judged and removed before the
        # new metrics file replaces that one, which goes first. A kill between the renames then leaves no CSV
        # that no metrics file vouches for (it was foreign for good, even with --overwrite).
        outputs[-2].remove_existing()  # the CSV
        for output in reversed(written):  # claimed as metrics file, CSV, plots; listed the other way round
            output.commit()
    if earlier_plots is not None and "plots_dir" not in metrics.attrs:  # results without plots: none of another run
        remove_if_still_ours(earlier_plots)  # judged again: a file saved inside it during the run keeps it
    return metrics


def _earlier_plots(out: Path, overwrite: bool) -> Path | None:
    """With ``overwrite``, the plots directory of the results being replaced (s2forecast's, of kind plots):
    removed when the new results come without plots (``--no-plots``, or drawing them failed), so that no
    plots of another run sit beside them. None otherwise (a directory of the user's is left alone)."""
    plot_dir = out.with_name(f"{out.stem}_plots")
    if overwrite and written_by_s2forecast(plot_dir) and artifact_kind(plot_dir) == "plots":
        return plot_dir
    return None


class PlotWarning(UserWarning):
    """The plots of an evaluation could not be drawn; its scores were written without them."""


def _score_and_write(
    inputs: EvaluationInputs,
    config: EvaluationConfig,
    outputs: list[Output],
    *,
    progress: bool,
    engine: Engine | None = None,
    nan: str = "skip",
) -> tuple[xr.Dataset, list[Output]]:
    """``evaluate`` once its inputs are open and its outputs claimed (``_claim_outputs``): score,
    write every output at its temporary path, and check that no input was rewritten meanwhile.

    Returns the metrics and the outputs to commit: all of them, or, when drawing the plots failed
    (a :class:`PlotWarning`), all but the plots directory: computed scores are never lost to a plot.
    """
    plots_output, csv_output, metrics_output = outputs if len(outputs) == 3 else (None, *outputs)
    out = metrics_output.path
    expected = inputs.init_times_with_truth()
    names = config.metrics_for(inputs.ensemble)
    metrics = _score(inputs, names, config.sources, progress, engine, nan)
    counts = metrics["n_init_times"].values
    if not np.array_equal(counts, expected):
        raise RuntimeError(f"internal error: init times per lead {counts.tolist()} != expected {expected.tolist()}")
    ensemble_attrs = dict(metrics.attrs)  # ensemble size and dim
    spectra = report.compute_spectra(inputs.forecast, inputs.truth, inputs.variables, inputs.map_leads)
    metrics = metrics.merge(spectra)
    csv_path = csv_output.path
    plot_dir = out.with_name(f"{out.stem}_plots")
    init_times = inputs.forecast[INIT_DIM].values
    clim_attrs = inputs.climatology_attrs
    caveat = None
    if "acc" in names:
        caveat = acc_caveat(clim_attrs, init_times[:, None] + inputs.forecast[LEAD_DIM].values[None, :])
    if caveat is not None:
        fix = (
            "give one with --climatology, or choose the truth's years with --climatology-start/--climatology-end"
            if clim_attrs.get("climatology_source") == COMPUTED_CLIMATOLOGY
            else "give --climatology such a climatology"  # the one given is the fault: the truth's years do not enter
        )
        warnings.warn(
            f"ACC is not meaningful here ({caveat}): it needs a climatology of at least {MIN_ACC_YEARS} years "
            f"outside the verified times (WeatherBench2 uses 1990-2019); {fix}",
            ClimatologyWarning,
            stacklevel=3,
        )
    leads = inputs.forecast[LEAD_DIM].values
    substituted = _substituted_hours(inputs.climatology, init_times, leads, inputs.truth["time"].values)
    if substituted:
        warnings.warn(
            f"the climatology lacks valid hours of the forecast: {substituted}; scored against those hours "
            "(ACC, the climatology baseline); give a climatology of every valid hour to score them at their own",
            ClimatologyWarning,
            stacklevel=3,
        )
    defined = dict.fromkeys(DETERMINISTIC + ENSEMBLE + names)  # the standard metrics' definitions, and any other's
    metrics.attrs = {
        "title": "forecast skill scores (s2forecast evaluate)",
        "Conventions": "CF-1.8",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "history": history_line(f"evaluate({inputs.forecast_name!r}, {inputs.truth_name!r}, ...) (Python)"),
        **ensemble_attrs,
        "forecast": inputs.forecast_name,
        "truth": inputs.truth_name,
        **{key: value if isinstance(value, int | float) else str(value) for key, value in clim_attrs.items()},
        "init_time_first": str(pd.Timestamp(init_times.min())),
        "init_time_last": str(pd.Timestamp(init_times.max())),
        "n_init_times_forecast": int(init_times.size),
        **{f"{name}_definition": METRICS[name].definition for name in defined if METRICS[name].definition},
        **NOTES,
        **{name: BASELINES[name] for name in config.baselines if BASELINES[name]},
        "missing_truth": MISSING_TRUTH,
        **({"acc_caveat": f"ACC not meaningful: {caveat}"} if caveat else {}),
        **({"climatology_hours_substituted": substituted} if substituted else {}),
        **({"named_regions": "; ".join(named)} if (named := [r for r in config.regions or () if "=" in r]) else {}),
        "nonfinite_values": NONFINITE[nan],
        "csv": str(csv_path.resolve()),
    }
    if spectra.data_vars:
        metrics.attrs["spectra"] = (
            f"<field>_sh_power: spherical-harmonic power per degree l (its sum: the area mean of the field "
            f"squared, less the power above the last degree, about nlat / 2 on equiangular grids); "
            f"<field>_zonal_power: WeatherBench2's zonal energy spectrum averaged over |latitude| 30-60 deg; forecast "
            f"(an ensemble: its members' mean power) and truth at the map leads, averaged over "
            f"{spectra.attrs['spectra_init_times']} init times, less those where a field has a NaN or inf "
            f"(each field's init_times_averaged) (s2forecast.evaluation.spectra)"
        )
    if plots_output is not None:
        metrics.attrs["plots_dir"] = str(plot_dir.resolve())
    from s2forecast import __version__

    metrics.attrs["s2forecast_version"] = __version__
    metrics_table(metrics).to_csv(csv_output.tmp, index=False)
    metrics.attrs.update({**metrics_output.attrs, "csv_sha256": file_sha256(csv_output.tmp)})
    report.write_results(metrics, metrics_output.tmp)
    files, committed = [], list(outputs)
    if plots_output is not None:
        try:
            written = report.write_plots(
                metrics, inputs.forecast, inputs.truth, inputs.variables, inputs.map_leads, plots_output.tmp
            )
            files = [plot_dir / path.name for path in written]
        except Exception as error:  # the scores are computed and written: keep them, without plots
            warnings.warn(
                f"the plots could not be drawn ({type(error).__name__}: {one_line(str(error))}); the scores are "
                f"written to {out} without them",
                PlotWarning,
                stacklevel=3,
            )
            plots_output.discard()
            committed.remove(plots_output)
            del metrics.attrs["plots_dir"]
            report.write_results(metrics, metrics_output.tmp)  # without the plots_dir it does not have
    for path, (what, generation) in inputs.generations.items():
        check_unchanged(path, generation, what)
    metrics.attrs["plot_files"] = [str(path) for path in files]
    return metrics, committed


def _score(
    inputs: EvaluationInputs,
    metrics: Sequence[str],
    sources: Sequence[str],
    progress: bool,
    engine: Engine | None,
    nan: str = "skip",
) -> xr.Dataset:
    return scoring.score(
        inputs.forecast, inputs.truth, inputs.climatology, inputs.variables, inputs.region_weights, inputs.regions,
        metrics, sources, progress=progress, engine=engine, nan=nan,
    )  # fmt: skip
