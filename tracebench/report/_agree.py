"""``trace agree``: how far a judge can be trusted (TRACE-Bench, arXiv 2608.16765: judge agreement, its Table 7).

Raters are a human label file or judges: a run folder (its verdicts; abstentions are no
answer) or a JSONL file of labels, one ``{"case_id", "question_id", "pass"}`` a line (or, for a
graded label, ``"value"``: the share satisfied, 0, 0.5, 1 on the ternary scale, 0.2 an identity
tier). A rater's answer to a question is its value after polarity. For each pair of raters,
over the questions both answered:

- checklist level: exact agreement (share of equal values), Cohen's kappa and, on graded
  labels, the quadratic-weighted kappa (``sklearn.metrics.cohen_kappa_score``, the values as
  ordered categories) and the **opposite-end errors** (one rater 0, the other 1: LongBanana's
  0 against 2);
- operator level: per case and operator, the score each rater's answers give (the scoring
  of ``trace score``: dependencies, then the mean over operator instances), and between the
  two raters Pearson, Spearman and Kendall correlation (``scipy.stats``) and the mean absolute
  error;
- 95% intervals by percentile bootstrap over cases (``scipy.stats.bootstrap``; questions of
  one case are not independent, so cases are resampled whole).

With three or more raters, Krippendorff's alpha (nominal on binary labels, ordinal on graded
ones; the ``krippendorff`` package) over every question any two answered. With a diagnosis,
the agreement (and kappa) of the failure source each operator instance was localized to,
between a label file (``case_id``, ``target``, ``source``) and a diagnosis folder.

``--truth RUN`` takes the truth from the synthetic zoo's generation records inside RUN's
images (:func:`truth_labels`): the judge of RUN is examined against known answers, per
operator, aspect and scale, with its false-pass and false-fail rates and abstentions
(:func:`examine`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any, Sequence

import krippendorff
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from ..errors import TraceError
from ..jsonfiles import numbered_jsonl
from ..operators import OPERATORS
from ..outcomes import Outcome
from ..records import RUN_MANIFEST, TREES, VERDICTS, Case, RunManifest, read_cases, sample_name, split_sample_name
from ..score import case_scores, instance_scores

__all__ = ["CHECKLIST_METRICS", "Label", "SourceLabel", "agree", "examine", "format_agreement", "format_exam",
           "read_labels", "truth_labels"]

RESAMPLES = 1000


class Label(BaseModel):
    """One line of a label file: the answer a rater gave one question, after polarity."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    case_id: str
    question_id: str
    passed: bool | None = Field(default=None, alias="pass",
                                description="whether the requirement holds (after the question's polarity)")
    value: float | None = Field(default=None, ge=0, le=1, description="a graded label instead: the share satisfied "
                                "(ternary 0, 0.5, 1; identity tiers 0, 0.2, 1), after polarity")

    @model_validator(mode="after")
    def _one_answer(self) -> "Label":
        if (self.passed is None) == (self.value is None):
            raise ValueError('give "pass" (true or false) or "value" (0 to 1), one of them')
        return self

    @property
    def score(self) -> float:
        return float(self.passed) if self.value is None else self.value


class SourceLabel(BaseModel):
    """One line of a diagnosis label file: the failure source a rater gives one operator instance."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    case_id: str
    target: str
    source: str


Answers = dict[tuple[str, str], float]  # (case id, question id) -> the value a rater gives, after polarity


def read_labels(source: Path, cases: dict[str, Case], manifest: RunManifest | None = None) -> Answers:
    """A rater's answers: a run folder's verdicts or a JSONL label file, checked against the cases;
    ``manifest``: the run folder's ``run.json``, when the caller has read it."""
    source = Path(source)
    rows: list[tuple[str, str, str, float]] = []  # (where, case id, question id, value)
    if source.is_dir():
        if not RUN_MANIFEST.path(source).is_file():
            raise TraceError(f"{source}: neither a run folder (no {RUN_MANIFEST.name}) nor a label file")
        graded = (manifest or RUN_MANIFEST.read(source)).answer_scale.spec.graded
        rows = [(f"{VERDICTS.path(source)}:{k}", sample_name(v.case_id, v.sample), v.question_id,
                 _label_value(v.outcome, graded)) for k, v in VERDICTS.read_numbered(source) if v.outcome.answered]
    else:
        rows = [(f"{source}:{lineno}", label.case_id, label.question_id, label.score)
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


def with_samples(cases: dict[str, Case], samples: int) -> dict[str, Case]:
    """The cases by id, and with ``trace run --samples K`` each later sample's image as an item of
    its own, ``<case id>~<k>`` (what a label file names to label that image)."""
    if samples < 2:
        return cases
    return cases | {sample_name(case_id, k): case for case_id, case in cases.items() for k in range(1, samples)}


def _label_value(outcome: Outcome, graded: bool) -> float:
    """A verdict as a label: its value on a graded scale; on the binary scale whether it passes (an
    ensemble's mean of 0.5 is a fail, not a third category)."""
    return outcome.value if graded else float(outcome.passed)  # type: ignore[return-value]


def _outcome(value: float) -> Outcome:
    return Outcome.of("pass" if value > 0.5 else "fail", value)


def _operator_scores(case: Case, answers: dict[str, float]) -> dict[str, float]:
    """Per operator, the case's score from these answers (the rest unanswered), as trace score."""
    scores = case_scores(instance_scores(case, {qid: _outcome(v) for qid, v in answers.items()}))
    scores.pop("overall", None)
    return scores


@dataclass
class _Pair:
    """Two raters' answers on the questions both gave, arranged for fast resampling over cases."""

    a: str
    b: str
    cases: list[str]  # cases with at least one question both answered
    levels: list[float]  # the values either rater gave, ascending (ordered categories)
    counts: np.ndarray  # (case, level of a, level of b): questions
    scores: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # op -> (has it, a's score, b's score) per case

    @property
    def graded(self) -> bool:
        return any(v not in (0.0, 1.0) for v in self.levels)


def _pair(name_a: str, a: Answers, name_b: str, b: Answers, cases: dict[str, Case]) -> _Pair:
    common: dict[str, list[str]] = {}
    for key in a:
        if key in b:
            common.setdefault(key[0], []).append(key[1])
    order = [c for c in cases if c in common]
    levels = sorted({a[(c, q)] for c in order for q in common[c]} | {b[(c, q)] for c in order for q in common[c]}
                    | {0.0, 1.0})
    index = {v: k for k, v in enumerate(levels)}
    counts = np.zeros((len(order), len(levels), len(levels)))
    scores = {op: (np.zeros(len(order), bool), np.zeros(len(order)), np.zeros(len(order))) for op in OPERATORS}
    for k, case_id in enumerate(order):
        qids = common[case_id]
        for q in qids:
            counts[k, index[a[(case_id, q)]], index[b[(case_id, q)]]] += 1
        sa = _operator_scores(cases[case_id], {q: a[(case_id, q)] for q in qids})
        sb = _operator_scores(cases[case_id], {q: b[(case_id, q)] for q in qids})
        for op in OPERATORS:
            if op in sa and op in sb:
                has, xs, ys = scores[op]
                has[k], xs[k], ys[k] = True, sa[op], sb[op]
    return _Pair(name_a, name_b, order, levels, counts, scores)


def _agreement(table: np.ndarray) -> float:
    total = table.sum()
    return float(np.trace(table) / total) if total else np.nan


def _opposite(table: np.ndarray) -> float:
    """The share of questions one rater scores 0 and the other 1 (opposite ends of the scale)."""
    total = table.sum()
    return float((table[0, -1] + table[-1, 0]) / total) if total else np.nan


def _kappa(table: np.ndarray, weights: str | None = None) -> float:
    """Cohen's kappa (``weights="quadratic"``: QWK) from a table of (a's level, b's level) counts."""
    size = table.shape[0]
    if (table.sum(axis=1) + table.sum(axis=0) > 0).sum() < 2:
        return np.nan  # one answer throughout: chance agreement is total, kappa undefined
    a_levels, b_levels = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = cohen_kappa_score(a_levels.ravel(), b_levels.ravel(), labels=list(range(size)),
                                  sample_weight=table.ravel(), weights=weights)
    return float(value)


CHECKLIST_METRICS = {"agreement": _agreement, "cohen_kappa": _kappa,
                     "quadratic_kappa": lambda t: _kappa(t, "quadratic"), "opposite_end": _opposite}


def _correlation(fn, x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan  # undefined for a constant score
    return float(fn(x, y).statistic)


def _statistic(pair: _Pair, metric: str, op: str | None):
    """The function of resampled case indices that computes one metric."""
    if op is None:
        fn = CHECKLIST_METRICS[metric]
        return lambda idx: fn(pair.counts[idx].sum(axis=0))
    has, xs, ys = pair.scores[op]

    def on_cases(idx):
        keep = idx[has[idx]]
        x, y = xs[keep], ys[keep]
        if metric == "mae":
            return float(np.abs(x - y).mean()) if len(x) else np.nan
        return _correlation({"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}[metric],
                            x, y)

    return on_cases


MIN_DEFINED = 0.9  # an interval needs the metric defined in at least this share of the resamples


class _Resamples:
    """The bootstrap resamples of a pair's cases, each metric computed on all of them at once.

    The case indices are ``scipy.stats.bootstrap``'s own draw (``rng.integers(0, n, (RESAMPLES,
    n))`` from ``np.random.default_rng(seed)``, one sample of ``n`` cases), and every metric is
    computed from a resample with the same floating-point operations, in the same order, as
    ``_statistic``'s function of it (sklearn's kappa, SciPy's Pearson, Spearman and Kendall, the
    mean), so the distribution is the one ``scipy.stats.bootstrap(..., vectorized=False)`` gives,
    number for number (tests/test_agree.py checks it), without a Python call per resample and
    metric through their input checks."""

    def __init__(self, pair: _Pair, seed: int) -> None:
        n = len(pair.cases)
        self.pair = pair
        self.idx = np.random.default_rng(seed).integers(0, n, (RESAMPLES, n))
        rows = np.arange(RESAMPLES)[:, None] * n
        # how many times each case is drawn in each resample
        self.times = np.bincount((self.idx + rows).ravel(), minlength=RESAMPLES * n).reshape(RESAMPLES, n)
        self._tables: np.ndarray | None = None

    def tables(self) -> np.ndarray:
        """Per resample, the (a's level, b's level) question counts: whole numbers, so exact in any order."""
        if self._tables is None:
            counts = self.pair.counts
            size = counts.shape[1]
            flat = self.times.astype(float) @ counts.reshape(len(counts), size * size)
            self._tables = flat.reshape(RESAMPLES, size, size)
        return self._tables

    def distribution(self, metric: str, op: str | None) -> np.ndarray:
        with np.errstate(all="ignore"):
            if op is None:
                return self._checklist(metric)
            return self._operator(metric, op)

    def _checklist(self, metric: str) -> np.ndarray:
        tables = self.tables()
        size = tables.shape[1]
        total = tables.sum(axis=(1, 2))
        nan = np.full(RESAMPLES, np.nan)
        if metric == "agreement":
            return np.where(total > 0, np.trace(tables, axis1=1, axis2=2) / total, nan)
        if metric == "opposite_end":
            return np.where(total > 0, (tables[:, 0, -1] + tables[:, -1, 0]) / total, nan)
        # Cohen's kappa as sklearn.metrics.cohen_kappa_score computes it from the table
        weights = "quadratic" if metric == "quadratic_kappa" else None
        used = ((tables.sum(axis=2) + tables.sum(axis=1)) > 0).sum(axis=1)
        sum0, sum1 = tables.sum(axis=1), tables.sum(axis=2)
        expected = (sum0[:, :, None] * sum1[:, None, :]) / sum0.sum(axis=1)[:, None, None]
        if weights is None:
            w_mat = np.ones((size, size))
            np.fill_diagonal(w_mat, 0)
        else:
            w_mat = np.zeros((size, size)) + np.arange(size)
            w_mat = (w_mat - w_mat.T) ** 2
        numerator = (w_mat * tables).sum(axis=(1, 2))  # whole numbers
        weighted = np.ascontiguousarray(w_mat * expected)
        denominator = np.array([np.sum(one) for one in weighted])  # each table's sum, in numpy's order for one
        kappa = 1 - numerator / denominator
        return np.where((used >= 2) & (denominator != 0), kappa, nan)

    def _operator(self, metric: str, op: str) -> np.ndarray:
        has, xs, ys = self.pair.scores[op]
        keep = has[self.idx]  # (resample, draw): whether the drawn case has the operator
        lengths = keep.sum(axis=1)
        out = np.full(RESAMPLES, np.nan)
        if metric == "kendall":
            return self._kendall(has, xs, ys, lengths)
        drawn = np.where(keep, self.idx, -1)
        for length in np.unique(lengths):
            rows = np.flatnonzero(lengths == length)
            if length == 0 or (metric != "mae" and length < 3):
                continue
            picked = drawn[rows]
            cases = picked[picked >= 0].reshape(len(rows), length)  # each resample's cases, in draw order
            x, y = xs[cases], ys[cases]
            if metric == "mae":
                out[rows] = np.abs(x - y).mean(axis=1)
                continue
            varies = (np.ptp(x, axis=1) != 0) & (np.ptp(y, axis=1) != 0)
            rows, x, y = rows[varies], x[varies], y[varies]
            if metric == "pearson":
                out[rows] = _pearson(x, y)
            else:
                out[rows] = [np.corrcoef(np.stack((rx, ry)))[1, 0] for rx, ry in zip(_ranks(x), _ranks(y))]
        return out

    def _kendall(self, has: np.ndarray, xs: np.ndarray, ys: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """scipy.stats.kendalltau (tau-b): its counts of discordant pairs and ties are whole numbers,
        here counted over the distinct (x, y) values a resample draws, then its formula."""
        cases = np.flatnonzero(has)
        values, which = np.unique(np.stack((xs[cases], ys[cases]), axis=1), axis=0, return_inverse=True)
        c = np.zeros((RESAMPLES, len(values)), dtype=np.int64)
        for k, case in enumerate(cases):
            c[:, which[k]] += self.times[:, case]
        vx, vy = values[:, 0], values[:, 1]
        sx = np.sign(vx[:, None] - vx[None, :])
        sy = np.sign(vy[:, None] - vy[None, :])

        def pairs(matrix: np.ndarray) -> np.ndarray:  # pairs of draws (i < j) whose values relate so
            both = np.einsum("ri,ij,rj->r", c, matrix.astype(np.int64), c)
            return (both - (c * np.diag(matrix).astype(np.int64)).sum(axis=1)) // 2

        xtie, ytie = pairs(sx == 0), pairs(sy == 0)
        ntie, dis = pairs((sx == 0) & (sy == 0)), pairs(sx * sy < 0)
        tot = (lengths * (lengths - 1)) // 2
        con_minus_dis = tot - xtie - ytie + ntie - 2 * dis
        tau = con_minus_dis / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)
        tau = np.minimum(1., np.maximum(-1., tau))
        defined = (lengths >= 3) & (xtie != tot) & (ytie != tot)
        return np.where(defined, tau, np.nan)


def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """scipy.stats.pearsonr's statistic of each row (none constant, three values or more), by its operations."""
    xmean = np.mean(x, axis=-1, keepdims=True)
    ymean = np.mean(y, axis=-1, keepdims=True)
    xm = x - xmean
    ym = y - ymean
    xmax = np.max(np.abs(xm), axis=-1, keepdims=True)
    ymax = np.max(np.abs(ym), axis=-1, keepdims=True)
    normxm = xmax * np.linalg.norm(xm / xmax, ord=2, axis=-1, keepdims=True)
    normym = ymax * np.linalg.norm(ym / ymax, ord=2, axis=-1, keepdims=True)
    r = np.vecdot(xm / normxm, ym / normym, axis=-1)
    return np.clip(r, -1., 1.)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Each row's ``scipy.stats.rankdata`` (ties get their average rank: halves, exact)."""
    below = (x[:, None, :] < x[:, :, None]).sum(axis=2)
    tied = (x[:, None, :] == x[:, :, None]).sum(axis=2)
    return below + (tied + 1) / 2


def _value(pair: _Pair, metric: str, op: str | None,
           resamples: _Resamples | None) -> tuple[float | None, list[float] | None]:
    """A metric on all cases, and its percentile bootstrap interval over cases (``resamples``,
    drawn once per pair; None for fewer than two cases): over the resamples where the metric is defined (a correlation is not when a resample's scores are
    constant), and none when that is less than 90% of them."""
    fn = _statistic(pair, metric, op)
    everything = np.arange(len(pair.cases))
    value = fn(everything)
    if np.isnan(value):
        return None, None
    if resamples is None:  # fewer than two cases
        return round(value, 4), None
    resampled = resamples.distribution(metric, op)
    defined = resampled[np.isfinite(resampled)]
    if len(defined) < MIN_DEFINED * len(resampled):
        return round(value, 4), None
    low, high = np.percentile(defined, [2.5, 97.5])
    return round(value, 4), [round(float(low), 4), round(float(high), 4)]


def _compare(pair: _Pair, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"a": pair.a, "b": pair.b, "cases": len(pair.cases), "n": int(pair.counts.sum()),
                           "levels": pair.levels, "operators": {}}
    ci: dict[str, Any] = {"operators": {}}
    resamples = _Resamples(pair, seed) if len(pair.cases) >= 2 else None
    for metric in CHECKLIST_METRICS:
        out[metric], ci[metric] = _value(pair, metric, None, resamples)
    for op in OPERATORS:
        out["operators"][op] = {"cases": int(pair.scores[op][0].sum())}
        ci["operators"][op] = {}
        for metric in ("pearson", "spearman", "kendall", "mae"):
            out["operators"][op][metric], ci["operators"][op][metric] = _value(pair, metric, op, resamples)
    out["ci95"] = ci
    return out


def _round(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def _alpha(raters: dict[str, Answers]) -> float | None:
    """Krippendorff's alpha: nominal on binary labels, ordinal on graded ones."""
    keys = sorted({k for answers in raters.values() for k in answers})
    data = np.array([[float(answers[k]) if k in answers else np.nan for k in keys] for answers in raters.values()])
    values = {v for v in data.flatten() if not np.isnan(v)}
    if data.size == 0 or len(values) < 2:
        return None
    level = "nominal" if values <= {0.0, 1.0} else "ordinal"
    alpha = float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))
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
    raters_given = [p for p in (human, *judges) if p is not None]  # any rater may be a run folder (read_labels)
    manifests = {Path(p): RUN_MANIFEST.read(Path(p)) for p in raters_given if RUN_MANIFEST.path(Path(p)).is_file()}
    samples = max([m.samples or 1 for m in manifests.values()] or [1])
    cases = with_samples({c.id: c for c in read_cases(Path(cases_dir))}, samples)
    raters: dict[str, Answers] = {}
    if human is not None:
        raters["human"] = read_labels(human, cases, manifests.get(Path(human)))
    for path in judges:
        name = str(path)
        raters[name if name not in raters else f"{name} ({len(raters)})"] = read_labels(path, cases, manifests.get(Path(path)))
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
        result.update({k: pairs[0][k] for k in ("n", "levels", *CHECKLIST_METRICS, "operators", "ci95")})
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
        if any(v not in (0.0, 1.0) for v in pair["levels"]):
            lines.append(f"  quadratic-weighted kappa {show(pair['quadratic_kappa'], pair['ci95']['quadratic_kappa'])}"
                         f"   opposite-end errors {show(pair['opposite_end'], pair['ci95']['opposite_end'])}")
        lines.append(f"  {'operator':12s} {'pearson':>22s} {'spearman':>22s} {'kendall':>22s} {'MAE':>22s}")
        for op, m in pair["operators"].items():
            ci = pair["ci95"]["operators"][op]
            lines.append(f"  {op:12s} {show(m['pearson'], ci['pearson']):>22s} {show(m['spearman'], ci['spearman']):>22s}"
                         f" {show(m['kendall'], ci['kendall']):>22s} {show(m['mae'], ci['mae']):>22s}")
    if "krippendorff_alpha" in result:
        lines.append(f"Krippendorff's alpha over {len(result['raters'])} raters: {show(result['krippendorff_alpha'])}")
    if "diagnosis" in result:
        d = result["diagnosis"]
        lines.append(f"diagnosis: {d['n']} operator instances, source agreement {show(d['agreement'])}, "
                     f"Cohen's kappa {show(d['cohen_kappa'])}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ the truth of the zoo

def truth_labels(run_dir: Path, cases: dict[str, Case]) -> Answers:
    """The truth of a run of the synthetic zoo: for every case whose generated image carries a
    generation record, each question's value on the run's scale (the oracle's own answer,
    :func:`tracebench.scales.truth_answer`). A run whose images carry no record is a TraceError."""
    from ..run import generated_image
    from ..scales import kind_of, outcome, truth_answer
    from ..zoo import read_record

    run_dir = Path(run_dir)
    scale = RUN_MANIFEST.read(run_dir).answer_scale
    truth: Answers = {}
    for case_id, case in cases.items():
        name, sample = split_sample_name(case_id) or (case_id, 0)  # a later sample's item (trace run --samples)
        image = generated_image(run_dir, name, sample)
        record = read_record(image.read_bytes()) if image is not None else None
        if record is None:
            continue
        partial = record.partial or {}
        for q in case.checklist:
            state = "holds" if q.id not in record.failed else "partial" if q.id in partial else "broken"
            kind = kind_of(scale, q)
            truth[(case_id, q.id)] = outcome(kind, truth_answer(kind, q, state), q).value  # type: ignore[assignment]
    if not truth:
        raise TraceError(f"--truth {run_dir}: no generated image carries a generation record; the truth is known "
                         "only for runs of the synthetic zoo (--generator synthetic:PROFILE)")
    return truth


def examine(cases_dir: Path, run_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """The judge of a zoo run against the truth of its images: the agreement statistics of the pair
    (truth, judge), accuracy per operator and aspect, false passes (of the broken requirements, the
    share the judge passed), false fails (of those that hold, the share it failed), its pass rate's
    excess over the truth's, its yes-bias (how much more often it gives the top answer, "yes", "2"
    or "1.0", than the truth does: the oracle's ``yes-bias`` rate shows here) and its abstentions."""
    from ..cache import file_sha256
    from ..records import CASES

    manifest = RUN_MANIFEST.read(Path(run_dir))
    if not CASES.path(Path(cases_dir)).is_file():
        raise TraceError(f"--cases {cases_dir}: not a benchmark folder (no {CASES.name})")
    if file_sha256(CASES.path(Path(cases_dir))) != manifest.cases_hash:
        raise TraceError(f"--cases {cases_dir}: not the benchmark run {run_dir} was made from (its cases.jsonl differs)")
    cases = with_samples({c.id: c for c in read_cases(Path(cases_dir))}, manifest.samples or 1)
    truth = truth_labels(run_dir, cases)
    from ..scales import KINDS, kind_of, truth_answer

    scale = manifest.answer_scale
    questions = {(case_id, q.id): q for case_id, c in cases.items() for q in c.checklist}  # samples' items too
    judged: Answers = {}
    abstained = asked = 0
    top_judge = top_truth = raw = 0  # the top answer ("yes", "2", "1.0"): given by the judge, and true
    for v in VERDICTS.read(Path(run_dir)):
        item = (sample_name(v.case_id, v.sample), v.question_id)
        if item not in truth:
            continue
        asked += 1
        if not v.outcome.answered:
            abstained += 1
            continue
        judged[item] = _label_value(v.outcome, scale.spec.graded)
        if len(v.votes) == 1 and v.votes[0].answer is not None:
            q = questions[item]
            kind = kind_of(scale, q)
            state = {1.0: "holds", 0.0: "broken"}.get(truth[item], "partial")
            raw += 1
            top_judge += v.votes[0].answer == KINDS[kind][0]
            top_truth += truth_answer(kind, q, state) == KINDS[kind][0]
    pair = _compare(_pair("truth", truth, manifest.judges[0] if len(manifest.judges) == 1 else "+".join(manifest.judges),
                          judged, cases), seed)
    by: dict[str, dict[str, list[bool]]] = {"operator": {}, "aspect": {}}
    false_pass, false_fail, holds, broken = 0, 0, 0, 0
    judge_pass = truth_pass = 0
    for key, value in judged.items():
        q, true = questions[key], truth[key]
        by["operator"].setdefault(str(q.op), []).append(value == true)
        by["aspect"].setdefault(q.aspect, []).append(value == true)
        judge_pass += value > 0.5
        truth_pass += true > 0.5
        if true > 0.5:
            holds += 1
            false_fail += value <= 0.5
        else:
            broken += 1
            false_pass += value > 0.5
    n = len(judged)
    return _round({
        "run": str(run_dir), "judge": pair["b"], "scale": scale.value, "questions": asked,
        "answered": n, "abstention_rate": abstained / asked if asked else None,
        "accuracy": pair["agreement"], "cohen_kappa": pair["cohen_kappa"], "quadratic_kappa": pair["quadratic_kappa"],
        "opposite_end": pair["opposite_end"], "ci95": pair["ci95"],
        "false_pass": false_pass / broken if broken else None, "false_fail": false_fail / holds if holds else None,
        "yes_bias": (top_judge - top_truth) / raw if raw else None,
        "pass_excess": (judge_pass - truth_pass) / n if n else None,
        "by_operator": {k: {"accuracy": fmean(v), "n": len(v)} for k, v in sorted(by["operator"].items())},
        "by_aspect": {k: {"accuracy": fmean(v), "n": len(v)} for k, v in sorted(by["aspect"].items())},
        "operators": pair["operators"]})


def format_exam(result: dict[str, Any]) -> str:
    """A judge's examination as plain text."""
    def show(value) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    lines = [f"{result['judge']} on the {result['scale']} scale against the zoo's truth ({result['run']}): "
             f"{result['answered']} of {result['questions']} questions answered "
             f"(abstention rate {show(result['abstention_rate'])})",
             f"  accuracy {show(result['accuracy'])}   Cohen's kappa {show(result['cohen_kappa'])}   "
             f"quadratic-weighted kappa {show(result['quadratic_kappa'])}   opposite-end {show(result['opposite_end'])}",
             f"  false passes {show(result['false_pass'])} of broken requirements, false fails "
             f"{show(result['false_fail'])} of those that hold; yes-bias {show(result['yes_bias'])} (its top answer's "
             f"rate over the truth's), pass excess {show(result['pass_excess'])}",
             "  accuracy by operator: " + (", ".join(f"{k} {show(v['accuracy'])} ({v['n']})"
                                                     for k, v in result["by_operator"].items()) or "none answered"),
             "  accuracy by aspect: " + (", ".join(f"{k} {show(v['accuracy'])} ({v['n']})"
                                                   for k, v in result["by_aspect"].items()) or "none answered")]
    return "\n".join(lines)
