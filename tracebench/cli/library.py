"""``trace library validate|stats|balance|import|synth|hashes|audit``: tagged reference libraries."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import TraceError


def register(sub) -> None:
    p = sub.add_parser("library", help="check, describe, balance, import or synthesize a tagged library",
                       description="Tagged reference libraries: a folder with tags.jsonl, library.json and images.")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=type(p))

    v = actions.add_parser("validate", help="check a library; list every problem")
    v.add_argument("dir", type=Path)
    v.set_defaults(run=run_validate)

    s = actions.add_parser("stats", help="coverage of categories, subtypes and global tags")
    s.add_argument("dir", type=Path, nargs="?", help="a library (default: the shipped synthetic library)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(run=run_stats)

    b = actions.add_parser("balance", help="greedy balanced selection of K images (TRACE-Bench, arXiv 2608.16765)")
    b.add_argument("dir", type=Path)
    b.add_argument("--n", type=int, required=True, metavar="K", help="how many images to select")
    b.add_argument("--out", type=Path, required=True, help="folder of the new library")
    b.set_defaults(run=run_balance)

    i = actions.add_parser("import", help="build a library from your images and tags")
    i.add_argument("images_dir", type=Path)
    i.add_argument("--tags", type=Path, required=True,
                   help="tags as JSONL, a JSON list, or a JSON object keyed by image file name; paths relative "
                        "to IMAGES_DIR")
    i.add_argument("--out", type=Path, required=True)
    i.add_argument("--name", help="library name (default: the images folder's name)")
    i.add_argument("--drop-invalid", action="store_true",
                   help="leave out (and list) the tag values the taxonomy refuses instead of failing")
    i.set_defaults(run=run_import)

    y = actions.add_parser("synth", help="render a synthetic library whose tags are true by construction")
    y.add_argument("--out", type=Path, required=True)
    y.add_argument("--n", type=int, default=400, help="number of images (default 400)")
    y.add_argument("--seed", type=int, default=0)
    y.set_defaults(run=run_synth)

    h = actions.add_parser("hashes", help="print each image's perceptual hashes (PHASH DHASH ID), the --against format")
    h.add_argument("dir", type=Path)
    h.set_defaults(run=run_hashes)

    a = actions.add_parser("audit", help="near-duplicate images in a library, and against training-set hashes",
                           description="Two stages: perceptual-hash candidates, confirmed by ORB feature matching "
                                       "(needs the audit extra: pip install 'tracebench[audit]'). docs/library.md.")
    a.add_argument("dir", type=Path)
    a.add_argument("--against", type=Path, metavar="HASHES",
                   help="training-set hashes, one image a line: PHASH DHASH [NAME] (trace library hashes prints them)")
    a.add_argument("--out", type=Path, metavar="FILE", help="write the audit record there (e.g. audit.json), for "
                                                          "trace score --exclude-flagged")
    a.add_argument("--json", action="store_true", help="print the audit record")
    a.set_defaults(run=run_audit)


def run_validate(args) -> int:
    from ..library import read_valid_library

    info, images = read_valid_library(args.dir)
    entities = sum(len(i.ent_list) for i in images)
    print(f"{args.dir}: valid library {info.name!r} v{info.version}: {len(images)} images, {entities} entities")
    return 0


def run_stats(args) -> int:
    from ..library import default_library, library_stats, read_valid_library

    info, images = read_valid_library(args.dir if args.dir is not None else default_library())
    stats = library_stats(images)
    if args.json:
        print(json.dumps(stats))
        return 0
    print(f"library {info.name!r}: {stats['images']} images, {stats['entities']} entities, "
          f"{stats['multi_entity_share']:.0%} with 2+ entities")
    for section in ("categories", "subtypes", "global", "usable_as"):
        print(f"{section}:")
        for key, count in stats[section].items():
            print(f"  {key:32s} {count}")
    print("entities per image: " + ", ".join(f"{k}: {v}" for k, v in stats["entities_per_image"].items()))
    return 0


def run_balance(args) -> int:
    from ..library import balance_library

    new = balance_library(args.dir, args.n, args.out)
    print(f"{args.out}: library {new.name!r}, {new.images} images selected from {args.dir}")
    return 0


def run_import(args) -> int:
    from ..library import import_library

    info = import_library(args.images_dir, args.tags, args.out, name=args.name, drop_invalid=args.drop_invalid)
    print(f"{args.out}: library {info.name!r} with {info.images} images")
    return 0


def run_synth(args) -> int:
    from ..library.synth import synthesize_library

    if args.n < 1:
        raise TraceError(f"--n: {args.n} must be at least 1")
    info = synthesize_library(args.out, n=args.n, seed=args.seed)
    print(f"{args.out}: synthetic library {info.name!r} with {info.images} images (seed {args.seed})")
    return 0


def run_hashes(args) -> int:
    from ..library import library_hashes

    for entry in library_hashes(args.dir):
        print(f"{entry.phash} {entry.dhash} {entry.id}")
    return 0


def run_audit(args) -> int:
    from ..library import audit_library, write_audit

    report = audit_library(args.dir, against=args.against)
    if args.out is not None:
        write_audit(args.out, report)
    if args.json:
        print(report.model_dump_json())
        return 0
    within = [p for p in report.pairs if p.kind == "library"]
    print(f"{args.dir}: {report.images} images, {report.candidates} hash candidates, {len(within)} near-duplicate "
          f"pairs confirmed" + (f", {len(report.pairs) - len(within)} close to training hashes" if report.against else "")
          + f"; {len(report.flagged)} images flagged")
    for pair in report.pairs:
        score = (f"inliers {pair.inliers}, r {pair.correlation:.3f}, differing {pair.differing:.1%}"
                 if pair.kind == "library" else "hashes only")
        print(f"  {pair.kind:8s} {pair.a}  {pair.b}  (pHash {pair.phash_distance}, dHash {pair.dhash_distance}; {score})")
    return 0
