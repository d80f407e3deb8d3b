"""Canonical forms: one spelling per formula, and the unbound template of a formula.

What the paper treats as unordered is sorted: the arguments of a ``C`` and the modifiers
of one carrier. The order is readable rather than arbitrary: arguments go anchors first,
then text entities, then subscenes; modifiers go in the order of taxonomy/kinds.toml
(attributes, then relations, then global conditions), each group by its printed form.
Bindings and numbering are kept, so a bound case keeps its meaning.

sympy's commutative operators could canonicalize too, but their order is an algebraic
one (it would print ``C(T_e ⊕ g, f)``-like forms arbitrarily) and building sympy
expressions costs far more than sorting tuples. sympy earns its place in counting the
template space instead (see ``_space.py``).
"""

from __future__ import annotations

from functools import lru_cache

from ..operators import Role
from ._analysis import analyze
from ._ast import Anchor, Apply, Compose, Disentangle, Expr, Modifier, Text
from ._language import language
from ._printer import to_text

__all__ = ["canonical", "template_of", "arg_sort_key", "modifier_sort_key"]

_CARRIER_RANK = {Anchor: 0, Text: 1, Compose: 2}


def arg_sort_key(expr: Expr) -> tuple[int, str]:
    base = expr.carrier if isinstance(expr, Apply) else expr
    return (_CARRIER_RANK[type(base)], to_text(expr, ascii=True))


def modifier_sort_key(modifier: Modifier) -> tuple[float, str]:
    lang = language()
    if isinstance(modifier, Disentangle):
        rank: float = lang.kind_order(modifier.kind)
    else:  # a text relation sorts right after g_rel
        rank = lang.kind_order("rel") + 0.5
    return (rank, to_text(modifier, ascii=True))


@lru_cache(maxsize=65536)
def canonical(expr: Expr) -> Expr:
    """The canonical AST: C arguments and modifier chains sorted; idempotent.

    Positions of sorted nodes no longer match any text, so C and Apply nodes of the
    result carry none.
    """
    if isinstance(expr, Compose):
        return Compose(tuple(sorted((canonical(a) for a in expr.args), key=arg_sort_key)), expr.index)
    if isinstance(expr, Apply):
        return Apply(canonical(expr.carrier), tuple(sorted(expr.modifiers, key=modifier_sort_key)))
    return expr


def template_of(expr: Expr) -> Expr:
    """The unbound template of a formula, in canonical form.

    Bindings and numbers are dropped; g terms become the template symbols of their role
    (``g`` for a local attribute, ``g_rel``, ``g_global``, ``g_attach``, ``g_ip``); text
    entities become ``T_e``.
    """
    roles = iter([term.role for term in analyze(expr)])  # in the order _strip meets the terms
    return canonical(_strip(expr, roles))


_TEMPLATE_KIND = {"local": None, "relation": "rel", "global": "global", "attach": "attach", "ip": "ip"}


def _strip(expr, roles):
    if isinstance(expr, Anchor):
        next(roles)
        return Anchor()
    if isinstance(expr, Disentangle):
        return Disentangle(_TEMPLATE_KIND[next(roles)])
    if isinstance(expr, Text):
        return Text("rel" if next(roles) == Role.RELATION else "e")
    if isinstance(expr, Compose):
        return Compose(tuple(_strip(a, roles) for a in expr.args))
    carrier = _strip(expr.carrier, roles)
    return Apply(carrier, tuple(_strip(m, roles) for m in expr.modifiers))
