"""Hostile benchmark, library, run and diagnosis folders: nothing is read or written outside
its folder. A canary image sits beside each folder; its bytes must never reach the model
server (a real loopback OpenAI stub records every request) nor a report."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

from library_helpers import make_library, record, sample_records, write_images
from openai_server import OpenAIStub
from test_cli import run_trace
from tracebench.library import TaggedImage, default_library, read_valid_library, validate_library
from tracebench.records import NodeOccurrence, Reference, Verdict
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import SampleOptions, sample_benchmark

CANARY_TEXT = "CANARY-7f3a9c-outside-the-folder"


def _canary(path: Path) -> bytes:
    """A real PNG (so any reader would take it for a reference) whose bytes are unmistakable."""
    info = PngImagePlugin.PngInfo()
    info.add_text("secret", CANARY_TEXT * 40)
    buffer = io.BytesIO()
    Image.new("RGB", (24, 24), (1, 2, 3)).save(buffer, format="PNG", pnginfo=info)
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def _leaked(canary: bytes, received) -> bool:
    """Whether the stub saw the canary: as raw bytes (multipart image edits) or base64 (chat images)."""
    encoded = base64.b64encode(canary)
    for request in received:
        blob = request.raw + json.dumps(request.body or {}).encode()
        if canary in blob or encoded in blob or CANARY_TEXT.encode() in blob:
            return True
    return False


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _one_line_error(result, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 600, result.stderr[:2000]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _problems(result, *problems: str) -> None:
    """A library's problems: one line each, then one line saying nothing was written."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "nothing was written" in result.stderr.splitlines()[-1]
    for problem in problems:
        assert any(line.startswith(problem) for line in result.stderr.splitlines()), result.stderr


@pytest.fixture(scope="module")
def sampled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "bench"
    sample_benchmark(out, SampleOptions(slots=(1, 2), per_slot=1, seed=0, applications=False))
    return out


@pytest.fixture
def bench(sampled, tmp_path) -> Path:
    """A fresh copy of a small sampled benchmark, inside tmp_path/work (the canary goes beside it)."""
    target = tmp_path / "work" / "bench"
    shutil.copytree(sampled, target)
    return target


def _edit_first_case(bench: Path, edit) -> dict:
    lines = (bench / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    case = json.loads(lines[0])
    edit(case)
    lines[0] = json.dumps(case)
    (bench / "cases.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return case


def _stub_run(bench: Path, out: Path, stub: OpenAIStub, generator: str = "openai:gpt-image-1"):
    return run_trace("run", str(bench), "--generator", generator, "--judge", "openai:stub-model",
                     "--base-url", stub.base_url, "--max-retries", "0", "--out", str(out))


# ------------------------------------------------------------------------------ ids

def test_ids_the_tools_make_are_safe_and_escaping_ones_are_refused_by_the_records():
    reference = {"image": "Image 1", "path": "references/syn-0001.png", "source_id": "syn-0001"}
    _, shipped = read_valid_library(default_library())
    assert shipped and all(TaggedImage.model_validate(i.model_dump(by_alias=True)) == i for i in shipped)
    for good in ("s3-00012", "app-stylization-001", "s3-00012.N2a", "syn-0399", "a" * 128):
        Reference.model_validate(reference)
        NodeOccurrence(case_id=good, root=good.split(".")[0], node="N2a")
        Verdict(case_id=good, question_id="f1:identity", op="anchor", verdict="abstain", judge="j", votes=())
    for bad in ("../../ESCAPED-A", "a/b", "a\\b", "..", ".hidden", "a..b", "", "a" * 129, "x" * 5_000_000, "c\n"):
        with pytest.raises(ValueError):
            NodeOccurrence(case_id=bad, root="r", node="N0")
        with pytest.raises(ValueError):
            Verdict(case_id=bad, question_id="q", op="anchor", verdict="abstain", judge="j", votes=())
    for bad in ("/etc/passwd", "../canary.png", "references/../../x.png", "C:\\x.png", "\\\\host\\x", "a\0b", ""):
        with pytest.raises(ValueError):
            Reference.model_validate({**reference, "path": bad})


@pytest.mark.parametrize("bad_id", ["../../ESCAPED-A", "sub/ESCAPED-A", "E" * 5_000_000])
def test_a_case_id_that_is_no_file_name_is_refused_before_anything_is_written(bench, tmp_path, bad_id):
    _edit_first_case(bench, lambda case: case.update(id=bad_id))
    before = _listing(tmp_path)
    for generator in ("synthetic:perfect", f"folder:{bench / 'references'}"):
        result = run_trace("run", str(bench), "--generator", generator, "--judge", "oracle",
                           "--out", str(tmp_path / "work" / "run"))
        _one_line_error(result, "cases.jsonl:1: id: expected an id")
        assert _listing(tmp_path) == before  # no run folder, no ESCAPED-A.png anywhere


# ------------------------------------------------------------------------------ references

@pytest.mark.parametrize("attack", ["absolute", "dotdot", "symlink"])
def test_a_reference_outside_the_benchmark_is_never_read_nor_uploaded(bench, tmp_path, monkeypatch, attack):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-hostile-paths")
    canary = _canary(tmp_path / "work" / "canary.png")
    case = json.loads((bench / "cases.jsonl").read_text(encoding="utf-8").splitlines()[0])
    first = case["references"][0]["path"]
    if attack == "symlink":
        (bench / first).unlink()
        os.symlink(tmp_path / "work" / "canary.png", bench / first)
    else:
        path = str(tmp_path / "work" / "canary.png") if attack == "absolute" else "references/../../canary.png"
        _edit_first_case(bench, lambda c: c["references"][0].update(path=path))
    before = _listing(tmp_path)
    with OpenAIStub(lambda request: '{"answers": []}') as stub:
        result = _stub_run(bench, tmp_path / "work" / "run", stub)
        assert not _leaked(canary, stub.received)
    if attack == "symlink":
        _one_line_error(result, f"case {case['id']}: reference: {first}: a link that leaves the benchmark folder")
    else:
        _one_line_error(result, "cases.jsonl:1: references[0].path: ")
    assert _listing(tmp_path) == before


def test_a_folder_generator_image_linking_out_is_an_abstention_and_never_sent(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-hostile-paths")
    canary = _canary(tmp_path / "canary.png")
    images = tmp_path / "images"
    images.mkdir()
    ids = [json.loads(line)["id"] for line in (bench / "cases.jsonl").read_text().splitlines()]
    os.symlink(tmp_path / "canary.png", images / f"{ids[0]}.png")
    Image.new("RGB", (16, 16), (9, 9, 9)).save(images / f"{ids[1]}.png")  # inside the folder: that one is sent
    with OpenAIStub(lambda request: '{"answers": []}') as stub:
        result = _stub_run(bench, tmp_path / "run", stub, generator=f"folder:{images}")
        sent = [r for r in stub.received if r.path == "/v1/chat/completions"]
    assert result.returncode == 3, result.stderr  # abstentions, not an error
    verdicts = [Verdict.model_validate_json(line) for line in (tmp_path / "run" / "verdicts.jsonl").read_text().splitlines()]
    linked = [v for v in verdicts if v.case_id == ids[0]]
    assert linked and all(v.verdict == "abstain" and "a link that leaves the generator's folder" in v.votes[0].reason
                          for v in linked)
    assert sent  # the judge was asked about the other case, with the image inside the folder
    assert not _leaked(canary, stub.received)
    assert not (tmp_path / "run" / "images" / f"{ids[0]}.png").exists()


# ------------------------------------------------------------------------------ reports

@pytest.fixture
def finished(bench, tmp_path) -> Path:
    run = tmp_path / "work" / "run"
    run_benchmark(bench, run, RunOptions(generator="synthetic:perfect", judges=["oracle"]))
    return run


def test_a_report_never_embeds_a_reference_or_an_image_linking_out(bench, finished, tmp_path):
    canary = _canary(tmp_path / "work" / "canary.png")
    reference = sorted((bench / "references").iterdir())[0]
    reference.unlink()
    os.symlink(tmp_path / "work" / "canary.png", reference)
    result = run_trace("report", str(finished), "--out", str(tmp_path / "work" / "report.html"))
    _one_line_error(result, f"reference: references/{reference.name}: a link that leaves the benchmark folder")
    assert not (tmp_path / "work" / "report.html").exists()
    reference.unlink()
    shutil.copyfile(tmp_path / "work" / "canary.png", reference)  # a file inside the folder is fine
    generated = sorted((finished / "images").iterdir())[0]
    generated.unlink()
    os.symlink(tmp_path / "work" / "canary.png", generated)
    result = run_trace("report", str(finished), "--out", str(tmp_path / "work" / "report.html"))
    _one_line_error(result, f"generated image: images/{generated.name}: a link that leaves the run folder")
    generated.unlink()
    # images as they are (not thumbnails), so that the page would hold the canary's bytes
    result = run_trace("report", str(finished), "--full-images", "--out", str(tmp_path / "work" / "report.html"))
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "work" / "report.html").read_bytes()
    assert base64.b64encode(canary)[:200] in page  # the copy inside the benchmark is embedded: the check can see it


def test_a_diagnosis_node_image_naming_another_file_is_refused(bench, tmp_path):
    run = tmp_path / "work" / "run"
    run_benchmark(bench, run, RunOptions(generator="synthetic:global-interference", judges=["oracle"]))
    diag = tmp_path / "work" / "diag"
    result = run_trace("diagnose", str(run), "--cases", "all", "--out", str(diag))
    assert result.returncode == 0, result.stderr
    canary = _canary(tmp_path / "work" / "canary.png")
    lines = (diag / "trees.jsonl").read_text().splitlines()
    tree = json.loads(lines[0])
    tree["nodes"][-1]["image"] = str(tmp_path / "work" / "canary.png")
    lines[0] = json.dumps(tree)
    (diag / "trees.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "work" / "report.html"
    result = run_trace("report", str(run), "--diagnosis", str(diag), "--out", str(out))
    _one_line_error(result, f"node {tree['nodes'][-1]['id']}: image {tmp_path / 'work' / 'canary.png'}: "
                            "not a generated image of a run folder")
    assert not out.exists()
    tree["nodes"][-1]["image"] = None
    lines[0] = json.dumps(tree)
    (diag / "trees.jsonl").write_text("\n".join(lines) + "\n")
    result = run_trace("report", str(run), "--diagnosis", str(diag), "--full-images", "--out", str(out))
    assert result.returncode == 0, result.stderr  # the images diagnose recorded are run folders' images
    assert base64.b64encode(canary)[:200] not in out.read_bytes()


# ------------------------------------------------------------------------------ diagnose

def test_diagnose_never_copies_a_reference_linking_out_nor_writes_outside_out(bench, finished, tmp_path):
    _canary(tmp_path / "work" / "canary.png")
    reference = sorted((bench / "references").iterdir())[0]
    reference.unlink()
    os.symlink(tmp_path / "work" / "canary.png", reference)
    before = _listing(tmp_path / "work")
    for extra in ([], ["--export-nodes", str(tmp_path / "work" / "nodes")]):
        result = run_trace("diagnose", str(finished), "--cases", "all", "--out", str(tmp_path / "work" / "diag"),
                           *extra)
        _one_line_error(result, f"reference: references/{reference.name}: a link that leaves the benchmark folder")
        after = _listing(tmp_path / "work")
        assert {p for p in after - before if not p.startswith("diag")} == set()
        copies = [p for p in (tmp_path / "work").rglob("*") if p.is_file() and not p.is_symlink()
                  and p.name == reference.name and "diag" in p.parts and "references" in p.parts]
        assert copies == []  # no copy of the canary under the diagnosis's rounds


def test_a_sub_case_id_past_the_limit_is_one_line(bench, finished, tmp_path):
    long_id = "c" * 126
    old = json.loads((bench / "cases.jsonl").read_text().splitlines()[0])["id"]
    _edit_first_case(bench, lambda case: case.update(id=long_id))
    run = tmp_path / "work" / "run2"
    run_benchmark(bench, run, RunOptions(generator="synthetic:perfect", judges=["oracle"]))
    result = run_trace("diagnose", str(run), "--cases", long_id, "--out", str(tmp_path / "work" / "diag"))
    _one_line_error(result, f"case {long_id}: its sub-case id {long_id}.N0: expected an id of at most 128")
    assert old != long_id


# ------------------------------------------------------------------------------ libraries

def _escaping_library(root: Path) -> Path:
    make_library(root, sample_records())
    lines = (root / "tags.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["id"] = "../../ESCAPED-J-1"
    lines[0] = json.dumps(first)
    (root / "tags.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_a_library_image_id_that_escapes_is_refused_by_validate_import_and_sample(tmp_path):
    work = tmp_path / "work"
    library = _escaping_library(work / "lib")
    assert any(p.startswith("tags.jsonl:1: id: expected an id") for p in validate_library(library))
    result = run_trace("library", "validate", str(library))
    assert result.returncode == 2 and "tags.jsonl:1: id: expected an id" in result.stderr
    before = _listing(tmp_path)
    result = run_trace("sample", "--library", str(library), "--slots", "1", "--per-slot", "1",
                       "--out", str(work / "out" / "bench"))
    _problems(result, "tags.jsonl:1: id: expected an id")
    result = run_trace("library", "import", str(library), "--tags", str(library / "tags.jsonl"),
                       "--out", str(work / "imported"))
    assert result.returncode == 2 and "id: expected an id" in result.stderr and "Traceback" not in result.stderr
    assert _listing(tmp_path) == before  # nothing in the parent of --out, no ESCAPED-J-1 anywhere
    assert not list(tmp_path.rglob("ESCAPED*"))


def test_import_makes_safe_ids_from_file_names(tmp_path):
    images = tmp_path / "photos"
    recs = [record("my cat (2)", [], size=(16, 12)), record("..dots..", [], size=(16, 12))]
    write_images(images, recs)
    tags = tmp_path / "tags.jsonl"
    tags.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "id"}) + "\n" for r in recs))
    result = run_trace("library", "import", str(images), "--tags", str(tags), "--out", str(tmp_path / "lib"))
    assert result.returncode == 0, result.stderr
    ids = [json.loads(line)["id"] for line in (tmp_path / "lib" / "tags.jsonl").read_text().splitlines()]
    assert sorted(ids) == ["dots.", "my-cat-2"]



def test_tag_never_sends_an_image_linking_out_and_names_images_by_safe_ids(tmp_path, monkeypatch):
    from test_tag import good_reply
    from tracebench.library import TagOptions, tag_images

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-hostile-paths")
    canary = _canary(tmp_path / "canary.png")
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (12, 9), "green").save(photos / "my photo (1).png")
    os.symlink(tmp_path / "canary.png", photos / "leak.png")
    with OpenAIStub(lambda request: json.dumps(good_reply("x"))) as stub:
        report = tag_images(photos, tmp_path / "lib", TagOptions(model="stub-model", base_url=stub.base_url,
                                                                 max_retries=0))
        assert not _leaked(canary, stub.received)
    assert [(s.path, s.reason) for s in report.skipped] == [("leak.png", "a link that leaves the images folder")]
    ids = [json.loads(line)["id"] for line in (tmp_path / "lib" / "tags.jsonl").read_text().splitlines()]
    assert ids == ["my-photo-1"]
