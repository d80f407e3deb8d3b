"""croissant.json beside an export: Croissant 1.0 with its responsible-AI fields, read back by
``mlcroissant`` (the ``croissant`` extra, installed with the tests) with the network closed.

Everything is real: the exports are of the shared zoo run and its benchmark, and mlcroissant reads
the parquet shards through its own record sets."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
from collections import Counter
from pathlib import Path

import mlcroissant  # the croissant extra: installed with the tests (README), never skipped
import pytest
import yaml

from test_cli import run_trace
from tracebench.records import read_cases, read_verdicts
from tracebench.share import export_folder
from tracebench.share._card import responsible_use
from tracebench.share._croissant import CROISSANT_FILE, RAI

GENERATOR = "synthetic:global-interference"


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any connection but to loopback fails the test: the validation must be offline."""
    connect = socket.socket.connect

    def loopback_only(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost") and self.family != socket.AF_UNIX:
            raise AssertionError(f"a connection to {address} while reading croissant.json")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", loopback_only)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def exports(run_bench, shared_runs, tmp_path_factory):
    """A benchmark export and a run export of the shared benchmark (read only)."""
    run = shared_runs(run_bench, GENERATOR)
    root = tmp_path_factory.mktemp("croissant")
    export_folder(run_bench, root / "bench")
    export_folder(run, root / "run")
    return {"bench": run_bench, "run": run, "bench_export": root / "bench", "run_export": root / "run"}


def _dataset(folder: Path, caplog) -> mlcroissant.Dataset:
    """The export's croissant.json as mlcroissant reads it, refused on any warning it logs or keeps."""
    with caplog.at_level(logging.WARNING):
        dataset = mlcroissant.Dataset(jsonld=folder / CROISSANT_FILE)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not dataset.metadata.ctx.issues.warnings and not dataset.metadata.ctx.issues.errors
    return dataset


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _card(folder: Path) -> tuple[dict, str]:
    text = (folder / "README.md").read_text()
    header, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(header), body


def _card_licenses(body: str) -> list[str]:
    """The license names of the card's Licenses section (``- CC0-1.0: 29 reference images``)."""
    section = body.split("## Licenses\n", 1)[1].split("\n## ", 1)[0]
    return [line[2:].split(":", 1)[0] for line in section.splitlines() if line.startswith("- ")]


def test_mlcroissant_validates_a_benchmark_export_offline_and_its_cases_are_every_case(exports, caplog):
    folder = exports["bench_export"]
    dataset = _dataset(folder, caplog)
    ids = [record["cases/id"].decode() for record in dataset.records("cases")]
    cases = list(read_cases(exports["bench"]))
    assert ids == [case.id for case in cases]
    first = next(iter(dataset.records("cases")))
    assert first["cases/slot"] == cases[0].slot and first["cases/prompt"].decode() == cases[0].prompt

    header, body = _card(folder)
    assert dataset.metadata.license == _card_licenses(body) == ["CC0-1.0"]
    assert header["license"] == "cc0-1.0"
    assert dataset.metadata.cite_as.strip() in body and "2608.16765" in dataset.metadata.cite_as
    assert dataset.metadata.description.split("(arXiv")[0].strip() in " ".join(body.split())

    # references and checklist: every case's, as its record holds them, images decoded
    for case, record in zip(cases, dataset.records("references")):
        assert record["references/case_id"].decode() == case.id
        assert [r["references/references/path"].decode() for r in record["references/references"]] == \
            [ref.path for ref in case.references]
        assert [image.size for image in record["references/reference_images"]] == [(256, 256)] * len(case.references)
    for case, record in zip(cases, dataset.records("checklist")):
        questions = record["checklist/checklist"]
        assert [q["checklist/checklist/id"].decode() for q in questions] == [q.id for q in case.checklist]
        assert [[d.decode() for d in q["checklist/checklist/depends_on"]] for q in questions] == \
            [list(q.depends_on) for q in case.checklist]


def test_the_distribution_names_every_shard_with_its_sha256(exports):
    folder = exports["bench_export"]
    document = json.loads((folder / CROISSANT_FILE).read_text())
    files = {d["contentUrl"]: d["sha256"] for d in document["distribution"] if d["@type"] == "cr:FileObject"}
    shards = sorted(p.relative_to(folder).as_posix() for p in (folder / "data").glob("*.parquet"))
    assert sorted(files) == shards
    assert all(hashlib.sha256((folder / path).read_bytes()).hexdigest() == digest for path, digest in files.items())
    assert document["conformsTo"] == "http://mlcommons.org/croissant/1.0"
    assert all(d["encodingFormat"] == "application/x-parquet" for d in document["distribution"])


def test_a_run_export_adds_verdicts_and_generated_images(exports, caplog):
    dataset = _dataset(exports["run_export"], caplog)
    names = [record_set.name for record_set in dataset.metadata.record_sets]
    assert names == ["cases", "references", "checklist", "verdicts", "generations"]
    verdicts = Counter()
    for record in dataset.records("verdicts"):
        for verdict in record["verdicts/verdicts"]:
            verdicts[(verdict["verdicts/verdicts/case_id"].decode(), verdict["verdicts/verdicts/question_id"].decode(),
                      verdict["verdicts/verdicts/verdict"].decode())] += 1
    expected = Counter((v.case_id, v.question_id, v.verdict.value if hasattr(v.verdict, "value") else v.verdict)
                       for v in read_verdicts(exports["run"]))
    assert verdicts == expected and sum(expected.values()) > 0
    images = [record["generations/generated_image"] for record in dataset.records("generations")]
    assert len(images) == len(list(read_cases(exports["bench"]))) and all(i is None or i.size for i in images)


def test_the_responsible_ai_fields_are_the_cards_words(exports):
    for name in ("bench_export", "run_export"):
        folder = exports[name]
        document = json.loads((folder / CROISSANT_FILE).read_text())
        card = " ".join(_card(folder)[1].split())
        said = []
        for key, (field, one) in RAI.items():
            value = document.get(field)
            said += [value] if one and value else (value or [])
        assert said and all(" ".join(sentence.split()) in card for sentence in said)
        assert document["rai:dataUseCases"][0].startswith("Evaluation, not training")
        assert any("synthetic world" in s for s in document["rai:dataLimitations"])
        assert document["rai:personalSensitiveInformation"][0].startswith("None")
        assert isinstance(document["rai:dataCollection"], str)
    run = json.loads((exports["run_export"] / CROISSANT_FILE).read_text())
    assert "judge" in run["rai:dataCollection"] and any("judge" in s for s in run["rai:dataAnnotationProtocol"])


def test_the_statements_follow_where_the_references_come_from():
    synthetic, photo = responsible_use("benchmark", Counter({"synthetic": 3})), responsible_use("benchmark", Counter(
        {"photo": 3}))
    unknown, mixed = responsible_use("benchmark", Counter()), responsible_use("run", Counter({"synthetic": 1, "photo": 1}))
    assert synthetic["personal_information"][0].startswith("None") and not synthetic["personal_information"][1:]
    assert any("identifiable people" in s for s in photo["personal_information"])
    assert not any("synthetic world" in s for s in photo["limitations"])
    assert any("not known" in s for s in unknown["limitations"]) and not unknown["biases"]
    assert len(mixed["personal_information"]) == 2 and any("Verdicts" in s for s in mixed["limitations"])


def test_import_ignores_croissant_json_and_a_rerun_of_the_export_is_complete(exports, tmp_path):
    folder = exports["bench_export"]
    back = tmp_path / "back"
    result = run_trace("import", str(folder), "--out", str(back))
    assert result.returncode == 0, result.stderr
    assert not (back / CROISSANT_FILE).exists()
    assert _files(back) == _files(exports["bench"])  # byte for byte, croissant.json beside the card or not
    # the same export again over the complete one: the same croissant.json, nothing changed
    again = export_folder(exports["bench"], folder)
    assert again.complete
