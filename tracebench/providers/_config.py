"""Where each model is served: per-model endpoints from a spec suffix or a models file.

Every generator and judge may carry its own base URL (or several: replicas of one server,
load-balanced), key variable, concurrency, retries and timeout. They come, first found
first, from:

1. a spec suffix: ``openai:Qwen/Qwen3-VL-8B-Instruct@http://127.0.0.1:8000/v1`` (replicas
   separated by commas: ``...@http://127.0.0.1:8000/v1,http://127.0.0.1:8001/v1``);
2. the models file (``--models models.toml``), by the name given or by the spec::

       [models.qwen]                    # --judge qwen
       spec = "openai:Qwen/Qwen3-VL-8B-Instruct"
       base_urls = ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"]
       concurrency = 64                 # per replica

       [models."openai:gpt-4.1"]        # --judge openai:gpt-4.1
       api_key_env = "OPENAI_API_KEY"
       concurrency = 16

3. the command's options (``--judge-base-url`` for judges, ``--base-url``, ``--api-key-env``,
   ``--max-retries``, ``--timeout``, ``--concurrency``), then ``$OPENAI_BASE_URL``, then OpenAI's.

The spec recorded in run manifests and verdicts is the provider spec without the suffix, so
a model's identity does not depend on which server answered; replicas are one model, and the
cache key names the first replica's URL.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import TraceError
from ..replies import DEFAULT_MAX_REPLY_BYTES
from ..scales import alternatives, scale_names

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MAX_REPLY_BYTES", "OFFLINE_SCHEMES", "ModelConfig", "ModelEntry", "ModelSettings",
           "check_call_limits",
           "read_models_file", "resolve_spec", "runs_offline", "synthetic_profile"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_SUFFIX = re.compile(r"@(https?://.*)$")


class ModelEntry(BaseModel):
    """One table of a models file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str | None = Field(default=None, description="the provider spec; default: the table's name")
    base_url: str | None = Field(default=None, description="one endpoint")
    base_urls: tuple[str, ...] = Field(default=(), description="several replicas of one server, load-balanced")
    api_key_env: str | None = Field(default=None, description="environment variable holding the key")
    concurrency: int | None = Field(default=None, ge=1, description="calls in flight per replica")
    max_retries: int | None = Field(default=None, ge=0, description="retries of a transient failure, with backoff")
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="seconds per call, in all")
    max_reply_bytes: int | None = Field(default=None, ge=1, description="the largest reply body read, in bytes")
    max_images: int | None = Field(default=None, ge=1, description="a generator: the most reference images it accepts "
                                   "(a case holding more is left out, or sent as a collage with trace run --collage)")
    options: dict[str, str | int | float | bool] = Field(default_factory=dict, description="a generator: options "
                                                         "sent with every request (size, quality, seed, steps, "
                                                         "guidance_scale, any field the server takes); trace run "
                                                         "--generator-option overrides one")

    @model_validator(mode="after")
    def _one_way_to_say_urls(self) -> ModelEntry:
        if self.base_url and self.base_urls:
            raise ValueError("give base_url or base_urls, not both")
        return self

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.base_url,) if self.base_url else self.base_urls


class _ModelsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    models: dict[str, ModelEntry] = Field(default_factory=dict)


def read_models_file(path: Path) -> dict[str, ModelEntry]:
    """The models of a TOML file; a TraceError names the file and the field."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise TraceError(f"--models {path}: cannot be read ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise TraceError(f"{path}: not TOML: {err}") from None
    try:
        return dict(_ModelsFile.model_validate(data).models)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TraceError(f"{path}: {where}: {first['msg']}") from None


@dataclass(frozen=True)
class ModelSettings:
    """The command's model options: defaults for every model, and the models file."""

    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    judge_base_url: str | None = None  # when the judges run elsewhere than the generator
    judge_api_key_env: str | None = None
    max_retries: int = 4
    timeout: float = 300.0
    library: Path | None = None  # the synthetic generator's library (default: the benchmark's)
    seed: int = 0
    sample: int = 0  # which generation of each case (0 the first): another is a call of its own (trace diagnose --repeats)
    scale: str | None = None  # what judges answer on: binary, ternary or tiers (tracebench.scales); None: binary
    # for a run, the run's own for a diagnosis
    models: Mapping[str, ModelEntry] = field(default_factory=dict)
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    generator_options: Mapping[str, Any] = field(default_factory=dict)  # --generator-option: over the models file's

    def __post_init__(self) -> None:
        check_call_limits(timeout=self.timeout, max_retries=self.max_retries, max_reply_bytes=self.max_reply_bytes)
        if self.sample < 0:
            raise TraceError(f"sample: {self.sample} must be 0 or more")
        if self.scale is not None and self.scale not in scale_names():
            raise TraceError(f"--scale: {self.scale!r} is not {alternatives(scale_names())}")


def check_call_limits(*, timeout: float, max_retries: int, max_reply_bytes: int) -> None:
    """A TraceError naming the option when a call's limits make no sense."""
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise TraceError(f"--timeout: {timeout} is not a positive number of seconds")
    if max_retries < 0:
        raise TraceError(f"--max-retries: {max_retries} must be 0 or more")
    if max_reply_bytes < 1:
        raise TraceError(f"--max-reply-bytes: {max_reply_bytes} must be at least 1")


@dataclass(frozen=True)
class ModelConfig:
    """Where one model is served and how it is called."""

    base_urls: tuple[str, ...]
    api_key_env: str
    concurrency: int | None
    max_retries: int
    timeout: float  # seconds a call may take in all
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    max_images: int | None = None  # a generator's limit on reference images (the models file's)
    options: Mapping[str, Any] = field(default_factory=dict)  # a generator's options (the models file's)


def resolve_spec(spec: str, settings: ModelSettings, *, judge: bool) -> tuple[str, ModelConfig]:
    """The provider spec (suffix stripped, models-file name resolved) and its configuration."""
    suffix_urls: tuple[str, ...] = ()
    match = _SUFFIX.search(spec)
    if match:
        suffix_urls = tuple(u.strip() for u in match.group(1).split(",") if u.strip())
        spec = spec[:match.start()]
    entry = settings.models.get(spec)
    provider_spec = (entry.spec if entry and entry.spec else spec)
    if entry is None:
        entry = settings.models.get(provider_spec)
    entry = entry or ModelEntry()
    fallback = (settings.judge_base_url if judge else None) or settings.base_url or os.environ.get("OPENAI_BASE_URL") \
        or DEFAULT_BASE_URL
    urls = suffix_urls or entry.urls or (fallback,)
    key_env = entry.api_key_env or ((settings.judge_api_key_env if judge else None) or settings.api_key_env)
    return provider_spec, ModelConfig(
        base_urls=tuple(urls), api_key_env=key_env,
        concurrency=entry.concurrency,
        max_retries=settings.max_retries if entry.max_retries is None else entry.max_retries,
        timeout=entry.timeout or settings.timeout, max_reply_bytes=entry.max_reply_bytes or settings.max_reply_bytes,
        max_images=entry.max_images, options=dict(entry.options))


# what a record (a run folder's run.json) may name and a command then use without being told: the
# built-in providers that run no one's code, read no environment variable and call no host
OFFLINE_SCHEMES = {"generator": "synthetic", "judge": "oracle"}


def runs_offline(spec: str, role: str) -> bool:
    """Whether ``spec`` names, for ``role`` (generator or judge), a built-in provider that runs
    no one's code, reads no environment variable and calls no host: the zoo (``synthetic:PROFILE``)
    or the oracle (``oracle[:...]``). Only these may be taken from a folder's record; anything
    else a command runs or calls is named on the user's own command line or models file."""
    scheme, _, rest = spec.partition(":")
    if _SUFFIX.search(spec) or scheme != OFFLINE_SCHEMES[role]:
        return False
    return role == "judge" or bool(rest)


def synthetic_profile(spec: str) -> str | None:
    """The zoo profile a generator spec draws with, whether in process (``synthetic:PROFILE``)
    or behind ``trace serve`` (``openai:synthetic/PROFILE``); None for any other generator."""
    for prefix in ("synthetic:", "openai:synthetic/"):
        if spec.startswith(prefix):
            return spec[len(prefix):]
    return None
