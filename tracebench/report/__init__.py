"""What a researcher looks at: the HTML report (``trace report``) and judge agreement (``trace agree``)."""

from __future__ import annotations

from ._report import build_report

__all__ = ["build_report"]
