"""``trace diagnose RUN``: the diagnosis of a run folder's cases (:func:`diagnose_run`), as
:class:`DiagnoseOptions` asks: the providers named (never taken from the run folder unless
built in and offline), the cases chosen, then a window of roots at a time planned and
diagnosed (:func:`~tracebench.diagnose.diagnose`), each round of sub-cases a benchmark folder
run through the ``trace run`` harness (:class:`_Rounds`)."""

from __future__ import annotations

import itertools
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Sequence

from .. import __version__
from ..cache import remove_stale_temporaries
from ..errors import TraceError, other_fields
from ..formula import canonical
from ..outcomes import Outcome
from ..providers import Generator, ModelSettings, RayGenerator, resolve_spec, runs_offline, synthetic_profile
from ..outcomes import Ensemble
from ..choices import Executor, executor_of
from ..records import (CALL_CACHE_DIR, DIAGNOSIS_MANIFEST, MAX_SAMPLES, ROUNDS_DIR, RUN_MANIFEST, SUMMARY, TREES, VERDICTS,
                       Case, DiagnosisLayout, DiagnosisManifest, DiagnosisSummary, RunManifest)
from ..resources import data_hash
from ..run import (RunOptions, abstention_reason, default_ensemble, generated_image, library_of, make_providers,
                   run_benchmark, stream_run)
from ..safepaths import owned_folder
from ..sample import read_sample_manifest
from ..scales import recorded_scale
from ..score import Gating
from ._diagnose import (STRATEGIES, WINDOW, Evaluated, RatesState, RootEvidence, _chosen_items, _choose, _Chosen, _short,
                        _streamed, _streamed_samples, _SummaryTally, _write_node_folder, diagnose, plan_trees)
from ._rules import RULES_FILE, SOURCES_FILE

__all__ = ["DiagnoseOptions", "METHODS", "RATES_NO_SHARD", "diagnose_run", "named_providers"]

FIRST_PASS, RATES = "first-pass", "rates"
METHODS = (FIRST_PASS, RATES)
# rates fits its priors on a window's counts (carried to the next): a larger window by default
RATES_WINDOW = 1000
# why --method rates is not sharded: what one shard estimates depends on the cases of the others
RATES_NO_SHARD = ("--method rates takes no --shard: it fits its priors on, and spends --budget across, all the "
                  "cases it diagnoses together, so shards would not merge into the unsharded diagnosis; diagnose "
                  "the run in one folder (--concurrency or --executor ray spread its generations)")



@dataclass(frozen=True)
class DiagnoseOptions:
    """Everything a diagnosis is asked besides its run and its folder; checked when made.

    ``cases``: failing, all, or ids; ``window`` roots at a time (:data:`WINDOW`); ``gating`` as
    ``trace score --gating``; ``repeats`` generations of every node (the root's first is the
    run's), decided by majority (None: 1, or for a run of ``--samples K`` K, so that every node is
    judged as the run judged its cases). ``generator``/``judges``: None takes the run's only when
    built in and offline (:func:`named_providers`). ``executor``: ``local`` (the nodes' images made
    here) or ``ray``, as ``trace run``'s: one set of ``workers`` Ray actors, started at the first
    round, makes the images of every round and every repeat, and is stopped at the end."""

    cases: str = "failing"
    generator: str | None = None
    judges: Sequence[str] | None = None
    strategy: str = "full"
    settings: ModelSettings | None = None
    concurrency: int = 8
    judge_batch: str | None = None
    cache_dir: Path | None = None
    shard: tuple[int, int] | None = None
    retry_abstained: bool = False
    progress: bool | None = None
    window: int | None = None
    gating: Gating | str = Gating.WITHIN
    repeats: int | None = None
    executor: str = "local"
    workers: int = 1
    gpus_per_worker: float = 0.0
    ray_address: str | None = None
    method: str = FIRST_PASS
    budget: float = 60.0
    delta: float = 0.2
    threshold: float = 0.5
    flip: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gating", Gating(self.gating))
        if self.method not in METHODS:
            raise TraceError(f"--method: {self.method!r} is neither first-pass nor rates")
        object.__setattr__(self, "window", self.window or (RATES_WINDOW if self.method == RATES else WINDOW))
        if self.strategy not in STRATEGIES:
            raise TraceError(f"--strategy: {self.strategy!r} is neither full nor adaptive")
        if self.method == RATES:
            if self.strategy != "full" or (self.repeats or 1) > 1:
                raise TraceError("--method rates decides how many generations each node gets (--budget): it takes "
                                 "neither --strategy adaptive nor --repeats")
            if self.shard is not None:
                raise TraceError(RATES_NO_SHARD)
            try:
                self.rates_settings()
            except ValueError as e:
                flag = {"budget": "--budget", "delta": "--delta", "threshold": "--confidence",
                        "flip": "--flip-rate"}[str(e).split()[0]]
                raise TraceError(f"{flag}: {str(e).split(': ', 1)[1]}") from None
        self.check_repeats(self.repeats)
        executor_of(self.executor)
        if self.workers < 1:  # as trace run: refused whatever the executor
            raise TraceError(f"--workers: {self.workers} must be at least 1")

    def rates_settings(self):
        """The :class:`~._rates.RatesSettings` of ``--method rates`` (numpy loads with it)."""
        from ._rates import RatesSettings

        return RatesSettings(budget=self.budget, delta=self.delta, threshold=self.threshold, flip=self.flip)

    @property
    def paper_stop(self) -> bool:
        """Whether the trees stop as the paper does, a node holding one attribute transfer ``E ⊕ g``
        a leaf (first-pass); rates splits it too, into its carrier alone, to compare the carrier's
        failure rate with and without the attribute."""
        return self.method != RATES

    @property
    def rates_record(self) -> dict[str, float] | None:
        """What diagnosis.json records of ``rates`` (None for first-pass)."""
        if self.method != RATES:
            return None
        return {"budget": self.budget, "delta": self.delta, "threshold": self.threshold, "flip": self.flip}

    @staticmethod
    def check_repeats(repeats: int | None) -> None:
        if repeats is not None and (not isinstance(repeats, int) or isinstance(repeats, bool)
                                    or not 1 <= repeats <= MAX_SAMPLES):
            raise TraceError(f"--repeats: {repeats!r} must be a whole number from 1 to {MAX_SAMPLES}")


# recorded models listed in the message of a refusal (a record may name any number)
_LISTED = 5


def named_providers(run_dir: Path, manifest: RunManifest, generator: str | None, judges: Sequence[str] | None,
                    settings: ModelSettings) -> tuple[str, tuple[str, ...], ModelSettings]:
    """The generator and judges of a diagnosis, and the settings they run with: those the
    command line names, else the run's when they are built in and offline
    (:func:`~tracebench.providers.runs_offline`: the zoo, the oracle; also as the user's models
    file resolves them), the zoo with the run's generation options unless the command line
    gives some. A run folder may come from anyone: a spec, plugin file, URL, key variable or
    option it records is shown, never run, imported or called; anything else it names is a
    TraceError that prints the flags to pass it explicitly."""
    needed: list[tuple[str, str]] = []  # (role, recorded spec) the command line must name
    if generator is None:
        if _offline(manifest.generator, "generator", settings):
            generator = manifest.generator
            if not settings.generator_options and manifest.generator_options:  # the nodes made as the run's images
                settings = replace(settings, generator_options=manifest.generator_options)
        else:
            needed.append(("generator", manifest.generator))
    if not judges:
        offline = all(_offline(j, "judge", settings) for j in manifest.judges)
        judges = manifest.judges if offline else ()
        needed += [] if offline else [("judge", j) for j in manifest.judges]
    if needed:
        named = []
        for role in ("generator", "judge"):
            specs = [_shown(spec) for r, spec in needed if r == role]
            if specs:
                listed = ", ".join(specs[:_LISTED]) + (f" and {len(specs) - _LISTED} more" if len(specs) > _LISTED else "")
                named.append(f"the {role}{'s' if len(specs) > 1 else ''} {listed}")
        raise TraceError(f"{RUN_MANIFEST.path(run_dir)}: names {' and '.join(named)}; what runs and where requests "
                         f"go is never taken from a run folder: name them yourself, and only what you trust, e.g. "
                         f"{_flags(needed, manifest)}")
    assert generator is not None
    return generator, tuple(judges), settings


def _offline(spec: str, role: str, settings: ModelSettings) -> bool:
    """:func:`~tracebench.providers.runs_offline` of a recorded spec, as written and as the
    user's models file resolves it (a table named ``oracle`` could name a served model)."""
    return runs_offline(spec, role) and runs_offline(resolve_spec(spec, settings, judge=role == "judge")[0], role)


def _flags(needed: list[tuple[str, str]], manifest: RunManifest) -> str:
    """The flags that name the recorded models ``needed``: ``--ROLE 'SPEC[@URL,...]'`` (where
    the run loaded a plugin from, or called a server), the generator's recorded options, and
    the key variables, each where the command line can say it (the judges' own when the
    generator's is not the default, so that no key goes to another's host)."""
    flags, keys = [], {"generator": set(), "judge": set()}
    for role, spec in needed[:1 + _LISTED]:
        endpoint = manifest.endpoints.get(spec)
        suffix = f"@{','.join(endpoint.base_urls)}" if endpoint and endpoint.base_urls else ""
        flags.append(f"--{role} {_shown(manifest.loaded_from.get(spec, spec) + suffix)}")
        if role == "generator":
            flags += [f"--generator-option {_shown(f'{k}={v}')}" for k, v in (manifest.generator_options or {}).items()]
        if endpoint:  # a served model: its key's variable (a plugin or a command takes none)
            keys[role].add(endpoint.api_key_env)
    default = {ModelSettings.api_key_env}
    if keys["generator"] - default:
        flags.append(f"--api-key-env {_shown(next(iter(keys['generator'])))}")
    if len(keys["judge"]) > 1:
        flags.append("(the judges' keys are in different variables: give each judge's in a --models file)")
    elif keys["judge"] and (keys["judge"] - default or keys["generator"] - default):
        flags.append(f"--judge-api-key-env {_shown(next(iter(keys['judge'])))}")
    return " ".join(flags)


def _shown(text: str, limit: int = 200) -> str:
    """A recorded text fit for one line of a terminal: shell-quoted as one word, control and
    other unprintable characters escaped (a record may hold anything), cut at ``limit``."""
    import shlex

    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return shlex.quote(text if len(text) <= limit else text[:limit - 1] + "…")




@dataclass(frozen=True)
class _Setup:
    """A diagnosis's providers and what follows from them, made and checked before anything is
    written (a bad spec or a missing key is an error first; specs compared as resolved: a
    models-file name or an @URL suffix names the same model as the run's plain spec)."""

    generator: str  # as named (what each round's run makes)
    judges: tuple[str, ...]
    settings: ModelSettings
    judge_batch: str
    ensemble: str
    repeats: int
    made: Generator  # the generator, made: its spec and options
    judge_specs: tuple[str, ...]
    workers: RayGenerator | None  # one set of workers for every round
    identity: DiagnosisManifest
    run: RunManifest

    @property
    def same_generator(self) -> bool:
        """Whether the run's generator makes the nodes (the run's limit on references holds for it)."""
        return self.made.spec == self.run.generator


def _setup(run, options: DiagnoseOptions) -> _Setup:
    manifest = run.manifest
    repeats = options.repeats if options.repeats is not None else manifest.samples or 1
    DiagnoseOptions.check_repeats(repeats)
    # what runs and where requests go: the command line's, or the run's only when built in and offline
    generator, judges, settings = named_providers(run.root, manifest, options.generator, options.judges,
                                                  options.settings or ModelSettings(seed=manifest.seed or 0))
    if settings.scale is None:  # the judges answer on the run's scale unless told otherwise
        settings = replace(settings, scale=manifest.answer_scale.value)
    if settings.library is None:
        settings = replace(settings, library=library_of(run.cases_dir))
    judge_batch = options.judge_batch or manifest.judge_batch
    # the nodes' judges combine as the run's did (a run before the rule was recorded took the majority)
    ensemble = manifest.ensemble or (Ensemble.MAJORITY if len(manifest.judges) > 1
                                     else default_ensemble(settings.scale))
    gen, judge_list = make_providers(generator, judges, settings)
    workers = RayGenerator(generator, settings, gen, workers=options.workers, gpus=options.gpus_per_worker,
                           address=options.ray_address) if options.executor == Executor.RAY else None
    seed = settings.seed if gen.spec.startswith("synthetic:") else None
    judge_specs = tuple(j.spec for j in judge_list)
    roots_from_run = _roots_from_run(manifest, gen, judge_specs, judge_batch, seed, settings.scale)
    identity = DiagnosisManifest(
        tool=f"tracebench {__version__}", run_dir=str(run.root.resolve()), cases_dir=str(run.cases_dir),
        cases_hash=manifest.cases_hash, generator=gen.spec, seed=seed, judges=judge_specs, judge_batch=judge_batch,
        strategy=options.strategy, gating=options.gating.value, cases=options.cases,
        shard=f"{options.shard[0]}/{options.shard[1]}" if options.shard else None,
        roots_from_run=roots_from_run, repeats=repeats, scale=recorded_scale(settings.scale),
        hashes={"diagnose": data_hash(("diagnose", RULES_FILE), ("diagnose", SOURCES_FILE))},
        generator_options=dict(gen.options) or None, method=RATES if options.method == RATES else None,
        rates=options.rates_record)
    return _Setup(generator, tuple(judges), settings, judge_batch, ensemble, repeats, gen, judge_specs, workers,
                  identity, manifest)


def _roots_from_run(manifest: RunManifest, gen: Generator, judge_specs: tuple[str, ...], judge_batch: str,
                    seed: int | None, scale: str | None) -> bool:
    """Whether the run's verdicts of the roots are the diagnosis's: the run's images (its generator
    with its generation options: other options make other images), judged as the diagnosis judges."""
    same_images = gen.spec == manifest.generator and dict(gen.options) == (manifest.generator_options or {})
    return (same_images and judge_specs == tuple(manifest.judges) and judge_batch == manifest.judge_batch
            and seed == manifest.seed and manifest.sample == 0 and scale == manifest.answer_scale)


def diagnose_run(run_dir: Path, out: Path, options: DiagnoseOptions = DiagnoseOptions()) -> DiagnosisSummary:
    """Diagnose the cases of a run folder into ``out`` (see :mod:`tracebench.diagnose._diagnose`
    for the order of work), as ``options`` asks."""
    run = stream_run(run_dir)  # read as a stream: only the chosen cases are kept
    setup = _setup(run, options)
    chosen = _choose(_streamed(run), options.cases, options.shard, run.root, options.gating)
    out = Path(out)
    _check_resumable(out, setup.identity)
    _check_chosen(chosen, options.cases, run.root)
    if options.method == RATES and options.progress is not False:
        import sys

        print(f"trace diagnose --method rates: {len(chosen.ids)} cases, up to {round(options.budget * len(chosen.ids)):,} "
              f"generations (--budget {options.budget:g} per tree) and their judging", file=sys.stderr)
    rounds = _Rounds(out, run, setup, options)
    rounds.prepare()
    tally = _SummaryTally()
    try:
        TREES.write(out, map(tally.add, rounds.trees(chosen.ids)))
    finally:
        if setup.workers is not None:
            setup.workers.stop()
    rounds.remove_unused()
    result = tally.summary(generator=setup.made.spec, judges=setup.judge_specs, strategy=options.strategy,
                           synthetic=rounds.synthetic, repeats=setup.repeats, where=(str(run_dir), str(out)))
    SUMMARY.write(out, result)
    return result


def _check_resumable(out: Path, identity: DiagnosisManifest) -> None:
    """A folder holding another diagnosis, or anything but a diagnosis, is refused."""
    if DIAGNOSIS_MANIFEST.path(out).is_file():
        old = DIAGNOSIS_MANIFEST.read(out)
        changed = [f for f in DiagnosisManifest.model_fields if f != "tool" and getattr(old, f) != getattr(identity, f)]
        if changed:
            raise TraceError(f"{out}: holds a diagnosis with {other_fields(changed)}; choose another --out")
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TraceError(f"--out {out}: exists and holds no diagnosis; choose another --out")


def _check_chosen(chosen: _Chosen, cases: str, root: Path) -> None:
    if not chosen.ids and (cases != "failing" or chosen.unanswered):  # every case passing is no error
        unanswered = chosen.unanswered
        why = (f"; {unanswered} of {chosen.cases} cases have only abstained verdicts: ask again with "
               f"trace run ... --retry-abstained" if unanswered else "")
        raise TraceError(f"{root}: no case to diagnose ({cases}){why}")


# a root's generation as the run made it: (verdicts, image, abstention reasons)
_Made = tuple[dict[str, Outcome], "str | None", dict[str, str]]


class _Rounds:
    """The diagnosis folder's rounds: each batch of sub-cases a benchmark folder
    (``rounds/NN/cases``) run through the run harness (``rounds/NN/run``, ``run-2`` ... for
    later generations), numbered one after the other across windows; and what the run and
    earlier windows evaluated, recalled instead of made again."""

    def __init__(self, out: Path, run, setup: _Setup, options: DiagnoseOptions) -> None:
        self.out, self.run, self.setup, self.options = out, run, setup, options
        self.layout = DiagnosisLayout(out)
        self.manifest: RunManifest = run.manifest
        self.sample = read_sample_manifest(run.cases_dir)
        # the sub-cases of a root the run sent as a collage are sent one too: a node differs from its
        # root by what a rule took away, not by how the references were fed
        self.collage = bool(self.manifest.collage) and setup.same_generator
        self.collage_always: set[str] = set()
        self.numbers = itertools.count(1)
        self.used: list[str] = []  # the round folders, in order
        self.evaluated_in: dict[str, str] = {}  # sub-case id -> the round folder that evaluated it
        self.names: dict[bytes, str] = {}  # sub-case key (_short) -> id, of the windows diagnosed so far
        # --samples: a root's later generations the run made, by the root's sub-case id
        self.run_samples: dict[str, list[_Made]] = {}
        self.synthetic = synthetic_profile(setup.made.spec) is not None  # the zoo, in process or behind trace serve
        self.rates = RatesState(options.rates_settings()) if options.method == RATES else None

    def _image_file(self, image: str) -> Path:
        return Path(image) if Path(image).is_absolute() else self.out / image

    def prepare(self) -> None:
        """The folder made ready and its identity written."""
        self.out.mkdir(parents=True, exist_ok=True)
        for folder in (ROUNDS_DIR, *((CALL_CACHE_DIR,) if self.options.cache_dir is None else ())):
            owned_folder(self.out, folder)  # a resumed folder may be anyone's
        remove_stale_temporaries(self.out)  # what a killed invocation was writing; each round's run cleans its own
        DIAGNOSIS_MANIFEST.write(self.out, self.setup.identity)

    def evaluate(self, batch: list[Case], samples: Sequence[int]) -> list[Evaluated]:
        folder = owned_folder(self.out, DiagnosisLayout.round_name(next(self.numbers)))
        self.used.append(folder.name)
        arguments = {"diagnosis_of": self.setup.identity.run_dir, "strategy": self.options.strategy,
                     "round": folder.name}
        if _write_node_folder(DiagnosisLayout.cases(folder), batch, self.run.cases_dir, self.sample, arguments, replace=True):
            # a round of other sub-cases (rounds made by another version, windowed otherwise): its runs
            # are made again, from the call cache
            for stale in folder.iterdir():
                if stale.name.startswith("run"):
                    shutil.rmtree(stale)
        made = [self._run_round(folder, batch, s) for s in samples]
        self.evaluated_in.update((c.id, folder.name) for c in batch)
        return made

    def _run_round(self, folder: Path, batch: list[Case], sample: int) -> Evaluated:
        run_dir = DiagnosisLayout.run(folder, sample)
        run_benchmark(DiagnosisLayout.cases(folder), run_dir, self._run_options(batch, sample))
        got, why = _round_verdicts(run_dir)
        images = {c.id: str(p.relative_to(self.out)) for c in batch if (p := generated_image(run_dir, c.id))}
        return got, images, why

    def _run_options(self, batch: list[Case], sample: int) -> RunOptions:
        setup, options = self.setup, self.options
        return RunOptions(
            generator=setup.generator, judges=setup.judges, settings=replace(setup.settings, sample=sample),
            concurrency=options.concurrency, judge_batch=setup.judge_batch,
            cache_dir=options.cache_dir or self.layout.cache, retry_abstained=options.retry_abstained,
            progress=options.progress, ensemble=setup.ensemble, collage=self.collage,
            max_images=self.manifest.max_images if setup.same_generator else None,
            collage_cases=frozenset(c.id for c in batch if c.id in self.collage_always),
            executor=setup.workers or "local")

    def recall(self, key: str, case_id: str, s: int) -> _Made | None:
        """A root's generation the run made (``--samples``), or a sub-case an earlier window
        evaluated (rare: two roots that differ only by id), read back."""
        if self.setup.identity.roots_from_run and 0 < s <= len(self.run_samples.get(case_id, ())):
            return self.run_samples[case_id][s - 1]
        if _short(key) not in self.names or case_id not in self.evaluated_in:
            return None
        run_dir = DiagnosisLayout.run(self.layout.rounds / self.evaluated_in[case_id], s)
        if not run_dir.is_dir():
            return None
        got, why = _round_verdicts(run_dir, case_id)
        image = generated_image(run_dir, case_id)
        return got.get(case_id, {}), str(image.relative_to(self.out)) if image else None, why.get(case_id, {})

    def causes(self, case: Case, image: str) -> dict[str, tuple[str, ...]] | None:
        path = Path(image) if Path(image).is_absolute() else self.out / image
        return _zoo_causes(case, str(path))

    def trees(self, ids: Sequence[str]):
        """The trees, a window of roots at a time: only the window's cases, sub-cases and trees are held."""
        items = _chosen_items(_streamed_samples(self.run), ids)
        while True:
            window = list(itertools.islice(items, self.options.window))
            if not window:
                return
            yield from self._window(window)
            del window  # not held while the next window is read
            # nor the canonical forms of its tree nodes: the formula package memoizes up to 65,536 (about
            # 0.8 KB each), and every window adds its new formulas (29 MB after 14,560 cases, 5 MB after 1,600)
            canonical.cache_clear()

    def _window(self, window: list) -> Iterator:
        roots = [case for case, _, _ in window]
        plan = plan_trees(roots, self.names, paper_stop=self.options.paper_stop)
        self._remember_run_samples(plan, window)
        max_images = self.manifest.max_images
        if self.collage and max_images is not None:
            fed = {c.id for c in roots if len(c.references) > max_images}
            self.collage_always.update(o.case_id for o in plan.occurrences if o.root in fed)
        evidence = RootEvidence(
            from_run=self.setup.identity.roots_from_run,
            images={c.id: str(p.resolve()) for c in roots if (p := generated_image(self.run.root, c.id))},
            reasons={c.id: r[0] for c, _, r in window if r[0]},
            causes=self.causes if self.synthetic else None, recall=self.recall,
            run_generations=max(self.manifest.samples or 1, 1), image_file=self._image_file, rates=self.rates)
        yield from diagnose(roots, {c.id: samples[0] for c, samples, _ in window}, self.evaluate,
                            strategy=self.options.strategy, gating=self.options.gating, repeats=self.setup.repeats,
                            plan=plan, evidence=evidence)
        self.names.update((_short(key), case.id) for key, case in plan.cases.items())

    def _remember_run_samples(self, plan, window: list) -> None:
        """The generations ``--repeats`` asks of the run's (a run of ``--samples K``)."""
        self.run_samples.clear()
        if not self.setup.identity.roots_from_run:
            return
        by_id = {item[0].id: item for item in window}
        for tree in plan.trees:
            case, samples, reasons = by_id[tree.root.id]
            self.run_samples[plan.cases[tree.keys["N0"]].id] = [
                (samples[s], str(p.resolve()) if (p := generated_image(self.run.root, case.id, s)) else None,
                 reasons[s]) for s in range(1, min(len(samples), self.setup.repeats))]

    def remove_unused(self) -> None:
        """Rounds of an earlier version's plan."""
        rounds = self.layout.rounds
        for stale in rounds.iterdir() if rounds.is_dir() else ():
            if stale.name not in self.used and stale.name.isdigit():
                shutil.rmtree(stale)


def _round_verdicts(run_dir: Path, case_id: str | None = None
                    ) -> tuple[dict[str, dict[str, Outcome]], dict[str, dict[str, str]]]:
    """The verdicts of a diagnosis round's run (of one case, or all) and why those that
    abstained did: case id -> question id -> outcome, and -> reason."""
    got: dict[str, dict[str, Outcome]] = {}
    why: dict[str, dict[str, str]] = {}
    for _, _, _, v in VERDICTS.read_spanned(run_dir, unique=False):  # the round's run just wrote it
        if case_id is not None and v.case_id != case_id:
            continue
        got.setdefault(v.case_id, {})[v.question_id] = outcome = v.outcome
        if not outcome.answered:
            why.setdefault(v.case_id, {})[v.question_id] = abstention_reason(v)
    return got, why


def _zoo_causes(case: Case, image: str) -> dict[str, tuple[str, ...]] | None:
    from ..zoo import read_record

    try:
        record = read_record(Path(image).read_bytes())
    except (OSError, TraceError):
        return None
    if record is None:
        return None
    return {qid: record.causes.get(qid) or (cause,) for qid, cause in record.failed.items()}


