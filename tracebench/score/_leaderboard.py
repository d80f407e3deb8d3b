"""``trace leaderboard``: one row per run (a generator), ordered by its overall score.

Each row holds the operator scores with their 95% intervals (the paper's Table 2, as ``trace
score`` computes them), the neighbours' protocols asked for, the cases, the abstentions and the
judges' identity. Rows are comparable only over one benchmark and one judge setup (the judges,
their scale, ensemble rule, batching and prompt templates); runs that differ are refused
unless ``mixed``, and then every row says what differs from the first run given. The report's
headline table is these rows (:func:`board_rows`).

Every text on the board (a generator or judge spec, a model a judge's server reported, a folder's
name) comes from run.json files anyone may have written: each format passes every cell through
one function that makes it inert where that format is read (:func:`csv_cell`: no cell a
spreadsheet evaluates; :func:`markdown_cell`: no cell that breaks the table, carries HTML or
forms a link; :func:`json_text`: no raw ``<``, ``>``, ``&``; :func:`terminal_text`: one
printable line)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field

from .. import __version__
from ..errors import TraceError
from ..operators import Operator
from ..records import RunManifest
from ..scales import DEFAULT_SCALE
from ._protocols import ProtocolScore
from ._score import OPERATORS, Scores

__all__ = ["Leaderboard", "LeaderboardRow", "board_rows", "csv_cell", "csv_line", "format_leaderboard", "json_text",
           "leaderboard", "markdown_cell", "run_names", "terminal_text", "write_leaderboard"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LeaderboardRow(_Record):
    """One run on the board."""

    rank: int = Field(description="1 the best overall score; runs without one come last")
    name: str = Field(description="the generator, numbered when two rows share it")
    generator: str
    run: str = Field(description="the run folder")
    avg: float | None = Field(description="the mean of the operator columns (trace score's avg)")
    operators: dict[Operator, float | None]
    ci95: dict[str, tuple[float, float] | None] = Field(description="operator (and avg) -> 95% bootstrap interval")
    protocols: dict[str, ProtocolScore] = Field(default_factory=dict, description="trace score --protocol's scores")
    cases: int
    abstentions: int = Field(description="questions whose verdict is an abstention (never scored as fails)")
    judges: tuple[str, ...]
    judge_models: dict[str, tuple[str, ...]] = Field(default_factory=dict, description="judge spec -> the models "
                                                     "its server reported answering (run.json)")
    scale: str
    ensemble: str | None
    judge_batch: str
    judge_templates: str = Field(description="SHA-256 of the judge prompt templates")
    benchmark: str = Field(description="SHA-256 of the benchmark's cases.jsonl")
    rejudged_from: str | None = Field(default=None, description="trace rejudge: the run whose images were judged")
    differs: tuple[str, ...] = Field(default=(), description="with --mixed: what differs from the first run given "
                                     "(benchmark, shard, max_images, judges, scale, ensemble, judge_batch, "
                                     "judge_templates)")


class Leaderboard(_Record):
    tool: str
    protocols: tuple[str, ...]
    mixed: bool = Field(description="whether some rows were made over another benchmark or judge setup")
    rows: tuple[LeaderboardRow, ...]


def run_names(manifests: Sequence[RunManifest]) -> list[str]:
    """How each run is named on a board or a report: its generator (without ``openai:``),
    numbered ``#k`` (its place among the runs) when two runs share one."""
    names = [m.generator.removeprefix("openai:") + (f" (shard {m.shard})" if m.shard else "") for m in manifests]
    if len(set(names)) < len(names):
        names = [f"{name} #{k}" for k, name in enumerate(names, 1)]
    return names


def _setup(manifest: RunManifest) -> dict[str, object]:
    """What must be alike for scores to compare: the cases scored (benchmark, shard, the
    generator's limit on images and the collage rule) and the judging."""
    return {"benchmark": manifest.cases_hash, "shard": manifest.shard,
            "max_images": (manifest.max_images, manifest.collage), "judges": manifest.judges,
            "scale": manifest.answer_scale.value, "ensemble": manifest.ensemble, "judge_batch": manifest.judge_batch,
            "judge_templates": manifest.hashes.get("judge_templates"),
            "judge_shown": manifest.hashes.get("judge_shown")}  # op batches: which references each call shows


def board_rows(entries: Sequence[tuple[Path, RunManifest, Scores]], *, mixed: bool = False) -> list[LeaderboardRow]:
    """The rows of ``entries`` (run folder, manifest, scores), best overall score first (ties in
    the order given). Runs over another benchmark or judge setup than the first are a
    TraceError naming the run and what differs, unless ``mixed``."""
    if not entries:
        raise TraceError("give at least one run folder")
    first = _setup(entries[0][1])
    names = run_names([manifest for _, manifest, _ in entries])
    rows = []
    for (root, manifest, scores), name in zip(entries, names):
        setup = _setup(manifest)
        differs = tuple(key for key, value in setup.items() if value != first[key])
        if differs and not mixed:
            shown = {"benchmark": "benchmark (its cases.jsonl differs)", "judge_templates": "judge prompt templates",
                     "judge_shown": "choice of reference images per judge call (--judge-batch op)",
                     "shard": "shard (other cases)", "max_images": "limit on images (other cases scored)"}
            raise TraceError(f"{root}: another {', '.join(shown.get(d, d) for d in differs)} than {entries[0][0]}; "
                             f"its scores do not compare (give --mixed to list them anyway, marked)")
        rows.append(dict(name=name, generator=manifest.generator, run=str(root), avg=scores.avg,
                         operators=scores.operators, ci95=scores.ci95, protocols=scores.protocols or {},
                         cases=scores.cases, abstentions=scores.abstentions.count, judges=manifest.judges,
                         judge_models=manifest.judge_models or {},
                         scale=setup["scale"], ensemble=manifest.ensemble, judge_batch=manifest.judge_batch,
                         judge_templates=setup["judge_templates"] or "", benchmark=manifest.cases_hash,
                         rejudged_from=manifest.rejudged_from, differs=differs))
    order = sorted(range(len(rows)), key=lambda k: (rows[k]["avg"] is None, -(rows[k]["avg"] or 0.0), k))
    return [LeaderboardRow(rank=rank, **rows[k]) for rank, k in enumerate(order, 1)]


def leaderboard(run_dirs: Sequence[Path], *, protocols: Sequence[str] = (), mixed: bool = False, seed: int = 0,
                gating: str = "within") -> Leaderboard:
    """Score every run (as ``trace score``, each read as a stream) and rank them."""
    from ..run import stream_run
    from ._score import score_cases

    roots = [Path(run_dir).resolve() for run_dir in run_dirs]
    for k, root in enumerate(roots):
        if root in roots[:k]:
            raise TraceError(f"{run_dirs[k]}: given twice")
    entries = []
    for run_dir in run_dirs:
        stream = stream_run(run_dir)
        scores = score_cases(stream.manifest, ((item.case, item.samples) for item in stream), root=stream.root,
                             seed=seed, gating=gating, protocols=protocols)
        entries.append((Path(run_dir), stream.manifest, scores))
    rows = board_rows(entries, mixed=mixed)
    return Leaderboard(tool=f"tracebench {__version__}", protocols=tuple(protocols),
                       mixed=any(row.differs for row in rows), rows=tuple(rows))


# -- making a cell inert, one function per format ------------------------------------------------

# What makes a spreadsheet read a cell as a formula (OWASP, CSV injection): = + - @, a tab or a
# carriage return first, and their full-width forms (read as formulas by some locales' spreadsheets)
_FORMULA_FIRST = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def csv_cell(value: object) -> str:
    """One CSV cell: a number (int or float) as its digits, a negative one included; None as
    empty; any text made inert for spreadsheets (OWASP): a ``'`` put before a text whose first
    character, or first after spaces and line breaks, is one of ``= + - @``, a tab or a carriage
    return (or their full-width forms), nothing else changed. Quoting is :func:`csv_line`'s."""
    if value is None:
        return ""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_FIRST) or text.lstrip().startswith(_FORMULA_FIRST) else text


def csv_line(cells: Sequence[object]) -> str:
    """One CSV record of ``cells``, each through :func:`csv_cell`, quoted by the csv module (a
    cell holding a comma, a quote, a carriage return or a line feed is quoted), ended by CRLF
    (RFC 4180; a carriage return in a cell is then quoted too)."""
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL).writerow([csv_cell(c) for c in cells])
    return out.getvalue()


_MARKDOWN_ESCAPED = re.compile(r"([\\`*_\[\]()|~$])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown_cell(value: object) -> str:
    """One cell of a Markdown table, shown as the text it is: every character that is not
    printable (line breaks of any kind, tabs, control and format characters) a space, so a cell
    is one line; ``&``, ``<`` and ``>`` as entities (no HTML); and a backslash, a backtick, ``*``,
    ``_``, ``[``, ``]``, ``(``, ``)``, ``|``, ``~`` and ``$`` escaped by a backslash (no cell split,
    no code span, emphasis, math or link: ``[``, ``]``, ``(`` and ``)`` never form one)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    text = "".join(_HTML.get(ch, ch) for ch in text)
    return _MARKDOWN_ESCAPED.sub(r"\\\1", text)


_JSON_INERT = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_text(value: Any) -> str:
    """``value`` (a record or plain data) as indented JSON that reads back to the same value,
    with ``<``, ``>``, ``&`` and the JavaScript line breaks U+2028 and U+2029 written as
    ``\\uXXXX`` escapes (they occur in strings only): a text from a run folder stays inert
    pasted into a page or a script."""
    text = value.model_dump_json(indent=2) if isinstance(value, BaseModel) else json.dumps(value, indent=2,
                                                                                        ensure_ascii=False)
    return "".join(_JSON_INERT.get(ch, ch) for ch in text)


def terminal_text(value: object, limit: int = 200) -> str:
    """A text for one line of a terminal: each character that is not printable (escape
    sequences, bells, carriage returns, line breaks) shown as its Python escape, cut at
    ``limit`` characters (an ellipsis marking the cut)."""
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(value))
    return text if len(text) <= limit else text[:limit - 1] + "…"


_PROTOCOL_COLUMNS = {"trace": (), "longbanana": ("overall", "pass_rate"), "macro": ("overall",),
                     "savanna": ("overall",)}


def _columns(board: Leaderboard) -> list[tuple[str, str]]:
    """(header, key) of the table's score columns: the operators, avg, then each protocol's."""
    columns = [(op.value if isinstance(op, Operator) else op, op) for op in OPERATORS] + [("avg", "avg")]
    for name in board.protocols:
        for field in _PROTOCOL_COLUMNS.get(name, ("overall",)):
            columns.append((f"{name} {'P@tau' if field == 'pass_rate' else ''}".strip(), f"{name}.{field}"))
    return columns


def _value(row: LeaderboardRow, key: str) -> tuple[float | None, tuple[float, float] | None]:
    if "." in key:
        name, field = key.split(".")
        score = row.protocols.get(name)
        if score is None:
            return None, None
        return getattr(score, field), getattr(score, "ci95" if field == "overall" else f"{field}_ci95")
    if key == "avg":
        return row.avg, row.ci95.get("avg")
    return row.operators.get(key), row.ci95.get(str(key))


def format_leaderboard(board: Leaderboard, kind: str) -> str:
    """The board as ``md`` (a Markdown table), ``csv`` (one column per score and per interval
    bound) or ``json`` (the record); every cell through its format's function (:func:`csv_cell`,
    :func:`markdown_cell`, :func:`json_text`)."""
    if kind == "json":
        return json_text(board) + "\n"
    columns = _columns(board)
    if kind == "csv":
        header = ["rank", "name", "generator"]
        for title, _ in columns:
            header += [title, f"{title} ci_low", f"{title} ci_high"]
        lines = [csv_line(header + ["cases", "abstentions", "judges", "scale", "benchmark", "run", "differs"])]
        for row in board.rows:
            cells: list[object] = [row.rank, row.name, row.generator]
            for _, key in columns:
                value, ci = _value(row, key)
                cells += [value, *((None, None) if ci is None else ci)]
            lines.append(csv_line(cells + [row.cases, row.abstentions, "+".join(row.judges), row.scale,
                                           row.benchmark[:12], row.run, " ".join(row.differs)]))
        return "".join(lines)
    if kind != "md":
        raise TraceError(f"--out: {kind!r} is not a leaderboard format (md, csv or json)")

    def score(key: str, row: LeaderboardRow) -> str:
        value, ci = _value(row, key)
        if value is None:
            return "n/a"
        form = "{:.1f}%" if key.endswith("pass_rate") else "{:.2f}" if "." in key else "{:.4f}"
        return form.format(value) + ("" if ci is None else f" [{form.format(ci[0])}, {form.format(ci[1])}]")

    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(markdown_cell(c) for c in cells) + " |"

    # the run folder beside the name: two runs of one generator (#1, #2 by the order given) told apart
    lines = [line(["rank", "generator", "run", *(title for title, _ in columns), "cases", "abstentions", "judges"]),
             "|---:|---|---|" + "---:|" * len(columns) + "---:|---:|---|"]
    for row in board.rows:
        mark = f" (other {', '.join(row.differs)})" if row.differs else ""
        judges = ", ".join(j + (f" as {' / '.join(row.judge_models[j])}" if row.judge_models.get(j) else "")
                           for j in row.judges) + (f" ({row.scale})" if row.scale != DEFAULT_SCALE else "")
        lines.append(line([row.rank, row.name + mark, row.run, *(score(key, row) for _, key in columns), row.cases,
                           row.abstentions, judges]))
    notes = ["", "Operator columns and avg as the paper's Table 2 (`trace score`), with 95% bootstrap intervals; "
             "ordered by avg. Abstentions are never scored as fails."]
    if board.mixed:
        first = next((row for row in board.rows if not row.differs), None)
        notes.append(f"**Mixed board**: rows marked *other ...* were made over other cases or another judge setup "
                     f"than the first run given ({markdown_cell(first.name) if first else 'its row'}); their scores "
                     f"do not compare.")
    return "\n".join(lines + notes) + "\n"


def write_leaderboard(board: Leaderboard, out: Path) -> None:
    """Write the board to ``out`` in the format its suffix names (.md, .csv or .json), atomically."""
    from ..cache import write_atomic

    kind = Path(out).suffix.lower().lstrip(".")
    if kind not in ("md", "csv", "json"):
        raise TraceError(f"--out {out}: name a .md, .csv or .json file (the format follows the suffix)")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(out), format_leaderboard(board, kind).encode("utf-8"))

