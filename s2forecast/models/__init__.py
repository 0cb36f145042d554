"""Forecasters: the spherical Transformer and its planar baseline."""

import difflib
import inspect

from torch import nn

from s2forecast.geometry import Grid
from s2forecast.models.network_options import check_network_options
from s2forecast.models.planar_transformer import PlanarTransformer
from s2forecast.models.spherical_transformer import SphericalTransformer
from s2forecast.user_errors import UserError

ARCHITECTURES = {"spherical": SphericalTransformer, "planar": PlanarTransformer}


def build_network(architecture: str, grid: Grid, in_channels: int, out_channels: int, **options) -> nn.Module:
    """The network called ``architecture`` ("spherical" or "planar") with keyword ``options``."""
    if architecture not in ARCHITECTURES:
        raise UserError(f"architecture must be one of {sorted(ARCHITECTURES)}, got {architecture!r}")
    cls = ARCHITECTURES[architecture]
    known = [p for p in inspect.signature(cls).parameters if p not in ("grid", "in_channels", "out_channels")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        close = {name: difflib.get_close_matches(name, known, n=1) for name in unknown}
        meant = [f"{near[0]!r} for {name!r}" for name, near in close.items() if near]
        hint = f" (did you mean {', '.join(meant)}?)" if meant else ""
        raise UserError(
            f"network options {unknown} are not options of the {architecture!r} network{hint}; it takes {known}"
        )
    check_network_options(architecture, cls, options)
    return cls(grid, in_channels, out_channels, **options)


__all__ = ["ARCHITECTURES", "PlanarTransformer", "SphericalTransformer", "build_network"]
