"""The one zarr store layout every s2forecast data source is written in, and its reader.

Layout (zarr v3, WeatherBench2-compatible):
  - dims ``(time, level, latitude, longitude)`` for pressure-level variables and
    ``(time, latitude, longitude)`` for single-level ones; static fields ``(latitude,
    longitude)``; ``level`` in hPa; latitude in degrees north, longitude in [0, 360);
  - WeatherBench2 variable names with CF attributes ``units`` and ``long_name``;
  - one time step per chunk, the whole field in it; consolidated metadata;
  - global attributes ``grid_kind`` (an ``s2forecast.geometry.GRID_KINDS`` entry),
    ``Conventions`` and ``s2forecast_complete``: "false" while a writer is filling the
    store, "true" once every time step is in. Readers refuse incomplete stores.
  - global attributes ``s2forecast_artifact`` ("store": s2forecast wrote it, so ``--overwrite``
    may replace it) and ``s2forecast_generation``, a fresh id each time a writer creates or
    overwrites the store (``s2forecast.output``): long readers record it in ``open_store`` (it
    is in the dataset's attributes) and ``check_unchanged`` it before they write.
  - a ``written`` (time,) boolean variable: which time steps a writer has finished, so an
    interrupted conversion resumes where it stopped.
  - per-channel normalization statistics, once ``s2forecast stats`` has run, in the
    ``stats`` group (see ``s2forecast.data.stats``).

Writers produce latitude north -> south (ERA5's order and the model's). Readers accept either
latitude order and any order of the dims (WeatherBench2's public ERA5 stores are ``(time, level,
longitude, latitude)``): ``to_model_order`` is the one place where the store's layout and the
model's convention (torch-harmonics: colatitude from the north pole) meet.

Readers also take stores s2forecast did not write, as they are: zarr v2 or v3, local or at an
fsspec URL (``gs://``, ``s3://``, ``https://``, ``file://``), in WeatherBench2's names and
layouts (ascending latitudes, cell-centred grids; variables a model does not use are never
read). Such a store is read-only to s2forecast: nothing is ever written into it (its
statistics go to their own path: ``s2forecast stats STORE --out STATS``).
"""

import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.data.coordinates import east_longitudes
from s2forecast.output import GENERATION_ATTR, check_unchanged, zarr_attributes
from s2forecast.times import cftime_problem, format_time
from s2forecast.urls import is_url
from s2forecast.user_errors import UserError

if TYPE_CHECKING:  # imported where used: geometry imports torch, which dask workers reading stores need not
    from s2forecast.geometry import Grid


class _AbandonedZarrReads(logging.Filter):
    """zarr 3 reads a group's members in concurrent tasks (``_getitem_semaphore``) and, when one fails
    (a store whose metadata it cannot parse, e.g. a pickle codec), raises that error and abandons the
    others: asyncio then logs each of their exceptions, the same failure, as "Task exception was never
    retrieved" with a traceback when they are garbage-collected, after the one-line refusal (or as
    "Task was destroyed but it is pending!" after a chunk read at a URL failed). Only those records
    are dropped: the error itself is raised and reported."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "exception was never retrieved" in text and "_getitem_semaphore" in text:
            return False
        # a chunk read that failed part-way (a reset): the same abandonment, of zarr's concurrent reads
        return not ("Task was destroyed but it is pending" in text and "/zarr/" in text)


if not any(isinstance(f, _AbandonedZarrReads) for f in logging.getLogger("asyncio").filters):
    logging.getLogger("asyncio").addFilter(_AbandonedZarrReads())

LAYOUT_VERSION = "1"
COMPLETE_ATTR = "s2forecast_complete"

# WeatherBench2 name -> (units, long_name, CF standard_name or None); plausible values in these
# units: s2forecast.data.plausibility.PLAUSIBLE
VARIABLES: dict[str, tuple[str, str, str | None]] = {
    "geopotential": ("m**2 s**-2", "Geopotential", "geopotential"),
    "temperature": ("K", "Temperature", "air_temperature"),
    "u_component_of_wind": ("m s**-1", "U component of wind", "eastward_wind"),
    "v_component_of_wind": ("m s**-1", "V component of wind", "northward_wind"),
    "specific_humidity": ("kg kg**-1", "Specific humidity", "specific_humidity"),
    "vertical_velocity": ("Pa s**-1", "Vertical velocity", "lagrangian_tendency_of_air_pressure"),
    "2m_temperature": ("K", "2 metre temperature", "air_temperature"),
    "10m_u_component_of_wind": ("m s**-1", "10 metre U wind component", "eastward_wind"),
    "10m_v_component_of_wind": ("m s**-1", "10 metre V wind component", "northward_wind"),
    "mean_sea_level_pressure": ("Pa", "Mean sea level pressure", "air_pressure_at_mean_sea_level"),
    "surface_pressure": ("Pa", "Surface pressure", "surface_air_pressure"),
    "total_precipitation": ("m", "Total precipitation", "precipitation_amount"),
    "total_precipitation_6hr": ("m", "Total precipitation over 6 hours", "precipitation_amount"),
    "2m_dewpoint_temperature": ("K", "2 metre dewpoint temperature", "dew_point_temperature"),
    "total_column_water_vapour": ("kg m**-2", "Total column water vapour", "atmosphere_mass_content_of_water_vapor"),
    "land_sea_mask": ("1", "Land-sea mask", "land_binary_mask"),
    "geopotential_at_surface": ("m**2 s**-2", "Geopotential at surface", "surface_geopotential"),
    # shallow-water equations (s2forecast generate-swe)
    "geopotential_height": ("m", "Fluid layer depth (geopotential height)", "geopotential_height"),
    "vorticity": ("s**-1", "Relative vorticity", "atmosphere_relative_vorticity"),
    "divergence": ("s**-1", "Horizontal divergence", "divergence_of_wind"),
}
STATIC_VARIABLES = ("land_sea_mask", "geopotential_at_surface")
WB2_LEVELS = (50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000)


def normalize_units(units: str) -> str:
    """Canonical spelling of a units string: 'm2 s-2', 'm^2/s^2', 'm**2 s**-2' -> 'm**2 s**-2'."""
    text = units.strip().replace("^", "**")
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"([a-zA-Z])(-?\d)", r"\1**\2", text)  # m2 -> m**2, s-2 -> s**-2
    if "/" in text:  # m/s -> m s**-1 (one denominator)
        numerator, denominator = text.split("/", 1)
        power = re.match(r"^\s*([a-zA-Z]+)(?:\*\*(\d+))?\s*$", denominator)
        if power:
            exponent = int(power.group(2) or 1)
            text = f"{numerator.strip()} {power.group(1)}**-{exponent}"
    aliases = {
        "(0 - 1)": "1",
        "0-1": "1",
        "dimensionless": "1",
        "~": "1",
        "kg kg**-1": "kg kg**-1",
        "m s**-1": "m s**-1",
        "kelvin": "K",  # UDUNITS' names of K and Pa
        "degK": "K",
        "pascal": "Pa",
    }
    return aliases.get(text, text)


def cf_attributes(name: str) -> dict[str, str]:
    """CF attributes of a WeatherBench2 variable."""
    units, long_name, standard_name = VARIABLES[name]
    attrs = {"units": units, "long_name": long_name}
    if standard_name:
        attrs["standard_name"] = standard_name
    return attrs


# the trailing dims of every field in the model's order; any others (time, lead, member) come first
TRAILING_DIMS = ("level", "latitude", "longitude")


def to_model_order(ds: xr.Dataset, leading: tuple[str, ...] = ("time",)) -> xr.Dataset:
    """The dataset in the model's layout, whatever the store's dim order and latitude direction.

    Every variable becomes ``(*leading, <other dims>, [level], [latitude], [longitude])`` (dims it
    lacks are left out; other dims keep their relative order), e.g. ``(time, level, latitude,
    longitude)`` from WeatherBench2's ``(time, level, longitude, latitude)``; latitude runs north ->
    south, the order of ``Grid`` and of every model (torch-harmonics: colatitude from the north
    pole); longitudes run east from the first at or after 0 E, in [0, 360)
    (``longitudes_from_zero``). This is the one place where a store's layout and the model's
    meet: every reader goes through it (``open_store``, evaluation's forecast, truth and
    climatology).

    Lazy: reversing an index reads no data; a variable read from a file that must be transposed
    becomes a dask array in the file's own chunks (``preferred_chunks``; else one chunk per
    ``leading`` step), so reading one time step still reads only that step's chunks (a transposed
    backend array would be read by vectorized indexing instead, with index arrays as large as the
    field). A variable already in order, or in memory, stays as it is (numpy transposes a view).

    Args:
        ds: a dataset; latitudes in degrees (without a ``latitude`` coordinate none is reversed).
        leading: dims that go first, in this order, where a variable has them.
    """
    fields = {}
    for name, var in ds.data_vars.items():
        first = [d for d in leading if d in var.dims]
        last = [d for d in TRAILING_DIMS if d in var.dims]
        order = (*first, *(d for d in var.dims if d not in first and d not in last), *last)
        if order == var.dims:
            continue
        if var.chunks is None and var.encoding:  # read from a file, lazily: dask in its chunks, then transpose
            preferred = var.encoding.get("preferred_chunks") or {}
            var = var.chunk({d: preferred.get(d, 1 if d in leading else -1) for d in var.dims})
        fields[name] = var.transpose(*order)
    if fields:
        ds = ds.assign(fields)
    ds = naive_utc_times(ds)
    lat = ds["latitude"].values if "latitude" in ds.coords else np.empty(0)
    if lat.ndim == 1 and lat.size > 1 and np.any(np.diff(lat) > 0):
        if np.all(np.diff(lat) > 0):
            ds = ds.isel(latitude=slice(None, None, -1))
        else:  # in no order (a regridder's, a merge's): sorted north -> south, as lazily as a reversal
            ds = ds.isel(latitude=np.argsort(-lat, kind="stable"))
    return float64_coordinates(longitudes_from_zero(ds))


def float64_coordinates(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with float64 latitudes and longitudes: float32 ones (of the very same values) made the
    forcings, forecasts and spectra's frequencies of a store differ in their last bits from those of
    the same store in float64, and results of the two no longer aligned on their coordinates."""
    cast = {
        name: (name, ds[name].values.astype(np.float64), ds[name].attrs)
        for name in ("latitude", "longitude")
        if name in ds.coords
        and ds[name].dims == (name,)
        and ds[name].dtype.kind == "f"
        and ds[name].dtype != np.float64
    }
    return ds.assign_coords(cast) if cast else ds


def naive_utc_times(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its time-zone-aware time indexes (a pandas ``DatetimeIndex`` with ``tz``, from
    Python: files hold UTC) as the naive UTC ``datetime64[ns]`` every time axis here is."""
    aware = {
        name: index.tz_convert("UTC").tz_localize(None).as_unit("ns")
        for name, index in ds.indexes.items()
        if isinstance(index, pd.DatetimeIndex) and index.tz is not None
    }
    return ds.assign_coords({name: (name, index, ds[name].attrs) for name, index in aware.items()}) if aware else ds


def longitudes_from_zero(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with longitudes in [0, 360), ascending: the first column is the smallest longitude
    east of 0 E, whatever the store's convention (-180..180, 0..360, another first column).

    The networks are equivariant at best to column shifts by a multiple of their latent grid's
    stride (``scale_factor``, the patch size), and with SpRePE, RoPE or APE (fixed on the Earth) to
    no shift: the same data stored from
    -180 and from 0 on a 30-column grid (a 15-column shift) gave forecasts 0.55 K apart (issue 29). So
    every reader puts the columns in this one order. Lazy: an index permutation reads no data.
    """
    if "longitude" not in ds.coords or ds["longitude"].ndim != 1 or ds.sizes["longitude"] < 2:
        return ds
    lon = ds["longitude"].values.astype(np.float64)
    east = east_longitudes(lon)
    order = np.argsort(east, kind="stable")
    if np.array_equal(order, np.arange(lon.size)) and np.array_equal(east, lon):
        return ds
    ds = ds.isel(longitude=order)
    attrs = ds["longitude"].attrs
    return ds.assign_coords(longitude=("longitude", east[order].astype(ds["longitude"].dtype), attrs))


def grid_of(ds: xr.Dataset) -> "Grid":
    """The ``Grid`` of a dataset's latitude/longitude coordinates, checked against ``grid_kind``."""
    from s2forecast.geometry import Grid

    grid = Grid.from_coords(ds["latitude"].values, ds["longitude"].values)
    recorded = ds.attrs.get("grid_kind")
    if recorded is not None and recorded != grid.kind:
        raise UserError(
            f"store attribute grid_kind={recorded!r} but its latitudes are those of a {grid.kind!r} grid; "
            "fix the attribute or regenerate the store"
        )
    return grid


@dataclass(frozen=True)
class StoreInfo:
    """What a reader needs to know about a store before reading data."""

    path: str
    grid: "Grid"
    times: np.ndarray  # datetime64[ns]
    variables: tuple[str, ...]  # time-dependent fields
    static: tuple[str, ...]
    levels: tuple[int, ...]
    not_fields: tuple[str, ...] = ()  # other variables with a time dim (CDS's expver, time_bnds): read by no command


# fsspec protocols whose filesystem lives in an optional package: protocol -> (package, extra)
REMOTE_PACKAGES = {"gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"), "s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3")}


def _check_protocol(url: str) -> None:
    """One line naming the package (and pip extra) a URL's protocol needs, when it is missing."""
    protocol = url.split("://", 1)[0].lower()
    if protocol in REMOTE_PACKAGES:
        package, extra = REMOTE_PACKAGES[protocol]
        try:
            __import__(package)
        except ImportError:
            raise UserError(
                f"reading {protocol}:// URLs needs {package}: pip install {package} (in a clone of s2forecast: pip "
                f"install '.[{extra}]')"
            ) from None


def open_store(
    path: str | Path, require_complete: bool = True, chunks: dict | None = None, storage_options: dict | None = None
) -> xr.Dataset:
    """Open a store lazily, in the model's dim order and latitude direction (``to_model_order``):
    the one way every reader opens a store.

    Args:
        path: the store: a local path or an fsspec URL (zarr v2 or v3).
        require_complete: refuse a store a writer has not finished.
        storage_options: fsspec options of a URL, e.g. ``{"token": "anon"}`` for public
            Google Cloud Storage buckets (gcsfs), ``{"anon": True}`` for public S3 (s3fs).
        chunks: None (no dask graph: xarray's lazy indexing reads only the chunks asked for),
            or dask chunks for streamed reductions (``{}``: the store's own chunks).

    Returns:
        The dataset; ``attrs[GENERATION_ATTR]`` (when the store has one) is the generation to
        pass to ``check_unchanged`` once the reading is done.

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: ``path`` is not a zarr store, or the store is still being written (or was
            interrupted) and ``require_complete`` is set.
    """
    options = {}
    if is_url(path):
        _check_protocol(path)
        options = {"storage_options": storage_options or {}}
    else:
        path = Path(path).expanduser()  # "~/era5.zarr" from a YAML config or a quoted option: the home directory
        if not path.exists():
            raise FileNotFoundError(f"no zarr store at {path}")
        if zarr_attributes(path) is None:
            raise UserError(
                f"{path} is not a zarr store (no zarr.json or .zgroup metadata); pass the store written by "
                "convert-era5 or generate-swe"
            )
    try:
        ds = open_zarr(path, chunks, **options)
    except UserError:
        raise
    except Exception as error:
        if is_url(path):  # the remote filesystem's own errors (aiohttp, gcsfs, s3fs): one line
            raise UserError(f"cannot read the zarr store at {path}: {remote_reason(error)}") from None
        if isinstance(error, KeyError | ValueError | FileNotFoundError | OSError):
            raise UserError(f"cannot read the zarr store {path}: {error}") from None
        raise
    if "time" in ds.coords and not np.issubdtype(ds["time"].dtype, np.datetime64):
        example = ds["time"].values.ravel()[:1].tolist()
        calendar = ds["time"].encoding.get("calendar") or ds["time"].attrs.get("calendar")
        if problem := cftime_problem(ds["time"].values, calendar):  # decoded, but to cftime
            raise UserError(f"the time coordinate of store {path} {problem}")
        raise UserError(
            f"the time coordinate of store {path} holds {ds['time'].dtype} values such as {example}, not dates "
            "(datetime64): rewrite the store with CF-encoded times (e.g. units 'hours since 2000-01-01') or "
            "datetime64 values"
        )
    if require_complete and ds.attrs.get(COMPLETE_ATTR, "true") != "true":
        raise UserError(
            f"store {path} is incomplete (attribute {COMPLETE_ATTR}={ds.attrs.get(COMPLETE_ATTR)!r}): a writer was "
            "interrupted; rerun the same convert-era5 / generate-swe command to finish it"
        )
    if require_complete:
        _check_written(ds, path)
    for name in ("latitude", "longitude"):
        if name not in ds.coords:
            raise UserError(f"store {path} has no {name!r} coordinate; dims are {dict(ds.sizes)}{rename_hint(ds)}")
    if "time" in ds.dims and not ds.sizes["time"]:
        raise UserError(f"store {path} holds no time steps (its time dimension is empty); write it again")
    _check_levels_in_hpa(ds, path)
    return to_model_order(static_at_first_time(ds))


MAX_LEVEL_HPA = 1100.0  # above any pressure on Earth: a level beyond it is in Pa (CMIP's plev)


def _check_levels_in_hpa(ds: xr.Dataset, path) -> None:
    """Refuse a ``level`` coordinate in Pa: read as hPa, 50000 "hPa" made channels ``temperature/50000``
    and a plausibility refusal that blamed the values of geopotential."""
    if "level" not in ds.coords or not np.issubdtype(ds["level"].dtype, np.number) or not ds["level"].size:
        return
    levels = ds["level"].values
    units = str(ds["level"].attrs.get("units", "")).strip()
    shown = ", ".join(f"{x:g}" for x in levels[:4]) + (", ..." if levels.size > 4 else "")
    divide = "divide it by 100 (xarray: ds['level'] = ds['level'] / 100, units 'hPa')"
    if np.nanmax(levels) > MAX_LEVEL_HPA:
        raise UserError(
            f"the level coordinate of store {path} ({shown}{', units Pa' if units == 'Pa' else ''}) is in Pa; "
            f"s2forecast reads pressure levels in hPa: {divide}"
        )
    if units == "Pa":  # values of hPa under a Pa label: which one is wrong, the values cannot tell for sure
        raise UserError(
            f"the level coordinate of store {path} ({shown}) is labelled Pa, and its values look like hPa: set its "
            f"units attribute to 'hPa', or if they really are Pa, {divide}"
        )


def static_at_first_time(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its static fields (``STATIC_VARIABLES``) that have a time dim, as CDS downloads and
    ARCO-ERA5 hold them, taken at the first time: (latitude, longitude), as every reader takes a
    static field (they were counted as variables and left out of ``static="auto"`` without a word)."""
    per_time = {"time", "latitude", "longitude"}
    timed = [name for name in STATIC_VARIABLES if name in ds and set(ds[name].dims) == per_time]
    return ds.assign({name: ds[name].isel(time=0, drop=True) for name in timed}) if timed else ds


# the names other layouts give the dims s2forecast reads (CDS, CMIP, cfgrib)
DIM_ALIASES = {
    "latitude": ("lat",),
    "longitude": ("lon",),
    "time": ("valid_time",),
    "level": ("pressure_level", "isobaricInhPa", "plev"),
}


def rename_hint(ds: xr.Dataset | xr.DataArray) -> str:
    """ "; rename ... (xarray: ds.rename(...))" for the dims of ``ds`` that are another layout's name of
    one s2forecast reads (``DIM_ALIASES``), "" when none is."""
    renames = {alias: name for name, aliases in DIM_ALIASES.items() for alias in aliases if alias in ds.dims}
    renames = {alias: name for alias, name in renames.items() if name not in ds.dims}
    if not renames:
        return ""
    listed = ", ".join(f"{alias}={name!r}" for alias, name in renames.items())
    pascals = " and give the levels in hPa (CMIP's plev is in Pa)" if "plev" in renames else ""
    return (
        f"; rename them as s2forecast reads them: ds.rename({listed}){pascals} (or convert CDS files with convert-era5)"
    )


def open_url(url: str, what: str, storage_options: dict | None = None, chunks=None) -> xr.Dataset:
    """A zarr dataset at a URL that is not a store of this layout (a forecast, a climatology), as
    ``open_zarr`` opens it; one line naming ``what`` and why when it cannot be read."""
    _check_protocol(url)
    if url.rstrip("/").endswith(".nc"):
        raise UserError(
            f"the {what} {url} is a NetCDF file at a URL: s2forecast reads zarr stores at URLs; download the file "
            "and pass its local path"
        )
    try:
        return open_zarr(url, chunks, storage_options=storage_options or {})
    except UserError:
        raise
    except Exception as error:
        raise UserError(f"cannot read the {what} at {url}: {remote_reason(error)}") from None


def open_as_stored(path, storage_options: dict | None = None) -> xr.Dataset:
    """The store in its own layout (dim order, latitude direction, longitudes) and without dask:
    xarray's lazy indexing reads only the chunks asked for, with no transposing graph (what the
    reductions of ``stats`` and ``climatology`` read their blocks from)."""
    return open_zarr(path, None, **({"storage_options": storage_options or {}} if is_url(path) else {}))


def open_zarr(path, chunks=None, **options) -> xr.Dataset:
    """``xarray.open_zarr`` with consolidated metadata, or without when the store has none; a chunk size
    of 0 in the metadata is refused in one line (``_check_chunks``) instead of dask's or zarr's
    ZeroDivisionError. ``options``: more arguments of ``open_zarr`` (``storage_options``)."""

    def opened(chunks):
        with warnings.catch_warnings():  # a file of another program inside the store (a README, a JSON) is no harm
            warnings.filterwarnings("ignore", message=".*is not recognized as a component of a Zarr hierarchy")
            try:
                return xr.open_zarr(path, consolidated=True, chunks=chunks, **options)
            except (KeyError, ValueError, FileNotFoundError):
                return xr.open_zarr(path, consolidated=False, chunks=chunks, **options)

    try:
        ds = opened(chunks)
    except ZeroDivisionError:  # dask divided by it while chunking: find and name it
        if chunks is None:
            raise
        _check_chunks(opened(None), path)
        raise
    _check_chunks(ds, path)
    return ds


def _check_chunks(ds: xr.Dataset, path) -> None:
    """Refuse a zarr variable whose metadata gives a chunk (or shard) size of 0: a damaged store that
    zarr fails on with a ZeroDivisionError at the first read."""
    for name, var in ds.variables.items():
        for kind in ("chunks", "shards"):
            sizes = var.encoding.get(kind)
            if sizes is None or all(int(size) > 0 for size in sizes):
                continue
            dim = var.dims[next(i for i, size in enumerate(sizes) if int(size) <= 0)]
            raise UserError(
                f"variable {name} of {path} has a zarr {kind[:-1]} size of 0 along {dim} in its metadata ({kind} "
                f"{tuple(int(size) for size in sizes)}): the store is damaged; rewrite it"
            )


def _check_written(ds: xr.Dataset, path) -> None:
    """Refuse a store whose ``written`` flags say some time steps were never written, whatever its
    completeness attribute says (a store of an older writer, or one whose attribute was lost, has
    none): their chunks are missing and would read as fill values."""
    if "written" not in ds.variables or ds["written"].dims != ("time",):
        return
    written = np.asarray(ds["written"].values).astype(bool)
    if written.all():
        return
    first = ds["time"].values[np.flatnonzero(~written)[0]]
    raise UserError(
        f"store {path} has {int((~written).sum())} of {written.size} time steps that were never written (its "
        f"'written' flags; the first at {format_time(first)}): a writer was interrupted; rerun the same convert-era5 / "
        "generate-swe command to finish it"
    )


def remote_reason(error: BaseException) -> str:
    """Why a URL could not be read, in one line; denied access names the option that fixes it."""
    reason = one_line_reason(error)
    status = getattr(error, "status", None) or getattr(error, "code", None)
    if isinstance(error, PermissionError) or status in (401, 403) or reason.startswith(("401", "403")):
        reason += (
            '; access denied: pass credentials with --storage-options (e.g. \'{"token": "anon"}\' for a '
            "public gs:// bucket, '{\"anon\": true}' for public s3://, '{\"headers\": {...}}' for https)"
        )
    elif not isinstance(error, ModuleNotFoundError):  # a missing gcsfs/s3fs names itself and its extra
        reason += "; check the URL (the store's root) and that its server answers"
    return reason


def one_line_reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def check_store_unchanged(path: str | Path, ds: xr.Dataset) -> None:
    """Raise if the store at ``path`` was rewritten since ``ds`` was opened from it (``open_store``).
    A store at a URL is not s2forecast's to rewrite: nothing to check."""
    if is_url(path):
        return
    check_unchanged(path, ds.attrs.get(GENERATION_ATTR), "store")


def check_units(name: str, units: str | None, path) -> None:
    """A known variable must carry its canonical units (``VARIABLES``) where a model reads it:
    checkpoints, forecasts and their plausibility checks assume them, so a store labelling one
    otherwise is refused, not converted. (Scoring and statistics are unit-agnostic and accept
    any consistent units.)"""
    if name not in VARIABLES or units is None:
        return
    expected = VARIABLES[name][0]
    if normalize_units(str(units)) != normalize_units(expected):
        raise UserError(
            f"variable {name} of store {path} has units {units!r}, not {expected!r}; convert the values to "
            f"{expected} (convert-era5 does) or fix the units attribute if only the label is wrong"
        )


def is_field(variable: xr.DataArray) -> bool:
    """A gridded field: latitude and longitude dims, and numbers (or booleans). What the commands read,
    average and score; a store made from CDS NetCDF files may also hold ``expver`` (a string per time)
    or ``time_bnds`` ((time, nv) datetimes), which are not."""
    numeric = np.issubdtype(variable.dtype, np.number) or np.issubdtype(variable.dtype, np.bool_)
    return numeric and {"latitude", "longitude"} <= set(variable.dims)


def not_fields(ds: xr.Dataset) -> list[str]:
    """The variables with a time dim that are not fields (``is_field``), s2forecast's own ``written`` aside."""
    return [n for n, v in ds.data_vars.items() if n != "written" and "time" in v.dims and not is_field(v)]


def describe_not_fields(ds: xr.Dataset, names: list[str]) -> str:
    """``names`` with their dims and types, for a message: ``expver (time) <U4, time_bnds (time, nv) ...``."""
    return ", ".join(f"{n} ({', '.join(map(str, ds[n].dims))}) {ds[n].dtype}" for n in names)


def require_time_dim(ds: xr.Dataset | xr.DataArray, what: str) -> None:
    """Refuse data without a ``time`` dimension, naming ``what`` (e.g. "store X") and the rename
    that fixes it: a dim of another name that holds the times (the ERA5 sample's ``time_index``,
    CDS's ``valid_time``)."""
    if "time" in ds.dims:
        return
    timelike = [d for d in ds.dims if "time" in str(d).lower() and d not in DIM_ALIASES["time"]]
    hint = (
        f": if {timelike[0]!r} holds the times, rename it to 'time' with datetime64 (or CF-encoded) values "
        f"(xarray: ds.rename({timelike[0]}='time')) and write the store again"
        if timelike
        else rename_hint(ds)
    )
    raise UserError(f"{what} has no 'time' dimension; dims are {dict(ds.sizes)}{hint}")


def describe(ds: xr.Dataset, path: str = "") -> StoreInfo:
    """Grid, times, variables and levels of an opened store."""
    require_time_dim(ds, f"store {path}")
    variables, static = [], []
    for name, var in ds.data_vars.items():
        if name == "written" or not is_field(var):
            continue
        if "time" in var.dims:
            variables.append(name)
        elif set(var.dims) == {"latitude", "longitude"}:
            static.append(name)
    levels = tuple(int(x) for x in ds["level"].values) if "level" in ds.coords else ()
    return StoreInfo(
        str(path), grid_of(ds), ds["time"].values, tuple(variables), tuple(static), levels, tuple(not_fields(ds))
    )
