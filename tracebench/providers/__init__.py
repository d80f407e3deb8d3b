"""Model access: providers (generators and judges) behind one narrow interface, and the one
wrapper that owns cache, retry, concurrency, counters and key scrubbing for all of them.

- :class:`Generator`, :class:`Judge`: what a provider implements (``_base``), built with the
  command's :class:`ProviderSettings` in place (:func:`building`);
- :func:`make_generator`, :func:`make_judge`: specs -> providers (``_registry``: the schemes of
  ``_schemes``, :func:`register_scheme` adding one; ``python:`` plugins and entry points,
  ``_plugins``);
- :class:`ModelSettings`, :func:`read_models_file`: per-model endpoints (``_config``);
- :class:`ModelAccess`: every call goes through it (``_access``);
- :class:`ReferenceFiles`, :class:`ImageBytes`: reference images read, hashed and encoded once;
- :class:`RunImages`: an earlier run's images given again (``trace rejudge``).

Names are imported from their module on first use: the scheme table (``--generator`` help)
costs no provider's import.
"""

from __future__ import annotations

from ..lazy import lazy_exports

_MODULE_OF = {
    **dict.fromkeys(("STOP_AFTER", "AccessStats", "ModelAccess", "Stopped", "clip", "generation_key", "one_line",
                     "scrub"), "._access"),
    **dict.fromkeys(("CallFailed", "EndpointRefused", "Generation", "Generator", "Judge", "NotSent", "Provider",
                     "ProviderSettings", "RateLimited", "Reply", "Transient", "asking", "building", "generator_view",
                     "shown_references"),
                    "._base"),
    **dict.fromkeys(("COLLAGE_ID", "check_references", "collage_case"), "._collage"),
    **dict.fromkeys(("DEFAULT_BASE_URL", "DEFAULT_MAX_REPLY_BYTES", "ModelConfig", "ModelEntry", "ModelSettings",
                     "read_models_file", "resolve_spec", "check_call_limits", "runs_offline", "synthetic_profile"),
                    "._config"),
    **dict.fromkeys(("RunImages", "sample_seed"), "._local"),
    "RayGenerator": "._ray",
    **dict.fromkeys(("ImageBytes", "ReferenceFiles", "data_url", "digest", "image_suffix", "mime_type"), "._images"),
    **dict.fromkeys(("JUDGE_TEMPLATES", "SHOWN_TEMPLATES", "ChatReply", "OpenAIClients", "OpenAIImages", "OpenAIJudge",
                     "translate_openai_error"), "._openai"),
    "ENTRY_POINT_GROUPS": "._plugins",  # a leaf: the command line's help reads it without the providers
    **dict.fromkeys(("make_generator", "make_judge", "settings_for"), "._registry"),
    **dict.fromkeys(("Scheme", "find_scheme", "register_scheme", "scheme_help", "scheme_usage", "schemes"),
                    "._schemes"),
}

__all__ = sorted(_MODULE_OF)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _MODULE_OF)
