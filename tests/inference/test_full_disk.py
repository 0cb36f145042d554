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
