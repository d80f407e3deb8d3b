"""Generators and judges behind one narrow interface, selected by a spec string.

A generator turns a case (prompt + reference images) into an image; a judge turns a case's
questions, its references and the generated image into a raw reply. Adapters only make the
call: the harness (``_harness.py``) owns the cache, the concurrency limit, the counters and
the parsing of replies, so every adapter gets them the same way.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, Sequence

from ..apikeys import api_key
from ..errors import TraceError
from ..records import Case, Question
from ..templating import render, template_hash
from ..cache import sha256

__all__ = ["Generator", "Judge", "CallFailed", "make_generator", "make_judge", "JUDGE_TEMPLATES"]

JUDGE_TEMPLATES = ("judge/system.j2", "judge/user.j2")


class CallFailed(Exception):
    """A call that produced no usable output: an abstention, with its reason (never a fail)."""


class Generator(Protocol):
    spec: str
    endpoint: str  # what the concurrency limit is per

    def key(self, case: Case, references: Sequence[bytes]) -> dict | None:
        """What the output depends on (cache key parts); None: not a model call, never cached."""

    async def generate(self, case: Case, references: Sequence[bytes]) -> bytes:
        """PNG (or other image) bytes; raises CallFailed."""


class Judge(Protocol):
    spec: str
    endpoint: str

    def key(self, case: Case, questions: Sequence[Question], image: bytes, references: Sequence[bytes]) -> dict:
        ...

    async def ask(self, case: Case, questions: Sequence[Question], image: bytes,
                  references: Sequence[bytes]) -> tuple[str, int]:
        """The raw reply text and the tokens it cost (0 if unknown); raises CallFailed."""


# -- OpenAI-compatible servers ----------------------------------------------------------------


@dataclass
class _OpenAIEndpoint:
    model: str
    base_url: str | None
    api_key_env: str
    max_retries: int
    timeout: float
    _client: Any = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"

    def client(self):
        if self._client is None:
            import openai  # imported on first use: ~0.4 s

            key = api_key(self.api_key_env, self.endpoint)
            self._client = openai.AsyncOpenAI(api_key=key, base_url=self.endpoint, max_retries=self.max_retries,
                                              timeout=self.timeout)
        return self._client

    async def aclose(self) -> None:
        """Close the client (its connections) before the event loop ends."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    def failure(self, err: Exception) -> CallFailed:
        """An abstention reason for a failed call, one line, with the API key scrubbed out
        (a server may echo it back)."""
        import openai

        if isinstance(err, openai.APIStatusError):
            text = f"API error {err.status_code}: {err.message}"
        elif isinstance(err, openai.APIError):
            text = f"API error: {err.message}"
        else:
            text = f"{type(err).__name__}: {err}"
        key = os.environ.get(self.api_key_env)
        if key:
            text = text.replace(key, "***")
        return CallFailed(" ".join(text.split())[:240])


@dataclass
class OpenAIImages(_OpenAIEndpoint):
    """``openai:MODEL`` generator: images.edit with the references, images.generate without."""

    @property
    def spec(self) -> str:
        return f"openai:{self.model}"

    def key(self, case, references):
        return {"adapter": "openai-images", "model": self.model, "base_url": self.endpoint, "prompt": case.prompt,
                "images": [sha256(r) for r in references]}

    async def generate(self, case, references):
        import openai

        try:
            if references:
                files = [(f"image_{k + 1}.png", data, "image/png") for k, data in enumerate(references)]
                response = await self.client().images.edit(model=self.model, image=files, prompt=case.prompt)
            else:
                response = await self.client().images.generate(model=self.model, prompt=case.prompt)
        except openai.APIError as err:
            raise self.failure(err) from None
        if not response.data or not response.data[0].b64_json:
            raise CallFailed("the server returned no image (b64_json)")
        try:
            return base64.b64decode(response.data[0].b64_json, validate=True)
        except ValueError:
            raise CallFailed("the server returned an image that is not base64") from None


@dataclass
class OpenAIJudge(_OpenAIEndpoint):
    """``openai:MODEL`` judge: one chat completion with the images and the questions, JSON output."""

    @property
    def spec(self) -> str:
        return f"openai:{self.model}"

    def key(self, case, questions, image, references):
        return {"adapter": "openai-judge", "model": self.model, "base_url": self.endpoint,
                "messages": self._text(case, questions), "images": [sha256(r) for r in references],
                "image": sha256(image), "templates": template_hash(*JUDGE_TEMPLATES)}

    @staticmethod
    def _text(case: Case, questions: Sequence[Question]) -> tuple[str, str]:
        return _judge_text(case.prompt, tuple((q.id, q.question) for q in questions))

    async def ask(self, case, questions, image, references):
        import openai

        system, user = self._text(case, questions)
        content: list[dict] = []
        for k, data in enumerate(references):
            content += [{"type": "text", "text": f"Image {k + 1}:"}, _image_part(data)]
        content += [{"type": "text", "text": "The generated image:"}, _image_part(image), {"type": "text", "text": user}]
        schema = {"type": "object", "required": ["answers"], "properties": {"answers": {"type": "array", "items": {
            "type": "object", "required": ["id", "answer"],
            "properties": {"id": {"type": "string", "enum": [q.id for q in questions]},
                           "answer": {"type": "string", "enum": ["yes", "no"]}, "reason": {"type": "string"}}}}}}
        try:
            response = await self.client().chat.completions.create(
                model=self.model, messages=[{"role": "system", "content": system}, {"role": "user", "content": content}],
                response_format={"type": "json_schema", "json_schema": {"name": "verdicts", "schema": schema}})
        except openai.APIError as err:
            raise self.failure(err) from None
        message = response.choices[0].message if response.choices else None
        if message is None:
            raise CallFailed("the server returned no choice")
        if getattr(message, "refusal", None):
            raise CallFailed(f"refusal: {message.refusal}")
        tokens = response.usage.total_tokens if response.usage and response.usage.total_tokens else 0
        return message.content or "", tokens


@lru_cache(maxsize=256)
def _judge_text(prompt: str, questions: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """The judge's system and user text (rendered once per call: key() and ask() both need it)."""
    return render("judge/system.j2"), render("judge/user.j2", prompt=prompt, questions=list(questions))


def _image_part(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()}}


# -- local generators and the oracle ------------------------------------------------------------


@dataclass
class FolderGenerator:
    """``folder:PATH``: images made elsewhere, named by case id (``PATH/<case id>.png`` ...)."""

    folder: Path

    @property
    def spec(self) -> str:
        return f"folder:{self.folder}"

    endpoint = "folder"

    def key(self, case, references):
        return None  # reading a file is not a model call

    async def generate(self, case, references):
        for suffix in (".png", ".jpg", ".jpeg", ".webp"):
            path = self.folder / f"{case.id}{suffix}"
            if path.is_file():
                return path.read_bytes()
        raise CallFailed(f"no image for {case.id} in {self.folder}")


@dataclass
class CommandGenerator:
    """``command:'...'``: a shell command that reads the case as JSON on stdin and writes the image
    to the path given as ``{output}`` in the command (also in $TRACEBENCH_OUTPUT)."""

    command: str
    timeout: float = 600.0

    @property
    def spec(self) -> str:
        return f"command:{self.command}"

    endpoint = "command"

    def key(self, case, references):
        return {"adapter": "command", "command": self.command, "case": case.model_dump(mode="json"),
                "images": [sha256(r) for r in references]}

    async def generate(self, case, references):
        with tempfile.TemporaryDirectory() as tmp:
            output = Path(tmp) / "output.png"
            command = self.command.replace("{output}", shlex.quote(str(output)))
            env = {**os.environ, "TRACEBENCH_OUTPUT": str(output)}
            proc = await asyncio.create_subprocess_shell(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                                         stderr=subprocess.PIPE, env=env)
            try:
                _, stderr = await asyncio.wait_for(proc.communicate(case.model_dump_json().encode()), self.timeout)
            except asyncio.TimeoutError:
                proc.kill()
                raise CallFailed(f"the command took longer than {self.timeout:.0f} s") from None
            if proc.returncode != 0:
                tail = " ".join(stderr.decode(errors="replace").split())[-200:]
                raise CallFailed(f"the command exited with status {proc.returncode}: {tail}")
            if not output.is_file():
                raise CallFailed("the command wrote no image to {output}")
            return output.read_bytes()


@dataclass
class SyntheticGenerator:
    """``synthetic:PROFILE``: the zoo, in process."""

    profile_spec: str
    library: Path | None = None
    seed: int = 0
    _profile: Any = field(default=None, repr=False)
    _index: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        from ..zoo import parse_profile

        self._profile = parse_profile(self.profile_spec)

    @property
    def spec(self) -> str:
        return f"synthetic:{self._profile}"

    endpoint = "synthetic"

    def key(self, case, references):
        return {"adapter": "synthetic", "profile": str(self._profile), "case": case.model_dump(mode="json"),
                "seed": self.seed}

    async def generate(self, case, references):
        from ..zoo import generate

        png, _record = generate(case, self._profile, library=self._library_index(), seed=self.seed)
        return png

    def _library_index(self):
        if self._index is None and self.library is not None:
            from ..library import load_library
            from ..sample import LibraryIndex

            info, images = load_library(self.library)
            self._index = LibraryIndex.build(self.library, info, images)
        return self._index


@dataclass
class OracleJudge:
    """``oracle``: answers from the record a synthetic image carries."""

    spec = "oracle"
    endpoint = "oracle"

    def key(self, case, questions, image, references):
        return {"adapter": "oracle", "questions": [q.model_dump(mode="json") for q in questions], "image": sha256(image)}

    async def ask(self, case, questions, image, references):
        from ..zoo import oracle_reply

        try:
            return json.dumps(oracle_reply(questions, image)), 0
        except TraceError as err:
            raise CallFailed(str(err)) from None


# -- specs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientSettings:
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    judge_base_url: str | None = None  # when the judge runs elsewhere than the generator
    judge_api_key_env: str | None = None
    max_retries: int = 4
    timeout: float = 300.0
    library: Path | None = None
    seed: int = 0


def make_generator(spec: str, settings: ClientSettings) -> Generator:
    kind, _, rest = spec.partition(":")
    if kind == "openai" and rest:
        return OpenAIImages(rest, settings.base_url, settings.api_key_env, settings.max_retries, settings.timeout)
    if kind == "folder" and rest:
        if not Path(rest).is_dir():
            raise TraceError(f"--generator {spec}: {rest} is not a folder")
        return FolderGenerator(Path(rest))
    if kind == "command" and rest:
        return CommandGenerator(rest)
    if kind == "synthetic" and rest:
        return SyntheticGenerator(rest, settings.library, settings.seed)
    raise TraceError(f"--generator {spec!r}: expected openai:MODEL, folder:PATH, command:'...' or synthetic:PROFILE")


def make_judge(spec: str, settings: ClientSettings) -> Judge:
    kind, _, rest = spec.partition(":")
    if kind == "openai" and rest:
        return OpenAIJudge(rest, settings.judge_base_url or settings.base_url,
                           settings.judge_api_key_env or settings.api_key_env, settings.max_retries, settings.timeout)
    if spec == "oracle":
        return OracleJudge()
    raise TraceError(f"--judge {spec!r}: expected openai:MODEL or oracle")
