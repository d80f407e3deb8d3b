"""Binding: fill every term of a template with concrete content from a library.

An anchor gets an entity; a g term an attribute subtype of another entity (or a global tag,
a relation, an attachable item, a design); a text entity a text carrier whose category fits
the attributes it receives (no hairstyle on a teapot). Images are numbered Image 1..n in
order of first mention. What cannot be satisfied raises :class:`BindingError`: it is
reported, never relaxed.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache

from ..errors import TraceError
from ..formula import (
    Anchor,
    AnchorBinding,
    Apply,
    Compose,
    Disentangle,
    DisentangleBinding,
    Expr,
    FormulaError,
    Text,
    analyze,
    language,
    to_text,
)
from ..operators import Role
from ..records import TermBinding
from ..taxonomy import SubtypeSpec, taxonomy
from ._index import EntityRef, GlobalRef, LibraryIndex, RelationRef, TextCarrier, text_carriers

__all__ = ["BindingError", "BoundCase", "bind", "supplied_by"]

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class BindingError(TraceError):
    """A template that the library cannot fill."""


@dataclass(frozen=True)
class BoundCase:
    """A template with every term bound: what realization and the checklist read."""

    template: Expr
    formula: Expr
    terms: tuple[TermBinding, ...]
    images: tuple[int, ...]  # library image indices, Image 1..n
    compositions: tuple[tuple[str, tuple[str, ...], str | None], ...]  # (C symbol, member carriers, parent C)


@dataclass
class _Draft:
    """One term's choice before images are numbered."""

    symbol: str
    op: str
    role: str
    kind: str | None
    value: str
    carrier: str | None = None
    handle: str | None = None
    noun: str | None = None
    category: str | None = None
    library_image: int | None = None
    entity: EntityRef | None = None
    subtype: str | None = None
    attribute: str | None = None
    participants: tuple[str, ...] = ()
    participant_entities: tuple[EntityRef, ...] = ()


def _slug(noun: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", noun.lower()).strip("_") or "thing"


@cache
def _role_on(kind: str, on_composition: bool) -> str | None:
    """The role a ``g_<kind>`` term plays applied at the top level to a composition or to one
    entity, as validation assigns it (None: validation refuses it there)."""
    carrier = Compose((Anchor(), Anchor())) if on_composition else Anchor()
    try:
        return analyze(Apply(carrier, (Disentangle(kind),)))[-1].role
    except FormulaError:
        return None


def _kind_for(spec: SubtypeSpec, asked: str | None, role: str, on_composition: bool) -> str | None:
    """The kind a bound term is written with: the template's own kind when it names one;
    otherwise the first kind listed for the chosen subtype under which the term keeps its
    role where it stands (a color tone on a lone entity written ``g_color`` would read as the
    entity's own color), else the template's unspecified kind."""
    if not language().is_unspecified(asked):
        return asked
    return next((k for k in spec.kinds if _role_on(k, on_composition) == role), asked)


@dataclass
class _Binder:
    index: LibraryIndex
    rng: random.Random
    carrier_categories: frozenset[str] | None
    drafts: list[_Draft] = field(default_factory=list)
    numbers: Counter = field(default_factory=Counter)
    handles: Counter = field(default_factory=Counter)
    used_entities: set = field(default_factory=set)
    used_sources: set = field(default_factory=set)
    used_phrases: set = field(default_factory=set)
    used_globals: set = field(default_factory=set)
    used_relations: set = field(default_factory=set)
    compositions: dict = field(default_factory=dict)  # C symbol -> (member carriers, parent C, head of each arg)

    def number(self, family: str) -> str:
        self.numbers[family] += 1
        return f"{family}{self.numbers[family]}"

    def handle(self, noun: str) -> str:
        slug = _slug(noun)
        n = self.handles[slug]
        self.handles[slug] += 1
        return f"{slug}_{_LETTERS[n % 26]}" + ("" if n < 26 else str(n // 26))

    def pick(self, items, what: str, accept=lambda item: True, field: str = "ent_list"):
        """A uniformly random acceptable item; tries a few draws, then scans. ``field``: the tag
        field of a library that supplies such items (named when there are none)."""
        if not items:
            raise BindingError(f"the library has no {what} (tag field: {field})")
        for _ in range(8):
            item = items[self.rng.randrange(len(items))]
            if accept(item):
                return item
        usable = [item for item in items if accept(item)]
        if not usable:
            raise BindingError(f"the library has no unused {what} left for this case (tag field: {field})")
        return usable[self.rng.randrange(len(usable))]

    # -- the walk, in the order analyze() lists terms --------------------------------------

    def expr(self, node: Expr, roles, parent: str | None) -> list[str]:
        """Bind ``node``; returns the carrier symbols it holds."""
        if isinstance(node, Compose):
            symbol = self.number("C")
            members: list[str] = []
            heads: list[str] = []
            for arg in node.args:
                held = self.expr(arg, roles, symbol)
                members += held
                heads.append(held[0])
            self.compositions[symbol] = (tuple(members), parent, tuple(heads))
            return members
        if isinstance(node, Apply):
            if isinstance(node.carrier, Compose):
                c_symbol = f"C{self.numbers['C'] + 1}"  # the number the composition is about to get
                members = self.expr(node.carrier, roles, parent)
                heads = self.compositions[c_symbol][2]
                for modifier in node.modifiers:
                    if next(roles) == Role.RELATION:
                        self.relation(modifier, c_symbol, heads)
                    else:
                        self.global_(modifier, c_symbol)
                return members
            next(roles)  # the carrier's own role (anchor or text)
            modifiers = [(m, next(roles)) for m in node.modifiers]
            return [self.carrier(node.carrier, modifiers)]
        next(roles)
        return [self.carrier(node, [])]

    def carrier(self, node: Expr, modifiers: list[tuple[Disentangle | Text, str]]) -> str:
        tax = taxonomy()
        lang = language()
        wholes = [w for w in map(_whole, dict.fromkeys(r for _, r in modifiers)) if w is not None]
        local = [m.kind for m, r in modifiers if r == Role.LOCAL]
        named = {k for k in local if not lang.is_unspecified(k)}
        restrict = self.carrier_categories if isinstance(node, Anchor) else None
        if isinstance(node, Anchor) and node.kind is not None:  # f(person): drawn from that category
            kind = frozenset({tax.category_words[node.kind]})
            restrict = kind if restrict is None else restrict & kind

        @cache  # a pure function of the category within this call: pick() may scan every entity
        def category_fits(category: str) -> bool:
            if restrict is not None and category not in restrict:
                return False
            if any(category not in whole.receivers for whole in wholes):
                return False
            usable = [s for s in tax.of_role("local") if s.applies_to(category) and self.index.by_subtype.get(s.key)]
            if any(not any(k in s.kinds for s in usable) for k in named):
                return False  # g_font on a dog
            return len(local) <= sum(1 for s in usable if s.wildcard or named & set(s.kinds))

        if isinstance(node, Anchor):
            entity = self.pick(self.index.entities, "entity to anchor that takes these attributes",
                               lambda e: (e.image, e.entity) not in self.used_entities and category_fits(e.category))
            self.used_entities.add((entity.image, entity.entity))
            symbol = self.number("f")
            draft = _Draft(symbol, "f", "anchor", None, entity.description, handle=self.handle(entity.noun),
                           noun=entity.noun, category=entity.category, library_image=entity.image, entity=entity)
            carrier_entity = (entity.image, entity.entity)
        else:
            text: TextCarrier = self.pick(text_carriers(), "text carrier that takes these attributes",
                                          lambda c: c.phrase not in self.used_phrases and category_fits(c.category))
            self.used_phrases.add(text.phrase)
            symbol = self.number("T_" + node.name)
            draft = _Draft(symbol, "T", "text", node.name, text.phrase, handle=self.handle(text.noun),
                           noun=text.noun, category=text.category)
            carrier_entity = None
        self.drafts.append(draft)
        taken: set[str] = set()
        for modifier, role in modifiers:
            if role == Role.GLOBAL:
                self.global_(modifier, symbol)
            else:
                self.attribute(modifier, role, symbol, draft.category, carrier_entity, taken)
        return symbol

    def attribute(self, modifier: Disentangle, role: str, carrier: str, category: str, carrier_entity,
                  taken: set[str]) -> None:
        tax = taxonomy()
        whole = _whole(role)
        if whole is not None:  # attach, ip: an entity used whole
            source = self.pick(self.index.by_use.get(whole.key, []), f'entity with usable_as "{whole.key}"',
                               lambda e: (e.image, e.entity) != carrier_entity
                               and (e.image, e.entity) not in self.used_entities,
                               field=supplied_by(modifier.kind, role)[1])
            self.used_entities.add((source.image, source.entity))
            kind = _kind_for(whole, modifier.kind, role, on_composition=False)
            self.drafts.append(_Draft(self.number(f"g_{kind}"), "g", role, kind, source.description,
                                      carrier=carrier, category=source.category, library_image=source.image,
                                      entity=source, subtype=whole.key, attribute=whole.attribute))
            return
        specs = _candidates(modifier.kind, "local")
        options = [s.key for s in specs if s.applies_to(category)
                   and s.key not in taken and self.index.by_subtype.get(s.key)]
        if not options:
            raise BindingError(f"no attribute subtype left for {to_text(modifier)} that applies to a {category} carrier "
                               f"(tag field: {supplied_by(modifier.kind, 'local')[1]})")
        key = options[self.rng.randrange(len(options))]
        taken.add(key)
        source = self.pick(self.index.by_subtype[key], f"entity tagged {key}",
                           lambda e: (e.image, e.entity) != carrier_entity
                           and (e.image, e.entity, key) not in self.used_sources, field=_field(tax.subtypes[key]))
        self.used_sources.add((source.image, source.entity, key))
        spec = tax.subtypes[key]
        kind = _kind_for(spec, modifier.kind, "local", on_composition=False)
        self.drafts.append(_Draft(self.number("g" if kind is None else f"g_{kind}"), "g", "local", kind,
                                  dict(source.tags)[key], carrier=carrier, category=source.category,
                                  library_image=source.image, entity=source, subtype=key, attribute=spec.attribute))

    def global_(self, modifier: Disentangle, carrier: str) -> None:
        tax = taxonomy()
        keys = [s.key for s in _candidates(modifier.kind, "global")]
        keys = [k for k in keys if k in self.index.globals_by_subtype and k not in self.used_globals]
        if not keys:
            raise BindingError(f"the library has no image-level tag left for {to_text(modifier)} "
                               f"(tag field: {supplied_by(modifier.kind, 'global')[1]})")
        if language().is_unspecified(modifier.kind):  # in the order the library holds them
            keys.sort(key=list(self.index.globals_by_subtype).index)
        key = keys[self.rng.randrange(len(keys))]
        self.used_globals.add(key)
        ref: GlobalRef = self.pick(self.index.globals_by_subtype[key], f"image tagged {key}")
        spec = tax.subtypes.get(key) or tax.special[key]
        kind = _kind_for(spec, modifier.kind, "global", on_composition=carrier.startswith("C"))
        self.drafts.append(_Draft(self.number(f"g_{kind}"), "g", "global", kind, ref.value, carrier=carrier,
                                  library_image=ref.image, subtype=key, attribute=spec.attribute))

    def relation(self, modifier: Disentangle | Text, c_symbol: str, heads: tuple[str, ...]) -> None:
        if isinstance(modifier, Text):
            self.drafts.append(_Draft(self.number("T_rel"), "T", "relation", "rel",
                                      modifier.description or "interacting", carrier=c_symbol, participants=heads))
            return
        keys = ", ".join(s.key for s in taxonomy().of_role("relation"))
        ref: RelationRef = self.pick(self.index.relations, f"relation ({keys}) to transfer",
                                     lambda r: (r.image, r.value) not in self.used_relations,
                                     field=supplied_by("rel", "relation")[1])
        self.used_relations.add((ref.image, ref.value))
        self.drafts.append(_Draft(self.number("g_rel"), "g", "relation", "rel", ref.value, carrier=c_symbol,
                                  library_image=ref.image, subtype=ref.subtype,
                                  attribute=ref.phrase or "relation", participants=heads,
                                  participant_entities=ref.participants))


def _join_descs(entities: tuple[EntityRef, ...]) -> str | None:
    """The grounding phrase of a reference relation: its participants in the source image."""
    descs = [e.desc for e in entities]
    return None if not descs else descs[0] if len(descs) == 1 else ", ".join(descs[:-1]) + " and " + descs[-1]


def _whole(role: str) -> SubtypeSpec | None:
    """The special a term of ``role`` takes whole from an entity (attach, ip), if any."""
    return next((s for s in taxonomy().of_role(role) if s.record == "usable_as"), None)


@cache
def supplied_by(kind: str | None, role: str) -> tuple[tuple[SubtypeSpec, ...], str]:
    """What a library must hold for a g term of ``kind`` in ``role``: the subtypes (or the
    special) it may be bound to, and the tag field that holds them, in words."""
    whole = _whole(role)
    if whole is not None:
        specs = [whole]
    elif role == Role.RELATION:
        specs = taxonomy().of_role("relation")
    else:
        specs = _candidates(kind, role)
    by_record: dict[str, list[str]] = {}
    for spec in specs:
        by_record.setdefault(spec.record, []).append(_field(spec))
    generic = {"tag_dict": "ent_list[].tag_dict", "global_tag": "global_tag"}
    fields = [generic[record] if len(found) > 2 and record in generic else " or ".join(found)
              for record, found in by_record.items()]
    return tuple(specs), " or ".join(fields)


def _field(spec: SubtypeSpec) -> str:
    """Where a tagged image holds ``spec``'s tags (the names of taxonomy/tagged_image.schema.json)."""
    if spec.record == "usable_as":
        return "ent_list[].usable_as"
    if spec.record == "background":
        return "background"
    if spec.record == "global_tag":
        return f'global_tag."{spec.key}"'
    return f'ent_list[].tag_dict."{spec.group}"."{spec.key}"'


def _candidates(kind: str | None, role: str) -> list[SubtypeSpec]:
    """The subtypes a term of ``kind`` may be bound to in ``role``: those listing the kind, or
    for an unspecified kind (``g``, ``g_global``) every subtype of the role not kept from them."""
    specs = taxonomy().of_role(role)
    if language().is_unspecified(kind):
        return [s for s in specs if s.wildcard]
    return [s for s in specs if kind in s.kinds]


def _index_of(symbol: str) -> int:
    """The number a symbol ends with: ``g_pattern12`` -> 12."""
    stem = symbol.rstrip("0123456789")
    return int(symbol[len(stem):])


def _build(node: Expr, drafts, images: dict[int, int], c_numbers) -> Expr:
    """The template again, each term replaced by its bound and numbered form (same walk order)."""
    if isinstance(node, Compose):
        index = next(c_numbers)
        return Compose(tuple(_build(a, drafts, images, c_numbers) for a in node.args), index)
    if isinstance(node, Apply):
        carrier = _build(node.carrier, drafts, images, c_numbers)
        return Apply(carrier, tuple(_build(m, drafts, images, c_numbers) for m in node.modifiers))
    d: _Draft = next(drafts)
    if isinstance(node, Anchor):
        return Anchor(_index_of(d.symbol), AnchorBinding(images[d.library_image], d.entity.desc))
    if isinstance(node, Text):
        return Text(node.name, _index_of(d.symbol), d.value)
    if d.role == Role.RELATION:
        entities = tuple(e.desc for e in d.participant_entities)
    elif d.role == Role.GLOBAL:
        entities = ()
    else:
        entities = (d.entity.desc,)
    return Disentangle(d.kind, _index_of(d.symbol), DisentangleBinding(images[d.library_image], entities, d.attribute))


def bind(template: Expr, index: LibraryIndex, rng: random.Random, *,
         carrier_categories: frozenset[str] | None = None) -> BoundCase:
    """Bind every term of ``template``; raises BindingError when the library cannot."""
    binder = _Binder(index, rng, carrier_categories)
    binder.expr(template, iter([t.role for t in analyze(template)]), None)
    order: list[int] = []
    for draft in binder.drafts:
        if draft.library_image is not None and draft.library_image not in order:
            order.append(draft.library_image)
    images = {lib: k + 1 for k, lib in enumerate(order)}
    terms = tuple(TermBinding(
        symbol=d.symbol, op=d.op, role=d.role, kind=d.kind, carrier=d.carrier, handle=d.handle, noun=d.noun,
        category=d.category, image=f"Image {images[d.library_image]}" if d.library_image is not None else None,
        source_id=index.images[d.library_image].id if d.library_image is not None else None,
        entity=d.entity.desc if d.entity else _join_descs(d.participant_entities),
        entity_index=d.entity.entity if d.entity else None,
        source_entities=len(index.images[d.library_image].ent_list) if d.library_image is not None else None,
        subtype=d.subtype, value=d.value, participants=d.participants) for d in binder.drafts)
    formula = _build(template, iter(binder.drafts), images, iter(range(1, binder.numbers["C"] + 1)))
    compositions = tuple((c, members, parent) for c, (members, parent, _) in sorted(
        binder.compositions.items(), key=lambda item: _index_of(item[0])))
    return BoundCase(template, formula, terms, tuple(order), compositions)
