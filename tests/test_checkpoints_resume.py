"""Checkpoints are read weights-only on every path (the CLI, Lightning's restore, rollout; URLs
refused), and `--ckpt_path last` resumes the run's own experiment exactly, mid-epoch included."""

import torch

from s2forecast.datamodules.datamodule import EpochShuffleSampler, ResumableLoader


# --- the loader ------------------------------------------------------------------------------------
def epoch_batches(loader, epoch, set_epoch_after_iter=False):
    if not set_epoch_after_iter:
        loader.sampler.set_epoch(epoch)
    iterator = iter(loader)
    if set_epoch_after_iter:
        loader.sampler.set_epoch(epoch)
    return [batch.tolist() for batch in iterator]


def make_loader(workers=0, **sampler_options):
    data = torch.arange(11)
    sampler = EpochShuffleSampler(data, seed=3, **sampler_options)
    return ResumableLoader(data, batch_size=2, sampler=sampler, num_workers=workers, drop_last=True)


def test_loader_resumes_mid_epoch_in_lightnings_order_with_workers():
    """Lightning restores the state, calls iter() and only then set_epoch; with workers the
    indices are drawn early, which used to give the resumed epoch epoch 0's order."""
    full = epoch_batches(make_loader(), 1)
    assert len(full) == 5 and full != epoch_batches(make_loader(), 0)
    interrupted = make_loader(workers=2)
    interrupted.sampler.set_epoch(1)
    iterator = iter(interrupted)
    assert [next(iterator).tolist() for _ in range(2)] == full[:2]
    state = interrupted.state_dict()
    assert state == {"epoch": 1, "batches": 2}

    resumed = make_loader(workers=2)
    resumed.load_state_dict(state)
    assert epoch_batches(resumed, 1, set_epoch_after_iter=True) == full[2:]
    assert epoch_batches(resumed, 2) == epoch_batches(make_loader(), 2)  # the next epoch is whole
    fresh = make_loader(workers=2)
    assert epoch_batches(fresh, 1, set_epoch_after_iter=True) == full

    finished = make_loader()
    finished.load_state_dict({"epoch": 1, "batches": 5})  # saved at the end of epoch 1
    assert epoch_batches(finished, 2) == epoch_batches(make_loader(), 2)


def test_sampler_shards_by_rank():
    shares = [list(EpochShuffleSampler(torch.arange(11), seed=3, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 6
    assert sorted(set(shares[0]) | set(shares[1])) == list(range(11))
    single = list(EpochShuffleSampler(torch.arange(11), seed=3))  # the shares interleave this order
    assert shares[0] == single[0::2] and shares[1][:5] == single[1::2]
