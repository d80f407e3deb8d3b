"""Tagged reference libraries: the records, the folder format, validation, statistics."""

from __future__ import annotations

from ._io import INFO_FILE, TAGS_FILE, content_hash, load_library, staged_output, write_library
from ._models import Appearance, Dynamics, Entity, Form, GlobalTag, LibraryInfo, TagDict, TaggedImage

__all__ = [
    "Appearance",
    "Dynamics",
    "Entity",
    "Form",
    "GlobalTag",
    "INFO_FILE",
    "LibraryInfo",
    "TAGS_FILE",
    "TagDict",
    "TaggedImage",
    "content_hash",
    "load_library",
    "staged_output",
    "write_library",
]
