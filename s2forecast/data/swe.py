"""Shallow-water trajectories on the rotating sphere, written in the s2forecast store layout.

torch-harmonics' spectral solver (``torch_harmonics.examples.ShallowWaterSolver``: Earth's
radius and rotation, mean layer depth 10 km, third-order Adams-Bashforth with implicit
hyperdiffusion) integrates random initial conditions as in the attention paper's SWE
experiments (``random_initial_condition(mach=0.2)``, spectral truncation nlat/3; torch-harmonics
scales that amplitude for 120 modes, so with nlat/3 kept the flow's Mach number is about 0.01-0.02
at 16x32 to 128x256, winds of 3-6 m/s), less the constant global mean it gives vorticity and
divergence (a sphere's are zero, and no wind carries them). Its step
takes one state; ``timestep`` here is the same step for a batch of states, so trajectories are
integrated ``batch`` at a time (at 32x64 the cost of a step is mostly per-call overhead: a batch
of 16 costs about as much as two single trajectories). Each trajectory's start depends on its
seed alone, and a batch changes results only by float64 rounding.

Layout: one store, trajectories one after another along ``time``, each in its own time range
(trajectory k starts at 2000-01-01 + k * whole days covering the previous one) and tagged by
the ``trajectory`` coordinate along ``time``. Readers never build a sample across two
trajectories (``s2forecast.data.fields`` checks the coordinate), so SWE and ERA5 share
one reader. Variables: ``geopotential_height`` (layer depth h = phi/g, m), ``vorticity`` and
``divergence`` (s**-1).
"""

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import xarray as xr

from s2forecast.data.defaults import SWE_BATCH
from s2forecast.data.writer import InvalidInputData, StoreWriter, lazy_empty
from s2forecast.geometry import Grid
from s2forecast.output import RESUMABLE, byte_size, warn_if_short_of_disk
from s2forecast.provenance import history
from s2forecast.times import check_span, format_time
from s2forecast.user_errors import UserError

SWE_VARIABLES = ("geopotential_height", "vorticity", "divergence")
SWE_START = np.datetime64("2000-01-01T00:00", "ns")
SOLVER_GRIDS = ("equiangular", "legendre-gauss")
MIN_POINTS = 4  # latitudes and longitudes
MAX_DEPTH_RATIO = 2.0  # a layer deeper than twice its mean depth (10 km) means the solver blew up


def trajectory_times(trajectories: int, steps: int, dt_hours: float) -> tuple[np.ndarray, np.ndarray]:
    """(time, trajectory) coordinates: ``steps + 1`` times per trajectory, dt_hours apart."""
    days = math.ceil((steps + 1) * dt_hours / 24.0)
    # whole multiples of one step rounded to the millisecond: 1/6 h as float hours gave 00:10:00.000000001 and
    # 00:19:59.999999998, spacings that are not one step (fit refused the store)
    step = pd.to_timedelta(dt_hours, unit="h").round("ms").to_timedelta64().astype("timedelta64[ns]")
    offsets = np.arange(steps + 1) * step
    times = [SWE_START + np.timedelta64(k * days, "D") + offsets for k in range(trajectories)]
    return np.concatenate(times).astype("datetime64[ns]"), np.repeat(np.arange(trajectories), steps + 1)


def generate_swe(
    out: str | Path,
    nlat: int = 32,
    nlon: int = 64,
    grid: str = "equiangular",
    trajectories: int = 8,
    steps: int = 48,
    dt_hours: float = 1.0,
    seed: int = 0,
    solver_dt_seconds: float = 150.0,
    batch: int = SWE_BATCH,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Integrate ``trajectories`` random initial conditions for ``steps`` steps of
    ``dt_hours`` and write them to ``out``; deterministic for a ``seed``, resumable.

    Args:
        out: zarr store to write.
        nlat, nlon, grid: the grid ("equiangular" with poles or "legendre-gauss").
        trajectories: number of independent initial conditions.
        steps: stored steps after the initial state (steps + 1 times per trajectory).
        dt_hours: hours between stored states.
        seed: trajectory k draws its initial condition from seed * 1_000_003 + k.
        solver_dt_seconds: solver time step; dt_hours * 3600 is split into whole steps of
            at most this length.
        batch: trajectories integrated together (much faster than one by one: the solver's
            cost per step is mostly overhead at small grids); they are held in memory until
            written, batch * (steps + 1) * 3 * nlat * nlon * 4 bytes. The result does not
            depend on it beyond float64 rounding (the transforms' sums are blocked by batch).
    """
    from torch_harmonics.examples import ShallowWaterSolver
    from tqdm import tqdm

    check_arguments(nlat, nlon, grid, trajectories, steps, dt_hours, solver_dt_seconds, batch, seed)
    substeps = math.ceil(dt_hours * 3600.0 / solver_dt_seconds)
    solver_dt = dt_hours * 3600.0 / substeps
    geometry = Grid(nlat, nlon, grid)
    times, trajectory = trajectory_times(trajectories, steps, dt_hours)

    template = xr.Dataset(
        {name: lazy_empty((times.size, nlat, nlon), ("time", "latitude", "longitude")) for name in SWE_VARIABLES},
        coords={
            "time": times,
            "trajectory": ("time", trajectory),
            "latitude": geometry.lats_deg.numpy(),
            "longitude": geometry.lons_deg.numpy(),
        },
        attrs={
            "grid_kind": grid,
            "source": "s2forecast generate-swe: torch-harmonics ShallowWaterSolver, random initial conditions",
            "history": history(
                f"generate_swe({str(out)!r}, nlat={nlat}, nlon={nlon}, grid={grid!r}, trajectories={trajectories}, "
                f"steps={steps}, dt_hours={dt_hours}, seed={seed}) (Python)"
            ),
            "swe_solver_dt_seconds": solver_dt,
        },
    )
    signature = {
        "kind": "swe",
        "grid": [nlat, nlon, grid],
        "trajectories": trajectories,
        "steps": steps,
        "dt_hours": dt_hours,
        "seed": seed,
        "solver_dt_seconds": solver_dt_seconds,
    }
    store_bytes = 4 * times.size * len(SWE_VARIABLES) * nlat * nlon  # float32
    warn_if_short_of_disk(
        out, store_bytes, f"the store takes up to {byte_size(store_bytes)} before compression", RESUMABLE
    )
    lmax = math.ceil(nlat / 3)  # the solver first: a grid too large for memory fails before any store is made
    solver = ShallowWaterSolver(nlat, nlon, solver_dt, lmax=lmax, mmax=lmax, grid=grid).double()
    with StoreWriter(out, signature, overwrite=overwrite) as writer:
        written = writer.create(template)
        per_trajectory = steps + 1
        pending = [k for k in range(trajectories) if not written[k * per_trajectory : (k + 1) * per_trajectory].all()]
        with tqdm(
            total=trajectories * per_trajectory,
            initial=(trajectories - len(pending)) * per_trajectory,
            desc="shallow water",
            unit="state",
            disable=None if progress else True,  # None: drawn on a terminal only
        ) as bar:
            for first in range(0, len(pending), batch):
                members = pending[first : first + batch]
                fields, failure = integrate(
                    solver, [seed * 1_000_003 + k for k in members], steps, substeps, bar.update
                )
                for k, trajectory_fields in zip(members, fields, strict=False):  # written before a failure is raised
                    start = k * per_trajectory
                    slab = xr.Dataset(
                        {
                            name: (("time", "latitude", "longitude"), trajectory_fields[:, i])
                            for i, name in enumerate(SWE_VARIABLES)
                        },
                        coords={"time": times[start : start + per_trajectory]},
                    )
                    writer.write(slab, start)
                if failure is not None:
                    k = members[failure.member]
                    step_time = format_time(times[k * per_trajectory + failure.step])
                    if writer.created:  # removed on the way out (InvalidInputData): the same run fails again
                        left = f"nothing is left at {out}"
                    elif writer.replacing:
                        left = f"the store at {out} is unchanged"
                    else:  # resumed: its signature holds the old step, so the fix needs --overwrite
                        left = f"{out} stays incomplete: rerun with the smaller step and --overwrite"
                    raise InvalidInputData(
                        f"the shallow-water integration of trajectory {k} became unstable at stored step "
                        f"{failure.step} ({step_time}): {failure}; the solver step of {solver_dt:g} s "
                        f"is too long for the {nlat}x{nlon} grid: use a smaller --solver-dt-seconds (e.g. "
                        f"{solver_dt / 4:g}); {left}"
                    )
        writer.finish()
    return Path(out).expanduser()


def check_arguments(
    nlat: int,
    nlon: int,
    grid: str,
    trajectories: int,
    steps: int,
    dt_hours: float,
    solver_dt_seconds: float,
    batch: int = 1,
    seed: int = 0,
) -> None:
    """Refuse arguments the solver cannot run (before anything is written)."""
    if grid not in SOLVER_GRIDS:
        raise UserError(f"the shallow-water solver supports grid {SOLVER_GRIDS}, got {grid!r}")
    for name, value in (("trajectories", trajectories), ("steps", steps), ("batch", batch)):
        if value < 1:
            raise UserError(f"--{name} must be >= 1, got {value}")
    # the spectral truncation nlat/3 needs a few latitudes (below 4 the random initial state is degenerate)
    for name, value in (("nlat", nlat), ("nlon", nlon)):
        if value < MIN_POINTS:
            raise UserError(f"--{name} must be >= {MIN_POINTS}, got {value}")
    for name, value in (("dt-hours", dt_hours), ("solver-dt-seconds", solver_dt_seconds)):
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"--{name} must be a positive number, got {value}")
    if round(dt_hours * 3_600_000) < 1:  # the stored times are whole milliseconds apart (trajectory_times)
        raise UserError(f"--dt-hours must be at least a millisecond ({1 / 3_600_000:.3g} h), got {dt_hours:g}")
    check_time_axis_size(nlat, nlon, trajectories, steps, dt_hours)
    largest_seed = (2**64 - trajectories) // 1_000_003  # trajectory k's torch seed: seed * 1_000_003 + k < 2**64
    if not 0 <= seed <= largest_seed:
        raise UserError(f"--seed must be in 0 .. {largest_seed} for {trajectories} trajectories, got {seed}")
    check_batch_memory(nlat, nlon, steps, min(batch, trajectories))


def check_batch_memory(nlat: int, nlon: int, steps: int, batch: int) -> None:
    """Refuse a batch whose stored states (held until written: ``batch`` x (steps + 1) x 3 fields of
    float32) exceed this machine's memory, before hours of integration end in running out of it."""
    memory = physical_memory()
    if memory is None:
        return
    needed = batch * (steps + 1) * len(SWE_VARIABLES) * nlat * nlon * 4
    if needed > memory:
        one = needed // batch
        if one <= memory:
            fix = "lower --batch"
        elif 2 * one // (steps + 1) <= memory:  # a trajectory of one step fits
            fix = "store fewer --steps per trajectory (more --trajectories)"
        else:
            fix = "use a smaller grid"
        raise UserError(
            f"a batch of {batch} trajectories of {steps + 1} states of {nlat}x{nlon} takes {byte_size(needed)} in "
            f"memory until written, more than this machine's {byte_size(memory)}: {fix} (one trajectory: "
            f"{byte_size(one)})"
        )


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


# bytes per time step of the time axis in memory: the time, trajectory and written coordinates
TIME_AXIS_BYTES = 8 + 8 + 1


def check_time_axis_size(nlat: int, nlon: int, trajectories: int, steps: int, dt_hours: float) -> None:
    """Refuse a time axis that cannot be made, saying its size, before any array of it is allocated:
    times past what datetime64[ns] holds, or coordinates larger than half this machine's memory."""
    days = math.ceil((steps + 1) * dt_hours / 24.0)
    what = f"--trajectories {trajectories} x --steps {steps} of {dt_hours:g} h ({days} days each)"
    check_span(SWE_START, trajectories * days * 86400 * 10**9, what, "generate fewer or shorter trajectories")
    times = trajectories * (steps + 1)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): the datetime limit alone
        return
    if times * TIME_AXIS_BYTES > memory / 2:
        store = times * len(SWE_VARIABLES) * nlat * nlon * 4
        raise UserError(
            f"{what} make a time axis of {times:.3g} times: its coordinates alone need "
            f"{times * TIME_AXIS_BYTES / 2**30:.3g} GiB of memory (this machine has {memory / 2**30:.3g} GiB) and the "
            f"store {store / 2**40:.3g} TiB; generate fewer or shorter trajectories"
        )


class UnstableIntegration(UserError):
    """Trajectory ``member`` of a batch reached an unphysical state at stored step ``step``."""

    def __init__(self, message: str, step: int, member: int):
        super().__init__(message)
        self.step = step
        self.member = member


def unphysical(fields: np.ndarray, mean_depth: float) -> str | None:
    """What is unphysical about one state, or None.

    Args:
        fields: (3, nlat, nlon) [layer depth h (m), vorticity, divergence].
        mean_depth: the solver's mean layer depth (m); h must stay in (0, MAX_DEPTH_RATIO * mean_depth).
    """
    if not np.isfinite(fields).all():
        names = [name for name, f in zip(SWE_VARIABLES, fields, strict=True) if not np.isfinite(f).all()]
        return f"non-finite {', '.join(names)}"
    low, high = float(fields[0].min()), float(fields[0].max())
    limit = MAX_DEPTH_RATIO * mean_depth
    if low <= 0 or high >= limit:
        depth = low if low <= 0 else high
        return (
            f"layer depth {depth:.0f} m, outside the physical range 0 < h < {limit:.0f} m ({MAX_DEPTH_RATIO:g} "
            f"times the mean depth)"
        )
    return None


def initial_conditions(solver, seeds: list[int]) -> torch.Tensor:
    """(batch, 3, lmax, mmax) complex spectral [phi, vorticity, divergence]: one random start per
    seed (``random_initial_condition(mach=0.2)`` under ``torch.manual_seed(seed)``), so a
    trajectory's start depends on its seed only, not on the batch it is integrated in."""
    states = []
    with torch.random.fork_rng(devices=[]):
        for seed in seeds:
            torch.manual_seed(seed)
            state = solver.random_initial_condition(mach=0.2)
            # torch-harmonics fills degree 0 of vorticity and divergence too: a global mean no wind field has
            # (on a sphere both integrate to zero), constant in time (their tendencies have no degree 0)
            state[1:, 0, :] = 0.0
            states.append(state)
    return torch.stack(states)


def tendency(solver, uspec: torch.Tensor) -> torch.Tensor:
    """``ShallowWaterSolver.dudtspec`` for a batch: d/dt of (batch, 3, lmax, mmax) spectral
    [phi, vorticity, divergence] (the solver's own method takes one state only)."""
    ugrid = solver.spec2grid(uspec)  # (batch, 3, nlat, nlon)
    uvgrid = solver.getuv(uspec[:, 1:])  # (batch, 2, nlat, nlon) wind (m/s)
    phi, vorticity = ugrid[:, :1], ugrid[:, 1:2]
    absolute_flux = solver.vrtdivspec(uvgrid * (vorticity + solver.coriolis))
    mass_flux = solver.vrtdivspec(uvgrid * phi)
    energy = solver.grid2spec(ugrid[:, 0] + 0.5 * (uvgrid[:, 0] ** 2 + uvgrid[:, 1] ** 2))
    return torch.stack((-mass_flux[:, 1], -absolute_flux[:, 1], absolute_flux[:, 0] - solver.lap * energy), dim=1)


def timestep(solver, uspec: torch.Tensor, nsteps: int) -> torch.Tensor:
    """``ShallowWaterSolver.timestep`` for a batch (batch, 3, lmax, mmax): ``nsteps`` steps of
    third-order Adams-Bashforth (forward Euler, then second order, to start) with implicit
    hyperdiffusion of vorticity and divergence, the same arithmetic in the same order."""
    previous = before_previous = None
    for step in range(nsteps):
        new = tendency(solver, uspec)
        if step == 0:
            now, old = new, new
        elif step == 1:
            now, old = previous, new
        else:
            now, old = previous, before_previous
        uspec = uspec + solver.dt * ((23.0 / 12.0) * new - (16.0 / 12.0) * now + (5.0 / 12.0) * old)
        uspec[:, 1:] = solver.hyperdiff * uspec[:, 1:]
        previous, before_previous = new, now
    return uspec


def integrate(
    solver, seeds: list[int], steps: int, substeps: int, on_step=None
) -> tuple[np.ndarray, "UnstableIntegration | None"]:
    """One trajectory per seed, integrated together as a batch; ``on_step(n)`` (if given) is
    called with the number of trajectories after each stored step.

    Returns:
        fields: (trajectories, steps + 1, 3, nlat, nlon) float32 [h (m), vorticity, divergence]
            of the trajectories before the first one that became unphysical (all of them if none).
        failure: that first unphysical trajectory (``unphysical``): its place in the batch, the
            stored step and what is wrong; None if every trajectory stayed physical.
    """
    state = initial_conditions(solver, seeds)
    mean_depth = float(solver.havg)
    out, failure = [], None
    with torch.no_grad():
        for step in range(steps + 1):
            if step > 0:
                state = timestep(solver, state, substeps)
            fields = solver.spec2grid(state)  # (batch, 3, nlat, nlon)
            fields[:, 0] = fields[:, 0] / solver.gravity
            fields = fields.float().numpy()
            for member, problem in enumerate(unphysical(f, mean_depth) for f in fields):
                if problem is not None:  # the trajectories from here on are never written: drop them
                    failure = UnstableIntegration(problem, step, member)
                    state, fields, out = state[:member], fields[:member], [done[:member] for done in out]
                    break
            out.append(fields)
            if on_step is not None:
                on_step(len(seeds))
            if len(state) == 0:
                break
    return np.stack(out, axis=1), failure
