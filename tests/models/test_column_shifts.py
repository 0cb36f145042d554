"""What the README says about longitude shifts (issue 29): the spherical network is equivariant
to column shifts by a multiple of its latent stride (scale_factor), and only to those, and with a
position embedding fixed on the Earth to none; this is why readers put every store's columns in
one order (tests/data/test_longitudes.py)."""

import pytest
import torch

from s2forecast.geometry import Grid
from s2forecast.models import build_network


@pytest.mark.parametrize("attention", ["neighborhood", "global"])
def test_equivariant_to_shifts_by_the_latent_stride_only(attention):
    torch.manual_seed(0)
    net = build_network("spherical", Grid(9, 16), 3, 3, embed_dim=8, num_layers=2, attention=attention).eval()
    x = torch.randn(1, 3, 9, 16)
    with torch.no_grad():
        y = net(x)
        error = {s: float((net(torch.roll(x, s, -1)) - torch.roll(y, s, -1)).abs().max() / y.abs().max())
                 for s in (1, 2, 3, 4)}  # fmt: skip
    assert error[2] < 1e-5 and error[4] < 1e-5, error  # float32 round-off
    assert error[1] > 0.1 and error[3] > 0.1, error  # an odd shift is another input


@pytest.mark.parametrize("position_embedding", ["sprepe", "rope"])
def test_embeddings_fixed_on_the_earth_are_equivariant_to_no_shift(position_embedding):
    """As the README says since a review measured it: SpRePE's auxiliary points and RoPE's indices are
    fixed on the Earth, so even a shift by the latent stride is another input."""
    torch.manual_seed(0)
    net = build_network("spherical", Grid(9, 16), 3, 3, embed_dim=24, num_layers=2, num_heads=2,
                        position_embedding=position_embedding).eval()  # fmt: skip
    x = torch.randn(1, 3, 9, 16)
    with torch.no_grad():
        y = net(x)
        error = float((net(torch.roll(x, 2, -1)) - torch.roll(y, 2, -1)).abs().max() / y.abs().max())
    assert error > 1e-3, error
