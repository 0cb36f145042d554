"""Compression of gridded fields by the codecs s2forecast could write them with: one JSON line per
variable and codec (ratio, encode and decode GB/s, one thread).

    python scripts/bench_codecs.py STORE [--repeat 5]

STORE: a zarr store (e.g. the shared ERA5 sample, ../shared/data/era5_sample_1deg.zarr); every
variable with at least 3 dims is read whole as float32 and compressed as one buffer.
Compared: Blosc LZ4 with byte shuffle (zarr 2's default) and with bit shuffle
(``s2forecast.output.field_compressors``).
"""

import argparse
import json
import time
from pathlib import Path

import numcodecs
import numpy as np
import xarray as xr

CODECS = {
    "lz4+shuffle": numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE),
    "lz4+bitshuffle": numcodecs.Blosc("lz4", 5, numcodecs.Blosc.BITSHUFFLE),
}


def measure(values: np.ndarray, codec, repeat: int) -> dict:
    """Ratio and the best of ``repeat`` encode and decode throughputs (GB/s of float32 data, CPU time)."""
    encode, decode = [], []
    for _ in range(repeat):
        start = time.process_time()
        encoded = codec.encode(values)
        encode.append(time.process_time() - start)
        start = time.process_time()
        codec.decode(encoded)
        decode.append(time.process_time() - start)
    gb = values.nbytes / 1e9
    return {
        "ratio": round(values.nbytes / len(encoded), 3),
        "encode_gb_s": round(gb / max(min(encode), 1e-9), 2),
        "decode_gb_s": round(gb / max(min(decode), 1e-9), 2),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", help="a zarr store")
    parser.add_argument("--repeat", type=int, default=5, help="runs per codec (the best is kept)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if not Path(args.store).is_dir():
        parser.error(f"{args.store} is not a zarr store (no such directory)")
    numcodecs.blosc.use_threads = False  # one thread: what a task compressing a chunk gets
    try:
        ds = xr.open_zarr(args.store, consolidated=False)
    except (OSError, ValueError, KeyError) as error:  # zarr's GroupNotFoundError is a KeyError
        parser.error(f"{args.store} is not a zarr store ({type(error).__name__}: {str(error).splitlines()[0]})")
    for name, variable in ds.data_vars.items():
        if variable.ndim < 3 or not np.issubdtype(variable.dtype, np.floating):
            continue
        values = np.ascontiguousarray(variable.values, dtype=np.float32)
        for label, codec in CODECS.items():
            row = {"variable": name, "shape": list(values.shape), "codec": label}
            print(json.dumps({**row, **measure(values, codec, args.repeat)}), flush=True)


if __name__ == "__main__":
    main()
