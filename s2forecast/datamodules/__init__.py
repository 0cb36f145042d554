"""Zarr stores in one layout, their statistics, and the Lightning DataModules that stream them."""

from s2forecast.datamodules.datamodule import ERA5DataModule, FieldDataModule, SWEDataModule
from s2forecast.datamodules.fields import Batch, FieldDataset, SampleSpec
from s2forecast.datamodules.stats import compute_stats, load_stats
from s2forecast.datamodules.store import open_store
from s2forecast.datamodules.swe import generate_swe

__all__ = [
    "Batch",
    "ERA5DataModule",
    "FieldDataModule",
    "FieldDataset",
    "SWEDataModule",
    "SampleSpec",
    "compute_stats",
    "generate_swe",
    "load_stats",
    "open_store",
]
