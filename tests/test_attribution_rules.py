"""The attribution's rules and the summary's arithmetic, on hand-made results: fast, exact, and
each aimed at a change that once went unnoticed (mutation testing, docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from tracebench.diagnose import attribute, build_tree, summarize_sources, tree_nodes
from tracebench.diagnose._attribute import Finding, SourceTally, localization, mode_of, pending
from tracebench.formula import parse
from tracebench.operators import Instance, Operator
from tracebench.outcomes import ABSTAINED, FAILED, PASSED
from tracebench.records import Attribution

SLOT4 = "C(f1, f2, f3) + g_style"  # N0 -> N1 (style stripped) -> N2a, N2b, N2c (one anchor each)


def _nodes(formula: str = SLOT4):
    return tree_nodes(build_tree(parse(formula)))


def _all(nodes, outcome):
    return {n.id: {i: outcome for i in n.targets} for n in nodes}


def _finding(nodes, results, target: str, op: str = "anchor") -> Finding:
    return next(f for f in attribute(nodes, results) if (f.op, f.target) == (op, target))


def test_a_finding_records_every_field_it_holds():
    finding = Finding("anchor", "f1", FAILED, "joint_composition", "N2a", "composition_flattening", 2,
                      ("N1",), path_depth=4, unstable=True)
    record = finding.record(("composition-interference:2",), ("joint_composition",))
    assert record == Attribution(op="anchor", target="f1", root="fail", source="joint_composition", node="N2a",
                                 rule="composition_flattening", depth=2, relative_depth=0.5, unstable=True,
                                 causes=("composition-interference:2",), expected=("joint_composition",),
                                 unknown=("N1",))
    assert Finding("anchor", "f1", FAILED, "persistent_failure", None, None, None).record().relative_depth is None
    assert Finding("anchor", "f1", PASSED, "stable_success", None, None, 0, path_depth=0).relative_depth == 0.0


def test_a_first_pass_names_its_node_rule_and_depth():
    nodes = _nodes()
    results = _all(nodes, FAILED)
    results["N1"][Instance(Operator.ANCHOR, "f1")] = PASSED
    found = _finding(nodes, results, "f1")
    assert (found.source, found.node, found.rule, found.depth, found.path_depth, found.unstable) == (
        "global_reference", "N1", "global_stripping", 1, 2, True)  # passes at N1, fails again at N2a
    assert found.relative_depth == 0.5


def test_a_root_whose_answer_is_unknown_names_itself_and_an_unknown_flag():
    nodes = _nodes()
    results = _all(nodes, FAILED)
    results["N0"][Instance(Operator.ANCHOR, "f2")] = ABSTAINED
    found = _finding(nodes, results, "f2")
    assert (found.source, found.unknown, found.unstable, found.depth) == ("undetermined", ("N0",), None, None)
    assert _finding(nodes, results, "f3").source == "persistent_failure"  # the next instance is still seen


def test_an_unknown_below_a_decided_first_pass_leaves_the_source_and_clouds_the_flag():
    nodes = _nodes()
    results = _all(nodes, FAILED)
    f1 = Instance(Operator.ANCHOR, "f1")
    results["N1"][f1] = PASSED
    results["N2a"][f1] = ABSTAINED
    found = _finding(nodes, results, "f1")
    assert (found.source, found.node, found.unknown, found.unstable) == ("global_reference", "N1", (), None)
    results["N2a"][f1] = PASSED
    assert _finding(nodes, results, "f1").unstable is False


def test_an_unknown_above_a_fail_of_a_passing_root_clouds_only_the_flag():
    nodes = _nodes()
    results = _all(nodes, PASSED)
    f3 = Instance(Operator.ANCHOR, "f3")
    results["N1"][f3] = ABSTAINED
    results["N2c"][f3] = FAILED
    found = _finding(nodes, results, "f3")
    assert (found.source, found.unstable, found.depth) == ("stable_success", True, 0)  # N2c fails below the root
    results["N2c"][f3] = PASSED
    assert _finding(nodes, results, "f3").unstable is None  # N1 failing would flip


def test_an_unknown_at_a_smaller_depth_than_the_first_pass_undetermines_it():
    nodes = _nodes()
    results = _all(nodes, FAILED)
    f2 = Instance(Operator.ANCHOR, "f2")
    results["N2b"][f2] = PASSED
    results["N1"][f2] = ABSTAINED
    found = _finding(nodes, results, "f2")
    assert (found.source, found.unknown, found.node) == ("undetermined", ("N1",), None)


def test_an_unknown_at_the_first_pass_depth_undetermines_only_when_its_source_differs():
    nodes = _nodes("C(f1 ⊕ g_pattern1, f2)")  # N0 -> N1a (f1 ⊕ g, T_e2), N1b (T_e1, f2); N1a -> N2 (f1)
    results = _all(nodes, FAILED)
    c1 = Instance(Operator.COMPOSE, "C1")
    results["N1b"][c1] = PASSED
    results["N1a"][c1] = ABSTAINED  # the same depth, the same rule: whichever passes, joint composition
    found = _finding(nodes, results, "C1", "compose")
    assert (found.source, found.unknown) == ("joint_composition", ())
    nodes = _nodes("f1 ⊕ g_pattern1 ⊕ g_material1")  # N1a f1, N1b f1 ⊕ g_pattern1, N1c f1 ⊕ g_material1
    results = _all(nodes, FAILED)
    f1 = Instance(Operator.ANCHOR, "f1")
    results["N1b"][f1] = PASSED
    results["N1a"][f1] = ABSTAINED  # the same rule again: decided
    assert _finding(nodes, results, "f1").source == "relation_attribute"


def test_pending_keeps_the_unexplained_failures_a_node_still_holds():
    nodes = {n.id: n for n in _nodes()}
    f1, f2, c1 = (Instance(Operator.ANCHOR, "f1"), Instance(Operator.ANCHOR, "f2"), Instance(Operator.COMPOSE, "C1"))
    open_ = frozenset({f1, f2, c1})
    node = nodes["N2a"]  # keeps f1 and C1, not f2
    assert pending(node, open_, {f1: FAILED, c1: PASSED}) == frozenset({f1})
    assert pending(node, open_, {f1: ABSTAINED}) == frozenset({f1, c1})  # unknown: still pending
    assert pending(node, frozenset({f2}), {f2: FAILED}) == frozenset()


def test_modes_and_the_sources_their_causes_should_be_localized_to():
    assert mode_of("composition-interference:2") == "composition-interference" and mode_of("duplicate") == "duplicate"
    finding = Finding("anchor", "f1", FAILED, "global_reference", "N1", "global_stripping", 1)
    assert localization(finding, ("global-interference",)) == ("global_reference",)
    assert localization(finding, ("global-interference", "composition-interference:2")) == (
        "global_reference", "joint_composition")
    assert localization(finding, ("noise:0.1", "duplicate")) == ()
    compose = Finding("compose", "C1", FAILED, "relation_attribute", "N1", "relation_simplification", 1)
    assert localization(compose, ("relation-blind",)) == ("relation_attribute",)


def _a(op, source, relative=None, causes=(), expected=(), root="fail", unstable=False):
    depth = None if relative is None else 1
    return Attribution(op=op, target="x", root=root, source=source, node=None, rule=None, depth=depth,
                       relative_depth=relative, causes=causes, expected=expected, unstable=unstable)


def test_the_summary_counts_shares_curves_and_accuracy_exactly():
    records = [
        _a("anchor", "stable_success", 0.0, root="pass"),
        _a("anchor", "global_reference", 0.5, ("global-interference",), ("global_reference",), unstable=True),
        _a("anchor", "joint_composition", 1.0, ("global-interference",), ("global_reference",)),
        _a("anchor", "persistent_failure", None, ("composition-interference:2", "global-interference"),
           ("joint_composition", "global_reference")),
        _a("compose", "undetermined", root="abstain", unstable=None),
        _a("compose", "relation_attribute", 0.3, ("relation-blind",), ("relation_attribute",)),
    ]
    summary = summarize_sources(records)
    assert summary["instances"] == 6 and summary["undetermined"] == 1 and summary["abstained"] == 1
    assert summary["counts"] == {"stable_success": 1, "persistent_failure": 1, "global_reference": 1,
                                 "joint_composition": 1, "relation_attribute": 1, "reference_clutter": 0,
                                 "undetermined": 1}
    assert summary["sources"]["global_reference"] == round(1 / 6, 4)
    assert summary["by_operator"]["anchor"] == {"stable_success": 0.25, "persistent_failure": 0.25,
                                                "global_reference": 0.25, "joint_composition": 0.25,
                                                "relation_attribute": 0.0, "reference_clutter": 0.0,
                                                "undetermined": 0.0, "instances": 4}
    assert summary["by_operator"]["compose"]["undetermined"] == 0.5
    anchor = summary["cumulative_pass"]["anchor"]  # over the 4 decided anchor instances
    assert (anchor["0.0"], anchor["0.4"], anchor["0.5"], anchor["0.9"], anchor["1.0"]) == (0.25, 0.25, 0.5, 0.5, 0.75)
    assert summary["cumulative_pass"]["compose"]["0.3"] == 1.0 and summary["cumulative_pass"]["compose"]["0.2"] == 0.0
    assert summary["unstable"] == {"instances": 1, "share": round(1 / 6, 4), "undecided": 1,
                                   "by_operator": {"anchor": 0.25, "compose": 0.0}}
    loc = summary["localization"]
    assert (loc["instances"], loc["correct"], loc["accuracy"]) == (4, 2, 0.5)
    assert loc["by_cause"]["global-interference"] == {"instances": 2, "correct": 1, "accuracy": 0.5,
                                                      "expected": ["global_reference"]}
    assert loc["by_cause"]["composition-interference+global-interference"]["correct"] == 0
    assert summarize_sources([])["localization"] is None and summarize_sources([])["instances"] == 0


def test_a_tally_given_records_one_at_a_time_is_the_summary():
    records = [_a("anchor", "stable_success", 0.0, root="pass"), _a("apply", "persistent_failure")]
    tally = SourceTally()
    for r in records:
        tally.add(r)
    assert tally.result() == summarize_sources(records)
    legacy = Attribution(op="anchor", target="x", root="fail", source=None)
    tally.add(legacy)  # a record of an older tracebench: counted nowhere
    assert tally.result()["instances"] == 2


@pytest.mark.parametrize("formula", [SLOT4, "C(C(f1, f2) + g_rel1, f3 + g_pattern1) + g_style1"])
def test_every_instance_of_the_root_gets_one_finding_in_order(formula):
    nodes = _nodes(formula)
    findings = attribute(nodes, _all(nodes, PASSED))
    assert [(f.op, f.target) for f in findings] == list(nodes[0].targets)
    assert {f.source for f in findings} == {"stable_success"} and not any(f.unstable for f in findings)
    assert {f.root for f in findings} == {PASSED} and {f.depth for f in findings} == {0}


def test_every_finding_keeps_its_root_result_whatever_its_source():
    """A mixed tree: each finding carries the root's own outcome (records store its status)."""
    nodes = _nodes()
    results = _all(nodes, FAILED)
    f1, f2, f3 = (Instance(Operator.ANCHOR, t) for t in ("f1", "f2", "f3"))
    results["N0"][f1] = PASSED  # stable success
    results["N2b"][f2] = PASSED  # joint composition
    results["N1"][f3] = ABSTAINED  # undetermined (no first pass, an unknown)
    findings = {f.target: f for f in attribute(nodes, results) if f.op == "anchor"}
    assert [(t, f.root, f.source) for t, f in sorted(findings.items())] == [
        ("f1", PASSED, "stable_success"), ("f2", FAILED, "joint_composition"), ("f3", FAILED, "undetermined")]
    assert [f.record().root for _, f in sorted(findings.items())] == ["pass", "fail", "fail"]
    style = next(f for f in attribute(nodes, results) if f.target == "g_style1")  # failing everywhere it is kept
    assert (style.root, style.source, style.unstable, style.record().root) == (FAILED, "persistent_failure", False,
                                                                              "fail")


def test_an_unknown_above_a_fail_clouds_the_flag_and_above_a_pass_does_not():
    nodes = _nodes()
    f1 = Instance(Operator.ANCHOR, "f1")
    results = _all(nodes, FAILED)
    results["N1"][f1] = ABSTAINED  # passing, it would flip the fail of N2a below it
    found = _finding(nodes, results, "f1")
    assert (found.source, found.unknown, found.unstable) == ("undetermined", ("N1",), None)
    results["N2a"][f1] = PASSED  # nothing fails below the unknown: no flip it could make
    found = _finding(nodes, results, "f1")
    assert (found.source, found.unknown, found.unstable) == ("undetermined", ("N1",), False)


def test_shares_curves_and_accuracy_are_rounded_to_four_places():
    records = [_a("anchor", "global_reference", 0.5, ("global-interference",), ("global_reference",)),
               _a("anchor", "joint_composition", 1.0, ("global-interference",), ("global_reference",)),
               _a("anchor", "persistent_failure", None, ("global-interference",), ("global_reference",),
                  unstable=True)]
    summary = summarize_sources(records)
    assert summary["sources"]["global_reference"] == 0.3333
    assert summary["cumulative_pass"]["anchor"]["0.5"] == 0.3333
    assert summary["localization"]["accuracy"] == 0.3333
    assert summary["unstable"]["share"] == 0.3333
    assert summarize_sources([])["unstable"]["share"] == 0.0
    assert summarize_sources([_a("anchor", "undetermined", root="abstain")])["cumulative_pass"]["anchor"]["1.0"] == 0.0


def test_a_fail_below_a_decided_node_under_an_unknown_clouds_the_flag():
    """N1 unknown above N2a (a fail) whose children fail, fail and pass: N1 passing would flip
    the fails below it, whichever child comes last."""
    nodes = _nodes("C(f1 ⊕ g_pattern1 ⊕ g_material1, f2) ⊕ g_style1")
    f1 = Instance(Operator.ANCHOR, "f1")
    results = _all(nodes, FAILED)
    results["N1"][f1] = ABSTAINED
    results["N3c"][f1] = PASSED  # the last child of N2a passes (f1 ⊕ g_material1: a leaf, the paper's stop)
    found = _finding(nodes, results, "f1")
    assert (found.source, found.unknown, found.unstable) == ("undetermined", ("N1",), None)


def test_a_kept_instance_missing_from_a_nodes_results_is_unknown():
    nodes = _nodes()
    f1 = Instance(Operator.ANCHOR, "f1")
    results = _all(nodes, FAILED)
    del results["N1"][f1]  # evaluated, but no result for it (its questions were not asked back)
    assert _finding(nodes, results, "f1").unknown == ("N1",)


def test_the_summary_counts_repeated_and_legacy_sources():
    """Two instances of one source and operator count twice; a record of the version that made
    Unstable a source is counted under it, beside the sources of today."""
    records = [_a("anchor", "global_reference", 0.5), _a("anchor", "global_reference", 1.0),
               _a("anchor", "unstable", 1.0), _a("anchor", "unstable", 1.0)]
    summary = summarize_sources(records)
    assert summary["counts"]["global_reference"] == 2 and summary["by_operator"]["anchor"]["global_reference"] == 0.5
    assert summary["instances"] == 4 and summary["by_operator"]["anchor"]["instances"] == 4
    empty = summarize_sources([])
    assert set(empty["sources"].values()) == {0.0} and empty["counts"]["stable_success"] == 0
