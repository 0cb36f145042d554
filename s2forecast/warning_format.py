"""How warnings are printed by the ``s2forecast`` command: s2forecast's own as one line."""

import contextlib
import re
import warnings
from pathlib import Path

from s2forecast.urls import redact

_REINSTALL: list = []  # how the one_line_warnings context in effect puts its format back


@contextlib.contextmanager
def one_line_warnings(command: str | None):
    """s2forecast's own warnings as one line, ``s2forecast COMMAND: warning: ...``: Python's format
    adds the file, line number and source line of the ``warnings.warn`` call, which say nothing
    to a user. Other libraries' warnings keep their format (Lightning's resume warning excepted:
    said in one line). (Only the format changes: what records warnings, e.g. ``pytest.warns``, still
    records them.) A library that replaces the format when it is imported (Lightning does) is put
    behind ours again by ``keep_one_line_warnings``."""
    original = warnings.formatwarning
    delegate = [original]  # the format of other libraries' warnings
    inside = [False]  # formatting through the delegate now
    package = Path(__file__).resolve().parent

    def formatwarning(message, category, filename, lineno, line=None):
        moved = re.match(r"The dirpath has changed from (.+) to (.+), therefore", str(message))
        if moved:  # Lightning's, at every resume: what it means here, in one line
            message = (
                f"resumed from a checkpoint in {moved[1]}; this run writes its checkpoints to {moved[2]} and "
                "tracks its best one (best-*.ckpt) anew there: the earlier run's stay where they are"
            )
        if (
            moved
            or category.__module__.split(".")[0] == "s2forecast"
            or Path(filename).resolve().is_relative_to(package)
        ):
            return f"s2forecast {command}: warning: {redact(str(message))}\n".replace("s2forecast None:", "s2forecast:")
        if inside[0]:  # the delegate calls back the format it replaced, ours (Lightning's does): Python's
            return original(message, category, filename, lineno, line)
        inside[0] = True
        try:
            return delegate[0](message, category, filename, lineno, line)
        finally:
            inside[0] = False

    def reinstall() -> None:
        if warnings.formatwarning is not formatwarning:
            delegate[0], warnings.formatwarning = warnings.formatwarning, formatwarning

    warnings.formatwarning = formatwarning
    _REINSTALL.append(reinstall)
    try:
        yield
    finally:
        _REINSTALL.remove(reinstall)
        warnings.formatwarning = original


def keep_one_line_warnings() -> None:
    """Put the one-line format of the ``one_line_warnings`` context in effect (if any) back in front,
    after an import replaced ``warnings.formatwarning`` (``lightning_fabric.utilities.warnings`` does)."""
    if _REINSTALL:
        _REINSTALL[-1]()
