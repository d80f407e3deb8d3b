"""``trace sample --slots 1-8 --out DIR``: build a benchmark folder."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ._args import slot_levels


def register(sub) -> None:
    p = sub.add_parser("sample", help="build a benchmark: templates, bindings, prompts, checklists",
                       description="Sample a TRACE benchmark from a tagged library (default: the shipped synthetic one).")
    p.add_argument("--slots", type=slot_levels, default="1-8", metavar="LEVELS",  # converted when the command runs
                   help="slot levels: 3, 1-8 or 2,4,6 (default 1-8)")
    p.add_argument("--per-slot", type=int, default=None, metavar="N",
                   help="cases per slot level (default: templates/quotas.toml, 180)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--library", type=Path, help="a tagged library folder (default: the shipped synthetic library)")
    apps = p.add_mutually_exclusive_group()
    apps.add_argument("--applications", dest="applications", action="store_true", default=True,
                      help="add the application cases of templates/applications.toml (default): each "
                           "application's cases there are for the default --per-slot (180), scaled in proportion "
                           "to --per-slot (at least one each)")
    apps.add_argument("--no-applications", dest="applications", action="store_false")
    apps.add_argument("--per-application", type=int, default=None, metavar="N",
                      help="N cases for each application instead (0: none)")
    p.add_argument("--strict", action="store_true",
                   help="refuse a library that cannot supply every template and application (default: leave "
                        "those out, one line each on stderr, and record them in the manifest)")
    p.add_argument("--jobs", type=_positive("a number of processes"), default=None, metavar="N",
                   help="processes making cases (default: the cores this process may use, at most 8; the "
                        "output is the same bytes for any number)")
    clutter = p.add_argument_group("reference clutter (docs/clutter.md)")
    clutter.add_argument("--distractors", type=_distractors, default=(0, 0), metavar="N",
                         help="hard-negative references per case, chosen by the taxonomy to be confused with a term: "
                              "N, or a range 0-4 drawn per case (default 0: none)")
    clutter.add_argument("--max-references", type=_positive("a number of references"), default=None, metavar="M",
                         help="at most M references a case (distractors are dropped to fit; the formula's own "
                              "images are always kept)")
    clutter.add_argument("--pool", action="store_true",
                         help="pool mode: entity terms are named by description, not by image, and must be found "
                              "among their confusers (Savanna's setting)")
    p.add_argument("--out", type=Path, required=True, help="the benchmark folder to write (must not exist, or be empty)")
    p.set_defaults(run=run)


def _distractors(text: str) -> tuple[int, int]:
    import argparse

    from ..errors import TraceError
    from ..sample import parse_distractors

    try:
        return parse_distractors(text)
    except TraceError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--distractors: ")) from None


def _positive(what: str):
    """An argument type: a whole number of at least 1, else an error saying what it counts."""
    def convert(text: str) -> int:
        import argparse

        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: {what}, at least 1")
        return value

    return convert


def run(args) -> int:
    from ..sample import ClutterSpec, SampleOptions, default_jobs, sample_benchmark

    options = SampleOptions(slots=args.slots, per_slot=args.per_slot, seed=args.seed, library=args.library,
                            applications=args.applications if args.per_application is None else args.per_application,
                            strict=args.strict, jobs=default_jobs() if args.jobs is None else args.jobs,
                            clutter=ClutterSpec(*args.distractors, args.max_references, args.pool))
    manifest = sample_benchmark(args.out, options, report=lambda line: print(line, file=sys.stderr))
    slots = ", ".join(f"{s}: {n}" for s, n in manifest.counts_per_slot.items())
    print(f"{args.out}: {manifest.cases} cases ({slots}; applications: "
          f"{sum(manifest.counts_per_application.values())}), {manifest.distinct_templates} distinct templates"
          + (f", {manifest.clutter['distractors_placed']} distractors" if manifest.clutter else ""))
    # what a newcomer runs next: the benchmark through the zoo and the oracle, offline (docs/evaluate.md)
    run_dir = Path(args.out).with_name(f"{Path(args.out).name}-run")
    print(f"next: trace run {shlex.quote(str(args.out))} --generator synthetic:global-interference --judge oracle "
          f"--out {shlex.quote(str(run_dir))}")
    if manifest.clutter and manifest.clutter["cases_short"]:
        print(f"clutter: {manifest.clutter['cases_short']} of {manifest.cases} cases have fewer distractors than asked: "
              "the library holds no more hard negatives for their terms (manifest.json: cases_per_distractors)",
              file=sys.stderr)
    return 0
