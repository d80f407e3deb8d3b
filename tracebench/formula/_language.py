"""The language's vocabulary and limits, read from taxonomy/kinds.toml and grammar/language.toml."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any, Mapping

from ..operators import Role
from ..resources import read_toml
from ._grammar import numbered

__all__ = ["KindSpec", "Language", "ROLES", "check_spellings", "language", "load_language"]

# Every role a term can play (canonical forms order modifiers by the order of kinds in
# taxonomy/kinds.toml, not by role).
ROLES = tuple(r.value for r in Role)


@dataclass(frozen=True, slots=True)
class KindSpec:
    name: str
    roles: frozenset[str]
    description: str
    order: int
    unspecified: bool = False  # g_local, g_global: binding picks the subtype


@dataclass(frozen=True, slots=True)
class TextSpec:
    name: str
    role: str
    description: str
    order: int


@dataclass(frozen=True)
class Language:
    """Kinds of g term, text symbols, aliases and structural limits."""

    kinds: Mapping[str, KindSpec]
    kind_aliases: Mapping[str, str]
    texts: Mapping[str, TextSpec]
    max_compose_depth: int
    min_relation_arguments: int
    max_formula_length: int
    max_terms: int
    max_number_digits: int

    def resolve_kind(self, spelled: str) -> str | None:
        """Canonical kind for a spelling (``background`` -> ``bg``), None if unknown."""
        return self.kind_aliases.get(spelled)

    def kind_roles(self, kind: str | None) -> frozenset[str]:
        """Roles a g term of ``kind`` may take; the plain ``g`` is a local attribute."""
        if kind is None:
            return frozenset({"local"})
        return self.kinds[kind].roles

    def is_unspecified(self, kind: str | None) -> bool:
        """Whether a g term of ``kind`` leaves its subtype to binding (the plain ``g`` does)."""
        return kind is None or self.kinds[kind].unspecified

    def kind_order(self, kind: str | None) -> int:
        return -1 if kind is None else self.kinds[kind].order


@cache
def language() -> Language:
    return load_language(read_toml("taxonomy", "kinds.toml"), read_toml("grammar", "language.toml"))


def load_language(raw: Mapping[str, Any], limits: Mapping[str, Any]) -> Language:
    """The language from the parsed ``kinds.toml`` and ``language.toml`` (:func:`check_spellings`
    checks it against the grammar when the parser is built)."""
    kinds: dict[str, KindSpec] = {}
    aliases: dict[str, str] = {}
    for order, (name, spec) in enumerate(raw["kinds"].items()):
        roles = frozenset(spec["roles"])
        unknown = roles - set(ROLES)
        if unknown:
            raise ValueError(f"taxonomy/kinds.toml: kind {name!r} has unknown roles {sorted(unknown)}")
        kinds[name] = KindSpec(name, roles, spec.get("description", ""), order, bool(spec.get("unspecified", False)))
        for spelling in (name, *spec.get("aliases", ())):
            if spelling in aliases:
                raise ValueError(f"taxonomy/kinds.toml: spelling {spelling!r} names two kinds")
            aliases[spelling] = name
    texts = {
        name: TextSpec(name, spec["role"], spec.get("description", ""), order)
        for order, (name, spec) in enumerate(raw["text"].items())
    }
    return Language(
        kinds=MappingProxyType(kinds),
        kind_aliases=MappingProxyType(aliases),
        texts=MappingProxyType(texts),
        max_compose_depth=int(limits["max_compose_depth"]),
        min_relation_arguments=int(limits["min_relation_arguments"]),
        max_formula_length=int(limits["max_formula_length"]),
        max_terms=int(limits["max_terms"]),
        max_number_digits=int(limits["max_number_digits"]),
    )


def check_spellings(lang: Language) -> None:
    """Every kind spelling and text symbol of ``lang`` must be one symbol of the grammar that
    reads back as itself, numbered or not (``g_3d`` or ``g_a1`` could never be written)."""
    for spelling in lang.kind_aliases:
        if not numbered("GSYM", f"g_{spelling}"):
            raise ValueError(f"taxonomy/kinds.toml: kind spelling {spelling!r} cannot be written: g_{spelling} "
                             "would not read back as that kind under grammar/trace.lark's GSYM")
    for name in lang.texts:
        if not numbered("TSYM", f"T_{name}"):
            raise ValueError(f"taxonomy/kinds.toml: text symbol {name!r} cannot be written: T_{name} would not "
                             "read back as that name under grammar/trace.lark's TSYM")
