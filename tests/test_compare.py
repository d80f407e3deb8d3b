"""`trace compare`: paired differences on a constructed pair of runs whose difference is known, the
bootstrap clustered by template, Holm's correction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from test_cli import run_trace
from tracebench.records import read_cases
from tracebench.score import compare_runs, holm


@pytest.fixture(scope="module")
def pair(run_bench, shared_runs, tmp_path_factory) -> tuple[Path, Path, dict]:
    """Run A (the perfect zoo) and run B: A's verdicts with every anchor identity question failed in
    cases of slot 3 and above. Per case, A - B on the anchor operator is 1/2 per such anchor
    instance (existence passes, identity fails: the instance scores 0.5) over the case's anchors."""
    a = shared_runs(run_bench, "synthetic:perfect")
    b = tmp_path_factory.mktemp("compare") / "b"
    shutil.copytree(a, b)
    cases = {c.id: c for c in read_cases(run_bench)}
    lines = []
    for line in (a / "verdicts.jsonl").read_text().splitlines():
        v = json.loads(line)
        if v["question_id"].endswith(":identity") and v["question_id"].startswith("f") and cases[v["case_id"]].slot >= 3:
            v["verdict"], v["value"] = "fail", 0.0
            v["votes"] = [{**vote, "verdict": "fail", "value": 0.0, "answer": "no"} for vote in v["votes"]]
        lines.append(json.dumps(v, ensure_ascii=False, separators=(",", ":")))
    (b / "verdicts.jsonl").write_text("\n".join(lines) + "\n")
    expected = {}
    for case in cases.values():
        anchors = [t for t in case.terms if t.op == "f"]
        if anchors:
            expected[case.id] = 0.5 if case.slot >= 3 else 0.0  # each anchor instance: 1 -> 0.5
    return a, b, expected


def test_the_paired_difference_is_the_known_one(pair):
    a, b, expected = pair
    result = compare_runs([a, b])
    anchor = next(d for d in result.differences if d.metric == "anchor")
    assert anchor.cases == len(expected)
    assert anchor.difference == pytest.approx(sum(expected.values()) / len(expected), abs=1e-4)
    assert anchor.ci95[0] <= anchor.difference <= anchor.ci95[1] and anchor.ci95[0] > 0
    assert anchor.significant and anchor.p_holm < 0.05
    for metric in ("disentangle", "apply", "compose"):
        d = next(d for d in result.differences if d.metric == metric)
        assert d.difference == 0.0 and not d.significant and d.p == 1.0
    same = compare_runs([a, a])
    assert all(d.difference == 0.0 and not d.significant for d in same.differences if d.difference is not None)


def test_the_bootstrap_resamples_templates(pair, run_bench):
    a, b, _ = pair
    templates = {c.template for c in read_cases(run_bench) if any(t.op == "f" for t in c.terms)}
    anchor = next(d for d in compare_runs([a, b]).differences if d.metric == "anchor")
    assert anchor.templates == len(templates) < anchor.cases


def test_holm():
    assert holm([0.01, 0.04, 0.03, None, 0.5]) == pytest.approx([0.04, 0.09, 0.09, None, 0.5])
    assert holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])
    assert holm([]) == []


def test_the_command(pair, tmp_path, diagnosis_bench, shared_runs):
    a, b, _ = pair
    result = run_trace("compare", str(a), str(b), "--protocol", "longbanana", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["metrics"] == ["anchor", "disentangle", "apply", "compose", "overall", "longbanana"]
    text = run_trace("compare", str(a), str(b))
    assert "anchor" in text.stdout and "*" in text.stdout
    other = shared_runs(diagnosis_bench, "synthetic:perfect")
    refused = run_trace("compare", str(a), str(other))
    assert refused.returncode == 2 and "different benchmarks" in refused.stderr
    one = run_trace("compare", str(a))
    assert one.returncode == 2 and "give two runs or more" in one.stderr
