"""Neural-network layers on the sphere."""

from s2forecast.nn.attention import QKPositionEmbedding, S2Attention, S2NeighborhoodAttention
from s2forecast.nn.ball_attention import S2BallSparseAttention
from s2forecast.nn.harmonics import SphericalHarmonicAnalysis
from s2forecast.nn.noise import SphericalNoise, VectorNoise
from s2forecast.nn.position_embedding import POSITION_EMBEDDINGS, build_position_embedding
from s2forecast.nn.sprepe import SpRePE

__all__ = [
    "POSITION_EMBEDDINGS",
    "QKPositionEmbedding",
    "S2Attention",
    "S2BallSparseAttention",
    "S2NeighborhoodAttention",
    "SpRePE",
    "SphericalHarmonicAnalysis",
    "SphericalNoise",
    "VectorNoise",
    "build_position_embedding",
]
