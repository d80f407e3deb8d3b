"""Scores: verdicts -> per-operator scores with breakdowns and bootstrap intervals (a :class:`Scores` record)."""

from __future__ import annotations

from ._leaderboard import (Leaderboard, LeaderboardRow, board_rows, format_leaderboard, leaderboard, run_names, terminal_text,
                           write_leaderboard)
from ._compare import Comparison, Difference, compare_runs, format_comparison, holm
from ._protocols import (DIMENSIONS, PROTOCOLS, DifficultyWeights, PassAtTau, ProtocolScore, difficulty_weights, read_weights,
                         write_weights)
from ._score import (INPUT_BINS, OPERATORS, Abstentions, CaseWeighted, EntityCountScore, FlaggedReferences, Gating, GroupScores, RejectionScore,
                     SampleSpread, SelectionScore,
                     RunIdentity, Scores, SubtypeScore, case_scores, input_bin,
                     effective_outcomes, format_scores, instance_results, instance_scores, score_cases,
                     score_folder, score_run, weights_from_runs)

__all__ = ["Abstentions", "CaseWeighted", "EntityCountScore", "FlaggedReferences", "Gating", "GroupScores", "INPUT_BINS", "OPERATORS",
           "RejectionScore", "RunIdentity", "SampleSpread", "SelectionScore", "Scores", "SubtypeScore", "case_scores", "input_bin",
           "effective_outcomes", "format_scores", "instance_results", "instance_scores", "score_cases", "score_folder",
           "score_run", "DIMENSIONS", "PROTOCOLS", "DifficultyWeights", "PassAtTau", "ProtocolScore", "difficulty_weights", "read_weights",
           "write_weights", "weights_from_runs", "Comparison", "Difference", "compare_runs", "format_comparison", "holm",
           "Leaderboard", "LeaderboardRow", "board_rows", "format_leaderboard", "leaderboard", "run_names",
           "terminal_text", "write_leaderboard"]
