"""Forecasts from initial conditions a user brings: an ERA5 NetCDF file as the CDS delivers it,
at any date, normalized with the checkpoint's statistics (issue 15)."""

import hashlib

import numpy as np
import pandas as pd
import pytest
import pytorch_lightning as pl
import torch
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.data import compute_stats
from s2forecast.data.convert_era5 import convert_era5
from s2forecast.training import ForecastModule, data_info
from s2forecast.training.datamodule import ERA5DataModule

LAT, LON = np.linspace(90.0, -90.0, 9), np.arange(16) * 22.5


def cds_t2m(path, times, seed=0):
    """2 m temperature (K) in the new CDS layout: (valid_time, latitude, longitude)."""
    rng = np.random.default_rng(seed)
    base = 288.0 - 30.0 * np.sin(np.radians(LAT))[:, None] ** 2 + np.zeros((9, 16))
    values = base[None] + rng.normal(0.0, 2.0, (len(times), 9, 16))
    ds = xr.Dataset({"t2m": (("valid_time", "latitude", "longitude"), values.astype(np.float32), {"units": "K"})},
                    coords={"valid_time": times, "latitude": LAT, "longitude": LON})  # fmt: skip
    ds.to_netcdf(path)
    return path


@pytest.fixture(scope="module")
def era5_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("ic")
    times = pd.date_range("2020-01-01", periods=12, freq="6h").values
    store = convert_era5([cds_t2m(root / "t2m.nc", times)], root / "era5.zarr", progress=False)
    compute_stats(store)
    data = ERA5DataModule(str(store), variables=["2m_temperature"], train_period=("2020-01-01", "2020-01-03"),
                          val_period=None, test_period=None, batch_size=2, num_workers=0)  # fmt: skip
    model = ForecastModule(network={"embed_dim": 8, "num_layers": 1}, data=data_info(data), warmup_steps=1)
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(model, datamodule=data)
    trainer.save_checkpoint(root / "model.ckpt")
    return root, store, root / "model.ckpt"


def run_rollout(ckpt, source, init, out, *extra):
    cli(["rollout", "--ckpt", str(ckpt), "--store", str(source), "--steps", "2", "--init-times", init,
         "--out", str(out), "--no-progress", *extra])  # fmt: skip
    return xr.open_dataset(out)


def test_netcdf_initial_conditions_forecast_as_the_store_does(era5_model, tmp_path, monkeypatch):
    root, store, ckpt = era5_model
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    from_store = run_rollout(ckpt, store, "2020-01-02T00", tmp_path / "a.nc")
    source = root / "t2m.nc"  # the file the store was converted from
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    from_file = run_rollout(ckpt, source, "2020-01-02T00", tmp_path / "b.nc")
    np.testing.assert_array_equal(from_file["2m_temperature"].values, from_store["2m_temperature"].values)
    assert from_file.attrs["initial_conditions"] == str(source)
    assert hashlib.sha256(source.read_bytes()).hexdigest() == digest  # read only
    assert list((tmp_path / "tmp").iterdir()) == []  # the converted store is gone


def test_initial_conditions_at_a_new_date_without_statistics(era5_model, tmp_path):
    root, store, ckpt = era5_model
    new = cds_t2m(tmp_path / "analysis_2031.nc", pd.date_range("2031-07-01", periods=1, freq="6h").values, seed=5)
    forecast = run_rollout(ckpt, new, "2031-07-01T00", tmp_path / "f.nc")
    assert pd.Timestamp(forecast["time"].values[0]) == pd.Timestamp("2031-07-01T00")
    assert np.isfinite(forecast["2m_temperature"].values).all()
    assert forecast["valid_time"].values[0, -1] == np.datetime64("2031-07-01T12:00", "ns")


def test_initial_conditions_missing_a_variable_is_one_line(era5_model, tmp_path, capsys):
    root, store, ckpt = era5_model
    ds = xr.open_dataset(cds_t2m(tmp_path / "x.nc", pd.date_range("2031-07-01", periods=1).values)).load()
    ds.rename(t2m="msl").assign(msl=lambda d: d.msl * 0 + 101000.0).to_netcdf(tmp_path / "msl.nc")
    with pytest.raises(SystemExit):
        run_rollout(ckpt, tmp_path / "msl.nc", "2031-07-01T00", tmp_path / "f.nc")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    # a model of surface and pressure-level variables needs two CDS files: the message said "selected
    # variables [...] are not in the inputs", of an option rollout does not have, and named no fix
    assert err == [
        f"s2forecast rollout: error: --store {tmp_path / 'msl.nc'} holds mean_sea_level_pressure, but the checkpoint "
        "also needs 2m_temperature: one ERA5 file holds either single-level or pressure-level fields; convert the "
        "files into one store (s2forecast convert-era5 msl.nc OTHER.nc --out ic.zarr) and pass it as --store"
    ]
    assert not (tmp_path / "f.nc").exists()


def test_a_file_of_a_model_that_is_not_era5_is_told_to_pass_a_store(mse_run_1_epoch, swe_store, tmp_path, capsys):
    """A NetCDF --store is read as ERA5 files: a shallow-water model's fields in one were refused as 'unknown
    variable ... in --variables', an option rollout does not have."""
    ds = xr.open_zarr(swe_store).drop_vars(["written", "trajectory"], errors="ignore").isel(time=slice(0, 2)).load()
    for name in ds.variables:
        ds[name].encoding = {}
    ds.attrs = {}
    ds.to_netcdf(tmp_path / "swe.nc")
    init = str(ds.time.values[0])[:13]
    with pytest.raises(SystemExit):
        run_rollout(mse_run_1_epoch.checkpoint, tmp_path / "swe.nc", init, tmp_path / "f.nc")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert len(err) == 1 and "--variables" not in err[0], err
    assert (
        "swe.nc is read as ERA5 NetCDF/GRIB files" in err[0] and "are not ERA5 variables; pass a zarr store" in err[0]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["swe.nc"]


def cds_members(path, times, members=(0, 1, 2)):
    """An ERA5 ensemble file: the members' 2 m temperature along a 'number' dimension, as the CDS delivers them."""
    fields = [xr.open_dataset(cds_t2m(path.with_name(f"m{n}.nc"), times, seed=10 + n)).load() for n in members]
    xr.concat(fields, dim=pd.Index(list(members), name="number")).to_netcdf(path)
    return path


def test_ensemble_file_members_are_the_members_initial_states(era5_model, tmp_path):
    from s2forecast.inference.initial_conditions import InitialConditions
    from s2forecast.models.forecaster import Forecaster

    root, store, ckpt = era5_model
    source = cds_members(tmp_path / "ens.nc", pd.date_range("2031-07-01", periods=1).values)
    model = Forecaster.from_checkpoint(ckpt)
    with InitialConditions.open(source, model, ic_members="all") as initial:
        inputs = initial.read(np.array(["2031-07-01T00"], dtype="datetime64[ns]"), 2).inputs
    file = xr.open_dataset(source)["t2m"].values  # (number, time, lat, lon)
    assert inputs.shape == (1, 3, 1, 1, 9, 16)  # (time, members, history, channels, lat, lon)
    for j in range(
        3
    ):  # verbatim: each member's state is that member's field, normalized with the checkpoint's statistics
        np.testing.assert_allclose(inputs[0, j, 0].numpy(), model.normalize(torch.from_numpy(file[j])).numpy(),
                                   rtol=1e-6)  # fmt: skip
    ensemble = run_rollout(ckpt, source, "2031-07-01T00", tmp_path / "e.nc", "--ic-members", "all")
    assert ensemble.sizes["realization"] == 3 and "initial conditions file" in ensemble.attrs["ensemble"]
    one = run_rollout(ckpt, source, "2031-07-01T00", tmp_path / "one.nc", "--ic-members", "2")
    assert "realization" not in one.dims  # one member selected: a deterministic forecast from it
    np.testing.assert_allclose(ensemble["2m_temperature"].isel(realization=2).values, one["2m_temperature"].values,
                               rtol=1e-5)  # fmt: skip
    # the members along WB2's and CF's 'realization' (as rollout writes them): the same ensemble
    xr.open_dataset(source).rename(number="realization").to_netcdf(tmp_path / "realization.nc")
    again = run_rollout(ckpt, tmp_path / "realization.nc", "2031-07-01T00", tmp_path / "r.nc", "--ic-members", "all")
    np.testing.assert_array_equal(again["2m_temperature"].values, ensemble["2m_temperature"].values)


@pytest.mark.parametrize(
    ("file", "extra", "message"),
    [
        ("ens", [], "is an ensemble of 3 members ([0, 1, 2]); forecast them as the ensemble with --ic-members all"),
        ("ens", ["--ic-members", "7"], "--ic-members 7: member(s) [7] not in"),
        ("ens", ["--ic-members", "all", "--members", "4"], "--members 4 cannot share the 3 selected IC-file members"),
        ("ens", ["--ic-members", "all", "--members", "6"], "deterministic (no network.noise_channels)"),
        ("plain", ["--ic-members", "0"], "has no ensemble members (no number, realization or member dimension)"),
        # told to run `s2forecast stats ens.nc (converted)`, after converting every member
        ("ens", ["--ic-members", "all", "--store-stats"], "is an ERA5 file, which holds none: leave out --store-stats"),
        ("plain", ["--store-stats"], "is an ERA5 file, which holds none: leave out --store-stats"),
    ],
)  # fmt: skip
def test_bad_ensemble_files(era5_model, tmp_path, capsys, file, extra, message):
    root, store, ckpt = era5_model
    times = pd.date_range("2031-07-01", periods=1).values
    source = cds_members(tmp_path / "ens.nc", times) if file == "ens" else cds_t2m(tmp_path / "plain.nc", times)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    with pytest.raises(SystemExit):
        run_rollout(ckpt, source, "2031-07-01T00", tmp_path / "f.nc", *extra)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert len(err) == 1 and message in err[0] and "--member," not in err[0] and "--member " not in err[0], err
    assert not (tmp_path / "f.nc").exists() and hashlib.sha256(source.read_bytes()).hexdigest() == digest


def test_missing_init_time_names_the_users_file(era5_model, tmp_path, capsys):
    """Issue 28: not the temporary store the file was converted into."""
    root, store, ckpt = era5_model
    new = cds_t2m(tmp_path / "analysis.nc", pd.date_range("2031-07-01", periods=2, freq="6h").values)
    with pytest.raises(SystemExit):
        run_rollout(ckpt, new, "2031-07-01T12", tmp_path / "f.nc")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast")]
    assert len(err) == 1 and str(new) in err[0] and "s2forecast-initial-conditions" not in err[0], err
    assert not (tmp_path / "f.nc").exists()


def test_initial_conditions_a_day_apart_for_a_6_h_model(era5_model, tmp_path):
    """One analysis a day: a history-1 model of 6 h steps needs only t0 (issue: 'step_hours=6.0 is
    not a multiple of the time step (24 h)'); the forecast is the one from the 6-hourly store."""
    root, store, ckpt = era5_model
    daily = tmp_path / "daily.nc"
    with xr.open_dataset(root / "t2m.nc") as six_hourly:
        six_hourly.isel(valid_time=[0, 4, 8]).to_netcdf(daily)  # 2020-01-01T00, 01-02T00, 01-03T00
    with xr.open_zarr(store) as six_hourly:
        six_hourly.isel(time=[0, 4, 8]).to_zarr(tmp_path / "daily.zarr", zarr_format=3)
    expected = run_rollout(ckpt, store, "2020-01-02T00", tmp_path / "a.nc")
    for source, out in ((daily, "b.nc"), (tmp_path / "daily.zarr", "c.nc")):
        forecast = run_rollout(ckpt, source, "2020-01-02T00", tmp_path / out)
        np.testing.assert_array_equal(forecast["2m_temperature"].values, expected["2m_temperature"].values)


def history_2_swe_model(step_hours: float):
    """An untrained 8x16 SWE forecaster of two input states ``step_hours`` apart, unit statistics."""
    from s2forecast.geometry import Grid
    from s2forecast.models.data_spec import DataSpec
    from s2forecast.models.forecaster import Forecaster

    data = DataSpec(channels=("geopotential_height", "vorticity", "divergence"), static_channels=(),
                    forcing_channels=(), grid=Grid(8, 16), history=2, step_hours=step_hours, rollout_steps=1,
                    mean=(0.0,) * 3, std=(1.0,) * 3, tendency_std=(1.0,) * 3)  # fmt: skip
    return Forecaster("spherical", {"embed_dim": 8, "num_layers": 1}, data)


def test_missing_history_of_wider_spaced_initial_conditions_is_named(swe_store, tmp_path):
    """A history-2 model of 1 h steps on a 2-hourly store: it opens, and an init time whose
    previous hour is missing is refused naming it; training's spacing check stays."""
    from s2forecast.data.fields import FieldDataset, SampleSpec
    from s2forecast.inference.initial_conditions import InitialConditions, checkpoint_stats
    from s2forecast.user_errors import UserError

    two_hourly = tmp_path / "two_hourly.zarr"
    with xr.open_zarr(swe_store) as hourly:
        hourly.isel(time=[0, 2, 4]).to_zarr(two_hourly, zarr_format=3)  # 00, 02, 04 of the first trajectory
    channels = ("geopotential_height", "vorticity", "divergence")
    model = history_2_swe_model(step_hours=1.0)
    with InitialConditions.open(two_hourly, model) as initial:
        with pytest.raises(UserError) as error:
            initial.check(np.array(["2000-01-01T02"], dtype="datetime64[ns]"))
    assert str(error.value).startswith(
        "initialization time 2000-01-01T02 needs inputs that are not in the store: time(s) 2000-01-01T01 are not in "
        f"the store {two_hourly}"
    ), error.value
    assert not str(error.value).endswith("initialization times are times of the store")  # 02 h is one
    with InitialConditions.open(two_hourly, model) as initial:
        with pytest.raises(UserError) as error:
            initial.check(np.array(["2000-01-01T03"], dtype="datetime64[ns]"))  # between the store's times
    assert str(error.value).endswith("; initialization times are times of the store"), error.value
    with pytest.raises(UserError, match=r"step_hours=1.0 is not a multiple of the time step of .* \(2 h\)"):
        FieldDataset(two_hourly, SampleSpec(channels, None, (), (), 1, 1.0, 1), stats=checkpoint_stats(model)[0])


def test_a_history_that_would_span_two_trajectories_is_refused(tmp_path):
    """Trajectories of 6 states 4 h apart lie back to back (a day each): a history-2 initialization at
    the second one's first time took its first state from the first trajectory (training never does)."""
    from s2forecast.data import generate_swe
    from s2forecast.inference.initial_conditions import InitialConditions
    from s2forecast.user_errors import UserError

    store = generate_swe(tmp_path / "swe.zarr", 8, 16, trajectories=2, steps=5, dt_hours=4.0,
                         solver_dt_seconds=3600, progress=False)  # fmt: skip
    model = history_2_swe_model(step_hours=4.0)
    with InitialConditions.open(store, model) as initial:
        assert np.diff(initial.dataset.times)[5] == np.timedelta64(4, "h")  # back to back: 20 h, then 00 h
        initial.check(np.array(["2000-01-02T04"], dtype="datetime64[ns]"))  # both states in trajectory 1
        with pytest.raises(UserError) as error:
            initial.check(np.array(["2000-01-02T00"], dtype="datetime64[ns]"))
    assert str(error.value) == (
        "initialization time 2000-01-02T00 needs the 2 states up to it, but 2000-01-01T20 is in another trajectory "
        "of the store than it (trajectory 1 starts at 2000-01-02T00); samples never span two trajectories: start 1 "
        "step(s) or more after a trajectory's start"
    )


def test_a_range_of_store_times_leaves_out_those_without_their_history(tmp_path, monkeypatch, capsys):
    """--start/--end without --every: every store time in the range that can start a forecast. A history-2
    model on two trajectories leaves out each one's first time (its history is missing or another
    run's) with a warning; the same times listed with --init-times are refused."""
    from s2forecast.cli import main
    from s2forecast.data import generate_swe

    store = generate_swe(tmp_path / "swe.zarr", 8, 16, trajectories=2, steps=5, dt_hours=4.0,
                         solver_dt_seconds=3600, progress=False)  # fmt: skip
    model = history_2_swe_model(step_hours=4.0).eval()
    monkeypatch.setattr("s2forecast.inference.rollout.load_forecaster", lambda checkpoint, device="cpu": model)
    checkpoint = tmp_path / "model.ckpt"
    checkpoint.write_bytes(b"read through the patched load_forecaster")
    args = ["rollout", "--ckpt", checkpoint, "--store", store, "--steps", "1", "--no-progress"]
    out = tmp_path / "range.nc"
    left_out = (
        r"left out 2 of the 12 store times in the range \(2000-01-01T00, 2000-01-02T00\): their 2 input state\(s\) "
        r"are not all in the store \(the start of the record or of a trajectory, or a gap in it\)"
    )
    with pytest.warns(UserWarning, match=left_out):
        main([str(a) for a in [*args, "--start", "2000-01-01", "--end", "2000-01-02", "--out", out]])
    assert capsys.readouterr().out == f"wrote {out}: 10 initialization times x 1 steps\n"
    with xr.open_dataset(out) as written:
        times = xr.open_zarr(store)["time"].values
        np.testing.assert_array_equal(written["time"].values, np.delete(times, [0, 6]))
    with pytest.raises(SystemExit) as exit:
        main([str(a) for a in [*args, "--init-times", "2000-01-02T00", "--out", tmp_path / "listed.nc"]])
    assert exit.value.code == 2 and "is in another trajectory of the store" in capsys.readouterr().err
    assert not (tmp_path / "listed.nc").exists()


def test_forcings_are_computed_a_window_at_a_time(swe_store):
    """The forcings of every step were computed up front, (batch, history + steps, ...): memory grew
    with --steps (a review measured 1.07 -> 1.57 GB from 4 to 256 steps at 91x180). A rollout of a
    million steps now starts at once, and each window is the forcings of its valid times."""
    from s2forecast.data.fields import FieldDataset, SampleSpec
    from s2forecast.inference.initial_conditions import read_initial_conditions

    spec = SampleSpec(("geopotential_height",), None, (), ("toa_radiation", "time_of_day"), 2, 1.0, 0)
    dataset = FieldDataset(swe_store, spec)
    init_times = dataset.times[[1, 3]]
    states = read_initial_conditions(dataset, init_times, 10**6)
    assert states.forcings.shape == (2, 10**6 + 2, 3, 8, 16) and states.inputs.shape == (2, 2, 1, 8, 16)
    window = states.forcings[:, 5:8]
    assert isinstance(window, torch.Tensor) and window.dtype == torch.float32
    for row, t0 in enumerate(init_times):
        expected = dataset.forcings_at(t0 + np.arange(4, 7) * np.timedelta64(1, "h"))
        np.testing.assert_array_equal(window[row].numpy(), expected)
    # indexed as a tensor is (a review found ints, empty windows and channels refused)
    small = read_initial_conditions(dataset, init_times, 3).forcings
    whole = small.tensor()
    assert whole.shape == small.shape == (2, 5, 3, 8, 16) and whole.dtype == small.dtype == torch.float32
    for index in [
        (0, 1),
        (slice(None), slice(2, 2)),
        (slice(None), slice(None), 0),
        (1,),
        (slice(None), -1),
        (..., 0),
        (0, ..., 2),
        (..., slice(1, 3), slice(None), slice(None), slice(None)),
    ]:
        assert torch.equal(small[index], whole[index]), index  # `...` indexed the times as longitudes
    with pytest.raises(IndexError, match=r"add axes \(None\) to the tensor"):
        small[None, 0]
    # a 2-D mask was numpy's IndexError; index arrays on both sides gave another shape than a tensor's
    with pytest.raises(IndexError, match="masks of one dim each"):
        small[np.ones((2, 5), bool), 0]
    for mixed in [([0, 1], slice(None), [1, 0]), (0, ..., [0, 1], [1, 0], slice(None), slice(None))]:
        with pytest.raises(IndexError, match="in the batch and time dims or in the others, not both"):
            small[mixed]  # after `...` too: the check looked at the positions before it was expanded
    with pytest.raises(IndexError, match=r"^an index can only have a single ellipsis"):
        small[..., 0, ...]
    assert torch.equal(small[[1, 0], :, 2], whole[[1, 0], :, 2])
    assert torch.equal(small[:, :, [2, 0]], whole[:, :, [2, 0]])
    as_float64 = small.to(torch.float64)  # a dtype, as a tensor's to() takes: it was taken for a device
    assert as_float64.dtype == as_float64[:, :2].dtype == torch.float64 and as_float64.device == small.device
    assert torch.equal(small.to("cpu", torch.float64)[:, 1], whole[:, 1].double())
    # a rollout's windows overlap: each valid time is computed once (at history 2: 3 times a step before)
    computed = []
    counting = type(small)(small.times, lambda t: computed.append(t.size) or dataset.forcings_at(t), 3, (8, 16))
    for k in range(3):
        assert torch.equal(counting[:, k : k + 3], whole[:, k : k + 3])
    assert sum(computed) == np.unique(small.times).size  # every valid time once
