"""The EMA of the weights (``EMAWeightAveraging``, the ERA5 configs' callback) on a grid whose
neighborhood attention holds -inf in its (constant) buffers: averaging them made NaN
(lerp(-inf, -inf, w)), so validation failed from the second update on."""

import torch
from torch.optim.swa_utils import AveragedModel

from s2forecast.geometry import Grid
from s2forecast.models.spherical_transformer import SphericalTransformer
from s2forecast.training.callbacks import EMAWeightAveraging


def test_the_average_keeps_the_constant_buffers_and_averages_the_weights():
    net = SphericalTransformer(Grid(9, 16), 3, 3, embed_dim=16, num_layers=1, num_heads=2, scale_factor=1,
                               attention="neighborhood")  # fmt: skip
    buffers = {name: b.clone() for name, b in net.named_buffers() if b.is_floating_point()}
    assert any(torch.isinf(b).any() for b in buffers.values())  # the case: a mask of -inf
    callback = EMAWeightAveraging(decay=0.5)
    average = AveragedModel(net, use_buffers=callback._use_buffers, **callback._kwargs)  # as WeightAveraging.setup
    first = [p.detach().clone() for p in net.parameters()]
    for _ in range(3):
        with torch.no_grad():
            for p in net.parameters():
                p.add_(1.0)
        average.update_parameters(net)
    for name, b in average.module.named_buffers():
        if name in buffers:
            assert torch.equal(b, buffers[name]), name  # -inf where it was, nothing NaN
    # EMA with decay 0.5 of the weights +1, +2, +3: +1, then (1 + 2) / 2, then (1.5 + 3) / 2
    for p0, p in zip(first, average.module.parameters(), strict=True):
        torch.testing.assert_close(p, p0 + 2.25)


def test_before_start_step_the_average_is_the_current_weights():
    """With start_step N the average stayed the initial weights until step N: validation and
    checkpoints of a run shorter than N scored an untrained model (a review found it)."""
    net = SphericalTransformer(Grid(9, 16), 3, 3, embed_dim=16, num_layers=1, num_heads=2, scale_factor=1,
                               attention="neighborhood")  # fmt: skip
    callback = EMAWeightAveraging(decay=0.5, start_step=2)
    callback._average_model = AveragedModel(net, use_buffers=callback._use_buffers, **callback._kwargs)
    start = [p.detach().clone() for p in net.parameters()]
    for step in range(4):  # the weights after step k: start + k + 1
        with torch.no_grad():
            for p in net.parameters():
                p.add_(1.0)
        if callback.should_update(step_idx=step):
            callback._average_model.update_parameters(net)
        expected = {0: 1.0, 1: 2.0, 2: (2.0 + 3.0) / 2, 3: (2.5 + 4.0) / 2}[step]  # EMA from step 2 on
        for p0, p in zip(start, callback._average_model.module.parameters(), strict=True):
            torch.testing.assert_close(p, p0 + expected)
    assert not callback.should_update(epoch_idx=1)  # per step, not per epoch
