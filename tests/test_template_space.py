"""The template space: enumeration and generating function agree, and every template is sound."""

from __future__ import annotations

import dataclasses

import pytest

from test_formula_language import PAPER_TABLE_5
from tracebench.formula import Apply, Compose, Disentangle, FormulaError, analyze, canonical, compose_depth, parse, slot_count, template_of, walk
from tracebench.formula._space import count_by_generating_function, enumerate_templates, space_bounds


@pytest.fixture(scope="module")
def space():
    return enumerate_templates()


def test_enumeration_matches_the_generating_function(space):
    assert {s: len(ts) for s, ts in space.items()} == count_by_generating_function()


@pytest.mark.parametrize(
    "change",
    [
        {"max_args_per_composition": 3},
        {"max_attributes_per_carrier": 1},
        {"max_global_terms": 0, "max_relation_terms": 1},
        {"attribute_kinds": ("g",)},
        {"max_relation_terms": 0, "max_slot": 6},
        {"once_per_carrier": ()},
        {"once_per_carrier": ("g_attach", "g_ip")},
        {"once_per_carrier": ("g_ip",), "max_attributes_per_carrier": 2, "max_slot": 6},
    ],
)
def test_the_two_methods_agree_under_other_bounds(change):
    bounds = dataclasses.replace(space_bounds(), **change)
    enumerated = enumerate_templates(bounds=bounds)
    assert {s: len(ts) for s, ts in enumerated.items()} == count_by_generating_function(bounds)


@pytest.mark.slow
def test_every_template_is_valid_canonical_and_within_bounds(space):
    bounds = space_bounds()
    for slot, templates in space.items():
        for template in templates:
            assert slot_count(template) == slot
            analyze(template)
            assert canonical(template) == template
            assert template_of(template) == template
            assert compose_depth(template) <= 2
            nodes = list(walk(template))  # walked once for the three checks below
            relations = [n for n in nodes if isinstance(n, Disentangle) and n.kind == "rel"]
            globals_ = [n for n in nodes if isinstance(n, Disentangle) and n.kind == "global"]
            assert len(relations) <= bounds.max_relation_terms
            assert len(globals_) <= bounds.max_global_terms
            for node in nodes:
                if isinstance(node, Compose):
                    assert 2 <= len(node.args) <= bounds.max_args_per_composition
                if isinstance(node, Apply) and not isinstance(node.carrier, Compose):
                    local = [m for m in node.modifiers if m.kind != "global"]
                    assert len(local) <= bounds.max_attributes_per_carrier
                    assert sum(m.kind == "ip" for m in local) <= 1, template  # one design per carrier


def test_paper_templates_are_in_the_space(space):
    for slot, formulas in PAPER_TABLE_5.items():
        for formula in formulas:
            assert canonical(parse(formula)) in space[slot], formula


def test_space_counts_per_slot(space):
    # Pinned so a change of templates/space.toml is a visible decision (docs/formula-language.md).
    assert [len(space[s]) for s in range(1, 9)] == [4, 22, 96, 390, 1547, 6144, 23710, 87659]


def test_the_space_without_the_one_design_rule_holds_the_double_designs_too():
    """once_per_carrier takes out exactly the templates with a carrier of two g_ip terms."""
    loose = enumerate_templates(6, bounds=dataclasses.replace(space_bounds(), once_per_carrier=()))
    strict = enumerate_templates(6)

    def doubled(template):
        return any(isinstance(n, Apply) and sum(isinstance(m, Disentangle) and m.kind == "ip" for m in n.modifiers) > 1
                   for n in walk(template))

    for slot in loose:
        kept = [t for t in loose[slot] if not doubled(t)]
        assert kept == list(strict[slot]), slot
    assert sum(map(doubled, loose[4])) == 51  # f ⊕ g_ip ⊕ g_ip and what contains it


@pytest.mark.parametrize("text,carrier", [
    ("f ⊕ g_ip ⊕ g_ip", "f"),
    ("C(f1, T_e1 ⊕ g ⊕ g_ip ⊕ g_ip) ⊕ g_rel", "T_e1"),
    ("C(f1 ⊕ g_ip1 ⊕ g_attach1 ⊕ g_ip2, f2)", "f1"),
])
def test_validation_refuses_two_designs_on_one_carrier(text, carrier):
    with pytest.raises(FormulaError) as refused:
        parse(text)
    message = str(refused.value)
    assert message.startswith("formula column ") and "\n" not in message
    assert message.endswith(f"two g_ip designs applied to one carrier {carrier!r}: a carrier takes one design")


def test_one_design_per_carrier_is_still_valid():
    for text in ("f ⊕ g_ip ⊕ g_attach ⊕ g_attach", "C(f ⊕ g_ip, T_e ⊕ g_ip)", "C(f1 ⊕ g_ip1, f2 ⊕ g_ip2)"):
        analyze(parse(text))
