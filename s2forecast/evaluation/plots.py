"""PNG figures of forecast skill: scores versus lead time, spectra, forecast/truth/error maps
and scorecards; for ensembles also CRPS and spread-skill versus lead time and rank histograms.

Matplotlib is imported lazily and used through ``Figure`` with the Agg canvas, so no
pyplot state or global backend is touched (safe inside notebooks and servers).

Coastlines on maps: the 0.5 contour of the truth's land-sea mask when it has one, else Natural
Earth's 1:110m coastline shipped with the package (``coastlines_110m.npz``, 38 KB, made by
``scripts/make_coastlines.py``). Not cartopy: its wheels ship no coastlines and it downloads
Natural Earth on first use, which machines without network (many clusters) cannot.
"""

import functools
import gc
import textwrap
from pathlib import Path

import numpy as np
import xarray as xr

from s2forecast.data.store import longitudes_from_zero
from s2forecast.evaluation.metrics import reliable_spread_skill

COASTLINES = Path(__file__).with_name("coastlines_110m.npz")
SOURCE_STYLES = {
    "forecast": {"color": "tab:blue", "marker": "o", "label": "forecast"},
    "persistence": {"color": "tab:orange", "marker": "s", "label": "persistence"},
    # a marker too: a value without a finite neighbour (one lead, a lead without truth beside it) is a point
    "climatology": {"color": "tab:gray", "marker": ".", "linestyle": "--", "label": "climatology"},
}


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))  # fixed margins: constrained layout costs ~1 s per figure
    FigureCanvasAgg(figure)
    return figure


_TITLE_MIN_POINTS = 7  # a title too wide for its figure shrinks to this size, then loses its middle


def _suptitle(figure, title: str, points: float | None = None, **options):
    """``figure.suptitle`` within the figure's width: a long field name (``report.check_plot_file_names``) ran
    past both edges. The figures have fixed margins, so no second line: smaller, then cut in the middle."""
    import matplotlib

    points = points or matplotlib.font_manager.FontProperties(size=matplotlib.rcParams["figure.titlesize"]).get_size()
    room = 0.96 * figure.get_figwidth()
    wide = _text_width_inches(title, points)
    if wide > room:
        points = max(_TITLE_MIN_POINTS, points * room / wide)
        whole, keep = title, len(title)
        while keep > 2 and _text_width_inches(title, points) > room:  # glyphs differ in width: measured again
            keep = min(keep - 1, int(keep * room / _text_width_inches(title, points)))
            title = f"{whole[: keep // 2]}…{whole[len(whole) - (keep - keep // 2) :]}"
    return figure.suptitle(title, fontsize=points, **options)


@functools.cache
def _natural_earth_coastlines() -> tuple[np.ndarray, np.ndarray]:
    with np.load(COASTLINES) as data:
        return data["longitude"].astype(np.float64), data["latitude"].astype(np.float64)


def coastlines(lon_start: float = -180.0) -> tuple[np.ndarray, np.ndarray]:
    """Natural Earth's 1:110m coastlines for a map whose longitudes start at ``lon_start``.

    Args:
        lon_start: western edge of the map in degrees east (e.g. -180, or 0 for 0..360 grids).

    Returns:
        (longitude, latitude) in degrees, (points,) each, longitudes in [lon_start, lon_start + 360),
        NaN between polylines (``Axes.plot`` draws them as separate lines), polylines broken where
        they cross the map's edge.
    """
    lon, lat = _natural_earth_coastlines()
    lon = (lon - lon_start) % 360.0 + lon_start
    breaks = np.flatnonzero(np.abs(np.diff(lon)) > 180.0) + 1  # a segment across the edge: cut it
    return np.insert(lon, breaks, np.nan), np.insert(lat, breaks, np.nan)


def draw_coastlines(ax, lon: np.ndarray, lat: np.ndarray, land_sea_mask: np.ndarray | None = None) -> None:
    """Coastlines on a (longitude, latitude) map: the 0.5 contour of ``land_sea_mask`` when given,
    else Natural Earth's (``coastlines``); the axes limits are kept.

    Args:
        ax: matplotlib Axes whose x is longitude (degrees east), y latitude.
        lon: (nlon,) ascending, evenly spaced grid longitudes of the map.
        lat: (nlat,) ascending grid latitudes of the map.
        land_sea_mask: (nlat, nlon) land fraction on the map's grid, or None.
    """
    xlim, ylim = ax.get_xlim(), ax.get_ylim()
    if land_sea_mask is not None:
        ax.contour(lon, lat, land_sea_mask, levels=[0.5], colors="k", linewidths=0.6)
    else:
        half = 0.5 * float(lon[1] - lon[0]) if lon.size > 1 else 0.0
        ax.plot(*coastlines(float(lon[0]) - half), color="k", linewidth=0.6)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)


def _save(figure, path: Path) -> Path:
    path = Path(path)
    figure.savefig(path, dpi=100, format="png")
    return path


def plot_scores(
    scores: xr.DataArray,
    path: str | Path,
    title: str,
    units: str = "",
    n_init_times: np.ndarray | None = None,
    acc_caveat: str | None = None,
    forecast_label: str = "forecast",
) -> Path:
    """RMSE and ACC versus lead time (hours), one line per source; ``n_init_times`` (per lead)
    labels the top axis, so leads averaged over fewer init times show.

    Args:
        scores: dims ``(metric, source, lead_time)`` with a ``lead_hours (lead_time)`` coordinate:
            one field and region of the results (``evaluation.scoring`` layout); a panel whose
            metric (``rmse``, ``acc``) the results lack stays empty.
        path: PNG to write.
        title: e.g. ``Z500``.
        units: the field's units, for the RMSE axis.
        acc_caveat: why the ACC is not meaningful (the results' ``acc_caveat``): the ACC axis is
            labelled ``ACC*`` and the reason written in its panel.
        forecast_label: the forecast's legend entry, e.g. ``ensemble mean``.

    Returns:
        ``path``. Sources whose scores are all NaN (e.g. the climatology's ACC) are left out.
    """
    hours = scores["lead_hours"].values
    from matplotlib.ticker import FormatStrFormatter

    figure = _figure(10, 4.3)
    top = 0.78 if n_init_times is not None else 0.88  # room for the init-times axis under the title
    bottom = 0.22 if acc_caveat else 0.12  # the caveat goes under the axes: over them it hid the lines
    axes = figure.subplots(1, 2, gridspec_kw={"left": 0.1, "right": 0.98, "bottom": bottom, "top": top, "wspace": 0.25})
    for ax, metric, ylabel in (
        (axes[0], "rmse", f"RMSE [{units}]" if units else "RMSE"),
        (axes[1], "acc", "ACC*" if acc_caveat else "ACC"),
    ):
        for source in scores["source"].values.tolist() if metric in scores["metric"].values.tolist() else []:
            values = scores.sel(metric=metric, source=source).values
            if np.all(np.isnan(values)):
                continue
            style = SOURCE_STYLES.get(source, {"label": source})
            ax.plot(hours, values, **(style | {"label": forecast_label} if source == "forecast" else style))
        ax.set_xlabel("lead time [h]")
        if 1 < hours.size <= 10:
            ax.set_xticks(hours)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend()
        if n_init_times is not None:
            _init_times_axis(ax, hours, n_init_times)
    if acc_caveat:
        note = "* " + textwrap.fill(acc_caveat, 170)  # at most two lines of 7 pt across the 10-inch figure
        figure.text(0.02, 0.01, note, fontsize=7, color="tab:red", va="bottom", ha="left")
    axes[0].set_ylim(bottom=0)
    axes[0].yaxis.set_major_formatter(FormatStrFormatter("%.3g"))  # no offset text under the top axis
    _suptitle(figure, f"{title}: skill versus lead time")
    return _save(figure, path)


def plot_ensemble_scores(
    scores: xr.DataArray,
    path: str | Path,
    title: str,
    members: int,
    units: str = "",
    n_init_times: np.ndarray | None = None,
) -> Path:
    """An ensemble's scores versus lead time: CRPS per source (the baselines are one-member
    ensembles: their CRPS is their mean absolute error), the forecast's spread beside the RMSE
    of its ensemble mean, and their ratio, spread-skill, with the line of a reliable ensemble of
    ``members`` members, sqrt(M / (M + 1)) (``metrics.reliable_spread_skill``).

    Args:
        scores: dims ``(metric, source, lead_time)`` with a ``lead_hours (lead_time)`` coordinate
            and the metrics ``crps``, ``spread``, ``ensemble_mean_rmse``, ``spread_skill``.
        path: PNG to write.
        title: e.g. ``Z500``.
        members: the forecast's ensemble size M.
        units: the field's units (CRPS, spread and RMSE axes).
        n_init_times: init times per lead, labelling the top axes.
    """
    hours = scores["lead_hours"].values
    label = f" [{units}]" if units else ""
    figure = _figure(14, 4.3)
    top = 0.78 if n_init_times is not None else 0.88
    axes = figure.subplots(1, 3, gridspec_kw={"left": 0.06, "right": 0.98, "bottom": 0.12, "top": top, "wspace": 0.25})
    for source in scores["source"].values.tolist():
        values = scores.sel(metric="crps", source=source).values
        if not np.all(np.isnan(values)):
            axes[0].plot(hours, values, **SOURCE_STYLES.get(source, {"label": source}))
    forecast = scores.sel(source="forecast")
    axes[1].plot(hours, forecast.sel(metric="ensemble_mean_rmse").values, color="tab:blue", marker="o",
                 label="RMSE of the ensemble mean")  # fmt: skip
    axes[1].plot(hours, forecast.sel(metric="spread").values, color="tab:green", marker="^", label="spread")
    axes[2].plot(hours, forecast.sel(metric="spread_skill").values, color="tab:green", marker="^", label="forecast")
    reliable = reliable_spread_skill(members)
    reliable_label = f"reliable: {members} members, {reliable:.3f}"
    axes[2].axhline(reliable, color="k", linestyle=":", linewidth=1, label=reliable_label)
    for ax, ylabel in zip(axes, (f"CRPS{label}", f"spread, RMSE{label}", "spread / RMSE"), strict=True):
        ax.set_xlabel("lead time [h]")
        if 1 < hours.size <= 10:
            ax.set_xticks(hours)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        if n_init_times is not None:
            _init_times_axis(ax, hours, n_init_times)
    from matplotlib.ticker import FormatStrFormatter

    for ax in axes[:2]:
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))  # no offset text under the top axis
    axes[0].set_title("CRPS", fontsize=10)
    axes[1].set_title("spread and error", fontsize=10)
    axes[2].set_title("spread-skill ratio", fontsize=10)
    _suptitle(figure, f"{title}: ensemble scores versus lead time")
    return _save(figure, path)


def plot_rank_histograms(histogram: xr.DataArray, path: str | Path, title: str, max_leads: int = 4) -> Path:
    """Rank histograms of the truth among the members, one panel per lead (at most
    ``max_leads``, evenly chosen), with the flat histogram of a calibrated ensemble.

    Args:
        histogram: dims ``(lead_time, rank)``, a ``lead_hours (lead_time)`` coordinate, frequencies
            of ranks 0..M summing to 1 per lead (``<field>_rank_histogram`` of one region and level).
        path: PNG to write.
        title: e.g. ``Z500``.
    """
    hours = histogram["lead_hours"].values
    shown = np.unique(np.round(np.linspace(0, hours.size - 1, min(hours.size, max_leads))).astype(int))
    ranks = histogram["rank"].values
    figure = _figure(3.2 * len(shown) + 0.6, 3.6)
    axes = figure.subplots(1, len(shown), squeeze=False, sharey=True,
                           gridspec_kw={"left": 0.1 if len(shown) > 1 else 0.2, "right": 0.97, "bottom": 0.15,
                                        "top": 0.8, "wspace": 0.1}).ravel()  # fmt: skip
    for ax, k in zip(axes, shown, strict=True):
        frequencies = histogram.isel(lead_time=k).values
        if np.isnan(frequencies).all():
            ax.text(0.5, 0.5, "no truth at this lead", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.bar(ranks, frequencies, color="tab:blue", width=0.8)
        ax.axhline(1.0 / ranks.size, color="k", linestyle=":", linewidth=1, label="calibrated")
        ax.set_title(f"lead {hours[k]:g} h", fontsize=10)
        ax.set_xlabel("members below the truth")
        ax.set_xticks(ranks if ranks.size <= 11 else ranks[:: int(np.ceil(ranks.size / 11))])
    axes[0].set_ylabel("frequency (area-weighted)")
    axes[0].legend(fontsize=8)
    _suptitle(figure, f"{title}: rank histograms ({ranks.size - 1} members)")
    return _save(figure, path)


def _init_times_axis(ax, hours: np.ndarray, n_init_times: np.ndarray) -> None:
    """The number of init times per lead on a top axis."""
    top = ax.twiny()
    top.set_xlim(ax.get_xlim())
    shown = np.unique(np.round(np.linspace(0, hours.size - 1, min(hours.size, 8))).astype(int))
    top.set_xticks(hours[shown], [str(int(n)) for n in np.asarray(n_init_times)[shown]], fontsize=8)
    top.set_xlabel("init times averaged", fontsize=8)


def plot_maps(
    forecast: xr.DataArray,
    truth: xr.DataArray,
    path: str | Path,
    title: str,
    units: str = "",
    land_sea_mask: xr.DataArray | None = None,
    forecast_label: str = "forecast",
    earth: bool = True,
) -> Path:
    """Forecast, truth and error (forecast - truth) maps, one row per lead, with coastlines: the
    0.5 contour of ``land_sea_mask`` (latitude, longitude land fraction; the data's own
    coastline) when given, else Natural Earth's 1:110m (module docstring); none without ``earth``
    (fields of another planet: the shallow-water stores').

    Args:
        forecast: dims ``(prediction_timedelta, latitude, longitude)`` in any order, latitude in
            either direction.
        truth: the same dims (any order) and coordinates (the truth at the valid times; NaN where missing).
        path: PNG to write.
        title: e.g. ``Z500, init 2020-01-01``.
        units: the field's units, for the colour bars.
        land_sea_mask: (latitude, longitude) land fraction in [0, 1] on any grid (taken at the
            nearest points of the forecast's), or None.
        forecast_label: what the forecast panels show, e.g. ``ensemble mean``.

    Returns:
        ``path``.
    """
    # a 0.25 deg figure holds ~0.3 GB in reference cycles (figure, axes, meshes, colour bars): free it now,
    # not at the next automatic collection, which may come after the next map is drawn (a higher peak).
    # The objects that existed before the figure are frozen meanwhile, so the collection walks the
    # figure's objects only, not the whole heap (~0.15-0.5 s a map with torch loaded); a caller's own
    # frozen objects are left frozen (then a full collection, as before).
    if gc.get_freeze_count():
        path = _draw_maps(forecast, truth, path, title, units, land_sea_mask, forecast_label, earth)
        gc.collect()
        return path
    gc.freeze()
    try:
        path = _draw_maps(forecast, truth, path, title, units, land_sea_mask, forecast_label, earth)
        gc.collect()
    finally:
        gc.unfreeze()
    return path


def _draw_maps(forecast, truth, path, title, units, land_sea_mask, forecast_label, earth=True) -> Path:
    from matplotlib import colormaps

    # pcolorfast takes (latitude, longitude) arrays: put every field in that order, ascending
    forecast, truth = (_map_order(data) for data in (forecast, truth))
    error = forecast - truth
    coast = None
    if land_sea_mask is not None:
        coast = _map_order(land_sea_mask).interp_like(forecast.isel(
            {d: 0 for d in forecast.dims if d not in ("latitude", "longitude")}), method="nearest").values  # fmt: skip
    lat, lon = forecast["latitude"].values, forecast["longitude"].values
    leads = forecast["prediction_timedelta"].values
    half = 0.5 * float(np.min(np.diff(lat))) if lat.size > 1 else 1.0
    lat_limits = (max(-90.0, float(lat[0]) - half), min(90.0, float(lat[-1]) + half))  # pole rows end at the pole
    fields = np.concatenate([np.ravel(forecast.values), np.ravel(truth.values)])
    finite = fields[np.isfinite(fields)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    err = np.abs(error.values[np.isfinite(error.values)])
    emax = float(err.max()) if err.size and err.max() > 0 else 1.0
    height = 2.3 * len(leads) + 0.6
    figure = _figure(14, height)
    margins = {"left": 0.05, "right": 0.97, "bottom": 0.5 / height, "top": 1 - 0.9 / height, "hspace": 0.45}
    axes = figure.subplots(len(leads), 3, squeeze=False, gridspec_kw={**margins, "wspace": 0.3})
    for row, lead in enumerate(leads):
        hours = float(lead / np.timedelta64(1, "h"))
        panels = (
            (forecast_label, forecast.isel(prediction_timedelta=row).values, "viridis", vmin, vmax),
            ("truth", truth.isel(prediction_timedelta=row).values, "viridis", vmin, vmax),
            (f"{forecast_label} - truth", error.isel(prediction_timedelta=row).values, "RdBu_r", -emax, emax),
        )
        for ax, (name, values, cmap, low, high) in zip(axes[row], panels, strict=True):
            # NaN in grey: transparent, it showed the white of the axes, which reads as zero error in RdBu
            cmap = colormaps[cmap].with_extremes(bad="0.6")
            mesh = ax.pcolorfast(_edges(lon), _edges(lat), values, cmap=cmap, vmin=low, vmax=high)
            ax.set_ylim(*lat_limits)
            ax.set_aspect("equal")  # a degree of latitude as long as one of longitude (plate carree)
            if earth or coast is not None:
                draw_coastlines(ax, lon, lat, coast)
            ax.set_title(f"{name}, lead {hours:g} h")
            ax.set_xlabel("longitude [°E]")
            ax.set_ylabel("latitude [°N]")
            if not np.isfinite(values).any():
                ax.text(0.5, 0.5, "no truth at this valid time", ha="center", va="center", transform=ax.transAxes)
            figure.colorbar(mesh, ax=ax, label=units, shrink=0.8)  # as tall as the 2:1 map
    _suptitle(figure, title)
    return _save(figure, path)


def _edges(centres: np.ndarray) -> np.ndarray:
    """(n + 1,) cell edges of ascending cell ``centres``: half way between them, half a spacing past the ends."""
    if centres.size < 2:
        return np.array([centres[0] - 0.5, centres[0] + 0.5]) if centres.size else np.array([0.0, 1.0])
    middle = 0.5 * (centres[1:] + centres[:-1])
    return np.concatenate([[2 * centres[0] - middle[0]], middle, [2 * centres[-1] - middle[-1]]])


def _map_order(data: xr.DataArray) -> xr.DataArray:
    """``data`` as (..., latitude, longitude), latitude ascending and longitude ascending in [0, 360),
    whatever its dim order, directions and longitude convention (a -180..180 land-sea mask beside a
    0..360 forecast would have no point east of 180 E)."""
    return longitudes_from_zero(data).sortby("latitude").transpose(..., "latitude", "longitude")


def plot_spectra(
    sh_power: xr.DataArray,
    zonal_power: xr.DataArray,
    path: str | Path,
    title: str,
    units: str = "",
    forecast_label: str = "forecast",
) -> Path:
    """Power spectra of forecast (solid) and truth (dashed) per lead, log-log.

    Args:
        sh_power: ``(spectrum_source, spectrum_lead_time, degree)`` with spectrum_source
            ``forecast``/``truth`` (``evaluation.spectra``; degree 0, the mean, is not drawn).
        zonal_power: ``(spectrum_source, spectrum_lead_time, frequency)`` with a
            ``zonal_wavelength`` coordinate (m), drawn against wavelength in km, large scales left.
        path: PNG to write.
        title: e.g. ``Z500``.
        units: the field's units.
        forecast_label: the forecast's name in the legend, e.g. ``members`` (an ensemble's
            spectra are its members' mean power).

    Returns:
        ``path``. A lead whose spectra are all NaN (no truth at it) is left out.
    """
    figure = _figure(11, 4.2)
    axes = figure.subplots(1, 2, gridspec_kw={"left": 0.08, "right": 0.98, "bottom": 0.13, "top": 0.86, "wspace": 0.25})
    leads = sh_power["spectrum_lead_time"].values
    colors = [f"C{i}" for i in range(len(leads))]
    degree = sh_power["degree"].values
    wavelength_km = zonal_power["zonal_wavelength"].values / 1000.0
    drawn = False
    for k, lead in enumerate(leads):
        hours = float(lead / np.timedelta64(1, "h"))
        if np.isnan(sh_power.isel(spectrum_lead_time=k).values).all():
            continue  # a lead without truth (evaluate's MissingTruthWarning): nothing to draw
        drawn = True
        for source, name, style in (("forecast", forecast_label, "-"), ("truth", "truth", "--")):
            sh = sh_power.sel(spectrum_source=source).isel(spectrum_lead_time=k).values
            if np.isnan(sh).all():  # NaN values in the fields: said in the legend, not an entry without a line
                name = f"{name} (NaN values: no spectrum)"
            axes[0].loglog(degree[1:], sh[1:], style, color=colors[k], label=f"{name}, {hours:g} h")
            zonal = zonal_power.sel(spectrum_source=source).isel(spectrum_lead_time=k).values
            axes[1].loglog(wavelength_km[1:], zonal[1:], style, color=colors[k], label=f"{name}, {hours:g} h")
    if not drawn:  # two empty axes said nothing: every init time left out (NaN values) or no truth at any lead
        for ax in axes:
            ax.text(0.5, 0.5, "no spectrum: no lead has an init time with truth\nand finite forecast and truth "
                    "values (see the metrics file's\nspectra_n_init_times and init_times_averaged)", ha="center",
                    va="center", transform=ax.transAxes, fontsize=9)  # fmt: skip
    squared = f"({units})²" if units else "units²"
    axes[0].set_xlabel("total wavenumber l")
    axes[0].set_ylabel(f"power per degree [{squared}]")
    axes[0].set_title("spherical-harmonic power", fontsize=10)
    axes[1].set_xlabel("zonal wavelength [km]")
    axes[1].set_ylabel(f"energy density [m {squared}]")
    axes[1].set_title("zonal energy spectrum, |latitude| 30-60°", fontsize=10)
    axes[1].invert_xaxis()  # large scales left, as the degree axis
    for ax in axes:
        ax.grid(True, which="both", alpha=0.25)
        if not ax.lines:
            continue
        ax.legend(fontsize=8)
        values = np.concatenate([line.get_ydata() for line in ax.lines])
        positive = values[np.isfinite(values) & (values > 0)]
        if positive.size:  # down to the smallest power, not below a band-limited field's round-off floor
            ax.set_ylim(bottom=max(0.5 * positive.min(), 1e-12 * positive.max()))
    _suptitle(figure, f"{title}: spectra of {forecast_label} and truth")
    return _save(figure, path)


def plot_scorecard(cells: np.ndarray, rows: list[str], lead_hours: np.ndarray, path: str | Path, title: str) -> Path:
    """A scorecard: the forecast's RMSE relative to a baseline's, in percent, as a coloured table.

    Args:
        cells: (rows, leads) 100 (RMSE_forecast - RMSE_baseline) / RMSE_baseline; negative
            (blue) is better than the baseline, NaN is drawn grey. Colours saturate at
            +-``SCORECARD_LIMIT_PERCENT`` so that one outlier does not wash out the rest.
        rows: row labels, e.g. ``Z500 europe``.
        lead_hours: (leads,) column labels.
        path: PNG to write.
        title: the figure title (names the baseline).
    """
    return _save(_scorecard_figure(cells, rows, lead_hours, title), path)


SCORECARD_LIMIT_PERCENT = 100.0
_LABEL_POINTS = 8  # font size of the scorecard's labels and cells


def _text_width_inches(text: str, points: float) -> float:
    """The width of ``text`` in the default font as drawn: its advance width (a little wider than its
    ink, and 50x faster than the extents of its glyph outlines: 1.4 s for a scorecard's 80 labels)
    with Agg's margin."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    width, _, _ = text_to_path.get_text_width_height_descent(text, FontProperties(size=points), ismath=False)
    return 1.05 * width / 72.0  # Agg draws ~3 % wider (hinting): a label of 180 characters was cut by 16 px


def _scorecard_figure(cells: np.ndarray, rows: list[str], lead_hours: np.ndarray, title: str):
    from matplotlib import colormaps
    from matplotlib.colors import TwoSlopeNorm

    label_width = max((_text_width_inches(row, _LABEL_POINTS) for row in rows), default=0.0)
    left = label_width + 0.3  # inches: the row labels are never cut
    table_width = 0.62 * len(lead_hours)
    right = 1.2  # colour bar and its label
    width = max(left + table_width + right, _text_width_inches(title, 10) + 0.4)
    height = max(2.2, 1.3 + 0.32 * len(rows))  # one row: the colour bar's label was taller than the figure
    figure = _figure(width, height)
    ax = figure.add_axes((left / width, 0.2 / height, table_width / width, 1 - 1.1 / height))
    # +inf: a baseline of RMSE 0 (persistence at lead 0) that the forecast is not; it was grey "n/a",
    # as a lead without truth (NaN) is
    values = cells[~np.isnan(cells)]
    finite = np.abs(values[np.isfinite(values)])
    limit = min(max(float(finite.max()) if finite.size else 1.0, 1.0), SCORECARD_LIMIT_PERCENT)
    huge = np.finfo(np.float64).max
    masked = np.ma.masked_invalid(np.where(np.isinf(cells), np.sign(cells) * huge, cells))
    cmap = colormaps["RdBu_r"].with_extremes(bad="0.85")
    image = ax.imshow(masked, cmap=cmap, norm=TwoSlopeNorm(0.0, -limit, limit), aspect="auto")
    for (i, j), value in np.ndenumerate(cells):
        text = "n/a" if np.isnan(value) else f"{value:+.0f}"
        dark = not np.isnan(value) and abs(value) > 0.6 * limit  # white on the deep colours
        ax.text(j, i, text, ha="center", va="center", fontsize=_LABEL_POINTS - 1, color="w" if dark else "k")
    ax.set_xticks(range(len(lead_hours)), [f"{h:g}" for h in lead_hours], fontsize=_LABEL_POINTS)
    ax.set_yticks(range(len(rows)), rows, fontsize=_LABEL_POINTS)
    ax.set_xlabel("lead time [h]", fontsize=_LABEL_POINTS)
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    below, above = bool(values.size and values.min() < -limit), bool(values.size and values.max() > limit)
    extend = {(True, True): "both", (True, False): "min", (False, True): "max"}.get((below, above), "neither")
    colorbar_axes = figure.add_axes(((left + table_width + 0.15) / width, 0.2 / height, 0.15 / width,
                                     1 - 1.1 / height))  # fmt: skip
    figure.colorbar(image, cax=colorbar_axes, extend=extend, label="RMSE change [%]")
    _suptitle(figure, title, 10, y=1 - 0.08 / height, va="top")
    return figure
