"""The neighbours' scoring protocols over one run's verdicts (``trace score --protocol NAME``).

Each protocol is a formula over a case's answered questions (their graded values: 1 / 0 on the
binary scale, 1 / 0.5 / 0 ternary, 1 / 0.2 / 0 for identity tiers), then a mean over cases with
a 95% percentile bootstrap over cases. The neighbours score items as judged, without TRACE's
dependencies, so these read the verdicts' own values (abstentions left out); ``trace`` is
TRACE-Bench's operator table (``score/_score.py``).

- ``longbanana`` (LongBanana): three dimensions, each ``S_d = 5/|J_d| * sum s_j`` with
  ``s = 2 * value`` (0-10), reported x10 (0-100), which is 100 x the items' mean value:
  **Content Fidelity** (anchor questions, and the disentangle questions of attribute, item and
  design terms), **Relational Binding** (the apply questions of those terms and of relations, the
  relation terms' own questions and the composition's relation question), **Global Constraint
  Satisfaction** (the questions of global terms and their bindings, and the other composition
  questions: coexistence, spatial coherence, duplication, leakage); overall the same over all
  items. **P@tau** (default 70): a case's ``100 * sum w_j v_j / sum w_j`` is at least tau, with
  per-item difficulty weights frozen in a weights file (:func:`difficulty_weights`; uniform
  without one).
- ``macro`` (MacroBench): per case, the consistency with each reference image (the mean of the
  questions grounded in it, ``Question.images``), aggregated by the harmonic mean across the
  case's references (one poor reference dominates); prompt following, the mean of the
  composition questions; the case's score is 10 x the geometric mean of the two (0-10).
- ``savanna`` (Savanna): ``100 * (0.8 * s_id + 0.2 * s_ctx)``, with ``s_id`` the mean identity
  value of the case's anchors (their tier with ``--scale tiers``) and ``s_ctx`` the mean of its
  other questions; cases without an anchor are not scored (Savanna scores identity tasks), and a
  case whose only questions are identity questions scores ``100 * s_id`` (the weights renormalized).
"""

from __future__ import annotations

import math
import statistics
from statistics import fmean
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TraceError
from ..jsonfiles import read_json, write_json
from ..operators import Operator, Role, split_target
from ..outcomes import Outcome, samples_of
from ..records import Case

__all__ = ["DIMENSIONS", "PROTOCOLS", "DifficultyWeights", "PassAtTau", "ProtocolScore", "ProtocolTally",
           "check_protocols", "difficulty_weights", "longbanana_dimension", "read_weights", "write_weights"]

PROTOCOLS = ("trace", "longbanana", "macro", "savanna")
DIMENSIONS = {"longbanana": ("content_fidelity", "relational_binding", "global_constraints"),
              "macro": ("consistency", "prompt_following"), "savanna": ("identity", "context")}
WEIGHT_FLOOR = 0.05  # the least difficulty weight: an item every reference system passes still counts a little
UNKNOWN_WEIGHT = 0.5  # an item no reference run answered: no evidence of its difficulty either way


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProtocolScore(_Record):
    """One protocol's scores of a run (the module docstring states each formula)."""

    protocol: str
    range: str = Field(description='"0-100" or "0-10"; "0-1" for trace')
    overall: float | None = Field(description="mean over the scored cases of the case's score")
    ci95: tuple[float, float] | None = Field(description="95% percentile bootstrap interval over cases")
    dimensions: dict[str, float | None] = Field(default_factory=dict, description="per dimension: the mean over the "
                                                "cases that have items in it")
    dimension_ci95: dict[str, tuple[float, float] | None] = Field(default_factory=dict)
    cases: int = Field(description="cases scored")
    tau: float | None = Field(default=None, description="longbanana: the pass threshold of P@tau")
    pass_rate: float | None = Field(default=None, description="longbanana: P@tau, the share of cases whose weighted "
                                                              "score is at least tau")
    pass_rate_ci95: tuple[float, float] | None = None
    weights: str | None = Field(default=None, description='longbanana: "uniform", or the weights file used')
    weights_missing: int | None = Field(default=None, description="longbanana with a weights file: cases the file has "
                                        "no weights for (their items weigh alike: a file of another shard?)")


Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class DifficultyWeights(_Record):
    """A frozen weights file of P@tau: per item, its difficulty from a set of reference runs."""

    tool: str
    cases_hash: str = Field(description="SHA-256 of the benchmark's cases.jsonl the weights are for")
    runs: tuple[str, ...] = Field(description="the reference runs they were estimated from")
    formula: str = Field(description="how each weight was computed")
    floor: float = Field(ge=0, allow_inf_nan=False)
    weights: dict[str, dict[str, Weight]] = Field(description="case id -> question id -> weight (finite, 0 or more)")


def longbanana_dimension(target: str, op: Operator, aspect: str, terms: Mapping[str, object]) -> str:
    """The LongBanana dimension of one question, by its target, operator and aspect (``terms``:
    the case's terms by symbol)."""
    head, g_symbol = split_target(target)
    if op == Operator.COMPOSE:
        return "relational_binding" if aspect == "relation" else "global_constraints"
    term = terms.get(g_symbol or head)
    role = getattr(term, "role", None)
    if role == Role.GLOBAL:
        return "global_constraints"
    if op == Operator.APPLY or role == Role.RELATION:
        return "relational_binding"
    return "content_fidelity"


def check_protocols(protocols: Sequence[str]) -> None:
    """Refuse a protocol name that is none of :data:`PROTOCOLS` (``--protocol``)."""
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        raise TraceError(f"--protocol: {unknown[0]!r} is not one of {', '.join(PROTOCOLS)}")


def _mean(values: Sequence[float]) -> float | None:
    return fmean(values) if values else None


def _case_scores(case: Case, outcomes: Mapping[str, Outcome], weights: Mapping[str, float] | None,
                 tau: float) -> dict[str, dict]:
    """Per protocol (but trace): the case's overall score, its dimensions, and (longbanana) whether it
    passes P@tau; a protocol that cannot score the case is left out."""
    answered = [(q, outcomes[q.id].value) for q in case.checklist
                if q.id in outcomes and outcomes[q.id].answered]
    if not answered:
        return {}
    scored = {"longbanana": _longbanana(case, answered, weights, tau), "macro": _macro(answered),
              "savanna": _savanna(answered)}
    return {name: result for name, result in scored.items() if result is not None}


def _longbanana(case: Case, answered: list, weights: Mapping[str, float] | None, tau: float) -> dict:
    """LongBanana's scores of a case's answered (question, value) pairs, and whether it passes P@tau
    (``weights``: question id -> difficulty weight; None: uniform)."""
    terms = {t.symbol: t for t in case.terms}
    dims: dict[str, list[float]] = defaultdict(list)
    for q, v in answered:
        dims[longbanana_dimension(q.target, q.op, q.aspect, terms)].append(v)
    values = [v for _, v in answered]
    w = [weights.get(q.id, UNKNOWN_WEIGHT) if weights is not None else 1.0 for q, _ in answered]
    task = 100 * sum(wi * v for wi, v in zip(w, values)) / sum(w) if sum(w) > 0 else 0.0
    return {"overall": 100 * fmean(values),
            "dimensions": {d: 100 * fmean(vs) for d, vs in dims.items()},
            "passed": task >= tau}


def _macro(answered: list) -> dict | None:
    """MacroBench's scores of a case's answered (question, value) pairs; None when it has neither
    a question grounded in a reference nor a composition question."""
    per_image: dict[str, list[float]] = defaultdict(list)
    for q, v in answered:
        for image in q.images:
            per_image[image].append(v)
    compose = [v for q, v in answered if q.op == Operator.COMPOSE]
    consistency = statistics.harmonic_mean([fmean(vs) for vs in per_image.values()]) if per_image else None
    following = _mean(compose)
    parts = [x for x in (consistency, following) if x is not None]
    if not parts:
        return None
    return {"overall": 10 * math.prod(parts) ** (1 / len(parts)),
            "dimensions": {k: 10 * x for k, x in (("consistency", consistency),
                                                  ("prompt_following", following)) if x is not None}}


def _savanna(answered: list) -> dict | None:
    """Savanna's scores of a case's answered (question, value) pairs; None without an anchor's
    identity question."""
    identity = [v for q, v in answered if q.op == Operator.ANCHOR and q.aspect == "identity"]
    context = [v for q, v in answered if not (q.op == Operator.ANCHOR and q.aspect == "identity")]
    if not identity:
        return None
    s_id, s_ctx = fmean(identity), _mean(context)
    return {"overall": 100 * (0.8 * s_id + 0.2 * (s_ctx if s_ctx is not None else s_id)),
            "dimensions": {"identity": 100 * s_id, **({"context": 100 * s_ctx} if s_ctx is not None else {})}}


@dataclass(frozen=True)
class PassAtTau:
    """LongBanana's P@tau as ``trace score --protocol longbanana`` takes it: the threshold, the
    frozen difficulty weights (uniform without), and the name the scores give them (the weights file)."""

    tau: float = 70.0
    weights: DifficultyWeights | None = None
    weights_name: str | None = None


class ProtocolTally:
    """The protocols' per-case scores, added one case at a time (floats only), then summarized."""

    def __init__(self, protocols: Sequence[str], pass_at: PassAtTau = PassAtTau()) -> None:
        check_protocols(protocols)
        if not 0 <= pass_at.tau <= 100:
            raise TraceError(f"--tau: {pass_at.tau} must lie between 0 and 100")
        self.protocols = tuple(dict.fromkeys(protocols))
        self.weights, self.tau, self.weights_name = pass_at.weights, pass_at.tau, pass_at.weights_name
        self.overall: dict[str, list[float]] = defaultdict(list)
        self.dims: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.passed: list[float] = []
        # trace run --samples: each value's per-sample values (same keys and order), for nested intervals
        self.inner: dict[tuple, list[tuple[float, ...]]] = defaultdict(list)
        self.weights_missing = 0

    def add(self, case: Case, outcomes: Mapping[str, Outcome] | Sequence[Mapping[str, Outcome]]) -> None:
        """Add a case's outcomes, or (``trace run --samples``) one mapping per sample: the case then
        counts the mean of its samples' scores, and LongBanana's pass its samples' pass rate."""
        wanted = [p for p in self.protocols if p != "trace"]
        if not wanted:
            return
        weights = None if self.weights is None else self.weights.weights.get(case.id, {})
        if self.weights is not None and case.id not in self.weights.weights:
            self.weights_missing += 1
        samples = samples_of(outcomes)
        each = [_case_scores(case, sample, weights, self.tau) for sample in samples]
        for name in dict.fromkeys(name for scores in each for name in scores):  # those some sample could score
            if name not in wanted:
                continue
            results = [scores[name] for scores in each if name in scores]
            sampled = len(samples) > 1  # a run of --samples K: every case has its K
            self._add(self.overall[name], (name,), [r["overall"] for r in results], sampled)
            for d in dict.fromkeys(d for r in results for d in r["dimensions"]):
                self._add(self.dims[name][d], (name, d), [r["dimensions"][d] for r in results if d in r["dimensions"]],
                          sampled)
            if name == "longbanana":
                self._add(self.passed, ("passed",), [100.0 if r["passed"] else 0.0 for r in results], sampled)

    def _inner(self, key: tuple) -> list[tuple[float, ...]] | None:
        return self.inner.get(key)  # filled in a sampled run only

    def _add(self, values: list[float], key: tuple, each: list[float], sampled: bool) -> None:
        """A case's value (its samples' mean), and in a sampled run its samples' values for the
        nested interval (a run of one sample keeps floats only)."""
        values.append(_sample_mean(each))
        if sampled:
            self.inner[key].append(tuple(each))

    def result(self, trace: ProtocolScore | None, ci) -> dict[str, ProtocolScore]:
        """The protocols asked, by name (``trace``: the operator table given); ``ci(values, inner)`` is
        the bootstrap interval the scores use (``inner``: each case's per-sample values with ``trace
        run --samples``, resampled within the case; None for runs of one sample)."""
        out: dict[str, ProtocolScore] = {}
        for name in self.protocols:
            if name == "trace":
                if trace is not None:
                    out[name] = trace
                continue
            values = self.overall.get(name, [])
            dims = self.dims.get(name, {})
            extra = {}
            if name == "longbanana":
                extra = {"tau": self.tau, "pass_rate": _round(_mean(self.passed)),
                         "pass_rate_ci95": ci(self.passed, self._inner(("passed",))),
                         "weights": self.weights_name or "uniform",
                         "weights_missing": None if self.weights is None else self.weights_missing}
            out[name] = ProtocolScore(
                protocol=name, range="0-10" if name == "macro" else "0-100", overall=_round(_mean(values)),
                ci95=ci(values, self._inner((name,))),
                dimensions={d: _round(_mean(dims.get(d, []))) for d in DIMENSIONS[name]},
                dimension_ci95={d: ci(dims.get(d, []), self._inner((name, d))) for d in DIMENSIONS[name]},
                cases=len(values), **extra)
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _sample_mean(values: list[float]) -> float:
    """One sample's value as it is; several samples' mean (``trace run --samples``)."""
    return fmean(values)


def difficulty_weights(runs: Sequence[tuple[str, str, Iterable[tuple[Case, Mapping[str, Outcome]
                                                             | Sequence[Mapping[str, Outcome]]]]]],
                       tool: str, floor: float = WEIGHT_FLOOR) -> DifficultyWeights:
    """P@tau's difficulty weights from reference runs given as (name, cases hash, their cases with
    outcomes): per item ``w_j = max(floor, 1 - mean value of j over the runs that answered it)``.
    A case's outcomes may be one mapping per sample (``trace run --samples K``): a run's value of
    an item is then the mean over the samples that answered it (the run counts once, as a run of
    one sample does). The runs must be of one benchmark."""
    hashes = {h for _, h, _ in runs}
    if len(hashes) != 1:
        raise TraceError("--weights-from: the runs are of different benchmarks (their cases.jsonl differ)")
    sums: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for _, _, cases in runs:
        for case, given in cases:
            samples = samples_of(given)
            answered: dict[str, list[float]] = defaultdict(list)
            for outcomes in samples:
                for qid, outcome in outcomes.items():
                    if outcome.answered:
                        answered[qid].append(outcome.value)  # type: ignore[arg-type]
            for qid, values in answered.items():
                sums[case.id][qid].append(_sample_mean(values))
    weights = {cid: {qid: round(max(floor, 1 - fmean(vs)), 4) for qid, vs in sorted(qs.items())}
               for cid, qs in sorted(sums.items())}
    return DifficultyWeights(tool=tool, cases_hash=hashes.pop(), runs=tuple(name for name, _, _ in runs),
                             formula=f"w = max({floor}, 1 - mean value of the item over the runs that answered it); "
                                     f"an item none answered: {UNKNOWN_WEIGHT}",
                             floor=floor, weights=weights)


def write_weights(path: Path, weights: DifficultyWeights) -> None:
    write_json(Path(path), weights)


def read_weights(path: Path, cases_hash: str) -> DifficultyWeights:
    """A weights file, checked to be for the run's benchmark."""
    if not Path(path).is_file():
        raise TraceError(f"--weights {path}: no such file")
    weights = read_json(Path(path), DifficultyWeights)
    if weights.cases_hash != cases_hash:
        raise TraceError(f"--weights {path}: weights of another benchmark (its cases.jsonl differs from the run's)")
    return weights

