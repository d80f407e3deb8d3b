"""``trace agree``: agreement of a judge with human labels, of judges with each other, of diagnoses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import TraceError
from ..scales import DEFAULT_SCALE, scale_names


def register(sub) -> None:
    p = sub.add_parser("agree", help="measure a judge against human labels (and judges against each other)",
                       description="Compare verdicts question by question: agreement, Cohen's kappa, and per "
                                   "operator Pearson, Spearman and MAE of operator scores, with bootstrap 95% "
                                   "intervals; Krippendorff's alpha for three or more raters; agreement of "
                                   "diagnosed failure sources. With --export-sample N, write a labelling page.")
    p.add_argument("--cases", type=Path, metavar="CASES_DIR", help="the benchmark folder (not with --exam)")
    p.add_argument("--human", type=Path, metavar="LABELS.jsonl",
                   help='human labels, one {"case_id", "question_id", "pass"} a line')
    p.add_argument("--judge", action="append", default=[], metavar="RUN_DIR_OR_JSONL",
                   help="a run folder or a label file; repeat to compare judges or repeated runs")
    p.add_argument("--human-diagnosis", type=Path, metavar="SOURCES.jsonl",
                   help='human failure sources, one {"case_id", "target", "source"} a line')
    p.add_argument("--diagnosis", type=Path, metavar="DIAG_DIR", help="the diagnosis to compare them with")
    p.add_argument("--export-sample", type=int, metavar="N",
                   help="write N cases, stratified by slot level, with a labelling page, to --out")
    p.add_argument("--out", type=Path, help="with --export-sample: the folder to write")
    p.add_argument("--truth", type=Path, metavar="RUN_DIR",
                   help="a run of the synthetic zoo: examine its judge against the truth its images record "
                        "(accuracy per operator and aspect, false passes and fails, yes-bias, abstentions)")
    p.add_argument("--exam", action="store_true",
                   help="the judge exam: judge a small fixed benchmark of zoo outputs with known answers with "
                        "--judge SPEC (a judge spec here) on --scale, and examine it; the check to run before "
                        "trusting a new judge (docs/protocols.md)")
    p.add_argument("--scale", choices=scale_names(), default=DEFAULT_SCALE.value,
                   help="with --exam: the scale the judge answers on (default binary)")
    p.add_argument("--retry-abstained", action="store_true",
                   help="with --exam: ask the judge again where it gave no usable answer")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of the sample")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    if not args.exam:
        args.judge = [Path(j) for j in args.judge]  # folders and files; with --exam, judge specs (openai:M@URL)
    if args.cases is None and not args.exam:
        if args.truth is None:
            raise TraceError("--cases CASES_DIR: the benchmark folder is needed (but with --exam)")
        from ..records import RUN_MANIFEST

        args.cases = Path(RUN_MANIFEST.read(args.truth).cases_dir)
    if args.export_sample is not None:
        from ..report import export_sample

        if args.out is None:
            raise TraceError("--export-sample needs --out DIR")
        if len(args.judge) > 1:
            raise TraceError("--export-sample takes at most one --judge (the run whose images to show)")
        sample = export_sample(args.cases, args.out, args.export_sample, run_dir=args.judge[0] if args.judge else None,
                               seed=args.seed)
        if len(sample) < args.export_sample:
            print(f"the benchmark holds {len(sample)} cases: all of them are in the sample", file=sys.stderr)
        from ..records import RUN_MANIFEST

        k = (RUN_MANIFEST.read(args.judge[0]).samples or 1) if args.judge else 1
        each = f" ({k} generations each)" if k > 1 else ""
        print(f"{args.out}/annotate.html: {len(sample)} cases{each} to label; save the labels and run "
              f"trace agree --cases {args.cases} --human labels.jsonl --judge RUN_DIR")
        return 0
    if args.exam or args.truth is not None:
        return _examine(args)
    from ..report import agree, format_agreement

    result = agree(args.cases, human=args.human, judges=args.judge, human_diagnosis=args.human_diagnosis,
                   diagnosis=args.diagnosis, seed=args.seed)
    print(json.dumps(result, indent=2, allow_nan=False) if args.json else format_agreement(result))
    return 0


def _examine(args) -> int:
    from ..report import examine, format_exam, take_exam

    if args.exam:
        if len(args.judge) != 1 or args.truth is not None:
            raise TraceError("--exam takes one --judge SPEC (a judge spec, e.g. openai:MODEL@URL) and no --truth")
        from ..providers import ModelSettings

        result = take_exam(str(args.judge[0]), settings=ModelSettings(scale=args.scale), out=args.out, seed=args.seed,
                           retry_abstained=args.retry_abstained)
    else:
        if args.judge or args.human:
            raise TraceError("--truth RUN examines RUN's own judge: give no --judge or --human")
        result = examine(args.cases, args.truth, seed=args.seed)
    print(json.dumps(result, indent=2, allow_nan=False) if args.json else format_exam(result))
    abstained = result["questions"] - result["answered"]
    if not abstained:
        return 0
    from ..run import abstention_reasons
    from ._args import report_incomplete

    return report_incomplete("trace agree", f"{abstained} of {result['questions']} questions abstained (left out of "
                                            "the examination, never scored as wrong)",
                             abstention_reasons(Path(result["run"])).most_common(3),
                             retry_flag="--retry-abstained" if args.exam else None)
