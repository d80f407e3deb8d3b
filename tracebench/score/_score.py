"""``trace score``: operator scores of a run (TRACE-Bench, arXiv 2608.16765: evaluation), with the formula stated.

- A question's verdict is pass, fail or abstain (no usable answer). A question whose
  ``depends_on`` parent fails, fails too (DSG-style: "is the hat red?" fails without a hat).
  **Gating** says which parents count: ``within`` (the default, the paper's reading) only
  those of the same operator instance (the hat's colour needs the hat); ``cross`` also those
  of other instances (an apply question fails with its disentangle term's presence, a
  composition with its members' existence), tracebench's stricter extension.
- An **operator instance** (op, target) scores the mean value of its answered questions, so
  each instance contributes at most 1; an instance with every question abstained is left out.
- A **case** scores, per operator, the mean of its instances of that operator; and overall,
  the mean of all its instances, whatever their operator.
- The **benchmark** follows the paper's Table 2: per operator, the mean over slot levels of
  the slot's mean over its cases, on the general benchmark (cases of no application; a run
  of applications only is averaged over all its cases, ``scope`` says which); **avg** is the
  mean of the four operator columns (of those that have a score). Applications are reported
  separately (``by_application``). The paper's own printed Avg does not follow from its
  columns (0.8049 computed vs 0.8205 printed for its best model); this one does.
- ``case_weighted`` keeps tracebench's earlier definition: per operator the mean over all
  cases that have it, applications included, and overall the mean over cases of the case's
  overall score.
- 95% intervals: percentile bootstrap over cases (1,000 resamples, seeded). For the
  slot-averaged scores the cases are resampled within each slot level (a stratified
  bootstrap, as the statistic weighs each slot equally); for the case-weighted ones over all
  cases: scipy.stats.bootstrap's percentile method, computed with numpy alone (the same
  resamples and quantiles, bit for bit) so that scoring does not import SciPy.
Breakdowns: by slot level (the scope's cases), by application, by attribute subtype
(disentangle instances of g terms by the subtype they extract) and by the number of entities
in an anchor's source image (anchor instances). A run over cluttered cases (``trace sample
--distractors``, docs/clutter.md) adds: by number of input images in MacroBench's bins
(1-3, 4-5, 6-7, 8-10, 11+), by number of distractors, and per operator the **rejection**
rate: the share of answered rejection questions passed (the output did not take the
distractor). They are absent from the scores of a run without clutter.
"""

from __future__ import annotations

from collections import defaultdict
from enum import StrEnum
from pathlib import Path
from statistics import fmean, pstdev
from typing import Iterable, Mapping, NamedTuple, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from ..checklist import REJECTION
from ..errors import TraceError
from ..operators import OPERATORS, Instance, Operator
from ..outcomes import ABSTAINED, FAILED, Outcome, sample_means, samples_of
from ..records import Case, RunLayout, RunManifest, read_generation_info
from ..run import RunFolder
from ._protocols import (DifficultyWeights, PassAtTau, ProtocolScore, ProtocolTally, difficulty_weights,
                         read_weights)

__all__ = ["Abstentions", "CaseWeighted", "EntityCountScore", "FlaggedReferences", "Gating", "GroupScores", "INPUT_BINS", "OPERATORS",
           "RejectionScore", "SampleSpread", "SelectionScore", "case_scores", "input_bin", "weights_from_runs",
           "RunIdentity", "Scores", "SubtypeScore",
           "effective_outcomes", "format_scores", "instance_results", "instance_scores", "score_cases", "score_folder",
           "score_run"]


# ------------------------------------------------------------------------------------ records


class Gating(StrEnum):
    """Which ``depends_on`` parents fail a question (module docstring)."""

    WITHIN = "within"  # the paper: within one operator instance
    CROSS = "cross"    # tracebench's extension: across instances too



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


class RejectionScore(_Record):
    rate: float | None = Field(description="share of the answered rejection questions passed (the distractor was "
                                           "not taken); their graded values' mean")
    questions: int = Field(description="answered rejection questions")


class SelectionScore(_Record):
    """Which references the generator reports having used (``used_references``), against the truth."""

    cases: int = Field(description="cluttered cases whose generator reported the references it used")
    search: float | None = Field(description="pool mode: share of pooled targets whose true source is among the "
                                             "references used (Savanna's search score); none without pooled targets")
    targets: int = Field(description="pooled targets of those cases")
    distractors_used: float | None = Field(description="share of those cases' distractors among the references used")
    distractors: int = Field(description="distractors of those cases")


class SampleSpread(_Record):
    """``trace run --samples K``: how much a case's generations differ (each case scores the mean
    over its samples; intervals resample cases, then samples within each case)."""

    samples: int = Field(description="generations of each case (K)")
    spread: float | None = Field(description="mean over cases of the standard deviation (population) of the case's "
                                             "overall score over its samples")
    disagree: float | None = Field(description="share of cases some question of which the samples answered "
                                               "differently (pass in one, fail in another)")
    cases: int = Field(description="cases with two or more samples scored")


class Abstentions(_Record):
    count: int = Field(description="questions whose verdict is an abstention")
    share: float = Field(description="their share of all questions")


class RunIdentity(_Record):
    generator: str
    judges: tuple[str, ...]
    judge_models: dict[str, tuple[str, ...]] | None = Field(default=None, description="judge spec -> the models its "
                                                           "server reported answering (run.json's judge_models); "
                                                           "absent when none did")

    @model_serializer(mode="wrap")
    def _omit_unknown_models(self, handler):  # scores of runs whose judges report no model read as before
        data = handler(self)
        if isinstance(data, dict) and data.get("judge_models") is None:
            data.pop("judge_models", None)
        return data


class CaseWeighted(_Record):
    """tracebench's earlier benchmark scores: every case weighs the same, applications included."""

    operators: dict[Operator, float | None] = Field(description="operator -> mean over all cases that have it")
    overall: float | None = Field(description="mean over cases of the case's overall score")
    ci95: dict[str, tuple[float, float] | None] = Field(description="operator (and overall) -> 95% percentile "
                                                                    "bootstrap interval over cases")


class Scores(_Record):
    """``trace score --json``: a run's operator scores, intervals and breakdowns (formulas in the
    module docstring). Operators are keyed by name, in the paper's order."""

    gating: Gating = Field(description="within: dependencies act within an operator instance (the paper); cross: "
                                       "across instances too")
    scope: str = Field(description="general: the headline scores average the cases of no application; all: the "
                                   "run holds applications only, and averages them all")
    operators: dict[Operator, float | None] = Field(description="operator -> mean over slot levels of the slot's "
                                                                "mean over its cases (the paper's Table 2)")
    avg: float | None = Field(description="mean of the four operator columns (of those with a score)")
    ci95: dict[str, tuple[float, float] | None] = Field(description="operator (and avg) -> 95% percentile bootstrap "
                                                                    "interval, cases resampled within slot levels")
    case_weighted: CaseWeighted
    by_slot: dict[str, GroupScores]
    by_application: dict[str, GroupScores]
    by_subtype: dict[str, SubtypeScore]
    by_entity_count: dict[str, EntityCountScore]
    abstentions: Abstentions
    cases: int = Field(description="cases with verdicts")
    run: RunIdentity
    by_inputs: dict[str, GroupScores] | None = Field(default=None, description="with clutter: by number of input "
                                                     "images, in MacroBench's bins 1-3, 4-5, 6-7, 8-10 and 11+")
    by_distractors: dict[str, GroupScores] | None = Field(default=None, description="with clutter: by number of "
                                                          "distractor references")
    rejection: dict[Operator, RejectionScore] | None = Field(default=None, description="with clutter: per operator, "
                                                             "its rejection questions (distractors not taken)")
    selection: SelectionScore | None = Field(default=None, description="with clutter, where the generator reports "
                                             "the references it used: the selection scores")
    protocols: dict[str, ProtocolScore] | None = Field(default=None, description="trace score --protocol: each "
                                                       "protocol asked, by name (score/_protocols.py states them)")
    samples: SampleSpread | None = Field(default=None, description="with trace run --samples K: the spread of each "
                                         "case's samples; absent for one sample")

    @model_serializer(mode="wrap")
    def _without_clutter(self, handler):  # the scores of a run without clutter read as before clutter existed
        data = handler(self)
        if isinstance(data, dict):
            for name in ("by_inputs", "by_distractors", "rejection", "selection", "protocols", "samples"):
                if data.get(name) is None:
                    data.pop(name, None)
        return data


# ------------------------------------------------------------------------------------ scoring


def effective_outcomes(case: Case, verdicts: Mapping[str, Outcome],
                       gating: Gating = Gating.WITHIN) -> dict[str, Outcome]:
    """Each question's outcome after dependencies: a question whose ``depends_on`` parent fails,
    fails (value 0), a parent of its own operator instance only unless ``gating`` is cross; a
    question without a verdict is an abstention."""
    if Gating(gating) is Gating.CROSS:
        parents = {q.id: q.depends_on for q in case.checklist}
    else:
        instance = {q.id: (q.op, q.target) for q in case.checklist}
        parents = {q.id: tuple(p for p in q.depends_on if instance.get(p) == (q.op, q.target)) for q in case.checklist}
    memo: dict[str, Outcome] = {}

    def value(qid: str) -> Outcome:
        if qid not in memo:
            memo[qid] = ABSTAINED  # no cycle: the case reader refuses one (checklist_problem); guards recursion anyway
            own = verdicts.get(qid, ABSTAINED)
            memo[qid] = FAILED if any(value(p).failed for p in parents.get(qid, ())) else own
        return memo[qid]

    return {q.id: value(q.id) for q in case.checklist}


def instance_results(case: Case, verdicts: Mapping[str, Outcome],
                     gating: Gating = Gating.WITHIN) -> dict[Instance, Outcome]:
    """Operator instance -> whether it holds: fail when an answered question fails (after
    dependencies), pass when some are answered and none fails, abstain when none is answered;
    the value is the mean of the answered questions' values. What a diagnosis tracks from
    node to node."""
    effective = effective_outcomes(case, verdicts, gating)
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


def instance_scores(case: Case, verdicts: Mapping[str, Outcome],
                    gating: Gating = Gating.WITHIN) -> dict[Instance, float]:
    """Operator instance -> the mean value of its answered questions (after dependencies);
    instances with no answered question are left out. What ``trace score`` averages."""
    effective = effective_outcomes(case, verdicts, gating)
    answered: dict[Instance, list[float]] = defaultdict(list)
    for q in case.checklist:
        outcome = effective[q.id]
        if outcome.answered:
            answered[Instance(q.op, q.target)].append(outcome.value)  # type: ignore[arg-type]
    return {key: fmean(values) for key, values in answered.items()}


def case_scores(instances: Mapping[Instance, float]) -> dict[str, float]:
    """A case's score per operator (the mean of its instances of that operator) and ``overall``
    (the mean of all its instances), from :func:`instance_scores`; what it lacks is absent. The
    one definition ``trace score``, ``trace compare`` and ``trace agree`` share."""
    per_op: dict[str, list[float]] = defaultdict(list)
    for (op, _), value in instances.items():
        per_op[str(op)].append(value)
    out = {op.value: fmean(per_op[op.value]) for op in OPERATORS if per_op.get(op.value)}
    if instances:
        out["overall"] = fmean(instances.values())
    return out


def _mean(values: list[float]) -> float | None:
    return round(fmean(values), 4) if values else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _ci(values: list[float], seed: int, inner: list[tuple[float | None, ...]] | None = None
        ) -> tuple[float, float] | None:
    """The 95% interval of the mean of ``values`` (one a case); ``inner``: with ``--samples``, each
    case's per-sample values, resampled within the case (:func:`_nested_means`)."""
    if inner is not None and len(values) >= 2:
        import numpy as np

        rng = np.random.default_rng(seed)
        low, high = _percentiles(_nested_means(np.asarray(values, dtype=float), _inner_array(inner), rng, 1000),
                                 1000, 0.95)
        return round(low, 4), round(high, 4)
    if len(values) < 2 or len(set(values)) == 1:
        return (round(values[0], 4),) * 2 if values else None  # type: ignore[return-value]
    low, high = _bootstrap_interval(values, seed)
    return round(low, 4), round(high, 4)


def _inner_array(inner: Sequence[tuple[float | None, ...]]):
    """Cases' per-sample values as an array, one row a case (NaN where a sample has none)."""
    import numpy as np

    width = max(len(values) for values in inner)
    return np.array([[np.nan if v is None else v for v in values] + [np.nan] * (width - len(values))
                     for values in inner], dtype=float).reshape(len(inner), width)


def _nested_means(values, inner, rng, resamples: int):
    """Resampled means of a nested bootstrap: cases drawn with replacement, then within each drawn
    case its samples drawn with replacement (so K samples never count as K cases); a case whose
    drawn samples all lack a value counts its own mean. ``values``: each case's mean over its
    samples; ``inner``: cases x samples (NaN where a sample has no value)."""
    import numpy as np

    n, width = inner.shape
    draws = rng.integers(0, n, (resamples, n))
    out = np.empty(resamples)
    for start in range(0, resamples, 100):  # 100 resamples at a time: memory stays small
        block = draws[start:start + 100]
        picks = rng.integers(0, width, block.shape + (width,))
        chosen = inner[block[..., None], picks]
        present = ~np.isnan(chosen)
        counts = present.sum(axis=-1)
        sums = np.where(present, chosen, 0.0).sum(axis=-1)
        case_values = np.where(counts > 0, sums / np.maximum(counts, 1), values[block])
        out[start:start + 100] = case_values.mean(axis=-1)
    return out


def _bootstrap_interval(values: list[float], seed: int, resamples: int = 1000,
                        level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean, as ``scipy.stats.bootstrap(..., np.mean,
    method="percentile", random_state=np.random.default_rng(seed))`` gives it: the same index
    draws, and its default quantile (Hyndman-Fan type 7) of the sorted resample means."""
    import numpy as np  # only the intervals need it; keep it off the import path of trace diagnose

    data = np.asarray(values)
    draws = np.random.default_rng(seed).integers(0, len(data), (resamples, len(data)))
    return _percentiles(np.mean(data[draws], axis=-1), resamples, level)


def _percentiles(resampled, resamples: int, level: float) -> tuple[float, float]:
    """The two-sided ``level`` percentile interval (Hyndman-Fan type 7, numpy's and SciPy's
    default) of the resampled statistics."""
    import numpy as np

    means = np.sort(resampled)
    alpha = (1 - level) / 2
    p = np.array([alpha, 1 - alpha])
    position = p * resamples + (1 - p)
    upper = position // 1
    g = position % 1
    lower = np.clip(upper - 1, 0, resamples - 1).astype(np.int64)
    upper = np.clip(upper, 0, resamples - 1).astype(np.int64)
    low, high = (1 - g) * means[lower] + g * means[upper]
    return float(low), float(high)


INPUT_BINS = ((1, 3), (4, 5), (6, 7), (8, 10))  # MacroBench's bins of input images; more is "11+"


def input_bin(references: int) -> str:
    """MacroBench's bin of a case's number of input images: "1-3", "4-5", "6-7", "8-10", "11+"
    (a case without references: "0")."""
    for low, high in INPUT_BINS:
        if low <= references <= high:
            return f"{low}-{high}"
    return "0" if references < 1 else f"{INPUT_BINS[-1][1] + 1}+"


class _Row(NamedTuple):
    """What scoring keeps of a case: its groups and its scores (None where it has no instance)."""

    slot: int
    application: str | None
    inputs: str
    distractors: int
    anchor: float | None
    disentangle: float | None
    apply: float | None
    compose: float | None
    overall: float | None
    inner: tuple[tuple[float | None, ...], ...] | None = None  # --samples: per sample, the five scores above


def _group(rows: list[_Row], key: str) -> dict[str, GroupScores]:
    groups: dict[str, list[_Row]] = defaultdict(list)
    for row in rows:
        if getattr(row, key) is not None:
            groups[str(getattr(row, key))].append(row)
    out = {}
    for name in sorted(groups, key=lambda k: (len(k), k) if key != "inputs" else (int(k.split("-")[0].rstrip("+")),)):
        members = groups[name]
        out[name] = GroupScores(**{op: _mean([getattr(r, op) for r in members if getattr(r, op) is not None])
                                   for op in OPERATORS},
                                overall=_mean([r.overall for r in members if r.overall is not None]),
                                cases=len(members))
    return out


class FlaggedReferences:
    """A filter of cases before scoring (``trace score --exclude-flagged``): a case with a reference
    whose library image id (``source_id``) is flagged is left out, and counted in ``excluded``."""

    def __init__(self, flagged: Iterable[str]) -> None:
        self.flagged = frozenset(flagged)
        self.excluded = 0

    def keeps(self, case: Case) -> bool:
        if any(reference.source_id in self.flagged for reference in case.references):
            self.excluded += 1
            return False
        return True


def score_run(run_dir: Path, *, cases_dir: Path | None = None, seed: int = 0,
              gating: Gating = Gating.WITHIN, protocols: Sequence[str] = (), weights: Path | None = None,
              tau: float = 70.0, exclude: FlaggedReferences | None = None) -> Scores:
    """The scores of a run folder (``trace run``'s output), read as a stream: memory holds a few
    numbers a case, never the cases or their verdicts. ``protocols``, ``weights`` (a weights
    file of :func:`~tracebench.score.difficulty_weights`) and ``tau``: ``trace score --protocol``;
    ``exclude`` leaves out the cases it does not keep (``--exclude-flagged``)."""
    from ..run import stream_run

    stream = stream_run(run_dir, cases_dir=cases_dir)
    pass_at = PassAtTau(tau=tau) if weights is None else PassAtTau(
        tau=tau, weights=read_weights(weights, stream.manifest.cases_hash), weights_name=str(weights))
    cases = ((item.case, item.samples) for item in stream if exclude is None or exclude.keeps(item.case))
    return score_cases(stream.manifest, cases, root=stream.root, seed=seed, gating=gating, protocols=protocols,
                       pass_at=pass_at)


def weights_from_runs(run_dirs: Sequence[Path]) -> DifficultyWeights:
    """P@tau's difficulty weights from reference runs (one benchmark), streamed."""
    from .. import __version__
    from ..run import stream_run

    streams = [stream_run(r) for r in run_dirs]
    return difficulty_weights([(str(Path(r).resolve()), s.manifest.cases_hash,
                                ((item.case, item.samples) for item in s)) for r, s in zip(run_dirs, streams)],
                              tool=f"tracebench {__version__}")


def score_folder(run: RunFolder, *, seed: int = 0, gating: Gating = Gating.WITHIN) -> Scores:
    """The scores of a run folder already read (:func:`~tracebench.run.load_run`)."""
    return score_cases(run.manifest, ((run.cases[case_id], run.outcomes(case_id)) for case_id in run.verdicts),
                       root=run.root, seed=seed, gating=gating)


def _slot_means(rows: list[_Row], seed: int) -> tuple[dict[Operator, float | None], dict[str, tuple[float, float] | None],
                                                     float | None]:
    """The paper's benchmark scores of ``rows``: per operator the mean of per-slot means, avg
    the mean of those columns, and their stratified bootstrap intervals."""
    import numpy as np

    slots = sorted({r.slot for r in rows})
    table = np.array([[np.nan if getattr(r, op) is None else getattr(r, op) for op in OPERATORS] for r in rows],
                     dtype=float).reshape(len(rows), len(OPERATORS))
    slot_of = np.array([r.slot for r in rows])
    nested = any(r.inner is not None for r in rows)  # --samples: samples resampled within each case
    inner = [_inner_array([r.inner[j] if r.inner else (getattr(r, op),) for r in rows]) for j, op in enumerate(OPERATORS)] \
        if nested else None
    operators: dict[Operator, float | None] = {}
    ci95: dict[str, tuple[float, float] | None] = {}
    resampled: list = []  # per operator with a score: its resampled slot-averaged means
    resamples = 1000
    for j, op in enumerate(OPERATORS):
        masks = [(slot_of == s) & ~np.isnan(table[:, j]) for s in slots]
        masks = [mask for mask in masks if mask.any()]
        strata = [table[mask, j] for mask in masks]
        if not strata:
            operators[op], ci95[op] = None, None
            continue
        operators[op] = round(float(fmean(float(np.mean(values)) for values in strata)), 4)
        total = np.zeros(resamples)
        for k, values in enumerate(strata):
            rng = np.random.default_rng([seed, j, k])
            if inner is not None:
                total += _nested_means(values, inner[j][masks[k]], rng, resamples)
                continue
            draws = rng.integers(0, len(values), (resamples, len(values)))
            total += np.mean(values[draws], axis=-1)
        resampled.append(total / len(strata))
        ci95[op] = _interval(resampled[-1], resamples)
    present = [v for v in operators.values() if v is not None]
    avg = round(fmean(present), 4) if present else None
    ci95["avg"] = _interval(np.mean(resampled, axis=0), resamples) if resampled else None
    return operators, ci95, avg


def _interval(resampled, resamples: int) -> tuple[float, float]:
    low, high = _percentiles(resampled, resamples, 0.95)
    return round(low, 4), round(high, 4)


def score_cases(manifest: RunManifest,
                cases: Iterable[tuple[Case, Mapping[str, Outcome] | Sequence[Mapping[str, Outcome]]]], *, root: Path,
                seed: int = 0, gating: Gating = Gating.WITHIN, protocols: Sequence[str] = (),
                pass_at: PassAtTau = PassAtTau()) -> Scores:
    """The scores of a run's cases with their outcomes, in run order, consumed one at a time;
    ``protocols`` adds the neighbours' protocols (``score/_protocols.py``; ``pass_at`` for
    LongBanana's P@tau). A case's outcomes may be a sequence, one mapping per sample (``trace
    run --samples K``): the case then scores the mean over its samples, and the intervals resample
    the samples within each resampled case."""
    protocol_tally = ProtocolTally(protocols, pass_at)
    tally = _CaseTally(RunLayout(Path(root)).images, gating)
    for case, given in cases:
        samples = samples_of(given)
        protocol_tally.add(case, samples[0] if len(samples) == 1 else samples)
        tally.add(case, samples)
    if not tally.rows:
        raise TraceError(f"{root}: no verdicts to score")
    return _scores(manifest, tally, protocol_tally, seed, gating)


class _Clutter:
    """What scoring keeps of cluttered cases (``trace sample --distractors``): per operator the
    values of the answered rejection questions, and the counts of the selection scores."""

    def __init__(self) -> None:
        self.seen = False
        self.rejections: dict[Operator, list[float]] = defaultdict(list)
        self.reporting = self.targets = self.distractors = 0
        self.found = self.taken = 0.0

    def add(self, case: Case, samples: Sequence[Mapping[str, Outcome]], images: Path) -> None:
        self.seen = True
        for q in case.checklist:
            values = [o.value for outcomes in samples if (o := outcomes.get(q.id)) is not None and o.answered]
            if q.aspect == REJECTION and values:
                value = values[0] if len(values) == 1 else fmean(values)  # type: ignore[arg-type]
                self.rejections[q.op].append(value)  # type: ignore[arg-type]
        used = [set(info.used_references) for k in range(len(samples))  # each generation's report
                if (info := read_generation_info(images, case.id, k)) is not None
                and info.used_references is not None]
        if used:
            self._add_selection(case, used)

    def _add_selection(self, case: Case, used: list[set[str]]) -> None:
        """A case whose generations reported the references they used (``used``, one set a
        sample that reported): it counts once, with the mean over those samples (--samples)."""
        pooled = case.clutter.pooled  # type: ignore[union-attr]
        self.reporting += 1
        self.targets += len(pooled)
        self.found += fmean(sum(p.image in u for p in pooled) for u in used)
        self.distractors += len(case.distractors)
        self.taken += fmean(sum(d.image in u for d in case.distractors) for u in used)

    def scores(self, rows: list[_Row]) -> dict[str, object]:
        """The Scores fields of clutter: None each for a run without it (selection also where no
        generator reported the references it used)."""
        seen = self.seen
        return {
            "by_inputs": _group(rows, "inputs") if seen else None,
            "by_distractors": _group(rows, "distractors") if seen else None,
            "rejection": {op: RejectionScore(rate=_mean(self.rejections[op]), questions=len(self.rejections[op]))
                          for op in OPERATORS if self.rejections[op]} if seen else None,
            "selection": SelectionScore(
                cases=self.reporting, search=round(self.found / self.targets, 4) if self.targets else None,
                targets=self.targets, distractors_used=round(self.taken / self.distractors, 4) if self.distractors
                else None, distractors=self.distractors) if self.reporting else None}


class _Spread:
    """``trace run --samples K``: how much each case's samples differ, added one case at a time."""

    def __init__(self) -> None:
        self.samples = 1
        self.spreads: list[float] = []
        self.disagreeing = 0

    @property
    def nested(self) -> bool:
        """Whether some case has several samples (its intervals resample them within the case)."""
        return self.samples > 1

    def add(self, samples: Sequence[Mapping[str, Outcome]], per_sample: list[dict[str, float]]) -> None:
        self.samples = max(self.samples, len(samples))
        overall = [p["overall"] for p in per_sample if "overall" in p]
        if len(overall) >= 2:
            self.spreads.append(pstdev(overall))
        self.disagreeing += _samples_disagree(samples)

    def score(self, cases: int) -> SampleSpread | None:
        if not self.nested:
            return None
        return SampleSpread(samples=self.samples, spread=_mean(self.spreads), cases=len(self.spreads),
                            disagree=round(self.disagreeing / cases, 4))


class _CaseTally:
    """What scoring keeps of a run's cases, added one at a time: a row of scores a case, the
    instances' values by attribute subtype and by entity count, the questions and abstentions,
    and what clutter and samples add (``images``: the run's images folder)."""

    def __init__(self, images: Path, gating: Gating) -> None:
        self.images, self.gating = images, gating
        self.rows: list[_Row] = []
        self.questions = self.abstained = 0
        self.subtypes: dict[str, list[float]] = defaultdict(list)
        self.entities: dict[int, list[float]] = defaultdict(list)
        self.clutter = _Clutter()
        self.spread = _Spread()

    def add(self, case: Case, samples: Sequence[Mapping[str, Outcome]]) -> None:
        for outcomes in samples:
            self.questions += len(outcomes)
            self.abstained += sum(not outcome.answered for outcome in outcomes.values())
        each = [instance_scores(case, outcomes, self.gating) for outcomes in samples]
        instances = sample_means(each)
        if case.clutter is not None:
            self.clutter.add(case, samples, self.images)
        per_case, inner = self._case_scores(samples, each, instances)
        self.rows.append(_Row(case.slot, case.application, input_bin(len(case.references)), len(case.distractors),
                              *(_round(per_case.get(op.value)) for op in OPERATORS), _round(per_case.get("overall")),
                              inner))
        self._add_terms(case, instances)

    def _case_scores(self, samples: Sequence[Mapping[str, Outcome]], each: list[dict[Instance, float]],
                     instances: dict[Instance, float]) -> tuple[dict[str, float], tuple | None]:
        """The case's scores (the mean over its samples) and, with several samples, each sample's
        five scores for the nested intervals."""
        if len(samples) == 1:
            return case_scores(instances), None
        per_sample = [case_scores(i) for i in each]
        self.spread.add(samples, per_sample)
        return sample_means(per_sample), tuple(tuple(_round(p.get(key)) for p in per_sample) for key in _CASE_SCORES)

    def _add_terms(self, case: Case, instances: dict[Instance, float]) -> None:
        """The disentangle instances by their term's attribute subtype, the anchor instances by the
        entities in their source image."""
        terms = {t.symbol: t for t in case.terms}
        for (op, target), value in instances.items():
            term = terms.get(target)
            if op == Operator.DISENTANGLE and term is not None and term.subtype:
                self.subtypes[term.subtype].append(value)
            if op == Operator.ANCHOR and term is not None and term.source_entities is not None:
                self.entities[term.source_entities].append(value)

    def abstentions(self) -> Abstentions:
        return Abstentions(count=self.abstained,
                           share=round(self.abstained / self.questions, 4) if self.questions else 0.0)


def _scores(manifest: RunManifest, tally: _CaseTally, protocols: ProtocolTally, seed: int, gating: Gating) -> Scores:
    """The Scores record of the cases tallied: the headline over the scope's slot levels, the
    case-weighted scores, the breakdowns and the protocols asked."""
    rows = tally.rows
    general = [r for r in rows if r.application is None]
    scoped = general or rows
    operators, ci95, avg = _slot_means(scoped, seed)
    trace = ProtocolScore(protocol="trace", range="0-1", overall=avg, ci95=ci95.get("avg"),
                          dimensions={op.value: operators.get(op) for op in OPERATORS},
                          dimension_ci95={op.value: ci95.get(op.value) for op in OPERATORS}, cases=len(scoped))
    return Scores(
        gating=Gating(gating),
        scope="general" if general else "all",
        operators=operators,
        avg=avg,
        ci95=ci95,
        case_weighted=_case_weighted(rows, seed, tally.spread.nested),
        by_slot=_group(scoped, "slot"),
        by_application=_group(rows, "application"),
        by_subtype={k: SubtypeScore(disentangle=_mean(v), instances=len(v)) for k, v in sorted(tally.subtypes.items())},
        by_entity_count={str(k): EntityCountScore(anchor=_mean(v), instances=len(v))
                         for k, v in sorted(tally.entities.items())},
        abstentions=tally.abstentions(),
        cases=len(rows),
        run=RunIdentity(generator=manifest.generator, judges=manifest.judges, judge_models=manifest.judge_models),
        **tally.clutter.scores(rows),
        protocols=protocols.result(trace, lambda values, inner: _ci(values, seed, inner))
        if protocols.protocols else None,
        samples=tally.spread.score(len(rows)),
    )


def _case_weighted(rows: list[_Row], seed: int, nested: bool) -> CaseWeighted:
    """tracebench's earlier scores of ``rows``: per operator and overall the mean over the cases
    that have it, with its bootstrap interval (``nested``: samples resampled within each case)."""
    def present(name: str) -> list[float]:
        return [getattr(r, name) for r in rows if getattr(r, name) is not None]

    def inner_of(name: str, index: int) -> list | None:
        return [r.inner[index] if r.inner else (getattr(r, name),) for r in rows
                if getattr(r, name) is not None] if nested else None

    ci95 = {name: _ci(present(name), seed, inner_of(name, j)) for j, name in enumerate(_CASE_SCORES)}
    return CaseWeighted(operators={op: _mean(present(op)) for op in OPERATORS}, overall=_mean(present("overall")),
                        ci95=ci95)


_CASE_SCORES = (*(op.value for op in OPERATORS), "overall")  # what case_scores gives, in _Row's order


def _samples_disagree(samples: Sequence[Mapping[str, Outcome]]) -> bool:
    """Whether some question passed in one sample and failed in another (abstentions aside)."""
    seen: dict[str, set] = {}
    for outcomes in samples:
        for qid, outcome in outcomes.items():
            if outcome.answered:
                seen.setdefault(qid, set()).add(outcome.status)
    return any(len(statuses) > 1 for statuses in seen.values())


def format_scores(scores: Scores) -> str:
    """A plain-text table of the headline scores, with the case-weighted ones beside them."""
    scope = "general benchmark" if scores.scope == "general" else "all cases (no general case)"
    lines = [f"mean of per-slot means over the {scope}; gating {scores.gating.value}",
             f"{'operator':12s} {'score':>7s}  {'95% CI':18s}  case-weighted"]
    weighted = scores.case_weighted
    for op in OPERATORS:
        lines.append(_table_line(op, scores.operators.get(op), scores.ci95.get(op), weighted.operators.get(op)))
    lines.append(_table_line("avg", scores.avg, scores.ci95.get("avg"), weighted.overall) + " (overall)")
    lines.append(f"cases {scores.cases}, abstentions {scores.abstentions.count} ({scores.abstentions.share:.1%})")
    if scores.samples is not None:
        lines.append(_samples_line(scores.samples))
    for spec, models in (scores.run.judge_models or {}).items():
        lines.append(f"judge {spec} answered as {', '.join(models)}")
    lines += [_protocol_line(name, p) for name, p in (scores.protocols or {}).items() if name != "trace"]
    if scores.by_inputs is not None:
        lines += _clutter_lines(scores)
    return "\n".join(lines)


def _shown(value: float | None, spec: str) -> str:
    """``value`` in the format ``spec``; n/a for none."""
    return "n/a" if value is None else format(value, spec)


def _table_line(name: str, value: float | None, ci: tuple[float, float] | None, weighted: float | None) -> str:
    """A line of the headline table: the score, its interval, the case-weighted score."""
    shown = "    n/a" if value is None else f"{value:7.4f}"
    return f"{name:12s} {shown}  {f'[{ci[0]:.4f}, {ci[1]:.4f}]' if ci else '':18s}  {_shown(weighted, '.4f')}"


def _samples_line(samples: SampleSpread) -> str:
    return (f"samples {samples.samples} a case (scores: their mean; intervals resample samples within "
            f"cases): per-case spread (SD of the overall score) {_shown(samples.spread, '.4f')}; cases whose samples "
            f"disagree {_shown(samples.disagree, '.1%')}")


def _protocol_line(name: str, p: ProtocolScore) -> str:
    """A protocol's scores on one line (``trace score --protocol``)."""
    dims = ", ".join(f"{d} {_shown(v, '.2f')}" for d, v in p.dimensions.items())
    line = (f"{name} ({p.range}): {_shown(p.overall, '.2f')} {f'[{p.ci95[0]:.2f}, {p.ci95[1]:.2f}]' if p.ci95 else ''}"
            f" over {p.cases} cases; {dims}")
    if p.pass_rate is not None:
        line += f"; P@{p.tau:g} {p.pass_rate:.2f}% ({p.weights} weights)"
        if p.weights_missing:
            line += f"; {p.weights_missing} cases without weights in the file (weighed alike)"
    return line


def _clutter_lines(scores: Scores) -> list[str]:
    """The breakdowns of a run over cluttered cases: by input images and distractors, the
    rejection rates, and the selection scores where the generator reported them."""
    def groups(by: Mapping[str, GroupScores]) -> str:
        return ", ".join(f"{k}: {_shown(g.overall, '.4f')} ({g.cases})" for k, g in by.items())

    lines = [f"by input images: {groups(scores.by_inputs or {})}",
             f"by distractors: {groups(scores.by_distractors or {})}",
             "rejection (distractors not taken): " + (", ".join(
                 f"{op} {r.rate:.4f} of {r.questions}" for op, r in (scores.rejection or {}).items()
                 if r.rate is not None) or "no rejection question answered")]
    if scores.selection is not None:
        sel = scores.selection
        lines.append(f"selection ({sel.cases} cases reporting the references used): search "
                     f"{_shown(sel.search, '.4f')} of {sel.targets} pooled targets, "
                     f"distractors used {_shown(sel.distractors_used, '.4f')} of {sel.distractors}")
    return lines
