"""The ``--help`` of ``s2forecast fit | validate | test``, rendered once and cached.

LightningCLI builds that help from the signatures of the model, the DataModules and the
Trainer, so it needs torch, Lightning and the model classes: seconds of imports before any
output. The rendered text depends only on the installed versions and on s2forecast's own source,
so it is kept in a file that s2forecast writes and owns::

    $XDG_CACHE_HOME/s2forecast/help/COMMAND-KEYHASH.txt      (default ~/.cache/s2forecast/help/)

Its first line is a key: s2forecast's version, the versions of Python, torch, pytorch-lightning
and jsonargparse, jsonargparse's ``JSONARGPARSE_*`` settings, a SHA-256 of every ``.py`` file of
the package, and the terminal width; the file
is named by a hash of it, so each width (a terminal's, a pipe's) and each install has its own, the
``KEPT`` newest of a command kept. A file whose key differs is stale and is rendered again (the
slow way). Only a bare
``s2forecast COMMAND --help`` (or ``-h``) is answered from the cache; anything else on the line
goes to LightningCLI. When the cache directory cannot be written the help is still printed.

The cache is trusted only as far as it must be (issue 29): its directory must be a real directory
(not a symlink) owned by the user that group and others cannot write to (s2forecast creates it
0700); any other is not used at all, and the help is rendered without the cache. A file is
written under a random name created exclusively (``O_EXCL``) and renamed into place, so nothing
planted in the directory is written through. The key line also holds a SHA-256 of the text
below it: a file whose text does not match is stale. Whatever is printed, rendered or read, has
its terminal control characters (escape sequences included) removed: help is plain text.
"""

import contextlib
import hashlib
import io
import os
import re
import secrets
import shutil
import stat
import sys
from importlib import metadata
from pathlib import Path

import s2forecast

HELP_FLAGS = ("-h", "--help")
KEY_PREFIX = "s2forecast-help-cache "
KEPT = 8  # cache files kept per command (widths, versions, installs)
VERSIONED = ("torch", "pytorch-lightning", "jsonargparse")
# C0 controls but tab and newline, DEL and C1 controls (CSI, OSC, ... of terminal escapes)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def is_plain_help(argv: list[str]) -> bool:
    """Whether ``argv`` (``COMMAND ...``) only asks for the command's help."""
    return len(argv) == 2 and argv[1] in HELP_FLAGS


def cache_file(command: str, key: str | None = None) -> Path:
    """Where the help of ``command`` is cached: a file per cache key (``key``, default this one's).
    One file for all made a terminal's width and a pipe's (80 columns), or two installs sharing
    ~/.cache, evict each other: 8 s a help instead of 0.15. (Only its name, without a cache directory.)"""
    name = hashlib.sha256((key or cache_key(command)).encode()).hexdigest()[:16]
    return (cache_dir() or Path()) / f"{command}-{name}.txt"


def cache_dir() -> Path | None:
    """The directory of the cached help (no key needed: reading the source for one costs 7 ms); None
    without one: no XDG_CACHE_HOME and no home directory (HOME unset and a user without a passwd
    entry, as in some containers)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or "")
    if not root.is_absolute():  # unset, empty or relative: the XDG spec says to use the default
        try:
            root = Path.home() / ".cache"
        except (RuntimeError, KeyError):
            return None
    return root / "s2forecast" / "help"


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
    # jsonargparse's own settings (JSONARGPARSE_DEFAULT_ENV adds each option's variable to the help)
    settings = sorted(f"{name}={value}" for name, value in os.environ.items() if name.startswith("JSONARGPARSE_"))
    parts = [f"s2forecast={s2forecast.__version__}", f"python={python}", *versions, *settings, digest.hexdigest()]
    return f"{KEY_PREFIX}{command} {' '.join(parts)} columns={width}"


def plain_text(text: str) -> str:
    """``text`` without terminal control characters: an escape sequence loses its ESC (or CSI)
    and is printed as harmless characters."""
    return CONTROL.sub("", text)


def is_private(info: os.stat_result) -> bool:
    """Whether ``info`` is of a directory owned by this user that neither group nor others can
    write to: nobody else can plant, swap or remove files in it. (Reading is harmless: the help
    is public. s2forecast makes it 0700; one an earlier version made 0755 stays usable.)"""
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


@contextlib.contextmanager
def private_directory(command: str, create: bool = False):
    """A descriptor of the cache's directory, or None when it is missing or not private
    (``is_private``; a symlink is not followed). With ``create`` a missing one is made 0700.
    Files are opened relative to the descriptor, so the directory checked is the one used."""
    directory = cache_dir()
    if directory is None:
        yield None
        return
    if create and not os.path.lexists(directory):
        with contextlib.suppress(OSError):
            directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            directory.mkdir(mode=0o700)
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        yield None
        return
    try:
        yield descriptor if is_private(os.fstat(descriptor)) else None
    finally:
        os.close(descriptor)


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cached_help(command: str) -> str | None:
    """The cached help of ``command``, or None when there is none, it is stale, its text does
    not match the digest on its key line, or the cache directory is not private."""
    wanted = cache_key(command)
    with private_directory(command) as directory:
        if directory is None:
            return None
        try:
            descriptor = os.open(cache_file(command, wanted).name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
            with os.fdopen(descriptor, encoding="utf-8") as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    return None
                first, _, text = file.read().partition("\n")
        except (OSError, UnicodeDecodeError):
            return None
    key, _, digest = first.rpartition(" sha256=")
    if key != wanted or digest != text_digest(text):
        return None
    return plain_text(text)


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
    return plain_text(stdout.getvalue())


def store_help(command: str, text: str) -> bool:
    """Write the cache file: under a new random name, created exclusively (``O_EXCL``, 0600, no
    symlink followed) in the private directory, then renamed over the old file, so a concurrent
    reader sees the old file or the new one. A cache that cannot be written is no error: the
    next call renders the help again. Whether it was written."""
    key = cache_key(command)
    name = cache_file(command, key).name
    with private_directory(command, create=True) as directory:
        if directory is None:
            return False
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        try:
            descriptor = os.open(tmp, flags, 0o600, dir_fd=directory)
        except OSError:
            return False
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(f"{key} sha256={text_digest(text)}\n{text}")
            os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=directory)
            return False
        prune(command, directory)
        return True


def prune(command: str, directory: int) -> None:
    """Keep the ``KEPT`` newest cache files of ``command`` (other widths', versions' and installs'), and
    remove the single ``COMMAND.txt`` of versions before the file per key, when its key line says so."""
    with contextlib.suppress(OSError):
        names = [n for n in os.listdir(directory) if re.fullmatch(rf"{re.escape(command)}-[0-9a-f]{{16}}\.txt", n)]
        for old in sorted(names, key=lambda n: os.stat(n, dir_fd=directory, follow_symlinks=False).st_mtime_ns)[:-KEPT]:
            os.unlink(old, dir_fd=directory)
    with contextlib.suppress(OSError):
        descriptor = os.open(f"{command}.txt", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
        with os.fdopen(descriptor, "rb") as file:
            first = file.readline(4096)
        if first.startswith(f"{KEY_PREFIX}{command} ".encode()):
            os.unlink(f"{command}.txt", dir_fd=directory)


def print_help(command: str) -> None:
    """Print the help of ``command``: from the cache, else rendered (and cached for next time)."""
    text = cached_help(command)
    if text is None:
        directory = cache_dir()
        building = f"s2forecast {command}: building this help (loads torch and Lightning)"
        with private_directory(command, create=True) as usable_directory:
            cacheable = usable_directory is not None
        if directory is None:
            sys.stderr.write(f"{building} without its cache: no home directory; set XDG_CACHE_HOME to cache it\n")
        elif os.path.lexists(directory) and not cacheable:
            sys.stderr.write(
                f"{building} without its cache: {directory} is not a directory of yours that only you can write to "
                "(chmod 700 it, or remove it)\n"
            )
        elif not cacheable:
            sys.stderr.write(f"{building} without its cache: {directory} cannot be created; set XDG_CACHE_HOME\n")
        else:
            sys.stderr.write(
                f"s2forecast {command}: building this help once (loads torch and Lightning); later calls read it from "
                f"{cache_file(command)}\n"
            )
        text = render_help(command)
        if cacheable and not store_help(command, text):  # a read-only cache: every call said "once"
            sys.stderr.write(f"s2forecast {command}: could not write {cache_file(command)}; the next call builds it\n")
    sys.stdout.write(plain_text(text))
    sys.stdout.flush()


def warm(commands: list[str]) -> None:
    """Render and cache the help of ``commands`` that is missing or stale (``make install``
    does it once, so that the user's first ``--help`` is as quick as the next ones)."""
    for command in commands:
        if cached_help(command) is None:
            store_help(command, render_help(command))


if __name__ == "__main__":
    warm(sys.argv[1:] or ["fit", "validate", "test"])
