"""Forecast evaluation comparable with WeatherBench2: skill metrics, climatology, baselines."""

from s2forecast.evaluation.climatology import (
    compute_climatology,
    open_climatology,
    smooth_dayofyear,
    validate_climatology,
    window_weights,
)
from s2forecast.evaluation.metrics import (
    MissingTruthWarning,
    acc,
    bias,
    climatology_at_valid_times,
    climatology_forecast,
    latitude_weights,
    mse,
    nearest_hours,
    persistence_forecast,
    rmse,
    rmse_sqrt_before_mean,
    truth_at_valid_times,
    valid_times,
    weighted_mean,
)

__all__ = [
    "MissingTruthWarning",
    "acc",
    "bias",
    "climatology_at_valid_times",
    "climatology_forecast",
    "compute_climatology",
    "latitude_weights",
    "mse",
    "nearest_hours",
    "open_climatology",
    "persistence_forecast",
    "rmse",
    "rmse_sqrt_before_mean",
    "smooth_dayofyear",
    "truth_at_valid_times",
    "valid_times",
    "validate_climatology",
    "weighted_mean",
    "window_weights",
]
