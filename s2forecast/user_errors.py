"""Which exceptions are the user's, and the one line the ``s2forecast`` command prints for them.

``UserError`` is raised on purpose wherever s2forecast checks its input (a value, path, file or
configuration) and finds it bad; its message names the bad value and how to fix it. The
command prints it as ``s2forecast COMMAND: error: <one line>`` with exit status 2
(``--debug`` also prints the traceback).

A few failures raised by other libraries also mean bad input, and are reported the same way
(``user_error_message``):

- ``OSError`` (``FileNotFoundError``, ``PermissionError``, a full disk, ...): a path or file;
- Lightning's ``MisconfigurationException``, a ``ValueError`` raised inside Lightning or
  jsonargparse while a configuration is built, argparse's ``ArgumentError``: bad options;
- ``ModuleNotFoundError`` for a package other than s2forecast: an optional dependency an
  option needs (``--trainer.accelerator tpu`` without torch_xla, cfgrib for GRIB files);
- ``FloatingPointError``: a computation the user's settings make diverge (the SWE solver);
- a read from a URL that failed part-way (aiohttp's HTTP errors, a reset, a timeout): the
  server's or the network's failure, said with the URL and "rerun";
- running out of memory (``MemoryError``, torch's ``OutOfMemoryError`` or allocator error):
  a smaller grid or batch fixes it;
- files that cannot be decoded: ``EOFError``, ``pickle.UnpicklingError`` (also torch's
  refusal to load code from a checkpoint), what torch's checkpoint loader raises on garbage
  (``KeyError``, ``IndexError``, ``RuntimeError``, ``struct.error``), and ``KeyError``,
  ``ValueError`` or ``RuntimeError`` raised inside a library while it reads a file or looks
  data up in it (``READERS``: zarr, numcodecs, netCDF4, h5py, xarray, pandas, ...).

Everything else is a bug, in s2forecast or below it: the command prints the traceback and
asks for a report (``BUG_REPORT``). That includes a plain ``ValueError`` raised by s2forecast
itself: a check that meant the user must raise ``UserError``.
"""

import argparse
import pickle
import re
import struct

# where an error means "this file is not what it should be": torch's checkpoint loader on garbage,
# and a KeyError / RuntimeError of the libraries that read data files
CHECKPOINT_READERS = ("torch.serialization", "torch._weights_only_unpickler", "pickle", "_pickle")
CHECKPOINT_GARBAGE = (LookupError, RuntimeError, EOFError, struct.error)
READERS = ("zarr", "numcodecs", "netCDF4", "h5py", "h5netcdf", "xarray", "pandas", "cfgrib", "gribapi", "eccodes")
USER_ERRORS = (OSError, argparse.ArgumentError, FloatingPointError)
# libraries that build the Lightning commands from the user's configuration: a ValueError they raise is a bad option
CONFIG_BUILDERS = ("pytorch_lightning", "lightning_fabric", "lightning", "jsonargparse", "torchmetrics")
# the failures of a read from a URL part-way (aiohttp under fsspec's HTTP, gcsfs; s3fs's botocore)
REMOTE_ERRORS = ("ClientError", "ClientResponseError", "ClientConnectionError", "ClientPayloadError",
                 "ServerDisconnectedError", "ServerTimeoutError", "HttpError", "EndpointConnectionError")  # fmt: skip
REMOTE_READERS = ("aiohttp", "fsspec", "gcsfs", "s3fs", "adlfs", "botocore", "aiobotocore")
BUG_REPORT = (
    "this is a bug in s2forecast, not in your input: please report it with the command line and the traceback "
    "above to the s2forecast developers (an issue in the s2forecast repository)"
)


class UserError(ValueError):
    """Bad input (a value, path, file or configuration), raised on purpose where it is checked.

    The message is one line that names the bad value and how to fix it. A ``ValueError`` so that
    callers of the library that catch ``ValueError`` keep working.
    """


# third-party messages that do not say what is wrong, and what to say instead
XARRAY_NO_BACKEND = re.compile(r"did not find a match in any of xarray's currently installed IO backends.*", re.S)
NOT_READABLE = "not a NetCDF or zarr file (empty, truncated, or another format)"


def user_error_message(error: BaseException) -> str | None:
    """One line describing ``error`` if it is a user error (module docstring), else None."""
    kind = type(error).__name__
    if remote := _remote_read_message(error):
        return remote
    if isinstance(error, pickle.UnpicklingError):
        return _unpickling_message(error)
    if isinstance(error, LookupError | RuntimeError | EOFError | struct.error) and _raised_in(
        error, CHECKPOINT_READERS
    ):
        reason = one_line(_text(error)) or "unexpected end of file"
        return f"not a readable checkpoint ({kind}: {reason}): is the file truncated, or not a checkpoint?"
    if isinstance(error, EOFError):
        return f"unexpected end of a file ({one_line(str(error)) or kind}): is an input empty or truncated?"
    if memory := _out_of_memory_message(error):
        return memory
    if isinstance(error, ModuleNotFoundError) and not (error.name or "").startswith("s2forecast"):
        return f"{one_line(str(error))} (an optional dependency: install it, or choose an option that does not need it)"
    if isinstance(error, UserError) or _is_misconfiguration(error) or isinstance(error, USER_ERRORS):
        return _known_message(error) or one_line(_text(error)) or kind
    if isinstance(error, ValueError) and _raised_in(error, CONFIG_BUILDERS):
        return _known_message(error) or one_line(_text(error)) or kind
    if isinstance(error, KeyError | ValueError | RuntimeError) and _raised_in(error, READERS):
        reason = one_line(_text(error)) or kind
        return f"cannot read the input data ({kind}: {reason}): is a file truncated, damaged or of another kind?"
    return None


def _remote_read_message(error: BaseException) -> str | None:
    """A read of a store at a URL that failed part-way (an HTTP error on one chunk, a reset, a
    timeout): the server's or the network's failure, not a bug and not the user's input. aiohttp's
    ``ClientError`` is no ``OSError``; from a DataLoader worker it comes back as torch's
    ``RuntimeError("Caught ClientResponseError in DataLoader worker ...")``."""
    names = {cls.__name__ for cls in type(error).__mro__}
    text = _text(error)
    worker = re.match(r"Caught (\w+) in DataLoader worker", text) if "\nOriginal Traceback" in text else None
    if worker:
        remote = worker[1] in REMOTE_ERRORS or (
            worker[1] in ("TimeoutError", "ConnectionResetError", "ConnectionError") and "/aiohttp/" in text
        )
        reason = _worker_message(text) or worker[1]
    else:
        remote = bool(names & set(REMOTE_ERRORS)) or (
            isinstance(error, TimeoutError | ConnectionError) and _raised_in(error, REMOTE_READERS, innermost=False)
        )
        reason = one_line(text) or type(error).__name__
    if not remote:
        return None
    status = getattr(error, "status", None)
    found = re.match(r"(\d{3}), message='([^']*)', url='([^']*)'", reason)  # aiohttp's ClientResponseError
    if found:
        status, reason, url = int(found[1]), found[2], found[3]
        where = f"reading {url} failed: HTTP {status} {reason}"
    else:
        where = f"reading a store at a URL failed: {reason}"
    if status in (401, 403):
        return f"{where}; access denied: pass credentials with --storage-options"
    return f"{where}; the server or the network failed part-way: rerun the command"


def one_line(message: str) -> str:
    """The first line of ``message`` (and the next one when the first only introduces it)."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def _text(error: BaseException) -> str:
    # str(KeyError('x')) is "'x'": show the message itself
    if isinstance(error, KeyError) and len(error.args) == 1 and isinstance(error.args[0], str):
        return error.args[0]
    return str(error)


def _known_message(error: BaseException) -> str | None:
    """Clearer words for third-party messages that do not say what is wrong."""
    text = _text(error)
    names = {cls.__name__ for cls in type(error).__mro__}
    if text.startswith("Caught ") and "\nOriginal Traceback" in text:
        # re-raised from a DataLoader worker with the worker's traceback: its last line is the message
        return _worker_message(text)
    if "GroupNotFoundError" in names or "NodeNotFoundError" in names:
        match = re.search(r"store '(?:file://)?([^']*)'", text)
        where = match.group(1) if match else "the path"
        return f"{where} is not a zarr store (no zarr group metadata in it); check the path"
    if "ContainsArrayError" in names:
        match = re.search(r"store (?:file://)?(\S+)", text)
        where = match.group(1) if match else "the path"
        return f"{where} is a single zarr array, not a store of variables; check the path"
    if XARRAY_NO_BACKEND.search(text):
        return one_line(XARRAY_NO_BACKEND.sub(NOT_READABLE, text))
    if "JSONDecodeError" in names and _raised_in(error, ("zarr",), innermost=False):
        return f"a zarr metadata file is not valid JSON ({one_line(text)}): the store is damaged or not a zarr store"
    return None


def _worker_message(text: str) -> str:
    """The message of an error a DataLoader worker raised, from torch's re-raised text: its last line,
    without the exception's class."""
    last = [line for line in text.splitlines() if line.strip()][-1]
    return re.sub(r"^[\w.]+: ", "", last.strip(), count=1)


def _unpickling_message(error: BaseException) -> str:
    # torch's message suggests weights_only=False, i.e. running code from the file: never pass that on
    match = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\.\s|\n|$)", str(error), re.S)
    reason = one_line(match.group(1)) if match else one_line(str(error))
    return (
        f"not a checkpoint that loads safely ({reason}); s2forecast loads only tensors and plain values from a "
        "checkpoint, never code"
    )


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is running out of (CPU or GPU) memory."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return "OutOfMemoryError" in names or isinstance(error, MemoryError) or "can't allocate memory" in str(error)


def _out_of_memory_message(error: BaseException) -> str | None:
    """One line for running out of (CPU or GPU) memory, which a smaller problem fixes."""
    text = str(error)
    if not is_out_of_memory(error):
        return None
    match = re.search(r"(?:tried to allocate|Tried to allocate) ([\d.]+) ?(bytes|[KMGT]i?B)", text)
    size = ""
    if match:
        amount = float(match[1]) / (2**30 if match[2] == "bytes" else 1)
        size = f" ({amount:.3g} GiB requested)" if match[2] == "bytes" else f" ({match[1]} {match[2]} requested)"
    return f"out of memory{size}: use a smaller grid, batch size or model"


def _is_misconfiguration(error: BaseException) -> bool:
    return any(cls.__name__ == "MisconfigurationException" for cls in type(error).__mro__)


def _raised_in(error: BaseException, modules: tuple[str, ...], innermost: bool = True) -> bool:
    """Whether the innermost frame of ``error``'s traceback (any frame unless ``innermost``) is in
    one of ``modules`` or their submodules."""
    names = []
    tb = error.__traceback__
    while tb is not None:
        names.append(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    names = names[-1:] if innermost else names
    return any(name == module or name.startswith(module + ".") for name in names for module in modules)
