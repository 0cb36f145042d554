"""`convert-era5 --shards N`: zarr v3 shards of N time steps, the same store in fewer files, resumable."""

import argparse

import numpy as np
import pytest
import xarray as xr
import zarr
from test_convert_era5 import convert, monthly  # noqa: F401 (monthly: a fixture)

from s2forecast.commands.convert_era5 import arguments as add_arguments
from s2forecast.data.store import open_store
from s2forecast.data.writer import StoreWriter
from s2forecast.user_errors import UserError


def files(path) -> int:
    """Files (inodes of data and metadata) under a store."""
    return sum(1 for p in path.rglob("*") if p.is_file())


OWN = ("s2forecast_generation", "s2forecast_signature", "history")  # attributes that name the store itself


def assert_same_store(a: xr.Dataset, b: xr.Dataset) -> None:
    """Identical variables, coordinates and attributes, but for those that name each store."""
    a, b = a.load(), b.load()
    assert {k: v for k, v in a.attrs.items() if k not in OWN} == {k: v for k, v in b.attrs.items() if k not in OWN}
    xr.testing.assert_identical(a.assign_attrs(dict.fromkeys(OWN, "")), b.assign_attrs(dict.fromkeys(OWN, "")))


def shards_of(store, name: str):
    return zarr.open_group(store, mode="r", zarr_format=3)[name].shards


def test_sharded_store_equals_unsharded_in_fewer_files(monthly, tmp_path):  # noqa: F811
    plain = convert(monthly, tmp_path / "plain.zarr", time_chunk=2)
    sharded = convert(monthly, tmp_path / "sharded.zarr", time_chunk=2, shards=2)
    a, b = open_store(plain), open_store(sharded)
    dynamic = [name for name in a.data_vars if "time" in a[name].dims and name != "written"]
    assert dynamic and shards_of(plain, dynamic[0]) is None
    for name in dynamic:
        assert shards_of(sharded, name)[0] == 2, name
        for store in (plain, sharded):  # output.field_compressors: Blosc LZ4 with bit shuffle
            codec = zarr.open_group(store, mode="r", zarr_format=3)[name].compressors[0].to_dict()
            config = codec["configuration"]
            assert (codec["name"], config["cname"], config["shuffle"]) == ("blosc", "lz4", "bitshuffle"), (store, name)
    assert_same_store(a, b)
    # 5 time steps: 3 shards instead of 5 chunks per time-dependent variable
    assert files(plain) - files(sharded) == 2 * len(dynamic), (files(plain), files(sharded))


def test_sharded_store_trains_through_the_datamodule(monthly, tmp_path):  # noqa: F811
    """convert -> stats -> ERA5DataModule batch: the sharded store gives the unsharded store's batch."""
    from s2forecast.data import compute_stats
    from s2forecast.training.datamodule import ERA5DataModule

    batches = []
    for name, shards in (("plain.zarr", 0), ("sharded.zarr", 4)):
        store = convert(monthly, tmp_path / name, shards=shards)
        compute_stats(store)
        module = ERA5DataModule(
            str(store), variables=["2m_temperature", "temperature"], levels=None, forcings=[], static=[],
            train_period=("2000-01-01", "2100-01-01"), val_period=None, test_period=None, batch_size=2,
            num_workers=0, step_hours=6, rollout_steps=1,  # the same seeded shuffle for both
        )  # fmt: skip
        batches.append((next(iter(module.train_dataloader())), module.stats))
    (plain, plain_stats), (sharded, sharded_stats) = batches
    assert np.array_equal(plain.init_datetimes, sharded.init_datetimes)
    assert np.array_equal(plain.inputs.numpy(), sharded.inputs.numpy())
    assert np.isfinite(sharded.inputs.numpy()).all()
    assert np.array_equal(plain_stats.mean, sharded_stats.mean) and np.array_equal(plain_stats.std, sharded_stats.std)


def _crash_on_second_slab(monkeypatch) -> list[int]:
    starts: list[int] = []
    original = StoreWriter.mark_written  # the writer flags each slab once its data is written

    def mark_written(self, start, stop):
        starts.append(start)
        if len(starts) == 2:
            raise RuntimeError("simulated crash")
        original(self, start, stop)

    monkeypatch.setattr(StoreWriter, "mark_written", mark_written)
    return starts


@pytest.mark.slow  # two conversions
def test_interrupted_sharded_conversion_resumes_to_the_same_store(monthly, tmp_path, monkeypatch):  # noqa: F811
    reference = open_store(convert(monthly, tmp_path / "reference.zarr", time_chunk=2, shards=2))
    out = tmp_path / "era5.zarr"
    starts = _crash_on_second_slab(monkeypatch)
    with pytest.raises(RuntimeError, match="simulated crash"):
        convert(monthly, out, time_chunk=2, shards=2)
    assert starts == [0, 2]
    monkeypatch.undo()
    with pytest.raises(UserError, match="written from other inputs or options"):  # the shards are part of it
        convert(monthly, out, time_chunk=2)
    convert(monthly, out, time_chunk=2, shards=2)
    resumed = open_store(out)
    assert_same_store(reference, resumed)
    assert resumed["written"].values.all()


def test_writer_refuses_a_slab_that_splits_a_shard(tmp_path):
    template = xr.Dataset({"a": (("time", "x"), np.zeros((4, 3), np.float32))}, coords={"time": np.arange(4)})
    with StoreWriter(tmp_path / "s.zarr", {"test": 1}, shards=2) as writer:
        writer.create(template.chunk({"time": 2}))
        with pytest.raises(ValueError, match=r"time steps 1..3 split a shard of 2"):
            writer.write(template.isel(time=slice(1, 3)), 1)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--shards", "0"], "argument --shards: must be an integer >= 1, got '0'"),
        (["--shards", "x"], "argument --shards: must be an integer >= 1, got 'x'"),
    ],
)
def test_bad_shards_on_the_command_line(argv, message, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["in.nc", "--out", str(tmp_path / "o.zarr"), *argv])
    assert message in capsys.readouterr().err


def test_shards_that_do_not_divide_the_time_chunk(monthly, tmp_path):  # noqa: F811
    out = tmp_path / "era5.zarr"
    with pytest.raises(UserError) as error:
        convert(monthly, out, time_chunk=4, shards=3)
    assert str(error.value) == (
        "--shards 3 does not divide --time-chunk 4: a slab would write part of a shard and an interrupted run could "
        "not resume safely; use --time-chunk 6 or a --shards that divides 4"
    )
    assert not out.exists() and list(tmp_path.glob("era5*")) == []


def test_unaligned_shards_on_the_command_line_write_nothing(monthly, tmp_path, capsys):  # noqa: F811
    from s2forecast.cli import main

    out = tmp_path / "era5.zarr"
    with pytest.raises(SystemExit) as exit:
        main(["convert-era5", *map(str, monthly), "--out", str(out), "--shards", "8", "--no-progress"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("s2forecast convert-era5: error: --shards 8 does not divide --time-chunk 4"), lines
    assert "use --time-chunk 8" in lines[0]
    assert not out.exists() and list(tmp_path.glob("era5*")) == []
