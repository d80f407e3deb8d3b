"""The unbound template space: every template of slot 1..8 under templates/space.toml.

Two independent methods give its size per slot level:

- :func:`enumerate_templates` builds every template as an AST by the shapes of
  space.toml, canonicalizes it and collects it in a set (so a shape built twice would
  be counted once, and a canonicalization bug would show as a count mismatch);
- :func:`count_by_generating_function` never builds a template: it counts multisets
  with Pólya's exponential formula over sympy polynomials in ``x`` (slots) and ``r``
  (relation terms).

A test compares the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from itertools import combinations_with_replacement
from typing import Iterable, Iterator, Sequence


from ..resources import DataFile
from ._ast import Anchor, Apply, Compose, Disentangle, Expr, Text
from ._canonical import arg_sort_key, modifier_sort_key
from ._language import language

__all__ = ["SpaceBounds", "space_bounds", "enumerate_templates", "count_by_generating_function", "template_counts",
           "space_by_slot", "templates", "encode_template", "decode_template"]


_SPACE = DataFile("templates", "space.toml")


@dataclass(frozen=True, slots=True)
class SpaceBounds:
    """The bounds of templates/space.toml."""

    min_slot: int
    max_slot: int
    max_args_per_composition: int
    max_attributes_per_carrier: int
    max_global_terms: int
    max_relation_terms: int
    attribute_kinds: tuple[str, ...]
    once_per_carrier: tuple[str, ...] = ()  # of attribute_kinds: at most one per carrier


@cache
def space_bounds() -> SpaceBounds:
    raw = _SPACE.read()
    bound = lambda key: _SPACE.value("", raw, key, int)  # noqa: E731
    return SpaceBounds(
        min_slot=bound("min_slot"),
        max_slot=bound("max_slot"),
        max_args_per_composition=bound("max_args_per_composition"),
        max_attributes_per_carrier=bound("max_attributes_per_carrier"),
        max_global_terms=bound("max_global_terms"),
        max_relation_terms=bound("max_relation_terms"),
        attribute_kinds=_SPACE.strings("", raw, "attribute_kinds"),
        once_per_carrier=_SPACE.strings("", raw, "once_per_carrier", ()),
    )


def _attribute_term(spelled: str) -> Disentangle:
    """A kind of ``attribute_kinds`` as its term (``g``, ``g_attach``)."""
    if spelled == "g":
        return Disentangle()
    kind = language().resolve_kind(spelled.removeprefix("g_"))
    if kind is None:
        raise _SPACE.error(f"unknown attribute kind {spelled!r}", "", "attribute_kinds")
    return Disentangle(kind)


# Items of the enumeration carry their slot and relation counts, so sizes are added up
# rather than recounted, and their canonical sort key, so a composition is built already
# in canonical order (the tests check slot_count and canonical() on every template).
_Item = tuple[int, int, Expr, tuple]  # (slots, relation terms, expression, canonical sort key)


def _multisets(items: Sequence[_Item], sizes: range, budget: int) -> Iterator[tuple[_Item, ...]]:
    """Multisets of ``items`` (sorted by slot) with a size in ``sizes`` and slot sum <= budget."""

    def grow(start: int, chosen: list[_Item], used: int) -> Iterator[tuple[_Item, ...]]:
        if len(chosen) in sizes:
            yield tuple(chosen)
        if len(chosen) == sizes.stop - 1:
            return
        for i in range(start, len(items)):
            if used + items[i][0] > budget:
                break  # items are sorted by slot: nothing further fits
            chosen.append(items[i])
            yield from grow(i, chosen, used + items[i][0])
            chosen.pop()

    yield from grow(0, [], 0)


def _item(slots: int, rels: int, expr: Expr) -> _Item:
    return (slots, rels, expr, arg_sort_key(expr))


def _compose(group: tuple[_Item, ...]) -> tuple[int, int, Compose]:
    ordered = sorted(group, key=lambda item: item[3])
    return (sum(i[0] for i in group), sum(i[1] for i in group), Compose(tuple(i[2] for i in ordered)))


def _apply(expr: Expr, modifiers: tuple[Disentangle, ...]) -> Apply:
    """Append modifiers; callers append in canonical order (attributes, relation, globals)."""
    if isinstance(expr, Apply):
        return Apply(expr.carrier, expr.modifiers + modifiers)
    return Apply(expr, modifiers)


def _entities(b: SpaceBounds, top: int) -> list[_Item]:
    """Anchors and text entities with every allowed set of attributes, by slot."""
    kinds = sorted((_attribute_term(k) for k in b.attribute_kinds), key=modifier_sort_key)
    once = [_attribute_term(k) for k in b.once_per_carrier if k in b.attribute_kinds]
    attribute_sets = [tuple(c) for k in range(b.max_attributes_per_carrier + 1)
                      for c in combinations_with_replacement(kinds, k) if all(c.count(t) <= 1 for t in once)]
    entities: list[_Item] = []
    for attrs in attribute_sets:
        entities.append(_item(1 + len(attrs), 0, _apply(Anchor(), attrs) if attrs else Anchor()))
        if attrs:
            entities.append(_item(len(attrs), 0, _apply(Text("e"), attrs)))
    return sorted((e for e in entities if e[0] <= top), key=lambda e: e[0])


def _bodies(b: SpaceBounds, entities: list[_Item], top: int) -> list[tuple[int, int, Expr]]:
    """Every template without global terms: entities, and compositions of entities and of
    related sub-scenes, each composition also with a relation."""
    args = range(2, b.max_args_per_composition + 1)
    relation = (Disentangle("rel"),)
    subscenes = []
    if b.max_relation_terms:
        for group in _multisets(entities, args, top - 1):
            slots, rels, scene = _compose(group)
            subscenes.append(_item(slots + 1, rels + 1, _apply(scene, relation)))
    outer_items = sorted((e for e in [*entities, *subscenes] if e[0] <= top), key=lambda e: e[0])
    bodies: list[tuple[int, int, Expr]] = [e[:3] for e in entities]
    for group in _multisets(outer_items, args, top):
        slots, rels, scene = _compose(group)
        bodies.append((slots, rels, scene))
        if b.max_relation_terms:
            bodies.append((slots + 1, rels + 1, _apply(scene, relation)))
    return bodies


def enumerate_templates(max_slot: int | None = None, bounds: SpaceBounds | None = None) -> dict[int, tuple[Expr, ...]]:
    """Every canonical template with slot ``min_slot..max_slot``, by slot level.

    Each level lists its templates once, in construction order: deterministic for a given
    space.toml, and cheaper than sorting 119,572 printed forms.
    """
    b = bounds or space_bounds()
    top = b.max_slot if max_slot is None else min(max_slot, b.max_slot)
    global_chains = [(Disentangle("global"),) * n for n in range(1, b.max_global_terms + 1)]
    found: dict[int, dict[Expr, None]] = {s: {} for s in range(b.min_slot, top + 1)}  # ordered sets
    for slots, rels, body in _bodies(b, _entities(b, top), top):
        if rels > b.max_relation_terms:
            continue
        if b.min_slot <= slots <= top:
            found[slots][body] = None
        for chain in global_chains:
            if b.min_slot <= slots + len(chain) <= top:
                found[slots + len(chain)][_apply(body, chain)] = None
    return {s: tuple(found[s]) for s in found}


def count_by_generating_function(bounds: SpaceBounds | None = None) -> dict[int, int]:
    """Templates per slot level, counted without building any (Pólya's multiset formula).

    A class with counting polynomial ``F(x, r)`` has multisets of size n counted by
    ``[u^n] exp(sum_k F(x^k, r^k) u^k / k)``, computed with the recurrence
    ``h_n = (1/n) sum_k F(x^k, r^k) h_{n-k}``.
    """
    import sympy  # only this check needs it; keep it off the import path of the CLI

    b = bounds or space_bounds()
    x, r = sympy.symbols("x r")

    def trunc(expr) -> sympy.Expr:
        poly = sympy.Poly(sympy.expand(expr), x, r)
        return sum((c * x**i * r**j for (i, j), c in poly.terms() if i <= b.max_slot and j <= b.max_relation_terms),
                   sympy.Integer(0))

    def multisets(cls, sizes: range) -> sympy.Expr:
        powers = {k: trunc(cls.subs({x: x**k, r: r**k}, simultaneous=True)) for k in range(1, sizes.stop)}
        h = [sympy.Integer(1)]
        for n in range(1, sizes.stop):
            h.append(trunc(sum(powers[k] * h[n - k] for k in range(1, n + 1)) / n))
        return trunc(sum(h[n] for n in sizes))

    # attribute multisets of at most max_attributes terms: the product over the kinds of the
    # choices of how many of each (0..max, or 0..1 for a kind of once_per_carrier)
    top = b.max_attributes_per_carrier
    attributes = sympy.Integer(1)
    for kind in dict.fromkeys(b.attribute_kinds):
        most = 1 if kind in b.once_per_carrier else top
        attributes = sympy.expand(attributes * sum(x**j for j in range(most + 1)))
    attributes = sum(sympy.Poly(attributes, x).coeff_monomial(x**k) * x**k for k in range(top + 1))
    entity = trunc(x * attributes + (attributes - 1))  # f ⊕ a*, Te ⊕ a+
    args = range(2, b.max_args_per_composition + 1)
    subscene = trunc(x * r * multisets(entity, args)) if b.max_relation_terms else sympy.Integer(0)
    outer = trunc(entity + subscene)
    relation_choice = (1 + x * r) if b.max_relation_terms else 1
    scene = trunc(multisets(outer, args) * relation_choice)
    globals_ = sum(x**k for k in range(b.max_global_terms + 1))
    total = sympy.Poly(trunc((entity + scene) * globals_), x, r)
    counts = {s: 0 for s in range(b.min_slot, b.max_slot + 1)}
    for (i, _j), c in total.terms():
        if i in counts:
            counts[i] += int(c)
    return counts


@cache
def _cached_space(max_slot: int) -> dict[int, tuple[Expr, ...]]:
    return enumerate_templates(max_slot)


def template_counts(slots: Iterable[int]) -> dict[int, int]:
    """Number of canonical templates per requested slot level (by enumeration)."""
    wanted = sorted(set(slots))
    space = _cached_space(max(wanted))
    return {s: len(space.get(s, ())) for s in wanted}


def space_by_slot(slots: Iterable[int]) -> dict[int, tuple[Expr, ...]]:
    """The canonical templates of the requested slot levels, in (deterministic) construction order."""
    space = _cached_space(space_bounds().max_slot)  # one enumeration serves every level
    return {s: space.get(s, ()) for s in sorted(set(slots))}


def templates(slots: Iterable[int]) -> dict[int, list[Expr]]:
    """The canonical templates of the requested slot levels, each list in printed order."""
    from ._printer import to_text

    wanted = sorted(set(slots))
    space = _cached_space(max(wanted))
    return {s: sorted(space.get(s, ()), key=lambda e: to_text(e, ascii=True)) for s in wanted}


# ---------------------------------------------------------------------------- compact form of templates
# The sampler keeps the classified template space on disk (tracebench.sample._quotas) and
# rebuilds only the templates it draws. Postfix tokens, one space apart: ``f`` an anchor,
# ``t`` the text entity Te, ``g`` / ``g_<kind>`` a g term, ``A<n>`` the carrier before n
# modifiers, ``C<n>`` a composition of the n expressions before it. A serialization of
# unbound, unnumbered templates, not a second reader of the formula language.

def encode_template(expr: Expr, memo: dict[int, str] | None = None) -> str:
    """The compact form of an unbound, unnumbered template (ValueError for anything else).

    ``memo`` (keyed by object identity, as the template space shares subexpressions) makes
    encoding a whole slot level cheap."""
    memo = {} if memo is None else memo

    def code(node: Expr | Disentangle) -> str:
        known = memo.get(id(node))
        if known is not None:
            return known
        if isinstance(node, Anchor) and node.index is None and node.binding is None:
            out = "f"
        elif isinstance(node, Text) and (node.name, node.index, node.description) == ("e", None, None):
            out = "t"
        elif isinstance(node, Disentangle) and node.index is None and node.binding is None:
            out = "g" if node.kind is None else f"g_{node.kind}"
        elif isinstance(node, Apply):
            out = " ".join([code(node.carrier), *map(code, node.modifiers), f"A{len(node.modifiers)}"])
        elif isinstance(node, Compose) and node.index is None:
            out = " ".join([*map(code, node.args), f"C{len(node.args)}"])
        else:
            raise ValueError(f"not an unbound, unnumbered template term: {node!r}")
        memo[id(node)] = out
        return out

    return code(expr)


_LEAVES: dict[str, Expr | Disentangle] = {}  # leaves are immutable: one object serves every template


def decode_template(code: str) -> Expr:
    """The template of :func:`encode_template`'s compact form (ValueError for a malformed one)."""
    stack: list = []
    for token in code.split():
        head = token[0]
        if head in "AC" and token[1:].isdigit():
            n = int(token[1:])
            if n < 1 or len(stack) < n + (head == "A"):
                raise ValueError(f"malformed compact template {code!r}")
            items = stack[-n:]
            del stack[-n:]
            stack.append(Apply(stack.pop(), tuple(items)) if head == "A" else Compose(tuple(items)))
            continue
        leaf = _LEAVES.get(token)
        if leaf is None:
            if token == "f":
                leaf = Anchor()
            elif token == "t":
                leaf = Text("e")
            elif token == "g" or token.startswith("g_"):
                leaf = Disentangle() if token == "g" else Disentangle(token[2:])
            else:
                raise ValueError(f"malformed compact template {code!r}")
            _LEAVES[token] = leaf
        stack.append(leaf)
    if len(stack) != 1:
        raise ValueError(f"malformed compact template {code!r}")
    return stack[0]
