"""Records of a benchmark folder (``trace sample``'s output), shared by the later stages.

``cases.jsonl`` holds one :class:`Case` a line; ``manifest.json`` one :class:`SampleManifest`.
Every path is relative to the benchmark folder, so the folder can be moved or shared.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Case", "GenerationRecord", "Question", "Reference", "RunManifest", "SampleManifest", "TermBinding", "Verdict",
           "Vote"]


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
    source_entities: int | None = Field(default=None, description="how many entities the source image holds (anchor difficulty)")
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


class GenerationRecord(_Record):
    """What a synthetic generator drew for a case, and every requirement it broke, with why.

    The synthetic zoo writes it into the PNG it returns (a ``tracebench-record`` text chunk),
    so the oracle judge can answer from the image alone, in process or over HTTP.
    """

    case_id: str = Field(description="the case (or diagnostic node) the image was made for")
    generator: str = Field(description='the generator spec, e.g. "synthetic:global-interference,noise:0.1"')
    drawn: dict = Field(description="what was drawn: the render plan of the image (entities, globals, relations)")
    failed: dict[str, str] = Field(default_factory=dict,
                                   description="question id -> the cause (profile) that broke that requirement")


class Vote(_Record):
    """One judge's answer to one question."""

    judge: str = Field(description="the judge spec")
    verdict: Literal["pass", "fail", "abstain"] = Field(description="after polarity; abstain when no usable answer")
    answer: Literal["yes", "no"] | None = Field(default=None, description="the raw answer, when there is one")
    reason: str = Field(default="", description="the judge's reason, or why it abstained")
    raw: str = Field(default="", description="this question's part of the raw reply (the whole reply is in the cache)")
    cache_key: str | None = Field(default=None, description="cache key of the call that produced the reply")


class Verdict(_Record):
    """One line of ``verdicts.jsonl``: the verdict on one question of one case."""

    case_id: str
    question_id: str
    op: str = Field(description="the question's operator")
    verdict: Literal["pass", "fail", "abstain"] = Field(description="the judges' majority; abstain on no answer or a tie")
    judge: str = Field(description="the judge spec, or the ensemble's specs joined by +")
    votes: tuple[Vote, ...] = Field(description="every judge's answer")


class RunManifest(_Record):
    """``run.json`` of a run folder."""

    tool: str
    cases_dir: str = Field(description="the benchmark folder the run read")
    cases_hash: str = Field(description="SHA-256 of its cases.jsonl")
    generator: str
    judges: tuple[str, ...]
    judge_batch: str = Field(description="case (one call per case) or op (one call per operator)")
    hashes: dict[str, str] = Field(description="SHA-256 of the judge prompt templates")
    shard: str | None = Field(default=None, description="i/n when the run covers one shard")
    cases: int = Field(description="cases with verdicts")
    verdicts: int
    calls: dict[str, int] = Field(description="model calls made by the last invocation, per generator and judge spec")
    cache_hits: int = Field(description="cache hits of the last invocation")
    abstentions: int = Field(description="questions whose verdict is an abstention")
    tokens: int = Field(description="tokens reported by the servers in the last invocation (0 where unknown)")
