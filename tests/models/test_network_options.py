"""Issue 29: a network option of the wrong type or range is one UserError naming it, raised
before any layer is built (not a TypeError or ZeroDivisionError from inside one)."""

import pytest

from s2forecast.geometry import Grid
from s2forecast.models import build_network
from s2forecast.user_errors import UserError

CASES = [
    ("spherical", {"embed_dim": "sixteen"}, "embed_dim of the 'spherical' network must be an integer, got 'sixteen'"),
    ("spherical", {"embed_dim": 16.0}, "embed_dim of the 'spherical' network must be an integer, got 16.0"),
    ("spherical", {"embed_dim": -16}, "embed_dim must be >= 1, got -16"),
    ("spherical", {"num_heads": 0}, "num_heads must be >= 1, got 0"),
    ("spherical", {"embed_dim": 16, "num_heads": 3}, "embed_dim=16 is not divisible by num_heads=3"),
    ("spherical", {"num_layers": True}, "num_layers of the 'spherical' network must be an integer, got True"),
    (
        "spherical",
        {"encoder_kernel_shape": [3]},
        "encoder_kernel_shape of the 'spherical' network must be a list of 2 integers, got [3]",
    ),  # fmt: skip
    ("spherical", {"attention": 4}, "attention of the 'spherical' network must be a string or a list of strings"),
    ("spherical", {"theta": 0.0}, "theta must be > 0, got 0.0"),
    ("spherical", {"mlp_ratio": -1}, "mlp_ratio must be > 0, got -1"),
    ("spherical", {"global_every": 0}, "global_every must be >= 1 or null, got 0"),
    ("spherical", {"use_qknorm": "yes"}, "use_qknorm of the 'spherical' network must be true or false, got 'yes'"),
    ("planar", {"patch_size": 0}, "patch_size must be >= 1, got 0"),
    ("planar", {"window": -1}, "window must be >= 0, got -1"),
    ("planar", {"embed_dim": 8, "num_heads": 3}, "embed_dim=8 is not divisible by num_heads=3"),
    # options of the layers inside (a command line's --model.network.ball_options.top_k gives any name, any value)
    ("spherical", {"ball_options": {"top_k": "abc"}}, "ball_options.top_k must be an integer, got 'abc'"),
    (
        "spherical",
        {"ball_options": {"nonsense": 3}},
        "network option ball_options.nonsense is not an option of S2BallSparseAttention; it takes ['backend',",
    ),
    (
        "spherical",
        {"ball_options": {"use_qknorm": True}},  # the network's own option: a TypeError (given twice) before
        "network option ball_options.use_qknorm is not an option of S2BallSparseAttention",
    ),
    (
        "spherical",
        {"position_embedding": "sprepe", "position_embedding_options": {"ratio": "abc"}},
        "network option position_embedding_options.ratio must be a number, got 'abc'",
    ),
    (
        "spherical",
        {"position_embedding": "rope", "embed_dim": 16, "num_heads": 2, "position_embedding_options": {"base": -1}},
        "RoPE base must be > 1, got -1",
    ),
]


@pytest.mark.parametrize("architecture, options, message", CASES)
def test_bad_network_option_is_one_user_error(architecture, options, message):
    with pytest.raises(UserError) as error:
        build_network(architecture, Grid(8, 16), 3, 3, **options)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_good_options_of_every_type_build():
    """The checks accept what the shipped configs and YAML give (lists for tuples, ints for floats)."""
    net = build_network(
        "spherical", Grid(8, 16), 3, 3, embed_dim=8, num_layers=2, num_heads=2, attention=["neighborhood", "global"],
        encoder_kernel_shape=[3, 3], mlp_ratio=2, theta=None, use_qknorm=True, position_embedding_options={},
    )  # fmt: skip
    assert len(net.blocks) == 2
    assert build_network("planar", Grid(8, 16), 3, 3, embed_dim=8, num_layers=1, window=0).patch_size == 2
