#!/usr/bin/env python
"""Start-up time of the ``s2forecast`` command: ``--help`` of the command and of each
subcommand, each in a fresh process (what a user waits for before anything happens).

Prints one JSON line per command: median, min and max seconds over ``--repeats`` runs. The
Lightning commands' help (fit, validate, test) is read from its cache (``s2forecast.help_cache``);
one unmeasured run per command fills it first (``"help_cache": "warm"``). ``--no-cache`` times
instead the first call after an install or an upgrade: an empty cache for every run
(``"help_cache": "cold"``).

    python scripts/bench_cli.py --repeats 5
    python scripts/bench_cli.py --repeats 3 --no-cache --commands fit
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's s2forecast, here and in the timed processes

from s2forecast.commands import COMMANDS  # noqa: E402  (light: no torch)

LIGHTNING = {command.name for command in COMMANDS if command.lightning}


def seconds(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "s2forecast.cli", *argv], capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        raise SystemExit(f"s2forecast {' '.join(argv)} failed: {last}")
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--commands", nargs="+", help="subcommands to time (default: s2forecast --help and all)")
    parser.add_argument("--no-cache", action="store_true", help="time the Lightning commands' help without its cache")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    argvs = [[name, "--help"] for name in args.commands] if args.commands else [["--help"]]
    if not args.commands:
        argvs += [[command.name, "--help"] for command in COMMANDS]
    with tempfile.TemporaryDirectory(prefix="s2forecast-bench-cli-") as scratch:
        for argv in argvs:
            lightning = argv[0] in LIGHTNING
            if lightning and not args.no_cache:
                seconds(argv, env)  # fills the help cache if it is empty or stale
            runs = []
            for i in range(args.repeats):
                if args.no_cache:
                    env["XDG_CACHE_HOME"] = os.path.join(scratch, f"{argv[0]}-{i}")  # an empty cache
                runs.append(seconds(argv, env))
            line = {"command": f"s2forecast {' '.join(argv)}", "median_s": round(statistics.median(runs), 3),
                    "min_s": round(min(runs), 3), "max_s": round(max(runs), 3), "repeats": args.repeats}  # fmt: skip
            if lightning:
                line["help_cache"] = "cold" if args.no_cache else "warm"
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
