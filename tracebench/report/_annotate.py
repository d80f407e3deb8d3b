"""``trace agree --export-sample N``: a stratified sample of cases and a plain page to label them.

The page (``annotate.html``, self-contained like the report) shows each case's prompt, its
reference images and, given a run, the generated image, with a yes/no choice per question. A
run of ``trace run --samples K`` puts each case's K generations on the page, generation k
labelled as ``<id>~k``, as ``trace agree --human`` names it.
"Download labels" saves ``labels.jsonl``: one ``{"case_id", "question_id", "pass"}`` a line,
``pass`` after the question's polarity, ready for ``trace agree --human labels.jsonl``.
Answers are kept in the browser's local storage while labelling.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

from ..cache import sha256
from ..errors import TraceError
from ..library import staged_output
from ..records import CASES, Case, read_cases, sample_name
from ..run import generated_image, load_run
from ..templating import render_html
from ._report import _Images, reference_file

__all__ = ["export_sample", "stratified"]

TEMPLATE = "report/annotate.html.j2"


def stratified(cases: list[Case], n: int, rng: random.Random) -> list[Case]:
    """``n`` cases spread over slot levels in proportion to their sizes (largest remainders),
    drawn at random within each level; returned in benchmark order."""
    if n < 1:
        raise TraceError(f"--export-sample: {n} must be at least 1")
    groups: dict[int, list[Case]] = defaultdict(list)
    for case in cases:
        groups[case.slot].append(case)
    n = min(n, len(cases))
    quota = {slot: n * len(group) / len(cases) for slot, group in groups.items()}
    take = {slot: int(q) for slot, q in quota.items()}
    for slot in sorted(quota, key=lambda s: (-(quota[s] - take[s]), s))[:n - sum(take.values())]:
        take[slot] += 1
    chosen = {c.id for slot, group in sorted(groups.items()) for c in rng.sample(group, take[slot])}
    return [c for c in cases if c.id in chosen]


def export_sample(cases_dir: Path, out: Path, n: int, *, run_dir: Path | None = None, seed: int = 0) -> list[Case]:
    """Write ``out/annotate.html`` and ``out/sample.jsonl`` for ``n`` stratified cases."""
    cases = list(read_cases(Path(cases_dir)))
    images = _Images(full=False, side=320, small=48_000)  # a labeller judges details: small files as they are
    run = load_run(run_dir) if run_dir is not None else None
    if run is not None and run.cases_dir.resolve() != Path(cases_dir).resolve():
        raise TraceError(f"--judge {run_dir}: a run of {run.cases_dir}, not of {cases_dir}")
    sample = stratified(cases, n, random.Random(f"tracebench-annotate:{seed}"))
    views = []
    generations = (run.manifest.samples or 1) if run is not None else 1
    for case in sample:
        references = [{"label": r.image, "key": images.add(reference_file(Path(cases_dir), case, r.path))}
                      for r in case.references]
        questions = [{"id": q.id, "op": q.op, "text": q.question, "expected": q.expected} for q in case.checklist]
        # a run of --samples K: each generation is labelled on its own, as <id>~k (what --human reads)
        for k in range(generations):
            generated = generated_image(Path(run_dir), case.id, k) if run_dir is not None else None
            views.append({"id": sample_name(case.id, k), "slot": case.slot, "prompt": case.prompt,
                          "generation": k if generations > 1 else None, "references": references,
                          "image": images.add(generated), "questions": questions})
    # answers kept while labelling belong to this sample of this benchmark (file:// pages share storage)
    store = sha256((CASES.path(cases_dir).read_bytes() + " ".join(c.id for c in sample).encode()))
    html = render_html(TEMPLATE, cases=views, images=images.json(), source=str(cases_dir), generations=generations,
                       questions=sum(len(v["questions"]) for v in views), store=store[:16])
    with staged_output(Path(out)) as stage:
        (stage / "annotate.html").write_text(html, encoding="utf-8")
        (stage / "sample.jsonl").write_text("".join(json.dumps({"case_id": c.id, "slot": c.slot}) + "\n"
                                                    for c in sample), encoding="utf-8")
    return sample
