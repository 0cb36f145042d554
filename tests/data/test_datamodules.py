"""Store layout, SWE generation, statistics, the streaming core and the DataModules."""

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
from session_fixtures import tiny_args

from s2forecast.cli import main as cli
from s2forecast.data import Batch, FieldDataset, SampleSpec, compute_stats, generate_swe, load_stats, open_store
from s2forecast.data.forcings import cos_zenith, forcing_fields
from s2forecast.data.store import cf_attributes, normalize_units
from s2forecast.data.writer import StoreWriter, lazy_empty
from s2forecast.geometry import Grid
from s2forecast.training import data_info
from s2forecast.training.datamodule import ERA5DataModule, SWEDataModule
from s2forecast.user_errors import UserError

ERA5_SLICE = Path(__file__).parents[1] / "data" / "era5_sample_slice.nc"  # real ERA5, see tests/data/README.md


def synthetic_store(path, grid: Grid, times, south_to_north=False, levels=(500, 850), seed=0, nan_at=None):
    """A complete store in our layout with a known value for every (variable, level, time)."""
    rng = np.random.default_rng(seed)
    lat = grid.lats_deg.numpy()
    shape = grid.shape
    data = {
        "temperature": (
            ("time", "level", "latitude", "longitude"),
            rng.standard_normal((len(times), len(levels), *shape)).astype(np.float32) + 250,
        ),
        "2m_temperature": (
            ("time", "latitude", "longitude"),
            rng.standard_normal((len(times), *shape)).astype(np.float32) + 280,
        ),
        "land_sea_mask": (("latitude", "longitude"), (rng.random(shape) > 0.5).astype(np.float32)),
    }  # fmt: skip
    if nan_at is not None:
        data["2m_temperature"][1][nan_at] = np.nan
    ds = xr.Dataset(
        data, coords={"time": times, "level": list(levels), "latitude": lat, "longitude": grid.lons_deg.numpy()}
    )
    for name in ds.data_vars:
        ds[name].attrs = cf_attributes(name)
    ds.attrs = {"grid_kind": grid.kind, "s2forecast_complete": "true"}
    if south_to_north:
        ds = ds.isel(latitude=slice(None, None, -1))
    ds.to_zarr(path, mode="w", consolidated=True, zarr_format=3)
    return ds


def six_hourly(n, start="2020-01-01"):
    return pd.date_range(start, periods=n, freq="6h").values


# --- layout ------------------------------------------------------------------------------------
@pytest.mark.parametrize("south_to_north", [False, True])
@pytest.mark.parametrize("kind", ["equiangular", "equiangular-midpoint"])
def test_reader_puts_latitudes_north_to_south(tmp_path, south_to_north, kind):
    grid = Grid(7, 12, kind)
    source = synthetic_store(tmp_path / "s.zarr", grid, six_hourly(4), south_to_north=south_to_north)
    ds = open_store(tmp_path / "s.zarr")
    assert ds["latitude"].values[0] > ds["latitude"].values[-1]
    assert np.array_equal(ds["2m_temperature"].values, source["2m_temperature"].sortby("latitude", ascending=False))
    compute_stats(tmp_path / "s.zarr")
    dataset = FieldDataset(tmp_path / "s.zarr", SampleSpec(("2m_temperature",), step_hours=6))
    assert dataset.grid == grid
    sample = dataset[0]
    stats = dataset.stats
    expected = source["2m_temperature"].isel(time=0).sortby("latitude", ascending=False).values
    assert np.allclose(sample["inputs"][0, 0].numpy() * stats.std[0] + stats.mean[0], expected, atol=1e-4)


def test_units_spellings():
    for spelling in ["m**2 s**-2", "m2 s-2", "m^2 s^-2", "m**2/s**2", "m2/s2"]:
        assert normalize_units(spelling) == "m**2 s**-2", spelling
    assert normalize_units("m/s") == normalize_units("m s**-1") == "m s**-1"
    assert normalize_units("(0 - 1)") == "1"


def test_writer_is_atomic_and_resumable(tmp_path):
    grid = Grid(5, 8)
    times = six_hourly(6)
    template = xr.Dataset(
        {"2m_temperature": lazy_empty((6, 5, 8), ("time", "latitude", "longitude"))},
        coords={"time": times, "latitude": grid.lats_deg.numpy(), "longitude": grid.lons_deg.numpy()},
        attrs={"grid_kind": "equiangular"},
    )
    path = tmp_path / "w.zarr"
    writer = StoreWriter(path, {"inputs": "a"})
    assert not writer.create(template).any()
    slab = xr.Dataset({"2m_temperature": (("time", "latitude", "longitude"), np.ones((3, 5, 8), np.float32))})
    writer.write(slab.assign_coords(time=times[:3]), 0)
    with pytest.raises(ValueError, match="incomplete"):
        open_store(path)
    with pytest.raises(RuntimeError, match="3 time steps were not written"):
        writer.finish()
    resumed = StoreWriter(path, {"inputs": "a"}).create(template)
    assert resumed.tolist() == [True] * 3 + [False] * 3
    with pytest.raises(ValueError, match="other inputs"):
        StoreWriter(path, {"inputs": "b"}).create(template)
    writer.write((2 * slab).assign_coords(time=times[3:]), 3)
    writer.finish()
    ds = open_store(path)
    assert ds["2m_temperature"].attrs["units"] == "K"
    assert np.array_equal(ds["2m_temperature"].values[:, 0, 0], [1, 1, 1, 2, 2, 2])
    assert StoreWriter(path, {"inputs": "a"}).create(template).all()  # complete: nothing to do


# --- shallow water -----------------------------------------------------------------------------
@pytest.mark.slow  # five 16x32 stores
def test_generate_swe_is_deterministic_and_resumable(tmp_path, monkeypatch):
    a = generate_swe(tmp_path / "a.zarr", 16, 32, trajectories=2, steps=3, dt_hours=1.0, seed=5, progress=False)
    b = generate_swe(tmp_path / "b.zarr", 16, 32, trajectories=2, steps=3, dt_hours=1.0, seed=5, progress=False)
    ds_a, ds_b = open_store(a), open_store(b)
    for name in ("geopotential_height", "vorticity", "divergence"):
        assert np.array_equal(ds_a[name].values, ds_b[name].values)
        assert ds_a[name].attrs["units"] in ("m", "s**-1")
    assert ds_a["trajectory"].values.tolist() == [0] * 4 + [1] * 4
    h = ds_a["geopotential_height"].values
    assert 9000 < h.mean() < 11000 and np.all(np.diff(h[:4], axis=0) != 0)  # 10 km layer, evolving
    other = generate_swe(tmp_path / "c.zarr", 16, 32, trajectories=2, steps=3, seed=6, progress=False)
    assert not np.array_equal(open_store(other)["vorticity"].values, ds_a["vorticity"].values)

    # interrupt after the first trajectory, then resume: only the second is integrated again
    import s2forecast.data.swe as swe

    calls = []
    real = swe.integrate

    def failing(*args):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(swe, "integrate", failing)
    with pytest.raises(KeyboardInterrupt):
        generate_swe(tmp_path / "d.zarr", 16, 32, trajectories=2, steps=3, seed=5, batch=1, progress=False)
    with pytest.raises(ValueError, match="incomplete"):
        open_store(tmp_path / "d.zarr")
    monkeypatch.setattr(swe, "integrate", real)
    generate_swe(tmp_path / "d.zarr", 16, 32, trajectories=2, steps=3, seed=5, progress=False)
    assert np.array_equal(open_store(tmp_path / "d.zarr")["vorticity"].values, ds_a["vorticity"].values)


def test_generate_swe_bad_grid(tmp_path):
    with pytest.raises(ValueError, match="supports grid"):
        generate_swe(tmp_path / "x.zarr", 8, 16, grid="equiangular-midpoint", progress=False)


# --- stats ------------------------------------------------------------------------------------
def test_stats_are_area_weighted_and_cover_tendencies(tmp_path):
    grid = Grid(9, 16)
    source = synthetic_store(tmp_path / "s.zarr", grid, six_hourly(5))
    stats = compute_stats(tmp_path / "s.zarr", start="2020-01-01T06", end="2020-01-02T00")
    weights = grid.area_weights.numpy()[:, None]
    t2m = source["2m_temperature"].values[1:5].astype(np.float64)
    mean = (t2m * weights).mean() / weights.mean()
    std = np.sqrt((((t2m - mean) ** 2) * weights).mean() / weights.mean())
    row = stats.sel(channel="2m_temperature")
    assert float(row["mean"]) == pytest.approx(mean, rel=1e-10)
    assert float(row["std"]) == pytest.approx(std, rel=1e-8)
    tendency = np.diff(t2m, axis=0)
    t_std = np.sqrt(
        (((tendency - (tendency * weights).mean() / weights.mean()) ** 2) * weights).mean() / weights.mean()
    )
    assert float(row["tendency_std"]) == pytest.approx(t_std, rel=1e-8)
    assert list(stats["channel"].values) == ["2m_temperature", "temperature/500", "temperature/850", "land_sea_mask"]
    assert stats.attrs["times"] == 4 and stats.attrs["tendency_pairs"] == 3
    loaded = load_stats(tmp_path / "s.zarr", ["temperature/850"])
    t850 = source["temperature"].sel(level=850).values[1:5]
    assert loaded.mean[0] == pytest.approx((t850 * weights).mean() / weights.mean(), rel=1e-6)


def test_datamodule_refuses_store_without_stats(tmp_path):
    synthetic_store(tmp_path / "s.zarr", Grid(5, 8), six_hourly(4))
    with pytest.raises(ValueError, match="s2forecast stats"):
        FieldDataset(tmp_path / "s.zarr", SampleSpec(("2m_temperature",), step_hours=6))


# --- samples -------------------------------------------------------------------------------------
@pytest.fixture
def era5_like(tmp_path):
    path = tmp_path / "era5.zarr"
    source = synthetic_store(path, Grid(7, 12), six_hourly(12), south_to_north=True)
    compute_stats(path)
    return path, source.sortby("latitude", ascending=False)


def test_samples_hold_history_targets_static_and_forcings(era5_like):
    path, source = era5_like
    spec = SampleSpec(("2m_temperature", "temperature"), (850,), "auto", ("cos_zenith", "time_of_day"), 2, 12.0, 3)
    dataset = FieldDataset(path, spec, start="2020-01-01", end="2020-01-03T18")
    assert dataset.channels == ("2m_temperature", "temperature/850")
    assert dataset.static_names == ("land_sea_mask",)
    assert dataset.forcing_channels == ("cos_zenith", "time_of_day_sin", "time_of_day_cos")
    # offsets -12 h .. +36 h inside 12 six-hourly times (0 h .. 66 h): t0 = 12, 18, 24, 30 h
    assert len(dataset) == 4
    sample = dataset[1]
    times = source["time"].values
    t0 = times[3].astype("datetime64[ns]")  # second valid t0 = 18:00
    assert sample["init_times"].item() == t0.astype("int64")
    expected_times = [t0 - np.timedelta64(12, "h"), t0] + [t0 + np.timedelta64(12 * k, "h") for k in (1, 2, 3)]
    stats = dataset.stats
    for k, t in enumerate(expected_times):
        state = sample["inputs"][k] if k < 2 else sample["targets"][k - 2]
        physical = state.numpy() * stats.std[:, None, None] + stats.mean[:, None, None]
        assert np.allclose(physical[0], source["2m_temperature"].sel(time=t).values, atol=1e-3)
        assert np.allclose(physical[1], source["temperature"].sel(time=t, level=850).values, atol=1e-3)
        forcing = forcing_fields(("cos_zenith",), t, source["latitude"].values, source["longitude"].values)
        assert np.allclose(sample["forcings"][k, 0].numpy(), forcing[0], atol=1e-6)
    lsm = dataset.static_stats
    static = sample["static"][0].numpy() * lsm.std[0] + lsm.mean[0]
    assert np.allclose(static, source["land_sea_mask"].values, atol=1e-5)


def test_a_split_ending_on_a_date_takes_all_of_that_day(era5_like):
    """A period's end written as a date is all of that day (``train_period: [1979-01-01, 2017-12-31]`` had
    left out Dec 31's 06, 12 and 18 h): with two 6 h targets the last sample starts at 06 h."""
    path, _ = era5_like
    spec = SampleSpec(("2m_temperature",), (), "auto", (), 1, 6.0, 2)
    dataset = FieldDataset(path, spec, start="2020-01-01", end="2020-01-02")
    starts = dataset.times[[int(sample[0]) for sample in dataset.samples]]
    assert starts.max() == np.datetime64("2020-01-02T06", "ns") and starts.size == 6
    exact = FieldDataset(path, spec, start="2020-01-01", end="2020-01-02T00:00:00")  # seconds: the instant
    assert len(exact.samples) == 3


def test_batches_carry_metadata_and_workers_read(era5_like):
    path, _ = era5_like
    module = ERA5DataModule(
        str(path), variables=["2m_temperature", "temperature"], levels=[500],
        train_period=("2020-01-01", "2020-01-02T00"), val_period=("2020-01-02T06", "2020-01-03T18"), test_period=None,
        forcings=["toa_radiation"],
        batch_size=2, num_workers=2, rollout_steps=2,
    )  # fmt: skip
    batches = list(module.train_dataloader())
    assert all(isinstance(b, Batch) for b in batches)
    batch = batches[0]
    assert batch.inputs.shape == (2, 1, 2, 7, 12) and batch.targets.shape == (2, 2, 2, 7, 12)
    assert batch.channels == ("2m_temperature", "temperature/500") and batch.grid == Grid(7, 12)
    assert batch.forcings.shape == (2, 3, 1, 7, 12) and batch.step_hours == 6.0
    seen = np.concatenate([b.init_datetimes for b in batches])
    assert seen.min() >= np.datetime64("2020-01-01") and seen.max() <= np.datetime64("2020-01-02")
    assert len(set(seen.tolist())) == len(seen)  # shuffled, each sample once
    val = np.concatenate([b.init_datetimes for b in module.val_dataloader()])
    assert val.min() >= np.datetime64("2020-01-02T06")
    with pytest.raises(ValueError, match="no 'test' split"):
        module.test_dataloader()
    assert batch.to("cpu").channels == batch.channels


def test_each_stage_builds_only_its_splits(tmp_path):
    """fit on data without the default test period (2020) works; only `test` needs it."""
    path = tmp_path / "era5.zarr"
    synthetic_store(path, Grid(5, 8), six_hourly(8, start="2019-01-01"))
    compute_stats(path)
    module = ERA5DataModule(
        str(path), variables=["2m_temperature"], train_period=("2019-01-01", "2019-01-01T12"),
        val_period=("2019-01-01T18", "2019-01-02T18"), forcings=[], batch_size=2, num_workers=0,
    )  # fmt: skip
    assert data_info(module)["channels"] == ["2m_temperature"]  # what the CLI links before setup
    module.setup("fit")
    assert sorted(module.datasets) == ["train", "val"] and len(list(module.train_dataloader())) == 1
    module.setup("validate")
    assert sorted(module.datasets) == ["train", "val"]
    with pytest.raises(UserError, match="^data.init_args.test_period: no sample .* between 2020-01-01T00 and 2020-12"):
        module.setup("test")  # which split's option: the message named a period alone


def test_swe_datamodule_never_crosses_trajectories(tmp_path):
    path = generate_swe(tmp_path / "swe.zarr", 8, 16, trajectories=3, steps=4, progress=False)
    compute_stats(path)
    module = SWEDataModule(
        str(path), rollout_steps=2, train_trajectories=(0, 2), val_trajectories=(2, 3), test_trajectories=None
    )
    train = module.dataset("train")
    assert len(train) == 2 * 3  # t0 = 0, 1, 2 of 0..4 in each of two trajectories
    batch = next(iter(module.val_dataloader()))
    assert batch.channels == ("geopotential_height", "vorticity", "divergence")
    assert batch.forcings.shape[2] == 0 and batch.static.shape[1] == 0


# --- bad data ------------------------------------------------------------------------------------
def test_bad_variables_levels_and_steps(era5_like):
    path, _ = era5_like
    with pytest.raises(ValueError, match=r"variables \['geopotential'\] are not in"):
        FieldDataset(path, SampleSpec(("geopotential",)))
    with pytest.raises(ValueError, match=r"levels \[300\] hPa are not in"):
        FieldDataset(path, SampleSpec(("temperature",), (300,)))
    with pytest.raises(ValueError, match="not a multiple of the time step"):
        FieldDataset(path, SampleSpec(("temperature",), step_hours=9))
    with pytest.raises(ValueError, match="no sample"):
        FieldDataset(path, SampleSpec(("temperature",), step_hours=6), start="2030-01-01")
    with pytest.raises(ValueError, match="static fields"):
        FieldDataset(path, SampleSpec(("temperature",), static=("geopotential_at_surface",)))
    with pytest.raises(ValueError, match="unknown forcing"):
        FieldDataset(path, SampleSpec(("temperature",), forcings=("moon",)))


EMPTY_LEVELS = ("data.init_args.levels is empty, which would leave out every pressure-level variable: give the "
                "pressure levels (hPa) to use, or null (or leave it out) for all of the store's")  # fmt: skip
EMPTY_VARIABLES = "data.init_args.variables is empty: list the store variables to predict, or leave it out"


@pytest.mark.parametrize(("options", "message"), [
    ({"variables": ("vorticity", "vorticity", "divergence")}, "variables ['vorticity'] are listed twice"),
    ({"variables": ("temperature",), "levels": (500, 850, 500)}, "levels ['500'] are listed twice"),
    ({"variables": ("t2m",), "forcings": ("toa_radiation", "toa_radiation")}, "forcings ['toa_radiation'] are"),
])  # fmt: skip
def test_a_name_listed_twice_is_refused(options, message):
    """A review: a variable twice made its channel twice, trained on, then refused at rollout by the
    forecast file's layout with advice a config user could not follow."""
    with pytest.raises(UserError, match=re.escape(message)):
        SampleSpec(**options)


def test_empty_variables_and_levels_are_refused(era5_like):
    """variables: [] crashed with an internal error; levels: [] dropped every pressure-level
    variable without a word (None, not [], is all of the store's levels)."""
    path, _ = era5_like
    with pytest.raises(UserError, match=r"^variables is empty: a sample needs at least one; list the store variables"):
        FieldDataset(path, SampleSpec((), static=(), forcings=()))
    with pytest.raises(UserError) as error:
        FieldDataset(path, SampleSpec(("2m_temperature", "temperature"), levels=(), static=(), forcings=()))
    assert str(error.value) == (
        "levels is empty, which would leave out every level of ['temperature']: give the pressure levels (hPa) to use, "
        "or None for all of the store's [500, 850]"
    )
    surface = FieldDataset(path, SampleSpec(("2m_temperature",), levels=(), static=()))  # nothing left out
    every_level = FieldDataset(path, SampleSpec(("2m_temperature", "temperature"), levels=None, static=()))
    assert surface.channels == ("2m_temperature",)
    assert every_level.channels == ("2m_temperature", "temperature/500", "temperature/850")
    with pytest.raises(UserError) as error:  # a config: both at once, each naming its key
        ERA5DataModule(str(path), variables=[], levels=[], train_period=None, val_period=None, test_period=None)
    assert str(error.value) == f"{EMPTY_VARIABLES}; {EMPTY_LEVELS}"
    with pytest.raises(UserError, match=f"^{re.escape(EMPTY_VARIABLES)}$"):
        SWEDataModule(str(path), variables=[])
    # null, as an empty YAML key gives: a TypeError ('NoneType' object is not iterable) taken for a bug
    with pytest.raises(UserError, match=f"^{re.escape(EMPTY_VARIABLES)}$"):
        ERA5DataModule(str(path), variables=None, train_period=None, val_period=None, test_period=None)
    with pytest.raises(UserError, match=f"^{re.escape(EMPTY_VARIABLES)}$"):
        SWEDataModule(str(path), variables=None)
    none = ERA5DataModule(str(path), variables=["2m_temperature"], static=None, forcings=None,
                          train_period=("2020-01-01", "2020-01-02"), val_period=None, test_period=None)  # fmt: skip
    assert none.spec.static == () and none.spec.forcings == ()


def test_an_empty_trajectory_range_is_refused_when_the_module_is_built(tmp_path):
    """test_trajectories [3, 3] was refused only by `s2forecast test`, after fit had run, and without the
    name of its option."""
    with pytest.raises(UserError) as error:
        SWEDataModule(str(tmp_path / "never_read.zarr"), train_trajectories=(0, 2), val_trajectories=(2, 2),
                      test_trajectories=(3, 3))  # fmt: skip
    assert str(error.value) == "; ".join(
        f"data.init_args.{name}_trajectories [{n}, {n}] is an empty range: give [first, stop), first < stop (stop "
        "excluded), or null for no such split"
        for name, n in (("val", 2), ("test", 3))
    )
    assert not (tmp_path / "never_read.zarr").exists()


@pytest.mark.parametrize("bounds", [(1,), 5, (0, 2.5), (True, 2), "0,2"])
def test_a_trajectory_range_that_is_no_range_is_one_line_from_python(tmp_path, bounds):
    """The CLI's types refuse them; from Python they gave a TypeError or an IndexError later."""
    with pytest.raises(UserError, match=rf"^data.init_args.val_trajectories {re.escape(repr(bounds))}"
                       r" is not a range: give \[first, stop\), two whole numbers"):  # fmt: skip
        SWEDataModule(str(tmp_path / "never_read.zarr"), val_trajectories=bounds)
    assert not (tmp_path / "never_read.zarr").exists()


def test_fit_refuses_empty_variables_in_one_line(swe_store, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        cli(["fit", *tiny_args(swe_store, tmp_path, "--data.init_args.variables", "[]")])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "Traceback" not in err and "internal error" not in err, err[-2000:]
    assert err.splitlines()[-1] == f"s2forecast fit: error: {EMPTY_VARIABLES}"
    assert list(tmp_path.iterdir()) == []  # refused before the run's directory is made


def test_statistics_of_another_tendency_step_are_named(era5_like):
    """Tendencies over the store's 6 h (stats' default) for a model of 12 h steps: a warning that
    names the fix (issue 28: hourly ERA5 and a 6 h model gave no sign)."""
    import warnings

    path, _ = era5_like
    with pytest.warns(UserWarning, match=r"tendencies over 6 h, but samples are 12 h apart.*--step-hours 12`"):
        FieldDataset(path, SampleSpec(("temperature",), step_hours=12))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FieldDataset(path, SampleSpec(("temperature",), step_hours=6))
        FieldDataset(path, SampleSpec(("temperature",), step_hours=12, rollout=0))  # inputs only: no tendencies
        # the same statistics and step again (a DataModule's next split): said once a process, not three times
        FieldDataset(path, SampleSpec(("temperature",), step_hours=12))


def test_a_value_beyond_float32_once_normalized_is_named_as_a_non_finite_one(tmp_path):
    """1e33 where the std is 1e-5 is finite in the store and inf once normalized: it reached the model
    and stopped the run as 'q contains NaN or infinite values', naming nothing."""
    import dataclasses

    import zarr

    path = tmp_path / "big.zarr"
    synthetic_store(path, Grid(5, 8), six_hourly(6))
    compute_stats(path)
    zarr.open_group(path, mode="r+")["2m_temperature"][2, 1, 3] = 3e38  # finite float32
    spec = SampleSpec(("2m_temperature",), step_hours=6)
    stats = load_stats(path, ["2m_temperature"])
    stats = dataclasses.replace(stats, std=np.float32([1e-2]))
    with pytest.raises(ValueError) as error:
        FieldDataset(path, spec, stats=stats)[1]
    assert str(error.value) == (
        f"2m_temperature at 2020-01-01T12 in {path} is beyond float32 once normalized (mean "
        f"{stats.mean[0]:g}, std 0.01): check its values and units; set nan_policy='skip' to skip such samples"
    )
    with pytest.warns(UserWarning, match="skipping the sample of init time 2020-01-01T06"):  # as they take NaN
        sample = FieldDataset(path, spec, stats=stats, nan_policy="skip")[1]
    assert torch.isfinite(sample["inputs"]).all()


def test_nan_policy(tmp_path):
    path = tmp_path / "nan.zarr"
    synthetic_store(path, Grid(5, 8), six_hourly(6), nan_at=(2, 1, 3))
    compute_stats(path, end="2020-01-01T06")
    spec = SampleSpec(("2m_temperature",), step_hours=6)
    with pytest.raises(ValueError, match=r"2m_temperature has non-finite values at 2020-01-01T12 in "):
        FieldDataset(path, spec)[1]
    dataset = FieldDataset(path, spec, nan_policy="skip")
    # named by its init time (not an index), and from s2forecast's own code: the CLI shows it as one line
    with pytest.warns(UserWarning, match="skipping the sample of init time 2020-01-01T06: 2m_temperature has") as seen:
        sample = dataset[1]
    assert seen[0].filename.endswith("fields.py")
    assert sample["init_times"].item() == np.datetime64("2020-01-01T18:00", "ns").astype("int64")
    assert torch.isfinite(sample["inputs"]).all()


def test_a_static_field_with_nan_is_named(tmp_path):
    """It passed stats and the DataModule, and stopped the run as 'q contains NaN or infinite values'."""
    import zarr

    path = tmp_path / "static_nan.zarr"
    synthetic_store(path, Grid(5, 8), six_hourly(6))
    zarr.open_group(path, mode="r+")["land_sea_mask"][2, 3] = np.nan
    compute_stats(path)
    dataset = FieldDataset(path, SampleSpec(("2m_temperature",), static=("land_sea_mask",), step_hours=6))
    with pytest.raises(ValueError) as error:
        dataset[0]
    assert str(error.value) == (
        f"static field land_sea_mask of {path} has 1 NaN or infinite points; fill them, or leave it out of the "
        "static fields"
    )


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("2020-13-01", None, "the period's start '2020-13-01' is not a time"),  # was "cannot read the input data"
        ("2020-01-02", "2020-01-01", r"the period \[2020-01-02, 2020-01-01\] starts after it ends; give it as \[start"),
    ],
)
def test_a_bad_period_is_named(tmp_path, start, end, message):
    path = tmp_path / "store.zarr"
    synthetic_store(path, Grid(5, 8), six_hourly(6))
    compute_stats(path)
    with pytest.raises(ValueError, match=message):
        FieldDataset(path, SampleSpec(("2m_temperature",), step_hours=6), start=start, end=end)


def test_real_era5_slice_has_no_six_hour_step(tmp_path):
    """The real ERA5 slice is 8 h then 7 h apart: a 6 h step does not exist and the error says so."""
    slice_path = tmp_path / "era5.zarr"
    with xr.open_dataset(ERA5_SLICE) as sample:
        ds = sample[["t2m"]].drop_vars(["expver", "number"]).load()
    ds = ds.rename(valid_time="time", t2m="2m_temperature")
    ds["2m_temperature"].attrs = cf_attributes("2m_temperature")
    ds.attrs = {"grid_kind": "equiangular", "s2forecast_complete": "true"}
    ds.to_zarr(slice_path, mode="w", zarr_format=3, consolidated=True)
    compute_stats(slice_path)
    with pytest.raises(ValueError, match=r"spacings \[7.0, 8.0\] h.*does not exist"):
        FieldDataset(slice_path, SampleSpec(("2m_temperature",), step_hours=6))
    assert len(FieldDataset(slice_path, SampleSpec(("2m_temperature",), step_hours=7))) == 1


def test_a_gap_that_leaves_no_sample_is_named_not_the_step(tmp_path):
    """A 6-hourly record missing two times: no window of 4 states 6 h apart fits between its gaps. The
    step is the store's own; the message said to choose a step the axis has."""
    path = tmp_path / "store.zarr"
    times = np.delete(six_hourly(12), [5, 6])  # 2020-01-02T06 and T12
    synthetic_store(path, Grid(5, 8), times)
    compute_stats(path)
    spec = SampleSpec(("2m_temperature",), step_hours=6, rollout=3)
    with pytest.raises(ValueError) as error:
        FieldDataset(path, spec, start="2020-01-01T12", end="2020-01-03T06")
    assert str(error.value) == (
        f"no sample of 1 input and 3 target states 6 h apart in {path} between 2020-01-01T12 and 2020-01-03T06: "
        "the record has gaps there (spacings [6.0, 18.0] h; e.g. 2020-01-02T06 does not exist), and no 4 "
        "consecutive states 6 h apart fit between them; choose another time range"
    )
    assert len(FieldDataset(path, spec)) == 4  # the whole record: 2 windows before the gap, 2 after


@pytest.mark.parametrize(
    ("start", "end", "shown"),
    [
        ("2020-01-01T00", "2020-01-01T06", "between 2020-01-01T00 and 2020-01-01T06: a sample spans 12 h and the "
                                           "store's times there (2020-01-01T00 .. 2020-01-01T06) 6 h"),
        ("2020-01-02T00", None, "between 2020-01-02T00 and 2020-01-02T06: a sample spans 12 h and the store's times "
                                "there (2020-01-02T00 .. 2020-01-02T06) 6 h"),
    ],
)  # fmt: skip
def test_a_period_shorter_than_a_sample_is_named_not_the_step(tmp_path, start, end, shown):
    """A period shorter than one sample's span was refused with the time axis' spacings, as if the step
    were wrong (it is the store's own 6 h)."""
    path = tmp_path / "store.zarr"
    synthetic_store(path, Grid(5, 8), six_hourly(6))
    compute_stats(path)
    spec = SampleSpec(("2m_temperature",), step_hours=6, rollout=2)
    with pytest.raises(ValueError) as error:
        FieldDataset(path, spec, start=start, end=end)
    message = str(error.value)
    assert f"no sample of 1 input and 2 target states 6 h apart in {path} {shown}" in message
    assert "give a period at least 12 h long" in message and "spacing" not in message
    assert len(FieldDataset(path, spec, start="2020-01-01T00", end="2020-01-01T12")) == 1
    with pytest.raises(ValueError) as error:
        FieldDataset(path, spec, start="2021-01-01")
    assert str(error.value) == (
        f"no sample of 1 input and 2 target states 6 h apart in {path} between 2021-01-01T00 and 2020-01-02T06: it "
        "has no time there (it holds 2020-01-01T00 .. 2020-01-02T06)"
    )


# --- forcings ------------------------------------------------------------------------------------
def test_cos_zenith_and_toa_radiation():
    lat, lon = np.array([0.0, 23.44, -60.0, 89.0]), np.array([0.0, 90.0, 180.0, 270.0])
    equinox_noon = np.datetime64("2024-03-20T12:00")
    cz = cos_zenith(equinox_noon, lat, lon)
    assert cz[0, 0] == pytest.approx(1.0, abs=0.01)  # sun overhead at (0, 0)
    assert cz[0, 2] == pytest.approx(-1.0, abs=0.01)  # antipode at midnight
    solstice_noon = np.datetime64("2024-06-21T12:00")
    assert cos_zenith(solstice_noon, lat, lon)[1, 0] == pytest.approx(1.0, abs=0.01)  # tropic of Cancer
    toa = forcing_fields(("toa_radiation",), equinox_noon, lat, lon)[0]
    assert toa.min() >= 0 and toa[0, 2] == 0 and toa[0, 0] == pytest.approx(1.0, abs=0.04)


@pytest.mark.parametrize("day", ["2024-03-20", "2023-09-23", "2024-06-21", "2024-12-31"])
def test_cos_zenith_is_continuous_across_midnight(day):
    """The fractional year counted the hour twice (the day of year with its fraction, plus the hour):
    the sun's declination jumped back a day at every 00 UTC (up to 0.0043 in cos_zenith)."""
    lat, lon = np.linspace(-80.0, 80.0, 9), np.arange(0.0, 360.0, 30.0)
    midnight = np.datetime64(day) + np.timedelta64(1, "D")
    before, after = (cos_zenith(midnight + np.timedelta64(s, "s"), lat, lon) for s in (-1, 1))
    # two seconds of the Earth's turn: at most 2 s x 7.3e-5 rad/s of hour angle
    assert np.abs(after - before).max() < 2 * 7.3e-5 * 1.01


# --- command line --------------------------------------------------------------------------------
def test_cli_generate_swe_and_stats(tmp_path, capsys):
    out = tmp_path / "swe.zarr"
    generate = ["generate-swe", "--out", str(out), "--nlat", "8", "--nlon", "16", "--trajectories", "2", "--steps",
                "2", "--no-progress"]  # fmt: skip
    cli(generate)
    assert capsys.readouterr().out == f"wrote {out}\n"
    cli(generate)  # a rerun on the complete store writes nothing, and says so
    assert capsys.readouterr().out == f"{out} was already complete: nothing to write\n"
    cli(["stats", str(out)])
    # each output's history ends with the command that wrote it (issue 28)
    assert open_store(out).attrs["history"].endswith(" s2forecast " + " ".join(generate))
    assert xr.open_zarr(out, group="stats").attrs["history"].endswith(f" s2forecast stats {out}")
    printed = capsys.readouterr().out
    assert "geopotential_height" in printed and "stored in" in printed
    assert "; tendencies over 1 h from 4 pairs)" in printed  # 2 trajectories of 2 hourly steps, never across
    assert load_stats(out, ["vorticity"]).std[0] > 0
    with pytest.raises(SystemExit):
        cli(["stats", str(tmp_path / "missing.zarr")])
    shutil.rmtree(out)


def test_a_static_field_stored_per_time_is_static(tmp_path):
    """CDS downloads and ARCO-ERA5 hold land_sea_mask with a time dim: it counted as a variable, so
    static="auto" left it out without a word and static=("land_sea_mask",) said the store had none."""
    grid, times = Grid(5, 8), six_hourly(6)
    source = synthetic_store(tmp_path / "s.zarr", grid, times)
    mask = source["land_sea_mask"]
    timed = source.assign(land_sea_mask=mask.expand_dims(time=times).transpose("time", "longitude", "latitude"))
    timed.to_zarr(tmp_path / "timed.zarr", mode="w", consolidated=True, zarr_format=3)
    compute_stats(tmp_path / "timed.zarr")
    for static in ("auto", ("land_sea_mask",)):
        dataset = FieldDataset(tmp_path / "timed.zarr", SampleSpec(("2m_temperature",), static=static, step_hours=6))
        assert dataset.static_names == ("land_sea_mask",)
        np.testing.assert_array_equal(dataset.physical_static("land_sea_mask"), mask.values)
    assert open_store(tmp_path / "timed.zarr")["land_sea_mask"].dims == ("latitude", "longitude")


def test_a_forcing_listed_twice_is_refused():
    """It trained (two channels recorded in the checkpoint), then every rollout failed with an internal error:
    rollout asks for each forcing once."""
    from s2forecast.data.forcings import forcing_channels

    for names in (("cos_zenith", "cos_zenith"), ("time_of_day", "toa_radiation", "time_of_day")):
        with pytest.raises(ValueError, match=rf"^forcing '{names[-1]}' is listed twice; list each forcing once$"):
            forcing_channels(names)


def test_a_dataset_iterates_to_its_end_and_takes_single_names(tmp_path):
    """``for sample in dataset`` never ended (an index past the end wrapped to sample 0); a single name
    was read as its letters (SampleSpec("2m_temperature"), load_stats(path, "vorticity")); a tuple of
    channels was an xarray key error."""
    from s2forecast.data import load_stats

    path = tmp_path / "s.zarr"
    synthetic_store(path, Grid(5, 8), six_hourly(6))
    compute_stats(path)
    dataset = FieldDataset(path, SampleSpec("2m_temperature", static="land_sea_mask", step_hours=6))
    assert dataset.channels == ("2m_temperature",) and dataset.static_names == ("land_sea_mask",)
    assert len(list(dataset)) == len(dataset) == 5
    with pytest.raises(IndexError):
        dataset[len(dataset)]
    assert dataset[-1]["init_times"] == dataset[len(dataset) - 1]["init_times"]
    one, both = load_stats(path, "2m_temperature"), load_stats(path, ("2m_temperature", "temperature/500"))
    assert one.mean.shape == (1,) and both.mean.shape == (2,) and both.mean[0] == one.mean[0]


def test_convert_era5_takes_one_path_and_one_variable_name(tmp_path):
    """A single path was read as its characters ('directory / holds no .nc files'), a single variable
    too ("unknown variable '2'")."""
    from s2forecast.data.convert_era5 import convert_era5

    out = convert_era5(str(ERA5_SLICE), tmp_path / "era5.zarr", variables="t2m", progress=False)
    assert [name for name in open_store(out).data_vars if name != "written"] == ["2m_temperature"]


def test_times_off_whole_seconds_are_warned_of(tmp_path):
    """A few times 1-500 ms off their step silently lost most tendency pairs (5 of 15) and samples."""
    times = six_hourly(6).copy()
    times[2] += np.timedelta64(500, "ms")
    synthetic_store(tmp_path / "s.zarr", Grid(5, 8), times)
    with pytest.warns(UserWarning, match=r"^1 time\(s\) of .*s\.zarr are not whole seconds \(e\.g\. "
                      r"2020-01-01T12:00:00\.500\): samples and tendencies pair times exactly"):  # fmt: skip
        compute_stats(tmp_path / "s.zarr")
