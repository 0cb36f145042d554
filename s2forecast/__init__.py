"""s2forecast: data-driven weather and climate forecasting on the sphere."""

import warnings

__version__ = "0.1.0"

# s2forecast writes consolidated zarr v3 metadata on purpose (one read per open instead of a
# listing); zarr's notice that it is outside the v3 specification is nothing a user can act on.
warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part", category=UserWarning)
