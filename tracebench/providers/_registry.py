"""Specs -> providers: the built-in schemes, ``python:`` plugins and entry points.

| spec | generator | judge |
|---|---|---|
| ``openai:MODEL`` | images.edit / images.generate | chat completion, JSON answers |
| ``folder:PATH`` | ``PATH/<case id>.png`` made elsewhere | |
| ``command:'...'`` | a shell command (case JSON on stdin, writes ``{output}``) | |
| ``synthetic:PROFILE`` | the zoo | |
| ``oracle[:flip=P,yes-bias=Q]`` | | answers from the zoo's record (erring at the given rates) |
| ``python:FILE.py[:NAME]``, ``python:pkg.module[:NAME]`` | a user's class, instance or factory (default NAME ``generator``) | (default NAME ``judge``) |
| ``NAME[:ARG]`` | a provider registered by a package under the entry-point group ``tracebench.generators`` | ``tracebench.judges`` |

A ``python:`` or entry-point object may be a :class:`Generator` / :class:`Judge` subclass
(instantiated without arguments, or with ARG for an entry point), an instance, or a factory
returning one. Any spec may end in ``@URL[,URL...]`` to name its endpoint (see ``_config``).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from ..errors import TraceError
from ..scales import answer_scale
from ._base import Generator, Judge, Provider
from ._config import ModelConfig, ModelSettings, resolve_spec
from ._local import CommandGenerator, FolderGenerator, OracleJudge, SyntheticGenerator
from ._openai import OpenAIImages, OpenAIJudge

__all__ = ["ENTRY_POINT_GROUPS", "make_generator", "make_judge"]

ENTRY_POINT_GROUPS = {"generator": "tracebench.generators", "judge": "tracebench.judges"}

Factory = Callable[[str, ModelConfig, ModelSettings], Provider]


def _folder(rest: str, config: ModelConfig, settings: ModelSettings) -> Provider:
    if not Path(rest).is_dir():
        raise TraceError(f"--generator folder:{rest}: {rest} is not a folder")
    return FolderGenerator(Path(rest))


_GENERATORS: dict[str, Factory] = {
    "openai": lambda rest, config, settings: OpenAIImages(rest, config),
    "folder": _folder,
    "command": lambda rest, config, settings: CommandGenerator(rest),
    "synthetic": lambda rest, config, settings: SyntheticGenerator(rest, settings.library, settings.seed),
}
_JUDGES: dict[str, Factory] = {
    "openai": lambda rest, config, settings: OpenAIJudge(rest, config),
}
_USAGE = {"generator": "openai:MODEL, folder:PATH, command:'...', synthetic:PROFILE or python:FILE.py[:NAME]",
          "judge": "openai:MODEL, oracle[:flip=P,yes-bias=Q] or python:FILE.py[:NAME]"}


def make_generator(spec: str, settings: ModelSettings | None = None) -> Generator:
    """The generator a spec names (a TraceError naming the spec when it names none)."""
    return _make(spec, settings or ModelSettings(), "generator", _GENERATORS, Generator)  # type: ignore[return-value]


def make_judge(spec: str, settings: ModelSettings | None = None) -> Judge:
    """The judge a spec names (a TraceError naming the spec when it names none)."""
    return _make(spec, settings or ModelSettings(), "judge", _JUDGES, Judge)  # type: ignore[return-value]


def _make(spec: str, settings: ModelSettings, role: str, builtins: dict[str, Factory], base: type) -> Provider:
    provider_spec, config = resolve_spec(spec, settings, judge=role == "judge")
    option = f"--{role} {spec}"
    scheme, _, rest = provider_spec.partition(":")
    if role == "judge" and scheme == "oracle":
        provider: Provider = OracleJudge(provider_spec)
    elif scheme in builtins and rest:
        provider = builtins[scheme](rest, config, settings)
    elif scheme == "python" and rest:
        provider = _instantiate(_load_python(rest, role, option), None, option, base)
        provider.spec = provider.spec or provider_spec
    else:
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUPS[role]) if ep.name == scheme]
        if not found:
            known = [*builtins, "python", *(["oracle"] if role == "judge" else []),
                     *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUPS[role]))]
            close = difflib.get_close_matches(scheme, known, n=1)
            hint = f" (did you mean {close[0]}{'' if close[0] == 'oracle' else ':...'}?)" if close else ""
            raise TraceError(f"--{role} {spec!r}{hint}: expected {_USAGE[role]}, or a provider registered under "
                             f"the entry-point group {ENTRY_POINT_GROUPS[role]}")
        try:
            target = found[0].load()
        except Exception as err:  # the plugin's own import failed
            raise TraceError(f"{option}: entry point {found[0].value} cannot be loaded: {_one_line(err)}") from None
        provider = _instantiate(target, rest or None, option, base)
        provider.spec = provider.spec or provider_spec
    if provider.concurrency is None:
        provider.concurrency = config.concurrency
    if isinstance(provider, Judge):
        provider.scale = answer_scale(settings.scale).value
    if isinstance(provider, Generator):
        provider.sample = settings.sample
        if config.max_images is not None:  # the models file's word over the class's declaration
            provider.max_images = config.max_images
        options = {**config.options, **settings.generator_options}  # the command line's over the models file's
        if options:
            provider.options = dict(sorted(options.items()))
            provider.check_options()
    return provider


def _load_python(rest: str, role: str, option: str) -> Any:
    """The object ``FILE.py[:NAME]`` or ``package.module[:NAME]`` names."""
    if ".py:" in rest:
        where, name = rest.rsplit(":", 1)
    elif rest.endswith(".py"):
        where, name = rest, ""
    else:
        where, _, name = rest.partition(":")
    name = name or role
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise TraceError(f"{option}: {where} is not a file")
            module_name = "tracebench_plugin_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
            module = sys.modules.get(module_name)
            if module is None:
                loader = importlib.util.spec_from_file_location(module_name, path)
                module = importlib.util.module_from_spec(loader)  # type: ignore[arg-type]
                sys.modules[module_name] = module
                try:
                    loader.loader.exec_module(module)  # type: ignore[union-attr]
                except BaseException:
                    del sys.modules[module_name]
                    raise
        else:
            module = importlib.import_module(where)
    except TraceError:
        raise
    except Exception as err:  # the plugin's own code failed to import
        raise TraceError(f"{option}: {where} cannot be loaded: {_one_line(err)}") from None
    if not hasattr(module, name):
        raise TraceError(f"{option}: {where} defines no {name!r} (name it with {where}:NAME)")
    return getattr(module, name)


def _instantiate(target: Any, argument: str | None, option: str, base: type) -> Provider:
    kind = base.__name__.lower()
    try:
        if isinstance(target, base):
            provider = target
        elif inspect.isclass(target) or callable(target):
            provider = target(argument) if argument is not None else target()
        else:
            provider = target
    except TraceError:
        raise
    except Exception as err:
        raise TraceError(f"{option}: building the {kind} failed: {_one_line(err)}") from None
    if not isinstance(provider, base):
        raise TraceError(f"{option}: {type(provider).__name__} is not a tracebench {base.__name__} "
                         f"(subclass tracebench.providers.{base.__name__})")
    return provider


def _one_line(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:240]
