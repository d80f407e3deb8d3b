"""``trace import-lmms LOG --cases BENCH --judge SPEC ... --out RUN``: an lmms-eval sample log
judged as a tracebench run."""

from __future__ import annotations

from pathlib import Path

from ._args import EXIT_STATUSES, add_judging_options, add_model_options, model_settings, run_incomplete


def register(sub) -> None:
    p = sub.add_parser("import-lmms", help="judge the images of an lmms-eval sample log as a run of a benchmark",
                       description="Read an lmms-eval sample log of a task that trace export --lmms-eval wrote (the "
                                   "JSONL lmms-eval writes with --log_samples, one sample a line, or a JSON file with "
                                   "a 'logs' list; a reply is the JSON string {\"text\": ..., \"images\": [paths]}) "
                                   "and judge each case's reply image into a run folder, as trace run would: trace "
                                   "score, diagnose, report and leaderboard take it. Every sample's case is checked "
                                   "against the benchmark and every image (inside the log's folder, decodable) "
                                   "before anything is written; a case whose reply holds no image abstains. "
                                   "docs/share.md.",
                       epilog=EXIT_STATUSES)
    p.add_argument("log", type=Path, metavar="LOG", help="the sample log (OUT/<model>/*_samples_<task>.jsonl)")
    p.add_argument("--cases", type=Path, required=True, metavar="BENCH_DIR",
                   help="the benchmark folder the task was exported from")
    add_judging_options(p, "as trace run's --judge (oracle for the synthetic zoo); repeat for an ensemble")
    p.add_argument("--generator-name", metavar="NAME", default=None,
                   help="the generator the run names (default lmms-eval:MODEL, MODEL the log's folder's name, which "
                        "lmms-eval names after the model)")
    p.add_argument("--images-root", type=Path, metavar="DIR", default=None,
                   help="the folder every reply image must stay inside (default: the log's folder); a relative "
                        "path of a reply is read from it")
    add_model_options(p, cache_default="RUN/cache")
    p.add_argument("--out", type=Path, required=True, help="the run folder (resumed if it holds the same import)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..share import import_lmms_log

    manifest = import_lmms_log(args.log, args.out, cases_dir=args.cases, judges=args.judge,
                               settings=model_settings(args), generator=args.generator_name,
                               images_root=args.images_root, shard=args.shard, concurrency=args.concurrency,
                               judge_batch=args.judge_batch, retry_abstained=args.retry_abstained,
                               cache_dir=args.cache, ensemble=args.ensemble, max_calls=args.max_calls,
                               allow_model_change=args.allow_model_change)
    calls = ", ".join(f"{spec}: {n}" for spec, n in manifest.calls.items()) or "none"
    print(f"{args.out}: {manifest.cases} cases of {args.log} judged ({manifest.generator}), {manifest.verdicts} "
          f"verdicts, {manifest.abstentions} abstentions; calls {calls}; cache hits {manifest.cache_hits}")
    return run_incomplete("trace import-lmms", args.out, manifest, max_calls=args.max_calls)
