"""``trace merge FOLDER... --out FOLDER``: combine the run (or diagnosis) folders of shards."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    m = sub.add_parser("merge", help="combine the run or diagnosis folders of shards",
                       description="Combine the folders that `trace run --shard` or `trace diagnose --shard` wrote.")
    m.add_argument("folders", type=Path, nargs="+", metavar="FOLDER")
    m.add_argument("--out", type=Path, required=True)
    m.set_defaults(run=run)


def run(args) -> int:
    from ..diagnose import DIAGNOSIS_FILE, merge_diagnoses
    from ..run._merge import merge_runs

    if (args.folders[0] / DIAGNOSIS_FILE).is_file():
        summary = merge_diagnoses(args.folders, args.out)
        print(f"{args.out}: {summary.cases} diagnosed cases from {len(args.folders)} folders")
        return 0
    manifest = merge_runs(args.folders, args.out)
    print(f"{args.out}: {manifest.cases} cases, {manifest.verdicts} verdicts from {len(args.folders)} runs")
    return 0
