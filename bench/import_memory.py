"""Peak memory of `trace import` on crafted dataset folders: the bound the import's limits hold.

A benchmark (`trace sample --slots 1-3 --per-slot 4 --no-applications`) is exported once; each
input below is that export, edited by a child of this script (``--make NAME BASE DIR``, so this
process stays small: a child's ``ru_maxrss`` counts the high-water mark of the process that
started it, see bench/run_memory.py). Then `trace import INPUT --out OUT` runs in a fresh process
and its peak resident set is ``os.wait4``'s ``ru_maxrss``:

- ``export``: the export as `trace export` wrote it (imported: the baseline);
- ``card-200MB``: its card padded to 200 MB (refused by its size, unread);
- ``card-deep``: a card header nested 100,000 deep (refused from its first 33 levels);
- ``card-at-limit``: a card of just under MAX_CARD_BYTES, its header a list of 35,000 items (parsed;
  imported);
- ``cell-300MB``: a reference image of 300 MB (refused from the shard's footer);
- ``cells-at-limit``: one row group of just under MAX_ROW_GROUP_BYTES, three rows each with a
  random image of just under MAX_IMAGE_BYTES (read, checked and written, refused at the end by
  the card's hashes): the worst case the limits let through;
- ``rows-100k``: 100,000 rows (a case under new ids, one-byte images; read and written, refused
  at the end by the card's hashes).

Printed: a table of input, exit status, result (the command's line, cut), wall seconds and peak
MiB, then whether every peak holds ``--bound`` (default 400 MiB; exit 1 when one does not).

    python bench/import_memory.py [--bound 400] [--json]
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
from pathlib import Path

from _machine import compile_bytecode, machine
from sample_throughput import machine_text, trace_command

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ("export", "card-200MB", "card-deep", "card-at-limit", "cell-300MB", "cells-at-limit", "rows-100k")


# ------------------------------------------------------------------------------ making the inputs (a child)

def _rows(export: Path):
    import pyarrow.parquet as pq

    (shard,) = (export / "data").glob("*.parquet")
    table = pq.read_table(shard)
    return shard, table.schema, table.to_pylist()


def _write(shard: Path, schema, rows: list[dict], group: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows, schema=schema), shard, row_group_size=group)


def _edit_card(card: Path, old: str, new: str) -> None:
    text = card.read_text(encoding="utf-8")
    card.write_text(text.replace(old, new, 1), encoding="utf-8")


def make(name: str, base: Path, out: Path) -> None:
    """Input ``name``: a copy of the export ``base`` at ``out``, crafted."""
    import tracebench.share as _limits

    shutil.copytree(base, out)
    card = out / "README.md"
    if name == "card-200MB":
        with open(card, "a", encoding="utf-8") as handle:
            for _ in range(200):
                handle.write("x" * (1 << 20))
    elif name == "card-deep":
        _edit_card(card, "pretty_name: ", "pretty_name: " + "[" * 100_000 + "]" * 100_000 + "\nwas: ")
    elif name == "card-at-limit":
        room = _limits.MAX_CARD_BYTES - card.stat().st_size - len("padding:\n") - 1
        items = "".join(f"- item {k:06d} of a long list\n" for k in range(room // 29))  # 29 bytes a line
        _edit_card(card, "pretty_name: ", f"padding:\n{items}pretty_name: ")
        assert card.stat().st_size <= _limits.MAX_CARD_BYTES, card.stat().st_size
    elif name == "cell-300MB":
        shard, schema, rows = _rows(out)
        rows[0]["reference_images"][0]["bytes"] = b"\x89PNG" + bytes(300_000_000)
        _write(shard, schema, rows, 100)
    elif name == "cells-at-limit":
        shard, schema, rows = _rows(out)
        size = min(_limits.MAX_IMAGE_BYTES, _limits.MAX_ROW_GROUP_BYTES // 3) - (1 << 20)
        for k, row in enumerate(rows[:3]):
            row["references"][0]["path"] = f"references/big-{k}.png"
            row["reference_images"][0]["bytes"] = os.urandom(size)  # incompressible: the footer's sizes are real
        _write(shard, schema, rows[:3], 3)
    elif name == "rows-100k":
        shard, schema, rows = _rows(out)
        row = rows[0]
        for image in row["reference_images"]:
            image["bytes"] = b"x"
        _write(shard, schema, [{**row, "id": f"c{k:06d}"} for k in range(100_000)], 100)


# ------------------------------------------------------------------------------ measuring (this process)

def measured(command: list[str]) -> tuple[int, str, float, float]:
    """(exit status, the command's first line, wall seconds, peak RSS MiB) of one command."""
    with tempfile.TemporaryFile("w+") as output:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        output.seek(0)
        first = (output.read().strip().splitlines() or [""])[0]
    return os.waitstatus_to_exitcode(status), first, wall, usage.ru_maxrss / 1024


def _result(line: str) -> str:
    """The command's line without its paths: what it says."""
    words = [w for w in line.replace("trace import: ", "").split() if "/" not in w or w.startswith("data/")]
    text = " ".join(words)
    return text if len(text) <= 72 else text[:69] + "..."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bound", type=float, default=400.0, help="peak MiB every import must stay under")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--make", nargs=3, metavar=("NAME", "BASE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        make(args.make[0], Path(args.make[1]), Path(args.make[2]))
        return
    compile_bytecode(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run([*trace_command(), "sample", "--slots", "1-3", "--per-slot", "4", "--no-applications",
                        "--out", str(tmp / "bench")], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*trace_command(), "export", str(tmp / "bench"), "--out", str(tmp / "export")], check=True,
                       stdout=subprocess.DEVNULL)
        rows = []
        for name in INPUTS:
            folder = tmp / "export" if name == "export" else tmp / name
            if name != "export":
                subprocess.run([sys.executable, __file__, "--make", name, str(tmp / "export"), str(folder)], check=True)
            code, line, wall, peak = measured([*trace_command(), "import", str(folder), "--out", str(tmp / f"{name}-back")])
            rows.append({"input": name, "exit": code, "result": _result(line), "wall_s": round(wall, 2),
                         "peak_mib": round(peak, 1), "input_mb": round(_size(folder) / 1e6, 1)})
            shutil.rmtree(folder, ignore_errors=True) if name != "export" else None
            shutil.rmtree(tmp / f"{name}-back", ignore_errors=True)
    holds = all(row["peak_mib"] <= args.bound for row in rows)
    if args.json:
        print(json.dumps({"machine": machine(), "bound_mib": args.bound, "holds": holds, "rows": rows}, indent=2))
    else:
        _table(rows, args.bound, holds)
    sys.exit(0 if holds else 1)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _table(rows: list[dict], bound: float, holds: bool) -> None:
    import tracebench.share as _limits

    print(f"trace import of crafted dataset folders ({machine_text()})")
    print(f"limits: card {_limits.MAX_CARD_BYTES:,} B, row group {_limits.MAX_ROW_GROUP_BYTES:,} B, image "
          f"{_limits.MAX_IMAGE_BYTES:,} B, string {_limits.MAX_STRING_BYTES:,} B, footer {_limits.MAX_FOOTER_BYTES:,} B")
    print()
    print(f"| {'input':<14} | {'MB':>6} | exit | {'wall s':>6} | {'peak MiB':>8} | result")
    print(f"|{'-' * 16}|{'-' * 8}|------|{'-' * 8}|{'-' * 10}|{'-' * 40}")
    for row in rows:
        print(f"| {row['input']:<14} | {row['input_mb']:>6} | {row['exit']:>4} | {row['wall_s']:>6} | "
              f"{row['peak_mib']:>8} | {row['result']}")
    print()
    print(f"peak memory bound {bound:.0f} MiB: {'holds' if holds else 'BROKEN'} "
          f"(largest {max(row['peak_mib'] for row in rows)} MiB)")


if __name__ == "__main__":
    main()
