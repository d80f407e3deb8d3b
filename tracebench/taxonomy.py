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
from functools import cached_property
from functools import cache
from types import MappingProxyType
from typing import Any, Mapping

from .formula._language import ROLES, Language, language
from .resources import read_toml

__all__ = ["GroupSpec", "SubtypeSpec", "Taxonomy", "load_taxonomy", "taxonomy"]

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

    def subtypes_of_kind(self, kind: str) -> list[SubtypeSpec]:
        """The subtypes (and specials) a g kind extracts: ``style`` -> 4.1_style."""
        return [s for s in (*self.subtypes.values(), *self.special.values()) if kind in s.kinds]


def _fail(message: str) -> ValueError:
    return ValueError(f"taxonomy/subtypes.toml: {message}")


def load_taxonomy(categories: Mapping[str, Any], subtypes: Mapping[str, Any], lang: Language | None = None) -> Taxonomy:
    """Build and check a taxonomy from the parsed ``categories.toml`` and ``subtypes.toml``."""
    lang = lang or language()
    cats = categories["categories"]
    names = frozenset(cats)
    groups: dict[str, GroupSpec] = {}
    for key, entry in subtypes["groups"].items():
        if not _GROUP_KEY.fullmatch(key):
            raise _fail(f"group {key!r} is not written <number>_<Name>")
        record, role = entry.get("record"), entry.get("role")
        if record not in GROUP_RECORDS:
            raise _fail(f"group {key}: record {record!r} is not one of {', '.join(GROUP_RECORDS)}")
        if role not in ROLES:
            raise _fail(f"group {key}: role {role!r} is not one of {', '.join(ROLES)}")
        groups[key] = GroupSpec(key, record, role, entry.get("definition", ""))

    def spec(key: str, entry: Mapping[str, Any], group: str, record: str, role: str) -> SubtypeSpec:
        categories = entry.get("categories", [])
        chosen = names if categories == ["*"] else frozenset(categories)
        if chosen - names:
            raise _fail(f"{key} names unknown categories {sorted(chosen - names)}")
        receivers = frozenset(entry.get("receivers", ()))
        if receivers - names:
            raise _fail(f"{key} names unknown receivers {sorted(receivers - names)}")
        role = entry.get("role", role)
        if role not in ROLES:
            raise _fail(f"{key}: role {role!r} is not one of {', '.join(ROLES)}")
        kinds = tuple(entry.get("kinds", ()))
        for kind in kinds:
            if kind not in lang.kinds:
                raise _fail(f"{key} lists kind {kind!r}, which taxonomy/kinds.toml does not define")
            if role not in lang.kinds[kind].roles:
                raise _fail(f"{key} is bound in the {role} role, but its kind {kind!r} has roles "
                            f"{', '.join(sorted(lang.kinds[kind].roles))} in taxonomy/kinds.toml")
        return SubtypeSpec(key, group, entry.get("definition", ""), chosen, kinds, receivers, role, record,
                           bool(entry.get("wildcard", True)), entry.get("attribute", ""))

    subtype_specs: dict[str, SubtypeSpec] = {}
    python_names: dict[str, str] = {}
    for key, entry in subtypes["subtypes"].items():
        match = _SUBTYPE_KEY.fullmatch(key)
        if not match:
            raise _fail(f"subtype {key!r} is not written <group>.<number>_<name> (lowercase name)")
        group = groups.get(entry.get("group"))
        if group is None:
            raise _fail(f"{key}: unknown group {entry.get('group')!r} (groups: {', '.join(groups)})")
        if match.group(1) in python_names:
            raise _fail(f"{key} and {python_names[match.group(1)]} share the name {match.group(1)!r}")
        python_names[match.group(1)] = key
        subtype_specs[key] = spec(key, entry, group.key, group.record, group.role)
    special: dict[str, SubtypeSpec] = {}
    for key, entry in subtypes["special"].items():
        record = entry.get("record")
        if record not in SPECIAL_RECORDS:
            raise _fail(f"special.{key}: record {record!r} is not one of {', '.join(SPECIAL_RECORDS)}")
        special[key] = spec(key, entry, "special", record, entry.get("role", ""))
    everything = (*subtype_specs.values(), *special.values())
    for kind, kind_spec in lang.kinds.items():
        if kind_spec.unspecified:
            continue
        for role in sorted(kind_spec.roles):
            if not any(kind in s.kinds and s.role == role for s in everything):
                raise _fail(f"no {role} subtype lists kind {kind!r}, so a g_{kind} term in that role could never "
                            f"be bound; list it under a subtype or drop the role in taxonomy/kinds.toml")
    return Taxonomy(
        categories=MappingProxyType({k: v.get("description", "") for k, v in cats.items()}),
        humanoid=frozenset(k for k, v in cats.items() if v.get("humanoid")),
        category_words=MappingProxyType(_category_words(cats)),
        groups=MappingProxyType(groups),
        subtypes=MappingProxyType(subtype_specs),
        special=MappingProxyType(special),
    )


def _category_words(cats: Mapping[str, Any]) -> dict[str, str]:
    """Every word naming a category (its own name too, lower case) -> the category."""
    out: dict[str, str] = {}
    for name, entry in cats.items():
        for word in (name.lower(), *entry.get("words", ())):
            if out.setdefault(word, name) != name:
                raise _fail(f"categories: the word {word!r} names both {out[word]} and {name}")
    return out


@cache
def taxonomy() -> Taxonomy:
    return load_taxonomy(read_toml("taxonomy", "categories.toml"), read_toml("taxonomy", "subtypes.toml"))
