"""``trace sample``: a whole benchmark folder, streamed to disk.

Order of work: validate the library, find what it cannot supply (no entity usable as
``attach``, no relation tag ...: the templates and application formulas that need it are
left out, ``--strict`` refuses), draw every case's template (quotas per slot level, re-fitted
over what is left, then the application mappings), then for each case bind, realize and
compile its checklist, writing ``cases.jsonl`` line by line (memory does not grow with the
count). A case whose template cannot be bound tries other templates of its slot level.
Each case has its own random stream, derived from the seed and the case id, so a case does
not depend on the cases before it. The folder is assembled beside ``--out`` and renamed into
place at the end: a failure leaves nothing.
"""

from __future__ import annotations

import random
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tqdm import tqdm

from .. import __version__
from ..checklist import QUESTION_FILE, compile_checklist
from ..errors import TraceError
from ..gcpolicy import fewer_collections
from ..formula import Expr, parse, slot_count, template_of, to_text
from ..library import LibraryInfo, read_valid_library, staged_output
from ..realize import PROMPT_FILES, realize
from ..records import CASES, REFERENCES_DIR, SAMPLE_MANIFEST, Case, LeftOut, Reference, SampleManifest
from ..resources import DataFile, data_hash
from ..safepaths import inside
from ._bind import BindingError, BoundCase, bind
from ._clutter import CLUTTER_FILE, ClutterSpec, add_clutter
from ._capabilities import Gap, Need, library_gaps, needs_of, space_needs
from ._index import LibraryIndex
from ._options import SampleOptions
from ._parallel import RefPath, Written, made_in_order, written
from ._quotas import QUOTA_FILE, draw_templates, left_out_counts, other_templates, quotas

__all__ = ["ManifestInputs", "Plan", "left_out", "left_out_line", "plan_cases", "sample_benchmark", "write_benchmark"]

APPLICATIONS_FILE = "applications.toml"
_APPLICATIONS = DataFile("templates", APPLICATIONS_FILE)
BIND_ATTEMPTS = 25
OTHER_TEMPLATES = 40  # other templates of the slot level a case tries when its own cannot be bound
OTHER_ATTEMPTS = 5  # attempts at each


@dataclass(frozen=True)
class Plan:
    """One case to make: its id, template and where it comes from."""

    case_id: str
    slot: int
    template: Expr
    application: str | None = None
    carrier_categories: frozenset[str] | None = None


@dataclass(frozen=True)
class Application:
    """One ``[name]`` table of templates/applications.toml."""

    formulas: tuple[str, ...]
    cases: int
    carrier_categories: frozenset[str] | None


@cache
def _applications() -> dict[str, Application]:
    raw = _APPLICATIONS.read()
    out = {}
    for name in raw:
        spec = _APPLICATIONS.value("", raw, name, dict)
        formulas = _APPLICATIONS.strings(name, spec, "formulas")
        for formula in formulas:
            try:
                parse(formula)
            except TraceError as err:
                raise TraceError(f"templates/{APPLICATIONS_FILE}: {name}: {formula!r}: {err}") from None
        categories = _APPLICATIONS.strings(name, spec, "carrier_categories", None)
        out[name] = Application(formulas, _APPLICATIONS.value(name, spec, "cases", int),
                                None if categories is None else frozenset(categories))
    return out


@cache
def _application_needs() -> dict[str, tuple[tuple[str, Expr, frozenset[Need]], ...]]:
    """Per application: each formula as written, parsed, and its needs."""
    out = {}
    for name, spec in _applications().items():
        out[name] = tuple((text, parse(text), needs_of(parse(text))) for text in spec.formulas)
    return out


def application_cases(cases: int, per_slot: int) -> int:
    """An application's cases for ``per_slot`` cases a slot level: its ``cases`` of
    templates/applications.toml at the default level (templates/quotas.toml's ``per_slot``,
    the paper's 180), in proportion elsewhere (rounded half up), at least one: a small benchmark
    keeps the paper's share of application cases instead of being mostly applications."""
    default = quotas().per_slot
    return max(1, (2 * cases * per_slot + default) // (2 * default))


def plan_cases(slots: tuple[int, ...], per_slot: int, seed: int, applications: bool | int,
               without: frozenset[Need] = frozenset()) -> list[Plan]:
    """Every case's template, in output order: slot levels, then applications (True: each
    application's cases for ``per_slot``, :func:`application_cases`; a number: that many each;
    False: none). ``without``: needs the library cannot supply; templates and application
    formulas with one are left out."""
    plans: list[Plan] = []
    for slot in slots:
        drawn = draw_templates(slot, per_slot, random.Random(f"{seed}:templates:{slot}"), without=without)
        plans += [Plan(f"s{slot}-{k:05d}", slot, t) for k, t in enumerate(drawn)]
    if applications:
        for name, spec in _applications().items():
            formulas = [f for _, f, needs in _application_needs()[name] if not needs & without]
            if not formulas:
                continue
            categories = spec.carrier_categories
            count = application_cases(spec.cases, per_slot) if applications is True else int(applications)
            for k in range(count):
                template = formulas[k % len(formulas)]
                plans.append(Plan(f"app-{name}-{k:03d}", slot_count(template), template, name, categories))
    return plans


def left_out(slots: tuple[int, ...], applications: bool, gaps: dict[Need, Gap]) -> tuple[LeftOut, ...]:
    """Per gap of the library, what it leaves out: templates per slot level, applications
    whole, and the formulas of applications that keep others. What several gaps leave out is
    listed under the first of them."""
    order = tuple(gaps)
    without = frozenset(order)
    counts = {s: left_out_counts(s, order) for s in slots}
    whole: dict[Need, list[str]] = {need: [] for need in order}
    formulas: dict[Need, list[str]] = {need: [] for need in order}
    for name, rows in (_application_needs().items() if applications else ()):
        dropped = [(text, next(n for n in order if n in needs)) for text, _, needs in rows if needs & without]
        if len(dropped) == len(rows):
            whole[dropped[0][1]].append(name)
        else:
            for text, need in dropped:
                formulas[need].append(f"{name}: {text}")
    entries = []
    for need, gap in gaps.items():
        templates = {str(s): counts[s][need] for s in slots}
        if any(templates.values()) or whole[need] or formulas[need]:
            entries.append(LeftOut(family=gap.family, reason=gap.reason, templates=templates,
                                   applications=tuple(whole[need]), formulas=tuple(formulas[need])))
    return tuple(entries)


def left_out_line(entry: LeftOut) -> str:
    """One line for stderr: ``left out: g_attach templates (14) and application 'try_on': the
    library has no entity with usable_as "attach" (tag field: ent_list[].usable_as)``."""
    parts = []
    total = sum(entry.templates.values())
    if total:
        parts.append(f"{entry.family} templates ({total})")
    if entry.applications:
        names = ", ".join(repr(a) for a in entry.applications)
        parts.append(f"application{'s' if len(entry.applications) > 1 else ''} {names}")
    if entry.formulas:
        parts.append(f"application formula{'s' if len(entry.formulas) > 1 else ''} "
                     + ", ".join(repr(f) for f in entry.formulas))
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"left out: {listed}: {entry.reason}"


def _bind_within(template: Expr, index: LibraryIndex, rng: random.Random, categories, attempts: int):
    """The template bound within ``attempts`` tries, else None; and the last problem."""
    problem = None
    for _ in range(attempts):
        try:
            return bind(template, index, rng, carrier_categories=categories), None
        except BindingError as err:
            problem = err
    return None, problem


def _others(plan: Plan, rng: random.Random, without: frozenset[Need]) -> list[Expr]:
    """What a case tries when its template cannot be bound: other templates of its slot level
    (an application case: the application's other formulas), in an order drawn from ``rng``."""
    if plan.application is None:
        return other_templates(plan.slot, plan.template, rng, OTHER_TEMPLATES, without)
    formulas = [f for _, f, needs in _application_needs()[plan.application]
                if not needs & without and f != plan.template]
    rng.shuffle(formulas)
    return formulas


def _make_case(plan: Plan, index: LibraryIndex, seed: int, without: frozenset[Need] = frozenset(),
               others: bool = False, clutter: ClutterSpec = ClutterSpec()) -> Case:
    """The case of ``plan``; ``others``: when its template cannot be bound, try others;
    ``clutter``: the distractors to add (from a random stream of their own)."""
    rng = random.Random(f"{seed}:case:{plan.case_id}")
    bound, problem = _bind_within(plan.template, index, rng, plan.carrier_categories, BIND_ATTEMPTS)
    tried = ""
    if bound is None and others:
        alternatives = _others(plan, rng, without)
        tried = (f", then {len(alternatives)} other templates of slot {plan.slot}" if plan.application is None
                 else f", then {len(alternatives)} other formulas of application {plan.application!r}")
        for template in alternatives:
            bound, _ = _bind_within(template, index, rng, plan.carrier_categories, OTHER_ATTEMPTS)
            if bound is not None:
                break
    if bound is None:
        raise TraceError(f"case {plan.case_id}: cannot bind {to_text(plan.template)} from library "
                         f"{index.info.name!r} ({BIND_ATTEMPTS} attempts{tried}): {problem}")
    return _case(plan, bound, index, rng, clutter, random.Random(f"{seed}:clutter:{plan.case_id}"))


def _case(plan: Plan, bound: BoundCase, index: LibraryIndex, rng: random.Random, spec: ClutterSpec = ClutterSpec(),
          clutter_rng: random.Random | None = None) -> Case:
    terms, formula, images, clutter = add_clutter(bound.terms, bound.formula, bound.images, index, spec,
                                                  clutter_rng or random.Random(f"clutter:{plan.case_id}"))
    pooled = frozenset(p.term for p in clutter.pooled) if clutter else frozenset()
    prompts = realize(terms, bool(bound.compositions), rng, pooled=pooled)
    references = tuple(
        Reference(image=f"Image {k + 1}", path=_reference_path(index, lib), source_id=index.images[lib].id)
        for k, lib in enumerate(images))
    return Case(id=plan.case_id, slot=slot_count(formula), template=_template_text(bound.template),
                formula=to_text(formula), application=plan.application, prompt=prompts.prompt,
                text_only_prompt=prompts.text_only, scene=prompts.scene, references=references, terms=terms,
                checklist=compile_checklist(terms, bound.compositions, clutter.distractors if clutter else ()),
                clutter=clutter)


@lru_cache(maxsize=8192)
def _template_text(template: Expr) -> str:
    """A drawn template as a case records it (templates repeat across the cases of a level)."""
    return to_text(template_of(template))


def _reference_path(index: LibraryIndex, lib: int) -> str:
    image = index.images[lib]
    return f"{REFERENCES_DIR}/{image.id}{_suffix(image.path)}"


def _suffix(path: str) -> str:
    """``Path(path).suffix`` without making a Path (once per reference of every case)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


@dataclass(frozen=True)
class ManifestInputs:
    """What a benchmark's manifest records besides the counts of its cases: the seed, the
    arguments it was made with, the library (name, version, content hash), the hashes of the
    data it was made from, what the library could not supply, and the clutter settings (None:
    no clutter; given, recorded with what they gave: distractors placed, cases per number of
    input images)."""

    seed: int
    arguments: dict
    library: dict
    hashes: dict[str, str]
    left_out: tuple[LeftOut, ...] = ()
    clutter: dict | None = None


@dataclass
class _Tally:
    """What the manifest counts of the cases written."""

    per_slot: Counter = field(default_factory=Counter)
    per_app: Counter = field(default_factory=Counter)
    per_inputs: Counter = field(default_factory=Counter)
    placed: Counter = field(default_factory=Counter)  # distractors placed per case
    whole: Counter = field(default_factory=Counter)
    short: int = 0  # cases given fewer distractors than asked
    templates: set[str] = field(default_factory=set)

    def add(self, case: Written) -> None:
        self.templates.add(case.template)
        self.per_inputs[len(case.references)] += 1
        self.placed[case.distractors] += 1
        self.short += case.short
        if case.application:
            self.per_app[case.application] += 1
        else:
            self.per_slot[str(case.slot)] += 1
            self.whole[str(case.slot)] += case.whole

    def manifest(self, inputs: ManifestInputs) -> SampleManifest:
        slots = sorted(self.per_slot, key=int)
        return SampleManifest(
            tool=f"tracebench {__version__}", seed=inputs.seed, arguments=inputs.arguments, library=inputs.library,
            hashes=inputs.hashes, cases=sum(self.per_slot.values()) + sum(self.per_app.values()),
            counts_per_slot={s: self.per_slot[s] for s in slots},
            counts_per_application=dict(sorted(self.per_app.items())), distinct_templates=len(self.templates),
            whole_share={s: round(self.whole[s] / self.per_slot[s], 4) for s in slots}, left_out=inputs.left_out,
            clutter=None if inputs.clutter is None else {**inputs.clutter, **self._clutter()},
            counts_per_inputs=None if inputs.clutter is None else {str(k): self.per_inputs[k]
                                                                   for k in sorted(self.per_inputs)})

    def _clutter(self) -> dict:
        return {"distractors_placed": sum(k * n for k, n in self.placed.items()),
                "cases_per_distractors": {str(k): self.placed[k] for k in sorted(self.placed)},
                "cases_short": self.short}


@dataclass
class _References:
    """Copies each reference image into the folder once, from ``source(case, reference)``."""

    root: Path
    source: Callable[[Written, RefPath], Path]
    copied: set[str] = field(default_factory=set)

    def copy(self, case: Written) -> None:
        for ref in case.references:
            if ref.path not in self.copied:
                target = inside(self.root, ref.path, f"case {case.id}: reference", "benchmark folder")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.source(case, ref), target)
                self.copied.add(ref.path)


def _lines(cases: Iterable[Case | Written], references: _References, tally: _Tally) -> Iterator[str]:
    for item in cases:
        case = item if isinstance(item, Written) else written(item)
        references.copy(case)
        tally.add(case)
        yield case.line


def write_benchmark(out: Path, cases: Iterable[Case | Written], *, source: Callable[[Case, Reference], Path],
                    inputs: ManifestInputs, overwrite: bool = False,
                    extra: Callable[[Path], None] | None = None) -> SampleManifest:
    """Write a benchmark folder: ``cases.jsonl`` (streamed: ``cases`` may be a generator), each
    reference image copied from ``source(case, reference)`` (a path checked with
    :func:`tracebench.safepaths.inside`) to its path in the folder, never outside it, and
    ``manifest.json``: ``inputs`` and the counts of what was written. The folder is assembled
    beside ``out`` and renamed into place at the end (``overwrite``: replacing what ``out``
    held); ``extra(folder)`` adds files before that. The one writer of benchmark folders
    (``trace sample``, and the sub-cases of ``trace diagnose``). ``cases`` may hold cases
    already serialized (:class:`~tracebench.sample.Written`, made by worker processes)."""
    tally = _Tally()
    with staged_output(Path(out), overwrite=overwrite) as root:
        (root / REFERENCES_DIR).mkdir()
        CASES.write_lines(root, _lines(cases, _References(root, source), tally))
        manifest = tally.manifest(inputs)
        SAMPLE_MANIFEST.write(root, manifest)
        if extra is not None:
            extra(root)
    return manifest


def _library_index(library: Path | None) -> tuple[Path, LibraryIndex]:
    """The library folder (None: the shipped synthetic one), read and validated, and its index."""
    if library is None:
        from ..library import default_library

        library = default_library()
    library = Path(library)
    info, images = read_valid_library(library, remember=True)
    if not images:
        raise TraceError(f"{library}: library '{info.name}' holds no image; add tagged images (trace library import)")
    return library, LibraryIndex.build(library, info, images)


def _left_out_of(options: SampleOptions, index: LibraryIndex,
                 report: Callable[[str], None] | None) -> tuple[frozenset[Need], tuple[LeftOut, ...]]:
    """What the library cannot supply of the templates and applications asked for, and what
    that leaves out (``report`` gets one line per family); ``strict``: an error instead."""
    needs = list(space_needs()) if options.slots else []
    if options.applications:
        needs += [need for rows in _application_needs().values() for _, _, row in rows for need in sorted(row, key=str)]
    gaps = library_gaps(index, needs)
    if gaps and options.strict:
        raise TraceError(f"library {index.info.name!r} cannot supply every template (--strict): " + "; ".join(
            f"{gap.family} terms: {gap.reason}" for gap in gaps.values()))
    entries = left_out(options.slots, options.applications, gaps)
    if report is not None:
        for entry in entries:
            report(left_out_line(entry))
    return frozenset(gaps), entries


def _data_hashes(clutter: ClutterSpec) -> dict[str, str]:
    """The hashes of the data files a benchmark is made from."""
    hashes = {
        "template_space": data_hash(("templates", "space.toml"), ("taxonomy", "kinds.toml"),
                                    ("grammar", "trace.lark"), ("grammar", "language.toml")),
        "quotas": data_hash(("templates", QUOTA_FILE)),
        "applications": data_hash(("templates", APPLICATIONS_FILE)),
        "text_carriers": data_hash(("templates", "text_carriers.toml")),
        "prompts": data_hash(*(("templates", name) for name in PROMPT_FILES)),
        "questions": data_hash(("templates", QUESTION_FILE)),
        "taxonomy": data_hash(("taxonomy", "categories.toml"), ("taxonomy", "subtypes.toml")),
    }
    if clutter.active:
        hashes["clutter"] = data_hash(("templates", CLUTTER_FILE))
    return hashes


def _manifest_inputs(options: SampleOptions, info: LibraryInfo, entries: tuple[LeftOut, ...]) -> ManifestInputs:
    clutter = options.clutter.arguments() if options.clutter.active else None
    # absolute: trace run and diagnose find the library (the synthetic zoo's render plans) from anywhere
    library_argument = None if options.library is None else str(options.library.resolve())
    return ManifestInputs(
        seed=options.seed,
        arguments={"slots": list(options.slots), "per_slot": options.per_slot, "applications": options.applications,
                   "library": library_argument, **(clutter or {})},
        library={"name": info.name, "version": info.version, "content_hash": info.content_hash},
        hashes=_data_hashes(options.clutter), left_out=entries, clutter=clutter)


def _library_source(library: Path, index: LibraryIndex) -> Callable[[Written, RefPath], Path]:
    """Where a reference's image lies in the library folder (checked to lie inside it)."""
    by_id = index.by_id
    return lambda case, ref: inside(library, by_id[ref.source_id].path,
                                    f"{library}: image {ref.source_id} (case {case.id})", "library folder")


@fewer_collections()  # the cases' objects, in the writer and its forked workers
def sample_benchmark(out: Path, options: SampleOptions, *, progress: bool | None = None,
                     report: Callable[[str], None] | None = None) -> SampleManifest:
    """Build a benchmark folder at ``out`` as ``options`` ask (:class:`SampleOptions`);
    returns its manifest. ``progress``: a progress bar on stderr (default: when stderr is a
    terminal).

    What the library cannot supply is left out (the manifest's ``left_out``; ``report`` gets
    one line per family) and a case that cannot be bound tries other templates; ``strict``
    refuses both: a library gap is an error, and so is a case that cannot be bound.
    """
    library, index = _library_index(options.library)
    without, entries = _left_out_of(options, index, report)
    plans = plan_cases(options.slots, options.per_slot, options.seed, options.applications, without)
    if progress is None:
        progress = sys.stderr.isatty()
    inputs = _manifest_inputs(options, index.info, entries)
    make = lambda i: _make_case(plans[i], index, options.seed, without, others=not options.strict,  # noqa: E731
                                clutter=options.clutter)
    with made_in_order(make, len(plans), options.jobs) as made:  # workers fork here, before the progress bar's thread
        cases = tqdm(made, total=len(plans), desc="sampling", unit="case", disable=not progress, file=sys.stderr)
        return write_benchmark(out, cases, source=_library_source(library, index), inputs=inputs)
