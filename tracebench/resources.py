"""The one loader for the declarative folders (grammar/, templates/, taxonomy/, diagnose/).

In an installed wheel the folders live at ``tracebench/_data/<name>``; in a source
checkout (editable install, running from the repository) they sit at the repository's
top level beside the package. Code never reads them relative to the current directory.
"""

from __future__ import annotations

import hashlib
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["data_dir", "data_path", "read_text", "read_toml", "data_hash"]

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
    return data_path(folder, name).read_text(encoding="utf-8")


@cache
def read_toml(folder: str, name: str) -> dict[str, Any]:
    return tomllib.loads(read_text(folder, name))


def data_hash(*files: tuple[str, str]) -> str:
    """SHA-256 over the named data files, for manifests (which design produced an output)."""
    digest = hashlib.sha256()
    for folder, name in files:
        digest.update(f"{folder}/{name}\0".encode())
        digest.update(data_path(folder, name).read_bytes())
    return digest.hexdigest()
