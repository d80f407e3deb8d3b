"""``trace report``: one self-contained HTML page of a run (and its diagnosis, and runs to compare).

Everything the page shows is embedded: images as data URIs (downscaled thumbnails unless
``full_images``), plots as inline SVG, styles and the small filtering script inline. It
makes no network request and opens from a file:// URL. Every text that comes from a
prompt, a tag, a model or a judge reaches the page through Jinja2's autoescaping
(``templates/report/report.html.j2``); the SVG of plots and trees is built here from
escaped parts.
"""

from __future__ import annotations

import base64
import io
import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from markupsafe import Markup, escape
from PIL import Image, UnidentifiedImageError

from .. import __version__
from ..errors import TraceError
from ..records import (DIAGNOSIS_MANIFEST, RUN_FILE, SUMMARY, TREES, Case, DiagnosticNode, DiagnosticTree, RunManifest,
                       Verdict, read_verdicts)
from ..run import IMAGES_DIR, generated_image, load_run
from ..safepaths import inside
from ..cache import write_atomic
from ..operators import OPERATORS
from ..outcomes import Status
from ..score import instance_results, score_folder
from ..templating import render_html
from . import _plots

__all__ = ["build_report"]

TEMPLATE = "report/report.html.j2"
THUMBNAIL = 320  # longest side of embedded images, in pixels


SMALL = 48_000  # an image file this small is embedded as it is


class _Images:
    """Every image of the page, embedded once (a case's references are shared with other
    cases): key -> data URI. The page's script puts them into <img> elements when a case is
    opened, so the browser decodes only what is looked at."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self.uris: dict[str, str] = {}
        self._keys: dict[Path, str | None] = {}

    def add(self, path: Path | None) -> str | None:
        if path is None:
            return None
        path = Path(path).resolve()
        if path not in self._keys:
            uri = self._uri(path)
            key = f"i{len(self.uris)}" if uri else None
            if key:
                self.uris[key] = uri
            self._keys[path] = key
        return self._keys[path]

    def _uri(self, path: Path) -> str | None:
        try:
            data = path.read_bytes()
            kind = ("png" if data.startswith(b"\x89PNG") else "jpeg" if data.startswith(b"\xff\xd8")
                    else "webp" if data[8:12] == b"WEBP" else None)
            if kind and (self.full or len(data) <= SMALL):
                return f"data:image/{kind};base64," + base64.b64encode(data).decode()
            with Image.open(io.BytesIO(data)) as image:
                image = image.convert("RGB")
                image.thumbnail((THUMBNAIL, THUMBNAIL))
                out = io.BytesIO()
                image.save(out, format="JPEG", quality=80)
            return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()
        except (OSError, UnidentifiedImageError):
            return None

    def json(self) -> Markup:
        return Markup(json.dumps(self.uris, separators=(",", ":")).replace("</", "<\\/"))


# ------------------------------------------------------------------------------ trees

_NODE_W, _NODE_H, _DX, _DY = 46, 22, 58, 50


def _tree_svg(tree: DiagnosticTree, failing: list[str]) -> Markup:
    """The tree drawn as SVG: leaves in order, parents centred over their children, one row
    per depth; each node carries its per-target status for the page's script to colour."""
    children: dict[str | None, list[str]] = {}
    for node in tree.nodes:
        children.setdefault(node.parent, []).append(node.id)
    x: dict[str, float] = {}
    leaves = iter(range(len(tree.nodes)))

    def place(node_id: str) -> float:
        kids = children.get(node_id, [])
        x[node_id] = (sum(place(k) for k in kids) / len(kids)) if kids else float(next(leaves))
        return x[node_id]

    place(tree.nodes[0].id)
    width = (max(x.values()) + 1) * _DX + 10
    height = (tree.max_depth + 1) * _DY + 10
    by_id = {n.id: n for n in tree.nodes}
    parts = [f'<svg class="tree" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
             f'role="img" aria-label="diagnostic tree of {escape(tree.case_id)}">']
    for node in tree.nodes[1:]:
        x0, y0 = x[node.parent] * _DX + _DX / 2 + 5, by_id[node.parent].depth * _DY + _NODE_H + 5
        x1, y1 = x[node.id] * _DX + _DX / 2 + 5, node.depth * _DY + 5
        parts.append(f'<line x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}"/>')
    for node in tree.nodes:
        cx, top = x[node.id] * _DX + _DX / 2 + 5, node.depth * _DY + 5
        status = {t: s for t, s in node.status.items() if t in failing}
        state = ("unknown" if not node.evaluated else "fail" if Status.FAIL in status.values()
                 else "pass" if status else "neutral")
        title = f"{node.id} [{node.rule or 'root'}] {node.formula}"
        parts.append(
            f'<g class="node {state}" data-node="{escape(node.id)}" data-status="{escape(json.dumps(node.status))}" '
            f'tabindex="0"><title>{escape(title)}</title>'
            f'<rect x="{cx - _NODE_W / 2:.1f}" y="{top:.1f}" width="{_NODE_W}" height="{_NODE_H}" rx="5"/>'
            f'<text x="{cx:.1f}" y="{top + 15:.1f}">{escape(node.id)}</text></g>')
    parts.append("</svg>")
    return Markup("".join(parts))


# ------------------------------------------------------------------------------ the page

@dataclass
class _RunView:
    name: str
    root: Path
    manifest: RunManifest
    scores: dict[str, Any]  # a Scores record, as JSON data (what the page shows)


def _run_name(manifest) -> str:
    return manifest.generator.removeprefix("openai:")


def _case_view(case: Case, verdicts: list[Verdict], run_root: Path, cases_dir: Path, images: _Images,
               tree: DiagnosticTree | None, diag_dir: Path | None) -> dict[str, Any]:
    by_question = {v.question_id: v for v in verdicts}
    results = instance_results(case, {qid: v.outcome for qid, v in by_question.items()})
    failing_ops = sorted({op.value for (op, _), outcome in results.items() if outcome.failed})
    image = generated_image(run_root, case.id)
    questions = []
    for q in case.checklist:
        v = by_question.get(q.id)
        questions.append({"id": q.id, "op": q.op, "text": q.question, "expected": q.expected,
                          "verdict": v.verdict if v else "missing",
                          "reasons": [f"{vote.judge}: {vote.answer or '-'} — {vote.reason}" for vote in v.votes] if v else []})
    view: dict[str, Any] = {
        "id": case.id, "slot": case.slot, "application": case.application or "", "formula": case.formula,
        "template": case.template, "prompt": case.prompt, "failing_ops": failing_ops,
        "references": [{"label": r.image, "src": images.add(reference_file(cases_dir, case, r.path)),
                        "source": r.source_id} for r in case.references],
        "image": images.add(image), "questions": questions, "tree": None}
    if tree is not None and diag_dir is not None:
        failing = [a.target for a in tree.attributions if a.root is Status.FAIL]
        nodes = []
        for node in tree.nodes:
            path = _node_image(diag_dir, tree, node)
            nodes.append({"id": node.id, "rule": node.rule or "root", "formula": node.formula, "prompt": node.prompt,
                          "evaluated": node.evaluated, "same_as": node.same_as,
                          "image": images.add(path),
                          "status": node.status})
        view["tree"] = {"svg": _tree_svg(tree, failing), "failing": failing, "nodes": nodes,
                        "attributions": [a.model_dump() for a in tree.attributions if a.root is not Status.PASS]}
    return view


def reference_file(cases_dir: Path, case: Case, path: str) -> Path:
    """A case's reference image, which a page embeds: inside the benchmark folder, else a TraceError."""
    return inside(cases_dir, path, f"{cases_dir}: case {case.id}: reference", "benchmark folder")


def _node_image(diag_dir: Path, tree: DiagnosticTree, node: DiagnosticNode) -> Path | None:
    """The generated image a diagnosis node names (relative to the diagnosis folder, or absolute):
    it must be a run folder's image of the node's sub-case (or of the root case), in the
    diagnosis's rounds, the diagnosed run or a merged shard's; any other file is a TraceError."""
    if not node.image:
        return None
    path = Path(node.image) if Path(node.image).is_absolute() else diag_dir / node.image
    try:
        resolved = path.resolve() if path.is_file() else None
    except (OSError, RuntimeError):  # a name too long, a link loop: nothing to read
        resolved = None
    if resolved is None:
        return None  # not there (any more): the page shows none
    if not (resolved.parent.name == IMAGES_DIR and (resolved.parent.parent / RUN_FILE).is_file()
            and resolved.stem in (node.case_id, tree.case_id)):
        shown = node.image if len(node.image) <= 200 else node.image[:200] + "..."
        raise TraceError(f"{diag_dir}: case {tree.case_id}: node {node.id}: image {shown}: not a generated "
                         f"image of a run folder ({IMAGES_DIR}/<sub-case id> beside a {RUN_FILE})")
    return resolved


def _best(rows: list[dict], key: str) -> dict[str, Any]:
    """The best value of a column, and whether it is *separated*: its 95% interval overlaps no
    other run's (a tie, or a run without an interval, is never separated). The page bolds the
    best and marks a separated one with a double dagger."""
    scored = [r for r in rows if r[key] is not None]
    if not scored:
        return {"value": None, "separated": False}
    value = max(r[key] for r in scored)
    leaders = [r for r in scored if r[key] == value]
    others = [r for r in scored if r[key] != value]
    ci = leaders[0]["ci"].get(key)
    separated = (len(leaders) == 1 and bool(others) and ci is not None
                 and all(r["ci"].get(key) is not None and r["ci"][key][1] < ci[0] for r in others))
    return {"value": value, "separated": separated}


def build_report(run_dir: Path, out: Path, *, diagnosis: Path | None = None, compare: Sequence[Path] = (),
                 full_images: bool = False, seed: int = 0, force: bool = False) -> Path:
    """Write the report of ``run_dir`` to ``out`` (one HTML file); returns ``out``. An existing
    ``out`` is refused unless ``force``: then it is replaced, keeping its permissions."""
    out = Path(out)
    if out.is_dir():
        raise TraceError(f"--out {out}: is a folder; give the HTML file to write")
    if out.exists() and not force:
        raise TraceError(f"--out {out}: already exists; choose another file or replace it with --force")
    if not out.parent.is_dir():
        raise TraceError(f"--out {out}: the folder {out.parent} does not exist")
    run = load_run(run_dir)
    others = [load_run(other) for other in compare]
    for other in others:
        if other.manifest.cases_hash != run.manifest.cases_hash:
            raise TraceError(f"--compare {other.root}: a run of another benchmark ({other.cases_dir}, not the "
                             f"cases of {run_dir})")
    runs = [_RunView(_run_name(r.manifest) + (f" (shard {r.manifest.shard})" if r.manifest.shard else ""),
                     r.root, r.manifest, score_folder(r, seed=seed).model_dump(mode="json")) for r in (run, *others)]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # the same model twice (another seed, another judge): number the rows
        for k, r in enumerate(runs, 1):
            r.name = f"{r.name} #{k}"
    trees: dict[str, DiagnosticTree] = {}
    summary = None
    if diagnosis is not None:
        diagnosis = Path(diagnosis)
        identity = DIAGNOSIS_MANIFEST.read(diagnosis)
        summary = SUMMARY.read(diagnosis)
        trees = {tree.case_id: tree for tree in TREES.read(diagnosis)}
        same_run = Path(identity.run_dir).resolve() == Path(run_dir).resolve() or (
            identity.cases_hash == run.manifest.cases_hash and identity.generator == run.manifest.generator
            and identity.judges == run.manifest.judges)
        if not same_run:
            raise TraceError(f"--diagnosis {diagnosis}: a diagnosis of run {identity.run_dir}, not of {run_dir}")

    headline = []
    for r in runs:
        row = {"name": r.name, "cases": r.scores["cases"], "overall": r.scores["overall"],
               "ci": r.scores["ci95"], "abstentions": r.scores["abstentions"]}
        row.update({op: r.scores["operators"].get(op) for op in OPERATORS})
        headline.append(row)
    best = {key: _best(headline, key) for key in (*OPERATORS, "overall")}

    def breakdown(part: str, score: str, n: str, label: Callable[[str], str] = str) -> tuple[dict, dict]:
        """run -> category -> (score, n) of one breakdown of the Scores record, as two tables."""
        return ({r.name: {label(k): v[score] for k, v in r.scores[part].items()} for r in runs},
                {r.name: {label(k): v[n] for k, v in r.scores[part].items()} for r in runs})

    plots = {
        "by_slot": Markup(_plots.lines_by_slot({r.name: r.scores["by_slot"] for r in runs},
                                               breakdown("by_slot", "overall", "cases")[1])),
        "by_subtype": Markup(_plots.bars(*breakdown("by_subtype", "disentangle", "instances"),
                                         title="disentangle by attribute subtype")),
        "by_entities": Markup(_plots.bars(*breakdown("by_entity_count", "anchor", "instances",
                                                    lambda k: f"{k} entit{'y' if str(k) == '1' else 'ies'}"),
                                          title="anchor by entities in the reference image")),
        "by_application": (Markup(_plots.bars(*breakdown("by_application", "overall", "cases"),
                                              title="overall score by application"))
                           if any(r.scores["by_application"] for r in runs) else None),
        "cumulative": (Markup(_plots.cumulative_pass(summary.cumulative_pass,
                                                     {op: int(v["instances"]) for op, v in summary.by_operator.items()}))
                       if summary else None),
    }
    verdicts: dict[str, list[Verdict]] = {}
    for v in read_verdicts(run_dir):
        verdicts.setdefault(v.case_id, []).append(v)
    images = _Images(full_images)
    cases = [_case_view(run.cases[cid], verdicts[cid], Path(run_dir), run.cases_dir, images, trees.get(cid),
                        diagnosis) for cid in verdicts]
    from ..diagnose import rules, sources as source_catalogue

    # the one mapping from a source's key to its display name: diagnose/sources.toml, for the
    # failure-source table and the attributions under each tree alike
    sources = [{"name": name, "title": s.title, "means": s.means} for name, s in source_catalogue().items()]
    titles = {s["name"]: s["title"] for s in sources}
    rule_titles = {r.name: r.title for r in rules()}  # likewise diagnose/rules.toml for the rules
    html = render_html(TEMPLATE, tool=f"tracebench {__version__}", runs=headline, best=best, operators=OPERATORS,
                       plots=plots, cases=cases, summary=summary.model_dump(mode="json") if summary else None,
                       sources=sources, titles=titles, rule_titles=rule_titles,
                       manifests=[r.manifest.model_dump(mode="json") for r in runs],
                       slots=sorted({c["slot"] for c in cases}), run_dir=str(run_dir), images=images.json())
    write_atomic(out, html.encode("utf-8"), mode=stat.S_IMODE(out.stat().st_mode) if out.exists() else None)
    return out
