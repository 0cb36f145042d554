"""Shallow-water trajectories on the rotating sphere, written in the s2forecast store layout.

torch-harmonics' spectral solver (``torch_harmonics.examples.ShallowWaterSolver``: Earth's
radius and rotation, mean layer depth 10 km, third-order Adams-Bashforth with implicit
hyperdiffusion) integrates random initial conditions as in the attention paper's SWE
experiments (``random_initial_condition(mach=0.2)``, spectral truncation nlat/3).

Layout: one store, trajectories one after another along ``time``, each in its own time range
(trajectory k starts at 2000-01-01 + k * whole days covering the previous one) and tagged by
the ``trajectory`` coordinate along ``time``. Readers never build a sample across two
trajectories (``s2forecast.datamodules.fields`` checks the coordinate), so SWE and ERA5 share
one reader. Variables: ``geopotential_height`` (layer depth h = phi/g, m), ``vorticity`` and
``divergence`` (s**-1).
"""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import xarray as xr

from s2forecast.datamodules.writer import StoreWriter, lazy_empty
from s2forecast.geometry import Grid

SWE_VARIABLES = ("geopotential_height", "vorticity", "divergence")
SWE_START = np.datetime64("2000-01-01T00:00", "ns")
SOLVER_GRIDS = ("equiangular", "legendre-gauss")
MIN_POINTS = 4  # latitudes and longitudes
MAX_DEPTH_RATIO = 2.0  # a layer deeper than twice its mean depth (10 km) means the solver blew up


def trajectory_times(trajectories: int, steps: int, dt_hours: float) -> tuple[np.ndarray, np.ndarray]:
    """(time, trajectory) coordinates: ``steps + 1`` times per trajectory, dt_hours apart."""
    days = math.ceil((steps + 1) * dt_hours / 24.0)
    offsets = pd.to_timedelta(np.arange(steps + 1) * dt_hours, unit="h").values
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
    """
    from torch_harmonics.examples import ShallowWaterSolver
    from tqdm import tqdm

    check_arguments(nlat, nlon, grid, trajectories, steps, dt_hours, solver_dt_seconds)
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
            "history": f"s2forecast generate-swe --nlat {nlat} --nlon {nlon} --grid {grid} --trajectories "
            f"{trajectories} --steps {steps} --dt-hours {dt_hours} --seed {seed}",
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
    with StoreWriter(out, signature, overwrite=overwrite) as writer:
        written = writer.create(template)
        lmax = math.ceil(nlat / 3)
        solver = ShallowWaterSolver(nlat, nlon, solver_dt, lmax=lmax, mmax=lmax, grid=grid).double()
        per_trajectory = steps + 1
        for k in tqdm(range(trajectories), desc="shallow water", unit="trajectory", disable=not progress):
            start = k * per_trajectory
            if written[start : start + per_trajectory].all():
                continue
            try:
                fields = integrate(solver, seed * 1_000_003 + k, steps, substeps)
            except UnstableIntegration as error:
                step_time = pd.Timestamp(times[start + error.step])
                raise ValueError(
                    f"the shallow-water integration of trajectory {k} became unstable at stored step {error.step} "
                    f"({step_time:%Y-%m-%dT%H:%M}): {error}; the solver step of {solver_dt:g} s is too long for the "
                    f"{nlat}x{nlon} grid: use a smaller --solver-dt-seconds (e.g. {solver_dt / 4:g}); "
                    + (
                        f"no complete store was written to {out}"
                        if overwrite
                        else f"{out} is left incomplete (readers refuse it)"
                    )
                ) from None
            slab = xr.Dataset(
                {name: (("time", "latitude", "longitude"), fields[:, i]) for i, name in enumerate(SWE_VARIABLES)},
                coords={"time": times[start : start + per_trajectory]},
            )
            writer.write(slab, start)
        writer.finish()
    return Path(out)


def check_arguments(
    nlat: int, nlon: int, grid: str, trajectories: int, steps: int, dt_hours: float, solver_dt_seconds: float
) -> None:
    """Refuse arguments the solver cannot run (before anything is written)."""
    if grid not in SOLVER_GRIDS:
        raise ValueError(f"the shallow-water solver supports grid {SOLVER_GRIDS}, got {grid!r}")
    for name, value in (("trajectories", trajectories), ("steps", steps)):
        if value < 1:
            raise ValueError(f"--{name} must be >= 1, got {value}")
    # the spectral truncation nlat/3 needs a few latitudes (below 4 the random initial state is degenerate)
    for name, value in (("nlat", nlat), ("nlon", nlon)):
        if value < MIN_POINTS:
            raise ValueError(f"--{name} must be >= {MIN_POINTS}, got {value}")
    for name, value in (("dt-hours", dt_hours), ("solver-dt-seconds", solver_dt_seconds)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"--{name} must be a positive number, got {value}")


class UnstableIntegration(ValueError):
    """The solver produced an unphysical state at stored step ``step``."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


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


def integrate(solver, seed: int, steps: int, substeps: int) -> np.ndarray:
    """(steps + 1, 3, nlat, nlon) float32 [h (m), vorticity, divergence] from one random start.

    Raises:
        UnstableIntegration: at the first stored step whose state is unphysical (``unphysical``).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        state = solver.random_initial_condition(mach=0.2)
    mean_depth = float(solver.havg)
    out = []
    with torch.no_grad():
        for step in range(steps + 1):
            if step > 0:
                state = solver.timestep(state, substeps)
            fields = solver.spec2grid(state)
            fields[0] = fields[0] / solver.gravity
            fields = fields.float().numpy()
            problem = unphysical(fields, mean_depth)
            if problem is not None:
                raise UnstableIntegration(problem, step)
            out.append(fields)
    return np.stack(out)


def run(args) -> None:
    """``s2forecast generate-swe`` (arguments: ``s2forecast.commands.generate_swe``)."""
    path = generate_swe(
        args.out, args.nlat, args.nlon, args.grid, args.trajectories, args.steps, args.dt_hours, args.seed,
        args.solver_dt_seconds, overwrite=args.overwrite, progress=not args.no_progress,
    )  # fmt: skip
    print(f"wrote {path}")
