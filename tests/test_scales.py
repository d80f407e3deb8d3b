"""Graded scales (ternary, identity tiers): answers, outcomes, the median ensemble, the zoo's partial
failures with known truth, the oracle and the OpenAI judge on each scale."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from test_cli import run_trace
from tracebench.outcomes import Outcome, Status, median_vote
from tracebench.providers import ModelSettings
from tracebench.records import RUN_MANIFEST, Question, read_cases, read_verdicts
from tracebench.run import RunOptions, generated_image, parse_reply, run_benchmark
from tracebench.sample import SampleOptions, sample_benchmark
from tracebench.scales import Scale, answers, kind_of, normalize, outcome, spec_of, truth_answer
from tracebench.zoo import read_record

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)


def _q(aspect: str = "identity", op: str = "anchor", expected: str = "yes") -> Question:
    return Question(id=f"f1:{aspect}", op=op, target="f1", aspect=aspect, question="?", expected=expected)


@pytest.mark.parametrize("kind,answer,expected,value,status", [
    ("binary", "yes", "yes", 1.0, "pass"), ("binary", "no", "yes", 0.0, "fail"), ("binary", "no", "no", 1.0, "pass"),
    ("ternary", "2", "yes", 1.0, "pass"), ("ternary", "1", "yes", 0.5, "fail"), ("ternary", "0", "yes", 0.0, "fail"),
    ("ternary", "2", "no", 0.0, "fail"), ("ternary", "1", "no", 0.5, "fail"), ("ternary", "0", "no", 1.0, "pass"),
    ("tiers", "1.0", "yes", 1.0, "pass"), ("tiers", "0.2", "yes", 0.2, "fail"), ("tiers", "0.0", "yes", 0.0, "fail"),
])
def test_an_answer_is_the_share_satisfied_after_polarity(kind, answer, expected, value, status):
    got = outcome(kind, answer, _q(expected=expected))
    assert (got.value, got.status) == (value, Status(status))


def test_tiers_grade_anchor_identity_only_and_answers_normalize():
    assert kind_of(Scale.TIERS, _q()) == "tiers"
    assert kind_of(Scale.TIERS, _q("existence")) == "binary" and kind_of(Scale.TIERS, _q("fidelity", "disentangle")) == "binary"
    assert kind_of("ternary", _q("leakage", "compose", "no")) == "ternary" and answers("binary", _q()) == ("yes", "no")
    assert [normalize("ternary", x) for x in (2, "2", 2.0, " 1 ", "yes", 3, True)] == ["2", "2", "2", "1", None, None, None]
    assert [normalize("tiers", x) for x in (1, "0.2", 0.20, "0.5")] == ["1.0", "0.2", "0.2", None]
    assert [normalize("binary", x) for x in ("YES", " no", "2")] == ["yes", "no", None]


@pytest.mark.parametrize("kind", ["binary", "ternary", "tiers"])
@pytest.mark.parametrize("expected", ["yes", "no"])
def test_the_truth_answer_gives_the_state_s_value(kind, expected):
    if kind == "tiers" and expected == "no":
        return  # identity questions expect yes
    q = _q(expected=expected)
    values = {state: outcome(kind, truth_answer(kind, q, state), q).value for state in ("holds", "partial", "broken")}
    partial = {"binary": 0.0, "ternary": 0.5, "tiers": 0.2}[kind]
    assert values == {"holds": 1.0, "partial": partial, "broken": 0.0}


def test_the_median_ensemble():
    def o(v):
        return Outcome.of("pass" if v > 0.5 else "fail", v)

    assert median_vote([o(1.0), o(0.5), o(0.0)]) == Outcome.of("fail", 0.5)
    assert median_vote([o(1.0), o(1.0), o(0.0), Outcome.of("abstain")]) == Outcome.of("pass", 1.0)
    assert median_vote([o(1.0), o(0.5)]) == Outcome.of("pass", 0.75)  # even: the mean of the middle two
    assert not median_vote([Outcome.of("abstain")]).answered


def test_a_reply_is_read_on_its_scale():
    questions = [_q(), _q("existence"), _q("leakage", "compose", "no")]
    raw = json.dumps({"answers": [{"id": "f1:identity", "answer": 0.2}, {"id": "f1:existence", "answer": "2"},
                                  {"id": "f1:leakage", "answer": "no"}]})
    tiers = parse_reply(raw, questions, "tiers")
    assert tiers["f1:identity"][0] == "0.2" and tiers["f1:leakage"][0] == "no"
    assert tiers["f1:existence"][0] is None and tiers["f1:existence"][1] == "answer '2' is neither yes nor no"
    ternary = parse_reply(raw, questions, "ternary")
    assert ternary["f1:existence"][0] == "2" and ternary["f1:identity"][0] is None
    assert ternary["f1:leakage"][1] == "answer 'no' is not one of 2, 1, 0"
    assert [spec_of(k).other_than for k in ("binary", "ternary")] == ["neither yes nor no", "not one of 2, 1, 0"]


# ------------------------------------------------------------------------------ the zoo's partial failures

@pytest.fixture(scope="module")
def bench(shared_folder) -> Path:
    return shared_folder("scales-bench", lambda out: sample_benchmark(
        out, SampleOptions(slots=(1, 2, 3, 4), per_slot=40, seed=8, applications=False)))


@pytest.fixture(scope="module")
def runs(shared_folder, bench) -> dict[str, Path]:
    def make(scale):
        def run(out):
            run_benchmark(bench, out, RunOptions(generator="synthetic:partial:0.4", judges=["oracle"],
                          settings=ModelSettings(max_retries=0, timeout=30.0, scale=scale)))
        return shared_folder(f"scales-run-{scale}", run)

    return {scale: make(scale) for scale in ("binary", "ternary", "tiers")}


def test_partial_failures_lower_each_scale_by_the_amount_set(bench, runs):
    cases = {c.id: c for c in read_cases(bench)}
    partial, asked = set(), 0
    for case in cases.values():
        record = read_record(generated_image(runs["binary"], case.id).read_bytes())
        assert set(record.partial or {}) <= set(record.failed)  # a partial failure is a failure to a binary judge
        partial |= {(case.id, q) for q in record.partial or {}}
        asked += sum(q.aspect == "identity" for q in case.checklist)
    identity = {scale: {(v.case_id, v.question_id): v.value for v in read_verdicts(run)
                        if v.question_id.endswith(":identity")} for scale, run in runs.items()}
    broken = {k for k in identity["binary"] if k in partial}
    share = len(broken) / asked
    z = (share - 0.4) / math.sqrt(0.4 * 0.6 / asked)
    assert asked > 100 and abs(z) < 5, (share, asked)  # the profile's rate, P = 0.4
    mean = {scale: sum(values.values()) / len(values) for scale, values in identity.items()}
    assert mean["binary"] == pytest.approx(1 - share)
    assert mean["ternary"] == pytest.approx(1 - share / 2)
    assert mean["tiers"] == pytest.approx(1 - share * 0.8)
    for scale in ("ternary", "tiers"):
        manifest = json.loads((runs[scale] / "run.json").read_text())
        assert manifest["scale"] == scale
    assert "scale" not in json.loads((runs["binary"] / "run.json").read_text())
    assert all(RUN_MANIFEST.read(run).answer_scale is Scale(scale) for scale, run in runs.items())


def test_graded_over_http_equals_in_process(bench, runs, tmp_path, monkeypatch):
    from tracebench.serve import ZooServer

    monkeypatch.setenv("OPENAI_API_KEY", "x")  # a placeholder key: scrubbing must not corrupt replies
    with ZooServer([bench]).start() as server:
        settings = ModelSettings(base_url=server.base_url, max_retries=2, timeout=30.0, scale="ternary")
        run_benchmark(bench, tmp_path / "http", RunOptions(generator="openai:synthetic/partial:0.4", judges=["openai:oracle"],
                      settings=settings, concurrency=4, shard=(1, 4)))
    mine = {(v.case_id, v.question_id): (v.verdict, v.value) for v in read_verdicts(tmp_path / "http")}
    theirs = {(v.case_id, v.question_id): (v.verdict, v.value) for v in read_verdicts(runs["ternary"])}
    assert mine and all(theirs[k] == v for k, v in mine.items())
    assert any(v == ("fail", 0.5) for v in mine.values())


def test_graded_judge_text_and_binary_keys_unchanged():
    from tracebench.providers import make_judge
    from tracebench.records import Case

    case = Case(id="c", slot=1, template="f", formula='f1(I1, "a cat")', prompt="p", text_only_prompt="p",
                scene="{member}", references=(), terms=(),
                checklist=(_q(), _q("existence")))
    binary = make_judge("openai:m@http://127.0.0.1:9/v1", ModelSettings())
    tiers = make_judge("openai:m@http://127.0.0.1:9/v1", ModelSettings(scale="tiers"))
    key_b, key_t = binary.key(case, case.checklist, b"i", []), tiers.key(case, case.checklist, b"i", [])
    assert "scale" not in key_b and key_t["scale"] == "tiers"
    system, user = key_t["messages"]
    assert '"1.0"' in system and "(answer 1.0, 0.2 or 0.0)" in user and "f1:existence: ? (answer" not in user
    assert key_b["messages"][0].startswith("You are a strict visual judge") and "(answer" not in key_b["messages"][1]


def test_an_unknown_scale_is_one_line(tmp_path, bench):
    result = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle", "--scale", "five",
                       "--out", str(tmp_path / "r"))
    assert result.returncode == 2 and "invalid choice: 'five'" in result.stderr


def test_merge_and_compare_refuse_mixed_scales_and_diagnose_records_its_own(bench, runs, tmp_path):
    from tracebench.diagnose import DiagnoseOptions, diagnose_run
    from tracebench.records import DIAGNOSIS_MANIFEST

    merged = run_trace("merge", str(runs["binary"]), str(runs["ternary"]), "--out", str(tmp_path / "m"))
    assert merged.returncode == 2 and "another scale or ensemble" in merged.stderr
    compared = run_trace("compare", str(runs["binary"]), str(runs["ternary"]))
    assert compared.returncode == 2 and "different scales (binary, ternary)" in compared.stderr
    report = run_trace("report", str(runs["binary"]), "--compare", str(runs["ternary"]), "--out", str(tmp_path / "r.html"))
    assert report.returncode == 2 and "judged on the ternary scale" in report.stderr
    own = diagnose_run(runs["ternary"], tmp_path / "d", DiagnoseOptions(cases="s2-00001,s3-00002", settings=SETTINGS))
    manifest = DIAGNOSIS_MANIFEST.read(tmp_path / "d")
    assert manifest.scale == "ternary" and manifest.roots_from_run and own.cases == 2
    other = diagnose_run(runs["ternary"], tmp_path / "d2", DiagnoseOptions(cases="s2-00001",
                         settings=ModelSettings(max_retries=0, timeout=30.0, scale="binary")))
    assert DIAGNOSIS_MANIFEST.read(tmp_path / "d2").roots_from_run is False and other.cases == 1
    again = run_trace("diagnose", str(runs["ternary"]), "--out", str(tmp_path / "d"), "--cases", "s2-00001,s3-00002",
                      "--scale", "binary")
    assert again.returncode == 2 and "holds a diagnosis with another" in again.stderr and "scale" in again.stderr
