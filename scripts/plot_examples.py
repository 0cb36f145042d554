#!/usr/bin/env python
"""The example plots of the README (docs/images/evaluate_*.png): ``s2forecast evaluate`` run, as a
user runs it, on the real ERA5 sample in tests/data with a synthetic forecast.

Steps: ``convert-era5`` turns the sample (3 times: 2026-03-25T21, 03-26T05, 03-26T12; 4-degree
equiangular grid) into a store; the synthetic "forecast" of each init time t at lead tau is the
truth at the valid time t + tau blurred with a spherical-harmonic heat kernel
exp(-l (l + 1) / (l_e (l_e + 1))) whose e-folding degree l_e = 40 / (1 + tau / 6 h) shrinks with
lead (a model that gets blurrier with lead, the behaviour the spectra reveal), band-limited to
the degrees l < 23 that the 46-latitude grid resolves, as a spectral model's output is; ``evaluate``
scores it against the store with persistence and a climatology computed from the store, and
writes its plots. The sample's irregular times give leads 7, 8 and 15 h, each verified by one
init time.

    python scripts/plot_examples.py --work /tmp/plot_examples --images docs/images

``--work`` (created; must not exist) keeps the store, forecast, results file and every plot;
``--images`` receives one plot of each kind, never replacing an existing file.
"""

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "data" / "era5_sample_slice.nc"
VARIABLES = ("2m_temperature", "mean_sea_level_pressure")
LEADS_H = (7, 8, 15)
MAP_LEADS_H = (8, 15)  # the init time 2026-03-25T21 has truth at both: the spectra average it
REGIONS = ["global", "tropics", "extra-tropics", "europe", "north-america"]
EXAMPLES = {  # file evaluate writes -> name in --images
    "2m_temperature_scores.png": "evaluate_scores.png",
    "2m_temperature_spectra.png": "evaluate_spectra.png",
    "2m_temperature_maps.png": "evaluate_maps.png",
    "scorecard_persistence.png": "evaluate_scorecard.png",
}


def blurred(field: xr.DataArray, e_folding_degree: float) -> np.ndarray:
    """(latitude, longitude) field on an equiangular grid, smoothed by exp(-l (l + 1) / (l_e (l_e + 1)))."""
    import torch
    from torch_harmonics import InverseRealSHT, RealSHT

    nlat, nlon = field.shape
    sht = RealSHT(nlat, nlon, lmax=(nlat + 1) // 2, grid="equiangular").double()  # degrees the grid resolves
    isht = InverseRealSHT(nlat, nlon, lmax=sht.lmax, mmax=sht.mmax, grid="equiangular").double()
    degree = torch.arange(sht.lmax, dtype=torch.float64)[:, None]
    kernel = torch.exp(-degree * (degree + 1) / (e_folding_degree * (e_folding_degree + 1)))
    return isht(sht(torch.from_numpy(field.values.astype(np.float64))) * kernel).numpy()


def synthetic_forecast(store: xr.Dataset) -> xr.Dataset:
    """(time, prediction_timedelta, latitude, longitude) per variable: the blurred truth at each
    valid time in the store, NaN-free; valid times outside the store get the last truth (never scored)."""
    init_times = store["time"].values
    leads = pd.to_timedelta(list(LEADS_H), unit="h")
    data = {}
    for name in VARIABLES:
        values = np.empty((init_times.size, leads.size, store.sizes["latitude"], store.sizes["longitude"]))
        for i, init in enumerate(init_times):
            for k, lead in enumerate(leads):
                valid = init + lead.to_timedelta64()
                truth = store[name].sel(time=valid) if valid in init_times else store[name].isel(time=-1)
                values[i, k] = blurred(truth, 40.0 / (1.0 + lead / pd.Timedelta(6, "h")))
        dims = ("time", "prediction_timedelta", "latitude", "longitude")
        data[name] = (dims, values.astype(np.float32), {"units": store[name].attrs["units"]})
    coords = {"time": init_times, "prediction_timedelta": leads.values,
              "latitude": store["latitude"], "longitude": store["longitude"]}  # fmt: skip
    return xr.Dataset(data, coords=coords)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="working directory to create (must not exist)")
    parser.add_argument("--images", type=Path, help="directory to copy one plot of each kind into")
    args = parser.parse_args(argv)
    if args.work.exists():
        print(
            f"{parser.prog}: error: --work {args.work} exists; give a new directory",
            file=sys.stderr,
        )
        return 2
    if args.images is not None:
        taken = [args.images / name for name in EXAMPLES.values() if (args.images / name).exists()]
        if taken:
            print(
                f"{parser.prog}: error: {', '.join(map(str, taken))} exist; remove them first to remake them",
                file=sys.stderr,
            )
            return 2

    from s2forecast.data.convert_era5 import convert_era5
    from s2forecast.evaluation.evaluate import evaluate
    from s2forecast.provenance import command

    args.work.mkdir(parents=True)
    store_path = convert_era5([SAMPLE], args.work / "era5.zarr", variables=list(VARIABLES), progress=False)
    with xr.open_zarr(store_path) as store:
        forecast = synthetic_forecast(store.load())
    forecast.to_netcdf(args.work / "forecast.nc")
    with command(["python", *sys.argv]):
        results = evaluate(
            args.work / "forecast.nc", store_path, args.work / "metrics.nc", map_leads=list(MAP_LEADS_H),
            progress=False, regions=REGIONS,
        )  # fmt: skip
    plots = {Path(p).name: Path(p) for p in results.attrs["plot_files"]}
    print("\n".join(str(p) for p in plots.values()))
    if args.images is not None:
        args.images.mkdir(parents=True, exist_ok=True)
        for written, name in EXAMPLES.items():
            shutil.copyfile(plots[written], args.images / name)
            print(f"copied {written} -> {args.images / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
