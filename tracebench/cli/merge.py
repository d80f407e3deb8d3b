"""``trace merge RUN_DIR... --out RUN_DIR``: combine the run folders of shards."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    m = sub.add_parser("merge", help="combine the run folders of shards")
    m.add_argument("runs", type=Path, nargs="+")
    m.add_argument("--out", type=Path, required=True)
    m.set_defaults(run=run)


def run(args) -> int:
    from ..run._merge import merge_runs

    manifest = merge_runs(args.runs, args.out)
    print(f"{args.out}: {manifest.cases} cases, {manifest.verdicts} verdicts from {len(args.runs)} runs")
    return 0
