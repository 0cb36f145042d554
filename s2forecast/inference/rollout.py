"""Autoregressive rollouts of a trained Forecaster, streamed to a WeatherBench2-layout file.

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

import contextlib
import json
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from s2forecast import __version__
from s2forecast.data.fields import FieldDataset, SampleSpec
from s2forecast.data.forcings import forcing_names
from s2forecast.data.stats import ChannelStats
from s2forecast.data.store import VARIABLES, cf_attributes, is_url, open_store
from s2forecast.inference.forecast_file import ChannelLayout, ForecastFile
from s2forecast.models.forecaster import Forecaster
from s2forecast.output import Output, check_unchanged, file_sha256
from s2forecast.times import format_time, parse_time
from s2forecast.user_errors import UserError

NAN_POLICIES = ("fail", "write")


def load_forecaster(checkpoint: str | Path, device: str = "cpu") -> Forecaster:
    """The trained Forecaster of a local checkpoint, in eval mode (``Forecaster.from_checkpoint``)."""
    return Forecaster.from_checkpoint(checkpoint, map_location=device)


def checkpoint_stats(model: Forecaster) -> tuple[ChannelStats, ChannelStats | None]:
    """The normalization statistics stored in the checkpoint: its channels', and its static
    fields' (None for checkpoints of before they were stored, or without static fields)."""
    info = model.data
    n = len(info["channels"])
    stats = ChannelStats(
        tuple(info["channels"]), np.asarray(info["mean"], np.float32), np.asarray(info["std"], np.float32),
        np.zeros(n, np.float32), np.asarray(info["tendency_std"], np.float32), float(info["step_hours"]),
    )  # fmt: skip
    static = None
    if info["static_channels"] and "static_mean" in info:
        m = len(info["static_channels"])
        mean, std = np.asarray(info["static_mean"], np.float32), np.asarray(info["static_std"], np.float32)
        zeros = np.zeros(m, np.float32)
        static = ChannelStats(tuple(info["static_channels"]), mean, std, zeros, zeros, float(info["step_hours"]))
    return stats, static


def open_inputs(
    model: Forecaster,
    store: str | Path,
    other_grid: bool = False,
    store_stats: bool = False,
    targets: int = 0,
    storage_options: dict | None = None,
) -> FieldDataset:
    """The store as the model's input reader, normalized with the checkpoint's statistics.

    Initial conditions may come from any store with the model's variables and levels, at any
    dates (a store of new dates has other statistics than the training period's, and needs
    none of its own). ``store_stats``: normalize with the store's own statistics instead.
    ``other_grid``: accept a store on another grid (the neural-operator property: the caller
    applies the weights there with ``Forecaster.on_grid``). ``targets``: truth states per sample
    (for scoring, e.g. ``evaluation.robustness``). ``storage_options``: fsspec options of a URL.

    Raises:
        ValueError: a variable, level or static field of the checkpoint missing from the store,
            another grid without ``other_grid``, or statistics that cannot be found.
    """
    info = model.data
    layout = ChannelLayout.from_channels(info["channels"])
    spec = SampleSpec(
        layout.variables, layout.levels, tuple(info["static_channels"]), forcing_names(info["forcing_channels"]),
        info["history"], info["step_hours"], targets,  # 0: inputs only, the truth is not needed to forecast
    )  # fmt: skip
    stats, static = (None, None) if store_stats else checkpoint_stats(model)
    # the static fields the model was trained with, unless the store is on another grid
    given = None if other_grid else {name: v.cpu().numpy() for name, v in model.static_fields.items()}
    try:
        dataset = FieldDataset(store, spec, stats=stats, static_stats=static, given_static=given,
                               storage_options=storage_options)  # fmt: skip
    except ValueError as error:
        if "no normalization statistics" in str(error) and not store_stats:  # static fields of an old checkpoint
            raise UserError(
                f"the checkpoint predates stored statistics of static fields {info['static_channels']}: compute "
                f"them on the store (`s2forecast stats {store}`) and pass --store-stats"
            ) from None
        raise UserError(f"store {store} does not fit checkpoint: {error}") from None
    if list(dataset.channels) != list(info["channels"]):
        raise UserError(f"store channels {list(dataset.channels)} differ from the checkpoint's {info['channels']}")
    if dataset.grid != model.grid and not other_grid:
        raise UserError(
            f"store grid {dataset.grid} differs from the checkpoint's {model.grid}; pass --other-grid to run "
            "the model on the store's grid (spherical models without grid-bound position embeddings)"
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
        raise UserError("give --init-times, or --start and --end (and optionally --every)")
    lo, hi = parse_time(start, "--start"), parse_time(end, "--end")
    if hi < lo:
        raise UserError(f"--end {format_time(hi)} is before --start {format_time(lo)}; swap them")
    if every_hours is None:
        selected = available[(available >= lo) & (available <= hi)]
        if selected.size == 0:
            covers = f"{format_time(available[0])} .. {format_time(available[-1])}" if len(available) else "no time"
            raise UserError(f"no store time lies in [{format_time(lo)}, {format_time(hi)}]; the store covers {covers}")
        return selected
    step = np.timedelta64(int(round(every_hours * 3600)), "s")
    if not every_hours > 0 or step < np.timedelta64(1, "s"):
        raise UserError(f"--every must be a positive number of hours (at least 1 s), got {every_hours}")
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
        raise UserError(
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
        "static": torch.from_numpy(np.repeat(static[None], len(init_times), axis=0)),  # writable, unlike a broadcast
        "forcings": torch.from_numpy(np.stack([dataset.forcings_at(t0 + lead_offsets) for t0 in init_times])),
    }


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
    store_stats: bool = False,
    members: int = 0,
    seed: int = 0,
    storage_options: dict | None = None,
) -> Path:
    """Forecast ``steps`` steps from each of ``init_times`` and write them to ``out``.

    ``members`` > 0: an ensemble of that many members per initialization time from a stochastic
    model (``network.noise_channels``), written along a ``realization`` dimension; memory holds
    one batch of states x members. ``seed`` makes the members reproducible (for one batch size).

    Fields are normalized with the checkpoint's statistics (``store_stats``: the store's own;
    ``open_inputs``). ``other_grid``: run on a store whose grid differs from the training grid
    (``SphericalTransformer.on_grid``; refused for grid-bound models). ``overwrite``: replace
    an existing ``out`` that s2forecast wrote (never anything else). ``storage_options``: fsspec
    options when ``store`` is a URL (e.g. ``{"token": "anon"}``).

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
        raise UserError(f"steps must be >= 1, got {steps}")
    if fmt not in ("netcdf", "zarr"):
        raise UserError(f"format must be 'netcdf' or 'zarr', got {fmt!r}")
    if nan_policy not in NAN_POLICIES:
        raise UserError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    if members < 0:
        raise UserError(f"members must be >= 0, got {members}")
    if len(init_times) == 0:
        raise UserError("no initialization times selected")
    output = Output(out, "forecast", directory=fmt == "zarr", inputs=(checkpoint, store), overwrite=overwrite)
    with output:  # on any error the temporary output goes and nothing at ``out`` changes
        model = load_forecaster(checkpoint, device)
        if members and getattr(model.net, "noise", None) is None:
            raise UserError(
                f"--members {members}: the checkpoint's model is deterministic (no network.noise_channels), so every "
                "member would be the same forecast; train an ensemble model (model.loss: crps) or leave --members out"
            )
        with initial_conditions(store, model) as source:
            options = (fmt, batch_size, device, bf16, nan_policy, progress, other_grid, store_stats, members, seed,
                       storage_options)  # fmt: skip
            return _rollout(model, checkpoint, source, store, steps, init_times, output, *options)


@contextlib.contextmanager
def initial_conditions(source: str | Path, model: Forecaster) -> Iterator[Path]:
    """A store of the initial conditions at ``source``: ``source`` itself when it is a store; for
    ERA5 NetCDF or GRIB files as the CDS delivers them, a store converted from them in a
    temporary directory (``convert-era5``: the same names, units and value checks), removed
    afterwards. Only the model's variables and levels are converted, and the static fields the
    checkpoint does not carry."""
    if is_url(source) or not Path(source).is_file():
        yield source  # a store (open_store reports a missing or foreign path)
        return
    path = Path(source)
    from s2forecast.data.convert_era5 import convert_era5

    layout = ChannelLayout.from_channels(model.data["channels"])
    statics = [name for name in model.data["static_channels"] if name not in model.static_fields]
    variables = [*layout.variables, *statics]  # the checkpoint's own static fields are not needed
    with tempfile.TemporaryDirectory(prefix="s2forecast-initial-conditions-") as tmp:
        yield convert_era5([path], Path(tmp) / "initial_conditions.zarr", variables, layout.levels, progress=False)


def source_times(source: str | Path, storage_options: dict | None = None) -> np.ndarray:
    """(time,) datetime64[ns] times of a store, or valid times of an ERA5 NetCDF/GRIB file."""
    if is_url(source) or not Path(source).is_file():
        return open_store(source, storage_options=storage_options)["time"].values.astype("datetime64[ns]")
    path = Path(source)
    from s2forecast.data.convert_era5 import _normalize_time, _open

    with _open(path) as ds:
        return np.unique(_normalize_time(ds, path)["time"].values)


def _rollout(model, checkpoint, store, source, steps, init_times, output, fmt, batch_size, device, bf16, nan_policy,
             progress, other_grid, store_stats, members, seed, storage_options) -> Path:  # fmt: skip
    """``rollout`` once its output is claimed: forecast from ``store`` (the initial conditions
    ``source`` names, or a store converted from them) into ``output.tmp``, then commit it."""
    from tqdm import tqdm

    dataset = open_inputs(model, store, other_grid, store_stats, storage_options=storage_options)
    if dataset.grid != model.grid:
        model = model.on_grid(dataset.grid)
    for t0 in init_times:  # every initialization time has its inputs: fail before writing anything
        input_indices(dataset, t0)
    info = model.data
    layout = ChannelLayout.from_channels(info["channels"])
    leads = (np.arange(1, steps + 1) * dataset.step).astype("timedelta64[ns]")
    units = {name: cf_attributes(name) if name in VARIABLES else {} for name in layout.variables}
    for name in layout.variables:
        store_attrs = dataset.store[name].attrs
        units[name] = {**units[name], **{k: v for k, v in store_attrs.items() if k in ("units", "long_name")}}
    attrs = {
        "Conventions": "CF-1.8",
        "title": f"s2forecast {model.architecture} forecast",
        "source": f"s2forecast {__version__}; checkpoint {Path(checkpoint).name} "
        f"sha256:{file_sha256(Path(checkpoint))}; model {model.architecture} "
        f"{json.dumps(model.network_options, sort_keys=True)}",
        "history": f"{datetime.now(UTC).isoformat(timespec='seconds')} s2forecast rollout --steps {steps} "
        f"--store {source}",
        "initial_conditions": str(source),
        **output.attrs,
    }
    if members:
        attrs["ensemble"] = f"{members} members along realization (seed {seed})"
    writer = ForecastFile(
        output.tmp, fmt, layout, np.asarray(init_times), leads, dataset.lat_deg, dataset.lon_deg, units, attrs,
        members=members,
    )  # fmt: skip
    copies = max(members, 1)  # forecasts per initialization time
    nonfinite = []
    try:
        autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16)
        batches = range(0, len(init_times), batch_size)
        for start in tqdm(batches, desc="rollout", unit="batch", disable=not progress):
            times = np.asarray(init_times[start : start + batch_size])
            batch = {k: v.to(device) for k, v in read_initial_conditions(dataset, times, steps).items()}
            batch = {k: v.repeat_interleave(copies, dim=0) for k, v in batch.items()}  # members: a batch dim
            dead = torch.zeros(len(times) * copies, dtype=torch.bool, device=device)  # went non-finite ("write")
            cuda = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else []
            with torch.random.fork_rng(devices=cuda), torch.no_grad(), autocast:  # the caller's RNG stays
                if members:
                    torch.manual_seed(seed * 1_000_003 + start)  # the members' noise: reproducible per batch
                leads_of_batch = model.rollout(batch["inputs"], batch["static"], batch["forcings"], steps)
                for k, prediction in enumerate(leads_of_batch):
                    physical = model.to_physical(prediction).cpu().numpy()
                    physical[dead.cpu().numpy()] = np.nan
                    bad = ~np.isfinite(physical).all(axis=(2, 3)) & ~dead.cpu().numpy()[:, None]
                    if bad.any():
                        b, c = np.argwhere(bad)[0]
                        lead = leads[k] / np.timedelta64(1, "h")
                        member = f", member {b % copies}" if members else ""
                        where = (f"init {format_time(times[b // copies])}{member}, step {k + 1} (+{lead:g} h), "
                                 f"{info['channels'][c]}")  # fmt: skip
                        if nan_policy == "fail":
                            raise UserError(f"non-finite forecast at {where}; pass --nan write to keep going")
                        nonfinite.append(where)
                        dead |= torch.from_numpy(bad.any(axis=1)).to(dead.device)
                    writer.write(start, k, physical.reshape(len(times), copies, *physical.shape[1:]) if members
                                 else physical)  # fmt: skip
                    # a forecast that went non-finite is written as NaN from then on; the rollout feeds
                    # back the tensor it yielded, so zeroing it here keeps NaN out of the next steps
                    prediction[dead] = 0.0
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
    if not is_url(store):
        check_unchanged(store, dataset.generation)
    return output.commit()
