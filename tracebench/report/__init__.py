"""What a researcher looks at: the HTML report (``trace report``) and judge agreement (``trace agree``).

The agreement statistics (``agree`` and its label records) need scikit-learn, SciPy and
krippendorff, which a report does not: they are imported on first use."""

from __future__ import annotations

from ..lazy import lazy_exports
from ._annotate import export_sample, stratified
from ._report import build_report

__all__ = ["EXAM_PROFILE", "Label", "SourceLabel", "agree", "build_report", "exam_benchmark", "examine",
           "export_sample", "format_agreement", "format_exam", "read_labels", "stratified", "take_exam", "truth_labels"]

_AGREE = {"Label", "SourceLabel", "agree", "examine", "format_agreement", "format_exam", "read_labels", "truth_labels"}
_EXAM = {"EXAM_PROFILE", "exam_benchmark", "take_exam"}

__getattr__, __dir__ = lazy_exports(__name__, globals(), {**dict.fromkeys(_AGREE, "._agree"),
                                                         **dict.fromkeys(_EXAM, "._exam")})
