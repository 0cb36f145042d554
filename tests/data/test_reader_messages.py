"""One-line errors that say what is wrong (issue 29): a trajectory range the store lacks (not "time
spacing"), statistics that are there but unreadable (not "holds no statistics"), and a time axis
too long to make (its size, not "out of memory")."""

import shutil

import pytest

from s2forecast.cli import main
from s2forecast.data.fields import FieldDataset, SampleSpec
from s2forecast.data.stats import compute_stats

SPEC = SampleSpec(("geopotential_height", "vorticity"), static=(), step_hours=1.0)


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main([str(arg) for arg in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit.value.code == 2 and len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("trajectories", "rollout", "expected"),
    [
        ((5, 7), 1, "trajectories [5, 7) are not in {store}: it holds trajectories 0..2 (give [first, stop), stop "
                    "excluded)"),
        ((2, 2), 1, "trajectories [2, 2) is an empty range: give [first, stop), first < stop (stop excluded)"),
        # partly past the store: it served the trajectories there were, in silence
        ((1, 5), 1, "trajectories [1, 5) run past {store}: it holds trajectories 0..2; give a range inside them, "
                    "e.g. [1, 3) (stop excluded)"),
        ((0, 2), 9, "no sample of 1 input and 9 target states 1 h apart fits in trajectories [0, 2) of {store}: "
                    "the longest holds 7 times"),
    ],
)  # fmt: skip
def test_trajectory_ranges_without_samples_say_why(swe_store, trajectories, rollout, expected):
    spec = SampleSpec(SPEC.variables, static=(), step_hours=1.0, rollout=rollout)
    with pytest.raises(ValueError) as error:
        FieldDataset(swe_store, spec, trajectories=trajectories)
    assert expected.format(store=swe_store) in str(error.value)
    assert "spacing" not in str(error.value)


def test_unreadable_statistics_say_so_and_why(swe_store, tmp_path):
    stats = tmp_path / "stats.zarr"
    compute_stats(swe_store, out=stats)
    (stats / "zarr.json").write_text("{ not json")
    with pytest.raises(ValueError, match=rf"cannot read the statistics {stats}: JSONDecodeError: .*; write them again"):
        FieldDataset(swe_store, SPEC, stats_path=stats)
    shutil.rmtree(stats)
    with pytest.raises(ValueError, match=rf"{stats} holds no statistics; write them with `s2forecast stats"):
        FieldDataset(swe_store, SPEC, stats_path=stats)


def test_statistics_of_another_shape_or_time_are_named(swe_store, tmp_path):
    """--out statistics that lack a channel told the user to rerun `s2forecast stats STATS` (which
    fails: it is no store); those of the same store before it was rewritten were used silently."""
    import xarray as xr

    from s2forecast.data import generate_swe
    from s2forecast.data.stats import load_stats

    stats, partial = tmp_path / "stats.zarr", tmp_path / "partial.zarr"
    compute_stats(swe_store, out=stats)
    xr.open_zarr(stats).load().sel(channel=["vorticity"]).to_zarr(partial, zarr_format=3)
    with pytest.raises(ValueError) as error:
        load_stats(swe_store, ["geopotential_height", "vorticity"], stats_path=partial)
    assert str(error.value) == (
        f"the statistics {partial} lack channels ['geopotential_height'] of {swe_store}; compute them for this "
        f"store: `s2forecast stats {swe_store} --out {partial} --overwrite`"
    )
    store = generate_swe(tmp_path / "swe.zarr", 8, 16, trajectories=2, steps=3, solver_dt_seconds=1800, progress=False)
    compute_stats(store, out=stats, overwrite=True)
    FieldDataset(store, SPEC, stats_path=stats)  # current: taken
    generate_swe(store, 8, 16, trajectories=2, steps=3, solver_dt_seconds=1800, seed=7, overwrite=True, progress=False)
    with pytest.raises(ValueError, match=rf"the statistics {stats} were computed from {store} before it was rewritten "
                       rf"\(generation \w+, now \w+\): compute them again, `s2forecast stats {store} --out {stats} "
                       r"--overwrite`"):  # fmt: skip
        FieldDataset(store, SPEC, stats_path=stats)


def test_a_step_past_what_nanoseconds_hold_is_one_line(swe_store):
    """step_hours=1.0008e13 wrapped around to 6 h in nanoseconds and was taken."""
    spec = SampleSpec(SPEC.variables, static=(), step_hours=10007999171940.436)
    with pytest.raises(ValueError, match=r"step_hours=10007999171940.436 is not a step between 0 and 878400 hours"):
        FieldDataset(swe_store, spec)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--steps", "1000000000000"], "--trajectories 8 x --steps 1000000000000 of 1 h (41666666667 days each) span "
                                       "9.13e+08 years from 2000-01-01T00, past 2262-04-11"),
        (["--trajectories", "1000000000000"], "--trajectories 1000000000000 x --steps 48 of 1 h (3 days each) span "
                                              "8.21e+09 years"),
        (["--steps", "100000000000", "--dt-hours", "1e-6"], "make a time axis of 8e+11 times: its coordinates alone "
                                                             "need 1.27e+04 GiB of memory"),
    ],
)  # fmt: skip
def test_a_time_axis_too_long_to_make_is_refused_with_its_size(tmp_path, capsys, options, expected):
    message = refused(["generate-swe", "--out", tmp_path / "s.zarr", "--nlat", "8", "--nlon", "16", *options], capsys)
    assert expected in message and "out of memory" not in message, message
    assert list(tmp_path.iterdir()) == []


def test_dates_past_2262_are_refused_not_wrapped_around(swe_store, tmp_path, capsys):
    message = refused(["stats", swe_store, "--start", "3000-01-01", "--out", tmp_path / "stats.zarr"], capsys)
    assert "--start '3000-01-01' is outside the dates a datetime64[ns] time axis holds (1677-09-21 .. 2262-04-11)" in (
        message
    )
    assert list(tmp_path.iterdir()) == []  # nor a temporary --out left behind by the refusal


def test_other_layouts_dim_names_are_named_with_their_renames(tmp_path):
    """A store with lat/lon (or CDS's valid_time, pressure_level) was refused naming what is missing,
    not the rename that fixes it."""
    import numpy as np
    import xarray as xr

    from s2forecast.data.store import open_store, rename_hint

    ds = xr.Dataset(
        {"t": (("valid_time", "pressure_level", "lat", "lon"), np.zeros((2, 1, 3, 4), np.float32))},
        coords={"lat": [60.0, 0.0, -60.0], "lon": [0.0, 90.0, 180.0, 270.0]},
    )
    hint = (
        "; rename them as s2forecast reads them: ds.rename(lat='latitude', lon='longitude', valid_time='time', "
        "pressure_level='level') (or convert CDS files with convert-era5)"
    )
    assert rename_hint(ds) == hint and rename_hint(ds.rename(lat="latitude", lon="longitude", valid_time="time",
                                                               pressure_level="level")) == ""  # fmt: skip
    ds.to_zarr(tmp_path / "cds.zarr", zarr_format=3, consolidated=True)
    with pytest.raises(ValueError) as error:
        open_store(tmp_path / "cds.zarr")
    assert str(error.value).endswith(hint)


PA_FIX = (
    "is in Pa; s2forecast reads pressure levels in hPa: divide it by 100 (xarray: ds['level'] = ds['level'] / "
    "100, units 'hPa')"
)
LABEL_FIX = ("is labelled Pa, and its values look like hPa: set its units attribute to 'hPa', or if they really are "
             "Pa, divide it by 100 (xarray: ds['level'] = ds['level'] / 100, units 'hPa')")  # fmt: skip


@pytest.mark.parametrize(("levels", "units", "shown"), [([50000.0, 85000.0], None, f"(50000, 85000) {PA_FIX}"),
                                                        ([500.0, 850.0], "Pa", f"(500, 850) {LABEL_FIX}")])  # fmt: skip
def test_pressure_levels_in_pa_are_refused_naming_the_fix(tmp_path, capsys, levels, units, shown):
    """CMIP's plev is in Pa: renamed to level as the hint said, 50000 'hPa' made channels
    temperature/50000 in silence, and stats refused geopotential's correct values as implausible."""
    import xarray as xr
    import zarr
    from test_datamodules import six_hourly, synthetic_store

    from s2forecast.data.store import rename_hint
    from s2forecast.geometry import Grid

    assert rename_hint(xr.Dataset(coords={"plev": levels})) == (
        "; rename them as s2forecast reads them: ds.rename(plev='level') and give the levels in hPa (CMIP's plev is "
        "in Pa) (or convert CDS files with convert-era5)"
    )
    path = tmp_path / "pa.zarr"
    synthetic_store(path, Grid(5, 8), six_hourly(2), levels=levels)
    if units:
        group = zarr.open_group(path, mode="r+")
        group["level"].attrs["units"] = units
        zarr.consolidate_metadata(path)
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(SystemExit):
        main(["stats", str(path)])
    assert capsys.readouterr().err.strip() == f"s2forecast stats: error: the level coordinate of store {path} {shown}"
    assert sorted(p.name for p in path.iterdir()) == before


def test_a_store_with_its_times_under_another_name_is_told_how_to_rename_it(tmp_path, capsys):
    """The shared ERA5 sample's layout: times as hours in 'time_index', and a JSON file of another
    program in the store. stats said "no 'time' dimension" without a fix, after zarr's two-line
    warning that the JSON file is no zarr node."""
    import warnings

    import numpy as np
    import xarray as xr

    path = tmp_path / "sample.zarr"
    lat, lon = np.linspace(90, -90, 5), np.arange(8) * 45.0
    xr.Dataset(
        {"2m_temperature": (("time_index", "latitude", "longitude"), np.full((3, 5, 8), 280.0, np.float32))},
        coords={"time_index": [755880, 755887, 755894], "latitude": lat, "longitude": lon},
    ).to_zarr(path, zarr_format=3, consolidated=False)  # as the sample: zarr lists the store's files
    (path / "sample_info.json").write_text('{"title": "a sample"}')
    with pytest.raises(SystemExit), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["stats", str(path), "--out", str(tmp_path / "stats.zarr")])
    assert not [w for w in caught if "Zarr hierarchy" in str(w.message)]
    assert capsys.readouterr().err.strip() == (
        f"s2forecast stats: error: store {path} has no 'time' dimension; dims are {{'time_index': 3, 'latitude': 5, "
        "'longitude': 8}: if 'time_index' holds the times, rename it to 'time' with datetime64 (or CF-encoded) values "
        "(xarray: ds.rename(time_index='time')) and write the store again"
    )
    # the same line from the other readers: rollout said the file may be damaged (a KeyError), climatology
    # called the store "the truth" and gave no fix
    ckpt = tmp_path / "model.ckpt"
    ckpt.write_bytes(b"never read")
    rollout = ["rollout", "--ckpt", str(ckpt), "--store", str(path), "--steps", "1", "--out", str(tmp_path / "f.nc")]
    for argv in (rollout, ["climatology", str(path), "--out", str(tmp_path / "clim.zarr")]):
        with pytest.raises(SystemExit):
            main(argv)
        assert capsys.readouterr().err.strip() == (
            f"s2forecast {argv[0]}: error: store {path} has no 'time' dimension; dims are {{'time_index': 3, "
            "'latitude': 5, 'longitude': 8}: if 'time_index' holds the times, rename it to 'time' with datetime64 (or "
            "CF-encoded) values (xarray: ds.rename(time_index='time')) and write the store again"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ckpt", "sample.zarr"]
