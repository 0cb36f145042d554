"""Neural-network layers on the sphere."""

from s2forecast.nn.attention import QKPositionEmbedding, S2Attention, S2NeighborhoodAttention

__all__ = ["QKPositionEmbedding", "S2Attention", "S2NeighborhoodAttention"]
