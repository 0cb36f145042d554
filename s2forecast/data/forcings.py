"""Time-dependent forcing fields computed analytically from the valid time (no data needed).

cos_zenith            cosine of the solar zenith angle (NOAA's Fourier series for the
                      declination and the equation of time, accurate to ~0.01).
toa_radiation         top-of-atmosphere incident solar flux / 1361 W m**-2, i.e.
                      (1 + 0.033 cos(2 pi doy / 365)) * max(cos_zenith, 0): instantaneous.
time_of_day           sin and cos of 2 pi * (UTC hour / 24), uniform fields.
day_of_year           sin and cos of 2 pi * (day of year / 365.25), uniform fields.
"""

import numpy as np

from s2forecast.user_errors import UserError

FORCINGS = ("cos_zenith", "toa_radiation", "time_of_day", "day_of_year")
SOLAR_CONSTANT_W_M2 = 1361.0


def forcing_channels(names) -> list[str]:
    """Channel names of the forcings ``names`` (time_of_day and day_of_year have two)."""
    out = []
    for name in names:
        if name not in FORCINGS:
            raise UserError(f"unknown forcing {name!r}; choose from {FORCINGS}")
        if name in out or f"{name}_sin" in out:  # the checkpoint would record channels that rollout cannot give
            raise UserError(f"forcing {name!r} is listed twice; list each forcing once")
        out += [f"{name}_sin", f"{name}_cos"] if name in ("time_of_day", "day_of_year") else [name]
    return out


def forcing_names(channels) -> tuple[str, ...]:
    """The forcings behind channel names: the inverse of ``forcing_channels``."""
    names = []
    for channel in channels:
        name = channel.removesuffix("_sin").removesuffix("_cos")
        if name not in names:
            names.append(name)
    return tuple(names)


def _day_fraction(time: np.datetime64) -> tuple[float, float]:
    """(day of year 1..366 with fraction, UTC hour)."""
    t = np.datetime64(time, "s")
    year_start = t.astype("datetime64[Y]").astype("datetime64[s]")
    seconds = (t - year_start) / np.timedelta64(1, "s")
    hour = (seconds % 86400) / 3600.0
    return 1.0 + seconds / 86400.0, hour


def cos_zenith(time: np.datetime64, lat_deg: np.ndarray, lon_deg: np.ndarray) -> np.ndarray:
    """(nlat, nlon) cosine of the solar zenith angle at UTC ``time``."""
    doy, hour = _day_fraction(time)
    year = np.datetime64(time, "Y")
    days_in_year = ((year + 1).astype("datetime64[D]") - year.astype("datetime64[D]")) / np.timedelta64(1, "D")
    # NOAA's fractional year: the whole day of year and the hour (doy's fraction is the hour already), over
    # the year's own length: continuous across every midnight and new year
    gamma = 2.0 * np.pi / days_in_year * (np.floor(doy) - 1.0 + (hour - 12.0) / 24.0)
    declination = (
        0.006918
        - 0.399912 * np.cos(gamma)
        + 0.070257 * np.sin(gamma)
        - 0.006758 * np.cos(2 * gamma)
        + 0.000907 * np.sin(2 * gamma)
        - 0.002697 * np.cos(3 * gamma)
        + 0.00148 * np.sin(3 * gamma)
    )
    equation_of_time_min = 229.18 * (
        0.000075
        + 0.001868 * np.cos(gamma)
        - 0.032077 * np.sin(gamma)
        - 0.014615 * np.cos(2 * gamma)
        - 0.040849 * np.sin(2 * gamma)
    )
    solar_time_min = hour * 60.0 + equation_of_time_min + 4.0 * np.asarray(lon_deg)[None, :]
    hour_angle = np.deg2rad(solar_time_min / 4.0 - 180.0)
    lat = np.deg2rad(np.asarray(lat_deg))[:, None]
    return np.sin(lat) * np.sin(declination) + np.cos(lat) * np.cos(declination) * np.cos(hour_angle)


def forcing_fields(names, time: np.datetime64, lat_deg: np.ndarray, lon_deg: np.ndarray) -> np.ndarray:
    """(channels, nlat, nlon) float32 forcings ``names`` at ``time`` (see ``forcing_channels``)."""
    shape = (len(lat_deg), len(lon_deg))
    doy, hour = _day_fraction(time)
    out = []
    for name in names:
        if name == "cos_zenith":
            out.append(cos_zenith(time, lat_deg, lon_deg))
        elif name == "toa_radiation":
            distance = 1.0 + 0.033 * np.cos(2.0 * np.pi * doy / 365.0)
            out.append(distance * np.maximum(cos_zenith(time, lat_deg, lon_deg), 0.0))
        elif name in ("time_of_day", "day_of_year"):
            phase = 2.0 * np.pi * (hour / 24.0 if name == "time_of_day" else doy / 365.25)
            out += [np.full(shape, np.sin(phase)), np.full(shape, np.cos(phase))]
        else:
            raise UserError(f"unknown forcing {name!r}; choose from {FORCINGS}")
    return np.stack(out).astype(np.float32) if out else np.zeros((0, *shape), np.float32)
