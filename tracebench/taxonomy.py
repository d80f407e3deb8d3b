"""The attribute taxonomy as data: categories, tag groups and subtypes from taxonomy/*.toml.

Everything else reads subtypes from here: the tag records (``library._models``), the
synthetic world, binding, the synthetic generators. Loading checks the taxonomy against the
formula language's vocabulary (taxonomy/kinds.toml): every kind a subtype lists must exist
and be able to act in the subtype's role, and every kind the language accepts in a role
must name a subtype of that role (or leave it unspecified, like ``g`` and ``g_global``),
so a formula that validates never names a kind nothing can be bound to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, cached_property
from types import MappingProxyType
from typing import Any, Mapping

from .formula import (ROLES, Disentangle, Expr, FormulaConstraintError, Language, analyze, category_words,
                      language)
from .operators import Role
from .resources import DataFile, table_name

__all__ = ["GroupSpec", "SubtypeSpec", "Taxonomy", "build_taxonomy", "check_formula_kinds", "load_taxonomy",
           "taxonomy", "unbound_kinds"]

# Where a group's or a special's tags live in a tagged image (the paper's record format).
GROUP_RECORDS = ("tag_dict", "global_tag")
SPECIAL_RECORDS = ("background", "usable_as")
# Keys become Python names of the records' fields ("1.1_pattern_texture" -> pattern_texture).
_SUBTYPE_KEY = re.compile(r"[0-9]+\.[0-9]+_([a-z][a-z_]*)")
_GROUP_KEY = re.compile(r"[0-9]+_([A-Z][A-Za-z]*)")


@dataclass(frozen=True, slots=True)
class GroupSpec:
    key: str  # "1_Appearance"
    record: str  # "tag_dict" (an entity's tag_dict) or "global_tag" (the image's)
    role: str  # the formula role its subtypes are bound in, unless a subtype says otherwise
    definition: str

    @property
    def name(self) -> str:
        """The group without its number: ``Appearance``."""
        return self.key.split("_", 1)[1]


@dataclass(frozen=True, slots=True)
class SubtypeSpec:
    key: str  # "1.1_pattern_texture"; a special's name ("background", "attach", "ip")
    group: str  # "1_Appearance" ... "4_Global"; "special" for the specials
    definition: str
    categories: frozenset[str]  # categories it applies to (empty for image-level subtypes)
    kinds: tuple[str, ...]  # the g kinds that extract it
    receivers: frozenset[str] = frozenset()  # attach/ip: categories that can receive it whole
    role: str = "local"  # the formula role a term bound to it plays (kinds.toml roles)
    record: str = "tag_dict"  # where its tags live: tag_dict, global_tag, background, usable_as
    wildcard: bool = True  # whether a term of an unspecified kind (g, g_global) may be bound to it
    attribute_word: str = ""  # what a bound term names as its attribute, if not the name

    @property
    def name(self) -> str:
        """The subtype without its number: ``pattern_texture``; a special's own name."""
        return self.key.split("_", 1)[1] if self.key[:1].isdigit() else self.key

    @property
    def attribute(self) -> str:
        """The attribute a bound term names: ``g(I2, {"the robe"}, pattern_texture)``."""
        return self.attribute_word or self.name

    def applies_to(self, category: str) -> bool:
        return category in self.categories


@dataclass(frozen=True)
class Taxonomy:
    categories: Mapping[str, str]  # name -> description
    humanoid: frozenset[str]
    category_words: Mapping[str, str]  # a word naming a category in f(person) -> the category
    groups: Mapping[str, GroupSpec]
    subtypes: Mapping[str, SubtypeSpec]
    special: Mapping[str, SubtypeSpec]  # background, attach, ip

    def entity_subtypes(self) -> list[SubtypeSpec]:
        """The subtypes of an entity's ``tag_dict``, in file order."""
        return [s for s in self.subtypes.values() if s.record == "tag_dict"]

    def global_subtypes(self) -> list[SubtypeSpec]:
        """The subtypes of an image's ``global_tag``, in file order."""
        return [s for s in self.subtypes.values() if s.record == "global_tag"]

    def groups_of(self, record: str) -> list[GroupSpec]:
        return [g for g in self.groups.values() if g.record == record]

    def of_role(self, role: str) -> list[SubtypeSpec]:
        """Subtypes and specials bound in one formula role (``local``, ``global``, ``attach`` ...)."""
        return list(self._by_role.get(role, ()))

    @cached_property
    def _by_role(self) -> dict[str, tuple[SubtypeSpec, ...]]:  # binding asks for every term
        roles: dict[str, list[SubtypeSpec]] = {}
        for spec in (*self.subtypes.values(), *self.special.values()):
            roles.setdefault(spec.role, []).append(spec)
        return {role: tuple(specs) for role, specs in roles.items()}

    def binds(self, kind: str, role: str) -> bool:
        """Whether a subtype (or special) bound in ``role`` lists the g kind ``kind``."""
        return any(kind in s.kinds for s in self.of_role(role))

    def subtypes_of_kind(self, kind: str) -> list[SubtypeSpec]:
        """The subtypes (and specials) a g kind extracts: ``style`` -> 4.1_style."""
        return [s for s in (*self.subtypes.values(), *self.special.values()) if kind in s.kinds]


CATEGORIES = DataFile("taxonomy", "categories.toml")
SUBTYPES = DataFile("taxonomy", "subtypes.toml")


def load_taxonomy(categories: Mapping[str, Any], subtypes: Mapping[str, Any], lang: Language | None = None) -> Taxonomy:
    """Build and check a taxonomy from the parsed ``categories.toml`` and ``subtypes.toml``."""
    lang = lang or language()
    return _bound(build_taxonomy(categories, subtypes, lang), lang)


def _bound(tax: Taxonomy, lang: Language) -> Taxonomy:
    """``tax``, once every kind of the vocabulary is bound in each of its roles."""
    for kind, role in unbound_kinds(tax, lang):
        raise SUBTYPES.error(f"no {role} subtype lists kind {kind!r}, so a g_{kind} term in that role could never "
                             "be bound; list it under a subtype or drop the role in taxonomy/kinds.toml", "subtypes")
    return tax


def build_taxonomy(categories: Mapping[str, Any], subtypes: Mapping[str, Any], lang: Language) -> Taxonomy:
    """The taxonomy, each subtype checked against the vocabulary; whether every kind of the
    vocabulary is bound somewhere is :func:`unbound_kinds`."""
    cats = CATEGORIES.tables("", categories, "categories")
    groups = _groups(subtypes)
    entries = SUBTYPES.tables("", subtypes, "subtypes")
    python_names: dict[str, str] = {}
    for key, entry in entries.items():
        match = _SUBTYPE_KEY.fullmatch(key)
        if not match:
            raise SUBTYPES.error(f"subtype {key!r} is not written <group>.<number>_<name> (lowercase name)", "subtypes")
        if match.group(1) in python_names:
            raise SUBTYPES.error(f"{key} and {python_names[match.group(1)]} share the name {match.group(1)!r}",
                                 "subtypes")
        python_names[match.group(1)] = key
    reader = _SubtypeReader(frozenset(cats), lang)
    subtype_specs = {key: reader.subtype(key, entry, groups) for key, entry in entries.items()}
    special = {key: reader.special(key, entry) for key, entry in SUBTYPES.tables("", subtypes, "special").items()}
    return Taxonomy(
        categories=MappingProxyType({k: CATEGORIES.value(table_name("categories", k), v, "description", str, "")
                                     for k, v in cats.items()}),
        humanoid=frozenset(k for k, v in cats.items() if CATEGORIES.value(table_name("categories", k), v, "humanoid",
                                                                          bool, False)),
        category_words=MappingProxyType(category_words(categories)),
        groups=MappingProxyType(groups),
        subtypes=MappingProxyType(subtype_specs),
        special=MappingProxyType(special),
    )


def _groups(subtypes: Mapping[str, Any]) -> dict[str, GroupSpec]:
    groups: dict[str, GroupSpec] = {}
    for key, entry in SUBTYPES.tables("", subtypes, "groups").items():
        table = table_name("groups", key)
        if not _GROUP_KEY.fullmatch(key):
            raise SUBTYPES.error(f"group {key!r} is not written <number>_<Name>", "groups")
        record, role = entry.get("record"), entry.get("role")
        if record not in GROUP_RECORDS:
            raise SUBTYPES.error(f"group {key}: record {record!r} is not one of {', '.join(GROUP_RECORDS)}", "groups")
        if role not in ROLES:
            raise SUBTYPES.error(f"group {key}: role {role!r} is not one of {', '.join(ROLES)}", "groups")
        groups[key] = GroupSpec(key, record, role, SUBTYPES.value(table, entry, "definition", str, ""))
    return groups


@dataclass(frozen=True)
class _SubtypeReader:
    """Reads one ``[subtypes.KEY]`` or ``[special.KEY]`` table, checked against the categories and
    the vocabulary."""

    names: frozenset[str]  # the categories
    lang: Language

    def subtype(self, key: str, entry: Mapping[str, Any], groups: Mapping[str, GroupSpec]) -> SubtypeSpec:
        group = groups.get(entry.get("group"))
        if group is None:
            raise SUBTYPES.error(f"{key}: unknown group {entry.get('group')!r} (groups: {', '.join(groups)})",
                                 "subtypes")
        return self._spec(key, entry, ("subtypes", group.key, group.record, group.role))

    def special(self, key: str, entry: Mapping[str, Any]) -> SubtypeSpec:
        record = entry.get("record")
        if record not in SPECIAL_RECORDS:
            raise SUBTYPES.error(f"special.{key}: record {record!r} is not one of {', '.join(SPECIAL_RECORDS)}",
                                 "special")
        return self._spec(key, entry, ("special", "special", record, entry.get("role", "")))

    def _spec(self, key: str, entry: Mapping[str, Any], place: tuple[str, str, str, str]) -> SubtypeSpec:
        """``place``: the file's table (subtypes, special), the group, the record and the role by default."""
        where, group, record, role = place
        table = table_name(where, key)
        categories = SUBTYPES.strings(table, entry, "categories", ())
        chosen = self.names if categories == ("*",) else frozenset(categories)
        if chosen - self.names:
            raise SUBTYPES.error(f"{key} names unknown categories {sorted(chosen - self.names)}", where)
        receivers = frozenset(SUBTYPES.strings(table, entry, "receivers", ()))
        if receivers - self.names:
            raise SUBTYPES.error(f"{key} names unknown receivers {sorted(receivers - self.names)}", where)
        role = entry.get("role", role)
        if role not in ROLES:
            raise SUBTYPES.error(f"{key}: role {role!r} is not one of {', '.join(ROLES)}", where)
        kinds = SUBTYPES.strings(table, entry, "kinds", ())
        for kind in kinds:
            if kind not in self.lang.kinds:
                raise SUBTYPES.error(f"{key} lists kind {kind!r}, which taxonomy/kinds.toml does not define", where)
            if role not in self.lang.kinds[kind].roles:
                raise SUBTYPES.error(f"{key} is bound in the {role} role, but its kind {kind!r} has roles "
                                     f"{', '.join(sorted(self.lang.kinds[kind].roles))} in taxonomy/kinds.toml", where)
        return SubtypeSpec(key, group, SUBTYPES.value(table, entry, "definition", str, ""), chosen, kinds, receivers,
                           role, record, SUBTYPES.value(table, entry, "wildcard", bool, True),
                           SUBTYPES.value(table, entry, "attribute", str, ""))


def unbound_kinds(tax: Taxonomy, lang: Language) -> list[tuple[str, str]]:
    """(kind, role) of every kind the vocabulary accepts in a role no subtype of that role lists
    (the unspecified kinds, ``g_local``, ``g_global``, leave the subtype to binding)."""
    return [(kind, role) for kind, spec in lang.kinds.items() if not spec.unspecified
            for role in sorted(spec.roles) if not tax.binds(kind, role)]


def check_formula_kinds(expr: Expr, tax: Taxonomy | None = None) -> None:
    """Every g term of ``expr`` names a kind some subtype lists in the term's role, else a
    :class:`FormulaConstraintError` at its column: a formula the taxonomy could never bind."""
    tax = tax or _built_taxonomy()
    lang = language()
    for term in analyze(expr):
        if not isinstance(term.node, Disentangle) or lang.is_unspecified(term.kind):
            continue
        role = Role(term.role).value
        if not tax.binds(term.kind, role):
            raise FormulaConstraintError(f"{term.symbol}: no {role} subtype of taxonomy/subtypes.toml lists kind "
                                         f"{term.kind!r}, so the term could never be bound", column=term.node.column,
                                         line=term.node.line)


@cache
def _built_taxonomy() -> Taxonomy:
    return build_taxonomy(CATEGORIES.read(), SUBTYPES.read(), language())


@cache
def taxonomy() -> Taxonomy:
    return _bound(_built_taxonomy(), language())
