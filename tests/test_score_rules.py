"""Scoring on hand-made verdicts over a few bound cases: every field of the Scores record, fast
enough for mutation testing (docs/benchmarks.md)."""

from __future__ import annotations

import random
from pathlib import Path
from statistics import fmean

import pytest

from tracebench.errors import TraceError
from tracebench.formula import parse, slot_count
from tracebench.operators import OPERATORS, Operator
from tracebench.outcomes import ABSTAINED, FAILED, PASSED, Outcome
from tracebench.records import RunManifest
from tracebench.sample import bind
from tracebench.sample._sample import Plan, _case
from tracebench.score import Gating, effective_outcomes, format_scores, instance_results, instance_scores, score_cases
from tracebench.score._score import _ci
from tracebench.zoo._generate import default_index

MANIFEST = RunManifest(tool="t", cases_dir="b", cases_hash="h", generator="gen", judges=("j1", "j2"), judge_batch="case",
                       hashes={}, cases=0, verdicts=0, calls={}, cache_hits=0, abstentions=0, tokens=0)


@pytest.fixture(scope="module")
def cases():
    index = default_index()
    made = []
    for k, (formula, application) in enumerate([("f ⊕ g", None), ("f ⊕ g", None), ("C(f, f) ⊕ g_style", None),
                                                ("C(C(f, f) ⊕ g_rel, f)", None), ("T_e ⊕ g_attach", "try_on")]):
        template = parse(formula)
        bound = bind(template, index, random.Random(k))
        made.append(_case(Plan(f"c{k}", slot_count(template), template, application), bound, index, random.Random(k)))
    return made


def _passing(case):
    return {q.id: PASSED for q in case.checklist}


def test_an_instance_is_the_mean_of_its_answered_values(cases):
    case = cases[0]
    g = next(t.symbol for t in case.terms if t.op == "g")
    verdicts = {**_passing(case), f"{g}:fidelity": Outcome.of("pass", 0.5), f"{g}:isolation": ABSTAINED,
                f"{g}:carrier": FAILED}
    scores = instance_scores(case, verdicts)
    assert scores[(Operator.DISENTANGLE, g)] == pytest.approx(fmean([1.0, 0.5, 0.0]))  # the abstention left out
    results = instance_results(case, verdicts)
    result = results[(Operator.DISENTANGLE, g)]
    assert result.failed and result.value == pytest.approx(0.5)
    assert results[(Operator.ANCHOR, "f1")] == PASSED
    everything_abstains = {q.id: ABSTAINED for q in case.checklist}
    assert instance_scores(case, everything_abstains) == {}
    assert set(instance_results(case, everything_abstains).values()) == {ABSTAINED}
    missing = effective_outcomes(case, {})  # no verdict at all: abstentions, never fails
    assert set(missing.values()) == {ABSTAINED}


def test_a_failed_parent_gives_its_children_zero_within_and_across_as_told(cases):
    case = cases[0]
    g = next(t.symbol for t in case.terms if t.op == "g")
    verdicts = {**_passing(case), f"{g}:presence": FAILED}
    within = instance_scores(case, verdicts)
    cross = instance_scores(case, verdicts, Gating.CROSS)
    assert within[(Operator.DISENTANGLE, g)] == 0.0 == cross[(Operator.DISENTANGLE, g)]
    apply = (Operator.APPLY, f"f1⊕{g}")
    assert within[apply] == 1.0 and cross[apply] == 0.25  # integrity needs f1 only; the rest needs g's presence


def _verdicts(cases):
    """Every question passes but: c0's f1 identity, c2's composition spatial, c3's g_rel presence,
    and c1's anchor identity abstains."""
    out = {}
    for case in cases:
        v = _passing(case)
        if case.id == "c0":
            v["f1:identity"] = FAILED
        if case.id == "c1":
            v["f1:identity"] = ABSTAINED
        if case.id == "c2":
            v["C1:spatial"] = FAILED
        if case.id == "c3":
            v["g_rel1:presence"] = FAILED
        out[case.id] = v
    return out


def _by_op(case, verdicts, gating=Gating.WITHIN):
    """A case's scores per operator and overall, rounded to four places as a case's scores are."""
    instances = instance_scores(case, verdicts, gating)
    return {op: round(fmean(v for (o, _), v in instances.items() if o == op), 4)
            if any(o == op for o, _ in instances) else None
            for op in OPERATORS} | {"overall": round(fmean(instances.values()), 4)}


@pytest.mark.parametrize("gating", list(Gating))
def test_every_field_of_the_scores(cases, gating):
    verdicts = _verdicts(cases)
    scores = score_cases(MANIFEST, ((c, verdicts[c.id]) for c in cases), root=Path("run"), gating=gating)
    rows = {c.id: _by_op(c, verdicts[c.id], gating) for c in cases}
    general = [c for c in cases if c.application is None]
    assert scores.scope == "general" and scores.gating is gating and scores.cases == 5
    for op in OPERATORS:
        slots: dict[int, list[float]] = {}
        for c in general:
            if rows[c.id][op] is not None:
                slots.setdefault(c.slot, []).append(rows[c.id][op])
        assert scores.operators[op] == round(fmean(fmean(v) for v in slots.values()), 4), op
        weighted = [rows[c.id][op] for c in cases if rows[c.id][op] is not None]
        assert scores.case_weighted.operators[op] == round(fmean(weighted), 4), op
        low, high = scores.ci95[op]
        assert low <= scores.operators[op] <= high
    assert scores.avg == round(fmean(scores.operators.values()), 4)
    assert scores.case_weighted.overall == round(fmean(r["overall"] for r in rows.values()), 4)
    assert set(scores.by_slot) == {str(c.slot) for c in general}  # the application's slot 1 is not there
    slot2 = scores.by_slot["2"]
    assert slot2.cases == 2 and slot2.anchor == round(fmean([rows["c0"]["anchor"], rows["c1"]["anchor"]]), 4)
    assert slot2.compose == 1.0 and slot2.overall == round(fmean([rows["c0"]["overall"], rows["c1"]["overall"]]), 4)
    assert scores.by_slot["4"].anchor == 1.0 and scores.by_slot["4"].cases == 1
    assert list(scores.by_application) == ["try_on"] and scores.by_application["try_on"].cases == 1
    assert scores.by_application["try_on"].anchor is None
    subtype = next(t.subtype for t in cases[3].terms if t.role == "relation")
    assert scores.by_subtype[subtype].instances == 1 and scores.by_subtype[subtype].disentangle == 0.0
    assert sum(s.instances for s in scores.by_subtype.values()) == sum(
        1 for c in cases for t in c.terms if t.op == "g" and t.subtype)
    counts = {}
    for c in cases:
        for t in c.terms:
            if t.role == "anchor":
                counts[str(t.source_entities)] = counts.get(str(t.source_entities), 0) + 1
    assert {k: v.instances for k, v in scores.by_entity_count.items()} == counts
    questions = sum(len(c.checklist) for c in cases)
    assert (scores.abstentions.count, scores.abstentions.share) == (1, round(1 / questions, 4))
    assert (scores.run.generator, scores.run.judges) == ("gen", ("j1", "j2"))


def test_a_run_of_applications_only_is_averaged_over_all_its_cases(cases):
    only = [c for c in cases if c.application is not None]
    scores = score_cases(MANIFEST, ((c, _passing(c)) for c in only), root=Path("run"))
    assert scores.scope == "all" and scores.by_slot and scores.operators[Operator.DISENTANGLE] == 1.0
    assert scores.operators[Operator.ANCHOR] is None and scores.ci95["anchor"] is None
    assert scores.avg == 1.0 and scores.ci95["avg"] == (1.0, 1.0)


def test_no_verdict_is_an_error_naming_the_run(cases):
    with pytest.raises(TraceError, match=r"^run: no verdicts to score$"):
        score_cases(MANIFEST, iter(()), root=Path("run"))


def test_intervals_of_degenerate_samples():
    assert _ci([], 0) is None
    assert _ci([0.25], 0) == (0.25, 0.25)
    assert _ci([0.5, 0.5, 0.5], 0) == (0.5, 0.5)
    low, high = _ci([0.0, 1.0] * 20, 0)
    assert 0.0 < low < 0.5 < high < 1.0


def test_the_table_shows_each_operator_avg_and_the_case_weighted_scores(cases):
    verdicts = _verdicts(cases)
    scores = score_cases(MANIFEST, ((c, verdicts[c.id]) for c in cases), root=Path("run"))
    text = format_scores(scores)
    lines = text.splitlines()
    assert lines[0] == "mean of per-slot means over the general benchmark; gating within"
    for op in OPERATORS:
        row = next(line for line in lines if line.startswith(op.value))
        assert f"{scores.operators[op]:7.4f}" in row and row.endswith(f"{scores.case_weighted.operators[op]:.4f}")
    avg = next(line for line in lines if line.startswith("avg"))
    assert f"{scores.avg:7.4f}" in avg and avg.endswith(f"{scores.case_weighted.overall:.4f} (overall)")
    assert lines[-1] == f"cases 5, abstentions 1 ({scores.abstentions.share:.1%})"
    only = score_cases(MANIFEST, ((c, _passing(c)) for c in cases if c.application), root=Path("run"))
    assert "all cases (no general case)" in format_scores(only).splitlines()[0]
    assert "    n/a" in next(line for line in format_scores(only).splitlines() if line.startswith("anchor"))


def _scipy_interval(values, rng):
    stats = pytest.importorskip("scipy.stats")
    import numpy as np

    ci = stats.bootstrap((np.asarray(values),), np.mean, n_resamples=1000, confidence_level=0.95,
                         method="percentile", random_state=rng).confidence_interval
    return round(float(ci.low), 4), round(float(ci.high), 4)


def _stratified(strata, seed: int, j: int):
    """The slot-stratified percentile interval computed here with numpy's own percentile (type 7)."""
    import numpy as np

    total = np.zeros(1000)
    for k, values in enumerate(strata):
        data = np.asarray(values)
        total += data[np.random.default_rng([seed, j, k]).integers(0, len(data), (1000, len(data)))].mean(axis=-1)
    low, high = np.percentile(total / len(strata), [2.5, 97.5])
    return round(float(low), 4), round(float(high), 4)


def _slot_strata(cases, rows, op) -> list[list[float]]:
    """The general cases' scores of one operator, a list per slot level in slot order."""
    slots: dict[int, list[float]] = {}
    for c in cases:
        if c.application is None and rows[c.id][op] is not None:
            slots.setdefault(c.slot, []).append(rows[c.id][op])
    return [slots[s] for s in sorted(slots)]


@pytest.mark.parametrize("seed", [0, 7])
def test_the_intervals_are_the_stated_bootstraps(cases, seed):
    """Case-weighted: SciPy's percentile bootstrap over cases; slot-averaged: each slot resampled
    on its own (seeded by seed, operator and stratum), the percentiles of the mean of slot means."""
    import numpy as np

    verdicts = _verdicts(cases)
    kwargs = {} if seed == 0 else {"seed": seed}  # seed 0 is the default
    scores = score_cases(MANIFEST, ((c, verdicts[c.id]) for c in cases), root=Path("run"), **kwargs)
    rows = {c.id: _by_op(c, verdicts[c.id]) for c in cases}
    anchor = [rows[c.id]["anchor"] for c in cases if rows[c.id]["anchor"] is not None]
    assert scores.case_weighted.ci95["anchor"] == _scipy_interval(anchor, np.random.default_rng(seed))
    overall = [r["overall"] for r in rows.values()]
    assert scores.case_weighted.ci95["overall"] == _scipy_interval(overall, np.random.default_rng(seed))
    for j, op in enumerate(OPERATORS):
        assert scores.ci95[op] == _stratified(_slot_strata(cases, rows, op), seed, j), op


def test_the_percentile_bootstrap_is_scipys_on_skewed_samples():
    import numpy as np
    from tracebench.score._score import _bootstrap_interval

    stats = pytest.importorskip("scipy.stats")
    for k, values in enumerate(([0.0] * 9 + [1.0], [0.1, 0.2, 0.9, 0.95, 1.0, 0.3], list(np.linspace(0, 1, 23)))):
        expected = stats.bootstrap((np.asarray(values),), np.mean, n_resamples=1000, confidence_level=0.95,
                                   method="percentile", random_state=np.random.default_rng(k)).confidence_interval
        assert _bootstrap_interval(list(values), k) == (float(expected.low), float(expected.high))


def test_the_entity_count_breakdown_averages_anchor_instances(cases):
    verdicts = _verdicts(cases)
    scores = score_cases(MANIFEST, ((c, verdicts[c.id]) for c in cases), root=Path("run"))
    by_count: dict[str, list[float]] = {}
    for c in cases:
        instances = instance_scores(c, verdicts[c.id])
        for t in c.terms:
            if t.role == "anchor" and (Operator.ANCHOR, t.symbol) in instances:
                by_count.setdefault(str(t.source_entities), []).append(instances[(Operator.ANCHOR, t.symbol)])
    assert {k: v.anchor for k, v in scores.by_entity_count.items()} == {k: round(fmean(v), 4) for k, v in by_count.items()}


def test_cases_without_verdicts_score_nothing_and_abstain_nothing(cases):
    scores = score_cases(MANIFEST, ((c, {}) for c in cases[:2]), root=Path("run"))
    assert scores.cases == 2 and (scores.abstentions.count, scores.abstentions.share) == (0, 0.0)
    assert set(scores.operators.values()) == {None} and scores.avg is None and scores.ci95["avg"] is None
    assert scores.case_weighted.overall is None and scores.case_weighted.ci95["overall"] is None
    assert format_scores(scores).splitlines()[1].startswith("operator")


def test_a_run_folder_scores_as_its_cases_do(tmp_path):
    from tracebench.providers import ModelSettings
    from tracebench.run import load_run, RunOptions, run_benchmark
    from tracebench.sample import SampleOptions, read_cases, sample_benchmark
    from tracebench.score import score_folder, score_run

    sample_benchmark(tmp_path / "b", SampleOptions(slots=(1, 2), per_slot=3, seed=4, applications=False))
    run_benchmark(tmp_path / "b", tmp_path / "r", RunOptions(generator="synthetic:noise:0.3", judges=["oracle"],
                  settings=ModelSettings(seed=0), progress=False))
    from tracebench.run import stream_run

    items = [(item.case, item.outcomes) for item in stream_run(tmp_path / "r")]
    assert len(items) == len(list(read_cases(tmp_path / "b")))
    for gating in Gating:
        expected = score_cases(MANIFEST.model_copy(update={"generator": "synthetic:noise:0.3", "judges": ("oracle",)}),
                               iter(items), root=tmp_path / "r", seed=5, gating=gating)
        assert score_run(tmp_path / "r", seed=5, gating=gating) == expected
        assert score_run(tmp_path / "r", cases_dir=tmp_path / "b", seed=5, gating=gating) == expected
        assert score_folder(load_run(tmp_path / "r"), seed=5, gating=gating) == expected
    assert score_run(tmp_path / "r") != score_run(tmp_path / "r", seed=5)  # the seed reaches the intervals
    default = score_cases(MANIFEST.model_copy(update={"generator": "synthetic:noise:0.3", "judges": ("oracle",)}),
                          iter(items), root=tmp_path / "r")  # seed 0 and gating within, everywhere by default
    assert score_run(tmp_path / "r") == default == score_folder(load_run(tmp_path / "r"))


def test_two_values_are_bootstrapped_and_bounds_have_four_places():
    """From two values on, the interval is a bootstrap: the resampled means of two values are one
    of them or their mean; bounds and single values are rounded to four places."""
    assert _ci([0.123456], 0) == (0.1235, 0.1235)
    low, high = _ci([0.123456, 0.654321], 0)
    assert low in (0.1235, 0.3889) and high in (0.3889, 0.6543) and low < high


def test_the_table_row_by_row(cases):
    verdicts = _verdicts(cases)
    scores = score_cases(MANIFEST, ((c, verdicts[c.id]) for c in cases), root=Path("run"))
    lines = format_scores(scores).splitlines()
    assert lines[1] == f"{'operator':12s} {'score':>7s}  {'95% CI':18s}  case-weighted"
    for op, line in zip(OPERATORS, lines[2:6]):
        low, high = scores.ci95[op]
        assert line == (f"{op.value:12s} {scores.operators[op]:7.4f}  {f'[{low:.4f}, {high:.4f}]':18s}  "
                        f"{scores.case_weighted.operators[op]:.4f}")
    low, high = scores.ci95["avg"]
    assert lines[6] == (f"{'avg':12s} {scores.avg:7.4f}  {f'[{low:.4f}, {high:.4f}]':18s}  "
                        f"{scores.case_weighted.overall:.4f} (overall)")
    only = score_cases(MANIFEST, ((c, _passing(c)) for c in cases if c.application), root=Path("run"))
    first = format_scores(only).splitlines()
    assert first[0] == "mean of per-slot means over the all cases (no general case); gating within"
    missing = [line for line in first[2:6] if "n/a" in line]
    assert missing and all(line.startswith(tuple(f"{op.value:12s}     n/a  {'':18s}  " for op in OPERATORS))
                           for line in missing)


def test_the_intervals_on_strata_that_vary(cases):
    """Forty copies of the cases with seeded random verdicts, so every slot varies: the slot-averaged
    interval is the stratified bootstrap at 95% (not its extremes), the case-weighted SciPy's;
    and instance results follow the gating asked for."""
    import numpy as np

    rng = random.Random(11)
    many, verdicts = [], {}
    for k in range(40):
        for case in cases:
            copy = case.model_copy(update={"id": f"{case.id}-{k}"})
            many.append(copy)
            verdicts[copy.id] = {q.id: PASSED if rng.random() < 0.7 else FAILED for q in case.checklist}
    scores = score_cases(MANIFEST, ((c, verdicts[c.id]) for c in many), root=Path("run"))
    rows = {c.id: _by_op(c, verdicts[c.id]) for c in many}
    for j, op in enumerate(OPERATORS):
        strata = _slot_strata(many, rows, op)
        assert all(len(set(s)) > 1 for s in strata)
        low, high = scores.ci95[op]
        assert (low, high) == _stratified(strata, 0, j), op
        means = [fmean(s) for s in strata]
        assert low < fmean(means) < high
    overall = [r["overall"] for r in rows.values()]
    assert scores.case_weighted.ci95["overall"] == _scipy_interval(overall, np.random.default_rng(0))
    case = many[0]
    g = next(t.symbol for t in case.terms if t.op == "g")
    failing = {**_passing(case), f"{g}:presence": FAILED}
    apply = (Operator.APPLY, f"f1⊕{g}")  # g's presence gates its binding only across instances
    assert instance_results(case, failing, Gating.CROSS)[apply] == Outcome.of("fail", 0.25)
    assert instance_results(case, failing, Gating.WITHIN)[apply] == PASSED


def test_an_instance_that_abstains_leaves_the_others_decided(cases):
    case = cases[2]  # C(f, f) ⊕ g_style: two anchors, a global term, a composition
    verdicts = {**_passing(case), "f1:existence": ABSTAINED, "f1:identity": ABSTAINED, "f2:identity": FAILED}
    results = instance_results(case, verdicts)
    assert results[(Operator.ANCHOR, "f1")] == ABSTAINED and results[(Operator.ANCHOR, "f2")].failed
    assert len(results) == len({(q.op, q.target) for q in case.checklist})
    assert [o for i, o in results.items() if i[0] is not Operator.ANCHOR] == [PASSED] * (len(results) - 2)
