"""The paper's first-pass diagnosis against the zoo's exact hazard shares (docs/diagnose.md).

One benchmark is sampled (``--per-slot`` cases per slot level 1..8, ``--seed``, no applications)
and, for each generator profile, run in process with the exact ``oracle`` judge; its failing cases
are diagnosed as ``trace diagnose`` does today (one generation per node, the first-pass rule),
with ``--strategy full`` and again with ``--strategy adaptive`` (the same sources, fewer
generations; its unstable flags may differ). Every instance that failed in the run is scored against its exact hazard shares
(``tracebench.zoo.failure_rates`` on each node of its chain, ``tracebench.diagnose.exact_shares``):

- tolerant accuracy: the named source's exact share is within 0.2 of the largest (Undetermined
  counts wrong);
- dominant accuracy on clear instances: those whose largest share leads the second by 0.2 or more;
- Table 3's mix: the share of failing instances per exact dominant source, beside the share per
  source first-pass names;
- generations per tree: distinct sub-cases generated per diagnosed case (the root is the run's).

Run from the repository root, with this tree's tracebench importable::

    python bench/hazard_shares.py [--per-slot 30] [--seed 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _machine import compile_bytecode, machine

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ("strain", "global-interference,composition-interference:2")
SOURCES = ("joint_composition", "global_reference", "persistent_failure", "relation_attribute", "reference_clutter",
           "undetermined")


def _diagnosed(run: Path, out: Path, strategy: str) -> tuple[dict, float]:
    """The trees of a first-pass diagnosis (case id -> tree) and its generations per tree."""
    from tracebench.diagnose import DiagnoseOptions, diagnose_run
    from tracebench.providers import ModelSettings
    from tracebench.records import TREES

    summary = diagnose_run(run, out, DiagnoseOptions(strategy=strategy, progress=False,
                                                     settings=ModelSettings(max_retries=0, timeout=60.0)))
    return {tree.case_id: tree for tree in TREES.read(out)}, summary.nodes_per_case


def _rates(run: Path, out: Path, bench: Path, profile: str, budget: float, flip: float) -> dict:
    """``--method rates`` through the real diagnosis (the run harness, the call cache, rounds),
    scored against the zoo's exact shares: tolerant accuracy (Undetermined wrong), expected
    calibration error (6 bins) of the reported confidence, generations per tree, Table 3's mix."""
    import numpy as np
    from tracebench.diagnose import DiagnoseOptions, diagnose_run, exact_shares, plan_trees
    from tracebench.operators import Instance, Operator
    from tracebench.providers import ModelSettings
    from tracebench.records import TREES
    from tracebench.sample import read_cases
    from tracebench.zoo import parse_profile

    started = time.perf_counter()
    summary = diagnose_run(run, out, DiagnoseOptions(method="rates", budget=budget, flip=flip, progress=False,
                                                     settings=ModelSettings(max_retries=0, timeout=60.0)))
    trees = {tree.case_id: tree for tree in TREES.read(out)}
    plan = plan_trees([case for case in read_cases(bench) if case.id in trees], paper_stop=False)  # rates' trees
    right, confidence, named, exact_mix = [], [], 0, {}
    for tree in plan.trees:
        failing = {Instance(Operator(a.op), a.target): a for a in trees[tree.root.id].attributions if a.root == "fail"}
        exact = exact_shares(tree.nodes, plan.node_cases(tree), parse_profile(profile), failing)
        for instance, a in failing.items():
            shares = exact[instance]
            guess = a.guess or a.source
            ok = shares.share(guess) >= max(shares.shares.values()) - 0.2 - 1e-12
            right.append(ok and a.source != "undetermined")
            confidence.append((a.confidence, ok))
            named += a.source != "undetermined"
            exact_mix[shares.dominant] = exact_mix.get(shares.dominant, 0) + 1
    conf = np.array([c for c, _ in confidence])
    ok = np.array([o for _, o in confidence], dtype=float)
    bins = np.minimum((conf * 6).astype(int), 5)
    ece = sum(abs(conf[bins == b].mean() - ok[bins == b].mean()) * (bins == b).sum() for b in range(6)
              if (bins == b).any()) / len(conf)
    total = sum(exact_mix.values())
    exact_mix = {s: n / total for s, n in exact_mix.items()}
    mix = {s: m.share for s, m in (summary.mix or {}).items()}
    return {"method": "rates", "budget": budget, "flip": flip, "instances": len(right),
            "tolerant_accuracy": round(float(np.mean(right)), 4), "undetermined": len(right) - named,
            "ece": round(float(ece), 4), "generations_per_tree": summary.generations_per_tree,
            "mix_error": {s: round(abs(mix.get(s, 0.0) - exact_mix.get(s, 0.0)), 4) for s in exact_mix},
            "mix_covered": {s: bool(summary.mix[s].low <= exact_mix[s] <= summary.mix[s].high)
                            for s in exact_mix if summary.mix and s in summary.mix},
            "seconds": round(time.perf_counter() - started, 1)}


def _scored(bench: Path, trees: dict, profile: str) -> dict:
    """The diagnosis's attributions of the instances that failed in the run, against their exact shares."""
    from tracebench.diagnose import exact_shares, plan_trees, share_accuracy
    from tracebench.operators import Instance, Operator
    from tracebench.sample import read_cases
    from tracebench.zoo import parse_profile

    roots = [case for case in read_cases(bench) if case.id in trees]
    plan = plan_trees(roots)
    named = []
    for tree in plan.trees:
        failing = {Instance(Operator(a.op), a.target): a.source for a in trees[tree.root.id].attributions
                   if a.root == "fail"}
        exact = exact_shares(tree.nodes, plan.node_cases(tree),
                             parse_profile(profile), failing)
        missing = set(failing) - set(exact)
        if missing:  # an instance that failed has a rate above 0
            raise SystemExit(f"case {tree.root.id}: no exact hazard for {sorted(missing)}")
        named += [(failing[i], exact[i]) for i in failing]
    score = share_accuracy(named)
    return {"instances": score.instances, "tolerant_accuracy": round(score.tolerant_accuracy or 0.0, 4),
            "clear": score.clear, "dominant_accuracy_clear": round(score.dominant_accuracy or 0.0, 4),
            "exact_mix": {s: round(score.exact_mix.get(s, 0.0), 4) for s in SOURCES},
            "first_pass_mix": {s: round(score.named_mix.get(s, 0.0), 4) for s in SOURCES}}


def _profile(bench: Path, work: Path, profile: str) -> dict:
    from tracebench.providers import ModelSettings
    from tracebench.run import RunOptions, run_benchmark

    started = time.perf_counter()
    run = work / "run"
    run_benchmark(bench, run, RunOptions(generator=f"synthetic:{profile}", judges=["oracle"], progress=False,
                                         settings=ModelSettings(max_retries=0, timeout=60.0)))
    trees, full = _diagnosed(run, work / "full", "full")
    adaptive_trees, adaptive = _diagnosed(run, work / "adaptive", "adaptive")
    same = all([a.source for a in trees[c].attributions] == [a.source for a in adaptive_trees[c].attributions]
               for c in trees)  # the unstable flags may differ: adaptive sees no flip below a first pass
    return {"generator": f"synthetic:{profile}", "judge": "oracle", "cases": len(trees),
            "generations_per_tree": {"full": round(full, 2), "adaptive": round(adaptive, 2)},
            "adaptive_same_sources": same, **_scored(bench, trees, profile),
            "seconds": round(time.perf_counter() - started, 1)}


def _print(r: dict) -> None:
    print(f"{r['generator']}: {r['cases']} cases diagnosed, {r['instances']} failing instances; first-pass "
          f"tolerant {r['tolerant_accuracy']:.1%}, dominant on clear {r['dominant_accuracy_clear']:.1%} "
          f"of {r['clear']}; generations per tree {r['generations_per_tree']['full']} (full), "
          f"{r['generations_per_tree']['adaptive']} (adaptive; same sources: "
          f"{r['adaptive_same_sources']}); {r['seconds']} s")
    print(f"  {'source':<20} {'exact':>7} {'first-pass':>11}")
    for s in SOURCES:
        print(f"  {s:<20} {r['exact_mix'][s]:>7.1%} {r['first_pass_mix'][s]:>11.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-slot", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profiles", default=";".join(PROFILES), help="generator profiles, separated by ';'")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--rates", type=float, nargs="*", default=(), metavar="BUDGET",
                        help="also diagnose each profile's run with --method rates at these budgets")
    parser.add_argument("--flip", type=float, default=0.0, help="--method rates: the judges' flip rate given")
    args = parser.parse_args()
    compile_bytecode(ROOT)
    from tracebench import __version__
    from tracebench.sample import SampleOptions, sample_benchmark

    results = []
    with tempfile.TemporaryDirectory(prefix="tracebench-hazard-") as tmp:
        bench = Path(tmp) / "bench"
        sample_benchmark(bench, SampleOptions(slots=tuple(range(1, 9)), per_slot=args.per_slot, seed=args.seed,
                                              applications=False))
        for i, profile in enumerate(p.strip() for p in args.profiles.split(";")):
            results.append(_profile(bench, Path(tmp) / f"p{i}", profile))
            results[-1]["rates"] = [_rates(Path(tmp) / f"p{i}" / "run", Path(tmp) / f"p{i}" / f"rates{b:g}", bench,
                                           profile, b, args.flip) for b in args.rates]
            if not args.json:
                _print(results[-1])
                for r in results[-1]["rates"]:
                    print(f"  rates --budget {r['budget']:g}: tolerant {r['tolerant_accuracy']:.1%} of "
                          f"{r['instances']} ({r['undetermined']} undetermined), ECE {r['ece']:.3f}, generations "
                          f"per tree {r['generations_per_tree']}, mix error {r['mix_error']}, covered "
                          f"{r['mix_covered']}; {r['seconds']} s")
    if args.json:
        print(json.dumps({"machine": machine(tracebench=__version__), "per_slot": args.per_slot, "seed": args.seed,
                          "profiles": results}, indent=2))


if __name__ == "__main__":
    main()
