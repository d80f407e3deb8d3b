"""The numbers users see, computed on a fixed benchmark and the zoo profiles.

``tests/golden/outputs.json`` holds them as computed since the paper's defaults were made the default
(gating within an instance, per-slot means, attribution at the first pass, the scene questions)
(``python tests/golden_outputs.py --write`` makes it anew; do that only for a change that is
meant to move the numbers, and say so in the commit). ``tests/test_golden.py`` computes them
again and compares: ``trace score --json`` numbers per profile, every diagnosis attribution
and summary, and the report's tables as text.
"""

from __future__ import annotations

import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "outputs.json"

SLOTS = "1-8"
PER_SLOT = 6
PER_APPLICATION = 20  # the default's count: the outputs were made with it before it scaled with --per-slot
SEED = 3
PROFILES = (
    "perfect",
    "global-interference",
    "composition-interference:2",
    "relation-blind",
    "weak-subtype:1.1_pattern_texture,weak-subtype:4.1_style",
    "leaky-binding",
    "duplicate",
    "no-global",
    "global-interference,composition-interference:2,noise:0.1",
)
DIAGNOSED = ("global-interference,composition-interference:2,noise:0.1", "leaky-binding")


def trace(*args: str) -> str:
    """``trace ARGS`` in a process of its own (the CLI as users run it: ``run_trace``, forked from
    this process, which has tracebench imported already); its standard output."""
    from test_cli import run_trace

    done = run_trace(*args, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"trace {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


class _Tables(HTMLParser):
    """The text of every cell of the tables with an id (the report's headline and sources)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id"):
            self._table = attrs["id"]
            self.tables[self._table] = []
        elif self._table and tag == "tr":
            self.tables[self._table].append([])
        elif self._table and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif self._table and tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def report_tables(html: str) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(html)
    return parser.tables


def compute(work: Path) -> dict:
    bench = work / "bench"
    trace("sample", "--slots", SLOTS, "--per-slot", str(PER_SLOT), "--per-application", str(PER_APPLICATION), "--seed",
          str(SEED), "--out", str(bench))
    out: dict = {"scores": {}, "diagnoses": {}, "reports": {}}

    def one(k: int, profile: str) -> None:
        run = work / f"run{k}"
        trace("run", str(bench), "--generator", f"synthetic:{profile}", "--judge", "oracle", "--out", str(run))
        out["scores"][profile] = json.loads(trace("score", str(run), "--json"))
        if profile in DIAGNOSED:
            diag = work / f"diag{k}"
            trace("diagnose", str(run), "--out", str(diag), "--strategy", "full")
            trees = [json.loads(line) for line in (diag / "trees.jsonl").read_text().splitlines()]
            out["diagnoses"][profile] = {
                "attributions": {t["case_id"]: [{key: a[key] for key in ("op", "target", "root", "source", "node")}
                                                for a in t["attributions"]] for t in trees},
                "summary": {key: value for key, value in json.loads((diag / "summary.json").read_text()).items()
                            if key != "tool"},
            }
            page = work / f"report{k}.html"
            trace("report", str(run), "--diagnosis", str(diag), "--out", str(page))
            tables = report_tables(page.read_text(encoding="utf-8"))
            out["reports"][profile] = {name: rows for name, rows in tables.items()
                                       if name in ("headline", "sources")}

    with ThreadPoolExecutor(2) as pool:  # two subprocesses at a time: the machines have two cores
        for future in [pool.submit(one, k, profile) for k, profile in enumerate(PROFILES)]:
            future.result()
    return {part: dict(sorted(values.items())) for part, values in out.items()}


def main() -> None:
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/golden_outputs.py --write   (rewrites tests/golden/outputs.json)")
    with tempfile.TemporaryDirectory() as tmp:
        result = compute(Path(tmp))
    GOLDEN.write_text(json.dumps(result, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{GOLDEN}: {len(result['scores'])} score sets, {len(result['diagnoses'])} diagnoses")


if __name__ == "__main__":
    main()
