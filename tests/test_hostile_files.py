"""Hostile files: torn and invalid UTF-8, line separators inside strings, a full disk, killed
staging folders and inconsistent inputs. Each is a `FILE:LINE: field: message` error (exit 2,
one line), an abstention, or is resumed; never a traceback, never a silent drop.

The files are real (written by the real stages, then broken); a full disk is a real failing
write: the command runs in a subprocess under RLIMIT_FSIZE (writes past it fail with EFBIG).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import test_records
from openai_server import OpenAIStub
from test_cli import _trace_executable, run_trace
from tracebench.errors import TraceError
from tracebench.jsonfiles import numbered_jsonl, read_json
from tracebench.library import LibraryInfo, TaggedImage, default_library
from tracebench.records import (CASES, NODES, TREES, VERDICTS, DiagnosisManifest, DiagnosisSummary,
                                NodeOccurrence, RunManifest, SampleManifest, read_cases, read_verdicts)
from tracebench.report import Label, SourceLabel
from tracebench.run import RunOptions, run_benchmark

SETTINGS = test_records.SETTINGS
GENERATOR = test_records.GENERATOR
SEPARATORS = "a\u2028b\u2029c\x1cd\x1de\x1ef\x85g"  # every character str.splitlines breaks a line at, but \n \r
world = test_records.world  # the benchmark, run and diagnosis of the record files' tests
_copy = test_records._copy


def _one_line_error(result: subprocess.CompletedProcess, fragment: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "never retrieved" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    if len(lines) == 2 and "1 problem in library" in lines[1]:  # trace library validate: the problem, then the count
        lines = lines[:1]
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


def _trace_limited(limit: int, *args: str) -> subprocess.CompletedProcess:
    """`trace` with files limited to ``limit`` bytes: a write past it fails (EFBIG), as on a full disk."""
    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([*_trace_executable(), *args], capture_output=True, text=True, timeout=120,
                          preexec_fn=limited)


# --------------------------------------------------------------------------- encoding

TORN = '{"case_id": "caf\u00e9'.encode()[:-1]  # a last line cut inside a UTF-8 character


def test_a_run_torn_inside_a_utf8_character_resumes(world, tmp_path):
    run = _copy(world["run"], tmp_path / "run")
    lines = VERDICTS.path(run).read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])["case_id"]
    kept = [line for line in lines if json.loads(line)["case_id"] != last]
    VERDICTS.path(run).write_bytes(b"".join(kept) + TORN)
    result = run_trace("run", str(world["bench"]), "--generator", GENERATOR, "--judge", "oracle", "--out", str(run))
    assert result.returncode == 0, result.stderr
    assert VERDICTS.path(run).read_bytes() == VERDICTS.path(world["run"]).read_bytes()


@pytest.mark.parametrize("reader", ["cases", "verdicts", "trees", "tags", "nodes", "labels", "source labels"])
def test_torn_utf8_elsewhere_is_a_file_line_error(world, tmp_path, reader):
    """Not resuming, a last line torn inside a character is an error like any other bad line."""
    path, model, valid = _reader_files(world)[reader]
    path = tmp_path / path.name
    path.write_bytes(valid + b"\n" + TORN)
    with pytest.raises(TraceError, match=rf"^{re.escape(str(path))}:2: not UTF-8 text"):
        list(numbered_jsonl(path, model))
    assert [n for n, _ in numbered_jsonl(path, model, torn_tail=True)] == [1]


@pytest.mark.parametrize("reader", ["cases", "verdicts", "trees", "tags", "labels"])
def test_invalid_utf8_in_any_record_file_is_one_line(world, tmp_path, reader):
    bench, run, diag = (_copy(world[k], tmp_path / k) for k in ("bench", "run", "diag"))
    library = _copy(default_library(), tmp_path / "library") if reader == "tags" else None
    labels = tmp_path / "human.jsonl"
    case = next(read_cases(bench))
    labels.write_text(json.dumps({"case_id": case.id, "question_id": case.checklist[0].id, "pass": True}) + "\n")
    target, command = {
        "cases": (CASES.path(bench), ("score", str(run), "--cases", str(bench))),
        "verdicts": (VERDICTS.path(run), ("score", str(run))),
        "trees": (TREES.path(diag), ("report", str(world["run"]), "--diagnosis", str(diag), "--out",
                                     str(tmp_path / "r.html"))),
        "tags": (library / "tags.jsonl" if library else None, ("library", "validate", str(library))),
        "labels": (labels, ("agree", "--cases", str(world["bench"]), "--human", str(labels), "--judge",
                            str(world["run"]))),
    }[reader]
    lines = target.read_bytes().split(b"\n")
    lines.insert(1, b'{"id": "caf\xff\xfe"}')  # line 2: not UTF-8, valid lines after it
    target.write_bytes(b"\n".join(lines))
    _one_line_error(run_trace(*command), f"{target.name}:2: not UTF-8 text (byte 12 of the line)")
    assert not (tmp_path / "r.html").exists()


def test_line_separators_in_a_prompt_and_a_reason_round_trip(world, tmp_path, monkeypatch):
    """U+2028 and friends in a case prompt (a benchmark written by other means) and in a judge's
    reason: every file tracebench writes stays one record a line, for any line reader."""
    from tracebench.zoo import read_record

    bench = _copy(world["bench"], tmp_path / "bench")
    cases = list(read_cases(bench))
    edited = [cases[0].model_copy(update={"prompt": cases[0].prompt + SEPARATORS}), *cases[1:3]]
    CASES.path(bench).write_text("".join(json.dumps(c.model_dump(mode="json", by_alias=True), ensure_ascii=False)
                                         + "\n" for c in edited), encoding="utf-8")
    assert "\u2028" in CASES.path(bench).read_text(encoding="utf-8")  # raw, as JSON allows
    by_id = {c.id: c for c in edited}

    def judge(request):
        images = [p["image_url"]["url"] for m in request["messages"] if isinstance(m["content"], list)
                  for p in m["content"] if p["type"] == "image_url"]
        import base64

        record = next(r for url in images if (r := read_record(base64.b64decode(url.split(",", 1)[1]))))
        return json.dumps({"answers": [{"id": q.id, "answer": "yes", "reason": SEPARATORS}
                                       for q in by_id[record.case_id].checklist]}, ensure_ascii=False)

    monkeypatch.setenv("OPENAI_API_KEY", "sk-separators-test")
    run = tmp_path / "run"
    with OpenAIStub(judge) as stub:
        result = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge",
                           f"openai:stub-model@{stub.base_url}", "--out", str(run))
        assert result.returncode == 0, result.stderr
    text = VERDICTS.path(run).read_text(encoding="utf-8")
    assert not set("\u2028\u2029\x85") & set(text)  # written escaped
    assert all(json.loads(line) for line in text.splitlines())  # str.splitlines too sees one record a line
    assert next(read_cases(bench)).prompt.endswith(SEPARATORS)
    assert {vote.reason for v in read_verdicts(run) for vote in v.votes} == {SEPARATORS}
    assert run_trace("score", str(run)).returncode == 0
    result = run_trace("report", str(run), "--out", str(tmp_path / "r.html"))
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- a full disk

def test_a_full_disk_in_trace_run_is_one_line_and_resumes(world, tmp_path):
    judges = ("--judge", "oracle", "--judge", "oracle")  # two votes a verdict: the verdicts outgrow every image
    reference = tmp_path / "reference"
    run_benchmark(world["bench"], reference, RunOptions(generator=GENERATOR, judges=["oracle", "oracle"], settings=SETTINGS))
    others = [p.stat().st_size for p in reference.rglob("*") if p.is_file() and p.name != VERDICTS.name]
    limit = max(others) + 1024
    assert limit < VERDICTS.path(reference).stat().st_size * 3 // 4  # they outgrow the limit mid-run
    run = tmp_path / "run"
    command = ("run", str(world["bench"]), "--generator", GENERATOR, *judges, "--out", str(run))
    line = _one_line_error(_trace_limited(limit, *command), "cannot write (File too large)")
    assert f"{run}: cannot write" in line and "run the same command to resume" in line
    partial = VERDICTS.path(run).read_bytes()
    assert partial.endswith(b"\n") and len(partial) <= limit  # whole cases only, nothing torn
    asked = {case.id: len(case.checklist) for case in read_cases(world["bench"])}
    kept: dict[str, int] = {}
    for verdict in read_verdicts(run):
        kept[verdict.case_id] = kept.get(verdict.case_id, 0) + 1
    assert kept and all(asked[case_id] == n for case_id, n in kept.items()) and len(kept) < len(asked)
    result = run_trace(*command)
    assert result.returncode == 0, result.stderr
    assert VERDICTS.path(run).read_bytes() == VERDICTS.path(reference).read_bytes()


@pytest.mark.parametrize("command", ["sample", "report"])
def test_a_full_disk_elsewhere_is_one_line_and_leaves_nothing(world, tmp_path, command):
    out = tmp_path / ("bench" if command == "sample" else "r.html")
    args = {"sample": ("sample", "--slots", "1-3", "--per-slot", "3", "--no-applications", "--out", str(out)),
            "report": ("report", str(world["run"]), "--out", str(out))}[command]
    _one_line_error(_trace_limited(20_000, *args), "cannot write (File too large)")
    assert list(tmp_path.iterdir()) == []  # no output, no staging folder, no temporary file


# --------------------------------------------------------------------------- killed staging

def _killed_stage(parent: Path, prefix: str) -> Path:
    """The staging folder of a process killed with SIGKILL while it assembled its output."""
    code = ("import os, sys; from pathlib import Path; from tracebench.cache import make_stage; "
            "s = make_stage(Path(sys.argv[1]), sys.argv[2]); (s / 'half').write_text('x'); print(s, flush=True); "
            "os.kill(os.getpid(), 9)")
    result = subprocess.run([sys.executable, "-c", code, str(parent), prefix], capture_output=True, text=True)
    assert result.returncode == -signal.SIGKILL
    stage = Path(result.stdout.strip())
    assert stage.is_dir()
    return stage


def test_stale_staging_folders_are_removed_by_the_next_run_of_the_command(world, tmp_path):
    stale = _killed_stage(tmp_path, ".bench.")
    other = _killed_stage(tmp_path, ".bench2.")  # another output's: not this command's to remove
    live = tmp_path / f".bench.{os.getpid()}@{stale.name.split('@')[1]}"  # a process that still runs
    live.mkdir()
    result = run_trace("sample", "--slots", "1", "--per-slot", "1", "--no-applications", "--out", str(tmp_path / "bench"))
    assert result.returncode == 0, result.stderr
    assert not stale.exists() and other.is_dir() and live.is_dir()
    assert sorted(p.name for p in (tmp_path / "bench").iterdir()) == ["cases.jsonl", "manifest.json", "references"]


def test_stale_staging_folders_of_a_diagnosis_round_are_removed_on_resume(world, tmp_path):
    diag = tmp_path / "diag"
    command = ("diagnose", str(world["run"]), "--cases", "all", "--out", str(diag))
    assert run_trace(*command).returncode == 0
    rounds = sorted((diag / "rounds").iterdir())
    stale = _killed_stage(rounds[-1], ".cases.")
    shutil.rmtree(rounds[-1] / "cases")  # killed while the round was staged: its cases never arrived
    shutil.rmtree(rounds[-1] / "run")
    assert run_trace(*command).returncode == 0
    assert not stale.exists()
    assert sorted(p.name for p in rounds[-1].iterdir()) == ["cases", "run"]


def _killed_temporary(folder: Path) -> Path:
    """The temporary file of a write_atomic whose process was killed with SIGKILL mid-write."""
    code = ("import os, sys; from pathlib import Path; from tracebench.cache import write_atomic; "
            "write_atomic(Path(sys.argv[1]) / 'x.json', iter(lambda: os.kill(os.getpid(), 9), 1))")
    before = set(folder.iterdir())
    result = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True)
    assert result.returncode == -signal.SIGKILL, result.stderr
    (temporary,) = set(folder.iterdir()) - before
    assert temporary.name.startswith(".tmp-") and temporary.stat().st_size == 0
    return temporary


def test_a_killed_diagnosis_leaves_no_temporary_file_after_the_next_run(world, tmp_path):
    """kill -9 mid-write leaves write_atomic's temporary files in the diagnosis, its rounds' runs
    and its cache: the same command, run again, removes them (a writer still running is left)."""
    diag = _copy(world["diag"], tmp_path / "diag")
    round_run = next((diag / "rounds").glob("*/run"))
    key_folder = next(p for p in (diag / "cache").iterdir() if p.is_dir())
    killed = [_killed_temporary(folder) for folder in (diag, round_run, round_run / "images", key_folder)]
    host = killed[0].name.split("@")[1].split(".")[0]
    live = diag / f".tmp-{os.getpid()}@{host}.abc123"  # this process runs: its file is being written
    live.write_bytes(b"")
    result = run_trace("diagnose", str(world["run"]), "--cases", "all", "--out", str(diag))
    assert result.returncode == 0, result.stderr
    assert [p for p in killed if p.exists()] == [] and live.exists()


def test_a_full_disk_during_a_diagnosis_names_the_file_being_written(world, tmp_path):
    """Copying a reference into a round: the error names the copy (under --out), not its source
    (a file of the benchmark, or of tracebench's shipped library)."""
    out = tmp_path / "diag"
    line = _one_line_error(_trace_limited(2_000, "diagnose", str(world["run"]), "--cases", "all", "--out", str(out)),
                           "cannot write (File too large)")
    assert line.startswith(f"trace diagnose: {out}/") and str(world["bench"]) not in line, line


# --------------------------------------------------------------------------- inconsistent inputs

def test_duplicate_case_ids_are_an_error(world, tmp_path):
    bench = _copy(world["bench"], tmp_path / "bench")
    lines = CASES.path(bench).read_bytes().splitlines(keepends=True)
    CASES.path(bench).write_bytes(b"".join([*lines[:3], lines[0], *lines[3:]]))
    first = json.loads(lines[0])["id"]
    _one_line_error(run_trace("run", str(bench), "--generator", GENERATOR, "--judge", "oracle", "--out",
                              str(tmp_path / "run")),
                    f"cases.jsonl:4: id: case {first!r} appears twice (first on line 1)")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("edit,message", [
    (lambda v: {**v, "question_id": "f9:nothing"}, "verdicts.jsonl:2: question_id: case {case!r} does not ask 'f9:nothing'"),
    (lambda v: v, "verdicts.jsonl:2: question_id: case {case!r} question {question!r} appears twice (first on line 1)"),
])
def test_verdicts_of_unknown_or_repeated_questions_are_errors(world, tmp_path, edit, message):
    run = _copy(world["run"], tmp_path / "run")
    lines = VERDICTS.path(run).read_text(encoding="utf-8").splitlines(keepends=True)
    first = json.loads(lines[0])
    lines.insert(1, json.dumps(edit(first)) + "\n")
    VERDICTS.path(run).write_text("".join(lines), encoding="utf-8")
    _one_line_error(run_trace("score", str(run)),
                    message.format(case=first["case_id"], question=first["question_id"]))


def test_merge_refuses_verdicts_of_unknown_cases(world, tmp_path):
    run = _copy(world["run"], tmp_path / "run")
    ghost = {**json.loads(VERDICTS.path(run).read_text(encoding="utf-8").splitlines()[0]), "case_id": "ghost"}
    with open(VERDICTS.path(run), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(ghost) + "\n")
    n = len(VERDICTS.path(run).read_text(encoding="utf-8").splitlines())
    _one_line_error(run_trace("merge", str(run), "--out", str(tmp_path / "merged")),
                    f"verdicts.jsonl:{n}: case_id: case 'ghost', which {world['bench'].resolve()} does not hold")
    assert not (tmp_path / "merged").exists()


def test_run_refuses_a_non_empty_folder_that_is_not_a_run(world, tmp_path):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "chapter1.tex").write_text("precious")
    _one_line_error(run_trace("run", str(world["bench"]), "--generator", GENERATOR, "--judge", "oracle", "--out",
                              str(out)), "is not empty and not a run folder (no run.json)")
    assert [p.name for p in out.iterdir()] == ["chapter1.tex"]


def test_report_compare_keeps_every_run(world, tmp_path):
    other = _copy(world["run"], tmp_path / "other")
    out = tmp_path / "r.html"
    result = run_trace("report", str(world["run"]), "--compare", str(other), "--compare", str(world["run"]),
                       str(other), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert len(set(re.findall(r'data-run="[^"]*#(\d)"', out.read_text(encoding="utf-8")))) == 4


def test_report_refuses_an_existing_out_unless_forced_and_keeps_its_mode(world, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("mine")
    out.chmod(0o600)
    _one_line_error(run_trace("report", str(world["run"]), "--out", str(out)), "already exists")
    assert out.read_text() == "mine"
    result = run_trace("report", str(world["run"]), "--out", str(out), "--force")
    assert result.returncode == 0, result.stderr
    assert out.read_text(encoding="utf-8").startswith("<!") and stat.S_IMODE(out.stat().st_mode) == 0o600


# --------------------------------------------------------------------------- fuzzing the readers

def _reader_files(world) -> dict[str, tuple[Path, type, bytes]]:
    """reader -> (a file it reads, its record model, one valid line of it)."""
    case = next(read_cases(world["bench"]))
    first = lambda path: path.read_bytes().split(b"\n", 1)[0]  # noqa: E731
    return {
        "cases": (CASES.path(world["bench"]), CASES.model, first(CASES.path(world["bench"]))),
        "verdicts": (VERDICTS.path(world["run"]), VERDICTS.model, first(VERDICTS.path(world["run"]))),
        "trees": (TREES.path(world["diag"]), TREES.model, first(TREES.path(world["diag"]))),
        "tags": (default_library() / "tags.jsonl", TaggedImage, first(default_library() / "tags.jsonl")),
        "nodes": (Path("nodes.jsonl"), NODES.model,
                  NodeOccurrence(case_id="n1", root=case.id, node="N1").model_dump_json().encode()),
        "labels": (Path("human.jsonl"), Label, json.dumps({"case_id": case.id, "question_id": case.checklist[0].id,
                                                           "pass": True}).encode()),
        "source labels": (Path("sources.jsonl"), SourceLabel,
                          b'{"case_id": "s1-00000", "target": "f1", "source": "stable_success"}'),
    }


_JSON_FILES = {"run.json": RunManifest, "manifest.json": SampleManifest, "diagnosis.json": DiagnosisManifest,
               "summary.json": DiagnosisSummary, "library.json": LibraryInfo}


def _mutated(valid: bytes) -> st.SearchStrategy[bytes]:
    edits = st.lists(st.tuples(st.sampled_from(["insert", "replace", "delete", "cut"]),
                               st.integers(0, max(len(valid) - 1, 0)),
                               st.sampled_from([b"\xff", b"\xc3", b"\xe2\x80\xa8", b"\x85", b"\x00", b"\n", b"\r",
                                                b'"', b"{", b"}", b"[", b",", b":", b"\\", b"\\u", b"\xed\xa0\x80",
                                                b"1e999", b"null", b"\xef\xbb\xbf"])),
                     min_size=1, max_size=4)

    def apply(changes) -> bytes:
        data = valid
        for kind, at, chunk in changes:
            at = min(at, len(data))
            data = {"insert": data[:at] + chunk + data[at:], "replace": data[:at] + chunk + data[at + len(chunk):],
                    "delete": data[:at] + data[at + len(chunk):], "cut": data[:at]}[kind]
        return data

    return edits.map(apply)


def _check_read(read, path: Path) -> None:
    try:
        read()
    except TraceError as err:
        message = str(err)
        assert "\n" not in message, message
        assert re.match(rf"{re.escape(str(path))}:\d+: \S", message), message


@pytest.mark.parametrize("reader", ["cases", "verdicts", "trees", "tags", "nodes", "labels", "source labels"])
def test_record_readers_give_records_or_a_file_line_error(world, reader):
    _, model, valid = _reader_files(world)[reader]
    files = st.lists(st.one_of(st.binary(max_size=200), _mutated(valid), st.just(valid)), min_size=1, max_size=4)

    @given(files, st.booleans(), st.booleans())
    def fuzz(lines, final_newline, torn_tail):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "records.jsonl"
            path.write_bytes(b"\n".join(lines) + (b"\n" if final_newline else b""))
            _check_read(lambda: list(numbered_jsonl(path, model, torn_tail=torn_tail)), path)
            if model is CASES.model:  # the case reader's own checks (checklists, unique ids) too
                path.rename(CASES.path(folder))
                _check_read(lambda: list(CASES.read(folder, torn_tail=torn_tail)), CASES.path(folder))

    fuzz()


@pytest.mark.parametrize("reader", ["cases", "verdicts", "trees", "tags", "nodes", "labels", "source labels"])
def test_a_torn_last_line_is_dropped_wherever_it_is_cut(world, reader):
    """Resuming, a last line cut anywhere (inside a UTF-8 character too) is dropped: the records
    before it are read."""
    _, model, valid = _reader_files(world)[reader]
    longer = valid[:-1] + ', "note": "caf\u00e9 \u2615 \u2028"}'.encode()

    inside = [k for k in range(len(valid), len(longer)) if longer[k] & 0xC0 == 0x80]  # a character's later bytes

    @given(st.one_of(st.sampled_from(inside), st.integers(1, len(longer) - 1)))
    def fuzz(cut):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "records.jsonl"
            path.write_bytes(valid + b"\n" + longer[:cut])
            assert [n for n, _ in numbered_jsonl(path, model, torn_tail=True)] == [1]

    fuzz()


@pytest.mark.parametrize("name", sorted(_JSON_FILES))
def test_json_readers_give_a_record_or_a_file_line_error(world, name):
    source = {"run.json": world["run"], "manifest.json": world["bench"], "diagnosis.json": world["diag"],
              "summary.json": world["diag"], "library.json": default_library()}[name] / name
    valid = source.read_bytes()

    @given(st.one_of(st.binary(max_size=300), _mutated(valid)))
    def fuzz(data):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / name
            path.write_bytes(data)
            _check_read(lambda: read_json(path, _JSON_FILES[name]), path)

    fuzz()
