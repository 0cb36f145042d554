"""generate-swe integrates trajectories in batches: the batched solver step against
torch-harmonics' own, results independent of the batch (seeds, resumption, the stability
check), and the --batch option's bad inputs."""

import math
import sys

import numpy as np
import pytest
import torch
import zarr

import s2forecast.data.swe as swe
from s2forecast.cli import main as cli
from s2forecast.data import generate_swe, open_store

VARIABLES = ("geopotential_height", "vorticity", "divergence")


def solver(nlat: int, nlon: int, grid: str, dt_seconds: float):
    from torch_harmonics.examples import ShallowWaterSolver

    lmax = math.ceil(nlat / 3)
    return ShallowWaterSolver(nlat, nlon, dt_seconds, lmax=lmax, mmax=lmax, grid=grid).double()


def fields(path) -> np.ndarray:
    """(time, 3, nlat, nlon) of a store."""
    ds = open_store(path)
    return np.stack([ds[name].values for name in VARIABLES], axis=1)


@pytest.mark.parametrize("grid", ["equiangular", "legendre-gauss"])
def test_batched_step_is_the_solvers_step(grid):
    """One state: bit for bit the solver's own timestep; a batch: each member within float64 rounding."""
    s = solver(16, 32, grid, 600.0)
    states = swe.initial_conditions(s, [3, 7, 11])
    with torch.no_grad():
        alone = [s.timestep(state.clone(), 6) for state in states]
        assert torch.equal(swe.timestep(s, states[:1].clone(), 6)[0], alone[0])
        together = swe.timestep(s, states.clone(), 6)
    for member, reference in zip(together, alone, strict=True):
        assert not torch.equal(reference, states[0])  # it moved
        scale = reference.abs().amax(dim=(-2, -1), keepdim=True)  # per field: phi ~ 3e5, vorticity ~ 1e-5
        assert ((member - reference).abs() / scale).max() < 1e-12


def test_initial_condition_depends_on_the_seed_only():
    s = solver(8, 16, "equiangular", 600.0)
    batch = swe.initial_conditions(s, [4, 9])
    assert torch.equal(swe.initial_conditions(s, [9])[0], batch[1])
    assert not torch.equal(batch[0], batch[1])
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    swe.initial_conditions(s, [4])
    assert torch.equal(torch.rand(3), before)  # the caller's random stream is untouched


@pytest.mark.slow  # three 16x32 stores and a fourth
def test_store_does_not_depend_on_the_batch(tmp_path):
    """Batches of 1, 2 (uneven: 2 + 1) and 3: the same trajectories within float32 rounding, and
    trajectory 0 the same as in a store of one trajectory."""
    kwargs = dict(trajectories=3, steps=4, seed=2, progress=False)
    stores = {b: fields(generate_swe(tmp_path / f"b{b}.zarr", 16, 32, batch=b, **kwargs)) for b in (1, 2, 3)}
    reference = stores[1]
    assert np.all(np.diff(reference[:5, 0], axis=0) != 0)  # evolving
    for b in (2, 3):
        scale = np.abs(reference).max(axis=(0, 2, 3), keepdims=True)  # per variable
        assert (np.abs(stores[b] - reference) / scale).max() < 1e-5
    single = fields(generate_swe(tmp_path / "one.zarr", 16, 32, batch=4, **{**kwargs, "trajectories": 1}))
    np.testing.assert_array_equal(single, reference[:5])


def test_interrupted_batch_resumes_with_the_trajectories_not_written(tmp_path, monkeypatch):
    path = tmp_path / "part.zarr"
    kwargs = dict(trajectories=3, steps=3, seed=1, batch=2, solver_dt_seconds=1800, progress=False)
    real, calls = swe.integrate, []

    def interrupt(solver, seeds, *args):
        calls.append(list(seeds))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(solver, seeds, *args)

    monkeypatch.setattr(swe, "integrate", interrupt)
    with pytest.raises(KeyboardInterrupt):
        generate_swe(path, 8, 16, **kwargs)
    assert calls == [[1_000_003, 1_000_004], [1_000_005]]
    assert zarr.open_group(path, mode="r")["written"][:].tolist() == [True] * 8 + [False] * 4
    with pytest.raises(ValueError, match="incomplete"):
        open_store(path)

    calls.clear()
    monkeypatch.setattr(
        swe, "integrate", lambda solver, seeds, *args: calls.append(list(seeds)) or real(solver, seeds, *args)
    )
    generate_swe(path, 8, 16, **kwargs)
    assert calls == [[1_000_005]]  # only the trajectory not written
    straight = generate_swe(tmp_path / "straight.zarr", 8, 16, **kwargs)
    np.testing.assert_array_equal(fields(path), fields(straight))
    # a rerun on the complete store writes nothing: it took no lock, so it must not open the store to write
    # (it marked it complete again and re-consolidated its metadata, unlocked)
    real_open = zarr.open_group
    monkeypatch.setattr(zarr, "open_group", lambda *a, **k: pytest.fail("written") if k.get("mode") == "r+"
                        else real_open(*a, **k))  # fmt: skip
    calls.clear()
    generate_swe(path, 8, 16, **kwargs)
    assert calls == []


def test_unstable_member_of_a_batch(tmp_path, monkeypatch):
    """Trajectory 1 of a batch of 3 goes unphysical at stored step 2: the error names trajectory 1
    and its step. A store this run made goes (the same command would fail at the same step, and its
    fix, a smaller step, is another store); one it resumed stays, and the message says to overwrite
    it (resuming it with another step is refused)."""
    real, checks = swe.unphysical, []

    def second_member_at_step_2(fields, mean_depth):
        checks.append(1)
        return "layer depth -5 m, made up" if len(checks) == 3 * 2 + 2 else real(fields, mean_depth)

    monkeypatch.setattr(swe, "unphysical", second_member_at_step_2)
    path = tmp_path / "swe.zarr"
    with pytest.raises(ValueError) as error:
        generate_swe(path, 8, 16, trajectories=3, steps=4, batch=3, solver_dt_seconds=1800, progress=False)
    assert str(error.value).startswith(
        "the shallow-water integration of trajectory 1 became unstable at stored step 2 (2000-01-02T02): "
        "layer depth -5 m, made up; the solver step of 1800 s is too long for the 8x16 grid"
    ), error.value
    assert str(error.value).endswith(f"nothing is left at {path}") and not path.exists()
    monkeypatch.setattr(swe, "unphysical", real)
    with monkeypatch.context() as patched:  # a store whose first trajectory was written: resumed, then unstable
        patched.setattr(swe, "integrate", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            generate_swe(path, 8, 16, trajectories=3, steps=4, batch=3, solver_dt_seconds=1800, progress=False)
    checks.clear()
    monkeypatch.setattr(swe, "unphysical", second_member_at_step_2)
    with pytest.raises(ValueError) as error:
        generate_swe(path, 8, 16, trajectories=3, steps=4, batch=3, solver_dt_seconds=1800, progress=False)
    assert str(error.value).endswith(f"{path} stays incomplete: rerun with the smaller step and --overwrite")
    assert zarr.open_group(path, mode="r")["written"][:].tolist() == [True] * 5 + [False] * 10
    monkeypatch.setattr(swe, "unphysical", real)
    reference = fields(generate_swe(tmp_path / "ref.zarr", 8, 16, trajectories=1, steps=4, solver_dt_seconds=1800,
                                    progress=False))  # fmt: skip
    np.testing.assert_allclose(zarr.open_group(path, mode="r")["vorticity"][:5], reference[:, 1], rtol=1e-5, atol=1e-12)


def test_initial_vorticity_and_divergence_have_no_global_mean(tmp_path):
    """torch-harmonics' random start fills degree 0 of vorticity and divergence too: a constant global
    mean (2-13 % of their rms) that no wind field has. Gone, in the store at every time."""
    s = solver(16, 32, "equiangular", 600.0)
    states = swe.initial_conditions(s, [0, 1, 2])
    assert torch.equal(states[:, 1:, 0], torch.zeros_like(states[:, 1:, 0]))
    assert states[:, 0, 0, 0].abs().min() > 0  # the layer's mean depth stays
    ds = open_store(generate_swe(tmp_path / "swe.zarr", 16, 32, trajectories=1, steps=3, progress=False))
    from s2forecast.geometry import Grid

    weights = Grid(16, 32).quadrature_weights.numpy()  # the grid's own rule: cos(lat) is off by 1e-3 at 16 rows
    for name in ("vorticity", "divergence"):
        field = ds[name].values
        mean = (field * weights).sum(axis=(1, 2)) / weights.sum()
        assert np.abs(mean).max() < 1e-3 * np.sqrt((field**2).mean()), name


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trajectories", "2", "--seed", "100000000000000"], "--seed must be in 0 .. 18446688733643 for 2 traj"),
        (["--nlat", "100000", "--nlon", "200000", "--steps", "1"], "than this machine's 16.0 GB: use a smaller grid"),
        (["--nlat", "64", "--nlon", "128", "--steps", "2000000", "--dt-hours", "0.01"], "store fewer --steps per"),
        (["--nlat", "256", "--nlon", "512", "--steps", "999", "--trajectories", "16"], "GB: lower --batch (one traj"),
    ],
)
def test_runs_that_cannot_finish_are_refused_before_writing(tmp_path, capsys, monkeypatch, argv, message):
    """A seed past torch's 2**64 (a traceback after the store was made), a grid or a batch larger than
    memory (running out of it after hours, or leaving an empty store that blocked the fixed rerun)."""
    monkeypatch.setattr(swe, "physical_memory", lambda: 16 * 10**9)
    out = tmp_path / "swe.zarr"
    with pytest.raises(SystemExit) as exit:
        cli(["generate-swe", "--nlat", "8", "--nlon", "16", "--out", str(out), "--no-progress", *argv])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_progress_counts_states(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # bars are drawn on a terminal only
    cli(["generate-swe", "--out", str(tmp_path / "s.zarr"), "--nlat", "8", "--nlon", "16", "--trajectories", "3",
         "--steps", "2", "--batch", "2"])  # fmt: skip
    err = capsys.readouterr().err
    assert "shallow water" in err and "9/9" in err, err


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "argument --batch: must be an integer >= 1, got '0'"),
        ("-2", "argument --batch: must be an integer >= 1, got '-2'"),
        ("two", "argument --batch: must be an integer >= 1, got 'two'"),
        ("1.5", "argument --batch: must be an integer >= 1, got '1.5'"),
    ],
)
def test_cli_refuses_a_bad_batch(tmp_path, capsys, value, message):
    out = tmp_path / "s.zarr"
    with pytest.raises(SystemExit) as exit_info:
        cli(["generate-swe", "--out", str(out), "--nlat", "8", "--nlon", "16", "--batch", value, "--no-progress"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not out.exists()


def test_api_refuses_a_bad_batch_before_writing(tmp_path):
    out = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match=r"^--batch must be >= 1, got 0$"):
        generate_swe(out, 8, 16, trajectories=2, steps=2, batch=0, progress=False)
    assert not out.exists()


def test_a_batch_does_not_touch_an_existing_store_from_other_options(tmp_path):
    """--batch is not part of the store's identity: resuming with another batch is fine, and other
    options are still refused without touching the store."""
    path = generate_swe(tmp_path / "s.zarr", 8, 16, trajectories=2, steps=2, batch=1, progress=False)
    before = fields(path)
    generate_swe(path, 8, 16, trajectories=2, steps=2, batch=2, progress=False)  # complete: nothing to do
    with pytest.raises(ValueError, match="other inputs or options"):
        generate_swe(path, 8, 16, trajectories=2, steps=3, batch=2, progress=False)
    np.testing.assert_array_equal(fields(path), before)


@pytest.mark.parametrize("dt_hours", [1 / 6, 1 / 3, 0.1, 6.0])
def test_times_are_whole_steps_apart(dt_hours):
    """1/6 h as float hours made 00:10:00.000000001 and 00:19:59.999999998: spacings that are not one
    step, so fit refused the store. Every spacing within a trajectory is the same step, to the ms."""
    times, trajectory = swe.trajectory_times(2, 7, dt_hours)
    spacings = np.diff(times[trajectory == 1])
    assert np.unique(spacings).size == 1
    assert abs(spacings[0] / np.timedelta64(1, "ms") - dt_hours * 3_600_000) < 0.5


def test_a_store_of_any_millisecond_step_trains_at_that_step(tmp_path, capsys):
    """1/7 h steps were stored 514.286 s apart while fit stepped 514 s (whole seconds): no sample. A
    step under a millisecond made every time the same."""
    from s2forecast.data.fields import FieldDataset, SampleSpec
    from s2forecast.data.stats import compute_stats

    store = generate_swe(tmp_path / "swe.zarr", 8, 16, trajectories=1, steps=3, dt_hours=1 / 7,
                         solver_dt_seconds=600, progress=False)  # fmt: skip
    compute_stats(store)
    spec = SampleSpec(("vorticity",), static=(), step_hours=1 / 7)
    assert len(FieldDataset(store, spec)) == 3
    with pytest.raises(SystemExit):
        cli(["generate-swe", "--out", str(tmp_path / "tiny.zarr"), "--nlat", "8", "--nlon", "16", "--dt-hours", "1e-7"])
    assert "--dt-hours must be at least a millisecond (2.78e-07 h), got 1e-07" in capsys.readouterr().err
    assert not (tmp_path / "tiny.zarr").exists()
