"""What a run is asked to do (:class:`RunOptions`, checked once, built alike by ``trace run``,
``trace rejudge``, ``trace diagnose``'s rounds and the Python API) and what it is
(:class:`RunIdentity`: the fields of ``run.json`` that a resumed run must share, the defaults
that follow from the providers, and the resume comparison)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from .. import __version__
from ..cache import TEMPORARY_PREFIX
from ..errors import TraceError, other_fields
from ..outcomes import ENSEMBLES
from ..choices import Executor, JudgeBatch, executor_of
from ..providers import JUDGE_TEMPLATES, SHOWN_TEMPLATES, Generator, asking, Judge, ModelSettings, RayGenerator, RunImages
from ..records import MAX_SAMPLES, RUN_FILE, RUN_MANIFEST, VERDICTS, RunManifest
from ..scales import Scale, answer_scale, recorded_scale
from ..templating import template_hash

__all__ = ["RESUME_FIELDS", "RunIdentity", "RunOptions", "default_ensemble"]



@dataclass(frozen=True)
class RunOptions:
    """Everything a run is asked besides its benchmark and its folder; checked when made (a
    TraceError naming the option). See :func:`~tracebench.run.run_benchmark` for each one."""

    generator: str | Generator
    judges: Sequence[str]
    settings: ModelSettings = field(default_factory=ModelSettings)
    concurrency: int = 8
    shard: tuple[int, int] | None = None
    judge_batch: str = "case"
    retry_abstained: bool = False
    cache_dir: Path | None = None
    progress: bool | None = None
    ensemble: str | None = None
    max_images: int | None = None
    collage: bool = False
    collage_cases: frozenset[str] = frozenset()
    max_calls: int | None = None
    allow_model_change: bool = False
    dry_run: bool = False
    prices: dict | None = None
    executor: str | RayGenerator = "local"
    workers: int = 1
    gpus_per_worker: float = 0.0
    ray_address: str | None = None
    max_cost: float | None = None
    samples: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "judges", tuple(self.judges))
        object.__setattr__(self, "settings", self.settings or ModelSettings())
        self._check_calls()
        self._check_budgets()
        self._check_executor()

    def _check_calls(self) -> None:
        if self.concurrency < 1:
            raise TraceError(f"--concurrency: {self.concurrency} must be at least 1")
        if self.judge_batch not in tuple(JudgeBatch):
            raise TraceError(f"--judge-batch: {self.judge_batch!r} is neither case nor op")
        if self.ensemble is not None and self.ensemble not in ENSEMBLES:
            raise TraceError(f"--ensemble: {self.ensemble!r} is neither {' nor '.join(ENSEMBLES)}")
        if self.max_images is not None and self.max_images < 1:
            raise TraceError(f"--max-images: {self.max_images} must be at least 1")
        samples = self.samples
        if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= MAX_SAMPLES:
            raise TraceError(f"--samples: {samples!r} must be a whole number from 1 to {MAX_SAMPLES}")
        if samples > 1 and self.settings.sample:
            raise TraceError(f"--samples: a run of generation {self.settings.sample} of each case makes one sample")

    def _check_budgets(self) -> None:
        if self.max_calls is not None and self.max_calls < 1:
            raise TraceError(f"--max-calls: {self.max_calls} must be at least 1")
        cost = self.max_cost
        if cost is not None and not (isinstance(cost, (int, float)) and 0 < cost < float("inf")):
            raise TraceError(f"--max-cost: {cost} must be a positive amount")
        if cost is not None and self.prices is None:
            raise TraceError("--max-cost: give --price-file FILE, the prices the budget is counted in")

    def _check_executor(self) -> None:
        if not isinstance(self.executor, RayGenerator):
            executor_of(self.executor)
        if self.executor == Executor.RAY and not isinstance(self.generator, str):
            raise TraceError("--executor ray: the images are an earlier run's; there is nothing to generate")
        if self.workers < 1:
            raise TraceError(f"--workers: {self.workers} must be at least 1")


def default_ensemble(scale: Scale | str) -> str:
    """How several judges combine unless told: the scale's rule (the mean, the paper's; the median
    on a graded scale)."""
    return Scale(scale).spec.ensemble


# what a resumed run must share with the run in its folder (anything else in run.json is counted)
RESUME_FIELDS = ("cases_hash", "generator", "seed", "sample", "judges", "judge_batch", "ensemble", "shard",
                 "max_images", "collage", "scale", "rejudged_from", "generator_options", "samples")


@dataclass(frozen=True)
class RunIdentity:
    """A run's identity: its ``run.json`` before any case is counted, with the defaults that
    follow from its providers (the scale, how the judges combine, the limit on references)."""

    manifest: RunManifest
    scale: Scale
    limit: int | None  # the most references the generator takes (None: no limit)

    @classmethod
    def of(cls, options: RunOptions, settings: ModelSettings, cases: tuple[Path, str], generator: Generator,
           judges: Sequence[Judge]) -> RunIdentity:
        """The identity of a run of ``cases`` (its folder and the hash of its ``cases.jsonl``)."""
        scale = answer_scale(settings.scale)
        source = generator.manifest if isinstance(generator, RunImages) else None  # trace rejudge's run
        ensemble = (options.ensemble or default_ensemble(scale)) if len(judges) > 1 else None
        limit = options.max_images if options.max_images is not None else generator.max_images
        if options.collage and limit is None:
            raise TraceError(f"--collage: the generator {generator.spec} declares no max_images; give --max-images N")
        shard, samples = options.shard, options.samples
        manifest = RunManifest(
            tool=f"tracebench {__version__}", cases_dir=str(cases[0]), cases_hash=cases[1], generator=generator.spec,
            seed=source.seed if source else settings.seed if generator.spec.startswith("synthetic:") else None,
            sample=source.sample if source else settings.sample,
            judges=tuple(j.spec for j in judges), judge_batch=options.judge_batch, ensemble=ensemble,
            endpoints={p.spec: e for p in (generator, *judges) if (e := p.endpoint()) is not None},
            loaded_from=_loaded_from(options, source, generator, judges),
            hashes={"judge_templates": template_hash(*JUDGE_TEMPLATES),  # and an op batch's line on what it shows
                    **({"judge_shown": template_hash(*SHOWN_TEMPLATES)} if options.judge_batch == JudgeBatch.OP
                       else {})},
            shard=f"{shard[0]}/{shard[1]}" if shard else None, cases=0, verdicts=0, calls={}, cache_hits=0,
            abstentions=0, tokens=0, max_images=limit, collage=None if limit is None else options.collage,
            scale=recorded_scale(scale),
            rejudged_from=str(generator.run_dir.resolve()) if source else None,
            generator_options=dict(generator.options) or None, samples=samples if samples > 1 else None,
            sample_seeds=_sample_seeds(generator, samples))
        return cls(manifest, scale, limit)

    def resume(self, out: Path, kept_any: Callable[[], bool]) -> tuple[RunIdentity, bool]:
        """This identity over the run folder ``out`` may hold: (the identity to write, whether to
        start over). A run of other fields is refused once it kept a case (``kept_any()``); one
        that kept none (a typo in a spec, a wrong URL) takes the corrected command and starts
        over. The same run keeps the models its judges answered with so far (pinned)."""
        if not RUN_MANIFEST.path(out).is_file():
            if VERDICTS.path(out).exists():
                raise TraceError(f"{out}: holds verdicts but no {RUN_FILE}; choose another --out")
            if out.is_dir() and any(not p.name.startswith(TEMPORARY_PREFIX) for p in out.iterdir()):
                raise TraceError(f"--out {out}: is not empty and not a run folder (no {RUN_FILE}); "
                                 f"choose another --out")
            return self, False
        old = RUN_MANIFEST.read(out)
        changed = [f for f in RESUME_FIELDS if getattr(old, f) != getattr(self.manifest, f)]
        if changed and kept_any():
            raise TraceError(f"{out}: holds a run with {other_fields(changed)}; choose another --out")
        if changed:
            return self, True
        pinned = self.manifest.model_copy(update={"judge_models": old.judge_models,
                                                  "judge_model_changes": old.judge_model_changes})
        return replace(self, manifest=pinned), False


def _loaded_from(options: RunOptions, source: RunManifest | None, generator: Generator,
                 judges: Sequence[Judge]) -> dict[str, str]:
    """spec -> the plugin file a provider was loaded from, as given (and a rejudged run's generator's)."""
    given = (options.generator, *options.judges)
    return {**({generator.spec: source.loaded_from[generator.spec]}
               if source and generator.spec in source.loaded_from else {}),
            **{p.spec: spec for spec, p in zip(given, (generator, *judges))
               if isinstance(spec, str) and spec.startswith("python:") and spec != p.spec}}


def _sample_seeds(generator: Generator, samples: int) -> tuple[int, ...] | None:
    """The seed of each of a run's samples (``run.json``), for a generator that takes one."""
    if samples < 2:
        return None
    seeds = []
    for k in range(samples):
        with asking(k):
            seeds.append(generator.sample_seed())
    return None if any(seed is None for seed in seeds) else tuple(seeds)  # type: ignore[arg-type]


def settings_for(options: RunOptions, library: Path | None) -> ModelSettings:
    """The run's model settings: the synthetic generator's library defaults to the benchmark's."""
    settings = options.settings
    return replace(settings, library=library) if settings.library is None else settings
