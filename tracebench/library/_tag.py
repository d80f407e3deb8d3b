"""Tag real images with a vision-language model (``trace tag``).

Each image goes to an OpenAI-compatible chat endpoint as a base64 data URL, with a prompt
built from the taxonomy (taxonomy/categories.toml, taxonomy/subtypes.toml) and a JSON
schema derived from the library records (:class:`ModelTags`). A reply is kept only when it
validates completely: a reply that is not JSON, does not match the records or names an
unknown category is sent back once with the error; if the second reply fails too, or the
API fails after the retries, the image is reported and left out. Nothing is
written half-way: the library is assembled in a staging folder (:func:`staged_output`).

Requests go through the shared model wrapper (:class:`~tracebench.providers.ModelAccess`):
concurrency, retries with backoff on rate limits and transient errors, and scrubbing of the
API key (read from an environment variable, handed to the client only) from every reason,
in case a server echoes it back.

Every valid reply is cached, content-addressed (model, endpoint, prompt and schema, image
bytes; never the key), in the folder ``.tracebench-tag-cache`` beside the library unless
``cache_dir`` says otherwise: a run that was killed is run again with the same command, and
one that left images out after server errors again with another ``--out`` in the same
folder; either asks only for what it does not have. Failures are not cached.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..apikeys import api_key
from ..errors import TraceError
from ..images import ImageRefused, open_image
from ..jsonfiles import loads
from ..replies import unfence
from ..cache import Cache, cache_key, sha256
from ..providers import (DEFAULT_BASE_URL, DEFAULT_MAX_REPLY_BYTES, CallFailed, ChatReply, ModelAccess, ModelConfig,
                         NotSent, OpenAIClients, check_call_limits, one_line, scrub)
from ..resources import DataFile, table_name
from ..safepaths import MAX_ID, id_from_name, path_problem
from ..templating import render
from ._io import INFO_FILE, TAGS_FILE, staged_output, write_library
from ._models import Entity, GlobalTag, LibraryInfo, TaggedImage, Tags

__all__ = ["IMAGE_SUFFIXES", "ModelTags", "SkippedImage", "TagOptions", "TagReport", "tag_images", "tag_schema"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
IMAGES_FOLDER = "images"
SCHEMA_NAME = "tagged_image"
# The image formats vision APIs accept, as Pillow names them (MPO: a camera JPEG with extra frames).
_MIME_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "MPO": "image/jpeg", "WEBP": "image/webp"}


TAG_CACHE = ".tracebench-tag-cache"  # the default cache folder, beside the library written


class ModelTags(BaseModel):
    """What the model must return for one image: the tag fields of a :class:`TaggedImage`.

    The identity fields (id, path, size, source, license) are the caller's, never the model's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)

    ent_list: tuple[Entity, ...] = Field(description="foreground entities, one object each")
    background: Tags = Field(description="salient background content that is not a foreground instance")
    global_tag: GlobalTag = Field(description="image-level tags")


class SkippedImage(BaseModel):
    """An image that was not tagged, and why."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="image path relative to the images folder")
    reason: str = Field(description="one line: why the image was left out")


class TagReport(BaseModel):
    """What ``trace tag`` did."""

    model_config = ConfigDict(frozen=True)

    tagged: int = Field(ge=0, description="images tagged and written to the library")
    skipped: tuple[SkippedImage, ...] = Field(default=(), description="images left out, in path order")
    calls: int = Field(ge=0, description="chat requests sent (the client's own retries of one request not counted)")
    cache_hits: int = Field(default=0, ge=0, description="images whose tags came from the cache (no request)")
    library: LibraryInfo = Field(description="the library written")


@dataclass(frozen=True)
class TagOptions:
    """How ``trace tag`` asks ``model``; checked when made (a TraceError naming the option).

    ``base_url`` defaults to ``$OPENAI_BASE_URL``, then to OpenAI's. The key is read from
    the variable ``api_key_env``; a loopback server needs none. ``concurrency`` bounds the
    requests in flight; ``max_retries`` (of rate limits and transient errors, with backoff)
    and ``timeout`` (seconds a request may take in all) are the wrapper's; a reply body longer
    than ``max_reply_bytes`` is cut off (that image is left out). ``name``: the library's
    (default: the name of the folder written). ``cache_dir``: the cache of replies (default:
    the folder ``.tracebench-tag-cache`` beside the library).
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 4
    name: str | None = None
    max_retries: int = 2
    timeout: float = 120.0
    cache_dir: Path | None = None
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise TraceError("--model: empty model name")
        if self.concurrency < 1:
            raise TraceError(f"--concurrency: must be at least 1, got {self.concurrency}")
        check_call_limits(timeout=self.timeout, max_retries=self.max_retries, max_reply_bytes=self.max_reply_bytes)

    def endpoint(self) -> str:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


def tag_images(images_dir: Path, out: Path, options: TagOptions) -> TagReport:
    """Tag every image under ``images_dir`` as ``options`` say and write a library to ``out``.

    Images are copied to ``out/images/`` (keeping their relative paths). Raises
    :class:`TraceError` when no image is found, when the endpoint refuses the key or the
    model, or when every image fails.
    """
    images_dir, out = Path(images_dir), Path(out)
    base_url = options.endpoint()
    if not images_dir.is_dir():  # the first mistake to name: the folder, before the key it would need
        raise TraceError(f"{images_dir}: not a folder")
    api_key(options.api_key_env, base_url)  # a missing key is an error before any image is read
    jobs, unreadable = _find_images(images_dir)
    name = options.name or out.resolve().name or "library"

    # a library this command wrote before is replaced (the same command, run again, asks only for
    # the images that failed: the others are in the cache)
    with staged_output(out, overwrite=(out / INFO_FILE).is_file() and (out / TAGS_FILE).is_file()) as root:
        tagger = _tagger(options, base_url, out.parent / TAG_CACHE)
        outcomes = asyncio.run(tagger.tag_all(jobs))
        if tagger.fatal:
            raise TraceError(tagger.fatal)
        skipped = sorted(unreadable + [SkippedImage(path=o.job.rel, reason=o.reason)
                                       for o in outcomes if o.reason is not None], key=lambda s: s.path)
        tagged = [o for o in outcomes if o.tags is not None]
        if not tagged:
            raise TraceError(f"{images_dir}: no image could be tagged ({len(skipped)} failed; "
                             f"first: {skipped[0].path}: {skipped[0].reason})")
        records = _copy_tagged(root, tagged, source=f"tagged:{options.model}")
        info = write_library(root, name, records)
    return TagReport(tagged=len(records), skipped=tuple(skipped), calls=tagger.calls, cache_hits=tagger.cache_hits,
                     library=info)


def _tagger(options: TagOptions, base_url: str, default_cache: Path) -> _Tagger:
    """The requests' sender: the endpoint's client, the shared wrapper, the cache of replies."""
    provider = OpenAIClients(options.model, ModelConfig(
        base_urls=(base_url,), api_key_env=options.api_key_env, concurrency=options.concurrency,
        max_retries=options.max_retries, timeout=options.timeout, max_reply_bytes=options.max_reply_bytes))
    return _Tagger(provider=provider, access=ModelAccess(max_retries=options.max_retries),
                   cache=Cache(options.cache_dir if options.cache_dir is not None else default_cache))


def _copy_tagged(root: Path, tagged: list[_Outcome], *, source: str) -> list[TaggedImage]:
    """The records of the images tagged, each image copied to its path in the library."""
    records = []
    for outcome in tagged:
        records.append(outcome.job.record(outcome.tags, source=source))
        target = root / records[-1].path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(outcome.job.file, target)
    return records


# -- the prompt and the schema, from the taxonomy ------------------------------------------


_CATEGORIES = DataFile("taxonomy", "categories.toml")
_SUBTYPES = DataFile("taxonomy", "subtypes.toml")


@cache
def _categories() -> dict[str, dict[str, Any]]:
    return _CATEGORIES.tables("", _CATEGORIES.read(), "categories")


def tag_schema() -> dict[str, Any]:
    """The JSON schema of a reply (:class:`ModelTags`), with the categories as an enum."""
    return copy.deepcopy(_tag_schema())


@cache
def _tag_schema() -> dict[str, Any]:
    schema = ModelTags.model_json_schema(by_alias=True)
    # The records keep `category` a plain string (the taxonomy is data, not code); an enum here
    # lets servers with constrained decoding keep the model inside the taxonomy.
    schema["$defs"]["Entity"]["properties"]["category"]["enum"] = list(_categories())
    return schema


SYSTEM_TEMPLATE = "tagging/system.j2"


@cache
def _system_prompt() -> str:
    """The tagging instructions (templates/tagging/system.j2), filled from the taxonomy."""
    subtypes = _SUBTYPES.read()
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for key, spec in _SUBTYPES.tables("", subtypes, "subtypes").items():
        table = table_name("subtypes", key)
        applies = _SUBTYPES.strings(table, spec, "categories", None) or ()
        scope = "" if not applies else "all categories" if applies == ("*",) else ", ".join(applies)
        groups.setdefault(_SUBTYPES.value(table, spec, "group", str), []).append(
            (key, _SUBTYPES.value(table, spec, "definition", str), scope))
    targets = [('"global_tag"' if group == "4_Global" else f'"tag_dict" group "{group}"', entries)
               for group, entries in groups.items()]
    special = _SUBTYPES.tables("", subtypes, "special")
    definition = lambda use: _SUBTYPES.value(table_name("special", use), special[use], "definition", str)  # noqa: E731
    uses = [(use, definition(use), ", ".join(_SUBTYPES.strings(table_name("special", use), spec, "categories")))
            for use, spec in special.items() if use != "background"]
    categories = [(name, _CATEGORIES.value(table_name("categories", name), spec, "description", str),
                   bool(_CATEGORIES.value(table_name("categories", name), spec, "humanoid", bool, False)))
                  for name, spec in _categories().items()]
    if "background" not in special:
        raise _SUBTYPES.error("missing", "special", "background")
    return render(SYSTEM_TEMPLATE, categories=categories, subtype_groups=targets,
                  background=definition("background"), uses=uses)


# -- one request per image, one corrective retry ---------------------------------------------


@dataclass(frozen=True)
class _Job:
    rel: str      # path relative to images_dir, posix
    file: Path
    id: str
    width: int
    height: int
    mime: str

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.file.read_bytes()).decode('ascii')}"

    def record(self, tags: ModelTags, *, source: str) -> TaggedImage:
        return TaggedImage(id=self.id, path=f"{IMAGES_FOLDER}/{self.rel}", width=self.width, height=self.height,
                           source=source, license="unknown", ent_list=tags.ent_list, background=tags.background,
                           global_tag=tags.global_tag)


@dataclass(frozen=True)
class _Outcome:
    job: _Job
    tags: ModelTags | None = None
    reason: str | None = None


class _InvalidReply(ValueError):
    """A reply that is not a valid :class:`ModelTags`; the message is sent back to the model."""


class _Tagger:
    """Sends the requests of one ``tag_images`` call through the shared model wrapper."""

    def __init__(self, *, provider: OpenAIClients, access: ModelAccess, cache: Cache) -> None:
        self.provider = provider
        self.access = access
        self.cache = cache
        self.cache_hits = 0
        self.fatal: str | None = None  # set when no further request can succeed (key or model refused)

    @property
    def calls(self) -> int:
        return sum(self.access.stats.calls.values())

    async def tag_all(self, jobs: list[_Job]) -> list[_Outcome]:
        try:
            return list(await asyncio.gather(*(self.tag(job) for job in jobs)))
        finally:
            await self.provider.aclose()

    def key(self, job: _Job) -> str:
        """What the reply depends on: model, endpoint, prompt and schema, the image's bytes."""
        return cache_key(adapter="tag", model=self.provider.model, base_url=self.provider.base_url,
                         prompt=sha256((_system_prompt() + json.dumps(_tag_schema(), sort_keys=True)).encode()),
                         image=sha256(job.file.read_bytes()), size=[job.width, job.height])

    async def tag(self, job: _Job) -> _Outcome:
        key = self.key(job)
        hit = self.cache.get(key)
        if hit is not None:
            try:
                tags = ModelTags.model_validate_json(hit[0]["content"])
            except (KeyError, ValueError):
                tags = None  # an entry of another version: asked again
            if tags is not None:
                self.cache_hits += 1
                return _Outcome(job, tags=tags)
        outcome = await self._converse(job)
        if outcome.tags is not None:
            self.cache.put(key, {"content": outcome.tags.model_dump_json()})
        return outcome

    async def _converse(self, job: _Job) -> _Outcome:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": _system_prompt()},
            {"role": "user", "content": [
                {"type": "text", "text": f"Tag this image ({job.width}x{job.height} pixels)."},
                {"type": "image_url", "image_url": {"url": job.data_url()}},
            ]},
        ]
        for _ in range(2):
            try:
                reply = await self.access.call(self.provider, lambda: self._ask(messages))
            except NotSent as err:
                return _Outcome(job, reason=str(err))
            except CallFailed as err:
                if self.access.stopped is not None:  # the endpoint refused, or the first requests all failed alike
                    self.fatal = f"stopped early, {self.access.stopped}"
                return _Outcome(job, reason=str(err))
            try:
                return _Outcome(job, tags=_parse_reply(reply))
            except _InvalidReply as err:
                problem = one_line(str(err), self.provider.secrets())
            messages += [
                {"role": "assistant", "content": reply.content or ""},
                {"role": "user", "content": f"That reply is not valid: {problem}. "
                                            "Reply again with the corrected JSON object only."},
            ]
        return _Outcome(job, reason=f"invalid reply after one retry: {problem}")

    async def _ask(self, messages: list[dict[str, Any]]) -> ChatReply:
        """The reply, the key scrubbed from it (its text becomes the library's tags and the cache's)."""
        reply = await self.provider.chat(
            messages=messages, response_format={"type": "json_schema", "json_schema": {
                "name": SCHEMA_NAME, "schema": _tag_schema(), "strict": False}})
        secrets = self.provider.secrets()
        return ChatReply(scrub(reply.content, secrets) if reply.content else reply.content,
                         scrub(reply.refusal, secrets) if reply.refusal else None, reply.tokens)


def _parse_reply(reply: ChatReply) -> ModelTags:
    """A reply as :class:`ModelTags`, or :class:`_InvalidReply` saying what is wrong."""
    content = reply.content
    if not content or not content.strip():
        raise _InvalidReply(f"the model refused: {reply.refusal}" if reply.refusal else "the reply is empty")
    text = unfence(content)
    try:
        data = loads(text)  # deep nesting and huge numbers are JSONDecodeErrors too
    except json.JSONDecodeError as err:
        raise _InvalidReply(f"the reply is not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise _InvalidReply("the reply is JSON nested too deeply") from None
    try:
        tags = ModelTags.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in err.errors())
        raise _InvalidReply(f"the reply does not match the tag format: {problems}") from None
    known = _categories()
    for i, entity in enumerate(tags.ent_list):
        if entity.category not in known:
            raise _InvalidReply(f"ent_list.{i}.category: unknown category {entity.category!r}; "
                                f"use one of {', '.join(known)}")
    return tags


# -- inputs ------------------------------------------------------------------------------------


def _find_images(images_dir: Path) -> tuple[list[_Job], list[SkippedImage]]:
    """The images under ``images_dir`` in path order, and those Pillow cannot read."""
    if not images_dir.is_dir():
        raise TraceError(f"{images_dir}: not a folder")
    files = sorted((f for f in images_dir.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file()
                    and not any(part.startswith(".") for part in f.relative_to(images_dir).parts)),
                   key=lambda f: f.relative_to(images_dir).as_posix())
    if not files:
        raise TraceError(f"{images_dir}: no images ({', '.join(s[1:] for s in IMAGE_SUFFIXES)}) found")
    jobs, unreadable = [], []
    for file, image_id in zip(files, _unique_ids(id_from_name(f.stem) for f in files)):
        rel = file.relative_to(images_dir).as_posix()
        problem = path_problem(images_dir, rel, "images folder")
        if problem:  # a link pointing out: its bytes are never sent
            unreadable.append(SkippedImage(path=rel, reason=problem))
            continue
        try:
            with open_image(file) as image:  # the header: past the pixel limit it is skipped here
                width, height, found = image.width, image.height, image.format or "unknown"
        except ImageRefused as err:
            unreadable.append(SkippedImage(path=rel, reason=" ".join(f"not a readable image: {err.cause or err}".split())))
            continue
        # The declared type is what Pillow found, not the suffix: a .png that is a JPEG is sent as one.
        if found not in _MIME_TYPES:
            unreadable.append(SkippedImage(path=rel, reason=f"a {found} image; only PNG, JPEG and WebP are sent"))
            continue
        jobs.append(_Job(rel=rel, file=file, id=image_id, width=width, height=height, mime=_MIME_TYPES[found]))
    return jobs, unreadable


def _unique_ids(stems: Iterable[str]) -> list[str]:
    """File stems made unique in order: ``cat``, ``cat-2`` ..., never taking another file's stem."""
    stems = list(stems)
    taken: set[str] = set()
    reserved = set(stems)
    ids = []
    for stem in stems:
        candidate, n = stem, 1
        while candidate in taken or (candidate != stem and candidate in reserved):
            n += 1
            candidate = f"{stem[:MAX_ID - len(str(n)) - 1]}-{n}"  # an id stays at most MAX_ID long
        taken.add(candidate)
        ids.append(candidate)
    return ids
