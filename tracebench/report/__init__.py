"""What a researcher looks at: the HTML report (``trace report``) and judge agreement (``trace agree``)."""

from __future__ import annotations

from ._agree import Label, SourceLabel, agree, format_agreement, read_labels
from ._annotate import export_sample, stratified
from ._report import build_report

__all__ = ["Label", "SourceLabel", "agree", "build_report", "export_sample", "format_agreement", "read_labels",
           "stratified"]
