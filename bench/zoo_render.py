"""The synthetic zoo's cost per generated image (plan, draw, encode) and per oracle read, and the
wall time of ``trace run`` with the zoo and the oracle, for this tree and another tree of
tracebench side by side; with checks that both give the same verdicts and library images.

    git worktree add /tmp/zoo-base 7f95597
    python bench/zoo_render.py /tmp/zoo-base            # --per-slot 40 --cases 200 --rounds 3 --run-rounds 1; --json

Every measurement runs in a fresh process (``PYTHONPATH`` = the tree), trees interleaved,
alternating which goes first; medians over rounds. Stage and read times are the process's CPU
time (``time.process_time``), which a shared, loaded machine disturbs less than wall time.

- Stages: the cases of ``trace sample --slots 1-8 --per-slot N`` (every k-th, ``--cases``) are
  planned (``plan_generation``), drawn (``render_scene``) and encoded at zlib level 6 (Pillow's
  default, what the zoo used) and level 1, the same drawn images both ways; then generated
  whole (``generate``: nothing kept), generated again (an equal scene kept, where the tree keeps
  one), and their records read back in that process (``read_record``). A second process reads
  the same PNG files (a resumed run, or ``trace serve`` given images made elsewhere):
  ``read_record`` against the full decode it replaced (``Image.open`` + ``image.text``), each
  image both ways in turn.
- Run: ``trace run BENCH --generator synthetic:PROFILE --judge oracle`` on the default sample
  (``trace sample --slots 1-8``, 1,600 cases); wall time of the process, and its CPU. Verdicts
  are compared parsed, without each vote's ``cache_key`` (it hashes the image, whose bytes
  differ); the images' pixels are compared decoded, and their records parsed, without
  ``drawn.world`` (the renderer's source hash, which any change to the renderer moves).
- Library: ``synthesize_library`` (400 images, seed 0) in each tree; the image files must be
  byte-identical, ``tags.jsonl`` identical but for the ``world`` stamp.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import PIL
from PIL import Image

from _machine import machine

HERE = Path(__file__).resolve().parent.parent
RECORD_KEY = "tracebench-record"

STAGES = r'''
import io, json, sys, time
from pathlib import Path
from PIL import Image, PngImagePlugin
from tracebench.sample import read_cases
from tracebench.library import render_scene
from tracebench.zoo import default_index, generate, parse_profile, plan_generation, read_record
bench, profile, every, out = sys.argv[1], parse_profile(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
cases = list(read_cases(Path(bench)))[::every]
index = default_index()
for case in cases[:3]:
    generate(case, profile, seed=99)  # warm: world, fonts, caches of the process
t = {k: [] for k in ("plan", "draw", "encode_6", "encode_1", "generate", "generate_again", "read")}
def clock(key, fn):
    start = time.process_time(); value = fn(); t[key].append(time.process_time() - start); return value
info = PngImagePlugin.PngInfo()
info.add_text("tracebench-record", "x" * 2000, zip=True)
for case in cases:
    plan = clock("plan", lambda: plan_generation(case, profile, index, seed=0))
    image, _ = clock("draw", lambda: render_scene(plan))
    clock("encode_6", lambda: image.save(io.BytesIO(), format="PNG", pnginfo=info))
    clock("encode_1", lambda: image.save(io.BytesIO(), format="PNG", pnginfo=info, compress_level=1))
pngs = [clock("generate", lambda: generate(case, profile, seed=0))[0] for case in cases]
for case in cases:
    clock("generate_again", lambda: generate(case, profile, seed=0))
for png in pngs:
    clock("read", lambda: read_record(png))
out.mkdir(parents=True, exist_ok=True)
for k, png in enumerate(pngs):
    (out / f"{k:05d}.png").write_bytes(png)
print(json.dumps({k: sum(v) / len(v) for k, v in t.items()} | {"bytes": sum(map(len, pngs)) / len(pngs)}))
'''

READS = r'''
import io, json, sys, time
from pathlib import Path
from PIL import Image
from tracebench.zoo import read_record
pngs = [p.read_bytes() for p in sorted(Path(sys.argv[1]).glob("*.png"))]
def decoded(png):
    with Image.open(io.BytesIO(png)) as image:
        return getattr(image, "text", {}).get("tracebench-record")
for png in pngs[:3]:
    read_record(png); decoded(png)
t = {"read_record": 0.0, "full_decode": 0.0}
for png in pngs:
    start = time.process_time(); read_record(png); t["read_record"] += time.process_time() - start
    start = time.process_time(); decoded(png); t["full_decode"] += time.process_time() - start
print(json.dumps({k: v / len(pngs) for k, v in t.items()}))
'''

LIBRARY = r'''
import json, sys, time
from pathlib import Path
from tracebench.library.synth import synthesize_library
start = time.process_time()
synthesize_library(Path(sys.argv[1]))
print(json.dumps({"seconds": time.process_time() - start}))  # CPU seconds
'''


def child(tree: Path, cwd: Path, *args: str, script: str | None = None) -> tuple[str, float, float]:
    """Run ``python -c script args`` (or ``python -m tracebench args``) under the tree, in ``cwd``
    (not the repository root: ``-c`` puts the working folder first on the path); stdout, wall
    seconds and CPU seconds of the child."""
    env = os.environ | {"PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "tracebench", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0,):
        raise SystemExit(f"{tree}: {' '.join(command[:3])} ... exited {done.returncode}: {done.stderr.strip()[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, wall, cpu


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def verdicts(run: Path) -> list[dict]:
    rows = []
    for line in (run / "verdicts.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for vote in row.get("votes", []):
            vote.pop("cache_key", None)
        rows.append(row)
    return rows


def images(run: Path) -> dict[str, tuple[bytes, dict]]:
    """Image name -> (decoded pixels, record without drawn.world)."""
    out = {}
    for path in sorted((run / "images").glob("*.png")):
        with Image.open(path) as image:
            record = json.loads(image.text[RECORD_KEY])
            out[path.name] = (image.tobytes(), record)
        record["drawn"].pop("world", None)
    return out


def library_same(a: Path, b: Path) -> dict:
    names = sorted(p.name for p in (a / "images").glob("*.png"))
    same = sum((a / "images" / n).read_bytes() == (b / "images" / n).read_bytes() for n in names)
    strip = lambda text: re.sub(r'"world":"[0-9a-f]+"', '"world":""', text)  # noqa: E731
    return {"images": len(names), "images_identical": same,
            "image_names_equal": names == sorted(p.name for p in (b / "images").glob("*.png")),
            "tags_identical_but_world": strip((a / "tags.jsonl").read_text()) == strip((b / "tags.jsonl").read_text())}


def med(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path, help="another tracebench source tree (a worktree at an older commit)")
    parser.add_argument("--profile", default="global-interference,noise:0.05")
    parser.add_argument("--per-slot", type=int, default=40, help="cases per slot of the stage benchmark (default 40)")
    parser.add_argument("--cases", type=int, default=200, help="stage cases timed per round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="stage rounds per tree (default 3)")
    parser.add_argument("--run-rounds", type=int, default=1, help="trace run rounds per tree (default 1; 0 skips)")
    parser.add_argument("--no-library", action="store_true", help="skip the library comparison")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = {"this tree": HERE, "other": args.tree.resolve()}
    result: dict = {"machine": machine(pillow=PIL.__version__), "load_before": os.getloadavg(),
                    "command": " ".join(["python", "bench/zoo_render.py", *sys.argv[1:]]),
                    "other_tree": str(args.tree), "profile": args.profile}
    with tempfile.TemporaryDirectory(prefix="tracebench-zoo-") as tmp:
        root = Path(tmp)
        child(HERE, root, "sample", "--slots", "1-8", "--per-slot", str(args.per_slot), "--out", str(root / "stages"))
        n_stage = sum(1 for _ in open(root / "stages" / "cases.jsonl", encoding="utf-8"))
        every = max(1, n_stage // args.cases)
        stages: dict[str, list[dict]] = {name: [] for name in trees}
        reads: dict[str, list[dict]] = {name: [] for name in trees}
        for r in range(args.rounds):
            for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                out = root / f"pngs-{name.replace(' ', '-')}"
                shutil.rmtree(out, ignore_errors=True)
                text, _, _ = child(trees[name], root, str(root / "stages"), args.profile, str(every), str(out), script=STAGES)
                stages[name].append(_last_json(text))
                text, _, _ = child(trees[name], root, str(out), script=READS)
                reads[name].append(_last_json(text))
        result["stages_ms"] = {name: {k: round(1000 * med([s[k] for s in rows]), 3) for k in rows[0] if k != "bytes"}
                               | {"png_kib": round(rows[0]["bytes"] / 1024, 1)} for name, rows in stages.items()}
        result["reads_ms"] = {name: {k: round(1000 * med([s[k] for s in rows]), 3) for k in rows[0]}
                              for name, rows in reads.items()}
        result["stage_cases"] = len(range(0, n_stage, every))

        if args.run_rounds:
            child(HERE, root, "sample", "--slots", "1-8", "--out", str(root / "bench"))
            n_run = sum(1 for _ in open(root / "bench" / "cases.jsonl", encoding="utf-8"))
            walls: dict[str, list[float]] = {name: [] for name in trees}
            cpus: dict[str, list[float]] = {name: [] for name in trees}
            for r in range(args.run_rounds):
                for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                    out = root / f"run-{name.replace(' ', '-')}-{r}"
                    _, wall, cpu = child(trees[name], root, "run", str(root / "bench"), "--generator",
                                         f"synthetic:{args.profile}", "--judge", "oracle", "--out", str(out))
                    walls[name].append(wall)
                    cpus[name].append(cpu)
            this, other = root / "run-this-tree-0", root / "run-other-0"
            a, b = images(this), images(other)
            result["run"] = {
                "cases": n_run, "wall_s": {n: [round(w, 2) for w in v] for n, v in walls.items()},
                "cpu_s": {n: [round(c, 2) for c in v] for n, v in cpus.items()},
                "verdicts_equal_without_cache_keys": verdicts(this) == verdicts(other),
                "verdicts": len(verdicts(this)),
                "verdict_files_byte_identical": (this / "verdicts.jsonl").read_bytes() == (other / "verdicts.jsonl").read_bytes(),
                "images": len(a), "pixels_equal": sum(a[k][0] == b.get(k, (None,))[0] for k in a),
                "records_equal_without_world": sum(a[k][1] == b.get(k, (None, None))[1] for k in a),
                "image_mib": {"this tree": round(sum(p.stat().st_size for p in (this / "images").glob("*.png")) / 2**20, 1),
                              "other": round(sum(p.stat().st_size for p in (other / "images").glob("*.png")) / 2**20, 1)},
            }
        if not args.no_library:
            built = {}
            for name in trees:
                text, _, _ = child(trees[name], root, str(root / f"lib-{name.replace(' ', '-')}"), script=LIBRARY)
                built[name] = round(_last_json(text)["seconds"], 2)
            result["library"] = library_same(root / "lib-this-tree", root / "lib-other") | {"build_s": built}
    result["load_after"] = os.getloadavg()

    if args.json:
        print(json.dumps(result, indent=2))
        return
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores{' (virtualized)' if m['virtualized'] else ''}, {m['python']}, "
          f"Pillow {m['pillow']}; load average before {result['load_before'][0]:.2f}, after {result['load_after'][0]:.2f}")
    print(f"stages: {result['stage_cases']} cases, profile {args.profile}, median of {args.rounds} rounds, CPU ms per image")
    s = result["stages_ms"]
    print(f"{'':28s}{'this tree':>12s}{'other':>12s}")
    for key in s["this tree"]:
        print(f"{key:28s}{s['this tree'][key]:12.3f}{s['other'][key]:12.3f}")
    for key in result["reads_ms"]["this tree"]:
        print(f"{'file read: ' + key:28s}{result['reads_ms']['this tree'][key]:12.3f}{result['reads_ms']['other'][key]:12.3f}")
    if "run" in result:
        run = result["run"]
        print(f"trace run, {run['cases']} cases: wall {run['wall_s']}, CPU {run['cpu_s']}; verdicts equal without cache "
              f"keys: {run['verdicts_equal_without_cache_keys']} ({run['verdicts']}); pixels equal {run['pixels_equal']}/"
              f"{run['images']}, records equal without drawn.world {run['records_equal_without_world']}/{run['images']}; "
              f"images {run['image_mib']} MiB")
    if "library" in result:
        lib = result["library"]
        print(f"library: {lib['images_identical']}/{lib['images']} images byte-identical, tags identical but the world "
              f"stamp: {lib['tags_identical_but_world']}; build {lib['build_s']} CPU s")


if __name__ == "__main__":
    main()
