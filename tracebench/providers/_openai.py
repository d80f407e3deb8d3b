"""OpenAI-compatible servers: the ``openai:MODEL`` generator and judge, and the client pool the
tagger shares.

The clients make one attempt per call (``max_retries=0``): retries belong to the wrapper, so
they behave the same for every provider. Failures are translated once, here, into the
wrapper's vocabulary: a rate limit (429, with its ``Retry-After``), a transient failure
(timeout, connection, 408/409/5xx), a refusal of the key or the model (401/403/404), or a
plain failure (any other status: retrying would not help).
"""

from __future__ import annotations

import base64
import os
from functools import lru_cache
from typing import Any, Sequence

from ..apikeys import api_key, public_url
from ..records import Endpoint, Question
from ..templating import render, template_hash
from ._base import CallFailed, EndpointRefused, Generator, Judge, Provider, RateLimited, Reply, Transient, \
    current_replica
from ._config import ModelConfig
from ._images import data_url, digest, image_suffix, mime_type

__all__ = ["JUDGE_TEMPLATES", "OpenAIClients", "OpenAIImages", "OpenAIJudge", "translate_openai_error"]

JUDGE_TEMPLATES = ("judge/system.j2", "judge/user.j2")


def translate_openai_error(err: Exception) -> CallFailed | None:
    """An openai exception as the wrapper's failure (one line); None for anything else."""
    import openai

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


class OpenAIClients(Provider):
    """One ``AsyncOpenAI`` client per replica URL, made on first use."""

    def __init__(self, model: str, config: ModelConfig) -> None:
        self.model = model
        self.config = config
        self.concurrency = config.concurrency
        self.max_retries = config.max_retries
        self._clients: dict[int, Any] = {}

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
            self._clients[index] = openai.AsyncOpenAI(api_key=api_key(self.config.api_key_env, url), base_url=url,
                                                      max_retries=0, timeout=self.config.timeout)
        return self._clients[index]

    def failure(self, err: Exception) -> CallFailed | None:
        return translate_openai_error(err)

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


class OpenAIImages(OpenAIClients, Generator):
    """``openai:MODEL`` generator: images.edit with the references, images.generate without."""

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"openai:{self.model}"

    def key(self, case, references):
        return {"adapter": "openai-images", "model": self.model, "base_url": self.base_url, "prompt": case.prompt,
                "images": [digest(r) for r in references]}

    async def generate(self, case, references):
        if references:
            files = [(f"image_{k + 1}{image_suffix(data)}", bytes(data), mime_type(data))  # JPEG sent as JPEG
                     for k, data in enumerate(references)]
            response = await self.client().images.edit(model=self.model, image=files, prompt=case.prompt)
        else:
            response = await self.client().images.generate(model=self.model, prompt=case.prompt)
        if not response.data or not response.data[0].b64_json:
            raise CallFailed("the server returned no image (b64_json)")
        try:
            return base64.b64decode(response.data[0].b64_json, validate=True)
        except ValueError:
            raise CallFailed("the server returned an image that is not base64") from None


class OpenAIJudge(OpenAIClients, Judge):
    """``openai:MODEL`` judge: one chat completion with the images and the questions, JSON output."""

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"openai:{self.model}"

    def key(self, case, questions, image, references):
        return {"adapter": "openai-judge", "model": self.model, "base_url": self.base_url,
                "messages": _judge_text(case.prompt, _question_texts(questions)),
                "images": [digest(r) for r in references], "image": digest(image),
                "templates": _templates_hash()}

    async def ask(self, case, questions, image, references):
        system, user = _judge_text(case.prompt, _question_texts(questions))
        content: list[dict] = []
        for k, data in enumerate(references):
            content += [{"type": "text", "text": f"Image {k + 1}:"}, _image_part(data)]
        content += [{"type": "text", "text": "The generated image:"}, _image_part(image), {"type": "text", "text": user}]
        schema = {"type": "object", "required": ["answers"], "properties": {"answers": {"type": "array", "items": {
            "type": "object", "required": ["id", "answer"],
            "properties": {"id": {"type": "string", "enum": [q.id for q in questions]},
                           "answer": {"type": "string", "enum": ["yes", "no"]}, "reason": {"type": "string"}}}}}}
        response = await self.client().chat.completions.create(
            model=self.model, messages=[{"role": "system", "content": system}, {"role": "user", "content": content}],
            response_format={"type": "json_schema", "json_schema": {"name": "verdicts", "schema": schema}})
        message = response.choices[0].message if response.choices else None
        if message is None:
            raise CallFailed("the server returned no choice")
        if getattr(message, "refusal", None):
            raise CallFailed(f"refusal: {message.refusal}")
        tokens = response.usage.total_tokens if response.usage and response.usage.total_tokens else 0
        return Reply(message.content or "", tokens)


def _question_texts(questions: Sequence[Question]) -> tuple[tuple[str, str], ...]:
    return tuple((q.id, q.question) for q in questions)


@lru_cache(maxsize=1)
def _templates_hash() -> str:
    return template_hash(*JUDGE_TEMPLATES)


@lru_cache(maxsize=256)
def _judge_text(prompt: str, questions: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """The judge's system and user text (rendered once per call: key() and ask() both need it)."""
    return render("judge/system.j2"), render("judge/user.j2", prompt=prompt, questions=list(questions))


def _image_part(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": data_url(data)}}
