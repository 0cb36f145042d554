"""Defaults of the data commands that their ``--help`` shows, apart from the modules that use
them (those import xarray and torch-harmonics, which ``--help`` must not wait for)."""

CONVERT_TIME_CHUNK = 4  # time steps per written slab of convert-era5 (its unit of resumption)
SWE_BATCH = 16  # shallow-water trajectories integrated together by generate-swe
