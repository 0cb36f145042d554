"""argparse types of the ``s2forecast`` command: checked counts, sizes, times and devices.

Each type raises ``argparse.ArgumentTypeError``, which argparse reports in one line naming
the option and the value, e.g. ``argument --batch-size: must be an integer >= 1, got '0'``.
"""

import argparse
import math
import re

EXAMPLE = "2020-01-01T06"  # = s2forecast.times.EXAMPLE (times imports pandas, which --help must not wait for)


def _number(kind, minimum, strict: bool, what: str):
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not math.isfinite(value) or not (value > minimum if strict else value >= minimum):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return convert


positive_int = _number(int, 1, False, "an integer >= 1")
nonnegative_int = _number(int, 0, False, "an integer >= 0")
positive_float = _number(float, 0.0, True, "a number > 0")
nonnegative_float = _number(float, 0.0, False, "a number >= 0")
# the perturbations' MIN_SCALE: smaller noise is lost in float32 rounding
perturbation_scale = _number(float, 1e-6, False, "a finite number >= 1e-6 (in units of each channel's std)")
ensemble_members = _number(
    int, 2, False, "an integer >= 2 (an ensemble's members; leave --members out for one forecast)"
)


def timestamp(text: str) -> str:
    """A time, returned in the short ISO form (``2020-01-01T06``, UTC) that every reader parses."""
    try:
        from s2forecast.times import format_time, parse_time

        return format_time(parse_time(text))
    except ValueError as error:
        if "outside the dates" in str(error):  # a date, but one a time axis cannot hold: say so
            raise argparse.ArgumentTypeError(str(error).removeprefix("time ")) from None
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time; write it as YYYY-MM-DD or YYYY-MM-DDTHH, e.g. {EXAMPLE}"
        ) from None


def period_end(text: str) -> str:
    """The end of an inclusive period, checked and kept as written: ``2017-12-31`` is all of that day
    (``times.parse_end``; normalized as ``timestamp`` it would be its 00 h alone); with a time zone, the
    instant in UTC."""
    normalized = timestamp(text)
    import pandas as pd

    return normalized if pd.Timestamp(text).tzinfo is not None else text.strip()


def timestamps(text: str) -> list[str]:
    """Comma-separated times (``2020-01-01T00,2020-01-02T00``)."""
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated times such as {EXAMPLE},2020-01-02T06")
    return [timestamp(value) for value in values]


def device(text: str) -> str:
    """A torch device this machine has (``cpu``, ``cuda``, ``cuda:1``, ``mps``), or ``auto``
    (resolved when the command runs: ``resolve_device``)."""
    if text == "auto":
        return text
    from s2forecast.devices import check_device
    from s2forecast.user_errors import UserError

    try:
        return check_device(text)
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def json_object(text: str) -> dict:
    """A JSON object, e.g. fsspec storage options '{"token": "anon"}'. A bad one is described without
    its text: storage options hold credentials, and error lines end up in logs."""
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"must be a JSON object such as '{{\"token\": \"anon\"}}': {error.msg} at "
                                         f"character {error.pos} of {len(text)}") from None  # fmt: skip
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f'must be a JSON object such as \'{{"token": "anon"}}\', got a JSON {type(value).__name__}'
        )
    return value


def path_or_url(text: str):
    """A local path (``Path``) or a URL (kept as the string: ``Path`` would fold its "//")."""
    from pathlib import Path

    from s2forecast.urls import is_url

    return text if is_url(text) else Path(text).expanduser()  # "~/x" quoted, or after --opt=: the home directory


def local_output(text: str):
    """An output path (``Path``): never a URL, which every writer's write-beside-then-rename cannot do."""
    from pathlib import Path

    from s2forecast.urls import is_url

    if is_url(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a URL; s2forecast writes its outputs to local paths only: write to a local path and copy "
            "the result there"
        )
    return Path(text).expanduser()  # a quoted "~/out.nc" is the home directory, as the shell's would be


def resolve_device(text: str) -> str:
    """``auto`` -> "cuda" when there is a CUDA device, else "cpu"; any other device as it is."""
    if text != "auto":
        return text
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def storage_options(parser) -> None:
    """The ``--storage-options`` option of the commands that read stores."""
    parser.add_argument(
        "--storage-options", type=json_object, help='fsspec options of a URL, e.g. \'{"token": "anon"}\''
    )


# a dask scheduler's address: [PROTOCOL://]HOST:PORT (HOST may be [IPv6])
SCHEDULER = re.compile(r"^(?:(tcp|tls|ucx|ws|wss|inproc)://)?(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):(\d{1,5})$")


def scheduler_address(text: str) -> str:
    """A dask scheduler: ``tcp://HOST:PORT`` (``HOST:PORT``), or the JSON file of ``dask scheduler
    --scheduler-file`` (ending in .json)."""
    if text.endswith(".json") or (SCHEDULER.match(text) and 0 < int(SCHEDULER.match(text)[3]) < 65536):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a dask scheduler address; give tcp://HOST:PORT (e.g. tcp://node01:8786, what `dask "
        "scheduler` prints) or the JSON file of `dask scheduler --scheduler-file FILE.json`"
    )


def engine_options(parser) -> None:
    """``--scheduler`` and ``--workers``: where the commands that stream over stores run their work
    (``s2forecast.data.engine``; default this process)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--scheduler", type=scheduler_address, metavar="ADDRESS",
        help="run the work on the workers of a running dask.distributed scheduler: tcp://HOST:8786, or the JSON "
        "file of `dask scheduler --scheduler-file` (needs s2forecast[distributed]; the workers must see the same "
        "files)",
    )  # fmt: skip
    group.add_argument(
        "--workers", type=positive_int, metavar="N",
        help="run the work on a local dask.distributed cluster of N worker processes (needs s2forecast[distributed])",
    )  # fmt: skip


def engine(args, paths: tuple[str, ...] = ()):
    """The ``Engine`` of ``--scheduler`` / ``--workers`` (this process without either).

    With ``--scheduler``, the local paths among the arguments named ``paths`` become absolute first:
    workers started elsewhere (``dask worker`` under srun) would resolve a relative path against
    their own working directory.
    """
    import os

    from s2forecast.data.engine import Engine
    from s2forecast.urls import is_url

    if args.scheduler is not None:

        def absolute(value):
            return value if is_url(value) else type(value)(os.path.abspath(os.path.expanduser(value)))

        for name in paths:
            value = getattr(args, name)
            if isinstance(value, list):
                setattr(args, name, [absolute(v) for v in value])
            elif value is not None:
                setattr(args, name, absolute(value))
    return Engine(scheduler=args.scheduler, workers=args.workers)


_NEGATIVE_LIST = re.compile(r"^-\.?\d[^=]*,")  # "-45,-12.5,120,175": numbers, not an option


def attach_negative_lists(argv: list[str], option: str) -> list[str]:
    """``argv`` with each value of the list option ``option`` (nargs="+", action="extend") that starts
    with a minus sign written ``OPTION=VALUE``: argparse takes ``-45,-12.5,120,175`` for an option
    and refuses it, and ``OPTION=VALUE`` takes one value (``OPTION`` is repeated before the values
    that follow it)."""
    out, inside, attached = [], False, False
    for arg in argv:
        if arg == "--":
            inside = False
        elif arg == option or arg.startswith(option + "="):
            inside, attached = True, arg != option
        elif inside and _NEGATIVE_LIST.match(arg):
            if out and out[-1] == option:  # a bare OPTION would be left without a value
                out.pop()
            out.append(f"{option}={arg}")
            attached = True
            continue
        elif inside and not arg.startswith("-"):
            if attached:
                out.append(option)
            attached = False
        else:
            inside = False
        out.append(arg)
    return out
