"""`trace agree`: agreement statistics checked against independent computations, and the labelling page."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import rankdata

from test_cli import run_trace
from test_report import FLAGS, _chromium
from tracebench.diagnose import DiagnoseOptions, diagnose_run
from tracebench.providers import ModelSettings
from tracebench.run import read_verdicts
from tracebench.operators import OPERATORS
from tracebench.outcomes import Outcome
from tracebench.sample import read_cases
from tracebench.score import instance_scores

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)


@pytest.fixture(scope="module")
def world(default_world, tmp_path_factory) -> dict:
    """The judge: tests/conftest.py's run of the default benchmark (made once per session);
    a human and a second judge made from it by flipping answers."""
    root = tmp_path_factory.mktemp("agree")
    bench = default_world["bench"]
    (root / "judge").symlink_to(default_world["run"], target_is_directory=True)
    rng = random.Random(7)
    truth = {(v.case_id, v.question_id): v.outcome.passed for v in read_verdicts(root / "judge")}
    human = {key: (not ok if rng.random() < 0.15 else ok) for key, ok in truth.items() if rng.random() < 0.9}
    lines = [json.dumps({"case_id": c, "question_id": q, "pass": ok}) for (c, q), ok in human.items()]
    (root / "human.jsonl").write_text("\n".join(lines) + "\n")
    second = {key: (not ok if rng.random() < 0.1 else ok) for key, ok in truth.items()}
    (root / "second.jsonl").write_text("".join(json.dumps({"case_id": c, "question_id": q, "pass": ok}) + "\n"
                                               for (c, q), ok in second.items()))
    return {"root": root, "bench": bench, "truth": truth, "human": human, "second": second,
            "cases": {c.id: c for c in read_cases(bench)}}


def _agree(*args: str) -> dict:
    result = run_trace("agree", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# ------------------------------------------------------------------------------ independent computations

def _kappa(x: list[bool], y: list[bool]) -> float:
    n = len(x)
    observed = sum(a == b for a, b in zip(x, y)) / n
    px, py = sum(x) / n, sum(y) / n
    expected = px * py + (1 - px) * (1 - py)
    return (observed - expected) / (1 - expected)


def _op_scores(case, answers: dict[str, bool]) -> dict[str, float]:
    """Operator scores of one case from these answers, by the project's own scoring (what is
    under test here is the agreement statistics, not the scoring): per operator, the mean of
    its instances' scores."""
    per_op = defaultdict(list)
    for (op, _), value in instance_scores(case, {q: Outcome.binary(ok) for q, ok in answers.items()}).items():
        per_op[str(op)].append(value)
    return {op: sum(v) / len(v) for op, v in per_op.items()}


def _alpha_nominal(raters: list[dict]) -> float:
    """Krippendorff's alpha for nominal data, from the coincidence matrix."""
    units = set().union(*raters)
    coincidence = Counter()
    for unit in units:
        values = [r[unit] for r in raters if unit in r]
        m = len(values)
        if m < 2:
            continue
        for i, a in enumerate(values):
            for j, b in enumerate(values):
                if i != j:
                    coincidence[(a, b)] += 1 / (m - 1)
    n = sum(coincidence.values())
    totals = Counter()
    for (a, _), w in coincidence.items():
        totals[a] += w
    observed = sum(w for (a, b), w in coincidence.items() if a != b) / n
    expected = sum(totals[a] * totals[b] for a in totals for b in totals if a != b) / (n * (n - 1))
    return 1 - observed / expected


def test_checklist_and_operator_level_agreement(world):
    result = _agree("--cases", str(world["bench"]), "--human", str(world["root"] / "human.jsonl"),
                    "--judge", str(world["root"] / "judge"))
    keys = [k for k in world["human"] if k in world["truth"]]
    x, y = [world["human"][k] for k in keys], [world["truth"][k] for k in keys]
    assert result["n"] == len(keys)
    assert result["agreement"] == pytest.approx(np.mean(np.equal(x, y)), abs=1e-4)
    assert result["cohen_kappa"] == pytest.approx(_kappa(x, y), abs=1e-4)
    by_case = defaultdict(dict)
    for c, q in keys:
        by_case[c][q] = None
    for op in OPERATORS:
        pairs = []
        for case_id, qids in by_case.items():
            a = _op_scores(world["cases"][case_id], {q: world["human"][(case_id, q)] for q in qids})
            b = _op_scores(world["cases"][case_id], {q: world["truth"][(case_id, q)] for q in qids})
            if op in a and op in b:
                pairs.append((a[op], b[op]))
        a, b = np.array(pairs).T
        got = result["operators"][op]
        assert got["cases"] == len(pairs)
        assert got["mae"] == pytest.approx(np.abs(a - b).mean(), abs=1e-4)
        if a.std() == 0 or b.std() == 0:  # a correlation is undefined: null, never NaN
            assert got["pearson"] is None and got["spearman"] is None
            continue
        assert got["pearson"] == pytest.approx(np.corrcoef(a, b)[0, 1], abs=1e-4)
        assert got["spearman"] == pytest.approx(np.corrcoef(rankdata(a), rankdata(b))[0, 1], abs=1e-4)
        for metric in ("pearson", "spearman", "mae"):
            low, high = result["ci95"]["operators"][op][metric]
            assert low <= got[metric] <= high
    low, high = result["ci95"]["agreement"]
    assert low < result["agreement"] < high
    assert set(result) >= {"n", "agreement", "cohen_kappa", "operators", "ci95"}


@pytest.mark.slow
def test_judges_against_each_other_and_krippendorff(world):
    result = _agree("--cases", str(world["bench"]), "--human", str(world["root"] / "human.jsonl"),
                    "--judge", str(world["root"] / "judge"), "--judge", str(world["root"] / "second.jsonl"))
    assert [(p["a"], Path(p["b"]).name) for p in result["pairs"]] == [
        ("human", "judge"), ("human", "second.jsonl"), (str(world["root"] / "judge"), "second.jsonl")]
    judges = result["pairs"][2]
    x = [world["truth"][k] for k in world["truth"]]
    y = [world["second"][k] for k in world["truth"]]
    assert judges["agreement"] == pytest.approx(np.mean(np.equal(x, y)), abs=1e-4)
    expected = _alpha_nominal([world["human"], world["truth"], world["second"]])
    assert result["krippendorff_alpha"] == pytest.approx(expected, abs=1e-4)
    again = _agree("--cases", str(world["bench"]), "--human", str(world["root"] / "human.jsonl"),
                   "--judge", str(world["root"] / "judge"), "--judge", str(world["root"] / "second.jsonl"))
    assert again == result  # seeded bootstrap


@pytest.mark.parametrize("levels,continuous", [(2, True), (5, False)])
def test_the_bootstrap_distributions_are_scipys(monkeypatch, levels, continuous):
    """Every metric's resamples, computed all at once, are number for number those of
    scipy.stats.bootstrap(..., vectorized=False) calling the metric on each resample of cases
    (sklearn's kappa, SciPy's correlations): the intervals are SciPy's percentile bootstrap."""
    import warnings

    from scipy import stats

    from tracebench.report import _agree

    monkeypatch.setattr(_agree, "RESAMPLES", 100)  # both ways: SciPy's draw is per resample count
    rng = np.random.default_rng(levels)
    n = 30
    counts = rng.integers(0, 4, (n, levels, levels)).astype(float)
    counts[:3] = 0
    counts[3, 0, 0] = 1  # a case answered alike throughout
    values = [0.0, 1 / 3, 0.5, 2 / 3, 1.0]
    scores = {}
    for k, op in enumerate(OPERATORS):
        has = rng.random(n) < (0.15, 0.6, 1.0, 0.9)[k % 4]
        xs = rng.random(n) if continuous else rng.choice(values, n)
        ys = np.where(rng.random(n) < 0.7, xs, rng.random(n) if continuous else rng.choice(values, n))
        scores[op] = (has, xs, ys)
    grid = sorted({0.0, 1.0} | {(k + 1) / levels for k in range(levels - 2)})
    pair = _agree._Pair("a", "b", [f"c{k}" for k in range(n)], grid, counts, scores)
    resamples = _agree._Resamples(pair, seed=3)
    metrics = [(m, None) for m in _agree.CHECKLIST_METRICS] + [
        (m, op) for op in OPERATORS for m in ("pearson", "spearman", "kendall", "mae")]
    for metric, op in metrics:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = stats.bootstrap((np.arange(n),), _agree._statistic(pair, metric, op), n_resamples=100,
                                       vectorized=False, method="percentile",
                                       random_state=np.random.default_rng(3)).bootstrap_distribution
        got = resamples.distribution(metric, op)
        assert np.array_equal(got, expected, equal_nan=True), (metric, op)
        assert np.isfinite(got).any(), (metric, op)


def test_diagnosis_agreement(world, tmp_path):
    diag = tmp_path / "diag"
    diagnose_run(world["root"] / "judge", diag, DiagnoseOptions(strategy="adaptive", settings=SETTINGS))
    attributions = [(t["case_id"], a["target"], a["source"])
                    for t in map(json.loads, (diag / "trees.jsonl").read_text().splitlines())
                    for a in t["attributions"] if a["source"]]
    changed = {k for k in range(0, len(attributions), 5)}
    lines = [json.dumps({"case_id": c, "target": t, "source": "persistent_failure" if k in changed else s})
             for k, (c, t, s) in enumerate(attributions)]
    (tmp_path / "sources.jsonl").write_text("\n".join(lines) + "\n")
    result = _agree("--cases", str(world["bench"]), "--human-diagnosis", str(tmp_path / "sources.jsonl"),
                    "--diagnosis", str(diag))
    same = sum(1 for k, (_, _, s) in enumerate(attributions) if k not in changed or s == "persistent_failure")
    assert result["diagnosis"]["n"] == len(attributions)
    assert result["diagnosis"]["agreement"] == pytest.approx(same / len(attributions), abs=1e-4)


@pytest.mark.parametrize("line,message", [
    ('{"case_id": "s1-00000", "question_id": "f1:existence"}',
     'human.jsonl:1: record: give "pass" (true or false) or "value" (0 to 1), one of them'),
    ('{"case_id": "s1-00000", "question_id": "f1:existence", "pass": true, "value": 1}',
     'human.jsonl:1: record: give "pass" (true or false) or "value" (0 to 1), one of them'),
    ('{"case_id": "s1-00000", "question_id": "f1:existence", "value": 2}', "human.jsonl:1: value:"),
    ('{"case_id": "nope", "question_id": "f1:existence", "pass": true}',
     "human.jsonl:1: case_id: 'nope' is not a case of the benchmark"),
    ('{"case_id": "s1-00000", "question_id": "f9:nothing", "pass": true}', "human.jsonl:1: question_id:"),
    ('{"case_id": "s1-00000", "question_id": "QID", "pass": true}\n'
     '{"case_id": "s1-00000", "question_id": "QID", "pass": false}', "human.jsonl:2: s1-00000 QID is labelled twice"),
    ("not json", "human.jsonl:1:"),
])
def test_bad_labels_are_one_line(world, tmp_path, line, message):
    qid = world["cases"]["s1-00000"].checklist[0].id
    line, message = line.replace("QID", qid), message.replace("QID", qid)
    (tmp_path / "human.jsonl").write_text(line + "\n")
    result = run_trace("agree", "--cases", str(world["bench"]), "--human", str(tmp_path / "human.jsonl"),
                       "--judge", str(world["root"] / "judge"))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_export_sample_and_label_in_a_browser(world, tmp_path):
    from playwright.sync_api import sync_playwright

    out = tmp_path / "sample"
    result = run_trace("agree", "--cases", str(world["bench"]), "--export-sample", "16", "--judge",
                       str(world["root"] / "judge"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    sample = [json.loads(line) for line in (out / "sample.jsonl").read_text().splitlines()]
    assert len(sample) == 16 and Counter(s["slot"] for s in sample) == {s: 2 for s in range(1, 9)}  # stratified
    executable = _chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=FLAGS)
        page = browser.new_context(accept_downloads=True).new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((out / "annotate.html").as_uri())
        assert page.locator("section.case").count() == 16
        assert page.locator("img[src^='data:image/']").count() > 16
        page.locator("input[value=yes]").evaluate_all("els => els.forEach(e => e.click())")
        with page.expect_download() as download:
            page.click("#download")
        labels_path = tmp_path / "labels.jsonl"
        download.value.save_as(labels_path)
        browser.close()
    assert errors == []
    labels = [json.loads(line) for line in labels_path.read_text().splitlines()]
    questions = {(c.id, q.id): q for c in world["cases"].values() for q in c.checklist
                 if c.id in {s["case_id"] for s in sample}}
    assert len(labels) == len(questions)
    for label in labels:  # "yes" everywhere: passes exactly where yes is the passing answer
        assert label["pass"] == (questions[(label["case_id"], label["question_id"])].expected == "yes")
    result = _agree("--cases", str(world["bench"]), "--human", str(labels_path), "--judge", str(world["root"] / "judge"))
    assert result["n"] == len(labels)


def test_undefined_statistics_are_null_not_nan(world, tmp_path):
    keys = list(world["truth"])[:30]
    files = []
    lone = list(world["truth"])[30]
    for k, extra in enumerate((None, None, lone)):
        rows = [{"case_id": c, "question_id": q, "pass": True} for c, q in keys]
        if extra is not None:
            rows.append({"case_id": extra[0], "question_id": extra[1], "pass": False})  # answered by this rater alone
        files.append(tmp_path / f"r{k}.jsonl")
        files[-1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_trace("agree", "--cases", str(world["bench"]), "--human", str(files[0]), "--judge", str(files[1]),
                       "--judge", str(files[2]), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert data["krippendorff_alpha"] is None and data["cohen_kappa"] is None and data["agreement"] == 1.0
    assert data["operators"]["anchor"]["pearson"] is None


# ------------------------------------------------------------------------------ graded labels

@pytest.fixture(scope="module")
def graded(world, tmp_path_factory) -> dict:
    """Two graded raters (ternary values) made from the judge's answers: the second grades a
    half where the first is sure, and opposite ends on a known set of questions."""
    root = tmp_path_factory.mktemp("graded")
    rng = random.Random(3)
    truth = world["truth"]
    a = {k: (0.5 if rng.random() < 0.15 else float(ok)) for k, ok in truth.items()}
    b = {}
    for k, v in a.items():
        r = rng.random()
        b[k] = (1.0 - v) if r < 0.05 and v != 0.5 else 0.5 if r < 0.2 else v
    for name, labels in (("a", a), ("b", b)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"case_id": c, "question_id": q, "value": v}) + "\n"
                                                    for (c, q), v in labels.items()))
    return {"root": root, "a": a, "b": b}


def test_graded_agreement_is_sklearn_scipy_and_a_hand_count(world, graded):
    from scipy.stats import kendalltau
    from sklearn.metrics import cohen_kappa_score

    result = _agree("--cases", str(world["bench"]), "--judge", str(graded["root"] / "a.jsonl"),
                    "--judge", str(graded["root"] / "b.jsonl"))
    a, b = graded["a"], graded["b"]
    keys = sorted(a)
    levels = {0.0: 0, 0.5: 1, 1.0: 2}
    x, y = [levels[a[k]] for k in keys], [levels[b[k]] for k in keys]
    assert result["n"] == len(keys) and result["levels"] == [0.0, 0.5, 1.0]
    assert result["agreement"] == pytest.approx(sum(p == q for p, q in zip(x, y)) / len(keys), abs=1e-4)
    assert result["quadratic_kappa"] == pytest.approx(cohen_kappa_score(x, y, weights="quadratic"), abs=1e-4)
    assert result["cohen_kappa"] == pytest.approx(cohen_kappa_score(x, y), abs=1e-4)
    opposite = sum({a[k], b[k]} == {0.0, 1.0} for k in keys)
    assert opposite > 5 and result["opposite_end"] == pytest.approx(opposite / len(keys), abs=1e-4)
    low, high = result["ci95"]["quadratic_kappa"]
    assert low <= result["quadratic_kappa"] <= high
    # Kendall's tau of the operator scores per case, as scipy computes it
    cases = world["cases"]
    for op in OPERATORS:
        xs, ys = [], []
        for case_id, case in cases.items():
            qa = {q: Outcome.of("pass" if v > 0.5 else "fail", v) for (c, q), v in a.items() if c == case_id}
            qb = {q: Outcome.of("pass" if v > 0.5 else "fail", v) for (c, q), v in b.items() if c == case_id}
            sa = [s for (o, _), s in instance_scores(case, qa).items() if o == op]
            sb = [s for (o, _), s in instance_scores(case, qb).items() if o == op]
            if sa and sb:
                xs.append(sum(sa) / len(sa))
                ys.append(sum(sb) / len(sb))
        got = result["operators"][op]["kendall"]
        if got is not None:
            assert got == pytest.approx(kendalltau(xs, ys).statistic, abs=1e-4), op


def test_graded_krippendorff_is_ordinal(world, graded):
    import krippendorff

    result = _agree("--cases", str(world["bench"]), "--judge", str(graded["root"] / "a.jsonl"),
                    "--judge", str(graded["root"] / "b.jsonl"), "--judge", str(world["root"] / "judge"))
    raters = [graded["a"], graded["b"], {k: float(v) for k, v in world["truth"].items()}]
    keys = sorted(set().union(*raters))
    data = np.array([[r.get(k, np.nan) for k in keys] for r in raters])
    assert result["krippendorff_alpha"] == pytest.approx(
        krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal"), abs=1e-4)


# ------------------------------------------------------------------------------ the zoo's truth

def test_truth_examines_an_exact_and_an_erring_oracle(world, tmp_path):
    from tracebench.run import RunOptions, run_benchmark

    bench = world["bench"]
    exact = _agree("--truth", str(world["root"] / "judge"))
    assert exact["accuracy"] == 1.0 and exact["false_pass"] == 0.0 and exact["false_fail"] == 0.0
    assert exact["yes_bias"] == 0.0 and exact["pass_excess"] == 0.0 and exact["abstention_rate"] == 0.0
    run_benchmark(bench, tmp_path / "lenient", RunOptions(generator="synthetic:global-interference,composition-interference:2",
                  judges=["oracle:yes-bias=0.3"], settings=SETTINGS))
    lenient = _agree("--truth", str(tmp_path / "lenient"))
    truth = {(v.case_id, v.question_id): v.outcome.passed for v in read_verdicts(world["root"] / "judge")}
    judged = {(v.case_id, v.question_id): v.outcome.passed for v in read_verdicts(tmp_path / "lenient")}
    questions = {(c.id, q.id): q for c in world["cases"].values() for q in c.checklist}
    broken = [k for k, ok in truth.items() if not ok]
    false_pass = sum(judged[k] for k in broken) / len(broken)
    assert lenient["false_pass"] == pytest.approx(false_pass, abs=1e-4) and false_pass > 0.1
    # yes-bias answers "yes": it passes a broken requirement asked "is it there?", and fails one that holds
    # asked "is something wrong?" (expected no)
    holds_no = [k for k, ok in truth.items() if ok and questions[k].expected == "no"]
    assert lenient["false_fail"] > 0 and sum(not judged[k] for k in holds_no) > 0
    assert lenient["accuracy"] == pytest.approx(sum(judged[k] == truth[k] for k in truth) / len(truth), abs=1e-4)
    # its yes-bias: how much more often it answers "yes" than the truth would; where the truth is "no"
    # the oracle says "yes" with probability 0.3, so the excess is 0.3 x the share of true "no"s
    said_yes = [v.votes[0].answer == "yes" for v in read_verdicts(tmp_path / "lenient")]
    true_no = sum((questions[k].expected == "yes") != ok for k, ok in truth.items())
    assert lenient["yes_bias"] == pytest.approx((sum(said_yes) - (len(truth) - true_no)) / len(truth), abs=1e-4)
    assert abs(lenient["yes_bias"] - 0.3 * true_no / len(truth)) < 5 * (0.21 * true_no) ** 0.5 / len(truth)


def test_the_exam_is_built_once_and_judged(tmp_path):
    first = run_trace("agree", "--exam", "--judge", "oracle", "--scale", "ternary", "--out", str(tmp_path / "r"),
                      "--json")
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["accuracy"] == 1.0 and result["scale"] == "ternary" and result["questions"] > 1000
    assert result["opposite_end"] == 0.0 and set(result["by_operator"]) == set(OPERATORS)
    assert "rejection" in result["by_aspect"]  # the exam holds distractors
    erring = run_trace("agree", "--exam", "--judge", "oracle:flip=0.1", "--out", str(tmp_path / "e"), "--json")
    assert erring.returncode == 0, erring.stderr
    accuracy, n = json.loads(erring.stdout)["accuracy"], json.loads(erring.stdout)["answered"]
    assert abs(accuracy - 0.9) < 5 * (0.09 / n) ** 0.5  # the flip rate, within 5 standard errors
    bad = run_trace("agree", "--truth", str(tmp_path / "r"), "--judge", str(tmp_path / "r"))
    assert bad.returncode == 2 and "give no --judge" in bad.stderr


def test_a_binary_ensemble_run_labels_pass_or_fail(world, tmp_path):
    """The mean of two binary judges may be 0.5: as a label it is a fail, not a third category."""
    from tracebench.run import RunOptions, run_benchmark

    run_benchmark(world["bench"], tmp_path / "pair", RunOptions(generator="synthetic:global-interference,composition-interference:2",
                  judges=["oracle", "oracle:flip=0.3"], settings=SETTINGS))
    values = {v.value for v in read_verdicts(tmp_path / "pair")}
    assert 0.5 in values
    result = _agree("--cases", str(world["bench"]), "--judge", str(world["root"] / "judge"), "--judge",
                    str(tmp_path / "pair"))
    assert result["levels"] == [0.0, 1.0]
    truth = _agree("--truth", str(tmp_path / "pair"))
    passed = {(v.case_id, v.question_id): v.outcome.passed for v in read_verdicts(tmp_path / "pair")}
    assert truth["accuracy"] == pytest.approx(sum(passed[k] == ok for k, ok in world["truth"].items())
                                              / len(world["truth"]), abs=1e-4)
    wrong = run_trace("agree", "--truth", str(tmp_path / "pair"), "--cases", str(tmp_path))
    assert wrong.returncode == 2 and "not a benchmark folder" in wrong.stderr


def test_the_exam_over_http_takes_a_judge_url(tmp_path, monkeypatch):
    from tracebench.report import exam_benchmark
    from tracebench.serve import ZooServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-exam-over-loopback")
    with ZooServer([exam_benchmark()]).start() as server:
        result = run_trace("agree", "--exam", "--judge", f"openai:oracle@{server.base_url}", "--out",
                           str(tmp_path / "r"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["accuracy"] == 1.0


def test_an_exam_the_judge_abstains_on_exits_3_with_the_retry_line(tmp_path):
    plugin = tmp_path / "garbled.py"
    plugin.write_text("from tracebench.providers import Judge\n\n\nclass Garbled(Judge):\n"
                      "    spec = 'python:garbled'\n\n    def ask(self, case, questions, image, references):\n"
                      "        return 'Sure! {\"answers\": [oops'\n\n\njudge = Garbled\n")
    result = run_trace("agree", "--exam", "--judge", f"python:{plugin}", "--out", str(tmp_path / "r"))
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "questions abstained" in line and "the reply is not the expected JSON" in line
    assert line.endswith("--retry-abstained") and "none answered" in result.stdout
