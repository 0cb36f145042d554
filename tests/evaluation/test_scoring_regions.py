"""Regions and ensemble scores against independent numpy computations of their definitions on real ERA5.

The 1 deg sample in tests/data (46 x 90, both poles); ensembles are made from it by shifting the
real 2 m temperature field in longitude (each member a real, plausible field).
"""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from s2forecast.evaluation.metrics import METRICS, check_members, get_metric, member_dim, metric_units
from s2forecast.evaluation.regions import STANDARD_REGIONS, parse_box, region_masks, region_weights

SAMPLE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"


@pytest.fixture(scope="module")
def era5():
    with xr.open_dataset(SAMPLE) as ds:
        return ds.load()


def wb2_weights(lat):
    """WB2 cell-area latitude weights, written out independently of the package."""
    order = np.argsort(lat)
    ascending = np.deg2rad(lat[order])
    bounds = np.concatenate([[-np.pi / 2], (ascending[1:] + ascending[:-1]) / 2, [np.pi / 2]])
    cell = np.sin(bounds[1:]) - np.sin(bounds[:-1])
    weights = np.empty_like(cell)
    weights[order] = cell
    return weights


def numpy_box_mean(x, lat, lon, lat_range, lon_ranges):
    """Area-weighted mean over the grid points of a box (bounds inclusive), selecting them explicitly."""
    rows = (lat >= lat_range[0]) & (lat <= lat_range[1])
    cols = np.zeros(lon.size, dtype=bool)
    for low, high in lon_ranges:
        cols |= (lon >= low) & (lon <= high)
    w = np.broadcast_to(wb2_weights(lat)[:, None], x.shape[-2:])[np.ix_(rows, cols)]
    return np.sum(w * x[..., rows, :][..., cols], axis=(-2, -1)) / w.sum()


def members(field, m, axis=0):
    """(m, lat, lon): the real field shifted by 0, 1, .., m-1 grid columns in longitude, plus an offset."""
    return np.stack([np.roll(field, k, axis=-1) + 0.3 * k for k in range(m)], axis=axis)


@pytest.mark.parametrize(
    ("region", "lat_range", "lon_ranges"),
    [
        ("europe", (35, 75), [(347.5, 360), (0, 42.5)]),  # WB2's box wraps through 0 E
        ("tropics", (-20, 20), [(0, 360)]),
        ("30,60,-20,40", (30, 60), [(340, 360), (0, 40)]),  # a user box with a wrapped longitude range
        ("-45,-12.5,120,175", (-45, -12.5), [(120, 175)]),
    ],
)
def test_regional_rmse_matches_numpy(era5, region, lat_range, lon_ranges):
    lat, lon = era5.latitude.values, era5.longitude.values
    f, o = era5.t2m.values[0].astype(np.float64), era5.t2m.values[2].astype(np.float64)
    weights = region_weights([region], lat, lon)
    stats = METRICS["rmse"].statistics(f[None], o[None], weights)
    got = METRICS["rmse"].finalize(stats)[0, 0]
    expected = np.sqrt(numpy_box_mean((f - o) ** 2, lat, lon, lat_range, lon_ranges))
    assert got == pytest.approx(expected, rel=1e-12)
    assert got > 0.1  # real fields 15 h apart differ


def test_extra_tropics_is_the_union_of_the_hemispheres(era5):
    lat, lon = era5.latitude.values, era5.longitude.values
    masks = region_masks(["extra-tropics", "northern-hemisphere", "southern-hemisphere"], lat, lon).values
    np.testing.assert_array_equal(masks[0], np.maximum(masks[1], masks[2]))
    np.testing.assert_array_equal(masks[0][:, 0] > 0, np.abs(lat) >= 20)
    assert len(STANDARD_REGIONS) == 13


def test_land_region_weights_by_the_land_fraction(era5):
    lat, lon = era5.latitude.values, era5.longitude.values
    land = xr.DataArray(
        (era5.t2m.values[0] > 285).astype(float),
        dims=("latitude", "longitude"),
        coords={"latitude": lat, "longitude": lon},
    )
    f, o = era5.t2m.values[0].astype(np.float64), era5.t2m.values[1].astype(np.float64)
    weights = region_weights(["tropics_land"], lat, lon, land)
    got = METRICS["bias"].statistics(f[None], o[None], weights)["bias"][0, 0]
    w = wb2_weights(lat)[:, None] * land.values * (np.abs(lat) <= 20)[:, None]
    assert got == pytest.approx(np.sum(w * (f - o)) / w.sum(), rel=1e-12)
    with pytest.raises(ValueError, match="'global_land' needs a land-sea mask"):
        region_masks(["global_land"], lat, lon)


def test_land_mask_matched_by_longitude_in_any_convention():
    """A grid in -180..180 and a mask in 0..360 (or the reverse): the land of 0..90 E, not every
    negative longitude snapped to 0 E by a nearest lookup; a mask on another grid is refused."""
    lat, east = np.array([-45.0, 0.0, 45.0]), np.arange(8) * 45.0
    west = np.sort((east + 180.0) % 360.0 - 180.0)
    for grid_lon, mask_lon in ((west, east), (east, west)):
        mask = xr.DataArray(
            np.tile(((mask_lon % 360) <= 90).astype(float), (3, 1))[::-1],
            dims=("latitude", "longitude"),
            coords={"latitude": lat[::-1], "longitude": mask_lon},
        )
        got = region_masks(["global_land"], lat, grid_lon, mask).values[0]
        np.testing.assert_array_equal(got, np.tile(((grid_lon % 360) <= 90).astype(float), (3, 1)))
    other = mask.assign_coords(longitude=mask_lon + 10.0)
    with pytest.raises(ValueError, match="the land-sea mask and the grid have different 'longitude' values"):
        region_masks(["global_land"], lat, west, other)


@pytest.mark.parametrize("m", [2, 5])
def test_fair_crps_matches_the_pairwise_formula(era5, m):
    lat, lon = era5.latitude.values, era5.longitude.values
    ens = members(era5.t2m.values[0].astype(np.float64), m)
    o = era5.t2m.values[2].astype(np.float64)
    weights = region_weights(["global", "europe"], lat, lon)
    got = METRICS["crps"].statistics(ens[None], o[None], weights, member_axis=1)["crps"][:, 0]
    pairs = sum(np.abs(ens[i] - ens[j]) for i in range(m) for j in range(m))
    pointwise = np.mean(np.abs(ens - o), axis=0) - pairs / (2 * m * (m - 1))
    np.testing.assert_allclose(got[0], numpy_box_mean(pointwise, lat, lon, (-90, 90), [(0, 360)]), rtol=1e-12)
    np.testing.assert_allclose(
        got[1], numpy_box_mean(pointwise, lat, lon, (35, 75), [(347.5, 360), (0, 42.5)]), rtol=1e-12
    )


def test_spread_and_spread_skill_match_numpy_over_init_times(era5):
    lat, lon = era5.latitude.values, era5.longitude.values
    t2m = era5.t2m.values.astype(np.float64)
    ens = np.stack([members(t2m[0], 4), members(t2m[1], 4)])  # (time=2, member=4, lat, lon)
    truth = t2m[[1, 2]]
    weights = region_weights(["global"], lat, lon)
    means = {}
    for name in ("spread", "spread_skill", "ensemble_mean_rmse"):
        stats = METRICS[name].statistics(ens, truth, weights, member_axis=1)
        means.update({key: value.mean(axis=1) for key, value in stats.items()})  # mean over init times
    w = wb2_weights(lat)[:, None] * np.ones(lon.size)
    variance = [np.sum(w * np.var(ens[t], axis=0, ddof=1)) / w.sum() for t in range(2)]
    mse = [np.sum(w * (ens[t].mean(axis=0) - truth[t]) ** 2) / w.sum() for t in range(2)]
    spread, skill = np.sqrt(np.mean(variance)), np.sqrt(np.mean(mse))
    assert METRICS["spread"].finalize(means)[0] == pytest.approx(spread, rel=1e-12)
    assert METRICS["ensemble_mean_rmse"].finalize(means)[0] == pytest.approx(skill, rel=1e-12)
    assert METRICS["spread_skill"].finalize(means)[0] == pytest.approx(spread / skill, rel=1e-12)
    assert METRICS["rmse"].finalize(METRICS["rmse"].statistics(ens, truth, weights, 1))[0].mean() > 0


def test_rank_histogram_counts_match_numpy(era5):
    lat, lon = era5.latitude.values, era5.longitude.values
    m = 4
    ens = members(era5.t2m.values[0].astype(np.float64), m)
    o = era5.t2m.values[2].astype(np.float64)
    o[0, :] = ens[1, 0, :]  # ties on the north pole row: shared equally among the tied ranks
    weights = region_weights(["global"], lat, lon)
    got = METRICS["rank_histogram"].statistics(ens[None], o[None], weights, member_axis=1)["rank_histogram"][0, 0]
    w = wb2_weights(lat)
    expected = np.zeros(m + 1)
    for i in range(lat.size):
        for j in range(lon.size):
            below = sum(ens[k, i, j] < o[i, j] for k in range(m))
            tied = sum(ens[k, i, j] == o[i, j] for k in range(m))
            for r in range(below, below + tied + 1):
                expected[r] += w[i] / (tied + 1)
    expected /= w.sum() * lon.size
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert got.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["realization", "number", "member"])
def test_member_dim_names(name):
    assert member_dim(("time", "prediction_timedelta", name, "latitude", "longitude")) == name
    with pytest.raises(ValueError, match="the forecast's member dim 'number' has 1 member; CRPS and spread need"):
        check_members(1, "number")
    with pytest.raises(ValueError, match="the forecast's member dim 'number' is empty: the file holds no forecast"):
        check_members(0, "number")  # not "drop the dim with isel(number=0)", which an empty dim cannot


def test_member_dims_none_and_several():
    assert member_dim(("time", "latitude")) is None
    with pytest.raises(ValueError, match=r"several member dims \['realization', 'number'\]"):
        member_dim(("realization", "number"))


def test_bad_inputs_name_the_value_and_the_fix():
    with pytest.raises(ValueError, match="region 'europa' is neither a standard region .*'lat0,lat1,lon0,lon1'"):
        parse_box("europa")
    with pytest.raises(ValueError, match="lat0 60 > lat1 30; give the southern latitude first"):
        parse_box("60,30,0,10")
    with pytest.raises(ValueError, match=r"latitudes must lie in \[-90, 90\]"):
        parse_box("-95,30,0,10")
    with pytest.raises(ValueError, match="unknown metric 'rsme'; known metrics: rmse, acc"):
        get_metric("rsme")
    with pytest.raises(ValueError, match="region '10.2,10.3,0,1' holds no grid point"):
        region_masks(["10.2,10.3,0,1"], np.array([10.0, 11.0]), np.array([0.0, 1.0]))


def test_metric_units():
    assert metric_units("crps", "K") == "K"
    assert metric_units("spread_skill", "K") == "1" and metric_units("acc", "K") == "1"


def test_deterministic_forecast_is_a_one_member_ensemble(era5):
    """WB2's convention for the baselines: CRPS = mean absolute error, spread 0, ensemble-mean RMSE = RMSE."""
    lat, lon = era5.latitude.values, era5.longitude.values
    f, o = era5.t2m.values[0].astype(np.float64), era5.t2m.values[2].astype(np.float64)
    weights = region_weights(["global", "tropics"], lat, lon)
    crps = METRICS["crps"].statistics(f[None], o[None], weights)["crps"][:, 0]
    np.testing.assert_allclose(crps[1], numpy_box_mean(np.abs(f - o), lat, lon, (-20, 20), [(0, 360)]), rtol=1e-12)
    stats = METRICS["spread_skill"].statistics(f[None], o[None], weights)
    assert (METRICS["spread"].finalize(stats) == 0).all() and (METRICS["spread_skill"].finalize(stats) == 0).all()
    rmse = METRICS["rmse"].finalize(METRICS["rmse"].statistics(f[None], o[None], weights))
    np.testing.assert_array_equal(METRICS["ensemble_mean_rmse"].finalize(stats), rmse)


def test_nan_member_has_no_rank(era5):
    lat, lon = era5.latitude.values, era5.longitude.values
    ens = members(era5.t2m.values[0].astype(np.float64), 3)
    o = era5.t2m.values[2].astype(np.float64)
    weights = region_weights(["global", "europe"], lat, lon)
    ens[2, -1, 0] = np.nan  # a south-pole point of one member: outside europe
    got = METRICS["rank_histogram"].statistics(ens[None], o[None], weights, member_axis=1)["rank_histogram"][:, 0]
    assert np.isnan(got[0]).all()  # the global histogram has a point without a rank (NaN propagates, as WB2)
    assert np.isfinite(got[1]).all() and got[1].sum() == pytest.approx(1.0)


def test_every_metric_declares_what_it_provides(era5):
    lat, lon = era5.latitude.values, era5.longitude.values
    ens = members(era5.t2m.values[0].astype(np.float64), 3)
    o = era5.t2m.values[2].astype(np.float64)
    weights = region_weights(["global"], lat, lon)
    for name, metric in METRICS.items():
        stats = metric.statistics(ens[None], o[None], weights, member_axis=1, climatology=o[None] - 1.0)
        assert tuple(stats) == metric.provides, name  # the scorer skips a metric whose statistics are there


@pytest.mark.parametrize("members", [2, 8])
def test_a_reliable_ensemble_scores_the_reliable_spread_skill_not_one(members):
    """Members and truth drawn from one distribution (a reliable ensemble): WB2's ratio is
    sqrt(M / (M + 1)), the line the ensemble plot draws; the docs said 1 (a review found it).
    100 init times x 64 x 128 points: the ratio's standard error is about 0.1 %."""
    from s2forecast.evaluation.metrics import reliable_spread_skill

    rng = np.random.default_rng(members)
    lat, lon = np.linspace(-87.2, 87.2, 64), np.arange(128) * 360 / 128
    truth = rng.standard_normal((100, 64, 128))
    forecast = rng.standard_normal((100, members, 64, 128))
    weights = region_weights(["global"], lat, lon)
    stats = METRICS["spread_skill"].statistics(forecast, truth, weights, member_axis=1)
    means = {key: value.mean(axis=0) for key, value in stats.items()}  # over init times, as scoring does
    ratio = METRICS["spread_skill"].finalize(means)[0]
    assert ratio == pytest.approx(reliable_spread_skill(members), abs=0.01)
    assert abs(ratio - 1) > 0.04
