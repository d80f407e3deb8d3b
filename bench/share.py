"""What sharing costs: `trace export` and `trace import` of the default benchmark, and of a run of it.

The default benchmark (`trace sample --slots 1-8`, about 1,600 cases) is sampled once; then,
each a fresh process (the real commands), `trace export BENCH`, `trace import` of that export
(checked byte for byte against the folder), and the same for a zoo run of the benchmark
(`synthetic:global-interference` judged by the oracle, made once). Reported: wall time and peak
memory of each command (median over ``--rounds``), the folder's size on disk and the export's
(parquet shards and card), and their ratio. A benchmark's rows embed each case's reference
images, so an image several cases share is stored once per case: the export is larger than the
folder, which holds each image once.

    python bench/share.py [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from _machine import compile_bytecode, machine
from sample_throughput import machine_text, timed, trace_command

ROOT = Path(__file__).resolve().parent.parent


def size(folder: Path, skip: tuple[str, ...] = ()) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not set(p.relative_to(folder).parts) & set(skip))


def digests(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and not set(p.relative_to(folder).parts) & set(skip)}


def measure(folder: Path, tmp: Path, rounds: int, name: str) -> dict:
    """Export and import ``folder`` ``rounds`` times; the medians and the sizes."""
    exports, imports = [], []
    for k in range(rounds):
        out, back = tmp / f"{name}-export-{k}", tmp / f"{name}-back-{k}"
        exports.append(timed([*trace_command(), "export", str(folder), "--out", str(out)]))
        imports.append(timed([*trace_command(), "import", str(out), "--out", str(back)]))
    skip = ("cache",)  # a run's call cache is not shared
    return {
        "export_s": statistics.median(w for w, _ in exports), "export_mib": max(m for _, m in exports),
        "import_s": statistics.median(w for w, _ in imports), "import_mib": max(m for _, m in imports),
        "folder_bytes": size(folder, skip), "export_bytes": size(tmp / f"{name}-export-0"),
        "shards": len(list((tmp / f"{name}-export-0" / "data").glob("*.parquet"))),
        "same": _same(folder, tmp / f"{name}-back-0", name),
    }


def _same(folder: Path, back: Path, name: str) -> bool:
    if name == "benchmark":
        return digests(folder) == digests(back)
    return ((back / "verdicts.jsonl").read_bytes() == (folder / "verdicts.jsonl").read_bytes()
            and digests(folder / "images") == digests(back / "images"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_bytecode(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bench, run = tmp / "bench", tmp / "run"
        subprocess.run([*trace_command(), "sample", "--slots", "1-8", "--out", str(bench)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([*trace_command(), "run", str(bench), "--generator", "synthetic:global-interference",
                        "--judge", "oracle", "--out", str(run)], check=True, stdout=subprocess.DEVNULL)
        cases = sum(1 for _ in open(bench / "cases.jsonl", "rb"))
        results = {"machine": machine(), "cases": cases, "rounds": args.rounds,
                   "benchmark": measure(bench, tmp, args.rounds, "benchmark"),
                   "run": measure(run, tmp, args.rounds, "run")}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{machine_text()}; {cases} cases; medians of {args.rounds}")
    for name in ("benchmark", "run"):
        r = results[name]
        print(f"{name}: export {r['export_s']:.1f} s ({r['export_mib']:.0f} MiB), import {r['import_s']:.1f} s "
              f"({r['import_mib']:.0f} MiB); folder {r['folder_bytes'] / 1e6:.1f} MB, export "
              f"{r['export_bytes'] / 1e6:.1f} MB in {r['shards']} shard(s) = {r['export_bytes'] / r['folder_bytes']:.2f}x"
              f"; round trip identical: {r['same']}")


if __name__ == "__main__":
    main()
