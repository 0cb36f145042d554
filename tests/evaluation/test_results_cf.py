"""The results file of ``evaluate`` passes the CF checker (cfchecker, CF-1.8) on real ERA5.

cfchecker needs the UDUNITS-2 C library (through cfunits) and the CF tables, which it downloads
unless given as files. The tests run offline: they give it tables written here, holding the
standard names the results file uses (entries as in the CF standard-name table, version 93) and
empty area-type and region lists (the file uses neither). A new standard name in the results
file is then an error here until its table entry is added below.
"""

from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.evaluation.evaluate import evaluate
from s2forecast.evaluation.report import open_results

SAMPLE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"
LEADS = pd.to_timedelta([8, 15], unit="h")  # the sample's times: 2026-03-25T21, 03-26T05, 03-26T12
STANDARD_NAMES = {"forecast_period": "s", "air_pressure": "Pa"}  # canonical units, CF table v93


def cf_checker():
    try:
        from cfchecker.cfchecks import CFChecker
    except (ImportError, OSError) as error:  # cfunits raises OSError without the UDUNITS-2 library
        pytest.skip(f"cfchecker unusable ({error}): pip install cfchecker, and UDUNITS-2 (apt install libudunits2-0)")
    return CFChecker


def write_tables(folder: Path) -> dict[str, str]:
    entries = "".join(
        f'<entry id="{name}"><canonical_units>{units}</canonical_units><description/></entry>'
        for name, units in STANDARD_NAMES.items()
    )
    tables = {
        "cfStandardNamesXML": f"<standard_name_table><version_number>93</version_number>"
        f"<last_modified>2026-03-17T10:53:20Z</last_modified>{entries}</standard_name_table>",
        "cfAreaTypesXML": "<area_type_table><version_number>13</version_number><date>20 March 2025</date>"
        "</area_type_table>",
        "cfRegionNamesXML": "<standardized_region_list><version_number>5</version_number><date>12 November 2024</date>"
        "</standardized_region_list>",
    }
    paths = {}
    for option, text in tables.items():
        path = folder / f"{option}.xml"
        path.write_text(f'<?xml version="1.0"?>\n{text}\n')
        paths[option] = str(path)
    return paths


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """A store of real 2 m temperature and MSL pressure, and a two-level temperature made from the first."""
    with xr.open_dataset(SAMPLE) as ds:
        data = ds[["t2m", "msl"]].load()
    data = data.rename(valid_time="time", t2m="2m_temperature", msl="mean_sea_level_pressure")
    data = data.drop_vars(["number", "expver"])
    for name, units in (("2m_temperature", "K"), ("mean_sea_level_pressure", "Pa")):
        data[name] = data[name].astype(np.float64).assign_attrs(units=units)
    levels = pd.Index([500, 850], name="level")
    data["temperature"] = xr.concat([data["2m_temperature"] - 40.0, data["2m_temperature"] - 15.0], dim=levels)
    data["temperature"] = data["temperature"].transpose("time", "level", ...).assign_attrs(units="K")
    data["land_sea_mask"] = (data["2m_temperature"].isel(time=0, drop=True) > 280.0).astype(np.float64)
    data["written"] = ("time", np.ones(data.sizes["time"], dtype=bool))
    data.attrs = {"grid_kind": "equiangular", "s2forecast_complete": "true"}
    path = tmp_path_factory.mktemp("truth") / "era5.zarr"
    data.to_zarr(path, zarr_format=3, consolidated=True)
    return path, data


def forecast_of(data, members: int | None) -> xr.Dataset:
    """The init-time fields at both leads; an ensemble shifts them in longitude per member."""
    variables = {}
    for name in ("2m_temperature", "mean_sea_level_pressure", "temperature"):
        field = data[name].isel(time=0)
        dims = ("time", "prediction_timedelta") + field.dims
        values = np.broadcast_to(field.values, (1, LEADS.size, *field.shape))
        if members is not None:
            spread = np.stack([np.roll(field.values, k, axis=-1) for k in range(members)])
            values = np.broadcast_to(spread, (1, LEADS.size, *spread.shape))
            dims = ("time", "prediction_timedelta", "number") + field.dims
        variables[name] = (dims, values.copy(), {"units": data[name].attrs["units"]})
    coords = {"time": data.time.values[:1], "prediction_timedelta": LEADS, "level": data.level.values,
              "latitude": data.latitude.values, "longitude": data.longitude.values}  # fmt: skip
    if members is not None:
        coords["number"] = np.arange(members)
    return xr.Dataset(variables, coords=coords)


@pytest.mark.parametrize("members", [None, 3], ids=["deterministic", "ensemble"])
def test_results_file_passes_cfchecker(tmp_path, truth, members):
    checker_class = cf_checker()
    path, data = truth
    out = tmp_path / "metrics.nc"
    regions = ["global", "europe", "global_land", "30,60,-20,40"]
    evaluate(forecast_of(data, members), path, out, plots=False, progress=False, regions=regions)
    checker = checker_class(version="1.8", silent=True, **write_tables(tmp_path))
    results = checker.checker(str(out))
    messages = {"global": results["global"], **results["variables"]}
    for category in ("FATAL", "ERROR"):
        assert not {name: found[category] for name, found in messages.items() if found[category]}, category
    warnings = {name: found["WARN"] for name, found in messages.items() if found["WARN"]}
    # CF 2.3: names should begin with a letter; WeatherBench2's field names (2m_temperature) do not
    # and are kept, since readers of WB2 results look them up by name
    starts_with_digit = {name for name in messages if name[0].isdigit()}
    assert set(warnings) == starts_with_digit and "2m_temperature" in warnings
    assert ("2m_temperature_rank_histogram" in warnings) == (members is not None)
    assert all(message.startswith("(2.3): Variable names should begin with a letter") for m in warnings.values()
               for message in m)  # fmt: skip
    infos = {name for name, found in messages.items() if found["INFO"]}
    # CF 3.1 (information): a score variable holds metrics of different units (rmse K, acc 1) along
    # its metric dim, so it has no single units attribute; metric_units gives them per metric
    assert infos == {"2m_temperature", "mean_sea_level_pressure", "temperature"}
    assert all("No units attribute set" in message for name in infos for message in messages[name]["INFO"])
    with xr.open_dataset(out) as written:
        for name in infos:
            metric_units = dict(part.split(": ") for part in written[name].attrs["metric_units"].split("; "))
            assert metric_units["rmse"] == data[name].attrs["units"] and metric_units["acc"] == "1"
        assert written["level"].attrs["standard_name"] == "air_pressure"
        # plain xarray selects by the labels (issue 28): they are the dims' indexes
        selected = written["temperature"].sel(metric="rmse", source="forecast", region="30,60,-20,40", level=850)
        expected = open_results(out)["temperature"].sel(metric="rmse", source="forecast", region="30,60,-20,40")
        np.testing.assert_array_equal(selected.values, expected.sel(level=850).values)
        assert list(written["metric"].values[:2]) == ["rmse", "acc"]
    with netCDF4.Dataset(out) as nc:  # coordinates hold no missing values, so declare no fill value (CF 2.5.1)
        auxiliary = {name for var in nc.variables.values() for name in getattr(var, "coordinates", "").split()}
        coordinates = (set(nc.dimensions) | auxiliary) & set(nc.variables)
        assert not [name for name in coordinates if "_FillValue" in nc.variables[name].ncattrs()]


def test_an_unknown_standard_name_is_an_error(tmp_path, truth):
    """The check can fail: a standard name that is not in the table is reported as an error."""
    checker_class = cf_checker()
    path, data = truth
    out = tmp_path / "metrics.nc"
    evaluate(forecast_of(data, None), path, out, plots=False, progress=False, regions=["global"])
    tables = write_tables(tmp_path)
    Path(tables["cfStandardNamesXML"]).write_text(
        Path(tables["cfStandardNamesXML"]).read_text().replace("forecast_period", "forecast_perod")
    )
    results = checker_class(version="1.8", silent=True, **tables).checker(str(out))
    assert any("forecast_period" in message for message in results["variables"]["lead_time"]["ERROR"])


def test_leads_of_minutes_come_back_exactly(tmp_path):
    """Leads are written as float64 hours: open_results read 20 minutes 2 ns short (pandas), so selecting
    the lead by value failed; xr.open_dataset alone reads them exactly."""
    from s2forecast.evaluation.report import write_results

    leads = np.array([10, 20, 30, 70], "timedelta64[m]").astype("timedelta64[ns]")
    results = xr.Dataset(
        {"z": (("metric", "lead_time"), np.ones((1, 4)))},
        coords={"metric": ["rmse"], "lead_time": leads, "lead_hours": ("lead_time", leads / np.timedelta64(1, "h"))},
    )
    write_results(results, tmp_path / "leads.nc")
    opened = open_results(tmp_path / "leads.nc")
    np.testing.assert_array_equal(opened["lead_time"].values, leads)
    assert float(opened["z"].sel(metric="rmse", lead_time=np.timedelta64(20, "m"))) == 1.0


def test_stores_and_climatologies_carry_cf_coordinates(swe_store, tmp_path):
    """generate-swe's store had no units on its latitudes, and stores and climatologies declared a
    NaN fill value on them (the writers of forecasts and results already did not; a review found it)."""
    import zarr

    from s2forecast.evaluation.climatology import write_climatology

    write_climatology(swe_store, tmp_path / "clim.zarr")
    axes = {"latitude": ("degrees_north", "Y"), "longitude": ("degrees_east", "X")}
    for path in (swe_store, tmp_path / "clim.zarr"):
        group = zarr.open_group(path, mode="r")
        for name, (units, axis) in axes.items():
            attrs = dict(group[name].attrs)
            assert (attrs.get("units"), attrs.get("axis"), attrs.get("standard_name")) == (units, axis, name), path
            assert "_FillValue" not in attrs, (path, name)
