"""Scores: verdicts -> per-operator scores with breakdowns and bootstrap intervals."""

from __future__ import annotations

from ._score import (OPERATORS, effective_verdicts, format_scores, instance_results, instance_scores, score_folder,
                     score_run)

__all__ = ["OPERATORS", "effective_verdicts", "format_scores", "instance_results", "instance_scores", "score_folder",
           "score_run"]
