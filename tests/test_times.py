"""``s2forecast.times``: the end of an inclusive period, as users write it."""

import datetime
import re

import numpy as np
import pytest

from s2forecast.times import parse_end, parse_time


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2017", "2017-12-31T23:59:59.999999999"),
        ("2016-02", "2016-02-29T23:59:59.999999999"),  # a leap year's February
        ("2017-12-31", "2017-12-31T23:59:59.999999999"),
        ("20171231", "2017-12-31T23:59:59.999999999"),
        ("2017-12-31T18", "2017-12-31T18:59:59.999999999"),
        ("2017-12-31 18:00", "2017-12-31T18:00:59.999999999"),
        ("2017-12-31T18:00:00", "2017-12-31T18:00:00"),  # seconds: the instant
        ("2017-12-31T18:00+02:00", "2017-12-31T16:00"),  # a time zone: the instant, in UTC
        (np.datetime64("2017-12-31"), "2017-12-31T00:00"),  # not a string: the instant
        (datetime.date(2017, 12, 31), "2017-12-31T00:00"),
        ("2262-04-11", "2262-04-11T00:00"),  # the next day is past datetime64[ns]: the day's start
    ],
)
def test_an_end_names_the_last_instant_of_the_period_it_writes(value, expected):
    assert parse_end(value) == np.datetime64(expected, "ns")


def test_an_end_that_is_not_a_time_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"--end 'someday' is not a time; write it as YYYY-MM-DD"):
        parse_end("someday", "--end")


@pytest.mark.parametrize("value", [5, 2017, 2017.0, True, np.int64(2017)])
def test_a_number_is_not_a_time(value):
    """pandas reads 5 as 5 ns after 1970 (and an unquoted YAML 2017 is a number): taken for 1970-01-01."""
    with pytest.raises(ValueError, match=rf"^initialization time {re.escape(repr(value))} is not a time; write it as"):
        parse_time(value, "initialization time")
