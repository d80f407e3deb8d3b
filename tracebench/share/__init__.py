"""Sharing benchmarks and runs the way the field does: as Hugging Face datasets.

``trace export`` writes a benchmark or a run folder as a dataset folder the Hub serves and
``datasets.load_dataset`` reads (parquet shards and a dataset card); ``trace import`` rebuilds
the folder from it, byte for byte. Both need the ``hf`` extra (``datasets``, ``pyarrow``),
imported only when they run."""

from __future__ import annotations

from ..lazy import lazy_exports

# the bounds a dataset from anyone is read within (docs/security.md)
_LIMITS = ("MAX_CARD_BYTES", "MAX_FOOTER_BYTES", "MAX_IMAGE_BYTES", "MAX_ROW_GROUP_BYTES", "MAX_STRING_BYTES")

__all__ = ["ExportSummary", "ImportSummary", "export_folder", "import_dataset", "read_card", *_LIMITS]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {"ExportSummary": "._export", "export_folder": "._export",
                                                         "ImportSummary": "._import", "import_dataset": "._import",
                                                         "read_card": "._card", **dict.fromkeys(_LIMITS, "._limits")})
