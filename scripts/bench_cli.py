#!/usr/bin/env python
"""Start-up time of the ``s2forecast`` command: ``--help`` of the command and of each
subcommand, each in a fresh process (what a user waits for before anything happens).

Prints one JSON line per command: median and min seconds over ``--repeats`` runs.

    python scripts/bench_cli.py --repeats 5
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

from s2forecast.commands import COMMANDS


def seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "s2forecast.cli", *argv], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"s2forecast {' '.join(argv)} failed: {result.stderr[-500:]}")
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--commands", nargs="+", help="subcommands to time (default: all)")
    args = parser.parse_args()
    names = args.commands or [command.name for command in COMMANDS]
    for argv in [["--help"]] + [[name, "--help"] for name in names]:
        runs = [seconds(argv) for _ in range(args.repeats)]
        print(json.dumps({"command": " ".join(argv), "median_s": round(statistics.median(runs), 3),
                          "min_s": round(min(runs), 3), "repeats": args.repeats}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
