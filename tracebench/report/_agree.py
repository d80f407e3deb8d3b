"""``trace agree``: how far a judge can be trusted (TRACE-Bench, arXiv 2608.16765: judge agreement, its Table 7).

Raters are a human label file or judges: a run folder (its verdicts; abstentions are no
answer) or a JSONL file of labels, one ``{"case_id", "question_id", "pass"}`` a line. For each
pair of raters, over the questions both answered:

- checklist level: agreement (share of equal answers) and Cohen's kappa
  (``sklearn.metrics.cohen_kappa_score``);
- operator level: per case and operator, the score each rater's answers give (the scoring
  of ``trace score``: dependencies, then the mean over operator instances), and between the
  two raters Pearson and Spearman correlation (``scipy.stats``) and the mean absolute error;
- 95% intervals by percentile bootstrap over cases (``scipy.stats.bootstrap``; questions of
  one case are not independent, so cases are resampled whole).

With three or more raters, Krippendorff's alpha (nominal; the ``krippendorff`` package)
over every question any two answered. With a diagnosis, the agreement (and kappa) of the
failure source each operator instance was localized to, between a label file
(``case_id``, ``target``, ``source``) and a diagnosis folder.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any, Sequence

import krippendorff
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from ..errors import TraceError
from ..jsonfiles import numbered_jsonl
from ..operators import OPERATORS
from ..outcomes import Outcome
from ..records import RUN_MANIFEST, TREES, VERDICTS, Case, read_cases
from ..score import instance_scores

__all__ = ["Label", "SourceLabel", "agree", "format_agreement", "read_labels"]

RESAMPLES = 1000


class Label(BaseModel):
    """One line of a label file: the answer a rater gave one question, after polarity."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    case_id: str
    question_id: str
    passed: bool = Field(alias="pass", description="whether the requirement holds (after the question's polarity)")


class SourceLabel(BaseModel):
    """One line of a diagnosis label file: the failure source a rater gives one operator instance."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    case_id: str
    target: str
    source: str


Answers = dict[tuple[str, str], bool]


def read_labels(source: Path, cases: dict[str, Case]) -> Answers:
    """A rater's answers: a run folder's verdicts or a JSONL label file, checked against the cases."""
    source = Path(source)
    rows: list[tuple[str, str, str, bool]] = []  # (where, case id, question id, passed)
    if source.is_dir():
        if not RUN_MANIFEST.path(source).is_file():
            raise TraceError(f"{source}: neither a run folder (no {RUN_MANIFEST.name}) nor a label file")
        rows = [(f"{VERDICTS.path(source)}:{k}", v.case_id, v.question_id, v.outcome.passed)
                for k, v in VERDICTS.read_numbered(source) if v.outcome.answered]
    else:
        rows = [(f"{source}:{lineno}", label.case_id, label.question_id, label.passed)
                for lineno, label in numbered_jsonl(source, Label)]
    answers: Answers = {}
    first: dict[tuple[str, str], str] = {}
    for where, case_id, question_id, passed in rows:
        case = cases.get(case_id)
        if case is None:
            raise TraceError(f"{where}: case_id: {case_id!r} is not a case of the benchmark")
        if question_id not in {q.id for q in case.checklist}:
            raise TraceError(f"{where}: question_id: case {case_id} has no question {question_id!r}")
        key = (case_id, question_id)
        if key in first:
            raise TraceError(f"{where}: {case_id} {question_id} is labelled twice (first at {first[key]})")
        first[key] = where
        answers[key] = passed
    return answers


def _operator_scores(case: Case, answers: dict[str, bool]) -> dict[str, float]:
    """Per operator, the case's score from these answers (the rest unanswered), as trace score."""
    instances = instance_scores(case, {qid: Outcome.binary(ok) for qid, ok in answers.items()})
    per_op: dict[str, list[float]] = {}
    for (op, _), value in instances.items():
        per_op.setdefault(op, []).append(value)
    return {op: fmean(values) for op, values in per_op.items()}


# answers of a pair on one question, as a column of the per-case count table
_BOTH_PASS, _A_ONLY, _B_ONLY, _BOTH_FAIL = range(4)
_KAPPA_A, _KAPPA_B = [True, True, False, False], [True, False, True, False]  # the four columns as label pairs


@dataclass
class _Pair:
    """Two raters' answers on the questions both gave, arranged for fast resampling over cases."""

    a: str
    b: str
    cases: list[str]  # cases with at least one question both answered
    counts: np.ndarray  # (case, 4): questions both pass / only a / only b / both fail
    scores: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # op -> (has it, a's score, b's score) per case


def _pair(name_a: str, a: Answers, name_b: str, b: Answers, cases: dict[str, Case]) -> _Pair:
    common: dict[str, list[str]] = {}
    for key in a:
        if key in b:
            common.setdefault(key[0], []).append(key[1])
    order = [c for c in cases if c in common]
    counts = np.zeros((len(order), 4))
    scores = {op: (np.zeros(len(order), bool), np.zeros(len(order)), np.zeros(len(order))) for op in OPERATORS}
    for k, case_id in enumerate(order):
        qids = common[case_id]
        for q in qids:
            x, y = a[(case_id, q)], b[(case_id, q)]
            counts[k, _BOTH_PASS if x and y else _A_ONLY if x else _B_ONLY if y else _BOTH_FAIL] += 1
        sa = _operator_scores(cases[case_id], {q: a[(case_id, q)] for q in qids})
        sb = _operator_scores(cases[case_id], {q: b[(case_id, q)] for q in qids})
        for op in OPERATORS:
            if op in sa and op in sb:
                has, xs, ys = scores[op]
                has[k], xs[k], ys[k] = True, sa[op], sb[op]
    return _Pair(name_a, name_b, order, counts, scores)


def _agreement(counts: np.ndarray) -> float:
    total = counts.sum()
    return float((counts[_BOTH_PASS] + counts[_BOTH_FAIL]) / total) if total else np.nan


def _kappa(counts: np.ndarray) -> float:
    a_labels = counts[_BOTH_PASS] + counts[_A_ONLY], counts[_B_ONLY] + counts[_BOTH_FAIL]
    b_labels = counts[_BOTH_PASS] + counts[_B_ONLY], counts[_A_ONLY] + counts[_BOTH_FAIL]
    if min(a_labels[0] + b_labels[0], a_labels[1] + b_labels[1]) == 0:
        return np.nan  # one answer throughout: chance agreement is total, kappa undefined
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(cohen_kappa_score(_KAPPA_A, _KAPPA_B, labels=[False, True], sample_weight=counts))


def _correlation(fn, x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan  # undefined for a constant score
    return float(fn(x, y).statistic)


def _statistic(pair: _Pair, metric: str, op: str | None):
    """The function of resampled case indices that computes one metric."""
    if op is None:
        fn = _agreement if metric == "agreement" else _kappa
        return lambda idx: fn(pair.counts[idx].sum(axis=0))
    has, xs, ys = pair.scores[op]

    def on_cases(idx):
        keep = idx[has[idx]]
        x, y = xs[keep], ys[keep]
        if metric == "mae":
            return float(np.abs(x - y).mean()) if len(x) else np.nan
        return _correlation(stats.pearsonr if metric == "pearson" else stats.spearmanr, x, y)

    return on_cases


MIN_DEFINED = 0.9  # an interval needs the metric defined in at least this share of the resamples


def _value(pair: _Pair, metric: str, op: str | None, seed: int) -> tuple[float | None, list[float] | None]:
    """A metric on all cases, and its percentile bootstrap interval over cases: over the
    resamples where the metric is defined (a correlation is not when a resample's scores are
    constant), and none when that is less than 90% of them."""
    fn = _statistic(pair, metric, op)
    everything = np.arange(len(pair.cases))
    value = fn(everything)
    if np.isnan(value):
        return None, None
    if len(pair.cases) < 2:
        return round(value, 4), None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = stats.bootstrap((everything,), fn, n_resamples=RESAMPLES, vectorized=False, method="percentile",
                                 confidence_level=0.95, random_state=np.random.default_rng(seed))
    resamples = np.asarray(result.bootstrap_distribution)
    defined = resamples[np.isfinite(resamples)]
    if len(defined) < MIN_DEFINED * len(resamples):
        return round(value, 4), None
    low, high = np.percentile(defined, [2.5, 97.5])
    return round(value, 4), [round(float(low), 4), round(float(high), 4)]


def _compare(pair: _Pair, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"a": pair.a, "b": pair.b, "cases": len(pair.cases), "n": int(pair.counts.sum()),
                           "operators": {}}
    ci: dict[str, Any] = {"operators": {}}
    for metric in ("agreement", "cohen_kappa"):
        out[metric], ci[metric] = _value(pair, metric, None, seed)
    for op in OPERATORS:
        out["operators"][op] = {"cases": int(pair.scores[op][0].sum())}
        ci["operators"][op] = {}
        for metric in ("pearson", "spearman", "mae"):
            out["operators"][op][metric], ci["operators"][op][metric] = _value(pair, metric, op, seed)
    out["ci95"] = ci
    return out


def _round(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def _alpha(raters: dict[str, Answers]) -> float | None:
    keys = sorted({k for answers in raters.values() for k in answers})
    data = np.array([[float(answers[k]) if k in answers else np.nan for k in keys] for answers in raters.values()])
    if data.size == 0 or len({v for v in data.flatten() if not np.isnan(v)}) < 2:
        return None
    alpha = float(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"))
    return None if np.isnan(alpha) else round(alpha, 4)  # nan: no two raters share a unit with two values


def _diagnosis(labels_path: Path, diag_dir: Path) -> dict[str, Any]:
    found: dict[tuple[str, str], str] = {}
    for tree in TREES.read(diag_dir):
        for a in tree.attributions:
            if a.source is not None:
                found[(tree.case_id, a.target)] = a.source
    from ..diagnose import sources

    known = list(sources())
    diagnosed_cases = {case_id for case_id, _ in found}
    pairs = []
    for lineno, label in numbered_jsonl(Path(labels_path), SourceLabel):
        where = f"{labels_path}:{lineno}"
        if label.source not in known:
            raise TraceError(f"{where}: source: {label.source!r} is not one of {', '.join(known)}")
        key = (label.case_id, label.target)
        if key not in found:
            what = "target" if label.case_id in diagnosed_cases else "case_id"
            raise TraceError(f"{where}: {what}: {label.case_id} {label.target} is not an operator instance "
                             f"the diagnosis attributed")
        pairs.append((label.source, found[key]))
    if not pairs:
        raise TraceError(f"{labels_path}: no operator instance in common with {diag_dir}")
    x, y = [p for p, _ in pairs], [q for _, q in pairs]
    kappa = None
    if len(set(x) | set(y)) >= 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kappa = float(cohen_kappa_score(x, y))
    return _round({"n": len(pairs), "agreement": fmean(p == q for p, q in pairs), "cohen_kappa": kappa,
                   "confusion": {f"{p} -> {q}": sum(1 for a, b in pairs if (a, b) == (p, q))
                                 for p, q in sorted(set(pairs))}})


def agree(cases_dir: Path, *, human: Path | None = None, judges: Sequence[Path] = (),
          human_diagnosis: Path | None = None, diagnosis: Path | None = None, seed: int = 0) -> dict[str, Any]:
    """Agreement between a human file and judges, or between judges (see the module docstring).

    The headline keys (``n``, ``agreement``, ``cohen_kappa``, ``operators``, ``ci95``) are the
    first pair's: the human against the first judge, or the first two judges."""
    cases = {c.id: c for c in read_cases(Path(cases_dir))}
    raters: dict[str, Answers] = {}
    if human is not None:
        raters["human"] = read_labels(human, cases)
    for path in judges:
        name = str(path)
        raters[name if name not in raters else f"{name} ({len(raters)})"] = read_labels(path, cases)
    if (human_diagnosis is None) != (diagnosis is None):
        raise TraceError("diagnosis agreement needs both --human-diagnosis FILE and --diagnosis DIAG_DIR")
    if len(raters) < 2 and human_diagnosis is None:
        raise TraceError("give two raters: --human and a --judge, or two --judge")
    if len(raters) == 1:
        raise TraceError("give a second rater (--judge), or only the diagnosis files")
    result: dict[str, Any] = {"raters": list(raters)}
    names = list(raters)
    pairs = [_compare(_pair(a, raters[a], b, raters[b], cases), seed)
             for i, a in enumerate(names) for b in names[i + 1:]]
    if pairs:
        if pairs[0]["n"] == 0:
            raise TraceError(f"{pairs[0]['a']} and {pairs[0]['b']} answered no question in common")
        result.update({k: pairs[0][k] for k in ("n", "agreement", "cohen_kappa", "operators", "ci95")})
        result["pairs"] = pairs
    if len(raters) >= 3:
        result["krippendorff_alpha"] = _alpha(raters)
    if human_diagnosis is not None:
        result["diagnosis"] = _diagnosis(human_diagnosis, diagnosis)
    return result


def format_agreement(result: dict[str, Any]) -> str:
    """The pairs as a plain-text table (the paper's Table 7 columns)."""
    def show(value, ci=None) -> str:
        text = "n/a" if value is None else f"{value:.3f}"
        return text + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

    lines = []
    for pair in result.get("pairs", []):
        lines.append(f"{pair['a']}  vs  {pair['b']}: {pair['n']} questions in {pair['cases']} cases")
        lines.append(f"  agreement {show(pair['agreement'], pair['ci95']['agreement'])}   "
                     f"Cohen's kappa {show(pair['cohen_kappa'], pair['ci95']['cohen_kappa'])}")
        lines.append(f"  {'operator':12s} {'pearson':>22s} {'spearman':>22s} {'MAE':>22s}")
        for op, m in pair["operators"].items():
            ci = pair["ci95"]["operators"][op]
            lines.append(f"  {op:12s} {show(m['pearson'], ci['pearson']):>22s} {show(m['spearman'], ci['spearman']):>22s}"
                         f" {show(m['mae'], ci['mae']):>22s}")
    if "krippendorff_alpha" in result:
        lines.append(f"Krippendorff's alpha over {len(result['raters'])} raters: {show(result['krippendorff_alpha'])}")
    if "diagnosis" in result:
        d = result["diagnosis"]
        lines.append(f"diagnosis: {d['n']} operator instances, source agreement {show(d['agreement'])}, "
                     f"Cohen's kappa {show(d['cohen_kappa'])}")
    return "\n".join(lines)
