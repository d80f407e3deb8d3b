"""``trace export FOLDER --out DIR``: a benchmark or a run as a Hugging Face dataset folder."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    e = sub.add_parser("export", help="write a benchmark or a run as a Hugging Face dataset (parquet and a card)",
                       description="Write a benchmark folder (trace sample's) or a run folder (trace run's) as a "
                                   "Hugging Face dataset folder: parquet shards, one row per case with its images "
                                   "embedded, and a dataset card. datasets.load_dataset(DIR) reads it; `hf upload "
                                   "USER/NAME DIR --repo-type dataset` publishes it; trace import rebuilds the folder. "
                                   "Needs the hf extra: pip install 'tracebench[hf]'.")
    e.add_argument("folder", type=Path, metavar="FOLDER", help="a benchmark folder or a run folder")
    e.add_argument("--diagnosis", type=Path, metavar="DIAG", help="a run's diagnosis folder (trace diagnose): each "
                   "row gets the case's tree and its node images")
    e.add_argument("--out", type=Path, required=True, help="the dataset folder to write (new or empty)")
    e.set_defaults(run=run)


def run(args) -> int:
    from ..share import export_folder

    done = export_folder(args.folder, args.out, diagnosis=args.diagnosis)
    if done.complete:  # a rerun after a kill past the final rename: --out holds this very export
        print(f"{args.out}: already complete (it holds this export of {args.folder}; nothing written)")
        return 0
    print(f"{args.out}: {done.kind} of {done.rows} rows, {done.shards} parquet shard{'s' * (done.shards != 1)}, "
          f"{done.size / 1e6:.1f} MB, and its dataset card README.md")
    return 0
