"""Peak memory of `trace run`, `trace score` and `trace report` as the benchmark grows, for this tree and another.

For each size (``--sizes``, cases of ``trace sample --slots 1-8 --no-applications``; default
1,600 and 14,560), a benchmark is sampled once, then each tree runs it in a fresh process
(``python -P -m tracebench run BENCH --generator synthetic:perfect --judge oracle``, the
tree on ``PYTHONPATH``) and the same command is started again on the finished folder (a
resume with nothing left to do), then ``trace score RUN --json`` and ``trace report RUN``
read the finished run; ``trace diagnose RUN2 --strategy adaptive`` diagnoses the failing cases
of a second run of the benchmark, by ``synthetic:PROFILE`` (``--diagnose-profile``, default
global-interference: about half the cases fail), made once per size by this tree and read
by each. ``--steps`` measures only some of these. Peak memory is the child's maximum resident set size
(``os.wait4``); wall time is printed beside it but is not the point (the machine may be
loaded: memory is far less sensitive to that than time).

The ``verdicts.jsonl`` (but for each vote's ``cache_key``, a hash of the generated image,
whose record names the renderer's source), the scores and the report pages of both trees
must be byte-identical for every size, and so must the diagnoses' ``summary.json`` (but for
the version) and ``trees.jsonl`` (but for the round folder in each node image's path: a
diagnosis numbers its rounds window after window) (else exit 1); the ratio the fixed-memory
target reads is peak(largest size) / peak(smallest size), per command.

The outputs are compared by digests made a line at a time, never held whole: a child's
``ru_maxrss`` counts the high-water mark of the process that started it (Linux carries the
old address space's mark over ``exec``, and CPython starts children by ``vfork``, whose old
address space is this script's), so a script that once held a 147 MB ``trees.jsonl`` gave
every later child a peak of at least its own (436 MiB for a diagnosis that peaks at 251).

    git worktree add /tmp/run-base <commit>
    python bench/run_memory.py [--against /tmp/run-base] [--sizes 1600 14560] [--steps diagnose] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import machine, source_trees

ROOT = Path(__file__).resolve().parent.parent


STEPS = ("run", "resume", "score", "report", "diagnose")


def measured(command: list[str], env: dict, stdout: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one command in a fresh process (its output to ``stdout``)."""
    with tempfile.TemporaryFile("w+") as errors, open(stdout or os.devnull, "wb") as output:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=output, stderr=errors, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if status != 0:
            errors.seek(0)
            raise SystemExit(f"{' '.join(command)} failed: {errors.read()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def _without_image_keys(path: Path) -> str:
    """The digest of ``verdicts.jsonl`` without each vote's ``cache_key``: it hashes the generated
    image, whose embedded record names the renderer's source (two trees may differ there and
    nowhere else)."""
    digest = hashlib.sha256()
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            verdict = json.loads(line)
            for vote in verdict["votes"]:
                vote.pop("cache_key", None)
            digest.update(json.dumps(verdict, sort_keys=True).encode() + b"\n")
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _diagnosis(folder: Path) -> str:
    """The digest of a diagnosis folder's summary (without the version) and trees (each node
    image's round folder left out)."""
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    summary.pop("tool")
    digest = hashlib.sha256(json.dumps(summary, sort_keys=True).encode() + b"\n")
    with open(folder / "trees.jsonl", "rb") as lines:
        for line in lines:
            digest.update(re.sub(rb'"rounds/\d+/', b'"rounds/*/', line))
    return digest.hexdigest()


def trace(*args: str) -> list[str]:
    """``trace ARGS`` of the tree on ``PYTHONPATH`` (``-P``: not a checkout in the working folder)."""
    return [sys.executable, "-P", "-m", "tracebench", *args]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another source tree (a folder holding tracebench/)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1600, 14560],
                    help="benchmark sizes in cases (multiples of 8: slot levels 1-8, no application cases)")
    ap.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS), help="the commands to measure")
    ap.add_argument("--diagnose-profile", default="global-interference",
                    help="the synthetic profile whose run trace diagnose reads")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trees = source_trees(ap, ROOT, args.against)
    steps = [step for step in STEPS if step in args.steps]
    results: dict = {name: {} for name in trees}
    identical = True
    with tempfile.TemporaryDirectory(prefix="run-memory-") as tmp:
        for size in args.sizes:
            if size % 8:
                ap.error(f"--sizes {size}: not a multiple of 8")
            bench = Path(tmp) / f"bench-{size}"
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            measured(trace("sample", "--slots", "1-8", "--per-slot", str(size // 8), "--no-applications",
                           "--out", str(bench)), env)
            failing = Path(tmp) / f"failing-{size}"
            if "diagnose" in steps:  # the diagnosis's input, made once
                measured(trace("run", str(bench), "--generator", f"synthetic:{args.diagnose_profile}", "--judge",
                               "oracle", "--out", str(failing)), env)
            outputs = {}
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree)}
                out = Path(tmp) / f"run-{size}"  # one path for every tree: the page names its run folder
                command = trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle",
                                "--out", str(out))
                part = results[name][size] = {}
                scores, page = out.parent / f"{out.name}.scores.json", out.parent / f"{out.name}.html"
                diagnosis = Path(tmp) / f"diagnosis-{size}"
                commands = {"run": (command, None), "resume": (command, None),
                            "score": (trace("score", str(out), "--json"), scores),
                            "report": (trace("report", str(out), "--out", str(page)), None),
                            "diagnose": (trace("diagnose", str(failing), "--strategy", "adaptive", "--out",
                                               str(diagnosis)), None)}
                if {"resume", "score", "report"} & set(steps) and "run" not in steps:
                    measured(command, env)  # their input
                for step in steps:
                    argv, stdout = commands[step]
                    wall, rss = measured(argv, env, stdout)
                    part[f"{step}_peak_mib"], part[f"{step}_wall_s"] = round(rss, 1), round(wall, 1)
                outputs[name] = (_without_image_keys(out / "verdicts.jsonl") if out.exists() else "",
                                 _file_digest(scores) if scores.exists() else "",
                                 _file_digest(page) if page.exists() else "",
                                 _diagnosis(diagnosis) if diagnosis.exists() else "")
                for made in (out, diagnosis):
                    shutil.rmtree(made, ignore_errors=True)  # with its call cache: the next tree starts afresh
                scores.unlink(missing_ok=True)
                page.unlink(missing_ok=True)
                print(f"{size:>7} cases  {name:10s} " + "   ".join(
                    f"{step} {part[f'{step}_peak_mib']:7.1f} MiB ({part[f'{step}_wall_s']:6.1f} s)"
                    for step in steps), file=sys.stderr)
            identical = identical and len(set(outputs.values())) == 1
    small, large = min(args.sizes), max(args.sizes)
    report = {"machine": machine(), "load_average_1min_after": round(os.getloadavg()[0], 2), "sizes": args.sizes,
              "trees": {name: {"path": str(trees[name]), "by_size": results[name],
                               **{f"{step}_ratio_largest_over_smallest": round(
                                   results[name][large][f"{step}_peak_mib"] / results[name][small][f"{step}_peak_mib"],
                                   2) for step in steps}}
                        for name in trees},
              "verdicts_identical": identical}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        m = report["machine"]
        print(f"{m['cpu']}, {m['cores']} cores, {m['python']}; load after {report['load_average_1min_after']}")
        for name, part in report["trees"].items():
            print(f"{name:10s} peak {small} -> {large} cases: " + ", ".join(
                f"{step} x{part[f'{step}_ratio_largest_over_smallest']}" for step in steps) + f"   [{part['path']}]")
        print(f"verdicts, scores, report pages and diagnoses identical across trees: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
