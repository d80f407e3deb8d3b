"""Data derived from the shipped declarative folders, computed once per machine and kept.

Two things cost more to compute than to read back: the Lark parse tables of the grammar
and the quota cells of the template space (every template of ``templates/space.toml``,
classified). Both are pure functions of shipped files and of the code that computes them,
so they are stored under a name that hashes both, in the ``derived`` folder of the
per-user cache (:func:`cache_root`: ``$TRACEBENCH_CACHE``, else ``$XDG_CACHE_HOME/tracebench``,
else ``~/.cache/tracebench``; the default synthetic library is built there too).

The folder is created private (0700), and one that is not (another user's, or readable or
writable by others) is not used. A file that is missing, unreadable or not what its
reader expects is computed again and rewritten (atomically); a folder that cannot be
written is no error: the data are then computed in memory for every process. Nothing here
is a model-call cache (that is :mod:`tracebench.cache`, one folder per run).

Files of older keys (another version of the code or of the data) are removed when a file of
the same name is written and they have not been modified for :data:`PRUNE_AFTER_DAYS`: two
installations sharing the folder keep theirs, and a file removed while still in use is only
computed once more.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from functools import cache
from pathlib import Path
from typing import Any

from .cache import write_atomic

__all__ = ["PRUNE_AFTER_DAYS", "cache_root", "derived_dir", "derived_path", "prune", "read_json", "source_hash",
           "write_json"]

_PACKAGE = Path(__file__).resolve().parent
PRUNE_AFTER_DAYS = 30


def cache_root() -> Path:
    """``$TRACEBENCH_CACHE``, else ``$XDG_CACHE_HOME/tracebench``, else ``~/.cache/tracebench``."""
    if os.environ.get("TRACEBENCH_CACHE"):
        return Path(os.environ["TRACEBENCH_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "tracebench"
    return Path.home() / ".cache" / "tracebench"


def derived_dir() -> Path | None:
    """The folder of derived data, created if needed; None when it cannot be made or written."""
    folder = cache_root() / "derived"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
    except OSError:
        return None
    # what is read back includes Lark's pickled tables: only from a folder that is this user's alone
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not os.access(folder, os.W_OK | os.X_OK):
        return None
    return folder


@cache
def source_hash(*modules: str) -> str:
    """SHA-256 over the source files of ``modules`` (paths inside the package, such as
    ``formula/_space.py``): derived data are stale when the code computing them changes."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(f"{module}\0".encode())
        digest.update((_PACKAGE / module).read_bytes())
    return digest.hexdigest()


def derived_path(name: str, key: str, suffix: str) -> Path | None:
    """Where the derived file ``name`` for ``key`` (a hash) lives, or None without a folder."""
    folder = derived_dir()
    return None if folder is None else folder / f"{name}-{key[:24]}{suffix}"


def read_json(name: str, key: str) -> Any | None:
    """The stored value, or None when it is absent or cannot be read."""
    path = derived_path(name, key, ".json")
    if path is None:
        return None
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


def write_json(name: str, key: str, value: Any) -> None:
    """Store ``value`` for ``key``, atomically; a folder that cannot be written is skipped."""
    path = derived_path(name, key, ".json")
    if path is None:
        return
    try:
        write_atomic(path, json.dumps(value, separators=(",", ":")).encode(), mode=0o600)
    except OSError:
        return
    prune(path)


def prune(written: Path, *, now: float | None = None) -> list[Path]:
    """Remove the files of other keys of ``written``'s name (``NAME-KEY.SUFFIX`` beside it, and
    files a process left half-written) unmodified for :data:`PRUNE_AFTER_DAYS`; returns them."""
    name = written.name.rsplit("-", 1)[0]
    cutoff = (time.time() if now is None else now) - PRUNE_AFTER_DAYS * 86400
    removed = []
    for path in written.parent.glob(f"{name}-*"):
        try:
            # the key is the last part of the name: another name that merely starts alike is not ours
            if path == written or "-" in path.name[len(name) + 1:].split(".")[0] or path.stat().st_mtime >= cutoff:
                continue
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed
