"""What the card's content hashes cover, and outputs a rerun finds complete.

``tracebench.content`` on the card holds, for each folder ``trace import`` writes (``benchmark``;
for a run also ``run``: the run folder but its ``benchmark/``), the SHA-256 of that folder's
``sha256sum`` list: one line ``<sha256>  <path>`` a file, sorted by path (as ``LC_ALL=C sort``
sorts UTF-8). The export computes it from what it embeds; the import from the files it wrote,
each hashed a megabyte at a time, and refuses the whole when they differ.

:class:`Staged` is ``staged_output`` that also recognises a rerun: when ``--out`` already holds
exactly what the command assembled (a kill just after the final rename), the command is
complete, not refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Iterable, Iterator

from ..cache import file_sha256, make_stage
from ..errors import TraceError

__all__ = ["Staged", "content_hash", "folder_files"]


def content_hash(files: Iterable[tuple[str, str]]) -> str:
    """The SHA-256 of the ``sha256sum`` list of ``files`` ((path, sha256) pairs), sorted by path."""
    digest = hashlib.sha256()
    for path, sha in sorted(files):
        digest.update(f"{sha}  {path}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def folder_files(root: Path, skip: str | None = None) -> Iterator[tuple[str, str]]:
    """(path relative to ``root``, SHA-256) of every file below ``root`` (but its folder ``skip``),
    each read a megabyte at a time; anything but a regular file (a link, a pipe) is never opened
    and hashes as ``"not a regular file"``."""
    for folder, dirs, files in os.walk(root):
        if skip in dirs and Path(folder) == Path(root):
            dirs.remove(skip)
        for name in files:
            path = Path(folder) / name
            regular = stat.S_ISREG(path.lstat().st_mode)
            yield path.relative_to(root).as_posix(), file_sha256(path) if regular else "not a regular file"


class Staged:
    """``with Staged(out, marker) as stage:`` a folder beside ``out`` that becomes ``out`` when
    the block succeeds. When ``out`` already holds a ``marker`` file (a dataset card, a run's
    manifest), the block assembles its stage all the same and compares: the same files with the
    same bytes leave ``out`` as it is and set :attr:`complete`; anything else is refused. A
    folder without ``marker`` is refused at once, as ``staged_output`` does."""

    def __init__(self, out: Path, marker: str) -> None:
        self.out, self.marker, self.complete = Path(out), marker, False
        self._plain = None

    def __enter__(self) -> Path:
        from ..library import staged_output

        out = self.out
        if not out.exists() or (out.is_dir() and not any(out.iterdir())):
            self._plain = staged_output(out)
            return self._plain.__enter__()
        if not (out / self.marker).is_file():
            raise TraceError(f"{out}: already exists and is not empty; choose another --out")
        self.stage = make_stage(out.parent, f".{out.name}.")
        return self.stage

    def __exit__(self, kind, error, traceback) -> bool:
        if self._plain is not None:
            return bool(self._plain.__exit__(kind, error, traceback))
        try:
            self.complete = kind is None and sorted(folder_files(self.stage)) == sorted(folder_files(self.out))
        finally:
            shutil.rmtree(self.stage, ignore_errors=True)
        if kind is None and not self.complete:
            raise TraceError(f"{self.out}: already exists and holds other files than this command writes (another "
                             f"dataset's, or changed since); choose another --out")
        return False
