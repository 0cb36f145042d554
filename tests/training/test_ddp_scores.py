"""Validation and test scores under DDP count each sample of the split once: the padding that
gives every process as many batches (DistributedSampler's) is not scored. End to end:
tests/training/test_checkpoints_resume.py::test_two_node_training_and_its_resume_after_kill_mid_epoch_under_ddp."""

import pytest
import torch

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
            taken += batch[: sampler.counted_rows(index, batch_size, len(batch))].tolist()
    assert sorted(taken) == data and len(batches) == 1
