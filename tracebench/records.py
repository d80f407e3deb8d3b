"""Records of a benchmark folder (``trace sample``'s output), shared by the later stages.

``cases.jsonl`` holds one :class:`Case` a line; ``manifest.json`` one :class:`SampleManifest`.
Every path is relative to the benchmark folder, so the folder can be moved or shared.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Case", "Question", "Reference", "SampleManifest", "TermBinding"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reference(_Record):
    """One reference image of a case."""

    image: str = Field(description='how prompts and questions name it: "Image 1", "Image 2" ... in order of first mention')
    path: str = Field(description="the image file, relative to the benchmark folder")
    source_id: str = Field(description="the image id in the library it came from")


class TermBinding(_Record):
    """What one term of the formula was bound to."""

    symbol: str = Field(description='the numbered symbol in the formula: "f1", "g_pattern1", "T_e1", "g_rel1"')
    op: Literal["f", "g", "T"] = Field(description="anchor, disentangle or text term")
    role: str = Field(description="anchor, local, attach, ip, relation, global or text")
    kind: str | None = Field(default=None, description="g kind (pattern, style, rel ...) or text name (e)")
    carrier: str | None = Field(default=None, description='symbol the term is applied to: "f1", "T_e1", "C1"; none for carriers')
    handle: str | None = Field(default=None, description="the readable handle of a carrier in the prompt, e.g. corgi_A")
    noun: str | None = Field(default=None, description="what a carrier is, in a word or two")
    category: str | None = Field(default=None, description="entity category of a carrier or of a g term's source entity")
    image: str | None = Field(default=None, description='the reference image the term takes content from ("Image 2")')
    source_id: str | None = Field(default=None, description="library id of that image")
    entity: str | None = Field(default=None, description="grounding phrase of the source entity in that image")
    entity_index: int | None = Field(default=None, description="index of the source entity in the image's ent_list")
    subtype: str | None = Field(default=None, description='the taxonomy subtype a g term extracts ("1.1_pattern_texture", "4.1_style", "background", "attach", "ip")')
    value: str = Field(description="the content in words: the tag value, the text description, or the entity's description")
    participants: tuple[str, ...] = Field(default=(), description="for a relation: the carrier symbols it binds, in role order")


class Question(_Record):
    """One binary checklist question."""

    id: str = Field(description='stable id, "<target>:<aspect>", kept by diagnostic sub-cases: "f1:identity"')
    op: Literal["anchor", "disentangle", "apply", "compose"] = Field(description="the operator it scores")
    target: str = Field(description='the term or part it checks: "f2", "f2⊕g_pattern1", "C1"')
    aspect: str = Field(description="existence, identity, presence, fidelity, integrity, fit, exclusivity, coexistence, relation, spatial, duplication, leakage ...")
    question: str = Field(description="the question put to the judge, with handles and grounding phrases")
    expected: Literal["yes", "no"] = Field(description='the answer that passes ("no" for duplication and leakage)')
    depends_on: tuple[str, ...] = Field(default=(), description="ids of questions whose failure makes this one fail")
    images: tuple[str, ...] = Field(default=(), description='reference images the judge needs for it ("Image 1")')


class Case(_Record):
    """One benchmark case: a bound formula, its prompts, its references and its checklist."""

    id: str = Field(description="stable case id")
    slot: int = Field(ge=0, description="slot level: the number of f and g terms")
    template: str = Field(description="the canonical unbound template")
    formula: str = Field(description="the bound formula, parseable by `trace parse`")
    application: str | None = Field(default=None, description="the application mapping it comes from, if any")
    prompt: str = Field(description="the two-part prompt: scene paragraph, then one line per reference operation")
    text_only_prompt: str = Field(description="the same request with every reference replaced by its description")
    references: tuple[Reference, ...] = Field(description="reference images, in order of first mention")
    terms: tuple[TermBinding, ...] = Field(description="each term's binding, in order of appearance")
    checklist: tuple[Question, ...] = Field(description="binary questions per operator instance")


class SampleManifest(_Record):
    """``manifest.json`` of a benchmark folder: what produced it."""

    tool: str = Field(description="tracebench version")
    seed: int
    arguments: dict = Field(description="the sampling arguments")
    library: dict = Field(description="name, version and content hash of the library")
    hashes: dict[str, str] = Field(description="SHA-256 of the template space, quotas, applications, prompt and question templates")
    cases: int
    counts_per_slot: dict[str, int] = Field(description="general cases per slot level (application cases not counted)")
    counts_per_application: dict[str, int]
    distinct_templates: int
    whole_share: dict[str, float] = Field(description="per slot: achieved share of cases with a g_attach or g_ip term")
