"""The neighbours' protocols (`trace score --protocol`): each formula on a case worked by hand, P@tau
with a hand-written weights file, difficulty weights worked by hand and estimated from runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_checklist_rules import anchor, g
from test_cli import run_trace
from tracebench.checklist import compile_checklist
from tracebench.outcomes import Outcome
from tracebench.records import Case, Reference
from tracebench.resources import data_path
from tracebench.run import stream_run
from tracebench.score import DIMENSIONS, PROTOCOLS, DifficultyWeights, PassAtTau, difficulty_weights, score_cases, score_run, write_weights

@pytest.fixture(scope="module")
def run(run_bench, shared_runs) -> Path:
    return shared_runs(run_bench, "synthetic:perfect")


@pytest.fixture(scope="module")
def cases(run):
    return [item.case for item in stream_run(run)]


# One case worked by hand: f1 (Image 1) ⊕ g_pattern1 (Image 2), its fourteen questions as
# compile_checklist makes them, with these values (None: abstained).
DOG = anchor("f1", "dog", "dog_A", "Image 1", "the plush dog")
PATTERN = g("g_pattern1", "local", "f1", "Image 2", "1.1_pattern_texture", "striped", "the robe")
HAND_VALUES = {
    "f1:existence": 1.0,                  # anchor                       content
    "f1:identity": 0.5,                   # anchor, Image 1              content, identity
    "g_pattern1:presence": 1.0,           # disentangle, Image 2         content
    "g_pattern1:fidelity": 0.0,           # disentangle, Image 2         content
    "g_pattern1:isolation": None,         # disentangle, Image 2
    "g_pattern1:carrier": 1.0,            # disentangle                  content
    "f1+g_pattern1:integrity": 1.0,       # apply                        relational
    "f1+g_pattern1:visibility": 1.0,      # apply                        relational
    "f1+g_pattern1:fit": 0.0,             # apply                        relational
    "f1+g_pattern1:exclusivity": 1.0,     # apply, Image 2               relational
    "C0:spatial": 1.0,                    # compose                      global
    "C0:duplication": 1.0,                # compose                      global
    "C0:leakage": 0.5,                    # compose, Images 1 and 2      global
    "C0:leakage_context": None,           # compose, Images 1 and 2
}


def hand_case() -> Case:
    terms = (DOG, PATTERN)
    return Case(id="hand", slot=2, template="f ⊕ g", prompt="p", text_only_prompt="t", scene="{member}",
                formula='f1(I1, "the plush dog") ⊕ g_pattern1(I2, {"the robe"}, pattern_texture)',
                references=(Reference(image="Image 1", path="references/a.png", source_id="a"),
                            Reference(image="Image 2", path="references/b.png", source_id="b")),
                terms=terms, checklist=compile_checklist(terms, ()))


def hand_outcomes(values: dict[str, float | None]) -> dict[str, Outcome]:
    return {qid: Outcome.of("abstain") if v is None else Outcome.of("pass" if v > 0.5 else "fail", v)
            for qid, v in values.items()}


def _hand_scores(run, **options):
    manifest = stream_run(run).manifest
    return score_cases(manifest, [(hand_case(), hand_outcomes(HAND_VALUES))], root=run, **options).protocols


def test_the_checklist_of_the_hand_case():
    assert [q.id for q in hand_case().checklist] == list(HAND_VALUES)


def test_every_protocol_on_a_case_worked_by_hand(run):
    p = _hand_scores(run, protocols=("trace", "longbanana", "macro", "savanna"))
    # longbanana: 12 answered items summing to 9, 100 * 9/12 = 75; content fidelity the anchor
    # and g items 1, .5, 1, 0, 1 (70); relational binding the apply items 1, 1, 0, 1 (75); global
    # constraints the composition items 1, 1, .5 (250/3); P@70: 75 >= 70 passes, the pass rate 100.
    assert p["longbanana"].overall == pytest.approx(75.0, abs=1e-4)
    assert p["longbanana"].dimensions == pytest.approx(
        {"content_fidelity": 70.0, "relational_binding": 75.0, "global_constraints": 83.3333}, abs=1e-4)
    assert p["longbanana"].pass_rate == 100.0 and p["longbanana"].weights == "uniform"
    # macro: Image 1 holds identity .5 and leakage .5 (mean .5); Image 2 presence 1, fidelity 0,
    # exclusivity 1, leakage .5 (mean .625); their harmonic mean 2 / (2 + 1.6) = 5/9; prompt
    # following the composition's 1, 1, .5 = 5/6; 10 * sqrt(5/9 * 5/6) = 10 * sqrt(25/54) = 6.8041.
    assert p["macro"].overall == pytest.approx(6.8041, abs=1e-4) and p["macro"].range == "0-10"
    assert p["macro"].dimensions == pytest.approx({"consistency": 5.5556, "prompt_following": 8.3333}, abs=1e-4)
    # savanna: s_id = .5 (f1:identity), s_ctx = 8.5 / 11 over the other answered items;
    # 100 * (0.8 * .5 + 0.2 * 8.5/11) = 40 + 170/11 = 55.4545.
    assert p["savanna"].overall == pytest.approx(55.4545, abs=1e-4) and p["savanna"].cases == 1
    assert p["savanna"].dimensions == pytest.approx({"identity": 50.0, "context": 77.2727}, abs=1e-4)


def test_savanna_leaves_out_a_case_without_an_anchor(run, cases):
    scores = score_cases(stream_run(run).manifest, ((c, hand_outcomes({q.id: 1.0 for q in c.checklist}))
                                                    for c in cases), root=run, protocols=("savanna",))
    anchored = [c for c in cases if any(t.op == "f" for t in c.terms)]
    assert scores.protocols["savanna"].cases == len(anchored) < len(cases)
    assert scores.protocols["savanna"].overall == pytest.approx(100.0)


def test_p_at_tau_with_a_hand_written_weights_file(run, tmp_path):
    manifest = stream_run(run).manifest
    weights = {"hand": {qid: (1.0 if qid == "f1:identity" else 0.1) for qid in HAND_VALUES}}
    frozen = DifficultyWeights(tool="test", cases_hash=manifest.cases_hash, runs=("by hand",), formula="by hand",
                               floor=0.1, weights=weights)
    write_weights(tmp_path / "w.json", frozen)
    # identity .5 weighs 1, the 11 other answered items (8.5 in all) 0.1 each:
    # 100 * (.5 + .85) / (1 + 1.1) = 64.29, passing tau 60 but not tau 70 (75 unweighted passes it)
    for tau, rate in ((60.0, 100.0), (70.0, 0.0)):
        p = _hand_scores(run, protocols=("longbanana",), pass_at=PassAtTau(tau=tau, weights=frozen, weights_name="w.json"))
        assert (p["longbanana"].pass_rate, p["longbanana"].tau, p["longbanana"].weights) == (rate, tau, "w.json")
    assert "trace" not in p


def test_difficulty_weights_worked_by_hand():
    case = hand_case()
    first = hand_outcomes({"f1:existence": 1.0, "f1:identity": 0.5, "C0:spatial": 0.0, "C0:leakage": None})
    second = hand_outcomes({"f1:existence": 1.0, "f1:identity": 1.0, "C0:spatial": None, "C0:leakage": None})
    frozen = difficulty_weights([("a", "h", [(case, first)]), ("b", "h", [(case, second)])], tool="t")
    # existence: 1 - 1 = 0, raised to the floor .05; identity: 1 - (.5 + 1)/2 = .25; spatial: only
    # the first run answered, 1 - 0 = 1; leakage: no run answered, so no weight (0.5 when scored)
    assert frozen.weights == {"hand": {"C0:spatial": 1.0, "f1:existence": 0.05, "f1:identity": 0.25}}
    assert frozen.runs == ("a", "b") and frozen.cases_hash == "h"


def test_weights_from_runs_and_their_file(run_bench, shared_runs, run, tmp_path):
    good = shared_runs(run_bench, "synthetic:perfect")
    bad = shared_runs(run_bench, "synthetic:no-global")
    result = run_trace("score", str(bad), "--protocol", "longbanana", "--weights-from", str(good), str(bad),
                       "--weights-out", str(tmp_path / "w.json"), "--json")
    assert result.returncode == 0, result.stderr
    frozen = DifficultyWeights.model_validate_json((tmp_path / "w.json").read_text())
    assert frozen.runs == (str(good), str(bad)) and frozen.cases_hash == stream_run(bad).manifest.cases_hash
    # an item both runs pass weighs the floor .05; one the no-global run alone fails, 1 - (1 + 0)/2 = .5
    assert {w for case in frozen.weights.values() for w in case.values()} >= {0.05, 0.5}
    scored = json.loads(result.stdout)["protocols"]["longbanana"]
    assert scored["weights"] == str(tmp_path / "w.json")
    again = run_trace("score", str(bad), "--protocol", "longbanana", "--weights", str(tmp_path / "w.json"), "--json")
    assert json.loads(again.stdout)["protocols"]["longbanana"]["pass_rate"] == scored["pass_rate"]
    assert scored["pass_rate"] < 100.0


def test_weights_of_another_benchmark_and_bad_options_are_one_line(run, shared_runs, diagnosis_bench, tmp_path):
    other = shared_runs(diagnosis_bench, "synthetic:perfect")
    assert run_trace("score", str(other), "--protocol", "longbanana", "--weights-from", str(other),
                     "--weights-out", str(tmp_path / "w.json")).returncode == 0
    for args, message in [
        (["--weights", str(tmp_path / "w.json")], "weights of another benchmark"),
        (["--weights-from", str(run)], "give --weights-out FILE"),
        (["--weights-out", str(tmp_path / "x.json")], "give --weights-from RUN"),
        (["--tau", "150"], "--tau: 150.0 must lie between 0 and 100"),
        (["--weights", str(tmp_path / "none.json")], "no such file"),
    ]:
        result = run_trace("score", str(run), "--protocol", "longbanana", *args)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, args
    protocol = run_trace("score", str(run), "--protocol", "nope")
    assert protocol.returncode == 2 and "invalid choice: 'nope'" in protocol.stderr


def test_a_plain_scoring_has_no_protocols_key(run):
    assert "protocols" not in json.loads(score_run(run).model_dump_json())


def test_weights_refuse_runs_of_two_benchmarks():
    with pytest.raises(Exception, match="different benchmarks"):
        difficulty_weights([("a", "h1", []), ("b", "h2", [])], tool="t")


@pytest.mark.parametrize("name", [p for p in PROTOCOLS if p != "trace"])
def test_every_protocol_scores_the_hand_case_on_its_dimensions_and_has_a_report_column(run, name):
    """A new protocol is its formula, its name in PROTOCOLS and DIMENSIONS and a report column:
    a name missing from any of them fails here."""
    p = _hand_scores(run, protocols=(name,))
    assert set(p) == {name} and set(p[name].dimensions) == set(DIMENSIONS[name])
    assert all(v is not None for v in p[name].dimensions.values())
    template = data_path("templates", "report/report.html.j2").read_text(encoding="utf-8")
    assert f'("{name}", "overall"' in template
