"""``trace score RUN_DIR``: operator scores of a run, with breakdowns and 95% intervals."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    s = sub.add_parser("score", help="operator scores of a run, with breakdowns and 95%% intervals")
    s.add_argument("run_dir", type=Path)
    s.add_argument("--cases", type=Path, help="the benchmark folder (default: the one the run read)")
    s.add_argument("--gating", choices=("within", "cross"), default="within",
                   help="within (default, the paper): a question's dependencies act within its operator instance; "
                        "cross: a failed parent of another instance fails it too (apply after disentangle, compose "
                        "after anchor)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(run=run)


def run(args) -> int:
    from ..score import format_scores, score_run

    scores = score_run(args.run_dir, cases_dir=args.cases, gating=args.gating)
    print(scores.model_dump_json() if args.json else format_scores(scores))
    return 0
