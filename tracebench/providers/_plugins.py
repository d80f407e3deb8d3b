"""A user's providers: ``python:FILE.py[:NAME]`` / ``python:package.module[:NAME]`` objects,
and the names packages register under the entry-point groups ``tracebench.generators`` and
``tracebench.judges``. Each names a provider class or a factory; the registry builds it."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from ..errors import TraceError

__all__ = ["ENTRY_POINT_GROUPS", "entry_point", "entry_point_names", "error_line", "load_plugin"]

ENTRY_POINT_GROUPS = {"generator": "tracebench.generators", "judge": "tracebench.judges"}


def load_plugin(rest: str, role: str, option: str) -> Any:
    """The object ``FILE.py[:NAME]`` or ``package.module[:NAME]`` names (NAME: the role's)."""
    if ".py:" in rest:
        where, name = rest.rsplit(":", 1)
    elif rest.endswith(".py"):
        where, name = rest, ""
    else:
        where, _, name = rest.partition(":")
    name = name or role
    try:
        module = _file_module(where, option) if where.endswith(".py") else importlib.import_module(where)
    except TraceError:
        raise
    except Exception as err:  # the plugin's own code failed to import
        raise TraceError(f"{option}: {where} cannot be loaded: {error_line(err)}") from None
    if not hasattr(module, name):
        raise TraceError(f"{option}: {where} defines no {name!r} (name it with {where}:NAME)")
    return getattr(module, name)


def _file_module(where: str, option: str) -> Any:
    """The module of a plugin file, executed once per process."""
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
    return module


def entry_point_names(role: str) -> tuple[str, ...]:
    return tuple(ep.name for ep in entry_points(group=ENTRY_POINT_GROUPS[role]))


def entry_point(role: str, name: str) -> EntryPoint | None:
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUPS[role]) if ep.name == name]
    return found[0] if found else None


def error_line(err: BaseException) -> str:
    """A plugin's exception as part of one line of an error."""
    return " ".join(f"{type(err).__name__}: {err}".split())[:240]
