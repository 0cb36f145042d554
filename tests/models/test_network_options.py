"""Issue 29: a network option of the wrong type or range is one UserError naming it, raised
before any layer is built (not a TypeError or ZeroDivisionError from inside one)."""

import warnings

import pytest
import torch

from s2forecast.geometry import Grid
from s2forecast.models import ARCHITECTURES, PlanarTransformer, SphericalTransformer, build_network
from s2forecast.models.network_options import warn_inert_options
from s2forecast.user_errors import UserError

CASES = [
    # a misspelled option: 26 options listed, no "did you mean" as the config's own keys have
    (
        "spherical",
        {"embed_dimm": 8},
        "['embed_dimm'] are not options of the 'spherical' network (did you mean "
        "'embed_dim' for 'embed_dimm'?); it takes ['embed_dim', ",
    ),
    ("planar", {"zzz": 1}, "['zzz'] are not options of the 'planar' network; it takes ['embed_dim', "),
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
    ("spherical", {"theta": 0.0}, "theta must be a finite number > 0, got 0.0"),
    # radii in radians as theta (refused past pi): 5.0 was built and run
    ("spherical", {"encoder_cutoff": 5.0}, "encoder_cutoff is a radius in radians in (0, pi], got 5.0"),
    ("spherical", {"decoder_cutoff": 3.2}, "decoder_cutoff is a radius in radians in (0, pi], got 3.2"),
    ("spherical", {"mlp_ratio": -1}, "mlp_ratio must be a finite number > 0, got -1"),
    ("spherical", {"mlp_ratio": float("inf")}, "mlp_ratio must be a finite number > 0, got inf"),  # OverflowError
    # one patch: every forward failed in torch's instance norm (a review found it)
    ("planar", {"patch_size": 16}, "patch_size 16 makes the 8x16 grid one patch, which norm 'instance' cannot"),
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
    # looked up by name inside the layers: a KeyError traceback before
    ("spherical", {"activation": "tanh"}, "network option activation must be one of ['gelu', 'relu', 'silu'], got"),
    ("planar", {"activation": "tanh"}, "network option activation must be one of ['gelu', 'relu', 'silu'], got"),
    ("spherical", {"basis_type": "zernikee"}, "network option basis_type must be one of ['harmonic', 'morlet',"),
    # no hidden channel, or no kernel: a RuntimeError or IndexError at the first forward
    (
        "spherical",
        {"embed_dim": 16, "mlp_ratio": 0.01},
        "network options embed_dim 16 x mlp_ratio 0.01 leave the MLP "
        "no hidden channel; raise mlp_ratio to at least 0.0625",
    ),
    ("planar", {"embed_dim": 16, "mlp_ratio": 0.01}, "leave the MLP no hidden channel"),
    ("spherical", {"encoder_kernel_shape": [0, 3]}, "encoder_kernel_shape entries must be integers >= 1, got [0, 3]"),
    (
        "spherical",
        {"latent_kind": "equiangular-midpoint"},
        "network option latent_kind 'equiangular-midpoint' is not "
        "a grid of torch-harmonics' DISCO convolution; use 'equiangular' or 'legendre-gauss'",
    ),
    # as the spherical network refuses it (options of an embedding that takes none were ignored)
    (
        "planar",
        {"position_embedding": "ape", "position_embedding_options": {"mask": True}},
        "position embedding 'ape' takes options [], got ['mask']",
    ),
]


@pytest.mark.parametrize("architecture, options, message", CASES)
def test_bad_network_option_is_one_user_error(architecture, options, message):
    with pytest.raises(UserError) as error:
        build_network(architecture, Grid(8, 16), 3, 3, **options)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "architecture, options, message",
    [
        ("spherical", {"attention": "global", "theta": 0.3}, "theta has no effect: no layer has neighborhood"),
        ("spherical", {"attention": "global", "backend": "reference"}, "backend has no effect: no layer has neigh"),
        ("spherical", {"ball_options": {"top_k": 2}}, "ball_options has no effect: no layer has ball attention"),
        ("spherical", {"attention": ["neighborhood"], "num_layers": 1, "global_every": 2},
         "global_every has no effect: it makes no layer global here"),
        ("spherical", {"attention": "global", "global_every": 2}, "global_every has no effect: it makes no layer"),
        ("spherical", {"num_layers": 2, "global_every": 5}, "global_every has no effect: it makes no layer global"),
        ("spherical", {"num_layers": 2, "global_every": 1, "theta": 0.3}, "theta has no effect: no layer has neigh"),
        ("spherical", {"noise_correlation": 0.5}, "noise_correlation has no effect: noise_channels is 0"),
        ("spherical", {"noise_channels": 2, "noise_kind": "vector", "noise_alpha": 1.0},
         "noise_alpha has no effect: only field noise has a spectrum"),
        ("planar", {"attention": "global", "window": 1}, "window has no effect: attention is global"),
        ("spherical", {"position_embedding": "sprepe",
                       "position_embedding_options": {"mask": "adaptive", "ratio": 0.25}},
         "position_embedding_options.ratio has no effect: it is the fixed mask's and mask is 'adaptive'"),
        ("spherical", {"position_embedding": "sprepe", "position_embedding_options": {"ratio_max": 0.3}},
         "position_embedding_options.ratio_max has no effect: it is the adaptive mask's and mask is 'fixed'"),
        ("planar", {"position_embedding": "sprepe", "position_embedding_options": {"mask": "none", "ratio_min": 0.1}},
         "position_embedding_options.ratio_min has no effect: it is the adaptive mask's and mask is 'none'"),
    ],
)  # fmt: skip
def test_an_option_its_settings_leave_unused_is_a_warning(architecture, options, message):
    """Accepted, but said when a training config is built (the config believes it changed something);
    building the network (a checkpoint's, read by rollout or evaluate) does not repeat it."""
    with pytest.warns(UserWarning, match=f"network option {message}"):
        warn_inert_options(architecture, ARCHITECTURES[architecture], {"embed_dim": 8, **options})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_network(architecture, Grid(8, 16), 3, 3, embed_dim=8, **options)


def test_options_in_use_give_no_warning():
    in_use = [
        {"attention": ["neighborhood", "global"], "num_layers": 2, "theta": 0.3},
        {"num_layers": 2, "global_every": 2, "theta": 0.3, "backend": "reference"},
        {"noise_channels": 2, "noise_alpha": 1.0, "noise_correlation": 0.5},
        # the defaults, inert here: the FGN overlay on the CRPS config inherits them (a review found the
        # documented stack warned to drop two options its file never sets)
        {"noise_channels": 2, "noise_kind": "vector", "noise_alpha": 2.0, "noise_tau": 3.0},
        {"position_embedding": "sprepe", "position_embedding_options": {"ratio": 0.5}},
        {"position_embedding": "sprepe", "position_embedding_options": {"mask": "adaptive", "ratio_min": 0.1}},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for options in in_use:
            warn_inert_options("spherical", SphericalTransformer, options)
        warn_inert_options("planar", PlanarTransformer, {"attention": "window", "window": 1})


def test_the_spherical_network_runs_in_float64():
    """DISCO and resampling ran in float32 whatever the module's dtype: a float64 module failed."""
    torch.manual_seed(0)
    net = build_network("spherical", Grid(8, 16), 3, 3, embed_dim=8, num_layers=1).eval()
    x = torch.randn(2, 3, 8, 16)
    with torch.no_grad():
        single = net(x)
        double = net.double()(x.double())
    assert double.dtype == torch.float64 and all(p.dtype == torch.float64 for p in net.parameters())
    torch.testing.assert_close(double.float(), single, rtol=1e-4, atol=1e-5)
    # computed in float64, not in float32 and cast (a review: a float32 module passed this test)
    assert not torch.equal(double.float(), single)
    # and a float32 module refuses float64 input, as torch's layers do (it computed it in float32)
    with pytest.raises(ValueError, match=r"^float64 input to a network of float32 weights; convert the network"):
        build_network("spherical", Grid(8, 16), 3, 3, embed_dim=8, num_layers=1)(x.double())


def test_good_options_of_every_type_build():
    """The checks accept what the shipped configs and YAML give (lists for tuples, ints for floats)."""
    net = build_network(
        "spherical", Grid(8, 16), 3, 3, embed_dim=8, num_layers=2, num_heads=2, attention=["neighborhood", "global"],
        encoder_kernel_shape=[3, 3], mlp_ratio=2, theta=None, use_qknorm=True, position_embedding_options={},
    )  # fmt: skip
    assert len(net.blocks) == 2
    assert build_network("planar", Grid(8, 16), 3, 3, embed_dim=8, num_layers=1, window=0).patch_size == 2


def test_a_patch_size_that_leaves_one_row_of_patches_is_fine_without_a_relative_embedding():
    """It built a grid of the patches for every embedding and refused 'a grid needs nlat >= 2, got 1x2'."""
    assert build_network("planar", Grid(16, 32), 3, 3, patch_size=16, embed_dim=8) is not None
    with pytest.raises(UserError, match=r"^patch_size 16 leaves a 1x2 array of patches, too few for position "
                       r"embedding 'rope'; use patch_size <= 8$"):  # fmt: skip
        build_network("planar", Grid(16, 32), 3, 3, patch_size=16, embed_dim=8, position_embedding="rope")
