"""Which checklist questions a profile breaks on a case, and why.

The rules read only the case given (its formula, terms and checklist), so a diagnostic
sub-case is judged on its own structure. Every question id returned is one of the case's
checklist; each is mapped to the failure modes that break it, in profile order (the first
is the recorded cause). Dependent questions (``depends_on``) are not broken on their own:
propagating a parent's failure is the scorer's job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from types import MappingProxyType

from ..errors import TraceError
from ..formula import Anchor, Compose, Disentangle, FormulaError, parse, symbol, walk
from ..operators import ENTITY_ROLES, LOCAL_ROLES, SCENE, Family, Role, split_target
from ..records import Case, TermBinding
from ._profiles import Failure, Profile

__all__ = ["Scene", "breakdown", "breaking", "failed_questions"]


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


def _noise_draw(seed: int, case_id: str, question_id: str) -> float:
    digest = hashlib.sha256(f"tracebench-zoo/noise/{seed}/{case_id}/{question_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


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


def _breaks(failure: Failure, scene: Scene, target: str, aspect: str, profile: Profile) -> bool:
    """Whether a deterministic failure mode (any but noise) breaks requirement ``target:aspect``."""
    head, g_symbol = split_target(target)
    name = failure.name
    if g_symbol is not None:  # a binding X ⊕ g
        g = scene.g_term(g_symbol, Role.GLOBAL, Role.RELATION, *LOCAL_ROLES)
        if g is None:
            return False
        if _ignored(failure, g):
            return (g.role, aspect) in ((Role.GLOBAL, "consistency"), (Role.RELATION, "binding"))
        return name == "leaky-binding" and g.role is Role.LOCAL and aspect == "exclusivity" and _leaks(scene, g, profile)
    if head in scene.compositions:
        if aspect == "duplication":
            return name == "duplicate" and bool(scene.compositions[head])
        return aspect == "relation" and any(t.op is Family.DISENTANGLE and t.role is Role.RELATION and t.carrier == head
                                            and _ignored(failure, t) for t in scene.case.terms)
    t = scene.term(head)
    if t is None:
        return False
    if t.role is Role.ANCHOR:
        if aspect != "identity":
            return False
        if name == "global-interference":
            return scene.has_global
        return name == "composition-interference" and scene.branches >= int(failure.arg)  # type: ignore[arg-type]
    if t.op is not Family.DISENTANGLE:
        return False
    if _ignored(failure, t):
        return aspect in ("presence", "fidelity")
    if name == "global-interference":
        return scene.has_global and t.role in LOCAL_ROLES and aspect == "fidelity"
    return name == "leaky-binding" and t.role is Role.LOCAL and aspect == "presence"


def breaking(scene: Scene, profile: Profile, target: str, aspect: str) -> tuple[str, ...]:
    """Names of the deterministic failure modes that break requirement ``target:aspect``, whether
    or not the checklist asks it: what the renderer draws broken."""
    return tuple(f.name for f in profile.failures if f.name != "noise" and _breaks(f, scene, target, aspect, profile))


def breakdown(case: Case, profile: Profile, *, seed: int = 0) -> dict[str, tuple[str, ...]]:
    """Question id -> every failure mode that breaks it (canonical names, in profile order);
    only broken questions are listed, in checklist order."""
    scene = Scene(case)
    out: dict[str, tuple[str, ...]] = {}
    for q in case.checklist:
        noise = _noise_draw(seed, case.id, q.id)
        causes = tuple(str(f) for f in profile.failures
                       if (noise < float(f.arg) if f.name == "noise"  # type: ignore[arg-type]
                           else _breaks(f, scene, q.target, q.aspect, profile)))
        if causes:
            out[q.id] = causes
    return out


def failed_questions(case: Case, profile: Profile, *, seed: int = 0) -> dict[str, str]:
    """Question id -> the cause (first failure mode in profile order) of every requirement the
    profile breaks on this case: exactly what the generation record's ``failed`` holds."""
    return {qid: causes[0] for qid, causes in breakdown(case, profile, seed=seed).items()}
