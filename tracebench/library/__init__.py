"""Tagged reference libraries: the records, the folder format, validation, statistics."""

from __future__ import annotations

from ..lazy import lazy_exports
from ._io import INFO_FILE, TAGS_FILE, content_hash, load_library, staged_output, write_library
from ._models import Entity, GlobalTag, LibraryInfo, TagDict, TaggedImage
from ._validate import check_records, read_records, read_valid_library, validate_library
from .synth import default_library, synthesize_image, synthesize_library

__all__ = [
    "AUDIT_FILE",
    "AuditOptions",
    "AuditReport",
    "FlaggedPair",
    "audit_library",
    "flagged_ids",
    "library_hashes",
    "read_audit",
    "read_audit_of",
    "read_training_hashes",
    "write_audit",
    "TagOptions",
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

# loaded on first use: the tagger pulls in the openai client (~0.4 s), balancing and importing
# numpy-free but sizeable code, and the renderer is for synthetic generators only
_LAZY = {"tag_images": "_tag", "TagOptions": "_tag", "TagReport": "_tag", "SkippedImage": "_tag", "ModelTags": "_tag", "tag_schema": "_tag",
         "balance_library": "_balance", "balanced_selection": "_balance", "image_features": "_balance",
         "copy_selection": "_import", "import_library": "_import", "library_stats": "_stats",
         "plan_scene": "synth", "render_scene": "synth",
         # the audit's feature matching needs OpenCV (the audit extra), loaded when an audit runs
         **{name: "_audit" for name in ("AUDIT_FILE", "AuditOptions", "AuditReport", "FlaggedPair", "ImageHashes",
                                       "TrainingHash", "audit_library", "flagged_ids", "image_hashes",
                                       "library_hashes", "read_audit", "read_audit_of", "read_training_hashes", "write_audit")}}


__getattr__, __dir__ = lazy_exports(__name__, globals(), {name: f".{module}" for name, module in _LAZY.items()})
