"""The synthetic model zoo and the oracle judge: generators that fail in named ways, with known truth.

A :class:`Profile` (parsed from a spec such as ``"global-interference,noise:0.1"``) says how a
synthetic generator fails; :func:`generate` draws a case with the synthetic library's renderer
and embeds a :class:`~tracebench.records.GenerationRecord` (what was drawn, which checklist
questions were broken and why) in the PNG; :func:`oracle_answers` and :func:`oracle_reply`
judge from that record alone. :func:`failed_questions` gives the broken questions without
drawing; :func:`failure_rates` the exact probability that each operator instance fails in one
generation (the truth a diagnosis under random failures is measured against).

Modules: ``_profiles`` (specs), ``_rules`` (which questions a profile breaks), ``_load`` (the
probabilistic load modes, ``taxonomy/zoo.toml``), ``_scene`` (the render plan), ``_generate``
(drawing, the PNG record), ``_hazard`` (exact failure rates), ``_oracle`` (the judge, and the errors it can be told to make),
``_providers`` (the zoo and the oracle as providers: ``synthetic:PROFILE``, ``oracle[:...]``;
imported on first use).
"""

from __future__ import annotations

from ..lazy import lazy_exports
from ._generate import RECORD_KEY, default_index, generate, read_record
from ._hazard import failure_rates
from ._load import load_modes, subtype_difficulty
from ._oracle import JudgeErrors, oracle_answers, oracle_reply, parse_oracle
from ._profiles import PROFILE_NAMES, Failure, Profile, parse_profile
from ._rules import breakdown, failed_questions, load_probability
from ._scene import plan_generation

__all__ = [
    "PROFILE_NAMES",
    "RECORD_KEY",
    "Failure",
    "JudgeErrors",
    "OracleJudge",
    "Profile",
    "SyntheticGenerator",
    "breakdown",
    "default_index",
    "drawn_from",
    "failed_questions",
    "failure_rates",
    "generate",
    "load_modes",
    "load_probability",
    "oracle_answers",
    "oracle_reply",
    "parse_oracle",
    "parse_profile",
    "plan_generation",
    "read_record",
    "subtype_difficulty",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), dict.fromkeys(("OracleJudge", "SyntheticGenerator", "drawn_from"),
                                                                       "._providers"))
