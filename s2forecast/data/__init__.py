"""Stores in s2forecast's layout and the readers, writers, converters and statistics around them.

No Lightning here (the DataModules are ``s2forecast.training.datamodule``). Names are imported
on first use (PEP 562): the ``s2forecast`` command and inference import this package without
paying for torch-harmonics or xarray until they need them.
"""

import importlib

_WHERE = {
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
