"""What a library can supply to binding, and what a template needs of it.

A *need* is one (kind, role) pair of a template's g terms: ``(None, "local")`` for the plain
``g`` on an entity, ``("attach", "attach")``, ``("rel", "relation")``, ``("style", "global")``.
A library that holds nothing that can be bound to a need has a :class:`Gap`; ``trace sample``
leaves out the templates and application formulas with such a need (``--strict``: refuses).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..formula import Apply, Compose, Disentangle, Expr, analyze, language, parse, space_bounds
from ..operators import Role
from ._bind import supplied_by
from ._index import LibraryIndex

__all__ = ["Gap", "Need", "library_gaps", "needs_of", "space_needs"]

Need = tuple[str | None, str]  # (g kind, role)


@dataclass(frozen=True)
class Gap:
    """A need the library cannot supply: the family of terms that has it, and why."""

    need: Need
    missing: str  # what the library lacks, in words
    field: str  # the tag field that would supply it

    @property
    def family(self) -> str:
        kind = self.need[0]
        return "g" if kind is None else f"g_{kind}"

    @property
    def reason(self) -> str:
        return f"the library has {self.missing} (tag field: {self.field})"


def _gap(index: LibraryIndex, need: Need) -> Gap | None:
    kind, role = need
    specs, field = supplied_by(kind, role)
    keys = [s.key for s in specs]
    if role == Role.RELATION:
        if index.relations:
            return None
        return Gap(need, f"no image tagged {' or '.join(keys)}", field)
    if specs and specs[0].record == "usable_as":
        if any(index.by_use.get(k) for k in keys):
            return None
        return Gap(need, f'no entity with usable_as "{keys[0]}"', field)
    if role == Role.GLOBAL:
        if any(index.globals_by_subtype.get(k) for k in keys):
            return None
        if len(keys) > 2:
            return Gap(need, "no image-level tag or background", field)
        tagged = [s.key for s in specs if s.record == "global_tag"]
        return Gap(need, f"no image tagged {' or '.join(tagged)}" if tagged else "no image with a background", field)
    if any(index.by_subtype.get(k) for k in keys):
        return None
    return Gap(need, "no entity with an attribute tag" if len(keys) > 2
               else f"no entity tagged {' or '.join(keys)}", field)


def library_gaps(index: LibraryIndex, needs) -> dict[Need, Gap]:
    """The needs among ``needs`` that ``index`` cannot supply, in the order given."""
    gaps = {}
    for need in dict.fromkeys(needs):
        gap = _gap(index, need)
        if gap is not None:
            gaps[need] = gap
    return gaps


def needs_of(template: Expr, memo: dict | None = None) -> frozenset[Need]:
    """Every (kind, role) of the g terms of ``template``.

    ``memo`` (keyed by object identity, as the template space shares subexpressions) makes a
    walk over a whole slot level cheap; a kind whose role depends on where it stands (color)
    is settled by validation.
    """
    needs = _needs(template, {} if memo is None else memo)
    if any(role is None for _, role in needs):
        return frozenset((t.kind, str(t.role)) for t in analyze(template) if isinstance(t.node, Disentangle))
    return needs


def _needs(node, memo: dict) -> frozenset:
    """The needs under ``node``; a kind of several roles as (kind, None)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    if isinstance(node, Disentangle):
        roles = language().kind_roles(node.kind)
        result = frozenset(((node.kind, next(iter(roles)) if len(roles) == 1 else None),))
    elif isinstance(node, (Compose, Apply)):
        result = frozenset()
        for child in (node.args if isinstance(node, Compose) else (node.carrier, *node.modifiers)):
            result |= _needs(child, memo)
    else:
        result = frozenset()
    memo[id(node)] = result
    return result


@cache
def space_needs() -> tuple[Need, ...]:
    """The needs the templates of templates/space.toml can have (from its bounds, not its
    templates): each attribute kind on an entity, g_rel, g_global."""
    bounds = space_bounds()
    formulas = [f"f ⊕ {k}" for k in bounds.attribute_kinds]
    if bounds.max_relation_terms:
        formulas.append("C(f, f) ⊕ g_rel")
    if bounds.max_global_terms:
        formulas.append("C(f, f) ⊕ g_global")
    needs = []
    for text in formulas:
        term = analyze(parse(text))[-1]
        needs.append((term.kind, str(term.role)))
    return tuple(dict.fromkeys(needs))
