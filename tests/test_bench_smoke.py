"""Smoke runs of bench scripts at a tiny size, so a script cannot stop working unnoticed (one
did: bench/judge_throughput.py faked a client method the judge no longer called). They check
that the script ran to the end and reported sane rows; never a time or a speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench(script: str, *args: str) -> dict:
    """``python bench/SCRIPT ARGS --json``, as its docstring says to run it, from the repository root;
    the JSON it printed."""
    env = {k: v for k, v in os.environ.items() if k != "TRACEBENCH_BENCH_NO_KEY"}  # PYTHONPATH passed on
    result = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "--json"], capture_output=True,
                            text=True, cwd=ROOT, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_judge_throughput_runs_every_method_against_trace_serve():
    result = bench("judge_throughput.py", "--per-slot", "1", "--rounds", "1", "--cached-rounds", "1",
                   "--concurrency", "2", "3", "--latency", "0.01")
    cases = result["cases"]
    assert cases >= 8 and result["calls_per_round"] == cases  # one judge call per case (slots 1..8)
    assert result["mean_request_kib"] > 1  # the images went along
    assert set(result["concurrency"]) == {"2", "3"}
    for level in result["concurrency"].values():
        rows = level["methods"]
        assert set(rows) == {"run", "judge", "create", "post"}
        for name, row in rows.items():
            assert row["calls"] == [cases], name  # every call answered, in the one round
            assert row["calls_per_s"]["median"] > 0 and row["client_cpu_ms_per_call"]["median"] > 0, name
        assert rows["create"]["of_create"] == 1.0
        assert {t["method"] for t in level["targets"]} == {"run", "judge"}
    rerun = result["cached_rerun"]
    assert rerun["verdicts"] == result["verdicts"] > 0 and rerun["cache_hits"] == cases


def test_rates_simulation_scores_every_replicate_and_the_oracle_prior_does_better():
    fitted = bench("rates_simulation.py", "--per-slot", "1", "--budget", "20", "--replicates", "0", "1")
    oracle = bench("rates_simulation.py", "--per-slot", "1", "--budget", "20", "--replicates", "0", "1",
                   "--oracle-prior")
    for result in (fitted, oracle):
        assert [r["replicate"] for r in result["replicates"]] == [0, 1]
        for r in result["replicates"]:
            assert r["instances"] > 0 and 0.0 <= r["tolerant_accuracy"] <= 1.0 and 0.0 <= r["ece"] <= 1.0
            assert 0 < r["generations_per_tree"] <= 4 * 20  # the per-tree cap
            assert set(r["mix_error"]) and all(0.0 <= e <= 1.0 for e in r["mix_error"].values())
    # the same draws of the run choose the same population under either prior
    assert [r["instances"] for r in fitted["replicates"]] == [r["instances"] for r in oracle["replicates"]]
    assert oracle["summary"]["mean_tolerant_accuracy"] >= fitted["summary"]["mean_tolerant_accuracy"] - 0.05


def test_judge_images_counts_what_each_batching_sends():
    """Against its own tree: the same requests twice; op batches send fewer references than the
    case's, and the dry run counts the images captured."""
    result = bench("judge_images.py", "--per-slot", "1", "--distractors", "2", "--against", str(ROOT))
    assert set(result["benchmarks"]) == {"default", "distractors 2"}
    for entry in result["benchmarks"].values():
        assert entry["cases"] >= 8 and "dry_run_mismatch" not in entry
        assert entry["case_requests_identical"] and entry["case_keys_identical"]
        assert entry["op_images_vs_against"] == 1.0
        rows = entry["trees"]["this tree"]
        assert rows["case"]["calls"] == entry["cases"] < rows["op"]["calls"]
        assert rows["case"]["images"] == entry["references"] + entry["cases"]  # every reference and the image
        assert rows["op"]["references_per_call"] < rows["case"]["references_per_call"]
        assert rows["op"]["kib_per_call"] > 1
