"""Regions of the scores, as WeatherBench2 defines them, and boxes of one's own.

A region is a set of grid points: latitude bands and longitude ranges (inclusive bounds, as
WB2's ``SliceRegion`` selects with xarray slices), optionally restricted to land. A regional
score is the score with the latitude (cell-area) weights multiplied by the region's 0/1 mask,
i.e. the area-weighted mean over the region's points, as WB2 computes it.

The predefined regions are those of WeatherBench2's evaluation script
(``scripts/evaluate.py`` in google-research/weatherbench2): global, tropics (20S-20N),
extra-tropics (poleward of 20 degrees, both hemispheres), northern/southern hemisphere
(poleward of 20N/20S, as WB2 names them), europe, north-america, north-atlantic,
north-pacific, east-asia, ausnz, arctic, antarctic; with a land-sea mask also global_land,
tropics_land and extra-tropics_land (land: mask >= 0.5).
"""

from dataclasses import dataclass

import numpy as np
import xarray as xr

Range = tuple[float, float]  # inclusive (low, high), degrees; longitudes in [0, 360)


@dataclass(frozen=True)
class Region:
    """Latitude bands x longitude ranges (a point is in when it is in any band and any range)."""

    name: str
    lat: tuple[Range, ...] = ((-90.0, 90.0),)
    lon: tuple[Range, ...] = ((0.0, 360.0),)
    land: bool = False

    def mask(self, latitude: np.ndarray, longitude: np.ndarray, land_sea_mask: xr.DataArray | None = None):
        """(latitude, longitude) float 0/1 DataArray of the region's points.

        Raises:
            ValueError: a land region without a land-sea mask, or a region with no grid point.
        """
        lat = xr.DataArray(np.asarray(latitude, dtype=np.float64), dims="latitude", coords={"latitude": latitude})
        lon = xr.DataArray(np.asarray(longitude, dtype=np.float64) % 360.0, dims="longitude",
                           coords={"longitude": longitude})  # fmt: skip
        in_lat = sum(((lat >= lo) & (lat <= hi)).astype(int) for lo, hi in self.lat) > 0
        in_lon = sum(((lon >= lo) & (lon <= hi)).astype(int) for lo, hi in self.lon) > 0
        mask = (in_lat & in_lon).astype(np.float64)
        if self.land:
            if land_sea_mask is None:
                raise ValueError(f"region {self.name} needs a land_sea_mask in the truth store")
            mask = mask * (land_sea_mask.reindex_like(mask, method="nearest") >= 0.5)
        if not float(mask.sum()) > 0:
            raise ValueError(f"region {self.name} holds no point of the grid; choose a larger box")
        return mask.transpose("latitude", "longitude")


def _lon_range(west: float, east: float) -> tuple[Range, ...]:
    """Longitude ranges of the arc from ``west`` eastwards to ``east`` (degrees, any convention)."""
    west, east = west % 360.0, east % 360.0
    if west <= east:
        return ((west, east),)
    return ((west, 360.0), (0.0, east))  # across the prime meridian


TROPICS = ((-20.0, 20.0),)
EXTRA_TROPICS = ((-90.0, -20.0), (20.0, 90.0))

PREDEFINED = {
    region.name: region
    for region in (
        Region("global"),
        Region("tropics", TROPICS),
        Region("extra-tropics", EXTRA_TROPICS),
        Region("northern-hemisphere", ((20.0, 90.0),)),
        Region("southern-hemisphere", ((-90.0, -20.0),)),
        Region("europe", ((35.0, 75.0),), _lon_range(-12.5, 42.5)),
        Region("north-america", ((25.0, 60.0),), _lon_range(-120.0, -75.0)),
        Region("north-atlantic", ((25.0, 65.0),), _lon_range(-70.0, -10.0)),
        Region("north-pacific", ((25.0, 60.0),), _lon_range(145.0, -130.0)),
        Region("east-asia", ((25.0, 60.0),), _lon_range(102.5, 150.0)),
        Region("ausnz", ((-45.0, -12.5),), _lon_range(120.0, 175.0)),
        Region("arctic", ((60.0, 90.0),)),
        Region("antarctic", ((-90.0, -60.0),)),
        Region("global_land", land=True),
        Region("tropics_land", TROPICS, land=True),
        Region("extra-tropics_land", EXTRA_TROPICS, land=True),
    )
}
WITHOUT_LAND = [name for name, region in PREDEFINED.items() if not region.land]


def parse_region(text: str) -> Region:
    """A predefined region by name, or a box "lat0,lat1,lon0,lon1" (degrees; lat0 <= lat1; the box
    runs east from lon0 to lon1, across the prime meridian when lon0 > lon1, e.g. 350,20).

    Raises:
        ValueError: an unknown name or a malformed box, naming it and the choices.
    """
    if text in PREDEFINED:
        return PREDEFINED[text]
    parts = text.split(",")
    if len(parts) != 4:
        raise ValueError(
            f"region {text!r} is neither one of {list(PREDEFINED)} nor a box lat0,lat1,lon0,lon1 (e.g. 30,70,-20,40)"
        )
    try:
        lat0, lat1, lon0, lon1 = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"region box {text!r} must be four numbers lat0,lat1,lon0,lon1 in degrees") from None
    if not (-90.0 <= lat0 <= lat1 <= 90.0) or not all(np.isfinite([lon0, lon1])):
        raise ValueError(f"region box {text!r} needs -90 <= lat0 <= lat1 <= 90 and finite longitudes")
    return Region(text, ((lat0, lat1),), _lon_range(lon0, lon1))


def region_weights(region: Region, latitude_weights: xr.DataArray, longitude, land_sea_mask=None) -> xr.DataArray:
    """(latitude, longitude) weights of a regional score: latitude weights times the region's mask."""
    return latitude_weights * region.mask(latitude_weights["latitude"].values, longitude, land_sea_mask)
