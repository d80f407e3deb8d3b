"""``trace score``: operator scores of a run (TRACE-Bench, arXiv 2608.16765: evaluation), with the formula stated.

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
- 95% intervals: percentile bootstrap over cases (1,000 resamples, seeded), for each operator
  and overall: scipy.stats.bootstrap's percentile method, computed with numpy alone (the
  same resamples and quantiles, bit for bit) so that scoring does not import SciPy.
Breakdowns: by slot level, by application, by attribute subtype (disentangle instances of
g terms by the subtype they extract) and by the number of entities in an anchor's source
image (anchor instances).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import fmean
from typing import Iterable, Mapping, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TraceError
from ..operators import OPERATORS, Instance, Operator
from ..outcomes import ABSTAINED, FAILED, Outcome
from ..records import Case, RunManifest
from ..run import RunFolder

__all__ = ["Abstentions", "EntityCountScore", "GroupScores", "OPERATORS", "RunIdentity", "Scores", "SubtypeScore",
           "effective_outcomes", "format_scores", "instance_results", "instance_scores", "score_cases", "score_folder",
           "score_run"]


# ------------------------------------------------------------------------------------ records


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GroupScores(_Record):
    """Scores of the cases of one slot level or one application."""

    anchor: float | None = None
    disentangle: float | None = None
    apply: float | None = None
    compose: float | None = None
    overall: float | None = Field(default=None, description="mean over the group's cases of the case's overall score")
    cases: int = Field(description="cases in the group")


class SubtypeScore(_Record):
    disentangle: float | None = Field(description="mean of the disentangle instances of g terms of this subtype")
    instances: int


class EntityCountScore(_Record):
    anchor: float | None = Field(description="mean of the anchor instances whose source image holds this many entities")
    instances: int


class Abstentions(_Record):
    count: int = Field(description="questions whose verdict is an abstention")
    share: float = Field(description="their share of all questions")


class RunIdentity(_Record):
    generator: str
    judges: tuple[str, ...]


class Scores(_Record):
    """``trace score --json``: a run's operator scores, intervals and breakdowns (formulas in the
    module docstring). Operators are keyed by name, in the paper's order."""

    overall: float | None = Field(description="mean over cases of the case's overall score")
    operators: dict[Operator, float | None] = Field(description="operator -> mean over the cases that have it")
    ci95: dict[str, tuple[float, float] | None] = Field(description="operator (and overall) -> 95% percentile "
                                                                    "bootstrap interval over cases")
    by_slot: dict[str, GroupScores]
    by_application: dict[str, GroupScores]
    by_subtype: dict[str, SubtypeScore]
    by_entity_count: dict[str, EntityCountScore]
    abstentions: Abstentions
    cases: int = Field(description="cases with verdicts")
    run: RunIdentity


# ------------------------------------------------------------------------------------ scoring


def effective_outcomes(case: Case, verdicts: Mapping[str, Outcome]) -> dict[str, Outcome]:
    """Each question's outcome after dependencies: a question whose ``depends_on`` parent fails,
    fails (value 0); a question without a verdict is an abstention."""
    parents = {q.id: q.depends_on for q in case.checklist}
    memo: dict[str, Outcome] = {}

    def value(qid: str) -> Outcome:
        if qid not in memo:
            memo[qid] = ABSTAINED  # no cycle: the case reader refuses one (checklist_problem); guards recursion anyway
            own = verdicts.get(qid, ABSTAINED)
            memo[qid] = FAILED if any(value(p).failed for p in parents.get(qid, ())) else own
        return memo[qid]

    return {q.id: value(q.id) for q in case.checklist}


def instance_results(case: Case, verdicts: Mapping[str, Outcome]) -> dict[Instance, Outcome]:
    """Operator instance -> whether it holds: fail when an answered question fails (after
    dependencies), pass when some are answered and none fails, abstain when none is answered;
    the value is the mean of the answered questions' values. What a diagnosis tracks from
    node to node."""
    effective = effective_outcomes(case, verdicts)
    answers: dict[Instance, list[Outcome]] = {}
    for q in case.checklist:
        answers.setdefault(Instance(q.op, q.target), []).append(effective[q.id])
    results = {}
    for key, outcomes in answers.items():
        answered = [o for o in outcomes if o.answered]
        if not answered:
            results[key] = ABSTAINED
            continue
        status = "fail" if any(o.failed for o in answered) else "pass"
        results[key] = Outcome.of(status, fmean(o.value for o in answered))  # type: ignore[misc]
    return results


def instance_scores(case: Case, verdicts: Mapping[str, Outcome]) -> dict[Instance, float]:
    """Operator instance -> the mean value of its answered questions (after dependencies);
    instances with no answered question are left out. What ``trace score`` averages."""
    effective = effective_outcomes(case, verdicts)
    answered: dict[Instance, list[float]] = defaultdict(list)
    for q in case.checklist:
        outcome = effective[q.id]
        if outcome.answered:
            answered[Instance(q.op, q.target)].append(outcome.value)  # type: ignore[arg-type]
    return {key: fmean(values) for key, values in answered.items()}


def _mean(values: list[float]) -> float | None:
    return round(fmean(values), 4) if values else None


def _ci(values: list[float], seed: int) -> tuple[float, float] | None:
    if len(values) < 2 or len(set(values)) == 1:
        return (round(values[0], 4),) * 2 if values else None  # type: ignore[return-value]
    low, high = _bootstrap_interval(values, seed)
    return round(low, 4), round(high, 4)


def _bootstrap_interval(values: list[float], seed: int, resamples: int = 1000,
                        level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean, as ``scipy.stats.bootstrap(..., np.mean,
    method="percentile", random_state=np.random.default_rng(seed))`` gives it: the same index
    draws, and its default quantile (Hyndman-Fan type 7) of the sorted resample means."""
    import numpy as np  # only the intervals need it; keep it off the import path of trace diagnose

    data = np.asarray(values)
    draws = np.random.default_rng(seed).integers(0, len(data), (resamples, len(data)))
    means = np.sort(np.mean(data[draws], axis=-1))
    alpha = (1 - level) / 2
    p = np.array([alpha, 1 - alpha])
    position = p * resamples + (1 - p)
    upper = position // 1
    g = position % 1
    lower = np.clip(upper - 1, 0, resamples - 1).astype(np.int64)
    upper = np.clip(upper, 0, resamples - 1).astype(np.int64)
    low, high = (1 - g) * means[lower] + g * means[upper]
    return float(low), float(high)


class _Row(NamedTuple):
    """What scoring keeps of a case: its groups and its scores (None where it has no instance)."""

    slot: int
    application: str | None
    anchor: float | None
    disentangle: float | None
    apply: float | None
    compose: float | None
    overall: float | None


def _group(rows: list[_Row], key: str) -> dict[str, GroupScores]:
    groups: dict[str, list[_Row]] = defaultdict(list)
    for row in rows:
        if getattr(row, key) is not None:
            groups[str(getattr(row, key))].append(row)
    out = {}
    for name in sorted(groups, key=lambda k: (len(k), k)):
        members = groups[name]
        out[name] = GroupScores(**{op: _mean([getattr(r, op) for r in members if getattr(r, op) is not None])
                                   for op in OPERATORS},
                                overall=_mean([r.overall for r in members if r.overall is not None]),
                                cases=len(members))
    return out


def score_run(run_dir: Path, *, cases_dir: Path | None = None, seed: int = 0) -> Scores:
    """The scores of a run folder (``trace run``'s output), read as a stream: memory holds a few
    numbers a case, never the cases or their verdicts."""
    from ..run import stream_run

    stream = stream_run(run_dir, cases_dir=cases_dir)
    return score_cases(stream.manifest, ((item.case, item.outcomes) for item in stream), root=stream.root, seed=seed)


def score_folder(run: RunFolder, *, seed: int = 0) -> Scores:
    """The scores of a run folder already read (:func:`~tracebench.run.load_run`)."""
    return score_cases(run.manifest, ((run.cases[case_id], run.verdicts[case_id]) for case_id in run.verdicts),
                       root=run.root, seed=seed)


def score_cases(manifest: RunManifest, cases: Iterable[tuple[Case, Mapping[str, Outcome]]], *, root: Path,
                seed: int = 0) -> Scores:
    """The scores of a run's cases with their outcomes, in run order, consumed one at a time."""
    total = abstained = 0
    rows: list[_Row] = []
    subtype_scores, entity_scores = defaultdict(list), defaultdict(list)
    for case, outcomes in cases:
        total += len(outcomes)
        abstained += sum(not outcome.answered for outcome in outcomes.values())
        instances = instance_scores(case, outcomes)
        terms = {t.symbol: t for t in case.terms}
        rows.append(_Row(case.slot, case.application,
                         *(_mean([s for (o, _), s in instances.items() if o == op]) for op in OPERATORS),
                         _mean(list(instances.values()))))
        for (op, target), value in instances.items():
            term = terms.get(target)
            if op == Operator.DISENTANGLE and term is not None and term.subtype:
                subtype_scores[term.subtype].append(value)
            if op == Operator.ANCHOR and term is not None and term.source_entities is not None:
                entity_scores[term.source_entities].append(value)
    if not rows:
        raise TraceError(f"{root}: no verdicts to score")
    ci95: dict[str, tuple[float, float] | None] = {
        op.value: _ci([getattr(r, op) for r in rows if getattr(r, op) is not None], seed) for op in OPERATORS}
    ci95["overall"] = _ci([r.overall for r in rows if r.overall is not None], seed)
    return Scores(
        overall=_mean([r.overall for r in rows if r.overall is not None]),
        operators={op: _mean([getattr(r, op) for r in rows if getattr(r, op) is not None]) for op in OPERATORS},
        ci95=ci95,
        by_slot=_group(rows, "slot"),
        by_application=_group(rows, "application"),
        by_subtype={k: SubtypeScore(disentangle=_mean(v), instances=len(v)) for k, v in sorted(subtype_scores.items())},
        by_entity_count={str(k): EntityCountScore(anchor=_mean(v), instances=len(v))
                         for k, v in sorted(entity_scores.items())},
        abstentions=Abstentions(count=abstained, share=round(abstained / total, 4) if total else 0.0),
        cases=len(rows),
        run=RunIdentity(generator=manifest.generator, judges=manifest.judges),
    )


def format_scores(scores: Scores) -> str:
    """A plain-text table of the headline scores."""
    lines = [f"{'operator':12s} {'score':>7s}  95% CI"]
    for op in (*OPERATORS, "overall"):
        value = scores.operators.get(op) if op != "overall" else scores.overall  # type: ignore[call-overload]
        ci = scores.ci95.get(op)
        shown = "   n/a" if value is None else f"{value:7.4f}"
        lines.append(f"{op:12s} {shown}  {list(ci) if ci else ''}")
    lines.append(f"cases {scores.cases}, abstentions {scores.abstentions.count} ({scores.abstentions.share:.1%})")
    return "\n".join(lines)

