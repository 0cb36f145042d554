"""Per-channel normalization statistics of a store: ``s2forecast stats STORE.zarr``.

For every channel (a single-level variable, or one level of a pressure-level variable) and
static field: the area-weighted mean and standard deviation over a time range, and the same
for its one-step tendency x(t + step) - x(t) (models that predict increments normalize them
with it). Weights are WeatherBench2's cell areas (``Grid.area_weights``). The result is the
``stats`` group of the store, read back by ``load_stats``; DataModules refuse a store without
it. Computed lazily with dask, so the store is streamed, not loaded.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from s2forecast.datamodules.store import describe, open_store
from s2forecast.times import format_time

STATS_GROUP = "stats"


def channel_names(variable: str, levels) -> list[str]:
    """'temperature' with levels (500, 850) -> ['temperature/500', 'temperature/850']."""
    return [f"{variable}/{int(level)}" for level in levels] if levels is not None else [variable]


def time_step(times: np.ndarray) -> np.timedelta64:
    """The store's time step: the most common spacing of its time axis."""
    if times.size < 2:
        raise ValueError("a store needs at least two times to define a time step")
    spacing, counts = np.unique(np.diff(times), return_counts=True)
    return spacing[counts.argmax()]


def compute_stats(path: str | Path, start=None, end=None, step_hours: float | None = None) -> xr.Dataset:
    """Statistics of the store at ``path`` over times in [start, end], written to its ``stats``
    group and returned.

    Args:
        path: the store.
        start, end: inclusive time range (anything ``numpy.datetime64`` parses); default all.
        step_hours: tendency step; defaults to the store's time step.

    Returns:
        Dataset over ``channel`` with ``mean``, ``std``, ``tendency_mean``, ``tendency_std``
        (NaN for static fields' tendencies) and attributes start, end, tendency_step_hours.
    """
    ds = xr.open_zarr(path, chunks={})  # dask: streamed reductions
    info = describe(open_store(path), str(path))
    times = ds["time"].values
    lo = np.datetime64(pd.Timestamp(start), "ns") if start is not None else times[0]
    hi = np.datetime64(pd.Timestamp(end), "ns") if end is not None else times[-1]
    selected = times[(times >= lo) & (times <= hi)]
    if selected.size == 0:
        raise ValueError(
            f"no times of {path} lie in [{format_time(lo)}, {format_time(hi)}]; the store covers "
            f"{format_time(times[0])} .. {format_time(times[-1])}"
        )
    step = time_step(times) if step_hours is None else np.timedelta64(int(round(step_hours * 3600)), "s")
    pairs = selected[np.isin(selected + step, times) & (selected + step <= hi)]
    if "trajectory" in ds.coords:  # never difference across two trajectories
        trajectory = ds["trajectory"].to_series()
        pairs = pairs[trajectory.loc[pairs].values == trajectory.loc[pairs + step].values]

    # Grid rows run north -> south; label them so xarray aligns them with either store order
    north_to_south = np.sort(ds["latitude"].values)[::-1]
    weights = xr.DataArray(info.grid.area_weights.numpy(), dims="latitude", coords={"latitude": north_to_south})
    names, rows = [], []
    for name in info.variables + info.static:
        var = ds[name].astype(np.float64)
        dims = [d for d in ("time", "latitude", "longitude") if d in var.dims]
        fields = var.sel(time=selected) if "time" in var.dims else var
        mean, std = _weighted_moments(fields, weights, dims)
        if "time" in var.dims and pairs.size:
            later = var.sel(time=pairs + step).drop_vars("time")
            earlier = var.sel(time=pairs).drop_vars("time")
            t_mean, t_std = _weighted_moments(later - earlier, weights, dims)
        else:
            t_mean = t_std = xr.full_like(mean, np.nan)
        levels = var["level"].values if "level" in var.dims else None
        names += channel_names(name, levels)
        rows.append(xr.concat([mean, std, t_mean, t_std], dim="stat").compute().values.reshape(4, -1))
    values = np.concatenate(rows, axis=1)
    stats = xr.Dataset(
        {key: ("channel", values[i]) for i, key in enumerate(("mean", "std", "tendency_mean", "tendency_std"))},
        coords={"channel": np.array(names, dtype=object)},
        attrs={
            "start": str(selected[0]),
            "end": str(selected[-1]),
            "times": int(selected.size),
            "tendency_pairs": int(pairs.size),
            "tendency_step_hours": float(step / np.timedelta64(1, "h")),
            "weights": "WeatherBench2 cell areas",
        },
    )
    stats.to_zarr(path, group=STATS_GROUP, mode="w", zarr_format=3, consolidated=True)
    return stats


def _weighted_moments(x: xr.DataArray, weights: xr.DataArray, dims) -> tuple[xr.DataArray, xr.DataArray]:
    """Weighted mean and standard deviation over ``dims`` (two passes: no cancellation)."""
    mean = x.weighted(weights).mean(dims)
    std = np.sqrt(((x - mean) ** 2).weighted(weights).mean(dims))
    return mean, std


@dataclass(frozen=True)
class ChannelStats:
    """Normalization statistics for a list of channels, as float32 arrays (channels,)."""

    channels: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    tendency_mean: np.ndarray
    tendency_std: np.ndarray
    tendency_step_hours: float


def load_stats(path: str | Path, channels: list[str], constant_ok: bool = False) -> ChannelStats:
    """The statistics of ``channels`` from the store's ``stats`` group.

    ``constant_ok`` (static fields): a channel with zero spread gets std 1 instead of an error.

    Raises:
        ValueError: no statistics (says how to compute them), or channels missing from them.
    """
    try:
        stats = xr.open_zarr(path, group=STATS_GROUP, chunks=None)
    except (FileNotFoundError, KeyError, ValueError, OSError):
        raise ValueError(
            f"{path} has no normalization statistics; compute them with `s2forecast stats {path} "
            "--start ... --end ...` over the training period"
        ) from None
    known = list(stats["channel"].values)
    missing = [c for c in channels if c not in known]
    if missing:
        raise ValueError(f"statistics of {path} lack channels {missing}; rerun `s2forecast stats {path}`")
    sel = stats.sel(channel=channels)
    std = sel["std"].values
    if constant_ok:
        std = np.where(std > 0, std, 1.0)
    if np.any(~np.isfinite(std)) or np.any(std <= 0):
        bad = [c for c, s in zip(channels, std, strict=True) if not np.isfinite(s) or s <= 0]
        raise ValueError(f"channels {bad} of {path} have zero or undefined spread; drop them from the inputs")
    return ChannelStats(
        tuple(channels),
        sel["mean"].values.astype(np.float32),
        std.astype(np.float32),
        sel["tendency_mean"].values.astype(np.float32),
        sel["tendency_std"].values.astype(np.float32),
        float(stats.attrs["tendency_step_hours"]),
    )
