"""Peak memory of `trace report`, `trace run --collage` and the oracle on hostile images, for this tree and another.

A small benchmark (slot levels 1-3, two cases each, seed 4) and its run by the zoo
(``synthetic:global-interference``) judged by the oracle are made once by this tree. Then one
image is replaced by each of:

- ``13000 px png``: a valid white RGB PNG of 13000 x 13000 pixels, 0.53 MB (0.68 GB decoded);
- ``png bomb``: a PNG header declaring 100000 x 100000 pixels over a 4 KB zlib stream (83 bytes);
- ``jpeg bomb``: a 16 x 16 JPEG whose frame header says 65000 x 65000 (633 bytes);
- ``8000x5000 png`` and ``8000x5000 jpeg``: valid images of 40 megapixels, the default limit
  (made by a child process: this one never holds their pixels);
- ``none``: nothing replaced (each command's baseline);

and each tree runs, in a fresh process (``python -P -m tracebench``, the tree on
``PYTHONPATH``):

- ``report``: ``trace report RUN`` of a copy of the run whose first generated image is the attack;
- ``collage``: ``trace run BENCH --generator synthetic:perfect --judge oracle --max-images 1
  --collage`` of a copy of the benchmark whose reference of a collaged case is the attack;
- ``oracle``: ``trace run BENCH --generator folder:IMAGES --judge oracle``, IMAGES the run's
  images with the first case's replaced (this tree refuses a generated image past the limit
  before a judge sees it: the row ``13000 px png, limit 200 MP`` has it judged by the oracle).

The ``limit 200 MP`` rows run with ``TRACEBENCH_MAX_IMAGE_PIXELS=200_000_000`` (a tree without the
variable ignores it): the 13000 x 13000 PNG is then allowed, and decoded reduced (the report's
thumbnail, the collage's cell) or read a chunk of rows at a time (the oracle).

Peak memory is the child's maximum resident set size (``os.wait4``), in MiB; the exit status
and the outcome (``traceback`` when stderr holds one, else its last line, shortened) beside it.
Wall time is printed but is not the point (the machine may be loaded). This script holds no
image larger than a few megabytes: a child's ``ru_maxrss`` starts from its parent's mark (see
bench/run_memory.py).

    git archive <commit before> | tar -x -C /tmp/image-base    # or: git worktree add /tmp/image-base <commit>
    python bench/image_memory.py [--against /tmp/image-base] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from _machine import machine, source_trees

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' crafted images
from image_bombs import jpeg_bomb, large_png, png_bomb  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RAISED = "200_000_000"  # TRACEBENCH_MAX_IMAGE_PIXELS of the "limit 200 MP" rows
COMMANDS = ("report", "collage", "oracle")


# --------------------------------------------------------------------------- the images

def at_the_limit(folder: Path) -> dict[str, bytes]:
    """A gradient 8000 x 5000 PNG and JPEG (40 megapixels), drawn by a child process."""
    code = ("import sys; from PIL import Image; im = Image.linear_gradient('L').resize((8000, 5000)).convert('RGB'); "
            "im.save(sys.argv[1] + '/a.png', compress_level=1); im.save(sys.argv[1] + '/a.jpg', quality=90)")
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True)
    return {"8000x5000 png": (folder / "a.png").read_bytes(), "8000x5000 jpeg": (folder / "a.jpg").read_bytes()}


def images(folder: Path) -> dict[str, bytes | None]:
    return {"none": None, "13000 px png": large_png(), "png bomb": png_bomb(),
            "jpeg bomb": jpeg_bomb(), **at_the_limit(folder)}


# --------------------------------------------------------------------------- measuring

def trace(*args: str) -> list[str]:
    """``trace ARGS`` of the tree on ``PYTHONPATH`` (``-P``: not a checkout in the working folder)."""
    return [sys.executable, "-P", "-m", "tracebench", *args]


def measured(command: list[str], env: dict) -> dict:
    """Exit status, outcome, peak RSS (MiB) and wall seconds of one command in a fresh process."""
    with tempfile.TemporaryFile("w+") as errors:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        errors.seek(0)
        text = errors.read()
    return {"exit": os.waitstatus_to_exitcode(status), "outcome": _outcome(text),
            "peak_mib": round(usage.ru_maxrss / 1024, 1), "wall_s": round(wall, 1)}


def _outcome(stderr: str) -> str:
    """``traceback``, ``ok``, an abstention's main reason, or the end of an error's line, shortened."""
    if "Traceback" in stderr:
        return "traceback"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else "ok"
    if "DecompressionBombWarning" in stderr and "main reasons: " not in last:
        return "ok, after Pillow's DecompressionBombWarning"
    if "main reasons: " in last:
        last = "abstained: " + last.split("main reasons: ", 1)[1].split(". Ask again", 1)[0]
        return last if len(last) <= 90 else last[:87] + "..."
    return last if len(last) <= 90 else "..." + last[-87:]


def _placeholders(page: Path) -> int:
    """How many images the report's page shows as a placeholder (in the cases' packed bodies)."""
    import base64
    import re

    bodies = re.findall(r'data-body="([^"]*)"', page.read_text(encoding="utf-8"))
    return sum(zlib.decompress(base64.b64decode(body)).count(b'class="unshown"') for body in bodies)


def _case_with_references(bench: Path) -> tuple[str, str]:
    """(case id, last reference path) of the first case holding more than one reference."""
    for line in (bench / "cases.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if len(case["references"]) > 1:
            return case["id"], case["references"][-1]["path"]
    raise SystemExit("the benchmark has no case of two references")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another source tree (a folder holding tracebench/)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trees = source_trees(ap, ROOT, args.against)
    rows = []
    with tempfile.TemporaryDirectory(prefix="image-memory-") as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("TRACEBENCH_MAX_IMAGE_PIXELS", None)
        bench, run = tmp / "bench", tmp / "run"
        made = measured(trace("sample", "--slots", "1-3", "--per-slot", "2", "--no-applications", "--seed", "4",
                              "--out", str(bench)), env)
        made2 = measured(trace("run", str(bench), "--generator", "synthetic:global-interference", "--judge", "oracle",
                               "--out", str(run)), env)
        if made["exit"] or made2["exit"]:
            raise SystemExit(f"could not make the benchmark and its run: {made} {made2}")
        first = sorted((run / "images").glob("*.png"))[0]
        _, reference = _case_with_references(bench)
        attacks = images(tmp)
        variants = [(name, data, None) for name, data in attacks.items()]
        variants.append(("13000 px png, limit 200 MP", attacks["13000 px png"], RAISED))
        for name, data, limit in variants:
            planted = tmp / "planted"
            for command in COMMANDS:
                for tree_name, tree in trees.items():
                    shutil.rmtree(planted, ignore_errors=True)
                    planted.mkdir()
                    if command == "report":
                        folder = shutil.copytree(run, planted / "run")
                        if data is not None:
                            (folder / "images" / first.name).write_bytes(data)
                        argv = trace("report", str(folder), "--out", str(planted / "page.html"))
                    elif command == "collage":
                        folder = shutil.copytree(bench, planted / "bench")
                        if data is not None:
                            (folder / reference).write_bytes(data)
                        argv = trace("run", str(folder), "--generator", "synthetic:perfect", "--judge", "oracle",
                                     "--max-images", "1", "--collage", "--out", str(planted / "out"))
                    else:
                        folder = shutil.copytree(run / "images", planted / "images")
                        if data is not None:
                            (folder / first.name).write_bytes(data)
                        argv = trace("run", str(bench), "--generator", f"folder:{folder}", "--judge", "oracle",
                                     "--out", str(planted / "out"))
                    tree_env = {**env, "PYTHONPATH": str(tree)}
                    if limit is not None:
                        tree_env["TRACEBENCH_MAX_IMAGE_PIXELS"] = limit
                    row = {"command": command, "image": name, "tree": tree_name, **measured(argv, tree_env)}
                    if command == "report" and (planted / "page.html").exists() and row["outcome"] == "ok":
                        shown = _placeholders(planted / "page.html")
                        row["outcome"] = f"page written, {shown} placeholder{'s' if shown != 1 else ''}"
                    rows.append(row)
                    print(f"{command:8s} {name:27s} {tree_name:10s} exit {row['exit']}  {row['peak_mib']:7.1f} MiB "
                          f"({row['wall_s']:4.1f} s)  {row['outcome']}", file=sys.stderr)
            shutil.rmtree(planted, ignore_errors=True)
    report = {"machine": machine(), "load_average_1min_after": round(os.getloadavg()[0], 2),
              "trees": {name: str(path) for name, path in trees.items()}, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    m = report["machine"]
    print(f"{m['cpu']}, {m['cores']} cores, {m['python']}; load after {report['load_average_1min_after']}")
    print(f"{'command':8s} | {'image':27s} | {'tree':10s} | exit | peak MiB | wall s | outcome")
    print(f"{'-' * 8}-|-{'-' * 27}-|-{'-' * 10}-|------|----------|--------|--------")
    for row in rows:
        print(f"{row['command']:8s} | {row['image']:27s} | {row['tree']:10s} | {row['exit']:4d} | "
              f"{row['peak_mib']:8.1f} | {row['wall_s']:6.1f} | {row['outcome']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
