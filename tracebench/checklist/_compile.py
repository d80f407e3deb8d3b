"""Compiling the checklist of a bound case from templates/checklist/questions.toml.

Deterministic and traceable, no LLM: every question names its operator, its target (a term
``f2``, a binding ``f2⊕g_pattern1``, a composition ``C1``) and its aspect; its id is
``<target>:<aspect>`` (ASCII ``+`` for ``⊕``), so diagnostic sub-cases keep the same ids. A
formula without C is one scene, as the paper's ``C(f1 ⊕ g1)``: its composition questions
have the target ``C0`` (:data:`~tracebench.operators.SCENE`).
"""

from __future__ import annotations

from functools import cache

from ..operators import ENTITY_ROLES, SCENE, Family, Operator, Role, apply_target, question_id
from ..records import Distractor, Question, TermBinding
from ..resources import read_toml
from ..realize import phrase_name
from ..templating import compile_string

__all__ = ["QUESTION_FILE", "REJECTION", "apply_section", "aspects", "compile_checklist"]

QUESTION_FILE = "checklist/questions.toml"
CLUTTER_FILE = "clutter.toml"  # reference clutter's rejection questions ([[reject_<role>]])


@cache
def _templates() -> dict[str, list[dict]]:
    clutter = read_toml("templates", CLUTTER_FILE)
    raw = {**read_toml("templates", QUESTION_FILE), **{k: v for k, v in clutter.items() if k.startswith("reject_")}}
    return {group: [{**q, "compiled": compile_string(q["question"]), "expected": q.get("expected", "yes"),
                     "depends": tuple(dep.rpartition(".")[::2] for dep in q.get("depends_on", ())),
                     "wanted": q.get("images"), "members": q.get("members", 1)} for q in entries]
            for group, entries in raw.items()}


def apply_section(role: Role) -> str:
    """The checklist section of a binding ``X ⊕ g``, by the g term's role."""
    return {Role.GLOBAL: "apply_global", Role.RELATION: "apply_relation"}.get(role, "apply_local")


def aspects() -> dict[str, frozenset[str]]:
    """Checklist section (``anchor``, ``local`` ..., ``compose_relation``) -> the aspects it asks."""
    return {group: frozenset(q["aspect"] for q in entries) for group, entries in _templates().items()}


def _join(items: list[str]) -> str:
    if not items:
        return ""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


REJECTION = "rejection"  # the aspect of a distractor's questions


def compile_checklist(terms: tuple[TermBinding, ...],
                      compositions: tuple[tuple[str, tuple[str, ...], str | None], ...],
                      distractors: tuple[Distractor, ...] = ()) -> tuple[Question, ...]:
    """Questions for every operator instance of a bound case, in formula order; ``distractors``
    add their rejection questions to the instance of the term each confuses, after its own."""
    by_symbol = {t.symbol: t for t in terms}
    questions: list[Question] = []
    confusing: dict[str, list[Distractor]] = {}
    for d in distractors:
        confusing.setdefault(d.confuses, []).append(d)

    def reject(t: TermBinding, op: Operator, context: dict) -> None:
        for d in confusing.get(t.symbol, ()):
            for entry in _templates()[f"reject_{t.role}"]:
                questions.append(Question(
                    id=f"{question_id(t.symbol, entry['aspect'])}.{d.id}", op=op, target=t.symbol,
                    aspect=entry["aspect"], expected=entry["expected"],
                    question=entry["compiled"]({**context, "d_source": d.entity or d.value, "d_image": d.image,
                                                "d_value": d.value}),
                    images=tuple(i for i in (t.image, d.image) if i)))

    def handle(symbol: str) -> str:
        return f"('{by_symbol[symbol].handle}')"

    def noun_handle(symbol: str) -> str:
        return f"the {by_symbol[symbol].noun} {handle(symbol)}"

    def emit(group: str, op: str, target: str, context: dict, links: dict[str, list[str]], image: str | None,
             all_images: tuple[str, ...] = (), members: int = 1) -> None:
        for entry in _templates()[group]:
            if members < entry["members"]:
                continue
            depends = tuple(question_id(t, aspect) for scope, aspect in entry["depends"]
                            for t in links.get(scope, (target,)))
            wanted = entry["wanted"]
            images = (image,) if wanted == "term" and image else all_images if wanted == "all" else ()
            questions.append(Question(
                id=question_id(target, entry["aspect"]), op=op, target=target, aspect=entry["aspect"],
                question=entry["compiled"](context), expected=entry["expected"], depends_on=depends, images=images))

    relation_of: dict[str, TermBinding] = {}
    for t in terms:
        if t.role is Role.ANCHOR:
            context = {"noun": t.noun, "handle": handle(t.symbol), "source": t.entity, "image": t.image}
            emit("anchor", Operator.ANCHOR, t.symbol, context, {}, t.image)
            reject(t, Operator.ANCHOR, context)
        elif t.op is Family.DISENTANGLE:
            carrier = by_symbol.get(t.carrier or "")
            participants = _join([handle(p) for p in t.participants]) if t.participants else ""
            context = {"name": phrase_name(t.subtype), "value": t.value, "source": t.entity, "image": t.image,
                       "carrier_handle": handle(carrier.symbol) if carrier else "",
                       "carrier_noun": carrier.noun if carrier else "", "participants": participants}
            emit(t.role, Operator.DISENTANGLE, t.symbol, context, {}, t.image)
            reject(t, Operator.DISENTANGLE, context)
            group = apply_section(t.role)
            links = {"term": [t.symbol],
                     "carrier": [carrier.symbol] if carrier and carrier.op is Family.ANCHOR else []}
            emit(group, Operator.APPLY, apply_target(t.carrier, t.symbol), context, links, t.image)
        if t.role is Role.RELATION:
            relation_of[t.carrier] = t
    if not compositions:  # one scene: the implicit composition of every entity, every image its own
        compositions = ((SCENE, tuple(t.symbol for t in terms if t.role in ENTITY_ROLES), None),)
    nested = {symbol: {symbol} for symbol, _, _ in compositions}
    for symbol, _, parent in reversed(compositions):  # inner compositions come later in the tuple
        if parent is not None:
            nested[parent] |= nested[symbol]
    for symbol, members, _parent in compositions:
        inside = set(members) | nested[symbol]
        member_images = tuple(dict.fromkeys(
            t.image for t in terms if t.image and (symbol == SCENE or t.symbol in inside or t.carrier in inside)))
        anchors = [m for m in members if by_symbol[m].op is Family.ANCHOR]
        context = {"members": _join([noun_handle(m) for m in members]), "several": len(members) > 1,
                   "images": _join(list(member_images)) or "the references"}
        emit("compose", Operator.COMPOSE, symbol, context, {"members": anchors}, None, member_images, len(members))
        relation = relation_of.get(symbol)
        if relation is not None:
            emit("compose_relation", Operator.COMPOSE, symbol,
                 {"participants": _join([handle(p) for p in relation.participants]), "value": relation.value},
                 {"members": [p for p in relation.participants if by_symbol[p].op is Family.ANCHOR]}, None)
    return tuple(questions)
