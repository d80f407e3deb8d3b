"""What a library offers to binding: entities by category and subtype, global tags, relations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ..library import Entity, LibraryInfo, TaggedImage
from ..nouns import describe, noun_phrase
from ..operators import Role
from ..resources import DataFile
from ..taxonomy import taxonomy

__all__ = ["EntityRef", "GlobalRef", "LibraryIndex", "RelationRef", "TextCarrier", "text_carriers"]


@dataclass(frozen=True, slots=True)
class EntityRef:
    image: int  # index in the library
    entity: int  # index in ent_list
    category: str
    desc: str  # grounding phrase
    noun: str  # what it is, in a word or two: its `name`, else the head noun of its grounding phrase
    description: str  # the entity in words, for text-only prompts
    tags: tuple[tuple[str, str], ...]  # (subtype, first value) of every tagged subtype


@dataclass(frozen=True, slots=True)
class GlobalRef:
    image: int
    subtype: str  # 4.1_style ... or "background" (the image-level subtypes of taxonomy/subtypes.toml)
    value: str


@dataclass(frozen=True, slots=True)
class RelationRef:
    image: int
    subtype: str  # the relation subtype of taxonomy/subtypes.toml (4.6_inter_instance_relation)
    value: str  # the tag: "a child holding an apple"
    participants: tuple[EntityRef, ...]  # subject, object when the library knows them
    phrase: str | None  # the relation alone, "holding", when it can be read off the tag


@dataclass(frozen=True, slots=True)
class TextCarrier:
    phrase: str
    noun: str
    category: str


_TEXT_CARRIERS = DataFile("templates", "text_carriers.toml")


@cache
def text_carriers() -> tuple[TextCarrier, ...]:
    entries = _TEXT_CARRIERS.value("", _TEXT_CARRIERS.read(), "carriers", list)
    known, carriers = set(taxonomy().categories), []
    for k, entry in enumerate(entries, 1):
        table = f"carriers {k}"
        carrier = TextCarrier(*(_TEXT_CARRIERS.value(table, entry, key, str) for key in ("phrase", "noun", "category")))
        if carrier.category not in known:
            raise _TEXT_CARRIERS.error(f"unknown category {carrier.category!r} (known: {', '.join(sorted(known))})",
                                       table, "category")
        carriers.append(carrier)
    return tuple(carriers)


def _relation_phrase(value: str, subject: EntityRef, obj: EntityRef) -> str | None:
    """ "a child holding an apple" with nouns child, apple -> "holding"."""
    pattern = rf"^(?:a|an|the)\s+{re.escape(subject.noun)}\s+(.+?)\s+(?:a|an|the)\s+{re.escape(obj.noun)}$"
    match = re.match(pattern, value.strip(), flags=re.IGNORECASE)
    return match.group(1) if match else None


def noun_of_entity(entity: Entity, render: dict | None = None) -> str:
    """What an entity is called: its ``name``; for a synthetic image, the noun it was drawn as;
    else the head noun of its grounding phrase (:func:`tracebench.nouns.noun_phrase`)."""
    if entity.name:
        return entity.name
    return (render or {}).get("noun") or noun_phrase(entity.ent_desc).noun


@dataclass
class LibraryIndex:
    """A library arranged for binding: every list is in library order (deterministic)."""

    root: Path
    info: LibraryInfo
    images: list[TaggedImage]
    entities: list[EntityRef] = field(default_factory=list)
    by_subtype: dict[str, list[EntityRef]] = field(default_factory=dict)
    by_use: dict[str, list[EntityRef]] = field(default_factory=dict)  # "attach", "ip": entities usable whole
    globals_by_subtype: dict[str, list[GlobalRef]] = field(default_factory=dict)
    relations: list[RelationRef] = field(default_factory=list)
    by_id: dict[str, TaggedImage] = field(default_factory=dict)  # the images by their id

    @classmethod
    def build(cls, root: Path, info: LibraryInfo, images: list[TaggedImage]) -> "LibraryIndex":
        tax = taxonomy()
        index = cls(Path(root), info, list(images))
        index.by_id = {image.id: image for image in index.images}
        index.by_use = {key: [] for key, s in tax.special.items() if s.record == "usable_as"}
        relation_keys = [s.key for s in tax.global_subtypes() if s.role == Role.RELATION]
        backgrounds = [s.key for s in tax.special.values() if s.record == "background"]
        for i, image in enumerate(images):
            refs = index._add_entities(i, image)
            global_tags = image.global_tags()
            index._add_globals(i, image, global_tags, relation_keys, backgrounds)
            index._add_relations(i, image, refs, [(key, value) for key in relation_keys
                                                  for value in global_tags.get(key, ())])
        return index

    def _add_entities(self, i: int, image: TaggedImage) -> list[EntityRef]:
        """Image ``i``'s entities, by subtype and by use; returns them in ent_list order."""
        render_entities = (image.render or {}).get("entities") or []
        refs = []
        for j, entity in enumerate(image.ent_list):
            tags = entity.subtype_tags()
            noun = noun_of_entity(entity, render_entities[j] if j < len(render_entities) else None)
            ref = EntityRef(i, j, entity.category, entity.ent_desc, noun, describe(entity.ent_desc),
                            tuple((key, values[0]) for key, values in tags.items()))
            refs.append(ref)
            self.entities.append(ref)
            for key in tags:
                self.by_subtype.setdefault(key, []).append(ref)
            for use in entity.usable_as:
                self.by_use[use].append(ref)
        return refs

    def _add_globals(self, i: int, image: TaggedImage, global_tags: dict, relation_keys: list[str],
                     backgrounds: list[str]) -> None:
        """Image ``i``'s image-level tags but relations, and its background under each background subtype."""
        for key, values in global_tags.items():
            if key not in relation_keys:
                self.globals_by_subtype.setdefault(key, []).append(GlobalRef(i, key, values[0]))
        if image.background:
            for key in backgrounds:
                self.globals_by_subtype.setdefault(key, []).append(GlobalRef(i, key, image.background[0]))

    def _add_relations(self, i: int, image: TaggedImage, refs: list[EntityRef],
                       relation_tags: list[tuple[str, str]]) -> None:
        """Image ``i``'s relation tags, with their participants where its render plan names them."""
        known = (image.render or {}).get("relations") or []
        for k, (key, value) in enumerate(relation_tags):
            participants: tuple[EntityRef, ...] = ()
            if k < len(known):
                subject, obj = known[k].get("subject"), known[k].get("object")
                if isinstance(subject, int) and isinstance(obj, int) and max(subject, obj) < len(refs):
                    participants = (refs[subject], refs[obj])
            phrase = _relation_phrase(value, *participants) if participants else None
            self.relations.append(RelationRef(i, key, value, participants, phrase))
