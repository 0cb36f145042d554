"""NaN or infinite forecast and truth values in ``evaluate`` (issue 29): one bad pixel is left out of
its init time's area mean (the weights renormalised over the finite points, WeatherBench2's skipna),
counted per lead in the results and warned about, or refused with ``--nan error``."""

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from s2forecast.cli import main
from s2forecast.evaluation import compute_climatology
from s2forecast.evaluation.evaluate import evaluate, format_table
from s2forecast.evaluation.scoring import NonFiniteWarning
from s2forecast.user_errors import UserError

SAMPLE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"
LEADS = pd.to_timedelta([8, 15], unit="h")  # from the sample's first time to its second and third
PIXEL = (3, 5)  # (latitude, longitude) of the bad value


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    with xr.open_dataset(SAMPLE) as ds:
        data = ds[["t2m"]].load()
    data = data.rename(valid_time="time", t2m="2m_temperature").drop_vars(["number", "expver"])
    data["2m_temperature"] = data["2m_temperature"].astype(np.float64)
    data["2m_temperature"].attrs = {"units": "K"}
    data["written"] = ("time", np.ones(data.sizes["time"], dtype=bool))
    data.attrs = {"grid_kind": "equiangular", "s2forecast_complete": "true"}
    path = tmp_path_factory.mktemp("truth") / "era5.zarr"
    data.to_zarr(path, zarr_format=3, consolidated=True)
    return path, data.drop_vars(["written"])


def forecast_of(data, members: int = 0) -> xr.Dataset:
    """The first truth time, shifted in longitude (per member), at both leads: a plausible forecast."""
    field = data["2m_temperature"].isel(time=0).values
    fields = np.stack([np.roll(field, k + 1, axis=-1) + 0.5 * k for k in range(max(members, 1))])
    fields = fields if members else fields[0]
    values = np.broadcast_to(fields, (1, LEADS.size, *fields.shape)).copy()
    dims = ("time", "prediction_timedelta", *(("member",) if members else ()), "latitude", "longitude")
    coords = {"time": data.time.values[:1], "prediction_timedelta": LEADS, "latitude": data.latitude,
              "longitude": data.longitude}  # fmt: skip
    if members:
        coords["member"] = np.arange(members)
    return xr.Dataset({"2m_temperature": (dims, values, {"units": "K"})}, coords=coords)


def weights(data) -> np.ndarray:
    lat = np.deg2rad(data.latitude.values)
    order = np.argsort(lat)
    bounds = np.concatenate([[-np.pi / 2], (lat[order][1:] + lat[order][:-1]) / 2, [np.pi / 2]])
    w = np.empty(lat.size)
    w[order] = np.sin(bounds[1:]) - np.sin(bounds[:-1])
    return w[:, None] * np.ones(data.sizes["longitude"])


def global_scores(results, metric="rmse", source="forecast") -> np.ndarray:
    return results["2m_temperature"].sel(metric=metric, source=source, region="global").values


def score(forecast, truth_path, out, **options):
    return evaluate(forecast, truth_path, out, plots=False, progress=False, regions=["global"], **options)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_nonfinite_forecast_pixel_is_left_out_counted_and_warned(tmp_path, truth, value):
    path, data = truth
    clean = score(forecast_of(data), path, tmp_path / "clean.nc")
    forecast = forecast_of(data)
    forecast["2m_temperature"][0, 1, *PIXEL] = value  # lead 15 h
    with pytest.warns(NonFiniteWarning, match=r"2m_temperature: 1 NaN or infinite forecast value\(s\) and 0 in the "
                      r"truth \(or the climatology\) at lead\(s\) 15 h are left out of the scores"):  # fmt: skip
        results = score(forecast, path, tmp_path / "m.nc")
    f, o = forecast["2m_temperature"].values[0, 1], data["2m_temperature"].values[2]
    finite = np.isfinite(f)
    w = weights(data) * finite
    expected = np.sqrt(np.sum(w * np.where(finite, f - o, 0.0) ** 2) / w.sum())
    got = global_scores(results)
    assert got[1] == pytest.approx(expected, rel=1e-10)
    assert got[0] == pytest.approx(global_scores(clean)[0], rel=1e-13)  # the other lead as it was
    assert np.all(np.isfinite(global_scores(results, "acc")))
    assert results["2m_temperature_nonfinite_forecast"].values.tolist() == [0, 1]
    assert results["2m_temperature_nonfinite_truth"].values.tolist() == [0, 0]
    assert results["n_init_times"].values.tolist() == [1, 1]
    assert re.search(r"NaN/inf values\s+skipped\s+0\s+1", format_table(results))
    assert "NaN/inf" not in format_table(clean)
    assert clean["2m_temperature_nonfinite_forecast"].values.tolist() == [0, 0]


def test_a_nan_truth_pixel_is_left_out_of_every_source(tmp_path, truth):
    path, data = truth
    bad = tmp_path / "truth.zarr"
    shutil.copytree(path, bad)
    array = zarr.open_group(str(bad), mode="r+")["2m_temperature"]
    array[2, *PIXEL] = np.nan  # the valid time of lead 15 h
    with pytest.warns(NonFiniteWarning, match=r"0 NaN or infinite forecast value\(s\) and 1 in the truth"):
        results = score(forecast_of(data), bad, tmp_path / "m.nc")
    for source in ("forecast", "persistence", "climatology"):
        assert np.all(np.isfinite(global_scores(results, source=source))), source
    assert results["2m_temperature_nonfinite_truth"].values.tolist() == [0, 1]
    # persistence's forecast is the truth at the init time: a NaN there is counted too
    array[0, *PIXEL] = np.nan
    with pytest.warns(NonFiniteWarning, match=r"and 3 in the truth \(or the climatology\) at lead\(s\) 8, 15 h"):
        results = score(forecast_of(data), bad, tmp_path / "m2.nc")
    assert results["2m_temperature_nonfinite_truth"].values.tolist() == [1, 2]
    assert np.all(np.isfinite(global_scores(results, source="persistence")))


@pytest.mark.parametrize("members", [0, 2], ids=["deterministic", "ensemble"])
def test_a_point_the_forecast_lacks_is_left_out_of_the_baselines_too(tmp_path, truth, members):
    """Persistence and the climatology are scored over the points the forecast has (the baselines of a
    forecast NaN south of the equator covered the whole globe, the forecast half of it)."""
    path, data = truth
    climatology = compute_climatology(data[["2m_temperature"]])
    forecast = forecast_of(data, members)
    forecast["2m_temperature"][(0, 1, *([members - 1] if members else []), *PIXEL)] = np.nan  # one member, lead 15 h
    with pytest.warns(NonFiniteWarning, match=r"1 NaN or infinite forecast value"):
        gap = score(forecast, path, tmp_path / "f.nc", climatology=climatology)
    bad = tmp_path / "truth.zarr"
    shutil.copytree(path, bad)
    zarr.open_group(str(bad), mode="r+")["2m_temperature"][2, *PIXEL] = np.nan  # the valid time of lead 15 h
    with pytest.warns(NonFiniteWarning):
        truth_gap = score(forecast_of(data, members), bad, tmp_path / "t.nc", climatology=climatology)
    for source in ("persistence", "climatology"):
        for metric in ("rmse", "bias", "acc"):
            expected = global_scores(truth_gap, metric, source)
            assert np.allclose(global_scores(gap, metric, source), expected, rtol=1e-12, equal_nan=True), metric
        assert not np.allclose(global_scores(gap, "rmse", source)[1], global_scores(truth_gap, "rmse", source)[0])
    assert gap["2m_temperature_nonfinite_forecast"].values.tolist() == [0, 1]
    assert gap["2m_temperature_nonfinite_truth"].values.tolist() == [0, 0]  # the forecast's gap, counted once


def test_a_point_the_climatology_lacks_is_left_out_of_every_source(tmp_path, truth):
    """A climatology without a value at a point (a land-masked SST) scores as a truth without one there
    at the valid times: the climatology baseline and ACC had covered fewer points than the forecast's
    and persistence's RMSE and bias, with no count or warning."""
    path, data = truth
    climatology = compute_climatology(data[["2m_temperature"]])
    pixel = (climatology.latitude == data.latitude[PIXEL[0]]) & (climatology.longitude == data.longitude[PIXEL[1]])
    with pytest.warns(NonFiniteWarning, match=r"and 2 in the truth \(or the climatology\) at lead\(s\) 8, 15 h"):
        masked = score(forecast_of(data), path, tmp_path / "c.nc", climatology=climatology.where(~pixel))
    bad = tmp_path / "truth.zarr"
    shutil.copytree(path, bad)
    zarr.open_group(str(bad), mode="r+")["2m_temperature"][1:3, *PIXEL] = np.nan  # the valid times of both leads
    with pytest.warns(NonFiniteWarning):
        truth_nan = score(forecast_of(data), bad, tmp_path / "t.nc", climatology=climatology)
    for source in ("forecast", "persistence", "climatology"):
        for metric in ("rmse", "bias", "acc"):
            expected = global_scores(truth_nan, metric, source)
            assert np.allclose(global_scores(masked, metric, source), expected, rtol=1e-12, equal_nan=True), metric
    assert masked["2m_temperature_nonfinite_truth"].values.tolist() == [1, 1]
    with pytest.raises(UserError, match="the climatology of variable 2m_temperature has NaN or infinite values at "
                       "init time .* lead 8 h; fix the climatology, or pass --nan skip"):  # fmt: skip
        score(forecast_of(data), path, tmp_path / "e.nc", climatology=climatology.where(~pixel), nan="error")
    assert not (tmp_path / "e.nc").exists()
    # a point both lack (land in an SST truth and its climatology) is the truth's to report
    zarr.open_group(str(bad), mode="r+")["2m_temperature"][:, *PIXEL] = np.nan
    with pytest.raises(UserError, match="the truth of variable 2m_temperature has NaN or infinite values"):
        score(forecast_of(data), bad, tmp_path / "e.nc", climatology=climatology.where(~pixel), nan="error")
    # a climatology without any value at a scored time would leave every source's scores NaN there
    empty = climatology.where(climatology.hour != climatology.hour.values[0])
    with pytest.raises(UserError, match="the climatology of variable 2m_temperature has no finite value at the valid "
                       r"time .* check the climatology \(the --climatology file, or without one the truth it is "
                       r"computed from\)$"):  # fmt: skip
        score(forecast_of(data), path, tmp_path / "e.nc", climatology=empty)


def test_a_point_nan_in_the_truth_scores_as_the_same_point_nan_in_the_forecast(tmp_path, truth):
    """Left out of every term: a truth NaN over a third of the grid gives the forecast's scores of a
    forecast NaN there (ACC's forecast term had kept the points only the truth lacks: ACC above 1)."""
    path, data = truth
    climatology = compute_climatology(data[["2m_temperature"]])
    band = slice(0, data.sizes["latitude"] // 3)
    bad = tmp_path / "truth.zarr"
    shutil.copytree(path, bad)
    zarr.open_group(str(bad), mode="r+")["2m_temperature"][2, band] = np.nan  # the valid time of lead 15 h
    forecast = forecast_of(data, members=3)
    with pytest.warns(NonFiniteWarning):
        truth_nan = score(forecast, bad, tmp_path / "t.nc", climatology=climatology)
    forecast_nan = forecast.copy(deep=True)
    forecast_nan["2m_temperature"][0, 1, :, band] = np.nan
    with pytest.warns(NonFiniteWarning):
        forecast_nan = score(forecast_nan, path, tmp_path / "f.nc", climatology=climatology)
    for metric in ("acc", "rmse", "bias", "crps", "spread", "spread_skill"):
        assert global_scores(truth_nan, metric)[1] == pytest.approx(global_scores(forecast_nan, metric)[1], rel=1e-12)
    assert np.all(np.abs(global_scores(truth_nan, "acc")) <= 1.0)


def test_a_nan_member_point_is_left_out_for_every_member(tmp_path, truth):
    path, data = truth
    m = 3
    forecast = forecast_of(data, members=m)
    forecast["2m_temperature"][0, 1, 1, *PIXEL] = np.nan  # one member, lead 15 h
    with pytest.warns(NonFiniteWarning, match=r"1 NaN or infinite forecast value\(s\)"):
        results = score(forecast, path, tmp_path / "m.nc")
    ens, o = forecast["2m_temperature"].values[0, 1], data["2m_temperature"].values[2]
    w = weights(data)
    w[PIXEL] = 0.0  # the point is left out for every member
    ens = np.nan_to_num(ens)
    pairs = sum(np.abs(ens[i] - ens[j]) for i in range(m) for j in range(m))
    crps = np.sum(w * (np.mean(np.abs(ens - o), axis=0) - pairs / (2 * m * (m - 1)))) / w.sum()
    spread = np.sqrt(np.sum(w * np.var(ens, axis=0, ddof=1)) / w.sum())
    assert global_scores(results, "crps")[1] == pytest.approx(crps, rel=1e-10)
    assert global_scores(results, "spread")[1] == pytest.approx(spread, rel=1e-10)
    histogram = results["2m_temperature_rank_histogram"].sel(region="global").isel(lead_time=1).values
    assert histogram.sum() == pytest.approx(1.0)


def test_nan_error_refuses_in_one_line_and_writes_nothing(tmp_path, truth, capsys):
    path, data = truth
    forecast = forecast_of(data)
    forecast["2m_temperature"][0, 1, *PIXEL] = -np.inf
    forecast.to_netcdf(tmp_path / "forecast.nc")
    with pytest.raises(SystemExit) as exit:
        main(["evaluate", "--forecast", str(tmp_path / "forecast.nc"), "--truth", str(path), "--out",
              str(tmp_path / "m.nc"), "--no-progress", "--nan", "error"])  # fmt: skip
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit.value.code == 2 and len(lines) == 1, lines
    assert (
        "the forecast of variable 2m_temperature has NaN or infinite values at init time 2026-03-25T21 lead 15 h; "
        "fix the forecast, or pass --nan skip" in lines[0]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forecast.nc"]


def test_bad_nan_policies_are_refused(tmp_path, truth, capsys):
    path, data = truth
    with pytest.raises(ValueError, match=r"nan must be one of \('skip', 'error'\), got 'ignore'"):
        score(forecast_of(data), path, tmp_path / "m.nc", nan="ignore")
    with pytest.raises(SystemExit) as exit:
        main(["evaluate", "--forecast", "f.nc", "--truth", str(path), "--out", str(tmp_path / "m.nc"), "--nan", "zero"])
    assert exit.value.code == 2 and "argument --nan: invalid choice: 'zero'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_truth_field_nan_everywhere_at_a_valid_time_is_refused(tmp_path, truth, capsys):
    """A time the store lists but holds no data for: skipped point by point, it made its leads' scores NaN
    (every source's, persistence's at every lead) while n_init_times still counted the init time."""
    path, data = truth
    bad = tmp_path / "truth.zarr"
    shutil.copytree(path, bad)
    zarr.open_group(str(bad), mode="r+")["2m_temperature"][2] = np.nan  # the valid time of lead 15 h
    message = (
        r"the truth of variable 2m_temperature has no finite value at the valid time \S+ \(init time \S+ "
        r"lead 15 h\): a time the store lists but holds no data for\? Score a forecast of init times whose "
        r"leads end before it \(forecast.drop_sel\(time=...\)\), or fill that time in the truth store"
    )
    with pytest.raises(UserError, match=f"^{message}$"):
        score(forecast_of(data), bad, tmp_path / "m.nc")
    forecast = tmp_path / "forecast.nc"
    forecast_of(data).to_netcdf(forecast)
    with pytest.raises(SystemExit) as exit_status:
        main(["evaluate", "--forecast", str(forecast), "--truth", str(bad), "--out", str(tmp_path / "m.nc"),
              "--no-plots", "--no-progress"])  # fmt: skip
    assert exit_status.value.code == 2
    assert re.fullmatch(f"s2forecast evaluate: error: {message}\n", capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forecast.nc", "truth.zarr"]


def test_an_empty_truth_level_is_named():
    from s2forecast.evaluation.scoring import _refuse_empty_truth

    values = np.ones((1, 2, 3, 4, 5))  # (time, lead, level, lat, lon)
    values[0, 1, 2] = np.nan
    init, leads = np.array(["2020-01-01"], "datetime64[ns]"), pd.to_timedelta([6, 12], unit="h").values
    available = np.array([[True, True]])
    with pytest.raises(UserError, match=r"^the truth of variable t at level 850 has no finite value at the valid "
                       r"time 2020-01-01T12 \(init time 2020-01-01T00 lead 12 h\)"):  # fmt: skip
        _refuse_empty_truth(values, available, "t", init, leads, np.array([250, 500, 850]))
    # no truth at that valid time: nothing to refuse
    _refuse_empty_truth(values, np.array([[True, False]]), "t", init, leads, np.array([250, 500, 850]))


def test_a_truth_time_without_data_is_named_before_the_climatology_computed_from_it(tmp_path, truth):
    """Without --climatology the climatology comes from the truth: a valid time the truth holds no data for
    left that climatology empty there too, and the refusal blamed 'the climatology file'."""
    path, data = truth
    bad = tmp_path / "truth.zarr"
    shutil.copytree(path, bad)
    zarr.open_group(str(bad), mode="r+")["2m_temperature"][2] = np.nan
    valid = pd.Timestamp(data.time.values[2])
    climatology = compute_climatology(data[["2m_temperature"]])  # as one of a record holding only that time there
    climatology = climatology.where((climatology.dayofyear != valid.dayofyear) | (climatology.hour != valid.hour))
    with pytest.raises(UserError, match="^the truth of variable 2m_temperature has no finite value"):
        score(forecast_of(data), bad, tmp_path / "m.nc", climatology=climatology)
