"""Validation and test scores under DDP count each sample of the split once: the padding that
gives every process as many batches (DistributedSampler's) is not scored. End to end:
tests/training/test_checkpoints_resume.py::test_two_node_training_and_its_resume_mid_epoch_under_ddp."""

import pytest
import torch
from session_fixtures import ENSEMBLE, last_val_scores, tiny_args

from s2forecast.cli import main as cli
from s2forecast.training.datamodule import InOrderShardSampler


@pytest.mark.parametrize("samples", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_counted_rows_take_each_sample_once(samples, processes, batch_size):
    data = list(range(samples))
    taken, batches = [], set()
    for rank in range(processes):
        sampler = InOrderShardSampler(data, num_replicas=processes, rank=rank)
        loader = torch.utils.data.DataLoader(data, batch_size=batch_size, sampler=sampler)
        batches.add(len(loader))  # every process runs as many batches (collective reductions)
        for index, batch in enumerate(loader):
            counted = sampler.counted_rows(index, batch_size, len(batch))
            taken += batch[:counted].tolist()
            # a sample's position in the split (its noise's seed in validation): j * processes + rank
            local = range(index * batch_size, index * batch_size + counted)
            assert [j * processes + rank for j in local] == batch[:counted].tolist()
    assert sorted(taken) == data and len(batches) == 1


def test_ensemble_validation_scores_do_not_depend_on_the_batch_size(swe_store, crps_run, tmp_path):
    """Each sample's noise came from its batch (and rank): 1 and 2 processes, or batches of 2 and 3,
    scored the same model differently. It comes from the sample's place in the split now."""
    scores = []
    for size in (2, 3):  # 5 validation samples: batches of 2, 2, 1 and of 3, 2
        run = tmp_path / str(size)
        cli(["validate", *tiny_args(swe_store, run, *ENSEMBLE, "--data.init_args.batch_size", str(size)),
             "--ckpt_path", str(crps_run.checkpoint)])  # fmt: skip
        scores.append(last_val_scores(run))
    assert "val/loss" in scores[0] and scores[0].keys() == scores[1].keys()
    for key in scores[0]:
        assert scores[1][key] == pytest.approx(scores[0][key], rel=1e-5), key


def test_only_the_scored_loaders_get_padded_shares(swe_store):
    """predict (Python API) would have predicted the padding samples a second time: its loader keeps
    Lightning's own sampler, which does not pad."""
    from types import SimpleNamespace

    from s2forecast.training.datamodule import SWEDataModule

    data = SWEDataModule(str(swe_store), train_trajectories=(0, 2), val_trajectories=(2, 3), test_trajectories=(2, 3))
    data.trainer = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 2, "rank": 1})
    data.setup("fit")
    data.setup("test")
    assert isinstance(data.val_dataloader().sampler, InOrderShardSampler)
    assert isinstance(data.test_dataloader().sampler, InOrderShardSampler)
    assert not isinstance(data.predict_dataloader().sampler, torch.utils.data.DistributedSampler)


def test_a_share_shorter_than_a_batch_is_one_batch(swe_store):
    """The last partial batch was dropped whenever the whole split outgrew a batch: shares of 5 with
    batches of 8 left each rank no batch, and fit under DDP trained nothing. A share is dropped from
    only beyond its first batch."""
    from types import SimpleNamespace

    from s2forecast.training.datamodule import SWEDataModule

    def loader(batch_size, ranks):
        data = SWEDataModule(str(swe_store), train_trajectories=(0, 2), val_trajectories=(2, 3),
                             test_trajectories=(2, 3), batch_size=batch_size)  # fmt: skip
        data.trainer = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": ranks, "rank": ranks - 1})
        data.setup("fit")
        return data.train_dataloader()

    samples = len(loader(1, 1).sampler)
    share = len(loader(1, 2).sampler)
    assert share < samples - 1
    assert len(loader(share + 1, 2)) == 1  # one partial batch, the share's only one
    assert len(loader(share - 1, 2)) == 1  # one whole batch; the partial one is dropped
    assert len(loader(samples - 1, 1)) == 1


def test_validate_scores_an_ensemble_as_the_fit_did(swe_store, crps_run, tmp_path):
    """A CRPS model's validation noise came with the optimizer step in its seed: `validate` of the
    checkpoint (step not restored) drew other noise than the fit's own validation had."""
    run = tmp_path / "validate"
    cli(["validate", *tiny_args(swe_store, run, *ENSEMBLE), "--ckpt_path", str(crps_run.checkpoint)])
    fitted, validated = last_val_scores(crps_run.root), last_val_scores(run)
    assert "val/loss" in fitted and fitted.keys() == validated.keys()
    for key in fitted:
        assert validated[key] == pytest.approx(fitted[key], rel=1e-6), key
