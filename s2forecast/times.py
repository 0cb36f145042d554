"""Times as users write them and as messages show them.

``parse_time`` reads a time given on the command line (ISO 8601 or anything pandas reads,
e.g. ``2020-01-01``, ``2020-01-01T06``, ``2020-01-01 06:00``); ``parse_end`` reads the end of
an inclusive period (``2017-12-31``: all of that day); ``format_time`` writes a
``datetime64`` the short ISO way (``2020-01-01T06``) so that messages never show
nanoseconds since 1970 or trailing ``:00.000000000``.
"""

import numpy as np
import pandas as pd
from pandas.tseries.offsets import Day, Hour, Minute, MonthEnd, YearEnd

from s2forecast.user_errors import UserError

EXAMPLE = "2020-01-01T06"


def parse_time(value, what: str = "time") -> np.datetime64:
    """``value`` (string, datetime or datetime64) as a UTC ``datetime64[ns]``.

    Args:
        value: the time; a time zone, if given, is converted to UTC.
        what: how messages name it (e.g. ``--start``).

    Raises:
        ValueError: ``value`` is not a time (names it and shows the expected form).
    """
    try:  # a number is no time (pandas reads 5 as 5 ns after 1970; YAML reads an unquoted 2017 as one)
        stamp = pd.NaT if isinstance(value, int | float | np.number) else pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        stamp = pd.NaT
    if pd.isna(stamp):
        raise UserError(f"{what} {value!r} is not a time; write it as YYYY-MM-DD or YYYY-MM-DDTHH, e.g. {EXAMPLE}")
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    try:
        return np.datetime64(stamp.as_unit("ns").asm8, "ns")  # numpy would wrap a later date around silently
    except (ValueError, OverflowError):
        raise UserError(
            f"{what} {value!r} is outside the dates a datetime64[ns] time axis holds ({pd.Timestamp.min.date()} .. "
            f"{pd.Timestamp.max.date()})"
        ) from None


def parse_end(value, what: str = "end") -> np.datetime64:
    """The last instant of what ``value`` names, as the end of an inclusive period: a string naming a
    year, month, day, hour or minute (``2017``, ``2017-12``, ``2017-12-31``, ``2017-12-31T18``)
    means all of it, as ``.sel(time=slice(start, "2017-12-31"))`` selects every time of Dec 31 (and
    as WeatherBench2's periods are written); seconds, a time zone or a datetime are exact.
    (Quarters, ``2017Q4``, are not offered: pandas 3 reads them with a deprecation warning.)

    Raises:
        ValueError: ``value`` is not a time (:func:`parse_time`).
    """
    time = parse_time(value, what)
    if not isinstance(value, str) or pd.Timestamp(value).tzinfo is not None:  # Period would drop the zone
        return time
    try:
        period = pd.Period(value)
    except (ValueError, TypeError, OverflowError):
        return time
    # by type: the names changed in pandas 2.2 ("A-DEC", "H", "T" before), and a name not matched made
    # `end: 2017` its first instant alone
    if not isinstance(period.freq, YearEnd | MonthEnd | Day | Hour | Minute):
        return time  # seconds and below: the instant itself
    try:  # the nanosecond before the next period (Period.end_time stops at microseconds)
        return np.datetime64((period + 1).start_time.as_unit("ns").asm8, "ns") - np.timedelta64(1, "ns")
    except (ValueError, OverflowError):  # the next period is past what datetime64[ns] holds
        return time


def format_time(value) -> str:
    """A time for messages: ``2020-01-01T06``, with minutes or seconds only when they are not zero."""
    time = np.datetime64(value, "ns")
    if np.isnat(time):
        return "NaT"
    for unit in ("h", "m", "s", "ms", "us"):
        if time == time.astype(f"datetime64[{unit}]"):
            return str(np.datetime_as_string(time, unit=unit))
    return str(np.datetime_as_string(time, unit="ns"))


def format_times(values, limit: int = 5) -> str:
    """Up to ``limit`` times for messages, comma-separated, with how many more there are."""
    values = list(np.asarray(values).ravel())
    shown = ", ".join(format_time(value) for value in values[:limit])
    return shown if len(values) <= limit else f"{shown} and {len(values) - limit} more"


STANDARD_CALENDARS = ("standard", "gregorian", "proleptic_gregorian")  # ERA5's: what datetime64 holds


def cftime_problem(values, calendar=None) -> str | None:
    """Why time ``values`` that xarray left as cftime dates are not a datetime64 axis, for messages
    (``"... uses the calendar 'noleap' ..."``), or None when they are not cftime dates: a calendar
    other than the real-world one (climate models' noleap, 360_day), or real-world dates beyond
    what datetime64[ns] holds (before 1678 or after 2262).

    Args:
        values: the decoded time values (any shape).
        calendar: the coordinate's CF calendar, when known (else the values' own).
    """
    flat = np.asarray(values).ravel()
    first = flat[0] if flat.size else None
    calendar = calendar or getattr(first, "calendar", None)
    if first is None or calendar is None or np.issubdtype(flat.dtype, np.datetime64):
        return None
    if not hasattr(first, "year") and str(calendar).lower() in STANDARD_CALENDARS:
        return None  # numbers or strings that were not decoded: the caller's own message
    examples = ", ".join(str(value) for value in flat[:2])
    if str(calendar).lower() not in STANDARD_CALENDARS:
        return (
            f"uses the calendar {calendar!r} (times such as {examples}): s2forecast reads the real-world calendar "
            f"only ({', '.join(STANDARD_CALENDARS)}: ERA5's); convert the times to it"
        )
    # every value: times that start inside the range and run past 2262 are cftime dates too
    outside = [value for value in flat if not pd.Timestamp.min.year < value.year < pd.Timestamp.max.year]
    if outside:
        return (
            f"holds dates such as {', '.join(str(value) for value in outside[:2])}, outside the dates a datetime64[ns] "
            f"time axis holds ({pd.Timestamp.min.date()} .. {pd.Timestamp.max.date()})"
        )
    return (
        f"holds cftime dates of the real-world calendar (times such as {examples}): s2forecast reads datetime64 "
        "times; open the data without use_cftime=True, or convert them (ds.convert_calendar('standard', "
        "use_cftime=False))"
    )


LAST_TIME = np.datetime64(np.iinfo(np.int64).max, "ns")  # 2262-04-11T23:47:16.854775807
YEAR_NS = 365.25 * 86400e9


def check_span(start, span_ns: int, what: str, fix: str) -> None:
    """Refuse times that ``datetime64[ns]`` cannot hold, before any array of them is made: ``start``
    plus ``span_ns`` nanoseconds (a Python int: no overflow) past ``LAST_TIME``.

    Args:
        what: what spans them, e.g. "--steps 1000000000000 of 1 h"; fix: how to stay inside.
    """
    first = int(np.datetime64(start, "ns").astype(np.int64))
    if first + span_ns > int(LAST_TIME.astype(np.int64)):
        raise UserError(
            f"{what} span {span_ns / YEAR_NS:.3g} years from {format_time(start)}, past "
            f"{LAST_TIME.astype('datetime64[D]')} (the last date a datetime64[ns] time axis holds); {fix}"
        )
