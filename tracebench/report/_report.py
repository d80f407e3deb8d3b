"""``trace report``: one self-contained HTML page of a run (and its diagnosis, and runs to compare).

Everything the page shows is embedded: images as data URIs (WebP thumbnails unless
``full_images``), each distinct image once; plots as inline SVG, styles and the small
filtering script inline. It makes no network request and opens from a file:// URL. Every
text that comes from a prompt, a tag, a model or a judge reaches the page through Jinja2's
autoescaping (``templates/report/report.html.j2`` and ``case.html.j2``); the SVG of plots
and trees is built here from escaped parts.

The page is written as it is rendered: each case's body (``case.html.j2``) is rendered
one case at a time and compressed (zlib, base64) into an attribute of the case's element,
inert data that the page's script unpacks when the case is opened; each image goes out, as
a ``<data>`` element, just before the first case that shows it. Memory holds the run's
records, not the page. (Attributes, not one ``<script type="text/plain">`` per case or
image: Chromium parses thousands of script elements markedly slower.)
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import stat
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from markupsafe import Markup, escape

from .. import __version__
from ..errors import TraceError
from ..images import ImageRefused, decode_reduced, open_image
from ..records import DIAGNOSIS_MANIFEST, RUN_FILE, SUMMARY, TREES, Case, DiagnosticNode, DiagnosticTree, RunManifest
from ..run import IMAGES_DIR, RecordIndex, generated_image, stream_run
from ..safepaths import inside
from ..cache import write_atomic
from ..operators import OPERATORS
from ..outcomes import Outcome, Status
from ..score import (PROTOCOLS, board_rows, case_scores, compare_runs, instance_results, instance_scores, run_names,
                     score_cases)
from ..templating import html_environment
from . import _plots

__all__ = ["build_report"]

TEMPLATE = "report/report.html.j2"
CASE_TEMPLATE = "report/case.html.j2"  # one case's body, unpacked by the page when the case is opened
PREFETCH = 8  # cases ahead whose images threads make while a case renders
THUMBNAIL = 192  # longest side of embedded images (references, generated, nodes), in pixels
WEBP = {"format": "WEBP", "quality": 75, "method": 2}  # thumbnails: a fifth of a 256-pixel PNG's bytes


class _Images:
    """Every image of a page, embedded once: an image whose bytes equal another's (a reference
    shared by cases, a node's image equal to its parent's or to the run's), or whose thumbnail
    does, gets the other's key. ``add`` gives the key of a file's image; new images wait in
    ``fresh`` until ``take`` hands them to the page being written, and ``uris`` (key -> data
    URI) holds them all unless ``keep`` is false (a page streamed out keeps none in memory). The page's script puts them
    into <img> elements when a case is opened, so the browser decodes only what is looked at.

    Every image is opened by :mod:`tracebench.images`: one that declares more pixels than the
    limit, is truncated or is no image gets no key, and :meth:`unshown` says why (the page shows
    the reason where the image would be; the page is still written: one image of a run is no
    reason to withhold the rest)."""

    def __init__(self, full: bool, *, side: int = THUMBNAIL, small: int = 0, keep: bool = True) -> None:
        self.full = full
        self.side = side  # longest side of a thumbnail
        self.small = small  # a PNG, JPEG or WebP file of at most this many bytes is embedded as it is
        self.keep = keep
        self.uris: dict[str, str] = {}
        self.fresh: list[tuple[str, str]] = []
        self._count = 0
        self._paths: dict[Path, str | None] = {}
        self._files: dict[bytes, str | None] = {}  # SHA-256 of a file's bytes -> key
        self._refused: dict[bytes, str] = {}  # SHA-256 of a file's bytes -> why it is not shown
        self._unshown: dict[Path, str] = {}  # path -> why its image is not shown
        self._embedded: dict[bytes, str] = {}  # SHA-256 of a data URI -> key
        self._coming: dict[Path, Future] = {}  # path -> (bytes, data URI, why not), made ahead by threads
        self._pool: ThreadPoolExecutor | None = None

    def prefetch(self, paths: Iterable[Path | None]) -> None:
        """Start making the data URIs of ``paths`` in threads (Pillow decodes, resizes and
        encodes without the GIL), so that :meth:`add` finds them made. The keys and bytes are
        those :meth:`add` alone gives; only the time differs."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, 4)))
        for path in paths:
            if path is not None:
                path = Path(path).resolve()
                if path not in self._paths and path not in self._coming:
                    self._coming[path] = self._pool.submit(self._read, path)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._coming.clear()

    def _read(self, path: Path) -> tuple[bytes, str | None, str | None] | None:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        return (data, *self._uri(data))

    def add(self, path: Path | None) -> str | None:
        """The key of the image at ``path``; None when there is no image to show."""
        if path is None:
            return None
        path = Path(path).resolve()
        if path not in self._paths:
            self._paths[path] = self._key(path)
        return self._paths[path]

    def unshown(self, path: Path | None) -> str | None:
        """Why the image at ``path`` has no key (:meth:`add` it first): it declares more pixels
        than the limit, is truncated, is no image; None when it is shown or there is none."""
        return None if path is None else self._unshown.get(Path(path).resolve())

    def take(self) -> list[tuple[str, str]]:
        """The (key, data URI) pairs added since the last call."""
        fresh, self.fresh = self.fresh, []
        return fresh

    def _key(self, path: Path) -> str | None:
        coming = self._coming.pop(path, None)
        if coming is not None:
            made = coming.result()
            if made is None:
                return None
            data, uri, refused = made
        else:
            try:
                data = path.read_bytes()
            except OSError:
                return None
        digest = hashlib.sha256(data).digest()
        if digest not in self._files:
            if coming is None:
                uri, refused = self._uri(data)
            if refused is not None:
                self._refused[digest] = refused
            key = None
            if uri:  # two files can make one thumbnail: that too is embedded once
                embedded = hashlib.sha256(uri.encode()).digest()
                key = self._embedded.get(embedded)
                if key is None:
                    key = f"i{self._count}"
                    self._count += 1
                    self.fresh.append((key, uri))
                    if self.keep:
                        self.uris[key] = uri
                    self._embedded[embedded] = key
            self._files[digest] = key
        if digest in self._refused:
            self._unshown[path] = self._refused[digest]
        return self._files[digest]

    def _uri(self, data: bytes) -> tuple[str | None, str | None]:
        """The file as it is with ``full`` or when ``small`` (a PNG, JPEG or WebP); else a WebP
        thumbnail, or the file itself when it is already that small in pixels and in bytes. Or
        no URI and why: the file declares more pixels than the limit, is truncated, is no image
        (a file embedded as it is has its header checked: the browser would decode it)."""
        kind = ("png" if data.startswith(b"\x89PNG") else "jpeg" if data.startswith(b"\xff\xd8")
                else "webp" if data[8:12] == b"WEBP" else None)
        try:
            if kind and (self.full or len(data) <= self.small):
                with open_image(data):
                    pass
                return f"data:image/{kind};base64," + base64.b64encode(data).decode(), None
            image = decode_reduced(data, self.side)  # whole, or reduced to at least twice the side
            fits = max(image.size) <= self.side  # then it was not reduced: the file's own size
            image.thumbnail((self.side, self.side))
            out = io.BytesIO()
            image.save(out, **WEBP)
        except ImageRefused as err:
            return None, str(err)
        except (OSError, ValueError) as err:  # the WebP encoder
            return None, f"cannot make a thumbnail ({type(err).__name__})"
        if kind and fits and len(data) <= out.tell():
            return f"data:image/{kind};base64," + base64.b64encode(data).decode(), None
        return "data:image/webp;base64," + base64.b64encode(out.getvalue()).decode(), None

    def json(self) -> Markup:
        return Markup(json.dumps(self.uris, separators=(",", ":")).replace("</", "<\\/"))


# ------------------------------------------------------------------------------ trees

_NODE_W, _NODE_H, _DX, _DY = 46, 22, 58, 50


def _rule_titles() -> dict[str, str]:
    """A rule's key -> its display name (diagnose/rules.toml): the trees' node titles and the
    attributions under them name a step alike ("Composition flattening", not ``flatten``)."""
    from ..diagnose import rules

    return {r.name: r.title for r in rules()}


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
        rule = _rule_titles().get(node.rule, node.rule) if node.rule else "the whole case"
        title = f"{node.id} [{rule}] {node.formula}"
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


@dataclass(frozen=True)
class _CaseContext:
    """What every case of the page is shown with: the reported run's folder and its benchmark
    folder, the page's images, the diagnosis folder and its trees (None without a diagnosis), the
    gating, and the case template with the display names of sources and rules."""

    run_root: Path
    cases_dir: Path
    images: _Images
    diag_dir: Path | None
    trees: RecordIndex[DiagnosticTree] | None  # read one at a time, by case
    gating: str
    body: Any  # the Jinja2 template of a case's body
    titles: dict[str, str]
    rule_titles: dict[str, str]
    colours: dict[str, str]  # a source's key -> the colour of its segment in a rates diagnosis's share bars

    def tree(self, case_id: str) -> DiagnosticTree | None:
        return self.trees.get(case_id) if self.trees is not None else None


def _case_view(case: Case, outcomes: dict[str, Outcome], shown: dict[str, tuple[Status, tuple[str, ...]]],
               tree: DiagnosticTree | None, context: _CaseContext) -> dict[str, Any]:
    """What the page shows of one case. ``outcomes``: question id -> outcome (the run's);
    ``shown``: question id -> (verdict, each judge's answer and reason as a line)."""
    results = instance_results(case, outcomes, context.gating)  # type: ignore[arg-type]
    failing_ops = sorted({op.value for (op, _), outcome in results.items() if outcome.failed})
    image = generated_image(context.run_root, case.id)
    questions = _question_views(case, shown)
    images = context.images
    view: dict[str, Any] = {
        "id": case.id, "slot": case.slot, "application": case.application or "", "formula": case.formula,
        "template": case.template, "prompt": case.prompt, "failing_ops": failing_ops,
        "references": _reference_views(case, context.cases_dir, images),
        "image": images.add(image), "image_unshown": images.unshown(image), "questions": questions, "tree": None,
        "samples": None}
    if tree is not None and context.diag_dir is not None:
        view["tree"] = _tree_view(tree, context.diag_dir, images)
    return view


def _question_views(case: Case, shown: dict[str, tuple[Status, tuple[str, ...]]]) -> list[dict[str, Any]]:
    """The case's checklist, each question with its verdict and its judges' lines ("missing": none)."""
    questions = []
    for q in case.checklist:
        verdict, reasons = shown.get(q.id, ("missing", ()))
        questions.append({"id": q.id, "op": q.op, "text": q.question, "expected": q.expected,
                          "verdict": verdict, "reasons": reasons})
    return questions


def _reference_views(case: Case, cases_dir: Path, images: _Images) -> list[dict[str, Any]]:
    """The case's reference images, in order, a distractor named as such."""
    return [{"label": r.image, "src": images.add(path := reference_file(cases_dir, case, r.path)),
             "unshown": images.unshown(path), "source": r.source_id,
             "distractor": next((f"distractor {d.id}, confuses {d.confuses}" for d in case.distractors
                                 if d.image == r.image), "")} for r in case.references]


def _tree_view(tree: DiagnosticTree, diag_dir: Path, images: _Images) -> dict[str, Any]:
    """The case's diagnostic tree: drawn, its nodes with their images, its attributions but the passing."""
    failing = [a.target for a in tree.attributions if a.root is Status.FAIL]
    nodes = []
    for node in tree.nodes:
        path = _node_image(diag_dir, tree, node)
        nodes.append({"id": node.id, "rule": node.rule or "root", "formula": node.formula, "prompt": node.prompt,
                      "evaluated": node.evaluated, "same_as": node.same_as,
                      "image": images.add(path), "unshown": images.unshown(path),
                      "status": node.status})
    return {"svg": _tree_svg(tree, failing), "failing": failing, "nodes": nodes,
            "attributions": [a.model_dump() for a in tree.attributions if a.root is not Status.PASS]}


def _shown(verdicts, majority: dict[str, Outcome] | None) -> dict[str, tuple[Status, tuple[str, ...]]]:
    """Question id -> (its verdict, each judge's answer and reason as a line); with ``--samples``
    (``majority`` given) the verdict is the samples' majority and the lines name their sample."""
    shown: dict[str, tuple[Status, tuple[str, ...]]] = {}
    for v in verdicts:
        lines = tuple(f"{f'sample {v.sample or 0}, ' if majority is not None else ''}{vote.judge}: "
                      f"{vote.answer or '-'} — {vote.reason}" for vote in v.votes)
        status = v.verdict if majority is None else majority[v.question_id].status
        shown[v.question_id] = (status, shown.get(v.question_id, (status, ()))[1] + lines)
    return shown


def _sample_views(case: Case, samples, context: _CaseContext) -> list[dict[str, Any]]:
    """Each generation of a case (``trace run --samples``): its image and its overall score."""
    views = []
    for k, outcomes in enumerate(samples):
        scores = case_scores(instance_scores(case, outcomes, context.gating))  # type: ignore[arg-type]
        path = generated_image(context.run_root, case.id, k)
        views.append({"label": f"sample {k}", "image": context.images.add(path),
                      "unshown": context.images.unshown(path), "overall": scores.get("overall")})
    return views


def _case_images(case: Case, tree: DiagnosticTree | None, context: _CaseContext) -> list[Path | None]:
    """The image files :func:`_case_view` embeds for ``case``, for making them ahead; a path
    that is refused is left for :func:`_case_view` to report in its turn."""
    run_root, cases_dir, diag_dir = context.run_root, context.cases_dir, context.diag_dir
    finders: list[Callable[[], Path | None]] = [lambda: generated_image(run_root, case.id)]
    finders += [lambda path=ref.path: reference_file(cases_dir, case, path) for ref in case.references]
    if tree is not None and diag_dir is not None:
        finders += [lambda node=node: _node_image(diag_dir, tree, node) for node in tree.nodes]
    paths = []
    for find in finders:
        try:
            paths.append(find())
        except TraceError:
            pass
    return paths


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


def _best(rows: list[dict], key: str, comparison=None) -> dict[str, Any]:
    """The best value of a column, and whether it is *separated*: significantly ahead of every other
    run with a value in the column (``trace compare``'s paired differences, clustered by template;
    the ``avg`` column by the cases' overall scores), the p-values of the leader against the others
    Holm-corrected within the column. A tie is never separated. The page bolds the best and marks
    a separated one with a double dagger."""
    from ..score import holm

    scored = [r for r in rows if r[key] is not None]
    if not scored:
        return {"value": None, "separated": False}
    value = max(r[key] for r in scored)
    leaders = [r for r in scored if r[key] == value]
    others = [r for r in scored if r is not leaders[0]]
    if len(leaders) != 1 or not others or comparison is None:
        return {"value": value, "separated": False}
    metric = "overall" if key == "avg" else key
    leader = leaders[0]["root"]
    found = []
    for other in others:
        d = next((d for d in comparison.differences if d.metric == metric and {d.a, d.b} == {leader, other["root"]}),
                 None)
        if d is None or d.difference is None or d.p is None or (d.difference > 0) != (d.a == leader):
            return {"value": value, "separated": False}
        found.append(d.p)
    return {"value": value, "separated": all(p < 0.05 for p in holm(found))}  # type: ignore[operator]


def build_report(run_dir: Path, out: Path, *, diagnosis: Path | None = None, compare: Sequence[Path] = (),
                 full_images: bool = False, seed: int = 0, force: bool = False, gating: str = "within") -> Path:
    """Write the report of ``run_dir`` to ``out`` (one HTML file); returns ``out``. An existing
    ``out`` is refused unless ``force``: then it is replaced, keeping its permissions."""
    out = Path(out)
    _check_out(out, force)
    # every run is read as a stream (a case and its verdicts at a time): once for its scores,
    # and the reported run once more for its cases, so memory does not grow with the benchmark
    run = stream_run(run_dir)
    others = [stream_run(other) for other in compare]
    _check_compared(run, others, run_dir)
    scored = [(r.root, r.manifest, score_cases(r.manifest, ((item.case, item.samples) for item in r), root=r.root,
                                               seed=seed, gating=gating, protocols=PROTOCOLS))
              for r in (run, *others)]
    runs = [_RunView(name, root, manifest, scores.model_dump(mode="json"))
            for name, (root, manifest, scores) in zip(run_names([m for _, m, _ in scored]), scored)]
    diag_dir = None if diagnosis is None else Path(diagnosis)
    summary, trees = _read_diagnosis(diag_dir, run, run_dir) if diag_dir is not None else (None, None)
    headline = _headline(scored)
    comparison = compare_runs([r.root for r in runs], seed=seed, gating=gating) if len(runs) > 1 else None
    best = {key: _best(headline, key, comparison) for key in (*OPERATORS, "avg")}
    plots = _plots_of(runs, summary)
    sources = _sources()
    images = _Images(full_images, keep=False)
    context = _CaseContext(run_root=Path(run_dir), cases_dir=run.cases_dir, images=images, diag_dir=diag_dir,
                           trees=trees, gating=gating, body=html_environment().get_template(CASE_TEMPLATE),
                           titles={s["name"]: s["title"] for s in sources},
                           rule_titles=_rule_titles(),  # likewise diagnose/rules.toml for the rules
                           colours={s["name"]: s["colour"] for s in sources})
    page = html_environment().get_template(TEMPLATE).generate(
        tool=f"tracebench {__version__}", runs=_overall(runs), board=headline, best=best,
        protocols=_protocol_rows(runs), operators=OPERATORS, plots=plots, cases=_case_items(run, context),
        summary=summary.model_dump(mode="json") if summary else None, sources=sources,
        manifests=[r.manifest.model_dump(mode="json") for r in runs],
        slots=sorted(int(slot) for slot in runs[0].scores["by_slot"]), run_dir=str(run_dir))
    try:
        write_atomic(out, _chunks(page), mode=stat.S_IMODE(out.stat().st_mode) if out.exists() else None)
    finally:
        images.close()
    return out


def _check_out(out: Path, force: bool) -> None:
    """Refuse an ``--out`` that is a folder, exists (unless ``force``) or lies in no folder."""
    if out.is_dir():
        raise TraceError(f"--out {out}: is a folder; give the HTML file to write")
    if out.exists() and not force:
        raise TraceError(f"--out {out}: already exists; choose another file or replace it with --force")
    if not out.parent.is_dir():
        raise TraceError(f"--out {out}: the folder {out.parent} does not exist")


def _check_compared(run, others: list, run_dir: Path) -> None:
    """Refuse a ``--compare`` run of another benchmark or judged on another scale than ``run``."""
    for other in others:
        if other.manifest.cases_hash != run.manifest.cases_hash:
            raise TraceError(f"--compare {other.root}: a run of another benchmark ({other.cases_dir}, not the "
                             f"cases of {run_dir})")
        if other.manifest.answer_scale != run.manifest.answer_scale:
            raise TraceError(f"--compare {other.root}: judged on the {other.manifest.answer_scale} scale, not the "
                             f"{run.manifest.answer_scale} one of {run_dir}: their values do not compare")


def _read_diagnosis(diagnosis: Path, run, run_dir: Path) -> tuple[Any, RecordIndex[DiagnosticTree]]:
    """The diagnosis's summary and its trees (read one at a time, by case), refused unless it is
    a diagnosis of ``run``."""
    identity = DIAGNOSIS_MANIFEST.read(diagnosis)
    summary = SUMMARY.read(diagnosis)
    trees = RecordIndex(TREES, diagnosis, lambda tree: tree.case_id)
    same_run = Path(identity.run_dir).resolve() == Path(run_dir).resolve() or (
        identity.cases_hash == run.manifest.cases_hash and identity.generator == run.manifest.generator
        and identity.judges == run.manifest.judges)
    if not same_run:
        raise TraceError(f"--diagnosis {diagnosis}: a diagnosis of run {identity.run_dir}, not of {run_dir}")
    return summary, trees


def _overall(runs: list[_RunView]) -> list[dict[str, Any]]:
    """The overall lines above the headline table, in the order the runs were given in (the
    reported run first)."""
    return [{"name": r.name, "cases": r.scores["cases"], "avg": r.scores["avg"], "ci": r.scores["ci95"],
             "samples": r.scores.get("samples")} for r in runs]


def _headline(scored: list) -> list[dict[str, Any]]:
    """The headline table: trace leaderboard's board (best first; runs of other judges marked)."""
    headline = []
    for row in board_rows(scored, mixed=True):
        line = {"name": row.name, "root": row.run, "cases": row.cases, "avg": row.avg, "ci": row.ci95,
                "abstentions": row.abstentions, "differs": row.differs}
        line.update({op: row.operators.get(op) for op in OPERATORS})
        headline.append(line)
    return headline


def _protocol_rows(runs: list[_RunView]) -> list[dict[str, Any]]:
    return [{"name": r.name, **{name: p for name, p in (r.scores.get("protocols") or {}).items()}} for r in runs]


def _breakdown(runs: list[_RunView], part: str, score: str, n: str,
               label: Callable[[str], str] = str) -> tuple[dict, dict]:
    """run -> category -> (score, n) of one breakdown of the Scores record, as two tables."""
    return ({r.name: {label(k): v[score] for k, v in (r.scores.get(part) or {}).items()} for r in runs},
            {r.name: {label(k): v[n] for k, v in (r.scores.get(part) or {}).items()} for r in runs})


def _plots_of(runs: list[_RunView], summary) -> dict[str, Markup | None]:
    """The page's plots (SVG); those of clutter breakdowns (docs/clutter.md), applications and a
    diagnosis only where the runs have them."""
    cluttered = any(r.scores.get("by_inputs") for r in runs)

    def bars(part: str, score: str, n: str, title: str, label: Callable[[str], str] = str) -> Markup:
        return Markup(_plots.bars(*_breakdown(runs, part, score, n, label), title=title))

    return {
        "by_slot": Markup(_plots.lines_by_slot({r.name: r.scores["by_slot"] for r in runs},
                                               _breakdown(runs, "by_slot", "overall", "cases")[1])),
        "by_subtype": bars("by_subtype", "disentangle", "instances", "disentangle by attribute subtype"),
        "by_entities": bars("by_entity_count", "anchor", "instances", "anchor by entities in the reference image",
                            lambda k: f"{k} entit{'y' if str(k) == '1' else 'ies'}"),
        "by_application": (bars("by_application", "overall", "cases", "overall score by application")
                           if any(r.scores["by_application"] for r in runs) else None),
        "by_inputs": (bars("by_inputs", "overall", "cases", "overall score by input images (MacroBench's bins)",
                           lambda k: f"{k} images") if cluttered else None),
        "by_distractors": (bars("by_distractors", "overall", "cases", "overall score by distractors",
                                lambda k: f"{k} distractor{'' if str(k) == '1' else 's'}") if cluttered else None),
        "rejection": (bars("rejection", "rate", "questions", "rejection: distractors not taken, by operator")
                      if cluttered else None),
        "cumulative": (Markup(_plots.cumulative_pass(summary.cumulative_pass,
                                                     {op: int(v["instances"]) for op, v in summary.by_operator.items()}))
                       if summary else None),
    }


# the colour of each source's segment in a rates diagnosis's share bars (Okabe and Ito's palette,
# told apart with any colour vision); a source diagnose/sources.toml adds later takes the next spare one
SOURCE_COLOURS = {"stable_success": "#009e73", "persistent_failure": "#d55e00", "global_reference": "#0072b2",
                  "joint_composition": "#e69f00", "relation_attribute": "#cc79a7", "reference_clutter": "#56b4e9",
                  "undetermined": "#999999"}
_SPARE_COLOURS = ("#f0e442", "#000000", "#8c564b", "#17becf")


def _sources() -> list[dict[str, str]]:
    """The failure sources as the page lists them: the one mapping from a source's key to its
    display name (diagnose/sources.toml), for the failure-source table and the attributions under
    each tree alike, and the colour of its segment in a share bar."""
    from ..diagnose import sources as source_catalogue

    spare = iter(_SPARE_COLOURS * len(source_catalogue()))
    return [{"name": name, "title": s.title, "means": s.means,
             "colour": SOURCE_COLOURS.get(name) or next(spare)} for name, s in source_catalogue().items()]


def _case_items(run, context: _CaseContext) -> Iterator[dict[str, Any]]:
    """The cases as the page lists them, one at a time: each with its body rendered and
    packed, and the images it shows first; threads make the images of the next cases."""
    items = iter(run)
    window: deque[tuple[Any, DiagnosticTree | None]] = deque()

    def ahead() -> None:  # the images of the next cases, made by threads while earlier cases render
        while len(window) <= PREFETCH:
            item = next(items, None)
            if item is None:
                return
            tree = context.tree(item.case.id)
            window.append((item, tree))
            context.images.prefetch(_case_images(item.case, tree, context))

    ahead()
    while window:
        item, tree = window.popleft()
        ahead()
        yield _case_item(item, tree, context)


def _case_item(item, tree: DiagnosticTree | None, context: _CaseContext) -> dict[str, Any]:
    """One case of the page: its body rendered, compressed and packed, and the images it shows
    first (``item``: the case with its verdicts, as the run's stream gives it)."""
    # what the page shows of each verdict: its status and each judge's answer and reason
    samples = item.samples
    outcomes = item.outcomes  # with --samples: each question's majority over the samples
    shown = _shown(item.verdicts, outcomes if len(samples) > 1 else None)
    view = _case_view(item.case, outcomes, shown, tree, context)
    if len(samples) > 1:
        view["samples"] = _sample_views(item.case, samples, context)
    html = context.body.render(case=view, titles=context.titles, rule_titles=context.rule_titles,
                               colours=context.colours)
    return {"id": view["id"], "slot": view["slot"], "application": view["application"],
            "failing_ops": view["failing_ops"], "tree": view["tree"] is not None,
            "body": base64.b64encode(zlib.compress(html.encode("utf-8"), 9)).decode(),
            "images": context.images.take()}


def _chunks(parts: Iterable[str], size: int = 1 << 16) -> Iterator[bytes]:
    """The page's text as UTF-8 chunks of about ``size`` characters (Jinja2 yields many small parts)."""
    buffer: list[str] = []
    held = 0
    for part in parts:
        buffer.append(part)
        held += len(part)
        if held >= size:
            yield "".join(buffer).encode("utf-8")
            buffer, held = [], 0
    if buffer:
        yield "".join(buffer).encode("utf-8")
