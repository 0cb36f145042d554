"""``evaluate`` of forecasts and truths in WeatherBench2's dim orders and latitude directions
(issues 27, 28): the scores, spectra and maps are those of the canonical layout, and a plot that
fails never loses the scores."""

import inspect
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.evaluation import plots
from s2forecast.evaluation.evaluate import PlotWarning, evaluate
from s2forecast.evaluation.report import open_results
from s2forecast.evaluation.spectra import spectra

CANONICAL = ("time", "level", "latitude", "longitude")
# (truth dims, forecast dims, latitude direction): WB2 0.25 deg, WB2 coarser grids, ascending
# latitudes, and a permutation with time and lead inside
LAYOUTS = [
    pytest.param(("time", "level", "longitude", "latitude"),
                 ("time", "prediction_timedelta", "level", "longitude", "latitude"), "north", id="wb2-0.25deg"),
    pytest.param(("time", "level", "longitude", "latitude"),
                 ("time", "prediction_timedelta", "level", "longitude", "latitude"), "south", id="wb2-coarse",
                 marks=pytest.mark.slow),  # make test-fast keeps the WB2 0.25 layout
    pytest.param(CANONICAL, ("time", "prediction_timedelta", *CANONICAL[1:]), "south", id="ascending",
                 marks=pytest.mark.slow),  # make test-fast keeps the WB2 0.25 layout
    pytest.param(("longitude", "level", "time", "latitude"),
                 ("longitude", "level", "prediction_timedelta", "time", "latitude"), "south", id="permuted",
                 marks=pytest.mark.slow),  # make test-fast keeps the WB2 0.25 layout
]  # fmt: skip
LEADS = np.array([6, 12], dtype="timedelta64[h]").astype("timedelta64[ns]")


def truth_data() -> xr.Dataset:
    """A tiny ERA5 truth, canonical layout: 8x16 cell-centred grid north -> south, plausible values."""
    rng = np.random.default_rng(1)
    lat, lon = np.linspace(78.75, -78.75, 8), np.arange(16) * 22.5
    time = pd.date_range("2020-01-01", periods=8, freq="6h").values
    z = np.array([5500.0, 1450.0])[None, :, None, None] * 9.80665 + rng.normal(0, 100, (8, 2, 8, 16))
    t2m = 288.0 - 30.0 * np.sin(np.radians(lat))[None, :, None] ** 2 + rng.normal(0, 2, (8, 8, 16))
    return xr.Dataset(
        {
            "geopotential": (CANONICAL, z.astype(np.float32), {"units": "m**2 s**-2"}),
            "2m_temperature": (("time", "latitude", "longitude"), t2m.astype(np.float32), {"units": "K"}),
            "land_sea_mask": (("latitude", "longitude"), (rng.random((8, 16)) > 0.7).astype(np.float32)),
        },
        coords={"time": time, "level": np.array([500, 850], np.int64), "latitude": lat, "longitude": lon},
    )


def forecast_data(truth: xr.Dataset) -> xr.Dataset:
    """Truth at the valid time plus noise, for 3 init times and leads 6 h, 12 h (canonical layout)."""
    rng = np.random.default_rng(2)
    inits = truth["time"].values[:3]
    fields = {}
    for name in ("geopotential", "2m_temperature"):
        valid = xr.concat([truth[name].sel(time=inits + lead).assign_coords(time=inits) for lead in LEADS],
                          dim=xr.DataArray(LEADS, dims="prediction_timedelta"))  # fmt: skip
        valid = valid.transpose("time", "prediction_timedelta", ...)
        scale = 50.0 if name == "geopotential" else 1.0
        fields[name] = (valid + rng.normal(0, scale, valid.shape).astype(np.float32)).assign_attrs(truth[name].attrs)
    return xr.Dataset(fields).assign_coords(prediction_timedelta=LEADS)


def in_layout(ds: xr.Dataset, dims: tuple[str, ...], latitude: str) -> xr.Dataset:
    return ds.sortby("latitude", ascending=latitude == "south").transpose(*dims, missing_dims="ignore")


def write_truth(ds: xr.Dataset, path, dims=CANONICAL, latitude="north"):
    ds = in_layout(ds, dims, latitude)
    encoding = {
        name: {"chunks": tuple(1 if d == "time" else ds.sizes[d] for d in var.dims)}
        for name, var in ds.data_vars.items()
    }
    ds.to_zarr(path, zarr_format=2, consolidated=True, encoding=encoding)
    return path


def run(forecast, truth, out, **options):
    evaluate(forecast, truth, out, progress=False, regions=["global", "tropics"], **options)
    return open_results(out)


# the plots drawn from the results alone; the maps are drawn from the inputs
FROM_RESULTS = ("plot_scores", "plot_spectra", "plot_scorecard")


def record_plots(monkeypatch, draw: bool) -> list[tuple[str, dict]]:
    """The calls of the FROM_RESULTS plots (name, arguments but the path), in order; each drawn if
    ``draw``, else only its (empty) file written."""
    calls = []
    for name in FROM_RESULTS:
        real = getattr(plots, name)

        def record(*args, _name=name, _real=real, **kwargs):
            arguments = inspect.signature(_real).bind(*args, **kwargs).arguments
            path = Path(arguments.pop("path"))
            calls.append((_name, arguments))
            if draw:
                return _real(*args, **kwargs)
            path.touch()
            return path

        monkeypatch.setattr(plots, name, record)
    return calls


def assert_same_calls(ours: list, theirs: list) -> None:
    """The same plots with the same arguments (arrays to the tolerance of the results)."""
    assert [name for name, _ in ours] == [name for name, _ in theirs]
    for (name, a), (_, b) in zip(ours, theirs, strict=True):
        assert a.keys() == b.keys(), name
        for key in a:
            if isinstance(a[key], xr.DataArray):
                xr.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=0)
            elif isinstance(a[key], np.ndarray):
                np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=0, err_msg=f"{name} {key}")
            else:
                assert a[key] == b[key], (name, key)


@pytest.fixture(scope="module")
def canonical(tmp_path_factory):
    """The inputs and results of the canonical-layout evaluation, plots included (and the
    arguments of those drawn from the results)."""
    root = tmp_path_factory.mktemp("canonical")
    truth = truth_data()
    forecast = forecast_data(truth)
    forecast.to_netcdf(root / "forecast.nc")
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = record_plots(monkeypatch, draw=True)
        results = run(root / "forecast.nc", write_truth(truth, root / "truth.zarr"), root / "metrics.nc")
    assert calls
    return truth, forecast, results, root / "metrics_plots", calls


def assert_same_results(ours: xr.Dataset, theirs: xr.Dataset) -> None:
    assert sorted(ours.data_vars) == sorted(theirs.data_vars)
    assert any(name.endswith("_sh_power") for name in theirs.data_vars)  # the spectra are compared too
    for name, values in theirs.data_vars.items():
        assert ours[name].dims == values.dims, name
        np.testing.assert_allclose(ours[name].values, values.values, rtol=1e-12, atol=0, err_msg=name)


@pytest.mark.parametrize(("truth_dims", "forecast_dims", "latitude"), LAYOUTS)
def test_scores_spectra_and_maps_as_in_the_canonical_layout(canonical, tmp_path, monkeypatch, truth_dims,
                                                            forecast_dims, latitude):  # fmt: skip
    truth, forecast, reference, reference_plots, reference_calls = canonical
    in_layout(forecast, forecast_dims, latitude).to_netcdf(tmp_path / "forecast.nc")
    store = write_truth(truth, tmp_path / "truth.zarr", truth_dims, latitude)
    # the plots of the results get the canonical run's arguments (and so would draw its PNGs):
    # recorded, not drawn, here (most of the time of an evaluation this small); the maps are drawn
    calls = record_plots(monkeypatch, draw=False)
    results = run(tmp_path / "forecast.nc", store, tmp_path / "metrics.nc")
    assert_same_results(results, reference)
    assert_same_calls(calls, reference_calls)
    plots_dir = tmp_path / "metrics_plots"
    maps = sorted(path.name for path in reference_plots.glob("*_maps.png"))
    assert maps and maps == sorted(path.name for path in plots_dir.glob("*_maps.png"))
    assert sorted(p.name for p in plots_dir.iterdir()) == sorted(p.name for p in reference_plots.iterdir())
    for name in maps:  # the same maps, pixel for pixel
        assert (plots_dir / name).read_bytes() == (reference_plots / name).read_bytes(), name


def test_a_forecast_in_another_order_than_its_truth(canonical, tmp_path):
    truth, forecast, reference, *_ = canonical
    in_layout(forecast, ("time", "prediction_timedelta", "level", "longitude", "latitude"), "south").to_netcdf(
        tmp_path / "forecast.nc"
    )
    store = write_truth(truth, tmp_path / "truth.zarr")  # canonical
    assert_same_results(run(tmp_path / "forecast.nc", store, tmp_path / "metrics.nc", plots=False), reference)


def test_float_noise_unsorted_latitudes_and_zoned_times_score_as_the_canonical(canonical, tmp_path):
    """A truth whose latitudes were stored as float32 with rounding noise (up to ~4e-6 deg: it was a
    "different grid" with a 1e-6 tolerance) and in no order (scored, then every score lost in the
    spectra), and init and valid times with time zones (pandas, in Python: a TypeError)."""
    truth, forecast, reference, *_ = canonical
    shuffled = truth.isel(latitude=np.random.default_rng(3).permutation(truth.sizes["latitude"]))
    noise = 3e-6 * np.where(np.arange(truth.sizes["latitude"]) % 2, 1.0, -1.0)
    noisy = shuffled.assign_coords(latitude=(shuffled["latitude"] + noise).astype(np.float32))
    assert np.abs(np.sort(noisy["latitude"].values.astype(np.float64)) - np.sort(truth["latitude"].values)).max() > 1e-6
    zoned = noisy.assign_coords(time=pd.DatetimeIndex(noisy["time"].values).tz_localize("UTC"))
    paris = pd.DatetimeIndex(forecast["time"].values).tz_localize("UTC").tz_convert("Europe/Paris")
    results = run(forecast.assign_coords(time=paris), zoned, tmp_path / "metrics.nc", plots=False)
    assert_same_results(results, reference)


def test_a_climatology_lacking_valid_hours_is_named_in_a_warning_and_the_results(canonical, tmp_path):
    """Valid hours 06 and 18 against a 00/12 climatology were scored against 00 and 12 silently."""
    from s2forecast.evaluation.climatology import ClimatologyWarning

    truth, forecast, *_ = canonical
    mean = truth[["geopotential", "2m_temperature"]].mean("time")
    climatology = mean.expand_dims(dayofyear=np.arange(1, 367), hour=[0, 12]).astype(np.float32)
    with pytest.warns(ClimatologyWarning) as caught:
        results = run(forecast, truth, tmp_path / "metrics.nc", climatology=climatology, plots=False)
    said = "valid hour 6 -> 0, 18 -> 12 (the climatology holds hours [0, 12])"
    assert any(said in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert results.attrs["climatology_hours_substituted"] == said
    # valid times the truth lacks are not scored: their hours are not named (18 -> 12 was, unscored)
    no_18 = truth.sel(time=pd.DatetimeIndex(truth["time"].values).hour != 18)
    with pytest.warns(ClimatologyWarning) as caught:
        results = run(forecast, no_18, tmp_path / "no18.nc", climatology=climatology, plots=False)
    assert results.attrs["climatology_hours_substituted"] == "valid hour 6 -> 0 (the climatology holds hours [0, 12])"
    every_hour = mean.expand_dims(dayofyear=np.arange(1, 367), hour=[0, 6, 12, 18]).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = run(forecast, truth, tmp_path / "every.nc", climatology=every_hour, plots=False)
    assert "climatology_hours_substituted" not in results.attrs
    assert not any("lacks valid hours" in str(w.message) for w in caught)


def test_spectra_and_maps_take_any_dim_order(canonical, tmp_path):
    truth, forecast, *_ = canonical
    f = forecast["2m_temperature"].isel(time=[0]).astype(np.float64)
    inits = f["time"].values
    o = xr.concat([truth["2m_temperature"].sel(time=inits + lead).assign_coords(time=inits) for lead in LEADS],
                  dim="prediction_timedelta").assign_coords(prediction_timedelta=LEADS)  # fmt: skip
    o = o.transpose(*f.dims).astype(np.float64)
    reference = spectra(f, o)
    swapped = spectra(f.transpose(..., "longitude", "latitude"), o.transpose("longitude", "latitude", ...))
    xr.testing.assert_allclose(swapped, reference, rtol=1e-12, atol=0)
    fl, ol = f.isel(time=0), o.isel(time=0)
    mask = truth["land_sea_mask"]
    plots.plot_maps(fl, ol, tmp_path / "a.png", "T2M", "K", land_sea_mask=mask)
    plots.plot_maps(fl.transpose("longitude", "latitude", ...), ol.transpose("longitude", ...).isel(latitude=slice(
        None, None, -1)), tmp_path / "b.png", "T2M", "K", land_sea_mask=mask.T)  # fmt: skip
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_a_failing_plot_keeps_the_scores(canonical, tmp_path, monkeypatch):
    truth, forecast, reference, *_ = canonical
    forecast.to_netcdf(tmp_path / "forecast.nc")
    store = write_truth(truth, tmp_path / "truth.zarr")

    def broken(*args, **kwargs):
        raise RuntimeError("no display\nsecond line")

    monkeypatch.setattr(plots, "plot_maps", broken)
    with pytest.warns(PlotWarning, match=r"plots could not be drawn \(RuntimeError: no display\); the scores are"):
        results = run(tmp_path / "forecast.nc", store, tmp_path / "metrics.nc")
    assert_same_results(results, reference)
    assert "plots_dir" not in results.attrs
    assert (tmp_path / "metrics.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forecast.nc", "metrics.csv", "metrics.nc", "truth.zarr"]
