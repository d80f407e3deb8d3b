"""Planning diagnostic trees from memoized shapes: the same trees and sub-cases as the rules
applied to each bound formula, and the modules `trace diagnose` leaves unimported."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strategies import attributes, images, labels, valid_exprs
from tracebench.diagnose import build_tree, compositions_of, node_case, number_terms, plan_trees, root_formula, \
    tree_nodes
from tracebench.diagnose._node import node_shape
from tracebench.diagnose._rules import Downgrades
from tracebench.diagnose._tree import grow_tree, tree_shape, unbound
from tracebench.formula import (Anchor, AnchorBinding, Apply, Compose, Disentangle, DisentangleBinding, Expr, Text,
                                analyze, template_of, to_text)
from tracebench.sample import read_cases


@st.composite
def bound_exprs(draw) -> Expr:
    """A valid formula numbered with scattered numbers (``f1`` next to ``f12``), some of its
    terms bound or described: the tree must not depend on how the bindings print or sort."""
    numbers: dict[tuple, set[int]] = {}

    def number(family: tuple) -> int:
        taken = numbers.setdefault(family, set())
        index = draw(st.integers(1, 40).filter(lambda n: n not in taken))
        taken.add(index)
        return index

    def bind(node: Expr) -> Expr:
        if isinstance(node, Compose):
            return Compose(tuple(bind(a) for a in node.args), number(("C",)))
        if isinstance(node, Apply):
            return Apply(bind(node.carrier), tuple(bind(m) for m in node.modifiers))
        if isinstance(node, Anchor):
            binding = draw(st.none() | st.builds(AnchorBinding, images, labels))
            return Anchor(number(("f",)), binding)
        if isinstance(node, Disentangle):
            binding = draw(st.none() | st.builds(DisentangleBinding, images, st.lists(labels, max_size=2).map(tuple),
                                                 attributes))
            return Disentangle(node.kind, number(("g", node.kind)), binding)
        return Text(node.name, number(("T", node.name)), draw(st.none() | labels))

    return bind(draw(valid_exprs()))


@given(bound_exprs(), labels, st.booleans())
def test_a_tree_from_its_shape_is_the_tree_of_the_bound_formula(expr, words, paper_stop):
    describe = lambda symbol: f"{words} {symbol}"  # noqa: E731  (without: tests/test_diagnose.py's trees)
    root = number_terms(expr)
    direct = grow_tree(root, Downgrades.of(root, describe), paper_stop=paper_stop)  # the rules on the bound formula
    graph = build_tree(expr, describe=describe, paper_stop=paper_stop)
    nodes = tree_nodes(graph)
    assert [n.to_json() for n in nodes] == [n.to_json() for n in direct]
    assert [n.formula for n in nodes] == [n.formula for n in direct]
    assert graph.graph["downgrades"] == Downgrades.of(root, describe)
    assert [(u, v, d["rule"]) for u, v, d in graph.edges(data=True)] == [(n.parent, n.id, n.rule) for n in direct[1:]]
    # memoized by the unbound formula and the stop rule, whatever the call form
    assert graph.graph["shape"] is tree_shape(unbound(root), paper_stop=paper_stop)
    assert graph.graph["shape"] is tree_shape(unbound(root), False, paper_stop)


@given(bound_exprs())
def test_the_structural_part_of_a_sub_case_ignores_bindings(expr):
    for node in tree_nodes(build_tree(expr)):
        shape = node_shape(unbound(node.formula))
        assert shape.kept == {t.symbol for t in analyze(node.formula) if t.op in ("f", "g")}
        assert shape.compositions == compositions_of(node.formula)
        assert shape.template == to_text(template_of(node.formula))


@pytest.mark.parametrize("paper_stop", [True, False], ids=["first-pass", "rates"])
def test_planned_sub_cases_are_the_sub_cases_of_the_bound_trees(diagnosis_bench, paper_stop):
    """plan_trees (shapes memoized across cases) against each case's tree grown on its own
    bound formula, with each node's case made from scratch; the trees of either method."""
    cases = list(read_cases(diagnosis_bench))
    plan = plan_trees(cases, paper_stop=paper_stop)
    assert len({unbound(number_terms(root_formula(c))) for c in cases}) < len(cases)  # some shapes are shared
    assert len(plan.trees) == len(cases)
    for case, tree in zip(cases, plan.trees):
        terms = {t.symbol: t for t in case.terms}
        describe = lambda s: terms[s].value if s in terms else None  # noqa: E731
        root = number_terms(root_formula(case))
        dg = Downgrades.of(root, describe)
        direct = grow_tree(root, dg, paper_stop=paper_stop)
        assert [n.to_json() for n in tree.nodes] == [n.to_json() for n in direct]
        for node in direct:
            if node.same_as is not None or node.parent is None:
                continue
            sub = plan.cases[tree.keys[node.id]]
            fresh = node_case(case, node, dg, sub.id)
            assert fresh.model_dump_json() == sub.model_dump_json()


def _modules_after(code: str) -> set[str]:
    probe = "import sys\n" + code + "\nprint(' '.join(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.splitlines()[-1].split())  # the last line: what the code printed comes first


HEAVY = {"scipy", "numpy", "sympy", "sklearn", "matplotlib", "openai"}


def test_trace_diagnose_imports_no_scientific_stack_before_its_first_call():
    loaded = _modules_after("import tracebench.cli, tracebench.cli.diagnose\n"
                            "from tracebench.diagnose import diagnose_run, export_nodes, format_summary")
    assert "tracebench.diagnose._diagnose" in loaded
    assert loaded & HEAVY == set()


@pytest.mark.parametrize("formula", ["C(f1, f2 + g1) + g_style", "f"])
def test_a_dry_run_imports_neither_the_run_harness_nor_the_records(formula):
    loaded = _modules_after("import runpy\n"
                            f"sys.argv = ['trace', 'diagnose', '--formula', {formula!r}, '--dry-run']\n"
                            "try:\n    runpy.run_module('tracebench', run_name='__main__')\n"
                            "except SystemExit as exit:\n    assert not exit.code, exit.code\n")
    assert "tracebench.diagnose._tree" in loaded
    # tracebench.providers itself is names imported on first use (the command line's help reads its scheme table)
    assert loaded & ({"tracebench.run", "tracebench.records", "tracebench.providers._base", "tracebench.diagnose._diagnose",
                      "pydantic", "jinja2", "PIL"} | HEAVY) == set()


def test_the_package_names_resolve_on_first_use():
    import tracebench.diagnose as diagnose

    namespace: dict = {}
    exec("from tracebench.diagnose import *", namespace)
    assert set(diagnose.__all__) <= set(namespace) and "plan_trees" in dir(diagnose)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        diagnose.nonexistent  # noqa: B018
