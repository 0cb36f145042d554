"""Plots of ``s2forecast evaluate`` (issue 16): the coastlines shipped with the package, maps that
draw them on the real ERA5 sample, and a scorecard whose labels and colours stay readable."""

import gc
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.evaluation import plots

SAMPLE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"


@pytest.fixture(scope="module")
def t2m() -> xr.DataArray:
    """(prediction_timedelta, latitude, longitude) ERA5 2 m temperature, 4-degree grid 0..356 E, north first."""
    field = xr.open_dataset(SAMPLE)["t2m"].load().isel(valid_time=[1, 2]).rename(valid_time="prediction_timedelta")
    return field.assign_coords(prediction_timedelta=pd.to_timedelta([8, 15], unit="h").values)


def test_coastlines_are_natural_earths_geography():
    lon, lat = plots.coastlines()
    finite = np.isfinite(lon)
    assert np.array_equal(finite, np.isfinite(lat)) and finite.sum() > 5000
    assert lon[finite].min() >= -180 and lon[finite].max() < 180 and np.abs(lat[finite]).max() < 86
    # capes of Natural Earth's 1:110m coast, within its generalisation (catches swapped or mis-scaled axes)
    for cape_lon, cape_lat in ((18.47, -34.36), (-67.27, -55.98), (77.54, 8.08), (-5.6, 36.0)):
        assert np.hypot(lon[finite] - cape_lon, lat[finite] - cape_lat).min() < 0.7
    # Iceland is one closed polyline inside its box
    pieces = np.split(np.c_[lon, lat], np.flatnonzero(~finite))
    iceland = [p[np.isfinite(p[:, 0])] for p in pieces]
    iceland = [p for p in iceland if len(p) and (p[:, 0] > -25).all() and (p[:, 0] < -13).all()
               and (p[:, 1] > 63).all() and (p[:, 1] < 67).all()]  # fmt: skip
    assert len(iceland) == 1 and np.array_equal(iceland[0][0], iceland[0][-1])


@pytest.mark.parametrize("lon_start", [-180.0, -2.0, 0.0, 100.0])
def test_coastlines_start_at_the_maps_edge_and_never_cross_it(lon_start):
    lon, lat = plots.coastlines(lon_start)
    reference, _ = plots.coastlines()
    finite = np.isfinite(lon)
    assert lon[finite].min() >= lon_start and lon[finite].max() < lon_start + 360
    assert finite.sum() == np.isfinite(reference).sum()  # every point kept, only moved by 360
    np.testing.assert_allclose(np.sort(lon[finite] % 360), np.sort(reference[np.isfinite(reference)] % 360))
    steps = np.abs(np.diff(lon))
    assert np.nanmax(steps) < 180  # no line drawn across the map from one edge to the other


def test_maps_of_era5_draw_natural_earth_coastlines_without_a_mask(tmp_path, t2m, monkeypatch):
    drawn = []

    def spy(ax, lon, lat, land_sea_mask=None):
        plots_draw(ax, lon, lat, land_sea_mask)
        drawn.append((ax, land_sea_mask))

    plots_draw = plots.draw_coastlines
    monkeypatch.setattr(plots, "draw_coastlines", spy)
    blurred = t2m.rolling(longitude=5, center=True, min_periods=1).mean()
    path = plots.plot_maps(blurred, t2m, tmp_path / "maps.png", title="T2M")
    assert path.stat().st_size > 0 and len(drawn) == 6  # forecast, truth and error for 2 leads
    for ax, mask in drawn:
        assert mask is None
        expected_lon, expected_lat = plots.coastlines(-2.0)  # the 4-degree grid's cells start at -2 E
        (line,) = ax.lines
        np.testing.assert_array_equal(line.get_xdata(), expected_lon)
        np.testing.assert_array_equal(line.get_ydata(), expected_lat)
        assert ax.get_xlim() == pytest.approx((-2.0, 358.0)) and ax.get_ylim() == pytest.approx((-90.0, 90.0))


@pytest.mark.parametrize("grid", ["equiangular", "uneven"])
def test_maps_are_images_of_the_cells(grid, tmp_path, monkeypatch):
    """Each panel is one image of the grid's cells (edges half way between the points), not a mesh of a
    polygon per cell: at 0.25 deg a map of 4 leads peaked 0.5 GB lower and drew in 2.2 s instead of 5.9
    s, with the same pixels. Latitude and longitude run the right way in any storage order."""
    from matplotlib.image import AxesImage, PcolorImage

    if grid == "equiangular":
        lat = np.linspace(90.0, -90.0, 7)
    else:  # unevenly spaced, north first (a Gaussian grid's spacing varies by less than 1 %: an image too)
        lat = np.array([80.0, 60.0, 30.0, 0.0, -45.0, -80.0])
    lon = np.arange(0.0, 360.0, 30.0)
    values = np.arange(lat.size * lon.size, dtype=np.float64).reshape(1, lat.size, lon.size)
    field = xr.DataArray(
        values,
        dims=("prediction_timedelta", "latitude", "longitude"),
        coords={"prediction_timedelta": [np.timedelta64(6, "h")], "latitude": lat, "longitude": lon},
    )
    axes = []
    real_draw = plots.draw_coastlines
    monkeypatch.setattr(plots, "draw_coastlines", lambda ax, *a: axes.append(ax) or real_draw(ax, *a))
    plots.plot_maps(field.transpose("longitude", "latitude", ...), field + 1, tmp_path / "maps.png", title="T")
    forecast_panel = axes[0]
    assert not forecast_panel.collections  # no QuadMesh
    (image,) = forecast_panel.images
    assert isinstance(image, AxesImage if grid == "equiangular" else PcolorImage)
    np.testing.assert_array_equal(image.get_array(), values[0, ::-1])  # south first (ascending), as drawn
    lat_edges = np.concatenate([[lat[-1] - (lat[-2] - lat[-1]) / 2], (lat[1:] + lat[:-1])[::-1] / 2,
                                [lat[0] + (lat[0] - lat[1]) / 2]])  # fmt: skip
    if grid == "equiangular":
        np.testing.assert_allclose(image.get_extent(), (-15.0, 345.0, lat_edges[0], lat_edges[-1]))
    else:
        np.testing.assert_allclose(image._Ax, np.arange(-15.0, 360.0, 30.0))
        np.testing.assert_allclose(image._Ay, lat_edges)


def test_maps_free_their_figure_when_written(tmp_path, t2m):
    """A figure's reference cycles (a 0.25 deg map: ~0.3 GB) are freed when its PNG is written, not at the
    next automatic garbage collection, which may come after the next map is drawn."""
    plots.plot_maps(t2m, t2m + 1, tmp_path / "warm.png", title="T2M")  # font and coastline caches
    gc.collect()
    gc.disable()  # as when the automatic collection does not run
    tracemalloc.start()
    try:
        plots.plot_maps(t2m, t2m + 1, tmp_path / "maps.png", title="T2M")
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    assert retained < 0.05 * peak, (retained, peak)


def test_maps_leave_no_object_frozen_and_a_callers_frozen_objects_frozen(tmp_path, t2m, monkeypatch):
    """plot_maps freezes the heap while it draws (its collection then walks the figure alone): it
    unfreezes it when written or failed, and leaves alone what its caller froze."""
    assert gc.get_freeze_count() == 0
    plots.plot_maps(t2m, t2m + 1, tmp_path / "a.png", title="T2M")
    assert gc.get_freeze_count() == 0
    mine = [object()]  # an object of the caller's, frozen by it: gc.get_objects() lists unfrozen ones
    gc.freeze()
    try:
        plots.plot_maps(t2m, t2m + 1, tmp_path / "b.png", title="T2M")
        assert gc.get_freeze_count() > 0 and not any(obj is mine for obj in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(obj is mine for obj in gc.get_objects())

    def broken(*args):
        raise RuntimeError("no display")

    monkeypatch.setattr(plots, "_draw_maps", broken)
    with pytest.raises(RuntimeError, match="no display"):
        plots.plot_maps(t2m, t2m + 1, tmp_path / "c.png", title="T2M")
    assert gc.get_freeze_count() == 0


def test_maps_contour_the_land_sea_mask_when_given(tmp_path, t2m, monkeypatch):
    masks = []
    original = plots.draw_coastlines

    def spy(ax, lon, lat, land_sea_mask=None):
        original(ax, lon, lat, land_sea_mask)
        masks.append(land_sea_mask)

    monkeypatch.setattr(plots, "draw_coastlines", spy)
    land = (t2m.isel(prediction_timedelta=0, drop=True) > 280.0).astype(float)  # north first, as the field
    plots.plot_maps(t2m, t2m, tmp_path / "maps.png", title="T2M", land_sea_mask=land)
    assert len(masks) == 6
    # on the map's grid: latitudes ascending
    np.testing.assert_array_equal(masks[0], land.sortby("latitude").values)


def test_maps_take_the_mask_and_truth_in_another_longitude_convention(tmp_path, t2m, monkeypatch):
    """A -180..180 mask beside a 0..360 map had no point east of 180 E (no coastline on half the map),
    and a -180..180 truth was a matplotlib error: both are put in the map's [0, 360) order."""
    masks, images = [], []
    monkeypatch.setattr(plots, "draw_coastlines", lambda ax, lon, lat, land_sea_mask=None: masks.append(land_sea_mask))
    import matplotlib.axes

    real = matplotlib.axes.Axes.pcolorfast

    def record(ax, x, y, values, **kwargs):
        images.append(np.array(values))
        return real(ax, x, y, values, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "pcolorfast", record)
    land = (t2m.isel(prediction_timedelta=0, drop=True) > 280.0).astype(float)
    west = lambda field: field.assign_coords(longitude=((field.longitude + 180) % 360) - 180).sortby("longitude")  # noqa: E731
    plots.plot_maps(t2m, west(t2m), tmp_path / "maps.png", title="T2M", land_sea_mask=west(land))
    np.testing.assert_array_equal(masks[0], land.sortby("latitude").values)  # every column, none NaN
    expected = t2m.isel(prediction_timedelta=0).sortby("latitude").values
    np.testing.assert_array_equal(images[1], expected)  # the truth panel, column for column
    assert np.all(images[2] == 0)  # forecast - truth of the same field


def test_scorecard_labels_fit_and_colours_saturate():
    """... a label of 180 characters too: the width estimate fell ~3 % short (16 px cut; a review)."""
    rows = ["T2M global", "mean_sea_level_pressure extra-tropics", "10m_u_component_of_wind" * 7 + " north-america"]
    cells = np.array([[-10.0, 5.0], [324.0, np.nan], [-50.0, np.inf]])
    figure = plots._scorecard_figure(cells, rows, np.array([24.0, 48.0]), "forecast RMSE vs persistence RMSE")
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    width, height = figure.bbox.width, figure.bbox.height
    table, colorbar = figure.axes
    texts = [*table.get_yticklabels(), *table.get_xticklabels(), figure._suptitle, colorbar.yaxis.label]
    for text in texts:
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width and box.y0 >= 0 and box.y1 <= height, text.get_text()
    image = table.images[0]
    assert image.norm.vmax == plots.SCORECARD_LIMIT_PERCENT  # +324 % saturates, the rest keep their shades
    cell_text = {t.get_text() for t in table.texts}
    assert {"-10", "+5", "+324", "-50", "n/a", "+inf"} <= cell_text  # +inf: a baseline of RMSE 0 (was n/a)
    assert table.images[0].get_array().mask.sum() == 1  # only the NaN is grey; +inf gets the deepest red


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[2] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_and_coastline_scripts_replace_nothing(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("keep")
    examples = _script("plot_examples")
    assert examples.main(["--work", str(work)]) == 2
    assert f"--work {work} exists; give a new directory" in capsys.readouterr().err
    images = tmp_path / "images"
    images.mkdir()
    (images / "evaluate_maps.png").write_bytes(b"mine")
    assert examples.main(["--work", str(tmp_path / "new"), "--images", str(images)]) == 2
    assert f"{images / 'evaluate_maps.png'} exist; remove them first" in capsys.readouterr().err
    assert not (tmp_path / "new").exists() and (images / "evaluate_maps.png").read_bytes() == b"mine"
    assert (work / "mine.txt").read_text() == "keep" and sorted(p.name for p in work.iterdir()) == ["mine.txt"]

    ensemble = _script("ic_ensemble_example")
    demo = tmp_path / "demo"
    assert ensemble.main(["--demo", str(demo), "--work", str(tmp_path / "new")]) == 2
    assert "no demo store and checkpoint in" in capsys.readouterr().err
    (demo / "swe.zarr").mkdir(parents=True)
    (demo / "runs" / "version_0").mkdir(parents=True)
    (demo / "runs" / "version_0" / "last.ckpt").write_bytes(b"")
    assert ensemble.main(["--demo", str(demo), "--work", str(work)]) == 2
    assert f"--work {work} exists; give a new directory" in capsys.readouterr().err
    (images / "ic_ensemble_scores.png").write_bytes(b"mine")
    assert ensemble.main(["--demo", str(demo), "--work", str(tmp_path / "new"), "--images", str(images)]) == 2
    assert f"{images / 'ic_ensemble_scores.png'} exist; remove them first" in capsys.readouterr().err
    assert not (tmp_path / "new").exists() and (images / "ic_ensemble_scores.png").read_bytes() == b"mine"
    assert sorted(p.name for p in work.iterdir()) == ["mine.txt"]

    out = tmp_path / "coast.npz"
    out.write_bytes(b"mine")
    assert _script("make_coastlines").main([str(tmp_path / "land-110m.json"), str(out)]) == 2
    assert f"{out} exists; remove it first" in capsys.readouterr().err and out.read_bytes() == b"mine"


def test_coastline_script_decodes_topojson_and_drops_antimeridian_cut_edges(tmp_path):
    """A small TopoJSON written here: one island arc and one arc with a cut edge along 180 E."""
    import json

    make = _script("make_coastlines")
    # quantized deltas; scale 0.5 deg, translate (-180, -90): x = 0.5 q - 180, y = 0.5 q - 90
    island = [[380, 280], [2, 0], [0, 2], [-2, 0], [0, -2]]  # (10, 50) .. a 1-degree square
    cut = [[718, 300], [2, 0], [0, 4], [-2, 0]]  # (179, 60) -> (180, 60) -> (180, 62) -> (179, 62)
    topology = {"type": "Topology", "transform": {"scale": [0.5, 0.5], "translate": [-180, -90]},
                "objects": {}, "arcs": [island, cut]}  # fmt: skip
    (tmp_path / "land.json").write_text(json.dumps(topology))
    assert make.main([str(tmp_path / "land.json"), str(tmp_path / "c.npz")]) == 0
    with np.load(tmp_path / "c.npz") as data:
        lon, lat = data["longitude"], data["latitude"]
        assert "Natural Earth" in str(data["source"])
    expected_lon = [10, 11, 11, 10, 10, np.nan, 179, 180, np.nan, 180, 179]
    expected_lat = [50, 50, 51, 51, 50, np.nan, 60, 60, np.nan, 62, 62]
    np.testing.assert_array_equal(lon, np.array(expected_lon, dtype=np.float32))
    np.testing.assert_array_equal(lat, np.array(expected_lat, dtype=np.float32))


# --- what a reader of the plots could misread (review of session 14) ------------------------------
@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save, kept for inspection."""
    kept, save = [], plots._save
    monkeypatch.setattr(plots, "_save", lambda figure, path: (kept.append(figure), save(figure, path))[1])
    return kept


def test_a_lone_climatology_value_is_drawn_and_the_acc_caveat_hides_no_line(tmp_path, figures):
    """One lead: a line style without a marker drew the climatology's value as nothing (its legend
    entry still shown); the caveat's opaque box lay over the persistence ACC at the panel's bottom."""
    scores = xr.DataArray(
        np.array([[[2.0], [3.0], [2.5]], [[0.8], [-0.7], [np.nan]]]),
        dims=("metric", "source", "lead_time"),
        coords={"metric": ["rmse", "acc"], "source": ["forecast", "persistence", "climatology"],
                "lead_hours": ("lead_time", [6.0])},
    )  # fmt: skip
    caveat = "a climatology of 1 year" + ", contains the verified times; WeatherBench2 uses 1990-2019" * 3
    plots.plot_scores(scores, tmp_path / "s.png", title="T2M", units="K", acc_caveat=caveat)
    long_name = "t" * 228 + "_1000hPa, global"  # ran past both edges of the figure (a review)
    plots.plot_scores(scores, tmp_path / "t.png", title=long_name, units="K")
    title = figures[1]._suptitle
    assert title.get_text().startswith("ttt") and title.get_text().endswith("skill versus lead time")
    figures[1].draw(figures[1].canvas.get_renderer())
    assert 0 <= title.get_window_extent().x0 and title.get_window_extent().x1 <= figures[1].bbox.width
    figure = figures[0]
    rmse, acc = figure.axes[:2]
    (climatology,) = [line for line in rmse.lines if line.get_label() == "climatology"]
    assert climatology.get_marker() not in (None, "None", "", " ")
    assert not acc.texts and any("a climatology of 1 year" in text.get_text() for text in figure.texts)
    figure.draw(figure.canvas.get_renderer())
    note = next(t for t in figure.texts if "climatology of 1 year" in t.get_text()).get_window_extent()
    assert note.y1 < acc.get_window_extent().y0  # under the axes, not over the lines
    assert note.x0 >= 0 and note.x1 <= figure.bbox.width  # and not cut at the figure's edge


def test_nan_on_maps_is_grey_not_the_white_of_zero_error(tmp_path, t2m, figures):
    truth = t2m.copy()
    truth[0, 5:10, 10:20] = np.nan
    plots.plot_maps(t2m + 0.5, truth, tmp_path / "maps.png", title="T2M")
    (figure,) = figures
    meshes = [image for ax in figure.axes if "lead" in ax.get_title() for image in ax.images]  # not colour bars
    assert len(meshes) == 6
    for mesh in meshes:
        red, green, blue, alpha = mesh.get_cmap().get_bad()
        assert alpha == 1.0 and red == green == blue == pytest.approx(0.6)


def test_a_spectrum_of_nan_values_says_so_and_an_empty_rank_panel_says_why(tmp_path, figures):
    degree = np.arange(5)
    sh = xr.DataArray(np.ones((2, 1, 5)), dims=("spectrum_source", "spectrum_lead_time", "degree"),
                      coords={"spectrum_source": ["forecast", "truth"], "degree": degree,
                              "spectrum_lead_time": [np.timedelta64(6, "h")]})  # fmt: skip
    sh[1] = np.nan  # the truth had NaN values: its whole spectrum is NaN
    zonal = xr.DataArray(np.ones((2, 1, 4)), dims=("spectrum_source", "spectrum_lead_time", "frequency"),
                         coords={"spectrum_source": ["forecast", "truth"], "zonal_wavelength": ("frequency",
                                 [4e7, 2e7, 1e7, 5e6]), "spectrum_lead_time": [np.timedelta64(6, "h")]})  # fmt: skip
    plots.plot_spectra(sh, zonal, tmp_path / "spectra.png", title="T2M", units="K")
    labels = [line.get_label() for line in figures[0].axes[0].lines]
    assert labels == ["forecast, 6 h", "truth (NaN values: no spectrum), 6 h"]
    histogram = xr.DataArray(np.array([[0.5, 0.5], [np.nan, np.nan]]), dims=("lead_time", "rank"),
                             coords={"rank": [0, 1], "lead_hours": ("lead_time", [6.0, 12.0])})  # fmt: skip
    plots.plot_rank_histograms(histogram, tmp_path / "ranks.png", title="T2M")
    first, second = figures[1].axes
    assert not first.texts and [t.get_text() for t in second.texts] == ["no truth at this lead"]


def test_spectra_with_no_lead_to_draw_say_so_in_both_panels(tmp_path, figures):
    """Every init time left out (NaN values; evaluate leaves both sources out together) drew two empty axes."""
    sh = xr.DataArray(np.full((2, 1, 5), np.nan), dims=("spectrum_source", "spectrum_lead_time", "degree"),
                      coords={"spectrum_source": ["forecast", "truth"], "degree": np.arange(5),
                              "spectrum_lead_time": [np.timedelta64(6, "h")]})  # fmt: skip
    zonal = xr.DataArray(np.full((2, 1, 4), np.nan), dims=("spectrum_source", "spectrum_lead_time", "frequency"),
                         coords={"spectrum_source": ["forecast", "truth"], "zonal_wavelength": ("frequency",
                                 [4e7, 2e7, 1e7, 5e6]), "spectrum_lead_time": [np.timedelta64(6, "h")]})  # fmt: skip
    plots.plot_spectra(sh, zonal, tmp_path / "spectra.png", title="T2M", units="K")
    for ax in figures[0].axes:
        assert not ax.lines and [t.get_text().split(":")[0] for t in ax.texts] == ["no spectrum"]


def test_leads_of_minutes_are_labelled_in_a_few_digits():
    from s2forecast.evaluation.inputs import lead_hours

    assert [lead_hours(np.timedelta64(m, "m")) for m in (10, 90, 360)] == [0.1667, 1.5, 6]


def test_a_one_row_scorecard_keeps_its_colour_bar_label_and_extends_only_where_values_go():
    figure = plots._scorecard_figure(np.array([[324.0, -20.0]]), ["T2M global"], np.array([24.0, 48.0]), "t")
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    table, colorbar = figure.axes
    box = colorbar.yaxis.label.get_window_extent(renderer)
    assert box.y0 >= 0 and box.y1 <= figure.bbox.height
    assert table.images[0].colorbar.extend == "max"  # an RMSE change cannot fall below -100 %


def test_a_title_of_uneven_glyphs_is_cut_to_the_figure():
    """The cut came from the average glyph width: wide ends and a narrow middle ran from x = -294 to
    1094 of 800 px (a review found it); the title is measured again until it fits."""
    figure = plots._figure(8.0, 2.0)
    title = plots._suptitle(figure, "W" * 60 + "i" * 400 + "W" * 60 + ": skill versus lead time")
    figure.draw(figure.canvas.get_renderer())
    box = title.get_window_extent()
    assert 0 <= box.x0 and box.x1 <= figure.bbox.width and "…" in title.get_text()
