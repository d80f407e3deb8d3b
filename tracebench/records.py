"""The records written to disk by every stage, and the files that hold them.

A benchmark folder (``trace sample``) holds ``cases.jsonl`` (one :class:`Case` a line),
``manifest.json`` (:class:`SampleManifest`) and ``references/``; every path in it is relative
to the folder, so the folder can be moved or shared. A run folder holds ``run.json``
(:class:`RunManifest`) and ``verdicts.jsonl`` (:class:`Verdict`); a diagnosis folder
``diagnosis.json``, ``trees.jsonl`` and ``summary.json``. The end of this module declares each
file once, with its one reader and writer (:mod:`tracebench.jsonfiles`): ``CASES.read(folder)``,
``RUN_MANIFEST.write(folder, manifest)``; a bad line is ``FILE:LINE: field: message``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Iterator, Literal, Mapping, Sequence

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError, core_schema

from .errors import TraceError
from .choices import Executor, JudgeBatch, executor_of  # noqa: F401  (record types' values)
from .jsonfiles import JsonFile, JsonLinesFile
from .operators import Family, Operator, Role
from .outcomes import Outcome, Status
from .safepaths import RelativePath, SafeId
from .scales import Scale, all_answers, alternatives, answer_scale, recorded_scale_names

__all__ = ["Attribution", "CASES", "CASES_FILE", "Case", "Clutter", "Distractor", "PoolTarget", "DIAGNOSIS_FILE", "DIAGNOSIS_MANIFEST", "DiagnosisManifest",
           "DiagnosisSummary", "DiagnosticEdge", "DiagnosticNode", "DiagnosticTree", "Endpoint", "Executor", "GENERATION_SUFFIX",
           "executor_of", "GenerationInfo", "GenerationRecord",
           "JudgeBatch", "LeftOut", "OneOf", "MANIFEST_FILE", "NODES", "NODES_FILE", "NodeOccurrence", "Question", "REFERENCES_DIR", "RUN_FILE",
           "RUN_MANIFEST", "Reference", "RunManifest", "SAMPLE_MANIFEST", "SUMMARY", "SUMMARY_FILE",
           "SampleManifest", "TREES", "TREES_FILE", "TermBinding", "VERDICTS", "VERDICTS_FILE", "Verdict", "Vote",
           "MAX_SAMPLES", "case_problem", "checklist_problem", "clutter_problem", "checked_run_verdicts", "read_cases", "read_generation_info", "sample_name", "split_sample_name", "read_run_verdicts", "repeated_question", "read_sample_manifest", "read_verdicts"]

MAX_SAMPLES = 1000  # the most generations of a case: trace run --samples, trace diagnose --repeats


@dataclass(frozen=True)
class OneOf:
    """A text field whose values are ``names()`` when it is validated, for a vocabulary that grows at
    run time (the answer scales): ``Annotated[str, OneOf(scale_names)]``. Another value is refused
    as a ``Literal`` refuses it, and the JSON schema lists the names as a ``Literal``'s does."""

    names: Callable[[], Sequence[str]]

    def _check(self, value: object) -> str:
        names = self.names()
        if isinstance(value, str) and value in names:
            return str(value)  # a Scale or an enum member held as its plain text
        expected = alternatives(repr(str(n)) for n in names)
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self._check)

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {"enum": [str(n) for n in self.names()], "type": "string"}


RecordedScale = Annotated[str, OneOf(recorded_scale_names)]  # a scale a record names: any but the default
Answer = Annotated[str, OneOf(all_answers)]  # a judge's raw answer, on any scale


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _is_none(value: object) -> bool:
    return value is None


class _Sparse(_Record):
    """A record some of whose fields are written only when set, so files without them keep their
    bytes: each field named in ``_omitted_when_none`` is left out of the JSON while it is None
    (pydantic's ``exclude_if``, set here once per class, so serialising stays in pydantic-core)."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        missing = [name for name in cls._omitted_when_none if name not in cls.model_fields]
        if missing:
            raise TypeError(f"{cls.__name__}._omitted_when_none names no field {missing}")
        for name in cls._omitted_when_none:
            cls.model_fields[name].exclude_if = _is_none
        cls.model_rebuild(force=True)


class Reference(_Record):
    """One reference image of a case."""

    image: str = Field(description='how prompts and questions name it: "Image 1", "Image 2" ... in order of first mention')
    path: RelativePath = Field(description="the image file, relative to the benchmark folder (inside it)")
    source_id: str = Field(description="the image id in the library it came from")


class TermBinding(_Record):
    """What one term of the formula was bound to."""

    symbol: str = Field(description='the numbered symbol in the formula: "f1", "g_pattern1", "T_e1", "g_rel1"')
    op: Family = Field(description="the term's family: f (anchored entity), g (disentangled attribute) or T (text)")
    role: Role = Field(description="anchor, local, attach, ip, relation, global or text")
    kind: str | None = Field(default=None, description="g kind (pattern, style, rel ...) or text name (e)")
    carrier: str | None = Field(default=None, description='symbol the term is applied to: "f1", "T_e1", "C1"; none for carriers')
    handle: str | None = Field(default=None, description="the readable handle of a carrier in the prompt, e.g. corgi_A")
    noun: str | None = Field(default=None, description="what a carrier is, in a word or two")
    category: str | None = Field(default=None, description="entity category of a carrier or of a g term's source entity")
    image: str | None = Field(default=None, description='the reference image the term takes content from ("Image 2")')
    source_id: str | None = Field(default=None, description="library id of that image")
    entity: str | None = Field(default=None, description="grounding phrase of the source entity in that image (of a reference relation: its participants there)")
    entity_index: int | None = Field(default=None, description="index of the source entity in the image's ent_list")
    source_entities: int | None = Field(default=None, description="how many entities the source image holds (anchor difficulty)")
    subtype: str | None = Field(default=None, description='the taxonomy subtype a g term extracts ("1.1_pattern_texture", "4.1_style", "background", "attach", "ip")')
    value: str = Field(description="the content in words: the tag value, the text description, or the entity's description")
    participants: tuple[str, ...] = Field(default=(), description="for a relation: the carrier symbols it binds, in role order")
    replaces: str | None = Field(default=None, description="in a diagnostic sub-case: the symbol of the root term this one "
                                 "states in words (its reference dropped); none elsewhere")


class Question(_Record):
    """One binary checklist question."""

    id: str = Field(description='stable id, "<target>:<aspect>", kept by diagnostic sub-cases: "f1:identity"')
    op: Operator = Field(description="the operator it scores")
    target: str = Field(description='the term or part it checks: "f2", "f2⊕g_pattern1", "C1"')
    aspect: str = Field(description="existence, identity, presence, fidelity, isolation, carrier, integrity, visibility, fit, exclusivity, coexistence, relation, spatial, duplication, leakage, leakage_context ... (templates/checklist/questions.toml)")
    question: str = Field(description="the question put to the judge, with handles and grounding phrases")
    expected: Literal["yes", "no"] = Field(description='the answer that passes ("no" for duplication and leakage)')
    depends_on: tuple[str, ...] = Field(default=(), description="ids of questions whose failure makes this one fail")
    images: tuple[str, ...] = Field(default=(), description='reference images the judge needs for it ("Image 1")')


class Distractor(_Record):
    """A hard-negative reference of a case: an image the formula does not use, chosen from the
    library to be confused with one of its terms (reference clutter, ``trace sample --distractors``)."""

    id: str = Field(description='"d1", "d2" ... in the order they were chosen; names its rejection questions')
    image: str = Field(description='the reference it is ("Image 3"): interleaved with the formula\'s own images')
    source_id: str = Field(description="library id of that image")
    confuses: str = Field(description='the symbol of the term it can be mistaken for: "f1", "g_pattern1", "g_style1"')
    entity: str | None = Field(default=None, description="grounding phrase of the confusable entity in that image; "
                                                        "none for an image-level tag")
    entity_index: int | None = Field(default=None, description="index of that entity in the image's ent_list")
    value: str = Field(description="the confusable content in words: the entity's description, or the tag value")
    shares: tuple[str, ...] = Field(description='why it is hard: what it shares with the term\'s source ("category '
                                                'Animal", "noun dog", "subtype 1.1_pattern_texture", '
                                                '"3.1_action_pose: sitting")')


class PoolTarget(_Record):
    """In pool mode, a term whose source the prompt does not name: the truth of its pool."""

    term: str = Field(description="the pooled term's symbol")
    image: str = Field(description="the true source among the references")
    confusers: tuple[str, ...] = Field(description="the references that are its confusers (distractors confusing it)")
    confusion: float = Field(ge=0, le=1, description="retrieval confusion: the share of confusers among the term's "
                                                     "candidates (confusers / (confusers + 1))")


class Clutter(_Record):
    """The reference clutter of a case: its distractors and, in pool mode, the truth of each pool."""

    mode: Literal["named", "pool"] = Field(description="named: the prompt names the image of every term, never a "
                                                       "distractor; pool: entity terms are named by description only")
    asked: int = Field(default=0, ge=0, description="distractors asked for this case (drawn from the range, capped by "
                                         "max_references); more than it has when the library held no more hard "
                                         "negatives for its terms")
    distractors: tuple[Distractor, ...] = Field(description="the hard negatives among the references")
    pooled: tuple[PoolTarget, ...] = Field(default=(), description="pool mode: each pooled term's true source")


class Case(_Sparse):
    """One benchmark case: a bound formula, its prompts, its references and its checklist."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("clutter",)  # a case without clutter reads as before it

    id: SafeId = Field(description="stable case id (it names files: letters, digits, '.', '_', '-')")
    slot: int = Field(ge=0, description="slot level: the number of f and g terms")
    template: str = Field(description="the canonical unbound template")
    formula: str = Field(description="the bound formula, parseable by `trace parse`")
    application: str | None = Field(default=None, description="the application mapping it comes from, if any")
    prompt: str = Field(description="the two-part prompt: scene paragraph, then one line per reference operation")
    text_only_prompt: str = Field(description="the same request with every reference replaced by its description")
    scene: str = Field(description="the scene paragraph's opening, with {members} (or {member}) where the entities go; "
                                   "diagnostic sub-cases keep it")
    references: tuple[Reference, ...] = Field(description="reference images, in order of first mention")
    terms: tuple[TermBinding, ...] = Field(description="each term's binding, in order of appearance")
    checklist: tuple[Question, ...] = Field(description="binary questions per operator instance")
    clutter: Clutter | None = Field(default=None, description="distractor references and pools (trace sample "
                                    "--distractors, --pool); absent when the case has none")

    @property
    def distractors(self) -> tuple[Distractor, ...]:
        return self.clutter.distractors if self.clutter else ()


class LeftOut(_Record):
    """A family of terms the library cannot supply, left out of a benchmark by ``trace sample``."""

    family: str = Field(description='the terms that need it: "g_attach", "g_rel", "g_style", "g" (a plain attribute)')
    reason: str = Field(description="what the library lacks, and the tag field that would supply it")
    templates: dict[str, int] = Field(default_factory=dict, description="per slot level sampled: templates of the "
                                      "template space left out for it")
    applications: tuple[str, ...] = Field(default=(), description="applications left out whole for it")
    formulas: tuple[str, ...] = Field(default=(), description='formulas left out of applications that keep others, '
                                      '"<application>: <formula>"')


def _shard_in_range(text: str) -> str:
    first, _, count = text.partition("/")
    if not 1 <= int(first) <= int(count):
        raise ValueError(f"{text!r}: a shard i/n has 1 <= i <= n")
    return text


# ``i/n``, the shard a run or a diagnosis covers: checked when read (a record may come from anyone)
Shard = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,8}/[1-9][0-9]{0,8}$"), AfterValidator(_shard_in_range)]


class _OnScale:
    """A record with a ``scale`` field (None: the default scale)."""

    @property
    def answer_scale(self) -> Scale:
        """The scale its judges answered on (:func:`tracebench.scales.answer_scale`)."""
        return answer_scale(self.scale)  # type: ignore[attr-defined]


class SampleManifest(_Sparse):
    """``manifest.json`` of a benchmark folder: what produced it."""

    tool: str = Field(description="tracebench version")
    seed: int
    arguments: dict = Field(description="the sampling arguments (``library``: the library folder, when not the "
                                        "shipped one, a path)")
    library: dict = Field(description="name, version and content hash of the library")
    hashes: dict[str, str] = Field(description="SHA-256 of the template space, quotas, applications, prompt and question templates")
    cases: int
    counts_per_slot: dict[str, int] = Field(description="general cases per slot level (application cases not counted)")
    counts_per_application: dict[str, int]
    distinct_templates: int
    whole_share: dict[str, float] = Field(description="per slot: achieved share of cases with a g_attach or g_ip term")
    left_out: tuple[LeftOut, ...] = Field(default=(), description="what the library could not supply and was left "
                                          "out (templates, applications); empty when nothing was")
    clutter: dict | None = Field(default=None, description="the clutter settings (distractors, max_references, mode) "
                                 "and what they gave: distractors_placed, cases_per_distractors, cases_short (cases "
                                 "with fewer than asked); absent without --distractors or --pool")
    counts_per_inputs: dict[str, int] | None = Field(default=None, description="cases per number of input images "
                                                     "(references); written with clutter")

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("clutter", "counts_per_inputs")



    @field_validator("arguments")
    @classmethod
    def _library_is_a_path(cls, arguments: dict) -> dict:
        library = arguments.get("library")
        if library is not None and not (isinstance(library, str) and library and "\0" not in library):
            raise ValueError(f"arguments.library: expected a folder's path, got {type(library).__name__}")
        return arguments

    @property
    def library_folder(self) -> Path | None:
        """The library the benchmark was sampled from (the synthetic zoo's render plans); None:
        the shipped one."""
        library = self.arguments.get("library")
        return Path(library) if library else None

class GenerationRecord(_Sparse):
    """What a synthetic generator drew for a case, and every requirement it broke, with why.

    The synthetic zoo writes it into the PNG it returns (a ``tracebench-record`` text chunk),
    so the oracle judge can answer from the image alone, in process or over HTTP.
    """

    case_id: str = Field(description="the case (or diagnostic node) the image was made for")
    generator: str = Field(description='the generator spec, e.g. "synthetic:global-interference,noise:0.1"')
    drawn: dict = Field(description="what was drawn: the render plan of the image (entities, globals, relations)")
    failed: dict[str, str] = Field(default_factory=dict,
                                   description="question id -> the cause (profile) that broke that requirement")
    causes: dict[str, tuple[str, ...]] = Field(default_factory=dict,
                                               description="question id -> every failure mode that broke it, in "
                                                           "profile order (failed holds the first)")
    partial: dict[str, str] | None = Field(default=None, description="question id -> the cause, of the failed "
                                           "requirements only partly broken (a graded scale sees them: ternary 1, "
                                           "identity tier 0.2); absent when none is")

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("partial",)


class Vote(_Sparse):
    """One judge's answer to one question."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("model", "fingerprint")

    judge: str = Field(description="the judge spec")
    verdict: Status = Field(description="after polarity; abstain when no usable answer")
    value: float | None = Field(default=None, ge=0, le=1, description="the graded value of the outcome: 1 pass, 0 fail, "
                                "partial credit between; none when abstained")
    answer: Answer | None = Field(
        default=None, description="the raw answer, when there is one: yes/no, a ternary grade 2/1/0 or an identity "
                                  "tier 1.0/0.2/0.0 (trace run --scale; the grade as the question is asked)")
    reason: str = Field(default="", description="the judge's reason, or why it abstained")
    raw: str = Field(default="", description="this question's part of the raw reply (the whole reply is in the cache)")
    cache_key: str | None = Field(default=None, description="cache key of the call that produced the reply")
    model: str | None = Field(default=None, description="the model the server reported answering (a served judge); "
                              "absent when it did not say")
    fingerprint: str | None = Field(default=None, description="the server's system_fingerprint of that reply; absent "
                                    "when it did not say")

    @property
    def outcome(self) -> Outcome:
        return Outcome.of(self.verdict, self.value)


class Verdict(_Sparse):
    """One line of ``verdicts.jsonl``: the verdict on one question of one case (of one of its
    samples, with ``trace run --samples K``)."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("sample",)

    @property
    def outcome(self) -> Outcome:
        return Outcome.of(self.verdict, self.value)

    case_id: SafeId
    question_id: str
    sample: int | None = Field(default=None, ge=1, lt=MAX_SAMPLES, description="which generation of the case the verdict judges "
                               "(trace run --samples K: 1 .. K-1, its image images/<case id>~<sample>.png); absent "
                               "for the first (images/<case id>.png)")
    op: Operator = Field(description="the question's operator")
    verdict: Status = Field(description="the judges' combined verdict (the run's ensemble rule); abstain on no answer "
                                        "(or, by majority, a tie)")
    value: float | None = Field(default=None, ge=0, le=1, description="the graded value: the mean of the answering "
                                "votes (mean), or of the votes that formed the majority (majority); none when abstained")
    judge: str = Field(description="the judge spec, or the ensemble's specs joined by +")
    votes: tuple[Vote, ...] = Field(description="every judge's answer")


class Endpoint(_Record):
    """Where a model was served: its base URLs (no credentials) and the variable holding its key."""

    base_urls: tuple[str, ...] = Field(description="the replicas' base URLs, without user, password or query")
    api_key_env: str = Field(description="the environment variable the key was read from (never the key)")


class GenerationInfo(_Sparse):
    """``images/<case id>.json`` beside a generated image, when there is something to say about it:
    which references the generator reports having used, whether it was sent a collage."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("sample",)

    case_id: SafeId
    used_references: tuple[str, ...] | None = Field(default=None, description='the references the generator says it '
                                                    'used ("Image 2" ...); none when it does not say')
    collage: bool = Field(default=False, description="whether the references were sent as one grid image (the "
                                                     "generator accepts fewer images than the case holds; --collage)")
    sample: int | None = Field(default=None, ge=1, lt=MAX_SAMPLES, description="trace run --samples: the generation it is of (1 .. "
                                                               "K-1, beside images/<case id>~<sample>.png); absent "
                                                               "for the first")


class RunManifest(_OnScale, _Sparse):
    """``run.json`` of a run folder."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("max_images", "collage", "not_applicable", "collaged", "scale",
                                                     "rejudged_from", "unfinished", "judge_models",
                                                     "judge_model_changes", "generator_options", "samples",
                                                     "sample_seeds", "cost")

    tool: str
    cases_dir: str = Field(description="the benchmark folder the run read")
    cases_hash: str = Field(description="SHA-256 of its cases.jsonl")
    generator: str
    seed: int | None = Field(default=None, description="seed of a synthetic generator; none for other generators")
    sample: int = Field(default=0, ge=0, lt=MAX_SAMPLES, description="which generation of each case the images are (0 the first; trace "
                                               "diagnose --repeats makes later ones): a later one is a call of its own")
    judges: tuple[str, ...]
    judge_batch: str = Field(description="case (one call per case) or op (one call per operator)")
    ensemble: str | None = Field(default=None, description="how several judges combine: mean (the paper), majority or "
                                                           "median (the default on a graded scale); "
                                                           "none with one judge (and in runs before the rule was "
                                                           "recorded, which took the majority)")
    hashes: dict[str, str] = Field(description="SHA-256 of the judge prompt templates")
    shard: Shard | None = Field(default=None, description="i/n when the run covers one shard")
    cases: int = Field(description="cases with verdicts")
    verdicts: int
    calls: dict[str, int] = Field(description="model calls made by the last invocation, per generator and judge spec")
    cache_hits: int = Field(description="cache hits of the last invocation")
    abstentions: int = Field(description="questions whose verdict is an abstention")
    votes_abstained: dict[str, int] = Field(default_factory=dict, description="with several judges: judge spec -> "
                                            "its votes that abstained where other judges answered or abstained too "
                                            "(an ensemble member's silence, hidden from the verdicts it did not "
                                            "decide); trace run exits 3 for them as for abstentions")
    tokens: int = Field(description="tokens reported by the servers in the last invocation (0 where unknown)")
    endpoints: dict[str, Endpoint] = Field(default_factory=dict, description="where each served model (by spec) "
                                           "was called, for the reader (trace diagnose prints it as the flag to pass): never called from here")
    loaded_from: dict[str, str] = Field(default_factory=dict, description="a python: plugin's spec -> the "
                                        "--generator/--judge text it was loaded from (its file or module), for the "
                                        "reader (trace diagnose prints it as the flag to pass): never loaded from here")
    max_images: int | None = Field(default=None, description="the most reference images the generator accepts "
                                   "(its declaration, the models file or --max-images); absent: no limit")
    collage: bool | None = Field(default=None, description="with max_images: whether a case holding more references "
                                 "was sent them as one grid image (true) or left out as not applicable (false)")
    not_applicable: int | None = Field(default=None, description="with max_images: cases left out (more references "
                                       "than the generator accepts, no --collage): no verdicts, no fail")
    collaged: int | None = Field(default=None, description="with --collage: cases sent as one grid image")
    scale: RecordedScale | None = Field(default=None, description="the judges' answer scale when not "
                                        "binary (trace run --scale; tracebench.scales)")
    rejudged_from: str | None = Field(default=None, description="trace rejudge: the run folder whose images these "
                                      "verdicts judge (its generator, seed and sample are this run's); absent when "
                                      "the run generated its images")
    generator_options: dict[str, str | int | float | bool] | None = Field(
        default=None, description="the generation options sent with every request (trace run --generator-option, "
                                  "the models file's options): part of the run's identity; absent when none")
    judge_models: dict[str, tuple[str, ...]] | None = Field(default=None, description="judge spec -> every model "
                                                           "its server reported answering, 'model (fingerprint)', "
                                                           "over every invocation: a resumed run whose judge reports "
                                                           "another stops (trace run --allow-model-change goes on); "
                                                           "absent when no judge reported one")
    judge_model_changes: tuple[str, ...] | None = Field(default=None, description="changes accepted with "
                                                        "--allow-model-change: 'spec: before -> after'")
    unfinished: int | None = Field(default=None, description="cases the last invocation left undone because its "
                                   "budget was spent (trace run --max-calls, --max-cost); the same command resumes "
                                   "them. Absent when every case is done")
    samples: int | None = Field(default=None, ge=2, le=MAX_SAMPLES, description="trace run --samples K: generations of each case, each "
                                "judged (a case scores the mean over them); absent for one")
    sample_seeds: tuple[int, ...] | None = Field(default=None, description="with samples: the seed each generation "
                                                 "was made with (0 .. K-1), for a generator that takes one (the "
                                                 "synthetic zoo, or a seed generator option); absent otherwise")
    cost: float | None = Field(default=None, ge=0, description="with trace run --max-cost: what the last "
                               "invocation's calls cost, in the price file's currency (tokens as the servers "
                               "counted them, else estimated by the rules of docs/evaluate.md, cost); absent "
                               "without a budget in money")


# ---------------------------------------------------------------------------------- diagnosis

class DiagnosticNode(_Sparse):
    """One node of a diagnostic tree: a simplified sub-case of the root, and what it gave."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("clutter",)

    id: SafeId = Field(description='named as in the paper: "N0" (the root), "N1", "N2a", "N3b1" ...')
    parent: str | None = Field(description="the node it was simplified from; none for the root")
    rule: str | None = Field(description="the rule applied to the parent (diagnose/rules.toml); none for the root")
    depth: int
    formula: str = Field(description="the node's bound formula; dropped references appear as T_e / T_rel")
    slot: int
    targets: tuple[str, ...] = Field(description="the operator instances it keeps (question targets)")
    same_as: str | None = Field(default=None, description="an earlier node of the tree with the same sub-case; "
                                                         "generated once, not expanded again")
    clutter: bool | None = Field(default=None, description="true for the root of a cluttered case: it keeps the "
                                 "distractor references (every other node is free of them); absent otherwise")
    case_id: SafeId | None = Field(default=None, description="the sub-case generated for it (identical nodes share one); "
                                                         "the root's own case id when the run's verdicts are reused")
    evaluated: bool = Field(default=False, description="whether it was generated and judged (adaptive skips some)")
    prompt: str | None = None
    references: tuple[Reference, ...] = ()
    question_ids: tuple[str, ...] = Field(default=(), description="the root's question ids it asks")
    image: str | None = Field(default=None, description="the generated image (relative to the diagnosis folder, or absolute)")
    verdicts: dict[str, Status] = Field(default_factory=dict, description="question id -> verdict")
    abstained: dict[str, str] = Field(default_factory=dict, description="question id -> why its verdict abstained")
    status: dict[str, Status] = Field(default_factory=dict, description="target -> whether the operator instance holds "
                                      "(with --repeats, the majority over the node's generations; a tie is abstain)")
    sample_status: dict[str, tuple[Status, ...]] = Field(
        default_factory=dict, description="with --repeats: target -> its result in each generation of the node, the "
                                          "first (image, verdicts) first; empty with one generation")
    sample_images: tuple[str | None, ...] = Field(default=(), description="with --repeats: the images of the node's "
                                                  "later generations (2nd, 3rd ...), as image")
    sample_abstained: tuple[dict[str, str], ...] = Field(default=(), description="with --repeats: per later "
                                                         "generation, question id -> why its verdict abstained, as "
                                                         "abstained")


class DiagnosticEdge(_Record):
    parent: str
    child: str
    rule: str


class ShareEstimate(_Record):
    """A source's share of a failing instance's hazard (``trace diagnose --method rates``): the
    posterior mean and its 95% interval."""

    mean: float = Field(ge=0.0, le=1.0)
    low: float = Field(ge=0.0, le=1.0)
    high: float = Field(ge=0.0, le=1.0)


class ChainStep(_Record):
    """One node of a failing instance's chain (``--method rates``): the root, then at each step the
    first child that keeps the instance; its fresh generations and the instance's failure rate there."""

    node: str
    rule: str | None = Field(description="the rule that made it from the chain's previous node; none for the root")
    fails: int = Field(ge=0, description="fresh generations in which the instance failed (the run's own root "
                                         "generation, which chose the instance, is never counted)")
    trials: int = Field(ge=0, description="fresh generations with a result for the instance (abstained ones left out)")
    rate: ShareEstimate = Field(description="the instance's failure rate at the node: posterior mean and 95% interval")


class Attribution(_Sparse):
    """Where one operator instance of a diagnosed case fails, and why."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("confidence", "guess", "shares", "dominant", "chain")

    op: Operator
    target: str
    root: Status = Field(description="its result at the root")
    source: str | None = Field(description="stable_success, persistent_failure, global_reference, joint_composition, "
                                           "relation_attribute or undetermined (diagnose/sources.toml); a record of "
                                           "tracebench before 0.x may say unstable")
    node: str | None = Field(default=None, description="the node where it first passes, after failing at the root")
    rule: str | None = Field(default=None, description="the rule applied right before that node")
    depth: int | None = Field(default=None, description="depth where it first passes (0: at the root); none: never")
    relative_depth: float | None = Field(default=None, description="that depth over the depth of the most simplified "
                                                                   "node keeping the instance on that node's path")
    unstable: bool | None = Field(default=False, description="whether its result flips back along a path (fails below "
                                                             "a node where it passed); none: abstained results decide")
    causes: tuple[str, ...] = Field(default=(), description="the causes a synthetic generator recorded for its failure "
                                                            "(of its own question, else of one it depends on)")
    expected: tuple[str, ...] = Field(default=(), description="the sources those causes should be localized to "
                                                              "(diagnose/sources.toml, zoo tables); the localization "
                                                              "is right when the source is one of them")
    unknown: tuple[str, ...] = Field(default=(), description="when undetermined: the nodes whose abstained results "
                                                             "could change its source")
    confidence: float | None = Field(default=None, ge=0.0, le=1.0, description="--method rates: the posterior "
                                     "probability that the named source's share is within delta of the largest")
    guess: str | None = Field(default=None, description="--method rates, when undetermined: the most likely source "
                                                       "(its confidence below the threshold)")
    shares: dict[str, ShareEstimate] | None = Field(default=None, description="--method rates: each source's share "
                                                    "of the instance's hazard along its chain")
    dominant: dict[str, float] | None = Field(default=None, description="--method rates: the posterior probability "
                                              "that each source has the largest share (Table 3 at population level "
                                              "averages these)")
    chain: tuple[ChainStep, ...] | None = Field(default=None, description="--method rates: the chain's nodes, "
                                                "their fresh generations and rates")


class DiagnosticTree(_Sparse):
    """One line of ``trees.jsonl``: the tree of one case, its nodes' results and the attributions."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("method", "generations")

    case_id: SafeId
    formula: str
    slot: int
    strategy: Literal["full", "adaptive"]
    method: Literal["first-pass", "rates"] | None = Field(default=None, description="how sources were named: "
                                                          "rates, or (absent) the paper's first-pass rule")
    generations: int | None = Field(default=None, description="--method rates: fresh generations of the tree's "
                                                              "nodes (a node shared with another tree counted in each)")
    max_depth: int = Field(description="depth of the most simplified node of the whole tree")
    nodes: tuple[DiagnosticNode, ...] = Field(description="every node of the whole tree, breadth first")
    edges: tuple[DiagnosticEdge, ...]
    attributions: tuple[Attribution, ...] = Field(description="one per operator instance of the root")


class NodeOccurrence(_Record):
    """One line of ``nodes.jsonl`` beside an exported node folder: where a sub-case sits in the trees."""

    case_id: SafeId = Field(description="the sub-case in cases.jsonl")
    root: SafeId = Field(description="the diagnosed case")
    node: SafeId = Field(description="the node id in that case's tree")


class DiagnosisManifest(_OnScale, _Sparse):
    """``diagnosis.json``: what a diagnosis folder was made from (a folder is resumed only by the same)."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("scale", "generator_options", "method", "rates")

    tool: str
    run_dir: str
    cases_dir: str
    cases_hash: str
    generator: str
    seed: int | None = None
    judges: tuple[str, ...]
    judge_batch: str
    strategy: Literal["full", "adaptive"]
    gating: str | None = Field(default=None, description="within or cross (trace score --gating); none: a diagnosis "
                                                         "of a tracebench that gated across instances")
    cases: str = Field(description="the selection: failing, all, or a list of ids")
    shard: Shard | None = None
    roots_from_run: bool = Field(description="whether root verdicts are the run's (same generator, judges and scale)")
    scale: RecordedScale | None = Field(default=None, description="the judges' answer scale when not "
                                        "binary (trace diagnose --scale; default the run's)")
    repeats: int = Field(default=1, ge=1, le=MAX_SAMPLES, description="generations of each node (the root included) "
                                                                      "whose majority decides its results")
    hashes: dict[str, str] = Field(description="SHA-256 of the diagnosis rules and sources")
    generator_options: dict[str, Any] | None = Field(
        default=None, description="the options the nodes were generated with (--generator-option, the models file; "
                                  "the zoo's: the run's), absent when none: other options make other images")
    method: Literal["first-pass", "rates"] | None = Field(default=None, description="rates, or (absent) first-pass")
    rates: dict[str, float] | None = Field(default=None, description="--method rates: budget (mean generations per "
                                           "tree), delta, threshold (confidence) and flip (the judges' error rate)")


class MixShare(_Record):
    """One source's share of Table 3 at population level, with its 95% bootstrap interval over cases."""

    share: float = Field(ge=0.0, le=1.0)
    low: float = Field(ge=0.0, le=1.0)
    high: float = Field(ge=0.0, le=1.0)


class DiagnosisSummary(_Sparse):
    """``summary.json`` of a diagnosis folder."""

    _omitted_when_none: ClassVar[tuple[str, ...]] = ("method", "mix", "generations_per_tree", "confidence",
                                                     "random_note")

    tool: str
    generator: str
    judges: tuple[str, ...]
    strategy: Literal["full", "adaptive"]
    method: Literal["first-pass", "rates"] | None = Field(default=None, description="how sources were named: rates, "
                                                          "or (absent) the paper's first-pass rule")
    mix: dict[str, MixShare] | None = Field(default=None, description="Table 3 at population level over the failing "
                                            "instances, with 95% bootstrap intervals over cases: with rates, each "
                                            "instance's probability of each dominant source averaged; with "
                                            "first-pass, the named sources")
    generations_per_tree: dict[str, float] | None = Field(default=None, description="--method rates: fresh "
                                                          "generations per tree: mean, p90")
    confidence: dict[str, float] | None = Field(default=None, description="--method rates: mean confidence of the "
                                                "named sources, and the share undetermined for low confidence")
    random_note: str | None = Field(default=None, description="first-pass on a generator seen to be random: the "
                                    "command that estimates rates instead")
    repeats: int = Field(default=1, ge=1, le=MAX_SAMPLES, description="generations of each node whose majority "
                                                                      "decides its results")
    cases: int = Field(description="cases diagnosed")
    instances: int = Field(description="operator instances diagnosed")
    undetermined: int = Field(default=0, description="instances whose source depends on abstained results")
    abstained: int = Field(description="instances whose root result abstained (undetermined)")
    abstained_verdicts: int = Field(default=0, description="node verdicts (the roots' included) that abstained")
    abstention_reasons: dict[str, int] = Field(default_factory=dict, description="why they abstained: reason -> "
                                                                                 "verdicts, most frequent first")
    sources: dict[str, float] = Field(description="share of the instances per failure source (undetermined included)")
    counts: dict[str, int] = Field(description="instances per failure source")
    unstable: dict[str, Any] = Field(default_factory=dict, description="instances whose result flips back along a "
                                     "path, beside their source: instances, share, undecided (abstained results "
                                     "decide), by_operator (share)")
    by_operator: dict[str, dict[str, float | int]] = Field(description="operator -> source -> share (the paper's Table 3), "
                                                                 "with the instance count under 'instances'")
    cumulative_pass: dict[str, dict[str, float]] = Field(description="operator -> relative depth (0 root .. 1 most "
                                                                     "simplified) -> share passing at the root or "
                                                                     "first passing by then")
    nodes_generated: int = Field(description="distinct sub-cases generated and judged (roots reused from the run not counted)")
    nodes_in_trees: int = Field(description="nodes below the roots in the whole trees (what full would generate, "
                                            "before identical sub-cases are merged)")
    nodes_per_case: float = Field(description="nodes_generated per diagnosed case")
    localization_accuracy: dict | None = Field(default=None, description="with a synthetic generator: share of the "
                                               "root failures localized to the source their recorded cause implies, "
                                               "overall and per cause")


# ---------------------------------------------------------------------------------- record files

CASES_FILE = "cases.jsonl"
MANIFEST_FILE = "manifest.json"
REFERENCES_DIR = "references"
VERDICTS_FILE = "verdicts.jsonl"
RUN_FILE = "run.json"
DIAGNOSIS_FILE = "diagnosis.json"
TREES_FILE = "trees.jsonl"
SUMMARY_FILE = "summary.json"
NODES_FILE = "nodes.jsonl"


def case_problem(case: Case) -> str | None:
    """What makes a case unusable, or None: two g_ip designs on one carrier (formula validation
    refuses them; a case file written by other means may hold them), clutter that names no
    reference or term of the case (:func:`clutter_problem`), then :func:`checklist_problem`."""
    designed: set[str | None] = set()
    for term in case.terms:
        if term.role == Role.IP:
            if term.carrier in designed:
                from .formula import design_conflict  # only on the failure path: the reader stays light

                return f"terms: {design_conflict(term.carrier)}"
            designed.add(term.carrier)
    return clutter_problem(case) or checklist_problem(case)


def clutter_problem(case: Case) -> str | None:
    """A distractor or pooled term that names an image the case does not hold, a term it does
    not have, or an id twice; None when its clutter (if any) is whole."""
    if case.clutter is None:
        return None
    images = {r.image for r in case.references}
    symbols = {t.symbol for t in case.terms}
    seen: set[str] = set()
    for k, d in enumerate(case.clutter.distractors):
        where = f"clutter.distractors.{k}"
        if d.id in seen:
            return f"{where}.id: {d.id!r} twice"
        seen.add(d.id)
        if d.image not in images:
            return f"{where}.image: {d.image!r} is not a reference of the case"
        if d.confuses not in symbols:
            return f"{where}.confuses: {d.confuses!r} is not a term of the case"
    for k, p in enumerate(case.clutter.pooled):
        where = f"clutter.pooled.{k}"
        if p.term not in symbols:
            return f"{where}.term: {p.term!r} is not a term of the case"
        missing = [i for i in (p.image, *p.confusers) if i not in images]
        if missing:
            return f"{where}: {missing[0]!r} is not a reference of the case"
    return None


def checklist_problem(case: Case) -> str | None:
    """What makes a case's checklist unusable, or None: a question id twice, a dependency on a
    question the case does not ask, a dependency cycle (scoring follows ``depends_on``)."""
    ids: set[str] = set()
    for q in case.checklist:
        if q.id in ids:
            return f"checklist: question {q.id!r} appears twice"
        ids.add(q.id)
    edges = []
    for q in case.checklist:
        for parent in q.depends_on:
            if parent not in ids:
                return f"checklist: {q.id} depends on {parent!r}, which the case does not ask"
            edges.append((parent, q.id))
    if not edges or _acyclic(edges):
        return None
    import networkx as nx  # only to name the cycle: every case tracebench writes has none

    try:
        cycle = nx.find_cycle(nx.DiGraph(edges))
    except nx.NetworkXNoCycle:
        return None
    return "checklist: dependency cycle " + " -> ".join([u for u, _ in cycle] + [cycle[0][0]])


def _acyclic(edges: list[tuple[str, str]]) -> bool:
    """Whether the dependency graph has no cycle (Kahn's order: every question ordered)."""
    children: dict[str, list[str]] = {}
    waiting: dict[str, int] = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)
        waiting[child] = waiting.get(child, 0) + 1
        waiting.setdefault(parent, 0)
    ready = [node for node, count in waiting.items() if not count]
    ordered = 0
    while ready:
        ordered += 1
        for child in children.get(ready.pop(), ()):
            waiting[child] -= 1
            if not waiting[child]:
                ready.append(child)
    return ordered == len(waiting)


GENERATION_SUFFIX = ".json"  # images/<case id>.json: the GenerationInfo beside a generated image
IMAGE_SUFFIXES = (".png", ".jpg", ".webp")  # what a generated image is saved as (its format's)
IMAGES_DIR = "images"  # a run folder's generated images
CALL_CACHE_DIR = "cache"  # a run or diagnosis folder's model-call cache (unless --cache names another)
ROUNDS_DIR = "rounds"  # a diagnosis folder's rounds: rounds/NN/cases, rounds/NN/run, run-2 ...


SAMPLE_SEPARATOR = "~"  # images/<case id>~<k>.png: a case's generation k >= 1 (no case id holds the character)


@dataclass(frozen=True, order=True)
class SampleKey:
    """One generation of a case: its id and which sample (0 the first; ``trace run --samples K``
    and ``trace diagnose --repeats K`` make 1 .. K-1 too). :attr:`name` is what names its files:
    the case id for the first, ``<case id>~<sample>`` for a later one."""

    case_id: str
    sample: int = 0

    @property
    def name(self) -> str:
        return f"{self.case_id}{SAMPLE_SEPARATOR}{self.sample}" if self.sample else self.case_id

    @classmethod
    def parse(cls, name: str) -> SampleKey | None:
        """The key a file name (without suffix) names, or None when no case's generation has that
        name (``~0``, ``~01``, a non-ASCII digit, an empty index)."""
        case_id, separator, index = name.partition(SAMPLE_SEPARATOR)
        if not separator:
            return cls(name)
        if not (index.isascii() and index.isdigit()):
            return None
        key = cls(case_id, int(index))
        return key if key.name == name else None


def sample_name(case_id: str, sample: int | None = 0) -> str:
    """The name (without suffix) of a case's generation ``sample``: :attr:`SampleKey.name`."""
    return SampleKey(case_id, sample or 0).name


def split_sample_name(name: str) -> tuple[str, int] | None:
    """The inverse of :func:`sample_name`: (case id, generation) of ``name``, or None
    (:meth:`SampleKey.parse`)."""
    key = SampleKey.parse(name)
    return None if key is None else (key.case_id, key.sample)


@dataclass(frozen=True)
class _Folder:
    """A folder of tracebench's making, whose files a layout names."""

    root: Path

    @property
    def cache(self) -> Path:
        """The model-call cache (unless ``--cache`` names another)."""
        return Path(self.root) / CALL_CACHE_DIR


@dataclass(frozen=True)
class RunLayout(_Folder):
    """Where a run folder keeps its files: ``run.json``, ``verdicts.jsonl``, ``images/`` (each
    generation's image ``<name><suffix>`` and its :class:`GenerationInfo` ``<name>.json``, by
    :class:`SampleKey`) and ``cache/``. Every reader and writer of a run folder's paths asks it."""

    @property
    def images(self) -> Path:
        return Path(self.root) / IMAGES_DIR

    @staticmethod
    def in_images(file: str) -> str:
        """The path of a file of ``images/``, relative to the run folder."""
        return f"{IMAGES_DIR}/{file}"

    @staticmethod
    def image_name(key: SampleKey, suffix: str) -> str:
        """An image's path relative to the run folder."""
        return RunLayout.in_images(f"{key.name}{suffix}")

    @staticmethod
    def info_name(key: SampleKey) -> str:
        """The path of a generation's :class:`GenerationInfo`, relative to the run folder."""
        return RunLayout.in_images(f"{key.name}{GENERATION_SUFFIX}")

    def image(self, key: SampleKey, suffix: str) -> Path:
        return Path(self.root) / self.image_name(key, suffix)

    def info(self, key: SampleKey) -> Path:
        return Path(self.root) / self.info_name(key)

    def find_image(self, key: SampleKey) -> Path | None:
        """The image the folder holds for a generation (whatever its format), or None; one that
        is a link leaving the run folder is a TraceError, never read."""
        from .safepaths import inside

        for suffix in IMAGE_SUFFIXES:
            path = self.image(key, suffix)
            if path.is_file():
                inside(Path(self.root), self.image_name(key, suffix),
                       f"{self.root}: case {key.case_id}: generated image", "run folder")
                return path
        return None

    def read_info(self, key: SampleKey) -> GenerationInfo | None:
        """The :class:`GenerationInfo` beside a generation's image, if any."""
        from .jsonfiles import read_json

        path = self.info(key)
        return read_json(path, GenerationInfo) if path.is_file() else None


@dataclass(frozen=True)
class DiagnosisLayout(_Folder):
    """Where a diagnosis folder keeps its files: ``diagnosis.json``, ``trees.jsonl``,
    ``summary.json``, ``cache/`` and its rounds, ``rounds/NN/cases`` (a benchmark folder) and
    ``rounds/NN/run`` (``run-2``, ``run-3`` ... for later generations)."""

    @property
    def rounds(self) -> Path:
        return Path(self.root) / ROUNDS_DIR

    @staticmethod
    def round_name(number: int) -> str:
        """A round's folder, relative to the diagnosis folder."""
        return f"{ROUNDS_DIR}/{number:02d}"

    @staticmethod
    def cases(round_folder: Path) -> Path:
        return Path(round_folder) / "cases"

    @staticmethod
    def run(round_folder: Path, sample: int = 0) -> Path:
        """A round's run folder of one generation: ``run`` for the first, ``run-2`` ... after."""
        return Path(round_folder) / ("run" if sample == 0 else f"run-{sample + 1}")


__all__ += ["CALL_CACHE_DIR", "DiagnosisLayout", "IMAGES_DIR", "IMAGE_SUFFIXES", "ROUNDS_DIR", "RunLayout", "SampleKey"]
__all__ += ["ChainStep", "MixShare", "ShareEstimate"]


def read_generation_info(images: Path, case_id: str, sample: int | None = 0) -> GenerationInfo | None:
    """The :class:`GenerationInfo` beside case ``case_id``'s image (its generation ``sample``) in a
    run's image folder, if any (:meth:`RunLayout.read_info`)."""
    return RunLayout(Path(images).parent).read_info(SampleKey(case_id, sample or 0))


CASES = JsonLinesFile(CASES_FILE, Case, f"not a benchmark folder (no {CASES_FILE}); make one with `trace sample`",
                      check=case_problem, unique=lambda case: ("id", f"case {case.id!r}"))
SAMPLE_MANIFEST = JsonFile(MANIFEST_FILE, SampleManifest,
                           f"not a benchmark folder of `trace sample` (no {MANIFEST_FILE})")
VERDICTS = JsonLinesFile(VERDICTS_FILE, Verdict, f"no {VERDICTS_FILE}; the run has not written any verdict yet",
                         unique=lambda v: ("question_id", f"case {v.case_id!r} question {v.question_id!r}"
                                                          + (f" sample {v.sample}" if v.sample else "")))
RUN_MANIFEST = JsonFile(RUN_FILE, RunManifest, f"not a run folder (no {RUN_FILE}); make one with `trace run`")
DIAGNOSIS_MANIFEST = JsonFile(DIAGNOSIS_FILE, DiagnosisManifest,
                              f"not a diagnosis folder (no {DIAGNOSIS_FILE}); make one with `trace diagnose`")
TREES = JsonLinesFile(TREES_FILE, DiagnosticTree, f"not a finished diagnosis folder (no {TREES_FILE})",
                      unique=lambda tree: ("case_id", f"the tree of case {tree.case_id!r}"))
SUMMARY = JsonFile(SUMMARY_FILE, DiagnosisSummary, f"not a finished diagnosis folder (no {SUMMARY_FILE})")
NODES = JsonLinesFile(NODES_FILE, NodeOccurrence, f"not a folder of exported nodes (no {NODES_FILE}); "
                                                  f"make one with `trace diagnose --export-nodes`")


def read_cases(folder: Path) -> Iterator[Case]:
    """The cases of a benchmark folder, one at a time, each checked (:func:`case_problem`)."""
    return CASES.read(folder)


def read_sample_manifest(folder: Path) -> SampleManifest | None:
    """A benchmark folder's manifest, or None for a folder without one (made by other means
    than ``trace sample``); a broken one is an error like any record file's."""
    return SAMPLE_MANIFEST.read(folder) if SAMPLE_MANIFEST.path(folder).is_file() else None


def read_verdicts(run_dir: Path) -> Iterator[Verdict]:
    """The verdicts of a run folder, one at a time."""
    return VERDICTS.read(run_dir)


def read_run_verdicts(run_dir: Path, cases: Mapping[str, Case], cases_dir: Path, *,
                      samples: int | None) -> Iterator[Verdict]:
    """The verdicts of a run folder, each of a case of ``cases`` (read from ``cases_dir``) and
    of a question that case asks, and of a generation the run made (``samples``: its
    ``run.json`` ``samples or 1``): any other is an error ``FILE:LINE: field: message``, never
    dropped."""
    return (v for _, v, _ in checked_run_verdicts(run_dir, cases, cases_dir, samples=samples))


def checked_run_verdicts(run_dir: Path, cases, cases_dir: Path, *, samples: int | None,
                         together: bool = False) -> Iterator[tuple[int, Verdict, Case]]:
    """(line number, verdict, its case) of each verdict, checked as :func:`read_run_verdicts`
    checks them; ``cases`` is anything with ``get(case_id)`` (a dict, or an index reading each
    case from its file); ``samples`` the generations each case has (the run's ``run.json``
    ``samples or 1``, which the caller holds; None for verdicts of no run folder). ``together``: each case's lines are next to each other, as in every
    file tracebench writes, so a question twice is looked for within a case's lines and
    nothing is remembered from one case to the next (the memory of a large run's reader)."""
    path = VERDICTS.path(run_dir)
    asked: dict[str, set[str]] = {}
    first: dict[str, int] = {}
    current, case = None, None
    for lineno, _, _, v in VERDICTS.read_spanned(run_dir, unique=not together):
        if samples is not None and (v.sample or 0) >= samples:
            raise TraceError(f"{path}:{lineno}: sample: {v.sample}, but the run made {samples} "
                             f"sample{'s' if samples > 1 else ''} a case (run.json samples)")
        if v.case_id != current:
            current, case = v.case_id, cases.get(v.case_id)
            if case is None:
                raise TraceError(f"{path}:{lineno}: case_id: case {v.case_id!r}, which {cases_dir} does not hold")
            if together:
                asked, first = {}, {}
            asked.setdefault(v.case_id, {q.id for q in case.checklist})
        if v.question_id not in asked[v.case_id]:
            raise TraceError(f"{path}:{lineno}: question_id: case {v.case_id!r} does not ask {v.question_id!r}")
        if together:
            repeated_question(path, lineno, v, first)
        yield lineno, v, case


def repeated_question(path: Path, lineno: int, verdict: Verdict, first: dict) -> None:
    """Refuse a question seen before within one case's lines (of one sample: ``first``: (question
    id, sample) -> the line it was first on, for those lines), with the message of the record
    reader's own check."""
    seen = first.setdefault((verdict.question_id, verdict.sample), lineno)
    if seen != lineno:
        sample = f" sample {verdict.sample}" if verdict.sample else ""
        raise TraceError(f"{path}:{lineno}: question_id: case {verdict.case_id!r} question "
                         f"{verdict.question_id!r}{sample} appears twice (first on line {seen})")
