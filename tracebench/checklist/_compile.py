"""Compiling the checklist of a bound case from templates/checklist/questions.toml.

Deterministic and traceable, no LLM: every question names its operator, its target (a term
``f2``, a binding ``f2⊕g_pattern1``, a composition ``C1``) and its aspect; its id is
``<target>:<aspect>`` (ASCII ``+`` for ``⊕``), so diagnostic sub-cases keep the same ids. A
formula without C is one scene, as the paper's ``C(f1 ⊕ g1)``: its composition questions
have the target ``C0`` (:data:`~tracebench.operators.SCENE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

from ..operators import ENTITY_ROLES, SCENE, Family, Operator, Role, apply_target, question_id
from ..records import Distractor, Question, TermBinding
from ..resources import DataFile
from ..realize import phrase_name
from ..templating import compile_string

__all__ = ["QUESTION_FILE", "REJECTION", "apply_section", "aspects", "compile_checklist"]

QUESTION_FILE = "checklist/questions.toml"
CLUTTER_FILE = "clutter.toml"  # reference clutter's rejection questions ([[reject_<role>]])


_QUESTIONS = DataFile("templates", QUESTION_FILE)
_CLUTTER = DataFile("templates", CLUTTER_FILE)


@dataclass(frozen=True)
class _Entry:
    """One question of a section, as the file writes it."""

    aspect: str
    compiled: Callable[[dict], str]
    expected: str
    depends: tuple[tuple[str, str], ...]  # (scope, aspect); scope "" for the instance's own
    wanted: str | None  # the images the judge needs: "term", "all" or none
    members: int


def _entries(file: DataFile, raw: dict, group: str) -> list[_Entry]:
    out = []
    for k, q in enumerate(file.value("", raw, group, list), 1):
        table = f"{group} {k}"
        out.append(_Entry(file.value(table, q, "aspect", str), compile_string(file.value(table, q, "question", str)),
                          file.value(table, q, "expected", str, "yes"),
                          tuple(dep.rpartition(".")[::2] for dep in file.strings(table, q, "depends_on", ())),
                          file.value(table, q, "images", str, None), file.value(table, q, "members", int, 1)))
    return out


@cache
def _templates() -> dict[str, list[_Entry]]:
    """Section -> its questions (``reject_<role>`` from the clutter file)."""
    questions, clutter = _QUESTIONS.read(), _CLUTTER.read()
    sections = {group: _entries(_QUESTIONS, questions, group) for group in questions}
    sections.update({group: _entries(_CLUTTER, clutter, group) for group in clutter if group.startswith("reject_")})
    return sections


def _section(group: str) -> list[_Entry]:
    """The questions of section ``group``; a DataError when the file has none."""
    found = _templates().get(group)
    if found is None:
        raise (_CLUTTER if group.startswith("reject_") else _QUESTIONS).error("missing", "", group)
    return found


def apply_section(role: Role) -> str:
    """The checklist section of a binding ``X ⊕ g``, by the g term's role."""
    return {Role.GLOBAL: "apply_global", Role.RELATION: "apply_relation"}.get(role, "apply_local")


def aspects() -> dict[str, frozenset[str]]:
    """Checklist section (``anchor``, ``local`` ..., ``compose_relation``) -> the aspects it asks."""
    return {group: frozenset(q.aspect for q in entries) for group, entries in _templates().items()}


def _join(items: list[str]) -> str:
    if not items:
        return ""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


REJECTION = "rejection"  # the aspect of a distractor's questions


@dataclass(frozen=True)
class _Instance:
    """An operator instance the questions of a section are asked about."""

    op: Operator
    target: str
    image: str | None = None  # a term's image
    images: tuple[str, ...] = ()  # a composition's images
    members: int = 1  # a composition's members


class _Checklist:
    """The questions of one bound case, added instance by instance."""

    def __init__(self, terms: tuple[TermBinding, ...], distractors: tuple[Distractor, ...]) -> None:
        self.terms = terms
        self.by_symbol = {t.symbol: t for t in terms}
        self.confusing: dict[str, list[Distractor]] = {}
        for d in distractors:
            self.confusing.setdefault(d.confuses, []).append(d)
        self.questions: list[Question] = []

    def handle(self, symbol: str) -> str:
        return f"('{self.by_symbol[symbol].handle}')"

    def noun_handle(self, symbol: str) -> str:
        return f"the {self.by_symbol[symbol].noun} {self.handle(symbol)}"

    def emit(self, group: str, at: _Instance, context: dict, links: dict[str, list[str]]) -> None:
        """The questions of section ``group`` on ``at``; ``links``: the targets a dependency's
        scope names (a scope not listed: the instance's own target)."""
        for entry in _section(group):
            if at.members < entry.members:
                continue
            depends = tuple(question_id(t, aspect) for scope, aspect in entry.depends
                            for t in links.get(scope, (at.target,)))
            wanted = entry.wanted
            images = (at.image,) if wanted == "term" and at.image else at.images if wanted == "all" else ()
            self.questions.append(Question(
                id=question_id(at.target, entry.aspect), op=at.op, target=at.target, aspect=entry.aspect,
                question=entry.compiled(context), expected=entry.expected, depends_on=depends, images=images))

    def reject(self, t: TermBinding, op: Operator, context: dict) -> None:
        """The rejection questions of the distractors confusing ``t``."""
        for d in self.confusing.get(t.symbol, ()):
            for entry in _section(f"reject_{t.role}"):
                self.questions.append(Question(
                    id=f"{question_id(t.symbol, entry.aspect)}.{d.id}", op=op, target=t.symbol,
                    aspect=entry.aspect, expected=entry.expected,
                    question=entry.compiled({**context, "d_source": d.entity or d.value, "d_image": d.image,
                                                "d_value": d.value}),
                    images=tuple(i for i in (t.image, d.image) if i)))

    def anchor(self, t: TermBinding) -> None:
        context = {"noun": t.noun, "handle": self.handle(t.symbol), "source": t.entity, "image": t.image}
        self.emit("anchor", _Instance(Operator.ANCHOR, t.symbol, t.image), context, {})
        self.reject(t, Operator.ANCHOR, context)

    def disentangle(self, t: TermBinding) -> None:
        """A g term: what it carries, then its binding to its carrier."""
        carrier = self.by_symbol.get(t.carrier or "")
        participants = _join([self.handle(p) for p in t.participants]) if t.participants else ""
        context = {"name": phrase_name(t.subtype), "value": t.value, "source": t.entity, "image": t.image,
                   "carrier_handle": self.handle(carrier.symbol) if carrier else "",
                   "carrier_noun": carrier.noun if carrier else "", "participants": participants}
        self.emit(t.role, _Instance(Operator.DISENTANGLE, t.symbol, t.image), context, {})
        self.reject(t, Operator.DISENTANGLE, context)
        links = {"term": [t.symbol], "carrier": [carrier.symbol] if carrier and carrier.op is Family.ANCHOR else []}
        self.emit(apply_section(t.role), _Instance(Operator.APPLY, apply_target(t.carrier, t.symbol), t.image),
                  context, links)

    def composition(self, symbol: str, members: tuple[str, ...], inside: set[str],
                    relation: TermBinding | None) -> None:
        """A composition's questions (``inside``: the symbols within it, nested ones too), then
        those of the relation it carries."""
        member_images = tuple(dict.fromkeys(
            t.image for t in self.terms if t.image and (symbol == SCENE or t.symbol in inside or t.carrier in inside)))
        anchors = [m for m in members if self.by_symbol[m].op is Family.ANCHOR]
        context = {"members": _join([self.noun_handle(m) for m in members]), "several": len(members) > 1,
                   "images": _join(list(member_images)) or "the references"}
        self.emit("compose", _Instance(Operator.COMPOSE, symbol, None, member_images, len(members)), context,
                  {"members": anchors})
        if relation is not None:
            self.emit("compose_relation", _Instance(Operator.COMPOSE, symbol),
                      {"participants": _join([self.handle(p) for p in relation.participants]), "value": relation.value},
                      {"members": [p for p in relation.participants if self.by_symbol[p].op is Family.ANCHOR]})


def _scopes(terms: tuple[TermBinding, ...], compositions: tuple[tuple[str, tuple[str, ...], str | None], ...]
            ) -> list[tuple[str, tuple[str, ...], set[str]]]:
    """Each composition, its members and the symbols inside it (its nested compositions' too);
    without C, the one scene of every entity."""
    if not compositions:  # one scene: the implicit composition of every entity, every image its own
        compositions = ((SCENE, tuple(t.symbol for t in terms if t.role in ENTITY_ROLES), None),)
    nested = {symbol: {symbol} for symbol, _, _ in compositions}
    for symbol, _, parent in reversed(compositions):  # inner compositions come later in the tuple
        if parent is not None:
            nested[parent] |= nested[symbol]
    return [(symbol, members, set(members) | nested[symbol]) for symbol, members, _parent in compositions]


def compile_checklist(terms: tuple[TermBinding, ...],
                      compositions: tuple[tuple[str, tuple[str, ...], str | None], ...],
                      distractors: tuple[Distractor, ...] = ()) -> tuple[Question, ...]:
    """Questions for every operator instance of a bound case, in formula order; ``distractors``
    add their rejection questions to the instance of the term each confuses, after its own."""
    checklist = _Checklist(terms, distractors)
    relation_of: dict[str, TermBinding] = {}
    for t in terms:
        if t.role is Role.ANCHOR:
            checklist.anchor(t)
        elif t.op is Family.DISENTANGLE:
            checklist.disentangle(t)
        if t.role is Role.RELATION:
            relation_of[t.carrier] = t
    for symbol, members, inside in _scopes(terms, compositions):
        checklist.composition(symbol, members, inside, relation_of.get(symbol))
    return tuple(checklist.questions)
