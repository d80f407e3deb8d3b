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
    from ..merge import merge
    from ..records import DiagnosisSummary

    result = merge(args.folders, args.out)
    if isinstance(result, DiagnosisSummary):
        print(f"{args.out}: {result.cases} diagnosed cases from {len(args.folders)} folders")
    else:
        print(f"{args.out}: {result.cases} cases, {result.verdicts} verdicts from {len(args.folders)} runs")
    return 0
