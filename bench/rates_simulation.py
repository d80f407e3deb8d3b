"""``--method rates``'s allocation and estimates driven by draws at the zoo's exact rates: many
replicate benchmarks in the time one real diagnosis takes, to tell apart settings a point apart.

The benchmark is sampled as bench/hazard_shares.py samples it (``--per-slot`` cases per slot
level 1..8, ``--seed``, no applications) and planned as ``--method rates`` plans it (the
carrier-alone step kept); every instance's exact rate at every node of its chain comes from
``tracebench.zoo.failure_rates`` (the ``--profile``'s generator, the exact oracle judge).
Each replicate then draws, with its own seed:

- the run: an instance failed at the root with its exact rate there (the population diagnosed);
- each generation the :class:`tracebench.diagnose._rates.Allocator` asks for: one draw per
  instance whose chain passes through the node, failed with the node's exact rate (with
  ``--flip``, the rate a judge erring on each question at that rate reads, and the allocator is
  told the flip rate). The draws of one generation are independent across instances, where a
  real generation's are not (one load mode can break several instances): the real diagnosis,
  bench/hazard_shares.py, is the measure of record; this is for comparing settings.

Scored as bench/_shares.py scores a diagnosis: tolerant accuracy at the default confidence
threshold (Undetermined counted wrong), expected calibration error over 6 bins, fresh
generations per tree, Table 3's error per source (each instance's probability of each
dominant source, averaged, against the exact dominant-source mix).

``--oracle-prior`` hands the model the exact distribution of each edge group's kept fraction
and of each root group's rate (among the instances that can fail), in place of the priors it
fits: the ceiling of the prior's fit.

Run from the repository root, with this tree's tracebench importable::

    python bench/rates_simulation.py [--seed 7] [--per-slot 30] [--budget 60] [--replicates 0 1 2]
        [--profile strain] [--flip 0.05] [--oracle-prior] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from _machine import compile_bytecode, machine
from _shares import DELTA, ECE_BINS

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Item:
    """A root instance that can fail: its chain, the exact rate at each node, its exact shares."""

    chain: object  # tracebench.diagnose._rates.Chain
    rates: tuple[float, ...]
    shares: object  # tracebench.diagnose.InstanceShares


def world(seed: int, per_slot: int, profile: str) -> tuple[int, list[Item]]:
    """(trees, the items of every tree's root instances with a rate above 0)."""
    from tracebench.diagnose import Chain, exact_shares, instance_chain, plan_trees
    from tracebench.sample import SampleOptions, read_cases, sample_benchmark
    from tracebench.zoo import parse_profile

    with tempfile.TemporaryDirectory(prefix="tracebench-ratesim-") as tmp:
        bench = Path(tmp) / "bench"
        sample_benchmark(bench, SampleOptions(slots=tuple(range(1, 9)), per_slot=per_slot, seed=seed,
                                              applications=False))
        cases = list(read_cases(bench))
    plan = plan_trees(cases, paper_stop=False)
    items = []
    for tree in plan.trees:
        node_case = plan.node_cases(tree)
        for instance, shares in exact_shares(tree.nodes, node_case, parse_profile(profile)).items():
            nodes = instance_chain(tree.nodes, instance)
            keys = tuple(tree.keys[n.id] for n in nodes)
            chain = Chain(tree.root.id, instance, keys, tuple(n.id for n in nodes), tuple(n.rule for n in nodes[1:]),
                          tuple(sum(q.op == instance.op and q.target == instance.target for q in node_case[n.id].checklist)
                                for n in nodes))
            items.append(Item(chain, shares.rates, shares))
    return len(plan.trees), items


def oracle_priors(items: list[Item]) -> tuple[dict, dict]:
    """The exact edge priors (finest group: the distribution over RHO of its kept fractions) and
    root priors (over the grid), each instance weighted by its chance to fail at the root."""
    from tracebench.diagnose import GRID, RHO

    edges: dict = {}
    roots: dict = {}
    for item in items:
        hazards = [-np.log1p(-min(r, 1 - 1e-12)) for r in item.rates]
        weight = item.rates[0]
        for e in range(len(item.chain.rules)):
            kept = hazards[e + 1] / hazards[e] if hazards[e] > 0 else 1.0
            group = item.chain.edge_groups(e)[-1]
            edges.setdefault(group, np.zeros(len(RHO)))[int(np.argmin(np.abs(RHO - kept)))] += weight
        for group in item.chain.root_groups():
            roots.setdefault(group, np.zeros(GRID))[min(int(item.rates[0] * GRID), GRID - 1)] += weight
    return {g: v / v.sum() for g, v in edges.items()}, {g: v / v.sum() for g, v in roots.items()}


def simulate(trees: int, items: list[Item], budget: float, replicate: int, flip: float,
             oracle: tuple[dict, dict] | None) -> dict:
    from tracebench.diagnose import Allocator, RatesSettings, observed_rate

    rng = np.random.default_rng(1000 + replicate)
    chosen = [item for item in items if rng.random() < item.rates[0]]  # failed in the run
    rate = {(k, item.chain.instance): (r, q) for item in chosen
            for k, r, q in zip(item.chain.keys, item.rates, item.chain.questions)}
    at: dict = {}
    for item in chosen:
        for key in item.chain.keys:
            at.setdefault(key, set()).add(item.chain.instance)
    diagnosed = len({item.chain.tree for item in chosen})
    allocator = Allocator([item.chain for item in chosen], RatesSettings(budget=budget, flip=flip), trees=diagnosed,
                          given=oracle)
    while asked := allocator.requests():
        for key, count in sorted(asked.items()):
            for instance in sorted(at[key], key=repr):
                r, q = rate[key, instance]
                seen = float(observed_rate(np.array([r]), q, flip)[0])
                for _ in range(count):
                    allocator.observe(key, instance, bool(rng.random() < seen))
    estimates = allocator.estimates()
    threshold = RatesSettings().threshold
    confidence, right, tolerant = [], [], 0
    mix: dict[str, float] = {}
    exact: dict[str, float] = {}
    for item in chosen:
        estimate = estimates[item.chain.tree, item.chain.instance]
        ok = item.shares.tolerates(estimate.source, DELTA)
        tolerant += ok and estimate.confidence >= threshold
        confidence.append(estimate.confidence)
        right.append(ok)
        for source, p in estimate.dominant.items():
            mix[source] = mix.get(source, 0.0) + p / len(chosen)
        exact[item.shares.dominant] = exact.get(item.shares.dominant, 0.0) + 1 / len(chosen)
    conf, ok = np.array(confidence), np.array(right, dtype=float)
    bins = np.minimum((conf * ECE_BINS).astype(int), ECE_BINS - 1)
    ece = sum(abs(conf[bins == b].mean() - ok[bins == b].mean()) * (bins == b).sum()
              for b in range(ECE_BINS) if (bins == b).any()) / len(conf)
    error = {s: round(abs(mix.get(s, 0.0) - share), 4) for s, share in exact.items()}
    return {"replicate": replicate, "instances": len(chosen), "tolerant_accuracy": round(tolerant / len(chosen), 4),
            "ece": round(float(ece), 4), "generations_per_tree": round(allocator.spent / diagnosed, 1),
            "mix_error": error, "mix_mean_error": round(float(np.mean(list(error.values()))), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--per-slot", type=int, default=30)
    parser.add_argument("--profile", default="strain")
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--replicates", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--flip", type=float, default=0.0, help="a judge erring on each question at this rate")
    parser.add_argument("--oracle-prior", action="store_true", help="the exact priors in place of the fitted ones")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_bytecode(ROOT)
    from tracebench import __version__

    trees, items = world(args.seed, args.per_slot, args.profile)
    oracle = oracle_priors(items) if args.oracle_prior else None
    results = []
    for replicate in args.replicates:
        started = time.perf_counter()
        results.append(simulate(trees, items, args.budget, replicate, args.flip, oracle))
        results[-1]["seconds"] = round(time.perf_counter() - started, 1)
        if not args.json:
            r = results[-1]
            print(f"seed {args.seed} replicate {replicate}: tolerant {r['tolerant_accuracy']:.1%} of "
                  f"{r['instances']}, ECE {r['ece']:.3f}, generations per tree {r['generations_per_tree']}, "
                  f"Table 3 mean error {r['mix_mean_error']:.3f} (largest {max(r['mix_error'].values()):.3f}); "
                  f"{r['seconds']} s", flush=True)
    accuracy = [r["tolerant_accuracy"] for r in results]
    summary = {"mean_tolerant_accuracy": round(float(np.mean(accuracy)), 4), "min": min(accuracy), "max": max(accuracy)}
    if args.json:
        print(json.dumps({"machine": machine(tracebench=__version__), "seed": args.seed, "per_slot": args.per_slot,
                          "profile": args.profile, "budget": args.budget, "flip": args.flip,
                          "oracle_prior": args.oracle_prior, "replicates": results, "summary": summary}, indent=2))
    else:
        print(f"mean tolerant {summary['mean_tolerant_accuracy']:.1%} ({summary['min']:.1%}-{summary['max']:.1%}) "
              f"over {len(results)} replicates")


if __name__ == "__main__":
    main()
