"""The provider schemes: what ``SCHEME:ARG`` builds, as a generator or a judge, and how the
command line names it.

A scheme is one :class:`Scheme` row: its name, its role, its target (``"module:name"``,
imported on first use, or the class or factory itself), its usage (``openai:MODEL``) and a
line of help. The built-in schemes are the table :data:`BUILT_IN`; a package adds one with
:func:`register_scheme` (one call), after which ``--generator NAME:ARG`` builds
``target(ARG)`` (``target()`` for a scheme that may be named bare, without ``:ARG``).
The ``--generator`` / ``--judge`` help, the error listing the known schemes and its
did-you-mean come from here. This module imports no provider: help costs no import.
"""

from __future__ import annotations

import difflib
import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import TraceError

__all__ = ["BUILT_IN", "PYTHON", "ROLES", "Scheme", "closest_scheme", "find_scheme", "register_scheme", "scheme_help",
           "scheme_usage", "schemes"]

ROLES = ("generator", "judge")
PYTHON = "python"  # the scheme of a user's own class or factory, loaded from a file or a module (_plugins)
_NAME = re.compile(r"[a-z][a-z0-9_-]*")


@dataclass(frozen=True)
class Scheme:
    """One provider scheme. ``target`` builds the provider from the spec's argument (the text
    after ``NAME:``): a :class:`~tracebench.providers.Generator` / ``Judge`` class or a factory,
    given as ``"module:name"`` (imported on first use) or as itself. The provider must name
    itself (a non-empty ``spec``). ``bare``: the scheme may be named without an argument
    (``oracle``), and ``target()`` is then called with none. The ``python`` scheme's target
    loads the user's class or factory (``_plugins``), which is then built without argument."""

    name: str
    role: str  # "generator" or "judge"
    target: str | Callable[..., Any]
    usage: str  # how a spec names it: ``openai:MODEL``
    help: str  # one line: what it does
    bare: bool = False

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise TraceError(f"scheme {self.name!r}: role {self.role!r} is not generator or judge")
        if not _NAME.fullmatch(self.name):
            raise TraceError(f"scheme {self.name!r}: a name is lower-case letters, digits, - and _, "
                             "starting with a letter")
        if not (self.usage.startswith(self.name) and self.help.strip()) or "\n" in self.help:
            raise TraceError(f"scheme {self.name!r}: give a usage starting with its name ({self.name}:ARG) "
                             "and one line of help")
        if isinstance(self.target, str) and self.target.count(":") != 1:
            raise TraceError(f"scheme {self.name!r}: target {self.target!r} is not module:name")

    def load(self) -> Callable[..., Any]:
        """The class or factory ``target`` names (imported now, on first use)."""
        if not isinstance(self.target, str):
            return self.target
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def shown(self) -> str:
        """The scheme in a did-you-mean: ``oracle``, or ``openai:...``."""
        return self.name if self.bare else f"{self.name}:..."


BUILT_IN = (
    Scheme("openai", "generator", "tracebench.providers._openai:OpenAIImages", "openai:MODEL",
           "an OpenAI-compatible images API: images.edit with the references"),
    Scheme("folder", "generator", "tracebench.providers._local:folder_generator", "folder:PATH",
           "images made elsewhere, PATH/<case id>.png"),
    Scheme("command", "generator", "tracebench.providers._local:CommandGenerator", "command:'...'",
           "reads the case on stdin, writes {output}"),
    Scheme("synthetic", "generator", "tracebench.zoo._providers:SyntheticGenerator", "synthetic:PROFILE",
           "the synthetic zoo, failing as PROFILE says"),
    Scheme(PYTHON, "generator", "tracebench.providers._plugins:load_plugin", "python:FILE.py[:NAME]",
           "your Generator class or factory, NAME default generator"),
    Scheme("openai", "judge", "tracebench.providers._openai:OpenAIJudge", "openai:MODEL",
           "a vision-language model through chat completions"),
    Scheme("oracle", "judge", "tracebench.zoo._providers:OracleJudge", "oracle[:flip=P,yes-bias=Q]",
           "the zoo's truth, from the record in a synthetic image, erring at the given rates", bare=True),
    Scheme(PYTHON, "judge", "tracebench.providers._plugins:load_plugin", "python:FILE.py[:NAME]",
           "your Judge class or factory, NAME default judge"),
)

_SCHEMES: dict[tuple[str, str], Scheme] = {(s.role, s.name): s for s in BUILT_IN}


def register_scheme(name: str, role: str, target: str | Callable[..., Any], usage: str, help: str, *,
                    bare: bool = False) -> Scheme:
    """Add a scheme (see :class:`Scheme`); registering the same one again changes nothing. A
    name the role already has for another target is a TraceError."""
    scheme = Scheme(name, role, target, usage, help, bare)
    known = _SCHEMES.get((role, name))
    if known is not None and known != scheme:
        raise TraceError(f"--{role} {name}: the scheme is registered already ({known.usage}, {known.target!r})")
    _SCHEMES[(role, name)] = scheme
    return scheme


def schemes(role: str) -> tuple[Scheme, ...]:
    """The schemes of a role, built-in ones first, in the order registered."""
    return tuple(s for (r, _), s in _SCHEMES.items() if r == role)


def find_scheme(role: str, name: str) -> Scheme | None:
    return _SCHEMES.get((role, name))


def scheme_usage(role: str) -> str:
    """The role's specs as an error lists them: ``openai:MODEL, oracle[:...] or python:FILE.py[:NAME]``."""
    usages = [s.usage for s in schemes(role)]
    return usages[0] if len(usages) == 1 else f"{', '.join(usages[:-1])} or {usages[-1]}"


def scheme_help(role: str) -> str:
    """The role's specs with their help, for ``--generator`` / ``--judge``."""
    return "; ".join(f"{s.usage} ({s.help})" for s in schemes(role))


def closest_scheme(role: str, name: str, others: tuple[str, ...] = ()) -> str | None:
    """The scheme a mistyped name likely meant, as a did-you-mean shows it (``oracle``,
    ``openai:...``; ``others``: names registered by entry points); None when none is close."""
    shown = {s.name: s.shown() for s in schemes(role)}
    close = difflib.get_close_matches(name, [*shown, *others], n=1)
    return (shown.get(close[0]) or f"{close[0]}:...") if close else None
