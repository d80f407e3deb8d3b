"""``trace rejudge RUN_DIR --judge SPEC ... --out RUN2``: judge a run's images again."""

from __future__ import annotations

from pathlib import Path

from ._args import EXIT_STATUSES, add_judging_options, add_model_options, model_settings, run_incomplete


def register(sub) -> None:
    p = sub.add_parser("rejudge", help="judge the images of an existing run again, with other judges or another scale",
                       description="Judge the images of a run folder (trace run's, or an imported run export) with "
                                   "other judges or on another --scale, through the same harness (cache, resume, "
                                   "abstentions) into a new run folder that records its source run. trace agree and "
                                   "trace compare then set the judges side by side on identical images.",
                       epilog=EXIT_STATUSES)
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run whose images are judged")
    p.add_argument("--cases", type=Path, metavar="BENCH_DIR", help="its benchmark folder (default: the one the run "
                   "read)")
    add_judging_options(p, "as trace run's --judge; repeat for an ensemble")
    add_model_options(p, cache_default="RUN2/cache (give the source run's cache to reuse its judges' answers)")
    p.add_argument("--out", type=Path, required=True, help="the new run folder (resumed if it holds the same rejudge)")
    p.set_defaults(run=run, seed=None)


def run(args) -> int:
    from ..errors import TraceError
    from ..run import rejudge_run

    if args.seed is not None:
        raise TraceError("--seed: the images are the run's, made with its seed; rejudging takes no seed")
    settings = model_settings(args)
    manifest = rejudge_run(args.run_dir, args.out, judges=args.judge, settings=settings, cases_dir=args.cases,
                           shard=args.shard, concurrency=args.concurrency, judge_batch=args.judge_batch,
                           retry_abstained=args.retry_abstained, cache_dir=args.cache, ensemble=args.ensemble,
                           max_calls=args.max_calls, allow_model_change=args.allow_model_change)
    calls = ", ".join(f"{spec}: {n}" for spec, n in manifest.calls.items()) or "none"
    print(f"{args.out}: {manifest.cases} cases of {args.run_dir} re-judged, {manifest.verdicts} verdicts, "
          f"{manifest.abstentions} abstentions; calls {calls}; cache hits {manifest.cache_hits}")
    return run_incomplete("trace rejudge", args.out, manifest, max_calls=args.max_calls)
