"""Reference clutter: hard-negative references added to a bound case (``trace sample --distractors``).

A distractor is a library image the formula does not use, chosen by the taxonomy to be
mistaken for one term of the case: for an anchored entity, another entity of its category
(its noun first, never its identity: ``templates/clutter.toml``); for an attribute, another
value of the same subtype on an entity of the source's category; for a whole item or a
design, another entity usable the same way; for an image-level term, another value of its
subtype; for a relation, another relation. Terms take distractors in turn, in a seeded order,
so that with N at least the number of terms every term has one.

Clutter is added after binding, from a random stream of its own: the template, the bindings,
the prompt's words and the checklist of the formula are those of the same case without
clutter. The references are interleaved in a seeded order (distractors are not always last)
and renumbered Image 1..n; in the named mode the prompt never names a distractor, in pool mode
the entity terms are named by description only and each records its pool's truth.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache
from typing import Callable, Iterable

from ..errors import TraceError
from ..formula import relabel_images
from ..operators import Family, Role
from ..realize import CLUTTER_FILE
from ..records import Clutter, Distractor, PoolTarget, TermBinding
from ..resources import DataFile
from ..taxonomy import taxonomy
from ._index import EntityRef, GlobalRef, LibraryIndex, RelationRef

__all__ = ["CLUTTER_FILE", "ClutterSpec", "MAX_REFERENCES", "add_clutter", "check_spec", "parse_distractors", "pooled_roles"]

MAX_REFERENCES = 64  # the most references a case may hold (LongBanana gives about 32)
_DRAWS = 12  # random draws from a candidate list before scanning it


@dataclass(frozen=True)
class ClutterSpec:
    """What ``trace sample`` was asked for: distractors per case (a range drawn per case), the
    cap on references (never above :data:`MAX_REFERENCES`, whatever the formula), and the mode."""

    low: int = 0
    high: int = 0
    max_references: int | None = None
    pool: bool = False

    @property
    def active(self) -> bool:
        return self.high > 0 or self.pool

    def arguments(self) -> dict:
        return {"distractors": f"{self.low}" if self.low == self.high else f"{self.low}-{self.high}",
                "max_references": self.max_references, "mode": "pool" if self.pool else "named"}


def parse_distractors(text: str) -> tuple[int, int]:
    """``"4"`` -> (4, 4); ``"0-4"`` -> (0, 4); a TraceError naming the option otherwise."""
    low, dash, high = str(text).strip().partition("-")
    try:
        lo, hi = int(low), int(high) if dash else int(low)
    except ValueError:
        raise TraceError(f"--distractors: {text!r} is not a number N or a range N-M") from None
    if lo < 0 or hi < lo:
        raise TraceError(f"--distractors: {text!r}: want 0 <= N <= M")
    if hi > MAX_REFERENCES:
        raise TraceError(f"--distractors: {text!r}: at most {MAX_REFERENCES} references a case")
    return lo, hi


def check_spec(spec: ClutterSpec) -> None:
    """A TraceError naming the option for settings that mean nothing."""
    if spec.max_references is not None:
        if not 1 <= spec.max_references <= MAX_REFERENCES:
            raise TraceError(f"--max-references: {spec.max_references} must lie between 1 and {MAX_REFERENCES}")
        if spec.high == 0:
            raise TraceError("--max-references caps the distractors: give --distractors N as well")


@cache
def _settings() -> tuple[frozenset[str], frozenset[str]]:
    clutter = DataFile("templates", CLUTTER_FILE)
    raw = clutter.read()
    tax = taxonomy()
    groups = frozenset(clutter.strings("", raw, "identity_groups", ()))
    known = {s.group for s in tax.subtypes.values()}
    if groups - known:
        raise TraceError(f"templates/{CLUTTER_FILE}: identity_groups: unknown groups {sorted(groups - known)} "
                         f"(known: {', '.join(sorted(known))})")
    roles = frozenset(clutter.strings("", raw, "pooled_roles", ()))
    bad = roles - {r.value for r in Role}
    if bad:
        raise TraceError(f"templates/{CLUTTER_FILE}: pooled_roles: unknown roles {sorted(bad)}")
    identity = frozenset(key for key, s in tax.subtypes.items() if s.group in groups)
    return identity, roles


def pooled_roles() -> frozenset[str]:
    """The roles of the terms pool mode names by description (``templates/clutter.toml``)."""
    return _settings()[1]


class _Candidates:
    """A library's entities, tags and relations arranged for choosing hard negatives (built once
    per library index)."""

    def __init__(self, index: LibraryIndex) -> None:
        self.position = {image.id: k for k, image in enumerate(index.images)}
        self.entity_at: dict[tuple[int, int], EntityRef] = {(e.image, e.entity): e for e in index.entities}
        self.by_category: dict[str, list[EntityRef]] = {}
        self.by_noun: dict[tuple[str, str], list[EntityRef]] = {}
        self.by_subtype_category: dict[tuple[str, str], list[EntityRef]] = {}
        self.by_use_category: dict[tuple[str, str], list[EntityRef]] = {}
        for e in index.entities:
            self.by_category.setdefault(e.category, []).append(e)
            self.by_noun.setdefault((e.category, e.noun), []).append(e)
            for key, _ in e.tags:
                self.by_subtype_category.setdefault((key, e.category), []).append(e)
        for use, entities in index.by_use.items():
            for e in entities:
                self.by_use_category.setdefault((use, e.category), []).append(e)
        self.index = index


def _candidates(index: LibraryIndex) -> _Candidates:
    """The index's candidates, built on first use and kept with it (forked workers inherit them)."""
    found = index.__dict__.get("_clutter_candidates")
    if found is None:
        found = index.__dict__["_clutter_candidates"] = _Candidates(index)
    return found


def _identity(e: EntityRef, identity: frozenset[str]) -> tuple:
    return (e.noun, tuple(sorted((k, v) for k, v in e.tags if k in identity)))


def _pick(rng: random.Random, buckets: Iterable[list], accept: Callable[[object], bool]):
    """A random acceptable item of the first bucket holding one (a few draws, then a scan)."""
    for bucket in buckets:
        if not bucket:
            continue
        for _ in range(_DRAWS):
            item = bucket[rng.randrange(len(bucket))]
            if accept(item):
                return item
        usable = [item for item in bucket if accept(item)]
        if usable:
            return usable[rng.randrange(len(usable))]
    return None


@dataclass(frozen=True)
class _Choice:
    image: int
    entity: EntityRef | None
    value: str
    shares: tuple[str, ...]


def _entity_shares(t: TermBinding, e: EntityRef, target: EntityRef, identity: frozenset[str]) -> tuple[str, ...]:
    """What a distractor entity has in common with the entity it is to be mistaken for."""
    shares = [f"category {e.category}"] if e.category == target.category else []
    if t.role in (Role.ATTACH, Role.IP):
        shares.insert(0, f"usable as {t.role}")
    if e.noun == target.noun:
        shares.append(f"noun {e.noun}")
    mine = dict(target.tags)
    shares += [f"{k}: {v}" for k, v in e.tags if k not in identity and mine.get(k) == v]
    return tuple(shares)


def _choose_entity(t: TermBinding, lib: _Candidates, source: int, used: set[int], rng: random.Random,
                   identity: frozenset[str]) -> _Choice | None:
    """An anchored entity's or a whole item's hard negative: another entity of its noun or
    category (usable the same way), never its identity."""
    target = lib.entity_at.get((source, t.entity_index if t.entity_index is not None else -1))
    if target is None:
        return None
    own = _identity(target, identity)

    def other(e) -> bool:
        return e.image not in used and e.description != target.description and _identity(e, identity) != own

    if t.op is Family.ANCHOR:
        buckets = [lib.by_noun.get((target.category, target.noun), []), lib.by_category.get(target.category, [])]
    else:
        use = str(t.role)
        buckets = [lib.by_use_category.get((use, target.category), []), lib.index.by_use.get(use, [])]
    e = _pick(rng, buckets, other)
    return None if e is None else _Choice(e.image, e, e.description, _entity_shares(t, e, target, identity))


def _choose_attribute(t: TermBinding, lib: _Candidates, source: int, used: set[int],
                      rng: random.Random) -> _Choice | None:
    """An attribute's hard negative: another value of its subtype, on an entity of the source's
    category first."""
    key = t.subtype or ""
    value = t.value
    target = lib.entity_at.get((source, t.entity_index if t.entity_index is not None else -1))
    category = target.category if target is not None else t.category or ""

    def differs(e) -> bool:
        return (e.image not in used and dict(e.tags).get(key) not in (None, value)
                and (target is None or e.description != target.description))

    e = _pick(rng, [lib.by_subtype_category.get((key, category), []), lib.index.by_subtype.get(key, [])], differs)
    if e is None:
        return None
    shares = [f"subtype {key}"] + ([f"category {e.category}"] if e.category == category else [])
    if target is not None and e.noun == target.noun:
        shares.append(f"noun {e.noun}")
    return _Choice(e.image, e, dict(e.tags)[key], tuple(shares))


def _choose(t: TermBinding, lib: _Candidates, used: set[int], rng: random.Random) -> _Choice | None:
    """A hard negative for term ``t`` from an image not in ``used``; None when the library has none."""
    identity, _ = _settings()
    index = lib.index
    source = lib.position.get(t.source_id or "")
    if source is None:
        return None
    if t.op is Family.ANCHOR or t.role in (Role.ATTACH, Role.IP):
        return _choose_entity(t, lib, source, used, rng, identity)
    if t.role is Role.LOCAL:
        return _choose_attribute(t, lib, source, used, rng)
    if t.role is Role.GLOBAL:
        refs: list[GlobalRef] = index.globals_by_subtype.get(t.subtype or "", [])
        g = _pick(rng, [refs], lambda r: r.image not in used and r.value != t.value)
        return None if g is None else _Choice(g.image, None, g.value, (f"subtype {t.subtype}",))
    if t.role is Role.RELATION and t.op is Family.DISENTANGLE:
        r: RelationRef | None = _pick(rng, [index.relations], lambda r: r.image not in used and r.value != t.value)
        return None if r is None else _Choice(r.image, None, r.value, (f"subtype {r.subtype}",))
    return None


def _chosen(terms: tuple[TermBinding, ...], lib: _Candidates, images: tuple[int, ...], wanted: int,
            rng: random.Random) -> list[tuple[TermBinding, _Choice]]:
    """Up to ``wanted`` distractors: the eligible terms in a seeded order take one each in turn
    while the library has more for them."""
    eligible = [t for t in terms if t.source_id is not None and t.op is not Family.TEXT]
    rng.shuffle(eligible)
    used = set(images)
    chosen: list[tuple[TermBinding, _Choice]] = []
    turn = list(eligible)
    while len(chosen) < wanted and turn:
        nxt = []
        for t in turn:
            if len(chosen) >= wanted:
                break
            choice = _choose(t, lib, used, rng)
            if choice is not None:
                used.add(choice.image)
                chosen.append((t, choice))
                nxt.append(t)
        turn = nxt
    return chosen


def _interleaved(images: tuple[int, ...], chosen: list[tuple[TermBinding, _Choice]], rng: random.Random) -> list[int]:
    """The references in order: the formula's images in their order, the distractors at seeded places."""
    total = len(images) + len(chosen)
    slots = sorted(rng.sample(range(total), len(chosen)))
    placed = list(range(len(chosen)))
    rng.shuffle(placed)
    at_slot = dict(zip(slots, placed))
    formula_images = iter(images)
    return [chosen[at_slot[k]][1].image if k in at_slot else next(formula_images) for k in range(total)]


def _pooled(terms: tuple[TermBinding, ...], distractors: tuple[Distractor, ...]) -> tuple[PoolTarget, ...]:
    """Pool mode: each term named by description, with its true image and its confusers."""
    roles = pooled_roles()
    return tuple(PoolTarget(term=t.symbol, image=t.image or "",
                            confusers=(found := tuple(d.image for d in distractors if d.confuses == t.symbol)),
                            confusion=round(len(found) / (len(found) + 1), 4))
                 for t in terms if t.image and t.role in roles and t.op is not Family.TEXT)


def add_clutter(terms: tuple[TermBinding, ...], formula, images: tuple[int, ...], index: LibraryIndex,
                spec: ClutterSpec, rng: random.Random):
    """The case's terms, formula and references (library image indices, in reference order)
    with distractors interleaved, and its :class:`~tracebench.records.Clutter` (None when
    no clutter was asked for). ``images`` are the formula's images, Image 1..k."""
    if not spec.active:
        return terms, formula, images, None
    wanted = rng.randint(spec.low, spec.high)
    cap = MAX_REFERENCES if spec.max_references is None else min(spec.max_references, MAX_REFERENCES)
    wanted = max(0, min(wanted, cap - len(images)))
    chosen = _chosen(terms, _candidates(index), images, wanted, rng)
    order = _interleaved(images, chosen, rng)
    number = {lib_image: k + 1 for k, lib_image in enumerate(order)}
    renumber = {old + 1: number[lib_image] for old, lib_image in enumerate(images)}
    label = {f"Image {old}": f"Image {new}" for old, new in renumber.items()}
    terms = tuple(t.model_copy(update={"image": label[t.image]}) if t.image else t for t in terms)
    if any(old != new for old, new in renumber.items()):
        formula = relabel_images(formula, renumber)
    distractors = tuple(
        Distractor(id=f"d{k + 1}", image=f"Image {number[c.image]}", source_id=index.images[c.image].id,
                   confuses=t.symbol, entity=c.entity.desc if c.entity else None,
                   entity_index=c.entity.entity if c.entity else None, value=c.value, shares=c.shares)
        for k, (t, c) in enumerate(chosen))
    return terms, formula, tuple(order), Clutter(mode="pool" if spec.pool else "named", asked=wanted,
                                                 distractors=distractors,
                                                 pooled=_pooled(terms, distractors) if spec.pool else ())
