"""``trace export FOLDER --out DIR``: a benchmark or a run as a Hugging Face dataset folder;
``trace export BENCH --lmms-eval DIR``: a benchmark as an lmms-eval task folder."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    e = sub.add_parser("export", help="write a benchmark or a run as a Hugging Face dataset (parquet and a card)",
                       description="Write a benchmark folder (trace sample's) or a run folder (trace run's) as a "
                                   "Hugging Face dataset folder: parquet shards, one row per case with its images "
                                   "embedded, and a dataset card. datasets.load_dataset(DIR) reads it; `hf upload "
                                   "USER/NAME DIR --repo-type dataset` publishes it; trace import rebuilds the folder. "
                                   "Needs the hf extra: pip install 'tracebench[hf]'. With --lmms-eval DIR instead: "
                                   "a benchmark folder as an lmms-eval task folder (no extra needed; docs/share.md).")
    e.add_argument("folder", type=Path, metavar="FOLDER", help="a benchmark folder or a run folder")
    e.add_argument("--diagnosis", type=Path, metavar="DIAG", help="a run's diagnosis folder (trace diagnose): each "
                   "row gets the case's tree and its node images")
    where = e.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="the dataset folder to write (new or empty)")
    where.add_argument("--lmms-eval", type=Path, metavar="DIR", dest="lmms_eval",
                       help="instead: write the benchmark as an lmms-eval task folder DIR (new or empty): the task "
                            "YAML, its utils.py, the cases' data file and the references; run it with lmms-eval "
                            "--include_path DIR, read its sample logs back with trace import-lmms")
    e.set_defaults(run=run)


def run(args) -> int:
    from ..errors import TraceError
    from ..share import export_folder, export_lmms_task

    if args.lmms_eval is not None:
        if args.diagnosis is not None:
            raise TraceError("--diagnosis: an lmms-eval task holds a benchmark's cases; export the diagnosis's nodes "
                             "with trace diagnose --export-nodes, then that benchmark with --lmms-eval")
        task = export_lmms_task(args.folder, args.lmms_eval)
        print(f"{args.lmms_eval}: lmms-eval task {task.task} ({task.yaml}, utils.py) of {task.cases} cases and "
              f"{task.references} reference images")
        print(f"next: lmms-eval --include_path {args.lmms_eval} --tasks {task.task} --model MODEL --log_samples "
              f"--output_path OUT")
        return 0

    done = export_folder(args.folder, args.out, diagnosis=args.diagnosis)
    if done.complete:  # a rerun after a kill past the final rename: --out holds this very export
        print(f"{args.out}: already complete (it holds this export of {args.folder}; nothing written)")
        return 0
    print(f"{args.out}: {done.kind} of {done.rows} rows, {done.shards} parquet shard{'s' * (done.shards != 1)}, "
          f"{done.size / 1e6:.1f} MB, and its dataset card README.md")
    return 0
