"""Autoregressive rollouts of a trained forecaster, streamed to a WeatherBench2-layout file.

``s2forecast rollout --ckpt CKPT --store STORE.zarr --steps N --init-times ... --out F.nc``:
initialization times are processed in batches; each model step is written as soon as it is
made, so memory holds one batch of states, whatever the number of steps. The output has dims
``time`` (initialization), ``prediction_timedelta``, ``level`` (when the store has one),
``latitude`` (north -> south), ``longitude``, a ``valid_time`` coordinate, the store's
variable names and units and CF-1.8 attributes. The output follows ``s2forecast.output``: it
may not be the checkpoint or the store (nor lie in or hold them), an existing one is replaced
only with ``overwrite`` and only if s2forecast wrote it, and it is written under a temporary
name beside the target and renamed when complete, after checking that the store was not
rewritten meanwhile: a crash never leaves a file that looks finished.
"""

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from s2forecast import __version__
from s2forecast.datamodules.fields import FieldDataset, SampleSpec
from s2forecast.datamodules.forcings import forcing_names
from s2forecast.datamodules.store import VARIABLES, cf_attributes
from s2forecast.output import Output, check_unchanged, file_sha256
from s2forecast.times import format_time, parse_time
from s2forecast.training.checkpoints import read_checkpoint
from s2forecast.training.forecast_module import ForecastModule

EPOCH = np.datetime64("1970-01-01T00:00", "ns")
NAN_POLICIES = ("fail", "write")


@dataclass(frozen=True)
class ChannelLayout:
    """How flat channel names ("temperature/500") map to variables and levels."""

    variables: tuple[str, ...]
    levels: tuple[int, ...] | None
    pressure: tuple[bool, ...]  # per variable: has a level dimension

    @classmethod
    def from_channels(cls, channels) -> "ChannelLayout":
        variables, levels, pressure = [], [], []
        for channel in channels:
            name, _, level = channel.partition("/")
            if name not in variables:
                variables.append(name)
                pressure.append(bool(level))
            if level and int(level) not in levels:
                levels.append(int(level))
        return cls(tuple(variables), tuple(levels) if levels else None, tuple(pressure))


def load_forecaster(checkpoint: str | Path, device: str = "cpu") -> ForecastModule:
    """A trained ForecastModule in eval mode, from a local checkpoint read weights-only
    (``read_checkpoint``: tensors and plain values; nothing in the file runs)."""
    state = read_checkpoint(checkpoint, map_location=device)
    if "hyper_parameters" not in state or "state_dict" not in state:
        raise ValueError(f"{checkpoint} is not a ForecastModule checkpoint (no hyper_parameters or state_dict)")
    hparams = {name: value for name, value in state["hyper_parameters"].items() if not name.startswith("_")}
    try:
        model = ForecastModule(**hparams)
        model.load_state_dict(state["state_dict"])
    except (TypeError, RuntimeError) as error:  # other hyper-parameters or weights than this version's
        raise ValueError(f"{checkpoint} is not a ForecastModule checkpoint: {str(error).splitlines()[0]}") from None
    return model.to(device).eval()


def open_inputs(model: ForecastModule, store: str | Path, other_grid: bool = False) -> FieldDataset:
    """The store as the model's input reader; refuses stores that disagree with the checkpoint.

    ``other_grid``: accept a store on another grid (the neural-operator property: the caller
    applies the weights there with ``net.on_grid``); its fields are then normalized with the
    checkpoint's statistics, not the store's."""
    info = model.hparams.data
    layout = ChannelLayout.from_channels(info["channels"])
    spec = SampleSpec(
        layout.variables, layout.levels, tuple(info["static_channels"]), forcing_names(info["forcing_channels"]),
        info["history"], info["step_hours"], 1,
    )  # fmt: skip
    try:
        dataset = FieldDataset(store, spec)
    except ValueError as error:
        raise ValueError(f"store {store} does not fit checkpoint: {error}") from None
    if list(dataset.channels) != list(info["channels"]):
        raise ValueError(f"store channels {list(dataset.channels)} differ from the checkpoint's {info['channels']}")
    if dataset.grid != model.grid:
        if not other_grid:
            raise ValueError(
                f"store grid {dataset.grid} differs from the checkpoint's {model.grid}; pass --other-grid to run "
                "the model on the store's grid (spherical models without grid-bound position embeddings)"
            )
        dataset.stats = replace(
            dataset.stats, mean=np.asarray(info["mean"], np.float32), std=np.asarray(info["std"], np.float32)
        )
        return dataset
    for name, ours, theirs in (("mean", dataset.stats.mean, info["mean"]), ("std", dataset.stats.std, info["std"])):
        if not np.allclose(ours, theirs, rtol=1e-5, atol=0):
            worst = int(np.argmax(np.abs(np.asarray(ours) - np.asarray(theirs)) / np.abs(np.asarray(theirs))))
            raise ValueError(
                f"normalization {name} of {dataset.channels[worst]} in {store} ({ours[worst]:.6g}) differs from the "
                f"checkpoint's ({theirs[worst]:.6g}): the store's stats were computed over another period"
            )
    return dataset


def init_times_from(times=None, start=None, end=None, every_hours=None, available=None) -> np.ndarray:
    """Explicit initialization times, or every ``every_hours`` from start to end (inclusive).

    Args:
        times: explicit times (strings or datetime64); take precedence over start/end.
        start, end: inclusive range; with ``every_hours`` None, the ``available`` times in it.
        every_hours: hours between initialization times (> 0).
        available: (n,) datetime64[ns] times of the store.

    Raises:
        ValueError: a time that is not a time, start or end missing, or ``every_hours`` <= 0.
    """
    if times:
        return np.array([parse_time(t, "initialization time") for t in times])
    if start is None or end is None:
        raise ValueError("give --init-times, or --start and --end (and optionally --every)")
    lo, hi = parse_time(start, "--start"), parse_time(end, "--end")
    if hi < lo:
        raise ValueError(f"--end {format_time(hi)} is before --start {format_time(lo)}; swap them")
    if every_hours is None:
        selected = available[(available >= lo) & (available <= hi)]
        if selected.size == 0:
            covers = f"{format_time(available[0])} .. {format_time(available[-1])}" if len(available) else "no time"
            raise ValueError(f"no store time lies in [{format_time(lo)}, {format_time(hi)}]; the store covers {covers}")
        return selected
    step = np.timedelta64(int(round(every_hours * 3600)), "s")
    if not every_hours > 0 or step < np.timedelta64(1, "s"):
        raise ValueError(f"--every must be a positive number of hours (at least 1 s), got {every_hours}")
    return np.arange(lo, hi + np.timedelta64(1, "ns"), step).astype("datetime64[ns]")


def input_indices(dataset: FieldDataset, t0: np.datetime64) -> np.ndarray:
    """Store positions of the ``history`` states an initialization at ``t0`` reads.

    Raises:
        ValueError: one of them is not in the store (names ``t0`` and the store's range).
    """
    offsets = np.arange(-(dataset.spec.history - 1), 1) * dataset.step
    try:
        return dataset.time_indices(t0 + offsets)
    except ValueError as error:
        raise ValueError(
            f"initialization time {format_time(t0)} needs inputs that are not in the store: {error}"
        ) from None


def read_initial_conditions(dataset: FieldDataset, init_times: np.ndarray, steps: int) -> dict:
    """Normalized inputs (B, history, C, ...), static (B, S, ...) and forcings (B, history + steps, F, ...)."""
    history = dataset.spec.history
    states = [dataset.normalized_states(input_indices(dataset, t0)) for t0 in init_times]
    lead_offsets = np.arange(-(history - 1), steps + 1) * dataset.step
    static = dataset.static_fields()
    return {
        "inputs": torch.from_numpy(np.stack(states)),
        "static": torch.from_numpy(np.ascontiguousarray(np.broadcast_to(static, (len(init_times), *static.shape)))),
        "forcings": torch.from_numpy(np.stack([dataset.forcings_at(t0 + lead_offsets) for t0 in init_times])),
    }


class ForecastFile:
    """A forecast file written step by step (NetCDF4 or zarr) at ``path`` (the temporary path of
    an ``s2forecast.output.Output``)."""

    def __init__(self, path, fmt, layout, init_times, leads, lat, lon, units, attrs):
        self.tmp, self.fmt, self.layout = Path(path), fmt, layout
        self.shape = (len(lat), len(lon))
        self.n_levels = len(layout.levels) if layout.levels else 0
        dims = ("time", "prediction_timedelta")
        if fmt == "netcdf":
            import netCDF4

            ds = netCDF4.Dataset(self.tmp, "w", format="NETCDF4")
            ds.createDimension("time", len(init_times))
            ds.createDimension("prediction_timedelta", len(leads))
            if self.n_levels:
                ds.createDimension("level", self.n_levels)
            ds.createDimension("latitude", len(lat))
            ds.createDimension("longitude", len(lon))
            hours = (init_times - EPOCH) / np.timedelta64(1, "h")
            lead_hours = leads / np.timedelta64(1, "h")
            since = {"units": "hours since 1970-01-01 00:00:00", "calendar": "proleptic_gregorian"}
            # "dtype" makes xarray decode the lead as timedelta64, as WeatherBench2 stores it
            lead_attrs = {"units": "hours", "standard_name": "forecast_period", "long_name": "lead time"}
            coords = {
                "time": (("time",), hours, {**since, "standard_name": "forecast_reference_time",
                                             "long_name": "initialization time"}),
                "prediction_timedelta": (("prediction_timedelta",), lead_hours, {**lead_attrs,
                                                                                 "dtype": "timedelta64[ns]"}),
                "valid_time": (dims, hours[:, None] + lead_hours[None, :], {**since, "standard_name": "time",
                                                                            "long_name": "valid time"}),
                "latitude": (("latitude",), lat, {"units": "degrees_north", "standard_name": "latitude"}),
                "longitude": (("longitude",), lon, {"units": "degrees_east", "standard_name": "longitude"}),
            }  # fmt: skip
            if self.n_levels:
                coords["level"] = (("level",), np.array(layout.levels, dtype=np.int32),
                                   {"units": "hPa", "standard_name": "air_pressure", "positive": "down"})  # fmt: skip
            for name, (vdims, values, vattrs) in coords.items():
                var = ds.createVariable(name, "f8" if values.dtype.kind == "f" else "i4", vdims)
                var[:] = values
                var.setncatts(vattrs)
            for name, pressure in zip(layout.variables, layout.pressure, strict=True):
                vdims = (*dims, "level", "latitude", "longitude") if pressure else (*dims, "latitude", "longitude")
                chunks = (1, 1, self.n_levels, *self.shape) if pressure else (1, 1, *self.shape)
                var = ds.createVariable(name, "f4", vdims, zlib=True, complevel=4, chunksizes=chunks, fill_value=np.nan)
                var.setncatts({"coordinates": "valid_time", **units[name]})
            ds.setncatts(attrs)
            self.ds = ds
        else:
            import dask.array as da
            import xarray as xr

            data = {}
            for name, pressure in zip(layout.variables, layout.pressure, strict=True):
                shape = (len(init_times), len(leads), *((self.n_levels,) if pressure else ()), *self.shape)
                vdims = (*dims, *(("level",) if pressure else ()), "latitude", "longitude")
                chunks = (1, 1, *shape[2:])
                data[name] = xr.Variable(vdims, da.full(shape, np.nan, dtype=np.float32, chunks=chunks), units[name])
            coords = {"time": init_times, "prediction_timedelta": leads, "latitude": lat, "longitude": lon,
                      "valid_time": (dims, init_times[:, None] + leads[None, :])}  # fmt: skip
            if self.n_levels:
                coords["level"] = np.array(layout.levels)
            xr.Dataset(data, coords=coords, attrs=attrs).to_zarr(self.tmp, mode="w", compute=False, zarr_format=3)
            self.ds = None

    def write(self, start: int, lead_index: int, fields: np.ndarray) -> None:
        """fields: (batch, channels, nlat, nlon) physical values of init times start.. at one lead."""
        stop = start + len(fields)
        c = 0
        blocks = {}
        for name, pressure in zip(self.layout.variables, self.layout.pressure, strict=True):
            width = self.n_levels if pressure else 1
            block = fields[:, c : c + width] if pressure else fields[:, c]
            c += width
            blocks[name] = block
        if self.fmt == "netcdf":
            for name, block in blocks.items():
                self.ds[name][start:stop, lead_index] = block
        else:
            import xarray as xr

            dims = ("time", "prediction_timedelta")
            slab = xr.Dataset(
                {
                    name: ((*dims, *(("level",) if block.ndim == 4 else ()), "latitude", "longitude"), block[:, None])
                    for name, block in blocks.items()
                }
            )
            region = {"time": slice(start, stop), "prediction_timedelta": slice(lead_index, lead_index + 1)}
            slab.to_zarr(self.tmp, region=region, zarr_format=3)

    def close(self) -> None:
        """Finish the file (it stays at its temporary path)."""
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


def rollout(
    checkpoint: str | Path,
    store: str | Path,
    steps: int,
    init_times: np.ndarray,
    out: str | Path,
    fmt: str = "netcdf",
    batch_size: int = 4,
    device: str = "cpu",
    bf16: bool = False,
    nan_policy: str = "fail",
    progress: bool = True,
    other_grid: bool = False,
    overwrite: bool = False,
) -> Path:
    """Forecast ``steps`` steps from each of ``init_times`` and write them to ``out``.

    ``other_grid``: run on a store whose grid differs from the training grid
    (``SphericalTransformer.on_grid``; refused for grid-bound models). ``overwrite``: replace
    an existing ``out`` that s2forecast wrote (never anything else).

    Raises:
        ValueError: the checkpoint and store disagree (channels, grid, normalization), an
            initialization time lacks inputs, a non-finite forecast appears (``nan_policy``
            "fail"; "write" writes it and lists it in the ``nonfinite_forecasts`` attribute),
            ``out`` collides with an input or with a path s2forecast may not replace, its
            directory is missing, or the store was rewritten during the rollout.
        FileExistsError: ``out`` exists and ``overwrite`` is not set.
        OSError: ``out`` cannot be written (permissions, full disk): nothing at ``out`` changed.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if fmt not in ("netcdf", "zarr"):
        raise ValueError(f"format must be 'netcdf' or 'zarr', got {fmt!r}")
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(init_times) == 0:
        raise ValueError("no initialization times selected")
    output = Output(out, "forecast", directory=fmt == "zarr", inputs=(checkpoint, store), overwrite=overwrite)
    with output:  # on any error the temporary output goes and nothing at ``out`` changes
        options = (fmt, batch_size, device, bf16, nan_policy, progress, other_grid)
        return _rollout(checkpoint, store, steps, init_times, output, *options)


def _rollout(checkpoint, store, steps, init_times, output, fmt, batch_size, device, bf16, nan_policy, progress,
             other_grid) -> Path:  # fmt: skip
    """``rollout`` once its output is claimed: forecast into ``output.tmp``, then commit it."""
    from tqdm import tqdm

    model = load_forecaster(checkpoint, device)
    dataset = open_inputs(model, store, other_grid)
    if dataset.grid != model.grid:
        if not hasattr(model.net, "on_grid"):
            raise ValueError(f"the {model.hparams.architecture} model is bound to its training grid {model.grid}")
        model.net = model.net.on_grid(dataset.grid)
    for t0 in init_times:  # every initialization time has its inputs: fail before writing anything
        input_indices(dataset, t0)
    info = model.hparams.data
    layout = ChannelLayout.from_channels(info["channels"])
    leads = (np.arange(1, steps + 1) * dataset.step).astype("timedelta64[ns]")
    units = {name: cf_attributes(name) if name in VARIABLES else {} for name in layout.variables}
    for name in layout.variables:
        store_attrs = dataset.store[name].attrs
        units[name] = {**units[name], **{k: v for k, v in store_attrs.items() if k in ("units", "long_name")}}
    attrs = {
        "Conventions": "CF-1.8",
        "title": f"s2forecast {model.hparams.architecture} forecast",
        "source": f"s2forecast {__version__}; checkpoint {Path(checkpoint).name} "
        f"sha256:{file_sha256(Path(checkpoint))}; model {model.hparams.architecture} "
        f"{json.dumps(model.hparams.network or {}, sort_keys=True)}",
        "history": f"{datetime.now(UTC).isoformat(timespec='seconds')} s2forecast rollout --steps {steps} "
        f"--store {store}",
        "initial_conditions": str(store),
        **output.attrs,
    }
    writer = ForecastFile(
        output.tmp, fmt, layout, np.asarray(init_times), leads, dataset.lat_deg, dataset.lon_deg, units, attrs
    )
    nonfinite = []
    try:
        autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16)
        batches = range(0, len(init_times), batch_size)
        for start in tqdm(batches, desc="rollout", unit="batch", disable=not progress):
            times = np.asarray(init_times[start : start + batch_size])
            batch = {k: v.to(device) for k, v in read_initial_conditions(dataset, times, steps).items()}
            states = batch["inputs"]
            history = states.shape[1]
            dead = torch.zeros(len(times), dtype=torch.bool, device=states.device)  # went non-finite ("write")
            with torch.no_grad(), autocast:
                for k in range(steps):
                    prediction = model.step(states, batch["static"], batch["forcings"][:, k : k + history + 1]).float()
                    physical = model.to_physical(prediction).cpu().numpy()
                    physical[dead.cpu().numpy()] = np.nan
                    bad = ~np.isfinite(physical).all(axis=(2, 3)) & ~dead.cpu().numpy()[:, None]
                    if bad.any():
                        b, c = np.argwhere(bad)[0]
                        lead = leads[k] / np.timedelta64(1, "h")
                        where = f"init {format_time(times[b])}, step {k + 1} (+{lead:g} h), {info['channels'][c]}"
                        if nan_policy == "fail":
                            raise ValueError(f"non-finite forecast at {where}; pass --nan write to keep going")
                        nonfinite.append(where)
                        dead |= torch.from_numpy(bad.any(axis=1)).to(dead.device)
                    writer.write(start, k, physical)
                    # a forecast that went non-finite is written as NaN from then on; feed the model zeros
                    # in its place so that the other forecasts of the batch go on
                    prediction = torch.where(dead[:, None, None, None], 0.0, prediction)
                    states = torch.cat([states[:, 1:], prediction[:, None].to(states.dtype)], dim=1)
                    states = torch.where(dead[:, None, None, None, None], 0.0, states)
        if nonfinite:
            writer_attrs = {"nonfinite_forecasts": "; ".join(nonfinite[:100])}
            if writer.ds is not None:
                writer.ds.setncatts(writer_attrs)
            else:
                import zarr

                zarr.open_group(writer.tmp, mode="r+").attrs.update(writer_attrs)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    check_unchanged(store, dataset.generation)
    return output.commit()
