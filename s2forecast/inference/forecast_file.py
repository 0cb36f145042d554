"""Forecast files in WeatherBench2's layout, written one lead at a time (NetCDF4 or zarr).

Dims ``time`` (initialization), ``prediction_timedelta``, [``realization``: ensemble members,
as WeatherBench2 names them], [``level``], ``latitude``
(north -> south), ``longitude``; a ``valid_time`` coordinate; the store's variable names and
units; CF-1.8 attributes. A ``ForecastFile`` writes at the temporary path of an
``s2forecast.output.Output``, which renames it into place when complete.

Zarr chunks hold one initialization time at one lead (one member). With ``shards`` N, zarr v3's
sharding codec packs the chunks of N initialization times (and every member) at one lead into
one file: N x members times fewer files. Each ``write`` must then cover whole shards (its
``start`` a multiple of N, its batch N long or reaching the last time), so a shard is written
once, never read back and rewritten.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from s2forecast.data.coordinates import CF_COORDINATE_ATTRS
from s2forecast.data.stats import channel_names
from s2forecast.data.store import COMPLETE_ATTR
from s2forecast.output import field_compressors
from s2forecast.user_errors import UserError

EPOCH = np.datetime64("1970-01-01T00:00", "ns")
# the units of a NetCDF forecast's times, coarsest first, and their length in ns
TIME_UNITS = (
    ("hours", 3_600_000_000_000),
    ("minutes", 60_000_000_000),
    ("seconds", 1_000_000_000),
    ("milliseconds", 1_000_000),
    ("microseconds", 1_000),
)
MEMBER_DIM = "realization"  # WeatherBench2's name of the ensemble dimension


@dataclass(frozen=True)
class ChannelLayout:
    """How flat channel names ("temperature/500") map to variables and levels."""

    variables: tuple[str, ...]
    levels: tuple[int, ...] | None
    pressure: tuple[bool, ...]  # per variable: has a level dimension

    @classmethod
    def from_channels(cls, channels) -> "ChannelLayout":
        """The layout of ``channels`` as ``FieldDataset`` orders them (each variable's levels together,
        in one level order); another order is refused: ``ForecastFile.write`` slices by it."""
        variables, levels, pressure = [], [], []
        for channel in channels:
            name, _, level = channel.partition("/")
            if name not in variables:
                variables.append(name)
                pressure.append(bool(level))
            if level and int(level) not in levels:
                levels.append(int(level))
        layout = cls(tuple(variables), tuple(levels) if levels else None, tuple(pressure))
        expected = [
            c for v, p in zip(variables, pressure, strict=True) for c in channel_names(v, levels if p else None)
        ]
        if list(channels) != expected:  # written under another variable or level in silence
            raise UserError(
                f"channels {list(channels)} are not grouped by variable in one level order: give {expected}"
            )
        return layout


# CF attributes of the coordinates, the same in NetCDF and zarr (each format encodes the times' units)
COORDINATE_ATTRS = {
    "time": {"standard_name": "forecast_reference_time", "long_name": "initialization time"},
    "prediction_timedelta": {"standard_name": "forecast_period", "long_name": "lead time"},
    "valid_time": {"standard_name": "time", "long_name": "valid time"},
    **CF_COORDINATE_ATTRS,
    MEMBER_DIM: {"long_name": "ensemble member", "standard_name": "realization"},
}


def zarr_template(layout: ChannelLayout, init_times, leads, lat, lon, units, attrs, members: int = 0, shards: int = 0):
    """The xarray Dataset whose ``to_zarr(compute=False)`` creates a forecast store: coordinates
    written, fields NaN placeholders (never computed) of zarr chunks (1, 1, [1,] [levels,] nlat,
    nlon), in zarr v3 shards of ``shards`` initialization times (0: unsharded).

    Each placeholder is one dask chunk, whatever the number of initialization times and leads:
    its graph, and the memory and time to build it, stay the same (the zarr chunks are in the
    encoding alone; ``write`` fills them region by region)."""
    import dask.array as da
    import xarray as xr

    dims = ("time", "prediction_timedelta")
    member_dims = (MEMBER_DIM,) if members else ()
    n_levels = len(layout.levels) if layout.levels else 0
    data = {}
    for name, pressure in zip(layout.variables, layout.pressure, strict=True):
        shape = (len(init_times), len(leads), *((members,) if members else ()), *((n_levels,) if pressure else ()),
                 len(lat), len(lon))  # fmt: skip
        vdims = (*dims, *member_dims, *(("level",) if pressure else ()), "latitude", "longitude")
        encoding = {
            "compressors": field_compressors(),
            "chunks": (1, 1, *((1,) if members else ()), *shape[2 + bool(members) :]),
        }
        if shards:
            encoding["shards"] = (shards, 1, *shape[2:])
        placeholder = da.full(shape, np.nan, dtype=np.float32, chunks=shape)
        data[name] = xr.Variable(vdims, placeholder, units[name], encoding=encoding)
    coords = {"time": init_times, "prediction_timedelta": leads, "latitude": lat, "longitude": lon,
              "valid_time": (dims, init_times[:, None] + leads[None, :])}  # fmt: skip
    if n_levels:
        coords["level"] = np.array(layout.levels, dtype=np.int32)  # as the NetCDF file's: the same read back
    if members:
        coords[MEMBER_DIM] = np.arange(members, dtype=np.int32)
    # no _FillValue on the float coordinates (CF 2.5.1: no missing values; xarray gives them NaN in zarr)
    coords = {name: xr.Variable(*(value if isinstance(value, tuple) else (name, value)), COORDINATE_ATTRS[name],
                                encoding={"_FillValue": None} if name in ("latitude", "longitude") else None)
              for name, value in coords.items()}  # fmt: skip
    return xr.Dataset(data, coords=coords, attrs=attrs)


def time_numbers(init_times: np.ndarray, leads: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
    """(unit, init times since 1970, leads) as NetCDF numbers: int64 in the coarsest of hours,
    minutes, seconds, milliseconds, microseconds that holds every value exactly (float64 hours made
    00:20 read back as 00:19:59.999999872, which no truth time matched); float64 seconds below."""
    init_ns = (np.asarray(init_times, "datetime64[ns]") - EPOCH).astype(np.int64)
    lead_ns = np.asarray(leads, "timedelta64[ns]").astype(np.int64)
    every = np.concatenate([init_ns, lead_ns])
    for unit, length in TIME_UNITS:
        if np.all(every % length == 0):
            return unit, init_ns // length, lead_ns // length
    return "seconds", init_ns / 1e9, lead_ns / 1e9


class ForecastFile:
    """A forecast file written step by step (NetCDF4 or zarr) at ``path`` (the temporary path of
    an ``s2forecast.output.Output``); ``shards``: initialization times per zarr shard (0: unsharded).

    ``create`` False opens a zarr store that another process of the rollout created with the same
    arguments, to write its own initialization times into (``units`` and ``attrs`` unused); that
    process alone adds attributes and closes it."""

    def __init__(self, path, fmt, layout, init_times, leads, lat, lon, units, attrs, members: int = 0, shards: int = 0,
                 create: bool = True):  # fmt: skip
        if shards and fmt != "zarr":
            raise ValueError(f"shards are a zarr v3 feature, not one of {fmt}")
        if not create and fmt != "zarr":
            raise ValueError(f"only a zarr store takes writes from several processes, not {fmt}")
        self.tmp, self.fmt, self.layout = Path(path), fmt, layout
        self.created = create  # this process finishes the file: it marks it complete (``close``)
        attrs = {**attrs, COMPLETE_ATTR: "false"}  # until close: a file left by a killed run is refused by readers
        self.n_times = len(init_times)
        self.shards = min(shards, self.n_times)  # a shard longer than the file would only be padding
        self.shape = (len(lat), len(lon))
        self.n_levels = len(layout.levels) if layout.levels else 0
        self.members = members  # 0: a deterministic forecast, no realization dimension
        member_dims = (MEMBER_DIM,) if members else ()
        dims = ("time", "prediction_timedelta")
        if not create:  # another process created the store: this one only writes its regions
            self.ds = None
        elif fmt == "netcdf":
            import netCDF4

            ds = netCDF4.Dataset(self.tmp, "w", format="NETCDF4")
            ds.createDimension("time", len(init_times))
            ds.createDimension("prediction_timedelta", len(leads))
            if members:
                ds.createDimension(MEMBER_DIM, members)
            if self.n_levels:
                ds.createDimension("level", self.n_levels)
            ds.createDimension("latitude", len(lat))
            ds.createDimension("longitude", len(lon))
            unit, init_values, lead_values = time_numbers(init_times, leads)
            # NetCDF holds times as numbers: their units here ("dtype" makes xarray decode the lead as
            # timedelta64, as WeatherBench2 stores it)
            since = {"units": f"{unit} since 1970-01-01 00:00:00", "calendar": "proleptic_gregorian"}
            encoded = {"time": since, "valid_time": since,
                       "prediction_timedelta": {"units": unit, "dtype": "timedelta64[ns]"}}  # fmt: skip
            arrays = {"time": (("time",), init_values),
                      "prediction_timedelta": (("prediction_timedelta",), lead_values),
                      "valid_time": (dims, init_values[:, None] + lead_values[None, :]),
                      "latitude": (("latitude",), lat), "longitude": (("longitude",), lon)}  # fmt: skip
            if self.n_levels:
                arrays["level"] = (("level",), np.array(layout.levels, dtype=np.int32))
            if members:
                arrays[MEMBER_DIM] = ((MEMBER_DIM,), np.arange(members, dtype=np.int32))
            for name, (vdims, values) in arrays.items():
                var = ds.createVariable(name, f"{values.dtype.kind}{values.dtype.itemsize}", vdims)  # native order
                var[:] = values
                var.setncatts({**encoded.get(name, {}), **COORDINATE_ATTRS[name]})
            for name, pressure in zip(layout.variables, layout.pressure, strict=True):
                vdims = (*dims, *member_dims, *(("level",) if pressure else ()), "latitude", "longitude")
                chunks = (1, 1, *((1,) if members else ()), *((self.n_levels,) if pressure else ()), *self.shape)
                var = ds.createVariable(name, "f4", vdims, zlib=True, complevel=4, chunksizes=chunks, fill_value=np.nan)
                var.setncatts({"coordinates": "valid_time", **units[name]})
            ds.setncatts(attrs)
            self.ds = ds
        else:
            template = zarr_template(layout, init_times, leads, lat, lon, units, attrs, members, self.shards)
            template.to_zarr(self.tmp, mode="w", compute=False, zarr_format=3)
            self.ds = None

    def write(self, start: int, lead_index: int, fields: np.ndarray) -> None:
        """fields: (batch, [members,] channels, nlat, nlon) physical values of init times start.. at one lead."""
        stop = start + len(fields)
        if self.shards and (start % self.shards or (stop % self.shards and stop != self.n_times)):
            raise ValueError(f"times {start}..{stop} split a shard of {self.shards} initialization times")
        c = 0
        blocks = {}
        axis = 2 if self.members else 1  # the channel axis
        for name, pressure in zip(self.layout.variables, self.layout.pressure, strict=True):
            width = self.n_levels if pressure else 1
            block = np.take(fields, range(c, c + width), axis=axis) if pressure else np.take(fields, c, axis=axis)
            c += width
            blocks[name] = block
        if self.fmt == "netcdf":
            for name, block in blocks.items():
                self.ds[name][start:stop, lead_index] = block
        else:
            import xarray as xr

            dims = ("time", "prediction_timedelta")
            member_dims = (MEMBER_DIM,) if self.members else ()
            extra = 4 + bool(self.members)  # a block with a level axis has this many dims
            slab = xr.Dataset(
                {
                    name: (
                        (*dims, *member_dims, *(("level",) if block.ndim == extra else ()), "latitude", "longitude"),
                        block[:, None],
                    )
                    for name, block in blocks.items()
                }
            )
            region = {"time": slice(start, stop), "prediction_timedelta": slice(lead_index, lead_index + 1)}
            slab.to_zarr(self.tmp, region=region, zarr_format=3)

    def add_attributes(self, attrs: dict[str, str]) -> None:
        """Set global attributes of the file (e.g. ``nonfinite_forecasts``, known only at the end)."""
        if self.ds is not None:
            self.ds.setncatts(attrs)
        else:
            import zarr

            zarr.open_group(self.tmp, mode="r+").attrs.update(attrs)

    def close(self) -> None:
        """Finish the file (it stays at its temporary path), marked complete by the process that created it
        (after every process wrote its part: ``inference.rollout``)."""
        if self.created:
            self.add_attributes({COMPLETE_ATTR: "true"})
        if self.ds is not None:
            self.ds.close()
            self.ds = None
        if self.fmt == "zarr":
            import zarr

            zarr.consolidate_metadata(self.tmp, zarr_format=3)

    def abort(self) -> None:
        """Close the file after a failure (``Output`` removes it)."""
        if self.ds is not None:
            try:
                self.ds.close()
            except RuntimeError:
                pass
            self.ds = None
