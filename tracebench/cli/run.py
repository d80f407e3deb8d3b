"""``trace run``: generate an image per case and judge it."""

from __future__ import annotations

from pathlib import Path

from ..outcomes import Ensemble
from ._args import (
    EXIT_STATUSES,
    add_executor_options,
    add_generator_options,
    add_model_options,
    model_settings,
    provider_help,
    run_incomplete,
)


def register(sub) -> None:
    p = sub.add_parser("run", help="generate an image per case and judge it",
                       description="Send every case to a generator and its image to one or more judges.", epilog=EXIT_STATUSES)
    p.add_argument("cases_dir", type=Path, help="a benchmark folder (trace sample's output)")
    p.add_argument("--generator", required=True, metavar="SPEC", help=provider_help("generator"))
    p.add_argument("--judge", action="append", required=True, metavar="SPEC",
                   help=provider_help("judge") + "; repeat for an ensemble (--ensemble)")
    p.add_argument("--ensemble", choices=[e.value for e in Ensemble], default=None,
                   help="how several judges combine: mean (default, as the paper averages its judges: the value "
                        "is the judges' mean, passing above one half), majority (the majority status; a tie "
                        "abstains) or median (the default with a graded --scale)")
    p.add_argument("--max-images", type=int, default=None, metavar="N",
                   help="the most reference images the generator accepts (default: its own declaration, or "
                        "max_images in the models file); a case holding more is left out as not applicable (never "
                        "a fail), or sent as one grid image with --collage")
    p.add_argument("--collage", action="store_true",
                   help="send a case holding more than --max-images references as one labelled grid image, with a "
                        "line in the prompt saying which cell is which Image k (MacroBench's proxy)")
    p.add_argument("--max-calls", type=int, default=None, metavar="N",
                   help="a budget: at most N model calls in this invocation (cache hits are free); when it is spent "
                        "the run stops cleanly, keeps what is done and exits 3 saying what is left; the same command "
                        "goes on")
    p.add_argument("--samples", type=int, default=1, metavar="K",
                   help="generate K images of each case, each with its own recorded seed (to generators that take "
                        "one), and judge each; a case scores the mean over its samples, intervals resample samples "
                        "within cases (default 1, at most 1000)")
    p.add_argument("--max-cost", type=_amount, default=None, metavar="AMOUNT",
                   help="a budget in money for this invocation, in the currency of --price-file (which must price "
                        "every model that makes calls): a case starts only when its estimated cost fits what is "
                        "left; when it is spent the run stops cleanly, keeps what is done and exits 3 saying what "
                        "is left and what was spent (docs/evaluate.md, cost); the same command goes on")
    p.add_argument("--dry-run", action="store_true",
                   help="make no call and write nothing: print the cases, images to generate, judge calls, images "
                        "sent and estimated tokens the run would still take (cached calls are free); with "
                        "--price-file, an estimated cost (docs/evaluate.md, cost)")
    p.add_argument("--price-file", type=Path, metavar="FILE",
                   help="prices per model spec (TOML: [\"openai:MODEL\"] input_per_million, output_per_million, "
                        "per_call, per_image) for --dry-run's cost and --max-cost's budget")
    p.add_argument("--allow-model-change", action="store_true",
                   help="resume even when a judge's server now reports another model or system_fingerprint than "
                        "the run's verdicts so far (recorded in run.json); without it the run stops, one line")
    add_executor_options(p)
    add_generator_options(p)
    add_model_options(p, cache_default="RUN_DIR/cache")
    p.add_argument("--out", type=Path, required=True, help="the run folder (resumed if it holds the same run)")
    p.set_defaults(run=run)


def run(args) -> int:
    from dataclasses import replace

    from ..errors import TraceError
    from ..run import RunOptions, read_prices, run_benchmark

    settings = model_settings(args)
    if args.price_file is not None and not args.dry_run and args.max_cost is None:
        raise TraceError("--price-file: it prices a --dry-run or a --max-cost budget; give one of them too")
    if args.max_cost is not None and args.price_file is None:
        raise TraceError("--max-cost: give --price-file FILE, the prices the budget is counted in")
    prices = None if args.price_file is None else read_prices(args.price_file)
    options = RunOptions(generator=args.generator, judges=args.judge, settings=settings, concurrency=args.concurrency,
                         shard=args.shard, judge_batch=args.judge_batch, retry_abstained=args.retry_abstained,
                         cache_dir=args.cache, ensemble=args.ensemble, max_images=args.max_images,
                         collage=args.collage, max_calls=args.max_calls, max_cost=args.max_cost, prices=prices,
                         allow_model_change=args.allow_model_change, executor=args.executor, workers=args.workers,
                         gpus_per_worker=args.gpus_per_worker, ray_address=args.ray_address, samples=args.samples)
    if args.dry_run:  # counted here: no worker is started
        return _dry_run(args, replace(options, dry_run=True, executor="local"))
    manifest = run_benchmark(args.cases_dir, args.out, options)
    calls = ", ".join(f"{spec}: {n}" for spec, n in manifest.calls.items()) or "none"
    samples = f" ({manifest.samples} samples each)" if manifest.samples else ""
    print(f"{args.out}: {manifest.cases} cases{samples}, {manifest.verdicts} verdicts, {manifest.abstentions} abstentions; "
          f"calls {calls}; cache hits {manifest.cache_hits}")
    if manifest.not_applicable:
        print(f"{manifest.not_applicable} cases not applicable: more than {manifest.max_images} references, the most "
              f"the generator accepts (left out, never a fail; --collage sends them as one grid image)")
    if manifest.collaged:
        print(f"{manifest.collaged} cases sent as one grid image (more than {manifest.max_images} references)")
    return run_incomplete("trace run", args.out, manifest, max_calls=args.max_calls, max_cost=args.max_cost)


def _dry_run(args, options) -> int:
    from ..run import format_estimate, run_benchmark

    estimate = run_benchmark(args.cases_dir, args.out, options)
    print(format_estimate(estimate, args.out))
    if args.max_cost is not None:
        print(f"--max-cost {args.max_cost:.15g}: the estimate " + (
            "fits" if estimate.total <= args.max_cost else
            "is over it; the run would stop where it is spent (exit 3), and the same command go on"))
    return 0


def _amount(text: str) -> float:
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount (such as 25 or 2.50)") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive amount")
    return value
