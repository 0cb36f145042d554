"""URLs for ``evaluate --forecast`` and ``--climatology`` (zarr over fsspec, as for the truth), and a
URL refused as any command's ``--out`` in one line (issue 29: "not found: http:/... does not exist",
the URL folded by a path). A real HTTP server on 127.0.0.1, no mocks."""

import functools
import http.server
import threading

import numpy as np
import pytest
import xarray as xr

from s2forecast.cli import main
from s2forecast.evaluation.climatology import write_climatology
from s2forecast.evaluation.evaluate import evaluate
from s2forecast.output import Output


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def forecast_of(truth: xr.Dataset) -> xr.Dataset:
    """The truth's first two times as init times, each persisted 1 and 2 h ahead plus a small offset."""
    forecast = truth[["vorticity"]].isel(time=[0, 1]).drop_vars(["trajectory"], errors="ignore").drop_encoding()
    forecast = forecast.expand_dims(prediction_timedelta=np.array([1, 2], dtype="timedelta64[h]").astype("m8[ns]"))
    return (forecast.transpose("time", ...) + 1e-7).assign_attrs({})


@pytest.fixture(scope="module")
def served(swe_store, tmp_path_factory):
    """A forecast (zarr and NetCDF) and a climatology of the SWE store, served over HTTP."""
    root = tmp_path_factory.mktemp("served")
    forecast = forecast_of(xr.open_zarr(swe_store))
    forecast["vorticity"].attrs = {"units": "s**-1"}
    forecast.to_zarr(root / "forecast.zarr", zarr_format=3, consolidated=True)
    forecast.to_netcdf(root / "forecast.nc")
    write_climatology(swe_store, root / "clim.zarr")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main([str(arg) for arg in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit.value.code == 2 and len(lines) == 1, lines
    return lines[0]


def test_forecast_and_climatology_urls_score_as_the_local_files(served, swe_store, tmp_path):
    root, url = served
    local = evaluate(root / "forecast.zarr", swe_store, tmp_path / "local.nc", climatology=root / "clim.zarr",
                     plots=False, progress=False)  # fmt: skip
    secret = url.replace("http://", "http://alice:s3cret@")  # kept out of the results (a review found it there)
    remote = evaluate(f"{secret}/forecast.zarr", swe_store, tmp_path / "remote.nc", climatology=f"{secret}/clim.zarr",
                      plots=False, progress=False)  # fmt: skip
    xr.testing.assert_equal(local["vorticity"], remote["vorticity"])
    redacted = url.replace("http://", "http://***@")
    assert remote.attrs["forecast"] == f"{redacted}/forecast.zarr"
    assert remote.attrs["climatology_source"] == f"{redacted}/clim.zarr"
    assert b"s3cret" not in (tmp_path / "remote.nc").read_bytes()


def test_url_inputs_that_cannot_be_read_are_one_line(served, swe_store, tmp_path, capsys):
    root, url = served
    base = ["evaluate", "--truth", swe_store, "--out", tmp_path / "m.nc", "--no-plots", "--no-progress"]
    message = refused([*base, "--forecast", f"{url}/forecast.nc"], capsys)
    assert f"the forecast {url}/forecast.nc is a NetCDF file at a URL: s2forecast reads zarr stores at URLs" in message
    message = refused([*base, "--forecast", f"{url}/absent.zarr"], capsys)
    assert f"cannot read the forecast at {url}/absent.zarr: " in message
    message = refused([*base, "--forecast", root / "forecast.zarr", "--climatology", f"{url}/absent.zarr"], capsys)
    assert f"cannot read the climatology at {url}/absent.zarr: " in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "--forecast", "f.nc", "--truth", "s.zarr"],
        ["rollout", "--ckpt", "m.ckpt", "--store", "s.zarr", "--steps", "1", "--init-times", "2000-01-01"],
        ["climatology", "s.zarr"],
        ["stats", "s.zarr"],
        ["convert-era5", "era5.nc"],
        ["generate-swe"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_url_as_out_is_refused_by_every_writer(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = refused([*argv, "--out", "http://example.org/out.zarr"], capsys)
    assert "argument --out: 'http://example.org/out.zarr' is a URL; s2forecast writes its outputs to local paths" in (
        message
    )
    assert list(tmp_path.iterdir()) == []


def test_a_url_as_output_is_refused_by_the_library(served, swe_store, tmp_path):
    root, url = served
    with pytest.raises(ValueError, match=r"--out s3://bucket/m\.nc is a URL; s2forecast writes its outputs to local"):
        evaluate(root / "forecast.zarr", swe_store, "s3://bucket/m.nc", plots=False, progress=False)
    with pytest.raises(ValueError, match=r"--out gs://bucket/f\.zarr is a URL"):
        Output("gs://bucket/f.zarr", "forecast", directory=True)
    assert sorted(p.name for p in root.iterdir()) == ["clim.zarr", "forecast.nc", "forecast.zarr"]
