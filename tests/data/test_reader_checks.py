"""What scripts/probe_inputs.py found readers accepting silently (issue 14), each refused in one
line with nothing written: stores whose time axis or units labels are corrupt, a forecast that
is NaN everywhere, and fit options that used to fail only after the run directory was made."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from s2forecast.cli import main
from s2forecast.data.fields import FieldDataset, SampleSpec

REPO = Path(__file__).parents[2]


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main([str(arg) for arg in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast ")]
    assert exit.value.code == 2 and len(lines) == 1, lines
    return lines[0]


def corrupt_copy(store: Path, tmp_path: Path, how: str) -> Path:
    copy = tmp_path / f"{how}.zarr"
    shutil.copytree(store, copy)
    group = zarr.open_group(str(copy), mode="r+")
    if how == "units":
        group["geopotential_height"].attrs["units"] = "km"
    else:
        times = group["time"][:]
        times[[1, 2]] = times[[0, 0]] if how == "duplicate" else times[[2, 1]]
        group["time"][:] = times
    zarr.consolidate_metadata(str(copy))
    return copy


MESSAGES = {
    "duplicate": r"store .*duplicate\.zarr: time 2000-01-01T00 appears 3 times .*rewrite the store without the",
    "unsorted": r"store .*unsorted\.zarr: its times are not in ascending order: 2000-01-01T01 comes after 2000-01-01T0",
    "units": r"variable geopotential_height of store .*units\.zarr has units 'km', not 'm'; convert the values",
}


@pytest.mark.parametrize("how", list(MESSAGES))
def test_corrupt_store_is_refused_by_every_reader(swe_store, tmp_path, capsys, how, mse_run_1_epoch):
    store = corrupt_copy(swe_store, tmp_path, how)
    with pytest.raises(ValueError, match=MESSAGES[how]):
        FieldDataset(store, SampleSpec(("geopotential_height", "vorticity"), static=(), step_hours=1.0))
    # rollout: the store's own fault, not a checkpoint mismatch ("does not fit checkpoint: ..." before)
    first = str(xr.open_zarr(swe_store)["time"].values[0])[:13]
    message = refused(["rollout", "--ckpt", mse_run_1_epoch.checkpoint, "--store", store, "--steps", "1",
                       "--init-times", first, "--out", tmp_path / "f.nc"], capsys)  # fmt: skip
    assert re.search(MESSAGES[how], message) and "does not fit checkpoint" not in message, message
    if how == "units":  # statistics and climatologies are unit-agnostic: only model inputs need canonical units
        return
    before = sorted(p.name for p in (store / "stats").iterdir())
    message = refused(["stats", store], capsys)
    assert re.search(MESSAGES[how], message), message
    assert sorted(p.name for p in (store / "stats").iterdir()) == before
    if how == "unsorted":
        return  # climatology reduces per time of year and sorts nothing by position: unsorted is fine there
    out = tmp_path / "clim.zarr"
    message = refused(["climatology", store, "--out", out], capsys)  # its own words for a repeated time
    assert "2000-01-01T00 appears more than once" in message
    assert not out.exists()


def test_evaluate_refuses_a_forecast_that_is_nan_everywhere(swe_store, tmp_path, capsys):
    truth = xr.open_zarr(swe_store)
    times = truth["time"].values[:2]
    field = truth["vorticity"].values[:2]
    leads = np.array([1, 2], dtype="timedelta64[h]").astype("timedelta64[ns]")
    values = np.stack([field, field], 1)
    values[1, 1] = np.nan  # the last init's last lead: a failed step
    forecast = xr.Dataset(
        {"vorticity": (("time", "prediction_timedelta", "latitude", "longitude"), values, {"units": "s**-1"})},
        coords={"time": times, "prediction_timedelta": leads, "latitude": truth["latitude"].values,
                "longitude": truth["longitude"].values},
    )  # fmt: skip
    forecast.to_netcdf(tmp_path / "forecast.nc")
    out = tmp_path / "metrics.nc"
    message = refused(["evaluate", "--forecast", tmp_path / "forecast.nc", "--truth", swe_store, "--out", out,
                       "--no-plots", "--no-progress"], capsys)  # fmt: skip
    assert "forecast variable vorticity is NaN everywhere at init time 2000-01-01T01 lead 2 h" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forecast.nc"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--data.init_args.batch_size", "0"], "data.init_args.batch_size must be an integer >= 1, got 0"),
        (["--data.init_args.num_workers", "-1", "--data.init_args.read_threads", "0"],
         "data.init_args.num_workers must be an integer >= 0, got -1"),  # every problem, each with its key
        (["--data.init_args.num_workers", "-1", "--data.init_args.read_threads", "0"],
         "data.init_args.read_threads must be an integer >= 1"),
        (["--model.lr", "-1"], "model.lr must be a finite positive number, got -1.0"),
        (["--model.warmup_steps", "-5", "--model.loss", "mae"],
         "model.loss must be one of ('mse', 'crps'), got 'mae'; model.warmup_steps must be >= 0, got -5"),
        (["--model.network.scale_factor", "0"],
         "model.architecture 'spherical' with model.network {'embed_dim': 128, 'num_layers': 4, 'num_heads': 1, "
         "'scale_factor': 0, 'attention': 'neighborhood', 'norm': 'instance', 'activation': 'gelu'}: network option "
         "scale_factor must be >= 1, got 0"),
    ],
)  # fmt: skip
def test_fit_options_refused_before_the_run_directory_is_made(swe_store, tmp_path, capsys, options, expected):
    args = ["fit", "--config", REPO / "configs" / "swe" / "s2_neighborhood.yaml", "--data.init_args.store", swe_store,
            "--data.init_args.train_trajectories", "[0, 2]", "--data.init_args.val_trajectories", "[2, 3]",
            "--data.init_args.test_trajectories", "null", "--trainer.default_root_dir", tmp_path,
            "--trainer.logger.init_args.save_dir", tmp_path / "runs", *options]  # fmt: skip
    message = refused(args, capsys)
    assert expected in message, message
    assert list(tmp_path.iterdir()) == []
