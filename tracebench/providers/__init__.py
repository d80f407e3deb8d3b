"""Model access: providers (generators and judges) behind one narrow interface, and the one
wrapper that owns cache, retry, concurrency, counters and key scrubbing for all of them.

- :class:`Generator`, :class:`Judge`: what a provider implements (``_base``);
- :func:`make_generator`, :func:`make_judge`: specs -> providers (``_registry``: built-in
  schemes, ``python:`` plugins, entry points);
- :class:`ModelSettings`, :func:`read_models_file`: per-model endpoints (``_config``);
- :class:`ModelAccess`: every call goes through it (``_access``);
- :class:`ReferenceFiles`, :class:`ImageBytes`: reference images read, hashed and encoded once;
- :class:`RunImages`: an earlier run's images given again (``trace rejudge``).
"""

from __future__ import annotations

from ._access import STOP_AFTER, AccessStats, ModelAccess, Stopped, clip, generation_key, one_line, scrub
from ._base import (CallFailed, EndpointRefused, Generation, Generator, Judge, NotSent, Provider, RateLimited, Reply, Transient,
                    asking, generator_view)
from ._collage import COLLAGE_ID, check_references, collage_case
from ._config import (DEFAULT_BASE_URL, DEFAULT_MAX_REPLY_BYTES, ModelConfig, ModelEntry, ModelSettings, read_models_file, resolve_spec,
                      check_call_limits, runs_offline, synthetic_profile)
from ._local import RunImages
from ._ray import RayGenerator
from ._images import ImageBytes, ReferenceFiles, data_url, digest, image_suffix, mime_type
from ._openai import JUDGE_TEMPLATES, ChatReply, OpenAIClients, OpenAIImages, OpenAIJudge, translate_openai_error
from ._registry import ENTRY_POINT_GROUPS, make_generator, make_judge

__all__ = [
    "COLLAGE_ID", "STOP_AFTER", "AccessStats", "CallFailed", "ChatReply", "DEFAULT_BASE_URL", "DEFAULT_MAX_REPLY_BYTES", "ENTRY_POINT_GROUPS", "EndpointRefused", "Generation", "Generator",
    "ImageBytes", "JUDGE_TEMPLATES", "Judge", "NotSent", "ModelAccess", "ModelConfig", "ModelEntry", "ModelSettings",
    "OpenAIClients", "OpenAIImages", "OpenAIJudge", "Provider", "RateLimited", "ReferenceFiles", "RayGenerator", "Reply", "RunImages", "Stopped",
    "Transient", "asking", "check_call_limits", "check_references", "clip", "collage_case", "data_url", "digest", "generation_key", "generator_view", "image_suffix", "mime_type", "make_generator", "make_judge", "one_line",
    "read_models_file", "resolve_spec", "runs_offline", "scrub", "synthetic_profile", "translate_openai_error",
]
