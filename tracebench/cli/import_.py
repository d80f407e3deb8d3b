"""``trace import DIR --out FOLDER``: the benchmark or run folder a dataset of trace export holds."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    i = sub.add_parser("import", help="rebuild a benchmark or run folder from a dataset of trace export",
                       description="Rebuild the benchmark or run folder a dataset folder of trace export was made "
                                   "from (a local export, or the folder `hf download USER/NAME --repo-type dataset "
                                   "--local-dir DIR` wrote): the same cases.jsonl and references, byte for byte; a "
                                   "run's verdicts and images, and its diagnosis when it was exported with one. Needs "
                                   "the hf extra: pip install 'tracebench[hf]'.")
    i.add_argument("folder", type=Path, metavar="DIR", help="the dataset folder (README.md and data/*.parquet)")
    i.add_argument("--cases", type=Path, metavar="BENCH_DIR", help="a run export: where its benchmark is (reused when "
                   "it is the run's, else written there; default RUN/benchmark)")
    i.add_argument("--out", type=Path, required=True, help="the folder to write (new or empty)")
    i.set_defaults(run=run)


def run(args) -> int:
    from ..share import import_dataset

    done = import_dataset(args.folder, args.out, cases_dir=args.cases)
    if done.complete:  # a rerun after a kill past the final rename: --out holds what this import writes
        print(f"{args.out}: already complete (it holds the {done.kind} this dataset rebuilds; nothing written)")
    elif done.kind == "benchmark":
        print(f"{args.out}: benchmark of {done.cases} cases")
    else:
        print(f"{args.out}: run of {done.cases} cases, {done.verdicts} verdicts; its benchmark {done.cases_dir}"
              + (f"; its diagnosis {done.diagnosis}" if done.diagnosis else ""))
    return 0
