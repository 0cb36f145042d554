"""Zarr stores in one layout, their statistics, and the Lightning DataModules that stream them.

Names are imported on first use (PEP 562): the store reader, statistics and writers need
neither Lightning nor torch-harmonics, and inference and the ``s2forecast`` command import
this package without paying for them.
"""

import importlib

_WHERE = {
    "ERA5DataModule": "datamodule",
    "FieldDataModule": "datamodule",
    "SWEDataModule": "datamodule",
    "Batch": "fields",
    "FieldDataset": "fields",
    "SampleSpec": "fields",
    "compute_stats": "stats",
    "load_stats": "stats",
    "open_store": "store",
    "generate_swe": "swe",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__():
    return __all__
