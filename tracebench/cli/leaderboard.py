"""``trace leaderboard RUN_DIR... --out FILE.{md,csv,json}``: one row per generator, best first."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    b = sub.add_parser("leaderboard", help="rank runs of one benchmark and judge setup: one row per generator",
                       description="One row per run (its generator): the operator scores with 95%% intervals (as "
                                   "trace score), the protocols asked for, cases, abstentions and the judges, ordered "
                                   "by the overall score. Runs of another benchmark or judge setup (judges, scale, "
                                   "ensemble, batching, judge prompts) are refused unless --mixed, which marks them.")
    b.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    b.add_argument("--protocol", action="append", default=[], metavar="NAME",
                   choices=("trace", "longbanana", "macro", "savanna"),
                   help="also list a neighbour's protocol scores (repeat for several; docs/protocols.md)")
    b.add_argument("--gating", choices=("within", "cross"), default="within", help="as trace score --gating")
    b.add_argument("--mixed", action="store_true", help="list runs of other benchmarks or judge setups too, marked")
    b.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="the file to write, in the format its suffix names: .md (a Markdown table), .csv or .json")
    b.set_defaults(run=run)


def run(args) -> int:
    from ..errors import TraceError
    from ..score import leaderboard, terminal_text, write_leaderboard

    if args.out.suffix.lower() not in (".md", ".csv", ".json"):
        raise TraceError(f"--out {args.out}: name a .md, .csv or .json file (the format follows the suffix)")
    board = leaderboard(args.run_dirs, protocols=args.protocol, mixed=args.mixed, gating=args.gating)
    write_leaderboard(board, args.out)
    top = board.rows[0]
    print(f"{args.out}: {len(board.rows)} runs; first {terminal_text(top.name)} (avg "
          f"{'n/a' if top.avg is None else f'{top.avg:.4f}'})" + ("; mixed setups, marked" if board.mixed else ""))
    return 0
