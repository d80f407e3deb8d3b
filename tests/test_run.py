"""`trace run`, `trace score`, `trace merge` and `trace serve`, end to end on the synthetic world."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from openai_server import OpenAIStub
from test_cli import _trace_executable, run_trace
from tracebench.errors import TraceError
from tracebench.records import RunManifest, Verdict, read_verdicts
from tracebench.providers import ModelSettings
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import SampleOptions, read_cases, sample_benchmark
from tracebench.score import OPERATORS, score_run
from tracebench.serve import ZooServer
from tracebench.zoo import generate, parse_profile

SETTINGS = ModelSettings(max_retries=3, timeout=30.0)


@pytest.fixture(scope="module")
def bench(run_bench) -> Path:
    """Read only (tests/conftest.py: made once for all workers); its runs through ``shared_runs``."""
    return run_bench


def _run(bench: Path, out: Path, generator: str, judges=("oracle",), **kw):
    return run_benchmark(bench, out, RunOptions(generator=generator, judges=list(judges), settings=kw.pop("settings", SETTINGS),
                         **kw))


def _scores(out: Path) -> dict:
    return score_run(out).model_dump(mode="json")


def test_perfect_generator_scores_one_everywhere(bench, tmp_path):
    manifest = _run(bench, tmp_path / "run", "synthetic:perfect")
    assert manifest.abstentions == 0 and manifest.cases == len(list(read_cases(bench)))
    scores = _scores(tmp_path / "run")
    assert scores["avg"] == 1.0 and scores["case_weighted"]["overall"] == 1.0
    assert scores["operators"] == scores["case_weighted"]["operators"] == {op: 1.0 for op in OPERATORS}
    assert all(v["disentangle"] == 1.0 for v in scores["by_subtype"].values())


# profile -> operators it must lower (the others stay at 1.0)
PROFILES = {
    "no-global": {"disentangle", "apply"},
    "global-interference": {"anchor", "disentangle"},
    "composition-interference:2": {"anchor"},
    "relation-blind": {"disentangle", "apply", "compose"},
    "weak-subtype:1.1_pattern_texture": {"disentangle"},  # apply too under --gating cross (tests/test_score.py)
    "leaky-binding": {"disentangle", "apply"},
    "duplicate": {"compose"},
    "noise:0.2": {"anchor", "disentangle", "apply", "compose"},
}


@pytest.mark.parametrize("profile,lowered", PROFILES.items())
def test_each_profile_lowers_its_operators_only(bench, shared_runs, profile, lowered):
    scores = _scores(shared_runs(bench, f"synthetic:{profile}"))["operators"]
    for op in OPERATORS:
        if op in lowered:
            assert scores[op] < 1.0, (profile, op, scores)
        else:
            assert scores[op] == 1.0, (profile, op, scores)


def test_a_second_run_makes_no_call(bench, tmp_path):
    first = _run(bench, tmp_path / "run", "synthetic:noise:0.1")
    assert sum(first.calls.values()) > 0
    before = (tmp_path / "run" / "verdicts.jsonl").read_bytes()
    second = _run(bench, tmp_path / "run", "synthetic:noise:0.1")
    assert second.calls == {}
    assert (tmp_path / "run" / "verdicts.jsonl").read_bytes() == before
    # another folder sharing the cache makes no call either, and writes the same verdicts
    third = _run(bench, tmp_path / "again", "synthetic:noise:0.1", cache_dir=tmp_path / "run" / "cache")
    assert third.calls == {} and third.cache_hits > 0
    assert (tmp_path / "again" / "verdicts.jsonl").read_bytes() == before


def test_resume_keeps_cases_whose_lines_are_apart_and_refuses_a_question_twice(bench, tmp_path):
    """Resume reads where each case's lines lie: a case whose lines were moved apart is still
    complete (no call, the same lines in case order), and one question twice within a case's
    lines is an error naming both lines, leaving the file as it was."""
    first = _run(bench, tmp_path / "run", "synthetic:noise:0.1")
    path = tmp_path / "run" / "verdicts.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    cases = [Verdict.model_validate_json(line).case_id for line in lines]
    assert cases[0] == cases[1] != cases[-1]
    moved = lines[1:] + lines[:1]  # the first case's first line after every other case's lines
    path.write_bytes(b"".join(moved))
    again = _run(bench, tmp_path / "run", "synthetic:noise:0.1")
    assert again.calls == {} and again.cases == first.cases and again.verdicts == first.verdicts
    assert sorted(path.read_bytes().splitlines()) == sorted(line.rstrip(b"\n") for line in lines)
    assert [Verdict.model_validate_json(line).case_id for line in path.read_bytes().splitlines()] == sorted(
        cases, key=cases.index)

    twice = lines[:2] + lines[1:]  # the first case's second question again, right after itself
    path.write_bytes(b"".join(twice))
    question = Verdict.model_validate_json(lines[1]).question_id
    with pytest.raises(TraceError, match=rf"verdicts.jsonl:3: question_id: case '{cases[0]}' question "
                                         rf"'{re.escape(question)}' appears twice \(first on line 2\)"):
        _run(bench, tmp_path / "run", "synthetic:noise:0.1")
    assert path.read_bytes() == b"".join(twice)


def test_scores_read_as_a_stream_equal_scores_of_the_run_held_whole(bench, tmp_path):
    """score_run streams the run (a case and its verdicts at a time); score_folder scores the
    run read whole. They agree on a run as written, on one whose cases' lines were moved
    apart (read whole then), and both refuse a question twice anywhere."""
    import shutil

    from tracebench.run import load_run, stream_run
    from tracebench.score import score_folder

    _run(bench, tmp_path / "run", "synthetic:global-interference,noise:0.2")
    whole = score_folder(load_run(tmp_path / "run")).model_dump()
    assert score_run(tmp_path / "run").model_dump() == whole
    assert [item.case.id for item in stream_run(tmp_path / "run")] == list(load_run(tmp_path / "run").verdicts)

    shutil.copytree(tmp_path / "run", tmp_path / "apart")
    path = tmp_path / "apart" / "verdicts.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[1:2] + lines[:1] + lines[2:]))  # two lines of the first case swapped
    assert score_run(tmp_path / "apart").model_dump() == whole  # only the order within a case moved
    path.write_bytes(b"".join(lines[1:] + lines[:1]))  # the first case's first line after every other case
    assert score_run(tmp_path / "apart").model_dump() == score_folder(load_run(tmp_path / "apart")).model_dump()
    path.write_bytes(b"".join(lines + lines[:1]))  # a question twice, far apart
    for score in (score_run, lambda run: score_folder(load_run(run))):
        with pytest.raises(TraceError, match=rf"verdicts.jsonl:{len(lines) + 1}: question_id: .* appears twice"):
            score(tmp_path / "apart")


_KILLING_GENERATOR = r"""
import json, os, shutil, signal, sys
from pathlib import Path
from tracebench.records import Case
data = json.loads(sys.stdin.read())
for ref in data["references"]:  # absolute copies on stdin; a case record's paths are relative to its folder
    assert Path(ref["path"]).is_absolute() and Path(ref["path"]).is_file()
    ref["path"] = "references/" + Path(ref["path"]).name
case = Case.model_validate(data)
counter = Path(os.environ["COUNTER"])   # a folder: call n creates file n (O_EXCL: safe under concurrency)
counter.mkdir(exist_ok=True)
n = 1
while True:
    try:
        os.close(os.open(counter / str(n), os.O_CREAT | os.O_EXCL))
        break
    except FileExistsError:
        n += 1
if os.environ.get("KILL_AT") and n == int(os.environ["KILL_AT"]):
    shell = os.getppid()
    trace = int(Path(f"/proc/{shell}/stat").read_text().split()[3])
    os.kill(trace, signal.SIGKILL)   # a real kill -9 of `trace run`, mid-run
# the zoo's image of the case (global-interference), drawn beforehand by the test: a process
# that imports and loads the zoo for each case would spend most of the test starting up
shutil.copyfile(Path(os.environ["IMAGES"]) / f"{case.id}.png", os.environ["TRACEBENCH_OUTPUT"])
"""


@pytest.mark.slow
def test_kill_and_resume_gives_the_verdicts_of_an_uninterrupted_run(tmp_path):
    bench = tmp_path / "bench"  # small: the command generator starts a Python process per case
    sample_benchmark(bench, SampleOptions(slots=tuple(range(1, 9)), per_slot=2, seed=2, applications=False))
    script = tmp_path / "gen.py"
    script.write_text(_KILLING_GENERATOR)
    (tmp_path / "images").mkdir()
    for case in read_cases(bench):
        (tmp_path / "images" / f"{case.id}.png").write_bytes(generate(case, parse_profile("global-interference"))[0])
    generator = f"command:{sys.executable} {script}"
    reference = tmp_path / "reference"
    args = [str(bench), "--generator", generator, "--judge", "oracle", "--concurrency", "2"]
    os.environ["COUNTER"] = str(tmp_path / "count-a")
    os.environ["IMAGES"] = str(tmp_path / "images")
    try:
        assert run_trace("run", *args, "--out", str(reference)).returncode == 0
        os.environ["COUNTER"] = str(tmp_path / "count-b")
        os.environ["KILL_AT"] = "7"
        killed = run_trace("run", *args, "--out", str(tmp_path / "resumed"))
        assert killed.returncode == -9  # SIGKILL
        del os.environ["KILL_AT"]
        resumed = run_trace("run", *args, "--out", str(tmp_path / "resumed"))
        assert resumed.returncode == 0, resumed.stderr
    finally:
        os.environ.pop("KILL_AT", None)
        os.environ.pop("COUNTER", None)
        os.environ.pop("IMAGES", None)
    assert RunManifest.model_validate_json((reference / "run.json").read_text()).abstentions == 0
    assert (tmp_path / "resumed" / "verdicts.jsonl").read_bytes() == (reference / "verdicts.jsonl").read_bytes()
    cases = len(list(read_cases(bench)))
    # the resumed run generated only what the killed one had not finished (at most the
    # calls in flight at the kill are repeated)
    assert len(list((tmp_path / "count-b").iterdir())) <= cases + 2


def _oracle_handler(cases: dict, flaky: bool):
    """A chat handler answering as the oracle, failing in every way a server can when flaky."""
    from tracebench.zoo import oracle_reply, read_record

    counter = itertools.count()
    lock = threading.Lock()

    def handler(request):
        with lock:
            n = next(counter)
        if flaky:
            if n % 7 == 1:
                return 429, "slow down"
            if n % 7 == 3:
                return 500, "internal error"
            if n % 7 == 5:
                return "this is { not json"
            if n % 7 == 6:
                import time

                time.sleep(0.3)
        texts = [p["text"] for m in request["messages"] for p in (m["content"] if isinstance(m["content"], list) else
                 [{"type": "text", "text": m["content"]}]) if p["type"] == "text"]
        images = [base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for m in request["messages"]
                  if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image_url"]
        generated = next(i for i in images if read_record(i) is not None)
        case = cases[read_record(generated).case_id]
        ids = {line[2:].split(":", 2)[0] + ":" + line[2:].split(":", 2)[1] for t in texts for line in t.splitlines()
               if line.startswith("- ")}
        return json.dumps(oracle_reply([q for q in case.checklist if q.id in ids], generated))

    return handler


@pytest.mark.slow
def test_a_flaky_server_loses_nothing(bench, shared_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-flaky-test-key-8271")
    cases = {c.id: c for c in read_cases(bench)}
    reference = shared_runs(bench, "synthetic:global-interference")
    with OpenAIStub(_oracle_handler(cases, flaky=True)) as stub:
        settings = ModelSettings(base_url=stub.base_url, max_retries=3, timeout=5.0)
        out = tmp_path / "flaky"
        first = _run(bench, out, "synthetic:global-interference", judges=("openai:oracle",), settings=settings,
                     concurrency=4)
        assert first.abstentions > 0  # the malformed replies, never counted as fails
        verdicts = [Verdict.model_validate_json(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
        assert all(v.verdict == "abstain" for v in verdicts if "not the expected JSON" in v.votes[0].reason)
        for _ in range(6):
            manifest = _run(bench, out, "synthetic:global-interference", judges=("openai:oracle",),
                            settings=settings, concurrency=4, retry_abstained=True)
            if manifest.abstentions == 0:
                break
        assert manifest.abstentions == 0
    ours = {(v.case_id, v.question_id): v.verdict for v in map(Verdict.model_validate_json,
                                                             (out / "verdicts.jsonl").read_text().splitlines())}
    theirs = {(v.case_id, v.question_id): v.verdict for v in map(Verdict.model_validate_json,
                                                               (reference / "verdicts.jsonl").read_text().splitlines())}
    assert ours == theirs
    for path in out.rglob("*"):
        if path.is_file():
            assert b"sk-flaky-test-key-8271" not in path.read_bytes(), path


@pytest.mark.slow
def test_trace_serve_through_the_openai_adapters_gives_the_same_scores(bench, shared_runs, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = shared_runs(bench, "synthetic:global-interference,relation-blind")
    with ZooServer([bench]).start() as server:
        settings = ModelSettings(base_url=server.base_url, max_retries=2, timeout=30.0)
        manifest = _run(bench, tmp_path / "http", "openai:synthetic/global-interference,relation-blind",
                        judges=("openai:oracle",), settings=settings, concurrency=4)
    assert manifest.abstentions == 0
    local, http = _scores(local), _scores(tmp_path / "http")
    assert http["operators"] == local["operators"] and http["avg"] == local["avg"]


def test_sharded_and_merged_equals_unsharded(bench, shared_runs, tmp_path):
    whole = shared_runs(bench, "synthetic:noise:0.2")
    for i in (1, 2, 3):
        _run(bench, tmp_path / f"shard{i}", "synthetic:noise:0.2", shard=(i, 3), cache_dir=tmp_path / "cache")
    result = run_trace("merge", *(str(tmp_path / f"shard{i}") for i in (1, 2, 3)), "--out", str(tmp_path / "merged"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "merged" / "verdicts.jsonl").read_bytes() == (whole / "verdicts.jsonl").read_bytes()
    assert _scores(tmp_path / "merged") == _scores(whole)


def test_folder_generator_and_ensembles(bench, shared_runs, tmp_path):
    first = shared_runs(bench, "synthetic:duplicate")
    again = tmp_path / "again"
    manifest = _run(bench, again, f"folder:{first / 'images'}", judges=("oracle", "oracle"))
    assert manifest.calls.get(f"folder:{first / 'images'}") is None  # reading files is no model call
    assert _scores(again)["operators"] == _scores(first)["operators"]
    verdict = Verdict.model_validate_json((again / "verdicts.jsonl").read_text().splitlines()[0])
    assert verdict.judge == "oracle+oracle" and len(verdict.votes) == 2


def test_an_ensemble_averages_its_judges_by_default_and_takes_the_majority_on_demand(bench, shared_runs, tmp_path):
    """The oracle and a judge answering yes to everything disagree on every broken question (and
    on every question that expects no): averaged, each is a fail of value 0.5; by majority, a
    tie, an abstention. Where they agree, both rules give the same outcome."""
    first = shared_runs(bench, "synthetic:noise:0.2")
    always_yes = f"python:{Path(__file__).parents[1] / 'examples' / 'plugins' / 'always_yes.py'}"
    judges = ("oracle", always_yes)
    mean = _run(bench, tmp_path / "mean", f"folder:{first / 'images'}", judges=judges)
    majority = _run(bench, tmp_path / "majority", f"folder:{first / 'images'}", judges=judges, ensemble="majority")
    assert (mean.ensemble, majority.ensemble) == ("mean", "majority")
    lines = zip((tmp_path / "mean" / "verdicts.jsonl").read_text().splitlines(),
                (tmp_path / "majority" / "verdicts.jsonl").read_text().splitlines())
    disagreed = 0
    for a, b in lines:
        averaged, voted = Verdict.model_validate_json(a), Verdict.model_validate_json(b)
        answers = {v.verdict for v in averaged.votes}
        if len(answers) == 2:
            disagreed += 1
            assert (averaged.verdict, averaged.value) == ("fail", 0.5)
            assert (voted.verdict, voted.value) == ("abstain", None)
        else:
            assert (averaged.verdict, averaged.value) == (voted.verdict, voted.value)
    assert disagreed > 100
    assert score_run(tmp_path / "mean").operators != score_run(tmp_path / "majority").operators
    assert _run(bench, tmp_path / "one", f"folder:{first / 'images'}").ensemble is None  # one judge: nothing to combine
    with pytest.raises(TraceError, match="another ensemble"):
        _run(bench, tmp_path / "mean", f"folder:{first / 'images'}", judges=judges, ensemble="majority")


def test_an_ensemble_member_s_silence_is_counted_reported_and_asked_again(bench, shared_runs, tmp_path):
    """The oracle answers everything; a second judge answers only the first question of each case
    (until told otherwise): no verdict abstains, yet the run records that judge's silent votes,
    exits 3 with the retry line, and --retry-abstained asks those cases again."""
    images = shared_runs(bench, "synthetic:noise:0.2") / "images"
    fixed = tmp_path / "fixed"
    plugin = tmp_path / "terse.py"
    plugin.write_text(
        "from pathlib import Path\n"
        "from tracebench.providers import Judge\n"
        "class Terse(Judge):\n"
        "    spec = 'python:terse'\n"
        "    def ask(self, case, questions, image, references):\n"
        f"        every = Path({str(fixed)!r}).exists()\n"
        "        return {q.id: q.expected for q in (questions if every else questions[:1])}\n"
        "judge = Terse\n")
    args = ("run", str(bench), "--generator", f"folder:{images}", "--judge", "oracle", "--judge", f"python:{plugin}",
            "--out", str(tmp_path / "run"))
    result = run_trace(*args)
    manifest = RunManifest.model_validate_json((tmp_path / "run" / "run.json").read_text())
    silent = manifest.verdicts - manifest.cases  # every question but one per case
    assert manifest.abstentions == 0 and manifest.votes_abstained == {"python:terse": silent}
    assert result.returncode == 3, result.stderr
    assert f"python:terse {silent} of {manifest.verdicts}" in result.stderr and "--retry-abstained" in result.stderr
    assert "python:terse: no answer for this question" in result.stderr
    assert run_trace(*args).returncode == 3  # a plain resume keeps them
    fixed.touch()
    again = run_trace(*args, "--retry-abstained")
    assert again.returncode == 0, again.stderr
    manifest = RunManifest.model_validate_json((tmp_path / "run" / "run.json").read_text())
    assert manifest.votes_abstained == {} and manifest.calls.get("python:terse") == manifest.cases


def test_score_json_and_command_line(bench, shared_runs):
    run = shared_runs(bench, "synthetic:global-interference")
    result = run_trace("score", str(run), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"avg", "operators", "case_weighted", "gating", "by_slot", "by_subtype", "by_entity_count",
            "by_application", "ci95", "abstentions", "cases"} <= set(data)
    assert set(data["by_slot"]) == {str(s) for s in range(1, 9)}
    low, high = data["ci95"]["anchor"]
    assert low <= data["operators"]["anchor"] <= high
    text = run_trace("score", str(run))
    assert "anchor" in text.stdout and "avg" in text.stdout and "case-weighted" in text.stdout


@pytest.mark.parametrize("args,fragment", [
    (["--generator", "nonsense", "--judge", "oracle"], "--generator"),
    (["--generator", "synthetic:perfect", "--judge", "gpt"], "--judge"),
    (["--generator", "synthetic:not-a-profile", "--judge", "oracle"], "not-a-profile"),
    (["--generator", "synthetic:perfect", "--judge", "oracle", "--shard", "3/2"], "--shard"),
])
def test_bad_run_arguments_are_one_line(bench, tmp_path, args, fragment):
    result = run_trace("run", str(bench), *args, "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_a_failing_command_is_an_abstention_never_a_fail(tmp_path):
    bench = tmp_path / "bench"
    sample_benchmark(bench, SampleOptions(slots=(1, 2), per_slot=2, seed=0, applications=False))
    out = tmp_path / "run"
    manifest = _run(bench, out, "command:echo broken >&2; exit 3")
    verdicts = [Verdict.model_validate_json(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    assert verdicts and all(v.verdict == "abstain" for v in verdicts)
    assert "exited with status 3: broken" in verdicts[0].votes[0].reason
    assert manifest.abstentions == len(verdicts)
    assert score_run(out).abstentions.count == len(verdicts)


def test_the_command_output_placeholder(tmp_path):
    bench = tmp_path / "bench"
    sample_benchmark(bench, SampleOptions(slots=(1,), per_slot=2, seed=0, applications=False))
    first = tmp_path / "first"
    _run(bench, first, "synthetic:perfect")
    script = tmp_path / "copy.py"
    script.write_text("import json, shutil, sys\ncase = json.load(sys.stdin)\n"
                      f"shutil.copyfile('{first / 'images'}/' + case['id'] + '.png', sys.argv[1])\n")
    _run(bench, tmp_path / "second", f"command:{sys.executable} {script} {{output}}")
    assert _scores(tmp_path / "second")["operators"] == _scores(first)["operators"]


def test_a_command_reads_absolute_reference_paths_from_anywhere(tmp_path):
    """The example command generator, run from another working directory: the references it
    opens are absolute paths to the case's own images."""
    from PIL import Image

    bench = tmp_path / "bench"
    sample_benchmark(bench, SampleOptions(slots=(2, 3), per_slot=2, seed=0, applications=False))
    script = Path(__file__).resolve().parent.parent / "examples" / "commands" / "first_reference.py"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run([*_trace_executable(), "run", str(bench), "--generator",
                             f"command:{sys.executable} {script} {{output}}", "--judge", "oracle",
                             "--out", str(tmp_path / "run")], capture_output=True, text=True, cwd=elsewhere,
                            timeout=300)
    assert result.returncode in (0, 3), result.stderr  # the oracle finds no zoo record in a copy
    for case in read_cases(bench):
        with Image.open(tmp_path / "run" / "images" / f"{case.id}.png") as made, \
                Image.open(bench / case.references[0].path) as first:
            assert made.size == (512, 512)
            assert made.convert("RGB").tobytes() == first.convert("RGB").resize((512, 512)).tobytes()


def test_a_run_folder_is_only_resumed_by_the_same_run(tmp_path, monkeypatch):
    bench = tmp_path / "bench"
    sample_benchmark(bench, SampleOptions(slots=(1, 2), per_slot=3, seed=0, applications=False))
    out = tmp_path / "run"
    first = _run(bench, out, "synthetic:perfect")
    lines = (out / "verdicts.jsonl").read_bytes()
    for args in (["--generator", "synthetic:perfect", "--judge", "oracle", "--shard", "1/2"],
                 ["--generator", "synthetic:noise:0.5", "--judge", "oracle"],
                 ["--generator", "synthetic:perfect", "--judge", "oracle", "--judge", "oracle"],
                 ["--generator", "synthetic:perfect", "--judge", "oracle", "--judge-batch", "op"]):
        result = run_trace("run", str(bench), *args, "--out", str(out))
        assert result.returncode == 2 and "choose another --out" in result.stderr, args
        assert len(result.stderr.splitlines()) == 1
    assert (out / "verdicts.jsonl").read_bytes() == lines  # nothing lost
    assert first.cases == 6
    other = tmp_path / "other"
    sample_benchmark(other, SampleOptions(slots=(1, 2), per_slot=3, seed=9, applications=False))
    result = run_trace("score", str(out), "--cases", str(other))
    assert result.returncode == 2 and "not the benchmark this run was made from" in result.stderr


def test_a_run_that_kept_no_answer_takes_the_corrected_command(tmp_path):
    """A typo in the generator's command stops the run early (its first calls all fail alike):
    the message says what to fix, and the corrected command runs in the same folder; a run
    that kept cases is still only resumed by the same run."""
    bench = tmp_path / "bench"
    sample_benchmark(bench, SampleOptions(slots=(1, 2, 3), per_slot=3, seed=0, applications=False))
    out = tmp_path / "run"
    typo = run_trace("run", str(bench), "--generator", "command:python3 nosuch.py {output}", "--judge", "oracle",
                     "--out", str(out))
    assert typo.returncode == 2, typo.stderr
    (line,) = typo.stderr.strip().splitlines()
    assert "Fix the command and run again: a run that kept no case takes the corrected spec" in line
    assert "endpoint" not in line
    fixed = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle", "--out", str(out))
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads((out / "run.json").read_text())["generator"] == "synthetic:perfect"
    kept = (out / "verdicts.jsonl").read_bytes()
    other = run_trace("run", str(bench), "--generator", "synthetic:noise:0.5", "--judge", "oracle", "--out", str(out))
    assert other.returncode == 2 and "choose another --out" in other.stderr
    assert (out / "verdicts.jsonl").read_bytes() == kept


def test_missing_keys_and_files_stop_before_anything_is_written(tmp_path, monkeypatch):
    bench = tmp_path / "bench"
    sample_benchmark(bench, SampleOptions(slots=(1, 2), per_slot=2, seed=0, applications=False))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    result = run_trace("run", str(bench), "--generator", "openai:gpt-image-1", "--judge", "oracle",
                       "--out", str(tmp_path / "a"))
    assert result.returncode == 2 and "OPENAI_API_KEY is not set" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and not (tmp_path / "a").exists()
    reference = next((bench / "references").iterdir())
    reference.unlink()
    result = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle",
                       "--out", str(tmp_path / "b"))
    assert result.returncode == 2 and "is missing" in result.stderr and not (tmp_path / "b").exists()
    result = run_trace("score", str(tmp_path / "nothing"))
    assert result.returncode == 2 and "not a run folder" in result.stderr


def test_merge_accepts_an_empty_shard(tmp_path):
    bench = tmp_path / "bench"
    sample_benchmark(bench, SampleOptions(slots=(1,), per_slot=2, seed=0, applications=False))
    runs = []
    for i in range(1, 7):  # 2 cases in 6 shards: most shards are empty
        runs.append(tmp_path / f"shard{i}")
        _run(bench, runs[-1], "synthetic:perfect", shard=(i, 6))
    result = run_trace("merge", *map(str, runs), "--out", str(tmp_path / "merged"))
    assert result.returncode == 0, result.stderr
    _run(bench, tmp_path / "whole", "synthetic:perfect")
    assert (tmp_path / "merged" / "verdicts.jsonl").read_bytes() == (tmp_path / "whole" / "verdicts.jsonl").read_bytes()


def test_parse_reply_reads_fenced_json_and_abstains_on_the_rest(bench):
    from tracebench.run import parse_reply

    questions = next(iter(read_cases(bench))).checklist[:2]
    body = json.dumps({"answers": [{"id": questions[0].id, "answer": "Yes", "reason": "seen"},
                                   {"id": questions[1].id, "answer": "maybe"}]})
    for raw in (body, f"```json\n{body}\n```", f"  ```\n{body}```  "):
        parsed = parse_reply(raw, questions)
        assert parsed[questions[0].id][:2] == ("yes", "seen")
        assert parsed[questions[1].id][0] is None and "neither yes nor no" in parsed[questions[1].id][1]
    broken = parse_reply("``` not json", questions)
    assert all(answer is None and reason == "the reply is not the expected JSON"
               for answer, reason, _ in broken.values())


def test_a_benchmark_removed_while_a_run_is_read_is_one_error(bench, tmp_path):
    """A run streamed after its benchmark's cases.jsonl went away (deleted by another job, say)
    stops with a TraceError naming the file, not an OSError's traceback."""
    import shutil

    from tracebench.run import stream_run

    copy = tmp_path / "bench"
    shutil.copytree(bench, copy, copy_function=os.link)
    _run(copy, tmp_path / "run", "synthetic:perfect")
    stream = stream_run(tmp_path / "run")  # its cases indexed
    (copy / "cases.jsonl").unlink()
    with pytest.raises(TraceError, match=r"cases.jsonl: changed while it was read \(No such file or directory\)"):
        list(stream)


@pytest.mark.slow
def test_an_erring_oracle_answers_alike_in_process_and_behind_trace_serve(bench, shared_runs, tmp_path, monkeypatch):
    """oracle:flip=P,yes-bias=Q draws its errors from the record in the image, so the served judge
    (model "oracle:flip=…") gives the verdicts the in-process one gives, and they differ from the
    exact oracle's."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    images = shared_runs(bench, "synthetic:strain") / "images"
    judge = "oracle:flip=0.1,yes-bias.leakage=0.5"
    local = _run(bench, tmp_path / "local", f"folder:{images}", judges=(judge,))
    with ZooServer([bench]).start() as server:
        settings = ModelSettings(base_url=server.base_url, max_retries=2, timeout=30.0)
        http = _run(bench, tmp_path / "http", f"folder:{images}", judges=(f"openai:{judge}",), settings=settings,
                    concurrency=4)
    assert local.abstentions == http.abstentions == 0 and local.judges == (judge,)

    def statuses(run: Path) -> dict[tuple[str, str], str]:
        return {(v.case_id, v.question_id): v.verdict for v in read_verdicts(run)}

    exact = statuses(shared_runs(bench, "synthetic:strain"))
    assert statuses(tmp_path / "http") == statuses(tmp_path / "local") != exact
    wrong = [key for key, status in statuses(tmp_path / "local").items() if status != exact[key]]
    assert 0.05 * len(exact) < len(wrong) < 0.25 * len(exact)
