"""Coordinate values two grids share: how far they may differ, and longitudes east of 0 E; the CF
attributes of the coordinates in the files s2forecast writes.

numpy only: the converters, the readers and the metric engine's alignment all use it.
"""

import numpy as np


def coordinate_tolerance(values: np.ndarray, period: float | None = None) -> float:
    """How far two grids' coordinate values may differ and still be the same point: 1e-3 of the
    smallest spacing of ``values`` (as ``Grid.from_coords``), so a latitude stored as float32 (2e-6
    off at 0.25 deg) or rounded to 89.99999 matches. A single value: 1e-3 of ``period`` (360 for
    longitudes: one column spans the circle, as in ``Grid.from_coords``), else 1e-6."""
    distinct = np.unique(np.asarray(values, dtype=np.float64))
    gaps = np.diff(distinct)
    if gaps.size:
        return 1e-3 * float(gaps.min())
    return 1e-3 * period if period is not None else 1e-6


def east_longitudes(lon: np.ndarray) -> np.ndarray:
    """(nlon,) longitudes (deg) in [0, 360): a value within ``coordinate_tolerance`` below 360 (e.g.
    -1e-11, ``np.arange(-180, 180, 0.1)``'s 0 E) is 0 E, not the last column, which would shift
    every column."""
    east = np.mod(np.asarray(lon, dtype=np.float64), 360.0)
    east[east > 360.0 - 1e-3 * 360.0 / max(east.size, 1)] = 0.0
    return east


# CF attributes of the spatial and level coordinates in every store, climatology and forecast written
CF_COORDINATE_ATTRS = {
    "latitude": {"units": "degrees_north", "standard_name": "latitude", "axis": "Y"},
    "longitude": {"units": "degrees_east", "standard_name": "longitude", "axis": "X"},
    "level": {"units": "hPa", "standard_name": "air_pressure", "positive": "down", "axis": "Z"},
}


def with_cf_coordinates(dataset):
    """``dataset`` (an xarray Dataset) with ``CF_COORDINATE_ATTRS`` on its coordinates (over the
    same keys of theirs: levels are hPa once read) and no ``_FillValue`` on a float coordinate
    (CF 2.5.1: coordinates have no missing values; xarray gives them NaN in zarr)."""
    dataset = dataset.copy()
    for name, coordinate in dataset.coords.items():
        attrs = {**coordinate.attrs, **CF_COORDINATE_ATTRS.get(name, {})}
        encoding = {**coordinate.encoding, "_FillValue": None} if coordinate.dtype.kind == "f" else coordinate.encoding
        dataset[name] = coordinate.copy().assign_attrs(attrs)
        dataset[name].encoding = encoding
    return dataset
