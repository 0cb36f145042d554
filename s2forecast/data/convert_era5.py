"""Convert ERA5 as downloaded from the Copernicus Climate Data Store into the s2forecast store layout.

``s2forecast convert-era5 INPUT... --out STORE.zarr`` reads the files users get from the CDS and writes
one store in the layout of ``s2forecast.data.store`` (WeatherBench2 names, ``level`` in hPa,
latitude north -> south, longitude in [0, 360), one time step per chunk, float32).

Inputs understood:
  - NetCDF from the new CDS API: dims ``valid_time``, ``pressure_level``, ``latitude``, ``longitude``,
    an optional ensemble ``number`` dimension (a scalar ``number`` coordinate is ignored), an
    ``expver`` coordinate (dropped; as a dimension, as in old-CDS files mixing ERA5 and ERA5T, the
    experiments are merged, the first non-missing value winning);
  - NetCDF written by cfgrib from GRIB downloads: dims ``time`` and maybe ``step``, ``valid_time``
    as a coordinate, level dimension ``isobaricInhPa``; length-1 dimensions cfgrib squeezed into
    scalar coordinates are restored. GRIB files (``.grib``, ``.grb``, ``.grib2``) are opened with
    cfgrib when it is installed;
  - the old CDS NetCDF: dims ``time``, ``level``.

Time: the store's ``time`` is the valid time. If a file has both ``time`` (initialization) and
``step``, valid time = time + step and the two dimensions are flattened into one (analysis files
have a single step 0, so valid time = time; one forecast, whose ``time`` cfgrib squeezed to a
scalar, has its steps' valid times). cfgrib fills the grid of every initialization x every step
with NaN where no GRIB message is (ERA5's precipitation from the CDS: forecasts from 06 and 18 UTC,
steps 1-12 h, only the hours asked for): a cell NaN in every variable at every point is that
padding and left out. A file without times, or with missing (NaT) times, is refused. Level:
``pressure_level`` / ``isobaricInhPa`` / ``level`` become ``level``, integer hPa, each once.

Variables: ECMWF short names map to WeatherBench2 names (``ERA5_NAMES``; files in those names, e.g.
WeatherBench2's own, are read as they are); a ``z`` without a level
dimension is the surface geopotential (``geopotential_at_surface``). Static fields
(``land_sea_mask``, ``geopotential_at_surface``) are taken at the earliest time found and stored as
``(latitude, longitude)``. Units are checked with ``normalize_units`` against ``store.VARIABLES``, and
the values against them (``s2forecast.data.plausibility``: Celsius labelled K, hPa labelled Pa,
geopotential height labelled geopotential are refused).

Files may split the data by month and by variable: they are merged on time. Grids must agree
between files, a variable's times must not repeat across files, and every time-dependent variable
must cover the same times.

Writing goes through ``StoreWriter``: the skeleton first, then slabs of ``time_chunk`` time steps
(each computed in parallel by dask's threaded scheduler; or, with an ``Engine`` on a
dask.distributed cluster, one slab per worker, each writing its own region of the store), then
the completeness flag. A slab's reads are built for that slab alone (``_Record``): the memory of a
conversion does not grow with the length of the record. A rerun of
the same command after an interruption skips the time steps already written. With ``shards`` N,
the store is zarr v3 sharded (one file per N time steps and variable); N must divide
``time_chunk``, so that every slab writes whole shards and resumption stays safe (``StoreWriter``).
"""

import contextlib
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import dask
import numpy as np
import xarray as xr
from tqdm.auto import tqdm
from xarray.backends import BackendArray
from xarray.core import indexing

from s2forecast.data.coordinates import coordinate_tolerance, east_longitudes
from s2forecast.data.defaults import CONVERT_TIME_CHUNK
from s2forecast.data.engine import Engine
from s2forecast.data.netcdf_classic import required_size
from s2forecast.data.plausibility import check_plausible
from s2forecast.data.store import STATIC_VARIABLES, VARIABLES, normalize_units
from s2forecast.data.writer import InvalidInputData, StoreWriter, is_complete, lazy_empty, write_region
from s2forecast.output import RESUMABLE, byte_size, check_target, warn_if_short_of_disk
from s2forecast.provenance import history, python_call
from s2forecast.times import cftime_problem, format_time
from s2forecast.urls import is_url
from s2forecast.user_errors import UserError

if TYPE_CHECKING:
    from s2forecast.geometry import Grid

# ECMWF short name -> WeatherBench2 name. ``z`` is the pressure-level geopotential; without a level
# dimension it is the surface geopotential (SURFACE_GEOPOTENTIAL).
ERA5_NAMES: dict[str, str] = {
    "z": "geopotential",
    "t": "temperature",
    "u": "u_component_of_wind",
    "v": "v_component_of_wind",
    "q": "specific_humidity",
    "w": "vertical_velocity",
    "t2m": "2m_temperature",
    "u10": "10m_u_component_of_wind",
    "v10": "10m_v_component_of_wind",
    "msl": "mean_sea_level_pressure",
    "sp": "surface_pressure",
    "tp": "total_precipitation",
    "d2m": "2m_dewpoint_temperature",
    "tcwv": "total_column_water_vapour",
    "lsm": "land_sea_mask",
}
SURFACE_GEOPOTENTIAL = "geopotential_at_surface"
MEMBER_DIMS = ("number", "realization", "member")  # ensemble members: ECMWF/cfgrib, WeatherBench2 and CF, generic
# also read as they are (WB2's own files; WB2 accumulates precipitation over the 6 h step)
WB2_NAMES = frozenset({*ERA5_NAMES.values(), SURFACE_GEOPOTENTIAL, "total_precipitation_6hr"})
PRESSURE_LEVEL_VARIABLES = frozenset(ERA5_NAMES[short] for short in ("z", "t", "u", "v", "q", "w"))
SOURCE = "ERA5 via the Copernicus Climate Data Store"
ACKNOWLEDGEMENT = "Contains modified Copernicus Climate Change Service information"

SIGNATURE_VERSION = 1

_LEVEL_DIMS = ("pressure_level", "isobaricInhPa", "level")
_GRIB_SUFFIXES = (".grib", ".grb", ".grib1", ".grib2", ".grb2")
_INPUT_SUFFIXES = (".nc", ".nc4", ".netcdf", *_GRIB_SUFFIXES)
_DIMS_3D = ("time", "level", "latitude", "longitude")
_DIMS_2D = ("time", "latitude", "longitude")


def resolve_variables(names: Iterable[str]) -> dict[str, set[str]]:
    """For each requested name (a WeatherBench2 name or an ECMWF short name), the WeatherBench2
    names it selects: ``z`` selects both ``geopotential`` and ``geopotential_at_surface``.

    Raises:
        ValueError: a name is neither, listing the valid ones.
    """
    known = WB2_NAMES
    selected = {}
    for name in names:
        if name in known:
            selected[name] = {name}
        elif name in ERA5_NAMES:
            selected[name] = {ERA5_NAMES[name], SURFACE_GEOPOTENTIAL} if name == "z" else {ERA5_NAMES[name]}
        else:
            raise UserError(
                f"unknown variable {name!r} in --variables; use ECMWF short names ({', '.join(ERA5_NAMES)}) or "
                f"WeatherBench2 names ({', '.join(sorted(known))})"
            )
    return selected


@dataclass
class _Field:
    """One variable of one input file, with the store's dims and latitude/longitude order.

    ``data`` is a lazy dask array with dims ``(time, [level,] latitude, longitude)``.
    """

    name: str
    path: Path
    data: xr.DataArray
    times: np.ndarray  # (time,) datetime64[ns], ascending


@dataclass
class _Input:
    """An opened, normalized input file: its fields and grid."""

    path: Path
    dataset: xr.Dataset
    latitude: np.ndarray  # north -> south
    longitude: np.ndarray  # ascending in [0, 360)
    fields: list[_Field] = field(default_factory=list)
    has_members: bool = False


# --- inputs -------------------------------------------------------------------------------------


# a pressure-level download of one level has no level dim (its 'z' reads as the surface geopotential)
_ONE_LEVEL_ADVICE = (
    "a one-level download of pressure-level fields has lost its level: download two levels or more, or add "
    "the level to the file (xarray: ds.expand_dims(level=[500]).to_netcdf(...))"
)
# said where a lone 'z' was read as the surface geopotential
_Z_WITHOUT_LEVEL = f" ('z' without a level dim is read as it; {_ONE_LEVEL_ADVICE})"
_ZIP_ADVICE = (
    "the new CDS zips the NetCDF files of a request that mixes kinds of fields (instant and accumulated); "
    "unzip it and pass the .nc files inside"
)


def resolve_inputs(inputs: Sequence[str | Path]) -> list[Path]:
    """Absolute, sorted, de-duplicated input files; a directory stands for its NetCDF/GRIB files.

    Raises:
        FileNotFoundError: an input does not exist, or a directory holds no input files.
    """
    paths = set()
    for entry in inputs:
        if is_url(entry) or any((Path(entry).expanduser() / name).is_file() for name in ("zarr.json", ".zgroup")):
            raise UserError(
                f"input {entry} is a zarr store or URL; convert-era5 converts the Climate Data Store's NetCDF or GRIB "
                "files, and stats, fit, rollout and evaluate read a zarr store in the WeatherBench2 layout (a time "
                "dimension, WeatherBench2's variable names) as it is (README: Data researchers already have)"
            )
        path = Path(entry).expanduser()
        if path.is_dir():
            files = [p for p in path.iterdir() if p.is_file()]
            found = [p for p in files if p.suffix.lower() in _INPUT_SUFFIXES]
            if zips := sorted(p.name for p in files if p.suffix.lower() == ".zip"):
                listed = ", ".join(zips[:3]) + ", ..." * (len(zips) > 3)
                if not found:
                    raise UserError(f"directory {path} holds zip archives ({listed}): {_ZIP_ADVICE}")
                # often the archive the .nc files beside it came from (unzip extracts in place)
                warnings.warn(
                    f"directory {path}: zip archives {listed} are not read; if they hold more than the .nc files "
                    "beside them, unzip them",
                    UserWarning,
                    stacklevel=2,
                )
            if not found:
                raise FileNotFoundError(f"directory {path} holds no {'/'.join(_INPUT_SUFFIXES)} files")
            paths.update(p.resolve() for p in found)
        elif path.is_file():
            paths.add(path.resolve())
        else:
            raise FileNotFoundError(f"input {path} does not exist")
    if not paths:
        raise FileNotFoundError("no input files given")
    return sorted(paths)


def _open(path: Path) -> xr.Dataset:
    """Open ``path`` lazily (no data read; no dask yet), its ensemble dim named ``number``."""
    if path.suffix.lower() in _GRIB_SUFFIXES:
        try:
            import cfgrib  # noqa: F401
        except ImportError as error:
            raise UserError(
                f"{path} is GRIB: install cfgrib (pip install cfgrib) or download NetCDF from the CDS"
            ) from error
        return xr.open_dataset(path, engine="cfgrib", cache=False, decode_timedelta=True)
    with path.open("rb") as file:
        if file.read(4) == b"PK\x03\x04":  # often saved as download.nc
            raise UserError(f"{path} is a zip archive: {_ZIP_ADVICE}")
    try:  # a classic NetCDF file cut short opens, and reads zeros past its end: refuse it first
        needed = required_size(path)
    except ValueError as error:
        raise UserError(f"cannot read {path} as NetCDF: {error}; download it again") from None
    if needed is not None and (size := path.stat().st_size) < needed:
        raise UserError(f"{path} is truncated ({size} bytes, its header needs {needed}): download it again")
    try:
        ds = xr.open_dataset(path, cache=False, decode_timedelta=True)
    except PermissionError:
        raise
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read {path} as NetCDF: {error}; download it again") from error
    return _members_as_number(ds, path)


def _members_as_number(ds: xr.Dataset, path: Path) -> xr.Dataset:
    """An ensemble dim named as WeatherBench2 and CF name it (``realization``, also what
    ``rollout`` writes) or ``member`` becomes ERA5's ``number``."""
    found = [dim for dim in MEMBER_DIMS if dim in ds.dims]
    if len(found) > 1:
        raise UserError(f"{path} has several ensemble member dims {found}; keep one")
    if not found or found[0] == "number":
        return ds
    return ds.drop_vars("number", errors="ignore").rename({found[0]: "number"})  # a scalar number: no ensemble


def valid_times(path: str | Path) -> np.ndarray:
    """(time,) sorted unique datetime64[ns] valid times of an ERA5 NetCDF or GRIB file as the CDS
    delivers it (what ``convert_era5`` would make the store's times)."""
    path = Path(path)
    with _open(path) as ds:
        return np.unique(_normalize_time(ds, path)["time"].values)


def ensemble_members(path: str | Path) -> list[int]:
    """The ensemble members (values of the ``number`` dimension) of an ERA5 NetCDF or GRIB
    file, [] when it has no such dimension (a scalar ``number`` coordinate is no ensemble)."""
    path = Path(path)
    with _open(path) as ds:
        return [int(x) for x in ds["number"].values] if "number" in ds.dims else []


def file_grid(path: str | Path) -> "Grid | None":
    """The grid of an ERA5 NetCDF or GRIB file (as ``convert_era5`` would lay it out), None where its
    latitudes/longitudes make no grid s2forecast knows (``convert_era5`` says why)."""
    from s2forecast.geometry import Grid

    with _open(Path(path)) as ds:
        ds = _latlon_named(ds)
        if "latitude" not in ds.dims or "longitude" not in ds.dims:
            return None
        ds = _store_grid_order(ds)  # lazy: no data read
        try:
            return Grid.from_coords(ds["latitude"].values, ds["longitude"].values)
        except ValueError:
            return None


def _latlon_named(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with older files' ``lat``/``lon`` dims named ``latitude``/``longitude``."""
    return ds.rename({old: new for old, new in (("lat", "latitude"), ("lon", "longitude")) if old in ds.dims})


def _squeezed_to_dims(ds: xr.Dataset, names: Iterable[str]) -> xr.Dataset:
    """Promote scalar coordinates (length-1 dims cfgrib squeezed away) back to dimensions, the data
    chunked first: xarray reads a lazily opened file whole to add a dimension to it."""
    squeezed = [name for name in names if name in ds.coords and name not in ds.dims and ds[name].ndim == 0]
    return _chunked(ds).expand_dims(squeezed) if squeezed else ds


def _normalize_levels(ds: xr.Dataset, path: Path) -> xr.Dataset:
    """Rename the level dimension to ``level`` with integer hPa values."""
    names = [name for name in _LEVEL_DIMS if name in ds.coords or name in ds.dims]
    if len(names) > 1:
        raise UserError(f"{path} has several level coordinates {names}; expected one of {_LEVEL_DIMS}")
    if not names:
        return ds
    name = names[0]
    if name not in ds.coords:
        raise UserError(
            f"{path}: dimension {name!r} has no coordinate values; add the pressure levels (hPa) as its coordinate"
        )
    ds = _squeezed_to_dims(ds, [name])
    values = np.asarray(ds[name].values, dtype=np.float64)
    if str(ds[name].attrs.get("units", "")).strip() == "Pa":
        values = values / 100.0
    if not np.allclose(values, np.round(values)):
        raise UserError(f"{path}: pressure levels {values.tolist()} are not whole hPa")
    unique, counts = np.unique(np.round(values), return_counts=True)
    if (counts > 1).any():
        repeated = [f"{level:g}" for level in unique[counts > 1]]
        raise UserError(
            f"{path}: pressure level(s) {', '.join(repeated)} hPa appear more than once in its {name!r} coordinate "
            f"({', '.join(f'{level:g}' for level in values)}); each level must appear once: download it again"
        )
    ds = ds.rename({name: "level"}) if name != "level" else ds
    return ds.assign_coords(level=np.round(values).astype(np.int64))


def _normalize_time(ds: xr.Dataset, path: Path) -> xr.Dataset:
    """Give ``ds`` a single ``time`` dimension holding valid times (datetime64[ns]); nothing is read
    but, for a ``time`` x ``step`` grid, one value per grid cell (``_padding``).

    New CDS: ``valid_time`` is the dimension. cfgrib: ``time`` (initialization) and ``step`` are
    dimensions or scalars, ``valid_time`` a coordinate. A ``step`` dimension longer than one is
    flattened with ``time`` into one valid-time dimension (``_flatten_time_step``); with a scalar
    ``time`` (one initialization), ``step`` becomes the time dimension.

    Raises:
        UserError: no time steps, missing (NaT) times, times that are not dates, or a forecast
            file's leads (``prediction_timedelta``/``lead_time``: one lead of initial conditions is asked).
    """
    leads = [name for name in ("prediction_timedelta", "lead_time") if name in ds.dims and ds.sizes[name] > 1]
    if leads:
        raise UserError(
            f"{path} is a forecast file of {ds.sizes[leads[0]]} leads ({leads[0]!r}); initial conditions are states "
            f"at their times: select one lead first, e.g. ds.isel({leads[0]}=-1)"
        )
    if "valid_time" in ds.dims:
        drop = [name for name in ("time", "step") if name in ds.coords and name not in ds.dims]
        ds = ds.drop_vars(drop).rename({"valid_time": "time"})
    elif "time" in ds.dims or "time" in ds.coords:
        if "step" in ds.dims and ds.sizes["step"] == 1:
            ds = ds.isel(step=0)
        # one lead of a forecast (WeatherBench2's prediction_timedelta, a scalar once selected): a step
        ds = ds.rename({name: "step" for name in ("prediction_timedelta", "lead_time") if name in ds.coords})
        if "valid_time" in ds.coords:
            valid = ds["valid_time"]
        elif "step" in ds.coords:
            valid = ds["time"] + ds["step"]
        else:
            valid = ds["time"]
        if "step" in ds.dims and "time" in ds.dims:
            ds = _flatten_time_step(ds, valid, path)
        elif "step" in ds.dims:  # one initialization, cfgrib squeezed ``time`` to a scalar
            ds = ds.drop_vars(["valid_time", "time", "step"], errors="ignore").rename_dims({"step": "time"})
            ds = ds.assign_coords(time=np.asarray(valid.values).ravel())
        else:
            ds = _squeezed_to_dims(ds, ["time"])
            ds = ds.drop_vars(["valid_time", "step"], errors="ignore")
            ds = ds.assign_coords(time=np.asarray(valid.values).ravel())
    else:
        return ds
    times = ds["time"].values
    if not np.issubdtype(times.dtype, np.datetime64):
        if problem := cftime_problem(times, ds["time"].encoding.get("calendar")):
            raise UserError(f"{path}: the time coordinate {problem}")
        raise UserError(
            f"{path}: time values {', '.join(map(str, times.ravel()[:3]))} are not dates (dtype {times.dtype}); the "
            "time coordinate needs CF 'units' such as 'hours since 1900-01-01'"
        )
    if times.size == 0:
        raise UserError(f"{path} holds no time steps (its time dimension is empty); download it again or leave it out")
    missing = int(np.isnat(times).sum())
    if missing:
        raise UserError(
            f"{path}: {missing} of its {times.size} times are missing (NaT: a fill value in its time coordinate); "
            "download it again or drop those times from the file"
        )
    return ds.assign_coords(time=times.astype("datetime64[ns]"))


def _flatten_time_step(ds: xr.Dataset, valid: xr.DataArray, path: Path) -> xr.Dataset:
    """A cfgrib ``time`` x ``step`` grid as one ``time`` dimension of valid times, time-major, its
    padding left out (``_padding``); read lazily by the file's own indexing (``_ValidTimeArray``).

    Args:
        valid: valid times over ``(time, step)`` (either order).
    """
    padding = _padding(ds)
    if padding.size and padding.all():
        raise UserError(
            f"{path} holds no data: each of its {padding.size} forecast fields (initialization time x step) is NaN "
            "everywhere; download it again or leave it out"
        )
    init, step = np.nonzero(~padding)  # time-major
    valid = xr.broadcast(valid, ds["time"], ds["step"])[0].transpose("time", "step").values
    ds = ds.drop_vars(["valid_time", "time", "step"], errors="ignore")
    variables = {}
    for name, var in ds.data_vars.items():
        if "time" in var.dims and "step" in var.dims:
            other = tuple(dim for dim in var.dims if dim not in ("time", "step"))
            lazy = indexing.LazilyIndexedArray(_ValidTimeArray(var.variable, init, step))
            variables[name] = xr.Variable(("time", *other), lazy, attrs=var.attrs)
        elif "time" in var.dims:
            variables[name] = var.variable.isel(time=init)
        elif "step" in var.dims:
            variables[name] = var.variable.isel(step=step).rename({"step": "time"})
        else:
            variables[name] = var.variable
    coords = {name: c.variable for name, c in ds.coords.items() if "time" not in c.dims and "step" not in c.dims}
    return xr.Dataset(variables, coords=coords, attrs=ds.attrs).assign_coords(time=valid[init, step])


def _padding(ds: xr.Dataset) -> np.ndarray:
    """(time, step) bool: the cells of a cfgrib ``time`` x ``step`` grid that are padding.

    cfgrib lays GRIB messages out on every initialization time x every step found, NaN where no
    message is (ERA5's accumulations from the CDS: forecasts from 06 and 18 UTC, steps 1-12 h,
    and only the valid times asked for). A cell is padding when every variable is NaN at every
    point there; one variable at one point decides which cells to look at whole. A field missing
    in one variable only is no padding: it is kept, and refused when its slab is checked.
    """
    fields = [var.variable for var in ds.data_vars.values() if "time" in var.dims and "step" in var.dims]
    padding = np.zeros((ds.sizes["time"], ds.sizes["step"]), dtype=bool)
    if not fields or padding.size == 0 or any(size == 0 for size in fields[0].shape):
        return padding
    probe = fields[0].isel({dim: 0 for dim in fields[0].dims if dim not in ("time", "step")})
    values = np.asarray(probe.values, dtype=np.float64)  # reads one value per cell
    candidates = np.isnan(values if probe.dims == ("time", "step") else values.T)
    for i, j in np.argwhere(candidates):
        padding[i, j] = all(np.isnan(np.asarray(f.isel(time=i, step=j).values, np.float64)).all() for f in fields)
    return padding


class _ValidTimeArray(BackendArray):
    """A lazily indexed ``(time, step, ...)`` variable read as ``(valid, ...)``: valid time ``k`` is
    the cell ``(init[k], step[k])``, read on demand through the variable's own lazy indexing.

    xarray's vectorized indexing (``isel`` with two ``Variable`` indexers) would do the same
    lazily but keeps an int64 index per element and dimension: 8 times the float32 data of a
    ``(time, step, latitude, longitude)`` variable.
    """

    def __init__(self, variable: xr.Variable, init: np.ndarray, step: np.ndarray):
        self.variable, self.init, self.step = variable, init, step
        self.other = tuple(dim for dim in variable.dims if dim not in ("time", "step"))
        self.shape = (init.size, *(variable.sizes[dim] for dim in self.other))
        self.dtype = variable.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._read)

    def _read(self, key: tuple) -> np.ndarray:
        """``key``: per dimension an int, a slice or a 1-d int array (outer indexing)."""
        cells = np.arange(self.shape[0])[key[0]]
        rest = dict(zip(self.other, key[1:], strict=True))
        pieces = [  # synchronously: this may run in a dask task already
            self.variable.isel(time=self.init[k], step=self.step[k], **rest).compute(scheduler="synchronous").values
            for k in np.atleast_1d(cells)
        ]
        if np.ndim(cells) == 0:
            return pieces[0]
        if pieces:
            return np.stack(pieces)
        shape = np.empty(self.shape[1:])[key[1:]].shape  # no cell: the shape of the other dims' selection
        return np.empty((0, *shape), self.dtype)


def _select_member(ds: xr.Dataset, path: Path, member: int | None) -> tuple[xr.Dataset, bool]:
    """Select ensemble ``member`` of a ``number`` dimension; returns (dataset, had_members)."""
    if "number" not in ds.dims:
        return ds.drop_vars("number", errors="ignore"), False
    members = [int(x) for x in ds["number"].values]
    if member is None:
        raise UserError(
            f"{path} is an ensemble with members (dimension 'number') {members}; pick one with --member, "
            f"e.g. --member {members[0]}"
        )
    if member not in members:
        raise UserError(f"--member {member} is not in {path}, whose members are {members}")
    return ds.sel(number=member).drop_vars("number"), True


def _chunked(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` as dask arrays of one time step and level per chunk: one read of the file each."""
    return ds.chunk({dim: (-1 if dim in ("latitude", "longitude") else 1) for dim in ds.dims})


def _merge_expver(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` chunked (``_chunked``), an ``expver`` dimension (ERA5 + ERA5T) merged: the first
    experiment's value where present."""
    if "expver" not in ds.dims:
        return _chunked(ds.drop_vars("expver", errors="ignore"))
    experiments = [_chunked(ds.isel(expver=index, drop=True)) for index in range(ds.sizes["expver"])]
    merged = experiments[0]
    for other in experiments[1:]:
        merged = merged.fillna(other)
    return merged


class MissingVariables(UserError):
    """Variables asked for that none of the input files holds."""

    def __init__(self, missing: list[str], held: list[str]):
        super().__init__(f"selected variables {missing} are not in the inputs, which hold {held or 'none'}")
        self.missing, self.held = missing, held


def _store_grid_order(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with latitude north -> south (sorted, when in no order: as the readers) and longitude
    ascending in [0, 360)."""
    lat = np.asarray(ds["latitude"].values, dtype=np.float64)
    if lat.size > 1 and lat[0] < lat[-1] and np.all(np.diff(lat) > 0):
        ds = ds.isel(latitude=slice(None, None, -1))
    elif lat.size > 1 and not np.all(np.diff(lat) < 0):
        ds = ds.isel(latitude=np.argsort(-lat, kind="stable"))
    lon = east_longitudes(ds["longitude"].values)  # as the readers: 360 - 3e-13 is 0 E
    order = np.argsort(lon, kind="stable")
    if np.any(order != np.arange(lon.size)):
        ds = ds.isel(longitude=order)
    return ds.assign_coords(longitude=lon[order])


def _normalize(ds: xr.Dataset, path: Path, member: int | None) -> tuple[xr.Dataset, bool]:
    """The dataset with the store's dim names, latitude north -> south, longitude ascending in
    [0, 360) and times ascending, lazily chunked one time step and level per chunk.

    The file's lazy indexing reorders it, before dask: each reordering of a dask array would add a
    task per chunk, and so a graph that grows with the record (``_Record``).
    """
    ds = _latlon_named(ds)
    for name in ("latitude", "longitude"):
        if name not in ds.dims:
            raise UserError(f"{path} has no {name!r} dimension; its dims are {dict(ds.sizes)}")
        if name not in ds.coords:
            raise UserError(
                f"{path}: dimension {name!r} has no coordinate values; add them (degrees) as its coordinate"
            )
    ds = _normalize_levels(ds, path)
    ds, has_members = _select_member(ds, path, member)
    ds = _store_grid_order(ds)
    ds = _normalize_time(ds, path)
    if "time" in ds.dims:
        times = ds["time"].values
        if times.size > 1 and not np.all(times[1:] > times[:-1]):
            ds = ds.isel(time=np.argsort(times, kind="stable"))
    ds = _merge_expver(ds)
    keep = {"time", "level", "latitude", "longitude"}
    return ds.drop_vars([name for name in ds.coords if name not in keep]), has_members


def _store_name(short: str, var: xr.DataArray) -> str:
    """The store's name of a file's known variable (an ECMWF short name; a WeatherBench2 name is its own)."""
    return SURFACE_GEOPOTENTIAL if short == "z" and "level" not in var.dims else ERA5_NAMES.get(short, short)


def _held_names(ds: xr.Dataset) -> set[str]:
    """The store's names of the known fields a normalized dataset holds, unchecked."""
    return {_store_name(short, var) for short, var in ds.data_vars.items()
            if {"latitude", "longitude"} <= set(var.dims) and (short in ERA5_NAMES or short in WB2_NAMES)}  # fmt: skip


def _fields(ds: xr.Dataset, path: Path, selection: set[str] | None) -> list[_Field]:
    """The selected variables of a normalized dataset, unit-checked, with the store's dims."""
    fields = []
    for short, var in ds.data_vars.items():
        if "latitude" not in var.dims or "longitude" not in var.dims:
            continue  # bookkeeping variables (bounds, flags), not fields
        if short not in ERA5_NAMES and short not in WB2_NAMES:
            if selection is None:
                raise UserError(
                    f"{path}: unknown variable {short!r} with dims {var.dims}; known ECMWF short names are "
                    f"{', '.join(ERA5_NAMES)}. Select the variables to convert with --variables to skip others"
                )
            warnings.warn(f"{path}: skipping unknown variable {short!r} (not among --variables)", stacklevel=3)
            continue
        name = _store_name(short, var)
        if selection is not None and name not in selection:
            continue
        found = var.attrs.get("units")
        expected = VARIABLES[name][0]
        if found is None or normalize_units(str(found)) != normalize_units(expected):
            raise UserError(
                f"{path}: variable {short!r} ({name}) has units {found!r}, expected {expected!r}; convert it to "
                f"{expected} first"
            )
        pressure = name in PRESSURE_LEVEL_VARIABLES
        if pressure and "level" not in var.dims:
            raise UserError(
                f"{path}: variable {short!r} ({name}) has no pressure-level dimension (dims {var.dims}): "
                f"{_ONE_LEVEL_ADVICE}"
            )
        if not pressure and "level" in var.dims:
            raise UserError(f"{path}: variable {short!r} ({name}) is single-level but has a level dimension")
        dims = _DIMS_3D if pressure else _DIMS_2D
        extra = set(var.dims) - set(dims)
        if extra:
            raise UserError(
                f"{path}: variable {short!r} has unexpected dimensions {sorted(extra)} (dims {var.dims}); expected "
                f"{dims}"
            )
        if "time" not in var.dims:
            if name not in STATIC_VARIABLES:
                raise UserError(f"{path}: variable {short!r} ({name}) has no time dimension; dims {var.dims}")
            var = var.expand_dims(time=[np.datetime64("NaT", "ns")])
        var = var.transpose(*dims)  # times ascending (``_normalize``)
        fields.append(_Field(name, path, var.rename(name).astype(np.float32), var["time"].values))
    return fields


# --- merging ------------------------------------------------------------------------------------


def _describe_axis(values: np.ndarray) -> str:
    return f"{values.size} values {values[0]:g} .. {values[-1]:g}" if values.size else "no values"


def _check_grids(inputs: list[_Input]) -> "Grid":
    """All inputs on the same latitudes/longitudes (to 1e-3 of their spacing, as the readers); returns
    the grid."""
    first = inputs[0]
    for other in inputs[1:]:
        for axis in ("latitude", "longitude"):
            a, b = getattr(first, axis), getattr(other, axis)
            tolerance = coordinate_tolerance(a, period=360.0 if axis == "longitude" else None)
            if a.shape != b.shape or not np.allclose(a, b, rtol=0.0, atol=tolerance):
                raise UserError(
                    f"inconsistent grids: {first.path} has {axis} {_describe_axis(a)} but {other.path} has "
                    f"{_describe_axis(b)}; download all files on the same grid"
                )
    from s2forecast.geometry import Grid  # torch: not on the workers that convert slabs

    try:
        return Grid.from_coords(first.latitude, first.longitude)
    except ValueError as error:
        raise UserError(f"{first.path}: unsupported grid: {error}") from error


def _check_duplicates(name: str, fields: list[_Field]) -> np.ndarray:
    """The sorted times of a variable over its files; raises if a time repeats."""
    times = np.concatenate([f.times for f in fields])
    owners = np.concatenate([np.full(f.times.size, i) for i, f in enumerate(fields)])
    order = np.argsort(times, kind="stable")
    times, owners = times[order], owners[order]
    repeated = np.flatnonzero(times[1:] == times[:-1])
    if repeated.size:
        first = times[repeated[0]]
        files = sorted({str(fields[i].path) for i in owners[times == first]})
        where = f"files {', '.join(files)}" if len(files) > 1 else f"file {files[0]} (twice)"
        raise UserError(
            f"duplicate times for {name}: {format_time(first)} is in {where}; remove the overlapping files or times"
        )
    return times


def _check_times(per_variable: dict[str, np.ndarray], fields: dict[str, list[_Field]]) -> np.ndarray:
    """Every time-dependent variable has the same times; returns them."""
    names = sorted(per_variable)
    reference = names[0]
    times = per_variable[reference]
    for name in names[1:]:
        other = per_variable[name]
        if other.shape == times.shape and np.all(other == times):
            continue
        only_ref = np.setdiff1d(times, other)
        only_other = np.setdiff1d(other, times)
        first_ref = only_ref[0] if only_ref.size else None
        first_other = only_other[0] if only_other.size else None
        if first_other is None or (first_ref is not None and first_ref < first_other):
            detail = f"{format_time(first_ref)} is in {reference} but not in {name}"
        else:
            detail = f"{format_time(first_other)} is in {name} but not in {reference}"
        files = {n: ", ".join(sorted({str(f.path.name) for f in fields[n]})) for n in (reference, name)}
        raise UserError(
            f"times differ between variables: {reference} has {times.size} times (from {files[reference]}), {name} "
            f"has {other.size} (from {files[name]}); {detail}. Download the same period for every variable or "
            "select variables with --variables"
        )
    return times


def _check_values(fields: dict[str, list[_Field]]) -> None:
    """Values plausible in their units (``plausibility``: degC labelled K, hPa labelled Pa, ...),
    judged on the first, middle and last time of every variable of every file."""
    for name, per_file in fields.items():
        for f in per_file:
            check_plausible(f.data, name, f"{f.path}: variable {name}")


def _check_finite(slab: xr.Dataset, sources: dict[str, list[tuple[Path, np.ndarray]]]) -> None:
    """Refuse infinite values and fields that are NaN everywhere (a time of a variable, at a level).

    NaN at some points is ERA5's own mask (sea surface temperature over land) and passes.

    Args:
        sources: per variable, the (path, times) of its files.

    Raises:
        InvalidInputData: naming the file, variable, level and time (a store this run created is removed).
    """
    for name, data in slab.data_vars.items():
        values = np.asarray(data.values)
        spatial = tuple(data.get_axis_num(("latitude", "longitude")))
        if np.isfinite(values.sum(dtype=np.float64)):  # one pass: no NaN, no infinite value
            continue
        bad = np.isinf(values).any(axis=spatial) | np.isnan(values).all(axis=spatial)
        if not bad.any():
            continue
        other = [d for d in data.dims if d not in ("latitude", "longitude")]
        index = dict(zip(other, np.argwhere(bad)[0], strict=True))
        where = f" at {int(data['level'].values[index['level']])} hPa" if "level" in index else ""
        problem = "infinite values" if np.isinf(data.isel(index).values).any() else "only NaN"
        time = data["time"].values[index["time"]]
        source = next(path for path, times in sources[name] if time in times)
        raise InvalidInputData(
            f"{source}: variable {name}{where} at {format_time(time)} has {problem}; fix or drop that time in the "
            "input (or leave the variable out with --variables)"
        )


def _resolve_levels(fields: dict[str, list[_Field]], levels: Sequence[int] | None) -> list[int]:
    """The store's pressure levels: ``levels`` if given (each file must have them), else the levels
    every pressure-level file shares (they must all have the same)."""
    pressure = [f for name, fs in fields.items() if name in PRESSURE_LEVEL_VARIABLES for f in fs]
    if not pressure:
        if levels:
            raise UserError(f"--levels {' '.join(map(str, levels))} given but no selected variable has pressure levels")
        return []
    if levels:
        wanted = sorted({int(x) for x in levels})
        for f in pressure:
            have = [int(x) for x in f.data["level"].values]
            missing = sorted(set(wanted) - set(have))
            if missing:
                raise UserError(f"{f.path}: {f.name} has no level(s) {missing} hPa; its levels are {have}")
        return wanted
    first = pressure[0]
    reference = sorted(int(x) for x in first.data["level"].values)
    for f in pressure[1:]:
        have = sorted(int(x) for x in f.data["level"].values)
        if have != reference:
            raise UserError(
                f"pressure levels differ: {first.name} in {first.path} has {reference} hPa but {f.name} in {f.path} "
                f"has {have}; pick common levels with --levels"
            )
    return reference


@dataclass(frozen=True)
class _Record:
    """A time-dependent variable over all its files, in time order, read a slab at a time (``slab``).

    The files' fields are joined per slab, never for the whole record: a dask graph of the whole
    record (its level selection, concatenation of files, reordering) took ~9 KB per time step and
    variable, 19 GB for 40 years of hourly data and 6 variables before any data was read.
    """

    fields: tuple[_Field, ...]  # by first time; data ``(time, [level,] latitude, longitude)``
    levels: tuple[int, ...]  # the store's pressure levels (hPa) when the variable has levels
    owner: np.ndarray  # (time,) per store time, the index in ``fields`` of the file holding it
    local: np.ndarray  # (time,) and its index in that file

    @classmethod
    def assemble(cls, fields: list[_Field], levels: list[int]) -> "_Record":
        fields = sorted(fields, key=lambda f: f.times[0])
        owner = np.concatenate([np.full(f.times.size, i) for i, f in enumerate(fields)])
        local = np.concatenate([np.arange(f.times.size) for f in fields])
        order = np.argsort(np.concatenate([f.times for f in fields]), kind="stable")
        return cls(tuple(fields), tuple(levels), owner[order], local[order])

    @property
    def first(self) -> xr.DataArray:
        return self.fields[0].data

    @property
    def dims(self) -> tuple[str, ...]:
        return self.first.dims

    @property
    def shape(self) -> tuple[int, ...]:
        levels = (len(self.levels),) if "level" in self.dims else ()
        return (self.owner.size, *levels, *self.first.shape[-2:])

    def slab(self, start: int, stop: int) -> xr.DataArray:
        """The time steps ``start:stop``, float32, lazy: a dask graph the size of the slab."""
        owner, local = self.owner[start:stop], self.local[start:stop]
        cuts = np.flatnonzero((np.diff(owner) != 0) | (np.diff(local) != 1)) + 1  # runs of one file's steps
        pieces = []
        for run_owner, run_local in zip(np.split(owner, cuts), np.split(local, cuts), strict=True):
            data = self.fields[run_owner[0]].data.isel(time=slice(run_local[0], run_local[-1] + 1))
            pieces.append(data.sel(level=list(self.levels)) if "level" in data.dims else data)
        return pieces[0] if len(pieces) == 1 else xr.concat(pieces, dim="time", join="override", coords="minimal")


def _static(fields: list[_Field]) -> np.ndarray:
    """A static field at the earliest time of its files, computed: (latitude, longitude) float32.

    Each file's first and last times must hold the same field (within a file, one packing): a
    pressure-level ``z`` of a one-level download has no level dim and reads as the surface
    geopotential, whose other times would be dropped silently (z500 passes its range check)."""
    for one in fields:
        first, last = (np.asarray(one.data.isel(time=i).values, dtype=np.float64) for i in (0, -1))
        scale = float(np.nanmax(np.abs(first), initial=0.0))
        if not np.allclose(first, last, rtol=0.0, atol=1e-6 * scale, equal_nan=True):
            change = float(np.nanmax(np.abs(last - first)))
            hint = _Z_WITHOUT_LEVEL if one.name == SURFACE_GEOPOTENTIAL else ""
            raise UserError(
                f"{one.name} in {one.path} changes in time (by up to {change:.6g} from "
                f"{format_time(one.times[0])} to {format_time(one.times[-1])}), but it is a static field{hint}"
            )
    earliest = min(fields, key=lambda f: (np.isnat(f.times[0]), f.times[0]))
    return np.asarray(earliest.data.isel(time=0).values, dtype=np.float32)


# --- conversion ---------------------------------------------------------------------------------


def _signature(paths: list[Path], variables: list[str], levels: list[int], member: int | None) -> dict:
    inputs = []
    for path in paths:
        stat = path.stat()
        inputs.append([str(path), stat.st_size, stat.st_mtime_ns])
    return {
        "converter": "convert-era5",
        "version": SIGNATURE_VERSION,
        "inputs": inputs,
        "variables": variables,
        "levels": levels,
        "member": member,
    }


def _slabs(written: np.ndarray, time_chunk: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of at most ``time_chunk`` consecutive unwritten time steps."""
    slabs: list[tuple[int, int]] = []
    for index in np.flatnonzero(~written).tolist():
        if slabs and slabs[-1][1] == index and index - slabs[-1][0] < time_chunk:
            slabs[-1] = (slabs[-1][0], index + 1)
        else:
            slabs.append((index, index + 1))
    return slabs


def check_shards(shards: int, time_chunk: int) -> None:
    """Refuse shards that a slab of ``time_chunk`` steps would split (a rerun could not resume safely)."""
    if shards < 0:
        raise UserError(f"--shards must be >= 1 time steps per shard, got {shards}")
    if shards and time_chunk % shards:
        fit = -(-time_chunk // shards) * shards
        raise UserError(
            f"--shards {shards} does not divide --time-chunk {time_chunk}: a slab would write part of a shard and an "
            f"interrupted run could not resume safely; use --time-chunk {fit} or a --shards that divides {time_chunk}"
        )


def convert_era5(
    inputs: Sequence[str | Path],
    out: str | Path,
    variables: Sequence[str] | None = None,
    levels: Sequence[int] | None = None,
    member: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    time_chunk: int = CONVERT_TIME_CHUNK,
    shards: int = 0,
    engine: Engine | None = None,
) -> Path:
    """Convert CDS ERA5 files into a store at ``out``; returns ``out``.

    Args:
        inputs: NetCDF (or GRIB, with cfgrib) files, or directories of them, in any order.
        out: the zarr store to write.
        variables: WeatherBench2 or ECMWF short names to convert (default: every variable found;
            unknown short names are then an error, while with a selection they are skipped).
        levels: pressure levels in hPa to keep (default: all, which must agree between files).
        member: ensemble member (value of the ``number`` dimension) to take; required when the
            inputs have one.
        overwrite: replace an existing store instead of resuming it (only a store s2forecast wrote).
        progress: show a progress bar.
        time_chunk: time steps per written slab (the unit of work and of resumption).
        shards: time steps per zarr v3 shard (one file holds that many steps of a variable); 0:
            one file per time step. Must divide ``time_chunk``.
        engine: where the slabs are converted (``s2forecast.data.engine``: this process by default;
            dask.distributed workers, which then must see the inputs and ``out``, each writing its
            slabs; this process flags them written and marks the store complete).

    Raises:
        FileNotFoundError: an input does not exist.
        ValueError: inputs that cannot be converted (units, grids, duplicate or mismatched times,
            unknown variables, missing --member), or ``out`` written from other inputs/options.
    """
    if time_chunk < 1:
        raise UserError(f"time_chunk must be >= 1, got {time_chunk}")
    check_shards(shards, time_chunk)
    out = Path(out).expanduser()
    inputs, variables = ([x] if isinstance(x, str | os.PathLike) else x for x in (inputs, variables))  # one of each
    paths = resolve_inputs(inputs)
    check_target(out, paths)  # before reading anything; the rest of the policy in StoreWriter.create
    requested = resolve_variables(variables) if variables else None
    selection = set().union(*requested.values()) if requested else None

    opened: list[_Input] = []
    # the files as opened: closing a normalized dataset does not close its file, which stayed open
    # while a refusal's traceback was kept (a notebook keeps the last), and reopening it under
    # another chunk cache was an HDF error or a crash (a review found it)
    files: list[xr.Dataset] = []
    cache = _no_chunk_cache()
    cache.__enter__()  # until the inputs are closed, below
    try:
        for path in paths:
            files.append(_open(path))
            ds, has_members = _normalize(files[-1], path, member)
            item = _Input(path, ds, ds["latitude"].values, ds["longitude"].values, has_members=has_members)
            item.fields = _fields(ds, path, selection)
            opened.append(item)
        if member is not None and not any(item.has_members for item in opened):
            raise UserError(f"--member {member} given but no input has an ensemble 'number' dimension")
        grid = _check_grids(opened)

        by_name: dict[str, list[_Field]] = {}
        for item in opened:
            for f in item.fields:
                by_name.setdefault(f.name, []).append(f)
        if requested:
            missing = [name for name, wanted in requested.items() if not wanted & set(by_name)]
            if missing:  # named with what the files hold, selected or not
                raise MissingVariables(missing, sorted(set().union(*(_held_names(item.dataset) for item in opened))))
        dynamic = sorted(name for name in by_name if name not in STATIC_VARIABLES)
        static = sorted(name for name in by_name if name in STATIC_VARIABLES)
        if not dynamic:
            hint = _Z_WITHOUT_LEVEL if SURFACE_GEOPOTENTIAL in static else ""
            raise UserError(f"no time-dependent variables in {[str(p) for p in paths]}; found {static or 'none'}{hint}")
        store_levels = _resolve_levels(by_name, levels)
        times = _check_times({name: _check_duplicates(name, by_name[name]) for name in dynamic}, by_name)
        _check_values(by_name)

        data = {name: _Record.assemble(by_name[name], store_levels) for name in dynamic}
        statics = {name: _static(by_name[name]) for name in static}
        template = _template(data, statics, grid, times, store_levels, paths, out)
        needed = sum(variable.nbytes for variable in template.data_vars.values())  # float32 fields, never computed
        what = f"the converted store takes up to {byte_size(needed)} uncompressed (about half once compressed)"
        warn_if_short_of_disk(out, needed, what, RESUMABLE)
        signature = _signature(paths, dynamic + static, store_levels, member)
        writer = StoreWriter(out, signature, overwrite=overwrite, inputs=paths, shards=shards)
        return _write(writer, template, data, progress, time_chunk, by_name, engine if engine is not None else Engine())
    finally:
        for dataset in (*(item.dataset for item in opened), *files):
            dataset.close()
        cache.__exit__(None, None, None)


def _template(
    data: dict[str, _Record],
    static: dict[str, np.ndarray],
    grid: "Grid",
    times: np.ndarray,
    levels: list[int],
    paths: list[Path],
    out: Path,
) -> xr.Dataset:
    """The store's skeleton: coordinates, never-computed time-dependent variables, static fields."""
    first = next(iter(data.values())).first
    coords = {
        "time": ("time", times.astype("datetime64[ns]")),
        "latitude": ("latitude", first["latitude"].values, {"long_name": "latitude"}),
        "longitude": ("longitude", first["longitude"].values, {"long_name": "longitude"}),
    }  # units and the other CF attributes: the writer's (with_cf_coordinates)
    if levels:
        coords["level"] = ("level", np.asarray(levels, dtype=np.int64), {"long_name": "pressure level"})
    variables = {name: lazy_empty(d.shape, d.dims) for name, d in data.items()}
    variables.update({name: (("latitude", "longitude"), values) for name, values in static.items()})
    names = ", ".join(path.name for path in paths)
    return xr.Dataset(
        variables,
        coords=coords,
        attrs={
            "grid_kind": grid.kind,
            "source": f"{SOURCE}; input files: {names}",
            "acknowledgement": ACKNOWLEDGEMENT,
            "history": history(python_call("convert_era5", *paths, out)),
        },
    )


def _write(
    writer: StoreWriter,
    template: xr.Dataset,
    data: dict[str, _Record],
    progress: bool,
    time_chunk: int,
    fields: dict[str, list[_Field]],
    engine: Engine,
) -> Path:
    """Create or resume the store, have ``engine`` convert its unwritten slabs (``_convert_slab``), flag
    each slab written here as its task returns, in order, and mark the store complete."""
    out = writer.path
    engine.connect()  # an unreachable scheduler leaves no store behind
    with writer:
        written = writer.create(template)
        if written.all() and is_complete(out):
            return out  # nothing to do: a rerun on a complete store
        slabs = _slabs(written, time_chunk)
        for start, stop in slabs:
            writer.check_slab(start, stop)
        sources = {name: [(f.path, f.times) for f in per_file] for name, per_file in fields.items()}
        job = engine.share(_SlabJob(data, sources, str(Path(writer.target).absolute())))
        # in this process one slab at a time, its chunks read by dask's threads; on a cluster, a slab per worker
        window = None if engine.distributed else 1
        with (
            dask.config.set(scheduler="threads"),
            tqdm(
                total=written.size,
                initial=int(written.sum()),
                unit="step",
                desc=f"convert-era5 {out.name}",
                disable=None if progress else True,  # None: drawn on a terminal only
            ) as bar,
            contextlib.closing(engine.map(_convert_slab, slabs, job, window=window)) as results,
        ):
            for start, stop in results:
                writer.mark_written(start, stop)
                bar.update(stop - start)
        writer.finish()
    return out


@dataclass(frozen=True)
class _SlabJob:
    """What every slab of one conversion shares (sent to each worker once): the variables, read a
    slab at a time; per variable its files' paths and times (for messages); the store being filled."""

    data: dict[str, _Record]
    sources: dict[str, list[tuple[Path, np.ndarray]]]
    target: str


def _convert_slab(slab: tuple[int, int], job: _SlabJob) -> tuple[int, int]:
    """Read, check and write the time steps ``start:stop`` (a task of ``Engine.map``); returns them.

    One variable at a time: the memory of a slab is one variable's (4 steps of 13 levels at 0.25°:
    0.2 GB), not every variable's (1.2 GB with 70 channels). The slab is flagged written by the
    caller only when all are.
    """
    start, stop = slab
    with _no_chunk_cache():  # on a dask worker, the files are opened here
        for name, record in job.data.items():
            values = xr.Dataset({name: record.slab(start, stop)}).compute()
            _check_finite(values, job.sources)
            write_region(job.target, values, start)
            del values
    return start, stop


@contextlib.contextmanager
def _no_chunk_cache():
    """Open NetCDF files without HDF5's chunk cache. Its default keeps up to 64 MiB of decompressed
    chunks per variable of every open file, and a conversion keeps its inputs open: at 0.25°, 70
    channels, a record of 24 files peaked 1.1 GB above one of 12 files (scripts/bench_scale.py). Every
    chunk is read once here (one time step per read; CDS files hold a few MB per chunk), so nothing
    is lost."""
    import netCDF4

    before = netCDF4.get_chunk_cache()
    netCDF4.set_chunk_cache(0, 1, before[2])
    try:
        yield
    finally:
        netCDF4.set_chunk_cache(*before)


# --- command line -------------------------------------------------------------------------------
