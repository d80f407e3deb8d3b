"""``trace compare RUN_A RUN_B [...]``: paired differences between runs, clustered by template, Holm-corrected."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("compare", help="does one model really beat another: paired differences per operator",
                       description="For every pair of runs of one benchmark, the paired difference of each operator's "
                                   "case scores (and the overall and protocol scores) over the cases both scored, with "
                                   "a bootstrap over templates, a p-value and a Holm correction across the table.")
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument("--protocol", action="append", default=[], choices=("trace", "longbanana", "macro", "savanna"),
                   metavar="NAME", help="also compare by a protocol's case scores (longbanana, macro, savanna)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..score import compare_runs, format_comparison

    result = compare_runs(args.run_dirs, protocols=args.protocol, seed=args.seed)
    print(result.model_dump_json() if args.json else format_comparison(result))
    return 0
