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

Under torchrun or srun, every process runs the same command and forecasts its own whole
batches of initialization times into one zarr store that rank 0 creates and commits
(``s2forecast.inference.ranks``); the file equals a one-process rollout's.
"""

import json
import math
import numbers
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from s2forecast import __version__
from s2forecast.data.store import VARIABLES, cf_attributes
from s2forecast.devices import check_device
from s2forecast.inference.forecast_file import ChannelLayout, ForecastFile
from s2forecast.inference.initial_conditions import (
    InitialConditions,
    checkpoint_stats,
    open_inputs,
    read_initial_conditions,
    select_ic_members,
    source_times,
)
from s2forecast.inference.perturbations import Perturbation, member_states
from s2forecast.inference.ranks import Ranks, collectively
from s2forecast.inference.runner import NAN_POLICIES, Runner
from s2forecast.models.forecaster import Forecaster
from s2forecast.output import Output, byte_size, file_sha256, output_format, warn_if_short_of_disk
from s2forecast.provenance import describe_input, history, python_call
from s2forecast.times import check_span, format_time, format_times, parse_end, parse_time
from s2forecast.user_errors import UserError

__all__ = ["RolloutOptions", "as_init_times", "checkpoint_stats", "init_times_from", "load_forecaster", "open_inputs",
           "read_initial_conditions", "rollout", "source_times"]  # fmt: skip


@dataclass(frozen=True)
class RolloutOptions:
    """How ``rollout`` forecasts and writes (the options of ``s2forecast rollout``).

    Attributes:
        fmt: "netcdf" or "zarr".
        batch_size: initialization times per batch (memory: one batch of states x members).
        device: "cpu", "cuda:1", ...
        bf16: bfloat16 autocast.
        nan_policy: on a non-finite forecast, "fail" or "write" it (``Runner``).
        other_grid: run on a store whose grid differs from the training grid
            (``SphericalTransformer.on_grid``; refused for grid-bound models).
        store_stats: normalize with the store's own statistics (default: the checkpoint's).
        members: ensemble members per initialization time, written along ``realization``
            (``ensemble_size``: from a stochastic model's noise (``network.noise_channels``),
            perturbed initial conditions, or the members of an ensemble file); 0: as many as
            ``ic_members`` selects, or a deterministic forecast file.
        perturbation: ``gaussian`` or ``spherical-noise``: an initial-condition ensemble, each
            member's initial state perturbed (``inference.perturbations``); None: unperturbed.
        perturbation_scale: its std in units of each channel's std (default
            ``perturbations.DEFAULT_SCALE``); only with ``perturbation``.
        ic_members: the members of an ERA5 ensemble file to start from (``"all"``, "0,3,5", or
            one, "2": ``initial_conditions.select_ic_members``); None for a store or a file
            without members.
        seed: of the noise of a stochastic model and of the perturbations, with each
            initialization time: makes its members reproducible whatever the batch size, the
            other times or the ranks (on one device type: CPU and CUDA draw different numbers).
        overwrite: replace an existing output that s2forecast wrote (never anything else).
        storage_options: fsspec options when the store is a URL (e.g. ``{"token": "anon"}``).
        shards: with fmt "zarr", initialization times per zarr v3 shard (one file holds that many
            initialization times, every member, at one lead); 0: one file per chunk. It must
            divide ``batch_size``, so that each batch writes whole shards.
        skip_without_inputs: leave out, with a warning, the initialization times whose inputs are
            not all in the store (the first ``history - 1`` times of the record or of each SWE
            trajectory) instead of refusing them: ``--start``/``--end`` without ``--every`` asks for
            every store time in the range that can start a forecast.
    """

    fmt: str | None = None
    batch_size: int = 4
    device: str = "cpu"
    bf16: bool = False
    nan_policy: str = "fail"
    other_grid: bool = False
    store_stats: bool = False
    members: int = 0
    perturbation: str | None = None
    perturbation_scale: float | None = None
    ic_members: str | tuple[int, ...] | None = None
    seed: int = 0
    overwrite: bool = False
    storage_options: dict | None = None
    shards: int = 0
    skip_without_inputs: bool = False

    def __post_init__(self):
        if self.fmt not in ("netcdf", "zarr", None):
            raise UserError(f"format must be 'netcdf' or 'zarr' (or None: the suffix of out's), got {self.fmt!r}")
        if self.nan_policy not in NAN_POLICIES:
            raise UserError(f"nan_policy must be one of {NAN_POLICIES}, got {self.nan_policy!r}")
        for name in ("batch_size", "members", "shards", "seed"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise UserError(f"{name} must be an integer, got {value!r}")
        if self.seed < 0:
            raise UserError(f"seed must be >= 0, got {self.seed}")
        if self.batch_size < 1:
            raise UserError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.members < 0:
            raise UserError(f"members must be >= 0, got {self.members}")
        try:  # here, not when the checkpoint is loaded onto it: that failed as an unreadable checkpoint
            check_device(self.device)
        except UserError as error:
            raise UserError(f"device {error}") from None
        if self.perturbation is None and self.perturbation_scale is not None:
            raise UserError(f"--perturbation-scale {self.perturbation_scale} perturbs nothing without --perturbation "
                            "gaussian or spherical-noise; add one, or leave --perturbation-scale out")  # fmt: skip
        self.perturbation_spec  # noqa: B018 (builds the Perturbation, which checks kind and scale)
        object.__setattr__(self, "ic_members", select_ic_members(self.ic_members))  # frozen: normalized once
        if self.shards < 0:
            raise UserError(f"--shards must be >= 1 initialization times per shard, got {self.shards}")
        if self.shards and self.fmt == "netcdf":
            raise UserError(f"--shards {self.shards} needs --format zarr (sharding is a zarr v3 feature); add "
                            "--format zarr and an --out such as forecast.zarr, or leave --shards out")  # fmt: skip
        if self.shards and self.batch_size % self.shards:
            fit = -(-self.batch_size // self.shards) * self.shards
            raise UserError(
                f"--shards {self.shards} does not divide --batch-size {self.batch_size}, so batches would split "
                f"shards; use --batch-size {fit} or a --shards that divides {self.batch_size}"
            )

    @property
    def perturbation_spec(self) -> Perturbation | None:
        if self.perturbation is None:
            return None
        scale = self.perturbation_scale
        return Perturbation(self.perturbation) if scale is None else Perturbation(self.perturbation, scale)


def ensemble_size(options: RolloutOptions, initial_conditions: int, stochastic: bool) -> int:
    """K, the members per initialization time (0: a deterministic forecast, no ``realization``).

    Member j starts from initial condition j mod M (``perturbations.member_states``), perturbed
    when ``options.perturbation`` is set, and runs once, drawing its own noise when the model is
    ``stochastic``. K is ``options.members``, or M when that is 0 and M > 1.

    Args:
        initial_conditions: M, the initial conditions per time (the selected members of an
            ensemble file; 1 for a store).

    Raises:
        ValueError: K = 1 (an ensemble of one), a perturbation of fewer than 2 members, K not a
            multiple of M, or members that would repeat (a deterministic model, unperturbed, more
            members than initial conditions).
    """
    m = initial_conditions
    size = options.members or (m if m > 1 else 0)
    if options.perturbation and size < 2:
        raise UserError(
            f"--perturbation {options.perturbation} perturbs the initial conditions of the members of an ensemble: add "
            "--members K with K >= 2 (e.g. --members 10)"
        )
    if size == 1:  # an ensemble of one: evaluate refuses it (CRPS and spread need 2 members)
        raise UserError(
            "--members 1 makes an ensemble of one member, which has no spread or CRPS: give --members K with K >= 2, "
            "or leave --members out for one forecast"
        )
    if size and size % m:
        raise UserError(
            f"--members {size} cannot share the {m} selected IC-file members equally: give a multiple of {m} (member j "
            f"starts from IC member j mod {m}), or leave --members out for {m} members"
        )
    if size and not options.perturbation and not stochastic and size > m:
        raise UserError(
            f"--members {size}: the checkpoint's model is deterministic (no network.noise_channels) and the initial "
            f"conditions are not perturbed, so members would repeat; add --perturbation gaussian or spherical-noise "
            "(an initial-condition ensemble), start from an ensemble file (--ic-members), train an ensemble model "
            "(model.loss: crps), or leave --members out"
        )
    return size


def with_store_statistics(model: Forecaster, stats, source) -> Forecaster:
    """``model`` normalizing with a store's own statistics (``--store-stats``) both ways: the inputs
    were normalized with them, so the outputs go back into physical units with them too.

    Raises:
        ValueError: tendency statistics over another step than a residual model's.
    """
    if model.residual and not np.isclose(stats.tendency_step_hours, model.data.step_hours):
        raise UserError(
            f"--store-stats: the statistics of {source} are of tendencies over {stats.tendency_step_hours:g} h, the "
            f"model steps {model.data.step_hours:g} h: compute them over its step (`s2forecast stats {source} "
            f"--step-hours {model.data.step_hours:g}`), or leave --store-stats out to use the checkpoint's"
        )
    return model.with_statistics(stats.mean, stats.std, stats.tendency_std)


def init_generators(options: RolloutOptions, init_times: np.ndarray) -> list[torch.Generator]:
    """One generator per initialization time (perturbations, then the noise of a stochastic
    model, on ``options.device``), seeded from (seed, time): the members of a time are the same
    whatever the batch size, the other times of the run, or the rank that forecasts it; the
    caller's random state is untouched."""
    seconds = init_times.astype("datetime64[s]").astype(np.int64)
    # SeedSequence mixes (seed, time): no two pairs share a stream (a linear mix would), any seed >= 0 fits
    # (not reduced modulo 2**64: seeds 0 and 2**64 were one stream)
    states = [np.random.SeedSequence([int(options.seed), int(t) % 2**64]).generate_state(1, np.uint64)[0]
              for t in seconds]  # fmt: skip
    return [torch.Generator(options.device).manual_seed(int(state)) for state in states]


def load_forecaster(checkpoint: str | Path, device: str = "cpu") -> Forecaster:
    """The trained Forecaster of a local checkpoint, in eval mode (``Forecaster.from_checkpoint``)."""
    return Forecaster.from_checkpoint(checkpoint, map_location=device)


def init_times_from(times=None, start=None, end=None, every_hours=None, available=None) -> np.ndarray:
    """Explicit initialization times, or every ``every_hours`` from start to end (inclusive).

    Args:
        times: explicit times (strings or datetime64); refused with start, end or every_hours.
        start, end: inclusive range (an end written as a date is all of that day: ``times.parse_end``);
            with ``every_hours`` None, the ``available`` times in it.
        every_hours: hours between initialization times (> 0, finite); one longer than the
            range gives ``start`` alone.
        available: (n,) datetime64[ns] times of the store.

    Raises:
        ValueError: a time that is not a time, start or end missing, ``every_hours`` not a
            number > 0 (of at least 1 s), or more times than ``available`` holds.
    """
    if times is not None and len(times):  # an array of times too (its truth value is ambiguous)
        given = [
            name for name, value in (("--start", start), ("--end", end), ("--every", every_hours)) if value is not None
        ]
        if given:
            raise UserError(
                f"--init-times lists the initialization times, so {' and '.join(given)} would be ignored; give either "
                "--init-times or --start/--end (with --every), not both"
            )
        return np.array([parse_time(t, "initialization time") for t in times])
    if start is None or end is None:
        raise UserError("give --init-times, or --start and --end (and optionally --every)")
    lo, hi = parse_time(start, "--start"), parse_end(end, "--end")  # --end 2020-12-31: all of that day
    shown = format_time(parse_time(end, "--end")) if not isinstance(end, str) else end.strip()
    if hi < lo:
        raise UserError(f"--end {shown} is before --start {format_time(lo)}; swap them")
    if every_hours is None:
        selected = available[(available >= lo) & (available <= hi)]
        if selected.size == 0:
            covers = f"{format_time(available[0])} .. {format_time(available[-1])}" if len(available) else "no time"
            raise UserError(f"no store time lies in [{format_time(lo)}, {shown}]; the store covers {covers}")
        return selected
    if not (every_hours > 0 and math.isfinite(every_hours)) or round(every_hours * 3600) < 1:
        raise UserError(f"--every must be a positive number of hours (at least 1 s), got {every_hours}")
    # in Python ints: a step of any size neither overflows nor wraps around datetime64[ns]
    step_ns = round(every_hours * 3600) * 10**9
    count = int((hi - lo).astype(np.int64)) // step_ns + 1  # a step longer than the span: --start alone
    if available is not None and count > len(available):  # each must be a store time: at most the store's count
        raise UserError(
            f"--start {format_time(lo)} --end {shown} --every {every_hours:g} make {count} initialization "
            f"times, more than the {len(available)} times of the store (each must be one of them); choose a larger "
            "--every or a shorter period"
        )
    offsets_ns = np.arange(count, dtype=np.int64) * (step_ns if count > 1 else 0)  # 1: the step may exceed int64
    return lo + offsets_ns.astype("timedelta64[ns]")


def as_init_times(init_times) -> np.ndarray:
    """(n,) datetime64[ns] initialization times from datetime64 values, datetimes or strings (a
    time zone converted to UTC), each checked by ``times.parse_time``.

    Raises:
        UserError: one that is not a time, or outside what datetime64[ns] holds (named).
    """
    values = np.atleast_1d(np.asarray(init_times))  # not via object: datetime64[ns] would become ints
    if values.dtype.kind == "U":
        values = values.astype(object)  # str, which messages show as the user wrote it
    return np.array([parse_time(value, "initialization time") for value in values.ravel()], dtype="datetime64[ns]")


def check_unique_times(init_times: np.ndarray) -> None:
    """Refuse repeated initialization times: the forecast file would hold one twice, which every reader
    (``evaluate`` first) refuses."""
    unique, counts = np.unique(init_times, return_counts=True)
    if (counts > 1).any():
        raise UserError(
            f"initialization time {format_time(unique[counts > 1][0])} is given {int(counts[counts > 1][0])} times; "
            "list each initialization time once"
        )


def rollout(
    checkpoint: str | Path,
    source: str | Path,
    steps: int,
    init_times,
    out: str | Path,
    options: RolloutOptions = RolloutOptions(),
    progress: bool = True,
    ranks: Ranks | None = None,
) -> Path:
    """Forecast ``steps`` steps from each of ``init_times`` of ``source`` (a store, its URL, or
    ERA5 NetCDF/GRIB files: ``InitialConditions``) and write them to ``out``. ``init_times``:
    datetime64 values of any unit, datetimes or strings (``as_init_times``).

    Under torchrun or srun (``ranks``, default ``Ranks.from_environment()``) every process runs
    this with the same arguments: rank 0 claims ``out`` and creates the zarr store at its
    temporary path, each rank forecasts and writes its own whole batches of ``init_times``
    (``Ranks.slab``), and rank 0 commits the store once every rank has succeeded; the file equals
    a one-process rollout's. A failure on any rank fails every rank and leaves ``out`` untouched.

    Raises:
        ValueError: the checkpoint and store disagree (channels, grid, normalization), an
            initialization time lacks inputs, a non-finite forecast appears (``nan_policy``
            "fail"; "write" writes it and lists every such forecast in the ``nonfinite_forecasts``
            attribute), an initialization time that is not a time or is given twice,
            ``out`` collides with an input or with a path s2forecast may not replace, its
            directory is missing, the store was rewritten during the rollout, or NetCDF is
            asked of several processes.
        FileExistsError: ``out`` exists and ``overwrite`` is not set.
        OSError: ``out`` cannot be written (permissions, full disk): nothing at ``out`` changed.
    """
    if not isinstance(steps, numbers.Integral) or isinstance(steps, bool) or steps < 1:
        raise UserError(f"steps must be an integer >= 1, got {steps!r}")
    options = replace(options, fmt=output_format(out, options.fmt))  # fmt None: the suffix's (f.zarr: zarr)
    # once: strings and every datetime64 unit alike; ascending, as WeatherBench2's forecasts (its
    # .sel(time=slice(...)) refuses an unsorted axis, pandas slices one by position)
    init_times = np.sort(as_init_times(init_times))
    if len(init_times) == 0:
        raise UserError("no initialization times selected")
    check_unique_times(init_times)
    ranks = Ranks.from_environment() if ranks is None else ranks
    if ranks.many and options.fmt != "zarr":
        raise UserError(
            f"--format {options.fmt} cannot be written by {ranks.world} processes (WORLD_SIZE {ranks.world}): a NetCDF "
            "file has one writer; add --format zarr (and an --out such as forecast.zarr), or run one process"
        )
    options = replace(options, device=ranks.device(options.device))
    with ranks.group():
        return _rollout(checkpoint, source, steps, init_times, out, options, progress, ranks)


def _rollout(checkpoint, source, steps, init_times, out, options, progress, ranks: Ranks) -> Path:
    """``rollout`` on this rank: every step that can fail is followed by every rank's verdict
    (``collectively``), so that no rank waits for one that gave up."""
    from tqdm import tqdm

    fmt, first = options.fmt, ranks.rank == 0

    def claim() -> Output | None:
        if not first:
            return None
        return Output(
            out, "forecast", directory=fmt == "zarr", inputs=(checkpoint, source), overwrite=options.overwrite
        )

    output = collectively(ranks, claim)
    tmp = ranks.broadcast(None if output is None else output.tmp)  # where every rank writes
    with output if first else nullcontext():  # on any error the temporary output goes and nothing at ``out`` changes

        def load() -> tuple[Forecaster, InitialConditions]:
            model = load_forecaster(checkpoint, options.device)
            if options.ic_members is None:  # a store's single initial condition: fail before converting anything
                ensemble_size(options, 1, model.stochastic)
            opened = InitialConditions.open(source, model, options.other_grid, options.store_stats,
                                            options.storage_options, options.ic_members)  # fmt: skip
            return model, opened

        model, opened = collectively(ranks, load)
        with opened as initial:
            if options.skip_without_inputs:
                init_times, left_out = collectively(ranks, lambda: initial.with_inputs(init_times))
                if first and left_out.size:
                    warnings.warn(
                        f"left out {left_out.size} of the {left_out.size + init_times.size} store times in the range "
                        f"({format_times(left_out, limit=3)}): their {model.data.history} input state(s) are not all "
                        "in the store (the start of the record or of a trajectory, or a gap in it)",
                        stacklevel=2,
                    )
            if options.store_stats:
                model = with_store_statistics(model, initial.dataset.stats, source)
            members = collectively(ranks, lambda: ensemble_size(options, len(initial.datasets), model.stochastic))
            options = replace(options, members=members)

            def create() -> tuple[Forecaster, np.ndarray, ForecastFile]:
                on_grid = model if initial.dataset.grid == model.grid else model.on_grid(initial.dataset.grid)
                initial.check(init_times)  # every initialization time has its inputs: fail before writing anything
                step = initial.dataset.step
                what = f"--steps {steps} of {step / np.timedelta64(1, 'h'):g} h"
                check_span(init_times.max(), steps * int(step / np.timedelta64(1, "ns")), what, "forecast fewer steps")
                leads = (np.arange(1, steps + 1) * step).astype("timedelta64[ns]")
                if first:
                    writer = open_forecast_file(output, on_grid, initial, checkpoint, init_times, leads, options)
                else:
                    writer = ForecastFile(tmp, fmt, ChannelLayout.from_channels(on_grid.data.channels), init_times,
                                          leads, initial.dataset.lat_deg, initial.dataset.lon_deg, {}, {},
                                          members=members, shards=options.shards, create=False)  # fmt: skip
                return on_grid, leads, writer

            model, leads, writer = collectively(ranks, create)  # rank 0 made the store before any rank writes
            runner = Runner(model, options.device, options.bf16, options.nan_policy)

            def forecast() -> list[str]:
                try:
                    slab = ranks.slab(len(init_times), options.batch_size)
                    batches = range(slab.start, slab.stop, options.batch_size)
                    bar = None if progress and first else True  # None: drawn on a terminal only, not into a log file
                    for start in tqdm(batches, desc="rollout", unit="batch", disable=bar):
                        if ranks.many and failed_ranks(tmp):
                            break  # the failure reaches this rank at the next collective: no share forecast for nothing
                        times = init_times[start : min(start + options.batch_size, slab.stop)]
                        states = initial.read(times, steps)
                        generators = init_generators(options, times)
                        if members:  # each member's initial state: IC-file member j mod M, perturbed
                            inputs = member_states(states.inputs.to(options.device), members, model.grid,
                                                   options.perturbation_spec, generators)  # fmt: skip
                            states = replace(states, inputs=inputs)
                        forecasts = runner.forecast(states, times, leads, members, generators)
                        for k, fields in enumerate(forecasts):
                            writer.write(start, k, fields)
                except BaseException:
                    if ranks.many:
                        mark_failed(tmp, ranks.rank)
                    writer.abort()
                    raise
                return runner.nonfinite

            nonfinite = [where for found in ranks.gather(collectively(ranks, forecast)) for where in found]

            def finish() -> Path | None:
                if not first:
                    return None
                try:
                    if nonfinite:
                        writer.add_attributes({"nonfinite_forecasts": "; ".join(nonfinite)})  # every one
                    writer.close()
                except BaseException:
                    writer.abort()
                    raise
                initial.check_unchanged()
                return output.commit()

            return ranks.broadcast(collectively(ranks, finish))


FAILED_MARK = ".s2forecast-failed-rank-"  # in the temporary store, which every rank writes to: ranks see it per batch


def mark_failed(tmp: str | Path, rank: int) -> None:
    """Tell the other ranks, before they start their next batch, that this rank's forecasts failed
    (its error reaches them at the next collective, which they would reach only after their share)."""
    try:
        (Path(tmp) / f"{FAILED_MARK}{rank}").touch()
    except OSError:  # the store went (rank 0 removes it after the verdict): the collective tells them all the same
        pass


def failed_ranks(tmp: str | Path) -> bool:
    """Whether a rank marked its forecasts failed (``mark_failed``)."""
    return any(Path(tmp).glob(f"{FAILED_MARK}*"))


def open_forecast_file(
    output: Output,
    model: Forecaster,
    initial: InitialConditions,
    checkpoint: str | Path,
    init_times: np.ndarray,
    leads: np.ndarray,
    options: RolloutOptions,
) -> ForecastFile:
    """The forecast file at ``output.tmp``: the model's variables with the store's units, on the
    store's grid, with attributes that say what made it."""
    layout = ChannelLayout.from_channels(model.data.channels)
    dataset = initial.dataset
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
        "history": history(python_call("rollout", checkpoint, initial.source)),
        "checkpoint": describe_input(checkpoint),
        "initial_conditions": describe_input(initial.source),
        **output.attrs,
    }
    if options.members:
        attrs["ensemble"] = ensemble_description(options, initial.members, model.stochastic)
    # float32 fields: (init time, lead, member, channel, latitude, longitude)
    fields = len(init_times) * len(leads) * (options.members or 1) * len(model.data.channels)
    needed = 4 * fields * dataset.lat_deg.size * dataset.lon_deg.size
    warn_if_short_of_disk(output.tmp, needed, f"the forecast takes up to {byte_size(needed)} uncompressed")
    return ForecastFile(output.tmp, options.fmt, layout, init_times, leads, dataset.lat_deg, dataset.lon_deg, units,
                        attrs, members=options.members, shards=options.shards)  # fmt: skip


def ensemble_description(options: RolloutOptions, ic_members: tuple[int, ...] | None, stochastic: bool) -> str:
    """The forecast file's ``ensemble`` attribute: what makes its members differ."""
    parts = [f"{options.members} members along realization (seed {options.seed})"]
    if ic_members:
        parts.append(f"member j starts from member {list(ic_members)}[j mod {len(ic_members)}] of the initial "
                     "conditions file (its ensemble dimension)")  # fmt: skip
    if options.perturbation:
        statistics = "the store's statistics (--store-stats)" if options.store_stats else "the checkpoint's statistics"
        parts.append(f"initial conditions perturbed: {options.perturbation_spec.describe(statistics)}")
    if stochastic:
        parts.append("each member draws its own model noise")
    return "; ".join(parts)
