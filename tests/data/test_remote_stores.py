"""Stores researchers already have, used as they are (issues 15 and 28): a zarr v2 store in
WeatherBench2's real layout of its 64x32 ERA5 (dims ``(time, level, longitude, latitude)``,
ascending latitudes, cell-centred grid, an extra variable) served over HTTP from 127.0.0.1, walked
through the new user's path: statistics kept elsewhere, training from two layered configs,
forecasts from the URL and from a NetCDF of initial conditions in WB2's names, an
initial-condition ensemble of the deterministic model, its evaluation with the ensemble plots;
and not one byte of the store changes. No mocks: a real HTTP server and fsspec's HTTP filesystem."""

import functools
import hashlib
import http.server
import re
import shlex
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
import yaml
from torch._utils import ExceptionWrapper

from s2forecast.cli import main as cli
from s2forecast.data.store import open_store
from s2forecast.evaluation.report import open_results
from s2forecast.models.data_spec import DataSpec
from s2forecast.models.forecaster import Forecaster
from s2forecast.user_errors import user_error_message

REPO = Path(__file__).parents[2]
LEVELS = [500, 850]


def wb2_store(path: Path) -> Path:
    """WB2's era5 64x32 store as published: zarr v2, dims (time, level, longitude, latitude),
    latitudes ascending (cell centres, no poles), one time step per chunk."""
    rng = np.random.default_rng(0)
    lat = np.linspace(-87.1875, 87.1875, 32)
    lon = np.arange(64) * 5.625
    times = pd.date_range("2020-01-01", periods=16, freq="6h").values
    coslat = np.cos(np.radians(lat))
    t2m = 288.0 - 30.0 * (1 - coslat**2)[None, None, :] + rng.normal(0, 1.0, (16, 64, 32))
    z = 9.80665 * (np.array([5500.0, 1450.0])[None, :, None, None] + 200.0 * coslat) + rng.normal(
        0, 50, (16, 2, 64, 32)
    )
    t = np.array([250.0, 275.0])[None, :, None, None] + 20.0 * coslat + rng.normal(0, 1.0, (16, 2, 64, 32))
    ds = xr.Dataset(
        {
            "2m_temperature": (("time", "longitude", "latitude"), t2m.astype(np.float32), {"units": "K"}),
            "geopotential": (("time", "level", "longitude", "latitude"), z.astype(np.float32),
                             {"units": "m**2 s**-2"}),
            "temperature": (("time", "level", "longitude", "latitude"), t.astype(np.float32), {"units": "K"}),
            "10m_wind_speed": (("time", "longitude", "latitude"), rng.random((16, 64, 32)).astype(np.float32),
                               {"units": "m s**-1"}),  # not used by the model: never read
        },
        coords={"time": times, "level": np.array(LEVELS, dtype=np.int64), "latitude": lat, "longitude": lon},
    )  # fmt: skip
    ds.chunk({"time": 1}).to_zarr(path, zarr_format=2, consolidated=True)
    return path


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    failing: dict[str, int] = {}  # a part of a path -> the HTTP status the server answers it with

    def log_message(self, *args):
        pass

    def do_GET(self):
        status = next((code for part, code in self.failing.items() if part in self.path), None)
        if status is None:
            super().do_GET()
        else:
            self.send_error(status, "injected")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    wb2_store(root / "era5_64x32.zarr")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/era5_64x32.zarr"
    server.shutdown()


def network_size(state_dict: dict) -> int:
    return sum(value.numel() for value in state_dict.values())


@pytest.mark.slow  # the whole new-user path over HTTP
def test_wb2_store_over_http_trains_forecasts_and_scores_untouched(served, tmp_path, capsys):
    root, url = served
    before = digest(root)
    # the fixture is WB2's layout as published, read as it is
    source = xr.open_zarr(root / "era5_64x32.zarr", consolidated=True)
    assert source["geopotential"].dims == ("time", "level", "longitude", "latitude")
    assert source["2m_temperature"].dims == ("time", "longitude", "latitude")
    assert (root / "era5_64x32.zarr" / ".zmetadata").is_file() and not (root / "era5_64x32.zarr" / "zarr.json").exists()
    assert np.all(np.diff(source["latitude"].values) > 0)
    ds = open_store(url)
    assert float(ds["latitude"][0]) > float(ds["latitude"][-1])  # north -> south for the model
    stats = tmp_path / "stats.zarr"
    cli(["stats", url, "--out", str(stats), "--end", "2020-01-03T18", "--no-progress"])

    # fit from two configs: a base and an overlay that changes one nested network option
    base = yaml.safe_load((REPO / "configs" / "swe" / "s2_neighborhood.yaml").read_text())
    base["model"]["network"].update(embed_dim=8, num_layers=1)
    base["model"]["warmup_steps"] = 1
    base["data"] = {"class_path": "s2forecast.training.datamodule.ERA5DataModule", "init_args": {
        "store": url, "stats": str(stats), "variables": ["2m_temperature", "geopotential", "temperature"],
        "levels": LEVELS, "step_hours": 6, "train_period": ["2020-01-01", "2020-01-03T18"], "val_period": None,
        "test_period": None, "num_workers": 0, "batch_size": 2}}  # fmt: skip
    base["trainer"].update(max_steps=2, enable_progress_bar=False, limit_val_batches=0, default_root_dir=str(tmp_path))
    base["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path / "runs")
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "wider.yaml").write_text(yaml.safe_dump({"model": {"network": {"embed_dim": 12}}}))
    cli(["fit", "--config", str(tmp_path / "base.yaml"), "--config", str(tmp_path / "wider.yaml")])
    checkpoint = next((tmp_path / "runs").rglob("last.ckpt"))
    state = torch.load(checkpoint, weights_only=True)
    network = {**base["model"]["network"], "embed_dim": 12}  # merged key by key, not replaced
    assert state["hyper_parameters"]["network"] == network
    spec = DataSpec.from_dict(state["hyper_parameters"]["data"])
    trained = {k: v for k, v in state["state_dict"].items() if k.startswith("forecaster.net.")}
    assert network_size(trained) == network_size(Forecaster("spherical", network, spec).net.state_dict())
    assert network_size(trained) != network_size(Forecaster("spherical", {"embed_dim": 12}, spec).net.state_dict())

    # forecasts from the URL
    forecast = tmp_path / "forecast.nc"
    inits = ["2020-01-03T00", "2020-01-03T06"]
    cli(["rollout", "--ckpt", str(checkpoint), "--store", url, "--steps", "2", "--init-times", ",".join(inits),
         "--out", str(forecast), "--no-progress"])  # fmt: skip
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {forecast}: 2 initialization times x 2 steps"
    with xr.open_dataset(forecast) as written:
        assert written.attrs["initial_conditions"] == url and written.attrs["checkpoint"] == str(checkpoint.resolve())
        for option in ("--ckpt", str(checkpoint), "--init-times", "--out", str(forecast)):
            assert option in written.attrs["history"]
        from_url = written.load()

    # ... and from a NetCDF of those initial conditions in WB2's names and order, north to south
    # as WB2's 0.25-degree stores and the CDS's files run
    ic = tmp_path / "initial_conditions.nc"
    state0 = source[["2m_temperature", "geopotential", "temperature"]].sel(time=np.array(inits, "datetime64[ns]"))
    state0.isel(latitude=slice(None, None, -1)).to_netcdf(ic)
    with xr.open_dataset(ic) as written:
        assert written["temperature"].dims == ("time", "level", "longitude", "latitude")
        assert written["latitude"].values[0] > 0
    from_file = tmp_path / "from_file.nc"
    cli(["rollout", "--ckpt", str(checkpoint), "--store", str(ic), "--steps", "2", "--init-times", ",".join(inits),
         "--out", str(from_file), "--no-progress"])  # fmt: skip
    with xr.open_dataset(from_file) as written:
        for name in ("2m_temperature", "geopotential", "temperature"):
            np.testing.assert_array_equal(written[name].values, from_url[name].values)

    # an initial-condition ensemble of the deterministic model, from the same file
    ensemble = tmp_path / "ensemble.nc"
    cli(["rollout", "--ckpt", str(checkpoint), "--store", str(ic), "--steps", "2", "--init-times", ",".join(inits),
         "--members", "3", "--perturbation", "spherical-noise", "--perturbation-scale", "0.1", "--seed", "0",
         "--out", str(ensemble), "--no-progress"])  # fmt: skip
    assert f"wrote {ensemble}: 2 initialization times x 2 steps x 3 members" in capsys.readouterr().out
    with xr.open_dataset(ensemble) as written:
        members = written["temperature"].values  # (time, lead, realization, level, lat, lon)
        assert written.sizes["realization"] == 3 and np.isfinite(members).all()
        # smooth noise crosses zero: members differ at nearly every point, not necessarily all
        assert (members[:, :, 0] != members[:, :, 1]).mean() > 0.9

    # evaluated against the URL, with the ensemble's plots
    metrics = tmp_path / "metrics.nc"
    evaluate = ["evaluate", "--forecast", str(ensemble), "--truth", url, "--out", str(metrics), "--regions",
                "global", "--variables", "temperature", "--no-progress"]  # fmt: skip
    cli(evaluate)
    scores = open_results(metrics)
    for metric in ("crps", "spread", "spread_skill", "ensemble_mean_rmse"):
        values = scores["temperature"].sel(metric=metric, source="forecast")
        assert np.isfinite(values.values).all(), metric
    assert scores.attrs["truth"] == url and scores.attrs["forecast"] == str(ensemble.resolve())
    assert scores.attrs["history"].endswith(shlex.join(["s2forecast", *evaluate]))
    plots = {path.name for path in (tmp_path / "metrics_plots").iterdir()}
    expected = {f"temperature_{level}hPa_{kind}.png" for level in LEVELS for kind in ("ensemble", "rank_histogram")}
    assert expected <= plots, plots
    csv = pd.read_csv(metrics.with_suffix(".csv"))
    hist = csv[(csv.metric == "rank_histogram") & (csv.variable == "temperature")]
    assert sorted(hist["rank"].astype(int).unique()) == [0, 1, 2, 3]
    np.testing.assert_allclose(hist.groupby(["level", "lead_hours"]).value.sum(), 1.0, rtol=1e-6)
    assert digest(root) == before  # nothing written into the source store


def history_of(attrs: dict, argv: list) -> None:
    """The output's last history line is a UTC timestamp and the command line, shell-quoted."""
    stamp, _, line = attrs["history"].splitlines()[-1].partition(" ")
    assert line == shlex.join(["s2forecast", *map(str, argv)]) and stamp.endswith("Z"), attrs["history"]


def test_outputs_record_urls_as_given_and_the_command_line_without_secrets(served, tmp_path, capsys):
    """Issue 28: a URL input is recorded as given (not resolved as a path), with the whole command;
    a password in it is not, in outputs or in error lines (a review found it written verbatim)."""
    _, url = served
    secret = url.replace("http://", "http://alice:s3cret@")
    stats = ["stats", secret, "--out", tmp_path / "my stats.zarr", "--end", "2020-01-02T18", "--no-progress"]
    cli([str(a) for a in stats])
    attrs = xr.open_zarr(tmp_path / "my stats.zarr").attrs
    redacted = url.replace("http://", "http://***@")
    assert attrs["source"] == redacted
    history_of(attrs, [redacted if arg == secret else arg for arg in stats])
    message = refused(["stats", secret.replace("era5", "nope"), "--out", tmp_path / "x.zarr"], capsys)
    assert "cannot read the zarr store at http://***@" in message and "s3cret" not in message, message
    assert message.endswith("; check the URL (the store's root) and that its server answers"), message
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
    message = refused(["stats", url], capsys)  # a URL is never written into, whoever wrote the store
    assert message == (f"s2forecast stats: error: {url} is a URL: nothing is written into it; put its statistics in a "
                       f"local store of their own: s2forecast stats {url} --out STATS.zarr (and stats: STATS.zarr in "
                       "the DataModule)")  # fmt: skip
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        message = refused(["stats", "gs://weatherbench2/datasets/era5/x.zarr", "--out", tmp_path / "s.zarr"], capsys)
        assert (
            "reading gs:// URLs needs gcsfs: pip install gcsfs (in a clone of s2forecast: pip install '.[gcs]')"
            in message
        )
    local = root / "era5_64x32.zarr"
    message = refused(["stats", local, "--out", local / "stats"], capsys)
    assert "lies inside the input" in message
    message = refused(["stats", url, "--out", tmp_path / "s.zarr", "--storage-options", "[1]"], capsys)
    assert "--storage-options" in message and "must be a JSON object" in message
    # a bad value is described, not printed: it holds credentials (a review found the token in the line)
    for value in ('{"headers": {"Authorization": "Bearer s3cret"}', '"s3cret"'):
        message = refused(["stats", url, "--out", tmp_path / "s.zarr", "--storage-options", value], capsys)
        assert "must be a JSON object" in message and "s3cret" not in message, message
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
    # the token is in no output, checkpoint or log but the fit's config.yaml (kept to rerun it; a review
    # found it in outputs' history, in hparams.yaml and in last.ckpt)
    holding = {path.name for path in tmp_path.rglob("*") if path.is_file() and b"s3cret" in path.read_bytes()}
    assert holding == {"config.yaml"}, holding
    hparams = yaml.safe_load(next(tmp_path.rglob("hparams.yaml")).read_text())
    assert hparams["storage_options"] == {"headers": {"Authorization": "***"}}


def test_a_chunk_the_server_fails_is_one_line_naming_it(served, tmp_path, capsys, monkeypatch):
    """An HTTP error on one chunk part-way (aiohttp's ClientResponseError, no OSError) was a traceback
    reported as a bug, in the command and from a DataLoader worker (a review found it)."""
    _, url = served
    monkeypatch.setattr(QuietHandler, "failing", {"/2m_temperature/3.": 500})
    message = refused(["stats", url, "--out", tmp_path / "s.zarr", "--no-progress"], capsys)
    assert re.search(
        r"reading http://\S+/2m_temperature/3\.\S* failed: HTTP 500 injected; .* rerun the command", message
    )
    assert not (tmp_path / "s.zarr").exists()
    try:  # as a DataLoader worker reads it: torch sends the error back and re-raises it (ExceptionWrapper)
        xr.open_zarr(url)["2m_temperature"].isel(time=3).load()
    except Exception:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(RuntimeError) as worker:  # torch cannot rebuild aiohttp's exception: a RuntimeError
        wrapped.reraise()
    assert re.match(r"reading http://\S+/2m_temperature/3\.\S* failed: HTTP 500", user_error_message(worker.value))
