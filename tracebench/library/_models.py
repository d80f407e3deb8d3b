"""Records of a tagged reference library (the paper's tagging format), as pydantic models.

Field names on disk are the paper's (``ent_list``, ``ent_desc``, ``tag_dict``,
``1_Appearance``, ``1.1_pattern_texture`` ... ``4.6_inter_instance_relation``); Python
names are the keys without their numbers (``appearance``, ``pattern_texture``). The tag
groups and their subtypes are not written here: :class:`TagDict` and :class:`GlobalTag`
are built from taxonomy/subtypes.toml (through :func:`tracebench.taxonomy.taxonomy`), so a
subtype added there is a field of every record. Every model forbids unknown fields, so a
misspelled or unknown subtype is an error, not a silently dropped tag.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from ..safepaths import RelativePath, SafeId
from ..taxonomy import SubtypeSpec, taxonomy

__all__ = [
    "Entity",
    "GlobalTag",
    "LibraryInfo",
    "TagDict",
    "TaggedImage",
]

Tags = tuple[str, ...]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)


def _tags_model(name: str, doc: str, subtypes: list[SubtypeSpec]) -> type[_Record]:
    fields: dict[str, Any] = {s.name: (Tags, Field(default=(), alias=s.key, description=s.definition))
                              for s in subtypes}
    return create_model(name, __base__=_Record, __doc__=doc, __module__=__name__, **fields)


def _tag_dict_model() -> type[_Record]:
    tax = taxonomy()
    fields: dict[str, Any] = {}
    for group in tax.groups_of("tag_dict"):
        model = _tags_model(group.name, f"``{group.key}``: {group.definition}.",
                            [s for s in tax.entity_subtypes() if s.group == group.key])
        fields[group.name.lower()] = (model, Field(default_factory=model, alias=group.key))
    return create_model("TagDict", __base__=_Record, __doc__="An entity's attribute tags by group.",
                        __module__=__name__, **fields)


TagDict = _tag_dict_model()
GlobalTag = _tags_model("GlobalTag", "Image-level tags (``global_tag``).", taxonomy().global_subtypes())
# whole-entity uses (g_attach, g_ip): the specials a tagged image marks with `usable_as`
_Use = Literal[tuple(key for key, s in taxonomy().special.items() if s.record == "usable_as")]  # type: ignore[valid-type]


def tag_dict_of(tags: Mapping[str, Tags]) -> TagDict:
    """An entity's tag dict from tags by subtype key (``{"1.1_pattern_texture": ("stripes",)}``)."""
    tax = taxonomy()
    groups: dict[str, dict[str, Tags]] = {g.key: {} for g in tax.groups_of("tag_dict")}
    for key, values in tags.items():
        groups[tax.subtypes[key].group][key] = values
    return TagDict.model_validate(groups)


class Entity(_Record):
    """One foreground instance of a reference image (an item of ``ent_list``)."""

    category: str = Field(description="one of the categories of taxonomy/categories.toml")
    ent_desc: str = Field(min_length=1, description="grounding phrase that locates the entity in the image")
    name: str | None = Field(
        default=None, description='optional short noun phrase naming the entity ("cat", "towers"): its handle and noun '
        "in prompts and questions; without it, the head noun of ent_desc"
    )
    tag_dict: TagDict = Field(default_factory=TagDict, description="attribute tags by group")
    bbox: tuple[int, int, int, int] | None = Field(
        default=None, description="optional bounding box in pixels: left, top, right, bottom"
    )
    usable_as: tuple[_Use, ...] = Field(
        default=(), description="whole-entity uses: an attachable component (g_attach), a design (g_ip)"
    )

    @field_validator("name", mode="before")
    @classmethod
    def _blank_name_is_none(cls, value: Any) -> Any:
        """A blank name is no name (a model may send "" for "I don't know")."""
        if isinstance(value, str):
            return " ".join(value.split()) or None
        return value

    def subtype_tags(self) -> dict[str, Tags]:
        """Non-empty tags by subtype key (``"1.1_pattern_texture"`` ...), across the groups."""
        tags: dict[str, Tags] = {}
        for group in self.tag_dict.model_dump(by_alias=True).values():
            tags.update({key: value for key, value in group.items() if value})
        return tags


class TaggedImage(_Record):
    """One line of ``tags.jsonl``: a reference image and its tags."""

    id: SafeId = Field(description="stable image id, unique in the library (it names files: letters, digits, '.', '_', '-')")
    path: RelativePath = Field(description="image path relative to the library root (inside it)")
    width: int = Field(gt=0, description="image width in pixels")
    height: int = Field(gt=0, description="image height in pixels")
    source: str = Field(default="unknown", description="where the image comes from (photo, illustration, synthetic ...)")
    license: str = Field(default="unknown", description="license of the image")
    ent_list: tuple[Entity, ...] = Field(default=(), description="foreground entities")
    background: Tags = Field(default=(), description="salient background content that is not a foreground instance")
    global_tag: GlobalTag = Field(default_factory=GlobalTag, description="image-level tags")
    render: dict[str, Any] | None = Field(
        default=None, description="for synthetic images: the exact render parameters (the ground truth)"
    )

    def global_tags(self) -> dict[str, Tags]:
        """Non-empty image-level tags by subtype key (``"4.1_style"`` ...)."""
        return {key: value for key, value in self.global_tag.model_dump(by_alias=True).items() if value}


class LibraryInfo(_Record):
    """``library.json``: what a library is, and a hash of its content."""

    name: str = Field(min_length=1, description="library name")
    version: str = Field(default="1", description="library version")
    images: int = Field(ge=0, description="number of tagged images")
    content_hash: str = Field(description="SHA-256 over tags.jsonl and every image file, in tags order")
    created_by: str = Field(default="", description="tool and version that wrote the library")
