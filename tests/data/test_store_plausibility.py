"""Every reader of physical fields judges a store's values in the units they are labelled with
(issue 29: stats, climatology and rollout took °C labelled K and wrote "K" fields off by 273)."""

import re
import shutil

import numpy as np
import pytest
import xarray as xr
import zarr
from session_fixtures import tiny_args

from s2forecast.cli import main
from s2forecast.data.fields import FieldDataset, SampleSpec

MM_AS_M = (
    r"variable geopotential_height at time 2000-01-01T00: median [\d.e+]+ is outside the plausible range "
    r"-1000\.\.100000 m for geopotential_height; the values look like mm: convert them to m or fix the units attribute"
)


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main([str(arg) for arg in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast ")]
    assert exit.value.code == 2 and len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def mm_as_m(swe_store, tmp_path):
    """The SWE store with its layer depth in mm, still labelled m."""
    store = tmp_path / "mm.zarr"
    shutil.copytree(swe_store, store)
    depth = zarr.open_group(str(store), mode="r+")["geopotential_height"]
    depth[:] = depth[:] * 1000.0
    return store


def test_every_reader_refuses_values_in_other_units(mm_as_m, mse_run_1_epoch, tmp_path, capsys):
    before = sorted(p.name for p in (mm_as_m / "stats").iterdir())
    with pytest.raises(ValueError, match=MM_AS_M):
        FieldDataset(mm_as_m, SampleSpec(("geopotential_height", "vorticity"), static=(), step_hours=1.0))
    commands = {
        "stats": ["stats", mm_as_m],
        "climatology": ["climatology", mm_as_m, "--out", tmp_path / "clim.zarr"],
        "rollout": ["rollout", "--ckpt", mse_run_1_epoch.checkpoint, "--store", mm_as_m, "--steps", "1",
                    "--init-times", "2000-01-01T00", "--out", tmp_path / "f.nc", "--no-progress"],
        "fit": ["fit", *tiny_args(mm_as_m, tmp_path / "fit", "--trainer.max_steps", "1")],
    }  # fmt: skip
    for name, argv in commands.items():
        message = refused(argv, capsys)
        assert f"store {mm_as_m}: " in message and re.search(MM_AS_M, message), (name, message)
        assert "does not fit checkpoint" not in message, message  # the store's values, not the checkpoint
    assert sorted(p.name for p in (mm_as_m / "stats").iterdir()) == before
    assert not (tmp_path / "clim.zarr").exists() and not (tmp_path / "f.nc").exists()


def test_stats_and_climatology_refuse_degrees_celsius_labelled_kelvin(swe_store, tmp_path, capsys):
    store = tmp_path / "celsius.zarr"
    shutil.copytree(swe_store, store)
    opened = xr.open_zarr(store)
    celsius = np.random.default_rng(0).normal(15.0, 10.0, (opened.sizes["time"], 8, 16))
    extra = xr.Dataset({"2m_temperature": (("time", "latitude", "longitude"), celsius, {"units": "K"})},
                       coords={"time": opened["time"].values})  # fmt: skip
    extra.to_zarr(store, mode="a", zarr_format=3, consolidated=True)
    for argv in (
        ["stats", store, "--out", tmp_path / "stats.zarr"],
        ["climatology", store, "--out", tmp_path / "clim.zarr"],
    ):
        message = refused(argv, capsys)
        assert "variable 2m_temperature at time 2000-01-01T00: median 1" in message, message
        assert "the values look like degC: convert them to K or fix the units attribute" in message, message
    assert not (tmp_path / "clim.zarr").exists() and not (tmp_path / "stats.zarr").exists()


def test_a_plausible_store_passes_every_reader(swe_store):
    # the checks read one sample: the shared store (plausible) is accepted as before
    dataset = FieldDataset(swe_store, SampleSpec(("geopotential_height", "vorticity"), static=(), step_hours=1.0))
    assert len(dataset) > 0


def test_a_value_just_outside_its_range_is_not_shown_as_the_bound():
    """A review: "maximum 20000 is outside the plausible range 20000..90000" for a maximum of 19999.6."""
    from s2forecast.data.plausibility import field_problem, plausible_bounds

    (bounds,) = [b for b in plausible_bounds("geopotential_at_surface") if b.statistic == "max"]
    field = np.full((5, 8), bounds.low - 0.4)
    assert field_problem("geopotential_at_surface", field).startswith(f"maximum {bounds.low - 0.4:g} is outside")
    assert field_problem("2m_temperature", np.full((5, 8), 5.0)).startswith("median 5 is outside")  # as before
