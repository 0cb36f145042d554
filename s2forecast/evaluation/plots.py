"""PNG figures of forecast skill: scores versus lead time and forecast/truth/error maps.

Matplotlib is imported lazily and used through ``Figure`` with the Agg canvas, so no
pyplot state or global backend is touched (safe inside notebooks and servers).
"""

from pathlib import Path

import numpy as np
import xarray as xr

MODEL_STYLES = {
    "forecast": {"color": "tab:blue", "marker": "o", "label": "forecast"},
    "persistence": {"color": "tab:orange", "marker": "s", "label": "persistence"},
    "climatology": {"color": "tab:gray", "marker": None, "linestyle": "--", "label": "climatology"},
}


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))  # fixed margins: constrained layout costs ~1 s per figure
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Path) -> Path:
    path = Path(path)
    figure.savefig(path, dpi=100, format="png")
    return path


def plot_scores(scores: xr.DataArray, path: str | Path, title: str, units: str = "") -> Path:
    """RMSE and ACC versus lead time (hours), one line per model.

    Args:
        scores: dims ``(metric, model, prediction_timedelta)`` with metric including ``rmse``
            and ``acc`` and a ``lead_hours (prediction_timedelta)`` coordinate (one field of
            the metrics Dataset of :func:`s2forecast.evaluation.evaluate.evaluate`).
        path: PNG to write.
        title: e.g. ``Z500``.
        units: the field's units, for the RMSE axis.

    Returns:
        ``path``. Models whose scores are all NaN (e.g. the climatology's ACC) are left out.
    """
    hours = scores["lead_hours"].values
    figure = _figure(10, 4)
    axes = figure.subplots(1, 2, gridspec_kw={"left": 0.08, "right": 0.98, "bottom": 0.13, "top": 0.88, "wspace": 0.22})
    for ax, metric, ylabel in (
        (axes[0], "rmse", f"RMSE [{units}]" if units else "RMSE"),
        (axes[1], "acc", "ACC"),
    ):
        for model in scores["model"].values.tolist():
            values = scores.sel(metric=metric, model=model).values
            if np.all(np.isnan(values)):
                continue
            ax.plot(hours, values, **MODEL_STYLES.get(model, {"label": model}))
        ax.set_xlabel("lead time [h]")
        if 1 < hours.size <= 10:
            ax.set_xticks(hours)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend()
    axes[0].set_ylim(bottom=0)
    figure.suptitle(f"{title}: skill versus lead time")
    return _save(figure, path)


def plot_maps(forecast: xr.DataArray, truth: xr.DataArray, path: str | Path, title: str, units: str = "") -> Path:
    """Forecast, truth and error (forecast - truth) maps, one row per lead.

    Args:
        forecast: dims ``(prediction_timedelta, latitude, longitude)``, latitude in any order.
        truth: the same dims and coordinates (the truth at the valid times; NaN where missing).
        path: PNG to write.
        title: e.g. ``Z500, init 2020-01-01``.
        units: the field's units, for the colour bars.

    Returns:
        ``path``.
    """
    forecast = forecast.sortby("latitude").sortby("longitude")
    truth = truth.sortby("latitude").sortby("longitude")
    error = forecast - truth
    lat, lon = forecast["latitude"].values, forecast["longitude"].values
    leads = forecast["prediction_timedelta"].values
    half = 0.5 * float(np.min(np.diff(lat))) if lat.size > 1 else 1.0
    lat_limits = (max(-90.0, float(lat[0]) - half), min(90.0, float(lat[-1]) + half))  # pole rows end at the pole
    fields = np.concatenate([np.ravel(forecast.values), np.ravel(truth.values)])
    finite = fields[np.isfinite(fields)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    err = np.abs(error.values[np.isfinite(error.values)])
    emax = float(err.max()) if err.size and err.max() > 0 else 1.0
    height = 3.0 * len(leads) + 0.6
    figure = _figure(14, height)
    margins = {"left": 0.05, "right": 0.97, "bottom": 0.5 / height, "top": 1 - 0.9 / height, "hspace": 0.45}
    axes = figure.subplots(len(leads), 3, squeeze=False, gridspec_kw={**margins, "wspace": 0.3})
    for row, lead in enumerate(leads):
        hours = float(lead / np.timedelta64(1, "h"))
        panels = (
            ("forecast", forecast.isel(prediction_timedelta=row).values, "viridis", vmin, vmax),
            ("truth", truth.isel(prediction_timedelta=row).values, "viridis", vmin, vmax),
            ("forecast - truth", error.isel(prediction_timedelta=row).values, "RdBu_r", -emax, emax),
        )
        for ax, (name, values, cmap, low, high) in zip(axes[row], panels, strict=True):
            mesh = ax.pcolormesh(lon, lat, values, cmap=cmap, vmin=low, vmax=high, shading="nearest")
            ax.set_title(f"{name}, lead {hours:g} h")
            ax.set_ylim(*lat_limits)
            ax.set_xlabel("longitude [°E]")
            ax.set_ylabel("latitude [°N]")
            if not np.isfinite(values).any():
                ax.text(0.5, 0.5, "no truth at this valid time", ha="center", va="center", transform=ax.transAxes)
            figure.colorbar(mesh, ax=ax, label=units)
    figure.suptitle(title)
    return _save(figure, path)
