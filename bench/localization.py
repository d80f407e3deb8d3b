"""How well the diagnosis names failure sources when failures are random and the judge errs (docs/diagnose.md).

One benchmark is sampled (``--per-slot`` cases per slot level 1..8, ``--seed``, no
applications) and run in process once per (generator profile, judge) of :data:`CONFIGS`; each
configuration using that run diagnoses it (``--method first-pass --strategy full`` with
``--repeats K``, or ``--method rates --budget N [--flip-rate P]``). The population scored is
the same for every configuration of a run whatever its method or K: the operator instances that
failed in the run (its own verdicts, gating within). An instance an erring judge read failed
where the generator cannot fail it (its exact rate at the root is 0: no hazard to share) is
counted apart as misread; every other one is scored against its exact hazard shares
(``tracebench.diagnose.exact_shares``, bench/_shares.py):

- tolerant accuracy (the primary measure): the named source's exact share is within 0.2 of the
  largest; Undetermined, or a root the diagnosis's majority saw pass, counts wrong;
- dominant accuracy on clear instances (the largest share leads the second by 0.2 or more);
- the share Undetermined, and the tolerant accuracy among the decided (the others);
- expected calibration error (6 equal bins over [0, 1]) of the reported confidence (rates
  only: first-pass reports none);
- generations per tree, mean and p90 (first-pass: distinct sub-cases generated per diagnosed
  case times K, plus the root's K - 1 new generations; rates: fresh generations per tree), and
  per failing instance (all generations over the population);
- Table 3's error per source (each source of either mix): the summary's ``mix`` against the
  exact dominant-source mix, and for each source some instance has as its exact dominant one,
  whether the mix's 95% interval covers the exact share;
- secondary: the realized-cause accuracy (``summary.localization_accuracy``: whether the named
  source is one the load modes that fired in the root's own draw imply), beside its ceiling, the
  best expected score of a rule that knows every rate exactly: per counted instance, the largest
  probability over sources that the source is implied by the causes recorded for its first
  broken question, given that the instance failed. Computed for one generation per node with the
  exact judge (first-pass K = 1, rates); not computed with K > 1 (a majority root and causes
  merged over K draws) or an erring judge (whose errors choose the population).

Run from the repository root, with this tree's tracebench importable::

    python bench/localization.py [--per-slot 30] [--seed 7] [--only NAME[,NAME]] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from _machine import compile_bytecode, machine
from _shares import SOURCES, scored

ROOT = Path(__file__).resolve().parents[1]


class Config(NamedTuple):
    name: str
    profile: str  # synthetic:PROFILE
    judge: str
    method: str = "first-pass"
    repeats: int = 1  # first-pass: generations of each node, decided by majority
    budget: float | None = None  # rates: mean generations per tree
    flip: float = 0.0  # rates: the judges' error rate given (--flip-rate)


DETERMINISTIC = "global-interference,composition-interference:2"
CONFIGS = (
    Config("strain-first-pass", "strain", "oracle"),
    Config("strain-first-pass-k3", "strain", "oracle", repeats=3),
    Config("strain-first-pass-k5", "strain", "oracle", repeats=5),
    Config("strain-rates-60", "strain", "oracle", "rates", budget=60),
    Config("strain-rates-40", "strain", "oracle", "rates", budget=40),
    Config("strain-flip-first-pass", "strain", "oracle:flip=0.05"),
    Config("strain-flip-rates-100", "strain", "oracle:flip=0.05", "rates", budget=100, flip=0.05),
    Config("deterministic-first-pass", DETERMINISTIC, "oracle"),
    Config("deterministic-rates-60", DETERMINISTIC, "oracle", "rates", budget=60),
)
HEADER = ("| configuration | generator | judge | method | failing instances (misread) | tolerant | dominant, clear "
          "| Undetermined | decided | ECE | generations per tree (mean / p90) | per failing instance "
          "| Table 3 max error | intervals cover | realized cause (ceiling) |\n"
          "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|")
SHORT = {"joint_composition": "JC", "global_reference": "GR", "persistent_failure": "PF", "relation_attribute": "RA",
         "reference_clutter": "RC", "undetermined": "U"}


def _settings():
    from tracebench.providers import ModelSettings

    return ModelSettings(max_retries=0, timeout=60.0)


def _run(bench: Path, run: Path, profile: str, judge: str) -> dict:
    """Run the benchmark; the instances that failed in it (case id -> instances) and its score."""
    from tracebench.run import RunOptions, load_run, run_benchmark
    from tracebench.score import Gating, instance_results, score_run

    run_benchmark(bench, run, RunOptions(generator=f"synthetic:{profile}", judges=[judge], settings=_settings(),
                                         progress=False))
    folder = load_run(run)
    failing = {}
    for case_id, outcomes in folder.verdicts.items():
        found = {i for i, o in instance_results(folder.cases[case_id], outcomes, Gating.WITHIN).items() if o.failed}
        if found:
            failing[case_id] = found
    return {"failing": failing, "avg": round(score_run(run).avg, 4)}


def _question_rates(case, profile) -> dict[str, list[tuple[str, float]]]:
    """Question id -> (failure mode, the probability it breaks the question in one generation)
    for each mode of ``profile`` that can: ``failure_rates`` of the case asking that question
    alone, under that mode alone (the zoo draws each mode on its own, per requirement)."""
    from tracebench.operators import Instance
    from tracebench.zoo import Profile, failure_rates

    out = {}
    for q in case.checklist:
        alone = case.model_copy(update={"checklist": (q,)})
        rates = [(f.name, failure_rates(alone, Profile((f,)))[Instance(q.op, q.target)]) for f in profile.modes()]
        out[q.id] = [(name, p) for name, p in rates if p > 0.0]
    return out


def _best_realized(case, op: str, target: str, rates: dict[str, list[tuple[str, float]]]) -> float | None:
    """The largest probability, over sources, that the realized cause of a failure of instance
    (op, target) implies the source, given that it failed with a cause that implies one: the
    cause is the set of modes breaking its first broken question (checklist order), as
    ``trace diagnose`` takes it from the record. None when no draw can give such a failure."""
    from tracebench.diagnose import zoo_expectations

    table = zoo_expectations()
    implied: dict[str, float] = {}
    total, before = 0.0, 1.0  # before: the probability that no earlier question of the instance broke
    for q in (q for q in case.checklist if q.op == op and q.target == target):
        modes = rates[q.id]
        for fired in itertools.product((False, True), repeat=len(modes)):
            weight = before * math.prod(p if on else 1.0 - p for (_, p), on in zip(modes, fired))
            sources = {table.get(name, {}).get(op) for (name, _), on in zip(modes, fired) if on} - {None}
            if weight > 0.0 and sources:
                total += weight
                for s in sources:
                    implied[s] = implied.get(s, 0.0) + weight
        before *= math.prod(1.0 - p for _, p in modes)
    return max(implied.values()) / total if total > 0.0 else None


def _ceiling(bench: Path, trees: dict, profile: str) -> float | None:
    """The realized-cause accuracy's ceiling over the instances ``localization_accuracy``
    counts (failed at the root, decided, with an expected source): the mean of
    :func:`_best_realized`. None when a probability cannot be restated (the per-question rates
    do not make the instance's exact rate, or a counted failure has no such draw)."""
    from tracebench.operators import Instance
    from tracebench.sample import read_cases
    from tracebench.zoo import failure_rates, parse_profile

    parsed = parse_profile(profile)
    cases = {case.id: case for case in read_cases(bench) if case.id in trees}
    best = []
    for case_id, tree in trees.items():
        counted = [a for a in tree.attributions
                   if a.root == "fail" and a.source not in (None, "undetermined") and a.expected]
        if not counted:
            continue
        case = cases[case_id]
        rates, exact = _question_rates(case, parsed), failure_rates(case, parsed)
        for a in counted:
            survive = math.prod(1.0 - p for q in case.checklist if q.op == a.op and q.target == a.target
                                for _, p in rates[q.id])
            if abs(1.0 - survive - exact[Instance(a.op, a.target)]) > 1e-9:
                return None
            found = _best_realized(case, str(a.op), a.target, rates)
            if found is None:
                return None
            best.append(found)
    return sum(best) / len(best) if best else None


def _diagnose(run: Path, out: Path, config: Config):
    from tracebench.diagnose import DiagnoseOptions, diagnose_run

    if config.method == "rates":
        options = DiagnoseOptions(method="rates", budget=config.budget, flip=config.flip, settings=_settings(),
                                  progress=False)
    else:
        options = DiagnoseOptions(strategy="full", repeats=config.repeats, settings=_settings(), progress=False)
    return diagnose_run(run, out, options)


def _generations(summary, trees: dict, config: Config, failing: int) -> dict:
    """Generations per tree (mean, p90) and per failing instance of the run."""
    import numpy as np

    if config.method == "rates":
        per_tree = dict(summary.generations_per_tree or {"mean": 0.0, "p90": 0.0})
    else:  # the distinct sub-cases of each node generated K times, and the root K - 1 times more than the run did
        k = config.repeats
        each = [len({(n.prompt, n.references, n.question_ids) for n in tree.nodes if n.evaluated and n.parent})
                for tree in trees.values()]
        per_tree = {"mean": round((summary.nodes_per_case + 1) * k - 1, 2),
                    "p90": float(np.percentile([(n + 1) * k - 1 for n in each], 90)) if each else 0.0}
    return {"per_tree": per_tree, "per_failing_instance": round(per_tree["mean"] * summary.cases / failing, 2)
            if failing else None}


def _configuration(bench: Path, work: Path, config: Config, run: dict) -> dict:
    from tracebench.records import TREES

    started = time.perf_counter()
    out = work / config.name
    summary = _diagnose(work / "run", out, config)
    trees = {tree.case_id: tree for tree in TREES.read(out)}
    if set(run["failing"]) - set(trees):
        raise SystemExit(f"{config.name}: failing cases not diagnosed: {sorted(set(run['failing']) - set(trees))}")
    s = scored(bench, trees, config.profile, config.judge, run["failing"])
    acc = s.accuracy
    population = sum(len(v) for v in run["failing"].values())
    decided = acc.instances - s.undetermined
    exact_mix, mix = s.exact_mix, summary.mix or {}
    names = [n for n in SOURCES if n in exact_mix or n in mix]  # Table 3's error over both mixes' sources
    realized = summary.localization_accuracy or {}
    if config.judge != "oracle":
        ceiling, why = None, "erring judge"
    elif config.method == "first-pass" and config.repeats > 1:
        ceiling, why = None, "K > 1"
    else:
        ceiling = _ceiling(bench, trees, config.profile)
        why = None if ceiling is not None else "rates not restated"
    ece = s.ece
    return {
        **config._asdict(), "generator": f"synthetic:{config.profile}", "cases": summary.cases,
        "failing_instances": population, "misread": s.misread, "scored": acc.instances,
        "tolerant_accuracy": round(acc.tolerant_accuracy or 0.0, 4), "clear": acc.clear,
        "dominant_accuracy_clear": round(acc.dominant_accuracy, 4) if acc.dominant_accuracy is not None else None,
        "undetermined": round(s.undetermined / acc.instances, 4) if acc.instances else None,
        "root_passed": sum(a.root != "fail" for a, _ in s.pairs),
        "decided_accuracy": round(acc.tolerant / decided, 4) if decided else None,
        "ece": round(ece, 4) if ece is not None else None,
        "generations": _generations(summary, trees, config, population),
        "mix": {n: {"exact": round(exact_mix.get(n, 0.0), 4),
                    "estimate": mix[n].share if n in mix else 0.0,
                    "low": mix[n].low if n in mix else None, "high": mix[n].high if n in mix else None,
                    "error": round(s.mix_error(mix, [n])[n], 4),
                    "covered": s.mix_covered(mix, [n]).get(n) if n in exact_mix else None} for n in names},
        "realized_cause": {"accuracy": realized.get("accuracy"), "instances": realized.get("instances"),
                           "ceiling": round(ceiling, 4) if ceiling is not None else None, "ceiling_not_computed": why},
        "seconds": round(time.perf_counter() - started, 1),
    }


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


def _print(r: dict) -> None:
    g = r["generations"]
    covered = [m["covered"] for m in r["mix"].values() if m["covered"] is not None]
    rc = r["realized_cause"]
    ceiling = _pct(rc["ceiling"]) if rc["ceiling"] is not None else f"not computed: {rc['ceiling_not_computed']}"
    print(f"{r['name']} ({r['generator']}, {r['judge']}, {r['method']}"
          + (f" --repeats {r['repeats']}" if r["repeats"] > 1 else "")
          + (f" --budget {r['budget']:g}" if r["budget"] is not None else "")
          + (f" --flip-rate {r['flip']:g}" if r["flip"] else "") + f"): {r['cases']} cases, "
          f"{r['failing_instances']} failing instances ({r['misread']} misread apart); {r['seconds']} s")
    print(f"  tolerant {_pct(r['tolerant_accuracy'])}; dominant on clear {_pct(r['dominant_accuracy_clear'])} of "
          f"{r['clear']}; Undetermined {_pct(r['undetermined'])}, decided {_pct(r['decided_accuracy'])}"
          + (f" ({r['root_passed']} roots passed by majority)" if r["root_passed"] else "")
          + f"; ECE {'—' if r['ece'] is None else format(r['ece'], '.3f')}")
    print(f"  generations per tree {g['per_tree']['mean']:g} (p90 {g['per_tree']['p90']:g}), per failing instance "
          f"{g['per_failing_instance']}")
    print("  Table 3 exact / estimate (error): " + "; ".join(
        f"{SHORT[n]} {m['exact']:.3f} / {m['estimate']:.3f} ({m['error']:.3f}"
        + (", not covered" if m["covered"] is False else "") + ")" for n, m in r["mix"].items())
        + f"; intervals cover {sum(covered)} of {len(covered)}")
    print(f"  realized cause (secondary) {_pct(rc['accuracy'])} of {rc['instances']}, ceiling {ceiling}", flush=True)


def _method(r: dict) -> str:
    if r["method"] == "rates":
        return f"rates {r['budget']:g}" + (f", flip {r['flip']:g}" if r["flip"] else "")
    return "first-pass" + (f", K = {r['repeats']}" if r["repeats"] > 1 else "")


def _row(r: dict) -> str:
    """The configuration as a row of docs/diagnose.md's table."""
    g, rc = r["generations"], r["realized_cause"]
    errors = [m["error"] for m in r["mix"].values()]
    covered = [m["covered"] for m in r["mix"].values() if m["covered"] is not None]
    return (f"| `{r['name']}` | `{r['profile']}` | `{r['judge']}` | {_method(r)} | {r['failing_instances']} "
            f"({r['misread']}) | **{_pct(r['tolerant_accuracy'])}** | {_pct(r['dominant_accuracy_clear'])} of "
            f"{r['clear']} | {_pct(r['undetermined'])} | {_pct(r['decided_accuracy'])} | "
            f"{'—' if r['ece'] is None else format(r['ece'], '.3f')} | {g['per_tree']['mean']:g} / "
            f"{g['per_tree']['p90']:g} | {g['per_failing_instance']} | {max(errors):.3f} | "
            f"{sum(covered)} of {len(covered)} | {_pct(rc['accuracy'])} ({_pct(rc['ceiling'])}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-slot", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--only", help="run only these configurations (comma-separated names: "
                                       + ", ".join(c.name for c in CONFIGS) + ")")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    wanted = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else [c.name for c in CONFIGS]
    unknown = sorted(set(wanted) - {c.name for c in CONFIGS})
    if unknown or not wanted:
        parser.error(f"--only: {', '.join(unknown) or 'no name'}: not a configuration")
    configs = [c for c in CONFIGS if c.name in wanted]
    compile_bytecode(ROOT)
    from tracebench import __version__
    from tracebench.sample import SampleOptions, sample_benchmark

    runs, results = [], []
    with tempfile.TemporaryDirectory(prefix="tracebench-localization-") as tmp:
        bench = Path(tmp) / "bench"
        sample_benchmark(bench, SampleOptions(slots=tuple(range(1, 9)), per_slot=args.per_slot, seed=args.seed,
                                              applications=False))
        for i, (profile, judge) in enumerate(dict.fromkeys((c.profile, c.judge) for c in configs)):
            work = Path(tmp) / f"r{i}"
            run = _run(bench, work / "run", profile, judge)
            runs.append({"generator": f"synthetic:{profile}", "judge": judge, "avg": run["avg"],
                         "failing_cases": len(run["failing"]),
                         "failing_instances": sum(len(v) for v in run["failing"].values())})
            if not args.json:
                print(f"run synthetic:{profile} judged by {judge}: avg {run['avg']:.4f}, {runs[-1]['failing_cases']} "
                      f"failing cases, {runs[-1]['failing_instances']} failing instances", flush=True)
            for config in (c for c in configs if (c.profile, c.judge) == (profile, judge)):
                results.append(_configuration(bench, work, config, run))
                if not args.json:
                    _print(results[-1])
    if args.json:
        print(json.dumps({"machine": machine(tracebench=__version__), "per_slot": args.per_slot, "seed": args.seed,
                          "runs": runs, "configs": results}, indent=2))
        return
    print("\n" + HEADER)
    for r in results:
        print(_row(r))


if __name__ == "__main__":
    main()
