"""Several samples per case (trace run --samples K): K generations of every case, each with its own
recorded seed and judged; a case scores the mean over its samples, intervals resample samples
within cases; and every reader (score, compare, agree, merge, rejudge, export, report, diagnose)
reads the K generations. Checked against runs of one sample made apart and against known truth."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from statistics import fmean

import pytest

from openai_server import OpenAIStub
from test_cli import run_trace
from tracebench.providers import ModelSettings
from tracebench.providers._local import sample_seed
from tracebench.records import RUN_MANIFEST, read_cases
from tracebench.run import load_run, RunOptions, run_benchmark, shard_of
from tracebench.score import case_scores, instance_scores, score_run
from tracebench.score._score import _ci

GENERATOR = "synthetic:noise:0.2"  # every question flips with probability 0.2, drawn with the sample's seed
SETTINGS = ModelSettings(max_retries=0, timeout=30.0)


@pytest.fixture(scope="module")
def small(small_bench):
    """16 cases of slot levels 1-4 (conftest's small_bench)."""
    return small_bench


@pytest.fixture(scope="module")
def sampled(small, shared_folder):
    """The zoo's noisy generator judged by the oracle, 3 samples a case (read only)."""
    return shared_folder("small-samples-3", lambda out: run_benchmark(small, out, RunOptions(generator=GENERATOR,
                                                                      judges=["oracle"], settings=SETTINGS, samples=3)))


@pytest.fixture(scope="module")
def apart(small, shared_folder):
    """The same three generations made as three runs of one sample each (sample 0, 1, 2)."""
    def make(out: Path) -> None:
        for k in range(3):
            run_benchmark(small, out / str(k), RunOptions(generator=GENERATOR, judges=["oracle"],
                          settings=replace(SETTINGS, sample=k)))

    return shared_folder("small-samples-apart", make)


def _lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "verdicts.jsonl").read_text().splitlines()]


def test_k_samples_are_the_k_generations_made_apart_with_recorded_seeds(small, sampled, apart):
    manifest = RUN_MANIFEST.read(sampled)
    assert manifest.samples == 3 and manifest.sample_seeds == (0, sample_seed(0, 1), sample_seed(0, 2))
    assert len(set(manifest.sample_seeds)) == 3
    cases = list(read_cases(small))
    lines = _lines(sampled)
    assert len(lines) == 3 * sum(len(c.checklist) for c in cases) == manifest.verdicts
    for k in range(3):  # sample k's verdicts and image are what a run of generation k alone gives
        mine = [{key: v for key, v in line.items() if key != "sample"} for line in lines
                if line.get("sample", 0) == k]
        assert mine == _lines(apart / str(k))
        for case in cases:
            name = case.id if k == 0 else f"{case.id}~{k}"
            assert (sampled / "images" / f"{name}.png").read_bytes() == \
                (apart / str(k) / "images" / f"{case.id}.png").read_bytes()
    assert "sample" not in lines[0] and {line.get("sample") for line in lines} == {None, 1, 2}
    # the samples differ: the noise is drawn with each sample's seed
    assert any((sampled / "images" / f"{c.id}.png").read_bytes() != (sampled / "images" / f"{c.id}~1.png").read_bytes()
               for c in cases)


def test_one_sample_is_the_run_of_before_byte_for_byte(small, apart, tmp_path):
    run_benchmark(small, tmp_path / "one", RunOptions(generator=GENERATOR, judges=["oracle"], settings=SETTINGS, samples=1))
    assert (tmp_path / "one" / "verdicts.jsonl").read_bytes() == (apart / "0" / "verdicts.jsonl").read_bytes()
    assert (tmp_path / "one" / "run.json").read_text().replace(str(tmp_path / "one"), "") == \
        (apart / "0" / "run.json").read_text().replace(str(apart / "0"), "")
    assert "samples" not in json.loads((tmp_path / "one" / "run.json").read_text())


def test_a_case_scores_the_mean_over_its_samples(small, sampled, apart):
    scores = score_run(sampled)
    separate = [load_run(apart / str(k)) for k in range(3)]
    overall = []
    for case in read_cases(small):
        per_sample = [case_scores(instance_scores(case, run.verdicts[case.id]))["overall"] for run in separate]
        overall.append(round(fmean(per_sample), 4))
    assert scores.case_weighted.overall == round(fmean(overall), 4)
    assert scores.cases == 16
    assert scores.samples is not None and scores.samples.samples == 3 and scores.samples.cases == 16
    assert 0 < scores.samples.spread < 0.5 and 0 < scores.samples.disagree <= 1
    # the same numbers from the folder read whole as from the stream
    from tracebench.score import score_folder

    assert score_folder(load_run(sampled)) == scores
    plain = score_run(apart / "0")
    assert plain.samples is None and "samples" not in plain.model_dump(mode="json")


def test_the_nested_interval_resamples_cases_not_samples():
    import numpy as np

    rng = np.random.default_rng(4)
    centres = rng.uniform(0.2, 0.8, 60)
    inner = [tuple(float(np.clip(c + rng.normal(0, 0.02), 0, 1)) for _ in range(4)) for c in centres]
    means = [fmean(values) for values in inner]
    # samples alike within each case: the interval of case means, as wide as one sample's would be ...
    nested = _ci(means, 0, inner)
    plain = _ci(means, 0)
    naive = _ci([v for values in inner for v in values], 0)  # K samples taken for K times the cases
    width = lambda ci: ci[1] - ci[0]  # noqa: E731
    assert width(nested) > 1.5 * width(naive)
    assert abs(width(nested) - width(plain)) < 0.25 * width(plain)
    # ... and with identical samples the very interval of the case means (the same case draws)
    assert _ci(means, 7, [(m, m, m) for m in means]) == _ci(means, 7)


def test_shards_of_a_sampled_run_merge_to_it_and_a_rejudge_keeps_its_samples(small, sampled, tmp_path):
    for i in (1, 2):
        run_benchmark(small, tmp_path / f"s{i}", RunOptions(generator=GENERATOR, judges=["oracle"], settings=SETTINGS,
                      samples=3, shard=(i, 2)))
    merged = run_trace("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"))
    assert merged.returncode == 0, merged.stderr
    assert (tmp_path / "m" / "verdicts.jsonl").read_bytes() == (sampled / "verdicts.jsonl").read_bytes()
    assert sorted(p.name for p in (tmp_path / "m" / "images").iterdir()) == \
        sorted(p.name for p in (sampled / "images").iterdir())
    one = tmp_path / "one"
    run_benchmark(small, one, RunOptions(generator=GENERATOR, judges=["oracle"], settings=SETTINGS, shard=(2, 2)))
    refused = run_trace("merge", str(tmp_path / "s1"), str(one), "--out", str(tmp_path / "x"))
    assert refused.returncode == 2 and "samples" in refused.stderr and not (tmp_path / "x").exists()
    again = run_trace("rejudge", str(sampled), "--judge", "oracle", "--out", str(tmp_path / "rj"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "rj" / "verdicts.jsonl").read_bytes() == (sampled / "verdicts.jsonl").read_bytes()
    assert RUN_MANIFEST.read(tmp_path / "rj").sample_seeds == RUN_MANIFEST.read(sampled).sample_seeds


def test_a_budget_stops_between_cases_and_the_resumed_run_is_the_whole_one(small, sampled, tmp_path):
    base = ["run", str(small), "--generator", GENERATOR, "--judge", "oracle", "--samples", "3",
            "--out", str(tmp_path / "run")]
    first = run_trace(*base, "--max-calls", "20")  # a case takes 6 calls: 3 cases fit
    assert first.returncode == 3, first.stderr
    manifest = RUN_MANIFEST.read(tmp_path / "run")
    assert manifest.cases == 3 and sum(manifest.calls.values()) == 18
    held = {}
    for line in _lines(tmp_path / "run"):
        held.setdefault(line["case_id"], set()).add(line.get("sample", 0))
    assert all(samples == {0, 1, 2} for samples in held.values())  # each case with all its samples
    other = run_trace("run", str(small), "--generator", GENERATOR, "--judge", "oracle", "--samples", "2",
                      "--out", str(tmp_path / "run"))
    assert other.returncode == 2 and "samples" in other.stderr
    last = run_trace(*base)
    assert last.returncode == 0, last.stderr
    assert RUN_MANIFEST.read(tmp_path / "run").cache_hits == 0  # the 3 cases done (all their samples) kept, not redone
    assert (tmp_path / "run" / "verdicts.jsonl").read_bytes() == (sampled / "verdicts.jsonl").read_bytes()
    for k in ("0", "1001", "100000000"):  # at most 1000 generations a case: no seed list of a hundred million
        bad = run_trace(*base[:-2], "--samples", k, "--out", str(tmp_path / "bad"))
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--samples" in bad.stderr, bad.stderr
        assert not (tmp_path / "bad").exists()


def test_the_judge_is_examined_on_every_sample_against_the_truth(sampled):
    result = run_trace("agree", "--truth", str(sampled), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["questions"] == RUN_MANIFEST.read(sampled).verdicts and data["accuracy"] == 1.0
    twice = run_trace("agree", "--cases", str(RUN_MANIFEST.read(sampled).cases_dir), "--judge", str(sampled),
                      "--judge", str(sampled), "--json")
    assert twice.returncode == 0, twice.stderr
    assert json.loads(twice.stdout)["n"] == RUN_MANIFEST.read(sampled).verdicts


def test_a_sampled_run_exports_imports_and_reports_its_samples(sampled, tmp_path):
    from test_report_page import unpack

    pytest.importorskip("datasets")
    exported = run_trace("export", str(sampled), "--out", str(tmp_path / "ex"))
    assert exported.returncode == 0, exported.stderr
    imported = run_trace("import", str(tmp_path / "ex"), "--out", str(tmp_path / "im"))
    assert imported.returncode == 0, imported.stderr
    assert (tmp_path / "im" / "verdicts.jsonl").read_bytes() == (sampled / "verdicts.jsonl").read_bytes()
    for image in (sampled / "images").iterdir():
        assert (tmp_path / "im" / "images" / image.name).read_bytes() == image.read_bytes()
    report = run_trace("report", str(sampled), "--out", str(tmp_path / "page.html"))
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "page.html").read_text()
    spread = score_run(sampled).samples
    assert 'data-samples="3"' in page and f"{spread.spread:.4f}" in page and f"{100 * spread.disagree:.1f}%" in page
    _, bodies = unpack(page)
    assert len(bodies) == 16 and all(body.count('data-sample="') == 3 for body in bodies.values())
    assert all("sample 2, oracle:" in body for body in bodies.values())  # each judge line names its sample


def test_a_diagnosis_of_a_sampled_run_judges_every_node_as_the_run_judged_its_cases(sampled, tmp_path):
    result = run_trace("diagnose", str(sampled), "--out", str(tmp_path / "diag"), "--cases", "failing")
    assert result.returncode == 0, result.stderr
    from tracebench.records import DIAGNOSIS_MANIFEST, TREES

    manifest = DIAGNOSIS_MANIFEST.read(tmp_path / "diag")
    assert manifest.roots_from_run is True and manifest.repeats == 3  # the run's K, not one new generation
    failing = {case_id for case_id, outcomes in load_run(sampled).verdicts.items()
               if any(o.failed for o in outcomes.values())}
    trees = list(TREES.read(tmp_path / "diag"))
    assert {tree.case_id for tree in trees} == failing
    # every node judged over K generations; a root's are the run's K samples, so it fails as the run's majority
    assert all(len(node.sample_images) == 2 and all(len(s) == 3 for s in node.sample_status.values())
               for tree in trees for node in tree.nodes if node.evaluated and node.same_as is None)
    for tree in trees:
        root = tree.nodes[0]
        assert root.sample_images == tuple(str((sampled / "images" / f"{tree.case_id}~{k}.png").resolve())
                                           for k in (1, 2))
        assert any(status == "fail" for status in root.status.values())
    rounds = sorted((tmp_path / "diag" / "rounds").glob("*/cases/cases.jsonl"))
    assert not any(f'"id":"{tree.case_id}.N0"' in path.read_text() for path in rounds for tree in trees)
    once = run_trace("diagnose", str(sampled), "--out", str(tmp_path / "once"), "--cases", "failing",
                     "--repeats", "1")
    assert once.returncode == 0, once.stderr
    assert DIAGNOSIS_MANIFEST.read(tmp_path / "once").repeats == 1
    # more repeats than the run's samples: a root's generations 1 and 2 are still the run's, only 3 is made
    more = run_trace("diagnose", str(sampled), "--out", str(tmp_path / "more"), "--cases", "failing",
                     "--repeats", "4")
    assert more.returncode == 0, more.stderr
    for tree in TREES.read(tmp_path / "more"):
        root = tree.nodes[0]
        assert root.sample_images[:2] == tuple(str((sampled / "images" / f"{tree.case_id}~{k}.png").resolve())
                                               for k in (1, 2))
        assert len(root.sample_images) == 3 and (tmp_path / "more" / root.sample_images[2]).is_file()
        assert all(len(s) == 4 for s in root.sample_status.values())


def test_a_labelling_page_of_a_sampled_run_shows_every_generation(sampled, tmp_path):
    cases_dir = RUN_MANIFEST.read(sampled).cases_dir
    result = run_trace("agree", "--cases", str(cases_dir), "--judge", str(sampled), "--export-sample", "4",
                       "--out", str(tmp_path / "label"))
    assert result.returncode == 0, result.stderr
    assert "4 cases (3 generations each) to label" in result.stdout
    page = (tmp_path / "label" / "annotate.html").read_text()
    chosen = [json.loads(line)["case_id"] for line in (tmp_path / "label" / "sample.jsonl").read_text().splitlines()]
    assert len(chosen) == 4 and page.count('<section class="case"') == 12 and "Label 12 generations" in page
    for case_id in chosen:  # named as trace agree --human reads a generation's labels
        assert all(f'data-case="{name}"' in page for name in (case_id, f"{case_id}~1", f"{case_id}~2"))
    assert page.count("generated, generation 2<") == 4


def test_a_run_folder_claiming_more_generations_than_allowed_is_refused_by_file_and_field(sampled, tmp_path):
    import shutil

    from tracebench.records import MAX_SAMPLES

    for k, ok in ((MAX_SAMPLES, True), (MAX_SAMPLES + 1, False)):
        crafted = tmp_path / f"k{k}"
        shutil.copytree(sampled, crafted)
        manifest = json.loads((crafted / "run.json").read_text())
        (crafted / "run.json").write_text(json.dumps({**manifest, "samples": k}))
        result = run_trace("score", str(crafted))
        if ok:  # the bound itself is a valid count; this run then lacks most of its samples' verdicts
            assert "at most" not in result.stderr, result.stderr
        else:
            assert result.returncode == 2 and result.stderr.strip().endswith(
                f"run.json:1: samples: expected a number of at most {MAX_SAMPLES}"), result.stderr
            assert result.stderr.count("\n") == 1


def test_the_protocols_intervals_are_nested_too(small, sampled, apart):
    from tracebench.score._protocols import _case_scores

    separate = [load_run(apart / str(k)) for k in range(3)]
    inner = [tuple(_case_scores(c, run.verdicts[c.id], None, 70.0)["longbanana"]["overall"] for run in separate)
             for c in read_cases(small)]
    scores = score_run(sampled, protocols=["longbanana"]).protocols["longbanana"]
    assert scores.ci95 == _ci([fmean(values) for values in inner], 0, inner)
    assert scores.ci95 != _ci([fmean(values) for values in inner], 0)  # not the interval of the case means alone


def test_the_report_shows_each_question_s_majority_over_the_samples(sampled, tmp_path):
    import re

    from test_report_page import unpack

    run = load_run(sampled)
    report = run_trace("report", str(sampled), "--out", str(tmp_path / "page.html"))
    assert report.returncode == 0, report.stderr
    _, bodies = unpack((tmp_path / "page.html").read_text())
    differs = 0
    for case_id, body in bodies.items():
        for qid, outcome in run.verdicts[case_id].items():
            row = re.search(rf"<code>{re.escape(qid)}</code>.*?<td class=\"v-(\w+)\">", body, re.S)
            assert row and row.group(1) == outcome.status.value
            differs += run.samples[case_id][0][qid].status is not outcome.status
    assert differs  # some question's first sample says otherwise than the majority the page shows


def test_later_samples_of_a_served_generator_are_sent_their_own_seed(small, tmp_path):
    with OpenAIStub(lambda request: "unused") as stub:
        result = run_trace("run", str(small), "--generator", "openai:image-model", "--judge", "oracle", "--base-url",
                           stub.base_url, "--max-retries", "0", "--generator-option", "seed=7", "--samples", "2",
                           "--shard", "1/8", "--out", str(tmp_path / "run"))
        assert result.returncode == 3, result.stderr  # the stub's image holds no truth: the oracle abstains
        edits = [r for r in stub.received if r.path == "/v1/images/edits"]
    seeds = [int(r.raw.split(b'name="seed"')[1].split(b"\r\n\r\n", 1)[1].split(b"\r\n", 1)[0]) for r in edits]
    manifest = RUN_MANIFEST.read(tmp_path / "run")
    assert manifest.sample_seeds == (7, sample_seed(7, 1)) and manifest.samples == 2
    assert edits and sorted(seeds) == sorted([7, sample_seed(7, 1)] * (len(edits) // 2))
    assert len(edits) == 2 * sum(shard_of(c.id, 8) == 1 for c in read_cases(small))  # two generations a case


def test_the_dry_run_counts_every_sample_and_the_cache_of_each(small, sampled, apart, tmp_path):
    cases = len(list(read_cases(small)))
    fresh = run_benchmark(small, tmp_path / "new", RunOptions(generator=GENERATOR, judges=["oracle"], settings=SETTINGS,
                          samples=3, dry_run=True))
    assert (fresh.cases, fresh.generations, fresh.judge_calls) == (cases, 3 * cases, {"oracle": 3 * cases})
    assert not (tmp_path / "new").exists()
    whole = run_benchmark(small, tmp_path / "new", RunOptions(generator=GENERATOR, judges=["oracle"], settings=SETTINGS,
                          samples=3, dry_run=True, cache_dir=sampled / "cache"))
    assert (whole.generations, whole.generations_cached, whole.judge_calls_cached) == (0, 3 * cases,
                                                                                       {"oracle": 3 * cases})
    first = run_benchmark(small, tmp_path / "new", RunOptions(generator=GENERATOR, judges=["oracle"], settings=SETTINGS,
                          samples=3, dry_run=True, cache_dir=apart / "0" / "cache"))  # sample 0 alone is cached
    assert (first.generations, first.generations_cached, first.judge_calls) == (2 * cases, cases,
                                                                                {"oracle": 2 * cases})


# ------------------------------------------------------------------ review: the readers' remaining holes

def _split_samples(cases) -> list[tuple]:
    """Each case with two samples: every question passes in the first, fails in the second (each
    case's mean is 0.5 on every operator: only the samples vary, never the cases)."""
    from tracebench.outcomes import FAILED, PASSED

    return [(case, ({q.id: PASSED for q in case.checklist}, {q.id: FAILED for q in case.checklist}))
            for case in cases]


def test_the_nested_intervals_resample_the_samples_within_each_case(small, sampled, tmp_path):
    from tracebench.score import score_cases

    assert _ci([0.5] * 40, 0) == (0.5, 0.5)  # the case means alone do not vary ...
    low, high = _ci([0.5] * 40, 0, [(0.0, 1.0)] * 40)  # ... their samples do
    assert low < 0.45 and high > 0.55
    cases = list(read_cases(small))
    scores = score_cases(RUN_MANIFEST.read(sampled), _split_samples(cases), root=tmp_path)
    assert scores.avg == 0.5 and scores.case_weighted.overall == 0.5
    for ci in (scores.ci95["avg"], scores.case_weighted.ci95["overall"]):  # the slot levels' table and the cases'
        assert ci[0] < 0.5 < ci[1]
    first = score_cases(RUN_MANIFEST.read(sampled), [(c, samples[0]) for c, samples in _split_samples(cases)],
                        root=tmp_path)
    assert first.ci95["avg"] == (1.0, 1.0)
    # half the cases with samples alike, half split: the spread and the share disagreeing
    mixed = [(case, (samples[0], samples[0]) if k % 2 else samples) for k, (case, samples)
             in enumerate(_split_samples(cases))]
    spread = score_cases(RUN_MANIFEST.read(sampled), mixed, root=tmp_path).samples
    assert (spread.samples, spread.cases, spread.spread, spread.disagree) == (2, 16, 0.25, 0.5)


def test_difficulty_weights_of_a_sampled_run_are_the_mean_over_its_samples(sampled):
    from types import SimpleNamespace

    from tracebench.outcomes import FAILED, PASSED
    from tracebench.score import difficulty_weights, weights_from_runs

    case = SimpleNamespace(id="c")
    runs = [("a", "h", [(case, ({"q": PASSED, "r": PASSED}, {"q": FAILED, "r": PASSED}, {"q": PASSED}))]),
            ("b", "h", [(case, {"q": FAILED})])]
    weights = difficulty_weights(runs, tool="t").weights["c"]
    assert weights == {"q": round(1 - fmean([2 / 3, 0.0]), 4), "r": 0.05}  # run a: 2 of 3 samples pass q; not a tie
    run = load_run(sampled)
    found = weights_from_runs([sampled]).weights
    for case_id, samples in run.samples.items():
        for qid, weight in found[case_id].items():
            values = [s[qid].value for s in samples if qid in s and s[qid].answered]
            assert weight == round(max(0.05, 1 - fmean(values)), 4)


def test_a_cluttered_case_counts_once_in_the_selection_scores_whatever_its_samples(tmp_path, sampled):
    from tracebench.records import GenerationInfo
    from tracebench.sample import SampleOptions, sample_benchmark
    from tracebench.sample._clutter import ClutterSpec
    from tracebench.score import score_cases
    from tracebench.jsonfiles import write_json

    sample_benchmark(tmp_path / "bench", SampleOptions(slots=(2,), per_slot=2, seed=3, applications=False,
                                                       clutter=ClutterSpec(1, 1, pool=True)))
    cases = list(read_cases(tmp_path / "bench"))
    images = tmp_path / "run" / "images"
    images.mkdir(parents=True)
    for case in cases:  # sample 0 used every reference, sample 1 none
        write_json(images / f"{case.id}.json",
                   GenerationInfo(case_id=case.id, used_references=tuple(r.image for r in case.references)))
        write_json(images / f"{case.id}~1.json", GenerationInfo(case_id=case.id, used_references=(), sample=1))
    selection = score_cases(RUN_MANIFEST.read(sampled), _split_samples(cases), root=tmp_path / "run").selection
    assert selection.cases == len(cases) and selection.distractors == sum(len(c.distractors) for c in cases)
    assert selection.distractors_used == 0.5 and selection.targets == sum(len(c.clutter.pooled) for c in cases)
    rejection = score_cases(RUN_MANIFEST.read(sampled), _split_samples(cases), root=tmp_path / "run").rejection
    assert rejection and all(r.rate == 0.5 for r in rejection.values())  # passed in one sample of two


@pytest.mark.parametrize("damage, message", [
    ("padded", "is not the image of a later sample"),  # s~01.png: a name no reader of the run looks for
    ("twice", "has an image already"),  # s~1.png and s~1.jpg: two images of one sample
    ("first-record", "generation.sample"),
    ("sample-verdict", "but the run made 3 samples"),  # a verdict of sample 3 of a run of 3
])
def test_an_import_refuses_a_sample_image_it_would_misname_or_give_twice(sampled, tmp_path, damage, message):
    pytest.importorskip("datasets")
    import pyarrow.parquet as pq

    from tracebench.errors import TraceError
    from tracebench.share import export_folder, import_dataset

    export_folder(sampled, tmp_path / "ex")
    shard = next((tmp_path / "ex" / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    rows = table.to_pylist()
    row = rows[0]
    first, second = row["sample_images"]
    if damage == "padded":
        first["path"] = first["path"].replace("~1.", "~01.")
    elif damage == "twice":
        row["sample_images"] = [first, {**first, "path": first["path"].replace(".png", ".jpg")}]
    elif damage == "first-record":
        row["generation"] = {"case_id": row["id"], "used_references": None, "collage": False, "sample": 2}
    else:
        row["verdicts"][0]["sample"] = 3
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), shard)
    with pytest.raises(TraceError, match=message):
        import_dataset(tmp_path / "ex", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_a_verdict_of_a_sample_the_run_did_not_make_is_an_error_not_one_more_sample(sampled, tmp_path):
    import shutil

    from tracebench.errors import TraceError

    shutil.copytree(sampled, tmp_path / "run", ignore=shutil.ignore_patterns("cache", "images"))
    lines = (tmp_path / "run" / "verdicts.jsonl").read_text().splitlines(keepends=True)
    stray = {**json.loads(lines[0]), "sample": 3}  # a K=3 run: samples 0 .. 2
    (tmp_path / "run" / "verdicts.jsonl").write_text(lines[0] + json.dumps(stray) + "\n" + "".join(lines[1:]))
    for read in (score_run, load_run):
        with pytest.raises(TraceError, match=r"verdicts.jsonl:2: sample: 3, but the run made 3 samples"):
            read(tmp_path / "run")


def test_compare_and_the_protocols_take_every_sample(sampled, apart):
    from tracebench.score._compare import _case_metrics

    separate = [_case_metrics(apart / str(k), ("macro",))[1] for k in range(3)]
    for case_id, (_, metrics) in _case_metrics(sampled, ("macro",))[1].items():
        for name in ("overall", "macro"):
            assert metrics[name] == pytest.approx(fmean(run[case_id][1][name] for run in separate))
    names = ("longbanana", "macro")
    mine = score_run(sampled, protocols=names).protocols
    each = [score_run(apart / str(k), protocols=names).protocols for k in range(3)]
    for name in names:  # every case scored in every sample: the mean of cases' means is the mean of the runs'
        assert mine[name].cases == 16 and all(p[name].cases == 16 for p in each)
        assert mine[name].overall == pytest.approx(fmean(p[name].overall for p in each), abs=2e-4)
    assert mine["longbanana"].pass_rate == pytest.approx(fmean(p["longbanana"].pass_rate for p in each), abs=2e-4)
    from tracebench.score import leaderboard

    (row,) = leaderboard([sampled]).rows  # the board scores as trace score does
    assert row.avg == score_run(sampled).avg


def test_a_label_file_names_a_later_sample_as_case_tilde_k_whichever_rater_is_the_run(small, sampled, tmp_path):
    from tracebench.report._agree import agree

    lines = [line for line in _lines(sampled) if line["case_id"] in {"s1-00000", "s2-00000"}]
    labels = tmp_path / "labels.jsonl"  # a labeller's answers on every generation of two cases: what the run says
    labels.write_text("".join(json.dumps({"case_id": line["case_id"] + (f"~{line['sample']}" if "sample" in line else ""),
                                          "question_id": line["question_id"], "pass": line["verdict"] == "pass"}) + "\n"
                              for line in lines))
    result = agree(small, human=sampled, judges=[labels])  # the run as the first rater, the file naming s~k second
    assert result["n"] == len(lines) and result["agreement"] == 1.0
