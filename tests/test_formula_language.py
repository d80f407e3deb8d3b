"""The paper's examples (TRACE-Bench, arXiv 2608.16765: formulas, diagnostic trees, applications) and every rule of the language."""

from __future__ import annotations

import pytest

from tracebench.errors import TraceError
from tracebench.formula import (
    Anchor,
    AnchorBinding,
    Apply,
    Compose,
    Disentangle,
    DisentangleBinding,
    FormulaConstraintError,
    FormulaError,
    FormulaSyntaxError,
    Text,
    analyze,
    canonical,
    compose_depth,
    parse,
    slot_count,
    template_of,
    to_text,
)

# TRACE-Bench, arXiv 2608.16765, Table 5: templates by slot level, as the paper writes them.
PAPER_TABLE_5 = {
    1: ["Te⊕g", "f"],
    2: ["C(f, Te⊕g)", "f⊕g", "Te⊕g⊕g", "C(f, f)"],
    3: ["f⊕g⊕g", "C(f, Te⊕g)⊕g_global", "C(f, f)⊕g_global", "C(f, Te⊕g, Te⊕g)"],
    4: ["C(Te⊕g, f, f)⊕g_global", "C(Te⊕g, Te⊕g, f)⊕g_global", "C(f, f⊕g)⊕g_global"],
    5: ["C(Te⊕g, f, f, f)⊕g_global", "C(C(Te⊕g, f)⊕g_rel, f)⊕g_global"],
    6: ["C(C(f, f)⊕g_rel, Te⊕g⊕g)⊕g_global", "C(Te⊕g, f, f⊕g⊕g)⊕g_global"],
    7: ["C(C(f, f, f)⊕g_rel, f⊕g)⊕g_global"],
    8: ["C(C(Te⊕g, f⊕g)⊕g_rel, Te⊕g, f⊕g)⊕g_global"],
}


@pytest.mark.parametrize("slot,formula", [(s, f) for s, fs in PAPER_TABLE_5.items() for f in fs])
def test_paper_table_5_templates_have_their_slot_level(slot, formula):
    expr = parse(formula)
    assert slot_count(expr) == slot
    assert template_of(expr) == canonical(expr)  # already a template


@pytest.mark.parametrize(
    "formula,slots,depth",
    [
        ("C( C(f1, T_e ⊕ g1) ⊕ g_rel , f2 ⊕ g2 ⊕ g3 ) ⊕ g_global", 7, 2),  # the worked example
        ("C(f1, T_e ⊕ g1 ⊕ g2) ⊕ g_global", 4, 1),  # the slot-counting example
        ("C(f1 ⊕ g1)", 2, 1),  # single-argument C, as in the checklist example
        ("C(f1, f2, f3) ⊕ g_style", 4, 1),  # the diagnostic tree example, N0
        ("C(f1, f2, f3)", 3, 1),  # ... and N1
        ("f ⊕ g_attach ⊕ g_attach", 3, 0),  # virtual try-on (§10)
        ("T_e ⊕ g_ip", 1, 0),  # IP-style reference
        ("f ⊕ g_ip", 2, 0),
        ("C(T_s1 ⊕ g1, f1) ⊕ T_rel", 2, 1),  # text subject and text relation count zero
    ],
)
def test_paper_examples(formula, slots, depth):
    expr = parse(formula)
    assert slot_count(expr) == slots
    assert compose_depth(expr) == depth


def test_worked_example_ast_and_roles():
    expr = parse("C( C(f1, T_e ⊕ g1) ⊕ g_rel , f2 ⊕ g2 ⊕ g3 ) ⊕ g_global")
    assert expr == Apply(
        Compose((
            Apply(Compose((Anchor(1), Apply(Text("e"), (Disentangle(None, 1),)))), (Disentangle("rel"),)),
            Apply(Anchor(2), (Disentangle(None, 2), Disentangle(None, 3))),
        )),
        (Disentangle("global"),),
    )
    roles = [(t.symbol, t.op, t.role) for t in analyze(expr)]
    assert roles == [
        ("f1", "f", "anchor"), ("T_e", "T", "text"), ("g1", "g", "local"), ("g_rel", "g", "relation"),
        ("f2", "f", "anchor"), ("g2", "g", "local"), ("g3", "g", "local"), ("g_global", "g", "global"),
    ]


def test_bound_forms_parse_into_bindings():
    expr = parse('C(f1(I1, "dog plush"), T_e("a wizard") ⊕ g1(I2, {"robe"}, pattern)) '
                 '⊕ g_rel(I3, {"man", "glass"}, holding) + g_style(I4, style)')
    dog, wizard = expr.carrier.args
    assert dog == Anchor(1, AnchorBinding(1, "dog plush"))
    assert wizard == Apply(Text("e", None, "a wizard"), (Disentangle(None, 1, DisentangleBinding(2, ("robe",), "pattern")),))
    assert expr.modifiers == (
        Disentangle("rel", None, DisentangleBinding(3, ("man", "glass"), "holding")),
        Disentangle("style", None, DisentangleBinding(4, (), "style")),
    )
    # A single entity may be written without braces; quoted attributes keep any text.
    assert parse('f ⊕ g(I2, "robe", "red & gold \\"plaid\\"")') == parse('f ⊕ g(I2, {"robe"}, "red & gold \\"plaid\\"")')


@pytest.mark.parametrize(
    "a,b",
    [
        ("C(f1, f2)", "C(f2, f1)"),
        ("f1 ⊕ g1 ⊕ g2", "f1 ⊕ g2 ⊕ g1"),
        ("C(T_e ⊕ g, f) ⊕ g_global ⊕ g_rel", "C(f, T_e ⊕ g) ⊕ g_rel ⊕ g_global"),
        ("(f1 ⊕ g1) ⊕ g2", "f1 + g1 + g2"),
        ("Te ⊕ g", "T_e ⊕ g"),
        ("f ⊕ g_background", "f ⊕ g_bg"),
        ("C(C(f1, f2) ⊕ g_rel, f3)", "C(f3, C(f2, f1) ⊕ g_rel)"),
    ],
)
def test_spellings_of_one_formula_have_one_canonical_form(a, b):
    assert canonical(parse(a)) == canonical(parse(b))


def test_canonical_form_is_readable():
    assert to_text(canonical(parse("C(C(f, f)⊕g_rel, Te⊕g⊕g)⊕g_global"))) == "C(T_e ⊕ g ⊕ g, C(f, f) ⊕ g_rel) ⊕ g_global"
    assert to_text(canonical(parse("f ⊕ g_ip ⊕ g_attach ⊕ g"))) == "f ⊕ g ⊕ g_attach ⊕ g_ip"


def test_template_of_maps_kinds_to_template_symbols():
    expr = parse('C(f1(I1, "dog"), T_s1 ⊕ g_pattern(I2, pattern)) ⊕ g_rel1 ⊕ g_color ⊕ g_style')
    assert to_text(template_of(expr)) == "C(f, T_e ⊕ g) ⊕ g_rel ⊕ g_global ⊕ g_global"
    # color acts locally on an entity, globally on the whole scene
    assert to_text(template_of(parse("C(f ⊕ g_color, f)"))) == "C(f, f ⊕ g)"


def test_numbering_is_trailing_digits():
    expr = parse("f12 ⊕ g_attach1 ⊕ g_attach2")
    assert expr.carrier.index == 12
    assert [m.index for m in expr.modifiers] == [1, 2]
    assert to_text(expr) == "f12 ⊕ g_attach1 ⊕ g_attach2"


def test_whitespace_anywhere_between_tokens():
    assert parse(" C ( f1 ,\n\tT_e⊕g1 )⊕  g_global ") == parse("C(f1, T_e ⊕ g1) ⊕ g_global")


@pytest.mark.parametrize(
    "formula,column,fragment",
    [
        ("C(C(C(f1, f2) ⊕ g_rel, f3), f4)", 5, "at most 2 levels"),
        ("f1 ⊕ g_rel", 6, "relation"),
        ("C(f1) ⊕ g_rel", 9, "at least 2"),
        ("C(f1, f2 ⊕ T_rel)", 12, "relation"),
        ("T_rel", 1, "relation"),
        ("C(f1, f2) ⊕ g", 13, "not to a composition"),
        ("C(f1, f2) ⊕ g_attach", 13, "not to a composition"),
        ("C(f1 ⊕ g_style, f2)", 8, "global condition"),
        ("C(C(f1, f2) ⊕ g_global, f3)", 15, "global condition"),
        ("C(f1, f2 ⊕ g_color) ⊕ g_lighting", 12, None),  # valid: color is local on f2
        ("f1 ⊕ T_e", 6, "only g terms and T_rel"),
        ("C(f1, f1)", 7, "appears twice"),
        ("f1 ⊕ g1 ⊕ g1", 11, "appears twice"),
        ('f ⊕ g(I1, " ")', 5, "names no attribute"),
    ],
)
def test_constraint_violations_name_their_column(formula, column, fragment):
    if fragment is None:
        parse(formula)
        return
    with pytest.raises(FormulaConstraintError) as info:
        parse(formula)
    assert info.value.column == column
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"formula column {column}: ")
    # without validation the same text parses: it is a rule, not a syntax, violation
    parse(formula, validate=False)


@pytest.mark.parametrize(
    "formula,column,fragment",
    [
        ("", None, "empty formula"),
        ("   ", None, "empty formula"),
        ("g", 1, "needs a carrier"),
        ("C(g1, f2)", 3, "needs a carrier"),
        ("f1 ⊕", 5, "ends too early"),
        ("C()", 3, "unexpected ')'"),
        ("C(f1 f2)", 6, "separate the arguments"),
        ("f1 ⊕ f2", 6, "cannot be bound with ⊕"),
        ("f ⊕ g_foo", 5, "unknown g kind 'g_foo'"),
        ("T_x", 1, "unknown text symbol"),
        ("f1 $ g", 4, "unexpected character '$'"),
        ('f(I1, "unterminated)', 7, "unexpected character"),
        ("C(f1, f2", 9, "ends too early"),
    ],
)
def test_syntax_errors_name_their_column(formula, column, fragment):
    with pytest.raises(FormulaSyntaxError) as info:
        parse(formula)
    assert info.value.column == column
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_errors_are_trace_errors_and_report_lines_of_multiline_formulas():
    with pytest.raises(FormulaError) as info:
        parse("C(f1,\n  g2)")
    assert isinstance(info.value, TraceError)
    assert (info.value.line, info.value.column) == (2, 3)
    assert str(info.value).startswith("formula line 2, column 3: ")


def test_ast_is_immutable_and_hashable():
    expr = parse("C(f1, T_e ⊕ g1)")
    with pytest.raises(AttributeError):
        expr.args = ()
    assert len({expr, parse("C(f1,T_e+g1)")}) == 1  # positions do not take part in equality


@pytest.mark.parametrize(
    "build",
    [
        lambda: Apply(Apply(Anchor(), (Disentangle(),)), (Disentangle(),)),  # chains are flat
        lambda: Apply(Anchor(), ()),
        lambda: Compose(()),
        lambda: Compose((Disentangle(),)),  # a g term never stands alone
        lambda: Anchor(-1),
        lambda: Anchor(None, AnchorBinding(1, "two\nlines")),
        lambda: Disentangle("Not a kind"),
    ],
)
def test_ast_constructors_reject_malformed_nodes(build):
    with pytest.raises((TypeError, ValueError)):
        build()


@pytest.mark.parametrize("printed,normal", [
    ('T_e ⊕ g(I1, {robe}, pattern)', 'T_e ⊕ g(I1, {"robe"}, pattern)'),
    ('C(f1, f2) ⊕ g_rel(I3, {e_i, e_j}, a_rel)', 'C(f1, f2) ⊕ g_rel(I3, {"e_i", "e_j"}, a_rel)'),
    ('C(f1, f2) ⊕ g_rel(I3, {"the dog", e_j}, a_rel)', 'C(f1, f2) ⊕ g_rel(I3, {"the dog", "e_j"}, a_rel)'),
])
def test_the_papers_printed_set_members_parse(printed, normal):
    """The paper prints set members unquoted (§3, Eq. 2): they parse to the quoted form."""
    assert to_text(parse(printed)) == normal and parse(normal) == parse(printed)


def test_an_anchor_named_without_an_image_parses_and_prints_back():
    """The paper's f(person) (Eq. 3): an anchor named by the category of its entity."""
    expr = parse("f(person) ⊕ g_attach ⊕ g_attach")
    assert to_text(expr) == "f(person) ⊕ g_attach ⊕ g_attach" and parse(to_text(expr)) == expr
    assert parse("f(person)") != parse("f") and parse("f1(animal)").index == 1
    with pytest.raises(FormulaError, match=r"column 3: f\(robot\): no category is named 'robot'"):
        parse("f(robot)")
