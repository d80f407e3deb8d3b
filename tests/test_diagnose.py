"""`trace diagnose`: the rules, the trees, the sub-cases, attribution, and localization against the zoo's truth."""

from __future__ import annotations

import json
from dataclasses import replace
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given

from strategies import valid_exprs
from test_cli import run_trace
from tracebench.diagnose import (NODES_FILE, SUMMARY_FILE, TREES_FILE, attribute, build_tree,
                                 compositions_of, DiagnoseOptions, diagnose_run, node_case, number_terms, plan_trees, root_formula,
                                 draw_tree, rules, sources, summarize_sources, targets, tree_nodes)
from tracebench.errors import TraceError
from tracebench.operators import LOCAL_ROLES
from tracebench.formula import Anchor, Apply, Compose, Disentangle, Expr, Text, analyze, parse, slot_count, to_text
from tracebench.records import Case, DiagnosisSummary, DiagnosticTree, NodeOccurrence
from tracebench.outcomes import ABSTAINED, FAILED, PASSED, Outcome
from tracebench.providers import ModelSettings
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import read_cases
from tracebench.sample._bind import bind
from tracebench.zoo import failed_questions, parse_profile

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)
NAME = re.compile(r"N(\d+)([a-z]|[0-9]+)*")


def tree(formula: str, paper_stop: bool = True) -> dict[str, tuple[str | None, str | None, str, str | None]]:
    """node id -> (parent, rule, formula, same_as); ``paper_stop``: first-pass's tree, else rates'."""
    return {n.id: (n.parent, n.rule, to_text(n.formula, ascii=True), n.same_as)
            for n in tree_nodes(build_tree(parse(formula), paper_stop=paper_stop))}


# ------------------------------------------------------------------------------ rules on hand-written formulas

def test_the_papers_slot_4_example():
    assert tree("C(f1, f2, f3) + g_style") == {
        "N0": (None, None, "C1(f1, f2, f3) + g_style1", None),
        "N1": ("N0", "global_stripping", "C1(f1, f2, f3)", None),
        "N2a": ("N1", "composition_flattening", "C1(f1, T_e2, T_e3)", None),
        "N2b": ("N1", "composition_flattening", "C1(T_e1, f2, T_e3)", None),
        "N2c": ("N1", "composition_flattening", "C1(T_e1, T_e2, f3)", None),
    }


def test_the_papers_worked_example_has_the_papers_ten_nodes():
    """Eq. 5, the paper's worked example: the tree stops at one attribute transfer, so N3c
    (f2 ⊕ g2) and N3d (f2 ⊕ g3) are leaves, as N3b (the carrier f2 alone) is."""
    example = "C( C(f1, T_e ⊕ g1) ⊕ g_rel , f2 ⊕ g2 ⊕ g3 ) ⊕ g_global"
    assert tree(example) == {
        "N0": (None, None, "C1(C2(f1, T_e1 + g1) + g_rel1, f2 + g2 + g3) + g_global1", None),
        "N1": ("N0", "global_stripping", "C1(C2(f1, T_e1 + g1) + g_rel1, f2 + g2 + g3)", None),
        "N2a": ("N1", "composition_flattening", "C1(C2(f1, T_e1 + g1) + g_rel1, T_e3)", None),
        "N2b": ("N1", "composition_flattening", "C1(C2(T_e2, T_e1) + T_rel1, f2 + g2 + g3)", None),
        "N3a": ("N2a", "relation_simplification", "C1(C2(f1, T_e1 + g1) + T_rel1, T_e3)", None),
        "N3b": ("N2b", "attribute_removal", "C1(C2(T_e2, T_e1) + T_rel1, f2)", None),
        "N3c": ("N2b", "attribute_removal", "C1(C2(T_e2, T_e1) + T_rel1, f2 + g2)", None),
        "N3d": ("N2b", "attribute_removal", "C1(C2(T_e2, T_e1) + T_rel1, f2 + g3)", None),
        "N4a": ("N3a", "composition_flattening", "C1(C2(f1, T_e1) + T_rel1, T_e3)", None),
        "N4b": ("N3a", "composition_flattening", "C1(C2(T_e2, T_e1 + g1) + T_rel1, T_e3)", None),
    }
    # --method rates splits each one-attribute transfer into its carrier too: 12 nodes, the two
    # more repeating N3b (references, not generated again)
    rates = tree(example, paper_stop=False)
    assert len(rates) == 12 and {k: v for k, v in rates.items() if k not in ("N4c", "N4d")} == tree(example)
    assert rates["N4c"] == ("N3c", "attribute_removal", "C1(C2(T_e2, T_e1) + T_rel1, f2)", "N3b")
    assert rates["N4d"] == ("N3d", "attribute_removal", "C1(C2(T_e2, T_e1) + T_rel1, f2)", "N3b")


def test_global_terms_are_stripped_one_at_a_time():
    nodes = tree("C(f1, T_e ⊕ g1) ⊕ g_style ⊕ g_lighting")
    assert nodes["N1"][1:3] == ("global_stripping", "C1(f1, T_e1 + g1) + g_lighting1")
    assert nodes["N2"][1:3] == ("global_stripping", "C1(f1, T_e1 + g1)")


def test_a_relation_is_put_in_words_before_its_branches_are_split():
    nodes = tree("C(f1, f2) ⊕ g_rel")
    assert nodes["N1"][1:3] == ("relation_simplification", "C1(f1, f2) + T_rel1")
    assert {nodes["N2a"][2], nodes["N2b"][2]} == {"C1(f1, T_e2) + T_rel1", "C1(T_e1, f2) + T_rel1"}


def test_an_inner_relation_waits_for_the_outer_split():
    nodes = tree("C(C(f1, f2) ⊕ g_rel, f3)")
    assert nodes["N1a"][1:3] == ("composition_flattening", "C1(C2(f1, f2) + g_rel1, T_e3)")
    # the other branch states the whole subscene in words, the relation as T_rel
    assert nodes["N1b"][2] == "C1(C2(T_e1, T_e2) + T_rel1, f3)"
    assert nodes["N2"][1:3] == ("relation_simplification", "C1(C2(f1, f2) + T_rel1, T_e3)")
    assert nodes["N3a"][2] == "C1(C2(f1, T_e2) + T_rel1, T_e3)"


def test_attribute_removal_keeps_the_carrier_and_each_attribute_alone():
    # each one-attribute child is one attribute transfer: a leaf under the paper's stop rule
    assert [(k, v[2], v[3]) for k, v in tree("f ⊕ g_pattern ⊕ g_material").items()] == [
        ("N0", "f1 + g_pattern1 + g_material1", None),
        ("N1a", "f1", None),
        ("N1b", "f1 + g_pattern1", None),
        ("N1c", "f1 + g_material1", None),
    ]
    # --method rates splits those too, into the carrier alone: the sub-case of N1a again
    assert [(k, v[2], v[3]) for k, v in tree("f ⊕ g_pattern ⊕ g_material", paper_stop=False).items()] == [
        ("N0", "f1 + g_pattern1 + g_material1", None),
        ("N1a", "f1", None),
        ("N1b", "f1 + g_pattern1", None),
        ("N1c", "f1 + g_material1", None),
        ("N2a", "f1", "N1a"),  # identical sub-case: a reference, not generated again, not expanded
        ("N2b", "f1", "N1a"),
    ]
    # a text carrier alone holds no reference: only the one-attribute children
    assert [v[2] for v in tree("T_e ⊕ g ⊕ g").values()] == ["T_e1 + g1 + g2", "T_e1 + g1", "T_e1 + g2"]


@pytest.mark.parametrize("formula", ["f", "T_e ⊕ g", "C(f, T_e)", "C(T_e, T_e) ⊕ g_rel", "T_e ⊕ g_style",
                                     "C(T_e ⊕ g_attach, T_e)"])
def test_one_slot_is_a_leaf(formula):
    assert list(tree(formula)) == ["N0"]
    assert list(tree(formula, paper_stop=False)) == ["N0"]


@pytest.mark.parametrize("formula", ["f ⊕ g", "f ⊕ g_attach", "f ⊕ g_ip", "C(f ⊕ g_material, T_e)",
                                     "C(C(T_e, T_e) ⊕ T_rel, f ⊕ g)"])
def test_one_attribute_transfer_is_a_leaf_under_the_papers_stop_rule(formula):
    assert list(tree(formula)) == ["N0"]
    rates = tree(formula, paper_stop=False)  # rates: the carrier alone too
    assert list(rates) == ["N0", "N1"] and rates["N1"][1] == "attribute_removal" and "g" not in rates["N1"][2]


def test_names_letter_the_nodes_of_each_depth_as_the_paper_does():
    names = list(tree("C(C(Te+g, f+g)+g_rel, Te+g, f+g)+g_global"))
    # the inner split is N4a/N4b, as in the paper's Fig. 10; a depth with one node has no letter
    assert names == ["N0", "N1", "N2a", "N2b", "N2c", "N3", "N4a", "N4b"]
    graph = build_tree(parse("C(C(Te+g, f+g)+g_rel, Te+g, f+g)+g_global"))
    assert [graph.nodes[n]["node"].parent for n in ("N3", "N4a", "N4b")] == ["N2a", "N3", "N3"]
    # rates splits f1 ⊕ g2 (N4b) and f2 ⊕ g4 (N2c) into their carriers: N3b and N5
    rates = tree("C(C(Te+g, f+g)+g_rel, Te+g, f+g)+g_global", paper_stop=False)
    assert list(rates) == ["N0", "N1", "N2a", "N2b", "N2c", "N3a", "N3b", "N4a", "N4b", "N5"]
    assert [rates[n][0] for n in ("N3b", "N4a", "N5")] == ["N2c", "N3a", "N4b"]


def test_labels_past_z_go_on_as_aa_ab():
    from tracebench.diagnose._tree import _letters

    assert [_letters(k) for k in (0, 1, 25, 26, 27, 51, 52, 701, 702)] == \
        ["a", "b", "z", "aa", "ab", "az", "ba", "zz", "aaa"]


def test_a_repeated_sub_case_is_drawn_as_a_reference():
    drawn = draw_tree(build_tree(parse("f ⊕ g_pattern ⊕ g_material"), paper_stop=False))
    assert "N2a  [attribute_removal] → N1a (the same sub-case)" in drawn
    assert drawn.count("keeps:") == 4  # the root, N1a, N1b, N1c: the references keep nothing of their own


def test_targets_leave_out_a_composition_stated_wholly_in_words():
    root = number_terms(parse("C(C(f, f) ⊕ g_rel, f)"))
    child = number_terms(parse("C1(C2(T_e1, T_e2) ⊕ T_rel1, f3)"))
    assert [t for _, t in targets(root)] == ["f1", "f2", "g_rel1", "C2⊕g_rel1", "f3", "C1", "C2"]
    assert [t for _, t in targets(child, root)] == ["f3", "C1"]


def test_rules_and_sources_are_the_data_files():
    assert [r.name for r in rules()] == ["distractor_removal", "global_stripping", "relation_simplification",
                                         "composition_flattening", "attribute_removal"]
    assert [r.on_clutter for r in rules()] == [True, False, False, False, False]
    assert {r.source for r in rules()} <= set(sources())
    assert list(sources()) == ["stable_success", "persistent_failure", "global_reference", "joint_composition",
                               "relation_attribute", "reference_clutter", "undetermined"]


# ------------------------------------------------------------------------------ properties of every tree

def _frame(expr: Expr):
    """The scene's skeleton: compositions, entity positions and relations (what every node keeps)."""
    if isinstance(expr, Compose):
        return ("C", expr.index, tuple(_frame(a) for a in expr.args))
    if isinstance(expr, Apply):
        relations = tuple("R" for m in expr.modifiers if (isinstance(m, Disentangle) and m.kind == "rel")
                          or isinstance(m, Text))
        return (_frame(expr.carrier), relations) if relations else _frame(expr.carrier)
    assert isinstance(expr, (Anchor, Text))
    return "E"


def _one_transfer(formula: Expr) -> bool:
    """Whether a formula's reference-conditioned content is one attribute transfer ``E ⊕ g``: an
    anchor and one attribute (a local, attach or ip g) on it, nothing else."""
    terms = [t for t in analyze(formula) if t.op in ("f", "g")]
    anchors = [t for t in terms if t.role == "anchor"]
    return (len(terms) == 2 and len(anchors) == 1
            and any(t.role in LOCAL_ROLES and t.carrier is anchors[0].node for t in terms))


def _paths(graph) -> dict[tuple[str, ...], object]:
    """A tree's nodes by the formulas from the root down to them (what two trees of one formula
    can be compared by: a node added at a depth renames the nodes after it)."""
    paths: dict[str, tuple[str, ...]] = {}
    for n in tree_nodes(graph):
        paths[n.id] = (paths[n.parent] if n.parent else ()) + (to_text(n.formula),)
    return {paths[n.id]: (n, paths.get(n.same_as)) for n in tree_nodes(graph)}


def _without(expr: Expr, term) -> Expr:
    """The formula without one of its modifiers."""
    if isinstance(expr, Compose):
        return Compose(tuple(_without(a, term) for a in expr.args), expr.index)
    if isinstance(expr, Apply):
        carrier, modifiers = _without(expr.carrier, term), tuple(m for m in expr.modifiers if m is not term)
        return Apply(carrier, modifiers) if modifiers else carrier
    return expr


@given(valid_exprs())
def test_first_pass_stops_at_one_attribute_transfer_and_rates_splits_off_its_carrier(expr):
    """The paper's stop rule: no first-pass node holding one attribute transfer E ⊕ g has a
    child; the rates tree of the same formula is the first-pass tree plus, under each such node,
    one child holding the carrier E alone (a leaf, or a reference to the same sub-case)."""
    paper, rates = build_tree(expr), build_tree(expr, paper_stop=False)
    first, split = _paths(paper), _paths(rates)
    assert set(first) <= set(split)
    expected = set()
    for path, (node, same_as) in first.items():
        twin, twin_same_as = split[path]
        assert (twin.parent is None, twin.rule, twin.depth, twin.targets, same_as) == \
            (node.parent is None, node.rule, node.depth, node.targets, twin_same_as)
        if _one_transfer(node.formula):
            assert not list(paper.successors(node.id))
            if node.same_as is None:
                g = next(t.node for t in analyze(node.formula) if t.role in LOCAL_ROLES)
                expected.add(path + (to_text(_without(node.formula, g)),))
    assert set(split) - set(first) == expected
    for path in expected:
        child, _ = split[path]
        assert child.rule == "attribute_removal" and child.slot == 1 and not list(rates.successors(child.id))


@pytest.mark.parametrize("paper_stop", [True, False], ids=["first-pass", "rates"])
@given(expr=valid_exprs())
def test_tree_properties(expr, paper_stop):
    graph = build_tree(expr, paper_stop=paper_stop)
    nodes = tree_nodes(graph)
    root = nodes[0].formula
    by_id = {n.id: n for n in nodes}
    assert len(by_id) == len(nodes)
    for node in nodes:
        analyze(node.formula)  # every node is in the language
        assert NAME.fullmatch(node.id) and int(NAME.fullmatch(node.id).group(1)) == node.depth
        assert _frame(node.formula) == _frame(root)
        if node.parent is None:
            continue
        parent = by_id[node.parent]
        assert node.slot < parent.slot
        assert set(node.targets) <= set(parent.targets)
        if not list(graph.successors(node.id)) and node.same_as is None and slot_count(root) >= 1:
            # a leaf holds one reference-conditioned unit (under the paper's stop rule, one
            # attribute transfer E ⊕ g is one too)
            assert node.slot == 1 or (paper_stop and _one_transfer(node.formula))
    again = tree_nodes(build_tree(expr, paper_stop=paper_stop))
    assert [n.to_json() for n in again] == [n.to_json() for n in nodes]  # deterministic


# ------------------------------------------------------------------------------ sub-cases of sampled cases

@pytest.fixture(scope="module")
def small(diagnosis_bench) -> Path:
    return diagnosis_bench  # tests/conftest.py: sampled once per session


def test_sub_cases_keep_the_scene_and_a_subset_of_the_checklist(small):
    for case in read_cases(small):
        graph = build_tree(root_formula(case), describe=lambda s, terms={t.symbol: t for t in case.terms}: terms[s].value)
        subs = {}
        for node in tree_nodes(graph):
            sub = node_case(case, node, graph.graph["downgrades"], f"{case.id}.{node.id}")
            subs[node.id] = sub
            assert sub.scene == case.scene
            assert sub.text_only_prompt == case.text_only_prompt  # the same request, in words
            assert parse(sub.formula) is not None and sub.slot == node.slot
            ids = [q.id for q in sub.checklist]
            assert set(ids) <= {q.id for q in case.checklist}
            assert {q.target for q in sub.checklist} == {t for _, t in node.targets}
            if node.parent is not None:
                assert set(ids) <= {q.id for q in subs[node.parent].checklist}
            # only the images it still uses, numbered in order of first mention
            assert [r.image for r in sub.references] == [f"Image {k + 1}" for k in range(len(sub.references))]
            used = [t.image for t in sub.terms if t.image]
            assert list(dict.fromkeys(used)) == [r.image for r in sub.references]
            assert {r.source_id for r in sub.references} <= {r.source_id for r in case.references}
            for q in sub.checklist:
                assert set(q.depends_on) <= set(ids) and set(q.images) <= {r.image for r in sub.references}


def test_dropped_references_are_stated_in_words(small):
    case = next(c for c in read_cases(small) if any(t.role == "relation" and t.op == "g" for t in c.terms)
                and sum(t.op == "f" for t in c.terms) >= 2)
    terms = {t.symbol: t for t in case.terms}
    graph = build_tree(root_formula(case), describe=lambda s: terms[s].value)
    relation = next(t for t in case.terms if t.role == "relation" and t.op == "g")
    node = next(n for n in tree_nodes(graph) if n.rule == "relation_simplification")
    sub = node_case(case, node, graph.graph["downgrades"], "x")
    words = next(t for t in sub.terms if t.replaces == relation.symbol)
    assert (words.op, words.role, words.value, words.image) == ("T", "relation", relation.value, None)
    assert 'T_rel' in sub.formula and json.dumps(relation.value)[1:-1] in sub.formula
    assert f"interact as in this scene: {relation.value}" in sub.prompt.splitlines()[0]
    anchors = {t.symbol for t in case.terms if t.op == "f"}
    leaf = next(n for n in tree_nodes(graph) if n.rule == "composition_flattening"
                and not anchors <= {t.symbol for t in analyze(n.formula)})
    sub = node_case(case, leaf, graph.graph["downgrades"], "y")
    anchor = next(t for t in case.terms if t.op == "f" and t.symbol not in {s.symbol for s in sub.terms})
    text = next(t for t in sub.terms if t.replaces == anchor.symbol)
    assert (text.op, text.role, text.handle, text.value) == ("T", "text", anchor.handle, anchor.value)
    assert f"{anchor.value} ('{anchor.handle}')" in sub.prompt


def test_compositions_of_a_formula_match_binding(small):
    from tracebench.sample import LibraryIndex
    from tracebench.zoo._generate import default_index
    import random

    index: LibraryIndex = default_index()
    for text in ("C(C(f, T_e ⊕ g) ⊕ g_rel, f ⊕ g ⊕ g) ⊕ g_global", "C(f, C(f, f) ⊕ g_rel, T_e)", "f ⊕ g"):
        bound = bind(parse(text), index, random.Random(3))
        assert compositions_of(bound.formula) == bound.compositions


# ------------------------------------------------------------------------------ attribution

def _results(table: dict[str, dict[str, bool | None]]):
    return {node: {("anchor", t): Outcome.binary(v) for t, v in row.items()} for node, row in table.items()}


def test_attribution_first_pass_persistent_stable_and_unstable():
    nodes = tree_nodes(build_tree(parse("C(f1, f2, f3) + g_style")))
    # f1 passes once the style is gone; f2 only alone; f3 never; ... and one flips back
    results = _results({
        "N0": {"f1": False, "f2": False, "f3": False},
        "N1": {"f1": True, "f2": False, "f3": False},
        "N2a": {"f1": True}, "N2b": {"f2": True}, "N2c": {"f3": False},
    })
    found = {f.target: f for f in attribute(nodes, results) if f.op == "anchor"}
    assert (found["f1"].source, found["f1"].node, found["f1"].depth) == ("global_reference", "N1", 1)
    assert (found["f2"].source, found["f2"].node, found["f2"].depth) == ("joint_composition", "N2b", 2)
    assert (found["f3"].source, found["f3"].depth) == ("persistent_failure", None)
    assert not any(f.unstable for f in found.values())
    results["N2a"][("anchor", "f1")] = FAILED  # passes at N1, fails again below: the bear-hat case
    results["N0"][("anchor", "f3")] = PASSED
    found = {f.target: f for f in attribute(nodes, results) if f.op == "anchor"}
    # the paper attributes at the first pass whatever happens below; the flip is a flag beside it
    assert (found["f1"].source, found["f1"].node, found["f1"].unstable) == ("global_reference", "N1", True)
    assert (found["f3"].source, found["f3"].unstable) == ("stable_success", True)  # passing root, failing below
    assert found["f2"].unstable is False
    results["N2c"][("anchor", "f3")] = PASSED
    results["N1"][("anchor", "f3")] = PASSED
    found = {f.target: f for f in attribute(nodes, results)}["f3"]
    assert (found.source, found.unstable) == ("stable_success", False)
    results["N1"][("anchor", "f3")] = ABSTAINED  # failing there, it would flip: the flag is unknown, not the source
    found = {f.target: f for f in attribute(nodes, results)}["f3"]
    assert (found.source, found.unstable, found.unknown) == ("stable_success", None, ())


def test_attribution_over_abstained_results_is_undetermined_where_they_could_change_it():
    nodes = tree_nodes(build_tree(parse("C(f1, f2, f3) + g_style")))
    everything_abstains = {node.id: {("anchor", t): ABSTAINED for t in ("f1", "f2", "f3")} for node in nodes}
    everything_abstains["N0"] = {("anchor", t): FAILED for t in ("f1", "f2", "f3")}
    # an endpoint that answered the roots and nothing else: no persistent failure, nothing decided
    assert {f.source for f in attribute(nodes, everything_abstains)} == {"undetermined"}
    results = _results({
        "N0": {"f1": False, "f2": False, "f3": False},
        "N1": {"f1": True, "f2": False, "f3": False},
        "N2a": {"f1": True}, "N2b": {"f2": True}, "N2c": {"f3": False},
    })
    results["N2b"][("anchor", "f2")] = ABSTAINED  # f2's only pass unknown: persistent or joint composition
    found = {f.target: f for f in attribute(nodes, results) if f.op == "anchor"}
    assert (found["f2"].source, found["f2"].unknown) == ("undetermined", ("N2b",))
    assert found["f1"].source == "global_reference"  # f1 is not kept at N2b: decided
    results["N2a"][("anchor", "f1")] = ABSTAINED  # below f1's first pass: it cannot move the first pass
    found = {f.target: f for f in attribute(nodes, results)}["f1"]
    assert (found.source, found.unstable) == ("global_reference", None)  # failing, it would flip: flag unknown
    results["N2a"][("anchor", "f1")] = FAILED
    results["N1"][("anchor", "f3")] = ABSTAINED  # passing, it would be a first pass
    found = {f.target: f for f in attribute(nodes, results) if f.op == "anchor"}
    assert (found["f1"].source, found["f1"].unstable) == ("global_reference", True)
    assert (found["f3"].source, found["f3"].unknown) == ("undetermined", ("N1",))
    # a root whose answer is unknown is undetermined too, and the summary keeps it out of the paper's sources
    results["N0"][("anchor", "f3")] = ABSTAINED
    records = [f.record() for f in attribute(nodes, results)]
    summary = summarize_sources(records)
    unanswered = 1 + sum(r.op != "anchor" for r in records)  # f3, and the style's instances no result names
    assert summary["abstained"] == unanswered and summary["undetermined"] == sum(r.source == "undetermined" for r in records)
    assert summary["sources"]["undetermined"] == round(summary["undetermined"] / summary["instances"], 4)
    assert sum(summary["sources"].values()) == pytest.approx(1.0, abs=1e-3)


def test_relative_depth_is_measured_on_the_path_of_the_first_pass():
    """§C.3: 0 is the complete case, 1 the most simplified node of that path keeping the
    instance, not the deepest node of the whole tree."""
    nodes = tree_nodes(build_tree(parse("C(C(Te+g, f+g)+g_rel, Te+g, f+g)+g_global")))
    assert max(n.depth for n in nodes) == 4
    f1, f2, g2 = ("anchor", "f1"), ("anchor", "f2"), ("disentangle", "g2")
    results = {n.id: {i: FAILED for i in n.targets} for n in nodes}

    def found(instance):
        return next(f for f in attribute(nodes, results) if (f.op, f.target) == instance)

    results["N2c"][f2] = PASSED  # f2's path: N0 N1 N2c (f2 ⊕ g4, a leaf), so 2 of 2
    assert (found(f2).node, found(f2).depth, found(f2).relative_depth) == ("N2c", 2, 1.0)
    results["N1"][f2] = PASSED
    assert (found(f2).node, found(f2).relative_depth) == ("N1", 0.5)
    results["N3"][f1] = PASSED  # f1's path goes on to N4b: 3 of 4
    assert (found(f1).node, found(f1).relative_depth) == ("N3", 0.75)
    results["N2a"][g2] = PASSED  # 2 of 4
    assert (found(g2).node, found(g2).relative_depth) == ("N2a", 0.5)
    results["N0"][f1] = PASSED
    assert (found(f1).source, found(f1).relative_depth) == ("stable_success", 0.0)
    assert found(("anchor", "f1")).record().relative_depth == 0.0
    results["N0"][f1] = FAILED
    results["N3"][f1] = FAILED
    assert (found(f1).source, found(f1).relative_depth) == ("persistent_failure", None)

    # the rates tree goes one step further on f1's and f2's paths (their carriers alone: N5, N3b)
    nodes = tree_nodes(build_tree(parse("C(C(Te+g, f+g)+g_rel, Te+g, f+g)+g_global"), paper_stop=False))
    by_id = {n.id: n for n in nodes}
    results = {n.id: {i: FAILED for i in n.targets} for n in nodes}
    results["N2c"][f2] = PASSED  # f2's path: N0 N1 N2c N3b, so 2 of 3
    assert (found(f2).node, found(f2).relative_depth) == ("N2c", round(2 / 3, 4))
    results["N4b"][f1] = PASSED  # f1's path goes on to N5: 4 of 5
    assert (found(f1).node, found(f1).relative_depth) == ("N4b", 0.8)
    results["N2a"][g2] = PASSED  # g2 is kept down to N4b only: 2 of 4
    assert "g2" not in [t for _, t in by_id["N5"].targets]
    assert (found(g2).node, found(g2).relative_depth) == ("N2a", 0.5)


def test_two_first_passes_at_one_depth_go_to_the_node_met_first():
    nodes = tree_nodes(build_tree(parse("C(f1 ⊕ g_pattern1 ⊕ g_material1, f2) ⊕ g_style1")))
    c1 = ("compose", "C1")
    results = {n.id: {i: FAILED for i in n.targets} for n in nodes}
    results["N2a"][c1] = results["N2b"][c1] = PASSED  # both at depth 2, both by composition flattening
    first = next(f for f in attribute(nodes, results) if f.target == "C1")
    assert (first.node, first.depth, first.source) == ("N2a", 2, "joint_composition")
    results["N2a"][c1] = FAILED
    results["N3a"][c1] = PASSED  # deeper on N2a's path: N2b at depth 2 is the first pass
    assert next(f for f in attribute(nodes, results) if f.target == "C1").node == "N2b"


def test_the_summary_counts_the_unstable_flag_beside_the_sources():
    nodes = tree_nodes(build_tree(parse("C(f1, f2, f3) + g_style")))
    results = _results({
        "N0": {"f1": False, "f2": True, "f3": False},
        "N1": {"f1": True, "f2": False, "f3": False},
        "N2a": {"f1": False}, "N2b": {"f2": True}, "N2c": {"f3": False},
    })
    records = [f.record() for f in attribute(nodes, results) if f.op == "anchor"]
    summary = summarize_sources(records)
    assert summary["counts"]["global_reference"] == 1 and summary["counts"]["stable_success"] == 1
    assert summary["counts"]["persistent_failure"] == 1
    assert sum(summary["sources"].values()) == pytest.approx(1.0, abs=1e-3)
    assert summary["unstable"] == {"instances": 2, "share": round(2 / 3, 4), "undecided": 0,
                                   "by_operator": {"anchor": round(2 / 3, 4)}}


# ------------------------------------------------------------------------------ against the zoo's truth

@pytest.fixture(scope="module")
def large(localization_bench) -> Path:
    return localization_bench  # tests/conftest.py: sampled once per session


def _breakable(bench: Path, profile: str, out: Path) -> Path:
    """The cases of ``bench`` the profile breaks, as a benchmark folder: the run then renders only
    those (the diagnosis would pick them anyway; it keeps the suite fast)."""
    rule = parse_profile(profile)
    lines = [line for line in (bench / "cases.jsonl").read_text().splitlines()
             if failed_questions(Case.model_validate_json(line), rule)]
    out.mkdir()
    (out / "cases.jsonl").write_text("".join(line + "\n" for line in lines))
    shutil.copyfile(bench / "manifest.json", out / "manifest.json")
    # hard links: the same files at no cost, inside the folder (a symlink leaving it is refused)
    shutil.copytree(bench / "references", out / "references", copy_function=os.link)
    return out


WEAK = "weak-subtype:1.1_pattern_texture,weak-subtype:4.1_style,weak-subtype:attach,weak-subtype:3.1_action_pose"


@pytest.mark.slow
@pytest.mark.parametrize("profile,cause,expected", [
    ("global-interference", "global-interference", {"global_reference"}),
    ("composition-interference:2", "composition-interference", {"joint_composition"}),
    ("relation-blind", "relation-blind", {"relation_attribute", "persistent_failure"}),
    (WEAK, "weak-subtype", {"persistent_failure"}),
])
def test_localization_names_the_injected_cause(large, tmp_path, profile, cause, expected):
    bench = _breakable(large, profile, tmp_path / "bench")
    run_benchmark(bench, tmp_path / "run", RunOptions(generator=f"synthetic:{profile}", judges=["oracle"], settings=SETTINGS))
    summary = diagnose_run(tmp_path / "run", tmp_path / "diag", DiagnoseOptions(strategy="adaptive", settings=SETTINGS))
    assert summary.cases >= 200
    localization = summary.localization_accuracy
    assert localization is not None and set(localization["by_cause"]) == {cause}
    result = localization["by_cause"][cause]
    assert result["instances"] >= 200 and set(result["expected"]) == expected
    assert result["accuracy"] >= 0.95, result


@pytest.mark.parametrize("profile", ["synthetic:global-interference",
                                     pytest.param("synthetic:global-interference,composition-interference:2,"
                                                  "relation-blind,leaky-binding", marks=pytest.mark.slow)])
def test_adaptive_matches_full_with_fewer_nodes(small, shared_runs, tmp_path, profile):
    run = shared_runs(small, profile)
    full = diagnose_run(run, tmp_path / "full", DiagnoseOptions(strategy="full", settings=SETTINGS))
    adaptive = diagnose_run(run, tmp_path / "adaptive", DiagnoseOptions(strategy="adaptive", settings=SETTINGS))

    def attributions(folder):
        return [[a.model_dump() for a in DiagnosticTree.model_validate_json(line).attributions]
                for line in (folder / TREES_FILE).read_text().splitlines()]

    assert attributions(tmp_path / "full") == attributions(tmp_path / "adaptive")
    assert full.sources == adaptive.sources and full.cumulative_pass == adaptive.cumulative_pass
    assert full.cases > 20 and 0 < adaptive.nodes_generated < full.nodes_generated
    if profile == "synthetic:global-interference":  # failures explained near the root: most branches skipped
        assert adaptive.nodes_generated <= full.nodes_generated / 2
    assert full.nodes_generated <= full.nodes_in_trees  # identical sub-cases generated once


def test_trees_and_summary_on_disk(small, shared_runs, tmp_path):
    run = shared_runs(small, "synthetic:global-interference")
    summary = diagnose_run(run, tmp_path / "diag", DiagnoseOptions(cases="all", settings=SETTINGS))
    on_disk = DiagnosisSummary.model_validate_json((tmp_path / "diag" / SUMMARY_FILE).read_text())
    assert on_disk == summary and summary.cases == len(list(read_cases(small)))
    assert abs(sum(summary.sources.values()) - 1) < 1e-3
    for op, curve in summary.cumulative_pass.items():
        values = list(curve.values())
        assert values == sorted(values) and list(curve) == [f"{k / 10:.1f}" for k in range(11)]
    trees = [DiagnosticTree.model_validate_json(line) for line in (tmp_path / "diag" / TREES_FILE).read_text().splitlines()]
    one = next(t for t in trees if t.max_depth >= 2)
    assert one.nodes[0].id == "N0" and one.nodes[0].case_id == one.case_id  # the run's own verdicts
    for node in one.nodes[1:]:
        assert node.evaluated and (tmp_path / "diag" / node.image).is_file()
        assert set(node.verdicts) == set(node.question_ids)
        assert {e.child for e in one.edges} >= {node.id}
    assert {(a.op, a.target) for a in one.attributions} == {(q_op, t) for q_op, t in
                                                            targets(parse(one.formula))}
    before = (tmp_path / "diag" / TREES_FILE).read_bytes()
    diagnose_run(run, tmp_path / "diag", DiagnoseOptions(cases="all", settings=SETTINGS))  # resumed: nothing redone
    assert (tmp_path / "diag" / TREES_FILE).read_bytes() == before
    calls = [json.loads(p.read_text())["calls"] for p in (tmp_path / "diag" / "rounds").glob("*/run/run.json")]
    assert calls and all(c == {} for c in calls)


@pytest.mark.slow
def test_exported_nodes_come_back_through_a_folder_generator(small, shared_runs, tmp_path):
    run = shared_runs(small, "synthetic:composition-interference:2")  # read only: diagnoses write elsewhere
    result = run_trace("diagnose", str(run), "--export-nodes", str(tmp_path / "nodes"))
    assert result.returncode == 0, result.stderr
    exported = list(read_cases(tmp_path / "nodes"))  # trace sample's format
    occurrences = [NodeOccurrence.model_validate_json(line)
                   for line in (tmp_path / "nodes" / NODES_FILE).read_text().splitlines()]
    assert {o.case_id for o in occurrences} == {c.id for c in exported}
    assert all(o.case_id.startswith(o.root + ".N") for o in occurrences if o.case_id.endswith("." + o.node))
    # "their own infrastructure": the exported folder run elsewhere, its images brought back
    run_benchmark(tmp_path / "nodes", tmp_path / "elsewhere", RunOptions(generator="synthetic:composition-interference:2",
                  judges=["oracle"], settings=SETTINGS))
    back = diagnose_run(run, tmp_path / "back", DiagnoseOptions(generator=f"folder:{tmp_path / 'elsewhere' / 'images'}",
                        settings=SETTINGS))
    direct = diagnose_run(run, tmp_path / "direct", DiagnoseOptions(settings=SETTINGS))
    assert back.sources == direct.sources and back.by_operator == direct.by_operator
    assert back.nodes_generated == direct.nodes_generated


def test_dry_run_prints_the_tree_without_a_model(tmp_path):
    result = run_trace("diagnose", "--formula", "C(f, f, f) ⊕ g_style", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [(n["id"], n["parent"], n["rule"]) for n in data["nodes"]] == [
        ("N0", None, None), ("N1", "N0", "global_stripping"), ("N2a", "N1", "composition_flattening"),
        ("N2b", "N1", "composition_flattening"), ("N2c", "N1", "composition_flattening")]
    assert data["nodes"][2]["targets"] == ["f1", "C1"] and data["nodes"][2]["formula"] == "C1(f1, T_e2, T_e3)"
    again = run_trace("diagnose", "--formula", "C(f, f, f) ⊕ g_style", "--dry-run", "--json")
    assert again.stdout == result.stdout
    text = run_trace("diagnose", "--formula", "C(f, f, f) + g_style", "--dry-run")
    assert "└─ N1  [global_stripping] C1(f1, f2, f3)" in text.stdout


@pytest.mark.parametrize("args,message", [
    (["--formula", "C(f, f", "--dry-run"], "formula column 7"),
    (["--formula", "f ⊕ g"], "add --dry-run"),
    (["RUN", "--cases", "nope", "--out", "OUT"], "--cases: nope: not a case of run"),
    (["RUN", "--generator", "bogus:x", "--out", "OUT"], "--generator 'bogus:x'"),
    (["RUN", "--strategy", "adaptive", "--out", "OUT"], "another strategy"),
    (["MISSING", "--out", "OUT"], "not a run folder"),
])
def test_bad_input_is_one_line_and_writes_nothing(small, shared_runs, tmp_path, args, message):
    run = shared_runs(small, "synthetic:global-interference", shard=(1, 8))
    out = tmp_path / "out"
    if "another strategy" in message:
        diagnose_run(run, out, DiagnoseOptions(settings=SETTINGS))
    before = sorted(p.name for p in out.rglob("*")) if out.exists() else None
    args = [{"RUN": str(run), "OUT": str(out), "MISSING": str(tmp_path / "missing")}.get(a, a) for a in args]
    result = run_trace("diagnose", *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert (sorted(p.name for p in out.rglob("*")) if out.exists() else None) == before


def test_identical_sub_cases_are_one_across_trees(small):
    cases = [c for c in read_cases(small) if c.slot >= 3][:10]
    plan = plan_trees(cases + [c.model_copy(update={"id": c.id + "-twin"}) for c in cases])
    nodes = sum(len(t.nodes) for t in plan.trees)
    assert len(plan.cases) < nodes
    assert len(plan.cases) == len({k for t in plan.trees for k in t.keys.values()})
    assert len(plan.occurrences) == nodes


def _attributions(folder: Path) -> dict[str, list[dict]]:
    return {t.case_id: [a.model_dump() for a in t.attributions]
            for t in (DiagnosticTree.model_validate_json(line) for line in (folder / TREES_FILE).read_text().splitlines())}


@pytest.mark.slow
def test_shards_merge_to_the_whole_diagnosis(small, shared_runs, tmp_path):
    run = shared_runs(small, "synthetic:composition-interference:2,relation-blind")
    whole = diagnose_run(run, tmp_path / "whole", DiagnoseOptions(settings=SETTINGS))
    for i in (1, 2):
        diagnose_run(run, tmp_path / f"shard{i}", DiagnoseOptions(shard=(i, 2), settings=SETTINGS,
                     cache_dir=tmp_path / "cache"))
    result = run_trace("merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out", str(tmp_path / "merged"))
    assert result.returncode == 0, result.stderr
    merged = DiagnosisSummary.model_validate_json((tmp_path / "merged" / SUMMARY_FILE).read_text())
    assert merged == whole
    assert list(_attributions(tmp_path / "merged").items()) == list(_attributions(tmp_path / "whole").items())
    trees = [DiagnosticTree.model_validate_json(line)
             for line in (tmp_path / "merged" / TREES_FILE).read_text().splitlines()]
    images = [n.image for t in trees for n in t.nodes[1:] if n.image]
    assert images and all((tmp_path / "merged" / image).is_file() for image in images)
    clash = run_trace("merge", str(tmp_path / "shard1"), str(tmp_path / "whole"), "--out", str(tmp_path / "bad"))
    assert clash.returncode == 2 and "is in two of the folders" in clash.stderr and not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_diagnosis_over_http_matches_in_process(small, shared_runs, tmp_path, monkeypatch):
    """The served zoo (trace serve) through the openai adapters: the real-model path, on loopback."""
    from tracebench.diagnose import export_nodes
    from tracebench.serve import ZooServer

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    profile = "global-interference,relation-blind"
    run = shared_runs(small, f"synthetic:{profile}")
    local = diagnose_run(run, tmp_path / "local-diag", DiagnoseOptions(strategy="adaptive", settings=SETTINGS))
    export_nodes(run, tmp_path / "nodes")  # the server answers the nodes' prompts too
    with ZooServer([small, tmp_path / "nodes"]).start() as server:
        settings = ModelSettings(base_url=server.base_url, max_retries=2, timeout=30.0)
        run_benchmark(small, tmp_path / "http", RunOptions(generator=f"openai:synthetic/{profile}", judges=["openai:oracle"],
                      settings=settings, concurrency=4))
        # a served model is named on the command line (a run folder never says where requests go)
        http = diagnose_run(tmp_path / "http", tmp_path / "http-diag", DiagnoseOptions(strategy="adaptive", settings=settings,
                            generator=f"openai:synthetic/{profile}", judges=["openai:oracle"], concurrency=4))
    assert http.cases == local.cases and http.nodes_generated == local.nodes_generated
    assert http.sources == local.sources and http.by_operator == local.by_operator
    assert _attributions(tmp_path / "http-diag").keys() == _attributions(tmp_path / "local-diag").keys()
    abstained = [v for t in (tmp_path / "http-diag" / "rounds").glob("*/run/run.json")
                 for v in [json.loads(t.read_text())["abstentions"]]]
    assert abstained and sum(abstained) == 0


def test_export_nodes_refuses_a_folder_that_holds_files(small, shared_runs, tmp_path):
    run = shared_runs(small, "synthetic:global-interference", shard=(1, 8))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    result = run_trace("diagnose", str(run), "--export-nodes", str(tmp_path / "mine"))
    assert result.returncode == 2 and "exists and is not empty" in result.stderr
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def _trees_apart_from_rounds(folder: Path) -> list[dict]:
    """The trees of a diagnosis with each node image's round folder left out (windows of
    roots number their rounds one after the other)."""
    trees = [json.loads(line) for line in (folder / TREES_FILE).read_text().splitlines()]
    for tree in trees:
        for node in tree["nodes"]:
            if node["image"] and node["image"].startswith("rounds/"):
                node["image"] = re.sub(r"^rounds/\d+/", "rounds/*/", node["image"])
    return trees


def test_windows_of_roots_give_the_one_window_diagnosis(small, tmp_path):
    """A diagnosis a few roots at a time (its memory bounded by the window) writes the trees
    and summary of one window: the same sub-cases, one generation each, even for a root whose
    twin (the same case under another id) was diagnosed in an earlier window."""
    rule = "synthetic:global-interference"
    lines = [line for line in (small / "cases.jsonl").read_text().splitlines()
             if failed_questions(Case.model_validate_json(line), parse_profile(rule.split(":", 1)[1]))][:9]
    twins = [Case.model_validate_json(line).model_copy(update={"id": f"{Case.model_validate_json(line).id}-twin"})
             for line in lines[:3]]
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "cases.jsonl").write_text("".join(line + "\n" for line in lines + [t.model_dump_json() for t in twins]))
    shutil.copyfile(small / "manifest.json", bench / "manifest.json")
    shutil.copytree(small / "references", bench / "references", copy_function=os.link)
    run = tmp_path / "run"
    run_benchmark(bench, run, RunOptions(generator=rule, judges=["oracle"], settings=SETTINGS))
    for strategy in ("full", "adaptive"):
        one = diagnose_run(run, tmp_path / f"{strategy}-one", DiagnoseOptions(strategy=strategy, settings=SETTINGS, window=100))
        windowed = diagnose_run(run, tmp_path / f"{strategy}-windows", DiagnoseOptions(strategy=strategy, settings=SETTINGS, window=4))
        assert one.cases == 12 and windowed.model_dump(exclude={"tool"}) == one.model_dump(exclude={"tool"})
        trees = _trees_apart_from_rounds(tmp_path / f"{strategy}-windows")
        assert trees == _trees_apart_from_rounds(tmp_path / f"{strategy}-one")
        rounds = sorted((tmp_path / f"{strategy}-windows" / "rounds").iterdir())
        assert len(rounds) > len(list((tmp_path / f"{strategy}-one" / "rounds").iterdir()))
        evaluated = [c.id for r in rounds for c in read_cases(r / "cases")]
        assert len(evaluated) == len(set(evaluated)) == one.nodes_generated
        assert not [i for i in evaluated if "-twin" in i]  # a twin's sub-cases are its original's, generated once
        twin = next(t for t in trees if t["case_id"].endswith("-twin"))
        assert all(n["case_id"].startswith(twin["case_id"].removesuffix("-twin") + ".N") for n in twin["nodes"][1:])
        assert all(n["image"] for n in twin["nodes"][1:] if n["evaluated"])
    before = (tmp_path / "adaptive-windows" / TREES_FILE).read_bytes()
    diagnose_run(run, tmp_path / "adaptive-windows", DiagnoseOptions(strategy="adaptive", settings=SETTINGS, window=4))  # resumed
    assert (tmp_path / "adaptive-windows" / TREES_FILE).read_bytes() == before
    calls = [json.loads(p.read_text())["calls"] for p in (tmp_path / "adaptive-windows" / "rounds").glob("*/run/run.json")]
    assert calls and all(c == {} for c in calls)
    # resumed in other windows (a folder an earlier version planned otherwise): its rounds made again
    # from the call cache, none left over
    diagnose_run(run, tmp_path / "adaptive-windows", DiagnoseOptions(strategy="adaptive", settings=SETTINGS, window=7))
    assert _trees_apart_from_rounds(tmp_path / "adaptive-windows") == _trees_apart_from_rounds(tmp_path / "adaptive-one")
    rounds = sorted((tmp_path / "adaptive-windows" / "rounds").iterdir())
    calls = [json.loads((r / "run" / "run.json").read_text())["calls"] for r in rounds]
    assert calls and all(c == {} for c in calls)
    trees = [json.loads(line) for line in (tmp_path / "adaptive-windows" / TREES_FILE).read_text().splitlines()]
    shown = {n["image"].split("/")[1] for t in trees for n in t["nodes"] if n["image"] and n["image"].startswith("rounds/")}
    assert {r.name for r in rounds} == shown  # every round the trees' images come from, and no other
    # cases named on the command line: diagnosed in that order, whatever the run's
    named = [json.loads(lines[k])["id"] for k in (5, 0, 7, 2)]
    diagnose_run(run, tmp_path / "named", DiagnoseOptions(cases=",".join(named + named[:1]), settings=SETTINGS, window=3))
    assert [t["case_id"] for t in _trees_apart_from_rounds(tmp_path / "named")] == named


def test_a_run_where_every_case_passes_gives_an_empty_diagnosis_and_exit_0(small, shared_runs, tmp_path):
    """Nothing failed is no bad input: one line, exit 0, and a diagnosis folder trace report reads."""
    run = shared_runs(small, "synthetic:perfect")
    assert all(json.loads(line)["verdict"] == "pass" for line in (run / "verdicts.jsonl").read_text().splitlines())
    result = run_trace("diagnose", str(run), "--out", str(tmp_path / "diag"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (f"{tmp_path / 'diag'}: no case to diagnose: every case of {run} passes "
                                     "(an empty diagnosis, which trace report accepts)")
    assert (tmp_path / "diag" / "trees.jsonl").read_text() == ""
    assert DiagnosisSummary.model_validate_json((tmp_path / "diag" / "summary.json").read_text()).cases == 0
    page = run_trace("report", str(run), "--diagnosis", str(tmp_path / "diag"), "--out", str(tmp_path / "r.html"))
    assert page.returncode == 0 and page.stderr == "", page.stderr
    # a case asked for by id that is not there stays bad input
    wrong = run_trace("diagnose", str(run), "--cases", "no-such-case", "--out", str(tmp_path / "other"))
    assert wrong.returncode == 2 and not (tmp_path / "other").exists()


def test_a_diagnosis_records_its_generation_options_and_resumes_only_with_the_same(small, shared_runs, tmp_path):
    run = shared_runs(small, "synthetic:global-interference")
    first_case = next(iter(read_cases(small))).id
    sized = replace(SETTINGS, generator_options={"size": "512x512"})
    diagnose_run(run, tmp_path / "diag", DiagnoseOptions(cases=first_case, settings=sized))
    assert json.loads((tmp_path / "diag" / "diagnosis.json").read_text())["generator_options"] == {"size": "512x512"}
    with pytest.raises(TraceError, match=r"holds a diagnosis with other generator_options; choose another --out"):
        diagnose_run(run, tmp_path / "diag", DiagnoseOptions(
            cases=first_case, settings=replace(SETTINGS, generator_options={"size": "256x256"})))
    diagnose_run(run, tmp_path / "plain", DiagnoseOptions(cases=first_case, settings=SETTINGS))
    assert "generator_options" not in json.loads((tmp_path / "plain" / "diagnosis.json").read_text())
