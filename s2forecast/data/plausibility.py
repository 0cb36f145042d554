"""Physical plausibility of field values: are they in the units their ``units`` attribute claims?

A ``units`` attribute is only a label. Celsius temperatures labelled ``K``, hPa labelled ``Pa``
or geopotential height (m) labelled geopotential (``m**2 s**-2``) pass every check on labels
and turn into wrong statistics, models and scores. This module checks the values instead: a
robust statistic of one whole field (one time, one level, latitude x longitude) against a
generous range per WeatherBench2 variable in its canonical units (``store.VARIABLES``).

The statistic is the field's median (insensitive to a few bad points, to NaN-masked regions and
to the grid's oversampling of the poles), or its minimum/maximum where the median cannot tell
units apart: a land-sea mask in percent has median 0 like a fraction, and surface geopotential
over the oceans is 0 in any units, so its maximum (the Himalaya or Antarctica, above 2000 m on
any global grid) is checked instead.

Geopotential depends on the level: at p hPa the median must lie within g * (H(p) +- max(20 %,
500 m)), with H the height of p in the International Standard Atmosphere. That separates
geopotential from geopotential height (a factor g = 9.81 smaller) at every level from 925 hPa
up. Near the ground (1000 and 975 hPa, H < 560 m) the two median ranges overlap, so there the
field's range (maximum - minimum) must also exceed g * 150 m: a global field at those levels
spans lows of about -300 m to highs of +250 m (ERA5 extrapolates below the ground), at least
500 m on any global grid, while heights mislabeled as geopotential span a g-times smaller
range.

A statistic outside its range names the mislabeling that would explain it (``MISLABELINGS``):
degC for K, hPa for Pa, geopotential height for geopotential, g/kg for kg/kg, mm for m, percent
for fractions.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import xarray as xr

from s2forecast.data.store import VARIABLES, normalize_units
from s2forecast.times import format_time
from s2forecast.user_errors import UserError

GRAVITY = 9.80665  # m s**-2, the WMO standard (geopotential = GRAVITY * geopotential height)
SPATIAL_DIMS = ("latitude", "longitude")


@dataclass(frozen=True)
class Bounds:
    """``low <= statistic <= high`` for the statistic of one field over latitude x longitude."""

    low: float
    high: float
    statistic: str = "median"  # "median", "min", "max" or "range" (max - min); non-finite values are ignored


_WIND = (Bounds(-50.0, 50.0), Bounds(-200.0, 200.0, "min"), Bounds(-200.0, 200.0, "max"))
_TEMPERATURE = (Bounds(150.0, 350.0),)
_PRECIPITATION = (Bounds(0.0, 0.01), Bounds(0.0, 2.0, "max"))
_VORTICITY = (Bounds(-1e-3, 1e-3), Bounds(-0.1, 0.1, "min"), Bounds(-0.1, 0.1, "max"))

# WeatherBench2 name -> bounds in its canonical units (store.VARIABLES); geopotential: see
# geopotential_bounds. Generous: a field of the real atmosphere never fails them.
PLAUSIBLE: dict[str, tuple[Bounds, ...]] = {
    "temperature": _TEMPERATURE,
    "2m_temperature": _TEMPERATURE,
    "2m_dewpoint_temperature": _TEMPERATURE,
    "u_component_of_wind": _WIND,
    "v_component_of_wind": _WIND,
    "10m_u_component_of_wind": _WIND,
    "10m_v_component_of_wind": _WIND,
    "vertical_velocity": (Bounds(-1.0, 1.0), Bounds(-100.0, 100.0, "min"), Bounds(-100.0, 100.0, "max")),
    "specific_humidity": (Bounds(0.0, 0.04), Bounds(0.0, 0.1, "max")),
    "mean_sea_level_pressure": (Bounds(90_000.0, 110_000.0),),
    "surface_pressure": (Bounds(50_000.0, 110_000.0),),
    "total_precipitation": _PRECIPITATION,
    "total_precipitation_6hr": _PRECIPITATION,
    "total_column_water_vapour": (Bounds(0.0, 100.0), Bounds(0.0, 150.0, "max")),
    "land_sea_mask": (Bounds(0.0, 1.0, "min"), Bounds(0.0, 1.0, "max")),
    "geopotential_at_surface": (Bounds(20_000.0, 90_000.0, "max"),),
    # shallow water (generate-swe): layer depth about 10 km, vorticity and divergence ~1e-6 s**-1
    "geopotential_height": (Bounds(-1000.0, 100_000.0),),
    "vorticity": _VORTICITY,
    "divergence": _VORTICITY,
}

# canonical units -> (what mislabeled values are in, conversion of such values to the canonical units)
MISLABELINGS: dict[str, tuple[tuple[str, Callable[[float], float]], ...]] = {
    "K": (("degC", lambda x: x + 273.15),),
    "Pa": (("hPa", lambda x: x * 100.0),),
    "m**2 s**-2": (("geopotential height in m (multiply by g = 9.80665)", lambda x: x * GRAVITY),),
    "kg kg**-1": (("g kg**-1", lambda x: x / 1000.0),),
    "m": (("mm", lambda x: x / 1000.0),),
    "1": (("percent", lambda x: x / 100.0),),
}

# International Standard Atmosphere layers: (base height m, base pressure hPa, base temperature K, lapse K/m)
_ISA_LAYERS = (
    (0.0, 1013.25, 288.15, -0.0065),
    (11_000.0, 226.3206, 216.65, 0.0),
    (20_000.0, 54.74889, 216.65, 0.001),
    (32_000.0, 8.680187, 228.65, 0.0028),
    (47_000.0, 1.109063, 270.65, 0.0),
)
_GAS_CONSTANT = 287.05287  # J kg**-1 K**-1, dry air as in the ISA


def standard_height(level_hpa: float) -> float:
    """Geopotential height (m) of the pressure ``level_hpa`` in the International Standard Atmosphere."""
    if not level_hpa > 0:
        raise UserError(f"pressure level must be positive, got {level_hpa} hPa")
    # the layer holding the level; pressures above 1013.25 hPa (below sea level) extend the lowest one
    base, pressure, temperature, lapse = next(
        (layer for layer in reversed(_ISA_LAYERS) if level_hpa <= layer[1]), _ISA_LAYERS[0]
    )
    if lapse == 0.0:
        return base + _GAS_CONSTANT * temperature / GRAVITY * math.log(pressure / level_hpa)
    return base + temperature / lapse * ((level_hpa / pressure) ** (-_GAS_CONSTANT * lapse / GRAVITY) - 1.0)


# Least range (max - min) of a global geopotential field near the ground, in m of height.
GEOPOTENTIAL_MIN_RANGE_M = 150.0


def geopotential_bounds(level_hpa: float) -> tuple[Bounds, ...]:
    """Bounds of geopotential (m**2 s**-2) at ``level_hpa``.

    The median within g * (H +- max(0.2 H, 500 m)); where that range also holds heights in m
    mislabeled as geopotential (H < 560 m), the field's range at least g * 150 m as well.
    """
    height = standard_height(level_hpa)
    spread = max(0.2 * abs(height), 500.0)
    median = Bounds(GRAVITY * (height - spread), GRAVITY * (height + spread))
    if median.low > height:  # a height field's median (about H) cannot pass as geopotential
        return (median,)
    return median, Bounds(GRAVITY * GEOPOTENTIAL_MIN_RANGE_M, math.inf, "range")


def plausible_bounds(name: str, level: float | None = None) -> tuple[Bounds, ...]:
    """The bounds of variable ``name`` (at pressure ``level`` hPa); () for a variable without any."""
    if name == "geopotential":
        return geopotential_bounds(level) if level is not None else ()
    return PLAUSIBLE.get(name, ())


def _number(x: float, digits: int = 4) -> str:
    """``digits`` significant digits, positional where readable: 90000, 0.04, 8.387, 1e-06."""
    if x != 0 and not 1e-4 <= abs(x) < 1e7:
        return f"{x:.{digits}g}"
    return np.format_float_positional(float(f"{x:.{digits}g}"), trim="-")


def _value_beside(value: float, bounds: tuple[float, ...]) -> str:
    """``value`` with the digits that tell it from the bounds it is outside: 19999.6 is not shown
    as 20000 beside a bound of 20000."""
    for digits in range(4, 17):
        shown = _number(value, digits)
        if all(float(shown) != bound for bound in bounds if math.isfinite(bound)):
            return shown
    return repr(value)


def _statistic(values: np.ndarray, statistic: str) -> float:
    finite = values[np.isfinite(values)]  # infinities are refused by every reader's own check, naming them
    if finite.size == 0:
        return math.nan
    return float({"median": np.median, "min": np.min, "max": np.max, "range": np.ptp}[statistic](finite))


def field_problem(name: str, field: np.ndarray, level: float | None = None) -> str | None:
    """What is implausible about one field of ``name`` in its canonical units, or None.

    Args:
        name: WeatherBench2 variable name (one without bounds is always plausible).
        field: (latitude, longitude) values at one time (and ``level`` hPa); NaN and infinities
            are ignored, a field without a finite value is not judged here.

    Returns:
        e.g. "median 12.3 is outside the plausible range 150..350 K for temperature; the values
        look like degC: convert them to K or fix the units attribute".
    """
    units = VARIABLES[name][0] if name in VARIABLES else ""
    values = np.asarray(field, dtype=np.float64)
    for bounds in plausible_bounds(name, level):
        value = _statistic(values, bounds.statistic)
        if math.isnan(value) or bounds.low <= value <= bounds.high:
            continue
        what = {"median": "median", "min": "minimum", "max": "maximum", "range": "range (max - min)"}
        what = what[bounds.statistic]
        if math.isfinite(bounds.high):
            expected = f"outside the plausible range {_number(bounds.low)}..{_number(bounds.high)}"
        else:
            expected = f"below the plausible least {_number(bounds.low)}"
        problem = f"{what} {_value_beside(value, (bounds.low, bounds.high))} is {expected} {units} for {name}"
        looks_like = [
            label for label, convert in MISLABELINGS.get(units, ()) if bounds.low <= convert(value) <= bounds.high
        ]
        if looks_like:
            return (
                f"{problem}; the values look like {looks_like[0]}: convert them to {units} or fix the units attribute"
            )
        return f"{problem}; check the units attribute and the values"
    return None


def _sample(n: int) -> list[int]:
    """First, middle and last index of ``n``."""
    return sorted({0, n // 2, n - 1}) if n else []


def _describe(dim: str, value, labels: dict[str, str]) -> str:
    """'850 hPa', 'time 2020-01-01T00', 'lead 24 h'; '' for a static field's NaT time."""
    label = labels.get(dim, dim)
    if dim == "level":
        return f"{float(value):g} hPa"
    if isinstance(value, np.datetime64):
        return "" if np.isnat(value) else f"{label} {format_time(value)}"
    if isinstance(value, np.timedelta64):
        return f"{label} {value / np.timedelta64(1, 'h'):g} h"
    return f"{label} {value}"


def check_plausible(
    data: xr.DataArray,
    name: str,
    what: str,
    sample_dims: tuple[str, ...] = ("time",),
    labels: dict[str, str] | None = None,
) -> None:
    """Check the first, middle and last field along each of ``sample_dims``, at every level.

    Reads one sampled field (all its levels) at a time, so a lazy ``data`` stays cheap.

    Args:
        data: values of WeatherBench2 variable ``name`` in its canonical units, dims
            ``(*sample_dims, [level], latitude, longitude)`` (sample dims it lacks are skipped).
        name: the variable's WeatherBench2 name; one without bounds is not checked.
        what: how messages name the data, e.g. "era5_2020_01.nc: variable temperature".
        labels: words for the sample dims in messages, e.g. {"time": "init time"}.

    Raises:
        ValueError: "<what> at 850 hPa at time 2020-01-01T00:00: median 253 is outside ...".
    """
    if name != "geopotential" and not plausible_bounds(name):
        return
    labels = labels or {}
    dims = [d for d in sample_dims if d in data.dims]
    samples = {d: _sample(data.sizes[d]) for d in dims}
    for position in np.ndindex(*[len(samples[d]) for d in dims]):
        index = {d: samples[d][i] for d, i in zip(dims, position, strict=True)}
        field = data.isel(index)
        other = [d for d in field.dims if d not in SPATIAL_DIMS]
        field = field.transpose(*other, *SPATIAL_DIMS).load()
        values = np.asarray(field.values)
        for inner in np.ndindex(*values.shape[: len(other)]):
            level = float(field["level"].values[inner[other.index("level")]]) if "level" in other else None
            problem = field_problem(name, values[inner], level)
            if problem is None:
                continue
            where = [_describe("level", level, labels)] if level is not None else []
            for d in dims:
                value = data[d].values[index[d]] if d in data.coords else index[d]
                where.append(_describe(d, value, labels))
            where = [w for w in where if w]
            raise UserError(f"{what}{''.join(' at ' + w for w in where)}: {problem}")


def has_canonical_units(name: str, units: str | None) -> bool:
    """Whether values labelled ``units`` are in ``name``'s canonical units (no label counts as canonical)."""
    if units is None or name not in VARIABLES:
        return True
    return normalize_units(str(units)) == normalize_units(VARIABLES[name][0])


def check_store_plausible(ds: xr.Dataset, path, names, time_index=None) -> None:
    """The fields ``names`` of an opened store plausible in the units they are labelled with: every
    reader of physical fields calls it (statistics, climatologies, training samples, initial
    conditions), so °C labelled K is refused before it becomes "K" statistics or forecasts.

    Variables labelled in other than their canonical units are not judged here (readers that need
    canonical units refuse them by label: ``store.check_units``).

    Args:
        ds: the store (``store.open_store``: lazy, so only the sampled fields are read).
        path: the store, for messages.
        names: its variables and static fields to check.
        time_index: judge only this time (a cheap check of one sample); default the first,
            middle and last time.
    """
    for name in names:
        var = ds[name]
        if not has_canonical_units(name, var.attrs.get("units")):
            continue
        if time_index is not None and "time" in var.dims:
            var = var.isel(time=[time_index])
        check_plausible(var, name, f"store {path}: variable {name}")
