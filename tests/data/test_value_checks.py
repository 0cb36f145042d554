"""Values and arguments that pass every check on labels but are wrong: refused with one line, nothing lost.

Physical plausibility (degC labelled K, hPa labelled Pa, geopotential height labelled geopotential)
in ``convert-era5`` and ``evaluate``; unit mismatches in ``evaluate``; ``stats`` arguments and
non-finite or unordered inputs; ``climatology`` duplicates and infinities; an unstable
``generate-swe`` solver step.
"""

import hashlib
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from s2forecast.cli import main as cli
from s2forecast.data import compute_stats
from s2forecast.data.plausibility import check_plausible, field_problem, standard_height
from s2forecast.evaluation import compute_climatology
from s2forecast.evaluation.evaluate import evaluate

DATA = Path(__file__).parents[1] / "data"
ERA5_SLICE = DATA / "era5_sample_slice.nc"  # real ERA5, see tests/data/README.md
ERA5_NAMES = {"t2m": "2m_temperature", "u10": "10m_u_component_of_wind", "v10": "10m_v_component_of_wind"}
ERA5_NAMES |= {"msl": "mean_sea_level_pressure", "tp": "total_precipitation"}

LAT = np.linspace(90.0, -90.0, 7)  # equiangular with poles
LON = np.arange(12) * 30.0
TIMES = pd.date_range("2020-01-01", periods=4, freq="6h").values
G = 9.80665  # m s**-2


def refused(args: list[str], capsys) -> str:
    """Run the ``s2forecast`` command expecting a user error: exit status 2 and one line on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        cli(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` (or ``path`` itself) -> sha256 of its bytes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def field(center: float, spread: float, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return (center + spread * np.random.default_rng(seed).normal(size=shape)).astype(np.float32)


# --- convert-era5 --------------------------------------------------------------------------------


def cds_file(path: Path, short: str, values: np.ndarray, units: str, levels=None) -> Path:
    """A NetCDF file as the new CDS API writes it: (valid_time, [pressure_level,] latitude, longitude)."""
    dims = (
        ("valid_time", "pressure_level", "latitude", "longitude") if levels else ("valid_time", "latitude", "longitude")
    )
    coords = {"valid_time": TIMES, "latitude": LAT, "longitude": LON, "number": 0}
    if levels:
        coords["pressure_level"] = ("pressure_level", np.asarray(levels, dtype=np.float64), {"units": "hPa"})
    ds = xr.Dataset({short: (dims, values, {"units": units})}, coords=coords)
    ds.to_netcdf(path, encoding={"valid_time": {"units": "seconds since 1970-01-01", "dtype": "int64"}})
    return path


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> Path:
    """A store converted from plausible 2 m temperatures: what a refused conversion must not touch."""
    tmp = tmp_path_factory.mktemp("good")
    source = cds_file(tmp / "t2m.nc", "t2m", field(280.0, 10.0, (4, 7, 12)), "K")
    cli(["convert-era5", str(source), "--out", str(tmp / "era5.zarr"), "--no-progress"])
    return tmp / "era5.zarr"


SURFACE = (4, 7, 12)
PRESSURE = (4, 2, 7, 12)
HEIGHTS = np.array([5500.0, 100.0])[None, :, None, None]  # m at 500 and 1000 hPa


@pytest.mark.parametrize(
    ("short", "values", "units", "levels", "message"),
    [
        pytest.param(
            "t",
            field(-20.0, 10.0, (4, 1, 7, 12)),
            "K",
            (850,),
            r"variable temperature at 850 hPa at time 2020-01-01T00: median -\d+(\.\d+)? is outside the plausible "
            r"range 150\.\.350 K for temperature; the values look like degC: convert them to K or fix the units",
            id="degC-as-K",
        ),
        pytest.param(
            "msl",
            field(1010.0, 10.0, SURFACE),
            "Pa",
            None,
            r"variable mean_sea_level_pressure at time 2020-01-01T00: median 10\d\d(\.\d+)? is outside the "
            r"plausible range 90000\.\.110000 Pa .*; the values look like hPa: convert them to Pa",
            id="hPa-as-Pa",
        ),
        pytest.param(
            "z",
            (HEIGHTS + 20.0 * np.random.default_rng(1).normal(size=PRESSURE)).astype(np.float32),
            "m**2 s**-2",
            (500, 1000),
            r"variable geopotential at 500 hPa at time 2020-01-01T00: median 5\d\d\d(\.\d+)? is outside the "
            r"plausible range .* m\*\*2 s\*\*-2 for geopotential; the values look like geopotential height in m",
            id="height-as-geopotential",
        ),
        pytest.param(
            "z",
            (110.0 + 100.0 * np.random.default_rng(2).normal(size=(4, 1, 7, 12))).astype(np.float32),
            "m**2 s**-2",
            (1000,),
            r"variable geopotential at 1000 hPa at time 2020-01-01T00: range \(max - min\) \d+(\.\d+)? is below "
            r"the plausible least 1471 m\*\*2 s\*\*-2 for geopotential; the values look like geopotential height",
            id="height-as-geopotential-1000hPa-only",
        ),
        pytest.param(
            "t2m",
            # one point at a time the plausibility checks do not sample (they read the first, middle and last)
            np.where((np.arange(4)[:, None, None] == 1) & (np.arange(12) == 5), np.inf, field(280.0, 10.0, SURFACE)),
            "K",
            None,
            r"variable 2m_temperature at 2020-01-01T06 has infinite values; fix or drop that time",
            id="inf",
        ),
        pytest.param(
            "t2m",
            np.where(np.arange(4)[:, None, None] == 1, np.nan, field(280.0, 10.0, SURFACE)),
            "K",
            None,
            r"variable 2m_temperature at 2020-01-01T06 has only NaN; fix or drop that time",
            id="all-nan-field",
        ),
    ],
)
def test_convert_era5_refuses_implausible_values(tmp_path, capsys, good_store, short, values, units, levels, message):
    source = cds_file(tmp_path / f"{short}.nc", short, values, units, levels)
    fresh = tmp_path / "fresh.zarr"
    err = refused(["convert-era5", str(source), "--out", str(fresh), "--no-progress"], capsys)
    assert f"{source}: " in err
    assert not fresh.exists()
    existing = tmp_path / "existing.zarr"
    shutil.copytree(good_store, existing)
    before = digest(existing)
    err = refused(["convert-era5", str(source), "--out", str(existing), "--overwrite", "--no-progress"], capsys)
    assert re.search(message, err), err
    assert digest(existing) == before


def test_plausibility_accepts_the_real_era5_slice():
    """No false positive on real ERA5 fields: every variable, every time of the committed slice."""
    with xr.open_dataset(ERA5_SLICE) as sample:
        for short, name in ERA5_NAMES.items():
            data = sample[short].load()
            for time in range(data.sizes["valid_time"]):
                assert field_problem(name, data.isel(valid_time=time).values) is None
            check_plausible(data, name, short, sample_dims=("valid_time",))


@pytest.mark.parametrize(
    ("level", "height"),
    # typical global-mean geopotential heights (m) of ERA5 at these levels, from the WMO standard
    # atmosphere tables rounded and shifted a little (real fields differ from the standard by a few %)
    [(925, 780.0), (850, 1500.0), (700, 3050.0), (500, 5650.0), (300, 9300.0), (200, 11900.0), (50, 20700.0)],
)
def test_geopotential_bounds_separate_geopotential_from_height(level, height):
    shape = (7, 12)
    assert field_problem("geopotential", np.full(shape, G * height), level) is None
    assert "geopotential height in m" in field_problem("geopotential", np.full(shape, height), level)


@pytest.mark.parametrize("level", [1000, 975, 950])
def test_geopotential_near_the_ground_is_told_from_height_by_its_range(level):
    """Where the median ranges overlap, a global field's range (lows to highs, >= 500 m) decides."""
    # heights (m): the ISA height of the level plus synoptic lows and highs of -300..+250 m
    height = standard_height(level) + np.linspace(-300.0, 250.0, 7 * 12).reshape(7, 12)
    assert field_problem("geopotential", G * height, level) is None
    assert "geopotential height in m" in field_problem("geopotential", height, level)


# --- evaluate ------------------------------------------------------------------------------------


def truth_store(path: Path, t2m: np.ndarray, units: str = "K") -> Path:
    ds = xr.Dataset(
        {
            "2m_temperature": (("time", "latitude", "longitude"), t2m, {"units": units}),
            "written": (("time",), np.ones(TIMES.size, dtype=bool)),
        },
        coords={"time": TIMES, "latitude": LAT, "longitude": LON},
        attrs={"grid_kind": "equiangular", "s2forecast_complete": "true"},
    )
    ds.to_zarr(path, zarr_format=3, consolidated=True)
    return path


def forecast_file(path: Path, t2m: np.ndarray, units: str) -> Path:
    """Init times TIMES[:2], leads 6 and 12 h: (time, prediction_timedelta, latitude, longitude)."""
    dims = ("time", "prediction_timedelta", "latitude", "longitude")
    coords = {"time": TIMES[:2], "prediction_timedelta": pd.to_timedelta([6, 12], unit="h").values}
    coords |= {"latitude": LAT, "longitude": LON}
    xr.Dataset({"2m_temperature": (dims, t2m, {"units": units})}, coords=coords).to_netcdf(path)
    return path


FORECAST = (2, 2, 7, 12)


@pytest.mark.parametrize(
    ("forecast_values", "forecast_units", "truth_values", "message"),
    [
        pytest.param(
            field(5.0, 5.0, FORECAST),
            "K",
            field(278.0, 5.0, SURFACE),
            r"forecast variable 2m_temperature at init time 2020-01-01T00 at lead 6 h: median \d+(\.\d+)? is "
            r"outside the plausible range 150\.\.350 K for 2m_temperature; the values look like degC",
            id="degC-forecast-labelled-K",
        ),
        pytest.param(
            field(5.0, 5.0, FORECAST),
            "degC",
            field(278.0, 5.0, SURFACE),
            r"forecast variable 2m_temperature has units 'degC' but the truth store .*truth\.zarr has 'K'; convert "
            r"the forecast to K before scoring",
            id="degC-forecast-vs-K-truth",
        ),
        pytest.param(
            field(278.0, 5.0, FORECAST),
            "K",
            field(5.0, 5.0, SURFACE),
            r"truth store .*truth\.zarr: variable 2m_temperature at time 2020-01-01T00: median \d+(\.\d+)? is "
            r"outside the plausible range 150\.\.350 K .*look like degC",
            id="degC-truth-labelled-K",
        ),
    ],
)
def test_evaluate_refuses_unit_mistakes(tmp_path, capsys, forecast_values, forecast_units, truth_values, message):
    truth = truth_store(tmp_path / "truth.zarr", truth_values)
    forecast = forecast_file(tmp_path / "forecast.nc", forecast_values, forecast_units)
    out = tmp_path / "metrics.nc"
    out.write_bytes(b"earlier metrics")
    args = ["evaluate", "--forecast", str(forecast), "--truth", str(truth), "--out", str(out), "--no-progress"]
    err = refused(args, capsys)
    assert re.search(message, err), err
    assert out.read_bytes() == b"earlier metrics"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forecast.nc", "metrics.nc", "truth.zarr"]


def test_evaluate_scores_consistent_non_canonical_units(tmp_path):
    """degC forecast against a degC truth: nothing to refuse (the ranges are for canonical units only)."""
    truth = truth_store(tmp_path / "truth.zarr", field(5.0, 5.0, SURFACE), units="degC")
    forecast = forecast_file(tmp_path / "forecast.nc", field(5.0, 5.0, FORECAST, seed=1), "degC")
    metrics = evaluate(forecast, truth, tmp_path / "metrics.nc", plots=False, progress=False)
    assert np.isfinite(metrics["2m_temperature"].sel(metric="rmse", source="forecast", region="global").values).all()


def test_evaluate_scores_a_forecast_that_diverged_with_a_warning(tmp_path):
    """Plausible at the first lead and not at the last (a model that diverged): it was refused, telling
    the user to check the units; the first lead proves them right, so it is scored."""
    values = field(278.0, 5.0, FORECAST, seed=1)
    values[:, 1] = 1.0e4  # 10000 K at 12 h
    truth = truth_store(tmp_path / "truth.zarr", field(278.0, 5.0, SURFACE))
    forecast = forecast_file(tmp_path / "forecast.nc", values, "K")
    with pytest.warns(UserWarning) as caught:
        metrics = evaluate(forecast, truth, tmp_path / "metrics.nc", plots=False, progress=False)
    (message,) = [str(w.message) for w in caught if "diverged" in str(w.message)]
    assert re.fullmatch(
        r"forecast variable 2m_temperature at init time 2020-01-01T00 at lead 12 h: median 10000 is outside the "
        r"plausible range 150\.\.350 K for 2m_temperature, though plausible at the first lead: the forecast diverged, "
        r"it seems \(the values look like no mislabeled unit\); it is scored as it is",
        message,
    ), message
    rmse = metrics["2m_temperature"].sel(metric="rmse", source="forecast", region="global").values
    assert rmse[0] < 20 and rmse[1] > 9000


def test_evaluate_refuses_degc_at_the_leads_after_a_0_h_analysis(tmp_path, capsys):
    """WB2-style forecasts hold a 0 h lead (the analysis, in K): degC labelled K at every later lead was taken
    for a model that diverged, scored, and said to be in the right units (a review of the warning above)."""
    values = field(278.0, 5.0, FORECAST, seed=1)
    values[:, 1] -= 273.15  # the model's lead in degC
    dims = ("time", "prediction_timedelta", "latitude", "longitude")
    coords = {"time": TIMES[:2], "prediction_timedelta": pd.to_timedelta([0, 6], unit="h").values}
    forecast = tmp_path / "forecast.nc"
    xr.Dataset({"2m_temperature": (dims, values, {"units": "K"})}, coords=coords | {"latitude": LAT, "longitude": LON}
               ).to_netcdf(forecast)  # fmt: skip
    truth = truth_store(tmp_path / "truth.zarr", field(278.0, 5.0, SURFACE))
    args = ["evaluate", "--forecast", str(forecast), "--truth", str(truth), "--out", str(tmp_path / "m.nc"),
            "--no-progress"]  # fmt: skip
    assert re.search(r"at lead 6 h: median \d+(\.\d+)? is outside the plausible range 150\.\.350 K for 2m_temperature; "
                     r"the values look like degC", refused(args, capsys))  # fmt: skip
    assert not (tmp_path / "m.nc").exists()


# --- stats ---------------------------------------------------------------------------------------

GRID_LAT = np.linspace(90.0, -90.0, 5)  # Grid(5, 8): equiangular with poles
GRID_LON = np.arange(8) * 45.0


def store(path: Path, n_times: int = 6) -> Path:
    """A complete 6-hourly store: temperature at 500 and 850 hPa, 2 m temperature, a land-sea mask."""
    rng = np.random.default_rng(0)
    times = pd.date_range("2020-01-01", periods=n_times, freq="6h").values
    ds = xr.Dataset(
        {
            "temperature": (("time", "level", "latitude", "longitude"), 250 + rng.normal(size=(n_times, 2, 5, 8))),
            "2m_temperature": (("time", "latitude", "longitude"), 280 + rng.normal(size=(n_times, 5, 8))),
            "land_sea_mask": (("latitude", "longitude"), (rng.random((5, 8)) > 0.5).astype(np.float64)),
            "written": (("time",), np.ones(n_times, dtype=bool)),
        },
        coords={"time": times, "level": [500, 850], "latitude": GRID_LAT, "longitude": GRID_LON},
        attrs={"grid_kind": "equiangular", "s2forecast_complete": "true"},
    )
    ds.to_zarr(path, zarr_format=3, consolidated=True)
    return path


@pytest.fixture(scope="module")
def store_with_stats(tmp_path_factory) -> Path:
    path = store(tmp_path_factory.mktemp("stats") / "store.zarr")
    cli(["stats", str(path)])
    return path


def set_time(group, values: np.ndarray) -> None:
    """Overwrite the stored (encoded) time coordinate, e.g. to repeat or swap times."""
    group["time"][:] = values


@pytest.mark.parametrize(
    ("args", "corrupt", "message"),
    [
        (["--step-hours", "0"], None, r"--step-hours must be a positive number of hours, got 0; the store's time step "
         r"is 6 h"),
        (["--step-hours", "-6"], None, r"--step-hours must be a positive number of hours, got -6"),
        (["--step-hours", "nan"], None, r"--step-hours must be a positive number of hours, got nan"),
        (["--step-hours", "9"], None, r"--step-hours 9 is not a multiple of the time step of .*store\.zarr \(6 h\): "
         r"no two of its times are 9 h apart; use 6, 12, \.\.\."),
        # past int64 nanoseconds: a traceback (1e300), a negative step in the message (3e6), 6 h (1.0008e13)
        (["--step-hours", "1e300"], None, r"--step-hours 1e\+300 is longer than the whole record \(30 h from "
         r"2020-01-01T00\): no two times are that far apart; the store's time step is 6 h"),
        (["--step-hours", "3e6"], None, r"--step-hours 3e\+06 is longer than the whole record"),
        (["--step-hours", "10007999171940.436"], None, r"--step-hours 1\.0008e\+13 is longer than the whole record"),
        (["--start", "2020-01-01T12", "--end", "2020-01-01T12"], None, r"no two times of .* between "
         r"2020-01-01T12 and 2020-01-01T12 are 6 h apart"),
        (["--start", "2020-01-02", "--end", "2020-01-01T06"], None, r"--start 2020-01-02T00 is after --end "
         r"2020-01-01T06$"),
        (["--start", "2019-12-31"], None, r"--start 2019-12-31 is outside the store .*store\.zarr, which covers "
         r"2020-01-01T00 \.\. 2020-01-02T06"),
        (["--end", "2020-01-03"], None, r"--end 2020-01-03 is outside the store"),
        (["--end", "2019"], None, r"--end 2019 is outside the store"),
        (["--start", "2021-01"], None, r"--start 2021-01 is outside the store"),
        (["--start", "soon"], None, r"--start 'soon' is not a date; use e\.g\. 2020-01-01"),
        (["--start", "2020-01-01T00", "--end", "2020-01-01T05"], None, r"no two times of .* between "
         r"2020-01-01T00 and 2020-01-01T00 are 6 h apart"),
        ([], lambda g: g["temperature"].__setitem__((2, 1, 0, 3), np.inf), r"variable temperature at 850 hPa has "
         r"infinite values at 2020-01-01T12 \(the first of 1 such times\)"),
        ([], lambda g: g["2m_temperature"].__setitem__((4, 2, 2), -np.inf), r"variable 2m_temperature has infinite "
         r"values at 2020-01-02T00"),
        ([], lambda g: g["land_sea_mask"].__setitem__((0, 0), np.inf), r"variable land_sea_mask has infinite values "
         r"\(a static field\)"),
        ([], lambda g: g["2m_temperature"].__setitem__(slice(None), np.nan), r"variable 2m_temperature has only NaN "
         r"values between 2020-01-01T00 and 2020-01-02T06; its statistics are undefined"),
        ([], lambda g: set_time(g, g["time"][:][[0, 1, 3, 2, 4, 5]]), r"store .*store\.zarr: its times are not in "
         r"ascending order: 2020-01-01T12 comes after 2020-01-01T18 \(position 3\)"),
        ([], lambda g: set_time(g, g["time"][:][[0, 1, 2, 2, 4, 5]]), r"store .*store\.zarr: time 2020-01-01T12 "
         r"appears 2 times"),
    ],
)  # fmt: skip
def test_stats_refuses_bad_arguments_and_data_and_keeps_earlier_stats(
    tmp_path, capsys, store_with_stats, args, corrupt, message
):
    path = tmp_path / "store.zarr"
    shutil.copytree(store_with_stats, path)
    if corrupt is not None:
        corrupt(zarr.open_group(path, mode="r+", zarr_format=3))
    before = digest(path / "stats")
    err = refused(["stats", str(path), *args], capsys)
    assert re.search(message, err), err
    assert digest(path / "stats") == before


def test_stats_are_not_written_into_a_zarr_v2_copy_of_our_store(tmp_path, capsys):
    """A v2 copy keeps the completeness flag: a v3 stats group was written into it, then the v3
    consolidation failed with 'error: file://...' (exit 2) although the group was there."""
    path = tmp_path / "v2.zarr"
    copy = xr.open_zarr(store(tmp_path / "store.zarr")).load()
    for variable in copy.variables.values():
        variable.encoding = {}  # v3 codecs
    copy.to_zarr(path, zarr_format=2, consolidated=True)
    assert copy.attrs["s2forecast_complete"] == "true"
    before = digest(path)
    err = refused(["stats", str(path), "--no-progress"], capsys)
    assert err == (
        f"s2forecast stats: error: {path} is not a zarr v3 store: statistics are written into s2forecast's own "
        f"(v3) stores only; put them in a store of their own: s2forecast stats {path} --out STATS.zarr (and stats: "
        "STATS.zarr in the DataModule)"
    )
    assert digest(path) == before
    cli(["stats", str(path), "--out", str(tmp_path / "stats.zarr"), "--no-progress"])  # the way out it names


def test_stats_leave_out_fields_with_other_dims_and_say_so(tmp_path, capsys):
    """A field with an ensemble's member dim crashed the reduction with an internal error; it is left out
    with a warning (no model reads it), and a store of nothing else is one line."""
    path = store(tmp_path / "store.zarr")
    members = xr.DataArray(np.ones((6, 2, 5, 8)), dims=("time", "number", "latitude", "longitude"), name="members")
    members.to_dataset().to_zarr(path, mode="a")
    with pytest.warns(UserWarning, match=r"left out of the statistics, dims other than \('time', 'level', 'latitude', "
                      r"'longitude'\): members \('time', 'number', 'latitude', 'longitude'\)"):  # fmt: skip
        stats = compute_stats(path, out=tmp_path / "stats.zarr")
    assert "members" not in "".join(stats["channel"].values) and "2m_temperature" in stats["channel"].values
    only = tmp_path / "only.zarr"
    coords = {"time": pd.date_range("2020", periods=6, freq="6h"), "latitude": GRID_LAT, "longitude": GRID_LON}
    members.to_dataset().assign_coords(coords).to_zarr(only)
    err = refused(["stats", str(only), "--out", str(tmp_path / "none.zarr"), "--no-progress"], capsys)
    assert err.endswith(f"error: {only} has no field of dims (time, [level], latitude, longitude): no statistics to "
                        "compute")  # fmt: skip
    assert not (tmp_path / "none.zarr").exists()


def test_stats_end_given_as_a_date_is_all_of_that_day(tmp_path):
    """As climatology's --end and WeatherBench2's periods: ``--end 2020-01-01`` took 2020-01-01T00 alone."""
    path = store(tmp_path / "store.zarr")
    stats = compute_stats(path, end="2020-01-01", out=tmp_path / "day.zarr")
    assert (stats.attrs["times"], stats.attrs["end"][:13]) == (4, "2020-01-01T18")
    stats = compute_stats(path, start="2020-01-01T06", end="2020-01-01T12", out=tmp_path / "hours.zarr")
    assert (stats.attrs["times"], stats.attrs["end"][:13]) == (2, "2020-01-01T12")
    # a year or a month names all of it: taken where it overlaps the store (--end 2020 was refused as 2020-01-01T00,
    # before the store's first time, when the store began later that year)
    group = zarr.open_group(path, mode="r+", zarr_format=3)
    set_time(group, group["time"][:] + (group["time"][1] - group["time"][0]))  # from 2020-01-01T06: after 2020 begins
    zarr.consolidate_metadata(path, zarr_format=3)
    whole = compute_stats(path, out=tmp_path / "whole.zarr")
    assert whole.attrs["start"][:13] == "2020-01-01T06"
    for start, end in (("2020", "2020"), ("2020-01", "2020-01"), ("2020-01-01", "2020")):
        stats = compute_stats(path, start=start, end=end, out=tmp_path / f"{start}-{end}.zarr")
        xr.testing.assert_identical(stats.drop_attrs(), whole.drop_attrs())
        assert stats.attrs["start"] == whole.attrs["start"] and stats.attrs["end"] == whole.attrs["end"]


def test_stats_of_a_store_of_one_time_says_so(tmp_path, capsys):
    """It said "--start 2020-01-01T00 must be before --end 2020-01-01T00", options the user never gave."""
    path = store(tmp_path / "store.zarr", n_times=1)
    before = digest(path)
    err = refused(["stats", str(path), "--out", str(tmp_path / "stats.zarr")], capsys)
    assert re.search(r"the store .*store\.zarr has one time \(2020-01-01T00\); statistics need two at least", err), err
    assert digest(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["store.zarr"]


def test_stats_step_on_an_irregular_store(tmp_path):
    """On irregular times (8 h then 7 h, as in the real ERA5 sample) a step that pairs some times is fine."""
    path = store(tmp_path / "store.zarr", n_times=3)
    group = zarr.open_group(path, mode="r+", zarr_format=3)
    encoded = group["time"][:]  # 0, 6, 12 hours in the store's time units
    set_time(group, encoded[0] + (encoded[1] - encoded[0]) // 6 * np.array([0, 8, 15]))
    stats = compute_stats(path, step_hours=8)
    assert stats.attrs["tendency_pairs"] == 1 and np.isfinite(stats["tendency_std"].values[:3]).all()


# --- climatology ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "corrupt", "message"),
    [
        ([], lambda g: g["2m_temperature"].__setitem__((3, 1, 1), np.inf), r"variable 2m_temperature has infinite "
         r"values at 2020-01-01T18; replace them"),
        ([], lambda g: set_time(g, g["time"][:][[0, 1, 2, 2, 4, 5]]), r"truth time 2020-01-01T12 appears more than "
         r"once .*; a climatology would count it twice"),
        (["--start", "2020-01-02", "--end", "2020-01-01"], None, r"the climatology period starts \(2020-01-02\) after "
         r"it ends \(2020-01-01\)"),
        (["--start", "2021"], None, r"no truth times between start='2021' and end=None; the truth covers "
         r"2020-01-01T00 \.\. 2020-01-02T06"),
        (["--end", "someday"], None, r"climatology end 'someday' is not a time; write it as YYYY-MM-DD"),
        # pandas' own errors, reported as a damaged input file; 'now' a traceback
        (["--end", "2020-01-01T05Z", "--start", "2020-01-01T12+02:00"], None, r"the climatology period starts "
         r"\(2020-01-01T12\+02:00\) after it ends \(2020-01-01T05Z\)"),
        (["--start", "now"], None, r"no truth times between start='now' and end=None"),
    ],
)  # fmt: skip
def test_climatology_refuses_repeated_times_infinities_and_bad_periods(tmp_path, capsys, args, corrupt, message):
    path = store(tmp_path / "store.zarr")
    if corrupt is not None:
        corrupt(zarr.open_group(path, mode="r+", zarr_format=3))
    out = tmp_path / "clim.zarr"  # replacing an earlier one safely: tests/commands/test_output_policy.py
    before = digest(path)
    err = refused(["climatology", str(path), "--out", str(out), *args], capsys)
    assert re.search(message, err), err
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.zarr"]  # no output, no temporary left


def test_climatology_of_in_memory_data_refuses_infinities_at_once():
    values = np.full((4, 5, 8), 280.0)
    values[2, 0, 0] = -np.inf
    truth = xr.Dataset(
        {"2m_temperature": (("time", "latitude", "longitude"), values)},
        coords={"time": TIMES, "latitude": GRID_LAT, "longitude": GRID_LON},
    )
    with pytest.raises(ValueError, match=r"variable 2m_temperature has infinite values at 2020-01-01T12"):
        compute_climatology(truth)


# --- generate-swe --------------------------------------------------------------------------------

SWE = ["generate-swe", "--nlat", "8", "--nlon", "16", "--trajectories", "2", "--steps", "4", "--no-progress"]


def test_generate_swe_refuses_an_unstable_solver_step(tmp_path, capsys):
    """One day per solver step on an 8x16 grid blows up within 4 stored days: refused, and the store this
    run made is removed (the same command fails at the same step; the fix is a store of another step)."""
    out = tmp_path / "swe.zarr"
    err = refused([*SWE, "--out", str(out), "--dt-hours", "24", "--solver-dt-seconds", "86400"], capsys)
    assert re.search(
        r"the shallow-water integration of trajectory 0 became unstable at stored step \d \(2000-01-0\dT00\): "
        r"layer depth -?\d+ m, outside the physical range 0 < h < 20000 m .*use a smaller --solver-dt-seconds "
        r"\(e\.g\. 21600\); nothing is left at .*swe\.zarr",
        err,
    ), err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trajectories", "0"], r"--trajectories must be >= 1, got 0"),
        (["--steps", "-1"], r"--steps must be >= 1, got -1"),
        (["--nlat", "3"], r"--nlat must be >= 4, got 3"),
        (["--nlon", "2"], r"--nlon must be >= 4, got 2"),
        (["--dt-hours", "0"], r"--dt-hours must be a positive number, got 0"),
        (["--dt-hours", "nan"], r"--dt-hours must be a positive number, got nan"),
        (["--solver-dt-seconds", "-5"], r"--solver-dt-seconds must be a positive number, got -5"),
        (["--solver-dt-seconds", "inf"], r"--solver-dt-seconds must be a positive number, got inf"),
    ],
)
def test_generate_swe_refuses_bad_numbers_before_writing(tmp_path, capsys, args, message):
    out = tmp_path / "swe.zarr"
    err = refused([*SWE, "--out", str(out), *args], capsys)
    assert re.search(message, err), err
    assert not out.exists()


def test_stats_hold_out_for_the_whole_run_and_clean_a_killed_runs_lock(tmp_path, monkeypatch):
    """A review: two `stats --out` on one output both computed everything (the claim was given back at
    once), and an in-place stats killed while writing left its lock beside the store for good."""
    import os
    import subprocess
    import sys

    import s2forecast.data.stats as stats_module
    from s2forecast.output import sibling

    path = store(tmp_path / "store.zarr")
    out = tmp_path / "stats.zarr"
    computing = stats_module._statistics
    refusals = []

    def while_computing(*args, **kwargs):  # another run (a process of its own) starts on the same --out meanwhile
        claim = f"from s2forecast.output import Output; Output({str(out)!r}, kind='stats', directory=True)"
        second = subprocess.run([sys.executable, "-c", claim], capture_output=True, text=True)
        refusals.append(second.stderr.strip().splitlines()[-1] if second.returncode else "claimed")
        return computing(*args, **kwargs)

    monkeypatch.setattr(stats_module, "_statistics", while_computing)
    compute_stats(path, out=out)
    assert len(refusals) == 1 and f"--out {out} is being written by another run" in refusals[0], refusals
    monkeypatch.undo()
    dead = next(pid for pid in range(4_000_000, 4_100_000) if not os.path.exists(f"/proc/{pid}"))
    lock = sibling(path, "lock")
    lock = lock.with_name(lock.name.replace(f"-lock-{os.getpid()}-", f"-lock-{dead}-"))
    lock.write_text("")  # a killed in-place run's
    compute_stats(path)
    assert not lock.exists() and (path / "stats").is_dir()


KILL_AT_COMMIT = """
import os, signal, sys
from s2forecast import output
commit, count = output.Output.commit, [0]
def killing(self):
    count[0] += 1
    if count[0] == int(os.environ["KILL_AT_COMMIT"]):  # SIGKILL: no cleanup runs, as a real kill
        os.kill(os.getpid(), signal.SIGKILL)
    return commit(self)
output.Output.commit = killing
from s2forecast.cli import main
main(sys.argv[1:])
"""


@pytest.mark.slow  # an evaluation in a subprocess
def test_evaluate_killed_between_its_renames_is_replaced_by_the_same_command(tmp_path):
    """A review: the plots, then the CSV, then the metrics file were renamed into place; killed before the
    last, the CSV (ours only when the metrics file records its hash) was foreign for good, even with
    --overwrite. Now the earlier CSV (of another result: other regions) is removed while the earlier
    metrics file vouches for it, and the new metrics file goes first: killed after it, the same command
    with --overwrite replaces what is left."""
    import os
    import subprocess
    import sys

    truth = truth_store(tmp_path / "truth.zarr", field(278.0, 5.0, SURFACE))
    forecast = forecast_file(tmp_path / "forecast.nc", field(278.0, 5.0, FORECAST, seed=1), "K")
    args = ["evaluate", "--forecast", str(forecast), "--truth", str(truth), "--out", str(tmp_path / "m.nc"),
            "--no-progress", "--no-plots"]  # fmt: skip
    cli([*args, "--regions", "global"])  # an earlier result
    killed = subprocess.run([sys.executable, "-c", KILL_AT_COMMIT, *args, "--overwrite"],
                            env={**os.environ, "KILL_AT_COMMIT": "2"}, capture_output=True, text=True)  # fmt: skip
    assert killed.returncode == -9, killed.stderr  # after the metrics file's rename, before the CSV's
    assert "europe" in xr.open_dataset(tmp_path / "m.nc")["region"].values and not (tmp_path / "m.csv").exists()
    cli([*args, "--overwrite"])
    written = xr.open_dataset(tmp_path / "m.nc")
    assert written.attrs["csv_sha256"] == hashlib.sha256((tmp_path / "m.csv").read_bytes()).hexdigest()


def test_evaluate_overwrite_with_a_csv_touched_meanwhile(tmp_path, monkeypatch):
    """A review: with the metrics file renamed first, a CSV whose mtime changed during the run was judged
    again against the new metrics file, refused as foreign after the metrics file was replaced."""
    import os

    import s2forecast.evaluation.evaluate as evaluate_module

    truth = truth_store(tmp_path / "truth.zarr", field(278.0, 5.0, SURFACE))
    forecast = forecast_file(tmp_path / "forecast.nc", field(278.0, 5.0, FORECAST, seed=1), "K")
    out, csv = tmp_path / "m.nc", tmp_path / "m.csv"
    evaluate(forecast, truth, out, plots=False, progress=False, regions=["global"])
    scoring = evaluate_module._score_and_write

    def touching(*args, **kwargs):
        os.utime(csv, (1, 1))  # a backup tool, a `touch`
        return scoring(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, "_score_and_write", touching)
    metrics = evaluate(forecast, truth, out, plots=False, progress=False, overwrite=True)
    assert "europe" in metrics["region"].values
    assert xr.open_dataset(out).attrs["csv_sha256"] == hashlib.sha256(csv.read_bytes()).hexdigest()
    assert "europe" in csv.read_text()


def test_stats_into_a_store_that_cannot_be_written_names_out(tmp_path, capsys, store_with_stats, monkeypatch):
    """The line ended "choose another stats group", an option that does not exist (a review found it).
    (A store that cannot be written is simulated: root writes into any directory.)"""
    import errno

    from s2forecast.data import stats as stats_module
    from s2forecast.output import unwritable

    def read_only(path, *args, option, **kwargs):
        raise unwritable(path, OSError(errno.EROFS, "Read-only file system"), option)

    path = tmp_path / "store.zarr"
    shutil.copytree(store_with_stats, path)
    monkeypatch.setattr(stats_module, "Output", read_only)
    err = refused(["stats", str(path)], capsys)
    assert err.endswith("(Read-only file system); write the statistics elsewhere with --out STATS.zarr"), err
