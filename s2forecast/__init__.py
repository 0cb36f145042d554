"""s2forecast: data-driven weather and climate forecasting on the sphere."""

__version__ = "0.1.0"
