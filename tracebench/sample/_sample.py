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
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Callable, Iterable

from tqdm import tqdm

from .. import __version__
from ..checklist import QUESTION_FILE, compile_checklist
from ..errors import TraceError
from ..gcpolicy import fewer_collections
from ..formula import Expr, parse, slot_count, space_bounds, template_of, to_text
from ..library import read_valid_library, staged_output
from ..realize import PROMPT_FILES, realize
from ..records import CASES, REFERENCES_DIR, SAMPLE_MANIFEST, Case, LeftOut, Reference, SampleManifest
from ..resources import data_hash, read_toml
from ..safepaths import inside
from ._bind import BindingError, BoundCase, bind
from ._clutter import CLUTTER_FILE, ClutterSpec, add_clutter, check_spec
from ._capabilities import Gap, Need, library_gaps, needs_of, space_needs
from ._index import LibraryIndex
from ._parallel import Written, made_in_order, written
from ._quotas import QUOTA_FILE, draw_templates, left_out_counts, other_templates, quotas

__all__ = ["Plan", "left_out", "left_out_line", "plan_cases", "sample_benchmark", "write_benchmark"]

APPLICATIONS_FILE = "applications.toml"
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


@cache
def _applications() -> dict[str, dict]:
    raw = read_toml("templates", APPLICATIONS_FILE)
    for name, spec in raw.items():
        for formula in spec["formulas"]:
            try:
                parse(formula)
            except TraceError as err:
                raise TraceError(f"templates/{APPLICATIONS_FILE}: {name}: {formula!r}: {err}") from None
    return raw


@cache
def _application_needs() -> dict[str, tuple[tuple[str, Expr, frozenset[Need]], ...]]:
    """Per application: each formula as written, parsed, and its needs."""
    out = {}
    for name, spec in _applications().items():
        out[name] = tuple((text, parse(text), needs_of(parse(text))) for text in spec["formulas"])
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
            categories = frozenset(spec["carrier_categories"]) if "carrier_categories" in spec else None
            count = application_cases(int(spec["cases"]), per_slot) if applications is True else int(applications)
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


def write_benchmark(out: Path, cases: Iterable[Case | Written], *, source: Callable[[Case, Reference], Path], seed: int,
                    arguments: dict, library: dict, hashes: dict[str, str], overwrite: bool = False,
                    extra: Callable[[Path], None] | None = None, left_out: tuple[LeftOut, ...] = (),
                    clutter: dict | None = None) -> SampleManifest:
    """Write a benchmark folder: ``cases.jsonl`` (streamed: ``cases`` may be a generator), each
    reference image copied from ``source(case, reference)`` (a path checked with
    :func:`tracebench.safepaths.inside`) to its path in the folder, never outside it, and
    ``manifest.json`` counting what was written. The folder is assembled beside ``out`` and
    renamed into place at the end (``overwrite``: replacing what ``out`` held); ``extra(folder)``
    adds files before that. ``clutter``: the clutter settings, recorded with what they gave
    (distractors placed, cases per number of input images). The one writer of benchmark folders (``trace sample``, and the
    sub-cases of ``trace diagnose``). ``cases`` may hold cases already serialized
    (:class:`~tracebench.sample._parallel.Written`, made by worker processes)."""
    per_slot: Counter = Counter()
    per_app: Counter = Counter()
    per_inputs: Counter = Counter()
    placed: Counter = Counter()  # distractors placed per case
    short: Counter = Counter()  # cases given fewer distractors than asked (key True)
    whole: Counter = Counter()
    templates: set[str] = set()
    with staged_output(Path(out), overwrite=overwrite) as root:
        (root / REFERENCES_DIR).mkdir()
        copied: set[str] = set()

        def lines() -> Iterable[str]:
            for item in cases:
                case = item if isinstance(item, Written) else written(item)
                for ref in case.references:
                    if ref.path not in copied:
                        target = inside(root, ref.path, f"case {case.id}: reference", "benchmark folder")
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(source(case, ref), target)
                        copied.add(ref.path)
                templates.add(case.template)
                per_inputs[len(case.references)] += 1
                placed[case.distractors] += 1
                short[True] += case.short
                if case.application:
                    per_app[case.application] += 1
                else:
                    per_slot[str(case.slot)] += 1
                    whole[str(case.slot)] += case.whole
                yield case.line

        CASES.write_lines(root, lines())
        slots = sorted(per_slot, key=int)
        manifest = SampleManifest(
            tool=f"tracebench {__version__}", seed=seed, arguments=arguments, library=library, hashes=hashes,
            cases=sum(per_slot.values()) + sum(per_app.values()), counts_per_slot={s: per_slot[s] for s in slots},
            counts_per_application=dict(sorted(per_app.items())), distinct_templates=len(templates),
            whole_share={s: round(whole[s] / per_slot[s], 4) for s in slots}, left_out=left_out,
            clutter=None if clutter is None else {**clutter, "distractors_placed": sum(k * n for k, n in placed.items()),
                                                  "cases_per_distractors": {str(k): placed[k] for k in sorted(placed)},
                                                  "cases_short": short[True]},
            counts_per_inputs=None if clutter is None else {str(k): per_inputs[k] for k in sorted(per_inputs)})
        SAMPLE_MANIFEST.write(root, manifest)
        if extra is not None:
            extra(root)
    return manifest


@fewer_collections()  # the cases' objects, in the writer and its forked workers
def sample_benchmark(out: Path, *, slots: tuple[int, ...], per_slot: int | None = None, seed: int = 0,
                     library: Path | None = None, applications: bool | int = True,
                     progress: bool | None = None, strict: bool = False,
                     report: Callable[[str], None] | None = None, jobs: int = 1,
                     clutter: ClutterSpec = ClutterSpec()) -> SampleManifest:
    """Build a benchmark folder at ``out``; returns its manifest.

    ``applications``: True, each application's cases of templates/applications.toml in
    proportion to ``per_slot`` (:func:`application_cases`: 20 at the default 180); a number,
    that many cases each; False (or 0), none.

    ``clutter``: distractor references per case and the mode (named or pool); without it the
    benchmark is that of a tracebench without clutter, byte for byte.

    ``jobs``: processes making cases (forked workers; the output is the same bytes for any
    number).

    What the library cannot supply is left out (the manifest's ``left_out``; ``report`` gets
    one line per family) and a case that cannot be bound tries other templates; ``strict``
    refuses both: a library gap is an error, and so is a case that cannot be bound.
    """
    check_spec(clutter)
    q = quotas()
    per_slot = q.per_slot if per_slot is None else per_slot
    if per_slot < 1:
        raise TraceError(f"--per-slot: {per_slot} must be at least 1")
    if applications is not True and applications is not False and (not isinstance(applications, int)
                                                                    or applications < 0):
        raise TraceError(f"--per-application: {applications!r} must be a whole number, 0 or more")
    bounds = space_bounds()
    bad = [s for s in slots if not bounds.min_slot <= s <= bounds.max_slot]
    if bad:
        raise TraceError(f"--slots: {bad} outside the slot levels {bounds.min_slot}-{bounds.max_slot}")
    # absolute: trace run and diagnose find the library (the synthetic zoo's render plans) from anywhere
    library_argument = None if library is None else str(Path(library).resolve())
    if library is None:
        from ..library import default_library

        library = default_library()
    library = Path(library)
    info, images = read_valid_library(library, remember=True)
    if not images:
        raise TraceError(f"{library}: library '{info.name}' holds no image; add tagged images (trace library import)")
    index = LibraryIndex.build(library, info, images)
    needs = list(space_needs()) if slots else []
    if applications:
        needs += [need for rows in _application_needs().values() for _, _, row in rows for need in sorted(row, key=str)]
    gaps = library_gaps(index, needs)
    if gaps and strict:
        raise TraceError(f"library {info.name!r} cannot supply every template (--strict): " + "; ".join(
            f"{gap.family} terms: {gap.reason}" for gap in gaps.values()))
    without = frozenset(gaps)
    entries = left_out(tuple(slots), applications, gaps)
    for entry in entries:
        if report is not None:
            report(left_out_line(entry))
    plans = plan_cases(tuple(slots), per_slot, seed, applications, without)
    by_id = index.by_id
    if progress is None:
        progress = sys.stderr.isatty()
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
    with made_in_order(lambda i: _make_case(plans[i], index, seed, without, others=not strict, clutter=clutter),
                       len(plans),
                       jobs) as made:  # workers fork here, before the progress bar's thread
        return write_benchmark(
            out, tqdm(made, total=len(plans), desc="sampling", unit="case", disable=not progress, file=sys.stderr),
            left_out=entries,
            source=lambda case, ref: inside(library, by_id[ref.source_id].path,
                                            f"{library}: image {ref.source_id} (case {case.id})", "library folder"),
            seed=seed,
            arguments={"slots": list(slots), "per_slot": per_slot, "applications": applications,
                       "library": library_argument, **(clutter.arguments() if clutter.active else {})},
            clutter=clutter.arguments() if clutter.active else None,
            library={"name": info.name, "version": info.version, "content_hash": info.content_hash},
            hashes=hashes)
