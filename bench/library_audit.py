"""Recall, false pairs and time of ``trace library audit`` on the synthetic library with planted copies.

Builds the synthetic library (``--n`` images, default 500, ``--seed`` 0), picks ``--copies``
of them (default 50, evenly spread over the ids) and adds four perturbed copies of each: x0.5
scale, JPEG quality 60, a 5% crop (5% of the width and of the height cut off each side, 90%
kept) and +10% brightness. Then it audits the library of all of them (one process, timed
with ``time.perf_counter``; building the library is not timed) and counts:

- recall: the copies found, a copy being found when the audit pairs it with its original;
- false pairs: flagged pairs of two distinct originals (none of them a copy of the other);
- the stage-1 candidates, and how many of the originals' candidate pairs feature matching
  turned down; the five pairs of distinct images the issue names as hash-close at seed 0
  ((30, 43), (144, 380), (195, 211), (279, 385), (352, 368)): their distances and verdicts.

Run from the repository root::

    python bench/library_audit.py [--n 500] [--copies 50] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from time import perf_counter

from PIL import Image, ImageEnhance

from _machine import machine
from tracebench.library import audit_library, load_library, write_library
from tracebench.library.synth import synthesize_library

PERTURBATIONS = ("half", "jpeg60", "crop5", "bright10")
ISSUE_PAIRS = ((30, 43), (144, 380), (195, 211), (279, 385), (352, 368))


def perturb(image: Image.Image, kind: str) -> tuple[Image.Image, str]:
    """The perturbed copy of ``image`` and the file suffix to save it with."""
    if kind == "half":
        return image.resize((image.width // 2, image.height // 2), Image.LANCZOS), ".png"
    if kind == "jpeg60":
        return image, ".jpg"
    if kind == "crop5":
        dx, dy = round(image.width * 0.05), round(image.height * 0.05)
        return image.crop((dx, dy, image.width - dx, image.height - dy)), ".png"
    if kind == "bright10":
        return ImageEnhance.Brightness(image).enhance(1.1), ".png"
    raise ValueError(kind)


def library_with_copies(root: Path, *, n: int, copies: int, seed: int = 0) -> dict[str, str]:
    """Synthesize ``n`` images into ``root`` and add the four perturbed copies of ``copies`` of
    them (evenly spread); the library is rewritten with all of them. Returns copy id -> original id."""
    synthesize_library(root, n=n, seed=seed)
    info, records = load_library(root)
    step = max(1, len(records) // copies)
    originals = records[::step][:copies]
    added, copy_of = [], {}
    for record in originals:
        with Image.open(root / record.path) as opened:
            image = opened.convert("RGB")
        for kind in PERTURBATIONS:
            copy, suffix = perturb(image, kind)
            name = f"{record.id}-{kind}"
            path = f"images/{name}{suffix}"
            copy.save(root / path, quality=60) if suffix == ".jpg" else copy.save(root / path)
            entities = tuple(e.model_copy(update={"bbox": None}) for e in record.ent_list)
            added.append(record.model_copy(update={"id": name, "path": path, "width": copy.width,
                                                   "height": copy.height, "render": None, "ent_list": entities}))
            copy_of[name] = record.id
    write_library(root, info.name, records + added)
    return copy_of


def measure(root: Path, copy_of: dict[str, str], ids: list[str]) -> dict[str, object]:
    """Audit ``root`` and count what it found (module docstring)."""
    start = perf_counter()
    report = audit_library(root)
    seconds = perf_counter() - start
    pairs = {frozenset((p.a, p.b)) for p in report.pairs if p.kind == "library"}
    found = [c for c, o in copy_of.items() if frozenset((c, o)) in pairs]
    false = sorted(tuple(sorted(p)) for p in pairs if not any(i in copy_of for i in p)
                   and not _same_source(p, copy_of))
    by_kind = {k: sum(1 for c in found if c.endswith("-" + k)) for k in PERTURBATIONS}
    return {"images": report.images, "copies": len(copy_of), "found": len(found),
            "recall": round(len(found) / len(copy_of), 4) if copy_of else None, "found_by_perturbation": by_kind,
            "false_pairs_among_originals": false, "candidates": report.candidates,
            "flagged_pairs": len(pairs), "seconds": round(seconds, 2),
            "issue_pairs": {f"{a},{b}": frozenset((ids[a], ids[b])) in pairs for a, b in ISSUE_PAIRS
                            if max(a, b) < len(ids)}}


def _same_source(pair: frozenset, copy_of: dict[str, str]) -> bool:
    return len({copy_of.get(i, i) for i in pair}) == 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import cv2
    import numpy

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "library"
        copy_of = library_with_copies(root, n=args.n, copies=args.copies, seed=args.seed)
        ids = [r.id for r in load_library(root)[1]]
        result = measure(root, copy_of, ids)
    result["machine"] = machine(opencv=cv2.__version__, numpy=numpy.__version__, pillow=Image.__version__)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
