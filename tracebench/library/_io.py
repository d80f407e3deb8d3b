"""A library on disk: ``tags.jsonl`` (one :class:`TaggedImage` a line), the images, and
``library.json`` (:class:`LibraryInfo`, with a content hash of tags and images).

Writing is atomic: a library is assembled in a temporary folder beside its destination
and renamed into place, so a failure never leaves a half-written library.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from .. import __version__
from ..cache import make_stage
from ..errors import TraceError
from ..jsonfiles import json_text, read_json, read_jsonl, write_json
from ._models import LibraryInfo, TaggedImage

__all__ = ["TAGS_FILE", "INFO_FILE", "content_hash", "load_library", "write_library", "staged_output"]

TAGS_FILE = "tags.jsonl"
INFO_FILE = "library.json"


def tags_line(image: TaggedImage) -> str:
    """The canonical one-line JSON of a tagged image (sorted keys: byte-stable)."""
    return json_text(json.dumps(image.model_dump(mode="json"), ensure_ascii=False, sort_keys=True,
                                separators=(",", ":")))


def content_hash(root: Path, images: Iterable[TaggedImage]) -> str:
    """SHA-256 over tags.jsonl and every image file, in the order of tags.jsonl."""
    digest = hashlib.sha256()
    digest.update((root / TAGS_FILE).read_bytes())
    for image in images:
        digest.update(b"\0" + image.path.encode() + b"\0")
        digest.update((root / image.path).read_bytes())
    return digest.hexdigest()


@contextmanager
def staged_output(out: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder that becomes ``out`` only if the block succeeds."""
    out = Path(out)
    occupied = out.exists() and not (out.is_dir() and not any(out.iterdir()))
    if occupied and not overwrite:
        raise TraceError(f"{out}: already exists and is not empty; choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = make_stage(out.parent, f".{out.name}.")
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    os.replace(stage, out)


def write_library(root: Path, name: str, images: Iterable[TaggedImage], *, version: str = "1") -> LibraryInfo:
    """Write tags.jsonl and library.json into ``root``, where the image files already are."""
    images = list(images)
    root = Path(root)
    with open(root / TAGS_FILE, "w", encoding="utf-8", newline="\n") as handle:
        for image in images:
            handle.write(tags_line(image) + "\n")
    info = LibraryInfo(name=name, version=version, images=len(images), content_hash=content_hash(root, images),
                       created_by=f"tracebench {__version__}")
    write_json(root / INFO_FILE, info)
    return info


def load_library(root: Path) -> tuple[LibraryInfo, list[TaggedImage]]:
    """Read a library that is known to be valid (``read_valid_library`` checks it first): a
    record that does not parse is an error ``FILE:LINE: field: message``, nothing more is checked."""
    root = Path(root)
    if not (root / TAGS_FILE).is_file():
        raise TraceError(f"{root}: not a library (no {TAGS_FILE})")
    return read_json(root / INFO_FILE, LibraryInfo), list(read_jsonl(root / TAGS_FILE, TaggedImage))
