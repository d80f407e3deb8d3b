"""``trace diagnose``: diagnostic trees of a run's cases, or of one formula (``--dry-run``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import TraceError
from ._args import (
    EXIT_STATUSES,
    add_executor_options,
    add_generator_options,
    add_model_options,
    model_settings,
    report_incomplete,
)


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="localize failures with diagnostic trees",
                       description="Build the diagnostic tree of each case of a run (TRACE-Bench, arXiv "
                                   "2608.16765), generate and judge its nodes through the run harness, and "
                                   "attribute every operator instance to a failure source. With --formula F "
                                   "--dry-run, print the tree of one formula without any model call.",
                       epilog=EXIT_STATUSES)
    p.add_argument("run_dir", type=Path, nargs="?", help="a run folder (trace run's output)")
    p.add_argument("--formula", help="a formula (bound or a bare template) to draw the tree of (first-pass's; "
                                     "with --method rates, the rates tree: each E ⊕ g split into E alone too)")
    p.add_argument("--dry-run", action="store_true", help="with --formula: print the tree, call no model")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--cases", default="failing",
                   help="failing (default: cases with a failing operator instance), all, or ID,ID,...")
    p.add_argument("--generator", metavar="SPEC", help="generator of the nodes (default: the run's when it is the "
                   "zoo, synthetic:PROFILE; any other is named here, never taken from the run folder)")
    p.add_argument("--judge", action="append", metavar="SPEC", help="judge of the nodes, repeatable (default: the "
                   "run's when it is the oracle; any other is named here, never taken from the run folder)")
    p.add_argument("--strategy", choices=("full", "adaptive"), default="full",
                   help="full: the whole tree (default); adaptive: only branches holding an unexplained failure")
    p.add_argument("--repeats", type=_repeats, default=None, metavar="K",
                   help="generate every node K times (the root too: the run's image is its first) and decide each "
                        "question there by its majority, a tie unknown (default 1, as the paper; for a run of "
                        "trace run --samples K, K, as the run judged its cases; at most 1000)")
    p.add_argument("--method", choices=("first-pass", "rates"), default="first-pass",
                   help="first-pass: the paper's rule, the first simplification after which a failing instance "
                        "passes (default; about 5.5 generations per tree, biased when the generator is random); rates: "
                        "each failing instance's failure rate along its chain from fresh generations, and the share "
                        "of its hazard each simplification removes, with a confidence; it takes no --shard "
                        "(docs/diagnose.md)")
    p.add_argument("--budget", type=_positive, default=60.0, metavar="N",
                   help="--method rates: generations per tree, a mean over the diagnosis (default 60)")
    p.add_argument("--delta", type=_fraction, default=0.2, metavar="D",
                   help="--method rates: a source is right when its share is within D of the largest (default 0.2)")
    p.add_argument("--confidence", type=_fraction, default=0.5, metavar="C", dest="threshold",
                   help="--method rates: below this confidence an instance is Undetermined, its best guess kept "
                        "(default 0.5)")
    p.add_argument("--flip-rate", type=_fraction, default=0.0, metavar="P",
                   help="--method rates: the judges' error rate per question (trace agree --exam measures it), "
                        "counted in the likelihood (default 0)")
    p.add_argument("--gating", choices=("within", "cross"), default="within",
                   help="which dependencies fail a question, as trace score --gating (default within, the paper)")
    add_model_options(p, cache_default="DIAG_DIR/cache", defaults_from="the run's")
    add_generator_options(p)  # the zoo's default: the run's options; a generator named here takes these
    add_executor_options(p)  # one set of Ray workers makes the images of every round and repeat
    p.add_argument("--export-nodes", type=Path, metavar="DIR",
                   help="write every node of the whole trees as a benchmark folder (trace sample's format, with "
                        "nodes.jsonl), for generating them elsewhere and coming back with --generator folder:DIR")
    p.add_argument("--out", type=Path, help="the diagnosis folder (resumed if it holds the same diagnosis)")
    p.set_defaults(run=run)


def _repeats(text: str) -> int:
    import argparse

    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    from ..records import MAX_SAMPLES

    if not 1 <= k <= MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"{k} must be from 1 to {MAX_SAMPLES}")
    return k


def _number(text: str, *, above_zero: bool = False) -> float:
    """A flag's number: above 0 (``above_zero``, finite), else from 0 to 1."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if above_zero and not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text} must be a number above 0")
    if not above_zero and not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} must be from 0 to 1")
    return value


def _positive(text: str) -> float:
    return _number(text, above_zero=True)


def _fraction(text: str) -> float:
    return _number(text)


def _shard_of(args) -> str:
    return f" in shard {args.shard[0]}/{args.shard[1]}" if args.shard else ""


def _dry_run(args) -> int:
    from ..diagnose import build_tree, draw_tree, tree_json
    from ..formula import parse

    graph = build_tree(parse(args.formula), paper_stop=args.method != "rates")  # the tree the method diagnoses
    print(json.dumps(tree_json(graph), ensure_ascii=False, indent=2) if args.json else draw_tree(graph))
    return 0


def run(args) -> int:
    if args.formula is not None:
        if not args.dry_run:
            raise TraceError("--formula draws a tree without model calls: add --dry-run (to diagnose a run, give RUN_DIR)")
        if args.run_dir is not None:
            raise TraceError("give either RUN_DIR or --formula, not both")
        return _dry_run(args)
    if args.run_dir is None:
        raise TraceError("give a run folder (RUN_DIR), or --formula F --dry-run")
    if args.dry_run:
        raise TraceError("--dry-run needs --formula; to see a run's trees without model calls use --export-nodes DIR")
    if args.out is None and args.export_nodes is None:
        raise TraceError("give --out DIAG_DIR (or --export-nodes DIR to only write the nodes)")
    from ..diagnose import RATES_NO_SHARD, DiagnoseOptions, diagnose_run, export_nodes
    from ..records import NODES, NODES_FILE, RUN_MANIFEST

    if args.method == "rates" and args.shard and args.out is not None:  # refused before --export-nodes writes
        raise TraceError(RATES_NO_SHARD)
    if args.export_nodes is not None:
        count = export_nodes(args.run_dir, args.export_nodes, cases=args.cases, shard=args.shard, gating=args.gating,
                             paper_stop=args.method != "rates")
        roots = len({node.root for node in NODES.read(args.export_nodes)})
        print(f"{args.export_nodes}: {count} sub-cases, the nodes of {roots} cases' diagnostic trees ({NODES_FILE} "
              f"says where each sits)")
        if args.out is None:
            return 0
    manifest = RUN_MANIFEST.read(args.run_dir)  # the rest is read once, below
    settings = model_settings(args, seed=manifest.seed or 0)  # the scale: --scale, else the run's
    options = DiagnoseOptions(cases=args.cases, generator=args.generator, judges=args.judge, strategy=args.strategy,
                              settings=settings, concurrency=args.concurrency, judge_batch=args.judge_batch,
                              cache_dir=args.cache, shard=args.shard, retry_abstained=args.retry_abstained,
                              gating=args.gating, repeats=args.repeats, executor=args.executor, workers=args.workers,
                              gpus_per_worker=args.gpus_per_worker, ray_address=args.ray_address,
                              method=args.method, budget=args.budget, delta=args.delta, threshold=args.threshold,
                              flip=args.flip_rate)
    summary = diagnose_run(args.run_dir, args.out, options)
    if args.json:
        print(json.dumps(summary.model_dump(mode="json"), indent=2))
    elif not summary.cases:  # a run where every case passes: nothing failed, nothing to localize
        print(f"{args.out}: no case to diagnose: every case of {args.run_dir}{_shard_of(args)} passes "
              f"(an empty diagnosis, which trace report accepts)")
    else:
        from ..diagnose import format_summary

        print(format_summary(summary))
        times = f", each {summary.repeats} times" if summary.repeats > 1 else ""
        if summary.generations_per_tree:
            spent = summary.generations_per_tree
            print(f"{args.out}: {summary.cases} cases, {summary.nodes_generated} nodes generated; "
                  f"{spent['mean']:g} fresh generations per tree on average (p90 {spent['p90']:g})")
        else:
            print(f"{args.out}: {summary.cases} cases, {summary.nodes_generated} nodes generated{times} "
                  f"({summary.nodes_per_case} per case; whole trees hold {summary.nodes_in_trees})")
        if summary.random_note:
            print(f"note: {summary.random_note}")
    if not summary.abstained_verdicts:
        return 0
    return report_incomplete(
        "trace diagnose", f"{summary.abstained_verdicts} node verdicts abstained, so {summary.undetermined} of "
                          f"{summary.instances} operator instances are Undetermined",
        summary.abstention_reasons.items(), retry_flag="--retry-abstained")
