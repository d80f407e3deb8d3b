"""The same work through two source trees, one after the other: a 1,600-case benchmark (``trace
sample --slots 1-8``) run by the zoo and its oracle, then its failing cases diagnosed
(``--strategy adaptive``), each command a fresh process of the tree's ``python -m tracebench``;
its wall time and peak memory (the child's maximum resident set), and whether the two trees'
``summary.json`` agree (but the tool's version line). What a refactoring claims when it says
behaviour is unchanged.

Run from the repository root, in the environment where tracebench is installed::

    python bench/same_work.py --against /tmp/base7 [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import machine, source_trees

ROOT = Path(__file__).resolve().parents[1]
RUN = ("run", "{bench}", "--generator", "synthetic:global-interference", "--judge", "oracle", "--out", "{out}")
DIAGNOSE = ("diagnose", "{run}", "--strategy", "adaptive", "--out", "{out}")


def _timed(tree: Path, args: list[str]) -> tuple[float, float]:
    """Wall seconds and peak MB (the process's own maximum resident set) of one command run by ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "tracebench", *args], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{tree}: trace {' '.join(args)}: exit {child.returncode}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", type=Path, required=True, help="the other source tree (a checkout)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    trees = source_trees(ap, ROOT, args.against)
    with tempfile.TemporaryDirectory(prefix="tracebench-same-work-") as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "tracebench", "sample", "--slots", "1-8", "--out", str(work / "bench")],
                       check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
        summaries = {}
        for k in range(args.rounds):
            for name, tree in trees.items():  # interleaved: load drifts alike for both
                out = work / f"{k}-{name.replace(' ', '-')}"
                run = _timed(tree, [a.format(bench=work / "bench", out=out / "run") for a in RUN])
                diag = _timed(tree, [a.format(run=out / "run", out=out / "diag") for a in DIAGNOSE])
                print(f"round {k + 1} {name}: run {run[0]:.2f} s, {run[1]:.0f} MB; diagnose {diag[0]:.2f} s, "
                      f"{diag[1]:.0f} MB")
                summary = json.loads((out / "diag" / "summary.json").read_text())
                summary.pop("tool", None)
                summaries.setdefault(name, summary)
        print("summaries equal:", len({json.dumps(s, sort_keys=True) for s in summaries.values()}) == 1)
    print(json.dumps(machine()))


if __name__ == "__main__":
    main()
