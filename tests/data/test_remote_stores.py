"""Stores researchers already have, used as they are (issue 15): a WeatherBench2-layout zarr v2
store (ascending latitudes, cell-centred 64x32 grid, an extra variable) served over HTTP from
127.0.0.1 trains a model with statistics kept elsewhere, forecasts and is scored from its URL,
and not one byte of it changes. No mocks: a real HTTP server and fsspec's HTTP filesystem."""

import functools
import hashlib
import http.server
import shlex
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from s2forecast.cli import main as cli
from s2forecast.data.store import open_store
from s2forecast.evaluation.report import open_results

REPO = Path(__file__).parents[2]


def wb2_store(path: Path) -> Path:
    """WB2's era5 64x32 layout: time, level, latitude (ascending, cell centres), longitude."""
    rng = np.random.default_rng(0)
    lat = np.linspace(-87.1875, 87.1875, 32)
    lon = np.arange(64) * 5.625
    times = pd.date_range("2020-01-01", periods=16, freq="6h").values
    t2m = 288.0 - 30.0 * np.sin(np.radians(lat))[None, :, None] ** 2 + rng.normal(0, 1.0, (16, 32, 64))
    z500 = 9.80665 * (5500.0 + 200.0 * np.cos(np.radians(lat))[None, None, :, None]) + rng.normal(
        0, 50, (16, 1, 32, 64)
    )
    ds = xr.Dataset(
        {
            "2m_temperature": (("time", "latitude", "longitude"), t2m.astype(np.float32), {"units": "K"}),
            "geopotential": (("time", "level", "latitude", "longitude"), z500.astype(np.float32),
                             {"units": "m**2 s**-2"}),
            "10m_wind_speed": (("time", "latitude", "longitude"), rng.random((16, 32, 64)).astype(np.float32),
                               {"units": "m s**-1"}),  # not used by the model: never read
        },
        coords={"time": times, "level": np.array([500], dtype=np.int64), "latitude": lat, "longitude": lon},
    )  # fmt: skip
    ds.to_zarr(path, zarr_format=2, consolidated=True)
    return path


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    wb2_store(root / "era5_64x32.zarr")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/era5_64x32.zarr"
    server.shutdown()


@pytest.mark.slow  # a whole pipeline over HTTP
def test_wb2_store_over_http_trains_forecasts_and_scores_untouched(served, tmp_path):
    root, url = served
    before = digest(root)
    ds = open_store(url)
    assert float(ds["latitude"][0]) > float(ds["latitude"][-1])  # north -> south for the model
    stats = tmp_path / "stats.zarr"
    cli(["stats", url, "--out", str(stats), "--end", "2020-01-03T18"])
    config = [
        "--config", str(REPO / "configs" / "swe" / "s2_neighborhood.yaml"),
        "--data", "s2forecast.training.datamodule.ERA5DataModule", "--data.init_args.store", url,
        "--data.init_args.stats", str(stats), "--data.init_args.variables", "[2m_temperature, geopotential]",
        "--data.init_args.levels", "[500]", "--data.init_args.step_hours", "6",
        "--data.init_args.train_period", "[2020-01-01, 2020-01-03T18]",
        "--data.init_args.val_period", "null", "--data.init_args.test_period", "null",
        "--data.init_args.num_workers", "0", "--data.init_args.batch_size", "2",
        "--model.network.embed_dim", "8", "--model.network.num_layers", "1", "--model.warmup_steps", "1",
        "--trainer.max_steps", "2", "--trainer.enable_progress_bar", "false", "--trainer.limit_val_batches", "0",
        "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    cli(["fit", *config])
    checkpoint = next((tmp_path / "runs").rglob("last.ckpt"))
    forecast = tmp_path / "forecast.nc"
    cli(["rollout", "--ckpt", str(checkpoint), "--store", url, "--steps", "2", "--init-times",
         "2020-01-03T00,2020-01-03T06", "--out", str(forecast), "--no-progress"])  # fmt: skip
    metrics = tmp_path / "metrics.nc"
    cli(["evaluate", "--forecast", str(forecast), "--truth", url, "--out", str(metrics), "--no-plots",
         "--no-progress"])  # fmt: skip
    scores = open_results(metrics)
    assert np.isfinite(scores["2m_temperature"].sel(metric="rmse").values).all()
    assert scores.attrs["truth"] == url and scores.attrs["forecast"] == str(forecast.resolve())
    assert scores.attrs["history"].endswith(shlex.join(["s2forecast", "evaluate", "--forecast", str(forecast),
                                                        "--truth", url, "--out", str(metrics), "--no-plots",
                                                        "--no-progress"]))  # fmt: skip
    with xr.open_dataset(forecast) as written:
        assert written.attrs["initial_conditions"] == url and written.attrs["checkpoint"] == str(checkpoint.resolve())
        for option in ("--ckpt", str(checkpoint), "--init-times", "--out", str(forecast)):
            assert option in written.attrs["history"]
    assert digest(root) == before  # nothing written into the source store


def history_of(attrs: dict, argv: list) -> None:
    """The output's last history line is a UTC timestamp and the command line, shell-quoted."""
    stamp, _, line = attrs["history"].splitlines()[-1].partition(" ")
    assert line == shlex.join(["s2forecast", *map(str, argv)]) and stamp.endswith("Z"), attrs["history"]


def test_outputs_record_urls_verbatim_and_the_command_line(served, tmp_path):
    """Issue 28: a URL input is recorded as given (not resolved as a path), with the whole command."""
    _, url = served
    stats = [
        "stats", url, "--out", tmp_path / "my stats.zarr", "--end", "2020-01-02T18", "--no-progress"
    ]  # fmt: skip
    cli([str(a) for a in stats])
    attrs = xr.open_zarr(tmp_path / "my stats.zarr").attrs
    assert attrs["source"] == url
    history_of(attrs, stats)
    climatology = ["climatology", url, "--out", tmp_path / "clim.zarr", "--no-progress"]
    cli([str(a) for a in climatology])
    attrs = xr.open_zarr(tmp_path / "clim.zarr").attrs
    assert attrs["climatology_truth"] == url
    history_of(attrs, climatology)


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        cli([str(a) for a in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("s2forecast ")]
    assert exit.value.code == 2 and len(lines) == 1, lines
    return lines[0]


def test_remote_and_foreign_store_errors(served, tmp_path, capsys):
    root, url = served
    before = digest(root)
    assert "cannot read the zarr store at " in refused(["stats", url.replace("era5", "nothing"), "--out",
                                                        tmp_path / "s.zarr"], capsys)  # fmt: skip
    message = refused(["stats", url], capsys)
    assert "was not written by s2forecast, so nothing is written into it" in message and "--out STATS.zarr" in message
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        message = refused(["stats", "gs://weatherbench2/datasets/era5/x.zarr", "--out", tmp_path / "s.zarr"], capsys)
        assert "reading gs:// URLs needs gcsfs: pip install 's2forecast[gcs]'" in message
    local = root / "era5_64x32.zarr"
    message = refused(["stats", local, "--out", local / "stats"], capsys)
    assert "lies inside the input" in message
    message = refused(["stats", url, "--out", tmp_path / "s.zarr", "--storage-options", "[1]"], capsys)
    assert "--storage-options" in message and "must be a JSON object" in message
    assert digest(root) == before and not (tmp_path / "s.zarr").exists()


class TokenHandler(QuietHandler):
    """Serves only requests that carry the bearer token, as a private bucket would."""

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == "Bearer s3cret":
            return True
        self.send_error(403, "token required")
        return False

    def do_GET(self):
        if self._authorized():
            super().do_GET()

    def do_HEAD(self):
        if self._authorized():
            super().do_HEAD()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    root = tmp_path_factory.mktemp("guarded")
    wb2_store(root / "era5_64x32.zarr")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(TokenHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/era5_64x32.zarr"
    server.shutdown()


@pytest.mark.slow  # stats, fit, rollout, evaluate, climatology over HTTP
def test_storage_options_reach_every_reader(guarded, tmp_path, capsys):
    """--storage-options (here: the header a private HTTP store needs) on stats, fit, rollout,
    evaluate and climatology; without it each command ends in one line and writes nothing."""
    root, url = guarded
    before = digest(root)
    token = '{"headers": {"Authorization": "Bearer s3cret"}}'
    stats = tmp_path / "stats.zarr"
    message = refused(["stats", url, "--out", stats], capsys)
    assert "cannot read the zarr store at " in message and "403" in message and "--storage-options" in message
    cli(["stats", url, "--out", str(stats), "--end", "2020-01-03T18", "--storage-options", token])
    config = [
        "--config", str(REPO / "configs" / "swe" / "s2_neighborhood.yaml"),
        "--data", "s2forecast.training.datamodule.ERA5DataModule", "--data.init_args.store", url,
        "--data.init_args.storage_options", token,
        "--data.init_args.stats", str(stats), "--data.init_args.variables", "[2m_temperature, geopotential]",
        "--data.init_args.levels", "[500]", "--data.init_args.step_hours", "6",
        "--data.init_args.train_period", "[2020-01-01, 2020-01-03T18]",
        "--data.init_args.val_period", "null", "--data.init_args.test_period", "null",
        "--data.init_args.num_workers", "0", "--data.init_args.batch_size", "2",
        "--model.network.embed_dim", "8", "--model.network.num_layers", "1", "--model.warmup_steps", "1",
        "--trainer.max_steps", "1", "--trainer.enable_progress_bar", "false", "--trainer.limit_val_batches", "0",
        "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    cli(["fit", *config])
    checkpoint = next((tmp_path / "runs").rglob("last.ckpt"))
    forecast = tmp_path / "forecast.nc"
    rollout = ["rollout", "--ckpt", checkpoint, "--store", url, "--steps", "1", "--init-times", "2020-01-03T00",
               "--out", forecast, "--no-progress"]  # fmt: skip
    assert "cannot read the zarr store at " in refused(rollout, capsys)
    assert not forecast.exists()
    cli([str(a) for a in rollout] + ["--storage-options", token])
    assert np.isfinite(xr.open_dataset(forecast)["2m_temperature"].values).all()
    evaluate = ["evaluate", "--forecast", forecast, "--truth", url, "--out", tmp_path / "metrics.nc", "--no-plots",
                "--no-progress"]  # fmt: skip
    assert "cannot read the zarr store at " in refused(evaluate, capsys)
    assert not (tmp_path / "metrics.nc").exists()
    cli([str(a) for a in evaluate] + ["--storage-options", token])
    assert (tmp_path / "metrics.nc").exists()
    climatology = ["climatology", url, "--out", tmp_path / "clim.zarr", "--no-progress"]
    assert "cannot read the zarr store at " in refused(climatology, capsys)
    assert not (tmp_path / "clim.zarr").exists()
    cli([str(a) for a in climatology] + ["--storage-options", token])
    assert "2m_temperature" in xr.open_zarr(tmp_path / "clim.zarr")
    assert digest(root) == before
