"""Record files: one reader and one writer each; a broken line is `FILE:LINE: field: message`, exit 2.

The command-line tests break one line of a real file written by the real stages and run the
real command (the `trace` script, in a subprocess) on it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_cli import run_trace
from tracebench.diagnose import DiagnoseOptions, diagnose_run, export_nodes
from tracebench.errors import TraceError
from tracebench.jsonfiles import read_json, read_jsonl, write_json, write_jsonl
from tracebench.records import (CASES_FILE, DIAGNOSIS_FILE, MANIFEST_FILE, NODES, NODES_FILE, RUN_FILE, RUN_MANIFEST,
                                SAMPLE_MANIFEST, SUMMARY_FILE, TREES_FILE, VERDICTS, VERDICTS_FILE, Case,
                                RunManifest, Verdict, checklist_problem, read_cases)
from tracebench.providers import ModelSettings
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import SampleOptions, sample_benchmark

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)
GENERATOR = "synthetic:global-interference"


@pytest.fixture(scope="module")
def world(shared_folder) -> dict[str, Path]:
    """Read only (made once for all workers): the tests break copies of it."""
    def make(root: Path) -> None:
        sample_benchmark(root / "bench", SampleOptions(slots=(1, 2, 3), per_slot=2, seed=4, applications=False))
        run_benchmark(root / "bench", root / "run", RunOptions(generator=GENERATOR, judges=["oracle"], settings=SETTINGS))
        diagnose_run(root / "run", root / "diag", DiagnoseOptions(cases="all", settings=SETTINGS))
        (root / "sources.jsonl").write_text('{"case_id": "s1-00000", "target": "f1", "source": "stable_success"}\n')

    root = shared_folder("test_records-world", make)
    return {"root": root, "bench": root / "bench", "run": root / "run", "diag": root / "diag"}


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def _edit_line(path: Path, lineno: int, edit: Callable[[str], str]) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) >= lineno, f"{path} has {len(lines)} lines"
    lines[lineno - 1] = edit(lines[lineno - 1])
    path.write_text("".join(lines), encoding="utf-8")


def _cut(line: str) -> str:
    return line[: len(line) // 2] + "\n"


def _field(name: str, value) -> Callable[[str], str]:
    return lambda line: json.dumps({**json.loads(line), name: value}) + "\n"


def _json_line(path: Path, key: str) -> int:
    """The line of a top-level key in an indented JSON file."""
    return next(k for k, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(f'  "{key}"'))


def _refused(result, fragment: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert fragment in result.stderr, result.stderr


# ------------------------------------------------------------------------------ the readers and writers

def _verdict(case: str, verdict: str = "pass") -> Verdict:
    return Verdict(case_id=case, question_id="f1:existence", op="anchor", verdict=verdict, judge="oracle", votes=())


def test_a_bad_jsonl_line_is_named_with_its_field(tmp_path):
    path = tmp_path / "v.jsonl"
    write_jsonl(path, [_verdict("a"), _verdict("b"), _verdict("c")])
    assert [v.case_id for v in read_jsonl(path, Verdict)] == ["a", "b", "c"]
    _edit_line(path, 3, _field("verdict", "maybe"))
    with pytest.raises(TraceError) as err:
        list(read_jsonl(path, Verdict))
    assert str(err.value).startswith(f"{path}:3: verdict: expected 'pass', 'fail' or 'abstain'")
    _edit_line(path, 2, _cut)
    with pytest.raises(TraceError, match=rf"^{path}:2: not JSON: .* \(column \d+\)$"):
        list(read_jsonl(path, Verdict))
    path.write_text(_verdict("a").model_dump_json() + "\n\n  \n" + '["not", "a", "record"]\n')
    with pytest.raises(TraceError, match=rf"^{path}:4: record: "):  # blank lines are skipped, not miscounted
        list(read_jsonl(path, Verdict))


def test_only_a_torn_last_line_is_dropped(tmp_path):
    path = tmp_path / "v.jsonl"
    lines = [_verdict(c).model_dump_json() + "\n" for c in "abc"]
    path.write_text("".join(lines[:2]) + lines[2][:20])  # a kill in the middle of the last write
    assert [v.case_id for v in read_jsonl(path, Verdict, torn_tail=True)] == ["a", "b"]
    with pytest.raises(TraceError, match=rf"^{path}:3: not JSON"):
        list(read_jsonl(path, Verdict))  # a finished file may not end torn
    path.write_text(lines[0] + lines[1][:20] + "\n" + lines[2])  # broken in the middle: not a kill
    with pytest.raises(TraceError, match=rf"^{path}:2: not JSON"):
        list(read_jsonl(path, Verdict, torn_tail=True))
    path.write_text("".join(lines[:2]) + lines[2][:20] + "\n")  # a whole line, ended, but broken
    with pytest.raises(TraceError, match=rf"^{path}:3: not JSON"):
        list(read_jsonl(path, Verdict, torn_tail=True))


def test_a_json_file_error_names_the_line_of_its_field(world, tmp_path):
    manifest = RUN_MANIFEST.read(world["run"])
    path = tmp_path / RUN_FILE
    write_json(path, manifest)
    assert read_json(path, RunManifest) == manifest
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "judges": 5}, indent=2))
    with pytest.raises(TraceError, match=rf"^{path}:{_json_line(path, 'judges')}: judges: "):
        read_json(path, RunManifest)
    path.write_text(json.dumps({**data, "calls": {"oracle": "many"}}, indent=2))
    with pytest.raises(TraceError, match=rf"^{path}:{_json_line(path, 'calls') + 1}: calls.oracle: "):
        read_json(path, RunManifest)  # the line of the nested value
    path.write_text(json.dumps({**data, "colour": "red"}, indent=2))
    with pytest.raises(TraceError, match=rf"^{path}:{_json_line(path, 'colour')}: record: unknown field 'colour'$"):
        read_json(path, RunManifest)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "generator"}, indent=2))
    with pytest.raises(TraceError, match=rf"^{path}:1: record: missing field 'generator'$"):
        read_json(path, RunManifest)
    text = json.dumps(data, indent=2)
    path.write_text(text.replace('"oracle"', "oracle", 1))
    with pytest.raises(TraceError, match=rf"^{path}:{_json_line(path, 'judges') + 1}: not JSON: .* \(column 5\)$"):
        read_json(path, RunManifest)
    judges = _json_line(path, "judges")
    path.write_bytes(text.encode().replace(b"oracle", b"or\xffacle", 1))
    with pytest.raises(TraceError, match=rf"^{path}:{judges + 1}: not UTF-8 text$"):
        read_json(path, RunManifest)


def test_writers_are_atomic_and_give_ordinary_permissions(tmp_path):
    path = tmp_path / "v.jsonl"
    write_jsonl(path, (_verdict(c) for c in "ab"))
    umask = os.umask(0o022)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's 0600
    assert [p.name for p in tmp_path.iterdir()] == ["v.jsonl"]

    def failing():
        yield _verdict("c")
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        write_jsonl(path, failing())
    assert [v.case_id for v in read_jsonl(path, Verdict)] == ["a", "b"]  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["v.jsonl"]


def test_the_case_reader_checks_each_checklist(world, tmp_path):
    case = next(c for c in read_cases(world["bench"]) if len(c.checklist) >= 3)
    assert checklist_problem(case) is None
    first, second, *rest = case.checklist
    unknown = case.model_copy(update={"checklist": (first, second.model_copy(update={"depends_on": ("x:y",)}), *rest)})
    assert checklist_problem(unknown) == f"checklist: {second.id} depends on 'x:y', which the case does not ask"
    cycle = case.model_copy(update={"checklist": (first.model_copy(update={"depends_on": (second.id,)}),
                                                  second.model_copy(update={"depends_on": (first.id,)}), *rest)})
    assert checklist_problem(cycle) in (f"checklist: dependency cycle {first.id} -> {second.id} -> {first.id}",
                                        f"checklist: dependency cycle {second.id} -> {first.id} -> {second.id}")
    twice = case.model_copy(update={"checklist": (first, first, *rest)})
    assert checklist_problem(twice) == f"checklist: question {first.id!r} appears twice"
    bench = _copy(world["bench"], tmp_path / "bench")
    _edit_line(bench / CASES_FILE, 2, lambda _: cycle.model_dump_json() + "\n")
    with pytest.raises(TraceError, match=rf"^{bench / CASES_FILE}:2: checklist: dependency cycle "):
        list(read_cases(bench))


def test_node_occurrences_round_trip_and_are_checked(world, tmp_path):
    count = export_nodes(world["run"], tmp_path / "nodes", cases="all")
    occurrences = list(NODES.read(tmp_path / "nodes"))
    assert len({o.case_id for o in occurrences}) == count
    assert {o.case_id for o in occurrences} == {c.id for c in read_cases(tmp_path / "nodes")}
    _edit_line(tmp_path / "nodes" / NODES_FILE, 1, _field("node", None))
    with pytest.raises(TraceError, match=rf"^{tmp_path / 'nodes' / NODES_FILE}:1: node: "):
        list(NODES.read(tmp_path / "nodes"))
    with pytest.raises(TraceError, match="not a folder of exported nodes"):
        NODES.read(tmp_path)


def test_diagnosis_sub_cases_are_written_by_the_sample_writer(world):
    """A round of sub-cases is a benchmark folder like `trace sample`'s: the manifest counts
    what the folder holds, and every reference is in it."""
    for folder in sorted((world["diag"] / "rounds").glob("*/cases")):
        cases = list(read_cases(folder))
        manifest = SAMPLE_MANIFEST.read(folder)
        assert manifest.cases == len(cases) == sum(manifest.counts_per_slot.values())
        assert manifest.distinct_templates == len({c.template for c in cases})
        assert set(manifest.whole_share) == set(manifest.counts_per_slot)
        assert all((folder / r.path).is_file() for c in cases for r in c.references)


# ------------------------------------------------------------------------------ every reader through the CLI

def _undeclared_dependency(line: str) -> str:
    case = Case.model_validate_json(line)
    first = case.checklist[0].model_copy(update={"depends_on": ("f9:nothing",)})
    return case.model_copy(update={"checklist": (first, *case.checklist[1:])}).model_dump_json() + "\n"


@pytest.mark.parametrize("edit,message", [
    (_cut, "not JSON: "),
    (_field("slot", "many"), "slot: expected an integer"),
    (_undeclared_dependency, "checklist: {first} depends on 'f9:nothing', which the case does not ask"),
])
def test_a_broken_case_line_stops_run_and_score(world, tmp_path, edit, message):
    message = message.format(first=list(read_cases(world["bench"]))[2].checklist[0].id)
    bench = _copy(world["bench"], tmp_path / "bench")
    _edit_line(bench / CASES_FILE, 3, edit)
    where = f"{bench / CASES_FILE}:3: {message}"
    _refused(run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle",
                       "--out", str(tmp_path / "out")), where)
    assert not (tmp_path / "out").exists()
    _refused(run_trace("score", str(world["run"]), "--cases", str(bench)), where)


def test_a_broken_verdict_line_stops_score_report_agree_and_resume(world, tmp_path):
    run = _copy(world["run"], tmp_path / "run")
    _edit_line(run / VERDICTS_FILE, 2, _cut)
    where = f"{run / VERDICTS_FILE}:2: not JSON: "
    _refused(run_trace("score", str(run)), where)
    _refused(run_trace("report", str(run), "--out", str(tmp_path / "r.html")), where)
    assert not (tmp_path / "r.html").exists()
    _refused(run_trace("agree", "--cases", str(world["bench"]), "--judge", str(run), "--judge", str(world["run"])),
             where)
    before = (run / VERDICTS_FILE).read_bytes()
    _refused(run_trace("run", str(world["bench"]), "--generator", GENERATOR, "--judge", "oracle", "--out", str(run)),
             where)  # resuming: broken in the middle is not a torn last line
    assert (run / VERDICTS_FILE).read_bytes() == before
    _refused(run_trace("merge", str(run), str(world["run"]), "--out", str(tmp_path / "merged")), where)


def test_a_torn_last_verdict_line_is_resumed(world, tmp_path):
    run = _copy(world["run"], tmp_path / "run")
    whole = (run / VERDICTS_FILE).read_bytes()
    (run / VERDICTS_FILE).write_bytes(whole[: len(whole) - 40])  # a kill in the middle of the last line
    result = run_trace("run", str(world["bench"]), "--generator", GENERATOR, "--judge", "oracle", "--out", str(run))
    assert result.returncode == 0, result.stderr
    assert (run / VERDICTS_FILE).read_bytes() == whole
    assert [v.case_id for v in VERDICTS.read(run)] == [v.case_id for v in VERDICTS.read(world["run"])]


@pytest.mark.parametrize("change,message", [({"judges": 5}, "judges: "), ({"cases": "six"}, "cases: ")])
def test_a_broken_run_manifest_stops_score(world, tmp_path, change, message):
    run = _copy(world["run"], tmp_path / "run")
    data = json.loads((run / RUN_FILE).read_text())
    (run / RUN_FILE).write_text(json.dumps({**data, **change}, indent=2) + "\n")
    line = _json_line(run / RUN_FILE, next(iter(change)))
    _refused(run_trace("score", str(run)), f"{run / RUN_FILE}:{line}: {message}")
    (run / RUN_FILE).write_text(json.dumps(data, indent=2)[:-2])  # the closing brace lost
    end = len((run / RUN_FILE).read_text().splitlines())
    _refused(run_trace("score", str(run)), f"{run / RUN_FILE}:{end}: not JSON: ")
    _refused(run_trace("diagnose", str(run), "--out", str(tmp_path / "diag")), f"{run / RUN_FILE}:{end}: not JSON: ")


@pytest.mark.parametrize("name,key", [(SUMMARY_FILE, "instances"), (DIAGNOSIS_FILE, "strategy")])
def test_a_broken_diagnosis_file_stops_report(world, tmp_path, name, key):
    diag = _copy(world["diag"], tmp_path / "diag")
    data = json.loads((diag / name).read_text())
    (diag / name).write_text(json.dumps({**data, key: "lots"}, indent=2) + "\n")
    _refused(run_trace("report", str(world["run"]), "--diagnosis", str(diag), "--out", str(tmp_path / "r.html")),
             f"{diag / name}:{_json_line(diag / name, key)}: {key}: ")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_a_broken_tree_line_stops_agree_report_and_merge(world, tmp_path):
    diag = _copy(world["diag"], tmp_path / "diag")
    _edit_line(diag / TREES_FILE, 2, _field("strategy", "guess"))
    where = f"{diag / TREES_FILE}:2: strategy: "
    agree = ("agree", "--cases", str(world["bench"]), "--human-diagnosis", str(world["root"] / "sources.jsonl"),
             "--diagnosis", str(diag))
    _refused(run_trace(*agree), where)
    _refused(run_trace("report", str(world["run"]), "--diagnosis", str(diag), "--out", str(tmp_path / "r.html")), where)
    _refused(run_trace("merge", str(diag), "--out", str(tmp_path / "merged")), where)
    assert not (tmp_path / "merged").exists()
    _edit_line(diag / TREES_FILE, 2, _cut)
    _refused(run_trace(*agree), f"{diag / TREES_FILE}:2: not JSON: ")


@pytest.mark.slow
def test_a_broken_label_line_stops_agree(world, tmp_path):
    labels = tmp_path / "labels.jsonl"
    good = json.dumps({"case_id": "s1-00000", "question_id": "f1:existence", "pass": True})
    for line, message in [('{"case_id": "s1-00000", "question_id": "f1:existence", "pass": "perhaps"}', "pass: "),
                          ('{"case_id": "s1-00000"', "not JSON: ")]:
        labels.write_text(good + "\n" + line + "\n")
        _refused(run_trace("agree", "--cases", str(world["bench"]), "--human", str(labels),
                           "--judge", str(world["run"])), f"{labels}:2: {message}")
    sources = tmp_path / "sources.jsonl"
    sources.write_text('{"case_id": "s1-00000", "target": "f1", "source": 3}\n')
    _refused(run_trace("agree", "--cases", str(world["bench"]), "--human-diagnosis", str(sources),
                       "--diagnosis", str(world["diag"])), f"{sources}:1: source: ")


def test_a_broken_sample_manifest_stops_what_reads_it(world, tmp_path):
    bench = _copy(world["bench"], tmp_path / "bench")
    run_benchmark(bench, tmp_path / "run", RunOptions(generator=GENERATOR, judges=["oracle"], settings=SETTINGS))
    data = json.loads((bench / MANIFEST_FILE).read_text())
    (bench / MANIFEST_FILE).write_text(json.dumps({**data, "seed": "zero"}, indent=2) + "\n")
    _refused(run_trace("diagnose", str(tmp_path / "run"), "--export-nodes", str(tmp_path / "nodes")),
             f"{bench / MANIFEST_FILE}:{_json_line(bench / MANIFEST_FILE, 'seed')}: seed: ")
    assert not (tmp_path / "nodes").exists()


def test_merge_tells_runs_from_diagnoses(world, tmp_path):
    _refused(run_trace("merge", str(world["run"]), str(world["diag"]), "--out", str(tmp_path / "m")),
             f"{world['diag']}: a diagnosis folder, but {world['run']} is a run folder")
    _refused(run_trace("merge", str(tmp_path), "--out", str(tmp_path / "m")),
             f"{tmp_path}: neither a run folder (no {RUN_FILE}) nor a diagnosis folder (no {DIAGNOSIS_FILE})")
    assert not (tmp_path / "m").exists()


def test_the_ensemble_rules():
    from tracebench.outcomes import ABSTAINED, FAILED, PASSED, Outcome, majority, mean_vote

    assert mean_vote([PASSED, PASSED, FAILED]) == Outcome.of("pass", 2 / 3)
    assert mean_vote([PASSED, FAILED]) == Outcome.of("fail", 0.5)  # half is not more than half
    assert mean_vote([PASSED, FAILED, FAILED, ABSTAINED]) == Outcome.of("fail", 1 / 3)  # abstentions left out
    assert mean_vote([ABSTAINED, ABSTAINED]) == ABSTAINED and mean_vote([FAILED, ABSTAINED]) == FAILED
    assert majority([PASSED, FAILED]) == ABSTAINED and majority([PASSED, PASSED, FAILED]) == PASSED


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from("abcdef")), max_size=12))
def test_the_cycle_check_agrees_with_networkx(edges):
    """checklist_problem decides acyclicity without networkx (kept off the sampling path) and asks
    networkx only to name a cycle: the two must agree on every graph."""
    import networkx as nx

    from tracebench.records import _acyclic

    assert _acyclic(edges) == nx.is_directed_acyclic_graph(nx.DiGraph(edges))


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True), st.integers(0, 999))
def test_a_sample_key_names_its_files_and_reads_back_from_the_name(case_id, sample):
    from tracebench.records import RunLayout, SampleKey

    key = SampleKey(case_id, sample)
    assert SampleKey.parse(key.name) == key
    assert key.name == (case_id if sample == 0 else f"{case_id}~{sample}")
    layout = RunLayout(Path("/r"))
    assert layout.image(key, ".png") == Path(f"/r/images/{key.name}.png")
    assert layout.info(key) == Path(f"/r/images/{key.name}.json") and layout.cache == Path("/r/cache")


@pytest.mark.parametrize("name", ["a~0", "a~01", "a~", "a~1x", "a~\u0661"])
def test_a_name_no_generation_has_reads_as_none(name):
    from tracebench.records import SampleKey

    assert SampleKey.parse(name) is None


def test_a_diagnosis_layout_names_its_rounds():
    from tracebench.records import DiagnosisLayout

    layout = DiagnosisLayout(Path("/d"))
    folder = layout.root / DiagnosisLayout.round_name(3)
    assert folder == Path("/d/rounds/03") and DiagnosisLayout.cases(folder) == Path("/d/rounds/03/cases")
    assert [DiagnosisLayout.run(folder, s).name for s in range(3)] == ["run", "run-2", "run-3"]
