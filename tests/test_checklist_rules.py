"""The checklist compiled from hand-made bound terms, question by question: ids, operators,
targets, aspects, polarity, dependencies, images and wording, as templates/checklist/questions.toml
and the paper's Table 6 state them. Pure and fast (no library, no sampling): the tests
bench/mutation.py runs against tracebench/checklist/_compile.py."""

from __future__ import annotations

import pytest

from tracebench.checklist import aspects, compile_checklist
from tracebench.records import TermBinding


def anchor(symbol: str, noun: str, handle: str, image: str, entity: str) -> TermBinding:
    return TermBinding(symbol=symbol, op="f", role="anchor", carrier=None, handle=handle, noun=noun, image=image,
                       entity=entity, value=entity)


def text(symbol: str, noun: str, handle: str) -> TermBinding:
    return TermBinding(symbol=symbol, op="T", role="text", handle=handle, noun=noun, value=f"a {noun}")


def g(symbol: str, role: str, carrier: str | None, image: str, subtype: str, value: str, entity: str,
      participants: tuple[str, ...] = ()) -> TermBinding:
    return TermBinding(symbol=symbol, op="g", role=role, carrier=carrier, image=image, subtype=subtype, value=value,
                       entity=entity, participants=participants)


def rows(questions) -> list[tuple]:
    return [(q.id, q.op.value, q.target, q.aspect, q.expected, q.depends_on, q.images) for q in questions]


DOG = anchor("f1", "dog", "dog_A", "Image 1", "the plush dog")
CAT = anchor("f2", "cat", "cat_A", "Image 2", "the grey cat")
CHEF = text("T_e1", "chef", "chef_A")
PATTERN = g("g_pattern1", "local", "f1", "Image 3", "1.1_pattern_texture", "striped", "the robe")
STYLE = g("g_style1", "global", None, "Image 4", "4.1_style", "watercolor", "the painting")


def test_one_anchor_with_an_attribute_is_one_scene_c0_as_the_papers_example():
    """C(f1 ⊕ g1) written without C: anchor 2, g 4, its binding 4, the scene's composition 4
    (coexistence needs two members; no relation asked)."""
    questions = compile_checklist((DOG, PATTERN), ())
    assert rows(questions) == [
        ("f1:existence", "anchor", "f1", "existence", "yes", (), ()),
        ("f1:identity", "anchor", "f1", "identity", "yes", ("f1:existence",), ("Image 1",)),
        ("g_pattern1:presence", "disentangle", "g_pattern1", "presence", "yes", (), ("Image 3",)),
        ("g_pattern1:fidelity", "disentangle", "g_pattern1", "fidelity", "yes", ("g_pattern1:presence",), ("Image 3",)),
        ("g_pattern1:isolation", "disentangle", "g_pattern1", "isolation", "yes", ("g_pattern1:presence",),
         ("Image 3",)),
        ("g_pattern1:carrier", "disentangle", "g_pattern1", "carrier", "yes", ("g_pattern1:presence",), ()),
        ("f1+g_pattern1:integrity", "apply", "f1⊕g_pattern1", "integrity", "yes", ("f1:existence",), ()),
        ("f1+g_pattern1:visibility", "apply", "f1⊕g_pattern1", "visibility", "yes", ("g_pattern1:presence",), ()),
        ("f1+g_pattern1:fit", "apply", "f1⊕g_pattern1", "fit", "yes", ("g_pattern1:presence",), ()),
        ("f1+g_pattern1:exclusivity", "apply", "f1⊕g_pattern1", "exclusivity", "no", ("g_pattern1:presence",),
         ("Image 3",)),
        ("C0:spatial", "compose", "C0", "spatial", "yes", (), ()),
        ("C0:duplication", "compose", "C0", "duplication", "no", (), ()),
        ("C0:leakage", "compose", "C0", "leakage", "no", (), ("Image 1", "Image 3")),
        ("C0:leakage_context", "compose", "C0", "leakage_context", "no", (), ("Image 1", "Image 3")),
    ]
    text_of = {q.id: q.question for q in questions}
    assert text_of["f1:existence"] == "Does the image show the dog ('dog_A')?"
    assert text_of["f1:identity"] == ("Does the dog ('dog_A') keep the identity and appearance of [the plush dog] "
                                      "in Image 1?")
    assert text_of["g_pattern1:presence"] == "Does the dog ('dog_A') show the pattern taken from [the robe] in Image 3?"
    assert text_of["g_pattern1:fidelity"] == "Is that pattern faithful to the source (striped)?"
    assert text_of["f1+g_pattern1:exclusivity"] == ("Does the pattern taken from Image 3 also appear on anything "
                                                    "other than the dog ('dog_A')?")
    assert text_of["C0:duplication"] == "Does the dog ('dog_A') appear more than once?"
    assert text_of["C0:leakage"] == ("Does the image contain entities or objects from Image 1 and Image 3 that were "
                                     "not asked for?")


def test_a_text_carrier_has_no_existence_to_depend_on_and_a_global_binds_to_the_scene():
    """C1(T_e1 ⊕ g_pattern1, f2) ⊕ g_style1: the binding's integrity depends on nothing (a text
    entity has no existence question); the global term asks presence, fidelity, isolation and its
    binding consistency and integrity; C1 has two members: coexistence on the anchor's existence."""
    on_chef = g("g_pattern1", "local", "T_e1", "Image 3", "1.1_pattern_texture", "striped", "the robe")
    style = g("g_style1", "global", "C1", "Image 4", "4.1_style", "watercolor", "the painting")
    questions = compile_checklist((CHEF, on_chef, CAT, style), (("C1", ("T_e1", "f2"), None),))
    got = {q.id: q for q in questions}
    assert got["T_e1+g_pattern1:integrity"].depends_on == ()
    assert got["T_e1+g_pattern1:visibility"].depends_on == ("g_pattern1:presence",)
    assert [q.id for q in questions if q.target == "g_style1"] == [
        "g_style1:presence", "g_style1:fidelity", "g_style1:isolation"]
    assert [(q.id, q.depends_on) for q in questions if q.target == "C1⊕g_style1"] == [
        ("C1+g_style1:consistency", ("g_style1:presence",)), ("C1+g_style1:integrity", ())]
    assert [(q.aspect, q.depends_on, q.images) for q in questions if q.target == "C1"] == [
        ("coexistence", ("f2:existence",), ()), ("spatial", (), ()), ("duplication", (), ()),
        ("leakage", (), ("Image 3", "Image 2", "Image 4")), ("leakage_context", (), ("Image 3", "Image 2", "Image 4"))]
    assert got["C1:coexistence"].question == "Do the chef ('chef_A') and the cat ('cat_A') appear together in the image?"
    assert got["C1:duplication"].question == "Does any of the chef ('chef_A') and the cat ('cat_A') appear more than once?"
    assert got["g_style1:fidelity"].question == "Does the style of the image match that of Image 4 (watercolor)?"
    assert "C1:relation" not in got  # no relation requested


def test_a_reference_relation_and_nested_compositions():
    """C1(C2(f1, f2) ⊕ g_rel1, T_e1): the relation's own questions, its binding, the inner
    composition's relation question on its anchors; a composition's members are every entity
    inside it, and its images those of the nested composition too (and of terms carried by it)."""
    rel = g("g_rel1", "relation", "C2", "Image 5", "4.6_inter_instance_relation", "a child holding a bag",
            "the child and the bag", participants=("f1", "f2"))
    questions = compile_checklist((DOG, CAT, rel, CHEF), (("C1", ("f1", "f2", "T_e1"), None), ("C2", ("f1", "f2"), "C1")))
    got = {q.id: q for q in questions}
    assert [(q.id, q.depends_on, q.images) for q in questions if q.target == "g_rel1"] == [
        ("g_rel1:presence", (), ()), ("g_rel1:fidelity", ("g_rel1:presence",), ("Image 5",)),
        ("g_rel1:isolation", ("g_rel1:presence",), ("Image 5",))]
    assert [(q.id, q.depends_on) for q in questions if q.target == "C2⊕g_rel1"] == [
        ("C2+g_rel1:binding", ("g_rel1:presence",)), ("C2+g_rel1:integrity", ())]
    assert got["C2:relation"].depends_on == ("f1:existence", "f2:existence")
    assert got["C2:relation"].question == ("Do ('dog_A') and ('cat_A') relate as requested "
                                          "(a child holding a bag)?")
    assert got["g_rel1:presence"].question == "Do ('dog_A') and ('cat_A') interact with each other?"
    assert "C1:relation" not in got
    assert got["C2:coexistence"].depends_on == ("f1:existence", "f2:existence")
    assert got["C1:coexistence"].depends_on == ("f1:existence", "f2:existence")  # the anchors nested in it too
    assert got["C1:leakage"].images == ("Image 1", "Image 2", "Image 5")
    assert got["C2:leakage"].images == ("Image 1", "Image 2", "Image 5")
    order = [q.target for q in questions]
    assert order.index("C1") < order.index("C2")  # compositions in formula order, after the terms


def test_attach_and_ip_terms_ask_their_own_aspects():
    hat = g("g_attach1", "attach", "f1", "Image 6", "attach", "the red hat", "the red hat")
    design = g("g_ip1", "ip", "f2", "Image 7", "ip", "the robot's design", "the robot")
    questions = compile_checklist((DOG, hat, CAT, design), (("C1", ("f1", "f2"), None),))
    assert [(q.aspect, q.depends_on, q.images) for q in questions if q.target == "g_attach1"] == [
        ("presence", (), ("Image 6",)), ("fidelity", ("g_attach1:presence",), ("Image 6",)),
        ("details", ("g_attach1:presence",), ("Image 6",)), ("carrier", ("g_attach1:presence",), ())]
    assert [q.aspect for q in questions if q.target == "g_ip1"] == ["presence", "fidelity", "scheme", "carrier"]
    assert [q.aspect for q in questions if q.target == "f2⊕g_ip1"] == ["integrity", "visibility", "fit",
                                                                       "exclusivity"]
    got = {q.id: q for q in questions}
    assert got["g_attach1:presence"].question == "Does the dog ('dog_A') wear or carry [the red hat] from Image 6?"
    assert got["f2+g_ip1:integrity"].depends_on == ("f2:existence",)


@pytest.mark.parametrize("noun, verb", [("dog", "Does"), ("towers", "Do")])
def test_verbs_agree_with_the_noun(noun, verb):
    thing = anchor("f1", noun, "x_A", "Image 1", f"the {noun}")
    identity = next(q for q in compile_checklist((thing,), ()) if q.aspect == "identity")
    assert identity.question.startswith(f"{verb} the {noun} ('x_A') keep")


def test_ids_are_unique_and_every_dependency_is_asked():
    rel = g("g_rel1", "relation", "C2", "Image 5", "4.6_inter_instance_relation", "holding", "the pair",
            participants=("f1", "f2"))
    questions = compile_checklist((DOG, PATTERN, CAT, rel, CHEF, STYLE.model_copy(update={"carrier": "C1"})),
                                  (("C1", ("f1", "f2", "T_e1"), None), ("C2", ("f1", "f2"), "C1")))
    ids = [q.id for q in questions]
    assert len(ids) == len(set(ids))
    assert all(d in ids for q in questions for d in q.depends_on)
    asked = aspects()
    assert {q.aspect for q in questions} <= set().union(*asked.values())
    assert asked["compose"] == {"coexistence", "spatial", "duplication", "leakage", "leakage_context"}


def test_lists_of_three_and_a_scene_without_references():
    """Three members are joined "a, b and c"; a scene of text entities alone names "the references"."""
    horse = text("T_e2", "horse", "horse_A")
    questions = compile_checklist((DOG, CAT, CHEF), (("C1", ("f1", "f2", "T_e1"), None),))
    coexistence = next(q for q in questions if q.id == "C1:coexistence")
    assert coexistence.question == ("Do the dog ('dog_A'), the cat ('cat_A') and the chef ('chef_A') appear together "
                                    "in the image?")
    leakage = next(q for q in compile_checklist((CHEF, horse), (("C1", ("T_e1", "T_e2"), None),))
                   if q.aspect == "leakage")
    assert leakage.question == "Does the image contain entities or objects from the references that were not asked for?"
    assert leakage.images == ()


def test_an_inner_composition_sees_only_its_own_images_and_the_outer_one_all_of_them():
    """C1(C2(f1, f2) ⊕ g_rel1, C3(f3, T_e1) ⊕ g_rel2): each inner composition's images are its own
    (and those of the relation it carries); the outer one's are those of both."""
    bird = anchor("f3", "bird", "bird_A", "Image 8", "the blue bird")
    rel1 = g("g_rel1", "relation", "C2", "Image 5", "4.6_inter_instance_relation", "holding", "the pair",
             participants=("f1", "f2"))
    rel2 = g("g_rel2", "relation", "C3", "Image 9", "4.6_inter_instance_relation", "chasing", "the pair",
             participants=("f3", "T_e1"))
    questions = compile_checklist((DOG, CAT, rel1, bird, CHEF, rel2),
                                  (("C1", ("f1", "f2", "f3", "T_e1"), None), ("C2", ("f1", "f2"), "C1"),
                                   ("C3", ("f3", "T_e1"), "C1")))
    images = {q.target: q.images for q in questions if q.aspect == "leakage"}
    assert images == {"C1": ("Image 1", "Image 2", "Image 5", "Image 8", "Image 9"),
                      "C2": ("Image 1", "Image 2", "Image 5"), "C3": ("Image 8", "Image 9")}
    relation = {q.target: q.depends_on for q in questions if q.aspect == "relation"}
    assert relation == {"C2": ("f1:existence", "f2:existence"), "C3": ("f3:existence",)}


# ---------------------------------------------------------------- every kind's wording

def _every_attribute_term() -> list[tuple[str, TermBinding]]:
    """One g term per subtype of the taxonomy that prompts and questions name (its role's own
    carrier: the dog for an entity's attribute, the scene for an image-level one)."""
    from tracebench.taxonomy import taxonomy

    terms = []
    for key, spec in taxonomy().subtypes.items():
        if spec.role == "local":
            terms.append((key, g("g1", "local", "f1", "Image 3", key, "some value", "the robe")))
        elif spec.role == "global":
            terms.append((key, g("g1", "global", None, "Image 3", key, "some value", "the painting")))
    return terms


def _wording(term: TermBinding) -> list[str]:
    import random

    from tracebench.realize import realize

    from tracebench.realize import phrase_name
    from tracebench.resources import read_toml
    from tracebench.templating import compile_string

    texts = [q.question for q in compile_checklist((DOG, term), ())]
    prompts = realize((DOG, term), False, random.Random(0))
    # every prompt line of the term's role, the prose of a sub-case that states it in words included
    context = {"carrier": "('dog_A')", "noun": "dog", "source": term.entity, "image": term.image,
               "name": phrase_name(term.subtype), "value": term.value}
    lines = [compile_string(section[term.role])(context) for section in read_toml("templates", "prompts/lines.toml").values()
             if term.role in section]
    return texts + [prompts.prompt, prompts.text_only] + lines


@pytest.mark.parametrize("subtype,term", _every_attribute_term(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_kind_agrees_in_number_and_isolates_without_naming_itself(subtype, term):
    """A plural attribute ("wear marks") takes plural words in every question and prompt line
    ("Are only the wear marks", "those wear marks"); the isolation question never lists the
    trait it transfers among those that must not come along ("the shape, without its shape")."""
    import re

    from tracebench.nouns import is_plural
    from tracebench.realize import phrase_name

    name = phrase_name(subtype)
    texts = _wording(term)
    if is_plural(name):
        singular = re.compile(rf"\b(?:is|does|has|was|this|that)\s+(?:only\s+)?(?:the\s+)?{name}\b|"
                              rf"\b{name}\s+(?:is|does|has|was)\b", re.IGNORECASE)
        assert [t for t in texts if singular.search(t)] == []
    isolation = [t for t in texts if "without its other traits" in t]
    for text in isolation:
        listed = re.search(r"without its other traits \(its (.*?)\)", text).group(1)
        assert not set(re.split(r", | or ", listed)) & {name, f"{name}s", name.rstrip("s")}, text
    assert isolation or term.role == "global"


def test_the_isolation_of_a_shape_and_of_plural_wear_marks_read_right():
    shape = {q.aspect: q.question for q in compile_checklist((DOG, g("g1", "local", "f1", "Image 3", "2.3_shape",
                                                                       "round", "the robe")), ())}
    assert shape["isolation"] == ("Is only the shape taken from [the robe], without its other traits "
                                  "(its colors or identity) carried along?")
    wear = {q.aspect: q.question for q in compile_checklist((DOG, g("g1", "local", "f1", "Image 3", "1.3_damage_wear",
                                                                      "scratches", "the robe")), ())}
    assert wear["isolation"].startswith("Are only the wear marks taken from [the robe]")
    assert wear["carrier"] == "Does the dog ('dog_A') keep its own identity while showing those wear marks?"
