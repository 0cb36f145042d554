"""Neural-network layers on the sphere."""

from s2forecast.nn.attention import QKPositionEmbedding, S2Attention, S2NeighborhoodAttention
from s2forecast.nn.ball_attention import S2BallSparseAttention
from s2forecast.nn.noise import SphericalNoise
from s2forecast.nn.position_embedding import POSITION_EMBEDDINGS, build_position_embedding
from s2forecast.nn.sprepe import SpRePE

__all__ = [
    "POSITION_EMBEDDINGS",
    "QKPositionEmbedding",
    "S2Attention",
    "S2BallSparseAttention",
    "S2NeighborhoodAttention",
    "SpRePE",
    "SphericalNoise",
    "build_position_embedding",
]
