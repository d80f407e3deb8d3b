"""Which checklist questions a profile breaks on a case, and why.

The rules read only the case given (its formula, terms and checklist), so a diagnostic
sub-case is judged on its own structure. Every question id returned is one of the case's
checklist; each is mapped to the failure modes that break it, in profile order (the first
is the recorded cause). Dependent questions (``depends_on``) are not broken on their own:
propagating a parent's failure is the scorer's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from types import MappingProxyType

from ..checklist import REJECTION, apply_section
from ..errors import TraceError
from ..formula import Anchor, Compose, Disentangle, FormulaError, parse, symbol, walk
from ..operators import ENTITY_ROLES, LOCAL_ROLES, SCENE, Family, Role, question_id, split_target
from ..records import Case, Distractor, TermBinding
from ._load import confusion, draw, load_modes, partial, probability, subtype_difficulty
from ._profiles import CONFUSION, PARTIAL, Failure, Profile

__all__ = ["Scene", "break_probability", "breakdown", "breaking", "confused", "confusers", "confusion_breaks",
           "confusion_probability", "failed_questions", "load_probability", "partly_broken"]


@lru_cache(maxsize=4096)
def _structure(formula: str) -> tuple[Mapping[str, frozenset[str]], int]:
    """A formula's compositions (C symbol -> the anchors it holds) and its reference-conditioned
    branches; parsed once per distinct formula (cases of one template share it). Raises
    :class:`~tracebench.formula.FormulaError`."""
    expr = parse(formula)
    out: dict[str, frozenset[str]] = {}
    count = 0
    for node in walk(expr):
        if isinstance(node, Compose):
            count += 1
            name = symbol(node) if node.index is not None else f"C{count}"
            out[name] = frozenset(symbol(n) for n in walk(node) if isinstance(n, Anchor))
    if not out:  # one scene: the checklist's implicit composition
        out[SCENE] = frozenset(symbol(n) for n in walk(expr) if isinstance(n, Anchor))
    outer = next((n for n in walk(expr) if isinstance(n, Compose)), None)
    branches = 1 if outer is None else sum(1 for arg in outer.args
                                           if any(isinstance(n, (Anchor, Disentangle)) for n in walk(arg)))
    return MappingProxyType(out), branches


@dataclass(frozen=True)
class Scene:
    """What the rules need to know about a case's structure."""

    case: Case

    @cached_property
    def terms(self) -> dict[str, TermBinding]:
        return {t.symbol: t for t in self.case.terms}

    @cached_property
    def _parsed(self) -> tuple[Mapping[str, frozenset[str]], int]:
        try:
            return _structure(self.case.formula)
        except FormulaError as exc:
            raise TraceError(f"case {self.case.id}: formula: {exc}") from None

    @property
    def compositions(self) -> Mapping[str, frozenset[str]]:
        """C symbol -> the anchors it holds, nested compositions included (pre-order numbering
        when the formula leaves a C unnumbered, as binding numbers them)."""
        return self._parsed[0]

    @property
    def branches(self) -> int:
        """Reference-conditioned branches: arguments of the outermost C holding an f or g term
        (a formula without C has one)."""
        return self._parsed[1]

    @cached_property
    def carriers(self) -> tuple[str, ...]:
        """Symbols of the entities the scene shows: anchors and text entities, in order."""
        return tuple(t.symbol for t in self.case.terms if t.role in ENTITY_ROLES)

    @cached_property
    def has_global(self) -> bool:
        return any(t.op is Family.DISENTANGLE and t.role is Role.GLOBAL for t in self.case.terms)

    def term(self, name: str) -> TermBinding | None:
        return self.terms.get(name)

    def g_term(self, name: str, *roles: str) -> TermBinding | None:
        """The g term of that symbol when it has one of ``roles``."""
        t = self.terms.get(name)
        return t if t is not None and t.op is Family.DISENTANGLE and t.role in roles else None


def _section(scene: Scene, target: str, aspect: str) -> tuple[str, TermBinding | None] | None:
    """The checklist section of requirement ``target:aspect`` (``anchor``, ``local`` ...,
    ``apply_local`` ..., ``compose``, ``compose_relation``) and its term (of a binding, its g
    term; none for a composition); None for a text term or an unknown target."""
    head, g_symbol = split_target(target)
    if g_symbol is not None:  # a binding X ⊕ g: its section follows the g term's role, as the checklist's
        g = scene.term(g_symbol)
        if g is None or g.op is not Family.DISENTANGLE:
            return None
        return apply_section(g.role), g
    if head in scene.compositions:
        return ("compose_relation" if aspect == "relation" else "compose"), None
    t = scene.term(head)
    if t is None or t.op is Family.TEXT:
        return None
    return str(t.role), t


def load_probability(failure: Failure, scene: Scene, target: str, aspect: str) -> float:
    """The probability that load mode ``failure`` breaks requirement ``target:aspect`` of the scene
    (0 where the mode does not reach it); ``taxonomy/zoo.toml`` gives the rates."""
    mode = load_modes()[failure.name]
    found = _section(scene, target, aspect)
    if found is None or (found[0], aspect) not in mode.breaks:
        return 0.0
    scale = 1.0 if failure.arg is None else float(failure.arg)  # type: ignore[arg-type]
    t = found[1]
    if mode.load == "subtype":
        return probability(subtype_difficulty().get(t.subtype or "", 0.0), 1, scale) if t is not None else 0.0
    if mode.load == "entities" and (t is None or t.op is not Family.ANCHOR):
        return 0.0
    if mode.load == "global":
        load = sum(1 for x in scene.case.terms if x.op is Family.DISENTANGLE and x.role is Role.GLOBAL)
    elif mode.load == "composition":
        load = scene.branches - 1
    elif mode.load == "relation":
        head = split_target(target)[0]
        load = sum(1 for x in scene.case.terms if x.op is Family.DISENTANGLE and x.role is Role.RELATION
                   and x.carrier == head)
    else:  # entities: the others in the anchor's source image
        load = max((t.source_entities or 1) - 1, 0)  # type: ignore[union-attr]
    return probability(mode.p1 or 0.0, load, scale)


def confusers(scene: Scene, term: str) -> tuple[Distractor, ...]:
    """The distractors confusing term ``term``, in case order (the one ``confused`` takes is drawn
    uniformly among them)."""
    return tuple(d for d in scene.case.distractors if d.confuses == term)


def confusion_probability(scene: Scene, term: str, failure: Failure) -> float:
    """The probability that ``distractor-confusion`` (``failure``) takes a distractor for term
    ``term`` in one generation: ``1 - (1 - P) ** k`` with k distractors confusing it (0 without)."""
    p1 = confusion().p1 if failure.arg is None else float(failure.arg)  # type: ignore[arg-type]
    return probability(p1, len(confusers(scene, term)))


def confused(scene: Scene, term: str, failure: Failure, seed: int) -> Distractor | None:
    """The distractor ``distractor-confusion`` takes instead of term ``term``'s source in this
    generation, if it fires: with k distractors confusing the term, with probability
    ``1 - (1 - P) ** k``, one of them drawn uniformly (taxonomy/zoo.toml ``[confusion]``)."""
    found = confusers(scene, term)
    if not found or draw(seed, scene.case.id, term, CONFUSION) >= confusion_probability(scene, term, failure):
        return None
    return found[min(int(draw(seed, scene.case.id, term, CONFUSION + "/which") * len(found)), len(found) - 1)]


def confusion_breaks(scene: Scene, target: str, aspect: str, qid: str | None, taken: Distractor) -> bool:
    """Whether ``distractor-confusion``, having taken distractor ``taken`` for term ``target``'s
    source, breaks requirement ``target:aspect`` (question ``qid``): the content requirements of
    that term, and the rejection question of the distractor it took."""
    found = _section(scene, target, aspect)
    if found is None or found[1] is None or split_target(target)[1] is not None or taken.confuses != target:
        return False
    if aspect == REJECTION:
        return qid is None or qid.rsplit(".", 1)[-1] == taken.id
    return (found[0], aspect) in confusion().breaks


def _confuses(failure: Failure, scene: Scene, target: str, aspect: str, seed: int, qid: str | None) -> bool:
    """Whether ``distractor-confusion`` breaks requirement ``target:aspect`` (question ``qid``) in
    the generation of ``seed``."""
    d = confused(scene, target, failure, seed)
    return d is not None and confusion_breaks(scene, target, aspect, qid, d)


def _ignored(failure: Failure, t: TermBinding) -> bool:
    """Whether the failure mode makes the generator ignore g term ``t`` altogether."""
    if failure.name == "weak-subtype":
        return t.subtype == failure.arg
    if failure.name == "no-global":
        return t.role is Role.GLOBAL
    if failure.name == "relation-blind":
        return t.role is Role.RELATION
    return False


def _leaks(scene: Scene, g: TermBinding, profile: Profile) -> bool:
    """A leaky binding shows the attribute elsewhere only when another entity is there to take
    it, and only when the generator transfers that subtype at all."""
    others = [c for c in scene.carriers if c != g.carrier]
    return bool(others) and g.subtype not in profile.weak_subtypes()


def _breaks_binding(failure: Failure, scene: Scene, g_symbol: str, aspect: str, profile: Profile) -> bool:
    """Whether the failure breaks a requirement of a binding ``X ⊕ g``."""
    g = scene.g_term(g_symbol, Role.GLOBAL, Role.RELATION, *LOCAL_ROLES)
    if g is None:
        return False
    if _ignored(failure, g):
        return (g.role, aspect) in ((Role.GLOBAL, "consistency"), (Role.RELATION, "binding"))
    return (failure.name == "leaky-binding" and g.role is Role.LOCAL and aspect == "exclusivity"
            and _leaks(scene, g, profile))


def _breaks_composition(failure: Failure, scene: Scene, head: str, aspect: str) -> bool:
    """Whether the failure breaks a requirement of composition ``head``."""
    if aspect == "duplication":
        return failure.name == "duplicate" and bool(scene.compositions[head])
    return aspect == "relation" and any(t.op is Family.DISENTANGLE and t.role is Role.RELATION and t.carrier == head
                                        and _ignored(failure, t) for t in scene.case.terms)


def _breaks_anchor(failure: Failure, scene: Scene, aspect: str) -> bool:
    """Whether the failure breaks a requirement of an anchored entity."""
    if aspect != "identity":
        return False
    if failure.name == "global-interference":
        return scene.has_global
    return failure.name == "composition-interference" and scene.branches >= int(failure.arg)  # type: ignore[arg-type]


def _breaks_g_term(failure: Failure, scene: Scene, t: TermBinding, aspect: str) -> bool:
    """Whether the failure breaks a requirement of what g term ``t`` carries."""
    if _ignored(failure, t):
        return aspect in ("presence", "fidelity")
    if failure.name == "global-interference":
        return scene.has_global and t.role in LOCAL_ROLES and aspect == "fidelity"
    return failure.name == "leaky-binding" and t.role is Role.LOCAL and aspect == "presence"


def _breaks(failure: Failure, scene: Scene, target: str, aspect: str, profile: Profile) -> bool:
    """Whether a deterministic failure mode (any but noise) breaks requirement ``target:aspect``."""
    head, g_symbol = split_target(target)
    if g_symbol is not None:
        return _breaks_binding(failure, scene, g_symbol, aspect, profile)
    if head in scene.compositions:
        return _breaks_composition(failure, scene, head, aspect)
    t = scene.term(head)
    if t is None:
        return False
    if t.role is Role.ANCHOR:
        return _breaks_anchor(failure, scene, aspect)
    return t.op is Family.DISENTANGLE and _breaks_g_term(failure, scene, t, aspect)


def break_probability(failure: Failure, scene: Scene, profile: Profile, target: str, aspect: str) -> float:
    """The probability that failure mode ``failure`` (any but ``distractor-confusion``, drawn per
    term: :func:`confusion_probability`) breaks requirement ``target:aspect`` of the scene in one
    generation: 0 or 1 for a deterministic mode; a probabilistic one is drawn per requirement."""
    if failure.name == PARTIAL:
        found = _section(scene, target, aspect)
        p = partial().p1 if failure.arg is None else float(failure.arg)  # type: ignore[arg-type]
        return p if found is not None and (found[0], aspect) in partial().breaks else 0.0
    if failure.name == "noise":
        return float(failure.arg)  # type: ignore[arg-type]
    if failure.probabilistic:
        return load_probability(failure, scene, target, aspect)
    return 1.0 if _breaks(failure, scene, target, aspect, profile) else 0.0


def _broken_by(f: Failure, scene: Scene, profile: Profile, target: str, aspect: str, seed: int,
               qid: str | None = None) -> bool:
    """Whether mode ``f`` breaks requirement ``target:aspect`` in the generation of ``seed``: each
    probabilistic mode's own draw per requirement (:func:`break_probability`), confusion's per term."""
    if f.name == CONFUSION:
        return _confuses(f, scene, target, aspect, seed, qid)
    p = break_probability(f, scene, profile, target, aspect)
    return p >= 1.0 or (p > 0.0 and draw(seed, scene.case.id, question_id(target, aspect), f.name) < p)


def breaking(scene: Scene, profile: Profile, target: str, aspect: str, *, seed: int = 0) -> tuple[str, ...]:
    """Names of the failure modes that break requirement ``target:aspect`` in the pixels, whether
    or not the checklist asks it: what the renderer draws broken (noise is in the record only)."""
    return tuple(f.name for f in profile.modes()
                 if f.name != "noise" and _broken_by(f, scene, profile, target, aspect, seed))


def breakdown(case: Case, profile: Profile, *, seed: int = 0) -> dict[str, tuple[str, ...]]:
    """Question id -> every failure mode that breaks it (canonical names, in profile order, with
    ``strain`` spelled out as its load modes); only broken questions are listed, in checklist order."""
    scene = Scene(case)
    out: dict[str, tuple[str, ...]] = {}
    for q in case.checklist:
        causes = tuple(str(f) for f in profile.modes()
                       if _broken_by(f, scene, profile, q.target, q.aspect, seed, q.id))
        if causes:
            out[q.id] = causes
    return out


def partly_broken(causes: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Of a breakdown, the requirements only ``partial`` broke (none of them wholly): question id ->
    the cause; what a generation record's ``partial`` holds."""
    return {qid: modes[0] for qid, modes in causes.items() if all(m.split(":", 1)[0] == PARTIAL for m in modes)}


def failed_questions(case: Case, profile: Profile, *, seed: int = 0) -> dict[str, str]:
    """Question id -> the cause (first failure mode in profile order) of every requirement the
    profile breaks on this case: exactly what the generation record's ``failed`` holds."""
    return {qid: causes[0] for qid, causes in breakdown(case, profile, seed=seed).items()}
