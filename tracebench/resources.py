"""The one loader for the declarative folders (grammar/, templates/, taxonomy/, diagnose/).

In an installed wheel the folders live at ``tracebench/_data/<name>``; in a source
checkout (editable install, running from the repository) they sit at the repository's
top level beside the package. Code never reads them relative to the current directory.

A mistake in one of these files is the user's (a researcher edits them) and reads as one line,
``file: [table] key: problem`` (:class:`tracebench.errors.DataError`): :class:`DataFile` reads a
file and checks its values as a loader takes them.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Mapping

from .errors import DataError

__all__ = ["DataFile", "data_dir", "data_path", "read_text", "read_toml", "data_hash", "table_name"]

FOLDERS = ("grammar", "templates", "taxonomy", "diagnose")
_PACKAGE = Path(__file__).resolve().parent


@cache
def data_dir(folder: str) -> Path:
    """The directory holding one declarative folder, installed or in a checkout."""
    if folder not in FOLDERS:
        raise KeyError(f"unknown data folder {folder!r}; known: {', '.join(FOLDERS)}")
    for candidate in (_PACKAGE / "_data" / folder, _PACKAGE.parent / folder):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"tracebench data folder {folder!r} is missing from the installation "
        f"(looked in {_PACKAGE / '_data'} and {_PACKAGE.parent})"
    )


def data_path(folder: str, name: str) -> Path:
    """Path of one file inside a declarative folder."""
    return data_dir(folder) / name


@cache
def read_text(folder: str, name: str) -> str:
    path = data_path(folder, name)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{folder}/{name}", f"missing (looked for {path})") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{folder}/{name}", f"not UTF-8 (byte {err.start})") from None


@cache
def read_toml(folder: str, name: str) -> dict[str, Any]:
    try:
        return tomllib.loads(read_text(folder, name))
    except tomllib.TOMLDecodeError as err:
        raise DataError(f"{folder}/{name}", f"not TOML: {err}") from None


_REQUIRED = object()
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "an array",
               dict: "a table"}


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)


@dataclass(frozen=True)
class DataFile:
    """One file of a declarative folder, as its loader reads it: its mistakes are
    :class:`DataError` naming the file, the table and the key."""

    folder: str
    name: str

    @property
    def path(self) -> str:
        """How messages name the file: ``taxonomy/kinds.toml``."""
        return f"{self.folder}/{self.name}"

    def read(self) -> dict[str, Any]:
        return read_toml(self.folder, self.name)

    def error(self, problem: str, table: str = "", key: str = "") -> DataError:
        return DataError(self.path, problem, table, key)

    def value(self, table: str, entries: Any, key: str, kind: type | tuple[type, ...] = object,
              default: Any = _REQUIRED) -> Any:
        """``entries[key]`` of ``[table]``, which must be a ``kind`` (a bool is no number); ``default``
        when missing, else an error."""
        if not isinstance(entries, Mapping):
            raise self.error(f"should be a table, not {_type_name(type(entries))}", table)
        if key not in entries:
            if default is _REQUIRED:
                raise self.error("missing", table, key)
            return default
        value, kinds = entries[key], (kind if isinstance(kind, tuple) else (kind,))
        if not isinstance(value, kinds) or (isinstance(value, bool) and not {bool, object} & set(kinds)):
            raise self.error(f"should be {_type_name(kind)}, not {_type_name(type(value))}", table, key)
        return value

    def strings(self, table: str, entries: Any, key: str, default: Any = _REQUIRED) -> tuple[str, ...]:
        """``entries[key]`` of ``[table]``, an array of strings (``default`` as it is when missing)."""
        values = self.value(table, entries, key, list, default)
        if not isinstance(values, list):
            return values
        if not all(isinstance(v, str) for v in values):
            raise self.error("should be an array of strings", table, key)
        return tuple(values)

    def numbers(self, table: str, entries: Any, key: str, default: Any = _REQUIRED) -> tuple[float, ...]:
        """``entries[key]`` of ``[table]``, an array of numbers (no booleans; ``default`` as it is when missing)."""
        values = self.value(table, entries, key, list, default)
        if not isinstance(values, list):
            return values
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise self.error("should be an array of numbers", table, key)
        return tuple(values)

    def tables(self, table: str, entries: Any, key: str, default: Any = _REQUIRED) -> dict[str, Any]:
        """``entries[key]``, a table of tables (``[kinds.pattern]`` ... under ``kinds``)."""
        values = self.value(table, entries, key, dict, default)
        for name, entry in values.items():
            if not isinstance(entry, dict):
                raise self.error(f"should be a table, not {_type_name(type(entry))}", table_name(table, key, name))
        return values


def table_name(*parts: str) -> str:
    """A TOML table's name as the file writes it: ``subtypes."1.1_pattern_texture"``."""
    return ".".join(part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else json.dumps(part) for part in parts if part)


def data_hash(*files: tuple[str, str]) -> str:
    """SHA-256 over the named data files, for manifests (which design produced an output)."""
    digest = hashlib.sha256()
    for folder, name in files:
        digest.update(f"{folder}/{name}\0".encode())
        digest.update(data_path(folder, name).read_bytes())
    return digest.hexdigest()
