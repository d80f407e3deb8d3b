"""``trace score RUN_DIR``: operator scores of a run, with breakdowns and 95% intervals."""

from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    s = sub.add_parser("score", help="operator scores of a run, with breakdowns and 95%% intervals")
    s.add_argument("run_dir", type=Path)
    s.add_argument("--cases", type=Path, help="the benchmark folder (default: the one the run read)")
    s.add_argument("--gating", choices=("within", "cross"), default="within",
                   help="within (default, the paper): a question's dependencies act within its operator instance; "
                        "cross: a failed parent of another instance fails it too (apply after disentangle, compose "
                        "after anchor)")
    s.add_argument("--protocol", action="append", default=[], metavar="NAME",
                   choices=("trace", "longbanana", "macro", "savanna"),
                   help="also score by a neighbour's protocol (repeat for several): trace (the operator table), "
                        "longbanana (three dimensions, 0-100, and P@tau), macro (harmonic and geometric means, "
                        "0-10), savanna (identity and context, 0-100); docs/protocols.md")
    s.add_argument("--tau", type=float, default=70.0, help="longbanana's P@tau threshold (default 70)")
    weights = s.add_mutually_exclusive_group()
    weights.add_argument("--weights", type=Path, metavar="FILE", help="P@tau's frozen difficulty weights (a file "
                         "--weights-out wrote); default uniform")
    weights.add_argument("--weights-from", type=Path, nargs="+", metavar="RUN",
                         help="estimate P@tau's difficulty weights from these reference runs of the benchmark, write "
                              "them to --weights-out and use them")
    s.add_argument("--weights-out", type=Path, metavar="FILE", help="where --weights-from writes the weights file")
    s.add_argument("--exclude-flagged", type=Path, action="append", default=[], metavar="AUDIT",
                   help="leave out the cases with a reference flagged by this audit record (trace library audit "
                        "--out AUDIT; repeat for several); the count left out is printed on stderr")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(run=run)


def run(args) -> int:
    from ..errors import TraceError
    from ..score import format_scores, score_run, weights_from_runs, write_weights

    weights = args.weights
    if args.weights_from:
        if args.weights_out is None:
            raise TraceError("--weights-from: give --weights-out FILE, where the frozen weights are written")
        write_weights(args.weights_out, weights_from_runs(args.weights_from))
        weights = args.weights_out
    elif args.weights_out is not None:
        raise TraceError("--weights-out: give --weights-from RUN ... (the runs the weights are estimated from)")
    exclude = _flagged(args.exclude_flagged, args.run_dir, args.cases)
    scores = score_run(args.run_dir, cases_dir=args.cases, gating=args.gating, protocols=args.protocol,
                       weights=weights, tau=args.tau, exclude=exclude)
    if exclude is not None:
        print(f"{args.run_dir}: {exclude.excluded} cases left out: a reference flagged by "
              f"{', '.join(map(str, args.exclude_flagged))}", file=sys.stderr)
    print(scores.model_dump_json() if args.json else format_scores(scores))
    return 0


def _flagged(audits: list[Path], run_dir: Path, cases: Path | None):
    """The case filter of ``--exclude-flagged`` (None without it): audits of the library the run's
    benchmark was sampled from."""
    if not audits:
        return None
    from ..library import flagged_ids, read_audit_of
    from ..records import RUN_MANIFEST, SAMPLE_MANIFEST
    from ..score import FlaggedReferences

    sample = SAMPLE_MANIFEST.read(Path(cases or RUN_MANIFEST.read(run_dir).cases_dir))
    return FlaggedReferences(flagged_ids(read_audit_of(path, sample.library) for path in audits))
