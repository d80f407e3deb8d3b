"""Throughput of `trace run --executor ray` with 1, 2 and 4 workers on a local Ray cluster.

The generator holds its worker for a fixed time per case (examples/plugins/slow_zoo.py,
``SLOW_ZOO_SECONDS``), a stand-in for a GPU-bound model; the driver still runs the judge (the
oracle) and writes every verdict, so it must not be the bottleneck. A head node is started on
loopback (``ray start --head``, 4 CPUs: the workers sleep, they do not compute), each run is the
real command in a fresh process with its own cache (no hit), and its wall time includes starting
its workers. The target (issue: real models at scale) is at least 3.5x the 1-worker throughput
at 4 workers.

    python bench/ray_scaling.py [--per-slot 16] [--seconds 1.0] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import compile_bytecode, machine
from sample_throughput import machine_text, trace_command

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = f"python:{ROOT / 'examples' / 'plugins' / 'slow_zoo.py'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-slot", type=int, default=16, help="cases per slot level, 8 levels (default 16)")
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds each case holds a worker (default 1)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_bytecode(ROOT)
    ray_cli = str(Path(sys.executable).parent / "ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SLOW_ZOO_SECONDS": str(args.seconds), "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([ray_cli, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus",
                    str(max(args.workers)), "--include-dashboard", "false", "--disable-usage-stats"], env=env,
                   check=True, capture_output=True)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            bench = Path(tmp) / "bench"
            subprocess.run([*trace_command(), "sample", "--slots", "1-8", "--per-slot", str(args.per_slot),
                            "--no-applications", "--out", str(bench)], check=True, stdout=subprocess.DEVNULL, env=env)
            cases = sum(1 for _ in open(bench / "cases.jsonl", "rb"))
            for workers in args.workers:
                out = Path(tmp) / f"run-{workers}"
                start = time.perf_counter()
                subprocess.run([*trace_command(), "run", str(bench), "--generator", PLUGIN, "--judge", "oracle",
                                "--executor", "ray", "--ray-address", f"127.0.0.1:{port}", "--workers", str(workers),
                                "--out", str(out)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env)
                wall = time.perf_counter() - start
                rows.append({"workers": workers, "wall_s": wall, "cases_per_s": cases / wall,
                             "verdicts": (out / "verdicts.jsonl").read_bytes()})
    finally:
        subprocess.run([ray_cli, "stop", "--force"], capture_output=True)
    base = rows[0]["cases_per_s"]
    same = all(row["verdicts"] == rows[0]["verdicts"] for row in rows)
    for row in rows:
        row["speedup"] = row["cases_per_s"] / base
        del row["verdicts"]
    result = {"machine": machine(), "cases": cases, "seconds_per_case": args.seconds, "runs": rows,
              "verdicts_identical": same}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{machine_text()}; {cases} cases, {args.seconds:g} s a case; verdicts identical across runs: {same}")
    for row in rows:
        print(f"{row['workers']} workers: {row['wall_s']:.1f} s, {row['cases_per_s']:.2f} cases/s, "
              f"{row['speedup']:.2f}x")


if __name__ == "__main__":
    main()
