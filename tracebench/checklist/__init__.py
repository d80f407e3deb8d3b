"""Checklist compilation: a bound case -> binary questions per operator instance (METHOD.md §7)."""

from __future__ import annotations

from ._compile import QUESTION_FILE, compile_checklist

__all__ = ["QUESTION_FILE", "compile_checklist"]
