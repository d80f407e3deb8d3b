"""Two fixed costs timed side by side for this source tree and another (``--against DIR``):
serialising a benchmark's case records, and one three-pair ``trace agree``.

- ``serialise``: ``model_dump_json`` of every case of a 1,600-case default benchmark (``trace
  sample --slots 1-8``), CPU seconds in a fresh process per tree (the records' serializer: a
  wrap serializer in Python before pydantic's ``exclude_if``);
- ``agree``: ``trace agree --cases B --judge R1 --judge R2 --judge R3`` over three runs of a
  240-case benchmark (the zoo's ``global-interference`` judged by the oracle, and by the oracle
  flipping 10% and 20% of its answers), CPU seconds of the command's process (user + system).

The inputs are made once by this tree in a temporary folder; each round runs every tree once,
alternating which goes first; medians over rounds. Run from the repository root::

    git worktree add /tmp/base-pieces ba435ed
    python bench/fixed_pieces.py --against /tmp/base-pieces [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _machine import compile_bytecode, machine

ROOT = Path(__file__).resolve().parent.parent

_SERIALISE = r"""
import sys, time
from pathlib import Path
from tracebench.records import CASES
cases = list(CASES.read(Path(sys.argv[1])))
start = time.process_time()
for case in cases:
    case.model_dump_json()
print(time.process_time() - start)
"""


def build(work: Path) -> tuple[Path, list[Path]]:
    from tracebench.providers import ModelSettings
    from tracebench.run import RunOptions, run_benchmark
    from tracebench.sample import SampleOptions, sample_benchmark

    sample_benchmark(work / "default", SampleOptions(slots=tuple(range(1, 9)), seed=0))
    sample_benchmark(work / "agree", SampleOptions(slots=tuple(range(1, 9)), per_slot=30, seed=3, applications=False))
    runs = []
    for k, judge in enumerate(("oracle", "oracle:flip=0.1", "oracle:flip=0.2")):
        runs.append(work / f"run{k}")
        run_benchmark(work / "agree", runs[-1], RunOptions(generator="synthetic:global-interference", judges=[judge],
                      settings=ModelSettings(), progress=False))
    return work, runs


def _cpu_of(command: list[str], env: dict) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])}...: exit {done.returncode}\n{done.stderr}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def one_round(source: Path, work: Path, runs: list[Path]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source)}
    # -P: no current folder first on sys.path, where a checkout's tracebench/ would shadow PYTHONPATH's
    done = subprocess.run([sys.executable, "-P", "-c", _SERIALISE, str(work / "default")], env=env,
                          capture_output=True, text=True, check=True)
    agree = [sys.executable, "-P", "-m", "tracebench", "agree", "--cases", str(work / "agree"),
             *(part for run in runs for part in ("--judge", str(run))), "--json"]
    return {"serialise_cpu": float(done.stdout), "agree_cpu": _cpu_of(agree, env)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another source tree (a folder holding tracebench/)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sources = {"this tree": ROOT}
    if args.against is not None:
        sources["against"] = args.against.resolve()
    for source in sources.values():
        compile_bytecode(source)
    with tempfile.TemporaryDirectory() as tmp:
        work, runs = build(Path(tmp))
        results: dict[str, list[dict]] = {name: [] for name in sources}
        for k in range(args.rounds):
            for name in (list(sources) if k % 2 == 0 else list(reversed(sources))):
                results[name].append(one_round(sources[name], work, runs))
    report = {"machine": machine(), "rounds": args.rounds,
              "trees": {name: {key: round(statistics.median(r[key] for r in rounds), 3)
                               for key in ("serialise_cpu", "agree_cpu")} for name, rounds in results.items()}}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(report["machine"])
    for name, medians in report["trees"].items():
        print(f"{name:10s} serialising 1,600 cases {medians['serialise_cpu']:.3f} CPU-s; "
              f"three-pair trace agree {medians['agree_cpu']:.2f} CPU-s   [{sources[name]}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
