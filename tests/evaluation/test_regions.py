"""Regional scores (issue 16): WeatherBench2's regions and user boxes, checked against an
independent numpy computation of their definition on real ERA5 (tests/data)."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.commands.arguments import attach_negative_lists
from s2forecast.data.convert_era5 import convert_era5
from s2forecast.evaluation.evaluate import evaluate
from s2forecast.evaluation.regions import STANDARD_REGIONS, check_region_names, parse_box, region_masks

ERA5_SLICE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"
REGIONS = ["global", "tropics", "extra-tropics", "europe", "north-pacific", "30,70,350,40", "-60,-10,100,200",
           "alps=44,48,5,16"]  # fmt: skip
LABELS = [*REGIONS[:-1], "alps"]  # a named box is labelled by its name (issue 28)


def wb2_area_weights(lat_deg: np.ndarray) -> np.ndarray:
    """Cell areas between midpoints of adjacent latitudes (poles: half cells), any latitude order."""
    order = np.argsort(lat_deg)
    lat = lat_deg[order]
    bounds = np.concatenate([[-90.0], (lat[1:] + lat[:-1]) / 2, [90.0]])
    area = np.sin(np.radians(bounds[1:])) - np.sin(np.radians(bounds[:-1]))
    weights = np.empty_like(area)
    weights[order] = area
    return weights


def box_mask(lat: np.ndarray, lon: np.ndarray, lat0, lat1, lon0, lon1) -> np.ndarray:
    """Points with lat0 <= lat <= lat1 and longitude on the eastward arc lon0 -> lon1."""
    lon = lon % 360
    lon0, lon1 = lon0 % 360, lon1 % 360
    in_lon = (lon >= lon0) & (lon <= lon1) if lon0 <= lon1 else (lon >= lon0) | (lon <= lon1)
    return ((lat[:, None] >= lat0) & (lat[:, None] <= lat1)) & in_lon[None, :]


EXPECTED_MASKS = {  # the definitions, written out independently of evaluation.regions
    "global": lambda lat, lon: np.ones((lat.size, lon.size), bool),
    "tropics": lambda lat, lon: (np.abs(lat) <= 20)[:, None] & np.ones(lon.size, bool),
    "extra-tropics": lambda lat, lon: (np.abs(lat) >= 20)[:, None] & np.ones(lon.size, bool),
    "europe": lambda lat, lon: box_mask(lat, lon, 35, 75, -12.5, 42.5),
    "north-pacific": lambda lat, lon: box_mask(lat, lon, 25, 60, 145, 230),
    "30,70,350,40": lambda lat, lon: box_mask(lat, lon, 30, 70, 350, 40),
    "-60,-10,100,200": lambda lat, lon: box_mask(lat, lon, -60, -10, 100, 200),
    "alps": lambda lat, lon: box_mask(lat, lon, 44, 48, 5, 16),
}


@pytest.fixture(scope="module")
def era5(tmp_path_factory):
    """A store converted from the real slice, and a forecast from its first time: the truth at
    the first time plus noise, one lead to each later time."""
    root = tmp_path_factory.mktemp("regions")
    store = convert_era5([ERA5_SLICE], root / "era5.zarr", progress=False)
    truth = xr.open_zarr(store)["2m_temperature"].load()
    t0 = truth["time"].values[0]
    leads = truth["time"].values[1:] - t0
    noise = np.random.default_rng(0).normal(0, 1.5, (1, leads.size, *truth.shape[1:]))
    values = truth.values[0][None, None] + noise
    forecast = xr.Dataset(
        {"2m_temperature": (("time", "prediction_timedelta", "latitude", "longitude"), values.astype(np.float32),
                            {"units": "K"})},
        coords={"time": [t0], "prediction_timedelta": leads, "latitude": truth["latitude"].values,
                "longitude": truth["longitude"].values},
    )  # fmt: skip
    forecast.to_netcdf(root / "forecast.nc")
    return root, store, forecast, truth


def test_regional_rmse_and_bias_match_numpy_on_real_era5(era5, tmp_path):
    root, store, forecast, truth = era5
    metrics = evaluate(root / "forecast.nc", store, tmp_path / "m.nc", plots=False, progress=False, regions=REGIONS)
    assert metrics["region"].values.tolist() == LABELS and metrics.attrs["named_regions"] == "alps=44,48,5,16"
    lat, lon = truth["latitude"].values, truth["longitude"].values
    weights = wb2_area_weights(lat)[:, None] * np.ones(lon.size)
    for k in range(forecast.sizes["prediction_timedelta"]):
        error = forecast["2m_temperature"].values[0, k].astype(np.float64) - truth.values[k + 1].astype(np.float64)
        for region in LABELS:
            mask = EXPECTED_MASKS[region](lat, lon)
            assert mask.any() and (region == "global" or not mask.all())
            w = weights * mask
            rmse = np.sqrt((w * error**2).sum() / w.sum())
            bias = (w * error).sum() / w.sum()
            got = metrics["2m_temperature"].sel(source="forecast", region=region).isel(lead_time=k)
            np.testing.assert_allclose(float(got.sel(metric="rmse")), rmse, rtol=1e-6)
            np.testing.assert_allclose(float(got.sel(metric="bias")), bias, rtol=1e-6, atol=1e-9)


def test_predefined_regions_are_wb2s():
    assert list(STANDARD_REGIONS) == ["global", "tropics", "extra-tropics", "northern-hemisphere",
                                      "southern-hemisphere", "europe", "north-america", "north-atlantic",
                                      "north-pacific", "east-asia", "ausnz", "arctic", "antarctic"]  # fmt: skip
    assert STANDARD_REGIONS["europe"] == ([(35.0, 75.0)], [(347.5, 360.0), (0.0, 42.5)])
    assert STANDARD_REGIONS["north-america"] == ([(25.0, 60.0)], [(240.0, 285.0)])
    assert parse_box("30,70,350,40") == parse_box("box1=30,70,350,40") == (30.0, 70.0, 350.0, 40.0)
    assert parse_box("Ärea=30,70,350,40") == parse_box("Φ=30,70,350,40")  # letters, not only ASCII's (were refused)
    with pytest.raises(ValueError, match=r"region\(s\) \['alps'\] given twice"):
        check_region_names(["alps=44,48,5,16", "alps=40,50,0,20"])


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        ("-50,50,170,-170", [170.0, 180.0, 190.0]),  # across the dateline (lon0 > lon1 only mod 360)
        ("-50,50,-170,170", [x for x in np.arange(0.0, 360.0, 10.0) if x != 180.0]),  # all but it
        ("-50,50,340,20", [0.0, 10.0, 20.0, 340.0, 350.0]),  # through 0 E
        ("-50,50,-20,20", [0.0, 10.0, 20.0, 340.0, 350.0]),  # the same box in -180..180
        ("-50,50,0,360", list(np.arange(0.0, 360.0, 10.0))),  # every longitude
    ],
)
def test_boxes_across_0e_and_the_dateline_take_the_longitudes_between(box, expected):
    """Longitudes are compared mod 360, in any convention of the grid's (0..360 or -180..180)."""
    from s2forecast.evaluation.regions import region_masks

    lat = np.array([60.0, 0.0, -60.0])
    for lon in (np.arange(0.0, 360.0, 10.0), np.arange(-180.0, 180.0, 10.0)):
        mask = region_masks([box], lat, lon).values[0]
        taken = sorted(float(x) % 360.0 for x in lon[mask[1] > 0])
        assert taken == sorted(expected), (box, lon[0])
        assert not mask[0].any() and not mask[2].any()  # 60 N and 60 S are outside -50..50


@pytest.mark.parametrize(
    ("region", "message"),
    [
        ("middle-earth", "region 'middle-earth' is neither a standard region (global, tropics,"),
        ("10,20,30", "region '10,20,30' is neither a standard region"),
        ("a,b,c,d", "nor a box 'lat0,lat1,lon0,lon1' in degrees (e.g. '35,75,-12.5,42.5')"),
        ("70,30,0,10", "region box '70,30,0,10': lat0 70 > lat1 30; give the southern latitude first"),
        ("11,13,1,3", "region '11,13,1,3' holds no grid point of this grid; widen it"),
        ("global_land", "region 'global_land' needs a land-sea mask: the truth has none of ('land_sea_mask', 'lsm')"),
        ("europe=1,2,3,4", "region 'europe=1,2,3,4': 'europe' is a standard region; give the box another name"),
        ("1x=1,2,3,4", "region '1x=1,2,3,4': name '1x' must start with a letter"),
        ("alps=44,48,5", "region 'alps=44,48,5' is neither a standard region"),
        ("alps=", "region 'alps=' is neither a standard region"),
        ("0,10,1e400,10", "region box '0,10,1e400,10': longitudes must lie in [-360, 720] degrees"),
        ("0,10,1000,1010", "region box '0,10,1000,1010': longitudes must lie in [-360, 720] degrees"),
        ("alps=11,13,1,3", "region 'alps=11,13,1,3' holds no grid point of this grid; widen it"),
        ("global=1,2,3,4", "'global' is a standard region"),
    ],
)
def test_bad_regions_are_one_line_and_write_nothing(era5, tmp_path, capsys, region, message):
    root, store, *_ = era5
    out = tmp_path / "m.nc"
    with pytest.raises(SystemExit):
        cli(["evaluate", "--forecast", str(root / "forecast.nc"), "--truth", str(store), "--out", str(out),
             "--regions", "global", region, "--no-plots", "--no-progress"])  # fmt: skip
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert len(lines) == 1 and message in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_a_box_of_southern_latitudes_follows_regions_as_any_other(era5, tmp_path, capsys):
    """argparse took ``-45,-12.5,120,175`` for an option: 'unrecognized arguments', or 'expected at
    least one argument' when it came first; ``--regions=BOX other`` left ``other`` unrecognized."""
    root, store, *_ = era5
    cli(["evaluate", "--forecast", str(root / "forecast.nc"), "--truth", str(store), "--out", str(tmp_path / "m.nc"),
         "--regions", "-45,-12.5,120,175", "global", "--regions=-90,-60,0,360", "tropics", "--no-plots",
         "--no-progress"])  # fmt: skip
    with xr.open_dataset(tmp_path / "m.nc") as metrics:
        assert metrics["region"].values.tolist() == ["-45,-12.5,120,175", "global", "-90,-60,0,360", "tropics"]


def test_negative_lists_are_attached_to_their_option_only():
    argv = ["evaluate", "--regions", "-1,2,3,4", "x", "--out", "m.nc", "-5,6,7,8"]
    assert attach_negative_lists(argv, "--regions") == [
        "evaluate", "--regions=-1,2,3,4", "--regions", "x", "--out", "m.nc", "-5,6,7,8"
    ]  # fmt: skip
    assert attach_negative_lists(["--regions=-1,2,3,4", "y"], "--regions") == ["--regions=-1,2,3,4", "--regions", "y"]
    assert attach_negative_lists(["--regions", "y", "-1,2,3,4", "-v"], "--regions") == [
        "--regions", "y", "--regions=-1,2,3,4", "-v"
    ]  # fmt: skip


def test_the_same_box_with_spaces_is_given_twice():
    with pytest.raises(ValueError, match=r"region\(s\) \['0,10,0,10'\] given twice"):
        check_region_names(["0,10,0,10", "0, 10, 0, 10"])


@pytest.mark.parametrize(
    ("box", "warned"),
    [("35,75,42.5,-12.5", "for the 55 deg from -12.5 to 42.5 give '35,75,-12.5,42.5'"), ("30,70,350,40", None),
     ("-60,-10,100,200", None), ("0,10,0,360", None), ("0,10,-180,180", None)],
)  # fmt: skip
def test_a_box_wider_than_half_the_globe_is_warned_of(box, warned, recwarn):
    check_region_names([box])
    messages = [str(w.message) for w in recwarn]
    _, _, lon0, lon1 = box.split(",")
    expected = f"region box {box!r} runs east from {lon0} to {lon1} E: 305 deg of longitude; {warned}"
    assert messages == ([] if warned is None else [expected])


def test_a_land_region_without_land_says_so():
    lat, lon = np.linspace(-90, 90, 19), np.arange(0.0, 360.0, 10.0)
    ocean = xr.DataArray(np.zeros((19, 36)), dims=("latitude", "longitude"), coords={"latitude": lat, "longitude": lon})
    with pytest.raises(ValueError, match=r"region 'tropics_land' has no land: the truth's land-sea mask is 0 over"):
        region_masks(["tropics_land"], lat, lon, ocean)
