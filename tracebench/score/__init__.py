"""Scores: verdicts -> per-operator scores with breakdowns and bootstrap intervals (a :class:`Scores` record)."""

from __future__ import annotations

from ._score import (OPERATORS, Abstentions, CaseWeighted, EntityCountScore, Gating, GroupScores, RunIdentity, Scores, SubtypeScore,
                     effective_outcomes, format_scores, instance_results, instance_scores, score_cases,
                     score_folder, score_run)

__all__ = ["Abstentions", "CaseWeighted", "EntityCountScore", "Gating", "GroupScores", "OPERATORS", "RunIdentity", "Scores", "SubtypeScore",
           "effective_outcomes", "format_scores", "instance_results", "instance_scores", "score_cases", "score_folder",
           "score_run"]
