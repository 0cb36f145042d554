"""Streaming, area-weighted moments per channel: (count, weight, mean, M2) that combine.

A ``Moments`` holds, per channel, the number of non-NaN values, their total weight, their
weighted mean and M2 = sum of w (x - mean)**2, all float64. ``Moments.of`` reduces one block of
fields (deviations from a value of the block: no cancellation); ``combine`` merges two blocks with Chan et
al.'s parallel update (Chan, Golub & LeVeque 1979), exact up to rounding in any order. So a
record is reduced block by block in bounded memory, and blocks reduced elsewhere (one per
worker of a dask.distributed job) merge into the same result: only these (channel,) arrays
travel. Sums of squares of raw values (geopotential ~5e5 m**2 s**-2) are never formed.

The weighted mean and std it finalizes are those of ``xarray``'s ``weighted(w).mean`` over
time, latitude and longitude, NaN skipped (their weights left out).
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Moments:
    """Per-channel statistics of the values seen so far; every field is (channel,) float64.

    count: number of non-NaN values; weight: sum of their weights; mean: weighted mean (0 where
    weight is 0); m2: sum of w (x - mean)**2.
    """

    count: np.ndarray
    weight: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def empty(cls, channels: int) -> "Moments":
        zeros = np.zeros(channels)
        return cls(zeros, zeros, zeros, zeros)

    @classmethod
    def of(cls, x: np.ndarray, weights: np.ndarray, lat_axis: int = 2, out: np.ndarray | None = None) -> "Moments":
        """The moments of a block of fields.

        Args:
            x: (time, channel, latitude, longitude), or (time, channel, longitude, latitude) with
                ``lat_axis=3`` (WeatherBench2's order, reduced as stored: no transposed copy); any
                float dtype (float32 as read is not copied to float64 first). NaN are skipped;
                infinite values give non-finite moments.
            weights: (latitude,) weight of each row (cell areas), in the rows' order.
            lat_axis: 2 or 3, the axis of ``x`` the weights run along.
            out: float64 scratch of at least ``x.size`` values, reused from block to block (a new
                0.1 GB array per block costs as much in page faults as the reduction itself); not
                ``x`` (the masked path reads ``x`` after).
        """
        w = np.asarray(weights, dtype=np.float64)
        other = 5 - lat_axis  # the other spatial axis
        # deviations from each channel's first value, in float64: the sum of squares has no
        # cancellation (geopotential ~5e5 with a spread of 1), in four passes over the block
        reference = np.asarray(x[:1, :, :1, :1], dtype=np.float64)  # (1, channel, 1, 1)
        with np.errstate(invalid="ignore", over="ignore"):
            scratch = None if out is None else out.reshape(-1)[: x.size].reshape(x.shape)
            y = np.subtract(x, reference, dtype=np.float64, out=scratch)
            s1 = (y.sum(axis=other) * w).sum((0, 2))  # (channel,) sum of w (x - reference)
        if np.isfinite(s1).all():  # the usual case: no NaN and no infinite value, no masks to build
            shape = [1] * 4
            shape[lat_axis] = w.size
            y *= np.sqrt(w).reshape(shape)
            rows = y.reshape(y.shape[0] * y.shape[1], -1)
            s2 = np.einsum("ij,ij->i", rows, rows).reshape(y.shape[:2]).sum(0)  # sum of w (x - reference)**2
            weight = np.full(x.shape[1], x.shape[0] * x.shape[other] * w.sum())  # every value counts
            shift = s1 / weight  # mean - reference
            count = np.full(x.shape[1], x.shape[0] * x.shape[2] * x.shape[3], dtype=np.float64)
            return cls(count, weight, reference.reshape(-1) + shift, np.maximum(s2 - s1 * shift, 0.0))
        del y
        return cls._of_masked(np.asarray(np.swapaxes(x, 2, 3) if lat_axis == 3 else x, dtype=np.float64), w)

    @classmethod
    def _of_masked(cls, x: np.ndarray, w: np.ndarray) -> "Moments":
        """``of`` for a (time, channel, latitude, longitude) float64 block with NaN or infinite values."""
        valid = ~np.isnan(x)
        # deviations from each channel's first finite value, as ``of``: a constant field has m2 exactly 0
        # (about its weighted mean, a rounding away from the value, it had std 6e-14 with one NaN)
        channels = np.swapaxes(x, 0, 1).reshape(x.shape[1], -1)
        finite = np.isfinite(channels)
        reference = np.where(finite.any(1), channels[np.arange(channels.shape[0]), finite.argmax(1)], 0.0)
        x = x - reference[:, None, None]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            rows = valid.sum(-1)  # (time, channel, lat) values per row
            count = rows.sum((0, 2)).astype(np.float64)
            weight = _channel_sum(rows, w)
            shift = np.where(weight > 0, _channel_sum(np.where(valid, x, 0.0).sum(-1), w) / weight, 0.0)
            d = np.where(valid, x - shift[:, None, None], 0.0)
            np.square(d, out=d)
            m2 = _channel_sum(d.sum(-1), w)
        return cls(count, weight, np.where(weight > 0, reference + shift, 0.0), m2)

    def combine(self, other: "Moments") -> "Moments":
        """The moments of both sets of values (Chan et al.'s update)."""
        weight = self.weight + other.weight
        # infinite values make non-finite moments on purpose (the caller names the time): no warning
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            share = np.where(weight > 0, other.weight / weight, 0.0)  # other's share of the weight
            delta = other.mean - self.mean
            mean = self.mean + delta * share
            m2 = self.m2 + other.m2 + delta * delta * self.weight * share
        return Moments(self.count + other.count, weight, mean, m2)

    def finalize(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std), each (channel,): NaN for a channel without values."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(self.weight > 0, self.mean, np.nan)
            std = np.sqrt(np.where(self.weight > 0, self.m2 / self.weight, np.nan))
        return mean, std


def _channel_sum(rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(time, channel, lat) row sums weighted by w (lat,) -> (channel,)."""
    return (rows * w).sum((0, 2))
