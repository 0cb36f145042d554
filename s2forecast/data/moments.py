"""Streaming, area-weighted moments per channel: (count, weight, mean, M2) that combine.

A ``Moments`` holds, per channel, the number of non-NaN values, their total weight, their
weighted mean and M2 = sum of w (x - mean)**2, all float64. ``Moments.of`` reduces one block of
fields (two passes over the block: no cancellation); ``combine`` merges two blocks with Chan et
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
    def of(cls, x: np.ndarray, weights: np.ndarray) -> "Moments":
        """The moments of a block of fields.

        Args:
            x: (time, channel, latitude, longitude); converted to float64 (a float64 array is
                used as is). NaN are skipped; infinite values give non-finite moments.
            weights: (latitude,) weight of each row (cell areas), in the rows' order.
        """
        x = np.asarray(x, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)  # (lat,): the last axis of row sums
        valid = ~np.isnan(x)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if valid.all():  # the usual case: no masks to build
                count = np.full(x.shape[1], x[:, 0].size, dtype=np.float64)
                weight = np.full(x.shape[1], x.shape[0] * x.shape[-1] * w.sum())  # every value counts
                mean = _channel_sum(x.sum(-1), w) / weight
                d = x - mean[:, None, None]
                np.square(d, out=d)
            else:
                rows = valid.sum(-1)  # (time, channel, lat) values per row
                count = rows.sum((0, 2)).astype(np.float64)
                weight = _channel_sum(rows, w)
                mean = np.where(weight > 0, _channel_sum(np.where(valid, x, 0.0).sum(-1), w) / weight, 0.0)
                d = np.where(valid, x - mean[:, None, None], 0.0)
                np.square(d, out=d)
            m2 = _channel_sum(d.sum(-1), w)
        return cls(count, weight, mean, m2)

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
