"""The output policy: what every s2forecast command that writes may replace, and how it writes.

Every command that writes (rollout, climatology, evaluate and its CSV and plots, stats,
convert-era5, generate-swe) claims its output through ``Output`` before it does any work:

1. An output is never one of the command's inputs, never inside one and never holds one
   (paths compared after resolving symbolic links, files also by inode), never the current
   directory or one of its parents, and never a symbolic link.
2. An existing path is replaced only with ``--overwrite``, and even then only when s2forecast
   wrote it, recognised by its marker (``written_by_s2forecast``), and it is an output of the
   kind the command writes (the marker's value, ``artifact_kind``: a rollout never replaces a
   store, a climatology or metrics):

   - zarr (stores, forecasts, climatologies, a store's ``stats`` group): root attribute
     ``s2forecast_artifact``, and nothing at any level but zarr nodes, metadata and chunks;
   - NetCDF (forecasts, metrics): global attribute ``s2forecast_artifact``;
   - plain directories (plots): a ``.s2forecast-artifact.json`` file listing every file in it.

   A foreign file or directory is never replaced, with or without ``--overwrite``, nor an
   output of another kind.
3. The output is written under a temporary sibling ``.NAME.s2forecast-tmp-PID-HOST`` and
   renamed into place when complete, so a crash never leaves a half-written ``NAME``; an
   artifact being replaced is first renamed to ``.NAME.s2forecast-old-PID-HOST``. While it
   writes, the run holds an flock on ``.NAME.s2forecast-lock-PID-HOST``. The next run on the
   same path removes the leftovers of a killed run (its PID no longer alive on this host and
   its lock free: a live run in another PID namespace, a container sharing the host name, holds
   it) and puts back an old artifact (one s2forecast wrote) whose replacement never arrived.

Every artifact also carries ``s2forecast_generation``, a fresh id per write. Long readers
record the generation of their inputs when they open them and call ``check_unchanged``
before they write: an input rewritten during the read fails the run instead of mixing two
datasets.

Light on purpose (standard library; netCDF4 only to read a NetCDF file's attributes): the
evaluation code imports it without the training stack.
"""

import errno
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath

from s2forecast.urls import is_url
from s2forecast.user_errors import UserError

FORECAST_SUFFIXES = {".zarr": "zarr", ".nc": "netcdf", ".nc4": "netcdf", ".netcdf": "netcdf"}


def output_format(out, fmt: str | None) -> str:
    """The format of a forecast at ``out``: ``fmt`` (``--format``) when given, else its suffix's (.zarr:
    zarr, else netcdf): ``rollout(..., out="f.zarr")`` wrote NetCDF under that name.

    Raises:
        UserError: ``--format`` contradicts the suffix (``--format zarr --out x.nc``).
    """
    implied = FORECAST_SUFFIXES.get(PurePath(out).suffix.lower())
    if fmt is not None and implied is not None and fmt != implied:
        other = next(suffix for suffix, kind in FORECAST_SUFFIXES.items() if kind == fmt)
        raise UserError(
            f"--format {fmt} with --out {out}, a name for {implied}: give --out a {other} name, or --format {implied}"
        )
    return fmt or implied or "netcdf"


MARKER_ATTR = "s2forecast_artifact"
# the zarr nodes (arrays, groups; paths from the root) a zarr artifact held when written: a node added
# later (xarray's to_zarr(mode="a"), zarr's create_array, another command's store) is not s2forecast's
NODES_ATTR = "s2forecast_nodes"
# the one artifact kept inside another: a store's statistics group, at the root under this name, judged by
# its own marker
NESTED_KIND = "stats"
GENERATION_ATTR = "s2forecast_generation"
MARKER_FILE = ".s2forecast-artifact.json"
# written by s2forecast before the marker existed: stores (StoreWriter) and their stats groups
_LEGACY_STORE_ATTR = "s2forecast_signature"
_LEGACY_STATS_WEIGHTS = "WeatherBench2 cell areas"
# each kind of artifact (the marker's value): what it is and the command that writes it, for messages
KINDS = {
    "forecast": ("a forecast", "rollout"),
    "climatology": ("a climatology", "climatology"),
    "metrics": ("evaluation metrics", "evaluate"),
    "plots": ("evaluation plots", "evaluate"),
    "store": ("a data store", "convert-era5 or generate-swe"),
    "stats": ("normalization statistics", "stats"),
}
_SIBLING = ".s2forecast-"
try:
    import fcntl  # noqa: F401 (whether flock tells live runs: POSIX)

    _HAS_FLOCK = True
except ImportError:
    _HAS_FLOCK = False
_SIBLING_NAME = re.compile(r"^\..+\.s2forecast-(tmp|old|lock)-\d+-[^/]+$")  # exactly ``sibling``'s names
_ZARR_METADATA = ("zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata")
_CHUNK_KEY = re.compile(r"^(c|\d+)([.]\d+)*$")  # a chunk (or shard) file: c.0.0 / 0.0.0 / a digit of c/0/0
ZARR_PARTIAL = re.compile(r"^.+\.[0-9a-f]{32}\.partial$")  # zarr's atomic write, left by a run killed amid it
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# failed writes, reported as one line naming the output (permissions only when on the output)
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
_PERMISSION_ERRNOS = (errno.EACCES, errno.EPERM)
NETCDF_WRITE_ERROR = "NetCDF: HDF error"  # netCDF4's words for any failed HDF5 write
DISCARD_ATTEMPTS = 10  # removals of a temporary output that writer threads may still be filling


def field_compressors() -> tuple:
    """The codecs of every gridded field s2forecast writes to zarr: Blosc LZ4 with bit shuffle.

    Against zarr 3's default (Zstandard level 0, i.e. zstd's 3, no shuffle), one thread, on the
    721x1440 float32 fields of scripts/bench_scale.py's synthetic store: encoded at 1.6-2.1 against
    0.25-0.47 GB/s, 1.61-1.74x against 1.26-1.30x (README, Benchmarks, Scale), which matters where
    a command writes far more than it reads (a 0.25 deg climatology: 6 GB a channel). Bit shuffle
    rather than zarr 2's byte shuffle: on the real ERA5 fields of the shared 1 deg sample, mean sea
    level pressure 1.80x -> 2.46x, 2 m temperature 1.93x -> 2.34x, winds 1.45x either way,
    precipitation 2.79x -> 2.51x; encoding 1.1-1.6x faster, decoding up to 11 % slower
    (scripts/bench_codecs.py, docs/bench/codecs_era5_1deg.jsonl)."""
    from zarr.codecs import BloscCodec

    return (BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),)


def new_generation() -> str:
    """A fresh generation id (32 hex digits)."""
    return uuid.uuid4().hex


# --- recognising artifacts -----------------------------------------------------------------------


def zarr_attributes(path: str | os.PathLike) -> dict | None:
    """The root group attributes of the zarr store at ``path`` (v3 ``zarr.json`` or v2
    ``.zattrs``), read without zarr; None when ``path`` holds no zarr group."""
    path = Path(path)
    try:
        meta = path / "zarr.json"
        if meta.is_file():
            document = json.loads(meta.read_text())
            return document.get("attributes", {}) if document.get("node_type") == "group" else None
        if (path / ".zgroup").is_file():
            attrs = path / ".zattrs"
            return json.loads(attrs.read_text()) if attrs.is_file() else {}
    except (OSError, ValueError):
        return None
    return None


def netcdf_attributes(path: str | os.PathLike) -> dict | None:
    """The global attributes of the NetCDF file at ``path``; None when it is not one."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    if head != _HDF5_SIGNATURE and head[:3] != b"CDF":
        return None
    import netCDF4

    try:
        with netCDF4.Dataset(path, "r") as ds:
            return {name: ds.getncattr(name) for name in ds.ncattrs()}
    except (OSError, RuntimeError, ValueError):
        return None


def _marker_file(path: Path) -> dict | None:
    try:
        document = json.loads((path / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def artifact_attributes(path: str | os.PathLike) -> dict | None:
    """The attributes that carry an artifact's marker and generation (zarr root attributes,
    NetCDF global attributes, or a plain directory's marker file); None for anything else."""
    path = Path(path)
    if path.is_symlink():
        return None
    if path.is_dir():
        attrs = zarr_attributes(path)
        return attrs if attrs is not None else _marker_file(path)
    if path.is_file():
        return netcdf_attributes(path)
    return None


def _is_sibling(name: str) -> bool:
    """Whether ``name`` is exactly one of s2forecast's siblings (``sibling``): ``.NAME.s2forecast-ROLE-PID-HOST``."""
    return _SIBLING_NAME.match(name) is not None


def _node_type(directory: Path) -> str | None:
    """ "group" or "array" for a zarr node directory (v3 ``zarr.json``, v2 ``.zgroup``/``.zarray``), else None."""
    if (directory / ".zarray").is_file():
        return "array"
    if (directory / ".zgroup").is_file():
        return "group"
    try:
        document = json.loads((directory / "zarr.json").read_text())
    except (OSError, ValueError):
        return None
    node = document.get("node_type") if isinstance(document, dict) else None
    return node if node in ("group", "array") else None


def zarr_nodes(root: Path) -> list[str]:
    """The paths (from ``root``, "/"-separated) of the zarr arrays and groups under the group at ``root``,
    but for a nested artifact's (``NESTED_KIND``: its own marker lists its own)."""
    found = []

    def visit(directory: Path, prefix: str) -> None:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False) or _is_sibling(entry.name):
                    continue
                child = _node_type(Path(entry.path))
                attrs = zarr_attributes(Path(entry.path)) if child == "group" else None
                if child is None or _nested_stats(entry.name, prefix, attrs):
                    continue
                found.append(prefix + entry.name)
                if child == "group":
                    visit(Path(entry.path), prefix + entry.name + "/")

    visit(root, "")
    return sorted(found)


def record_zarr_nodes(root: Path) -> None:
    """Write ``zarr_nodes(root)`` into the root group's attributes (``NODES_ATTR``), once the artifact is
    complete: what ``written_by_s2forecast`` then accepts under it."""
    meta = root / "zarr.json"
    document = json.loads(meta.read_text())
    document.setdefault("attributes", {})[NODES_ATTR] = zarr_nodes(root)
    tmp = sibling(meta, "tmp")  # a kill before the rename leaves a sibling, which judging skips
    tmp.write_text(json.dumps(document, indent=2))
    os.replace(tmp, meta)


def _nested_stats(name: str, prefix: str, attrs: dict | None) -> bool:
    """Whether a child group (``attrs``: its attributes) is a store's statistics group: at the root,
    named and marked ``NESTED_KIND``, an artifact of its own."""
    return not prefix and name == NESTED_KIND and attrs is not None and attrs.get(MARKER_ATTR) == NESTED_KIND


def _listed_nodes(attrs: dict) -> set | None:
    """The nodes a zarr artifact's attributes list (``NODES_ATTR``); None for one written before the list."""
    nodes = attrs.get(NODES_ATTR)
    return set(nodes) if isinstance(nodes, list) else None


def _foreign_entry(directory: Path, node: str, listed: set | None = None, prefix: str = "") -> Path | None:
    """The first entry under the zarr ``node`` ("group" or "array") at ``directory`` that is none of zarr
    metadata, child nodes, chunks (an array's ``c``/digit chunk directories, whose contents are not
    listed: a record has millions) and s2forecast's own siblings; None when there is none. With
    ``listed`` (the root's ``NODES_ATTR``), a child node not listed is foreign too, as is any child group
    that is another s2forecast artifact; a nested statistics group is judged by its own marker."""
    with os.scandir(directory) as entries:  # DirEntry types: no system call per chunk file (v2 flat keys)
        for entry in entries:
            name = entry.name
            if entry.is_symlink():
                return Path(entry.path)
            is_file = entry.is_file(follow_symlinks=False)
            if _is_sibling(name) or (is_file and ZARR_PARTIAL.match(name)):
                continue
            if is_file:
                if name not in _ZARR_METADATA and not (node == "array" and _CHUNK_KEY.match(name)):
                    return Path(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                child = _node_type(Path(entry.path))
                if child is not None:
                    attrs = zarr_attributes(Path(entry.path)) if child == "group" else None
                    if _nested_stats(name, prefix, attrs):
                        found = _foreign_entry(Path(entry.path), "group", _listed_nodes(attrs))
                        if found is not None:  # named itself (stats/my_notes), not the group s2forecast wrote
                            return found
                        continue
                    if attrs is not None and MARKER_ATTR in attrs:  # another command's artifact, put inside
                        return Path(entry.path)
                    if listed is not None and prefix + name not in listed:
                        return Path(entry.path)
                    found = _foreign_entry(Path(entry.path), child, listed, prefix + name + "/")
                    if found is not None:
                        return found
                elif not (node == "array" and (name == "c" or name.isdigit())):
                    return Path(entry.path)
            else:
                return Path(entry.path)
    return None


def written_by_s2forecast(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an artifact s2forecast wrote, by its marker (module docstring).

    A zarr directory also must hold nothing but zarr nodes, their metadata and chunks (and
    s2forecast's own temporary siblings), at every level, and a plain directory nothing but the
    files its marker lists: a file a user put inside an artifact makes it foreign.
    """
    return _why_foreign(Path(path)) is None


def why_foreign(path: str | os.PathLike) -> str | None:
    """What makes ``path`` foreign, for a message (e.g. "it has no s2forecast marker"); None for an
    artifact of ours (``written_by_s2forecast``)."""
    return _why_foreign(Path(path))


def _why_foreign(path: Path) -> str | None:
    """What makes ``path`` foreign, for a message (``written_by_s2forecast``); None for an artifact of ours."""
    if path.is_symlink():
        return "it is a symbolic link"
    no_marker = "it has no s2forecast marker"
    if path.is_file():
        attrs = netcdf_attributes(path)
        return None if attrs is not None and MARKER_ATTR in attrs else no_marker
    if not path.is_dir():
        return no_marker
    attrs = zarr_attributes(path)
    if attrs is not None:
        if MARKER_ATTR not in attrs and _LEGACY_STORE_ATTR not in attrs and not _is_legacy_stats(attrs):
            return no_marker
        entry = _foreign_entry(path, "group", _listed_nodes(attrs))
        return None if entry is None else f"it holds {entry.relative_to(path)}, which s2forecast did not write"
    marker = _marker_file(path)
    if marker is None or MARKER_ATTR not in marker:
        return no_marker
    listed = set(marker.get("files", [])) | {MARKER_FILE}
    extra = next((e.name for e in sorted(path.iterdir()) if e.name not in listed or not _plain_file(e)), None)
    return None if extra is None else f"it holds {extra}, which s2forecast did not write"


def _is_legacy_stats(attrs: dict) -> bool:
    return attrs.get("weights") == _LEGACY_STATS_WEIGHTS and "tendency_step_hours" in attrs


def artifact_kind(path: str | os.PathLike) -> str | None:
    """The kind of output s2forecast recorded in the marker of ``path`` (``Output``'s ``kind``:
    "store", "forecast", ...; "store" or "stats" for those written before the marker existed);
    None for a path without a marker."""
    attrs = artifact_attributes(path)
    if attrs is None:
        return None
    if MARKER_ATTR in attrs:
        return str(attrs[MARKER_ATTR])
    if _LEGACY_STORE_ATTR in attrs:
        return "store"
    return "stats" if _is_legacy_stats(attrs) else None


def _describe_kind(kind: str) -> tuple[str, str]:
    """(what an artifact of ``kind`` is, "written by s2forecast COMMAND") for messages."""
    what, command = KINDS.get(kind, (f"an output of kind {kind!r}", ""))
    return what, f"written by s2forecast {command}" if command else "written by s2forecast"


def other_kind_error(path: str | os.PathLike, found: str | None, kind: str, option: str = "--out") -> UserError:
    """The error for an existing s2forecast output at ``path`` of kind ``found`` where a command
    writes one of ``kind``: ``--overwrite`` replaces only an output of the command's own kind."""
    what, by = _describe_kind(found or "unknown")
    own, _ = _describe_kind(kind)
    return UserError(
        f"{option} {path} is {what} {by}; --overwrite replaces only {own}, never another kind of output: "
        f"choose another {option}, or remove {path} yourself if it should go"
    )


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- generations ---------------------------------------------------------------------------------


def generation_of(path: str | os.PathLike) -> str | None:
    """The ``s2forecast_generation`` of the artifact at ``path`` (None when it has none).

    Raises:
        FileNotFoundError: nothing is at ``path`` any more.
    """
    path = Path(path).expanduser()  # as the readers opened it
    if not path.exists():
        raise FileNotFoundError(f"{path} was removed")
    attrs = artifact_attributes(path.resolve()) or {}  # an input may be a link to the store (never an output)
    generation = attrs.get(GENERATION_ATTR)
    return None if generation is None else str(generation)


def check_unchanged(path: str | os.PathLike, recorded: str | None, what: str = "store") -> None:
    """Raise if the artifact at ``path`` is no longer generation ``recorded`` (read when it was opened).

    Raises:
        ValueError: ``path`` was rewritten or removed since it was opened.
    """
    try:
        now = generation_of(path)
    except FileNotFoundError:
        raise UserError(f"{what} {path} was removed while it was read; nothing was written, rerun") from None
    if now != recorded:
        raise rewritten_error(path, recorded, now, what)


def rewritten_error(path, recorded: str | None, now: str | None, what: str = "store") -> UserError:
    """The error for an input found at generation ``now`` after it was opened at ``recorded``."""
    return UserError(
        f"{what} {path} was rewritten while it was read (generation {recorded} -> {now}); nothing was written, rerun"
    )


# --- checking a target ---------------------------------------------------------------------------


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def check_target(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), option: str = "--out") -> None:
    """Refuse an output path that is the current directory or one of its parents, a symbolic
    link, or that is, contains or lies inside one of ``inputs`` (module docstring, rule 1).

    Raises:
        ValueError: naming the path, the input it collides with and what to do.
    """
    given = os.fspath(path).rstrip(os.sep)  # Path() drops a trailing "/." (not "/..")
    path = Path(path).expanduser()  # "~/out.nc" quoted, or from Python: the home directory, as netCDF4 takes it
    target = path.resolve()
    cwd = Path.cwd().resolve()
    if target == cwd or target in cwd.parents:
        raise UserError(
            f"{option} {path} is the current directory or one of its parents; s2forecast never writes over a "
            f"directory it did not create: name a new path, e.g. {option} {path / 'output'}"
        )
    if given in (".", "..") or given.endswith((f"{os.sep}.", f"{os.sep}..")):
        # s.zarr/time/.. is s.zarr: its temporary siblings went inside the artifact being replaced (a review)
        raise UserError(
            f"{option} {given} ends in '.' or '..'; name the output itself, e.g. {option} {os.path.normpath(given)}"
        )
    if path.is_symlink():
        raise UserError(f"{option} {path} is a symbolic link; s2forecast does not replace links: choose another --out")
    identity = _identity(path)
    for given in inputs:
        if given is None:
            continue
        source = Path(given).expanduser().resolve()  # "~/s.zarr" from Python: the store the readers open
        if target == source or (identity is not None and identity == _identity(source)):
            raise UserError(f"{option} {path} is the input {given}; write to another path")
        if source in target.parents:
            raise UserError(f"{option} {path} lies inside the input {given}; write outside it")
        if target in source.parents:
            raise UserError(f"{option} {path} contains the input {given}; write to another path")


def check_local(path, option: str = "--out") -> None:
    """Refuse a URL as an output: outputs are written beside the target and renamed into place (rule 3),
    which a remote store cannot do."""
    if is_url(path):
        raise UserError(
            f"{option} {path} is a URL; s2forecast writes its outputs to local paths only: write to a local path "
            "and copy the result there"
        )


def foreign_error(path: Path, option: str = "--out", why: str | None = None) -> UserError:
    """The error for an existing ``path`` that s2forecast did not write (``why``: what says so, when its
    owner is judged otherwise than by a marker)."""
    return UserError(
        f"{option} {path} exists and was not written by s2forecast "
        f"({why or _why_foreign(Path(path)) or 'it has no s2forecast marker'}); it is never "
        "replaced, even with --overwrite: choose another --out or move it away yourself"
    )


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _host() -> str:
    return socket.gethostname().replace(os.sep, "_") or "localhost"


def sibling(path: Path, role: str) -> Path:
    """``.NAME.s2forecast-ROLE-PID-HOST`` beside ``path``: this process's temporary (role "tmp")
    or set-aside old (role "old") copy of ``path``."""
    return path.with_name(f".{path.name}{_SIBLING}{role}-{os.getpid()}-{_host()}")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` was killed and not yet reaped (``timeout -s KILL``, a container whose PID 1 does not
    reap): os.kill still finds it, and its leftovers (a 0.25° climatology's tmp: gigabytes) stayed."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS): the signal's answer stands
        return False
    return stat_line.rpartition(")")[2].split()[:1] == ["Z"]  # the state follows the command name's ")"


def remove_own(path: Path) -> None:
    """Delete ``path``. Called only on s2forecast's own siblings (``sibling``), on an artifact
    already judged s2forecast's (``Output.commit``) and on a store the running command created
    itself (``StoreWriter``), never on a path the user named as such."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _locked(lock: Path) -> bool:
    """Whether a live run holds ``lock`` (``Output``'s lock sibling): its flock, which a process of
    another PID namespace on this kernel (a container sharing the host name) holds as well."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the PID alone decides
        return False
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        return error.errno in (errno.EWOULDBLOCK, errno.EAGAIN)  # else no flock on this file system: PIDs tell
    finally:
        os.close(fd)  # (releases the probe's own lock)
    return False


_HELD: dict[str, list[int]] = {}  # lock sibling -> [descriptor, holders in this process]


def hold_lock(path: Path) -> None:
    """Hold the lock sibling of ``path`` (``.NAME.s2forecast-lock-PID-HOST``): other runs then leave
    this run's siblings alone (``clean_leftovers``) and refuse to write ``path`` (``busy``). Nested
    holders in this process share it; each ``release_lock`` drops one."""
    lock = str(sibling(path, "lock"))
    if lock in _HELD:
        _HELD[lock][1] += 1
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: PIDs alone tell live runs
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        Path(lock).unlink(missing_ok=True)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        return  # a file system without flock (Lustre mounted noflock, some FUSE/CIFS): PIDs alone tell live runs
    _HELD[lock] = [fd, 1]


def release_lock(path: Path) -> None:
    """Drop one hold of ``path``'s lock sibling; the last one removes it."""
    lock = str(sibling(path, "lock"))
    held = _HELD.get(lock)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[lock]
        Path(lock).unlink(missing_ok=True)
        os.close(held[0])


def claim_lock(path: Path, option: str = "--out") -> None:
    """Hold ``path``'s lock sibling (``hold_lock``), or refuse in one line: its directory cannot take
    it, or another live run holds one (checked after taking ours: of two runs started together, one
    sees the other)."""
    try:
        hold_lock(path)
    except OSError as error:
        raise unwritable(path, error, option) from None
    if other := busy(path):
        release_lock(path)
        raise busy_error(path, other, option)


def busy(path: str | os.PathLike) -> str | None:
    """The lock sibling of ``path`` another live run holds (it is writing ``path`` or its replacement),
    or None."""
    path = Path(path)
    prefix = f".{path.name}{_SIBLING}lock-"
    try:
        locks = [entry for entry in path.parent.iterdir() if entry.name.startswith(prefix) and _is_sibling(entry.name)]
    except OSError:
        return None
    for lock in locks:
        if str(lock) not in _HELD and _locked(lock):
            return lock.name
    return None


def unwritable(path: Path, error: OSError, option: str = "--out") -> PermissionError:
    """The one-line error for a sibling of ``path`` that could not be made: a name too long once the
    sibling's suffix is added, or a directory that cannot be written."""
    if error.errno == errno.ENAMETOOLONG:
        return PermissionError(
            f"cannot write {option} {path}: its name of {len(path.name)} characters is too long for the file system "
            f"once s2forecast's temporary suffix is added ({len(sibling(path, 'lock').name)} characters); choose a "
            f"shorter {option}"
        )
    if error.errno == errno.ENOENT and not path.parent.exists():  # as Output's own check says it
        missing = path.parent
        return PermissionError(f"output directory {missing} does not exist; create it first or choose another {option}")
    return PermissionError(
        f"cannot write {option} {path}: directory {path.parent} is not writable ({error.strerror or error}); choose "
        f"another {option}"
    )


def remove_if_still_ours(path: Path) -> bool:
    """Remove ``path``, judged s2forecast's when a command started, if it still is: set aside first and
    judged whole there (a file a user saved inside it meanwhile changes no stamp of its root), put back
    if it is not; removed under a temporary sibling's name (a kill part-way leaves a leftover the next
    run removes). Returns whether it went."""
    old = sibling(path, "old")
    os.rename(path, old)
    if not written_by_s2forecast(old):
        os.rename(old, path)
        return False
    tmp = sibling(path, "tmp")
    os.rename(old, tmp)
    remove_own(tmp)
    return True


def busy_error(path, other: str, option: str = "--out") -> UserError:
    pid_host = other.rsplit("lock-", 1)[-1]
    return UserError(
        f"{option} {path} is being written by another run (process-host {pid_host}, lock {other}); let it finish or "
        "stop it, then rerun"
    )


def clean_leftovers(path: str | os.PathLike) -> None:
    """Remove the temporary siblings of ``path`` left by killed runs on this host; put back an
    old artifact whose replacement never arrived. Siblings of live processes are left alone: a
    process of that PID is alive here, or a run holds the lock sibling of that PID (a run in
    another PID namespace, e.g. a container with the host's name, has PIDs this one cannot see)."""
    path = Path(path)
    parent = path.parent
    prefix = f".{path.name}{_SIBLING}"
    try:
        entries = [entry for entry in parent.iterdir() if entry.name.startswith(prefix) and _is_sibling(entry.name)]
    except OSError:
        return
    for entry in sorted(entries, key=lambda e: e.name.startswith(f"{prefix}lock-")):  # locks last
        role, _, rest = entry.name[len(prefix) :].partition("-")
        pid, _, host = rest.partition("-")
        lock = parent / f"{prefix}lock-{pid}-{host}"
        if host != _host() or str(lock) in _HELD or _locked(lock):
            continue
        # this process's own PID on a sibling it does not hold: a killed run's (a restarted container is PID 1
        # again); without flock the PID alone tells
        if _alive(int(pid)) and (int(pid) != os.getpid() or not _HAS_FLOCK):
            continue
        if role == "old" and not os.path.lexists(path) and written_by_s2forecast(entry):
            os.rename(entry, path)
        elif role == "old" and not written_by_s2forecast(entry):
            continue  # a name like ours on something s2forecast did not write: not ours to touch
        else:
            remove_own(entry)


# --- writing -------------------------------------------------------------------------------------


class Output:
    """One output path of a command: checked when claimed, written under ``tmp``, renamed into
    place by ``commit`` (see the module docstring for the rules).

    Use as a context manager: an exception inside removes ``tmp`` and leaves ``path`` as it
    was; an ``OSError`` such as a full disk becomes one line naming ``path``.

    Args:
        path: the final path (a file, or a directory when ``directory``).
        kind: what is written ("forecast", "climatology", "metrics", "plots", "store", "stats"),
            recorded in the marker.
        directory: the artifact is a directory (zarr, plots); ``tmp`` is then an empty directory.
        inputs: the paths the command reads.
        overwrite: replace an existing artifact that s2forecast wrote.
        option: what ``path`` is to the user, for messages ("--out", or e.g. "plots directory"
            for a path derived from ``--out``).
        owned: recognises an existing ``path`` as s2forecast's (default ``written_by_s2forecast``, and
            then of ``kind`` by its marker; another ``owned`` vouches for the kind itself).
        make_parent: create a missing parent directory instead of refusing.

    Attributes:
        tmp: where to write.
        generation: the new artifact's generation; ``attrs`` holds it with the marker, for the
            writer to store among its attributes (``commit`` checks that it did).

    Raises (at construction, before anything is written):
        ValueError: rule 1 (``check_target``), a foreign existing path or one of another kind, a
            missing parent.
        FileExistsError: ``path`` exists and ``overwrite`` is not set.
        PermissionError: the parent directory cannot be written.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        kind: str,
        *,
        directory: bool = False,
        inputs: Iterable[str | os.PathLike] = (),
        overwrite: bool = False,
        option: str = "--out",
        owned: Callable[[Path], bool] = written_by_s2forecast,
        make_parent: bool = False,
    ):
        check_local(path, option)
        self.path, self.kind, self.directory = Path(path).expanduser(), kind, directory
        self.overwrite, self.option, self.owned = overwrite, option, owned
        check_target(self.path, inputs, option)
        parent = self.path.parent
        if ".." in parent.parts and not parent.exists():  # mkdir would make the part before "..", then fail
            raise UserError(
                f"{option} {path}: its directory {parent} does not exist, and s2forecast does not create a directory "
                f"only to leave it by '..': write the path without it, e.g. {option} {os.path.normpath(self.path)}"
            )
        if make_parent and not parent.exists():
            try:
                parent.mkdir(parents=True)
            except OSError as error:
                raise self._unwritable(error) from None
        if not parent.exists():
            raise UserError(f"output directory {parent} does not exist; create it first or choose another {option}")
        if not parent.is_dir():
            raise self._unwritable(NotADirectoryError(errno.ENOTDIR, "not a directory"))
        clean_leftovers(self.path)
        claim_lock(self.path, option)  # tells other runs this one is alive (clean_leftovers) and writing (busy)
        self._holding = True
        try:
            self._check_existing()
        except BaseException:
            self._release()
            raise
        self._seen = self._state()
        self.generation = new_generation()
        self.tmp = sibling(self.path, "tmp")
        try:
            if directory:
                self.tmp.mkdir()
            else:
                self.tmp.touch(exist_ok=False)
        except OSError as error:
            self._release()
            raise self._unwritable(error) from None

    def _release(self) -> None:
        """Drop this output's hold of the lock sibling (after ``tmp`` is committed or discarded)."""
        if self._holding:
            self._holding = False
            release_lock(self.path)

    @property
    def attrs(self) -> dict[str, str]:
        """The marker and generation, to store among the artifact's attributes."""
        return {MARKER_ATTR: self.kind, GENERATION_ATTR: self.generation}

    def _unwritable(self, error: OSError) -> PermissionError:
        return unwritable(self.path, error, self.option)

    def _state(self) -> tuple | None:
        try:
            stat = self.path.lstat()
        except FileNotFoundError:
            return None
        return stat.st_dev, stat.st_ino, stat.st_mtime_ns

    def _check_existing(self) -> None:
        if not os.path.lexists(self.path):
            return
        ours = self.owned(self.path)
        if ours and self.owned is written_by_s2forecast:
            found = artifact_kind(self.path)
            if found != self.kind:  # with or without --overwrite: passing it would not help
                raise other_kind_error(self.path, found, self.kind, self.option)
        if not ours:  # first: --overwrite would not help
            raise foreign_error(self.path, self.option, self._why_not_ours())
        if not self.overwrite:
            raise FileExistsError(
                f"{self.option} {self.path} already exists; pass --overwrite to replace it, or choose another --out"
            )

    def remove_existing(self) -> None:
        """Remove what is at ``path`` now, judged by this output's own rule (``owned``), before ``commit``:
        for an artifact vouched for by another one that is about to be replaced (evaluate's CSV, by the
        hash its metrics file records)."""
        if not os.path.lexists(self.path):
            return
        if not self.owned(self.path):
            raise foreign_error(self.path, self.option, self._why_not_ours())
        remove_own(self.path)

    def _why_not_ours(self) -> str | None:
        """What says an existing ``path`` is not ours, where no marker judges it (e.g. evaluate's CSV)."""
        if self.owned is written_by_s2forecast or self.path.is_symlink():
            return None
        return "its contents are not what s2forecast wrote there: it was edited or replaced"

    def write_marker_file(self) -> None:
        """A plain directory artifact's marker: every file of ``tmp`` listed (``commit`` writes it)."""
        files = sorted(entry.name for entry in self.tmp.iterdir() if entry.name != MARKER_FILE)
        (self.tmp / MARKER_FILE).write_text(json.dumps({**self.attrs, "files": files}, indent=1))

    def commit(self) -> Path:
        """Rename ``tmp`` into place (replacing the s2forecast artifact there, if any); returns ``path``.

        A plain directory (not zarr) gets its marker file here, listing the files written.

        Raises:
            FileExistsError / ValueError: something appeared at ``path`` during the run that may
                not be replaced; ``tmp`` is removed and ``path`` left alone.
        """
        try:
            if self.directory and zarr_attributes(self.tmp) is None:
                self.write_marker_file()
            elif self.directory and self.owned is written_by_s2forecast:
                record_zarr_nodes(self.tmp)
            if self.owned is written_by_s2forecast and not written_by_s2forecast(self.tmp):
                raise RuntimeError(f"internal error: the {self.kind} written to {self.tmp} lacks the s2forecast marker")
            if self._state() != self._seen:  # the path changed during the run: judge it again
                self._check_existing()
        except BaseException:
            self.discard()
            raise
        if not os.path.lexists(self.path):
            os.rename(self.tmp, self.path)
        elif not self.directory and self.path.is_file() and not self.path.is_symlink():
            os.replace(self.tmp, self.path)  # atomic for a file
        else:
            old = sibling(self.path, "old")
            os.rename(self.path, old)
            # judged again once set aside, whole: a file saved inside it during the run (hours, for a
            # rollout) changes no stamp of its root, and would go with it
            if not self.owned(old):
                os.rename(old, self.path)
                self.discard()
                raise foreign_error(self.path, self.option, self._why_not_ours())
            os.rename(self.tmp, self.path)
            # removed under the tmp name (free again): a kill part-way leaves a tmp sibling, which the next run
            # removes; a half-removed "old" one (its root marker gone first) was judged foreign and kept forever
            os.rename(old, self.tmp)
            remove_own(self.tmp)
        self._release()
        return self.path

    def discard(self) -> None:
        """Remove ``tmp`` (nothing at ``path`` changes). A failed dask computation returns while its
        other worker threads may still write chunks into ``tmp``: a directory that refills while
        it is removed is removed again, a few times, before giving up."""
        for attempt in range(DISCARD_ATTEMPTS):
            if not os.path.lexists(self.tmp):
                break
            try:
                remove_own(self.tmp)
                break
            except OSError as error:
                if error.errno != errno.ENOTEMPTY or attempt == DISCARD_ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        self._release()

    def _is_write_error(self, error: OSError) -> bool:
        if error.errno in _WRITE_ERRNOS:
            return True
        if error.errno not in _PERMISSION_ERRNOS or not error.filename:
            return False
        where = Path(os.fsdecode(error.filename))
        return where == self.tmp or self.tmp in where.parents

    def __enter__(self) -> "Output":
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None:
            return False
        try:
            self.discard()
        except OSError:  # the next run removes this leftover; the error that stopped this one is the news
            pass
        if isinstance(error, OSError) and self._is_write_error(error):
            raise OSError(
                f"could not write {self.path}: {error.strerror or error}; nothing was changed at {self.path}"
            ) from error
        if isinstance(error, OSError | RuntimeError) and NETCDF_WRITE_ERROR in str(error):
            # netCDF4 reports a failed HDF5 write (a full disk, a quota) as this alone, without errno
            raise OSError(
                f"could not write {self.path}: {NETCDF_WRITE_ERROR} (disk full? {_free_space(self.path.parent)} free "
                f"there); nothing was changed at {self.path}"
            ) from error
        return False


def _free_space(directory: Path) -> str:
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return "unknown space"
    return f"{free / 2**20:.1f} MiB" if free >= 2**20 else f"{free} bytes"


class DiskSpaceWarning(UserWarning):
    """An output may not fit the free space of the disk it is written to."""


LEFT_AS_IT_WAS = "leaves the output path as it was"
RESUMABLE = "leaves the store incomplete, for a rerun of the same command to resume"  # the store writers'


def warn_if_short_of_disk(out: str | os.PathLike, needed: int, what: str, left: str = LEFT_AS_IT_WAS) -> None:
    """Warn, before a command's work, when the disk of the directory ``out`` is written in has less
    than ``needed`` bytes free; ``what`` says what takes them ("the store takes up to 6.1 GB before
    compression"), ``left`` what a run the disk stops leaves (``RESUMABLE`` for the store writers). A
    warning, not a refusal: how well an output compresses is not known before it is written."""
    directory = Path(out).absolute().parent
    try:
        free = shutil.disk_usage(directory).free
    except OSError:  # cannot tell: the writes will say
        return
    if free < needed:
        warnings.warn(
            f"{directory} has {byte_size(free)} free; {what}; if the disk fills, the run stops with an error and "
            f"{left}: free some space there or write the output to a larger disk",
            DiskSpaceWarning,
            stacklevel=3,
        )


def byte_size(n_bytes: int) -> str:
    """``n_bytes`` for a message: "6.1 GB", "12.0 MB" or "1000 bytes"."""
    if n_bytes >= 1e9:
        return f"{n_bytes / 1e9:.1f} GB"
    return f"{n_bytes / 1e6:.1f} MB" if n_bytes >= 1e6 else f"{n_bytes} bytes"
