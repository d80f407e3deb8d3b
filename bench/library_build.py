"""Time and memory to build the shipped synthetic reference library (and, if available, to validate it).

Builds ``--n`` images (default 400, the default library) with ``--seed`` into a temporary
folder, ``--rounds`` times, timing each build with ``time.perf_counter`` (tracemalloc off,
garbage collector on). One further build runs under ``tracemalloc`` to measure the peak of
the Python heap; tracemalloc slows allocation, so that build is not timed. The process's
peak resident set size (``ru_maxrss``) is read at the end and covers everything the
process did. The builds are single-threaded: one core.

If ``tracebench.library.validate_library(path)`` can be imported, it is timed on
the built library too (it returns a list of error strings; they are counted and shown).

Run from the repository root, in the environment where tracebench is installed::

    python bench/library_build.py [--n 400] [--seed 0] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import resource
import statistics
import sys
import tempfile
import tracemalloc
from pathlib import Path
from time import perf_counter
from typing import Any, Callable

import PIL

from _machine import machine
from tracebench import __version__
from tracebench.library import load_library
from tracebench.library.synth import synthesize_library


def machine_info() -> dict[str, object]:
    return machine(**{"pillow": PIL.__version__, "tracebench": __version__})


def _maxrss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB elsewhere


def _validator() -> Callable[[Path], list[str]] | None:
    return getattr(importlib.import_module("tracebench.library"), "validate_library", None)


def _size_mib(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / (1024 * 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=400, help="images to synthesize (default 400, the default library)")
    ap.add_argument("--seed", type=int, default=0, help="library seed (default 0)")
    ap.add_argument("--rounds", type=int, default=3, help="timed builds (default 3)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    if args.n < 1 or args.rounds < 1:
        ap.error("--n and --rounds must be positive")

    result: dict[str, Any] = {
        "machine": machine_info(),
        "command": " ".join(["python", "bench/library_build.py", *sys.argv[1:]]),
        "n": args.n,
        "seed": args.seed,
        "rounds": args.rounds,
    }
    times: list[float] = []
    hashes: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="tracebench-bench-") as tmp:
        tmp_path = Path(tmp)
        for round_ in range(args.rounds):
            out = tmp_path / f"timed-{round_}"
            gc.collect()
            start = perf_counter()
            info = synthesize_library(out, n=args.n, seed=args.seed)
            times.append(perf_counter() - start)
            hashes.add(info.content_hash)  # over tags.jsonl and every image
        library = tmp_path / "timed-0"
        _, images = load_library(library)
        result["library"] = {
            "images": info.images,
            "entities": sum(len(image.ent_list) for image in images),
            "content_hash": info.content_hash,
            "same_bytes_every_round": len(hashes) == 1,
            "size_mib": round(_size_mib(library), 2),
        }
        result["build_seconds"] = {"all": [round(t, 3) for t in times], "median": round(statistics.median(times), 3),
                                   "min": round(min(times), 3), "max": round(max(times), 3),
                                   "images_per_s": round(args.n / statistics.median(times), 1)}

        gc.collect()
        tracemalloc.start()
        synthesize_library(tmp_path / "traced", n=args.n, seed=args.seed)
        _, heap_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result["python_heap_peak_mib"] = round(heap_peak / (1024 * 1024), 1)

        validate = _validator()
        if validate is None:
            result["validation"] = None
        else:
            gc.collect()
            start = perf_counter()
            errors = validate(library)
            seconds = perf_counter() - start
            result["validation"] = {"seconds": round(seconds, 3), "errors": len(errors), "first_errors": errors[:5]}
    result["process_max_rss_mib"] = round(_maxrss_mib(), 1)

    if args.json:
        print(json.dumps(result, indent=2))
        return
    m = result["machine"]
    lib = result["library"]
    b = result["build_seconds"]
    print(f"machine: {m['cpu']}, {m['cores']} cores{' (virtualized)' if m['virtualized'] else ''}, {m['platform']}")
    print(f"python:  {m['python']}, Pillow {m['pillow']}, tracebench {m['tracebench']}; single-threaded, one core")
    print(f"library: {lib['images']} images, {lib['entities']} entities, seed {args.seed}, {lib['size_mib']} MiB, "
          f"identical bytes every round: {lib['same_bytes_every_round']}")
    print(f"build:   median {b['median']:.2f} s ({b['images_per_s']:.0f} images/s), min {b['min']:.2f} s, "
          f"max {b['max']:.2f} s over {args.rounds} rounds")
    print(f"memory:  Python heap peak {result['python_heap_peak_mib']} MiB (tracemalloc, separate build); "
          f"process max RSS {result['process_max_rss_mib']} MiB (ru_maxrss, whole run)")
    if result["validation"] is None:
        print("validate: skipped (tracebench.library.validate_library not available)")
    else:
        v = result["validation"]
        shown = f": {v['first_errors']}" if v["errors"] else ""
        print(f"validate: {v['seconds']:.2f} s, {v['errors']} errors{shown}")


if __name__ == "__main__":
    main()
