"""The effect of each departure from the paper (docs/fidelity.md): the paper's default against
tracebench's option, measured on the same synthetic runs.

One benchmark is sampled (``--per-slot`` cases per slot level 1..8, seed 7, with the
applications of templates/applications.toml; the default benchmark at 180), and run twice in
process, judged by the oracle:

- ``--profile`` (default: a zoo of deterministic failures and 5% noise), scored with gating
  within (the default) and cross, as the mean of per-slot means (the default) and case-weighted;
- the images of that run judged again by an ensemble of the oracle and a judge that answers
  yes to everything (examples/plugins/always_yes.py), combined by mean (the default) and by
  majority: the verdicts where they disagree, the abstentions, the scores.

A smaller benchmark (``--diagnose-per-slot``, seed 7) is diagnosed under ``--diagnose-profile``
(global interference with 5% noise), to measure the attribution at the first pass with the
unstable flag against the earlier rule (Unstable replaced the source of any instance that
flipped), and the cumulative pass rate at relative depth 0.5 measured per path (the default)
against over the tree's greatest depth (the earlier rule).

The benchmark's own text gives the rest: the composition questions of scenes without C (the
implicit C0) and the questions per operator instance, and the share of g_rel lines that state
the relation in words.

Run from the repository root, in the environment where tracebench is installed::

    python bench/fidelity.py [--per-slot 180] [--diagnose-per-slot 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from statistics import fmean

from _machine import compile_bytecode, machine

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "global-interference,composition-interference:2,relation-blind,weak-subtype:1.1_pattern_texture,leaky-binding,noise:0.05"
DIAGNOSE_PROFILE = "global-interference,noise:0.05"
ALWAYS_YES = f"python:{ROOT / 'examples' / 'plugins' / 'always_yes.py'}"


def _scores(run: Path) -> dict:
    from tracebench.score import score_run

    within, cross = score_run(run), score_run(run, gating="cross")
    return {"within": {op.value: v for op, v in within.operators.items()}, "avg": within.avg,
            "cross": {op.value: v for op, v in cross.operators.items()}, "avg_cross": cross.avg,
            "case_weighted": {op.value: v for op, v in within.case_weighted.operators.items()},
            "overall_case_weighted": within.case_weighted.overall, "scope": within.scope}


def _checklist(bench: Path) -> dict:
    from tracebench.operators import SCENE
    from tracebench.sample import read_cases

    per_instance: dict[str, Counter] = defaultdict(Counter)
    scene_questions = scene_cases = cases = 0
    g_rel_lines = worded = 0
    for case in read_cases(bench):
        cases += 1
        counts: Counter = Counter()
        for q in case.checklist:
            counts[(q.op.value, q.target)] += 1
        terms = {t.symbol: t for t in case.terms}
        for (op, target), n in counts.items():
            carrier, _, g = target.partition("⊕")
            role = terms[g].role.value if g and g in terms else terms[target].role.value if target in terms else (
                "scene" if target == SCENE else "composition")
            per_instance[f"{op}/{role}"][n] += 1
        in_scene = sum(q.target == SCENE for q in case.checklist)
        scene_questions += in_scene
        scene_cases += bool(in_scene)
        for t in case.terms:
            if t.role.value == "relation" and t.op.value == "g":
                line = next(l for l in case.prompt.splitlines() if t.image and f"{t.image}]" in l and "interact" in l)
                g_rel_lines += 1
                worded += t.value in line
    return {"cases": cases, "scene_cases": scene_cases, "scene_questions": scene_questions,
            "questions_per_instance": {k: dict(sorted(v.items())) for k, v in sorted(per_instance.items())},
            "g_rel_lines": g_rel_lines, "g_rel_lines_in_words": worded}


def _ensemble(bench: Path, images: Path, work: Path) -> dict:
    from tracebench.providers import ModelSettings
    from tracebench.records import Verdict
    from tracebench.run import RunOptions, run_benchmark
    from tracebench.score import score_run

    out = {}
    for rule in ("mean", "majority"):
        manifest = run_benchmark(bench, work / rule, RunOptions(generator=f"folder:{images}", judges=["oracle", ALWAYS_YES],
                                 settings=ModelSettings(seed=0), ensemble=rule, progress=False))
        scores = score_run(work / rule)
        out[rule] = {"abstentions": manifest.abstentions, "verdicts": manifest.verdicts,
                     "operators": {op.value: v for op, v in scores.operators.items()}, "avg": scores.avg}
    disagree = sum(len({v.verdict for v in Verdict.model_validate_json(line).votes}) == 2
                   for line in (work / "mean" / "verdicts.jsonl").read_text().splitlines())
    out["disagreements"] = disagree
    return out


def _diagnosis(bench: Path, work: Path, profile: str) -> dict:
    from tracebench.diagnose import DiagnoseOptions, diagnose_run
    from tracebench.providers import ModelSettings
    from tracebench.records import DiagnosticTree
    from tracebench.run import RunOptions, run_benchmark

    run_benchmark(bench, work / "run", RunOptions(generator=f"synthetic:{profile}", judges=["oracle"],
                  settings=ModelSettings(seed=0), progress=False))
    summary = diagnose_run(work / "run", work / "diag", DiagnoseOptions(settings=ModelSettings(seed=0), progress=False))
    paper, earlier = Counter(), Counter()
    by_path, by_tree = defaultdict(list), defaultdict(list)
    for line in (work / "diag" / "trees.jsonl").read_text().splitlines():
        tree = DiagnosticTree.model_validate_json(line)
        for a in tree.attributions:
            if a.source is None or a.source == "undetermined":
                continue
            paper[a.source] += 1
            earlier["unstable" if a.unstable else a.source] += 1
            if a.relative_depth is not None:
                by_path[a.op].append(a.relative_depth <= 0.5 + 1e-9)
                by_tree[a.op].append(a.depth / tree.max_depth <= 0.5 + 1e-9 if tree.max_depth else True)
            else:
                by_path[a.op].append(False)
                by_tree[a.op].append(False)
    n = sum(paper.values())
    return {"cases": summary.cases, "instances": n, "unstable_flagged": summary.unstable.get("instances"),
            "sources_first_pass": {k: round(v / n, 4) for k, v in sorted(paper.items())},
            "sources_earlier_rule": {k: round(v / n, 4) for k, v in sorted(earlier.items())},
            "cumulative_at_half_per_path": {op: round(fmean(v), 4) for op, v in sorted(by_path.items())},
            "cumulative_at_half_tree_max": {op: round(fmean(v), 4) for op, v in sorted(by_tree.items())},
            "localization": (summary.localization_accuracy or {}).get("accuracy")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-slot", type=int, default=180)
    parser.add_argument("--diagnose-per-slot", type=int, default=30)
    parser.add_argument("--profile", default=PROFILE)
    parser.add_argument("--diagnose-profile", default=DIAGNOSE_PROFILE)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_bytecode(ROOT)
    from tracebench import __version__
    from tracebench.providers import ModelSettings
    from tracebench.run import RunOptions, run_benchmark
    from tracebench.sample import SampleOptions, sample_benchmark

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tracebench-fidelity-") as tmp:
        work = Path(tmp)
        bench = work / "bench"
        sample_benchmark(bench, SampleOptions(slots=tuple(range(1, 9)), per_slot=args.per_slot, seed=7, applications=True))
        run_benchmark(bench, work / "run", RunOptions(generator=f"synthetic:{args.profile}", judges=["oracle"],
                      settings=ModelSettings(seed=0), progress=False))
        result = {
            "machine": machine(tracebench=__version__),
            "benchmark": {"per_slot": args.per_slot, "seed": 7, "profile": args.profile},
            "scores": _scores(work / "run"),
            "checklist": _checklist(bench),
            "ensemble": _ensemble(bench, work / "run" / "images", work / "ensemble"),
        }
        small = work / "small"
        sample_benchmark(small, SampleOptions(slots=tuple(range(1, 9)), per_slot=args.diagnose_per_slot, seed=7,
                                              applications=False))
        result["diagnosis"] = {"per_slot": args.diagnose_per_slot, "profile": args.diagnose_profile,
                               **_diagnosis(small, work / "small-work", args.diagnose_profile)}
    result["total_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
