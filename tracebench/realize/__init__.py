"""Prompt realization: a bound case -> the paper's two-part prompt and its text-only twin."""

from __future__ import annotations

from ._prompt import CLUTTER_FILE, PROMPT_FILES, Prompts, in_words, phrase_name, realize

__all__ = ["CLUTTER_FILE", "PROMPT_FILES", "Prompts", "in_words", "phrase_name", "realize"]
