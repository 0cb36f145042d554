"""Training: the LightningModule, its loss and callbacks."""

from s2forecast.training.forecast_module import ForecastModule, data_info

__all__ = ["ForecastModule", "data_info"]
