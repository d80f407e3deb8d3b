"""The template space: enumeration and generating function agree, and every template is sound."""

from __future__ import annotations

import dataclasses

import pytest

from test_formula_language import PAPER_TABLE_5
from tracebench.formula import Apply, Compose, Disentangle, analyze, canonical, compose_depth, parse, slot_count, template_of, walk
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
            relations = [n for n in walk(template) if isinstance(n, Disentangle) and n.kind == "rel"]
            globals_ = [n for n in walk(template) if isinstance(n, Disentangle) and n.kind == "global"]
            assert len(relations) <= bounds.max_relation_terms
            assert len(globals_) <= bounds.max_global_terms
            for node in walk(template):
                if isinstance(node, Compose):
                    assert 2 <= len(node.args) <= bounds.max_args_per_composition
                if isinstance(node, Apply) and not isinstance(node.carrier, Compose):
                    local = [m for m in node.modifiers if m.kind != "global"]
                    assert len(local) <= bounds.max_attributes_per_carrier


def test_paper_templates_are_in_the_space(space):
    for slot, formulas in PAPER_TABLE_5.items():
        for formula in formulas:
            assert canonical(parse(formula)) in space[slot], formula


def test_space_counts_per_slot(space):
    # Pinned so a change of templates/space.toml is a visible decision (docs/formula-language.md).
    assert [len(space[s]) for s in range(1, 9)] == [4, 23, 105, 441, 1814, 7462, 29927, 115744]
