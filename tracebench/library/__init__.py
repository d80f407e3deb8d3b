"""Tagged reference libraries: the records, the folder format, validation, statistics."""

from __future__ import annotations

from ._balance import balance_library, balanced_selection, image_features
from ._import import copy_selection, import_library
from ._io import INFO_FILE, TAGS_FILE, content_hash, load_library, staged_output, write_library
from ._models import Entity, GlobalTag, LibraryInfo, TagDict, TaggedImage
from ._stats import library_stats
from ._validate import check_records, read_records, read_valid_library, validate_library
from .synth import default_library, plan_scene, render_scene, synthesize_image, synthesize_library

__all__ = [
    "Entity",
    "GlobalTag",
    "INFO_FILE",
    "LibraryInfo",
    "TAGS_FILE",
    "TagDict",
    "TaggedImage",
    "balance_library",
    "balanced_selection",
    "check_records",
    "content_hash",
    "copy_selection",
    "default_library",
    "image_features",
    "import_library",
    "library_stats",
    "plan_scene",
    "render_scene",
    "synthesize_image",
    "synthesize_library",
    "load_library",
    "read_records",
    "read_valid_library",
    "staged_output",
    "validate_library",
    "write_library",
    "tag_images",
    "TagReport",
]

_LAZY = {"tag_images", "TagReport", "SkippedImage", "ModelTags", "tag_schema"}


def __getattr__(name: str):
    # the tagger pulls in the openai client (~0.4 s); import it only when asked for
    if name in _LAZY:
        from . import _tag

        return getattr(_tag, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
