"""``trace merge``: combine the run folders of shards into one."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from ..errors import TraceError
from ..library import staged_output
from ..records import RUN_MANIFEST, VERDICTS, Case, RunManifest, Verdict, read_cases, read_run_verdicts
from ..records import RunLayout
from ._schedule import abstained_votes

__all__ = ["merge_runs"]


def merge_runs(runs: list[Path], out: Path) -> RunManifest:
    """Merge the shards ``runs`` (of one run: same cases, generator, judges and options) into the
    run folder ``out``: their images, their verdicts in the benchmark's order (a verdict two shards
    hold must agree), and a manifest summing what they hold and spent."""
    if not runs:
        raise TraceError("give the run folders to merge")
    manifests = [RUN_MANIFEST.read(run) for run in runs]
    first = manifests[0]
    for run, m in zip(runs, manifests):
        _check_mergeable(run, m, runs[0], first)
    cases_dir = Path(first.cases_dir)
    cases = {c.id: c for c in read_cases(cases_dir)}
    by_case = _merged_verdicts(runs, cases, cases_dir, first.samples or 1)
    with staged_output(Path(out)) as root:
        _copy_images(runs, root)
        ordered = [v for case_id in cases for v in by_case.get(case_id, [])]
        VERDICTS.write(root, ordered)
        manifest = _merged_manifest(first, manifests, ordered, cases=len(by_case))
        RUN_MANIFEST.write(root, manifest)
    return manifest


def _check_mergeable(run: Path, m: RunManifest, first_run: Path, first: RunManifest) -> None:
    """Refuse a shard ``run`` (manifest ``m``) that is not of the same run as ``first_run``."""
    if (m.cases_hash, m.generator, m.judges, m.judge_batch) != (first.cases_hash, first.generator, first.judges,
                                                               first.judge_batch):
        raise TraceError(f"{run}: a run of other cases, generator or judges than {first_run}; cannot merge")
    if (m.scale, m.ensemble) != (first.scale, first.ensemble):
        raise TraceError(f"{run}: a run on another scale or ensemble than {first_run} (scale {m.answer_scale} "
                         f"vs {first.answer_scale}, ensemble {m.ensemble} vs {first.ensemble}); cannot merge")
    if m.samples != first.samples:
        raise TraceError(f"{run}: a run of {m.samples or 1} samples a case, {first_run} of {first.samples or 1}; "
                         f"cannot merge")
    if (m.max_images, m.collage) != (first.max_images, first.collage):
        raise TraceError(f"{run}: a run with another max_images or collage than {first_run} (max_images "
                         f"{m.max_images} vs {first.max_images}, collage {m.collage} vs {first.collage}); cannot merge")


def _merged_verdicts(runs: list[Path], cases: dict[str, Case], cases_dir: Path, samples: int
                     ) -> dict[str, list[Verdict]]:
    """Case id -> the shards' verdicts of it, each (question, sample) once; one that two shards
    hold differently is refused, as is a verdict of no case of the benchmark."""
    verdicts: dict[tuple[str, str, int | None], Verdict] = {}
    for run in runs:
        if not VERDICTS.path(run).is_file():
            continue  # a shard that holds no case
        for v in read_run_verdicts(run, cases, cases_dir, samples=samples):
            known = verdicts.get((v.case_id, v.question_id, v.sample))
            if known is not None and known != v:
                sample = f" sample {v.sample}" if v.sample else ""
                raise TraceError(f"{run}: case {v.case_id} question {v.question_id}{sample} differs between runs")
            verdicts[(v.case_id, v.question_id, v.sample)] = v
    by_case: dict[str, list[Verdict]] = {}
    for v in verdicts.values():
        by_case.setdefault(v.case_id, []).append(v)
    return by_case


def _copy_images(runs: list[Path], root: Path) -> None:
    """Every shard's generated images into the merged folder ``root``."""
    RunLayout(root).images.mkdir()
    for run in runs:
        images = RunLayout(Path(run)).images
        for image in sorted(images.iterdir()) if images.is_dir() else ():
            shutil.copyfile(image, RunLayout(root).images / image.name)


def _merged_manifest(first: RunManifest, manifests: list[RunManifest], ordered: list[Verdict], *,
                     cases: int) -> RunManifest:
    """The first shard's manifest with the counts of the merged run: its verdicts', and what the
    shards' last invocations left and spent, all of them (not the first shard's alone)."""
    calls: Counter = Counter()
    for m in manifests:
        calls.update(m.calls)  # each shard's last invocation
    spent = _total(m.cost for m in manifests)
    return first.model_copy(update={
        "shard": None, "cases": cases, "verdicts": len(ordered), "calls": dict(calls),
        "cache_hits": sum(m.cache_hits for m in manifests), "tokens": sum(m.tokens for m in manifests),
        "abstentions": sum(not v.outcome.answered for v in ordered),
        "votes_abstained": dict(abstained_votes(ordered)),
        "not_applicable": _total(m.not_applicable for m in manifests),
        "collaged": _total(m.collaged for m in manifests),
        "unfinished": _total(m.unfinished for m in manifests),
        "cost": None if spent is None else round(spent, 6)})


def _total(counts) -> int | None:
    """The sum of a count the shards' manifests hold (None where none holds it)."""
    given = [n for n in counts if n is not None]
    return sum(given) if given else None
