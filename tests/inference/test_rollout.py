"""`s2forecast rollout` and `s2forecast climatology`: streamed, atomic, CF-compliant output."""

import os

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.data import compute_stats, generate_swe, open_store
from s2forecast.inference.rollout import (
    RolloutOptions,
    load_forecaster,
    open_inputs,
    read_initial_conditions,
    rollout,
)
from s2forecast.models.forecaster import Forecaster
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.datamodule import SWEDataModule


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny SWE store and a checkpoint trained on it for a few steps."""
    root = tmp_path_factory.mktemp("rollout")
    store = root / "swe.zarr"
    generate_swe(store, 8, 16, trajectories=2, steps=8, progress=False)
    compute_stats(store)
    data = SWEDataModule(str(store), train_trajectories=(0, 2), val_trajectories=None, test_trajectories=None,
                         batch_size=4)  # fmt: skip
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    trainer = pl.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         limit_val_batches=0)  # fmt: skip
    trainer.fit(model, datamodule=data)
    checkpoint = root / "model.ckpt"
    trainer.save_checkpoint(checkpoint)
    return store, checkpoint


def times_of(store):
    return open_store(store)["time"].values.astype("datetime64[ns]")


def test_rollout_equals_step_by_step_and_streams_batches(trained, tmp_path):
    store, checkpoint = trained
    inits = times_of(store)[[0, 1, 2, 9, 10]]  # 5 inits in batches of 2, from both trajectories
    out = rollout(checkpoint, store, 3, inits, tmp_path / "f.nc", RolloutOptions(batch_size=2), progress=False)
    again = rollout(checkpoint, store, 3, inits, tmp_path / "g.nc", RolloutOptions(batch_size=2), progress=False)
    other_batches = rollout(
        checkpoint, store, 3, inits, tmp_path / "h.nc", RolloutOptions(batch_size=3), progress=False
    )
    forecast = xr.open_dataset(out)
    assert np.array_equal(forecast["vorticity"].values, xr.open_dataset(again)["vorticity"].values)  # deterministic
    assert np.allclose(forecast["vorticity"].values, xr.open_dataset(other_batches)["vorticity"].values, rtol=1e-5)

    model = load_forecaster(checkpoint)
    dataset = open_inputs(model, store)
    batch = read_initial_conditions(dataset, inits, 3)
    states = batch.inputs
    with torch.no_grad():
        for k in range(3):
            prediction = model.step(states, batch.static, batch.forcings[:, k : k + 2])
            physical = model.to_physical(prediction).numpy()
            for c, name in enumerate(["geopotential_height", "vorticity", "divergence"]):
                assert np.allclose(forecast[name].values[:, k], physical[:, c], rtol=1e-5, atol=1e-12), (k, name)
            states = prediction[:, None]


def test_netcdf_and_zarr_layout_and_cf_attributes(trained, tmp_path):
    store, checkpoint = trained
    inits = times_of(store)[:2]
    out = rollout(checkpoint, store, 4, inits, tmp_path / "f.nc", progress=False)
    zarr_out = rollout(checkpoint, store, 4, inits, tmp_path / "f.zarr", RolloutOptions(fmt="zarr"), progress=False)
    ds = xr.open_dataset(out)
    for written in (ds, xr.open_zarr(zarr_out)):  # the same layout and CF attributes in both formats
        assert written["geopotential_height"].dims == ("time", "prediction_timedelta", "latitude", "longitude")
        assert np.array_equal(written["time"].values, inits)
        assert np.array_equal(written["prediction_timedelta"].values, np.arange(1, 5) * np.timedelta64(1, "h"))
        assert written["valid_time"].values[1, 2] == inits[1] + np.timedelta64(3, "h")
        assert written["latitude"].values[0] == 90.0 and written["latitude"].attrs["units"] == "degrees_north"
        assert written["longitude"].attrs["units"] == "degrees_east"
        assert written["latitude"].attrs["standard_name"] == "latitude"
        assert written["geopotential_height"].attrs["units"] == "m"
        assert written["geopotential_height"].attrs["standard_name"] == "geopotential_height"
        assert written["time"].attrs["standard_name"] == "forecast_reference_time"
        assert written["prediction_timedelta"].attrs["standard_name"] == "forecast_period"
        assert written["valid_time"].attrs["standard_name"] == "time"
        assert written.attrs["Conventions"] == "CF-1.8" and "sha256:" in written.attrs["source"]
    raw = xr.open_dataset(out, decode_cf=False)
    assert raw["geopotential_height"].encoding["zlib"] and raw["geopotential_height"].encoding["chunksizes"][:2] == (
        1,
        1,
    )
    # zarr output holds the same values
    assert np.allclose(xr.open_zarr(zarr_out)["divergence"].values, ds["divergence"].values)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_checkpoint_and_store_must_agree(trained, tmp_path):
    store, checkpoint = trained
    other = tmp_path / "other.zarr"
    generate_swe(other, 16, 32, trajectories=1, steps=3, progress=False)
    compute_stats(other)
    with pytest.raises(ValueError, match="grid"):
        rollout(checkpoint, other, 2, times_of(other)[:1], tmp_path / "f.nc", progress=False)
    with pytest.raises(ValueError, match="not in the store"):
        rollout(checkpoint, store, 2, [np.datetime64("1999-01-01T00", "ns")], tmp_path / "f.nc", progress=False)
    with pytest.raises(FileNotFoundError):
        rollout(tmp_path / "missing.ckpt", store, 2, times_of(store)[:1], tmp_path / "f.nc", progress=False)
    assert not (tmp_path / "f.nc").exists()


def new_dates_store(store, tmp_path, years: int = 31):
    """The same states at other dates (2031), without statistics: initial conditions a user brings."""
    import shutil

    import zarr

    copy = tmp_path / "new_dates.zarr"
    shutil.copytree(store, copy)
    shutil.rmtree(copy / "stats")
    group = zarr.open_group(str(copy), mode="r+")
    assert group["time"].attrs["units"].startswith("hours since")
    group["time"][:] = group["time"][:] + years * 365 * 24
    zarr.consolidate_metadata(str(copy))
    return copy


def test_forecast_from_new_initial_conditions_uses_the_checkpoint_statistics(trained, tmp_path, capsys):
    """A store of other dates and no statistics forecasts exactly what the training store does
    from the same states; the store's own statistics are used only when asked for."""
    store, checkpoint = trained
    new = new_dates_store(store, tmp_path)
    inits = times_of(store)[[0, 9]]
    shifted = times_of(new)[[0, 9]]
    expected = xr.open_dataset(rollout(checkpoint, store, 3, inits, tmp_path / "a.nc", progress=False))
    cli(["rollout", "--ckpt", str(checkpoint), "--store", str(new), "--steps", "3", "--init-times",
         ",".join(str(t)[:13] for t in shifted), "--out", str(tmp_path / "b.nc"), "--no-progress"])  # fmt: skip
    got = xr.open_dataset(tmp_path / "b.nc")
    assert np.array_equal(got["time"].values, shifted)
    for name in ("geopotential_height", "vorticity", "divergence"):
        np.testing.assert_array_equal(got[name].values, expected[name].values)

    with pytest.raises(SystemExit):  # --store-stats on a store without statistics: one line, nothing written
        cli(["rollout", "--ckpt", str(checkpoint), "--store", str(new), "--steps", "1", "--init-times",
             str(shifted[0])[:13], "--out", str(tmp_path / "c.nc"), "--no-progress", "--store-stats"])  # fmt: skip
    # it said the store had no statistics and to compute them with `s2forecast stats`, which a store of
    # another writer (WeatherBench2's) refuses to write into; now it also names the way without
    err = capsys.readouterr().err
    assert f"--store-stats normalizes with the statistics inside the store, and {new} holds none" in err, err
    assert "or leave out --store-stats to normalize with the checkpoint's" in err and not (tmp_path / "c.nc").exists()
    compute_stats(new, end=str(times_of(new)[3]))  # statistics of another period than training's
    store_normalized = rollout(
        checkpoint, new, 3, shifted, tmp_path / "d.nc", RolloutOptions(store_stats=True), progress=False
    )
    assert not np.allclose(xr.open_dataset(store_normalized)["vorticity"].values, expected["vorticity"].values)


def test_store_stats_normalize_and_denormalize_with_the_same_statistics(trained, tmp_path, monkeypatch):
    """--store-stats normalized the inputs with the store's statistics but turned the outputs back into
    physical units with the checkpoint's: a model that keeps its normalized input (persistence) was off
    by the statistics' difference. Now it gives the initial state at every lead, with either."""
    store, checkpoint = trained
    new = new_dates_store(store, tmp_path)
    compute_stats(new, end=str(times_of(new)[3]))  # statistics of another period than training's
    monkeypatch.setattr(Forecaster, "step", lambda self, states, static, forcings, noise=None: states[:, -1])
    inits = times_of(new)[[0, 9]]
    initial = open_store(new).sel(time=inits)
    for options in (RolloutOptions(), RolloutOptions(store_stats=True)):
        out = xr.open_dataset(rollout(checkpoint, new, 2, inits, tmp_path / f"{options.store_stats}.nc", options,
                                      progress=False))  # fmt: skip
        for name in ("geopotential_height", "vorticity", "divergence"):
            for lead in range(2):
                np.testing.assert_allclose(out[name].values[:, lead], initial[name].values, rtol=1e-5,
                                           atol=1e-6 * float(np.abs(initial[name]).max()), err_msg=name)  # fmt: skip


def test_store_stats_of_another_tendency_step_are_refused(trained, tmp_path):
    """The tendency scale of 2 h statistics made a 1 h model's steps up to 0.16 std off, silently."""
    store, checkpoint = trained
    new = new_dates_store(store, tmp_path)
    compute_stats(new, step_hours=2)
    with pytest.raises(ValueError) as error:
        rollout(checkpoint, new, 1, times_of(new)[:1], tmp_path / "f.nc", RolloutOptions(store_stats=True),
                progress=False)  # fmt: skip
    assert str(error.value) == (
        f"--store-stats: the statistics of {new} are of tendencies over 2 h, the model steps 1 h: compute them over "
        f"its step (`s2forecast stats {new} --step-hours 1`), or leave --store-stats out to use the checkpoint's"
    )
    assert not (tmp_path / "f.nc").exists()


def test_non_finite_forecast(trained, tmp_path, monkeypatch):
    store, checkpoint = trained
    real = Forecaster.step
    calls = []

    def failing(self, states, static, forcings, noise=None):
        calls.append(1)
        out = real(self, states, static, forcings, noise)
        if len(calls) == 2:
            out[0, 1, 2, 3] = float("nan")
            if poison_both:
                out[1, 2, 0, 0] = float("inf")
        return out

    monkeypatch.setattr(Forecaster, "step", failing)
    inits = times_of(store)[:2]
    poison_both = False
    with pytest.raises(ValueError, match=r"init 2000-01-01T00, step 2 \(\+2 h\), vorticity"):
        rollout(checkpoint, store, 3, inits, tmp_path / "f.nc", progress=False)
    assert not (tmp_path / "f.nc").exists() and not any(p.name.startswith(".f.nc") for p in tmp_path.iterdir())
    calls.clear()
    out = rollout(checkpoint, store, 3, inits, tmp_path / "f.nc", RolloutOptions(nan_policy="write"), progress=False)
    ds = xr.open_dataset(out)
    assert ds.attrs["nonfinite_forecasts"] == "init 2000-01-01T00, step 2 (+2 h), vorticity"
    assert np.isnan(ds["vorticity"].values[0, 1, 2, 3])
    calls.clear()
    poison_both = True  # both forecasts at the same step: each is listed
    out = rollout(checkpoint, store, 3, inits, tmp_path / "g.nc", RolloutOptions(nan_policy="write"), progress=False)
    assert xr.open_dataset(out).attrs["nonfinite_forecasts"] == (
        "init 2000-01-01T00, step 2 (+2 h), vorticity; init 2000-01-01T01, step 2 (+2 h), divergence"
    )


def test_every_non_finite_member_is_listed_in_the_file(trained, tmp_path, monkeypatch):
    """110 forecasts (11 init times x 10 members) that all go non-finite: the attribute lists each."""
    store, checkpoint = trained
    real = Forecaster.step

    def poisoned(self, states, static, forcings, noise=None):
        return real(self, states, static, forcings, noise) * float("nan")

    monkeypatch.setattr(Forecaster, "step", poisoned)
    inits = times_of(store)[:11]
    options = RolloutOptions(nan_policy="write", members=10, perturbation="gaussian")
    out = rollout(checkpoint, store, 2, inits, tmp_path / "f.nc", options, progress=False)
    listed = xr.open_dataset(out).attrs["nonfinite_forecasts"].split("; ")
    expected = [f"init {str(t)[:13]}, member {m}, step 1 (+1 h), geopotential_height" for t in inits for m in range(10)]
    assert listed == expected


def test_unwritable_output(trained, tmp_path):
    store, checkpoint = trained
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(ValueError, match="not writable"):
            rollout(checkpoint, store, 2, times_of(store)[:1], locked / "f.nc", progress=False)
    finally:
        os.chmod(locked, 0o700)
    with pytest.raises(ValueError, match="does not exist"):
        rollout(checkpoint, store, 2, times_of(store)[:1], tmp_path / "nowhere" / "f.nc", progress=False)


def test_crash_while_writing_leaves_no_file(trained, tmp_path, monkeypatch):
    from s2forecast.inference import rollout as module

    store, checkpoint = trained
    real = module.ForecastFile.write

    def full_disk(self, start, lead, fields):
        if lead == 1:
            raise OSError(28, "No space left on device")
        return real(self, start, lead, fields)

    monkeypatch.setattr(module.ForecastFile, "write", full_disk)  # the class rollout writes with
    with pytest.raises(OSError, match="could not write .*No space left"):
        rollout(checkpoint, store, 3, times_of(store)[:2], tmp_path / "f.nc", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_command_line(trained, tmp_path, capsys):
    store, checkpoint = trained
    out = tmp_path / "f.nc"
    cli(["rollout", "--ckpt", str(checkpoint), "--store", str(store), "--steps", "2", "--start", "2000-01-01T00",
         "--end", "2000-01-01T03", "--every", "1", "--out", str(out), "--no-progress"])  # fmt: skip
    assert "4 initialization times x 2 steps" in capsys.readouterr().out
    assert xr.open_dataset(out).sizes["time"] == 4
    clim = tmp_path / "clim.zarr"
    cli(["climatology", str(store), "--out", str(clim)])
    climatology = xr.open_zarr(clim)
    method, reason = climatology.attrs["climatology_method"], climatology.attrs["climatology_method_reason"]
    assert f"wrote {clim}: method {method} ({reason})" in capsys.readouterr().out  # a fallback says why
    assert {"dayofyear", "hour", "latitude", "longitude"} <= set(climatology.dims)
    assert "climatology_method" in climatology.attrs


# --- robustness ------------------------------------------------------------------------------------
def test_rotation_of_fields_is_exact_for_identity_and_close_for_smooth_fields():
    import math

    from s2forecast.evaluation.robustness import rotate_fields
    from s2forecast.geometry import Grid, rotation_matrix

    grid = Grid(33, 64)
    points = grid.unit_vectors.double()
    z = points[..., 2][None]
    assert torch.allclose(rotate_fields(z, grid, torch.eye(3, dtype=torch.float64)), z)
    rotation = rotation_matrix(torch.tensor([0.0, 1.0, 0.0]), math.pi / 2)
    expected = points @ (rotation @ torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))  # z(R^T p) = (R e_z) . p
    assert (rotate_fields(z, grid, rotation)[0] - expected).abs().max() < 5e-3


def test_rotation_and_resolution_errors(trained, tmp_path):
    from s2forecast.data.fields import FieldDataset
    from s2forecast.evaluation.robustness import resolution_errors, rotation_errors, weighted_rmse

    store, checkpoint = trained
    model = load_forecaster(checkpoint)
    dataset = open_inputs(model, store, targets=1)
    batch = dataset.collate([dataset[i] for i in range(4)])
    rows = rotation_errors(model, batch, [0.0, 0.7, 1.5])
    with torch.no_grad():
        plain = weighted_rmse(model.step(batch.inputs, batch.static, batch.forcings) - batch.targets[:, 0], model.grid)
    assert rows[0]["rmse"] == pytest.approx(plain, rel=1e-5) and all(np.isfinite(r["rmse"]) for r in rows)
    finer = tmp_path / "finer.zarr"
    generate_swe(finer, 16, 32, trajectories=1, steps=3, progress=False)
    compute_stats(finer)
    other = FieldDataset(finer, dataset.spec)
    result = resolution_errors(model, other.collate([other[0], other[1]]), other.grid)
    assert result["grid"] == "16x32" and np.isfinite(result["rmse"]) and result["persistence_rmse"] > 0


@pytest.mark.slow  # 16x32 stores
def test_rollout_on_another_grid(trained, tmp_path):
    """The neural-operator property: the same weights roll out on a finer store when asked."""
    store, checkpoint = trained
    finer = tmp_path / "finer.zarr"
    generate_swe(finer, 16, 32, trajectories=1, steps=4, progress=False)
    compute_stats(finer)
    inits = times_of(finer)[:2]
    with pytest.raises(ValueError, match="--other-grid"):
        rollout(checkpoint, finer, 2, inits, tmp_path / "f.nc", progress=False)
    out = rollout(checkpoint, finer, 2, inits, tmp_path / "f.nc", RolloutOptions(other_grid=True), progress=False)
    forecast = xr.open_dataset(out)
    assert forecast.sizes["latitude"] == 16 and np.isfinite(forecast["vorticity"].values).all()


@pytest.mark.slow  # the script end to end
def test_robustness_script(trained, tmp_path, monkeypatch, capsys):
    import json
    import runpy
    import sys
    from pathlib import Path

    store, checkpoint = trained
    finer = tmp_path / "finer.zarr"
    generate_swe(finer, 16, 32, trajectories=1, steps=3, progress=False)
    compute_stats(finer)
    script = Path(__file__).parents[2] / "scripts" / "robustness.py"
    command = [str(script), "--ckpt", str(checkpoint), "--store", str(store), "--angles", "3", "--samples", "2",
               "--other-store", str(finer)]  # fmt: skip
    # as `python scripts/robustness.py ...` runs it (as __main__, its argv), in this process: a fresh
    # interpreter would spend most of the test importing torch and s2forecast again
    monkeypatch.setattr(sys, "argv", command)
    runpy.run_path(str(script), run_name="__main__")
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["test"] for r in rows] == ["rotation"] * 3 + ["resolution"]
    assert rows[-1]["grid"] == "16x32" and all(np.isfinite(r["rmse"]) for r in rows)


def test_the_python_api_writes_the_format_of_the_suffix_and_sorts_init_times(trained, tmp_path):
    """rollout(..., "f.zarr") wrote NetCDF under that name (the format default was netcdf, the suffix
    counted only on the command line); init times given out of order were written so, which
    WeatherBench2's time slices refuse (or, in pandas, take by position)."""
    store, checkpoint = trained
    inits = times_of(store)[[3, 0, 2]]
    out = rollout(checkpoint, store, 1, inits, tmp_path / "f.zarr", progress=False)
    assert out.is_dir() and (out / "zarr.json").is_file()
    assert np.array_equal(xr.open_zarr(out)["time"].values, np.sort(inits))
    with pytest.raises(ValueError, match=r"^--format netcdf with --out .*g\.zarr, a name for zarr"):
        rollout(checkpoint, store, 1, inits, tmp_path / "g.zarr", RolloutOptions(fmt="netcdf"), progress=False)


@pytest.mark.parametrize(
    ("options", "steps", "message"),
    [
        ({"device": "gpu"}, 1, r"^device 'gpu' is not a device; use cpu, cuda or cuda:N$"),
        # a device this machine lacks was an unreadable checkpoint (loading onto it failed)
        ({"device": "cuda:99"}, 1, r"^device 'cuda:99': this machine has (no CUDA device; use cpu|\d+ CUDA device)"),
        ({"batch_size": "4"}, 1, r"^batch_size must be an integer, got '4'$"),
        ({}, 1.5, r"^steps must be an integer >= 1, got 1\.5$"),  # wrote leads of 1 and 2 h
        ({}, "2", r"^steps must be an integer >= 1, got '2'$"),
    ],
)
def test_api_arguments_of_the_wrong_kind_are_one_line(trained, tmp_path, options, steps, message):
    store, checkpoint = trained
    with pytest.raises(ValueError, match=message):
        rollout(checkpoint, store, steps, times_of(store)[:1], tmp_path / "f.nc", RolloutOptions(**options))
    assert list(tmp_path.iterdir()) == []


def test_the_forecaster_names_the_shapes_it_takes(trained):
    """A state on another grid, or with another channel count, failed deep in the network."""
    store, checkpoint = trained
    model = load_forecaster(checkpoint)
    batch = read_initial_conditions(open_inputs(model, store), times_of(store)[:1], 2)
    wide = torch.zeros(1, 1, 4, 8, 16)
    coarse = batch.inputs[..., ::2, :]
    for states, wrong in ((wide, "(1, 1, 4, 8, 16)"), (coarse, "(1, 1, 3, 4, 16)")):
        with pytest.raises(ValueError, match=rf"^states of shape \({wrong[1:-1]}\): this model takes \(1, 1, 3, "
                           r"8, 16\) \(history 1, channels \['geopotential_height', 'vorticity', 'divergence'\], "
                           r"grid 8x16\)$"):  # fmt: skip
            next(model.rollout(states, batch.static, batch.forcings, 2))
    with pytest.raises(ValueError, match=r"^steps must be an integer >= 1, got -1$"):  # yielded nothing
        next(model.rollout(batch.inputs, batch.static, batch.forcings, -1))
