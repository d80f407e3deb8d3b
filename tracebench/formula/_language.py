"""The language's vocabulary and limits, read from taxonomy/kinds.toml, grammar/language.toml and the
category words of taxonomy/categories.toml."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any, Mapping

from ..operators import Role
from ..resources import DataFile, table_name
from ._grammar import numbered

__all__ = ["KindSpec", "Language", "ROLES", "category_words", "check_spellings", "language", "load_language"]

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
    category_words: Mapping[str, str]  # a word naming a category in f(person) -> the category
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


KINDS = DataFile("taxonomy", "kinds.toml")
LIMITS = DataFile("grammar", "language.toml")
CATEGORIES = DataFile("taxonomy", "categories.toml")
_LIMIT_NAMES = ("max_compose_depth", "min_relation_arguments", "max_formula_length", "max_terms", "max_number_digits")


@cache
def language() -> Language:
    return load_language(KINDS.read(), LIMITS.read(), CATEGORIES.read())


def load_language(raw: Mapping[str, Any], limits: Mapping[str, Any],
                  categories: Mapping[str, Any] | None = None) -> Language:
    """The language from the parsed ``kinds.toml``, ``language.toml`` and ``categories.toml`` (the
    words of ``f(person)``; none without it); :func:`check_spellings` checks it against the grammar
    when the parser is built."""
    kinds: dict[str, KindSpec] = {}
    aliases: dict[str, str] = {}
    for order, (name, spec) in enumerate(KINDS.tables("", raw, "kinds").items()):
        table = table_name("kinds", name)
        roles = frozenset(KINDS.strings(table, spec, "roles"))
        unknown = roles - set(ROLES)
        if unknown:
            raise KINDS.error(f"kind {name!r} has unknown roles {sorted(unknown)}", table, "roles")
        kinds[name] = KindSpec(name, roles, KINDS.value(table, spec, "description", str, ""), order,
                               KINDS.value(table, spec, "unspecified", bool, False))
        for spelling in (name, *KINDS.strings(table, spec, "aliases", ())):
            if spelling in aliases:
                raise KINDS.error(f"spelling {spelling!r} names two kinds", table, "aliases")
            aliases[spelling] = name
    texts = {
        name: TextSpec(name, KINDS.value(table_name("text", name), spec, "role", str),
                       KINDS.value(table_name("text", name), spec, "description", str, ""), order)
        for order, (name, spec) in enumerate(KINDS.tables("", raw, "text").items())
    }
    bounds = {name: LIMITS.value("", limits, name, int) for name in _LIMIT_NAMES}
    return Language(kinds=MappingProxyType(kinds), kind_aliases=MappingProxyType(aliases),
                    texts=MappingProxyType(texts), category_words=MappingProxyType(category_words(categories or {})),
                    **bounds)


def category_words(raw: Mapping[str, Any]) -> dict[str, str]:
    """Every word naming a category in a formula's anchor (``f(person)``), its own name too in
    lower case -> the category, from the parsed ``categories.toml``."""
    out: dict[str, str] = {}
    for name, entry in CATEGORIES.tables("", raw, "categories", {}).items():
        table = table_name("categories", name)
        for word in (name.lower(), *CATEGORIES.strings(table, entry, "words", ())):
            if out.setdefault(word, name) != name:
                raise CATEGORIES.error(f"the word {word!r} names both {out[word]} and {name}", table, "words")
    return out


def check_spellings(lang: Language) -> None:
    """Every kind spelling and text symbol of ``lang`` must be one symbol of the grammar that
    reads back as itself, numbered or not (``g_3d`` or ``g_a1`` could never be written)."""
    for spelling in lang.kind_aliases:
        if not numbered("GSYM", f"g_{spelling}"):
            raise KINDS.error(f"kind spelling {spelling!r} cannot be written: g_{spelling} would not read back "
                              "as that kind under grammar/trace.lark's GSYM",
                              table_name("kinds", lang.kind_aliases[spelling]))
    for name in lang.texts:
        if not numbered("TSYM", f"T_{name}"):
            raise KINDS.error(f"text symbol {name!r} cannot be written: T_{name} would not read back as that "
                              "name under grammar/trace.lark's TSYM", table_name("text", name))
