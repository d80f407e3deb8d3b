"""Scores: verdicts -> per-operator scores with breakdowns and bootstrap intervals."""

from __future__ import annotations

from ._score import OPERATORS, format_scores, score_run

__all__ = ["OPERATORS", "format_scores", "score_run"]
