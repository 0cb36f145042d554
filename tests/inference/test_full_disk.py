"""A NetCDF forecast that cannot be written (a full disk) is one line naming the output, and nothing is
left behind (issue 29: a 21-line "NetCDF: HDF error" traceback)."""

import pytest

from s2forecast.cli import main
from s2forecast.inference import forecast_file


@pytest.mark.parametrize("error", [RuntimeError("NetCDF: HDF error"), OSError(-101, "NetCDF: HDF error")])
def test_netcdf_write_error_is_one_line(mse_run_1_epoch, swe_store, tmp_path, capsys, monkeypatch, error):
    real = forecast_file.ForecastFile.close

    def full_disk(self):  # what netCDF4 raises when HDF5 cannot flush the file to a full disk
        real(self)
        raise error

    monkeypatch.setattr(forecast_file.ForecastFile, "close", full_disk)
    out = tmp_path / "f.nc"
    with pytest.raises(SystemExit) as exit:
        main(["rollout", "--ckpt", str(mse_run_1_epoch.checkpoint), "--store", str(swe_store), "--steps", "1",
              "--init-times", "2000-01-01T00", "--out", str(out), "--no-progress"])  # fmt: skip
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"s2forecast rollout: error: could not write {out}: NetCDF: HDF error (disk full? ")
    assert lines[0].endswith(f"free there); nothing was changed at {out}")
    assert list(tmp_path.iterdir()) == []


def test_a_disk_too_small_is_a_warning_with_the_forecasts_size(mse_run_1_epoch, swe_store, tmp_path, monkeypatch):
    """Before forecasting, the free space of --out's disk against the forecast's fields (init times x
    leads x channels x points, float32): a warning naming both, and the forecast is written all the same."""
    import shutil
    import types

    import xarray as xr

    from s2forecast.output import DiskSpaceWarning, byte_size

    monkeypatch.setattr(shutil, "disk_usage", lambda path: types.SimpleNamespace(free=1000))
    out = tmp_path / "f.nc"
    with pytest.warns(DiskSpaceWarning) as warned:
        main(["rollout", "--ckpt", str(mse_run_1_epoch.checkpoint), "--store", str(swe_store), "--steps", "2",
              "--init-times", "2000-01-01T00,2000-01-01T01", "--out", str(out), "--no-progress"])  # fmt: skip
    with xr.open_dataset(out) as forecast:
        size = sum(variable.size * 4 for variable in forecast.data_vars.values())
        assert forecast.sizes["time"] == 2 and forecast.sizes["prediction_timedelta"] == 2
    (message,) = [str(w.message) for w in warned if w.category is DiskSpaceWarning]
    expected = f"{tmp_path} has 1000 bytes free; the forecast takes up to {byte_size(size)} uncompressed; "
    assert message.startswith(expected)
