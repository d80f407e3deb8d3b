"""Protocol validity on known truth: do the neighbours' one-number protocols see what the zoo injects?

1. Ranking (--rank): for each family of the zoo's failure modes whose severity is a number
   (``strain:S``, ``partial:P``, ``noise:P``, ``distractor-confusion:P`` on a cluttered benchmark),
   runs at increasing severity on one benchmark, judged by the exact oracle on the binary scale
   (and, for ``partial``, on the ternary and tiers scales too). Per protocol, Spearman's rho between
   the severity and the score: -1 when the protocol orders the runs as the injected severity does.
2. Misses (--misses): for each deterministic failure mode (global interference, composition
   interference, relation blindness, weak subtypes, no global, leaky binding) on several seeds,
   the run against the perfect zoo by ``trace compare`` (paired, clustered by template, Holm). A
   one-number protocol *misses* an injected failure when its own difference is not significant
   while an operator score's is (the failure the diagnosis localizes: docs/diagnose.md).

   The *clarity* of each metric is its difference in units of its interval's half-width (above 1:
   outside the interval), showing how much of an injected failure a one-number score dilutes.

    python bench/protocols.py [--per-slot 30] [--seeds 3] [--miss-per-slot N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from scipy.stats import spearmanr

from _machine import machine
from tracebench.providers import ModelSettings
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import ClutterSpec, SampleOptions, sample_benchmark
from tracebench.score import compare_runs, score_run

PROTOCOL_NAMES = ("longbanana", "macro", "savanna")
FAMILIES = {
    "strain:S": ("strain", (0.25, 0.5, 1.0, 2.0, 4.0)),
    "partial:P": ("partial", (0.1, 0.2, 0.3, 0.4, 0.5)),
    "noise:P": ("noise", (0.02, 0.05, 0.1, 0.15, 0.2)),
    "distractor-confusion:P": ("distractor-confusion", (0.1, 0.2, 0.3, 0.5, 0.8)),
}
DETERMINISTIC = ("global-interference", "composition-interference:2", "relation-blind",
                 "weak-subtype:1.1_pattern_texture,weak-subtype:4.1_style", "no-global", "leaky-binding")
OPERATOR_METRICS = ("anchor", "disentangle", "apply", "compose")


def _scores(run: Path) -> dict[str, float | None]:
    s = score_run(run, protocols=("trace", *PROTOCOL_NAMES))
    return {"trace": s.avg, **{name: s.protocols[name].overall for name in PROTOCOL_NAMES}}


def rank(tmp: Path, per_slot: int) -> list[dict]:
    plain = tmp / "plain"
    cluttered = tmp / "cluttered"
    sample_benchmark(plain, SampleOptions(slots=tuple(range(1, 9)), per_slot=per_slot, seed=0, applications=False))
    sample_benchmark(cluttered, SampleOptions(slots=tuple(range(1, 9)), per_slot=per_slot, seed=0, applications=False,
                                              clutter=ClutterSpec(3, 3)))
    rows = []
    for family, (mode, levels) in FAMILIES.items():
        bench = cluttered if mode == "distractor-confusion" else plain
        for scale in (("binary", "ternary", "tiers") if mode == "partial" else ("binary",)):
            scores = []
            for level in levels:
                out = tmp / f"rank-{mode}-{level}-{scale}"
                run_benchmark(bench, out, RunOptions(generator=f"synthetic:{mode}:{level}", judges=["oracle"],
                              settings=ModelSettings(max_retries=0, scale=scale)))
                scores.append(_scores(out))
            row = {"family": family, "scale": scale, "levels": list(levels)}
            for name in ("trace", *PROTOCOL_NAMES):
                values = [s[name] for s in scores]
                row[name] = {"scores": values, "spearman": round(float(spearmanr(levels, values).statistic), 3)}
            rows.append(row)
    return rows


def misses(tmp: Path, per_slot: int, seeds: int) -> list[dict]:
    rows = []
    for seed in range(seeds):
        bench = tmp / f"miss-bench-{seed}"
        sample_benchmark(bench, SampleOptions(slots=tuple(range(1, 9)), per_slot=per_slot, seed=100 + seed,
                                              applications=False))
        perfect = tmp / f"miss-perfect-{seed}"
        run_benchmark(bench, perfect, RunOptions(generator="synthetic:perfect", judges=["oracle"],
                      settings=ModelSettings(max_retries=0)))
        for profile in DETERMINISTIC:
            out = tmp / f"miss-{seed}-{profile.replace(':', '_').replace(',', '+')}"
            run_benchmark(bench, out, RunOptions(generator=f"synthetic:{profile}", judges=["oracle"],
                          settings=ModelSettings(max_retries=0)))
            result = compare_runs([perfect, out], protocols=PROTOCOL_NAMES, seed=seed)
            seen = {d.metric: d.significant and (d.difference or 0) > 0 for d in result.differences}
            # the difference in units of its own interval's half-width: how clearly the metric sees it
            clarity = {d.metric: round(2 * d.difference / (d.ci95[1] - d.ci95[0]), 2)
                       if d.ci95 and d.ci95[1] > d.ci95[0] and d.difference is not None else None
                       for d in result.differences}
            operator = any(seen[m] for m in OPERATOR_METRICS)
            rows.append({"seed": seed, "profile": profile, "operators_detect": operator,
                         "operators": [m for m in OPERATOR_METRICS if seen[m]], "clarity": clarity,
                         **{name: seen[name] for name in ("overall", *PROTOCOL_NAMES)}})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-slot", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--miss-per-slot", type=int, default=None,
                        help="cases per slot level of the misses' benchmarks (default --per-slot): small studies miss more")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {"machine": machine(), "per_slot": args.per_slot, "rank": rank(Path(tmp), args.per_slot),
                  "misses": misses(Path(tmp), args.miss_per_slot or args.per_slot, args.seeds)}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        return
    print("| family | scale | trace avg | LongBanana | MacroBench | Savanna |\n|---|---|---:|---:|---:|---:|")
    for row in result["rank"]:
        print(f"| `{row['family']}` | {row['scale']} | " + " | ".join(
            f"{row[name]['spearman']:+.3f}" for name in ("trace", *PROTOCOL_NAMES)) + " |")
    print()
    print("| profile | runs where an operator detects it | missed by overall | LongBanana | MacroBench | Savanna |")
    print("|---|---:|---:|---:|---:|---:|")
    for profile in DETERMINISTIC:
        rows = [r for r in result["misses"] if r["profile"] == profile]
        detected = [r for r in rows if r["operators_detect"]]
        cells = [f"{sum(not r[name] for r in detected)} of {len(detected)}" for name in ("overall", *PROTOCOL_NAMES)]
        print(f"| `{profile}` | {len(detected)} of {len(rows)} | " + " | ".join(cells) + " |")
    print()
    print("| profile | clearest operator | overall | LongBanana | MacroBench | Savanna |  (difference / interval half-width, median over seeds)")
    print("|---|---:|---:|---:|---:|---:|")
    for profile in DETERMINISTIC:
        rows = [r for r in result["misses"] if r["profile"] == profile]

        def median(name: str) -> str:
            values = sorted(r["clarity"][name] for r in rows if r["clarity"].get(name) is not None)
            return f"{values[len(values) // 2]:.1f}" if values else "n/a"

        best = max(OPERATOR_METRICS, key=lambda m: float(median(m)) if median(m) != "n/a" else -1)
        print(f"| `{profile}` | {best} {median(best)} | " + " | ".join(median(n) for n in ("overall", *PROTOCOL_NAMES))
              + " |")


if __name__ == "__main__":
    main()
