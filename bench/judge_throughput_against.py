"""tracebench's judge throughput against another source tree of tracebench, side by side.

For regressions: the same `trace serve BENCH --latency L`, the same benchmark and images
(prepared as in ``judge_throughput.py``), and interleaved rounds of ``run_benchmark`` with
judge ``openai:oracle`` and generator ``folder:<images>``, each round in a fresh process
(``PYTHONPATH`` = the tree) with a fresh cache, so every judge call reaches the server.
calls/s = judge calls / wall time of ``run_benchmark`` inside that process.

    git worktree add /tmp/tracebench-old <commit>
    python bench/judge_throughput_against.py /tmp/tracebench-old [--rounds 4] [--concurrency 32]

Works with trees whose model options are ``tracebench.providers.ModelSettings`` or the
older ``tracebench.run.ClientSettings``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from judge_throughput import machine_text, prepare, start_server, stop_server

HERE = Path(__file__).resolve().parent.parent

ROUND = r'''
import json, sys, time
from pathlib import Path
bench, images, out, cache, url, concurrency = sys.argv[1:7]
try:
    from tracebench.providers import ModelSettings as Settings
except ImportError:
    from tracebench.run import ClientSettings as Settings
from tracebench.run import run_benchmark
asked = dict(generator=f"folder:{images}", judges=["openai:oracle"],
             settings=Settings(base_url=url, api_key_env="TRACEBENCH_BENCH_NO_KEY"),
             concurrency=int(concurrency), cache_dir=Path(cache), progress=False)
try:
    from tracebench.run import RunOptions
except ImportError:  # a tree from before the options records: keyword arguments
    start = time.perf_counter()
    manifest = run_benchmark(Path(bench), Path(out), **asked)
else:
    start = time.perf_counter()
    manifest = run_benchmark(Path(bench), Path(out), RunOptions(**asked))
print(json.dumps({"wall": time.perf_counter() - start, "calls": manifest.calls.get("openai:oracle", 0),
                  "abstentions": manifest.abstentions}))
'''


def one_round(tree: Path, work: Path, url: str, concurrency: int) -> float:
    out, cache = work / "out", work / "cache"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "TRACEBENCH_BENCH_NO_KEY"} | {"PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", ROUND, str(work.parent / "bench"), str(work.parent / "prep" / "images"),
                           str(out), str(cache), url, str(concurrency)], capture_output=True, text=True, env=env,
                          cwd=work.parent)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the round failed: {done.stderr.strip()[-600:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["abstentions"]:
        raise SystemExit(f"{tree}: {result['abstentions']} abstentions (server errors?)")
    return result["calls"] / result["wall"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path, help="another tracebench source tree (a worktree at an older commit)")
    parser.add_argument("--per-slot", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    trees = {"this tree": HERE, str(args.tree): args.tree.resolve()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prepare(root / "bench", root / "prep", args.per_slot)
        proc, url = start_server(root / "bench", args.latency, root / "serve.log")
        rates: dict[str, list[float]] = {name: [] for name in trees}
        try:
            for r in range(args.rounds):  # alternating which goes first
                for name in (list(trees) if r % 2 == 0 else list(reversed(trees))):
                    work = root / f"w{list(trees).index(name)}"
                    work.mkdir(exist_ok=True)
                    rates[name].append(one_round(trees[name], work, url, args.concurrency))
        finally:
            stop_server(proc)
    print(machine_text())
    print(f"concurrency {args.concurrency}, latency {args.latency}, {args.rounds} rounds interleaved")
    for name, values in rates.items():
        print(f"  {name:40s} {statistics.median(values):6.1f} calls/s (median; rounds "
              f"{[round(v, 1) for v in values]})")
    this, other = (statistics.median(v) for v in rates.values())
    print(f"  this tree / other: {this / other:.3f}")


if __name__ == "__main__":
    main()
