"""`rollout --format zarr --shards N`: zarr v3 shards of N initialization times, the same forecast in fewer files."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from s2forecast.cli import main as cli
from s2forecast.data import open_store
from s2forecast.inference.rollout import RolloutOptions, rollout
from s2forecast.user_errors import UserError

OWN = ("s2forecast_generation", "history")  # global attributes that name the file itself


def files(path: Path) -> int:
    """Files (inodes of data and metadata) under a zarr store."""
    return sum(1 for p in path.rglob("*") if p.is_file())


def assert_same_forecast(a: Path, b: Path) -> None:
    """Identical data variables, coordinates and attributes, but for those that name each file."""
    a, b = xr.open_zarr(a).load(), xr.open_zarr(b).load()
    assert {k: v for k, v in a.attrs.items() if k not in OWN} == {k: v for k, v in b.attrs.items() if k not in OWN}
    xr.testing.assert_identical(a.drop_attrs(deep=False), b.drop_attrs(deep=False))


@pytest.mark.parametrize("members", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_sharded_forecast_reads_back_identically_in_fewer_files(members, request, swe_store, tmp_path):
    checkpoint = request.getfixturevalue("crps_run" if members else "mse_run_1_epoch").checkpoint
    inits = open_store(swe_store)["time"].values[:5]  # batches of 2: shards 0-1, 2-3 and a last one of 4 alone
    plain = rollout(checkpoint, swe_store, 3, inits, tmp_path / "plain.zarr",
                    RolloutOptions(fmt="zarr", batch_size=2, members=members), progress=False)  # fmt: skip
    sharded = rollout(checkpoint, swe_store, 3, inits, tmp_path / "sharded.zarr",
                      RolloutOptions(fmt="zarr", batch_size=2, members=members, shards=2), progress=False)  # fmt: skip
    assert_same_forecast(plain, sharded)
    group = zarr.open_group(sharded, mode="r", zarr_format=3)
    names = [name for name in group.array_keys() if group[name].ndim >= 4]
    assert names and all(group[name].shards[:2] == (2, 1) for name in names)
    assert zarr.open_group(plain, mode="r", zarr_format=3)[names[0]].shards is None
    for store in (plain, sharded):  # output.field_compressors: Blosc LZ4 with bit shuffle
        codec = zarr.open_group(store, mode="r", zarr_format=3)[names[0]].compressors[0].to_dict()
        config = codec["configuration"]
        assert (codec["name"], config["cname"], config["shuffle"]) == ("blosc", "lz4", "bitshuffle"), store
    # per variable and lead: 3 shards instead of 5 (x members) chunks
    saved = len(names) * 3 * (5 * max(members, 1) - 3)
    assert files(plain) - files(sharded) == saved, (files(plain), files(sharded))


def test_shards_as_large_as_the_batch_cover_every_init_time(mse_run_1_epoch, swe_store, tmp_path):
    inits = open_store(swe_store)["time"].values[:3]
    out = rollout(mse_run_1_epoch.checkpoint, swe_store, 2, inits, tmp_path / "f.zarr",
                  RolloutOptions(fmt="zarr", batch_size=8, shards=8), progress=False)  # fmt: skip
    group = zarr.open_group(out, mode="r", zarr_format=3)
    assert group["vorticity"].shards[0] == 3  # one shard of the 3 times, not padding to 8
    assert np.isfinite(xr.open_zarr(out)["vorticity"].values).all()


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(fmt="netcdf", shards=2), "--shards 2 needs --format zarr (sharding is a zarr v3 feature); add --format "
         "zarr and an --out such as forecast.zarr, or leave --shards out"),
        (dict(fmt="zarr", batch_size=4, shards=3), "--shards 3 does not divide --batch-size 4, so batches would split "
         "shards; use --batch-size 6 or a --shards that divides 4"),
        (dict(fmt="zarr", shards=-1), "--shards must be >= 1 initialization times per shard, got -1"),
    ],
)  # fmt: skip
def test_bad_shards_options(options, message):
    with pytest.raises(UserError) as error:
        RolloutOptions(**options)
    assert str(error.value) == message


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--format", "zarr", "--shards", "0"], "argument --shards: must be an integer >= 1, got '0'"),
        (["--format", "zarr", "--shards", "x"], "argument --shards: must be an integer >= 1, got 'x'"),
        (["--shards", "2"], "--shards 2 needs --format zarr"),
        (["--format", "zarr", "--shards", "3"], "--shards 3 does not divide --batch-size 4"),
    ],
)
def test_bad_shards_on_the_command_line(argv, message, mse_run_1_epoch, swe_store, tmp_path, capsys):
    out = tmp_path / ("f.zarr" if "--format" in argv else "f.nc")
    with pytest.raises(SystemExit) as exit:
        cli(["rollout", "--ckpt", str(mse_run_1_epoch.checkpoint), "--store", str(swe_store), "--steps", "1",
             "--out", str(out), "--init-times", "2000-01-01T01", "--no-progress", *argv])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit.value.code == 2 and len(lines) == 1 and message in lines[0], lines
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_sharded_forecast_on_the_command_line(mse_run_1_epoch, swe_store, tmp_path, capsys):
    out = tmp_path / "f.zarr"
    # no --format: zarr from the .zarr suffix (issue 28)
    cli(["rollout", "--ckpt", str(mse_run_1_epoch.checkpoint), "--store", str(swe_store), "--steps", "2",
         "--out", str(out), "--start", "2000-01-01T00", "--end", "2000-01-01T03",
         "--batch-size", "4", "--shards", "2", "--no-progress"])  # fmt: skip
    assert zarr.open_group(out, mode="r", zarr_format=3)["vorticity"].shards[0] == 2
