"""Times as users write them and as messages show them.

``parse_time`` reads a time given on the command line (ISO 8601 or anything pandas reads,
e.g. ``2020-01-01``, ``2020-01-01T06``, ``2020-01-01 06:00``); ``format_time`` writes a
``datetime64`` the short ISO way (``2020-01-01T06``) so that messages never show
nanoseconds since 1970 or trailing ``:00.000000000``.
"""

import numpy as np
import pandas as pd

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
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        stamp = pd.NaT
    if pd.isna(stamp):
        raise UserError(f"{what} {value!r} is not a time; write it as YYYY-MM-DD or YYYY-MM-DDTHH, e.g. {EXAMPLE}")
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    return np.datetime64(stamp.asm8, "ns")


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
