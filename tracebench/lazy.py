"""Names a package exports but imports from their module on first use (PEP 562).

A command imports only what it runs: ``trace sample`` never loads the tagger's openai client,
``trace report`` never loads the agreement statistics. A package lists its lazy names and
binds the two functions this returns::

    __getattr__, __dir__ = lazy_exports(__name__, globals(), {"render_scene": "._render"})
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def lazy_exports(package: str, namespace: dict[str, Any],
                 module_of: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: a name of ``module_of`` is imported from
    its module (relative to the package) when first asked for, then kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(module_of))

    return __getattr__, __dir__
