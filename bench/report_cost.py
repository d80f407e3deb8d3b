"""The fixed costs of `trace report` on a large run: page size, peak memory, build time, and
the time a browser takes to open the page.

Inputs, made once and reused from ``--work DIR`` (default: a new temporary folder):

    python -m tracebench sample --slots 1-8 --out B                   # 1,600 cases
    python -m tracebench run B --generator synthetic:global-interference,noise:0.05 --judge oracle --out R
    python -m tracebench diagnose R --strategy adaptive --out D

Then, per round and per code version (this checkout, and with ``--base DIR`` a checkout of
another commit, e.g. ``git archive 7f95597 | tar -x -C DIR``), interleaved:

- ``python -m tracebench report R --diagnosis D --out PAGE`` in a fresh process, with
  PYTHONPATH set to the version's folder: wall time (time.perf_counter around the process),
  peak RSS of that process (os.wait4's rusage), and the page's size in bytes;
- the page opened in the system's Chromium, driven by Playwright with the flags the tests use
  (``--headless --no-sandbox --disable-gpu ...``), a fresh page per round: the time from
  navigation start to the load event (Navigation Timing's ``loadEventStart``).

Once per version, in a separate process: whether running the report imported scikit-learn or
SciPy (``sys.modules`` after ``tracebench.cli.main(["report", ...])``). Reported: medians and
ranges over rounds, and whether the rounds of one version wrote identical bytes.

Run from the repository root::

    python bench/report_cost.py [--work DIR] [--base DIR] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import machine

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = "synthetic:global-interference,noise:0.05"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
TARGETS = {"page_mb": 25.0, "peak_rss_mb": 300.0, "load_s": 2.0}
IMPORTS = """
import sys
from tracebench.cli import main
code = main(sys.argv[1:])
import tracebench
print(tracebench.__file__, sorted(m for m in ("sklearn", "scipy") if m in sys.modules))
sys.exit(code)
"""


def _env(code: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(code)}


# every process runs in the work folder: `python -m` puts the current folder first on sys.path,
# which from the repository root would import this checkout whatever PYTHONPATH says
def _trace(code: Path, work: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "tracebench", *args], env=_env(code), cwd=work, check=True,
                   stdout=subprocess.DEVNULL)


def make_inputs(work: Path) -> dict[str, Path]:
    """The benchmark, its run and the run's adaptive diagnosis, each made unless already in ``work``."""
    bench, run, diag = work / "B", work / "R", work / "D"
    if not (bench / "cases.jsonl").is_file():
        shutil.rmtree(bench, ignore_errors=True)
        _trace(ROOT, work, "sample", "--slots", "1-8", "--out", str(bench))
    if not (run / "run.json").is_file():
        _trace(ROOT, work, "run", str(bench), "--generator", GENERATOR, "--judge", "oracle", "--out", str(run))
    if not (diag / "summary.json").is_file():
        _trace(ROOT, work, "diagnose", str(run), "--strategy", "adaptive", "--out", str(diag))
    return {"bench": bench, "run": run, "diag": diag}


def build(code: Path, inputs: dict[str, Path], out: Path) -> dict[str, float]:
    """One `trace report` in a fresh process: wall time, peak RSS, page size."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tracebench", "report", str(inputs["run"]), "--diagnosis",
                             str(inputs["diag"]), "--out", str(out), "--force"], env=_env(code),
                            cwd=out.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"trace report ({code}) failed: {proc.stderr.read().decode()}")
    proc.stderr.close()
    return {"build_s": seconds, "peak_rss_mb": usage.ru_maxrss / 1024, "page_mb": out.stat().st_size / 1e6}


def imported(code: Path, inputs: dict[str, Path], out: Path) -> list[str]:
    result = subprocess.run([sys.executable, "-c", IMPORTS, "report", str(inputs["run"]), "--diagnosis",
                             str(inputs["diag"]), "--out", str(out), "--force"], env=_env(code),
                            cwd=out.parent, capture_output=True, text=True, check=True)
    where, modules = result.stdout.strip().splitlines()[-1].split(" ", 1)
    if not Path(where).resolve().is_relative_to(code):
        raise SystemExit(f"{code}: the report imported {where}")
    return json.loads(modules.replace("'", '"'))


def load_time(browser, page_file: Path) -> float:
    """Seconds from navigation start to the load event, in a fresh page."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(page_file.as_uri(), wait_until="load", timeout=120_000)
        return page.evaluate("performance.getEntriesByType('navigation')[0].loadEventStart") / 1000
    finally:
        page.close()


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="folder of the inputs, made once and reused (default: a temp dir)")
    parser.add_argument("--base", type=Path, help="a checkout of the code to compare with, measured side by side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="report-cost-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    inputs = make_inputs(work)
    versions = {"this": ROOT, **({"base": args.base.resolve()} if args.base else {})}

    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium on this machine (apt-get install chromium)")
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    digests: dict[str, set[str]] = {name: set() for name in versions}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=FLAGS)
        for k in range(args.rounds):
            for name in (list(versions) if k % 2 == 0 else list(versions)[::-1]):
                out = work / f"report-{name}.html"
                row = build(versions[name], inputs, out)
                row["load_s"] = load_time(browser, out)
                digests[name].add(hashlib.sha256(out.read_bytes()).hexdigest())
                rows[name].append(row)
        browser.close()
    result = {"machine": machine(), "loadavg": os.getloadavg(), "rounds": args.rounds,
              "cases": sum(1 for _ in (inputs["bench"] / "cases.jsonl").open(encoding="utf-8")),
              "diagnosed": json.loads((inputs["diag"] / "summary.json").read_text())["cases"],
              "versions": {}}
    for name, code in versions.items():
        result["versions"][name] = {
            "code": str(code), **{key: summary([r[key] for r in rows[name]]) for key in rows[name][0]},
            "identical_pages": len(digests[name]) == 1,
            "imports": imported(code, inputs, work / f"report-{name}-imports.html")}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['cases']} cases, {result['diagnosed']} diagnosed; {args.rounds} rounds; load average "
          f"{', '.join(f'{x:.1f}' for x in result['loadavg'])}; {result['machine']}")
    print(f"{'version':8} {'page MB':>8} {'peak RSS MB':>12} {'build s':>16} {'load s':>16}  imports  identical")
    for name, v in result["versions"].items():
        def cell(key: str) -> str:
            return f"{v[key]['median']:.2f} ({v[key]['min']:.2f}-{v[key]['max']:.2f})"
        print(f"{name:8} {v['page_mb']['median']:8.1f} {v['peak_rss_mb']['median']:12.0f} {cell('build_s'):>16} "
              f"{cell('load_s'):>16}  {v['imports'] or 'none'}  {v['identical_pages']}")
    this = result["versions"]["this"]
    print("targets: " + ", ".join(f"{key} <= {limit}: {'met' if this[key]['median'] <= limit else 'NOT met'}"
                                  for key, limit in TARGETS.items()))


if __name__ == "__main__":
    main()
