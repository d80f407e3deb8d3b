"""Reference clutter: distractors chosen by the taxonomy, interleaved references, pool mode, rejection
questions, the zoo's distractor-confusion, the distractor-removal rule and the clutter breakdowns."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import APPLICATIONS

from test_cli import run_trace
from tracebench.diagnose import build_tree, DiagnoseOptions, diagnose_run, tree_nodes
from tracebench.formula import parse, relabel_images, template_of, to_text
from tracebench.library import load_library
from tracebench.providers import ModelSettings
from tracebench.records import DiagnosticTree, TREES_FILE, read_cases, read_sample_manifest, read_verdicts
from tracebench.run import RunOptions, run_benchmark, shard_of
from tracebench.sample import ClutterSpec, SampleOptions, sample_benchmark
from tracebench.score import input_bin, score_run
from tracebench.zoo import failed_questions, parse_profile

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)
YES = f"python:{Path(__file__).resolve().parents[1] / 'examples' / 'plugins' / 'always_yes.py'}"  # judges any image
SLOTS = tuple(range(1, 9))
IDENTITY_GROUPS = ("1_Appearance", "2_Form")  # templates/clutter.toml


def _sample(shared_folder, name: str, per_slot: int, seed: int, applications: bool = True, **clutter) -> Path:
    return shared_folder(f"clutter-{name}", lambda out: sample_benchmark(out, SampleOptions(
        slots=SLOTS, per_slot=per_slot, seed=seed, applications=APPLICATIONS if applications else False,
        clutter=ClutterSpec(**clutter))))


@pytest.fixture(scope="module")
def plain(shared_folder) -> Path:
    return _sample(shared_folder, "plain", 6, 3)


@pytest.fixture(scope="module")
def named(shared_folder) -> Path:
    return _sample(shared_folder, "named", 6, 3, low=4, high=4)


@pytest.fixture(scope="module")
def pooled(shared_folder) -> Path:
    return _sample(shared_folder, "pool", 6, 3, low=3, high=3, pool=True)


@pytest.fixture(scope="module")
def library(plain):
    manifest = read_sample_manifest(plain)
    from tracebench.library import default_library

    info, images = load_library(default_library())
    assert info.content_hash == manifest.library["content_hash"]
    return {image.id: image for image in images}


def _images(text: str) -> set[str]:
    return {f"Image {k}" for k in re.findall(r"\bImage (\d+)\b", text)}


# ------------------------------------------------------------------------------ sampling

def test_distractors_zero_is_todays_benchmark_byte_for_byte(tmp_path, plain):
    result = run_trace("sample", "--slots", "1-8", "--per-slot", "6", "--per-application", str(APPLICATIONS), "--seed",
                       "3", "--distractors", "0", "--out", str(tmp_path / "zero"))
    assert result.returncode == 0, result.stderr
    for name in ("cases.jsonl", "manifest.json"):
        assert (tmp_path / "zero" / name).read_bytes() == (plain / name).read_bytes(), name
    assert "clutter" not in (plain / "cases.jsonl").read_text()


def test_clutter_keeps_template_slot_and_bindings(plain, named):
    for base, cluttered in zip(read_cases(plain), read_cases(named), strict=True):
        assert (cluttered.id, cluttered.slot, cluttered.template) == (base.id, base.slot, base.template)
        formula_images = {t.image for t in cluttered.terms if t.image}
        number = {int(b.image.split()[1]): int(c.image.split()[1])
                  for b, c in zip(base.terms, cluttered.terms) if b.image}
        assert parse(cluttered.formula) == relabel_images(parse(base.formula), number)
        assert to_text(template_of(parse(cluttered.formula))) == to_text(template_of(parse(base.formula)))
        assert [t.model_copy(update={"image": None}) for t in cluttered.terms] == \
               [t.model_copy(update={"image": None}) for t in base.terms]
        assert len(cluttered.references) == len(base.references) + len(cluttered.distractors)
        assert {r.image for r in cluttered.references} == {f"Image {k + 1}" for k in range(len(cluttered.references))}
        assert formula_images.isdisjoint({d.image for d in cluttered.distractors})
        # the same case in words: the scene and what the prompt asks of every term
        assert cluttered.scene == base.scene and cluttered.text_only_prompt == base.text_only_prompt


def test_same_seed_same_distractors_other_seed_others(tmp_path, named):
    again = tmp_path / "again"
    sample_benchmark(again, SampleOptions(slots=SLOTS, per_slot=6, seed=3, applications=APPLICATIONS,
                                          clutter=ClutterSpec(4, 4)))
    assert (again / "cases.jsonl").read_bytes() == (named / "cases.jsonl").read_bytes()
    other = tmp_path / "other"
    sample_benchmark(other, SampleOptions(slots=(5,), per_slot=6, seed=4, clutter=ClutterSpec(4, 4)))
    first = [[d.source_id for d in c.distractors] for c in read_cases(other)]
    mine = [[d.source_id for d in c.distractors] for c in read_cases(named) if c.slot == 5]
    assert first != mine


def _identity(entity) -> tuple:
    tags = entity.subtype_tags()
    return (entity.name, tuple(sorted((k, tuple(v)) for k, v in tags.items() if k.split(".")[0] in ("1", "2"))))


def test_distractors_are_hard_negatives_never_the_target(named, library):
    kinds = Counter()
    for case in read_cases(named):
        terms = {t.symbol: t for t in case.terms}
        used = {r.source_id for r in case.references if r.image not in {d.image for d in case.distractors}}
        assert len(case.distractors) == 4 or case.slot <= 1 or case.application, case.id
        for d in case.distractors:
            t = terms[d.confuses]
            assert d.source_id not in used and d.image in {r.image for r in case.references}
            assert next(r.source_id for r in case.references if r.image == d.image) == d.source_id
            image = library[d.source_id]
            kinds[str(t.role)] += 1
            if t.op == "f" or t.role in ("attach", "ip"):
                target = library[t.source_id].ent_list[t.entity_index]
                mine = image.ent_list[d.entity_index]
                assert mine.ent_desc == d.entity
                assert _identity(mine) != _identity(target)  # another noun, or other identity tags
                assert f"category {mine.category}" in d.shares or t.role in ("attach", "ip")
                if t.op == "f":
                    assert mine.category == target.category, (case.id, d)
            elif t.role == "local":
                mine = image.ent_list[d.entity_index]
                values = mine.subtype_tags()[t.subtype]
                assert d.value == values[0] != t.value and f"subtype {t.subtype}" in d.shares
            elif t.role == "global":
                tags = {**image.global_tags(), **({"background": image.background} if image.background else {})}
                assert tags[t.subtype][0] == d.value != t.value
            else:
                assert t.role == "relation" and d.value != t.value
    assert {"anchor", "local", "global"} <= set(kinds), kinds


def test_named_prompts_never_name_a_distractor_and_references_interleave(named):
    not_last = 0
    for case in read_cases(named):
        distractor_images = {d.image for d in case.distractors}
        assert _images(case.prompt).isdisjoint(distractor_images), case.id
        assert _images(case.prompt) <= {t.image for t in case.terms if t.image}
        formula_numbers = [int(t.image.split()[1]) for t in case.terms if t.image]
        if case.distractors and formula_numbers and min(int(i.split()[1]) for i in distractor_images) < max(formula_numbers):
            not_last += 1
    assert not_last >= 20  # distractors are placed among the formula's images, not after them


def test_every_distractor_has_its_rejection_question(named):
    for case in read_cases(named):
        questions = {q.id: q for q in case.checklist}
        terms = {t.symbol: t for t in case.terms}
        rejection = [q for q in case.checklist if q.aspect == "rejection"]
        assert len(rejection) == len(case.distractors)
        for d in case.distractors:
            q = questions[f"{d.confuses}:rejection.{d.id}"]
            t = terms[d.confuses]
            assert q.target == d.confuses and q.expected == "no"
            assert q.op == ("anchor" if t.op == "f" else "disentangle")
            assert q.images == (t.image, d.image) and d.image in q.question


def test_manifest_counts_clutter_and_inputs(named):
    manifest = read_sample_manifest(named)
    cases = list(read_cases(named))
    assert manifest.clutter["distractors"] == "4" and manifest.clutter["mode"] == "named"
    assert manifest.clutter["distractors_placed"] == sum(len(c.distractors) for c in cases)
    assert manifest.counts_per_inputs == {str(k): n for k, n in sorted(Counter(len(c.references) for c in cases).items())}
    assert manifest.hashes["clutter"]


def test_max_references_caps_the_distractors(tmp_path):
    sample_benchmark(tmp_path / "b", SampleOptions(slots=SLOTS, per_slot=4, seed=1, applications=False,
                                                   clutter=ClutterSpec(8, 8, max_references=6)))
    for case in read_cases(tmp_path / "b"):
        own = len(case.references) - len(case.distractors)
        assert len(case.distractors) == max(0, min(8, 6 - own)), case.id
        assert len(case.references) == max(own, 6)


def test_a_range_draws_per_case_and_long_lists_reach_32(tmp_path):
    sample_benchmark(tmp_path / "b", SampleOptions(slots=(8,), per_slot=12, seed=2, applications=False,
                                                   clutter=ClutterSpec(0, 30, max_references=32)))
    counts = [len(c.distractors) for c in read_cases(tmp_path / "b")]
    assert len(set(counts)) > 3 and max(len(c.references) for c in read_cases(tmp_path / "b")) <= 32
    assert any(len(c.references) >= 24 for c in read_cases(tmp_path / "b"))


@pytest.mark.parametrize("args,message", [
    (["--max-references", "6"], "--max-references caps the distractors: give --distractors N as well"),
    (["--distractors", "2", "--max-references", "65"], "--max-references: 65 must lie between 1 and 64"),
])
def test_max_references_means_something(tmp_path, args, message):
    result = run_trace("sample", "--slots", "1", *args, "--out", str(tmp_path / "b"))
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "b").exists()


def test_no_case_holds_more_than_64_references(tmp_path):
    sample_benchmark(tmp_path / "b", SampleOptions(slots=(8,), per_slot=3, seed=1, applications=False,
                                                   clutter=ClutterSpec(64, 64)))
    assert max(len(c.references) for c in read_cases(tmp_path / "b")) == 64


@pytest.mark.parametrize("edit,message", [
    (lambda c: c["clutter"]["distractors"][0].update(image="Image 99"),
     "clutter.distractors.0.image: 'Image 99' is not a reference of the case"),
    (lambda c: c["clutter"]["distractors"][0].update(confuses="f9"),
     "clutter.distractors.0.confuses: 'f9' is not a term of the case"),
    (lambda c: c["clutter"]["distractors"][1].update(id=c["clutter"]["distractors"][0]["id"]),
     "clutter.distractors.1.id: 'd1' twice"),
])
def test_a_crafted_clutter_record_is_one_line(named, tmp_path, edit, message):
    import shutil

    shutil.copytree(named, tmp_path / "b")
    lines = (tmp_path / "b" / "cases.jsonl").read_text().splitlines()
    case = json.loads(lines[10])
    assert len(case["clutter"]["distractors"]) >= 2
    edit(case)
    lines[10] = json.dumps(case)
    (tmp_path / "b" / "cases.jsonl").write_text("\n".join(lines) + "\n")
    result = run_trace("run", str(tmp_path / "b"), "--generator", "synthetic:perfect", "--judge", "oracle",
                       "--out", str(tmp_path / "r"))
    assert result.returncode == 2 and f"cases.jsonl:11: {message}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "r").exists()


@pytest.mark.parametrize("value,message", [("x", "not a number"), ("5-2", "0 <= N <= M"), ("-1", "not a number")])
def test_bad_distractors_option_is_one_line(tmp_path, value, message):
    result = run_trace("sample", "--slots", "1", "--distractors", value, "--out", str(tmp_path / "b"))
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "b").exists()


# ------------------------------------------------------------------------------ pool mode

def test_pool_prompts_name_no_image_of_a_pooled_target(pooled):
    for case in read_cases(pooled):
        assert case.clutter is not None and case.clutter.mode == "pool"
        pooled_terms = {p.term for p in case.clutter.pooled}
        terms = {t.symbol: t for t in case.terms}
        named_images = {t.image for t in case.terms if t.image and t.symbol not in pooled_terms}
        assert _images(case.prompt) <= named_images, case.id
        for p in case.clutter.pooled:
            t = terms[p.term]
            assert t.role in ("anchor", "local", "attach", "ip") and p.image == t.image
            assert p.confusers == tuple(d.image for d in case.distractors if d.confuses == p.term)
            assert math.isclose(p.confusion, len(p.confusers) / (len(p.confusers) + 1), abs_tol=1e-4)
            assert "shown in one of the reference images" in case.prompt
        assert {t.symbol for t in case.terms if t.image and t.role in ("anchor", "local", "attach", "ip")} == pooled_terms


# ------------------------------------------------------------------------------ the zoo

def test_distractor_confusion_breaks_content_and_rejection_together(named, plain):
    profile = parse_profile("distractor-confusion:0.3")
    for case in read_cases(plain):
        assert failed_questions(case, profile) == {}  # nothing to confuse: never fires
    content = {"anchor": "identity", "local": "fidelity", "attach": "details", "ip": "scheme", "global": "fidelity",
               "relation": "fidelity"}
    confused = 0
    for case in read_cases(named):
        failed = failed_questions(case, profile)
        terms = {t.symbol: t for t in case.terms}
        for d in case.distractors:
            took = f"{d.confuses}:rejection.{d.id}" in failed
            confused += took
            if took:
                assert f"{d.confuses}:{content[str(terms[d.confuses].role)]}" in failed
        taken = [q for q in failed if ":rejection." in q]
        assert len({q.split(":")[0] for q in taken}) == len(taken)  # a term takes one distractor at most
        assert set(failed.values()) <= {"distractor-confusion:0.3"}
    assert confused > 20


def test_confusion_rate_grows_with_the_distractors_of_a_term(tmp_path):
    """p = 1 - (1 - P) ** k per term with k distractors; Z < 5 (the draws are seeded: deterministic)."""
    sample_benchmark(tmp_path / "b", SampleOptions(slots=(2, 3, 4), per_slot=150, seed=9, applications=False,
                                                   clutter=ClutterSpec(1, 6)))
    profile = parse_profile("distractor-confusion:0.2")
    trials, fired = Counter(), Counter()
    for case in read_cases(tmp_path / "b"):
        failed = failed_questions(case, profile)
        per_term = Counter(d.confuses for d in case.distractors)
        for term, k in per_term.items():
            trials[k] += 1
            fired[k] += any(q.startswith(f"{term}:rejection.") for q in failed)
    checked = 0
    for k, n in trials.items():
        if n < 60:
            continue
        p = 1 - 0.8 ** k
        z = (fired[k] - n * p) / math.sqrt(n * p * (1 - p))
        assert abs(z) < 5, (k, n, fired[k], p)
        checked += 1
    assert checked >= 2


# ------------------------------------------------------------------------------ diagnosis

def test_a_cluttered_tree_removes_the_distractors_first(named):
    from tracebench.diagnose import plan_trees

    case = next(c for c in read_cases(named) if c.slot == 3 and c.distractors)
    plan = plan_trees([case])
    tree = plan.trees[0]
    first, second = tree.nodes[0], tree.nodes[1]
    assert first.clutter and second.rule == "distractor_removal" and second.formula == first.formula
    assert all(n.rule != "distractor_removal" for n in tree.nodes[2:]) and not any(n.clutter for n in tree.nodes[1:])
    sub = plan.cases[tree.keys[second.id]]
    assert sub.clutter is None and len(sub.references) == len(case.references) - len(case.distractors)
    assert not any(q.aspect == "rejection" for q in sub.checklist)
    assert {q.id for q in sub.checklist} == {q.id for q in case.checklist if q.aspect != "rejection"}
    # a plain case's tree is the formula's: no such rule
    assert all(n.rule != "distractor_removal" for n in tree_nodes(build_tree(parse(case.formula))))


@pytest.mark.slow
@pytest.mark.parametrize("profile,causes", [
    ("distractor-confusion", {"distractor-confusion"}),
    ("distractor-confusion,global-interference",
     {"distractor-confusion", "global-interference", "distractor-confusion+global-interference"}),
])
def test_localization_names_reference_clutter(shared_folder, tmp_path, profile, causes):
    bench = _sample(shared_folder, "localization", 32, 12, applications=False, low=3, high=3)
    run_benchmark(bench, tmp_path / "run", RunOptions(generator=f"synthetic:{profile}", judges=["oracle"], settings=SETTINGS))
    full = diagnose_run(tmp_path / "run", tmp_path / "full", DiagnoseOptions(strategy="full", settings=SETTINGS))
    assert full.cases >= 200
    localization = full.localization_accuracy
    assert localization is not None and set(localization["by_cause"]) == causes
    confusion = localization["by_cause"]["distractor-confusion"]
    assert confusion["instances"] >= 200 and set(confusion["expected"]) == {"reference_clutter"}
    assert localization["accuracy"] >= 0.95 and confusion["accuracy"] >= 0.95, localization
    assert full.sources["reference_clutter"] > 0
    if "," in profile:
        return  # adaptive against full: once is enough (the same rules decide both)
    diagnose_run(tmp_path / "run", tmp_path / "adaptive", DiagnoseOptions(strategy="adaptive", settings=SETTINGS))

    def attributions(folder):
        return [[a.model_dump() for a in DiagnosticTree.model_validate_json(line).attributions]
                for line in (folder / TREES_FILE).read_text().splitlines()]

    assert attributions(tmp_path / "full") == attributions(tmp_path / "adaptive")


# ------------------------------------------------------------------------------ scores

def test_clutter_breakdowns_match_an_independent_count(shared_runs, named, plain):
    run = shared_runs(named, "synthetic:distractor-confusion")
    scores = score_run(run)
    cases = {c.id: c for c in read_cases(named)}
    verdicts = list(read_verdicts(run))
    passed, asked = Counter(), Counter()
    for v in verdicts:
        q = next(q for q in cases[v.case_id].checklist if q.id == v.question_id)
        if q.aspect == "rejection" and v.value is not None:
            asked[q.op] += 1
            passed[q.op] += v.value
    assert set(scores.rejection) == set(asked)
    for op, r in scores.rejection.items():
        assert r.questions == asked[op] and r.rate == round(passed[op] / asked[op], 4)
    assert any(r.rate < 1 for r in scores.rejection.values())
    bins = Counter(input_bin(len(c.references)) for c in cases.values())
    assert {k: g.cases for k, g in scores.by_inputs.items()} == dict(bins)
    assert list(scores.by_inputs) == sorted(bins, key=lambda k: int(k.split("-")[0].rstrip("+")))
    assert {k: g.cases for k, g in scores.by_distractors.items()} == \
           {str(k): n for k, n in Counter(len(c.distractors) for c in cases.values()).items()}
    plain_scores = json.loads(score_run(shared_runs(plain, "synthetic:perfect")).model_dump_json())
    assert not {"by_inputs", "by_distractors", "rejection"} & set(plain_scores)


@pytest.mark.parametrize("n,expected", [(0, "0"), (1, "1-3"), (3, "1-3"), (4, "4-5"), (7, "6-7"), (10, "8-10"),
                                        (11, "11+"), (32, "11+")])
def test_input_bins_are_macrobench(n, expected):
    assert input_bin(n) == expected


# ------------------------------------------------------------------------------ generators and input limits

_COMMAND = '''
import json, os, sys
from PIL import Image
case = json.load(sys.stdin)
out = sys.argv[1]
Image.new("RGB", (64, 64), "white").save(out)
with open(os.environ["SEEN"], "a") as seen:
    seen.write(json.dumps({"id": case["id"], "case": case,
                           "sizes": [Image.open(r["path"]).size for r in case["references"]]}) + "\\n")
used = [r["image"] for r in case["references"]][::2]  # every other reference
json.dump({"used_references": used}, open(out + ".json", "w"))
'''


@pytest.fixture()
def command(tmp_path, monkeypatch):
    import shlex
    import sys

    script = tmp_path / "gen.py"
    script.write_text(_COMMAND)
    monkeypatch.setenv("SEEN", str(tmp_path / "seen.jsonl"))
    return f"command:{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{output}}", tmp_path / "seen.jsonl"


def _small(shared_folder) -> Path:
    return _sample(shared_folder, "small-pool", 2, 5, low=2, high=6, pool=True)


def test_a_command_sees_no_clutter_truth_and_reports_the_references_it_used(shared_folder, tmp_path, command):
    bench = _small(shared_folder)
    spec, seen = command
    run_benchmark(bench, tmp_path / "run", RunOptions(generator=spec, judges=[YES], settings=SETTINGS))
    cases = {c.id: c for c in read_cases(bench)}
    given = {row["id"]: row["case"] for row in map(json.loads, seen.read_text().splitlines())}
    assert set(given) == set(cases)
    search = targets = used_distractors = distractors = 0
    for case_id, case in cases.items():
        sent = given[case_id]
        assert "clutter" not in sent and sent["checklist"] == [] and sent["prompt"] == case.prompt
        assert sent["formula"] == case.template  # the bound formula numbers the sources' images
        assert [r["source_id"] for r in sent["references"]] == [f"ref-{k}" for k in range(1, len(case.references) + 1)]
        assert all(Path(r["path"]).name.split("-", 1)[1].startswith("ref-") for r in sent["references"])
        pooled = {p.term for p in case.clutter.pooled}
        for t, mine in zip(sent["terms"], case.terms, strict=True):
            assert t["image"] == (None if t["symbol"] in pooled else mine.image)
        info = json.loads((tmp_path / "run" / "images" / f"{case_id}.json").read_text())
        used = set([r.image for r in case.references][::2])
        assert set(info["used_references"]) == used and info["collage"] is False
        targets += len(case.clutter.pooled)
        search += sum(p.image in used for p in case.clutter.pooled)
        distractors += len(case.distractors)
        used_distractors += sum(d.image in used for d in case.distractors)
    selection = score_run(tmp_path / "run").selection
    assert selection is not None and selection.cases == len(cases)
    assert selection.search == round(search / targets, 4) and selection.targets == targets
    assert selection.distractors_used == round(used_distractors / distractors, 4)


def test_a_bad_sidecar_fails_the_generation_naming_it(shared_folder, tmp_path, monkeypatch):
    """A sidecar naming no reference of the case is the generation's failure (an abstention); the same
    failure on every first call stops the run early, as any endpoint failing alike does."""
    import shlex
    import sys

    bench = _small(shared_folder)
    script = tmp_path / "bad.py"
    script.write_text("import sys\nfrom PIL import Image\nImage.new('RGB', (8, 8)).save(sys.argv[1])\n"
                      "open(sys.argv[1] + '.json', 'w').write('{\"used_references\": [\"Image 99\"]}')\n")
    result = run_trace("run", str(bench), "--generator", f"command:{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{output}}",
                       "--judge", YES, "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and "stopped early" in result.stderr, result.stderr
    assert "used_references names 'Image 99', not a reference of case" in result.stderr


def test_the_zoo_reports_the_distractors_it_took(shared_runs, named):
    run = shared_runs(named, "synthetic:distractor-confusion")
    for case in read_cases(named):
        info = json.loads((run / "images" / f"{case.id}.json").read_text())
        record = failed_questions(case, parse_profile("distractor-confusion"))
        took = {q.rsplit(".", 1)[1] for q in record if ":rejection." in q}
        expected = {d.image for d in case.distractors if d.id in took}
        assert expected <= set(info["used_references"]), case.id
        assert {d.image for d in case.distractors if d.id not in took}.isdisjoint(info["used_references"])


def test_max_images_skips_or_collages(shared_folder, tmp_path, command):
    bench = _sample(shared_folder, "small-named", 2, 6, low=3, high=3)
    spec, seen = command
    cases = {c.id: c for c in read_cases(bench) if shard_of(c.id, 2) == 1}  # half the cases: a process each
    beyond = {i for i, c in cases.items() if len(c.references) > 5}
    assert beyond and len(beyond) < len(cases)
    skipped = run_trace("run", str(bench), "--generator", spec, "--judge", YES, "--max-images", "5",
                        "--shard", "1/2", "--out", str(tmp_path / "skip"))
    assert skipped.returncode == 0, skipped.stderr
    assert f"{len(beyond)} cases not applicable" in skipped.stdout
    manifest = json.loads((tmp_path / "skip" / "run.json").read_text())
    assert manifest["not_applicable"] == len(beyond) and manifest["cases"] == len(cases) - len(beyond)
    assert {v.case_id for v in read_verdicts(tmp_path / "skip")} == set(cases) - beyond
    seen.unlink()
    collaged = run_benchmark(bench, tmp_path / "collage", RunOptions(generator=spec, judges=[YES], settings=SETTINGS,
                             max_images=5, collage=True, shard=(1, 2)))
    assert collaged.collaged == len(beyond) and collaged.cases == len(cases) and collaged.not_applicable is None
    rows = {row["id"]: row for row in map(json.loads, seen.read_text().splitlines())}
    for case_id, case in cases.items():
        info_path = tmp_path / "collage" / "images" / f"{case_id}.json"
        info = json.loads(info_path.read_text())
        if case_id in beyond:
            assert len(rows[case_id]["sizes"]) == 1 and info["collage"] is True and info["used_references"] is None
            columns = math.ceil(math.sqrt(len(case.references)))
            assert rows[case_id]["sizes"][0] == [columns * 256, math.ceil(len(case.references) / columns) * 256]
            assert rows[case_id]["case"]["prompt"].startswith(case.prompt + "\n")
            assert f"Image 1 to Image {len(case.references)}" in rows[case_id]["case"]["prompt"]
        else:
            assert len(rows[case_id]["sizes"]) == len(case.references) and info["collage"] is False
    again = run_trace("run", str(bench), "--generator", spec, "--judge", YES, "--max-images", "5",
                      "--shard", "1/2", "--out", str(tmp_path / "collage"))
    assert again.returncode == 2 and "holds a run with another collage" in again.stderr


def test_the_models_file_declares_max_images(shared_folder, tmp_path, command):
    bench = _sample(shared_folder, "small-named", 2, 6, low=3, high=3)
    spec, _ = command
    models = tmp_path / "models.toml"
    models.write_text(f"[models.mine]\nspec = {json.dumps(spec)}\nmax_images = 4\n")
    result = run_trace("run", str(bench), "--generator", "mine", "--models", str(models), "--judge", YES,
                       "--out", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "run" / "run.json").read_text())["max_images"] == 4
    assert "cases not applicable: more than 4 references" in result.stdout
    refused = run_trace("run", str(bench), "--generator", spec, "--judge", YES, "--collage",
                        "--out", str(tmp_path / "other"))
    assert refused.returncode == 2 and "declares no max_images" in refused.stderr


@pytest.mark.slow
def test_served_zoo_serves_cluttered_benchmarks(named, shared_runs, tmp_path, monkeypatch):
    from tracebench.serve import ZooServer

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = shared_runs(named, "synthetic:distractor-confusion")
    with ZooServer([named]).start() as server:
        settings = ModelSettings(base_url=server.base_url, max_retries=2, timeout=30.0)
        run_benchmark(named, tmp_path / "http", RunOptions(generator="openai:synthetic/distractor-confusion",
                      judges=["openai:oracle"], settings=settings, concurrency=4))
    mine = {(v.case_id, v.question_id): v.verdict for v in read_verdicts(tmp_path / "http")}
    theirs = {(v.case_id, v.question_id): v.verdict for v in read_verdicts(local)}
    assert mine == theirs and any(s == "fail" for s in mine.values())


def test_the_report_shows_the_clutter_breakdowns_and_marks_distractors(shared_runs, named, tmp_path):
    from test_report_page import unpack

    run = shared_runs(named, "synthetic:distractor-confusion")
    page = tmp_path / "report.html"
    result = run_trace("report", str(run), "--out", str(page))
    assert result.returncode == 0, result.stderr
    html = page.read_text(encoding="utf-8")
    for figure in ("fig-by-inputs", "fig-by-distractors", "fig-rejection"):
        assert f'id="{figure}"' in html
    _, bodies = unpack(html)
    case = next(c for c in read_cases(named) if len(c.distractors) == 4)
    for d in case.distractors:
        assert f"{d.image} ({d.source_id})<br><i>distractor {d.id}, confuses {d.confuses}</i>" in bodies[case.id]


_KEY_SPY = '''
import json, os
from PIL import Image
import io
from tracebench.providers import Generation, Generator


class Spy(Generator):
    spec = "python:spy"

    def key(self, case, references):
        with open(os.environ["KEYS"], "a") as out:
            out.write(json.dumps({"id": case.id, "clutter": case.clutter is not None, "formula": case.formula}) + "\\n")
        return super().key(case, references)

    def generate(self, case, references):
        buffer = io.BytesIO()
        Image.new("RGB", (8, 8)).save(buffer, format="PNG")
        return Generation(buffer.getvalue(), ("Image 2",))  # a collage's cell: not a reference of the grid


generator = Spy
'''


def test_a_plugin_s_key_sees_the_view_and_a_collage_s_cells_are_no_failure(shared_folder, tmp_path, monkeypatch):
    bench = _small(shared_folder)
    plugin = tmp_path / "spy.py"
    plugin.write_text(_KEY_SPY)
    monkeypatch.setenv("KEYS", str(tmp_path / "keys.jsonl"))
    manifest = run_benchmark(bench, tmp_path / "run", RunOptions(generator=f"python:{plugin}", judges=[YES], settings=SETTINGS,
                             max_images=3, collage=True, shard=(1, 3)))
    assert manifest.abstentions == 0 and manifest.collaged
    cases = {c.id: c for c in read_cases(bench) if shard_of(c.id, 3) == 1}
    for row in map(json.loads, (tmp_path / "keys.jsonl").read_text().splitlines()):
        assert row["clutter"] is False and row["formula"] == cases[row["id"]].template
    for case_id, case in cases.items():
        info = json.loads((tmp_path / "run" / "images" / f"{case_id}.json").read_text())
        assert info["collage"] == (len(case.references) > 3)
        assert info["used_references"] == (None if info["collage"] else ["Image 2"])


def test_merge_refuses_other_limits_and_sums_the_counts(shared_folder, tmp_path, command):
    bench = _sample(shared_folder, "small-named", 2, 6, low=3, high=3)
    spec, _ = command
    shards = []
    for k in (1, 2):
        shards.append(tmp_path / f"s{k}")
        run_benchmark(bench, shards[-1], RunOptions(generator=spec, judges=[YES], settings=SETTINGS, shard=(k, 2), max_images=5))
    other = tmp_path / "other"
    run_benchmark(bench, other, RunOptions(generator=spec, judges=[YES], settings=SETTINGS, shard=(2, 2)))
    refused = run_trace("merge", str(shards[0]), str(other), "--out", str(tmp_path / "bad"))
    assert refused.returncode == 2 and "another max_images or collage" in refused.stderr
    merged = run_trace("merge", *map(str, shards), "--out", str(tmp_path / "m"))
    assert merged.returncode == 0, merged.stderr
    counts = [json.loads((s / "run.json").read_text())["not_applicable"] for s in shards]
    assert json.loads((tmp_path / "m" / "run.json").read_text())["not_applicable"] == sum(counts)
    assert sorted(p.name for p in (tmp_path / "m" / "images").iterdir()) == sorted(
        p.name for s in shards for p in (s / "images").iterdir())


@pytest.mark.slow
def test_a_diagnosis_feeds_the_nodes_of_a_collaged_root_a_collage(shared_runs, named, tmp_path):
    run = tmp_path / "run"
    run_benchmark(named, run, RunOptions(generator="synthetic:distractor-confusion", judges=["oracle"], settings=SETTINGS,
                  shard=(1, 6), max_images=5, collage=True))
    diagnose_run(run, tmp_path / "diag", DiagnoseOptions(strategy="adaptive", settings=SETTINGS))
    cases = {c.id: c for c in read_cases(named)}
    trees = [DiagnosticTree.model_validate_json(line) for line in (tmp_path / "diag" / TREES_FILE).read_text().splitlines()]
    checked = 0
    for tree in trees:
        fed = len(cases[tree.case_id].references) > 5
        for node in tree.nodes:
            if node.image is None or node.parent is None:
                continue
            info = json.loads((tmp_path / "diag" / node.image).with_suffix(".json").read_text()) \
                if (tmp_path / "diag" / node.image).with_suffix(".json").is_file() else {"collage": False}
            assert info["collage"] == (fed or len(node.references) > 5), (tree.case_id, node.id)
            checked += fed
    assert checked > 5
