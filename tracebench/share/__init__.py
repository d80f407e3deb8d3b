"""Sharing benchmarks and runs the way the field does: as Hugging Face datasets and through
lmms-eval.

``trace export`` writes a benchmark or a run folder as a dataset folder the Hub serves and
``datasets.load_dataset`` reads (parquet shards and a dataset card); ``trace import`` rebuilds
the folder from it, byte for byte. Both need the ``hf`` extra (``datasets``, ``pyarrow``),
imported only when they run. ``trace export --lmms-eval`` writes a benchmark as an lmms-eval
task folder and ``trace import-lmms`` judges an lmms-eval sample log's images as a run
(``_lmms``: neither needs the extra)."""

from __future__ import annotations

from ..lazy import lazy_exports

# the bounds a dataset from anyone is read within (docs/security.md)
_LIMITS = ("MAX_CARD_BYTES", "MAX_FOOTER_BYTES", "MAX_IMAGE_BYTES", "MAX_ROW_GROUP_BYTES", "MAX_STRING_BYTES")

_LMMS = ("LmmsTask", "default_generator_name", "export_lmms_task", "import_lmms_log", "read_lmms_log")

__all__ = ["ExportSummary", "ImportSummary", "export_folder", "import_dataset", "read_card", *_LIMITS, *_LMMS]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {"ExportSummary": "._export", "export_folder": "._export",
                                                         "ImportSummary": "._import", "import_dataset": "._import",
                                                         "read_card": "._card", **dict.fromkeys(_LIMITS, "._limits"), **dict.fromkeys(_LMMS, "._lmms")})
