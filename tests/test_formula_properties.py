"""Property tests over the formula grammar and AST."""

from __future__ import annotations

import re

from hypothesis import given, strategies as st
from hypothesis.extra.lark import from_lark

from strategies import KINDS, LANG, any_exprs, shuffled, valid_exprs
from tracebench.formula import (
    FormulaConstraintError,
    FormulaError,
    analyze,
    canonical,
    parse,
    parse_syntax,
    slot_count,
    template_of,
    to_text,
)
from tracebench.formula._parser import lark_parser

# Symbols the grammar's regexes allow but the vocabulary does not know are a vocabulary
# error, not a syntax one: draw g kinds and text names from the taxonomy.
_G_SPELLINGS = ["g"] + [f"g_{s}" for s in LANG.kind_aliases]
_T_SPELLINGS = ["Te"] + [f"T_{n}" for n in LANG.texts]
_grammar_strings = from_lark(
    lark_parser(build_ast=False),
    explicit={
        "GSYM": st.tuples(st.sampled_from(_G_SPELLINGS), st.sampled_from(["", "1", "2", "12"])).map("".join),
        "TSYM": st.tuples(st.sampled_from(_T_SPELLINGS), st.sampled_from(["", "1", "3"])).map("".join),
    },
)


@given(_grammar_strings)
def test_strings_generated_from_the_grammar_parse(text):
    expr = parse_syntax(text)
    assert parse_syntax(to_text(expr)) == expr
    try:
        analyze(expr)
    except FormulaConstraintError:
        pass  # the grammar is context-free; nesting and placement rules are checked after


@given(any_exprs)
def test_printer_round_trips_unicode_and_ascii(expr):
    assert parse_syntax(to_text(expr)) == expr
    assert parse_syntax(to_text(expr, ascii=True)) == expr


@given(valid_exprs())
def test_valid_formulas_parse_with_validation(expr):
    text = to_text(expr)
    assert parse(text) == expr
    assert slot_count(parse(text)) == slot_count(expr)


@given(valid_exprs(), st.randoms(use_true_random=False))
def test_canonical_form_ignores_argument_and_attribute_order(expr, random):
    permuted = shuffled(expr, random)
    assert canonical(permuted) == canonical(expr)
    assert to_text(canonical(permuted)) == to_text(canonical(expr))


@given(any_exprs)
def test_canonical_form_is_idempotent_and_keeps_slots(expr):
    once = canonical(expr)
    assert canonical(once) == once
    assert slot_count(once) == slot_count(expr)


@given(valid_exprs())
def test_template_of_is_a_fixed_point_and_keeps_slots(expr):
    template = template_of(expr)
    assert template_of(template) == template
    assert slot_count(template) == slot_count(expr)


_F_OR_G = re.compile(r"(?<![A-Za-z_])[fg](?:_[a-z]+)*[0-9]*(?![A-Za-z_])")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


@given(valid_exprs())
def test_slot_count_equals_number_of_f_and_g_symbols_in_the_text(expr):
    # Counted on the printed text (quoted descriptions removed), independently of the AST.
    assert slot_count(expr) == len(_F_OR_G.findall(_QUOTED.sub("", to_text(expr))))


_ALPHABET = list("()[]{},⊕+ \t\"\\fgCTeI_12") + ["g_rel", "T_rel", "C(", "⊕ g", "f(I1, \"x\")", "é", "\n"]


@st.composite
def mutated_formulas(draw):
    text = to_text(draw(valid_exprs()), ascii=draw(st.booleans()))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        if action == "insert":
            text = text[:pos] + draw(st.sampled_from(_ALPHABET)) + text[pos:]
        elif action == "delete":
            text = text[:pos] + text[pos + 1:]
        elif action == "replace":
            text = text[:pos] + draw(st.sampled_from(_ALPHABET)) + text[pos + 1:]
        else:
            end = draw(st.integers(pos, len(text)))
            text = text[:pos] + text[pos:end] + text[pos:]
    return text


@given(mutated_formulas())
def test_mutated_strings_parse_or_raise_formula_error(text):
    try:
        expr = parse(text)
    except FormulaError as err:
        assert "\n" not in str(err)
        if err.column is not None:
            assert err.column >= 1
        return
    assert parse(to_text(expr)) == expr


def test_the_taxonomy_kinds_all_reach_the_parser():
    for kind in KINDS:
        assert parse_syntax(f"f ⊕ g_{kind}1").modifiers[0].kind == kind
