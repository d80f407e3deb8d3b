"""What a provider is: the abstract generator and judge, their replies and their failures.

A provider makes one call and says what its output depends on; it owns nothing else. The
wrapper (:class:`~tracebench.providers.ModelAccess`) owns what every call needs: the cache,
retries with backoff, a concurrency limit per endpoint replica, counters and key scrubbing.

Lifecycle, as the harness drives it: the provider is built from its spec (registry), with the
command's :class:`ProviderSettings` in place before its ``__init__`` runs (:func:`building`), its
configuration is checked with :meth:`Provider.check` before anything is written (a missing
API key is an error then, not an abstention per case), calls are made, and
:meth:`Provider.aclose` runs once before the event loop ends.

To write one (``python:my_generator.py``, docs/evaluate.md): subclass :class:`Generator`
and implement ``generate`` (a coroutine, or a plain function, which is run in a worker
thread), or :class:`Judge` and ``ask``.
"""

from __future__ import annotations

import asyncio
import inspect
from abc import ABC, abstractmethod
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..cache import sha256
from ..records import Case, Endpoint, Question
from ._config import ModelConfig

COLLAGE_ID = "collage"  # the source id of the one reference a collaged case is sent (providers/_collage.py)

__all__ = ["CallFailed", "EndpointRefused", "NotSent", "Generation", "Generator", "generator_view", "used_references", "Judge", "Provider",
           "ProviderSettings", "RateLimited", "Reply", "Transient", "asking", "building", "current_replica", "current_sample",
           "shown_references"]

# which replica (index into Provider.replicas) the wrapper chose for the call being made
current_replica: ContextVar[int] = ContextVar("current_replica", default=0)
# which generation of each case the call being made asks (trace run --samples); None: the generator's own
current_sample: ContextVar[int | None] = ContextVar("current_sample", default=None)


@dataclass(frozen=True)
class ProviderSettings:
    """What a command configures one provider with, in place before its ``__init__`` runs
    (:func:`building`): ``__init__`` may read them, and what it sets itself stands. A field left
    at its default leaves the class's own declaration."""

    spec: str = ""  # the spec it was named by: the spec of a plugin that declares none
    concurrency: int | None = None  # the models file's, for a provider that declares none
    scale: str | None = None  # a judge: what it answers on (binary, ternary, tiers); None: the class's
    sample: int = 0  # a generator: which generation of each case it is asked (trace diagnose --repeats)
    max_images: int | None = None  # a generator: the models file's limit, over the class's declaration
    options: Mapping[str, Any] = field(default_factory=dict)  # a generator: the generation options
    endpoint: ModelConfig | None = None  # where a served model is and how it is called
    library: Path | None = None  # the synthetic generator's library (None: the benchmark's)
    seed: int = 0  # the synthetic generator's seed


# the settings of the provider being built (building); None: a provider built directly keeps its class's
_configuring: ContextVar[ProviderSettings | None] = ContextVar("_configuring", default=None)


def building(settings: ProviderSettings, factory: Callable[..., Any], *args: Any) -> Any:
    """``factory(*args)``, every provider it builds configured with ``settings`` as it is made
    (before its ``__init__``: :meth:`Provider.__new__`)."""
    token = _configuring.set(settings)
    try:
        return factory(*args)
    finally:
        _configuring.reset(token)


@contextmanager
def asking(sample: int | None) -> Iterator[None]:
    """Within the block, every generator is asked generation ``sample`` of a case (its
    ``sample`` reads it, as its cache key and seed do); None leaves each generator its own. Set
    per call, so the K generations of ``trace run --samples K`` are one generator's calls."""
    token = current_sample.set(sample)
    try:
        yield
    finally:
        current_sample.reset(token)


class CallFailed(Exception):
    """A call that produced no usable output: an abstention with its reason, never a fail.
    Not retried."""


class Transient(CallFailed):
    """A failure that may pass on its own (a timeout, a dropped connection, a 5xx): retried, after
    ``retry_after`` seconds when the server says, else with exponential backoff."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimited(Transient):
    """The server asked to slow down (HTTP 429)."""


class NotSent(CallFailed):
    """Raised by an attempt that decided not to send its request (the command is stopping):
    not retried, not counted as a call."""


class EndpointRefused(CallFailed):
    """The endpoint refused the key or does not know the model: no further call can succeed."""


@dataclass(frozen=True)
class Generation:
    """What a generator gives for a case: the image's bytes and, when it says, the references it
    used (``"Image 2"`` ...; reference clutter's selection score reads them). ``generate`` may
    return one, or the image's bytes alone."""

    image: bytes
    used_references: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Reply:
    """A judge's raw reply, the tokens it cost (0 when the server does not say), and the model
    that answered as the server reported it: its name and ``system_fingerprint`` (None when the
    server does not say, and for judges that are no served model); ``usage``: its input and
    output tokens as the server counted them (what ``trace run --max-cost`` prices)."""

    text: str
    tokens: int = 0
    model: str | None = None
    fingerprint: str | None = None
    usage: tuple[int, int] | None = None  # (input, output) tokens the server reported; None when it did not say


    @property
    def identity(self) -> str | None:
        """``model`` or ``model (fingerprint)``: what a run pins its judge to (None: unknown)."""
        if self.model is None:
            return None
        return self.model + (f" ({self.fingerprint})" if self.fingerprint else "")


class Provider(ABC):
    """What generators and judges share. ``spec`` names the provider in records and cache keys."""

    spec: str = ""
    concurrency: int | None = None  # calls in flight per replica; None: the run's --concurrency
    call_timeout: float | None = None  # seconds one attempt may take in all (the wrapper cancels it); None: no bound
    provider_settings: ProviderSettings | None = None  # the command's settings it was built with (None: built directly)

    def __new__(cls, *args: Any, **kwargs: Any) -> Provider:
        provider = super().__new__(cls)
        settings = _configuring.get()
        if settings is not None:
            provider.provider_settings = settings
            provider._take_settings(settings)
        return provider

    def _take_settings(self, settings: ProviderSettings) -> None:
        """Take the command's settings, before ``__init__`` (a subclass extends it)."""
        if settings.spec and not type(self).spec:
            self.spec = settings.spec
        if settings.concurrency is not None and type(self).concurrency is None:
            self.concurrency = settings.concurrency

    @property
    def replicas(self) -> tuple[str, ...]:
        """The endpoints calls are spread over (load-balanced); one for a local provider."""
        return (self.spec,)

    def secrets(self) -> tuple[str, ...]:
        """Values that must never appear in a reason or a message (API keys)."""
        return ()

    def endpoint(self) -> Endpoint | None:
        """Where the provider is served, for the run's manifest (a later command reuses it);
        None for a local provider."""
        return None

    def check(self) -> None:
        """Raise a TraceError when the provider cannot work (a missing key); called before
        anything is written."""

    async def aclose(self) -> None:
        """Release clients and connections; called once, before the event loop ends."""


class Generator(Provider):
    """Turns a case (its prompt and reference images) into an image.

    ``sample`` says which generation of each case is asked (0: the first; ``trace diagnose
    --repeats K`` asks 0 .. K-1): a sample after the first is a call of its own, cached apart
    (the wrapper adds it to the key), so a generator that samples gives another image; the
    synthetic zoo draws it with another seed, a ``command:`` sees it in $TRACEBENCH_SAMPLE."""

    _sample: int = 0  # the generation asked when none is asked per call (ModelSettings.sample)
    max_images: int | None = None  # the most reference images it accepts (None: no limit); the models file may say
    options: Mapping[str, Any] = MappingProxyType({})  # generation options (trace run --generator-option, the
    # models file's options): size, quality, seed, steps ...; part of every generation's cache key
    sees_truth: bool = False  # whether generate() is given the case's clutter truth (the zoo, which draws it)

    @property
    def sample(self) -> int:
        """Which generation of each case is asked: the one a call asks (:func:`asking`: ``trace run
        --samples``, a Ray worker told per call), else the generator's own (0, or a diagnosis
        round's repeat)."""
        asked = current_sample.get()
        return self._sample if asked is None else asked

    @sample.setter
    def sample(self, value: int) -> None:
        self._sample = value

    def _take_settings(self, settings: ProviderSettings) -> None:
        super()._take_settings(settings)
        self._sample = settings.sample
        if settings.max_images is not None:  # the models file's word over the class's declaration
            self.max_images = settings.max_images
        if settings.options:  # the command line's over the models file's (the registry merges them)
            self.options = dict(sorted(settings.options.items()))

    def key(self, case: Case, references: Sequence[bytes]) -> dict[str, Any] | None:
        """What the output depends on (the cache key's parts); None: not worth caching (reading a
        file). The default: the spec, the prompt and the reference images."""
        return {"provider": self.spec, "prompt": case.prompt, "images": [sha256(r) for r in references]}

    @abstractmethod
    def generate(self, case: Case, references: Sequence[bytes]) -> Any:
        """The image's bytes (PNG, JPEG or WebP), or a :class:`Generation` (the bytes and the
        references used); raise :class:`CallFailed` when there is none. May be ``async def``; a
        plain function runs in a worker thread. The case is :func:`generator_view`'s: what a
        generator may know of it."""

    def setup(self) -> None:
        """Load what generating needs (a model's weights), once, before the first image, where the
        images are made: in this process, or in each Ray worker with ``trace run --executor ray``
        (whose driver builds the generator too, for its spec and cache keys, but never calls
        this). Keep ``__init__`` light and load here. The default loads nothing."""

    def check_options(self) -> None:
        """Refuse, as a TraceError naming the option, a generation option this generator cannot
        take. The default takes any: a plugin reads ``self.options`` as it likes."""

    def view(self, case: Case) -> Case:
        """The case as this generator is given it (to ``key`` and ``generate``)."""
        return case if self.sees_truth else generator_view(case)

    def sample_seed(self) -> int | None:
        """The seed this generation is made with, for a generator that takes one: the ``seed``
        generation option for the first generation of each case, one derived from it for a later
        one (``trace run --samples``); None without a seed."""
        seed = self.options.get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            from ._local import sample_seed

            return sample_seed(seed, self.sample)
        return None

    def mark_set_up(self) -> None:
        """Record that ``setup`` has run (a Ray worker sets it up before its first call)."""
        self._set_up = True

    async def call(self, case: Case, references: Sequence[bytes]) -> Generation:
        if not self.__dict__.get("_set_up"):
            lock = self.__dict__.setdefault("_setup_lock", asyncio.Lock())
            async with lock:  # concurrent first calls: one setup
                if not self.__dict__.get("_set_up"):
                    await asyncio.to_thread(self.setup)
                    self._set_up = True
        result = await _await(self.generate, self.view(case), references)
        used = None
        if isinstance(result, Generation):
            result, used = result.image, result.used_references
        if not isinstance(result, (bytes, bytearray)) or not result:
            raise CallFailed(f"{self.spec} returned {type(result).__name__}, not image bytes")
        return Generation(bytes(result), used_references(case, used, self.spec))


class Judge(Provider):
    """Answers a case's questions about a generated image.

    ``scale`` says what it is asked for (``trace run --scale``, :mod:`tracebench.scales`): "yes"
    or "no" (binary), a grade 2/1/0 (ternary) or, for anchor identity questions, a tier
    1.0/0.2/0.0 (tiers); ``tracebench.scales.answers(scale, question)`` lists them."""

    scale: str = "binary"

    def _take_settings(self, settings: ProviderSettings) -> None:
        super()._take_settings(settings)
        if settings.scale is not None:
            self.scale = settings.scale

    def key(self, case: Case, questions: Sequence[Question], image: bytes,
            references: Sequence[bytes]) -> dict[str, Any]:
        """What the reply depends on (the cache key's parts). The default: the spec, the prompt,
        the questions, every image and (when not binary) the scale."""
        key = {"provider": self.spec, "prompt": case.prompt,
               "questions": [[q.id, q.question] for q in questions],
               "images": [sha256(r) for r in references], "image": sha256(image)}
        return key if self.scale == "binary" else key | {"scale": self.scale}

    def prompt_text(self, case: Case, questions: Sequence[Question]) -> str | None:
        """The text a served judge is sent for these questions (what ``trace run --dry-run``
        counts tokens of); None for a judge that is no served model."""
        return None

    def references_sent(self, case: Case, questions: Sequence[Question]) -> tuple[int, ...]:
        """The case's references (their places in ``case.references``, 0-based) this judge sends
        with these questions: what ``trace run --dry-run`` and ``--max-cost`` count. The default:
        every one (``ask`` is given them all); a served judge sends only those the questions name
        when they are part of the checklist (:func:`shown_references`)."""
        return tuple(range(len(case.references)))

    @abstractmethod
    def ask(self, case: Case, questions: Sequence[Question], image: bytes, references: Sequence[bytes]) -> Any:
        """The reply: a :class:`Reply`, its text (``{"answers": [{"id", "answer", "reason"}]}``,
        see templates/judge/user.j2), or a mapping question id -> "yes"/"no". May be ``async def``."""

    async def call(self, case: Case, questions: Sequence[Question], image: bytes,
                   references: Sequence[bytes]) -> Reply:
        reply = await _await(self.ask, case, questions, image, references)
        if isinstance(reply, Reply):
            if not isinstance(reply.text, str):
                raise CallFailed(f"{self.spec} returned a reply whose text is {type(reply.text).__name__}, not text")
            return reply if isinstance(reply.tokens, int) else Reply(reply.text)
        if isinstance(reply, str):
            return Reply(reply)
        if isinstance(reply, dict):
            import json

            return Reply(json.dumps({"answers": [{"id": qid, "answer": answer} for qid, answer in reply.items()]}))
        raise CallFailed(f"{self.spec} returned {type(reply).__name__}, not a reply")


def shown_references(case: Case, questions: Sequence[Question]) -> tuple[int, ...] | None:
    """The references a judge call asking ``questions`` about ``case`` needs: the places (0-based,
    in case order) of those the questions name in their ``images`` field ("Image 3": the
    reference whose ``image`` it is), or None for every reference, as a call asking the whole
    checklist always sends them (``--judge-batch case``). None too when the questions are the
    case's whole checklist (or more), when they name every reference, and when the case cannot
    say which it needs: its references not labelled Image 1 .. Image N in order (a judge labels
    them by place), a question naming an image the case does not hold, or references while no
    question of its checklist names any (a case written without the field)."""
    references = case.references
    if not references or len(questions) >= len(case.checklist):
        return None
    place = {r.image: k for k, r in enumerate(references)}
    if any(place.get(f"Image {k + 1}") != k for k in range(len(references))):
        return None
    named: set[int] = set()
    for q in questions:
        for image in q.images:
            if image not in place:
                return None
            named.add(place[image])
    if len(named) == len(references) or not any(q.images for q in case.checklist):
        return None
    return tuple(sorted(named))


def generator_view(case: Case) -> Case:
    """The case as a generator sees it: without the truth of its reference clutter. A cluttered
    case keeps its prompt, scene, text-only prompt and reference images, and loses what would
    tell a distractor from a source: its clutter record, its checklist (the rejection questions
    name the distractors), its bound formula (it numbers the sources' images: the template is
    given instead), every reference's library id and file name (``ref-3``: a public library's
    tags would tell them apart) and, for the terms pool mode names by description, their image
    and source. A case without clutter is given whole."""
    if case.clutter is None:
        return case
    pooled = {p.term for p in case.clutter.pooled}
    hidden = {"image": None, "source_id": None, "entity": None, "entity_index": None, "source_entities": None}
    neutral = tuple(r.model_copy(update={"source_id": f"ref-{k}",
                                         "path": f"references/ref-{k}{PurePosixPath(r.path).suffix}"})
                    for k, r in enumerate(case.references, 1))
    return case.model_copy(update={
        "clutter": None, "checklist": (), "formula": case.template, "references": neutral,
        "terms": tuple(t.model_copy(update=hidden) if t.symbol in pooled else t.model_copy(update={"source_id": None})
                       for t in case.terms)})



def used_references(case: Case, used: Any, spec: str) -> tuple[str, ...] | None:
    """The references a generator reports having used, checked against the case's: a sequence of
    their names ("Image 2"); None when it does not say, and for a collage (its one image holds
    them all; the run keeps none). Anything else is a CallFailed naming it."""
    if used is None or any(r.source_id == COLLAGE_ID for r in case.references):
        return None
    names = {r.image for r in case.references}
    if isinstance(used, (str, bytes)) or not isinstance(used, (list, tuple)) or \
            not all(isinstance(u, str) for u in used):
        raise CallFailed(f"{spec}: used_references must be a list of reference names (\"Image 2\"), "
                         f"got {type(used).__name__}")
    unknown = [u for u in used if u not in names]
    if unknown:
        raise CallFailed(f"{spec}: used_references names {unknown[0]!r}, not a reference of case {case.id} "
                         f"(Image 1 .. Image {len(names)})")
    return tuple(dict.fromkeys(used))


async def _await(method, *args):
    if inspect.iscoroutinefunction(method):
        return await method(*args)
    import asyncio

    return await asyncio.to_thread(method, *args)
