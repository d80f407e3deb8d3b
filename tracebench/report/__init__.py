"""What a researcher looks at: the HTML report (``trace report``) and judge agreement (``trace agree``).

The agreement statistics (``agree`` and its label records) need scikit-learn, SciPy and
krippendorff, which a report does not: they are imported on first use."""

from __future__ import annotations

from typing import Any

from ._annotate import export_sample, stratified
from ._report import build_report

__all__ = ["Label", "SourceLabel", "agree", "build_report", "export_sample", "format_agreement", "read_labels",
           "stratified"]

_AGREE = {"Label", "SourceLabel", "agree", "format_agreement", "read_labels"}


def __getattr__(name: str) -> Any:
    if name in _AGREE:
        from . import _agree

        return getattr(_agree, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
