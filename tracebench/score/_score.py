"""``trace score``: operator scores of a run (METHOD.md §8), with the formula stated.

- A question's verdict is pass, fail or abstain (no usable answer). A question whose
  ``depends_on`` parent fails, fails too (DSG-style: "is the hat red?" fails without a hat).
- An **operator instance** (op, target) scores the share of its answered questions that
  pass, so each instance contributes at most 1; an instance with every question abstained
  is left out.
- A **case** scores, per operator, the mean of its instances of that operator; and overall,
  the mean of all its instances, whatever their operator.
- The **benchmark** scores, per operator, the mean over the cases that have that operator;
  and **overall**, the mean over cases of the case's overall score. (The paper's "Avg" is
  not reproducible from its operator columns; this one is defined.)
- 95% intervals: percentile bootstrap over cases (scipy.stats.bootstrap, 1,000 resamples,
  seeded), for each operator and overall.
Breakdowns: by slot level, by application, by attribute subtype (disentangle instances of
g terms by the subtype they extract) and by the number of entities in an anchor's source
image (anchor instances).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import fmean
from typing import Any

import numpy as np
from scipy import stats

from ..errors import TraceError
from ..records import Case
from ..run import RunFolder, load_run

__all__ = ["OPERATORS", "effective_verdicts", "format_scores", "instance_results", "instance_scores", "score_folder",
           "score_run"]

OPERATORS = ("anchor", "disentangle", "apply", "compose")


def effective_verdicts(case: Case, verdicts: dict[str, str]) -> dict[str, bool | None]:
    """Pass/fail per question after dependencies; None for an abstention."""
    parents = {q.id: q.depends_on for q in case.checklist}
    memo: dict[str, bool | None] = {}

    def value(qid: str) -> bool | None:
        if qid not in memo:
            memo[qid] = None  # no cycle: the case reader refuses one (checklist_problem); guards recursion anyway
            own = verdicts.get(qid, "abstain")
            result: bool | None = None if own == "abstain" else own == "pass"
            if any(value(p) is False for p in parents.get(qid, ())):
                result = False
            memo[qid] = result
        return memo[qid]

    return {q.id: value(q.id) for q in case.checklist}


def instance_results(case: Case, verdicts: dict[str, str]) -> dict[tuple[str, str], bool | None]:
    """(operator, target) -> whether the operator instance holds: True when every answered
    question passes (after dependencies), False when one fails, None when none is answered.
    What a diagnosis tracks from node to node."""
    effective = effective_verdicts(case, verdicts)
    answers: dict[tuple[str, str], list[bool | None]] = {}
    for q in case.checklist:
        answers.setdefault((q.op, q.target), []).append(effective[q.id])
    return {key: (False if any(v is False for v in values) else True if any(values) else None)
            for key, values in answers.items()}


def instance_scores(case: Case, verdicts: dict[str, str]) -> dict[tuple[str, str], float]:
    """(operator, target) -> the share of its answered questions that pass (after dependencies);
    instances with no answered question are left out. What ``trace score`` averages."""
    effective = effective_verdicts(case, verdicts)
    answered: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for q in case.checklist:
        if effective[q.id] is not None:
            answered[(q.op, q.target)].append(effective[q.id])
    return {key: fmean(map(float, values)) for key, values in answered.items()}


def _mean(values: list[float]) -> float | None:
    return round(fmean(values), 4) if values else None


def _ci(values: list[float], seed: int) -> list[float] | None:
    if len(values) < 2 or len(set(values)) == 1:
        return [round(values[0], 4)] * 2 if values else None
    result = stats.bootstrap((np.asarray(values),), np.mean, n_resamples=1000, confidence_level=0.95,
                             method="percentile", random_state=np.random.default_rng(seed))
    return [round(float(result.confidence_interval.low), 4), round(float(result.confidence_interval.high), 4)]


def _group(rows: list[dict], key: str) -> dict[str, dict[str, float | None]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        if row[key] is not None:
            groups[str(row[key])].append(row)
    out = {}
    for name in sorted(groups, key=lambda k: (len(k), k)):
        members = groups[name]
        out[name] = {op: _mean([r[op] for r in members if r[op] is not None]) for op in OPERATORS}
        out[name]["overall"] = _mean([r["overall"] for r in members if r["overall"] is not None])
        out[name]["cases"] = len(members)
    return out


def score_run(run_dir: Path, *, cases_dir: Path | None = None, seed: int = 0) -> dict[str, Any]:
    """The scores of a run folder (``trace run``'s output)."""
    return score_folder(load_run(run_dir, cases_dir=cases_dir), seed=seed)


def score_folder(run: RunFolder, *, seed: int = 0) -> dict[str, Any]:
    """The scores of a run folder already read (:func:`~tracebench.run.load_run`)."""
    manifest, cases, verdicts = run.manifest, run.cases, run.verdicts
    total = sum(len(v) for v in verdicts.values())
    abstained = sum(verdict == "abstain" for v in verdicts.values() for verdict in v.values())
    rows, subtype_scores, entity_scores = [], defaultdict(list), defaultdict(list)
    for case_id in verdicts:
        case = cases[case_id]
        instances = instance_scores(case, verdicts[case_id])
        terms = {t.symbol: t for t in case.terms}
        row = {"slot": case.slot, "application": case.application}
        for op in OPERATORS:
            row[op] = _mean([s for (o, _), s in instances.items() if o == op])
        row["overall"] = _mean(list(instances.values()))
        rows.append(row)
        for (op, target), value in instances.items():
            term = terms.get(target)
            if op == "disentangle" and term is not None and term.subtype:
                subtype_scores[term.subtype].append(value)
            if op == "anchor" and term is not None and term.source_entities is not None:
                entity_scores[term.source_entities].append(value)
    if not rows:
        raise TraceError(f"{run.root}: no verdicts to score")
    operators = {op: _mean([r[op] for r in rows if r[op] is not None]) for op in OPERATORS}
    ci95 = {op: _ci([r[op] for r in rows if r[op] is not None], seed) for op in OPERATORS}
    ci95["overall"] = _ci([r["overall"] for r in rows if r["overall"] is not None], seed)
    return {
        "overall": _mean([r["overall"] for r in rows if r["overall"] is not None]),
        "operators": operators,
        "ci95": ci95,
        "by_slot": _group(rows, "slot"),
        "by_application": _group(rows, "application"),
        "by_subtype": {k: {"disentangle": _mean(v), "instances": len(v)} for k, v in sorted(subtype_scores.items())},
        "by_entity_count": {str(k): {"anchor": _mean(v), "instances": len(v)} for k, v in sorted(entity_scores.items())},
        "abstentions": {"count": abstained, "share": round(abstained / total, 4) if total else 0.0},
        "cases": len(rows),
        "run": {"generator": manifest.generator, "judges": list(manifest.judges)},
    }


def format_scores(scores: dict[str, Any]) -> str:
    """A plain-text table of the headline scores."""
    lines = [f"{'operator':12s} {'score':>7s}  95% CI"]
    for op in (*OPERATORS, "overall"):
        value = scores["operators"].get(op) if op != "overall" else scores["overall"]
        ci = scores["ci95"].get(op)
        shown = "   n/a" if value is None else f"{value:7.4f}"
        lines.append(f"{op:12s} {shown}  {ci if ci else ''}")
    lines.append(f"cases {scores['cases']}, abstentions {scores['abstentions']['count']} "
                 f"({scores['abstentions']['share']:.1%})")
    return "\n".join(lines)

