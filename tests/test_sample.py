"""`trace sample`: the benchmark folder, case by case, against the rules of the issue."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from library_helpers import derived_library, entity, make_library, record, without_relations, without_usable_as
from test_cli import run_trace
from tracebench.errors import TraceError
from tracebench.formula import FormulaError, analyze, language, parse, slot_count, template_of, to_text
from tracebench.formula._space import space_by_slot
from tracebench.library import default_library, load_library
from tracebench.records import Case, SampleManifest
from tracebench.realize._prompt import _phrases
from tracebench.sample import (BindingError, ClutterSpec, LibraryIndex, SampleOptions, bind, draw_templates,
                               plan_cases, quotas, read_cases, read_sample_manifest, sample_benchmark)
from tracebench.sample._bind import _kind_for
from tracebench.sample._capabilities import library_gaps, space_needs
from tracebench.sample._quotas import Quotas, largest_remainder
from tracebench.taxonomy import SubtypeSpec, taxonomy

GOLDEN = Path(__file__).parent / "golden" / "sample_cases.json"
GOLDEN_IDS = ["s1-00000", "s3-00001", "s5-00002", "s8-00000", "app-try_on-000", "app-relation_transfer-001"]


@pytest.fixture(scope="module")
def small(shared_folder) -> Path:
    """Read only (made once for all workers)."""
    def make(out: Path) -> None:
        result = run_trace("sample", "--slots", "1-8", "--per-slot", "12", "--seed", "3", "--out", str(out))
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""  # no progress bar when stderr is not a terminal

    return shared_folder("test_sample-small", make)


@pytest.fixture(scope="module")
def cases(small) -> list[Case]:
    return list(read_cases(small))


def test_folder_layout_and_manifest(small, cases):
    manifest = SampleManifest.model_validate_json((small / "manifest.json").read_text())
    assert manifest.cases == len(cases) == 8 * 12 + sum(manifest.counts_per_application.values())
    assert manifest.counts_per_slot == {str(s): 12 for s in range(1, 9)}
    assert set(manifest.counts_per_application) == {c.application for c in cases if c.application}
    assert {"template_space", "quotas", "applications", "prompts", "questions"} <= set(manifest.hashes)
    assert manifest.library["content_hash"]
    assert len({c.id for c in cases}) == len(cases)


def test_formulas_parse_with_their_slot_level(cases):
    for case in cases:
        formula = parse(case.formula)
        assert slot_count(formula) == case.slot, case.id
        assert to_text(template_of(formula)) == case.template, case.id


def test_references_are_numbered_named_and_present(small, cases):
    library = default_library()
    _, images = load_library(library)
    paths = {image.id: library / image.path for image in images}
    for case in cases:
        named = set(re.findall(r"Image \d+", case.prompt))
        listed = [r.image for r in case.references]
        assert listed == [f"Image {k}" for k in range(1, len(listed) + 1)], case.id
        assert named == set(listed), case.id
        for ref in case.references:
            assert (small / ref.path).read_bytes() == paths[ref.source_id].read_bytes()
        # images are numbered in order of first mention in the formula
        mentions = [int(m) for m in re.findall(r"\(I(\d+)\b", case.formula)]
        assert list(dict.fromkeys(mentions)) == list(range(1, len(listed) + 1)), case.id


def test_every_handle_has_its_lines_and_questions(cases):
    for case in cases:
        lines = case.prompt.splitlines()
        paragraph = lines[0]
        for term in case.terms:
            if term.handle:
                handle = f"('{term.handle}')"
                assert handle in paragraph, (case.id, handle)
                assert any(q.target == term.symbol or q.target.startswith(term.symbol + "⊕") or handle in q.question
                           for q in case.checklist), (case.id, handle)
            if term.op == "f":
                assert f"('{term.handle}') references [{term.entity} in {term.image}]." in lines, case.id
            if term.op == "g" and term.role in ("local", "attach", "ip"):
                carrier = next(t for t in case.terms if t.symbol == term.carrier)
                assert any(line.startswith(f"('{carrier.handle}')") and f"in {term.image}]" in line
                           for line in lines[1:]), (case.id, term.symbol)


def test_question_counts_per_operator_instance(cases):
    for case in cases:
        by_target: dict[tuple[str, str], int] = {}
        for q in case.checklist:
            by_target[(q.op, q.target)] = by_target.get((q.op, q.target), 0) + 1
        for term in case.terms:
            if term.op == "f":
                assert by_target[("anchor", term.symbol)] >= 2, case.id
            if term.op == "g":
                assert by_target[("disentangle", term.symbol)] >= 2, case.id
                assert by_target[("apply", f"{term.carrier}⊕{term.symbol}")] >= 2, case.id
        for symbol in set(re.findall(r"\b(C\d+)\(", case.formula)):
            assert by_target[("compose", symbol)] >= 3, (case.id, symbol)


def test_dependencies_form_a_dag_of_existing_questions(cases):
    for case in cases:
        ids = [q.id for q in case.checklist]
        assert len(ids) == len(set(ids)), case.id
        graph = nx.DiGraph()
        graph.add_nodes_from(ids)
        for q in case.checklist:
            for parent in q.depends_on:
                assert parent in ids, (case.id, q.id, parent)
                graph.add_edge(parent, q.id)
        assert nx.is_directed_acyclic_graph(graph), case.id


def test_failure_worded_questions_expect_no(cases):
    for case in cases:
        for q in case.checklist:
            assert q.expected == ("no" if q.aspect in ("duplication", "leakage", "leakage_context", "exclusivity")
                                  else "yes")


_HOLES = re.compile(r"\{\{|\}\}|\bNone\b|\[\s*\]|\(\s*\)|\[ in |''|\(\)|  ")


def test_no_placeholders_or_empty_brackets(cases):
    for case in cases:
        for text in [case.prompt, case.text_only_prompt, *(q.question for q in case.checklist)]:
            assert not _HOLES.search(text), (case.id, text)
        assert "Image" not in case.text_only_prompt and "('" not in case.text_only_prompt, case.id
        assert not re.search(r"\bf\d|\bg_\w+\d|\bT_e\d", " ".join(q.question for q in case.checklist)), case.id


def test_same_command_twice_is_byte_identical_and_another_seed_differs(small, tmp_path):
    again = tmp_path / "again"
    assert run_trace("sample", "--per-slot", "12", "--seed", "3", "--out", str(again)).returncode == 0
    for name in ("cases.jsonl", "manifest.json"):
        assert (again / name).read_bytes() == (small / name).read_bytes()
    other = tmp_path / "other"
    assert run_trace("sample", "--per-slot", "12", "--seed", "4", "--out", str(other)).returncode == 0
    assert (other / "cases.jsonl").read_bytes() != (small / "cases.jsonl").read_bytes()


@pytest.mark.parametrize("args,fragment", [
    (["--slots", "0-9"], "--slots"),
    (["--per-slot", "0"], "--per-slot"),
    (["--library", "/nonexistent/library"], "not a directory"),
])
def test_bad_arguments_leave_no_output(tmp_path, args, fragment):
    out = tmp_path / "out"
    result = run_trace("sample", *args, "--out", str(out))
    assert result.returncode == 2
    assert fragment in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("settings,message", [
    ({"slots": (0, 3, 9)}, r"--slots: \[0, 9\] outside the slot levels 1-8"),
    ({"slots": (1,), "per_slot": 0}, "--per-slot: 0 must be at least 1"),
    ({"slots": (1,), "applications": -1}, "--per-application: -1 must be a whole number, 0 or more"),
    ({"slots": (1,), "applications": 2.5}, "--per-application: 2.5 must be a whole number"),
    ({"slots": (1,), "clutter": ClutterSpec(max_references=3)}, "--max-references caps the distractors"),
])
def test_sample_options_refuse_a_setting_that_means_nothing_when_made(settings, message):
    with pytest.raises(TraceError, match=message):
        SampleOptions(**settings)


def test_sample_options_hold_what_the_benchmark_is_sampled_with():
    options = SampleOptions(slots=[2, 5], library="lib", applications=0)
    assert options.slots == (2, 5) and options.per_slot == quotas().per_slot == 180
    assert options.library == Path("lib") and options.applications == 0 and options.jobs == 1


def test_an_existing_output_folder_is_refused(small):
    result = run_trace("sample", "--per-slot", "1", "--out", str(small))
    assert result.returncode == 2 and "already exists" in result.stderr


def test_unsatisfiable_quota_is_reported():
    quotas = Quotas(per_slot=10, whole=0.0, relations={2: (0.0, 1.0, 0.0)}, globals={2: (1.0, 0.0, 0.0)})
    with pytest.raises(TraceError, match="unsatisfiable quota for slot 2"):
        draw_templates(2, 10, random.Random(0), quotas)


def _cats(tmp_path) -> Path:
    """Six striped cats with a style tag: no relation, no usable_as, one attribute subtype."""
    records = [record(f"im{i}", [entity("Animal", f"the cat number {i}", _1__1_pattern_texture=["stripes"])],
                      global_tag={"4.1_style": ["flat"]}) for i in range(6)]
    return make_library(tmp_path / "lib", records)


def test_strict_refuses_a_library_without_relations_in_one_line(tmp_path):
    library = _cats(tmp_path)
    out = tmp_path / "bench"
    result = run_trace("sample", "--slots", "3", "--per-slot", "20", "--no-applications", "--strict",
                       "--library", str(library), "--out", str(out))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "--strict" in result.stderr and "Traceback" not in result.stderr
    assert 'g_rel terms: the library has no image tagged 4.6_inter_instance_relation ' \
           '(tag field: global_tag."4.6_inter_instance_relation")' in result.stderr
    assert 'g_attach terms: the library has no entity with usable_as "attach" (tag field: ent_list[].usable_as)' \
        in result.stderr
    assert not out.exists()
    info, images = load_library(library)
    with pytest.raises(BindingError, match=r'relation .* \(tag field: global_tag."4.6_inter_instance_relation"\)'):
        bind(parse("C(f, f) ⊕ g_rel"), LibraryIndex.build(library, info, images), random.Random(0))


def test_a_case_that_cannot_be_bound_takes_another_template_of_its_level(tmp_path):
    """One attribute subtype only: f ⊕ g ⊕ g and the like cannot be bound; other slot-3
    templates are, in the same order for the same seed."""
    library = _cats(tmp_path)
    runs = []
    for name in ("a", "b"):
        result = run_trace("sample", "--slots", "3", "--per-slot", "20", "--no-applications",
                           "--library", str(library), "--out", str(tmp_path / name))
        assert result.returncode == 0, result.stderr
        runs.append((tmp_path / name / "cases.jsonl").read_bytes())
    assert runs[0] == runs[1]
    cases = list(read_cases(tmp_path / "a"))
    assert [c.slot for c in cases] == [3] * 20
    index = LibraryIndex.build(library, *load_library(library))
    without = frozenset(library_gaps(index, space_needs()))
    planned = plan_cases((3,), 20, 0, False, without)
    assert [p.case_id for p in planned] == [c.id for c in cases]
    swapped = [c for p, c in zip(planned, cases) if to_text(template_of(p.template)) != c.template]
    assert swapped, "every planned template bound: the test library no longer needs the fallback"
    for case in cases:
        for term in case.terms:
            assert term.role not in ("relation", "attach", "ip"), (case.id, term.symbol)


def test_when_no_template_of_the_level_binds_the_error_names_what_is_missing(tmp_path):
    library = make_library(tmp_path / "lib", [record("one", [entity("Animal", "the lone cat")])])
    out = tmp_path / "bench"
    result = run_trace("sample", "--slots", "2", "--per-slot", "3", "--no-applications",
                       "--library", str(library), "--out", str(out))
    assert result.returncode == 2
    last = result.stderr.splitlines()[-1]
    assert "cannot bind C(f, f)" in last and "other templates of slot 2" in last
    assert "the library has no unused entity to anchor" in last and "(tag field: ent_list)" in last
    assert not out.exists()


def _left_out_run(tmp_path, edit, *extra):
    library = derived_library(tmp_path / "lib", edit)
    out = tmp_path / "bench"
    result = run_trace("sample", "--slots", "1-4", "--per-slot", "40", *extra, "--library", str(library),
                       "--out", str(out))
    return library, out, result


def test_a_library_without_usable_as_samples_without_attach_and_ip(tmp_path):
    library, out, result = _left_out_run(tmp_path, without_usable_as)
    assert result.returncode == 0, result.stderr
    manifest = read_sample_manifest(out)
    assert [e.family for e in manifest.left_out] == ["g_attach", "g_ip"]
    attach, ip = manifest.left_out
    assert attach.applications == ("try_on",) and ip.applications == ("ip_transfer",)
    assert attach.reason == 'the library has no entity with usable_as "attach" (tag field: ent_list[].usable_as)'
    assert attach.templates == {"1": 1, "2": 9, "3": 51, "4": 245}  # f ⊕ g_attach ... of the space
    assert result.stderr.splitlines() == [
        f"left out: g_attach templates (306) and application 'try_on': {attach.reason}",
        f"left out: g_ip templates ({sum(ip.templates.values())}) and application 'ip_transfer': {ip.reason}"]
    assert manifest.counts_per_slot == {str(s): 40 for s in range(1, 5)}  # the same total per level
    assert set(manifest.counts_per_application) == {"stylization", "group_photo", "background_swap",
                                                    "novel_view", "object_composition", "relation_transfer"}
    cases = list(read_cases(out))
    assert not [c.id for c in cases for t in c.terms if t.role in ("attach", "ip")]
    assert set(manifest.whole_share.values()) == {0.0}
    strict = run_trace("sample", "--slots", "1-4", "--strict", "--library", str(library),
                       "--out", str(tmp_path / "strict"))
    assert strict.returncode == 2 and len(strict.stderr.splitlines()) == 1
    assert 'usable_as "attach"' in strict.stderr and "tag field: ent_list[].usable_as" in strict.stderr
    assert not (tmp_path / "strict").exists()


def test_a_library_without_relations_samples_and_refits_the_quotas(tmp_path):
    _, out, result = _left_out_run(tmp_path, without_relations, "--no-applications")
    assert result.returncode == 0, result.stderr
    manifest = read_sample_manifest(out)
    assert [(e.family, e.applications) for e in manifest.left_out] == [("g_rel", ())]  # applications not asked
    assert result.stderr.splitlines() == [f"left out: g_rel templates ({sum(manifest.left_out[0].templates.values())}): "
                                          f"{manifest.left_out[0].reason}"]
    cases = list(read_cases(out))
    assert manifest.counts_per_slot == {str(s): 40 for s in range(1, 5)}
    assert not [c.id for c in cases if "g_rel" in c.template]
    q = quotas()
    for slot in (3, 4):  # the global margin is met as before; the relation one re-fitted to none
        level = [c for c in cases if c.slot == slot]
        globals_ = [sum(1 for t in c.terms if t.role == "global") for c in level]
        assert [globals_.count(k) for k in range(3)] == largest_remainder(40, q.globals[slot])
    assert 0.1 <= manifest.whole_share["4"] <= 0.35


def test_a_manifest_without_left_out_still_reads(small):
    raw = json.loads((small / "manifest.json").read_text())
    assert raw["left_out"] == []  # the shipped library lacks nothing
    del raw["left_out"]
    assert SampleManifest.model_validate(raw).left_out == ()


def test_a_case_with_two_designs_on_one_carrier_is_refused_by_the_reader(small, tmp_path):
    text = (small / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    line = next(k for k, t in enumerate(text) if '"role":"ip"' in t)
    case = Case.model_validate_json(text[line])
    design = next(t for t in case.terms if t.role == "ip")
    second = design.model_copy(update={"symbol": design.symbol + "9"})
    broken = case.model_copy(update={"terms": (*case.terms, second)})
    folder = tmp_path / "broken"
    folder.mkdir()
    text[line] = broken.model_dump_json()
    (folder / "cases.jsonl").write_text("\n".join(text) + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as refused:
        list(read_cases(folder))
    assert str(refused.value) == (f"{folder / 'cases.jsonl'}:{line + 1}: terms: two g_ip designs applied to one "
                                  f"carrier {design.carrier!r}: a carrier takes one design")


def test_the_default_benchmark(tmp_path):
    out = tmp_path / "benchmark"
    manifest = sample_benchmark(out, SampleOptions(slots=tuple(range(1, 9))))
    assert manifest.counts_per_slot == {str(s): 180 for s in range(1, 9)}
    assert 1500 <= manifest.cases <= 1700
    assert manifest.distinct_templates >= 631
    assert all(0.1 <= share <= 0.35 for share in manifest.whole_share.values())
    assert manifest.left_out == ()
    for case in read_cases(out):  # the reader refuses a carrier with two designs; count anyway
        carriers = [t.carrier for t in case.terms if t.role == "ip"]
        assert len(carriers) == len(set(carriers)), case.id


def _golden_view(case: Case) -> dict:
    return {"formula": case.formula, "prompt": case.prompt, "text_only_prompt": case.text_only_prompt,
            "checklist": [f"{q.id} [{q.expected}] {q.question}" for q in case.checklist]}


def test_golden_cases(tmp_path):
    """A few realized cases, checked word for word (TRACEBENCH_UPDATE_GOLDEN=1 rewrites them)."""
    out = tmp_path / "golden"
    sample_benchmark(out, SampleOptions(slots=(1, 3, 5, 8), per_slot=3, seed=0, applications=20))
    found = {c.id: _golden_view(c) for c in read_cases(out) if c.id in GOLDEN_IDS}
    assert set(found) == set(GOLDEN_IDS)
    if os.environ.get("TRACEBENCH_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(found, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert found == json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def index() -> LibraryIndex:
    root = default_library()
    info, images = load_library(root)
    return LibraryIndex.build(root, info, images)


_POOL = [t for s in range(1, 9) for t in space_by_slot([s])[s][::97]]


@settings(max_examples=80)
@given(template=st.sampled_from(_POOL), seed=st.integers(0, 10**6))
def test_binding_never_breaks_a_taxonomy_rule(index, template, seed):
    tax = taxonomy()
    bound = bind(template, index, random.Random(seed))
    terms = {t.symbol: t for t in bound.terms}
    assert slot_count(bound.formula) == slot_count(template)
    anchored = [(t.source_id, t.entity_index) for t in bound.terms if t.op == "f"]
    assert len(anchored) == len(set(anchored))
    for t in bound.terms:
        carrier = terms.get(t.carrier) if t.carrier else None
        if t.role == "local":
            assert tax.subtypes[t.subtype].applies_to(carrier.category), (t.subtype, carrier.category)
            assert tax.subtypes[t.subtype].wildcard, t.subtype  # the template's plain g never draws 1.5_color
            image = index.images[[i.id for i in index.images].index(t.source_id)]
            assert t.value in image.ent_list[t.entity_index].subtype_tags()[t.subtype]
        if t.role in ("attach", "ip"):
            assert carrier.category in tax.special[t.role].receivers
            image = index.images[[i.id for i in index.images].index(t.source_id)]
            assert t.role in image.ent_list[t.entity_index].usable_as
        if t.role == "text":
            assert t.category in tax.categories
    locals_per_carrier: dict[str, list[str]] = {}
    for t in bound.terms:
        if t.role == "local":
            locals_per_carrier.setdefault(t.carrier, []).append(t.subtype)
    assert all(len(v) == len(set(v)) for v in locals_per_carrier.values())


# Where a term of each role stands in a formula (the paper's shapes: an attribute on an entity,
# a relation or a global condition on a composition).
_PLACE = {"local": "f ⊕ {g}", "attach": "f ⊕ {g}", "ip": "f ⊕ {g}", "relation": "C(f, f) ⊕ {g}",
          "global": "C(f, f) ⊕ {g}"}


def _bind_until(index: LibraryIndex, text: str, wanted, attempts: int = 300):
    """Bind ``text`` with seed after seed until a bound g term satisfies ``wanted``."""
    template = parse(text)
    for seed in range(attempts):
        try:
            bound = bind(template, index, random.Random(seed))
        except BindingError:
            continue
        hits = [t for t in bound.terms if t.op == "g" and wanted(t)]
        if hits:
            return hits[0]
    return None


_PAIRS = [(s.key, kind) for s in (*taxonomy().subtypes.values(), *taxonomy().special.values()) for kind in s.kinds]


@pytest.mark.parametrize("subtype,kind", _PAIRS)
def test_every_kind_listed_for_a_subtype_binds_it_from_the_shipped_library(index, subtype, kind):
    spec = taxonomy().subtypes.get(subtype) or taxonomy().special[subtype]
    text = _PLACE[spec.role].format(g=f"g_{kind}")
    assert analyze(parse(text))[-1].role == spec.role, text
    term = _bind_until(index, text, lambda t: t.subtype == subtype)
    assert term is not None, f"{text} never binds {subtype}"
    assert term.kind == kind and term.symbol.startswith(f"g_{kind}"), (term.symbol, kind)  # named after its kind
    assert term.role == spec.role


_KIND_ROLES = [(kind, role) for kind, spec in language().kinds.items() for role in sorted(spec.roles)]


@pytest.mark.parametrize("kind,role", _KIND_ROLES)
def test_every_kind_the_language_accepts_binds_or_is_refused_by_validation(index, kind, role):
    """What validation lets through, binding can fill: g_color on an entity included."""
    text = _PLACE[role].format(g=f"g_{kind}")
    try:
        terms = analyze(parse(text))
    except FormulaError as err:  # refused: one line naming the column
        assert str(err).startswith("formula column") and "\n" not in str(err)
        return
    assert terms[-1].role == role
    term = _bind_until(index, text, lambda t: t.role == role)
    assert term is not None, f"{text} validates but never binds"
    assert term.subtype in {s.key for s in taxonomy().of_role(role)}
    if not language().is_unspecified(kind):
        assert term.kind == kind and kind in (taxonomy().subtypes.get(term.subtype) or taxonomy().special[term.subtype]).kinds


def test_g_color_on_an_entity_takes_an_objects_color_and_on_the_scene_its_tone(index):
    local = _bind_until(index, "C(f ⊕ g_color, f)", lambda t: t.kind == "color")
    scene = _bind_until(index, "C(f, f) ⊕ g_color", lambda t: t.kind == "color")
    assert (local.role, local.subtype) == ("local", "1.5_color")
    assert (scene.role, scene.subtype) == ("global", "4.5_color_tone")
    image = index.images[[i.id for i in index.images].index(local.source_id)]
    assert local.value in image.ent_list[local.entity_index].subtype_tags()["1.5_color"]
    assert local.value == image.render["entities"][local.entity_index]["color"]  # the color drawn


def test_a_bound_term_is_named_after_a_kind_that_keeps_its_role_where_it_stands():
    spec = SubtypeSpec("4.9_mood", "4_Global", "", frozenset(), ("color", "style"), role="global",
                       record="global_tag")
    assert _kind_for(spec, "global", "global", on_composition=True) == "color"  # the scene's color tone
    assert _kind_for(spec, "global", "global", on_composition=False) == "style"  # g_color on f1 would be local
    assert _kind_for(spec, "style", "global", on_composition=True) == "style"  # the template named it
    lonely = SubtypeSpec("4.8_tone", "4_Global", "", frozenset(), ("color",), role="global", record="global_tag")
    assert _kind_for(lonely, "global", "global", on_composition=False) == "global"


def test_prompts_name_every_subtype_of_the_taxonomy():
    named = set(_phrases().names)
    tax = taxonomy()
    assert {*tax.subtypes, *tax.special} <= named, {*tax.subtypes, *tax.special} - named


def test_an_anchor_named_by_its_kind_is_drawn_from_that_category(index):
    """The paper's f(person) (Eq. 3): the anchor is an entity of the category the word names."""
    template = parse("C(f(animal), f(food)) ⊕ g_style")
    for seed in range(12):
        bound = bind(template, index, random.Random(seed))
        anchors = [t for t in bound.terms if t.role == "anchor"]
        assert [t.category for t in anchors] == ["Animal", "Food"], seed
    people = [t.category for seed in range(12) for t in bind(parse("f(person) ⊕ g_attach"), index,
                                                              random.Random(seed)).terms if t.role == "anchor"]
    assert set(people) == {"Human"}


def test_application_cases_keep_the_papers_share_at_any_per_slot():
    """20 cases an application at the default 180 a slot level (160 of 1,600, the paper's share),
    in proportion at another --per-slot, at least one each: a small benchmark is not mostly applications."""
    from collections import Counter

    def applications(per_slot: int) -> Counter:
        return Counter(p.application for p in plan_cases((1,), per_slot, 0, True) if p.application)

    default = applications(180)
    assert len(default) == 8 and set(default.values()) == {20}
    assert set(applications(30).values()) == {3}  # 20 * 30 / 180 = 3.33
    assert set(applications(45).values()) == {5}  # 5.0
    assert set(applications(5).values()) == {1}  # 0.56, kept at one
    assert set(applications(360).values()) == {40}
