"""The formula language: parse, validate, print, canonicalize, count.

>>> from tracebench.formula import parse, to_text, slot_count
>>> f = parse("C(f1, T_e + g1 + g2) + g_global")
>>> slot_count(f), to_text(f)
(4, 'C(f1, T_e ⊕ g1 ⊕ g2) ⊕ g_global')
"""

from __future__ import annotations

from ._analysis import Term, analyze, compose_depth, design_conflict, slot_count
from ._ast import (
    Anchor,
    AnchorBinding,
    Apply,
    Compose,
    Disentangle,
    DisentangleBinding,
    Expr,
    Modifier,
    Node,
    Text,
    relabel_images,
    walk,
)
from ._canonical import canonical, template_of
from ._errors import FormulaConstraintError, FormulaError, FormulaSyntaxError
from ._language import ROLES, Language, category_words, language
from ._parser import lark_parser, parse_syntax
from ._printer import symbol, to_text
from ._space import (SpaceBounds, count_by_generating_function, decode_template, encode_template, enumerate_templates,
                     space_bounds, space_by_slot, template_counts, templates)

__all__ = [
    "Anchor",
    "AnchorBinding",
    "Apply",
    "Compose",
    "Disentangle",
    "DisentangleBinding",
    "Expr",
    "relabel_images",
    "FormulaConstraintError",
    "FormulaError",
    "FormulaSyntaxError",
    "Language",
    "Modifier",
    "Node",
    "ROLES",
    "SpaceBounds",
    "Term",
    "Text",
    "analyze",
    "canonical",
    "category_words",
    "compose_depth",
    "count_by_generating_function",
    "decode_template",
    "design_conflict",
    "describe_formula",
    "encode_template",
    "enumerate_templates",
    "language",
    "lark_parser",
    "parse",
    "parse_syntax",
    "slot_count",
    "space_bounds",
    "space_by_slot",
    "symbol",
    "template_counts",
    "template_of",
    "templates",
    "to_text",
    "walk",
]


def parse(text: str, *, validate: bool = True) -> Expr:
    """Parse a formula; with ``validate`` (the default) also check the language's rules.

    Raises :class:`FormulaSyntaxError` or :class:`FormulaConstraintError`, both
    :class:`FormulaError`, with the column of the problem.
    """
    expr = parse_syntax(text)
    if validate:
        analyze(expr)
    return expr


def describe_formula(text: str) -> dict:
    """Everything ``trace parse --json`` reports about a formula: canonical form (Unicode and
    ASCII), template, slot count, composition depth and each term's role."""
    expr = parse_syntax(text)
    terms = analyze(expr)  # validates
    canon = canonical(expr)
    return {
        "canonical": to_text(canon),
        "ascii": to_text(canon, ascii=True),
        "template": to_text(template_of(expr)),
        "slots": slot_count(expr),
        "depth": compose_depth(expr),
        "terms": [t.to_json() for t in terms],
    }
