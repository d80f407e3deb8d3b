"""Records of a tagged reference library (METHOD.md §5), as pydantic models.

Field names on disk are the paper's (``ent_list``, ``ent_desc``, ``tag_dict``,
``1_Appearance``, ``1.1_pattern_texture`` ... ``4.6_inter_instance_relation``); Python
names are readable aliases of them. Every model forbids unknown fields, so a misspelled or
unknown subtype is an error, not a silently dropped tag. taxonomy/subtypes.toml is the
source of the subtypes; a test keeps these models in step with it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Appearance",
    "Dynamics",
    "Entity",
    "Form",
    "GlobalTag",
    "LibraryInfo",
    "TagDict",
    "TaggedImage",
]

Tags = tuple[str, ...]


def _tags(alias: str, description: str) -> Any:
    return Field(default=(), alias=alias, description=description)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)


class Appearance(_Record):
    """``1_Appearance``."""

    pattern_texture: Tags = _tags("1.1_pattern_texture", "surface pattern or texture")
    material: Tags = _tags("1.2_material", "what the thing is made of")
    damage_wear: Tags = _tags("1.3_damage_wear", "damage, wear, dirt or aging marks")
    font: Tags = _tags("1.4_font", "typeface of rendered text")


class Form(_Record):
    """``2_Form``."""

    hairstyle: Tags = _tags("2.1_hairstyle", "hairstyle (humans and humanoids)")
    facial_features: Tags = _tags("2.2_facial_features", "facial features (humans and humanoids)")
    shape: Tags = _tags("2.3_shape", "outline or body shape")


class Dynamics(_Record):
    """``3_Dynamics``."""

    action_pose: Tags = _tags("3.1_action_pose", "action or body pose")
    expression: Tags = _tags("3.2_expression", "facial expression (humans and humanoids)")
    orientation: Tags = _tags("3.3_orientation", "which way the entity faces")
    motion_effect: Tags = _tags("3.4_motion_effect", "motion or visual effect")


class TagDict(_Record):
    """An entity's attribute tags in the paper's three groups."""

    appearance: Appearance = Field(default_factory=Appearance, alias="1_Appearance")
    form: Form = Field(default_factory=Form, alias="2_Form")
    dynamics: Dynamics = Field(default_factory=Dynamics, alias="3_Dynamics")


class GlobalTag(_Record):
    """Image-level tags (``global_tag``)."""

    style: Tags = _tags("4.1_style", "rendering style of the whole image")
    lighting: Tags = _tags("4.2_lighting", "lighting")
    camera_viewpoint: Tags = _tags("4.3_camera_viewpoint", "camera viewpoint")
    layout_sequence: Tags = _tags("4.4_layout_sequence", "layout or sequence")
    color_tone: Tags = _tags("4.5_color_tone", "color tone")
    inter_instance_relation: Tags = _tags("4.6_inter_instance_relation", "relations between entities")


class Entity(_Record):
    """One foreground instance of a reference image (an item of ``ent_list``)."""

    category: str = Field(description="one of the categories of taxonomy/categories.toml")
    ent_desc: str = Field(min_length=1, description="grounding phrase that locates the entity in the image")
    tag_dict: TagDict = Field(default_factory=TagDict, description="attribute tags by group")
    bbox: tuple[int, int, int, int] | None = Field(
        default=None, description="optional bounding box in pixels: left, top, right, bottom"
    )
    usable_as: tuple[Literal["attach", "ip"], ...] = Field(
        default=(), description="whole-entity uses: an attachable component (g_attach), a design (g_ip)"
    )

    def subtype_tags(self) -> dict[str, Tags]:
        """Non-empty tags by subtype key (``"1.1_pattern_texture"`` ...), across the three groups."""
        tags: dict[str, Tags] = {}
        for group in self.tag_dict.model_dump(by_alias=True).values():
            tags.update({key: value for key, value in group.items() if value})
        return tags


class TaggedImage(_Record):
    """One line of ``tags.jsonl``: a reference image and its tags."""

    id: str = Field(min_length=1, description="stable image id, unique in the library")
    path: str = Field(min_length=1, description="image path relative to the library root")
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
