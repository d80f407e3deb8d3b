"""Speed and memory of `trace sample`, measured on the real command in subprocesses.

Measurements, each a fresh process (as a user runs it), on the shipped synthetic library
(built beforehand, so its one-time build is not counted):

1. the default benchmark, ``trace sample --slots 1-8 --out DIR`` (about 1,600 cases), on
   every core and with ``--jobs 1``, interleaved round by round with ``trace parse f`` (the
   fixed cost of starting the command at all): wall times, their medians and the ratio of
   medians, and peak memory;
2. the first run on a machine: the same command with an empty derived-data folder (the
   template space, quota flows and parse tables computed and stored);
3. a large benchmark, ``trace sample --per-slot 12500 --no-applications`` (100,000 cases):
   cases per second and peak memory, to show memory does not grow with the count.

Every tree timed has its bytecode compiled first (``__pycache__``, as pip writes it at install).

Peak memory is the process's maximum resident set size (``ru_maxrss`` of the child; with
workers, the largest of the writer and its workers).

4. with ``--against DIR`` (a checkout of another commit, e.g. ``git worktree add DIR 7f95597``):
   ``trace parse f``, the default benchmark and ``--per-slot 2500 --no-applications``
   (20,000 cases), each timed for that tree and for this one (``python -P -m tracebench``
   with ``PYTHONPATH`` set to the tree), interleaved round by round.

    python bench/sample_throughput.py [--rounds 5] [--large-per-slot 12500] [--against DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import compile_bytecode, machine


def machine_text() -> str:
    info = machine()
    return f"{info['cpu']}, {info['cores']} cores, {info['python']}"


def trace_command() -> list[str]:
    script = Path(sys.executable).parent / "trace"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tracebench"]


def timed(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, max RSS MiB) of one command in a fresh process."""
    with tempfile.TemporaryFile("w+") as errors:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # wait4: the child's own resource usage
        wall = time.perf_counter() - start
        if status != 0:
            errors.seek(0)
            raise SystemExit(f"{' '.join(command)} failed: {errors.read()}")
    return wall, usage.ru_maxrss / 1024  # the largest of the process and the workers it waited for


def timed_run(args: list[str], env: dict | None = None) -> tuple[float, float, int]:
    """(wall seconds, max RSS MiB, cases) of one `trace sample` run in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench"
        wall, rss = timed([*trace_command(), "sample", *args, "--out", str(out)], env)
        with open(out / "cases.jsonl", "rb") as handle:
            cases = sum(1 for _ in handle)
        return wall, rss, cases


def first_run() -> tuple[float, float, int]:
    """The default benchmark with an empty derived-data folder (the library linked in)."""
    from tracebench.library import default_library

    with tempfile.TemporaryDirectory() as tmp:
        library = default_library()
        (Path(tmp) / library.name).symlink_to(library, target_is_directory=True)
        return timed_run(["--slots", "1-8"], {**os.environ, "TRACEBENCH_CACHE": tmp})


def against(other: Path, rounds: int) -> dict:
    """Wall seconds per round of three commands for ``other`` and for this tree, interleaved."""
    here = Path(__file__).resolve().parent.parent
    trees = {"against": Path(other).resolve(), "this": here}
    commands = {"parse f": ["parse", "f"], "default benchmark": ["sample", "--slots", "1-8"],
                "20,000 cases": ["sample", "--slots", "1-8", "--per-slot", "2500", "--no-applications"]}
    times: dict = {name: {tree: [] for tree in trees} for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            for tree, root in trees.items():
                with tempfile.TemporaryDirectory() as tmp:
                    out = ["--out", str(Path(tmp) / "bench")] if command[0] == "sample" else []
                    env = {**os.environ, "PYTHONPATH": str(root)}
                    wall, _ = timed([sys.executable, "-P", "-m", "tracebench", *command, *out], env)
                    times[name][tree].append(round(wall, 2))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--large-per-slot", type=int, default=12500)
    parser.add_argument("--against", type=Path, help="another source tree (a folder holding tracebench/) to time")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import tracebench
    from tracebench.library import default_library

    compile_bytecode(Path(tracebench.__file__).parent.parent)  # as an installed package has it
    if args.against is not None:
        compile_bytecode(args.against)
    default_library()  # built once, outside the measurement

    timed_run(["--slots", "1-8"])  # the derived data, computed once, outside the measurement
    parse, default, single = [], [], []
    for _ in range(args.rounds):  # interleaved, so a change of load shows in all three
        parse.append(timed([*trace_command(), "parse", "f"]))
        default.append(timed_run(["--slots", "1-8"]))
        single.append(timed_run(["--slots", "1-8", "--jobs", "1"]))
    cold = first_run()
    large = timed_run(["--slots", "1-8", "--per-slot", str(args.large_per_slot), "--no-applications"])

    def summary(runs) -> dict:
        return {"wall_s": [round(r[0], 2) for r in runs], "median_wall_s": round(statistics.median(r[0] for r in runs), 3),
                "max_rss_mib": round(max(r[1] for r in runs), 1)}

    result = {
        "machine": machine_text(),
        "parse": summary(parse),
        "default": {"cases": default[0][2], **summary(default)},
        "default_jobs_1": summary(single),
        "first_run": {"wall_s": round(cold[0], 2), "max_rss_mib": round(cold[1], 1)},
        "large": {"cases": large[2], "wall_s": round(large[0], 1), "cases_per_s": round(large[2] / large[0]),
                  "max_rss_mib": round(large[1], 1)},
    }
    if args.against is not None:
        result["against"] = against(args.against, args.rounds)
    result["ratio_to_parse"] = round(result["default"]["median_wall_s"] / result["parse"]["median_wall_s"], 2)
    result["ratio_to_parse_jobs_1"] = round(result["default_jobs_1"]["median_wall_s"] / result["parse"]["median_wall_s"], 2)
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}")
    p = result["parse"]
    print(f"trace parse f:     median {p['median_wall_s']} s wall (rounds {p['wall_s']})")
    d = result["default"]
    print(f"default benchmark: {d['cases']} cases, median {d['median_wall_s']} s wall "
          f"(rounds {d['wall_s']}), peak RSS {d['max_rss_mib']} MiB; {result['ratio_to_parse']}x parse")
    s = result["default_jobs_1"]
    print(f"  with --jobs 1:   median {s['median_wall_s']} s wall (rounds {s['wall_s']}); "
          f"{result['ratio_to_parse_jobs_1']}x parse")
    c = result["first_run"]
    print(f"first run (empty derived-data folder): {c['wall_s']} s wall, peak RSS {c['max_rss_mib']} MiB")
    for name, trees in result.get("against", {}).items():
        print(f"{name}: " + "; ".join(f"{tree} {runs}" for tree, runs in trees.items()))
    g = result["large"]
    print(f"large benchmark:   {g['cases']} cases in {g['wall_s']} s = {g['cases_per_s']} cases/s, "
          f"peak RSS {g['max_rss_mib']} MiB")


if __name__ == "__main__":
    main()
