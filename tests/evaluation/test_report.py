"""``evaluate``'s report (``evaluation.report``): spectra at map leads that lack truth for some or
all init times, and the region of the table and the score plots when ``global`` is not scored."""

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.evaluation import MissingTruthWarning, plots
from s2forecast.evaluation.evaluate import evaluate, format_table
from s2forecast.evaluation.report import compute_spectra
from s2forecast.evaluation.scoring import NonFiniteWarning
from s2forecast.evaluation.spectra import spectra
from s2forecast.geometry import Grid

GRID = Grid(8, 16, "equiangular")
TIMES = pd.date_range("2020-01-01", periods=4, freq="6h")  # the truth's valid times
INITS = TIMES[:3]


def make_truth() -> xr.Dataset:
    """(time, latitude, longitude) 2 m temperature (K), each time its own random small scales."""
    values = 280.0 + 5.0 * np.random.default_rng(0).standard_normal((TIMES.size, GRID.nlat, GRID.nlon))
    coords = {"time": TIMES, "latitude": GRID.lats_deg.numpy(), "longitude": GRID.lons_deg.numpy()}
    t2m = xr.DataArray(values, dims=tuple(coords), coords=coords, attrs={"units": "K"})
    return xr.Dataset({"2m_temperature": t2m}, attrs={"grid_kind": "equiangular", "s2forecast_complete": "true"})


def make_forecast(truth: xr.Dataset, leads_h) -> xr.Dataset:
    """(time, prediction_timedelta, latitude, longitude): 1.01 x the truth (its first time where none)."""
    leads = pd.to_timedelta(leads_h, unit="h")
    fields = [
        truth["2m_temperature"].reindex(time=INITS + lead).fillna(truth["2m_temperature"].isel(time=0, drop=True))
        for lead in leads
    ]
    t2m = xr.concat([f.assign_coords(time=INITS) for f in fields], dim="prediction_timedelta")
    t2m = (1.01 * t2m.assign_coords(prediction_timedelta=leads).transpose("time", ...)).assign_attrs(units="K")
    return xr.Dataset({"2m_temperature": t2m})


# --- spectra at map leads without (all) truth -------------------------------------------------------


def test_spectra_average_each_lead_over_the_init_times_with_truth_there():
    """Lead 6 h has truth for the 3 init times, 12 h for the first 2, 30 h for none: each lead's
    spectra are those of its own init times, 30 h's NaN, and a one-line MissingTruthWarning names it."""
    truth = make_truth()
    forecast = make_forecast(truth, [6, 12, 30])
    leads = forecast["prediction_timedelta"].values
    with pytest.warns(MissingTruthWarning, match=r"^the truth has no data at map lead\(s\) 30 h for any init time: "
                                                 r"their spectra are NaN$") as record:  # fmt: skip
        result = compute_spectra(forecast, truth, ["2m_temperature"], leads)
    assert len(record) == 1
    np.testing.assert_array_equal(result["spectra_n_init_times"].values, [3, 2, 0])
    assert result.attrs["spectra_init_times"] == "3 (lead 6 h), 2 (lead 12 h), 0 (lead 30 h)"
    for k, inits in ((0, INITS), (1, INITS[:2])):
        f = forecast["2m_temperature"].sel(time=inits).isel(prediction_timedelta=[k])
        o = truth["2m_temperature"].sel(time=inits + pd.Timedelta(leads[k])).assign_coords(time=inits)
        o = o.expand_dims(prediction_timedelta=leads[[k]]).transpose(*f.dims)
        expected = spectra(f, o)
        for name in ("sh_power", "zonal_power"):
            got = result[f"2m_temperature_{name}"].isel(spectrum_lead_time=k)
            assert got.dims[0] == "spectrum_source"
            np.testing.assert_allclose(got.values, expected[name].isel(prediction_timedelta=0).values, rtol=1e-12)
            assert got.attrs["units"] == expected[name].attrs["units"]
    assert np.isnan(result["2m_temperature_sh_power"].isel(spectrum_lead_time=2).values).all()
    assert np.isnan(result["2m_temperature_zonal_power"].isel(spectrum_lead_time=2).values).all()


def test_a_field_with_a_nan_point_is_left_out_of_its_leads_spectra_alone():
    """One NaN point in the truth at one valid time: the two (init time, lead) fields that see it are left
    out of their leads' spectra (each the mean of the other init times', not NaN), counted, and warned about."""
    truth = make_truth()
    truth["2m_temperature"][2, 3, 5] = np.nan  # valid time 12 h: init 0 at lead 12 h, init 6 h at lead 6 h
    forecast = make_forecast(truth, [6, 12])
    leads = forecast["prediction_timedelta"].values
    with pytest.warns(NonFiniteWarning) as record:
        result = compute_spectra(forecast, truth, ["2m_temperature"], leads)
    assert [str(w.message) for w in record] == [
        "2m_temperature: 2 of 5 (init time, map lead) fields have NaN or infinite values: left out of its spectra, "
        "averaged over 2 (lead 6 h), 1 (lead 12 h) init times (a lead of none: NaN)"
    ]
    np.testing.assert_array_equal(result["spectra_n_init_times"].values, [3, 2])  # chosen: those with truth
    for k, inits in ((0, INITS[[0, 2]]), (1, INITS[[1]])):
        f = forecast["2m_temperature"].sel(time=inits).isel(prediction_timedelta=[k])
        o = truth["2m_temperature"].sel(time=inits + pd.Timedelta(leads[k])).assign_coords(time=inits)
        o = o.expand_dims(prediction_timedelta=leads[[k]]).transpose(*f.dims)
        expected = spectra(f, o)
        for name in ("sh_power", "zonal_power"):
            got = result[f"2m_temperature_{name}"]
            assert got.attrs["init_times_averaged"] == "2 (lead 6 h), 1 (lead 12 h)"
            np.testing.assert_allclose(got.isel(spectrum_lead_time=k).values,
                                       expected[name].isel(prediction_timedelta=0).values, rtol=1e-12)  # fmt: skip


def test_an_ensemble_member_with_a_nan_point_leaves_its_init_time_out_too():
    """The members' mean power skipped a member of NaN power: that init time was averaged over the other
    member in silence (13 % low in a review), not left out as a field with a NaN."""
    truth = make_truth()
    forecast = make_forecast(truth, [6])
    members = xr.concat([forecast["2m_temperature"], 1.02 * forecast["2m_temperature"]], dim="number")
    members = members.transpose("time", "number", ...).copy()
    members[0, 1, 0, 3, 5] = np.nan  # init 0, member 1, lead 6 h
    forecast = xr.Dataset({"2m_temperature": members.assign_attrs(units="K")})
    with pytest.warns(NonFiniteWarning, match=r"^2m_temperature: 1 of 3 \(init time, map lead\) fields have NaN"):
        result = compute_spectra(forecast, truth, ["2m_temperature"], forecast["prediction_timedelta"].values)
    assert result["2m_temperature_sh_power"].attrs["init_times_averaged"] == 2
    kept = forecast.isel(time=[1, 2])
    expected = compute_spectra(kept, truth, ["2m_temperature"], kept["prediction_timedelta"].values)
    np.testing.assert_allclose(result["2m_temperature_sh_power"].values, expected["2m_temperature_sh_power"].values,
                               rtol=1e-12)  # fmt: skip


def test_spectra_of_leads_all_without_truth_are_left_out_with_a_warning():
    truth = make_truth()
    forecast = make_forecast(truth, [24, 30])
    leads = forecast["prediction_timedelta"].values
    with pytest.warns(MissingTruthWarning, match=r"map lead\(s\) 24 h, 30 h for any init time: .* left out$"):
        assert not compute_spectra(forecast, truth, ["2m_temperature"], leads).data_vars


def test_evaluate_writes_the_spectra_of_the_map_leads_with_truth(tmp_path, monkeypatch):
    """The review's case: one init time, the last lead (a default map lead) beyond the truth: the
    first lead's spectra are still written and plotted (only its lines), the last's are NaN."""
    drawn = []

    def spy_plot_spectra(sh, zonal, path, **kwargs):
        drawn.append(sh["spectrum_lead_time"].values)
        return real_plot_spectra(sh, zonal, path, **kwargs)

    real_plot_spectra = plots.plot_spectra
    monkeypatch.setattr(plots, "plot_spectra", spy_plot_spectra)
    truth = make_truth()
    forecast = make_forecast(truth, [0, 6, 30]).isel(time=[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = evaluate(forecast, truth, tmp_path / "m.nc", progress=False, regions=["global"])
    messages = [str(w.message) for w in caught if issubclass(w.category, MissingTruthWarning)]
    assert "the truth has no data at map lead(s) 30 h for any init time: their spectra are NaN" in messages
    sh = metrics["2m_temperature_sh_power"]
    assert np.isfinite(sh.isel(spectrum_lead_time=0).values).all()
    assert np.isnan(sh.isel(spectrum_lead_time=1).values).all()
    np.testing.assert_array_equal(metrics["spectra_n_init_times"].values, [1, 0])
    assert "averaged over 1 (lead 0 h), 0 (lead 30 h) init times" in metrics.attrs["spectra"]
    assert (tmp_path / "m_plots" / "2m_temperature_spectra.png").is_file() and len(drawn) == 1


def test_plotted_spectra_leave_out_a_lead_without_truth(tmp_path, monkeypatch):
    truth = make_truth()
    forecast = make_forecast(truth, [6, 30])
    with pytest.warns(MissingTruthWarning):
        result = compute_spectra(forecast, truth, ["2m_temperature"], forecast["prediction_timedelta"].values)
    figures = []
    real_save = plots._save
    monkeypatch.setattr(plots, "_save", lambda figure, path: figures.append(figure) or real_save(figure, path))
    plots.plot_spectra(result["2m_temperature_sh_power"], result["2m_temperature_zonal_power"],
                       tmp_path / "s.png", title="T2M", units="K")  # fmt: skip
    for ax in figures[0].axes:
        assert [text.get_text() for text in ax.get_legend().get_texts()] == ["forecast, 6 h", "truth, 6 h"]


# --- the region of the table and of the score plots -------------------------------------------------


def evaluate_with_titles(tmp_path, monkeypatch, regions):
    """``evaluate`` of a one-lead forecast, and the titles of the plots it drew."""
    titles = []
    real_save = plots._save
    monkeypatch.setattr(plots, "_save", lambda figure, path: titles.append(figure._suptitle.get_text())
                        or real_save(figure, path))  # fmt: skip
    truth = make_truth()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the climatology of a day: ACC caveat
        metrics = evaluate(make_forecast(truth, [6]), truth, tmp_path / "m.nc", progress=False, regions=regions)
    return metrics, titles


def test_table_and_score_plots_name_their_region_when_not_global(tmp_path, monkeypatch):
    """Without ``global`` the table and the score plots show the first region's scores and say so."""
    metrics, titles = evaluate_with_titles(tmp_path, monkeypatch, ["europe", "tropics"])
    header, first = format_table(metrics).splitlines()[:2]
    assert header.startswith("region europe ") and header.endswith("6h")
    europe = metrics["2m_temperature"].sel(metric="rmse", source="forecast", region="europe").item()
    assert first.startswith("T2M [K]") and first.split()[-1] == f"{europe:.4g}"
    assert "T2M (europe): skill versus lead time" in titles


def test_table_and_score_plots_name_no_region_when_global(tmp_path, monkeypatch):
    metrics, titles = evaluate_with_titles(tmp_path, monkeypatch, ["europe", "global"])
    header = format_table(metrics).splitlines()[0]
    assert header.split() == ["6h"] and header.startswith(" ")
    assert "T2M: skill versus lead time" in titles


def test_maps_show_the_first_init_time_with_truth_at_the_map_leads(tmp_path, monkeypatch):
    """The first init time's maps were drawn whatever the truth: without its valid times, empty truth
    and error panels beside init times with all of theirs (a review found it)."""
    drawn = []
    real_plot_maps = plots.plot_maps
    monkeypatch.setattr(plots, "plot_maps", lambda f, o, path, **kw: drawn.append((o, kw["title"])) or
                        real_plot_maps(f, o, path, **kw))  # fmt: skip
    truth = make_truth()
    forecast = make_forecast(truth, [6])
    gappy = truth.drop_sel(time=TIMES[1])  # init 0's valid time at 6 h
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingTruthWarning)
        evaluate(forecast, gappy, tmp_path / "m.nc", progress=False, regions=["global"])
    ((shown_truth, title),) = drawn
    assert title.endswith(f"init time {INITS[1]:%Y-%m-%d %H:%M}")
    assert np.isfinite(shown_truth.values).all()
