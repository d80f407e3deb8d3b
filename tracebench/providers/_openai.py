"""OpenAI-compatible servers: the ``openai:MODEL`` generator and judge, and the client pool the
tagger shares.

The clients make one attempt per call (``max_retries=0``): retries belong to the wrapper, so
they behave the same for every provider. Failures are translated once, here, into the
wrapper's vocabulary: a rate limit (429, with its ``Retry-After``), a transient failure
(timeout, connection, 408/409/5xx), a refusal of the key or the model (401/403/404), or a
plain failure (any other status: retrying would not help).

A reply body is read up to ``max_reply_bytes`` (a hook on the client's HTTP responses cuts a
longer one off) and parsed here, not by the client: a 200 whose body is not the JSON object
asked for (truncated, an HTML page, empty, not UTF-8, nested too deeply, ``choices`` or
``data`` of another type, a content that is not text) is a :class:`CallFailed` with a short
reason, so one odd reply is one abstention.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from ..apikeys import api_key, public_url
from ..errors import TraceError
from ..records import Endpoint, Question
from ..scales import DEFAULT_SCALE, KINDS, SCALE_HEADER, kind_of, spec_of
from ..scales import answers as scale_answers
from ..templating import render, template_hash
from ._base import CallFailed, EndpointRefused, Generator, Judge, Provider, RateLimited, Reply, Transient, \
    current_replica, shown_references
from ._config import ModelConfig
from ._images import data_url, digest, image_kind, image_suffix, mime_type

__all__ = ["JUDGE_TEMPLATES", "SHOWN_TEMPLATES", "ChatReply", "OpenAIClients", "OpenAIImages", "OpenAIJudge",
           "ReplyTooLarge", "translate_openai_error"]

JUDGE_TEMPLATES = ("judge/system.j2", "judge/user.j2")
GRADED_TEMPLATES = ("judge/graded.j2", "judge/scales.toml")  # the judge's text on a graded scale
SHOWN_TEMPLATES = ("judge/shown.j2",)  # the line of a call sending some of the references (--judge-batch op)


class ReplyTooLarge(Exception):
    """A reply body longer than the client's ``max_reply_bytes``: raised while it is read."""


def translate_openai_error(err: Exception) -> CallFailed | None:
    """An openai exception as the wrapper's failure (one line); None for anything else."""
    import openai

    if isinstance(err, ReplyTooLarge) or isinstance(err.__cause__, ReplyTooLarge):
        return CallFailed(str(err if isinstance(err, ReplyTooLarge) else err.__cause__))
    if isinstance(err, openai.RateLimitError):
        return RateLimited(f"API error 429: {err.message}", _retry_after(err.response.headers))
    if isinstance(err, (openai.APITimeoutError, openai.APIConnectionError)):
        cause = f" ({err.__cause__})" if err.__cause__ else ""
        return Transient(f"API error: {err.message}{cause}")
    if isinstance(err, openai.APIStatusError):
        text = f"API error {err.status_code}: {err.message}"
        if err.status_code in (408, 409) or err.status_code >= 500:
            return Transient(text, _retry_after(err.response.headers))
        if err.status_code in (401, 403, 404):
            return EndpointRefused(text)
        return CallFailed(text)
    if isinstance(err, openai.APIError):
        return CallFailed(f"API error: {err.message}")
    return None


def _retry_after(headers) -> float | None:
    """Seconds a 429 asks to wait: ``retry-after-ms`` (OpenAI's), else ``retry-after`` in seconds."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers.get(name, "")) * scale
        except (TypeError, ValueError):
            continue
    return None


@dataclass(frozen=True)
class ChatReply:
    """What a chat completion said: its text (None: no content), a refusal, the tokens it cost."""

    content: str | None
    refusal: str | None = None
    tokens: int = 0
    model: str | None = None  # the model the server says answered, and its system_fingerprint
    fingerprint: str | None = None
    usage: tuple[int, int] | None = None  # (prompt, completion) tokens, when the server counted any


class OpenAIClients(Provider):
    """One ``AsyncOpenAI`` client per replica URL, made on first use. ``config``: where the model
    is served (default: the endpoint of the command's settings it was built with)."""

    def __init__(self, model: str, config: ModelConfig | None = None) -> None:
        config = config or (self.provider_settings.endpoint if self.provider_settings else None)
        if config is None:
            raise TypeError(f"{type(self).__name__}({model!r}) needs the config of its endpoint")
        self.model = model
        self.config = config
        self.concurrency = config.concurrency
        self.max_retries = config.max_retries
        self.call_timeout = config.timeout
        self._clients: dict[int, Any] = {}

    @property
    def spec(self) -> str:  # type: ignore[override]
        """``openai:MODEL``: the model names the provider, built in or as a tagger."""
        return f"openai:{self.model}"

    @property
    def replicas(self) -> tuple[str, ...]:
        return self.config.base_urls

    @property
    def base_url(self) -> str:
        """The first replica: what the cache key names (replicas are one model)."""
        return self.config.base_urls[0]

    def endpoint(self) -> Endpoint:
        return Endpoint(base_urls=tuple(public_url(u) for u in self.config.base_urls),
                        api_key_env=self.config.api_key_env)

    def check(self) -> None:
        for url in self.config.base_urls:
            api_key(self.config.api_key_env, url)

    def secrets(self) -> tuple[str, ...]:
        key = os.environ.get(self.config.api_key_env)
        return (key,) if key else ()

    def client(self):
        """The client of the replica the wrapper chose for this call."""
        index = current_replica.get() if len(self.config.base_urls) > 1 else 0
        if index not in self._clients:
            import openai  # imported on first use: ~0.4 s

            url = self.config.base_urls[index]
            self._clients[index] = openai.AsyncOpenAI(
                api_key=api_key(self.config.api_key_env, url), base_url=url, max_retries=0, timeout=self.config.timeout,
                http_client=openai.DefaultAsyncHttpxClient(
                    event_hooks={"response": [_cap_reply(self.config.max_reply_bytes)]}))
        return self._clients[index]

    async def chat(self, **request) -> ChatReply:
        """One chat completion (``request``: the arguments of ``chat.completions.create``), read
        from the body the server sent; raises :class:`CallFailed` when it is not a completion.

        Sent through the client's ``post`` as ``create`` sends it (the same JSON body, byte for
        byte, and the same headers, auth, timeout and error types) but without ``create``'s
        request transform, which walks every field of the request (the base64 images too: about
        2 ms of a 175 KiB judge request) to change nothing a chat request holds, and without
        parsing the reply into the client's model: the reply is the HTTP response, its body read
        (and capped) by the client."""
        body, options = _chat_request(self.model, request)
        response = await self.client().post("/chat/completions", body=body, options=options, cast_to=_httpx().Response)
        body = _reply_object(response.content)
        choices = body.get("choices")
        if not isinstance(choices, list):
            raise CallFailed(f"the reply's choices are {_kind_of(choices)}, not a list")
        if not choices:
            raise CallFailed("the server returned no choice")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise CallFailed(f"the reply's first choice has {_kind_of(message)} as its message, not an object")
        content, refusal = message.get("content"), message.get("refusal")
        if content is not None and not isinstance(content, str):
            raise CallFailed(f"the reply's content is {_kind_of(content)}, not text")
        usage = body.get("usage")
        tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
        return ChatReply(content, refusal if isinstance(refusal, str) and refusal else None,
                         tokens if _count(tokens) and tokens > 0 else 0,
                         _said(body.get("model")), _said(body.get("system_fingerprint")), _usage(usage))

    async def image(self, *, edit: bool, **request) -> bytes:
        """One image from ``images.edit`` or ``images.generate``, decoded from the body the server
        sent; raises :class:`CallFailed` when it holds no PNG, JPEG or WebP image."""
        images = self.client().images.with_raw_response
        raw = await (images.edit if edit else images.generate)(model=self.model, **request)
        data = _reply_object(raw.content).get("data")
        if not isinstance(data, list):
            raise CallFailed(f"the reply's data is {_kind_of(data)}, not a list")
        encoded = data[0].get("b64_json") if data and isinstance(data[0], dict) else None
        if not encoded:
            raise CallFailed("the server returned no image (b64_json)")
        if not isinstance(encoded, str):
            raise CallFailed(f"the reply's b64_json is {_kind_of(encoded)}, not text")
        try:
            image = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise CallFailed("the server returned an image that is not base64") from None
        if image_kind(image) is None:
            raise CallFailed("the server returned data that is not a PNG, JPEG or WebP image")
        return image

    def failure(self, err: Exception) -> CallFailed | None:
        return translate_openai_error(err)

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


def _httpx():
    """The HTTP client module the openai client uses."""
    try:
        import httpx2 as httpx  # the HTTP client of recent openai releases
    except ImportError:  # pragma: no cover - older openai releases use httpx
        import httpx
    return httpx


# The arguments of chat.completions.create that are options of the request, not fields of its
# body, and the request option each one is (as openai's make_request_options names them).
_CHAT_OPTIONS = {"extra_headers": "headers", "extra_query": "params", "extra_body": "extra_json", "timeout": "timeout"}


@lru_cache(maxsize=1)
def _chat_fields() -> frozenset[str]:
    """The body fields chat.completions.create takes as arguments."""
    import inspect

    from openai.resources.chat.completions import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - {"self", "model", *_CHAT_OPTIONS}


def _chat_request(model: str, request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(body, request options) of ``client.post("/chat/completions", ...)`` for the arguments of
    ``chat.completions.create(model=model, **request)``: the model, then the fields in the order
    given (``create`` sends model first, then messages, then response_format: the order every
    caller gives), the extra_* arguments and the timeout as the request options ``create`` makes
    of them, and the bearer auth it asks for. A name ``create`` does not take is a TypeError, as
    there."""
    fields = _chat_fields()
    body: dict[str, Any] = {"model": model}
    options: dict[str, Any] = {"security": {"bearer_auth": True}}
    for name, value in request.items():
        if name in fields:
            body[name] = value
        elif name == "timeout" or (name in _CHAT_OPTIONS and value is not None):  # timeout=None: none
            options[_CHAT_OPTIONS[name]] = value
        elif name not in _CHAT_OPTIONS:
            raise TypeError(f"chat() got an unexpected keyword argument {name!r}")
    return body, options


def _cap_reply(limit: int):
    """A response hook of the HTTP client: the body is read in chunks, and :class:`ReplyTooLarge`
    raised once more than ``limit`` bytes came (the client would read any length)."""
    httpx = _httpx()

    class Capped(httpx.AsyncByteStream):
        def __init__(self, inner) -> None:
            self.inner = inner

        async def __aiter__(self):
            read = 0
            async for chunk in self.inner:
                read += len(chunk)
                if read > limit:
                    raise ReplyTooLarge(f"the reply is longer than {limit} bytes (--max-reply-bytes)")
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    async def hook(response) -> None:
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            await response.aclose()
            raise ReplyTooLarge(f"the reply is longer than {limit} bytes (--max-reply-bytes)")
        response.stream = Capped(response.stream)

    return hook


def _reply_object(body: bytes) -> dict:
    """A reply body as the JSON object it must be; :class:`CallFailed` saying what it is instead."""
    if not body.strip():
        raise CallFailed("the reply is empty")
    try:
        data = json.loads(body)
    except RecursionError:
        raise CallFailed("the reply is JSON nested too deeply to read") from None
    except UnicodeDecodeError:
        raise CallFailed("the reply is not UTF-8 text") from None
    except ValueError as err:
        start = body.lstrip()[:1]
        what = "an HTML page" if start == b"<" else f"not JSON ({err.msg}, at character {err.pos})" \
            if isinstance(err, json.JSONDecodeError) else "not JSON"
        raise CallFailed(f"the reply is {what}") from None
    if not isinstance(data, dict):
        raise CallFailed(f"the reply is {_kind_of(data)}, not a JSON object")
    if "error" in data and "choices" not in data and "data" not in data:
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise CallFailed(f"the server replied with an error: {message}")
    return data


def _kind_of(value: Any) -> str:
    """How a reply's field reads in a reason: ``a string``, ``a list``, ``missing`` ..."""
    if value is None:
        return "missing"
    names = {str: "a string", int: "a number", float: "a number", bool: "a boolean", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


class OpenAIImages(OpenAIClients, Generator):
    """``openai:MODEL`` generator: images.edit with the references, images.generate without."""

    def key(self, case, references):
        return {"adapter": "openai-images", "model": self.model, "base_url": self.base_url, "prompt": case.prompt,
                "images": [digest(r) for r in references]}

    def failure(self, err: Exception) -> CallFailed | None:
        """A request the server refuses (400, 422) naming a generation option is no case's
        failure but the run's: every request carries it. It stops the run (one line, exit 2)."""
        failed = translate_openai_error(err)
        if failed is not None and getattr(err, "status_code", None) in (400, 422) and self.options:
            named = [name for name in self.options if name in str(err)]
            if named:
                return EndpointRefused(f"{failed}; the server refuses the generation option {', '.join(named)} "
                                       f"(--generator-option, or the models file's options)")
        return failed

    def check_options(self) -> None:
        for name in self.options:
            if name in _SET_BY_US:
                raise TraceError(f"--generator-option {name}: set by tracebench for every request ({_SET_BY_US[name]}); "
                                 f"not an option")

    def _request(self, edit: bool) -> dict:
        """The options as the client takes them: the images API's own fields as arguments, any other
        (seed, steps, guidance_scale: vLLM-Omni's and SGLang's) in ``extra_body``. A later
        generation of each case (``trace run --samples``, ``trace diagnose --repeats``) is sent a
        seed derived from the ``seed`` option (:meth:`Generator.sample_seed`)."""
        known = _image_fields(edit)
        options = dict(self.options)
        seed = self.sample_seed()  # the seed option's, or a later generation's own derived from it
        if seed is not None:
            options["seed"] = seed
        request = {k: v for k, v in options.items() if k in known}
        extra = {k: v for k, v in options.items() if k not in known}
        return request | ({"extra_body": extra} if extra else {})

    async def generate(self, case, references):
        if references:
            files = [(f"image_{k + 1}{image_suffix(data)}", bytes(data), mime_type(data))  # JPEG sent as JPEG
                     for k, data in enumerate(references)]
            return await self.image(edit=True, image=files, prompt=case.prompt, **self._request(True))
        return await self.image(edit=False, prompt=case.prompt, **self._request(False))


_SET_BY_US = {"image": "the references", "prompt": "the case's prompt", "model": "the spec's model",
              "n": "one image a call", "stream": "one reply", "mask": "no mask", "extra_body": "the unknown options",
              "extra_headers": "none", "extra_query": "none", "timeout": "--timeout"}


@lru_cache(maxsize=2)
def _image_fields(edit: bool) -> frozenset[str]:
    """The request fields the openai client's images.edit (or generate) takes as arguments."""
    import inspect

    from openai.resources.images import AsyncImages

    return frozenset(inspect.signature(AsyncImages.edit if edit else AsyncImages.generate).parameters) - {"self"}


class OpenAIJudge(OpenAIClients, Judge):
    """``openai:MODEL`` judge: one chat completion with the images and the questions, JSON output.

    A call asking the case's whole checklist (``--judge-batch case``) sends every reference,
    each after its label ("Image 2:"); one asking part of it (``--judge-batch op``) sends only
    the references its questions name (:func:`~tracebench.providers.shown_references`), each
    after the label of its number in the case, with a line first (templates/judge/shown.j2)
    saying how many the case has and which are shown. Its cache key names them."""

    def key(self, case, questions, image, references):
        shown = shown_references(case, questions)
        sent = references if shown is None else [references[k] for k in shown]
        key = {"adapter": "openai-judge", "model": self.model, "base_url": self.base_url,
               "messages": _judge_text(case.prompt, _question_texts(questions, self.scale), self.scale),
               "images": [digest(r) for r in sent], "image": digest(image),
               "templates": _templates_hash()}
        if self.scale != DEFAULT_SCALE:  # a binary judge keeps the keys it always had
            key |= {"scale": self.scale, "graded_templates": _templates_hash(GRADED_TEMPLATES)}
        if shown is not None:  # a call sending every reference keeps the key it always had
            key |= {"shown": {"images": [k + 1 for k in shown], "of": len(references),
                              "template": _templates_hash(SHOWN_TEMPLATES)}}
        return key

    def prompt_text(self, case, questions):
        system, user = _judge_text(case.prompt, _question_texts(questions, self.scale), self.scale)
        shown = shown_references(case, questions)
        note = "" if shown is None else _shown_text(shown, len(case.references)) + "\n"
        return system + "\n" + note + user

    def references_sent(self, case, questions):
        shown = shown_references(case, questions)
        return tuple(range(len(case.references))) if shown is None else shown

    async def ask(self, case, questions, image, references):
        system, user = _judge_text(case.prompt, _question_texts(questions, self.scale), self.scale)
        shown = shown_references(case, questions)
        content: list[dict] = []
        if shown is not None:
            content.append({"type": "text", "text": _shown_text(shown, len(references))})
        for k in range(len(references)) if shown is None else shown:
            content += [{"type": "text", "text": f"Image {k + 1}:"}, _image_part(references[k])]
        content += [{"type": "text", "text": "The generated image:"}, _image_part(image), {"type": "text", "text": user}]
        schema = {"type": "object", "required": ["answers"], "properties": {"answers": {"type": "array", "items": {
            "type": "object", "required": ["id", "answer"],
            "properties": {"id": {"type": "string", "enum": [q.id for q in questions]},
                           "answer": {"type": "string", "enum": _answer_set(questions, self.scale)},
                           "reason": {"type": "string"}}}}}}
        reply = await self.chat(
            messages=[{"role": "system", "content": system}, {"role": "user", "content": content}],
            response_format={"type": "json_schema", "json_schema": {"name": "verdicts", "schema": schema}},
            extra_headers={SCALE_HEADER: str(self.scale)})  # the scale named, not left to guess from the answers
        if reply.refusal:
            raise CallFailed(f"refusal: {reply.refusal}")
        return Reply(reply.content or "", reply.tokens, reply.model, reply.fingerprint, reply.usage)


@lru_cache(maxsize=256)
def _shown_text(shown: tuple[int, ...], total: int) -> str:
    """The line before the references of a call that sends some of them (templates/judge/shown.j2)."""
    return render(SHOWN_TEMPLATES[0], shown=[f"Image {k + 1}" for k in shown], total=total).strip()


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _usage(usage: object) -> tuple[int, int] | None:
    """(prompt, completion) tokens of a reply's ``usage``; None when it gives no such counts, or
    counts none (a server that fills the field with zeros, as ``trace serve`` does)."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not (_count(prompt) and _count(completion)) or prompt + completion == 0:
        return None
    return prompt, completion


def _said(value: object) -> str | None:
    """A model name or fingerprint a reply gave: one line of at most 200 characters, or None."""
    if not isinstance(value, str) or not value.strip():
        return None
    return " ".join(value.split())[:200]


def _question_texts(questions: Sequence[Question], scale: str = DEFAULT_SCALE) -> tuple[tuple[str, str, str], ...]:
    """(id, text, kind) per question: the kind of answers it takes on ``scale`` (tracebench.scales)."""
    return tuple((q.id, q.question, kind_of(scale, q)) for q in questions)


def _answer_set(questions: Sequence[Question], scale: str) -> list[str]:
    """Every answer the reply may give (the JSON schema's enum)."""
    return list(dict.fromkeys(a for q in questions for a in scale_answers(scale, q)))


@lru_cache(maxsize=4)
def _templates_hash(names: tuple[str, ...] = JUDGE_TEMPLATES) -> str:
    return template_hash(*names)


@lru_cache(maxsize=256)
def _judge_text(prompt: str, questions: tuple[tuple[str, str, str], ...], scale: str = DEFAULT_SCALE) -> tuple[str, str]:
    """The judge's system and user text (rendered once per call: key() and ask() both need it).
    On a graded scale: templates/judge/graded.j2 with the instructions of the kinds asked, and
    each question marked with its kind's answers (:meth:`tracebench.scales.ScaleSpec.text`)."""
    if scale == DEFAULT_SCALE:
        return render("judge/system.j2"), render("judge/user.j2", prompt=prompt,
                                                 questions=[(qid, text) for qid, text, _ in questions])
    texts = {kind: spec_of(kind).text() for _, _, kind in questions}  # kind -> (instruction, suffix)
    answers = " or ".join(dict.fromkeys(f'"{a}"' for kind in texts for a in KINDS[kind]))
    system = render("judge/graded.j2", instructions=[instruction for instruction, _ in texts.values()], answers=answers)
    marked = [(qid, f"{text} {texts[kind][1]}".strip()) for qid, text, kind in questions]
    return system, render("judge/user.j2", prompt=prompt, questions=marked)


def _image_part(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": data_url(data)}}
