"""Regions for spatially averaged scores, as WeatherBench2 (WB2) defines them.

A region is a weight mask on the (latitude, longitude) grid that multiplies the WB2 cell-area
latitude weights; a region's mean is ``sum(w m x) / sum(w m)``, which equals WB2's mean over the
sliced box with the full-grid weights restricted to it. Box bounds are inclusive (WB2 slices with
``.sel(latitude=slice(a, b))``).

Standard set: WB2 ``scripts/evaluate.py`` ``predefined_regions`` (google-research/weatherbench2),
longitudes in [0, 360); land regions when the truth holds a ``land_sea_mask`` (WB2's
``LandRegion``: the mask's land fraction multiplies the weights).
"""

import re
import warnings

import numpy as np
import xarray as xr

from s2forecast.user_errors import UserError

# name -> (latitude ranges, longitude ranges), inclusive, from WB2 scripts/evaluate.py predefined_regions
STANDARD_REGIONS = {
    "global": ([(-90.0, 90.0)], [(0.0, 360.0)]),
    "tropics": ([(-20.0, 20.0)], [(0.0, 360.0)]),
    "extra-tropics": ([(-90.0, -20.0), (20.0, 90.0)], [(0.0, 360.0)]),
    "northern-hemisphere": ([(20.0, 90.0)], [(0.0, 360.0)]),
    "southern-hemisphere": ([(-90.0, -20.0)], [(0.0, 360.0)]),
    "europe": ([(35.0, 75.0)], [(360.0 - 12.5, 360.0), (0.0, 42.5)]),
    "north-america": ([(25.0, 60.0)], [(360.0 - 120.0, 360.0 - 75.0)]),
    "north-atlantic": ([(25.0, 65.0)], [(360.0 - 70.0, 360.0 - 10.0)]),
    "north-pacific": ([(25.0, 60.0)], [(145.0, 360.0 - 130.0)]),
    "east-asia": ([(25.0, 60.0)], [(102.5, 150.0)]),
    "ausnz": ([(-45.0, -12.5)], [(120.0, 175.0)]),
    "arctic": ([(60.0, 90.0)], [(0.0, 360.0)]),
    "antarctic": ([(-90.0, -60.0)], [(0.0, 360.0)]),
}
# WB2's land regions: (base region, land) when a land-sea mask is available
LAND_REGIONS = {"global_land": "global", "extra-tropics_land": "extra-tropics", "tropics_land": "tropics"}
LAND_SEA_MASK_NAMES = ("land_sea_mask", "lsm")  # WB2 name, ERA5 short name
_NUMBER = r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*"
_BOX = re.compile(rf"^{_NUMBER},{_NUMBER},{_NUMBER},{_NUMBER}$")
_NAME = re.compile(r"^[^\W\d_][\w.-]*$")  # of a named box (a label for results, tables and CSV): any letter first


def region_label(region: str) -> str:
    """How results name a region: a named box ``"alps=44,48,5,16"`` by its name, an unnamed one
    without its spaces (``"0, 10, 0, 10"`` is ``"0,10,0,10"``), any other by itself."""
    name, named, _ = region.partition("=")
    if named:
        return name.strip()
    return region.replace(" ", "") if _BOX.match(region) else region


def parse_box(text: str) -> tuple[float, float, float, float]:
    """``"lat0,lat1,lon0,lon1"`` or ``"NAME=lat0,lat1,lon0,lon1"`` (degrees) -> floats. Longitudes
    are compared mod 360: the box runs east from lon0 to lon1 (``340,20`` wraps through 0 E,
    ``170,-170`` crosses the dateline); lon1 - lon0 >= 360 is every longitude.

    Raises:
        ValueError: not four numbers, lat0 > lat1, a latitude outside [-90, 90], a longitude outside
            [-360, 720], or a name that is not a word or is a standard region's.
    """
    name, named, box = text.partition("=")
    if named:
        name = name.strip()
        if not _NAME.match(name):
            raise UserError(f"region {text!r}: name {name!r} must start with a letter, then letters, digits, _ . -")
        if name in STANDARD_REGIONS or name in LAND_REGIONS:
            raise UserError(f"region {text!r}: {name!r} is a standard region; give the box another name")
    box = box if named else text
    if not _BOX.match(box):
        raise UserError(
            f"region {text!r} is neither a standard region ({', '.join(STANDARD_REGIONS)}) nor a box "
            "'lat0,lat1,lon0,lon1' in degrees (e.g. '35,75,-12.5,42.5'), named or not ('alps=44,48,5,16')"
        )
    lat0, lat1, lon0, lon1 = (float(part) for part in box.split(","))
    if not (-90.0 <= lat0 <= 90.0 and -90.0 <= lat1 <= 90.0):
        raise UserError(f"region box {text!r}: latitudes must lie in [-90, 90]")
    if not (-360.0 <= lon0 <= 720.0 and -360.0 <= lon1 <= 720.0):
        raise UserError(f"region box {text!r}: longitudes must lie in [-360, 720] degrees (e.g. -12.5 or 347.5)")
    if lat0 > lat1:
        raise UserError(f"region box {text!r}: lat0 {lat0:g} > lat1 {lat1:g}; give the southern latitude first")
    return lat0, lat1, lon0, lon1


def wide_box_warning(text: str) -> str | None:
    """A warning for a box that runs east over more than 180 deg of longitude without covering them
    all: often a box whose longitudes were swapped (``35,75,42.5,-12.5`` for Europe is 305 deg wide)."""
    lat0, lat1, lon0, lon1 = parse_box(text)
    width = (lon1 - lon0) % 360.0
    if lon1 - lon0 >= 360.0 or width <= 180.0:
        return None
    swapped = f"{lat0:g},{lat1:g},{lon1:g},{lon0:g}"
    return (
        f"region box {text!r} runs east from {lon0:g} to {lon1:g} E: {width:g} deg of longitude; for the "
        f"{360.0 - width:g} deg from {lon1:g} to {lon0:g} give {swapped!r}"
    )


def check_region_names(names) -> tuple[str, ...]:
    """``names`` as a tuple once each is a standard or land region or a box, named or not (:func:`parse_box`).

    Raises:
        ValueError: a name that is neither (naming the standard regions and the box syntax), or one
            given twice (two boxes of one name too).
    """
    names = (names,) if isinstance(names, str) else tuple(names)
    for name in names:
        # a box: wide_box_warning parses it (a bad one raises here)
        if name not in STANDARD_REGIONS and name not in LAND_REGIONS and (message := wide_box_warning(name)):
            warnings.warn(message, stacklevel=2)
    labels = [region_label(name) for name in names]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise UserError(f"region(s) {duplicates} given twice; give each once")
    return names


def _in_ranges(values: np.ndarray, ranges) -> np.ndarray:
    inside = np.zeros(values.shape, dtype=bool)
    for low, high in ranges:
        inside |= (values >= low - 1e-9) & (values <= high + 1e-9)
    return inside


def _box_ranges(lat0, lat1, lon0, lon1):
    if lon1 - lon0 >= 360.0:
        return [(lat0, lat1)], [(0.0, 360.0)]
    start, end = lon0 % 360.0, lon1 % 360.0
    lons = [(start, end)] if start <= end else [(start, 360.0), (0.0, end)]  # wraps through 0 E
    return [(lat0, lat1)], lons


def region_masks(
    names, latitude: np.ndarray, longitude: np.ndarray, land_sea_mask: xr.DataArray | None = None
) -> xr.DataArray:
    """Masks ``(region, latitude, longitude)`` in [0, 1] of the named regions on a grid.

    Args:
        names: standard region names, land region names (need ``land_sea_mask``) or boxes
            ``"lat0,lat1,lon0,lon1"``, named or not (``"alps=44,48,5,16"``, labelled ``alps``).
        latitude, longitude: the grid's coordinates in degrees (any order; longitudes any convention).
        land_sea_mask: land fraction (latitude, longitude) on the same grid, or None.

    Raises:
        ValueError: an unknown name or bad box, a land region without a mask, a region with no grid point.
    """
    lat = np.asarray(latitude, dtype=np.float64)
    lon = np.asarray(longitude, dtype=np.float64) % 360.0
    masks = []
    for name in names:
        base = LAND_REGIONS.get(name, name)
        if base in STANDARD_REGIONS:
            lat_ranges, lon_ranges = STANDARD_REGIONS[base]
        else:
            lat_ranges, lon_ranges = _box_ranges(*parse_box(name))
        mask = (_in_ranges(lat, lat_ranges)[:, None] & _in_ranges(lon, lon_ranges)[None, :]).astype(np.float64)
        if name in LAND_REGIONS:
            if land_sea_mask is None:
                raise UserError(f"region {name!r} needs a land-sea mask: the truth has none of {LAND_SEA_MASK_NAMES}")
            mask = mask * _land_on_grid(land_sea_mask, lat, lon)
        if not mask.any():
            if name in LAND_REGIONS:
                raise UserError(f"region {name!r} has no land: the truth's land-sea mask is 0 over all of it")
            raise UserError(f"region {name!r} holds no grid point of this grid; widen it")
        masks.append(mask)
    labels = [region_label(name) for name in names]
    return xr.DataArray(
        np.stack(masks), dims=("region", "latitude", "longitude"), coords={"region": labels}, name="region_mask"
    )


def _land_on_grid(land_sea_mask: xr.DataArray, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """(lat, lon) land fraction of ``land_sea_mask`` at the grid's points (``lon`` in 0..360), matched by
    value: the mask's longitudes in any convention, its points in any order; another grid is refused."""
    from s2forecast.evaluation.metrics import matching_positions

    land = land_sea_mask.transpose("latitude", "longitude")
    mask_lon = np.asarray(land["longitude"].values, dtype=np.float64) % 360.0
    spacing = 360.0 / max(mask_lon.size, 1)
    mask_lon[mask_lon > 360.0 - 1e-3 * spacing] = 0.0  # 359.99999 is 0 E (as the grids' matching tolerance)
    grid_lon = np.where(lon > 360.0 - 1e-3 * spacing, 0.0, lon)
    rows = matching_positions(
        np.asarray(land["latitude"].values, dtype=np.float64), lat, "latitude", "the land-sea mask", "the grid"
    )
    columns = matching_positions(mask_lon, grid_lon, "longitude", "the land-sea mask", "the grid")
    return np.asarray(land.values, dtype=np.float64)[np.ix_(rows, columns)]


def region_weights(names, latitude, longitude, land_sea_mask=None) -> np.ndarray:
    """(region, lat, lon) WB2 latitude weights times the region masks, each region summing to 1."""
    from s2forecast.evaluation.metrics import latitude_weights

    lat_w = latitude_weights(np.asarray(latitude, dtype=np.float64)).values
    weights = region_masks(names, latitude, longitude, land_sea_mask).values * lat_w[None, :, None]
    return weights / weights.sum(axis=(1, 2), keepdims=True)
