"""The judge exam (``trace agree --exam --judge SPEC``): a small fixed benchmark and zoo outputs whose
answers are known, built on first use like the default library, then judged by SPEC and examined
against the truth (:func:`tracebench.report.examine`).

The exam is 48 cases (6 per slot level 1-8, seed 0, no application cases) with 2 distractors
each, drawn by the zoo under ``EXAM_PROFILE``: global and composition interference, relation
blindness, distractor confusion and partial failures, so every aspect, both polarities and
every scale's middle answers occur. Its folder is named by the tracebench version and a hash
of what makes it (the profile, the sampling arguments), so a changed exam is built anew; the
judge's run is kept beside it, by judge and scale, so asking again makes no call.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from .. import __version__
from ..derived import cache_root
from ..errors import TraceError
from ..records import CASES
from ..scales import answer_scale

__all__ = ["EXAM_PROFILE", "exam_benchmark", "take_exam"]

EXAM_PROFILE = "global-interference,composition-interference:2,relation-blind,distractor-confusion:0.3,partial:0.25"
_SAMPLE = {"slots": tuple(range(1, 9)), "per_slot": 6, "seed": 0, "applications": False}
_DISTRACTORS = 2


def _name() -> str:
    digest = hashlib.sha256(repr((EXAM_PROFILE, sorted(_SAMPLE.items()), _DISTRACTORS)).encode()).hexdigest()[:12]
    return f"exam-{__version__}-{digest}"


def exam_benchmark() -> Path:
    """The exam's benchmark folder, sampled into the cache on first use (concurrent first uses are
    safe: each samples privately and the first rename wins)."""
    from ..cache import make_stage
    from ..sample import ClutterSpec, SampleOptions, sample_benchmark

    root = cache_root() / _name()
    bench = root / "benchmark"
    if CASES.path(bench).is_file():
        return bench
    root.mkdir(parents=True, exist_ok=True)
    work = make_stage(root, ".benchmark.")
    try:
        sample_benchmark(work / "benchmark", SampleOptions(clutter=ClutterSpec(_DISTRACTORS, _DISTRACTORS), **_SAMPLE))
        try:
            os.rename(work / "benchmark", bench)
        except OSError:
            if not CASES.path(bench).is_file():
                raise TraceError(f"{bench}: exists but is not a complete exam; remove it and retry") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return bench


def take_exam(judge: str, *, settings=None, out: Path | None = None, concurrency: int = 8, seed: int = 0,
              retry_abstained: bool = False) -> dict:
    """Judge the exam with ``judge`` (a judge spec) on ``settings.scale`` and examine it against the
    truth; the run goes to ``out`` (default: beside the exam, by judge and scale) and is resumed
    there (``retry_abstained``: asking again where the judge gave no answer)."""
    from ..providers import ModelSettings
    from ..run import RunOptions, run_benchmark
    from ._agree import examine

    settings = settings or ModelSettings()
    bench = exam_benchmark()
    if out is None:
        key = hashlib.sha256(f"{judge}\n{answer_scale(settings.scale)}".encode()).hexdigest()[:16]
        out = bench.parent / "runs" / key
    run_benchmark(bench, out, RunOptions(generator=f"synthetic:{EXAM_PROFILE}", judges=[judge], settings=settings,
                  concurrency=concurrency, retry_abstained=retry_abstained))
    return examine(bench, out, seed=seed)
