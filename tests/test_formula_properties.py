"""Property tests over the formula grammar and AST."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import assume, example, given, strategies as st
from hypothesis.extra.lark import from_lark
from lark import Lark, Token
from lark.exceptions import UnexpectedInput

from strategies import KINDS, LANG, any_exprs, shuffled, valid_exprs
from tracebench.formula import (
    Anchor,
    Apply,
    Disentangle,
    DisentangleBinding,
    FormulaConstraintError,
    FormulaError,
    FormulaSyntaxError,
    Text,
    analyze,
    canonical,
    parse,
    parse_syntax,
    slot_count,
    symbol,
    template_of,
    to_text,
)
from tracebench.formula._grammar import GRAMMAR_FILE, lark_options, split_index, terminal, tree_parser
from tracebench.formula._language import check_spellings, load_language
from tracebench.resources import read_text, read_toml
from tracebench.taxonomy import taxonomy

# Symbols the grammar's regexes allow but the vocabulary does not know are a vocabulary
# error, not a syntax one: draw g kinds, text names and category words from the taxonomy.
_G_SPELLINGS = ["g"] + [f"g_{s}" for s in LANG.kind_aliases]
_T_SPELLINGS = ["Te"] + [f"T_{n}" for n in LANG.texts]
_grammar_strings = from_lark(
    # built from the grammar text: Hypothesis reads the grammar's rules, which a parser loaded
    # from the parse-table cache (tracebench.derived) does not keep
    Lark(read_text("grammar", GRAMMAR_FILE), **lark_options()),
    explicit={
        "GSYM": st.tuples(st.sampled_from(_G_SPELLINGS), st.sampled_from(["", "1", "2", "12"])).map("".join),
        "TSYM": st.tuples(st.sampled_from(_T_SPELLINGS), st.sampled_from(["", "1", "3"])).map("".join),
        "KIND": st.sampled_from(sorted(taxonomy().category_words)),  # f(person): the words of the categories
    },
)


@given(_grammar_strings)
def test_strings_generated_from_the_grammar_parse(text):
    # the grammar's numbers are unbounded; the language reads at most max_number_digits digits
    # (grammar/language.toml; tests/test_hostile_bounds.py checks the refusal)
    assume(not re.search(r"\d{%d,}" % (LANG.max_number_digits + 1), text) and len(text) <= LANG.max_formula_length)
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


# ---- the grammar is the one source of spellings: what the printer and the AST accept, and
# what error messages suggest, the grammar reads

_SYMBOL_LIKE_WORDS = ["I2", "I10", "f1", "g", "g_style", "C3", "Te", "T_rel", "e"]


@given(st.from_regex(terminal("WORD"), fullmatch=True) | st.sampled_from(_SYMBOL_LIKE_WORDS))
def test_an_attribute_the_grammar_reads_as_a_word_is_printed_bare_and_reads_back(word):
    expr = Apply(Anchor(1), (Disentangle(None, 2, DisentangleBinding(1, (), word)),))
    text = to_text(expr)
    assert text == f"f1 ⊕ g2(I1, {word})"  # no quotes where the grammar needs none
    assert parse_syntax(text) == expr


_names = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="_"), max_size=6)


def _read_back(spelling: str, terminal_name: str) -> bool:
    """Whether the grammar reads ``spelling``, in a formula, as one token of that terminal."""
    try:
        tree = tree_parser().parse(f"C(f, {spelling})" if terminal_name == "TSYM" else f"f ⊕ {spelling}")
    except UnexpectedInput:
        return False
    tokens = tree.scan_values(lambda v: isinstance(v, Token) and v.type == terminal_name)
    return [str(t) for t in tokens] == [spelling]


@given(_names, st.none() | st.integers(0, 40))
@example("é", None)  # a lowercase letter, but not one the grammar's GSYM knows
@example("a1", 3)  # would read back as g_a numbered 13
def test_the_ast_takes_exactly_the_g_kinds_it_can_print(kind, index):
    try:
        node = Disentangle(kind, index)
    except ValueError:
        node = None
    bare, numbered = f"g_{kind}", f"g_{kind}{7 if index is None else index}"
    writable = all(_read_back(s, "GSYM") and split_index(s)[0] == bare for s in (bare, numbered)) and bool(kind)
    assert (node is not None) == writable, (kind, index)
    if node is not None:
        assert _read_back(symbol(node), "GSYM")


@given(_names)
@example("a_b")  # a T name with an underscore: TSYM reads T_a, then stops
def test_the_ast_takes_exactly_the_text_names_it_can_print(name):
    try:
        node = Text(name, 4)
    except ValueError:
        node = None
    bare = f"T_{name}"
    writable = bool(name) and all(_read_back(s, "TSYM") and split_index(s)[0] == bare for s in (bare, bare + "4"))
    assert (node is not None) == writable, name
    if node is not None:
        assert _read_back(symbol(node), "TSYM")


_HINTS = [
    (re.compile(r"'(.+)' needs a carrier: write f ⊕ \1 or T_e ⊕ \1$"), ("f ⊕ {}", "T_e ⊕ {}")),
    (re.compile(r"'(.+)' cannot be bound with ⊕.* write C\(\.\.\., \1\)$"), ("C(f, {})",)),
]


@given(st.text(alphabet="fgCTeIa_1", min_size=1, max_size=6),
       st.sampled_from(["{}", "{} ⊕ f", "f ⊕ {}", "C(f, {})", "C(f {})", "C({}, f)"]))
@example("g__", "{}")  # a WORD the grammar does not read as a g term
@example("g_a_", "C({}, f)")
def test_error_messages_only_suggest_formulas_the_grammar_reads(word, context):
    try:
        parse_syntax(context.format(word))
    except FormulaSyntaxError as err:
        message = str(err).split(": ", 1)[1]
        for pattern, suggestions in _HINTS:
            match = pattern.match(message)
            if match:
                for suggestion in suggestions:
                    tree_parser().parse(suggestion.format(match.group(1)))  # raises if not


@pytest.mark.parametrize("edit,message", [
    (lambda raw: raw["kinds"]["pattern"].update(aliases=["3d"]), "kind spelling '3d' cannot be written"),
    (lambda raw: raw["kinds"]["pattern"].update(aliases=["tone2"]), "kind spelling 'tone2' cannot be written"),
    (lambda raw: raw["text"].update({"a_b": {"role": "text"}}), "text symbol 'a_b' cannot be written"),
])
def test_a_vocabulary_the_grammar_cannot_write_is_refused(edit, message):
    raw = json.loads(json.dumps(read_toml("taxonomy", "kinds.toml")))
    limits = read_toml("grammar", "language.toml")
    check_spellings(load_language(raw, limits))  # the shipped vocabulary is writable
    edit(raw)
    with pytest.raises(ValueError, match=re.escape(message)):
        check_spellings(load_language(raw, limits))
