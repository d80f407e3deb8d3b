"""``trace report``: one self-contained HTML page of a run, its diagnosis and runs to compare."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report of a run",
                       description="One HTML file (images and plots embedded, no network request when opened): "
                                   "scores with 95% intervals, plots by slot, subtype, entities and application, "
                                   "the failure-source table and trees of a diagnosis, and a filterable case browser.")
    p.add_argument("run_dir", type=Path, help="a run folder (trace run's output)")
    p.add_argument("--diagnosis", type=Path, metavar="DIAG_DIR", help="a diagnosis folder of this run (trace diagnose)")
    p.add_argument("--compare", type=Path, nargs="+", action="extend", default=[], metavar="RUN_DIR",
                   help="other runs of the same benchmark, one row each in the score table and one line in the plots "
                        "(several after one --compare, or --compare repeated)")
    p.add_argument("--full-images", action="store_true",
                   help="embed images as they are (default: WebP thumbnails of at most 192 pixels a side, a "
                        "smaller file)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap intervals")
    p.add_argument("--gating", choices=("within", "cross"), default="within",
                   help="dependencies within an operator instance (default, the paper) or across instances too "
                        "(trace score --gating)")
    p.add_argument("--out", type=Path, required=True, help="the HTML file to write (not an existing one, "
                                                            "unless --force)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file (its permissions kept)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..report import build_report

    out = build_report(args.run_dir, args.out, diagnosis=args.diagnosis, compare=args.compare,
                       full_images=args.full_images, seed=args.seed, force=args.force,
                       gating=args.gating)
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB")
    return 0
