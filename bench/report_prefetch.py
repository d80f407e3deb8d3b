"""What making images ahead in threads saves `trace report`: the page built with
``tracebench.report._report.PREFETCH`` at 0 (one image at a time, as the page needs it) and
at its default, each in a fresh process, interleaved round by round; the pages must be the
same bytes.

Inputs as for bench/report_cost.py (a run and its diagnosis, e.g. its ``--work`` folder)::

    python bench/report_prefetch.py RUN DIAG [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _machine import machine

BUILD = """
import sys, time
from pathlib import Path
from tracebench.report import _report
if sys.argv[1] != "default":
    _report.PREFETCH = int(sys.argv[1])
start = time.perf_counter()
_report.build_report(Path(sys.argv[2]), Path(sys.argv[4]), diagnosis=Path(sys.argv[3]), force=True)
print(time.perf_counter() - start)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("diagnosis", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"0": [], "default": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for setting in times:
                page = Path(tmp) / f"page-{setting}.html"
                done = subprocess.run([sys.executable, "-c", BUILD, setting, str(args.run), str(args.diagnosis),
                                       str(page)], capture_output=True, text=True, cwd=tmp, check=True)
                times[setting].append(round(float(done.stdout.strip().splitlines()[-1]), 2))
        same = (Path(tmp) / "page-0.html").read_bytes() == (Path(tmp) / "page-default.html").read_bytes()
    info = machine()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['python']}")
    for setting, runs in times.items():
        print(f"PREFETCH={setting}: build {statistics.median(runs):.2f} s (rounds {runs})")
    print(f"same bytes: {same}")


if __name__ == "__main__":
    main()
