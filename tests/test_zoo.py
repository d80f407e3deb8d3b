"""The synthetic model zoo and the oracle judge: what each profile breaks on cases written by hand
(literal question ids, read off docs/zoo.md), then on real sampled cases.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image

from test_checklist_rules import anchor, g
from tracebench.checklist import compile_checklist
from tracebench.errors import TraceError
from tracebench.formula import Anchor, Apply, Compose, Disentangle, parse, symbol, template_of, to_text, walk
from tracebench.records import Case, Reference
from tracebench.sample import SampleOptions, read_cases, sample_benchmark
from tracebench.sample._sample import Plan, _make_case
from tracebench.zoo import (
    RECORD_KEY,
    Profile,
    breakdown,
    default_index,
    failed_questions,
    generate,
    oracle_answers,
    oracle_reply,
    parse_profile,
    read_record,
)


@pytest.fixture(scope="module")
def cases(shared_folder) -> list[Case]:
    out = shared_folder("test_zoo-bench", lambda out: sample_benchmark(
        out, SampleOptions(slots=tuple(range(1, 9)), per_slot=6, seed=0)))
    return list(read_cases(out))


# ------------------------------------------------------------------ helpers, and cases written by hand

def _g(case: Case, *roles: str, subtype: str | None = None) -> set[str]:
    return {t.symbol for t in case.terms
            if t.op == "g" and t.role in roles and (subtype is None or t.subtype == subtype)}


def _anchors(case: Case) -> set[str]:
    return {t.symbol for t in case.terms if t.role == "anchor"}


def _bound(q) -> str | None:
    """The g symbol of a binding question's target, else None."""
    return q.target.split("⊕")[1] if "⊕" in q.target else None


def _branches(case: Case) -> int:
    expr = parse(case.formula)
    outer = next((n for n in walk(expr) if isinstance(n, Compose)), None)
    if outer is None:
        return 1
    return sum(1 for a in outer.args if any(isinstance(n, (Anchor, Disentangle)) for n in walk(a)))


def _holds_anchor(case: Case, composition: str) -> bool:
    """From the checklist: a composition's coexistence depends on the existence of its anchors
    (one of two members or more)."""
    q = next((q for q in case.checklist if q.id == f"{composition}:coexistence"), None)
    if q is None:  # a scene of one entity asks no coexistence: that entity is the case's only one
        return any(t.role == "anchor" for t in case.terms)
    return any(d.startswith("f") and d.endswith(":existence") for d in q.depends_on)


# Two cases written by hand, their checklists as compile_checklist makes them.
DOG = anchor("f1", "dog", "dog_A", "Image 1", "the plush dog")
CAT = anchor("f2", "cat", "cat_A", "Image 3", "the grey cat")
PATTERN = g("g_pattern1", "local", "f1", "Image 2", "1.1_pattern_texture", "striped", "the robe")
STYLE = g("g_style1", "global", "C1", "Image 4", "4.1_style", "watercolor", "the painting")
REL = g("g_rel1", "relation", "C1", "Image 3", "4.6_inter_instance_relation", "a dog chasing a cat",
        "the dog and the cat", participants=("f1", "f2"))


def hand_case(formula: str, terms: tuple, members: tuple[str, ...]) -> Case:
    images = sorted({t.image for t in terms})
    return Case(id="hand", slot=len(terms), template=to_text(template_of(parse(formula))), formula=formula, prompt="p",
                text_only_prompt="t", scene="{members}", terms=terms,
                references=tuple(Reference(image=i, path=f"references/{k}.png", source_id=str(k))
                                 for k, i in enumerate(images, 1)),
                checklist=compile_checklist(terms, (("C1", members, None),)))


# C1(f1 ⊕ g_pattern1, f2) ⊕ g_style1: two branches, a local attribute, a global style
STYLED = hand_case('C1(f1(I1, "the plush dog") ⊕ g_pattern1(I2, {"the robe"}, pattern_texture), '
                   'f2(I3, "the grey cat")) ⊕ g_style1(I4, {"the painting"}, style)',
                   (DOG, PATTERN, CAT, STYLE), ("f1", "f2"))
# C1(f1, f2) ⊕ g_rel1: a reference relation between two anchors
RELATED = hand_case('C1(f1(I1, "the plush dog"), f2(I3, "the grey cat")) ⊕ '
                    'g_rel1(I3, {"the dog and the cat"}, inter_instance_relation)', (DOG, CAT, REL), ("f1", "f2"))

# What each profile breaks on them, read off docs/zoo.md's rules one question at a time.
BROKEN = {
    # a global term's presence and fidelity, and its consistency with the scene
    "no-global": ({"g_style1:presence", "g_style1:fidelity", "C1+g_style1:consistency"}, set()),
    # with a global term: every anchor's identity and the fidelity of local transfers; none without
    "global-interference": ({"f1:identity", "f2:identity", "g_pattern1:fidelity"}, set()),
    # two reference-conditioned branches: the anchors' identity at threshold 2, nothing at 3
    "composition-interference:2": ({"f1:identity", "f2:identity"}, {"f1:identity", "f2:identity"}),
    "composition-interference:3": (set(), set()),
    # a relation's presence and fidelity, its binding, and the relation question of its composition
    "relation-blind": (set(), {"g_rel1:presence", "g_rel1:fidelity", "C1+g_rel1:binding", "C1:relation"}),
    # a subtype's presence and fidelity (and a global one's consistency with the scene)
    "weak-subtype:1.1_pattern_texture": ({"g_pattern1:presence", "g_pattern1:fidelity"}, set()),
    "weak-subtype:4.1_style": ({"g_style1:presence", "g_style1:fidelity", "C1+g_style1:consistency"}, set()),
    # a local attribute lands elsewhere: absent on its carrier, present on another entity
    "leaky-binding": ({"g_pattern1:presence", "f1+g_pattern1:exclusivity"}, set()),
    # an anchored entity drawn twice
    "duplicate": ({"C1:duplication"}, {"C1:duplication"}),
}


def expected(case: Case, name: str) -> set[str]:
    """The question ids profile ``name`` breaks on a sampled case: the union of the single modes'
    (``failed_questions``), for the combination tests."""
    return set(failed_questions(case, parse_profile(name)))


PROFILES = ["no-global", "global-interference", "composition-interference:2", "composition-interference:3",
            "relation-blind", "weak-subtype:1.1_pattern_texture", "weak-subtype:3.4_motion_effect",
            "weak-subtype:attach", "weak-subtype:4.1_style", "weak-subtype:4.6_inter_instance_relation",
            "leaky-binding", "duplicate"]


# ------------------------------------------------------------------ rules

def test_perfect_passes_everything(cases):
    for case in cases[::2]:
        png, record = generate(case, parse_profile("perfect"))
        assert record.failed == {}
        assert all(oracle_answers(case.checklist, png).values()), case.id


@pytest.mark.parametrize("name", list(BROKEN))
def test_profile_breaks_exactly_the_documented_questions(name):
    profile = parse_profile(name)
    for case, broken in zip((STYLED, RELATED), BROKEN[name]):
        failed = failed_questions(case, profile)
        assert set(failed) == broken, case.formula
        assert set(failed.values()) <= {str(profile)}


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_breaks_some_sampled_case_within_its_checklist(cases, name):
    profile = parse_profile(name)
    failed = [failed_questions(case, profile) for case in cases]
    assert any(failed), f"no sampled case exercises {name}"
    assert all(set(f) <= {q.id for q in case.checklist} for f, case in zip(failed, cases))


@pytest.mark.parametrize("name", PROFILES)
def test_oracle_agrees_with_the_rules(cases, name):
    profile = parse_profile(name)
    hit = [c for c in cases if failed_questions(c, profile)][:4]
    for case in hit:
        png, record = generate(case, profile)
        answers = oracle_answers(case.checklist, png)
        assert {qid for qid, ok in answers.items() if not ok} == set(failed_questions(case, profile))
        assert record.failed == failed_questions(case, profile)


def test_global_interference_needs_a_global_term(cases):
    without = [c for c in cases if not _g(c, "global")]
    assert without
    assert all(failed_questions(c, parse_profile("global-interference")) == {} for c in without)


def test_composition_interference_counts_branches(cases):
    profile = parse_profile("composition-interference:2")
    one = [c for c in cases if _anchors(c) and _branches(c) == 1]
    many = [c for c in cases if _anchors(c) and _branches(c) >= 2]
    assert one and many
    assert all(failed_questions(c, profile) == {} for c in one)
    for c in many:
        assert set(failed_questions(c, profile)) == {f"{f}:identity" for f in _anchors(c)}


def _strip_globals(case: Case) -> Case:
    """The diagnosis engine's global-stripping step, done by hand: a simpler case of its own."""
    gone = _g(case, "global")
    expr = parse(case.formula)
    if isinstance(expr, Apply):
        keep = tuple(m for m in expr.modifiers if symbol(m) not in gone)
        expr = Apply(expr.carrier, keep) if keep else expr.carrier
    return case.model_copy(update={
        "id": case.id + "/no-globals", "formula": to_text(expr),
        "terms": tuple(t for t in case.terms if t.symbol not in gone),
        "checklist": tuple(q for q in case.checklist if q.target not in gone and _bound(q) not in gone)})


def test_rules_read_only_the_case_given(cases):
    case = next(c for c in cases if _g(c, "global") and _anchors(c) and _branches(c) == 1)
    profile = parse_profile("global-interference")
    assert failed_questions(case, profile)
    sub = _strip_globals(case)
    assert not _g(sub, "global")
    assert failed_questions(sub, profile) == {}
    png, _record = generate(sub, profile)
    assert all(oracle_answers(sub.checklist, png).values())


def test_noise_rate_and_determinism(cases):
    profile = parse_profile("noise:0.3")
    total = sum(len(c.checklist) for c in cases)
    runs = [[failed_questions(c, profile, seed=s) for c in cases] for s in (0, 0, 1)]
    broken = sum(len(f) for f in runs[0])
    assert 0.25 < broken / total < 0.35
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert {cause for f in runs[0] for cause in f.values()} == {"noise:0.3"}
    assert all(failed_questions(c, parse_profile("noise:0")) == {} for c in cases)
    assert all(len(failed_questions(c, parse_profile("noise:1"))) == len(c.checklist) for c in cases)


def test_combined_profiles_union_with_first_cause(cases):
    names = ["relation-blind", "no-global", "duplicate", "global-interference"]
    combined = parse_profile(",".join(names))
    for case in cases:
        failed = failed_questions(case, combined)
        assert set(failed) == set().union(*(expected(case, n) for n in names))
        for qid, cause in failed.items():
            assert cause == next(n for n in names if qid in expected(case, n))
    # a question broken by several modes lists all of them, in spec order
    case = next(c for c in cases if _g(c, "global") and _anchors(c))
    causes = breakdown(case, parse_profile("noise:1,global-interference"))
    f = min(_anchors(case))
    assert causes[f"{f}:identity"] == ("noise:1", "global-interference")
    assert failed_questions(case, parse_profile("noise:1,global-interference"))[f"{f}:identity"] == "noise:1"
    first = failed_questions(case, parse_profile("global-interference,noise:1"))
    assert first[f"{f}:identity"] == "global-interference"


def test_weak_subtype_stops_a_leak(cases):
    case = next(c for c in cases if _g(c, "local", subtype="1.1_pattern_texture")
                and len([t for t in c.terms if t.role in ("anchor", "text")]) > 1)
    g = min(_g(case, "local", subtype="1.1_pattern_texture"))
    carrier = next(t.carrier for t in case.terms if t.symbol == g)
    failed = failed_questions(case, parse_profile("weak-subtype:1.1_pattern_texture,leaky-binding"))
    assert failed[f"{g}:presence"] == "weak-subtype:1.1_pattern_texture"
    assert f"{carrier}+{g}:exclusivity" not in failed  # never transferred, so shown nowhere


# ------------------------------------------------------------------ drawing

def _entities(record, term: str) -> list[dict]:
    return [e for e in record.drawn["entities"] if e.get("term") == term]


def test_drawing_reflects_the_record(cases):
    case = next(c for c in cases if len(_anchors(c)) >= 2 and _g(c, "global") and _g(c, "local"))
    _, perfect = generate(case, "perfect")
    _, broken = generate(case, "duplicate,no-global,leaky-binding")
    for f in _anchors(case):
        assert len(_entities(perfect, f)) == 1 and len(_entities(broken, f)) == 2
    for note in perfect.drawn["zoo"]["globals"]:
        assert note["status"] == "applied" and note["drawn"] == note["value"]
    for note in broken.drawn["zoo"]["globals"]:
        assert note["status"] == "withheld" and note["drawn"] != note["value"]
    for note in broken.drawn["zoo"]["transfers"]:
        if note.get("field"):
            assert note["status"] == "leaked" and note["on"] != note["carrier"]
            for e in _entities(broken, note["carrier"]):
                shown = e.get(note["field"])
                assert note["value"] not in (shown if isinstance(shown, list) else [shown])


def test_a_color_transfer_recolors_its_carrier_and_weak_subtype_withholds_it():
    case = _make_case(Plan("app-color-000", 3, parse("C(f ⊕ g_color, f)")), default_index(), 0)
    g = next(t for t in case.terms if t.kind == "color")
    assert g.subtype == "1.5_color"
    png, perfect = generate(case, "perfect")
    note = next(n for n in perfect.drawn["zoo"]["transfers"] if n["term"] == g.symbol)
    assert (note["field"], note["value"], note["status"], note["drawn"]) == ("color", g.value, "applied", True)
    assert [e["color"] for e in _entities(perfect, g.carrier)] == [g.value]
    assert all(oracle_answers(case.checklist, png).values())
    png, weak = generate(case, "weak-subtype:color")
    note = next(n for n in weak.drawn["zoo"]["transfers"] if n["term"] == g.symbol)
    assert note["status"] == "withheld"
    assert all(e["color"] != g.value for e in _entities(weak, g.carrier))
    assert not oracle_answers(case.checklist, png)[f"{g.symbol}:presence"]
    assert failed_questions(case, parse_profile("weak-subtype:color"))[f"{g.symbol}:presence"] == "weak-subtype:1.5_color"


def test_weak_subtype_is_not_drawn(cases):
    case = next(c for c in cases if _g(c, "local", subtype="1.1_pattern_texture"))
    _, record = generate(case, "weak-subtype:1.1_pattern_texture")
    for note in record.drawn["zoo"]["transfers"]:
        if note.get("subtype") == "1.1_pattern_texture":
            assert note["status"] == "withheld"
            assert all(e.get("pattern") != note["value"] for e in _entities(record, note["carrier"]))


def test_record_round_trips_and_bytes_are_deterministic(cases):
    case = next(c for c in cases if c.slot >= 6)
    png, record = generate(case, parse_profile("global-interference,noise:0.2"), seed=3)
    assert read_record(png) == record
    assert record.generator == "synthetic:global-interference,noise:0.2"
    assert record.case_id == case.id
    again, _ = generate(case, "global-interference,noise:0.2", seed=3)
    assert again == png
    other, _ = generate(case, "global-interference,noise:0.2", seed=4)
    assert other != png
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == (256, 256)


def test_images_without_a_record(cases):
    plain = io.BytesIO()
    Image.new("RGB", (8, 8)).save(plain, format="PNG")
    assert read_record(plain.getvalue()) is None
    with pytest.raises(TraceError, match=RECORD_KEY):
        oracle_answers(cases[0].checklist, plain.getvalue())
    with pytest.raises(TraceError):
        read_record(b"not an image")


def test_oracle_reply_polarity(cases):
    case = next(c for c in cases if any(_holds_anchor(c, q.target) for q in c.checklist if q.aspect == "duplication"))
    dup = next(q for q in case.checklist if q.aspect == "duplication" and _holds_anchor(case, q.target))
    png, _ = generate(case, "duplicate")
    reply = {a["id"]: a for a in oracle_reply(case.checklist, png)["answers"]}
    assert [a for a in reply] == [q.id for q in case.checklist]
    assert reply[dup.id] == {"id": dup.id, "answer": "yes", "reason": "broken by duplicate"}
    for q in case.checklist:
        if q.id != dup.id and q.id not in failed_questions(case, parse_profile("duplicate")):
            assert reply[q.id] == {"id": q.id, "answer": q.expected, "reason": "as drawn"}
    png, _ = generate(case, "perfect")
    assert oracle_reply([dup], png) == {"answers": [{"id": dup.id, "answer": "no", "reason": "as drawn"}]}
    assert oracle_answers([dup], png) == {dup.id: True}


# ------------------------------------------------------------------ specs

def test_profile_specs_are_canonical_and_hashable():
    p = parse_profile(" synthetic:No-Global , noise:0.10,weak-subtype:pattern_texture ")
    assert str(p) == "no-global,noise:0.1,weak-subtype:1.1_pattern_texture"
    assert p.generator == "synthetic:" + str(p)
    assert parse_profile(str(p)) == p and hash(parse_profile(str(p))) == hash(p)
    assert str(parse_profile("perfect")) == "perfect" and parse_profile("perfect") == Profile()
    assert str(parse_profile("composition-interference:02")) == "composition-interference:2"
    assert len({parse_profile("duplicate"), parse_profile("duplicate"), parse_profile("leaky-binding")}) == 2


@pytest.mark.parametrize("spec, part", [
    ("", "''"), ("wobbly", "'wobbly'"), ("noise", "'noise'"), ("noise:1.5", "'noise:1.5'"),
    ("noise:often", "'noise:often'"), ("composition-interference:two", "'composition-interference:two'"),
    ("composition-interference:0", "'composition-interference:0'"), ("no-global:1", "'no-global:1'"),
    ("weak-subtype:sparkle", "'weak-subtype:sparkle'"), ("duplicate,,noise:0.1", "''"),
    ("perfect,duplicate", "'perfect'"), ("noise:0.1,noise:0.2", "'noise:0.2'"),
])
def test_bad_specs_raise_one_line(spec, part):
    with pytest.raises(TraceError) as info:
        parse_profile(spec)
    message = str(info.value)
    assert "\n" not in message and part in message
    assert "known profiles: perfect, no-global" in message and "noise:P" in message
