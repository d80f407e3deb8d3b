"""Checklist compilation: a bound case -> binary questions per operator instance (TRACE-Bench, arXiv 2608.16765)."""

from __future__ import annotations

from ._compile import QUESTION_FILE, REJECTION, apply_section, aspects, compile_checklist

__all__ = ["QUESTION_FILE", "REJECTION", "apply_section", "aspects", "compile_checklist"]
