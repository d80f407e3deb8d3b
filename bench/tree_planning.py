"""Planning the diagnostic trees of 175 failing cases, as ``trace diagnose`` does before any model call.

``trace diagnose RUN`` reads the run, picks the failing cases, and calls ``plan_trees`` on them:
every case's whole tree and every node's sub-case (prompt, references, checklist), with
identical sub-cases merged. This script times that call, on the same input, for this source
tree and (``--against DIR``) another one, e.g. the commit before a change::

    git worktree add /tmp/diag-base 7f95597
    python bench/tree_planning.py --against /tmp/diag-base

Input, built once in a temporary folder by this tree: a benchmark of slot levels 1..8
(``--per-slot`` cases each, seed 5, with application cases), run in process with
``synthetic:global-interference,noise:0.05`` and the oracle judge; the first ``--cases``
failing cases (run order, as ``--cases failing`` picks them) are planned.

Each round runs every source tree once, in a fresh process (``PYTHONPATH`` = that tree, so
nothing memoized in one round reaches the next), alternating which goes first. A process
times three things with time.perf_counter:

- ``imports``: importing ``tracebench.cli`` and ``tracebench.diagnose.diagnose_run`` (the
  modules ``trace diagnose`` loads before its first call, startup of Python excluded; also
  as CPU time, ``imports_cpu``);
- ``parser``: the first ``parse`` of a formula, which builds the Lark parser (a fixed cost
  of tracebench.formula, paid once per process);
- ``planning``: ``plan_trees`` of the chosen cases, the parser already built (also as CPU
  time of the process, ``planning_cpu``: less sensitive to other work on a shared machine);
- ``again_cpu``: the same ``plan_trees`` once more in that process (CPU time): its memos of
  tree and node shapes filled, its templates compiled, the interpreter warm: what planning
  costs once nothing is paid for the first time (only ``planning`` is held to the target).

and a SHA-256 over what the plan holds: each tree as ``tree_json`` with its sub-case keys,
each distinct sub-case as written (``model_dump_json``), each node occurrence. The digests
of both trees must be equal (the plans byte-identical), else the script exits with status 1.
The report gives median, min and max over rounds, the ratio of median planning times, and
whether the median planning time of this tree meets the target (``--target``, 0.3 s).

Run from the repository root, in the environment where tracebench is installed::

    python bench/tree_planning.py [--against DIR] [--cases 175] [--per-slot 10] [--rounds 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _machine import machine, source_trees

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = "synthetic:global-interference,noise:0.05"

_CHILD = r"""
import gc, hashlib, json, sys
from pathlib import Path
from time import perf_counter, process_time

start, cpu = perf_counter(), process_time()
import tracebench.cli  # noqa: F401
from tracebench.diagnose import diagnose_run, plan_trees, tree_json  # noqa: F401
imports, imports_cpu = perf_counter() - start, process_time() - cpu

from tracebench.diagnose import select_cases
from tracebench.formula import parse
from tracebench.run import load_run

run = load_run(Path(sys.argv[1]))
roots = select_cases(run, "failing", None)[:int(sys.argv[2])]
start = perf_counter()
parse(roots[0].formula)
parser = perf_counter() - start
gc.collect()
start, cpu = perf_counter(), process_time()
plan = plan_trees(roots)
planning, planning_cpu = perf_counter() - start, process_time() - cpu
start = process_time()
plan_trees(roots)  # again in the same process: every memo filled, the interpreter warm
again_cpu = process_time() - start

digest = hashlib.sha256()
for tree in plan.trees:
    digest.update(json.dumps([tree_json(tree.graph), tree.keys], ensure_ascii=False, sort_keys=True).encode())
for key, case in plan.cases.items():
    digest.update(key.encode() + case.model_dump_json().encode())
for occurrence in plan.occurrences:
    digest.update(occurrence.model_dump_json().encode())
print(json.dumps({"module": tracebench.__file__, "imports": imports, "imports_cpu": imports_cpu, "parser": parser, "planning": planning, "planning_cpu": planning_cpu, "again_cpu": again_cpu,
                  "cases": len(roots),
                  "sub_cases": len(plan.cases), "nodes": len(plan.occurrences), "digest": digest.hexdigest()}))
"""


def build_input(work: Path, per_slot: int) -> tuple[Path, int, int]:
    """The benchmark and its run; returns the run folder, its cases and its failing cases."""
    from tracebench.diagnose import select_cases
    from tracebench.providers import ModelSettings
    from tracebench.run import load_run, RunOptions, run_benchmark
    from tracebench.sample import SampleOptions, sample_benchmark

    sample_benchmark(work / "bench", SampleOptions(slots=tuple(range(1, 9)), per_slot=per_slot, seed=5, applications=True))
    run_benchmark(work / "bench", work / "run", RunOptions(generator=GENERATOR, judges=["oracle"],
                  settings=ModelSettings(seed=0), concurrency=4, progress=False))
    run = load_run(work / "run")
    return work / "run", len(run.cases), len(select_cases(run, "failing", None))


def one_round(source: Path, run_dir: Path, cases: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source)}
    # -P: no current folder first on sys.path, where a checkout's tracebench/ would shadow PYTHONPATH's
    done = subprocess.run([sys.executable, "-P", "-c", _CHILD, str(run_dir), str(cases)], env=env,
                          capture_output=True, text=True, check=False, cwd=run_dir)
    if done.returncode != 0:
        raise SystemExit(f"{source}: the timing process failed:\n{done.stderr}")
    result = json.loads(done.stdout)
    if not Path(result["module"]).is_relative_to(source):
        raise SystemExit(f"{source}: the timing process imported {result['module']} instead")
    return result


def spread(values: list[float]) -> dict:
    return {"median_s": round(statistics.median(values), 4), "min_s": round(min(values), 4),
            "max_s": round(max(values), 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another source tree (a folder holding tracebench/) to time")
    ap.add_argument("--cases", type=int, default=175, help="failing cases to plan (default 175)")
    ap.add_argument("--per-slot", type=int, default=10, help="cases per slot level of the input benchmark")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--target", type=float, default=0.3, help="planning target in seconds (default 0.3)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sources = source_trees(ap, ROOT, args.against)  # imports timed as an installed package has them
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tree-planning-") as tmp:
        run_dir, run_cases, failing = build_input(Path(tmp), args.per_slot)
        if failing < args.cases:
            ap.error(f"the run has {failing} failing cases, fewer than --cases {args.cases}: raise --per-slot")
        results: dict[str, list[dict]] = {name: [] for name in sources}
        load_rounds = []
        for r in range(args.rounds):
            load_rounds.append(os.getloadavg()[0])
            order = list(sources) if r % 2 == 0 else list(reversed(sources))
            for name in order:
                results[name].append(one_round(sources[name], run_dir, args.cases))
    load_after = os.getloadavg()[0]

    digests = {name: {r["digest"] for r in rs} for name, rs in results.items()}
    identical = len(set().union(*digests.values())) == 1
    report = {
        "machine": machine(),
        "load_average_1min": {"before": round(load_before, 2), "during_max": round(max(load_rounds), 2),
                              "after": round(load_after, 2)},
        "run_cases": run_cases, "failing": failing, "planned": args.cases,
        "sub_cases": results["this tree"][0]["sub_cases"], "nodes": results["this tree"][0]["nodes"],
        "rounds": args.rounds, "identical_plans": identical,
        "sources": {name: {"path": str(sources[name]),
                           **{part: spread([r[part] for r in rs])
                              for part in ("planning", "planning_cpu", "again_cpu", "parser", "imports", "imports_cpu")}}
                    for name, rs in results.items()},
    }
    ours = report["sources"]["this tree"]["planning"]["median_s"]
    report["target_s"] = args.target
    report["meets_target"] = ours <= args.target
    if "against" in results:
        theirs = report["sources"]["against"]
        report["planning_ratio_against_over_this"] = round(theirs["planning"]["median_s"] / ours, 2)
        report["planning_cpu_ratio_against_over_this"] = round(
            theirs["planning_cpu"]["median_s"] / report["sources"]["this tree"]["planning_cpu"]["median_s"], 2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        m = report["machine"]
        print(f"{m['cpu']}, {m['cores']} cores, {m['python']}; load {report['load_average_1min']}")
        print(f"run of {run_cases} cases, {failing} failing; planned {args.cases}: {report['sub_cases']} distinct "
              f"sub-cases, {report['nodes']} nodes; {args.rounds} rounds, a fresh process each")
        for name, part in report["sources"].items():
            print(f"{name:10s} planning {part['planning']['median_s']:.3f} s (min {part['planning']['min_s']:.3f}, "
                  f"max {part['planning']['max_s']:.3f}; CPU {part['planning_cpu']['median_s']:.3f} s; again in the "
                  f"same process, CPU {part['again_cpu']['median_s']:.3f} s); "
                  f"parser build {part['parser']['median_s']:.3f} s; imports {part['imports']['median_s']:.3f} s "
                  f"(CPU {part['imports_cpu']['median_s']:.3f} s)   [{part['path']}]")
        if "against" in results:
            print(f"planning, against / this tree: {report['planning_ratio_against_over_this']}x wall, "
                  f"{report['planning_cpu_ratio_against_over_this']}x CPU")
        print(f"target {args.target} s: {'met' if report['meets_target'] else 'not met'}; "
              f"plans byte-identical: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
