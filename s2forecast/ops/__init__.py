"""Attention on the sphere as functional ops on (batch, heads, nlat*nlon, head_dim) tensors."""

from s2forecast.ops.attention import ball_sparse_attention, neighborhood_attention
from s2forecast.ops.ball_tree import ball_ordering
from s2forecast.ops.global_attention import global_attention
from s2forecast.ops.neighborhood import SphericalNeighborhood, default_radius, spherical_neighborhood

__all__ = [
    "ball_ordering",
    "ball_sparse_attention",
    "SphericalNeighborhood",
    "default_radius",
    "global_attention",
    "neighborhood_attention",
    "spherical_neighborhood",
]
