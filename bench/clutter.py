"""What reference clutter costs `trace sample`, and what it does to the zoo's scores.

1. Sampling time: the default benchmark (`trace sample --slots 1-8`, about 1,600 cases) plain
   and with `--distractors 8 --max-references 32` (and with `--pool`), each a fresh process
   (the real command), interleaved round by round; medians and the ratio of medians. The
   target (issue: reference clutter) is a ratio under 2.
2. With `--distractors-range`: the zoo's `distractor-confusion` on benchmarks of 0, 2, 4 and
   8 distractors per case (the same cases otherwise), judged by the oracle: the anchor and
   disentangle scores, the rejection rate and the scores by number of input images.

    python bench/clutter.py [--rounds 5] [--effects] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from _machine import compile_bytecode, machine
from sample_throughput import machine_text, timed, trace_command

CLUTTERED = ["--distractors", "8", "--max-references", "32"]


def sampling(rounds: int) -> dict:
    """Wall seconds per round: plain, cluttered, cluttered pool mode."""
    runs: dict[str, list[float]] = {"plain": [], "distractors 8, max 32": [], "distractors 8, max 32, pool": []}
    options = {"plain": [], "distractors 8, max 32": CLUTTERED, "distractors 8, max 32, pool": [*CLUTTERED, "--pool"]}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(rounds):
            for name, extra in options.items():
                out = Path(tmp) / f"{k}-{len(runs[name])}-{name.replace(' ', '_').replace(',', '')}"
                wall, _ = timed([*trace_command(), "sample", "--slots", "1-8", *extra, "--out", str(out)])
                runs[name].append(round(wall, 3))
    medians = {name: statistics.median(walls) for name, walls in runs.items()}
    return {"rounds": runs, "medians": medians,
            "ratios": {name: round(m / medians["plain"], 2) for name, m in medians.items()}}


def effects() -> list[dict]:
    """The zoo's distractor-confusion against the number of distractors (same cases, same seed)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (0, 2, 4, 8):
            bench, run = Path(tmp) / f"b{n}", Path(tmp) / f"r{n}"
            subprocess.run([*trace_command(), "sample", "--slots", "1-8", "--per-slot", "60", "--no-applications",
                            "--distractors", str(n), "--out", str(bench)], check=True, capture_output=True)
            subprocess.run([*trace_command(), "run", str(bench), "--generator", "synthetic:distractor-confusion",
                            "--judge", "oracle", "--out", str(run)], check=True, capture_output=True)
            scores = json.loads(subprocess.run([*trace_command(), "score", str(run), "--json"], check=True,
                                               capture_output=True, text=True).stdout)
            rows.append({"distractors": n, "anchor": scores["operators"]["anchor"],
                         "disentangle": scores["operators"]["disentangle"], "avg": scores["avg"],
                         "rejection": {op: r["rate"] for op, r in (scores.get("rejection") or {}).items()},
                         "by_inputs": {k: g["overall"] for k, g in (scores.get("by_inputs") or {}).items()}})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--effects", action="store_true", help="also run the zoo at 0, 2, 4 and 8 distractors")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_bytecode(Path(__file__).resolve().parents[1])
    subprocess.run([*trace_command(), "parse", "f"], check=True, capture_output=True)  # the library built, caches warm
    result = {"machine": machine(), "sampling": sampling(args.rounds)}
    if args.effects:
        result["effects"] = effects()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"machine: {machine_text()}")
    s = result["sampling"]
    print("| run | wall per round (s) | median | vs plain |\n|---|---|---:|---:|")
    for name, walls in s["rounds"].items():
        print(f"| {name} | {', '.join(f'{w:.2f}' for w in walls)} | {s['medians'][name]:.2f} s | "
              f"{s['ratios'][name]:.2f}x |")
    for row in result.get("effects", []):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
