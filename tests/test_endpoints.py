"""A researcher's own model server: endpoints that abstain, refuse or are recorded for later.

Every server is real and on 127.0.0.1: ``trace serve``'s zoo (the synthetic generator and the
oracle judge behind the OpenAI API) and the scripted OpenAI-compatible stub.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openai_server import OpenAIStub
from test_cli import run_trace
from tracebench.apikeys import public_url
from tracebench.diagnose import export_nodes
from tracebench.providers import ModelSettings
from tracebench.records import DiagnosisSummary, DiagnosticTree, RunManifest
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import SampleOptions, sample_benchmark
from tracebench.serve import ZooServer

PROFILE = "global-interference"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A benchmark, its run through the served zoo, and the zoo server (which knows the nodes'
    prompts: the diagnosis's sub-cases exported from an in-process run of the same profile)."""
    root = tmp_path_factory.mktemp("endpoints")
    bench = root / "bench"
    sample_benchmark(bench, SampleOptions(slots=(1, 2, 3, 4, 5), per_slot=3, seed=5, applications=False))
    run_benchmark(bench, root / "local", RunOptions(generator=f"synthetic:{PROFILE}", judges=["oracle"],
                  settings=ModelSettings(max_retries=0)))
    export_nodes(root / "local", root / "nodes")
    with ZooServer([bench, root / "nodes"]).start() as zoo:
        result = run_trace("run", str(bench), "--generator", f"openai:synthetic/{PROFILE}@{zoo.base_url}",
                           "--judge", f"openai:oracle@{zoo.base_url}", "--out", str(root / "run"))
        assert result.returncode == 0, result.stderr
        yield root, zoo


def _attributions(diag: Path) -> dict:
    trees = [DiagnosticTree.model_validate_json(line) for line in (diag / "trees.jsonl").read_text().splitlines()]
    return {(t.case_id, a.op, a.target): (a.source, a.node) for t in trees for a in t.attributions}


def test_the_run_records_its_endpoints_without_credentials(served):
    root, zoo = served
    manifest = RunManifest.model_validate_json((root / "run" / "run.json").read_text())
    assert manifest.generator == f"openai:synthetic/{PROFILE}" and manifest.judges == ("openai:oracle",)
    assert {spec: e.base_urls for spec, e in manifest.endpoints.items()} == {
        f"openai:synthetic/{PROFILE}": (zoo.base_url,), "openai:oracle": (zoo.base_url,)}
    assert all(e.api_key_env == "OPENAI_API_KEY" for e in manifest.endpoints.values())
    assert public_url("https://user:secret@example.org:8443/v1?api-key=sk-1#x") == "https://example.org:8443/v1"


def test_a_diagnosis_over_an_abstaining_judge_is_undetermined_exits_3_and_converges_on_retry(served):
    root, zoo = served
    run = str(root / "run")
    generator = ("--generator", f"openai:synthetic/{PROFILE}@{zoo.base_url}")  # named: a run folder never says
    with OpenAIStub(lambda request: "Sure! The first is yes, the rest no.") as broken:
        first = run_trace("diagnose", run, *generator, "--judge", "openai:oracle", "--judge-base-url", broken.base_url,
                          "--out", str(root / "diag"))
    assert first.returncode == 3, first.stderr
    (line,) = first.stderr.strip().splitlines()
    assert line.startswith("trace diagnose: ") and "node verdicts abstained" in line and "Undetermined" in line
    assert "x the reply is not the expected JSON" in line and line.endswith("--retry-abstained")
    rows = {row[:22].strip(): row[22:].split() for row in first.stdout.splitlines()}
    assert rows["Undetermined"][-1] != "0.0%" and "Stable Success" in rows
    summary = DiagnosisSummary.model_validate_json((root / "diag" / "summary.json").read_text())
    assert summary.undetermined > 0
    # decided: a passing root (Stable Success, whatever lies below: only its unstable flag is unknown),
    # and a failing one that no node below keeps (nothing unknown can change it)
    trees = [DiagnosticTree.model_validate_json(line) for line in (root / "diag" / "trees.jsonl").read_text().splitlines()]
    for tree in trees:
        for a in tree.attributions:
            kept_below = any(a.target in n.targets for n in tree.nodes[1:] if n.evaluated)
            if a.root == "pass":
                assert (a.source, a.unstable) == ("stable_success", None if kept_below else False), a
            else:
                assert a.source == ("undetermined" if kept_below else "persistent_failure"), a
    assert summary.abstained_verdicts > 0
    assert list(summary.abstention_reasons) == ["the reply is not the expected JSON"]
    assert summary.localization_accuracy is None  # nothing decided, nothing localized

    # the same diagnosis, asked again where the judge works
    judge = ("--judge", f"openai:oracle@{zoo.base_url}")
    again = run_trace("diagnose", run, *generator, *judge, "--out", str(root / "diag"), "--retry-abstained")
    assert again.returncode == 0, again.stderr
    fresh = run_trace("diagnose", run, *generator, *judge, "--out", str(root / "fresh"))
    assert fresh.returncode == 0, fresh.stderr
    assert _attributions(root / "diag") == _attributions(root / "fresh")
    converged = DiagnosisSummary.model_validate_json((root / "diag" / "summary.json").read_text())
    assert converged.undetermined == converged.abstained_verdicts == 0
    assert converged.sources == DiagnosisSummary.model_validate_json((root / "fresh" / "summary.json").read_text()).sources
    # openai:synthetic/... is the zoo behind a server: its recorded causes are checked
    assert converged.localization_accuracy is not None and converged.localization_accuracy["accuracy"] == 1.0


def test_a_run_against_a_refusing_endpoint_stops_at_once_and_resumes_where_it_works(served, tmp_path):
    root, zoo = served
    bench, out = str(root / "bench"), tmp_path / "run"
    with OpenAIStub(lambda request: (404, "The model `oracle` does not exist")) as wrong:
        result = run_trace("run", bench, "--generator", f"synthetic:{PROFILE}", "--judge", "openai:oracle",
                           "--base-url", wrong.base_url, "--out", str(out), "--concurrency", "1")
        assert len(wrong.requests) == 1  # refused: nothing more is sent
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "stopped early, the endpoint of openai:oracle refused the request: API error 404" in line
    assert (out / "verdicts.jsonl").read_text() == ""
    with OpenAIStub(lambda request: (400, "Invalid model name passed in model=oracle")) as litellm:
        result = run_trace("run", bench, "--generator", f"synthetic:{PROFILE}", "--judge", "openai:oracle",
                           "--base-url", litellm.base_url, "--out", str(out), "--concurrency", "2")
        assert len(litellm.requests) <= 6  # five alike, and at most the one already in flight
    assert result.returncode == 2 and "the first 5 calls to openai:oracle all failed the same way" in result.stderr
    again = run_trace("run", bench, "--generator", f"synthetic:{PROFILE}", "--judge", "openai:oracle",
                      "--base-url", zoo.base_url, "--out", str(out))
    assert again.returncode == 0, again.stderr
    local = (root / "local" / "verdicts.jsonl").read_text().replace('"oracle"', '"openai:oracle"')
    assert [json.loads(line)["verdict"] for line in (out / "verdicts.jsonl").read_text().splitlines()] == \
        [json.loads(line)["verdict"] for line in local.splitlines()]


def test_a_diagnosis_through_a_server_without_the_nodes_says_how_to_serve_them(served, tmp_path):
    """The zoo behind trace serve knows only the benchmarks it was started with: a diagnosis whose
    nodes it was not given stops with the two commands that fix it, and export-nodes counts both
    the sub-cases and the cases they come from."""
    root, _ = served
    bench = root / "bench"
    with ZooServer([bench]).start() as zoo:
        result = run_trace("diagnose", str(root / "run"), "--generator", f"openai:synthetic/{PROFILE}@{zoo.base_url}",
                           "--judge", f"openai:oracle@{zoo.base_url}", "--out", str(tmp_path / "diag"))
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "trace diagnose RUN --export-nodes DIR, then start trace serve BENCH DIR" in line
    assert "Fix the benchmarks trace serve was started with" in line and "endpoint, model or key" not in line
    exported = run_trace("diagnose", str(root / "run"), "--export-nodes", str(tmp_path / "nodes"))
    assert exported.returncode == 0, exported.stderr
    nodes = [json.loads(l) for l in (tmp_path / "nodes" / "nodes.jsonl").read_text().splitlines()]
    assert exported.stdout.strip() == (f"{tmp_path / 'nodes'}: {len({n['case_id'] for n in nodes})} sub-cases, the nodes "
                                       f"of {len({n['root'] for n in nodes})} cases' diagnostic trees (nodes.jsonl says "
                                       "where each sits)")
