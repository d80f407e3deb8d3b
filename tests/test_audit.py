"""``trace library audit``: planted copies of synthetic images are found, distinct images are not
paired, training hashes flag what they name, and ``trace score --exclude-flagged`` leaves out the
cases whose references are flagged (docs/library.md, "Audit")."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from test_cli import run_trace
from tracebench.library import AuditOptions, AuditReport, FlaggedPair, audit_library, load_library, write_audit
from tracebench.records import SAMPLE_MANIFEST
from tracebench.sample import read_cases

pytest.importorskip("cv2", reason="the audit extra: pip install 'tracebench[audit]'")

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("library_audit", ROOT / "bench" / "library_audit.py")


def _bench():
    import sys

    sys.path.insert(0, str(ROOT / "bench"))  # the script imports its neighbour _machine
    try:
        module = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return module


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, dict[str, str], list[str]]:
    """40 synthetic images (seed 3) and the four perturbed copies of 10 of them."""
    root = tmp_path_factory.mktemp("audit") / "library"
    copy_of = _bench().library_with_copies(root, n=40, copies=10, seed=3)
    return root, copy_of, [r.id for r in load_library(root)[1]]


def test_every_planted_copy_is_found_and_no_two_originals_are_paired(planted):
    root, copy_of, ids = planted
    result = _bench().measure(root, copy_of, ids)
    assert result["copies"] == 40
    assert result["found"] == 40, result["found_by_perturbation"]
    assert result["false_pairs_among_originals"] == []


def test_feature_matching_turns_down_hash_candidates_of_distinct_images(planted):
    root, copy_of, _ = planted
    report = audit_library(root)
    originals = {i for i in copy_of.values()} | {r.id for r in load_library(root)[1] if r.id not in copy_of}
    # stage 1 alone, at its loose thresholds, pairs distinct originals: the confirmation is what removes them
    loose = audit_library(root, options=AuditOptions(min_inliers=3, min_correlation=-1.0, max_differing=1.0))
    distinct = [p for p in loose.pairs if {p.a, p.b} <= originals]
    assert distinct, "the seed no longer has hash-close distinct originals: pick another"
    assert not [p for p in report.pairs if {p.a, p.b} <= originals]
    assert report.candidates == loose.candidates


def test_the_audit_command_writes_a_record_that_names_every_flagged_image(planted, tmp_path):
    root, copy_of, _ = planted
    out = tmp_path / "audit.json"
    done = run_trace("library", "audit", str(root), "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = AuditReport.model_validate_json(out.read_text())
    assert set(report.flagged) == set(copy_of) | set(copy_of.values())
    assert f"{len(report.flagged)} images flagged" in done.stdout
    printed = run_trace("library", "audit", str(root), "--json")
    assert AuditReport.model_validate_json(printed.stdout) == report


def test_training_hashes_flag_the_images_they_were_made_from(planted, tmp_path):
    root, copy_of, ids = planted
    listed = run_trace("library", "hashes", str(root))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ids
    wanted = [line for line in lines if line.split()[2] in set(copy_of.values())][:3]
    hashes = tmp_path / "training.txt"
    hashes.write_text("# made by trace library hashes\n" + "\n".join(wanted) + "\n")
    report = audit_library(root, against=hashes)
    training = {(p.a, p.b) for p in report.pairs if p.kind == "training"}
    named = {line.split()[2] for line in wanted}
    assert {(name, name) for name in named} <= training
    assert {a for a, _ in training} <= named | set(copy_of), "a training hash flagged an image unrelated to it"


def test_a_malformed_hash_line_is_one_line_naming_it(planted, tmp_path):
    root, _, _ = planted
    hashes = tmp_path / "training.txt"
    hashes.write_text("0123456789abcdef 0123456789abcdef ok\nnot-a-hash\n")
    done = run_trace("library", "audit", str(root), "--against", str(hashes))
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f"{hashes}:2: expected PHASH DHASH [NAME], each hash 16 hex digits "
                                        "(trace library hashes DIR prints them)")
    assert len(done.stderr.strip().splitlines()) == 1


def test_exclude_flagged_leaves_out_the_cases_of_flagged_references(run_bench, shared_runs, tmp_path):
    run = shared_runs(run_bench, "synthetic:perfect")
    cases = list(read_cases(run_bench))
    flagged = cases[0].references[0].source_id
    left_out = sum(1 for c in cases if any(r.source_id == flagged for r in c.references))
    library = SAMPLE_MANIFEST.read(run_bench).library
    report = AuditReport(library=library["name"], content_hash=library["content_hash"], images=2, thresholds={},
                         candidates=1, pairs=(FlaggedPair(kind="training", a=flagged, b="line 1", phash_distance=0,
                                                          dhash_distance=0),), flagged=(flagged,))
    audit = tmp_path / "audit.json"
    write_audit(audit, report)
    whole = json.loads(run_trace("score", str(run), "--json").stdout)
    done = run_trace("score", str(run), "--json", "--exclude-flagged", str(audit))
    assert done.returncode == 0, done.stderr
    assert 0 < left_out < len(cases)
    assert json.loads(done.stdout)["cases"] == whole["cases"] - left_out
    assert f"{left_out} cases left out" in done.stderr
    other = tmp_path / "other.json"  # an audit of another library: its ids would name other images
    write_audit(other, report.model_copy(update={"content_hash": "0" * 64}))
    refused = run_trace("score", str(run), "--exclude-flagged", str(other))
    assert refused.returncode == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1
    assert "not of the library the benchmark was sampled from" in refused.stderr


def test_exclude_flagged_refuses_a_file_that_is_not_an_audit(run_bench, shared_runs, tmp_path):
    run = shared_runs(run_bench, "synthetic:perfect")
    audit = tmp_path / "audit.json"
    audit.write_text('{"library": "x"}\n')
    done = run_trace("score", str(run), "--exclude-flagged", str(audit))
    assert done.returncode == 2
    assert done.stderr.startswith(f"trace: {audit}:1:") or f"{audit}:1:" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
