"""What every output records about how it was made: its inputs and the command line.

Inputs are recorded as given, so that they can be found again: a URL as given (``https://...``,
``gs://...``; resolving it as a path would make ``/cwd/https:/host/x.zarr``) but without a
password or query string, a local path resolved (absolute, symbolic links followed). The command
line is the one the user typed, ``s2forecast COMMAND ...`` shell-quoted, the values of
``--storage-options`` hidden (outputs get shared; credentials must not), which ``s2forecast.cli``
sets for the command it runs (``command``; a script may set its own); a Python call records itself
instead (``python_call``).
Outputs carry it in their CF ``history`` attribute: one line per step, each starting with a
UTC timestamp, appended to the input's history where the output derives from one input.
"""

import contextlib
import contextvars
import datetime
import os
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path

from s2forecast.urls import is_url, redact, redact_argv

_COMMAND: contextvars.ContextVar[str | None] = contextvars.ContextVar("s2forecast_command", default=None)


def describe_input(source) -> str:
    """``source`` as an output records it: a URL as given but without its secrets (``redact``), a
    local path absolute and resolved."""
    if is_url(source):
        return redact(source)
    return str(Path(source).expanduser().resolve())


@contextlib.contextmanager
def command(argv: Sequence[str]) -> Iterator[None]:
    """Within the block, ``command_line()`` is ``argv`` (the program, then its arguments as typed),
    shell-quoted, without secrets: URLs redacted, the values of storage options hidden (``redact_argv``)."""
    token = _COMMAND.set(shlex.join(redact_argv(list(argv))))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def command_line() -> str | None:
    """The command line of the ``s2forecast`` command running in this context; None from Python."""
    return _COMMAND.get()


def history_line(python_call: str) -> str:
    """A CF ``history`` line: the UTC time and the command line, or ``python_call`` (e.g.
    ``compute_stats('/data/x.zarr') (Python)``) when no ``s2forecast`` command runs."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{stamp} {command_line() or python_call}"


def history(python_call: str, previous: str | None = None) -> str:
    """``previous`` history (an input's), if any, then this step's ``history_line``."""
    line = history_line(python_call)
    return f"{previous.rstrip()}\n{line}" if previous else line


def python_call(function: str, *inputs: str | os.PathLike) -> str:
    """How a Python call that made an output is recorded: ``function('/abs/input', ...) (Python)``."""
    return f"{function}({', '.join(repr(describe_input(source)) for source in inputs)}) (Python)"
