"""`trace diagnose --repeats K`: every node generated K times, each instance decided by majority,
and the generations behind it (``ModelSettings.sample``): separate calls, cached apart."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from test_cli import run_trace
from tracebench.diagnose import DiagnoseOptions, diagnose_run
from tracebench.providers import ModelSettings, make_generator
from tracebench.records import TREES_FILE, DiagnosticTree, RunManifest
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import read_cases
from tracebench.zoo import read_record

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)


@pytest.fixture(scope="module")
def small(diagnosis_bench) -> Path:
    return diagnosis_bench  # tests/conftest.py: sampled once per session


def _first_cases(bench: Path, out: Path, n: int) -> Path:
    """A benchmark folder holding the first ``n`` cases of ``bench`` (its references hard-linked)."""
    import os
    import shutil

    out.mkdir()
    lines = (bench / "cases.jsonl").read_text().splitlines()[:n]
    (out / "cases.jsonl").write_text("".join(line + "\n" for line in lines))
    shutil.copyfile(bench / "manifest.json", out / "manifest.json")
    shutil.copytree(bench / "references", out / "references", copy_function=os.link)
    return out


def _failing_ids(run: Path, n: int) -> str:
    """``--cases`` naming the first ``n`` cases of a run with a failing verdict."""
    ids = []
    for line in (run / "verdicts.jsonl").read_text().splitlines():
        v = json.loads(line)
        if v["verdict"] == "fail" and v["case_id"] not in ids:
            ids.append(v["case_id"])
    return ",".join(ids[:n])


def _trees(folder: Path) -> list[DiagnosticTree]:
    return [DiagnosticTree.model_validate_json(line) for line in (folder / TREES_FILE).read_text().splitlines()]


def _majority(statuses: tuple[str, ...]) -> str:
    counted = Counter(s for s in statuses if s != "abstain").most_common()
    if not counted or (len(counted) > 1 and counted[0][1] == counted[1][1]):
        return "abstain"
    return counted[0][0]


def test_later_generations_are_calls_of_their_own(small, tmp_path):
    """sample 0 is today's run; sample 1 another seed for the zoo, another cache entry, recorded."""
    first = run_benchmark(small, tmp_path / "s0", RunOptions(generator="synthetic:strain", judges=["oracle"], settings=SETTINGS,
                          cache_dir=tmp_path / "cache"))
    again = run_benchmark(small, tmp_path / "s0b", RunOptions(generator="synthetic:strain", judges=["oracle"], settings=SETTINGS,
                          cache_dir=tmp_path / "cache"))
    second = run_benchmark(small, tmp_path / "s1", RunOptions(generator="synthetic:strain", judges=["oracle"],
                           settings=ModelSettings(max_retries=0, timeout=30.0, sample=1), cache_dir=tmp_path / "cache"))
    assert first.sample == 0 and second.sample == 1 and again.cache_hits > 0 and second.cache_hits == 0
    seeds = set()
    differ = 0
    for case in read_cases(small):
        a = read_record((tmp_path / "s0" / "images" / f"{case.id}.png").read_bytes())
        b = read_record((tmp_path / "s1" / "images" / f"{case.id}.png").read_bytes())
        seeds.add((a.drawn["seed"], b.drawn["seed"]))
        differ += a.failed != b.failed
    assert len(seeds) == 1 and len(set(next(iter(seeds)))) == 2  # one seed per generation, not the same
    assert differ > 5
    with pytest.raises(Exception, match="another sample"):  # a run folder holds one generation
        run_benchmark(small, tmp_path / "s0", RunOptions(generator="synthetic:strain", judges=["oracle"],
                      settings=ModelSettings(max_retries=0, timeout=30.0, sample=2)))
    assert make_generator("synthetic:perfect", ModelSettings(sample=3)).sample == 3


def test_a_command_generator_is_told_its_generation(small, tmp_path):
    script = tmp_path / "gen.py"
    script.write_text(
        "import json, os, sys\n"
        "from tracebench.records import Case\n"
        "from tracebench.zoo import generate, parse_profile\n"
        "data = json.loads(sys.stdin.read())\n"
        "for ref in data['references']:  # absolute copies here; a case record holds relative paths\n"
        "    ref['path'] = os.path.basename(ref['path'])\n"
        "case = Case.model_validate(data)\n"
        "png, _ = generate(case, parse_profile('perfect'), seed=int(os.environ['TRACEBENCH_SAMPLE']))\n"
        "open(os.environ['TRACEBENCH_OUTPUT'], 'wb').write(png)\n")
    import sys

    spec = f"command:{sys.executable} {script}"
    bench = _first_cases(small, tmp_path / "bench", 2)  # a process per case: two are enough
    run_benchmark(bench, tmp_path / "r", RunOptions(generator=spec, judges=["oracle"],
                  settings=ModelSettings(max_retries=0, timeout=60.0, sample=4)))
    case = next(iter(read_cases(bench)))
    assert read_record((tmp_path / "r" / "images" / f"{case.id}.png").read_bytes()).drawn["seed"] == 4


def test_repeats_of_a_deterministic_generator_change_nothing_but_the_images(small, shared_runs, tmp_path):
    run = shared_runs(small, "synthetic:global-interference")
    chosen = _failing_ids(run, 10)
    once = diagnose_run(run, tmp_path / "once", DiagnoseOptions(cases=chosen, settings=SETTINGS))
    thrice = diagnose_run(run, tmp_path / "thrice", DiagnoseOptions(cases=chosen, settings=SETTINGS, repeats=3))
    assert thrice.repeats == 3 and once.repeats == 1
    assert thrice.sources == once.sources and thrice.by_operator == once.by_operator
    for a, b in zip(_trees(tmp_path / "once"), _trees(tmp_path / "thrice")):
        assert a.attributions == b.attributions
        for n1, n3 in zip(a.nodes, b.nodes):
            assert n1.status == n3.status and n1.sample_status == {} and n1.sample_images == ()
            if n3.evaluated:
                assert len(n3.sample_images) == 2 and all((tmp_path / "thrice" / i).is_file() for i in n3.sample_images)
                assert n3.sample_status == {t: (s, s, s) for t, s in n3.status.items()}
    rounds = tmp_path / "thrice" / "rounds"
    assert {p.name for r in rounds.iterdir() for p in r.iterdir()} == {"cases", "run", "run-2", "run-3"}
    samples = {RunManifest.model_validate_json(p.read_text()).sample for p in rounds.glob("*/run*/run.json")}
    assert samples == {0, 1, 2}


def _round_verdicts(folder: Path) -> dict[str, list[dict[str, str]]]:
    """Sub-case id -> its verdicts (question id -> status) in each generation, from the rounds' runs."""
    out: dict[str, list[dict[str, str]]] = {}
    for name in ("run", "run-2", "run-3"):
        for path in folder.glob(f"rounds/*/{name}/verdicts.jsonl"):
            seen: dict[str, dict[str, str]] = {}
            for line in path.read_text().splitlines():
                v = json.loads(line)
                seen.setdefault(v["case_id"], {})[v["question_id"]] = v["verdict"]
            for case_id, verdicts in seen.items():
                out.setdefault(case_id, []).append(verdicts)
    return out


def test_repeats_decide_each_question_by_majority_resume_and_refuse_another_k(small, shared_runs, tmp_path):
    from tracebench.outcomes import Outcome
    from tracebench.score import Gating, instance_results

    run = shared_runs(small, "synthetic:global-interference,noise:0.2")
    chosen = _failing_ids(run, 14)
    summary = diagnose_run(run, tmp_path / "d", DiagnoseOptions(cases=chosen, settings=SETTINGS, repeats=3))
    generations = _round_verdicts(tmp_path / "d")
    cases = {c.id: c for folder in (tmp_path / "d" / "rounds").iterdir() for c in read_cases(folder / "cases")}
    mixed = checked = 0
    for tree in _trees(tmp_path / "d"):
        for node in tree.nodes[1:]:
            if not node.evaluated:
                continue
            samples = generations[node.case_id]
            assert len(samples) == 3 and samples[0] == {q: s.value for q, s in node.verdicts.items()}
            decided = {q: Outcome.of(_majority(tuple(s[q] for s in samples))) for q in samples[0]}
            expected = {t: o.status.value for (_, t), o in
                        instance_results(cases[node.case_id], decided, Gating.WITHIN).items()}
            assert node.status == expected
            checked += 1
            for target, statuses in node.sample_status.items():
                assert len(statuses) == 3
                mixed += len(set(statuses)) > 1
        root = tree.nodes[0]
        assert root.case_id == tree.case_id and len(root.sample_images) == 2  # the run's image is the first
    assert mixed > 10 and checked > 15 and summary.cases == 14
    before = (tmp_path / "d" / TREES_FILE).read_bytes()
    diagnose_run(run, tmp_path / "d", DiagnoseOptions(cases=chosen, settings=SETTINGS, repeats=3))  # resumed: nothing redone
    assert (tmp_path / "d" / TREES_FILE).read_bytes() == before
    calls = [json.loads(p.read_text())["calls"] for p in (tmp_path / "d" / "rounds").glob("*/run*/run.json")]
    assert len(calls) >= 3 and all(c == {} for c in calls)
    result = run_trace("diagnose", str(run), "--cases", chosen, "--out", str(tmp_path / "d"), "--repeats", "5")
    assert result.returncode == 2 and "other repeats" in result.stderr, result.stderr
    for bad in ("0", "two", "1001"):
        result = run_trace("diagnose", str(run), "--out", str(tmp_path / "e"), "--repeats", bad)
        assert result.returncode == 2 and "--repeats" in result.stderr and "Traceback" not in result.stderr
        assert not (tmp_path / "e").exists()


@pytest.mark.slow
def test_repeats_undo_what_noise_does_to_localization(small, shared_runs, tmp_path):
    """A requirement broken by a global term fails in every generation; noise in one of three. By
    majority, noise rarely decides a node, so the attribution is the noiseless one more often."""
    run = shared_runs(small, "synthetic:global-interference,noise:0.1")
    exact = diagnose_run(shared_runs(small, "synthetic:global-interference"), tmp_path / "exact", DiagnoseOptions(settings=SETTINGS))
    once = diagnose_run(run, tmp_path / "once", DiagnoseOptions(settings=SETTINGS))
    thrice = diagnose_run(run, tmp_path / "thrice", DiagnoseOptions(settings=SETTINGS, repeats=3))
    assert exact.localization_accuracy["accuracy"] == 1.0
    assert thrice.localization_accuracy["accuracy"] > once.localization_accuracy["accuracy"] + 0.05
    assert thrice.unstable["share"] < once.unstable["share"] / 2


def test_abstentions_of_later_generations_are_counted(small, shared_runs, tmp_path):
    """A judge that answers the first generation and abstains on the others: the decided results
    are the first generation's (one answer is the majority of the answered), and the summary
    counts the later abstentions, so the command exits 3 and --retry-abstained asks again."""
    plugin = tmp_path / "picky.py"
    plugin.write_text(
        "from tracebench.providers import CallFailed, Judge\n"
        "from tracebench.zoo import oracle_reply, read_record\n"
        "import json\n"
        "class Picky(Judge):\n"
        "    spec = 'python:picky'\n"
        "    def ask(self, case, questions, image, references):\n"
        "        record = read_record(image)\n"
        "        if record.drawn['seed'] != 0:  # two ways, so the calls are never stopped early as one outage\n"
        "            raise CallFailed('busy' if sum(map(ord, case.id)) % 2 else 'asleep')\n"
        "        return json.dumps(oracle_reply(questions, record))\n"
        "judge = Picky\n")
    run = shared_runs(small, "synthetic:global-interference")
    chosen = _failing_ids(run, 6)
    once = diagnose_run(run, tmp_path / "once", DiagnoseOptions(cases=chosen, judges=[f"python:{plugin}"], settings=SETTINGS))
    thrice = diagnose_run(run, tmp_path / "thrice", DiagnoseOptions(cases=chosen, judges=[f"python:{plugin}"], settings=SETTINGS,
                          repeats=3))
    assert once.abstained_verdicts == 0 and thrice.sources == once.sources
    assert thrice.abstained_verdicts > 0
    assert all("busy" in reason or "asleep" in reason for reason in thrice.abstention_reasons)
    tree = _trees(tmp_path / "thrice")[0]
    assert all(len(n.sample_abstained) == 2 and all(n.sample_abstained) for n in tree.nodes if n.evaluated)
    result = run_trace("diagnose", str(run), "--cases", chosen, "--judge", f"python:{plugin}", "--repeats", "3",
                       "--out", str(tmp_path / "thrice"))
    assert result.returncode == 3 and "--retry-abstained" in result.stderr, result.stderr
