"""Specs -> providers: the registered schemes (``_schemes``: ``openai:MODEL``, ``folder:PATH``,
``command:'...'``, ``synthetic:PROFILE``, ``oracle[:...]`` ...), ``python:`` plugins and names
registered by entry points (``_plugins``).

Every provider is built with the command's settings in place (:class:`ProviderSettings`,
before its ``__init__``) and comes out complete: of the role's kind, built by this call (a
ready-made instance cannot be configured), with a spec. A ``python:`` or entry-point provider
that names none is recorded under the spec it was named by; a registered scheme's must name
itself. Any spec may end in ``@URL[,URL...]`` to name its endpoint (see ``_config``).
"""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import TraceError
from ..scales import answer_scale
from ._base import Generator, Judge, Provider, ProviderSettings, building
from ._config import ModelConfig, ModelSettings, resolve_spec
from ._plugins import ENTRY_POINT_GROUPS, entry_point, entry_point_names, error_line
from ._schemes import PYTHON, closest_scheme, find_scheme, scheme_usage

__all__ = ["ENTRY_POINT_GROUPS", "make_generator", "make_judge", "settings_for"]

_BASES: dict[str, type[Provider]] = {"generator": Generator, "judge": Judge}


def make_generator(spec: str, settings: ModelSettings | None = None) -> Generator:
    """The generator a spec names (a TraceError naming the spec when it names none)."""
    return _make(spec, settings or ModelSettings(), "generator")  # type: ignore[return-value]


def make_judge(spec: str, settings: ModelSettings | None = None) -> Judge:
    """The judge a spec names (a TraceError naming the spec when it names none)."""
    return _make(spec, settings or ModelSettings(), "judge")  # type: ignore[return-value]


def settings_for(config: ModelConfig, settings: ModelSettings, spec: str = "") -> ProviderSettings:
    """What a command configures one provider with: its endpoint, the models file's word and the
    command's (``spec``: the name of a plugin that declares none)."""
    return ProviderSettings(spec=spec, concurrency=config.concurrency, scale=answer_scale(settings.scale).value,
                            sample=settings.sample, max_images=config.max_images,
                            options={**config.options, **settings.generator_options},  # the command line's over the models file's
                            endpoint=config, library=settings.library, seed=settings.seed)


def _make(spec: str, settings: ModelSettings, role: str) -> Provider:
    provider_spec, config = resolve_spec(spec, settings, judge=role == "judge")
    option = f"--{role} {spec}"
    target, argument, fallback = _target(provider_spec, spec, role, option)
    given = settings_for(config, settings, fallback)
    provider = _build(target, argument, option, _BASES[role], given)
    if given.options and isinstance(provider, Generator):
        provider.check_options()
    return provider


def _target(provider_spec: str, spec: str, role: str, option: str) -> tuple[Any, str | None, str]:
    """What builds the provider ``provider_spec`` names, the argument it is given (None: none),
    and the spec it is recorded under when it names none ("": it must name itself)."""
    name, colon, rest = provider_spec.partition(":")
    scheme = find_scheme(role, name)
    if scheme is not None and scheme.name == PYTHON and rest:
        return scheme.load()(rest, role, option), None, provider_spec
    if scheme is not None and (rest or scheme.bare):
        return scheme.load(), rest if colon else None, ""
    found = entry_point(role, name)
    if found is None:
        close = closest_scheme(role, name, entry_point_names(role))
        hint = f" (did you mean {close}?)" if close else ""
        raise TraceError(f"--{role} {spec!r}{hint}: expected {scheme_usage(role)}, or a provider registered under "
                         f"the entry-point group {ENTRY_POINT_GROUPS[role]}")
    try:
        return found.load(), rest or None, provider_spec
    except Exception as err:  # the plugin's own import failed
        raise TraceError(f"{option}: entry point {found.value} cannot be loaded: {error_line(err)}") from None


def _build(target: Any, argument: str | None, option: str, base: type[Provider], given: ProviderSettings) -> Provider:
    """``target(argument)`` (a class or factory; ``target()`` without argument) built with ``given``,
    checked complete; a TraceError naming the option when it is not."""
    kind = base.__name__.lower()
    try:
        provider = building(given, _call, target, argument)
    except TraceError:
        raise
    except Exception as err:
        raise TraceError(f"{option}: building the {kind} failed: {error_line(err)}") from None
    if not isinstance(provider, base):
        raise TraceError(f"{option}: {type(provider).__name__} is not a tracebench {base.__name__} "
                         f"(subclass tracebench.providers.{base.__name__})")
    if provider.provider_settings is not given:
        raise TraceError(f"{option}: {type(provider).__name__} is an instance made before the command's settings "
                         f"were given (name its class, or a factory that builds it)")
    if not provider.spec:
        raise TraceError(f"{option}: {type(provider).__name__} sets no spec (the name its verdicts and cache keys "
                         f"record): set spec in the class or in its __init__")
    return provider


def _call(target: Any, argument: str | None) -> Any:
    if inspect.isclass(target) or callable(target):
        return target(argument) if argument is not None else target()
    return target
