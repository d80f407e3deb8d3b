"""Images and bytes a judge call sends, ``--judge-batch case`` against ``op``, this tree against another.

For each benchmark, the default one (``trace sample --slots 1-8 --per-slot 50 --seed 0``) and
the same with reference clutter (``--distractors 8``), sampled once and its images generated once
(``trace run --generator synthetic:perfect --judge oracle``), each source tree (this one, and
with ``--against TREE`` another checkout, e.g. the commit before a change) builds every judge
request of the benchmark in a child process of its own (``PYTHONPATH=TREE``): its
``OpenAIJudge.ask`` (built by ``make_judge("openai:oracle", ...)``) for each batch of each case as
``trace run`` makes them (the whole checklist with ``--judge-batch case``; with ``op`` one batch
per operator, its questions in checklist order), the requests captured on the wire by a real ``openai`` client
whose transport records them (bench/judge_throughput.py's ``recording_client``; no server, no
network). Per tree, benchmark and batching: calls, images per call (the ``image_url`` parts of
the body: the references sent and the generated image), reference images per call, bytes per
call (the request body as sent), a SHA-256 over every body and every cache key in order (so the
trees' ``case`` requests are compared byte for byte), and the images ``trace run --dry-run``
counts (``run_benchmark(..., dry_run=True).images_to_judges``, a ``folder:`` generator over the
generated images), which must equal the images captured.

Run from the repository root, in the environment where tracebench is installed::

    git worktree add /tmp/tracebench-before <commit before the change>   # or: git archive <commit> | tar -x -C DIR
    python bench/judge_images.py --against /tmp/tracebench-before [--per-slot 50] [--distractors 8] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _machine import client_machine_text

ROOT = Path(__file__).resolve().parents[1]
BATCHES = ("case", "op")


def prepare(work: Path, per_slot: int, distractors: int) -> Path:
    """Sample the benchmark and generate its images, with this tree's CLI; the benchmark folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    trace = [sys.executable, "-m", "tracebench"]
    clutter = ["--distractors", str(distractors)] if distractors else []
    bench = work / "bench"
    subprocess.run([*trace, "sample", "--slots", "1-8", "--per-slot", str(per_slot), "--seed", "0", *clutter,
                    "--out", str(bench)], check=True, stdout=subprocess.DEVNULL, env=env)
    subprocess.run([*trace, "run", str(bench), "--out", str(work / "prep"), "--generator", "synthetic:perfect",
                    "--judge", "oracle", "--concurrency", "8"], check=True, stdout=subprocess.DEVNULL, env=env)
    return bench


# -- in the child process of one tree ---------------------------------------------------------------


def by_op(questions) -> list[list]:
    """A case's questions grouped by operator, in order of first appearance: the batches of
    ``trace run --judge-batch op`` (the dry run's count of calls, compared below, says so)."""
    groups: dict[str, list] = {}
    for q in questions:
        groups.setdefault(q.op, []).append(q)
    return list(groups.values())


def capture(bench: Path, images: Path, out: Path) -> dict:
    """Every judge request of ``bench`` in each batching, as this tree's judge sends it, counted."""
    from judge_throughput import NO_KEY_ENV, recording_client

    import tracebench
    from tracebench.cache import cache_key
    from tracebench.providers import ImageBytes, ModelSettings, OpenAIJudge, ReferenceFiles, make_judge
    from tracebench.run import RunOptions, run_benchmark
    from tracebench.sample import read_cases

    settings = ModelSettings(base_url="http://127.0.0.1:9/v1", api_key_env=NO_KEY_ENV)  # never reached
    judge = make_judge("openai:oracle", settings)
    sent: list = []
    recorder = recording_client(sent)

    class _RecordingJudge(OpenAIJudge):
        def client(self):
            return recorder

    recording = _RecordingJudge(judge.model, judge.config)
    references = ReferenceFiles(bench)
    cases = list(read_cases(bench))

    async def build(batching: str) -> dict:
        counts = {"calls": 0, "images": 0, "references": 0, "bytes": 0}
        bodies, keys = hashlib.sha256(), hashlib.sha256()
        for case in cases:
            image = ImageBytes((images / f"{case.id}.png").read_bytes())
            refs = [references.get(ref.path) for ref in case.references]
            batches = [list(case.checklist)] if batching == "case" else by_op(case.checklist)
            for batch in batches:
                await recording.ask(case, batch, image, refs)
                (request,) = sent
                sent.clear()
                body = json.loads(request.body)
                parts = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
                counted = sum(p["type"] == "image_url" for p in parts)
                counts["calls"] += 1
                counts["images"] += counted
                counts["references"] += counted - 1
                counts["bytes"] += len(request.body)
                bodies.update(hashlib.sha256(request.body).digest())
                keys.update(cache_key(**recording.key(case, batch, image, refs)).encode())
        dry = run_benchmark(bench, out / f"dry-{batching}", RunOptions(
            generator=f"folder:{images}", judges=["openai:oracle"], settings=settings, judge_batch=batching,
            dry_run=True, progress=False))
        return counts | {"bodies_sha256": bodies.hexdigest(), "keys_sha256": keys.hexdigest(),
                         "dry_run_images": dry.images_to_judges, "dry_run_calls": sum(dry.judge_calls.values())}

    async def both() -> dict:
        result = {batching: await build(batching) for batching in BATCHES}
        await recorder.close()
        return result

    return {"tracebench": str(Path(tracebench.__file__).parent.parent), "cases": len(cases),
            "references": sum(len(c.references) for c in cases), **asyncio.run(both())}


def run_tree(name: str, tree: Path, bench: Path, work: Path) -> dict:
    """:func:`capture` in a child process of ``tree`` (``name``: this tree or the other)."""
    out = work / f"capture-{name.replace(' ', '-')}"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, __file__, "--capture", str(bench), str(bench.parent / "prep" / "images"),
                           str(out)], check=True, capture_output=True, text=True, env=env)
    result = json.loads(done.stdout.splitlines()[-1])
    if Path(result["tracebench"]).resolve() != tree.resolve():
        raise SystemExit(f"{tree}: the child imported tracebench from {result['tracebench']}")
    return result


# -- the report --------------------------------------------------------------------------------------


def per_call(counts: dict) -> dict:
    calls = counts["calls"]
    return {"calls": calls, "images_per_call": round(counts["images"] / calls, 3),
            "references_per_call": round(counts["references"] / calls, 3),
            "kib_per_call": round(counts["bytes"] / calls / 1024, 1), "images": counts["images"],
            "mib": round(counts["bytes"] / 2**20, 1), "dry_run_images": counts["dry_run_images"]}


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--capture":
        print(json.dumps(capture(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-slot", type=int, default=50, help="cases per slot level 1..8 (default 50)")
    parser.add_argument("--distractors", type=int, default=8, help="distractors of the cluttered benchmark (default 8)")
    parser.add_argument("--against", type=Path, help="another source tree (the commit before a change), measured too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    result: dict = {"machine": client_machine_text(), "command": " ".join(sys.argv), "benchmarks": {}}
    with tempfile.TemporaryDirectory(prefix="judge-images-") as tmp:
        for name, distractors in (("default", 0), (f"distractors {args.distractors}", args.distractors)):
            work = Path(tmp) / name.replace(" ", "-")
            work.mkdir()
            bench = prepare(work, args.per_slot, distractors)
            measured = {tree: run_tree(tree, path, bench, work) for tree, path in trees.items()}
            first = measured["this tree"]
            entry = {"cases": first["cases"], "references": first["references"],
                     "trees": {tree: {b: per_call(m[b]) for b in BATCHES} for tree, m in measured.items()}}
            for tree, m in measured.items():
                for b in BATCHES:
                    if m[b]["dry_run_images"] != m[b]["images"] or m[b]["dry_run_calls"] != m[b]["calls"]:
                        entry.setdefault("dry_run_mismatch", []).append(f"{tree} {b}")
            if "against" in measured:
                other = measured["against"]
                entry["case_requests_identical"] = first["case"]["bodies_sha256"] == other["case"]["bodies_sha256"]
                entry["case_keys_identical"] = first["case"]["keys_sha256"] == other["case"]["keys_sha256"]
                entry["op_images_vs_against"] = round(first["op"]["images"] / other["op"]["images"], 3)
                entry["op_references_vs_against"] = round(first["op"]["references"] / other["op"]["references"], 3)
                entry["op_bytes_vs_against"] = round(first["op"]["bytes"] / other["op"]["bytes"], 3)
            result["benchmarks"][name] = entry
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}")
    for name, entry in result["benchmarks"].items():
        print(f"\n{name}: {entry['cases']} cases, {entry['references']} reference images")
        print("| tree | batching | calls | images / call | references / call | KiB / call | images | MiB | dry run images |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for tree, rows in entry["trees"].items():
            for b, row in rows.items():
                print(f"| {tree} | {b} | {row['calls']} | {row['images_per_call']} | {row['references_per_call']} | "
                      f"{row['kib_per_call']} | {row['images']} | {row['mib']} | {row['dry_run_images']} |")
        for key in ("case_requests_identical", "case_keys_identical", "op_images_vs_against",
                    "op_references_vs_against", "op_bytes_vs_against", "dry_run_mismatch"):
            if key in entry:
                print(f"{key}: {entry[key]}")


if __name__ == "__main__":
    main()
