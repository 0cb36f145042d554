"""Issue 29: train, validation and test splits that share data are refused (training data
shared) or warned about (validation and test shared); allow_overlap permits them, with a warning."""

import pytest
from session_fixtures import tiny_args

from s2forecast.cli import main as cli
from s2forecast.training.datamodule import ERA5DataModule, SWEDataModule
from s2forecast.training.splits import check_overlap
from s2forecast.user_errors import UserError


def swe(train, val, test=None, **options):
    return SWEDataModule("never-opened.zarr", train_trajectories=train, val_trajectories=val, test_trajectories=test,
                         **options)  # fmt: skip


def test_shared_trajectories_are_refused_naming_both_ranges():
    with pytest.raises(UserError) as error:
        swe((0, 5), (4, 5))
    assert str(error.value).startswith("train_trajectories [0, 5] and val_trajectories [4, 5] share trajectory 4: ")
    assert "allow_overlap: true" in str(error.value)
    with pytest.raises(
        UserError, match=r"train_trajectories \[0, 6\] and test_trajectories \[2, 4\] share trajectories 2 to 3"
    ):
        swe((0, 6), None, (2, 4))
    swe((0, 4), (4, 5), (5, 6))  # [first, stop): adjacent ranges share nothing


def test_shared_periods_are_refused_naming_both_ranges():
    with pytest.raises(UserError) as error:
        ERA5DataModule("never-opened.zarr", train_period=("2018-01-01", "2018-06-30"),
                       val_period=("2018-06-30", "2018-12-31"), test_period=None)  # fmt: skip
    message = str(error.value)
    assert message.startswith("train_period [2018-01-01, 2018-06-30] and val_period [2018-06-30, 2018-12-31] share "
                              "2018-06-30T00 to the end of 2018-06-30: ")  # fmt: skip
    with pytest.raises(
        UserError, match=r"and test_period \[2020-01-01, 2020-12-31\] share 2020-01-01T00 to the end of 2020-06-01: "
    ):
        ERA5DataModule("never-opened.zarr", train_period=("2019-01-01", "2020-06-01"), val_period=None)
    ERA5DataModule("never-opened.zarr")  # the default periods are disjoint
    ERA5DataModule(
        "never-opened.zarr", train_period=("2017-01-01", "2017-12-31T18"), val_period=("2018-01-01", "2018-12-31")
    )
    with pytest.raises(UserError, match="train_period start 'soon' is not a time"):
        check_overlap({"train": {"start": "soon", "end": None}, "val": {"start": "2018-01-01", "end": None}})


def test_allow_overlap_warns_and_validation_shared_with_test_warns():
    with pytest.warns(UserWarning, match=r"share trajectory 4; allowed by allow_overlap: the val scores include"):
        module = swe((0, 5), (4, 5), allow_overlap=True)
    assert module.splits["train"] == {"trajectories": (0, 5)}
    with pytest.warns(
        UserWarning, match=r"val_trajectories \[2, 3\] and test_trajectories \[2, 3\] share trajectory 2"
    ):
        swe((0, 2), (2, 3), (2, 3))


def test_fit_refuses_shared_trajectories_in_one_line_and_allows_them_when_asked(swe_store, tmp_path, capsys):
    overlap = ["--data.init_args.train_trajectories", "[0, 3]", "--data.init_args.test_trajectories", "null"]
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path, *overlap)])
    error = capsys.readouterr().err.splitlines()[-1]
    assert exit.value.code == 2
    assert error.startswith(
        "s2forecast fit: error: train_trajectories [0, 3] and val_trajectories [2, 3] share trajectory 2"
    )
    allowed = [*overlap, "--data.allow_overlap", "true", "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0"]
    with pytest.warns(UserWarning, match="allowed by allow_overlap"):
        cli(["fit", *tiny_args(swe_store, tmp_path / "allowed", *allowed)])
    assert list((tmp_path / "allowed").rglob("last.ckpt"))
