"""The neighbours' protocols (`trace score --protocol`): each formula against a hand computation on
constructed outcomes, P@tau with a hand-written weights file, weights estimated from runs."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from test_cli import run_trace
from tracebench.operators import split_target
from tracebench.outcomes import Outcome
from tracebench.run import stream_run
from tracebench.score import DifficultyWeights, PassAtTau, difficulty_weights, score_cases, score_run, write_weights

VALUES = (1.0, 0.5, 0.0, 1.0, 1.0)


def _value(case_id: str, qid: str) -> float | None:
    """A fixed, varied outcome per question: mostly passes, some halves and fails, a few abstentions."""
    h = int(hashlib.sha256(f"{case_id}/{qid}".encode()).hexdigest(), 16)
    return None if h % 11 == 0 else VALUES[h % len(VALUES)]


def _outcomes(case) -> dict[str, Outcome]:
    out = {}
    for q in case.checklist:
        v = _value(case.id, q.id)
        out[q.id] = Outcome.of("abstain") if v is None else Outcome.of("pass" if v > 0.5 else "fail", v)
    return out


@pytest.fixture(scope="module")
def run(run_bench, shared_runs) -> Path:
    return shared_runs(run_bench, "synthetic:perfect")


@pytest.fixture(scope="module")
def cases(run):
    return [item.case for item in stream_run(run)]


def _dimension(case, q) -> str:
    """LongBanana's dimension of a question, from docs/protocols.md's table."""
    terms = {t.symbol: t for t in case.terms}
    if q.op == "compose":
        return "relational_binding" if q.aspect == "relation" else "global_constraints"
    head, g = split_target(q.target)
    if g is not None:  # a binding X ⊕ g
        return "global_constraints" if terms[g].role == "global" else "relational_binding"
    term = terms[head]
    if term.op == "f":
        return "content_fidelity"
    return {"global": "global_constraints", "relation": "relational_binding"}.get(term.role, "content_fidelity")


def _mean(xs):
    return sum(xs) / len(xs)


def _by_hand(cases, weights=None, tau=70.0):
    lb, lb_dims, passed, macro, savanna = [], {}, [], [], []
    for case in cases:
        answered = [(q, _value(case.id, q.id)) for q in case.checklist if _value(case.id, q.id) is not None]
        if not answered:
            continue
        lb.append(100 * _mean([v for _, v in answered]))
        dims = {}
        for q, v in answered:
            dims.setdefault(_dimension(case, q), []).append(v)
        for d, vs in dims.items():
            lb_dims.setdefault(d, []).append(100 * _mean(vs))
        w = [1.0 if weights is None else weights.get(case.id, {}).get(q.id, 0.5) for q, _ in answered]
        passed.append(100 * sum(wi * v for wi, (_, v) in zip(w, answered)) / sum(w) >= tau)
        images = {}
        for q, v in answered:
            for image in q.images:
                images.setdefault(image, []).append(v)
        means = [_mean(vs) for vs in images.values()]
        consistency = 0.0 if any(m == 0 for m in means) else (len(means) / sum(1 / m for m in means) if means else None)
        following = [v for q, v in answered if q.op == "compose"]
        parts = [x for x in (consistency, _mean(following) if following else None) if x is not None]
        macro.append(10 * math.prod(parts) ** (1 / len(parts)))
        identity = [v for q, v in answered if q.op == "anchor" and q.aspect == "identity"]
        other = [v for q, v in answered if not (q.op == "anchor" and q.aspect == "identity")]
        if identity:
            savanna.append(100 * (0.8 * _mean(identity) + 0.2 * _mean(other)))
    return {"longbanana": _mean(lb), "dims": {d: _mean(vs) for d, vs in lb_dims.items()},
            "pass": 100 * _mean(passed), "macro": _mean(macro), "savanna": _mean(savanna), "savanna_cases": len(savanna)}


def test_every_protocol_is_its_formula(run, cases):
    manifest = stream_run(run).manifest
    scores = score_cases(manifest, ((c, _outcomes(c)) for c in cases), root=run,
                         protocols=("trace", "longbanana", "macro", "savanna"))
    hand = _by_hand(cases)
    p = scores.protocols
    assert p["longbanana"].overall == pytest.approx(hand["longbanana"], abs=1e-4)
    for d, v in hand["dims"].items():
        assert p["longbanana"].dimensions[d] == pytest.approx(v, abs=1e-4), d
    assert set(p["longbanana"].dimensions) == {"content_fidelity", "relational_binding", "global_constraints"}
    assert p["longbanana"].pass_rate == pytest.approx(hand["pass"], abs=1e-4) and p["longbanana"].weights == "uniform"
    assert p["macro"].overall == pytest.approx(hand["macro"], abs=1e-4) and p["macro"].range == "0-10"
    assert p["savanna"].overall == pytest.approx(hand["savanna"], abs=1e-4)
    assert p["savanna"].cases == hand["savanna_cases"] < len(cases)  # cases without an anchor are not scored
    assert p["trace"].overall == scores.avg and p["trace"].dimensions["anchor"] == scores.operators["anchor"]
    for name in ("longbanana", "macro", "savanna"):
        low, high = p[name].ci95
        assert low <= p[name].overall <= high


def test_p_at_tau_with_a_hand_written_weights_file(run, cases, tmp_path):
    manifest = stream_run(run).manifest
    weights = {c.id: {q.id: (1.0 if q.aspect == "identity" else 0.1) for q in c.checklist} for c in cases[:10]}
    frozen = DifficultyWeights(tool="test", cases_hash=manifest.cases_hash, runs=("by hand",), formula="by hand",
                               floor=0.1, weights=weights)
    write_weights(tmp_path / "w.json", frozen)
    for tau in (50.0, 90.0):
        hand = _by_hand(cases, weights, tau)
        scores = score_cases(manifest, ((c, _outcomes(c)) for c in cases), root=run, protocols=("longbanana",),
                             pass_at=PassAtTau(tau=tau, weights=frozen, weights_name="w.json"))
        assert scores.protocols["longbanana"].pass_rate == pytest.approx(hand["pass"], abs=1e-4)
        assert scores.protocols["longbanana"].tau == tau and scores.protocols["longbanana"].weights == "w.json"
    assert "trace" not in scores.protocols


def test_weights_from_runs_and_their_file(run_bench, shared_runs, run, tmp_path):
    good = shared_runs(run_bench, "synthetic:perfect")
    bad = shared_runs(run_bench, "synthetic:no-global")
    result = run_trace("score", str(bad), "--protocol", "longbanana", "--weights-from", str(good), str(bad),
                       "--weights-out", str(tmp_path / "w.json"), "--json")
    assert result.returncode == 0, result.stderr
    frozen = DifficultyWeights.model_validate_json((tmp_path / "w.json").read_text())
    values = {}
    for folder in (good, bad):
        for item in stream_run(folder):
            for qid, o in item.outcomes.items():
                if o.answered:
                    values.setdefault((item.case.id, qid), []).append(o.value)
    for (cid, qid), vs in values.items():
        assert frozen.weights[cid][qid] == round(max(0.05, 1 - sum(vs) / len(vs)), 4)
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
