"""The numbers users see do not move under refactoring: ``trace score --json`` per zoo profile,
every diagnosis attribution and summary, and the report's headline and source tables equal
those of ``tests/golden/outputs.json`` (made anew when the paper's defaults became the default; see
``tests/golden_outputs.py``)."""

from __future__ import annotations

import json

import pytest

from golden_outputs import GOLDEN, PROFILES, compute


@pytest.mark.slow
def test_scores_attributions_and_report_tables_match_the_golden_outputs(tmp_path):
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    fresh = json.loads(json.dumps(compute(tmp_path), ensure_ascii=False))  # tuples as lists, as in the file
    assert sorted(fresh["scores"]) == sorted(PROFILES)
    for profile in PROFILES:
        assert fresh["scores"][profile] == golden["scores"][profile], profile
    for part in ("diagnoses", "reports"):
        assert fresh[part].keys() == golden[part].keys()
        for profile in golden[part]:
            assert fresh[part][profile] == golden[part][profile], (part, profile)
