"""Structural rules of the language, the role of every term, slot count and depth.

One walk does both validation and role assignment, because where a term may act and
which role it plays are the same question (a ``g_color`` applied to the whole scene is a
global color tone; applied to an entity it is that entity's color).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..operators import LOCAL_ROLES, Family, Role
from ._ast import Anchor, Apply, Compose, Disentangle, Expr, Node, Text
from ._errors import FormulaConstraintError
from ._language import Language, language
from ._printer import symbol

__all__ = ["Term", "analyze", "design_conflict", "slot_count", "compose_depth"]


def design_conflict(carrier: str) -> str:
    """Why a carrier may not take two g_ip terms (formula validation and the case reader)."""
    return f"two g_ip designs applied to one carrier {carrier!r}: a carrier takes one design"


@dataclass(frozen=True, slots=True)
class Term:
    """One f, g or T term of a formula, in order of appearance."""

    node: Anchor | Disentangle | Text
    op: Family  # f, g or T
    role: Role
    carrier: Expr | None  # what a modifier is bound to; None for an unbound term

    @property
    def symbol(self) -> str:
        return symbol(self.node)

    @property
    def kind(self) -> str | None:
        if isinstance(self.node, Disentangle):
            return self.node.kind
        if isinstance(self.node, Text):
            return self.node.name
        return None

    def to_json(self) -> dict[str, Any]:
        node = self.node
        binding: dict[str, Any] | None = None
        if isinstance(node, Anchor) and node.binding is not None:
            binding = {"image": node.binding.image, "entity": node.binding.entity}
        elif isinstance(node, Disentangle) and node.binding is not None:
            binding = {"image": node.binding.image, "entities": list(node.binding.entities),
                       "attribute": node.binding.attribute}
        elif isinstance(node, Text) and node.description is not None:
            binding = {"description": node.description}
        return {"symbol": self.symbol, "op": self.op, "kind": self.kind, "role": self.role,
                "index": node.index, "binding": binding, "column": node.column}


def slot_count(expr: Expr) -> int:
    """``slot(F) = |f| + |g|``: anchored terms plus disentangled terms of any kind."""
    if isinstance(expr, (Anchor, Disentangle)):
        return 1
    if isinstance(expr, Compose):
        return sum(slot_count(a) for a in expr.args)
    if isinstance(expr, Apply):
        return slot_count(expr.carrier) + sum(isinstance(m, Disentangle) for m in expr.modifiers)
    return 0


def compose_depth(expr: Node) -> int:
    """Nesting levels of C (0 for a formula without composition)."""
    if isinstance(expr, Compose):
        return 1 + max(compose_depth(a) for a in expr.args)
    if isinstance(expr, Apply):
        return compose_depth(expr.carrier)
    return 0


def analyze(expr: Expr, lang: Language | None = None) -> tuple[Term, ...]:
    """Check the structural rules and return every term with its role.

    Raises :class:`FormulaConstraintError` (with the column of the offending term) when
    a rule is broken.
    """
    walker = _Walker(lang or language())
    walker.visit(expr, depth=0, at_top=True)
    walker.check_numbering()
    return tuple(walker.terms)


def _fail(node: Node, message: str) -> FormulaConstraintError:
    return FormulaConstraintError(message, column=node.column, line=node.line)


class _Walker:
    def __init__(self, lang: Language) -> None:
        self.lang = lang
        self.terms: list[Term] = []

    def visit(self, node: Expr, *, depth: int, at_top: bool) -> None:
        if isinstance(node, Anchor):
            self.terms.append(Term(node, Family.ANCHOR, Role.ANCHOR, None))
        elif isinstance(node, Text):
            role = self.lang.texts[node.name].role
            if role == Role.RELATION:
                raise _fail(node, f"{symbol(node)} is a relation: apply it to a composition, C(f1, f2) ⊕ {symbol(node)}")
            self.terms.append(Term(node, Family.TEXT, Role(role), None))
        elif isinstance(node, Compose):
            if depth + 1 > self.lang.max_compose_depth:
                raise _fail(node, f"C nested {depth + 1} levels deep; at most {self.lang.max_compose_depth} levels of C are allowed")
            for arg in node.args:
                self.visit(arg, depth=depth + 1, at_top=False)
        elif isinstance(node, Apply):
            self.visit(node.carrier, depth=depth, at_top=at_top)
            design = None
            for modifier in node.modifiers:
                term = self._modifier(modifier, node.carrier, at_top)
                if term.role is Role.IP:
                    if design is not None:
                        raise _fail(modifier, design_conflict(symbol(node.carrier)))
                    design = term
                self.terms.append(term)
        else:  # pragma: no cover - the AST types exclude it
            raise TypeError(f"not a formula node: {type(node).__name__}")

    def _modifier(self, modifier: Node, carrier: Expr, at_top: bool) -> Term:
        # symbol() only runs on the error paths: this is on the parser's hot path
        if isinstance(modifier, Disentangle) and modifier.binding is not None and not modifier.binding.attribute.strip():
            name = symbol(modifier)
            raise _fail(modifier, f"{name} names no attribute: write the attribute it extracts, e.g. {name}(I1, pattern)")
        if isinstance(modifier, Text):
            if self.lang.texts[modifier.name].role != Role.RELATION:
                raise _fail(modifier, f"{symbol(modifier)} cannot be applied with ⊕: only g terms and T_rel modify a carrier")
            self._check_relation_carrier(modifier, carrier)
            return Term(modifier, Family.TEXT, Role.RELATION, carrier)
        roles = self.lang.kind_roles(modifier.kind)
        if Role.RELATION in roles:
            self._check_relation_carrier(modifier, carrier)
            return Term(modifier, Family.DISENTANGLE, Role.RELATION, carrier)
        scene_level = at_top and isinstance(carrier, Compose)
        if Role.GLOBAL in roles and (scene_level or (at_top and roles == {Role.GLOBAL})):
            return Term(modifier, Family.DISENTANGLE, Role.GLOBAL, carrier)
        if roles == {Role.GLOBAL}:
            raise _fail(modifier, f"{symbol(modifier)} is a global condition: apply it to the whole formula, not inside C(...)")
        if isinstance(carrier, Compose):
            raise _fail(modifier, f"{symbol(modifier)} binds to one entity, not to a composition: apply it to an entity inside C(...)")
        local_role = next(r for r in LOCAL_ROLES if r in roles)
        return Term(modifier, Family.DISENTANGLE, local_role, carrier)

    def _check_relation_carrier(self, modifier: Node, carrier: Expr) -> None:
        need = self.lang.min_relation_arguments
        if not isinstance(carrier, Compose) or len(carrier.args) < need:
            raise _fail(modifier, f"a relation ({symbol(modifier)}) applies to a composition of at least {need} entities, as in C(f1, f2) ⊕ {symbol(modifier)}")

    def check_numbering(self) -> None:
        """A numbered symbol names one term: ``f1`` may not appear twice."""
        seen: dict[tuple, Node] = {}
        for term in self.terms:
            node = term.node
            if node.index is None:
                continue
            key = (term.op, term.kind, node.index)
            if key in seen:
                first = seen[key]
                where = f" (first at column {first.column})" if first.column is not None else ""
                raise _fail(node, f"{term.symbol} appears twice{where}; number each term once")
            seen[key] = node
