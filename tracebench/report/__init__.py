"""What a researcher looks at: the HTML report (``trace report``) and judge agreement (``trace agree``).

The agreement statistics (``agree`` and its label records) need scikit-learn, SciPy and
krippendorff, which a report does not, and the report needs matplotlib, which ``trace agree``
does not: every name is imported from its module on first use."""

from __future__ import annotations

from ..lazy import lazy_exports

__all__ = ["EXAM_PROFILE", "Label", "SourceLabel", "agree", "build_report", "exam_benchmark", "examine",
           "export_sample", "format_agreement", "format_exam", "read_labels", "stratified", "take_exam", "truth_labels"]

_AGREE = {"Label", "SourceLabel", "agree", "examine", "format_agreement", "format_exam", "read_labels", "truth_labels"}
_EXAM = {"EXAM_PROFILE", "exam_benchmark", "take_exam"}
_PAGES = {"build_report": "._report", "export_sample": "._annotate", "stratified": "._annotate"}

__getattr__, __dir__ = lazy_exports(__name__, globals(), {**dict.fromkeys(_AGREE, "._agree"),
                                                         **dict.fromkeys(_EXAM, "._exam"), **_PAGES})
