"""``trace rejudge``: the images of an earlier run judged again, by other judges or on another scale.

The new run is a run like any other (the harness's cache, resume, abstentions, ensembles and
``run.json``), whose generator is the earlier run's images (:class:`~tracebench.providers.RunImages`):
it keeps that run's generator identity, seed, sample, limit on images and shard, and records
where its images came from (``rejudged_from``). So ``trace agree`` and ``trace compare`` set
judges side by side on identical pixels, and a rejudge with the source's own judge and cache
gives the source's verdicts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from ..cache import file_sha256
from ..errors import TraceError
from ..providers import ModelSettings, RunImages
from ..records import CASES, IMAGES_DIR, RUN_MANIFEST, RunLayout, RunManifest
from ._harness import run_benchmark
from ._options import RunOptions

__all__ = ["rejudge_run"]


def rejudge_run(run_dir: Path, out: Path, *, judges: Sequence[str], settings: ModelSettings | None = None,
                cases_dir: Path | None = None, shard: tuple[int, int] | None = None, **options) -> RunManifest:
    """Judge the images of ``run_dir`` with ``judges`` into the run folder ``out`` (resumed as
    ``trace run`` resumes); ``options`` as :func:`run_benchmark`'s (concurrency, judge_batch,
    ensemble, cache_dir, retry_abstained ...)."""
    run_dir, out = Path(run_dir), Path(out)
    source = RUN_MANIFEST.read(run_dir)
    if out.resolve() == run_dir.resolve():
        raise TraceError(f"--out {out}: is the run being re-judged; write the new run elsewhere")
    bench = Path(cases_dir or source.cases_dir)
    if not CASES.path(bench).is_file():
        raise TraceError(f"{bench}: not a benchmark folder (no {CASES.name}); give the run's benchmark with --cases")
    if file_sha256(CASES.path(bench)) != source.cases_hash:
        raise TraceError(f"{bench}: not the benchmark {run_dir} was made from (its {CASES.name} differs)")
    images = RunLayout(run_dir).images
    if not images.is_dir():
        raise TraceError(f"{run_dir}: holds no {IMAGES_DIR}/ folder: no image to judge")
    if source.shard is not None:
        given = f"{shard[0]}/{shard[1]}" if shard else None
        if given not in (None, source.shard):
            raise TraceError(f"--shard {given}: {run_dir} holds the images of shard {source.shard} only")
        first, count = source.shard.split("/")
        shard = (int(first), int(count))
    settings = replace(settings or ModelSettings(), seed=source.seed if source.seed is not None else 0,
                       sample=source.sample)
    return run_benchmark(bench, out, RunOptions(generator=RunImages(run_dir, images, source), judges=judges,
                         settings=settings, shard=shard, max_images=source.max_images,
                         collage=bool(source.collage), samples=source.samples or 1, **options))
