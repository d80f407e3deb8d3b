"""The one wrapper around every model call: cache, retry, concurrency, counters, key scrubbing.

Whatever the provider (an OpenAI-compatible server, a shell command, a user's ``python:``
class, the zoo), a call goes through :class:`ModelAccess`:

- **cache**: a content-addressed entry per call, keyed by the provider's ``key()`` parts
  (what changes the output; never a key, a timeout or a retry count), looked up first;
- **concurrency**: a limit of calls in flight per model and replica (the provider's
  ``concurrency``, else the command's ``--concurrency``); a model with several replicas
  sends each call to the replica with the fewest calls in flight, taking turns on ties;
- **retry**: transient failures (timeouts, dropped connections, 5xx) and rate limits are
  retried with exponential backoff and jitter (tenacity), a server's ``Retry-After``
  honoured; the limit is released while waiting; other failures are not retried;
- **timeout**: an attempt is bounded as a whole by the provider's ``call_timeout`` (an
  OpenAI-compatible server's ``--timeout``), however slowly its reply trickles in; a
  timeout is transient;
- **failures**: whatever a call raises becomes :class:`CallFailed` (an abstention with a
  one-line reason, never a fail), with every secret of the provider scrubbed out;
- **counters**: calls per spec, retries, cache hits, tokens, failures; a ``meter`` (``trace run
  --max-cost``) is told of every call sent, answered or failed, with its reply;
- **stopping early**: when a provider's first calls all fail the same way (the endpoint
  refused the key or does not know the model, or :data:`STOP_AFTER` identical failures
  before any success: a wrong URL, a 400 for an unknown model, a broken command), no
  further call is sent to it (:class:`NotSent`) and :attr:`ModelAccess.stopped` says why,
  so a command stops with that reason instead of trying every case.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections import Counter
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Sequence, TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from ..cache import Cache, cache_key
from ..records import Case, Question
from ._base import CallFailed, EndpointRefused, Generation, Generator, Judge, NotSent, Provider, Reply, Transient, current_replica

__all__ = ["STOP_AFTER", "AccessStats", "ModelAccess", "Stopped", "clip", "generation_key", "generation_parts",
           "one_line", "scrub"]

T = TypeVar("T")
_REASON_LIMIT = 240
STOP_AFTER = 5  # identical failures before any success that stop the calls to a provider
_NUMBERS = re.compile(r"\d+")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a repr's memory address: identical runs would differ


@dataclass(frozen=True)
class Stopped:
    """Why the calls to a provider were stopped: its first ``calls`` calls all failed with ``reason``."""

    spec: str
    reason: str
    calls: int
    refused: bool  # the endpoint refused the key or does not know the model

    def __str__(self) -> str:
        if self.refused:
            return f"the endpoint of {self.spec} refused the request: {self.reason}"
        return f"the first {self.calls} calls to {self.spec} all failed the same way: {self.reason}"


@dataclass
class _Breaker:
    settled: bool = False  # a call succeeded, or calls failed in two ways: this provider is never stopped
    shape: str | None = None  # the first failure's reason, numbers blanked (case ids, line numbers)
    same: int = 0
    stopped: bool = False


@dataclass
class AccessStats:
    calls: Counter = field(default_factory=Counter)  # per spec: calls made (a retried call counts once)
    retries: int = 0
    cache_hits: int = 0
    tokens: int = 0
    failures: int = 0
    identities: dict = field(default_factory=dict)  # judge spec -> the models of its replies, called or cached


MIN_SECRET = 8  # characters: a shorter key is scrubbed only where it stands as a word of its own


def scrub(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` with every secret replaced by ``***``, in each form a server may echo it:

    - **plain**, in any letter case;
    - **hex** of its UTF-8 bytes, two digits a byte with no separator, in any letter case
      (``key.encode().hex()``, its upper-case form, mixed), found as a run of digits anywhere:
      alone, or inside the hex of a longer text (``Bearer KEY``, ``user:KEY``); each byte is
      two digits, so the key's digits are the same wherever that text starts (an odd count of
      digits before them does not matter; only bytes shifted by half a byte, a bit stream's,
      would escape);
    - **base64** (standard or URL-safe) at any of the 3 byte offsets it may sit at in an encoded
      text: the key alone, ``Bearer KEY``, ``user:KEY`` ... (the characters that depend on the
      key only; base64 is case-sensitive, so only as encoded).

    Not scrubbed: other encodings (hex with separators or ``\\x``/``0x`` per byte, percent-,
    base32- or UTF-16-encoding, a reversed key), nor a part of the key. Every text a command
    stores or prints that a server or a plugin wrote goes through it first.

    A key under :data:`MIN_SECRET` characters is replaced only where it stands alone (not inside
    a longer run of letters, digits, ``_`` or ``-``), its hex form too; a key under 6 bytes has
    no hex or base64 form scrubbed (too short to tell from other hex or base64): local servers
    take any placeholder (``x``, ``EMPTY``), and replacing every "x" of a reply corrupted it (a
    question id ``C0:leakage_context`` read as ``C0:leakage_conte***t``, an abstention; the hex
    of "x" is the number 78)."""
    secrets = tuple(s for s in secrets if s)
    return _secrets_pattern(secrets).sub("***", text) if secrets else text


@lru_cache(maxsize=32)
def _secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    alone = r"(?<![A-Za-z0-9_\-])(?i:{})(?![A-Za-z0-9_\-])"
    # plain and hex forms in any case; base64 is case-sensitive (an upper-cased base64 echo decodes to another text)
    caseless = {p: len(p) >= MIN_SECRET for p in secrets}  # form -> found anywhere (else only alone)
    for secret in secrets:
        if len(secret.encode()) >= 6:
            hexed = secret.encode().hex()
            caseless[hexed] = caseless.get(hexed, False) or len(secret) >= MIN_SECRET
    plain = sorted(caseless, key=len, reverse=True)
    encoded = sorted({form for s in secrets for form in _base64_forms(s.encode())}, key=len, reverse=True)
    return re.compile("|".join([f"(?i:{re.escape(p)})" if caseless[p] else alone.format(re.escape(p))
                                for p in plain] + [re.escape(e) for e in encoded]))


def _base64_forms(secret: bytes) -> set[str]:
    """The base64 characters that depend on ``secret`` only, for each of the 3 offsets it may sit
    at in an encoded text (standard and URL-safe alphabets); none for secrets under 6 bytes
    (too short to tell from other base64)."""
    forms: set[str] = set()
    if len(secret) < 6:
        return forms
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + secret).decode("ascii")
        first = -(-8 * offset // 6)  # the first character whose 6 bits all come from the secret
        last = (8 * offset + 8 * len(secret)) // 6  # one past the last such character
        core = encoded[first:last]
        forms |= {core, core.replace("+", "-").replace("/", "_")}
    return forms


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters (an ellipsis marking the cut)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def one_line(text: str, secrets: Sequence[str] = ()) -> str:
    """A reason fit for a record: one line, secrets scrubbed (:func:`scrub`), no memory address,
    at most 240 characters."""
    text = _ADDRESS.sub("", scrub(text, secrets))
    return clip(" ".join(text.split()), _REASON_LIMIT)


class _Replicas:
    """The limits of one model: per replica a semaphore, and the calls sent to it (in flight or
    waiting for it)."""

    def __init__(self, count: int, limit: int) -> None:
        self.limits = [asyncio.Semaphore(limit) for _ in range(count)]
        self.in_flight = [0] * count
        self.turn = 0

    def choose(self) -> int:
        count = len(self.limits)
        start = self.turn
        self.turn = (self.turn + 1) % count
        return min(range(count), key=lambda k: (self.in_flight[k], (k - start) % count))


def generation_parts(generator: Generator, case: Case, references: Sequence[bytes]) -> dict | None:
    """What a generation depends on (its cache key's parts), or None for a generator whose
    images are no model call (a folder, the zoo)."""
    parts = generator.key(generator.view(case), references)  # what the generator may know of the case
    if parts is not None and generator.sample:  # a later generation of the case: its own call
        parts = {**parts, "sample": generator.sample}
    if parts is not None and generator.options:  # other options, another image (none: the keys it always had)
        parts = {**parts, "options": dict(generator.options)}
    return parts


def generation_key(generator: Generator, case: Case, references: Sequence[bytes]) -> str | None:
    """The cache key of a case's generation, or None when it is no model call."""
    parts = generation_parts(generator, case, references)
    return None if parts is None else cache_key(**parts)


class ModelAccess:
    """Calls of one command (a run, a diagnosis round, a tagging run) through its providers."""

    def __init__(self, cache: Cache | None = None, *, concurrency: int = 8, max_retries: int = 4,
                 backoff: tuple[float, float] = (0.5, 30.0), max_calls: int | None = None, meter=None) -> None:
        self.cache = cache
        # told of every counted call sent (answered or failed; a retried call once): ``meter.generated(generator)``
        # and ``meter.judged(judge, case, questions, image, references, reply or None)`` (tracebench.run's CostMeter)
        self.meter = meter
        self.max_calls = max_calls  # a budget of calls (cache hits are free): past it nothing more is sent
        self.spent = False  # whether the budget ran out (a case was not started, or a call refused for it)
        self.refused = False  # whether a call was refused for the budget (one a started case needed)
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff = backoff
        self.stats = AccessStats()
        self.stopped: Stopped | None = None  # the first provider stopped, if any
        self._replicas: dict[int, _Replicas] = {}
        self._breakers: dict[int, _Breaker] = {}

    # -- the call ------------------------------------------------------------------------------

    async def call(self, provider: Provider, attempt: Callable[[], Awaitable[T]], *, count: bool = True) -> T:
        """``attempt()`` under the provider's limit, retried on transient failures; raises
        :class:`CallFailed` with a scrubbed one-line reason."""
        replicas = self._replicas.get(id(provider))
        if replicas is None:
            replicas = self._replicas[id(provider)] = _Replicas(len(provider.replicas),
                                                                provider.concurrency or self.concurrency)
        breaker = self._breakers.setdefault(id(provider), _Breaker())
        self._refuse_if_stopped(breaker)
        if count:
            if self.max_calls is not None and sum(self.stats.calls.values()) >= self.max_calls:
                self.spent = self.refused = True  # checked and counted with no await between: no overshoot
                raise NotSent(f"not sent: the budget of {self.max_calls} calls is spent (--max-calls)")
            self.stats.calls[provider.spec] += 1
        retries = getattr(provider, "max_retries", None)
        retries = self.max_retries if retries is None else retries
        initial, longest = self.backoff
        exponential = wait_exponential(multiplier=initial, max=longest) + wait_random(0, initial)

        def wait(state) -> float:
            err = state.outcome.exception() if state.outcome else None
            if isinstance(err, Transient) and err.retry_after is not None:
                return min(max(err.retry_after, 0.0), longest)
            return exponential(state)

        def before_sleep(state) -> None:
            self.stats.retries += 1

        try:
            async for trial in AsyncRetrying(stop=stop_after_attempt(retries + 1), wait=wait,
                                             retry=retry_if_exception_type(Transient), before_sleep=before_sleep,
                                             reraise=True):
                with trial:
                    index = replicas.choose()
                    replicas.in_flight[index] += 1  # waiting for the replica counts: the next call goes elsewhere
                    try:
                        async with replicas.limits[index]:
                            self._refuse_if_stopped(breaker)  # stopped while this call waited for its turn
                            token = current_replica.set(index)
                            try:
                                result = await self._attempt(provider, attempt)
                            finally:
                                current_replica.reset(token)
                            breaker.settled = True
                            return result
                    finally:
                        replicas.in_flight[index] -= 1
        except NotSent:
            if count:
                self.stats.calls[provider.spec] -= 1
            raise
        except CallFailed as err:
            self.stats.failures += 1
            reason = one_line(str(err), provider.secrets())
            self._failed(provider, breaker, err, reason)
            try:
                scrubbed = type(err)(reason)
            except TypeError:  # a subclass of a plugin's with another signature
                scrubbed = CallFailed(reason)
            raise scrubbed from None
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    def _refuse_if_stopped(self, breaker: _Breaker) -> None:
        if breaker.stopped:
            raise NotSent(f"not sent: {self.stopped.reason if self.stopped else 'stopped'}")

    def _failed(self, provider: Provider, breaker: _Breaker, err: CallFailed, reason: str) -> None:
        """Count a failure toward stopping the calls to ``provider`` (see the module docstring)."""
        if breaker.settled or breaker.stopped:
            return
        shape = _NUMBERS.sub("#", reason)
        if shape == breaker.shape:
            breaker.same += 1
        elif breaker.shape is None:
            breaker.shape, breaker.same = shape, 1
        else:
            breaker.settled = True  # two ways of failing: not the endpoint as a whole
            return
        if isinstance(err, EndpointRefused) or breaker.same >= STOP_AFTER:
            breaker.stopped = True
            if self.stopped is None:
                self.stopped = Stopped(provider.spec, reason, breaker.same, isinstance(err, EndpointRefused))

    @staticmethod
    async def _attempt(provider: Provider, attempt: Callable[[], Awaitable[T]]) -> T:
        """One attempt, bounded as a whole by the provider's ``call_timeout`` (a server trickling its
        reply byte by byte is cut off too: a client's timeout bounds each read only)."""
        bound = asyncio.timeout(provider.call_timeout)
        try:
            async with bound:
                return await attempt()
        except CallFailed:
            raise
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            if not bound.expired():
                raise
            raise Transient(f"no complete reply within {provider.call_timeout:g} s (the timeout)") from None
        except RecursionError:  # a client parsing deeply nested JSON
            raise CallFailed("the reply is nested too deeply to read") from None
        except Exception as err:  # the provider's client, or a user's plugin
            translate = getattr(provider, "failure", None)
            failure = translate(err) if translate else None
            raise (failure or CallFailed(f"{type(err).__name__}: {err}")) from None

    # -- generators and judges -----------------------------------------------------------------

    async def generate(self, generator: Generator, case: Case, references: Sequence[bytes]) -> Generation:
        """The image for a case (and the references the generator says it used), from the cache or
        a call; raises CallFailed."""
        parts = generation_parts(generator, case, references)
        key = cache_key(**parts) if parts is not None and self.cache is not None else None
        if key is not None:
            hit = self.cache.get(key)
            if hit is not None and hit[1] is not None:
                self.stats.cache_hits += 1
                used = hit[0].get("used_references")
                return Generation(hit[1], None if used is None else tuple(used))
        try:
            made = await self.call(generator, lambda: generator.call(case, references), count=parts is not None)
        except NotSent:
            raise
        except CallFailed:
            if self.meter is not None and parts is not None:
                self.meter.generated(generator)  # sent, and maybe billed: a failed call costs what it would have
            raise
        if self.meter is not None and parts is not None:
            self.meter.generated(generator)
        if key is not None:
            meta = {"generator": generator.spec}
            if made.used_references is not None:
                meta["used_references"] = list(made.used_references)
            self.cache.put(key, meta, made.image)
        return made

    def _answered(self, judge: Judge, reply: Reply) -> None:
        """Remember the model that gave a reply (from a call or the cache): ``stats.identities``."""
        if reply.identity is not None:
            self.stats.identities.setdefault(judge.spec, set()).add(reply.identity)

    async def ask(self, judge: Judge, case: Case, questions: Sequence[Question], image: bytes,
                  references: Sequence[bytes], *, keep: Callable[[str], bool]) -> tuple[Reply, str]:
        """A judge's reply and its cache key, from the cache or a call; a reply is cached only
        when ``keep(text)`` (a complete answer: abstentions are asked again). Raises CallFailed
        (with the key in ``err.cache_key``)."""
        key = cache_key(**judge.key(case, questions, image, references))
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self.stats.cache_hits += 1
                cached = Reply(hit[0]["raw"], model=hit[0].get("model"), fingerprint=hit[0].get("fingerprint"))
                self._answered(judge, cached)
                return cached, key
        try:
            reply = await self.call(judge, lambda: judge.call(case, questions, image, references))
        except CallFailed as err:
            if self.meter is not None and not isinstance(err, NotSent):
                self.meter.judged(judge, case, questions, image, references, None)
            err.cache_key = key  # type: ignore[attr-defined]
            raise
        reply = Reply(scrub(reply.text, judge.secrets()), reply.tokens,  # before it is parsed, cached or stored
                      *(None if v is None else scrub(v, judge.secrets()) for v in (reply.model, reply.fingerprint)),
                      reply.usage)
        if self.meter is not None:
            self.meter.judged(judge, case, questions, image, references, reply)
        self.stats.tokens += reply.tokens
        self._answered(judge, reply)
        if self.cache is not None and keep(reply.text):
            meta = {"judge": judge.spec, "raw": reply.text}
            meta |= {k: v for k, v in (("model", reply.model), ("fingerprint", reply.fingerprint)) if v is not None}
            self.cache.put(key, meta)
        return reply, key
