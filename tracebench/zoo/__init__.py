"""The synthetic model zoo and the oracle judge: generators that fail in named ways, with known truth.

A :class:`Profile` (parsed from a spec such as ``"global-interference,noise:0.1"``) says how a
synthetic generator fails; :func:`generate` draws a case with the synthetic library's renderer
and embeds a :class:`~tracebench.records.GenerationRecord` (what was drawn, which checklist
questions were broken and why) in the PNG; :func:`oracle_answers` and :func:`oracle_reply`
judge from that record alone. :func:`failed_questions` gives the broken questions without
drawing.

Modules: ``_profiles`` (specs), ``_rules`` (which questions a profile breaks), ``_scene``
(the render plan), ``_generate`` (drawing, the PNG record), ``_oracle`` (the judge).
"""

from __future__ import annotations

from ._generate import RECORD_KEY, default_index, generate, read_record
from ._oracle import oracle_answers, oracle_reply
from ._profiles import PROFILE_NAMES, Failure, Profile, parse_profile
from ._rules import breakdown, failed_questions
from ._scene import plan_generation

__all__ = [
    "PROFILE_NAMES",
    "RECORD_KEY",
    "Failure",
    "Profile",
    "breakdown",
    "default_index",
    "failed_questions",
    "generate",
    "oracle_answers",
    "oracle_reply",
    "parse_profile",
    "plan_generation",
    "read_record",
]
