import math

import numpy as np
import pytest
import torch

from s2forecast.geometry import Grid, geodesic_distance, haversine, random_rotation, rotation_matrix

KINDS = ["equiangular", "equiangular-midpoint", "legendre-gauss"]


@pytest.mark.parametrize(
    "nlat, nlon, kind, first_lat, spacing",
    [
        (721, 1440, "equiangular", 90.0, 0.25),
        (121, 240, "equiangular", 90.0, 1.5),
        (181, 360, "equiangular", 90.0, 1.0),
        (61, 120, "equiangular", 90.0, 3.0),
        (32, 64, "equiangular-midpoint", 87.1875, 5.625),
        (64, 128, "equiangular-midpoint", 88.59375, 2.8125),
        (128, 256, "equiangular-midpoint", 89.296875, 1.40625),
    ],
)
def test_named_grids_coordinates(nlat, nlon, kind, first_lat, spacing):
    grid = Grid(nlat, nlon, kind)
    lats = grid.lats_deg.numpy()
    assert lats[0] == pytest.approx(first_lat, abs=1e-9)
    assert np.allclose(-np.diff(lats), spacing, atol=1e-9)
    assert np.allclose(np.diff(grid.lons_deg.numpy()), 360.0 / nlon)
    assert torch.allclose(grid.colats, math.pi / 2 - grid.lats)


@pytest.mark.parametrize("kind", KINDS)
def test_unit_vectors_and_order(kind):
    grid = Grid(9, 12, kind)
    u = grid.unit_vectors
    assert u.shape == (9, 12, 3)
    assert torch.allclose(torch.linalg.vector_norm(u, dim=-1), torch.ones(9, 12, dtype=torch.float64))
    assert torch.all(torch.diff(u[:, 0, 2]) < 0), "rows run north -> south"
    assert torch.allclose(u[:, 0, 1], torch.zeros(9, dtype=torch.float64)), "column 0 is longitude 0"


def test_area_weights_match_weatherbench2():
    pole_grid = Grid(121, 240)
    w = pole_grid.area_weights
    assert w.mean().item() == pytest.approx(1.0)
    assert w[0].item() == pytest.approx(0.00518, abs=1e-5) and w[-1] == w[0]
    lats = np.deg2rad(pole_grid.lats_deg.numpy())
    bounds = np.clip(
        np.concatenate([[lats[0] + np.deg2rad(0.75)], lats[:-1] - np.deg2rad(0.75)]), -np.pi / 2, np.pi / 2
    )
    lower = np.clip(lats - np.deg2rad(0.75), -np.pi / 2, np.pi / 2)
    cell = np.sin(bounds) - np.sin(lower)
    assert np.allclose(w.numpy(), cell / cell.mean())

    midpoint = Grid(32, 64, "equiangular-midpoint")
    cos = np.cos(midpoint.lats.numpy())
    assert np.allclose(midpoint.area_weights.numpy(), cos / cos.mean(), rtol=1e-3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ascending", [False, True])
def test_from_coords_round_trip(kind, ascending):
    grid = Grid(33, 64, kind)
    lat = grid.lats_deg.numpy().astype(np.float32)
    lon = grid.lons_deg.numpy() - 180.0  # any starting longitude
    if ascending:
        lat = lat[::-1]
    assert Grid.from_coords(lat, lon) == grid


@pytest.mark.parametrize("first", [0.0, -180.0])
def test_float32_longitudes_of_a_tenth_of_a_degree_are_a_grid(first):
    """IFS/HRES at 0.1 deg stored in float32: the steps are up to 2.4e-5 deg off (the positions 1.2e-5),
    over the 1e-5 deg the steps were allowed: refused as irregular longitudes."""
    lat = np.linspace(90.0, -90.0, 1801).astype(np.float32)
    lon = (first + np.arange(3600) * 0.1).astype(np.float32)
    assert Grid.from_coords(lat, lon) == Grid(1801, 3600)


@pytest.mark.parametrize(
    "lon, message",
    [
        (np.arange(350.0, -1.0, -10.0), r"longitudes descend \(350, 340, ...\): .* \(ds.sortby\('longitude'\)\)"),
        (np.arange(0.0, 361.0, 10.0), r"the first and last longitudes \(0 and 360 deg\) are the same meridian: drop "
         r"the repeated column"),
        # half a cell off 0 E: a review found rollout paired them with a checkpoint's static fields on 0 E + k step
        (np.arange(5.0, 360.0, 10.0), r"^longitudes 5, 15, ... deg lie between the meridians 0 \+ k \* 10 deg of a "
         r"36-column grid \(offset 5 deg\): s2forecast's grids have a column on 0 E; interpolate the store"),
        (np.arange(-177.5, 180.0, 10.0), r"^longitudes -177.5, -167.5, ... deg lie between .* \(offset 2.5 deg\)"),
    ],
)  # fmt: skip
def test_longitudes_in_another_order_repeated_or_off_0e_name_the_fix(lon, message):
    with pytest.raises(ValueError, match=message):
        Grid.from_coords(np.linspace(90, -90, 19), lon)


def test_integral_floats_give_an_integer_grid():
    grid = Grid(8.0, 16.0)
    assert (grid.nlat, grid.nlon) == (8, 16) and type(grid.nlat) is type(grid.nlon) is int
    assert grid.quadrature_weights.shape == (8, 16)


def test_a_rotation_about_no_axis_is_one_line():
    with pytest.raises(ValueError, match=r"a rotation axis needs a finite, nonzero length; got \[0.0, 0.0, 0.0\]"):
        rotation_matrix(torch.zeros(3), 1.0)


@pytest.mark.parametrize("kind", ["equiangular", "equiangular-midpoint", "legendre-gauss"])
@pytest.mark.parametrize("nlat", [2, 3, 32, 33, 721])
def test_numpy_latitudes_are_the_quadratures_nodes(kind, nlat):
    """``Grid.latitudes_deg`` (numpy alone: how a store's grid is recognised without torch) equals the
    latitudes of the quadrature rule (torch-harmonics' nodes for equiangular and Gauss grids)."""
    grid = Grid(nlat, 2 * nlat, kind)
    np.testing.assert_allclose(grid.latitudes_deg, grid.lats_deg.numpy(), rtol=0, atol=1e-11)
    assert Grid.from_coords(grid.latitudes_deg, grid.lons_deg.numpy()) == grid


def test_from_coords_reads_xarray_coordinates():
    xr = pytest.importorskip("xarray")
    ds = xr.Dataset(coords={"latitude": np.linspace(-90, 90, 181), "longitude": np.arange(360.0)})
    assert Grid.from_coords(ds.latitude, ds.longitude) == Grid(181, 360)


@pytest.mark.parametrize(
    "lat, lon, message",
    [
        (np.linspace(30, 60, 31), np.arange(360.0), "regional"),
        (np.linspace(-90, 90, 181), np.arange(0, 90.0), "regional"),
        (np.linspace(-90, 90, 181) ** 3 / 8100, np.arange(360.0), "irregular latitudes"),
        (np.linspace(-90, 90, 181), np.sort(np.random.default_rng(0).uniform(0, 360, 360)), "irregular longitudes"),
        (np.deg2rad(np.linspace(-90, 90, 181)), np.arange(360.0), "radians"),
        (np.linspace(-88, 88, 89), np.arange(360.0), "unsupported"),
        (np.array([10.0, 5.0, 7.0]), np.arange(360.0), "sorted"),
        (np.linspace(-90, 90, 181) * 2, np.arange(360.0), "degrees"),
    ],
)
def test_from_coords_rejects_unsupported_grids(lat, lon, message):
    with pytest.raises(ValueError, match=message):
        Grid.from_coords(lat, lon)


def test_invalid_grid_arguments():
    with pytest.raises(ValueError, match="unknown grid kind"):
        Grid(10, 20, "healpix")
    with pytest.raises(ValueError, match="nlat >= 2"):
        Grid(1, 20)


def test_geodesic_distance():
    grid = Grid(19, 36)
    u = grid.unit_vectors
    north, south = u[0, 0], u[-1, 0]
    assert geodesic_distance(north, south).item() == pytest.approx(math.pi)
    assert geodesic_distance(u[9, 0], u[9, 9]).item() == pytest.approx(math.pi / 2)
    colat, lon = grid.colats[:, None].expand(19, 36), grid.lons[None, :].expand(19, 36)
    hav = haversine(colat, lon, colat[4, 7], lon[4, 7])
    expected = geodesic_distance(u, u[4, 7])
    assert torch.allclose(2 * torch.asin(hav.sqrt()), expected, atol=1e-12)


def test_rotations_are_proper():
    g = torch.Generator().manual_seed(3)
    r = random_rotation(g)
    assert torch.allclose(r @ r.T, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert torch.det(r).item() == pytest.approx(1.0)
    quarter = rotation_matrix(torch.tensor([0.0, 0.0, 1.0]), math.pi / 2)
    assert torch.allclose(
        quarter @ torch.tensor([1.0, 0, 0], dtype=torch.float64), torch.tensor([0, 1.0, 0], dtype=torch.float64)
    )
