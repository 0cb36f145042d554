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

from s2forecast.cli import main as cli
from s2forecast.datamodules.plausibility import check_plausible, field_problem

DATA = Path(__file__).parent / "data"
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
            r"variable temperature at 850 hPa at time 2020-01-01T00:00: median -\d+(\.\d+)? is outside the plausible "
            r"range 150\.\.350 K for temperature; the values look like degC: convert them to K or fix the units",
            id="degC-as-K",
        ),
        pytest.param(
            "msl",
            field(1010.0, 10.0, SURFACE),
            "Pa",
            None,
            r"variable mean_sea_level_pressure at time 2020-01-01T00:00: median 10\d\d(\.\d+)? is outside the "
            r"plausible range 90000\.\.110000 Pa .*; the values look like hPa: convert them to Pa",
            id="hPa-as-Pa",
        ),
        pytest.param(
            "z",
            (HEIGHTS + 20.0 * np.random.default_rng(1).normal(size=PRESSURE)).astype(np.float32),
            "m**2 s**-2",
            (500, 1000),
            r"variable geopotential at 500 hPa at time 2020-01-01T00:00: median 5\d\d\d(\.\d+)? is outside the "
            r"plausible range .* m\*\*2 s\*\*-2 for geopotential; the values look like geopotential height in m",
            id="height-as-geopotential",
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
            r"forecast variable 2m_temperature at init time 2020-01-01T00:00 at lead 6 h: median \d+(\.\d+)? is "
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
            r"truth store .*truth\.zarr: variable 2m_temperature at time 2020-01-01T00:00: median \d+(\.\d+)? is "
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
    from s2forecast.evaluation.evaluate import evaluate

    truth = truth_store(tmp_path / "truth.zarr", field(5.0, 5.0, SURFACE), units="degC")
    forecast = forecast_file(tmp_path / "forecast.nc", field(5.0, 5.0, FORECAST, seed=1), "degC")
    metrics = evaluate(forecast, truth, tmp_path / "metrics.nc", plots=False, progress=False)
    assert np.isfinite(metrics["2m_temperature"].sel(metric="rmse", model="forecast").values).all()
