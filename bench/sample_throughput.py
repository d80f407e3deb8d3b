"""Speed and memory of `trace sample`, measured on the real command in subprocesses.

Two measurements, each a fresh process (as a user runs it), on the shipped synthetic
library (built beforehand, so its one-time build is not counted):

1. the default benchmark, ``trace sample --slots 1-8 --out DIR`` (about 1,600 cases):
   wall time and peak memory;
2. a large benchmark, ``trace sample --per-slot 12500 --no-applications`` (100,000 cases):
   cases per second and peak memory, to show memory does not grow with the count.

Peak memory is the process's maximum resident set size (``ru_maxrss`` of the child).

    python bench/sample_throughput.py [--rounds 3] [--large-per-slot 12500] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import machine


def machine_text() -> str:
    info = machine()
    return f"{info['cpu']}, {info['cores']} cores, {info['python']}"


def trace_command() -> list[str]:
    script = Path(sys.executable).parent / "trace"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tracebench"]


def timed_run(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, max RSS MiB, cases) of one `trace sample` run in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench"
        start = time.perf_counter()
        with open(Path(tmp) / "stderr.txt", "w+") as errors:
            proc = subprocess.Popen([*trace_command(), "sample", *args, "--out", str(out)],
                                    stdout=subprocess.DEVNULL, stderr=errors)
            _, status, usage = os.wait4(proc.pid, 0)  # wait4: the child's own resource usage
            wall = time.perf_counter() - start
            errors.seek(0)
            if status != 0:
                raise SystemExit(f"trace sample failed: {errors.read()}")
        with open(out / "cases.jsonl", "rb") as handle:
            cases = sum(1 for _ in handle)
        return wall, usage.ru_maxrss / 1024, cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--large-per-slot", type=int, default=12500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from tracebench.library import default_library

    default_library()  # built once, outside the measurement

    default = [timed_run(["--slots", "1-8"]) for _ in range(args.rounds)]
    large = timed_run(["--slots", "1-8", "--per-slot", str(args.large_per_slot), "--no-applications"])
    result = {
        "machine": machine_text(),
        "default": {"cases": default[0][2], "wall_s": [round(r[0], 2) for r in default],
                    "median_wall_s": round(statistics.median(r[0] for r in default), 2),
                    "max_rss_mib": round(max(r[1] for r in default), 1)},
        "large": {"cases": large[2], "wall_s": round(large[0], 1), "cases_per_s": round(large[2] / large[0]),
                  "max_rss_mib": round(large[1], 1)},
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}")
    d = result["default"]
    print(f"default benchmark: {d['cases']} cases, median {d['median_wall_s']} s wall "
          f"(rounds {d['wall_s']}), peak RSS {d['max_rss_mib']} MiB")
    g = result["large"]
    print(f"large benchmark:   {g['cases']} cases in {g['wall_s']} s = {g['cases_per_s']} cases/s, "
          f"peak RSS {g['max_rss_mib']} MiB")


if __name__ == "__main__":
    main()
