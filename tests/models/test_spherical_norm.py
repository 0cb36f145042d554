"""The spherical network's instance norm integrates over the sphere (the grid's quadrature)."""

import torch
from torch import nn

from s2forecast.geometry import Grid, random_rotation
from s2forecast.models.spherical_transformer import SphericalInstanceNorm, SphericalTransformer
from s2forecast.nn.equivariance import rotation_error


def test_the_norm_converges_to_rotation_equivariance_where_instance_norm_does_not():
    """nn.InstanceNorm2d weighs every grid point the same: 20 % off equivariance at any resolution,
    and the SWE configs' network (norm: instance) with it."""
    rotation = random_rotation(torch.Generator().manual_seed(1))
    errors = {}
    for grid in (Grid(17, 32), Grid(33, 64)):
        norms = (SphericalInstanceNorm(3, grid).double(), nn.InstanceNorm2d(3, affine=True).double())
        errors[grid.nlat] = [rotation_error(norm, grid, rotation, 3) for norm in norms]
    assert errors[33][0] < 0.5 * errors[17][0] and errors[33][0] < 0.01, errors
    assert min(errors[17][1], errors[33][1]) > 0.1, errors


def test_the_network_uses_it_and_instance_norm_weights_load():
    network = SphericalTransformer(Grid(8, 16), 3, 3, embed_dim=8, num_layers=1)
    assert isinstance(network.blocks[0].norm0, SphericalInstanceNorm)
    planar = nn.InstanceNorm2d(8, affine=True)
    nn.init.normal_(planar.weight)
    network.blocks[0].norm0.load_state_dict(planar.state_dict())  # a checkpoint of before
    assert torch.equal(network.blocks[0].norm0.weight, planar.weight)


def test_the_norm_keeps_the_dtype_and_normalizes_on_the_sphere():
    grid = Grid(9, 16, "legendre-gauss")
    norm = SphericalInstanceNorm(2, grid)
    x = torch.randn(3, 2, *grid.shape) * 5 + 2
    y = norm(x)
    area = (grid.quadrature_weights / grid.quadrature_weights.sum()).float()
    torch.testing.assert_close((y * area).sum(dim=(-2, -1)), torch.zeros(3, 2), atol=1e-5, rtol=0)
    torch.testing.assert_close((y.square() * area).sum(dim=(-2, -1)), torch.ones(3, 2), atol=1e-4, rtol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert norm(x.bfloat16()).dtype == torch.bfloat16
