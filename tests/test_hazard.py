"""Exact failure rates in the zoo (``zoo.failure_rates``), hazard shares along an instance's chain
and the accuracy of named sources against them (``diagnose._hazard``).

The rates are checked two ways: on hand-worked cases of a seeded cluttered benchmark (the
numbers written out from taxonomy/zoo.toml), and against the zoo itself: many generations of one
case (``failed_questions`` with different seeds), each instance decided as ``trace score``
decides it, must fail with a frequency within Z binomial standard deviations of its rate.
"""

from __future__ import annotations

import math
from collections import Counter
from types import MappingProxyType

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tracebench.diagnose import (InstanceShares, build_tree, exact_shares, hazard, hazard_shares, instance_chain,
                                 plan_trees, share_accuracy, tree_nodes)
from tracebench.formula import parse
from tracebench.operators import Instance, Operator
from tracebench.outcomes import Outcome
from tracebench.records import Case
from tracebench.sample import ClutterSpec, SampleOptions, read_cases, sample_benchmark
from tracebench.score import instance_results
from tracebench.zoo import failed_questions, failure_rates, parse_profile

Z = 5.0  # a false alarm about once in 1.7 million comparisons; the draws are seeded anyway
GENERATIONS = 200


@pytest.fixture(scope="module")
def cases(shared_folder) -> dict[str, Case]:
    """Three cases at slot levels 2, 4 and 8 (seed 4), each with two distractors."""
    out = shared_folder("test_hazard-clutter", lambda out: sample_benchmark(out, SampleOptions(
        slots=(2, 4, 8), per_slot=3, seed=4, applications=False, clutter=ClutterSpec(low=2, high=2))))
    return {c.id: c for c in read_cases(out)}


def _rates(case: Case, spec: str) -> dict[tuple[str, str], float]:
    return {(str(i.op), i.target): r for i, r in failure_rates(case, parse_profile(spec)).items()}


def test_hand_worked_rates(cases) -> None:
    case = cases["s2-00002"]  # f1 (4 entities in its image) ⊕ g_style1; d1 confuses f1, d2 g_style1
    assert case.formula.startswith("f1(") and "⊕ g_style1(" in case.formula
    strain = _rates(case, "strain")
    # load-global (one global term) 0.3, load-entities 1 - 0.9 ** 3; one branch: no composition load
    assert strain[("anchor", "f1")] == pytest.approx(1 - 0.7 * 0.9 ** 3)
    assert strain[("disentangle", "g_style1")] == pytest.approx(0.08)  # load-subtype: 4.1_style
    assert strain[("apply", "f1⊕g_style1")] == 0.0
    assert strain[("compose", "C0")] == 0.0
    noise = _rates(case, "noise:0.1")  # per question: f1 asks 3, C0 4
    assert noise[("anchor", "f1")] == pytest.approx(1 - 0.9 ** 3)
    assert noise[("compose", "C0")] == pytest.approx(1 - 0.9 ** 4)
    confusion = _rates(case, "load-global,distractor-confusion:0.4")  # one draw per term, independent of the load's
    assert confusion[("anchor", "f1")] == pytest.approx(1 - 0.7 * 0.6)
    assert confusion[("disentangle", "g_style1")] == pytest.approx(0.4)
    partial = _rates(case, "partial:0.2")  # a partly met identity is a fail on a binary scale
    assert partial[("anchor", "f1")] == pytest.approx(0.2)
    assert partial[("apply", "f1⊕g_style1")] == 0.0
    deterministic = _rates(case, "global-interference")
    assert deterministic[("anchor", "f1")] == 1.0 and deterministic[("compose", "C0")] == 0.0
    assert _rates(cases["s2-00001"], "strain")[("compose", "C1")] == pytest.approx(0.18)  # two branches
    assert set(_rates(case, "perfect").values()) == {0.0}


@pytest.mark.parametrize("spec", ["strain,distractor-confusion:0.4,partial:0.2,noise:0.02",
                                  "global-interference,composition-interference:2,leaky-binding,load-subtype"])
def test_rates_match_the_zoo(cases, spec) -> None:
    profile = parse_profile(spec)
    checked = set()
    for case in cases.values():
        rates = failure_rates(case, profile)
        failures = dict.fromkeys(rates, 0)
        for seed in range(GENERATIONS):
            broken = failed_questions(case, profile, seed=seed)
            verdicts = {q.id: Outcome.binary(q.id not in broken) for q in case.checklist}
            for instance, result in instance_results(case, verdicts).items():
                failures[instance] += result.failed
        assert set(failures) == {Instance(q.op, q.target) for q in case.checklist}
        for instance, r in rates.items():
            expected, sd = GENERATIONS * r, math.sqrt(GENERATIONS * r * (1 - r))
            assert abs(failures[instance] - expected) <= Z * sd + 1e-6, (case.id, instance, failures[instance], r)
            checked.add(round(r, 3))
    assert len(checked) > 4  # several distinct rates, not only 0 and 1
    assert any(0.0 < r < 1.0 for r in checked)


def test_rates_name_operators_of_the_checklist(cases) -> None:
    case = cases["s2-00001"]
    assert list(failure_rates(case, parse_profile("strain"))) == [
        Instance(Operator.ANCHOR, "f1"), Instance(Operator.ANCHOR, "f2"), Instance(Operator.COMPOSE, "C1")]


# ------------------------------------------------------------------ hazard shares along a chain

RULES = ["distractor_removal", "global_stripping", "relation_simplification", "composition_flattening",
         "attribute_removal"]
SOURCE_OF = {"distractor_removal": "reference_clutter", "global_stripping": "global_reference",
             "relation_simplification": "relation_attribute", "composition_flattening": "joint_composition",
             "attribute_removal": "relation_attribute"}  # diagnose/rules.toml, written out
rates_st = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def chains(draw) -> tuple[list[float], list[str]]:
    rules = draw(st.lists(st.sampled_from(RULES), max_size=6))
    return draw(st.lists(rates_st, min_size=len(rules) + 1, max_size=len(rules) + 1)), rules


def test_chain_follows_the_first_child_keeping_the_instance() -> None:
    nodes = tree_nodes(build_tree(parse("C(f, f ⊕ g_material ⊕ g_pattern) ⊕ g_style")))

    def chain(op: Operator, target: str) -> list[str]:
        return [n.id for n in instance_chain(nodes, Instance(op, target))]

    assert chain(Operator.ANCHOR, "f1") == ["N0", "N1", "N2a"]
    assert chain(Operator.ANCHOR, "f2") == ["N0", "N1", "N2b", "N3a"]  # the carrier-alone child
    assert chain(Operator.DISENTANGLE, "g_pattern1") == ["N0", "N1", "N2b", "N3c"]
    assert chain(Operator.DISENTANGLE, "g_style1") == ["N0"]  # the first step drops it
    assert chain(Operator.COMPOSE, "C1") == ["N0", "N1", "N2a"]


def test_hand_worked_shares() -> None:
    # rates 0.5, 0.5, 0.2 by global stripping then composition flattening: hazards ln 2, ln 2, ln 1.25
    shares, risen = hazard_shares([0.5, 0.5, 0.2], ["global_stripping", "composition_flattening"])
    h = math.log(2)
    assert shares == pytest.approx({"global_reference": 0.0, "joint_composition": (h - math.log(1.25)) / h,
                                    "persistent_failure": math.log(1.25) / h})
    assert risen == 0.0
    # a rise (0.2 -> 0.5) is clipped and kept aside; the rest renormalised
    shares, risen = hazard_shares([0.2, 0.5, 0.0], ["global_stripping", "attribute_removal"])
    assert shares == {"global_reference": 0.0, "relation_attribute": 1.0, "persistent_failure": 0.0}
    assert risen == pytest.approx(h - math.log(1.25))
    assert hazard_shares([0.0, 0.0], ["global_stripping"]) is None
    assert hazard_shares([1.0], [])[0] == {"persistent_failure": 1.0}  # a rate of 1 is capped, not infinite
    with pytest.raises(ValueError):
        hazard_shares([0.5], ["global_stripping"])


@given(chains())
def test_shares_sum_to_one(chain) -> None:
    rates, rules = chain
    found = hazard_shares(rates, rules)
    if hazard(rates[0]) > 0:
        assert found is not None
    if found is not None:
        assert sum(found[0].values()) == pytest.approx(1.0)
        assert all(0.0 <= v <= 1.0 + 1e-12 for v in found[0].values())
        assert set(found[0]) == {SOURCE_OF[r] for r in rules} | {"persistent_failure"}


@given(st.floats(1e-6, 1.0), st.lists(st.sampled_from(RULES), max_size=6))
def test_constant_rates_are_persistent(rate, rules) -> None:
    shares, risen = hazard_shares([rate] * (len(rules) + 1), rules)
    assert shares["persistent_failure"] == pytest.approx(1.0) and risen == 0.0


@given(chains(), st.data())
def test_one_lowering_edge_takes_it_all(chain, data) -> None:
    """A chain whose rate is constant but for one edge that lowers it to 0: that edge's source gets
    every share."""
    _, rules = chain
    assume(rules)
    k = data.draw(st.integers(0, len(rules) - 1))
    rate = data.draw(st.floats(1e-6, 1.0))
    shares, _ = hazard_shares([rate] * (k + 1) + [0.0] * (len(rules) - k), rules)
    assert shares[SOURCE_OF[rules[k]]] == pytest.approx(1.0)


def test_exact_hazards_never_rise(diagnosis_bench) -> None:
    """Issue 36's measurement, kept: in the zoo, no chain step raises an instance's exact hazard
    under strain; and each dominant source is a source the chain can give."""
    profile = parse_profile("strain")
    cases = list(read_cases(diagnosis_bench))
    plan = plan_trees(cases)
    checked = Counter()
    for tree in plan.trees:
        found = exact_shares(tree.nodes, plan.node_cases(tree), profile)
        for shares in found.values():
            assert shares.risen == 0.0
            assert all(a >= b for a, b in zip(shares.rates, shares.rates[1:])), shares
            checked[shares.dominant] += 1
    assert sum(checked.values()) > 300
    assert {"joint_composition", "global_reference", "persistent_failure"} <= set(checked)


def _shares(**values: float) -> InstanceShares:
    return InstanceShares(("N0",), (), (0.5,), MappingProxyType(values))


def test_share_accuracy_hand_worked() -> None:
    named = [("joint_composition", _shares(joint_composition=0.6, global_reference=0.3, persistent_failure=0.1)),
             ("global_reference", _shares(joint_composition=0.45, global_reference=0.35, persistent_failure=0.2)),
             ("global_reference", _shares(joint_composition=0.7, global_reference=0.2, persistent_failure=0.1)),
             ("undetermined", _shares(persistent_failure=1.0)),
             (None, _shares(global_reference=0.5, persistent_failure=0.5))]
    score = share_accuracy(named)
    assert (score.instances, score.tolerant) == (5, 2)  # within 0.2 of the largest: the first two
    assert (score.clear, score.clear_correct) == (3, 1)  # leads of 0.3, 0.1, 0.5, 1.0, 0
    assert score.tolerant_accuracy == 0.4 and score.dominant_accuracy == pytest.approx(1 / 3)
    # the tie of the last goes to the first in diagnose/sources.toml: persistent failure
    assert dict(score.exact_mix) == pytest.approx({"joint_composition": 0.6, "persistent_failure": 0.4})
    assert dict(score.named_mix) == pytest.approx({"joint_composition": 0.2, "global_reference": 0.4,
                                                   "undetermined": 0.4})
