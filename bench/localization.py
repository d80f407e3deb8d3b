"""How far the diagnosis can be trusted when failures are random and the judge errs (docs/diagnose.md).

One benchmark is sampled (``--per-slot`` cases per slot level 1..8, seed 7, no applications),
then for each configuration below it is run in process and every failing case is diagnosed
(``--strategy full``; one generation per node, as the paper does, or ``--repeats K`` decided by
majority):

- the generator: a deterministic profile (its failures happen exactly where the rules look, so
  localization is 100% by construction) or the load modes of taxonomy/zoo.toml (``strain``: every
  failure drawn anew per generation, its probability growing with the case's load);
- the judge: the exact oracle, or one that errs (``oracle:flip=P,yes-bias=Q``).

Reported per configuration: the scores, the localization accuracy (share of root failures with
a recorded cause whose source is the expected one), by cause; the share of each source (the
paper's Table 3, all operators); the share flagged unstable; and the judge's agreement with the
truth the generation record holds (share of the run's verdicts equal to the truth; of the
questions whose truth is a fail, the share judged pass; of those whose truth is a pass, the share
judged fail).

Run from the repository root, in the environment where tracebench is installed::

    python bench/localization.py [--per-slot 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from _machine import compile_bytecode, machine

ROOT = Path(__file__).resolve().parents[1]

DETERMINISTIC = "global-interference,composition-interference:2"
CONFIGS = [  # (name, generator profile, judge, --repeats)
    ("deterministic, exact judge", DETERMINISTIC, "oracle", 1),
    ("deterministic, judge flips 5%", DETERMINISTIC, "oracle:flip=0.05", 1),
    ("deterministic, judge flips 5%, repeats 3", DETERMINISTIC, "oracle:flip=0.05", 3),
    ("global-interference with 5% noise", "global-interference,noise:0.05", "oracle", 1),
    ("global-interference with 5% noise, repeats 3", "global-interference,noise:0.05", "oracle", 3),
    ("global-interference with 5% noise, repeats 5", "global-interference,noise:0.05", "oracle", 5),
    ("strain, exact judge", "strain", "oracle", 1),
    ("strain, exact judge, repeats 3", "strain", "oracle", 3),
    ("strain, exact judge, repeats 5", "strain", "oracle", 5),
    ("strain:2, exact judge", "strain:2", "oracle", 1),
    ("strain, judge flips 5%", "strain", "oracle:flip=0.05", 1),
    ("strain, judge flips 5%, yes-bias 10%", "strain", "oracle:flip=0.05,yes-bias=0.1", 1),
]


def _judge_truth(run: Path) -> dict:
    """The run's verdicts against the truth the generation records hold."""
    from tracebench.records import read_verdicts
    from tracebench.run import generated_image
    from tracebench.zoo import read_record

    failed: dict[str, dict] = {}
    counts: Counter = Counter()
    for v in read_verdicts(run):
        if v.case_id not in failed:
            record = read_record(generated_image(run, v.case_id).read_bytes())
            failed = {v.case_id: record.failed}
        truth_pass = v.question_id not in failed[v.case_id]
        if not v.outcome.answered:
            counts["abstained"] += 1
            continue
        judged_pass = v.outcome.passed
        counts["verdicts"] += 1
        counts["agree"] += judged_pass == truth_pass
        counts["truth_fail"] += not truth_pass
        counts["truth_pass"] += truth_pass
        counts["false_pass"] += judged_pass and not truth_pass
        counts["false_fail"] += truth_pass and not judged_pass
    return {"verdicts": counts["verdicts"], "agreement": round(counts["agree"] / counts["verdicts"], 4),
            "truth_fail_judged_pass": round(counts["false_pass"] / max(counts["truth_fail"], 1), 4),
            "truth_pass_judged_fail": round(counts["false_fail"] / max(counts["truth_pass"], 1), 4),
            "abstained": counts["abstained"]}


def _configuration(bench: Path, work: Path, name: str, profile: str, judge: str, repeats: int) -> dict:
    from tracebench.diagnose import DiagnoseOptions, diagnose_run
    from tracebench.providers import ModelSettings
    from tracebench.run import RunOptions, run_benchmark
    from tracebench.score import score_run

    settings = ModelSettings(max_retries=0, timeout=60.0)
    run, diag = work / "run", work / "diag"
    started = time.perf_counter()
    run_benchmark(bench, run, RunOptions(generator=f"synthetic:{profile}", judges=[judge], settings=settings, progress=False))
    scores = score_run(run)
    summary = diagnose_run(run, diag, DiagnoseOptions(strategy="full", settings=settings, progress=False, repeats=repeats))
    loc = summary.localization_accuracy or {}
    return {
        "name": name, "generator": f"synthetic:{profile}", "judge": judge, "repeats": repeats,
        "scores": {op.value: round(v, 4) for op, v in scores.operators.items()}, "avg": round(scores.avg, 4),
        "diagnosed_cases": summary.cases, "instances": summary.instances,
        "localization": {"accuracy": loc.get("accuracy"), "correct": loc.get("correct"),
                         "instances": loc.get("instances"),
                         "by_cause": {c: {"accuracy": v["accuracy"], "instances": v["instances"]}
                                      for c, v in (loc.get("by_cause") or {}).items()}},
        "sources": {k: round(v, 4) for k, v in summary.sources.items()},
        "unstable": round(summary.unstable["share"], 4) if summary.unstable else 0.0,
        "judge_vs_truth": _judge_truth(run),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-slot", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    compile_bytecode(ROOT)
    from tracebench import __version__
    from tracebench.sample import SampleOptions, sample_benchmark

    results = []
    with tempfile.TemporaryDirectory(prefix="tracebench-localization-") as tmp:
        bench = Path(tmp) / "bench"
        sample_benchmark(bench, SampleOptions(slots=tuple(range(1, 9)), per_slot=args.per_slot, seed=7,
                                              applications=False))
        for i, (name, profile, judge, repeats) in enumerate(CONFIGS):
            results.append(_configuration(bench, Path(tmp) / f"c{i}", name, profile, judge, repeats))
            if not args.json:
                r = results[-1]
                loc = r["localization"]
                causes = ", ".join(f"{c} {v['accuracy']:.1%} of {v['instances']}" for c, v in loc["by_cause"].items())
                print(f"{name}: avg {r['avg']:.4f}; {r['diagnosed_cases']} cases diagnosed; localization "
                      f"{loc['accuracy']:.1%} of {loc['instances']} ({causes}); sources "
                      + ", ".join(f"{k} {v:.1%}" for k, v in r["sources"].items())
                      + f"; unstable {r['unstable']:.1%}; judge vs truth {r['judge_vs_truth']}; {r['seconds']} s",
                      flush=True)
    if args.json:
        print(json.dumps({"machine": machine(tracebench=__version__), "per_slot": args.per_slot, "configs": results},
                         indent=2))


if __name__ == "__main__":
    main()
