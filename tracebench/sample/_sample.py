"""``trace sample``: a whole benchmark folder, streamed to disk.

Order of work: validate the library, draw every case's template (quotas per slot level,
then the application mappings), then for each case bind, realize and compile its
checklist, writing ``cases.jsonl`` line by line (memory does not grow with the count).
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
from functools import cache
from pathlib import Path
from typing import Callable, Iterable

from tqdm import tqdm

from .. import __version__
from ..checklist import QUESTION_FILE, compile_checklist
from ..errors import TraceError
from ..formula import Expr, parse, slot_count, space_bounds, template_of, to_text
from ..library import read_valid_library, staged_output
from ..realize import PROMPT_FILES, realize
from ..records import CASES, REFERENCES_DIR, SAMPLE_MANIFEST, Case, Reference, SampleManifest
from ..resources import data_hash, read_toml
from ._bind import BindingError, bind
from ._index import LibraryIndex
from ._quotas import QUOTA_FILE, draw_templates, quotas

__all__ = ["Plan", "plan_cases", "sample_benchmark", "write_benchmark"]

APPLICATIONS_FILE = "applications.toml"
BIND_ATTEMPTS = 25


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


def plan_cases(slots: tuple[int, ...], per_slot: int, seed: int, applications: bool) -> list[Plan]:
    """Every case's template, in output order: slot levels, then applications."""
    plans: list[Plan] = []
    for slot in slots:
        drawn = draw_templates(slot, per_slot, random.Random(f"{seed}:templates:{slot}"))
        plans += [Plan(f"s{slot}-{k:05d}", slot, t) for k, t in enumerate(drawn)]
    if applications:
        for name, spec in _applications().items():
            formulas = [parse(f) for f in spec["formulas"]]
            categories = frozenset(spec["carrier_categories"]) if "carrier_categories" in spec else None
            for k in range(int(spec["cases"])):
                template = formulas[k % len(formulas)]
                plans.append(Plan(f"app-{name}-{k:03d}", slot_count(template), template, name, categories))
    return plans


def _make_case(plan: Plan, index: LibraryIndex, seed: int) -> Case:
    rng = random.Random(f"{seed}:case:{plan.case_id}")
    problem = None
    for _ in range(BIND_ATTEMPTS):
        try:
            bound = bind(plan.template, index, rng, carrier_categories=plan.carrier_categories)
            break
        except BindingError as err:
            problem = err
    else:
        raise TraceError(f"case {plan.case_id}: cannot bind {to_text(plan.template)} from library "
                         f"{index.info.name!r} ({BIND_ATTEMPTS} attempts): {problem}")
    prompts = realize(bound.terms, bool(bound.compositions), rng)
    references = tuple(
        Reference(image=f"Image {k + 1}", path=_reference_path(index, lib), source_id=index.images[lib].id)
        for k, lib in enumerate(bound.images))
    return Case(id=plan.case_id, slot=slot_count(bound.formula), template=to_text(template_of(plan.template)),
                formula=to_text(bound.formula), application=plan.application, prompt=prompts.prompt,
                text_only_prompt=prompts.text_only, scene=prompts.scene, references=references, terms=bound.terms,
                checklist=compile_checklist(bound.terms, bound.compositions))


def _reference_path(index: LibraryIndex, lib: int) -> str:
    image = index.images[lib]
    return f"{REFERENCES_DIR}/{image.id}{Path(image.path).suffix}"


def write_benchmark(out: Path, cases: Iterable[Case], *, source: Callable[[Reference], Path], seed: int,
                    arguments: dict, library: dict, hashes: dict[str, str], overwrite: bool = False,
                    extra: Callable[[Path], None] | None = None) -> SampleManifest:
    """Write a benchmark folder: ``cases.jsonl`` (streamed: ``cases`` may be a generator), each
    reference image copied from ``source(reference)`` to its path in the folder, and
    ``manifest.json`` counting what was written. The folder is assembled beside ``out`` and
    renamed into place at the end (``overwrite``: replacing what ``out`` held); ``extra(folder)``
    adds files before that. The one writer of benchmark folders (``trace sample``, and the
    sub-cases of ``trace diagnose``)."""
    per_slot: Counter = Counter()
    per_app: Counter = Counter()
    whole: Counter = Counter()
    templates: set[str] = set()
    with staged_output(Path(out), overwrite=overwrite) as root:
        (root / REFERENCES_DIR).mkdir()
        copied: set[str] = set()

        def written() -> Iterable[Case]:
            for case in cases:
                for ref in case.references:
                    if ref.path not in copied:
                        (root / ref.path).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(source(ref), root / ref.path)
                        copied.add(ref.path)
                templates.add(case.template)
                if case.application:
                    per_app[case.application] += 1
                else:
                    per_slot[str(case.slot)] += 1
                    whole[str(case.slot)] += any(t.role in ("attach", "ip") for t in case.terms)
                yield case

        CASES.write(root, written())
        slots = sorted(per_slot, key=int)
        manifest = SampleManifest(
            tool=f"tracebench {__version__}", seed=seed, arguments=arguments, library=library, hashes=hashes,
            cases=sum(per_slot.values()) + sum(per_app.values()), counts_per_slot={s: per_slot[s] for s in slots},
            counts_per_application=dict(sorted(per_app.items())), distinct_templates=len(templates),
            whole_share={s: round(whole[s] / per_slot[s], 4) for s in slots})
        SAMPLE_MANIFEST.write(root, manifest)
        if extra is not None:
            extra(root)
    return manifest


def sample_benchmark(out: Path, *, slots: tuple[int, ...], per_slot: int | None = None, seed: int = 0,
                     library: Path | None = None, applications: bool = True,
                     progress: bool | None = None) -> SampleManifest:
    """Build a benchmark folder at ``out``; returns its manifest."""
    q = quotas()
    per_slot = q.per_slot if per_slot is None else per_slot
    if per_slot < 1:
        raise TraceError(f"--per-slot: {per_slot} must be at least 1")
    bounds = space_bounds()
    bad = [s for s in slots if not bounds.min_slot <= s <= bounds.max_slot]
    if bad:
        raise TraceError(f"--slots: {bad} outside the slot levels {bounds.min_slot}-{bounds.max_slot}")
    library_argument = None if library is None else str(library)
    if library is None:
        from ..library import default_library

        library = default_library()
    library = Path(library)
    info, images = read_valid_library(library)
    index = LibraryIndex.build(library, info, images)
    plans = plan_cases(tuple(slots), per_slot, seed, applications)
    by_id = {image.id: image for image in images}
    if progress is None:
        progress = sys.stderr.isatty()
    bar = tqdm(plans, desc="sampling", unit="case", disable=not progress, file=sys.stderr)
    return write_benchmark(
        out, (_make_case(plan, index, seed) for plan in bar),
        source=lambda ref: library / by_id[ref.source_id].path, seed=seed,
        arguments={"slots": list(slots), "per_slot": per_slot, "applications": applications,
                   "library": library_argument},
        library={"name": info.name, "version": info.version, "content_hash": info.content_hash},
        hashes={
            "template_space": data_hash(("templates", "space.toml"), ("taxonomy", "kinds.toml"),
                                        ("grammar", "trace.lark"), ("grammar", "language.toml")),
            "quotas": data_hash(("templates", QUOTA_FILE)),
            "applications": data_hash(("templates", APPLICATIONS_FILE)),
            "text_carriers": data_hash(("templates", "text_carriers.toml")),
            "prompts": data_hash(*(("templates", name) for name in PROMPT_FILES)),
            "questions": data_hash(("templates", QUESTION_FILE)),
            "taxonomy": data_hash(("taxonomy", "categories.toml"), ("taxonomy", "subtypes.toml")),
        })
