"""Scoring rules the paper fixes (TRACE-Bench, arXiv 2608.16765): dependencies within an operator
instance by default, the benchmark as the mean of per-slot means, Avg as the mean of the four
columns; and the options beside them (cross-instance gating, case-weighted scores)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import fmean

import numpy as np
import pytest

from tracebench.operators import OPERATORS, Operator
from tracebench.outcomes import FAILED, PASSED
from tracebench.run import stream_run
from tracebench.sample import read_cases
from tracebench.score import Gating, effective_outcomes, instance_scores, score_run


@pytest.fixture(scope="module")
def bench(run_bench) -> Path:
    return run_bench  # tests/conftest.py: shared with tests/test_run.py


@pytest.fixture(scope="module")
def cases(bench):
    return list(read_cases(bench))


def _all_pass(case):
    return {q.id: PASSED for q in case.checklist}


def test_a_failed_parent_of_another_instance_fails_a_question_only_under_cross_gating(cases):
    found = 0
    for case in cases:
        by_id = {q.id: q for q in case.checklist}
        for q in case.checklist:
            for parent in q.depends_on:
                verdicts = {**_all_pass(case), parent: FAILED}
                within = effective_outcomes(case, verdicts)[q.id]
                cross = effective_outcomes(case, verdicts, Gating.CROSS)[q.id]
                assert cross.failed, (case.id, q.id, parent)
                same_instance = (by_id[parent].op, by_id[parent].target) == (q.op, q.target)
                assert within.failed is same_instance, (case.id, q.id, parent)
                found += not same_instance
    assert found > 50  # apply after disentangle, compose after anchor: the cross links are there


def test_every_parent_of_a_question_with_several_gates_it(cases):
    """A composition's coexistence depends on the existence of each of its anchored members:
    any one of them failing fails it (under cross gating), not only the first."""
    several = [(case, q) for case in cases for q in case.checklist if len(q.depends_on) >= 3]
    assert several
    for case, q in several:
        for parent in q.depends_on:
            verdicts = {**_all_pass(case), parent: FAILED}
            assert effective_outcomes(case, verdicts, Gating.CROSS)[q.id].failed, (case.id, q.id, parent)
        assert effective_outcomes(case, _all_pass(case), Gating.CROSS)[q.id].passed


def test_the_benchmark_score_is_the_mean_of_per_slot_means(bench, shared_runs):
    run = shared_runs(bench, "synthetic:noise:0.2")
    per_slot: dict[Operator, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    weighted: dict[Operator, list[float]] = defaultdict(list)
    applications = 0
    for item in stream_run(run):
        instances = instance_scores(item.case, item.outcomes)
        for op in OPERATORS:
            values = [v for (o, _), v in instances.items() if o == op]
            if values:
                weighted[op].append(fmean(values))
                if item.case.application is None:
                    per_slot[op][item.case.slot].append(fmean(values))
        applications += item.case.application is not None
    assert applications  # the benchmark has applications, left out of the headline
    scores = score_run(run)
    assert scores.scope == "general"
    for op in OPERATORS:
        expected = fmean(fmean(v) for v in per_slot[op].values())
        assert scores.operators[op] == round(expected, 4)
        assert scores.case_weighted.operators[op] == round(fmean(weighted[op]), 4)
        low, high = scores.ci95[op]
        assert low <= scores.operators[op] <= high and low < high
    assert scores.avg == round(fmean(scores.operators.values()), 4)
    assert scores.case_weighted.operators != scores.operators  # the two definitions differ here
    low, high = scores.ci95["avg"]
    assert low <= scores.avg <= high


def test_cross_gating_lowers_apply_through_disentangle(bench, shared_runs):
    run = shared_runs(bench, "synthetic:weak-subtype:1.1_pattern_texture")
    within, cross = score_run(run), score_run(run, gating=Gating.CROSS)
    assert within.gating is Gating.WITHIN and cross.gating is Gating.CROSS
    assert within.operators[Operator.APPLY] == 1.0  # the binding itself never fails in this profile
    assert cross.operators[Operator.APPLY] < 1.0  # it inherits the failed presence of the g term
    assert cross.operators[Operator.DISENTANGLE] == within.operators[Operator.DISENTANGLE]


def test_the_stratified_interval_of_one_stratum_is_scipys():
    """With one slot level, the stratified bootstrap is the plain percentile bootstrap with the
    stratum's generator: equal to scipy.stats.bootstrap's interval at the 95% level."""
    stats = pytest.importorskip("scipy.stats")
    from tracebench.score._score import _percentiles

    values = np.random.default_rng(3).random(37).round(2)
    seed, op, stratum = 5, 1, 0
    rng = np.random.default_rng([seed, op, stratum])
    draws = rng.integers(0, len(values), (1000, len(values)))
    ours = _percentiles(np.mean(values[draws], axis=-1), 1000, 0.95)
    expected = stats.bootstrap((values,), np.mean, n_resamples=1000, confidence_level=0.95, method="percentile",
                               random_state=np.random.default_rng([seed, op, stratum])).confidence_interval
    assert ours == (float(expected.low), float(expected.high))
    wider = _percentiles(np.mean(values[draws], axis=-1), 1000, 0.99)
    assert wider[0] < ours[0] and ours[1] < wider[1]
