"""Writing stores in the s2forecast layout: skeleton first, time slabs next, "complete" last.

A writer (``convert-era5``, ``generate-swe``) describes the whole store up front (coordinates,
variables, attributes) and calls ``StoreWriter.create``: metadata and coordinates are written,
the data chunks are not, ``s2forecast_complete`` is "false" and ``written`` is all false. It
then writes time slabs with ``write``, each of which flips ``written`` for its times after its
data is on disk; ``finish`` sets ``s2forecast_complete`` to "true" and consolidates the
metadata. A crash therefore leaves a store that readers refuse and that a rerun of the same
command completes, skipping the slabs already written (``pending``).

New stores are claimed through ``s2forecast.output.Output``: the skeleton is written under a
temporary sibling and renamed into place (a crash never leaves a store without its marker),
then filled in place, resumably. ``overwrite`` replaces only a store s2forecast wrote, and
atomically: the new store (fresh ``s2forecast_generation``) is filled beside the old one and
renamed over it by ``finish``, so until then readers see the old store, and a failed or
interrupted overwrite leaves it intact (the next ``--overwrite`` run starts afresh). Use the
writer as a context manager: on an error it removes such a half-built replacement and reports
a full disk in one line.

With ``shards`` N, the time-dependent variables are written as zarr v3 shards (the sharding
codec: one file holds N one-time-step chunks), N times fewer files. Resumption stays safe because
every slab writes whole shards (``write`` checks it): a shard is never read back and rewritten, so
a crash mid-slab can only damage shards whose times are not yet marked written, which the rerun
writes again whole.
"""

import errno
import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import dask.array as da
import numpy as np
import xarray as xr
import zarr

from s2forecast.data.coordinates import with_cf_coordinates
from s2forecast.data.store import COMPLETE_ATTR, LAYOUT_VERSION, VARIABLES, cf_attributes
from s2forecast.output import (
    ZARR_PARTIAL,
    Output,
    artifact_kind,
    check_target,
    claim_lock,
    clean_leftovers,
    field_compressors,
    foreign_error,
    other_kind_error,
    record_zarr_nodes,
    release_lock,
    remove_own,
    written_by_s2forecast,
    zarr_attributes,
)
from s2forecast.user_errors import UserError

STORE_KIND = "store"  # the kind of output a ``StoreWriter`` writes (``s2forecast.output.KINDS``)


def store_maker(signature) -> str | None:
    """The command that wrote a store, from its ``s2forecast_signature`` (JSON): "convert-era5",
    "generate-swe", or None when it does not say."""
    try:
        fields = json.loads(signature)
    except (TypeError, ValueError):
        return None
    if not isinstance(fields, dict):
        return None
    if fields.get("kind") == "swe":
        return "generate-swe"
    converter = fields.get("converter")
    return converter if isinstance(converter, str) else None


def signature_changes(old, new: str) -> str:
    """What differs between a store's signature ``old`` and a rerun's ``new`` (JSON), for the
    refusal of a resume: e.g. "input era5_01.nc changed (size or modification time); shards 2 now,
    none then"."""
    try:
        before, after = json.loads(old), json.loads(new)
    except (TypeError, ValueError):
        return "the store's record of them is unreadable"
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "the store's record of them is unreadable"
    changes = []
    for key in sorted(before.keys() | after.keys()):
        then, now = before.get(key), after.get(key)
        if then == now:
            continue
        if key == "inputs" and isinstance(then, list) and isinstance(now, list):  # [path, size, mtime] each
            old_files, new_files = ({str(entry[0]): entry[1:] for entry in files} for files in (then, now))
            changed = [p for p in new_files if old_files.get(p, new_files[p]) != new_files[p]]
            names = {
                "changed (size or modification time)": changed,
                "added": [p for p in new_files if p not in old_files],
                "left out": [p for p in old_files if p not in new_files],
            }  # fmt: skip
            for what, paths in names.items():
                if paths:
                    listed = ", ".join(Path(p).name for p in sorted(paths)[:3]) + ", ..." * (len(paths) > 3)
                    changes.append(f"input{'s' * (len(paths) > 1)} {listed} {what}")
            continue
        now, then = ("none" if value is None else json.dumps(value) for value in (now, then))
        changes.append(f"{key} {now} now, {then} then")
    return "; ".join(changes) or "its options"


def is_complete(path) -> bool:
    """Whether ``path`` is a zarr store a writer marked complete (``COMPLETE_ATTR``)."""
    try:
        return zarr.open_group(path, mode="r", zarr_format=3).attrs.get(COMPLETE_ATTR) == "true"
    except (FileNotFoundError, KeyError, ValueError):
        return False


class InvalidInputData(UserError):
    """A writer's input holds values no store may contain (infinite, a field of only NaN).

    Raised inside a ``StoreWriter`` context, it removes the store when this run created it: a
    rerun must not resume from data written before the bad values were met.
    """


class StoreWriter:
    """Create or resume a store at ``path`` whose contents are identified by ``signature``.

    One writer per store updates the ``written`` flags (one chunk) per slab; the slabs' data may
    be written by other processes (``write_region``), each slab by one.

    Args:
        path: the zarr store to write.
        signature: JSON-serializable description of the inputs and options; a rerun with the
            same signature resumes, a different one is refused unless ``overwrite``.
        overwrite: replace an existing store (complete or not) instead of resuming; only a
            store s2forecast wrote is ever replaced.
        inputs: the files the store is made from (the store may not be, hold or lie in one).
        shards: time steps per zarr v3 shard of the time-dependent variables (0: one file per
            chunk); part of the signature, and each slab must cover whole shards.
    """

    def __init__(
        self,
        path: str | Path,
        signature: dict,
        overwrite: bool = False,
        inputs: Iterable[str | Path] = (),
        shards: int = 0,
    ):
        if shards < 0:
            raise ValueError(f"shards must be >= 0, got {shards}")
        self.path = Path(path).expanduser()
        self.shards = shards
        # only sharded stores carry it, so unsharded stores written before shards existed still resume
        self.signature = json.dumps({**signature, "shards": shards} if shards else signature, sort_keys=True,
                                    default=str)  # fmt: skip
        self.overwrite = overwrite
        self.inputs = tuple(inputs)
        self.target = self.path  # where slabs go: the store, or the replacement being built beside it
        self._replacement: Output | None = None
        self._n_times = 0  # the store's time steps, known at ``create``
        self._created = False  # whether this run created the store at ``path`` (it holds only this run's data)
        self._holding = False  # whether this writer holds the store's lock sibling (``create`` to ``finish``)
        self._complete_before = False  # ``create`` found the store complete: nothing is written, not even in finish

    def create(self, template: xr.Dataset) -> np.ndarray:
        """Write the skeleton of ``template`` (a dataset whose time-dependent variables are
        lazy dask arrays that are never computed) unless a matching store exists.

        Returns:
            (time,) bool array of the time steps already written (all false for a new store).
        """
        self._n_times = template.sizes["time"]
        check_target(self.path, self.inputs)  # before any sibling of it is looked at or made
        clean_leftovers(self.path)  # first: a killed run of this PID (a restarted container's) left siblings
        if not self.overwrite and self._complete_as_asked():  # nothing to write: no lock either (a read-only share)
            self._complete_before = True
            return np.ones(self._n_times, dtype=bool)
        claim_lock(self.path)  # until finish or failure: a run started meanwhile refuses the store (busy)
        self._holding = True
        if os.path.lexists(self.path):
            self._check_same_maker()
            if not self.overwrite:
                return self._resume()
        output = Output(self.path, STORE_KIND, directory=True, inputs=self.inputs, overwrite=self.overwrite)
        with output:
            self._write_skeleton(template, output)
            if os.path.lexists(self.path):  # replacing: fill the new store beside the old one
                self._replacement, self.target = output, output.tmp
            else:
                output.commit()
                self._created = True
        return np.zeros(template.sizes["time"], dtype=bool)

    def __enter__(self) -> "StoreWriter":
        return self

    @property
    def created(self) -> bool:
        """Whether this run made the store at ``path`` (a failure of ``InvalidInputData`` removes it)."""
        return self._created

    @property
    def replacing(self) -> bool:
        """Whether a new store is built beside an old one (``overwrite``), which stays on a failure."""
        return self._replacement is not None

    def __exit__(self, kind, error, traceback) -> bool:
        self._release()
        if error is None:
            return False
        if self._replacement is not None:  # the old store stays; the half-built new one goes
            return self._replacement.__exit__(kind, error, traceback)
        if isinstance(error, InvalidInputData) and self._created:  # the store holds this run's data only
            remove_own(self.path)
            return False
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS):
            raise OSError(
                f"could not write {self.path}: {error.strerror or error}; the store stays incomplete and a rerun of "
                "the same command resumes it"
            ) from error
        return False

    def _check_same_maker(self) -> None:
        """Refuse a store at ``path`` that another command made (convert-era5 vs generate-swe), with or
        without ``overwrite``: a mistyped ``--out`` must not replace hours of conversion by a toy store."""
        attrs = zarr_attributes(self.path)
        if attrs is None or not written_by_s2forecast(self.path) or artifact_kind(self.path) != STORE_KIND:
            return  # not a store of ours: the output policy's own refusals apply
        theirs, ours = store_maker(attrs.get("s2forecast_signature")), store_maker(self.signature)
        if theirs is not None and ours is not None and theirs != ours:
            raise UserError(
                f"--out {self.path} is a data store written by s2forecast {theirs}; {ours} replaces or resumes only a "
                f"store {ours} wrote, never another command's: choose another --out, or remove {self.path} yourself "
                "if it should go"
            )

    def _complete_as_asked(self) -> bool:
        """Whether ``path`` is a complete store of ours from this signature (complete: no run writes it,
        an ``--overwrite`` builds its replacement beside it) with nothing to tidy (``_resume``)."""
        attrs = zarr_attributes(self.path) if os.path.isdir(self.path) else None
        return (
            attrs is not None
            and not any(ZARR_PARTIAL.match(partial.name) for partial in self.path.glob("*.partial"))
            and attrs.get(COMPLETE_ATTR) == "true"
            and attrs.get("s2forecast_signature") == self.signature
            and written_by_s2forecast(self.path)
            and artifact_kind(self.path) == STORE_KIND
        )

    def _resume(self) -> np.ndarray:
        """The ``written`` flags of the store at ``path``, if s2forecast wrote it from the same signature."""
        check_target(self.path, self.inputs)
        clean_leftovers(self.path)
        attrs = zarr_attributes(self.path)
        if attrs is None or not written_by_s2forecast(self.path):
            raise foreign_error(self.path)
        if artifact_kind(self.path) != STORE_KIND:
            raise other_kind_error(self.path, artifact_kind(self.path), STORE_KIND)
        # a metadata write of a killed run, in a store judged ours (no other run writes it: busy)
        for partial in self.path.glob("*.partial"):
            if ZARR_PARTIAL.match(partial.name):
                remove_own(partial)
        if attrs.get("s2forecast_signature") != self.signature:
            raise UserError(
                f"{self.path} exists and was written from other inputs or options "
                f"({signature_changes(attrs.get('s2forecast_signature'), self.signature)}); pass --overwrite to "
                "replace it or choose another --out"
            )
        written = zarr.open_group(self.path, mode="r")["written"][:].astype(bool)
        if attrs.get(COMPLETE_ATTR) == "true":
            return np.ones(written.size, dtype=bool)
        return written

    def _write_skeleton(self, template: xr.Dataset, output: Output) -> None:
        ds = with_cf_coordinates(template)
        shards = min(self.shards, ds.sizes["time"])  # a shard longer than the store would only be padding
        for name in list(ds.data_vars):
            if "time" not in ds[name].dims:  # static fields are written now: compute=False would defer them
                ds[name] = ds[name].compute()
            var = ds[name]
            if name in VARIABLES:
                var.attrs = {**var.attrs, **cf_attributes(name)}
            if "time" in var.dims:
                encoding = {
                    "chunks": tuple(1 if d == "time" else ds.sizes[d] for d in var.dims),
                    "compressors": field_compressors(),
                }
                if shards:
                    encoding["shards"] = tuple(shards if d == "time" else ds.sizes[d] for d in var.dims)
                # the layout is the encoding's; the never-computed data one dask chunk: a chunk per time
                # step cost ~3.5 KB of graph each (4 variables x 40,000 steps: 0.7 GB, 13 s before any data)
                placeholder = _placeholder(var.shape, var.dtype)
                ds[name] = xr.Variable(var.dims, placeholder, var.attrs, {**var.encoding, **encoding})
        ds["written"] = ("time", np.zeros(ds.sizes["time"], dtype=bool))
        ds["written"].encoding["chunks"] = (ds.sizes["time"],)
        ds.attrs.update(
            {
                "Conventions": "CF-1.8",
                "s2forecast_layout": LAYOUT_VERSION,
                "s2forecast_signature": self.signature,
                COMPLETE_ATTR: "false",
                **output.attrs,
            }
        )
        ds.to_zarr(output.tmp, mode="w", compute=False, consolidated=False, zarr_format=3)

    def write(self, slab: xr.Dataset, start: int) -> None:
        """Write the time-dependent variables of ``slab`` at time indices start..start+len-1
        (computing dask arrays in parallel), then mark those times written."""
        stop = start + slab.sizes["time"]
        self.check_slab(start, stop)
        write_region(self.target, slab, start)
        self.mark_written(start, stop)

    def check_slab(self, start: int, stop: int) -> None:
        """Refuse time steps ``start:stop`` that split a shard (a rerun could not resume)."""
        if self.shards and (start % self.shards or (stop % self.shards and stop != self._n_times)):
            raise ValueError(f"time steps {start}..{stop} split a shard of {self.shards}: a rerun could not resume")

    def mark_written(self, start: int, stop: int) -> None:
        """Flag the time steps ``start:stop`` written, once their data is on disk (``write_region``,
        possibly by another process): this writer alone updates the flags."""
        group = zarr.open_group(self.target, mode="r+", zarr_format=3)
        group["written"][start:stop] = True

    def finish(self) -> None:
        """Mark the store complete and consolidate its metadata (a replacement then goes into place);
        nothing for a store ``create`` found complete (it took no lock: the store is not written)."""
        if self._complete_before:
            return
        group = zarr.open_group(self.target, mode="r+", zarr_format=3)
        missing = int((~group["written"][:]).sum())
        if missing:
            raise RuntimeError(f"{self.path}: {missing} time steps were not written; the store stays incomplete")
        group.attrs[COMPLETE_ATTR] = "true"
        with warnings.catch_warnings():  # consolidated metadata is outside the v3 spec; we use it on purpose
            warnings.simplefilter("ignore", UserWarning)
            zarr.consolidate_metadata(self.target, zarr_format=3)
        record_zarr_nodes(Path(self.target))  # a store written in place is never committed
        if self._replacement is not None:
            self._replacement.commit()
            self._replacement, self.target = None, self.path
        self._release()

    def _release(self) -> None:
        if self._holding:
            self._holding = False
            release_lock(self.path)


def write_region(target: str | Path, slab: xr.Dataset, start: int) -> None:
    """Write the time-dependent variables of ``slab`` at time indices start..start+len-1 of the store
    at ``target`` (created by a ``StoreWriter``), not its ``written`` flags: writers of disjoint slabs
    (dask.distributed workers) may call it at once, the ``StoreWriter`` then marks each slab written."""
    stop = start + slab.sizes["time"]
    data = slab[[name for name, v in slab.data_vars.items() if "time" in v.dims]].copy(deep=False)
    data = data.drop_vars([c for c in data.coords if c != "time"])
    data.attrs = {}
    for var in data.data_vars.values():
        var.attrs = {}
        var.encoding = {}
    data.to_zarr(target, region={"time": slice(start, stop)}, consolidated=False, zarr_format=3)


def _placeholder(shape: tuple[int, ...], dtype=np.float32) -> da.Array:
    """A never-computed dask array of ``shape``: one chunk, so its graph (one task) does not grow
    with the record length; the store's chunks and shards are set by the writer's encoding."""
    return da.full(shape, np.nan, dtype=dtype, chunks=-1)


def lazy_empty(shape: tuple[int, ...], dims: tuple[str, ...], dtype=np.float32) -> xr.Variable:
    """A never-computed placeholder of ``shape`` for a template's time-dependent variable."""
    return xr.Variable(dims, _placeholder(shape, dtype))
