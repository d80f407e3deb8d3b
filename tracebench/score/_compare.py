"""``trace compare RUN_A RUN_B [...]``: whether one model really beats another, case by case.

For every pair of runs (of one benchmark) and every metric (the four operators, a case's
overall score, and the protocols asked), over the cases both runs scored:

- the **paired difference**: the mean over those cases of (A's case score - B's case score);
- a 95% percentile interval and a two-sided p-value from a **paired bootstrap clustered by
  template**: the cases of one template are not independent (the same structure, often the
  same failure), so templates are resampled with replacement, each bringing all its cases
  (2,000 resamples, seeded, or ``20 m / 0.05`` for a table of m tests, so that the smallest
  p-value, 1 / (R + 1), can survive Holm's multiplication by m); the p-value is the share of
  resampled differences, centred on the
  observed one, at least as far from zero as it is;
- the **Holm** correction across the whole table (every pair and metric): the p-values sorted,
  the k-th smallest multiplied by (m - k + 1), made monotone and capped at 1; a difference is
  significant when its adjusted p-value is below 0.05.

Case scores are those of ``trace score`` (operators within their instances, the case's overall
the mean of its instances) and of ``score/_protocols.py`` for the protocols.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TraceError
from ..operators import OPERATORS
from ..outcomes import sample_means
from ..scales import answer_scale
from ._protocols import _case_scores, check_protocols
from ._score import Gating, case_scores, instance_scores

__all__ = ["Comparison", "Difference", "compare_runs", "format_comparison", "holm"]

RESAMPLES = 2000  # the least; more when the table is large (see compare_runs)
ALPHA = 0.05


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Difference(_Record):
    a: str
    b: str
    metric: str = Field(description='an operator, "overall", or a protocol ("longbanana", "macro", "savanna")')
    cases: int = Field(description="cases both runs scored on this metric")
    templates: int = Field(description="their distinct templates (the bootstrap's clusters)")
    difference: float | None = Field(description="mean of A - B over those cases")
    ci95: tuple[float, float] | None
    p: float | None = Field(description="two-sided paired bootstrap p-value, clustered by template")
    p_holm: float | None = Field(description="Holm-adjusted across the table")
    significant: bool = Field(description="p_holm below 0.05")


class Comparison(_Record):
    runs: tuple[str, ...]
    metrics: tuple[str, ...]
    resamples: int
    differences: tuple[Difference, ...]


def _case_metrics(run_dir: Path, protocols: Sequence[str], gating: Gating = Gating.WITHIN
                  ) -> tuple[tuple[str, str | None], dict[str, tuple[str, dict[str, float]]]]:
    """A run's (cases hash, scale), and per case: its template and its score on every metric it has."""
    from ..run import stream_run

    stream = stream_run(run_dir)
    out: dict[str, tuple[str, dict[str, float]]] = {}
    for item in stream:
        case = item.case
        each = []  # per sample (trace run --samples): the case scores their mean on each metric
        for outcomes in item.samples:
            metrics = case_scores(instance_scores(case, outcomes, gating))
            if metrics and protocols:
                for name, result in _case_scores(case, outcomes, None, 70.0).items():
                    if name in protocols:
                        metrics[name] = result["overall"]
            each.append(metrics)
        metrics = sample_means(each)
        if not metrics:
            continue
        out[case.id] = (case.template, metrics)
    return (stream.manifest.cases_hash, stream.manifest.scale), out


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (None stays None)."""
    given = [(p, k) for k, p in enumerate(pvalues) if p is not None]
    given.sort()
    m = len(given)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, k) in enumerate(given):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[k] = running
    return adjusted


def _paired(diffs, clusters, rng, resamples: int = RESAMPLES) -> tuple[float, tuple[float, float] | None, float | None]:
    """The observed mean difference, its interval and p-value (numpy arrays of per-case
    differences and templates; a numpy Generator)."""
    import numpy as np

    observed = float(diffs.mean())
    names, index = np.unique(clusters, return_inverse=True)
    if len(names) < 2:
        return observed, None, None
    sums = np.bincount(index, weights=diffs, minlength=len(names))
    sizes = np.bincount(index, minlength=len(names)).astype(float)
    picks = rng.integers(0, len(names), size=(resamples, len(names)))
    means = sums[picks].sum(axis=1) / sizes[picks].sum(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    centred = means - observed
    p = float((np.sum(np.abs(centred) >= abs(observed) - 1e-12) + 1) / (resamples + 1))  # never 0 from finite resamples
    return observed, (round(float(low), 4), round(float(high), 4)), p


def compare_runs(run_dirs: Sequence[Path], *, protocols: Sequence[str] = (), seed: int = 0,
                 gating: Gating | str = Gating.WITHIN) -> Comparison:
    """Paired comparisons of every pair of runs (see the module docstring); ``gating`` as
    ``trace score --gating``. Runs of different benchmarks or scales are refused."""
    if len(run_dirs) < 2:
        raise TraceError("give two runs or more")
    check_protocols(protocols)
    import numpy as np  # imported when comparing: scoring and diagnosing do without it

    protocols = tuple(p for p in dict.fromkeys(protocols) if p != "trace")
    loaded = [_case_metrics(Path(r), protocols, Gating(gating)) for r in run_dirs]
    _check_comparable([identity for identity, _ in loaded])
    names = [str(r) for r in run_dirs]
    metrics = tuple([op.value for op in OPERATORS] + ["overall", *protocols])
    tests = len(loaded) * (len(loaded) - 1) // 2 * len(metrics)
    resamples = max(RESAMPLES, math.ceil(20 * tests / ALPHA))
    rng = np.random.default_rng(seed)
    rows = [_difference((names[i], names[j]), loaded[i][1], loaded[j][1], metric, rng, resamples)
            for i, j in itertools.combinations(range(len(loaded)), 2) for metric in metrics]
    adjusted = holm([r["p"] for r in rows])
    differences = tuple(Difference(**r, p_holm=None if q is None else round(q, 4),
                                   significant=q is not None and q < ALPHA) for r, q in zip(rows, adjusted))
    return Comparison(runs=tuple(names), metrics=metrics, resamples=resamples, differences=differences)


def _check_comparable(identities: list[tuple[str, str | None]]) -> None:
    """Refuse runs (their cases hash and scale) of different benchmarks or scales."""
    if len({h for h, _ in identities}) != 1:
        raise TraceError("the runs are of different benchmarks (their cases.jsonl differ)")
    scales = {answer_scale(scale) for _, scale in identities}
    if len(scales) != 1:
        raise TraceError(f"the runs' judges answered on different scales ({', '.join(sorted(scales))}): their "
                         "values do not compare (score each, or rejudge on one scale)")


def _difference(pair: tuple[str, str], a: dict[str, tuple[str, dict[str, float]]],
                b: dict[str, tuple[str, dict[str, float]]], metric: str, rng, resamples: int) -> dict:
    """The paired difference of runs A and B (``pair``: their names; ``a``, ``b``: their case
    metrics) on ``metric``, over the cases both scored, as :class:`Difference`'s fields but Holm's."""
    import numpy as np

    common = [c for c in a if c in b and metric in a[c][1] and metric in b[c][1]]
    if not common:
        return {"a": pair[0], "b": pair[1], "metric": metric, "cases": 0, "templates": 0,
                "difference": None, "ci95": None, "p": None}
    diffs = np.array([a[c][1][metric] - b[c][1][metric] for c in common])
    clusters = np.array([a[c][0] for c in common])
    diff, ci, p = _paired(diffs, clusters, rng, resamples)
    return {"a": pair[0], "b": pair[1], "metric": metric, "cases": len(common),
            "templates": len(set(clusters.tolist())), "difference": round(diff, 4), "ci95": ci,
            "p": None if p is None else round(p, 4)}


def format_comparison(result: Comparison) -> str:
    lines = [f"paired differences (A - B) over the cases both scored; bootstrap over templates "
             f"({result.resamples} resamples), Holm across {len(result.differences)} tests; * significant at 0.05"]
    by_pair: dict[tuple[str, str], list[Difference]] = defaultdict(list)
    for d in result.differences:
        by_pair[(d.a, d.b)].append(d)
    for (a, b), rows in by_pair.items():
        lines.append(f"A {a}  vs  B {b}")
        for d in rows:
            if d.difference is None:
                lines.append(f"  {d.metric:12s} n/a (no case scored by both)")
                continue
            ci = f"[{d.ci95[0]:+.4f}, {d.ci95[1]:+.4f}]" if d.ci95 else "(one template: no interval)"
            lines.append(f"  {d.metric:12s} {d.difference:+.4f} {ci:24s} p {d.p if d.p is not None else 'n/a'}"
                         f"  Holm {d.p_holm if d.p_holm is not None else 'n/a'}{' *' if d.significant else ''}"
                         f"  ({d.cases} cases, {d.templates} templates)")
    return "\n".join(lines)
