"""The attribute taxonomy as data: categories and subtypes from taxonomy/*.toml."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Mapping

from .resources import read_toml

__all__ = ["SubtypeSpec", "Taxonomy", "taxonomy"]

ENTITY_GROUPS = ("1_Appearance", "2_Form", "3_Dynamics")
GLOBAL_GROUP = "4_Global"


@dataclass(frozen=True, slots=True)
class SubtypeSpec:
    key: str  # "1.1_pattern_texture"
    group: str  # "1_Appearance" ... "4_Global"
    definition: str
    categories: frozenset[str]  # categories it applies to (empty for global subtypes)
    kinds: tuple[str, ...]  # the g kinds that extract it
    receivers: frozenset[str] = frozenset()  # attach/ip: categories that can receive it whole

    def applies_to(self, category: str) -> bool:
        return category in self.categories


@dataclass(frozen=True)
class Taxonomy:
    categories: Mapping[str, str]  # name -> description
    humanoid: frozenset[str]
    subtypes: Mapping[str, SubtypeSpec]
    special: Mapping[str, SubtypeSpec]  # background, attach, ip

    def entity_subtypes(self) -> list[SubtypeSpec]:
        return [s for s in self.subtypes.values() if s.group in ENTITY_GROUPS]

    def global_subtypes(self) -> list[SubtypeSpec]:
        return [s for s in self.subtypes.values() if s.group == GLOBAL_GROUP]

    def subtypes_of_kind(self, kind: str) -> list[SubtypeSpec]:
        """The subtypes (and specials) a g kind extracts: ``style`` -> 4.1_style."""
        return [s for s in (*self.subtypes.values(), *self.special.values()) if kind in s.kinds]


@cache
def taxonomy() -> Taxonomy:
    cats = read_toml("taxonomy", "categories.toml")["categories"]
    raw = read_toml("taxonomy", "subtypes.toml")
    names = frozenset(cats)

    def spec(key: str, entry: dict, group: str) -> SubtypeSpec:
        categories = entry.get("categories", [])
        chosen = names if categories == ["*"] else frozenset(categories)
        unknown = chosen - names
        if unknown:
            raise ValueError(f"taxonomy/subtypes.toml: {key} names unknown categories {sorted(unknown)}")
        receivers = frozenset(entry.get("receivers", ()))
        if receivers - names:
            raise ValueError(f"taxonomy/subtypes.toml: {key} names unknown receivers {sorted(receivers - names)}")
        return SubtypeSpec(key, group, entry.get("definition", ""), chosen, tuple(entry.get("kinds", ())), receivers)

    subtypes = {key: spec(key, entry, entry["group"]) for key, entry in raw["subtypes"].items()}
    special = {key: spec(key, entry, "special") for key, entry in raw["special"].items()}
    return Taxonomy(
        categories=MappingProxyType({k: v.get("description", "") for k, v in cats.items()}),
        humanoid=frozenset(k for k, v in cats.items() if v.get("humanoid")),
        subtypes=MappingProxyType(subtypes),
        special=MappingProxyType(special),
    )
