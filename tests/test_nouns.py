"""Entity nouns: the head noun of a grounding phrase and its number (tracebench.nouns), nouns and
handles from an entity's ``name``, and number agreement in realized prompts and checklists."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import jinja2
import pytest
from library_helpers import entity, make_library, record

from tracebench.checklist import compile_checklist
from tracebench.formula import parse
from tracebench.library import Entity, default_library, load_library
from tracebench.nouns import agree, indefinite, is_plural, noun_phrase, plural, with_article
from tracebench.realize import realize
from tracebench.sample import LibraryIndex, bind
from tracebench.sample._index import describe
from tracebench.templating import compile_string, environment

# Grounding phrases as taggers write them -> (head noun, plural). The first ones are the old
# regex's failures ("last word before a locator": "lightning", "handwritten", "coffee" ...).
DESCRIPTIONS = [
    ("the tabby cat looking at the camera", "cat", False),
    ("the lightning towers around the pad", "towers", True),
    ("the handwritten equations on the slab", "equations", True),
    ("a woman in a red coat", "woman", False),
    ("the cup of coffee on the table", "cup", False),
    ("two children playing", "children", True),
    ("the man's hat", "hat", False),
    ("the dogs' bowls by the door", "bowls", True),
    ("the red running shoes", "shoes", True),
    ("the black and white cat", "cat", False),
    ("the old building on the hill", "building", False),
    ("a pair of shoes by the door", "shoes", True),
    ("a group of children on the bench", "children", True),
    ("the woman dressed in red", "woman", False),
    ("the cup held by the child", "cup", False),
    ("the man wearing glasses", "man", False),
    ("the glasses on the table", "glasses", True),
    ("the girl who is smiling", "girl", False),
    ("the poster that says HELLO", "poster", False),
    ("the large, fluffy cat", "cat", False),
    ("the bottom left cat", "cat", False),
    ("the cat left of the dog", "cat", False),
    ("the chubby spotted dog on the left", "dog", False),
    ("the very tall and thin tower behind the person", "tower", False),
    ("two fish in the tank", "fish", True),
    ("the fish swimming in the bowl", "fish", False),
    ("a bus parked by the road", "bus", False),
    ("the cactus in a pot", "cactus", False),
    ("a bowl of ramen", "bowl", False),
    ("a dozen eggs in a carton", "eggs", True),
    ("The T-shirt with a star", "T-shirt", False),
    ("the red one on the left", "thing", False),
]


@pytest.mark.parametrize("desc, noun, is_many", DESCRIPTIONS)
def test_the_head_noun_and_its_number(desc, noun, is_many):
    assert noun_phrase(desc).noun == noun
    assert noun_phrase(desc).plural is is_many


def test_every_shipped_synthetic_entity_is_named_by_the_noun_it_was_drawn_as():
    root = default_library()
    info, images = load_library(root)
    index = LibraryIndex.build(root, info, images)
    found = wrong = 0
    for image in images:
        for e, drawn in zip(image.ent_list, image.render["entities"]):
            assert e.name == drawn["noun"]  # the library records the noun as the entity's name
            # and the phrase analysis alone finds it too (the head of "gift box" is "box")
            found += 1
            wrong += noun_phrase(e.ent_desc).noun != drawn["noun"].split()[-1]
    assert found > 900 and wrong == 0
    assert [ref.noun for ref in index.entities] == [e.name for image in images for e in image.ent_list]


@pytest.mark.parametrize("word, many", [
    ("towers", True), ("wear marks", True), ("facial features", True), ("children", True), ("people", True),
    ("scissors", True), ("mice", True), ("cat", False), ("glass", False), ("bus", False), ("cactus", False),
    ("lens", False), ("ramen", False), ("news", False), ("sheep", False), ("menus", True), ("", False),
    (None, False),
])
def test_number_of_a_noun(word, many):
    assert is_plural(word) is many


def test_articles_plurals_and_agreement():
    assert [with_article(w) for w in ("umbrella", "unicorn", "hour", "cat")] == [
        "an umbrella", "a unicorn", "an hour", "a cat"]
    assert [plural(w) for w in ("gift box", "dress", "person", "fish", "superhero")] == [
        "gift boxes", "dresses", "people", "fish", "superheroes"]
    assert agree("takes", "towers") == "take" and agree("takes", "tower") == "takes"
    assert agree("this", "wear marks") == "these" and agree("this", "pattern") == "this"
    assert agree("Does", "equations") == "Do" and agree("Is that", "wear marks") == "Are those"
    assert agree("wears or carries", "children") == "wear or carry"


def test_text_only_descriptions_name_something_new():
    assert describe("the child with a hair bun in the middle") == "a child with a hair bun"
    assert describe("the umbrella on the left") == "an umbrella"
    assert describe("the lightning towers around the pad") == "lightning towers around the pad"
    assert describe("two children playing") == "two children playing"
    assert indefinite("a umbrella") == "an umbrella"


def test_the_agree_filter_renders_the_same_on_the_fast_path_and_through_jinja():
    text = "{{ 'Does' | agree(noun) }} the {{ noun }} {{ 'keep' }} {{ 'this' | agree(name) }} {{ name }}?"
    fast = compile_string(text)
    slow = environment().from_string(text)
    for noun, name in [("towers", "wear marks"), ("cat", "pattern")]:
        assert fast({"noun": noun, "name": name}) == slow.render(noun=noun, name=name)
    assert fast({"noun": "towers", "name": "wear marks"}) == "Do the towers keep these wear marks?"
    with pytest.raises(jinja2.UndefinedError):
        fast({"noun": "towers"})


@pytest.fixture
def plural_library(tmp_path):
    records = [
        record("pad", [{**entity("Structure", "the lightning towers around the pad",
                                 _1__1_pattern_texture=["zigzag"], _1__3_damage_wear=["rust"]), "name": "towers"}]),
        record("slab", [entity("Text", "the handwritten equations on the slab", _1__1_pattern_texture=["dots"],
                               _1__3_damage_wear=["cracks"])]),
        record("cat", [{**entity("Animal", "the tabby cat looking at the camera", _1__1_pattern_texture=["stripes"]),
                 "name": "kitten"}]),
    ]
    root = make_library(tmp_path / "lib", records)
    info, images = load_library(root)
    return LibraryIndex.build(root, info, images)


def test_nouns_and_handles_come_from_the_name_else_from_the_phrase(plural_library):
    assert [e.noun for e in plural_library.entities] == ["towers", "equations", "kitten"]
    handles = set()
    for seed in range(40):
        bound = bind(parse("f"), plural_library, random.Random(seed))
        (term,) = bound.terms
        handles.add((term.entity, term.noun, term.handle))
    assert handles == {("the lightning towers around the pad", "towers", "towers_A"),
                       ("the handwritten equations on the slab", "equations", "equations_A"),
                       ("the tabby cat looking at the camera", "kitten", "kitten_A")}


def test_a_plural_entity_agrees_in_the_prompt_and_the_checklist(plural_library):
    seen = set()
    for seed in range(60):
        bound = bind(parse("f ⊕ g_damage"), plural_library, random.Random(seed))
        carrier = next(t for t in bound.terms if t.op == "f")
        if carrier.noun != "towers":
            continue
        seen.add(carrier.noun)
        prompts = realize(bound.terms, bool(bound.compositions), random.Random(seed))
        assert "('towers_A') take the wear marks of [" in prompts.prompt
        assert "The towers take these wear marks: " in prompts.text_only
        assert " are the center of the picture" in prompts.prompt or " stand out in the middle" in prompts.prompt
        questions = {q.aspect: q.question for q in compile_checklist(bound.terms, bound.compositions)}
        assert questions["identity"].startswith("Do the towers ('towers_A') keep the identity")
        assert questions["fidelity"].startswith("Are those wear marks faithful")
        assert questions["integrity"].startswith("Are the towers ('towers_A') still recognizable")
        assert questions["fit"].startswith("Are the wear marks naturally integrated")
    assert seen == {"towers"}


def test_a_singular_entity_keeps_its_singular_verbs(plural_library):
    for seed in range(60):
        bound = bind(parse("f ⊕ g_pattern"), plural_library, random.Random(seed))
        carrier = next(t for t in bound.terms if t.op == "f")
        if carrier.noun == "kitten":
            prompts = realize(bound.terms, bool(bound.compositions), random.Random(seed))
            assert "('kitten_A') takes the pattern of [" in prompts.prompt
            assert "The kitten takes this pattern: " in prompts.text_only
            assert " is the center of the picture" in prompts.prompt or " stands out in the middle" in prompts.prompt
            return
    pytest.fail("the kitten was never drawn")


def test_name_is_optional_and_a_blank_name_is_none():
    assert Entity(category="Animal", ent_desc="the cat").name is None
    assert Entity(category="Animal", ent_desc="the cat", name="  ").name is None
    assert Entity(category="Animal", ent_desc="the cat", name=" tabby  cat ").name == "tabby cat"
    written = json.loads(Entity(category="Animal", ent_desc="the cat", name="cat").model_dump_json())
    assert written["name"] == "cat"


def test_inflect_is_imported_without_typeguard_and_leaves_none_behind():
    code = ("import sys, time; t = time.perf_counter(); import tracebench.nouns as n; n.is_plural('towers'); "
            "leaked = 'typeguard' in sys.modules; import typeguard; "
            "print(leaked, hasattr(typeguard, 'TypeCheckError'), n.agree('keeps', 'equations'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True", "keep"]
