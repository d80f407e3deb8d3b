"""A content-addressed cache of model calls on disk.

The key hashes only what changes the output: the adapter, the model, the base URL, the
request content (images by their SHA-256) and output-relevant settings; never an API key,
a timeout, a retry count or a concurrency limit. Entries are written atomically (a
temporary file renamed into place), so a run killed mid-write leaves no broken entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from .errors import TraceError

__all__ = ["Cache", "TEMPORARY_PREFIX", "cache_key", "file_sha256", "make_stage", "remove_stale_temporaries", "sha256",
           "write_atomic"]

TEMPORARY_PREFIX = ".tmp-"  # write_atomic's temporary files, beside the file they become


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    """:func:`sha256` of a file's bytes, read a megabyte at a time (a large benchmark's cases)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cache_key(**parts: Any) -> str:
    """SHA-256 of the canonical JSON of ``parts``."""
    return sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode())


_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once: the permissions a plain open() would give


def write_atomic(path: Path, data: bytes | Iterable[bytes], *, mode: int | None = None) -> None:
    """Write ``path`` whole or not at all: a unique temporary file beside it, renamed into place
    (with ``mode``, by default the permissions a plain write would give, not the temporary
    file's 0600). ``data`` is the bytes, or chunks of them written as they come (a file
    streamed to disk)."""
    # named by the process (as stages are), so a later command can tell a killed writer's leftovers
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{TEMPORARY_PREFIX}{os.getpid()}@{_host()}.")
    try:
        os.chmod(tmp, 0o666 & ~_UMASK if mode is None else mode)
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, bytes):
                handle.write(data)
            else:
                handle.writelines(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_stage(parent: Path, prefix: str) -> Path:
    """A new, uniquely named folder in ``parent`` for output that is renamed into place when
    complete, with the permissions a plain mkdir would give (not mkdtemp's 0700), so the
    folder it becomes can be shared or served.

    Its name, ``{prefix}{pid}@{host}.{random}``, says which process assembles it: the stages of
    ``prefix`` that a process of this host left when it was killed (``kill -9``, a crash) are
    removed first. A stage whose process still runs, or of another host, is left alone."""
    _remove_stale(Path(parent), prefix)
    stage = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}@{_host()}.", dir=parent))
    os.chmod(stage, 0o777 & ~_UMASK)
    return stage


def remove_stale_temporaries(folder: Path) -> None:
    """Remove :func:`write_atomic`'s temporary files in ``folder`` that a process of this host
    left when it was killed (``kill -9``); a writer still running, or of another host, is left
    alone. Each command that writes a folder calls it there before writing."""
    _remove_stale(Path(folder), TEMPORARY_PREFIX)


@lru_cache(maxsize=1)
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _remove_stale(parent: Path, prefix: str) -> None:
    """The stages (folders) or temporary files (files) named ``{prefix}{pid}@{host}.{random}``
    in ``parent`` whose process, of this host, no longer runs."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)@" + re.escape(_host()) + r"\.[a-z0-9_]+", re.ASCII)
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        found = pattern.fullmatch(entry.name)
        if not found or _running(int(found.group(1))):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            Path(entry.path).unlink(missing_ok=True)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or not a pid: left alone
        return True
    return True


_SWEPT: set[Path] = set()  # the caches this process has swept of stale temporary files


def _folders(root: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


class Cache:
    """``root/<key[:2]>/<key>.json`` (the reply) and ``<key>.bin`` (an image, when there is one)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._made: set[Path] = set()
        if self.root not in _SWEPT:  # once a process: what killed writers left (kill -9), in every key folder
            _SWEPT.add(self.root)
            for folder in (self.root, *(p for p in _folders(self.root) if len(p.name) == 2)):
                remove_stale_temporaries(folder)

    def _path(self, key: str, suffix: str) -> Path:
        return self.root / key[:2] / f"{key}{suffix}"

    def get(self, key: str) -> tuple[dict, bytes | None] | None:
        meta = self._path(key, ".json")
        if not meta.is_file():
            return None
        try:
            entry = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # not UTF-8, not JSON
            return None  # unreadable: treated as absent, rewritten by the next call
        blob = self._path(key, ".bin")
        data = blob.read_bytes() if entry.get("has_blob") and blob.is_file() else None
        if entry.get("has_blob") and data is None:
            return None
        return entry["value"], data

    def put(self, key: str, value: dict, blob: bytes | None = None) -> None:
        if blob is not None:
            self._write(self._path(key, ".bin"), blob)  # the blob first: the .json marks completion
        self._write(self._path(key, ".json"),
                    json.dumps({"has_blob": blob is not None, "value": value}, ensure_ascii=False).encode())

    def _write(self, path: Path, data: bytes) -> None:
        if path.parent not in self._made:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.parent.is_symlink():  # a cache folder resumed may be anyone's: no write through a link
                raise TraceError(f"{path.parent}: a symbolic link in the cache; tracebench writes only inside its "
                                 f"folders (remove the link)")
            self._made.add(path.parent)
        write_atomic(path, data)
