"""What the README says about longitude shifts (issue 29): the spherical network is equivariant
to column shifts by a multiple of its latent stride (scale_factor), and only to those; this is
why readers put every store's columns in one order (tests/data/test_longitudes.py)."""

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
