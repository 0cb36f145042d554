"""The ``ForecastFile`` itself: a zarr store's skeleton costs the same whatever the number of
initialization times, and both formats carry the same CF attributes of the coordinates."""

import numpy as np
import pytest
import xarray as xr
import zarr

from s2forecast.inference.forecast_file import MEMBER_DIM, ChannelLayout, ForecastFile

LAYOUT = ChannelLayout.from_channels(["2m_temperature", "temperature/500", "temperature/850"])
LEADS = np.arange(1, 4) * np.timedelta64(6, "h")
LAT, LON = np.linspace(90.0, -90.0, 4), np.arange(8) * 45.0
UNITS = {"2m_temperature": {"units": "K"}, "temperature": {"units": "K"}}


def inits(n: int) -> np.ndarray:
    return np.datetime64("2000-01-01T00", "ns") + np.arange(n) * np.timedelta64(6, "h")


def create(path, n_times: int, fmt: str = "zarr", members: int = 0, shards: int = 0) -> ForecastFile:
    return ForecastFile(path, fmt, LAYOUT, inits(n_times), LEADS, LAT, LON, UNITS, {"title": "t"}, members=members,
                        shards=shards)  # fmt: skip


@pytest.mark.parametrize(("members", "shards"), [(0, 0), (0, 2), (2, 0), (2, 2)])
def test_the_zarr_skeleton_is_one_dask_chunk_per_field_whatever_the_init_times(members, shards, tmp_path,
                                                                               monkeypatch):  # fmt: skip
    """Its dask graph (the memory and time to make the store) does not grow with the initialization
    times: one placeholder chunk per field, the zarr chunks in the encoding alone."""
    made = []  # (data variable chunks, tasks of the store's graph) of each store created
    to_zarr = xr.Dataset.to_zarr

    def recording(self, *args, **kwargs):
        delayed = to_zarr(self, *args, **kwargs)
        if kwargs.get("compute") is False:
            made.append(([self[name].data.npartitions for name in self.data_vars], len(delayed.__dask_graph__())))
        return delayed

    monkeypatch.setattr(xr.Dataset, "to_zarr", recording)
    for n_times in (2, 40):
        create(tmp_path / f"{n_times}.zarr", n_times, members=members, shards=shards)
    assert made[0][0] == [1, 1] and made[0] == made[1], made


@pytest.mark.parametrize(("members", "shards"), [(0, 0), (0, 2), (2, 0), (2, 2)])
def test_zarr_chunks_shards_and_region_writes(members, shards, tmp_path):
    """One zarr chunk per initialization time, lead (and member); shards of ``shards`` times; a
    write fills its region and leaves the rest NaN."""
    path = tmp_path / "f.zarr"
    forecast = create(path, 5, members=members, shards=shards)
    copies = (members,) if members else ()
    fields = np.arange(2 * max(members, 1) * 3 * 4 * 8, dtype=np.float32).reshape(2, *copies, 3, 4, 8)
    forecast.write(2, 1, fields)  # init times 2 and 3 (a whole shard of 2) at the second lead
    forecast.close()
    group = zarr.open_group(path, mode="r", zarr_format=3)
    one = (1,) if members else ()
    assert group["2m_temperature"].chunks == (1, 1, *one, 4, 8)
    assert group["temperature"].chunks == (1, 1, *one, 2, 4, 8)
    if shards:
        assert group["2m_temperature"].shards == (2, 1, *copies, 4, 8)
        assert group["temperature"].shards == (2, 1, *copies, 2, 4, 8)
    else:
        assert group["temperature"].shards is None
    written = xr.open_zarr(path)
    axis = 1 + bool(members)  # the channel axis of ``fields`` once the time axis is taken
    np.testing.assert_array_equal(written["2m_temperature"].values[2:4, 1], np.take(fields, 0, axis=axis))
    levels = np.take(fields, [1, 2], axis=axis)  # the two levels of temperature
    np.testing.assert_array_equal(written["temperature"].values[2:4, 1], levels)
    values = written["temperature"].values
    assert np.isnan(values).sum() == values.size - levels.size  # the rest: never written


# the CF attributes of every coordinate, as a reader sees them (the times' units are in their encoding)
CF = {
    "time": {"standard_name": "forecast_reference_time", "long_name": "initialization time"},
    "prediction_timedelta": {"standard_name": "forecast_period", "long_name": "lead time"},
    "valid_time": {"standard_name": "time", "long_name": "valid time"},
    "level": {"units": "hPa", "standard_name": "air_pressure", "positive": "down", "axis": "Z"},
    "latitude": {"units": "degrees_north", "standard_name": "latitude", "axis": "Y"},
    "longitude": {"units": "degrees_east", "standard_name": "longitude", "axis": "X"},
    MEMBER_DIM: {"long_name": "ensemble member", "standard_name": "realization"},
}


def test_netcdf_and_zarr_coordinates_carry_the_same_cf_attributes(tmp_path):
    for fmt, name in (("netcdf", "f.nc"), ("zarr", "f.zarr")):
        forecast = create(tmp_path / name, 3, fmt=fmt, members=2)
        forecast.write(0, 0, np.ones((3, 2, 3, 4, 8), np.float32))
        forecast.close()
    opened = {"netcdf": xr.open_dataset(tmp_path / "f.nc"), "zarr": xr.open_zarr(tmp_path / "f.zarr")}
    for fmt, ds in opened.items():
        for name, expected in CF.items():
            assert {k: v for k, v in ds[name].attrs.items() if k in expected} == expected, (fmt, name)
        for name in ("time", "valid_time"):  # a CF time: units "... since ..." and a calendar
            assert " since " in ds[name].encoding["units"] and ds[name].encoding["calendar"], (fmt, name)
        assert ds["prediction_timedelta"].dtype.kind == "m" and ds["time"].dtype.kind == "M", fmt
    np.testing.assert_array_equal(opened["netcdf"]["valid_time"].values, opened["zarr"]["valid_time"].values)
    # the same dtypes too (assert_identical does not compare them): int32 level and realization in both
    # (times decode at the resolution xarray picks for each format)
    dtypes = {fmt: {name: str(ds[name].dtype) for name in ("level", MEMBER_DIM)} for fmt, ds in opened.items()}
    assert dtypes["netcdf"] == dtypes["zarr"] == {"level": "int32", MEMBER_DIM: "int32"}
    # coordinates have no missing values (CF 2.5.1): no _FillValue in either (zarr's latitude and longitude had NaN)
    for fmt, ds in opened.items():
        for name in ds.coords:
            assert "_FillValue" not in ds[name].encoding and "_FillValue" not in ds[name].attrs, (fmt, name)


@pytest.mark.parametrize(
    ("step", "unit"),
    [(np.timedelta64(6, "h"), "hours"), (np.timedelta64(10, "m"), "minutes"), (np.timedelta64(90, "s"), "seconds")],
)
def test_netcdf_times_read_back_exactly(tmp_path, step, unit):
    """Times were float64 hours: 00:20 read back as 00:19:59.999999872, which no truth time matched
    (evaluate: "none of the forecast's valid times is in the truth"). They are whole numbers of the
    coarsest unit that holds them."""
    init = np.datetime64("2000-01-01T00", "ns") + np.arange(1, 4) * step.astype("timedelta64[ns]")
    leads = np.arange(1, 3) * step.astype("timedelta64[ns]")
    forecast = ForecastFile(tmp_path / "f.nc", "netcdf", LAYOUT, init, leads, LAT, LON, UNITS, {"title": "t"})
    forecast.close()
    with xr.open_dataset(tmp_path / "f.nc") as back:
        assert np.array_equal(back["time"].values, init)
        assert np.array_equal(back["prediction_timedelta"].values, leads)
        assert np.array_equal(back["valid_time"].values, init[:, None] + leads[None, :])
    with xr.open_dataset(tmp_path / "f.nc", decode_times=False, decode_timedelta=False) as raw:
        assert raw["time"].attrs["units"] == f"{unit} since 1970-01-01 00:00:00"
        assert raw["prediction_timedelta"].attrs["units"] == unit and raw["time"].dtype == np.int64


@pytest.mark.parametrize(("fmt", "name"), [("netcdf", "f.nc"), ("zarr", "f.zarr")])
def test_a_forecast_file_is_marked_complete_only_when_closed(tmp_path, fmt, name):
    """The temporary file of a killed run (a rank that died mid-way leaves a hole: init times never
    written) was scored, 'n/a' at every lead, as the whole forecast; readers refuse it now."""
    from s2forecast.evaluation.inputs import open_forecast

    forecast = create(tmp_path / name, 3, fmt=fmt)
    forecast.write(2, 0, np.ones((1, 3, 4, 8), np.float32))  # init time 2 only, as the killed run left it
    if fmt == "netcdf":
        forecast.ds.sync()  # what the killed process had flushed
    with pytest.raises(ValueError, match=rf"^the forecast {tmp_path / name} is incomplete \(s2forecast_complete="
                       r"'false'\): the rollout that wrote it did not finish"):  # fmt: skip
        open_forecast(tmp_path / name)
    forecast.close()
    assert open_forecast(tmp_path / name).attrs["s2forecast_complete"] == "true"


def test_channels_in_another_order_are_refused():
    """write slices the channels by variable: temperature/500, 2m_temperature, temperature/850 wrote 2 m
    temperature's values under temperature/850 and the reverse, without a word (a review)."""
    with pytest.raises(ValueError, match=r"are not grouped by variable in one level order: give \['temperature/500', "
                                         r"'temperature/850', '2m_temperature'\]"):  # fmt: skip
        ChannelLayout.from_channels(["temperature/500", "2m_temperature", "temperature/850"])
    with pytest.raises(ValueError, match="not grouped by variable"):  # levels in another order for another variable
        ChannelLayout.from_channels(["t/500", "t/850", "z/850", "z/500"])
    assert LAYOUT.variables == ("2m_temperature", "temperature") and LAYOUT.levels == (500, 850)
