"""What the lmms-eval bridge costs: `trace export --lmms-eval` of a benchmark, and `trace
import-lmms` of a sample log of a zoo run's images, against `trace rejudge` of the same images.

A benchmark (`trace sample --slots 1-8 --per-slot N`, application cases included) and its zoo run
(`synthetic:global-interference` judged by the oracle) are made once. Then, each a fresh process
(the real commands), median over ``--rounds``: `trace export BENCH --lmms-eval DIR`; `trace
import-lmms LOG --cases BENCH --judge oracle` of a log in lmms-eval's JSONL layout (one sample a
line, the reply a JSON string in ``filtered_resps``, the images copied beside it), whose import
checks and decodes every image before judging; and `trace rejudge RUN --judge oracle`, the same
judging of the same images without the log. Reported: wall seconds and peak MiB of each, and
whether the import's `trace score --json` equals the zoo run's (given ``--generator-name``).

    python bench/lmms.py [--per-slot 20] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from _machine import compile_bytecode
from sample_throughput import machine_text, timed, trace_command

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = "synthetic:global-interference"


def make_log(bench: Path, run: Path, folder: Path) -> Path:
    """lmms-eval's output of the run's images: ``folder/model/images/`` and its sample log."""
    model = folder / "model"
    (model / "images").mkdir(parents=True)
    lines = []
    for doc_id, line in enumerate((bench / "cases.jsonl").read_text(encoding="utf-8").splitlines()):
        case = json.loads(line)["id"]
        source = run / "images" / f"{case}.png"
        if not source.is_file():
            continue
        image = model / "images" / f"{doc_id:05d}.png"
        shutil.copyfile(source, image)
        reply = json.dumps({"text": "", "images": [str(image.absolute())]})
        lines.append(json.dumps({"doc_id": doc_id, "target": case, "filtered_resps": [reply]}))
    log = model / "samples_tracebench.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return log


def measure(tmp: Path, per_slot: int, rounds: int) -> dict:
    trace = trace_command()
    bench, run = tmp / "bench", tmp / "run"
    subprocess.run([*trace, "sample", "--per-slot", str(per_slot), "--out", str(bench)], check=True,
                   capture_output=True)
    subprocess.run([*trace, "run", str(bench), "--generator", GENERATOR, "--judge", "oracle", "--out", str(run)],
                   check=True, capture_output=True)
    log = make_log(bench, run, tmp / "lmms")
    times: dict[str, list[tuple[float, float]]] = {"export": [], "import-lmms": [], "rejudge": []}
    for k in range(rounds):
        times["export"].append(timed([*trace, "export", str(bench), "--lmms-eval", str(tmp / f"task-{k}")]))
        times["import-lmms"].append(timed([*trace, "import-lmms", str(log), "--cases", str(bench), "--judge", "oracle",
                                           "--generator-name", GENERATOR, "--out", str(tmp / f"import-{k}")]))
        times["rejudge"].append(timed([*trace, "rejudge", str(run), "--judge", "oracle",
                                       "--out", str(tmp / f"rejudge-{k}")]))
    score = [subprocess.run([*trace, "score", str(folder), "--json"], check=True, capture_output=True).stdout
             for folder in (run, tmp / "import-0")]
    cases = sum(1 for _ in (bench / "cases.jsonl").open())
    return {"cases": cases, "images": len(log.read_text().splitlines()), "same_score": score[0] == score[1],
            **{f"{name}_s": statistics.median(w for w, _ in runs) for name, runs in times.items()},
            **{f"{name}_mib": max(m for _, m in runs) for name, runs in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-slot", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_bytecode(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(tmp), args.per_slot, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"machine: {machine_text()}")
    print(f"{result['cases']} cases, {result['images']} images in the log; import's score == the run's: "
          f"{result['same_score']}")
    for name in ("export", "import-lmms", "rejudge"):
        print(f"{name:12s} {result[f'{name}_s']:7.2f} s  {result[f'{name}_mib']:7.1f} MiB")


if __name__ == "__main__":
    main()
