"""The ``--help`` of ``s2forecast fit | validate | test``, rendered once and cached.

LightningCLI builds that help from the signatures of the model, the DataModules and the
Trainer, so it needs torch, Lightning and the model classes: seconds of imports before any
output. The rendered text depends only on the installed versions and on s2forecast's own source,
so it is kept in a file that s2forecast writes and owns::

    $XDG_CACHE_HOME/s2forecast/help/COMMAND.txt      (default ~/.cache/s2forecast/help/)

Its first line is a key: s2forecast's version, the versions of Python, torch, pytorch-lightning
and jsonargparse, a SHA-256 of every ``.py`` file of the package, and the terminal width. A file
whose key differs is stale and is rendered again (the slow way) and replaced. Only a bare
``s2forecast COMMAND --help`` (or ``-h``) is answered from the cache; anything else on the line
goes to LightningCLI. When the cache directory cannot be written the help is still printed.
"""

import contextlib
import hashlib
import io
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

import s2forecast

HELP_FLAGS = ("-h", "--help")
KEY_PREFIX = "s2forecast-help-cache "
VERSIONED = ("torch", "pytorch-lightning", "jsonargparse")


def is_plain_help(argv: list[str]) -> bool:
    """Whether ``argv`` (``COMMAND ...``) only asks for the command's help."""
    return len(argv) == 2 and argv[1] in HELP_FLAGS


def cache_file(command: str) -> Path:
    """Where the help of ``command`` is cached."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or "")
    if not root.is_absolute():  # unset, empty or relative: the XDG spec says to use the default
        root = Path.home() / ".cache"
    return root / "s2forecast" / "help" / f"{command}.txt"


def cache_key(command: str) -> str:
    """What the rendered help of ``command`` depends on (module docstring), as one line."""
    digest = hashlib.sha256()
    package = Path(s2forecast.__file__).parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    versions = []
    for name in VERSIONED:
        try:
            versions.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}=none")
    width = shutil.get_terminal_size().columns
    python = ".".join(map(str, sys.version_info[:3]))
    parts = [f"s2forecast={s2forecast.__version__}", f"python={python}", *versions, digest.hexdigest()]
    return f"{KEY_PREFIX}{command} {' '.join(parts)} columns={width}"


def cached_help(command: str) -> str | None:
    """The cached help of ``command``, or None when there is none or it is stale."""
    try:
        key, _, text = cache_file(command).read_text(encoding="utf-8").partition("\n")
    except (OSError, UnicodeDecodeError):
        return None
    return text if key == cache_key(command) else None


def render_help(command: str) -> str:
    """LightningCLI's help of ``command`` (the slow way: imports the training stack)."""
    from s2forecast.training.cli import run

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        try:
            run([command, "--help"])
        except SystemExit as exit:
            if exit.code not in (0, None):
                raise
    return stdout.getvalue()


def store_help(command: str, text: str) -> None:
    """Write the cache file (atomically: a concurrent reader sees the old file or the new one).
    A cache that cannot be written is no error: the next call renders the help again."""
    path = cache_file(command)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(f"{cache_key(command)}\n{text}", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def print_help(command: str) -> None:
    """Print the help of ``command``: from the cache, else rendered (and cached for next time)."""
    text = cached_help(command)
    if text is None:
        sys.stderr.write(
            f"s2forecast {command}: building this help once (loads torch and Lightning); "
            f"later calls read it from {cache_file(command)}\n"
        )
        text = render_help(command)
        store_help(command, text)
    sys.stdout.write(text)
    sys.stdout.flush()


def warm(commands: list[str]) -> None:
    """Render and cache the help of ``commands`` that is missing or stale (``make install``
    does it once, so that the user's first ``--help`` is as quick as the next ones)."""
    for command in commands:
        if cached_help(command) is None:
            store_help(command, render_help(command))


if __name__ == "__main__":
    warm(sys.argv[1:] or ["fit", "validate", "test"])
