"""Tagged libraries: records, validation of every rule, stats, balance, import."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest

from library_helpers import entity, make_library, record, sample_records
from test_cli import run_trace
from tracebench.errors import TraceError, ValidationFailed
from tracebench.library import (TAGS_FILE, GlobalTag, TagDict, TaggedImage, balance_library, balanced_selection,
                                image_features, import_library, library_stats, load_library, read_valid_library,
                                validate_library)
from tracebench.sample import SampleOptions, sample_benchmark
from tracebench.schemas import SCHEMAS, schema_path, schema_text
from tracebench.resources import data_path, read_toml
from tracebench.taxonomy import load_taxonomy, taxonomy


def test_models_follow_the_taxonomy_field_for_field():
    tax = taxonomy()
    entity_fields = set()
    for group in TagDict.model_fields.values():
        entity_fields |= {f.alias for f in group.annotation.model_fields.values()}
    assert entity_fields == {s.key for s in tax.entity_subtypes()}
    assert {f.alias for f in GlobalTag.model_fields.values()} == {s.key for s in tax.global_subtypes()}
    assert {f.alias for f in TagDict.model_fields.values()} == {"1_Appearance", "2_Form", "3_Dynamics"}


def _edited_subtypes(edit) -> dict:
    data = json.loads(json.dumps(read_toml("taxonomy", "subtypes.toml")))
    edit(data)
    return data


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["subtypes"]["1.1_pattern_texture"].update(kinds=["style"]),
     "1.1_pattern_texture is bound in the local role, but its kind 'style' has roles global"),
    (lambda d: d["subtypes"]["1.1_pattern_texture"].update(kinds=["glitter"]),
     "1.1_pattern_texture lists kind 'glitter', which taxonomy/kinds.toml does not define"),
    (lambda d: d["subtypes"].pop("1.5_color"),
     "no local subtype lists kind 'color', so a g_color term in that role could never be bound"),
    (lambda d: d["subtypes"]["2.3_shape"].update(group="5_Mood"), "2.3_shape: unknown group '5_Mood'"),
    (lambda d: d["subtypes"].update({"1.6_pattern_texture": d["subtypes"]["1.1_pattern_texture"]}),
     "share the name 'pattern_texture'"),
    (lambda d: d["special"]["attach"].update(role="anchor"),
     "attach is bound in the anchor role"),
])
def test_the_taxonomy_is_checked_against_the_formula_vocabulary(edit, message):
    categories = read_toml("taxonomy", "categories.toml")
    load_taxonomy(categories, _edited_subtypes(lambda d: None))  # the shipped files load
    with pytest.raises(ValueError, match=re.escape(message)):
        load_taxonomy(categories, _edited_subtypes(edit))


def test_record_round_trips_with_the_papers_field_names():
    image = TaggedImage.model_validate(sample_records()[0])
    text = image.model_dump_json()
    data = json.loads(text)
    assert set(data) >= {"ent_list", "background", "global_tag"}
    assert data["ent_list"][0]["tag_dict"]["1_Appearance"]["1.1_pattern_texture"] == ["stripes"]
    assert data["global_tag"]["4.1_style"] == ["flat"]
    assert TaggedImage.model_validate_json(text) == image


def test_exported_json_schemas_are_current():
    repository = Path(__file__).resolve().parent.parent
    for name in SCHEMAS:
        path = schema_path(name, repository)
        assert path.read_text(encoding="utf-8") == schema_text(name), (
            f"{path} is stale: run `python -m tracebench.schemas` from the repository root")
    # the shipped copies of the library schemas are the same files
    assert data_path("taxonomy", "tagged_image.schema.json").read_text() == schema_text("tagged_image.schema.json")


def test_a_good_library_validates(tmp_path):
    root = make_library(tmp_path / "lib", sample_records())
    assert validate_library(root) == []
    result = run_trace("library", "validate", str(root))
    assert result.returncode == 0, result.stderr
    assert "3 images, 6 entities" in result.stdout


def _corrupt(root: Path, line: int, change) -> None:
    lines = (root / TAGS_FILE).read_text().splitlines()
    data = json.loads(lines[line - 1])
    change(data, root)
    lines[line - 1] = json.dumps(data)
    (root / TAGS_FILE).write_text("\n".join(lines) + "\n")


def set_attribute(path, value):
    def change(data, root):
        target = data
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return change


def _outside_link(data, root):
    outside = root.parent / "outside.png"
    shutil.copyfile(root / data["path"], outside)
    os.symlink(outside, root / "images" / "link.png")
    data["path"] = "images/link.png"


def _garbage_image(data, root):
    (root / data["path"]).write_bytes(b"not an image at all")


CORRUPTIONS = [
    (set_attribute(["ent_list", 0, "tag_dict", "1_Appearance", "1.9_sparkle"], ["x"]),
     "tags.jsonl:1: ent_list[0].tag_dict.1_Appearance: unknown field '1.9_sparkle'"),
    (set_attribute(["ent_list", 0, "category"], "Robot"), "tags.jsonl:1: ent_list[0].category: unknown category 'Robot'"),
    (set_attribute(["ent_list", 0, "tag_dict", "2_Form", "2.1_hairstyle"], ["bun"]),
     "tags.jsonl:1: ent_list[0].tag_dict.2_Form.2.1_hairstyle: subtype 2.1_hairstyle does not apply to category "
     "'Animal' (it applies to Human)"),
    (set_attribute(["ent_list", 0, "usable_as"], ["attach"]), "tags.jsonl:1: ent_list[0].usable_as: 'attach' does not apply"),
    (set_attribute(["ent_list", 0, "bbox"], [0, 0, 500, 10]), "tags.jsonl:1: ent_list[0].bbox: [0, 0, 500, 10] is not inside"),
    (set_attribute(["path"], "images/missing.png"), "tags.jsonl:1: path: image not found: images/missing.png"),
    (set_attribute(["path"], "/etc/passwd"), "tags.jsonl:1: path: absolute paths are not allowed"),
    (set_attribute(["path"], "images/../../outside.png"), "tags.jsonl:1: path: '..' is not allowed"),
    (_outside_link, "tags.jsonl:1: path: a link that leaves the library folder"),
    (_garbage_image, "tags.jsonl:1: path: cannot read image: images/cat.png (UnidentifiedImageError)"),
    (set_attribute(["width"], 65), "tags.jsonl:1: width: recorded 65x48, image is 64x48"),
    (set_attribute(["id"], "pair"), "tags.jsonl:2: id: duplicate id 'pair' (first on line 1)"),
    (set_attribute(["height"], -3), "tags.jsonl:1: height: expected a number greater than 0"),
    (set_attribute(["ent_list", 0, "ent_desc"], ""), "tags.jsonl:1: ent_list[0].ent_desc: expected a non-empty string"),
]


@pytest.mark.parametrize("change,expected", CORRUPTIONS)
def test_each_validation_rule_reports_file_line_and_field(tmp_path, change, expected):
    root = make_library(tmp_path / "lib", sample_records())
    _corrupt(root, 1, change)
    problems = validate_library(root)
    assert any(p.startswith(expected) for p in problems), problems
    result = run_trace("library", "validate", str(root))
    assert result.returncode == 2
    assert expected in result.stderr
    assert result.stderr.splitlines()[-1].startswith("trace library validate: ")
    assert "Traceback" not in result.stderr


def test_validation_lists_all_problems_and_checks_the_whole_folder(tmp_path):
    root = make_library(tmp_path / "lib", sample_records())
    lines = (root / TAGS_FILE).read_text().splitlines()
    (root / TAGS_FILE).write_text(lines[0] + "\n{broken\n\n" + lines[1] + "\n" + lines[1] + "\n")
    problems = validate_library(root)
    assert any(p.startswith("tags.jsonl:2: not valid JSON") for p in problems)
    assert any(p.startswith("tags.jsonl:3: empty line") for p in problems)
    assert any(p.startswith("tags.jsonl:5: id: duplicate id 'pair' (first on line 4)") for p in problems)
    assert any(p.startswith("library.json: images: says 3") for p in problems)


def test_a_changed_image_breaks_the_content_hash(tmp_path):
    root = make_library(tmp_path / "lib", sample_records())
    from PIL import Image

    Image.new("RGB", (64, 48), (1, 2, 3)).save(root / "images" / "cat.png")
    assert [p for p in validate_library(root) if p.startswith("library.json: content_hash")]
    (root / "library.json").unlink()
    assert "library.json: missing" in validate_library(root)


def test_not_a_library(tmp_path):
    assert validate_library(tmp_path / "nope")[0].endswith("not a directory")
    tmp_path.joinpath("empty").mkdir()
    assert validate_library(tmp_path / "empty")[0].startswith("tags.jsonl: missing")


def test_stats_count_what_the_tags_say(tmp_path):
    root = make_library(tmp_path / "lib", sample_records())
    stats = library_stats(load_library(root)[1])
    assert stats["images"] == 3 and stats["entities"] == 6
    assert stats["categories"]["Animal"] == 1 and stats["categories"]["Transportation"] == 0
    assert stats["subtypes"]["1.1_pattern_texture"] == 1 and stats["subtypes"]["2.1_hairstyle"] == 1
    assert stats["global"]["4.1_style"] == 1 and stats["global"]["4.6_inter_instance_relation"] == 1
    assert stats["usable_as"] == {"attach": 1, "ip": 0}
    assert stats["multi_entity_share"] == round(2 / 3, 4)
    assert stats["entities_per_image"] == {"1": 1, "2": 1, "3": 1}
    result = run_trace("library", "stats", str(root), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"images", "entities", "categories", "subtypes", "global", "multi_entity_share",
            "entities_per_image"} <= set(data)
    assert data == json.loads(json.dumps(stats))


def _skewed_pool(n: int, seed: int) -> list[TaggedImage]:
    """Mostly plain animals; a few images carry rare subtypes."""
    rng = random.Random(seed)
    rare = [("Human", {"_2__1_hairstyle": ["bun"]}), ("Text", {"_1__4_font": ["serif"]}),
            ("Object", {"_1__3_damage_wear": ["cracked"]}), ("Human", {"_3__2_expression": ["smiling"]}),
            ("Transportation", {"_3__4_motion_effect": ["speed lines"]})]
    images = []
    for i in range(n):
        if rng.random() < 0.06:
            category, tags = rng.choice(rare)
        else:
            category, tags = "Animal", {"_1__1_pattern_texture": [rng.choice(["stripes", "dots"])]}
        images.append(TaggedImage.model_validate(record(f"i{i}", [entity(category, f"thing {i}", **tags)])))
    return images


def _rare_coverage(images, chosen) -> int:
    """How many selected images carry a feature held by fewer than 10% of the pool."""
    counts: dict[str, int] = {}
    for image in images:
        for f in image_features(image):
            counts[f] = counts.get(f, 0) + 1
    rare = {f for f, c in counts.items() if c < 0.1 * len(images)}
    return sum(1 for i in chosen if image_features(images[i]) & rare)


def test_balanced_selection_beats_random_on_rare_subtypes():
    images = _skewed_pool(600, seed=1)
    k = 60
    balanced = _rare_coverage(images, balanced_selection(images, k))
    randoms = [_rare_coverage(images, random.Random(s).sample(range(len(images)), k)) for s in range(200)]
    assert balanced > max(randoms)
    assert balanced_selection(images, k) == balanced_selection(images, k)  # deterministic


def test_balanced_selection_equals_the_plain_greedy():
    images = _skewed_pool(120, seed=3)
    counts: dict[str, int] = {}
    remaining, plain = list(range(len(images))), []
    for _ in range(40):  # Eq. 1 literally: rescan every image at every pick
        scores = [(sum(1 / (1 + counts.get(f, 0)) for f in sorted(image_features(images[i]))), -i) for i in remaining]
        best = -max(scores)[1]
        plain.append(best)
        remaining.remove(best)
        for f in image_features(images[best]):
            counts[f] = counts.get(f, 0) + 1
    assert balanced_selection(images, 40) == plain


def test_balance_command_writes_a_valid_smaller_library(tmp_path):
    root = make_library(tmp_path / "lib", sample_records())
    result = run_trace("library", "balance", str(root), "--n", "2", "--out", str(tmp_path / "small"))
    assert result.returncode == 0, result.stderr
    assert validate_library(tmp_path / "small") == []
    assert load_library(tmp_path / "small")[0].images == 2
    bad = run_trace("library", "balance", str(root), "--n", "9", "--out", str(tmp_path / "big"))
    assert bad.returncode == 2 and not (tmp_path / "big").exists()


def test_library_functions_check_the_library_as_the_commands_do(tmp_path):
    root = make_library(tmp_path / "lib", sample_records())
    _corrupt(root, 1, set_attribute(["ent_list", 0, "category"], "Robot"))
    with pytest.raises(ValidationFailed) as checked:
        read_valid_library(root)
    assert checked.value.problems == validate_library(root) != []
    with pytest.raises(ValidationFailed) as sampled:
        sample_benchmark(tmp_path / "bench", SampleOptions(slots=(1,), per_slot=1, library=root))
    with pytest.raises(ValidationFailed) as balanced:
        balance_library(root, 1, tmp_path / "small")
    assert sampled.value.problems == balanced.value.problems == checked.value.problems
    for args in (["validate", str(root)], ["balance", str(root), "--n", "1", "--out", str(tmp_path / "small")]):
        result = run_trace("library", *args)
        assert result.returncode == 2 and result.stderr.splitlines()[:-1] == checked.value.problems
    assert not (tmp_path / "bench").exists() and not (tmp_path / "small").exists()
    good = make_library(tmp_path / "good", sample_records())
    with pytest.raises(TraceError, match="^--n: 9 is not between 1 and the library's 3 images$"):
        balance_library(good, 9, tmp_path / "big")


@pytest.mark.parametrize("as_list", [False, True])
def test_import_builds_a_valid_library_and_fills_sizes(tmp_path, as_list):
    from library_helpers import write_images

    records = sample_records()
    write_images(tmp_path / "photos", records)
    for rec in records:
        del rec["width"], rec["height"], rec["id"]
    tags = tmp_path / ("tags.json" if as_list else "tags.jsonl")
    tags.write_text(json.dumps(records) if as_list else "\n".join(json.dumps(r) for r in records) + "\n")
    result = run_trace("library", "import", str(tmp_path / "photos"), "--tags", str(tags), "--out", str(tmp_path / "lib"))
    assert result.returncode == 0, result.stderr
    assert validate_library(tmp_path / "lib") == []
    images = load_library(tmp_path / "lib")[1]
    assert images[0].width == 64
    assert [i.id for i in images] == ["cat", "pair", "sign"]  # an id left out is the file name's stem


def test_import_reports_every_problem_and_writes_nothing(tmp_path):
    from library_helpers import write_images

    records = sample_records()
    write_images(tmp_path / "photos", records)
    records[0]["ent_list"][0]["category"] = "Robot"
    records[2]["path"] = "../escape.png"
    tags = tmp_path / "mine.jsonl"
    tags.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    with pytest.raises(ValidationFailed) as info:
        import_library(tmp_path / "photos", tags, tmp_path / "lib")
    assert any(p.startswith("mine.jsonl:1: ent_list[0].category") for p in info.value.problems)
    assert any(p.startswith("mine.jsonl:3: path: '..'") for p in info.value.problems)
    assert not (tmp_path / "lib").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".lib")]


# --- importing tags as researchers write them -------------------------------------------------------

def _import(tmp_path, tags, *extra: str, name: str = "tags.json", photos: str = "photos"):
    """Run `trace library import` on ``photos`` with ``tags`` (an object, or text as written)."""
    path = tmp_path / name
    path.write_text(tags if isinstance(tags, str) else json.dumps(tags, indent=2))
    return run_trace("library", "import", str(tmp_path / photos), "--tags", str(path), "--out", str(tmp_path / "lib"),
                     *extra)


def _line_of(text: str, marker: str | tuple[str, int]) -> int:
    """The line of ``marker`` in ``text`` (plus an offset given with it)."""
    marker, offset = marker if isinstance(marker, tuple) else (marker, 0)
    assert text.count(marker) == 1, marker
    return text[:text.index(marker)].count("\n") + 1 + offset


def _failed(result) -> list[str]:
    """The problem lines of a failed command, checked to be reported the CLI's way."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[-1].startswith("trace library import: ")
    return lines[:-1]


def test_import_takes_tags_keyed_by_file_name_with_string_backgrounds(tmp_path):
    from library_helpers import keyed_tags, write_images

    records = sample_records()
    write_images(tmp_path / "photos", records)
    tags = keyed_tags(records)
    assert tags["images/cat.png"]["background"] == "a brick wall"
    result = _import(tmp_path, tags)
    assert result.returncode == 0, result.stderr
    assert run_trace("library", "validate", str(tmp_path / "lib")).returncode == 0
    images = load_library(tmp_path / "lib")[1]
    assert [(i.id, i.path, i.width, i.height) for i in images] == [
        ("cat", "images/cat.png", 64, 48), ("pair", "images/pair.png", 64, 48), ("sign", "images/sign.png", 64, 48)]
    assert images[0].background == ("a brick wall",)
    written = json.loads((tmp_path / "lib" / TAGS_FILE).read_text().splitlines()[0])
    assert written["background"] == ["a brick wall"] and written["id"] == "cat"  # the canonical shape
    unsourced = [line for line in result.stderr.splitlines() if "without source or license" in line]
    assert unsourced == ['tags.json: 3 records without source or license, written as "unknown": cat, pair, sign']


def test_import_takes_one_pretty_printed_record(tmp_path):
    from library_helpers import write_photo

    write_photo(tmp_path / "photos" / "cat.png")
    result = _import(tmp_path, {"path": "cat.png", "ent_list": [{"category": "Animal", "ent_desc": "the cat"}]})
    assert result.returncode == 0, result.stderr
    assert [i.id for i in load_library(tmp_path / "lib")[1]] == ["cat"]


def _cat(**changes) -> dict:
    cat = {"ent_list": [{"category": "Animal", "ent_desc": "the striped cat",
                         "tag_dict": {"1_Appearance": {"1.1_pattern_texture": ["stripes"]}}}],
           "background": "a brick wall", "global_tag": {"4.1_style": ["flat"]}}
    return {**cat, **changes}


@pytest.mark.parametrize("cat,marker,message", [
    (_cat(ent_list=[{"category": 3, "ent_desc": "the cat"}]), '"category": 3',
     'ent_list[0].category: expected a string'),
    (_cat(global_tag={"4.1_style": "flat"}), '"4.1_style"', "global_tag.4.1_style: expected a list of strings"),
    (_cat(background=["a wall", 7]), "7\n", "background[1]: expected a string"),
    (_cat(ent_list=["the cat"]), '"the cat"', "ent_list[0]: expected an object"),
    (_cat(ent_list=[{"ent_desc": "the cat"}]), ('"ent_desc": "the cat"', -1),  # the line of the object: `{`
     "ent_list[0]: missing field 'category'"),
    (_cat(sorce="photo"), '"sorce"', "record: unknown field 'sorce' (did you mean 'source'?)"),
    (_cat(ent_list=[{"category": "Animal", "ent_desc": "the cat", "tag_dict": {"1_Appearance": {"1.2_materal": ["x"]}}}]),
     '"1.2_materal"', "ent_list[0].tag_dict.1_Appearance: unknown field '1.2_materal' (did you mean '1.2_material'?)"),
    (_cat(ent_list=[{"category": "Animal", "ent_desc": "the cat", "bbox": [1, 2, 3]}]), '"bbox"',
     "ent_list[0].bbox: expected a list of 4 integers"),
])
def test_import_problems_speak_json_and_name_key_and_line(tmp_path, cat, marker, message):
    from library_helpers import write_photo

    for name in ("dog.png", "cat.png"):
        write_photo(tmp_path / "photos" / name)
    tags = {"dog.png": {"ent_list": [{"category": "Animal", "ent_desc": "the dog"}]}, "cat.png": cat}
    result = _import(tmp_path, tags)
    text = (tmp_path / "tags.json").read_text()
    assert _failed(result) == [f'tags.json:{_line_of(text, marker)}: ["cat.png"] {message}']
    assert not (tmp_path / "lib").exists()
    # in a JSON list the position is the index
    (tmp_path / "photos" / "cat.png").rename(tmp_path / "photos" / "c.png")
    listed = [{"path": "dog.png", **tags["dog.png"]}, {"path": "c.png", **cat}]
    text = json.dumps(listed, indent=2)
    assert _failed(_import(tmp_path, text)) == [f"tags.json:{_line_of(text, marker)}: [1] {message}"]


def test_a_broken_json_object_is_one_problem_not_one_per_line(tmp_path):
    from library_helpers import write_photo

    write_photo(tmp_path / "photos" / "cat.png")
    text = json.dumps({"cat.png": _cat(), "dog.png": _cat()}, indent=2).replace('"stripes"\n', '"stripes",\n', 1)
    broken = text[:text.index('"stripes",')].count("\n") + 2  # the line after the stray comma
    assert _failed(_import(tmp_path, text)) == [
        f"tags.json:{broken}: not valid JSON: Expecting value (column {len(text.splitlines()[broken - 1]) - len(text.splitlines()[broken - 1].lstrip()) + 1})"]


def test_a_missing_or_unreadable_image_is_named(tmp_path):
    from library_helpers import write_photo

    write_photo(tmp_path / "photos" / "cats" / "cat.png")
    (tmp_path / "photos" / "cats" / "broken.png").write_bytes(b"not an image")
    tags = {"cats/cat.png": _cat(), "cats/ghost.png": _cat(), "cats/broken.png": _cat(width=10, height=10),
            "cats/bad.png": _cat(sorce="x")}
    (tmp_path / "photos" / "cats" / "bad.png").write_bytes(b"")
    result = _import(tmp_path, tags)
    text = (tmp_path / "tags.json").read_text()
    line = {key: _line_of(text, f'"{key}"') for key in tags}
    assert _failed(result) == [
        f'tags.json:{line["cats/ghost.png"]}: ["cats/ghost.png"] path: image not found: cats/ghost.png',
        f'tags.json:{line["cats/broken.png"]}: ["cats/broken.png"] path: cannot read image: cats/broken.png '
        "(UnidentifiedImageError)",
        f'tags.json:{line["cats/bad.png"]}: ["cats/bad.png"] path: cannot read image: cats/bad.png '
        "(UnidentifiedImageError)",
        f"tags.json:{_line_of(text, 'sorce')}: [\"cats/bad.png\"] record: unknown field 'sorce' (did you mean 'source'?)",
    ]


def test_ids_from_file_names_must_not_collide(tmp_path):
    from library_helpers import write_photo

    for name in ("a/cat.png", "b/cat.jpg"):
        write_photo(tmp_path / "photos" / name)
    result = _import(tmp_path, {"a/cat.png": _cat(), "b/cat.jpg": _cat()})
    text = (tmp_path / "tags.json").read_text()
    first, second = _line_of(text, '"a/cat.png"'), _line_of(text, '"b/cat.jpg"')
    assert _failed(result) == [f"tags.json:{second}: [\"b/cat.jpg\"] id: duplicate id 'cat' "
                               f"(first on line {first} [\"a/cat.png\"])"]


def test_untagged_images_and_defaulted_sources_are_one_line_each(tmp_path):
    from library_helpers import write_photo

    for i in range(9):
        write_photo(tmp_path / "photos" / f"p{i}.png")
    tags = {f"p{i}.png": _cat() for i in range(2)}
    tags["p1.png"].update(source="photo", license="CC0-1.0")
    result = _import(tmp_path, tags)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"{tmp_path / 'photos'}: 7 images without tags left out: p2.png, p3.png, p4.png, p5.png, p6.png, … (2 more)",
        'tags.json: 1 record without source or license, written as "unknown": p0',
    ]
    assert [i.id for i in load_library(tmp_path / "lib")[1]] == ["p0", "p1"]


@pytest.mark.parametrize("text", ["", "  \n\n", "[]", "{}", "\n"])
def test_a_tags_file_without_records_is_an_error(tmp_path, text):
    from library_helpers import write_photo

    write_photo(tmp_path / "photos" / "cat.png")
    for name in ("tags.json", "tags.jsonl"):
        result = _import(tmp_path, text, name=name)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert re.fullmatch(rf"trace library import: .*{name}: (empty file: )?no records.*\n", result.stderr)
        assert not (tmp_path / "lib").exists()


def test_an_empty_images_folder_is_an_error(tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "notes.txt").write_text("no images here")
    result = _import(tmp_path, {"cat.png": _cat()})
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert f"{tmp_path / 'photos'}: no images found" in result.stderr
    assert not (tmp_path / "lib").exists()


def _human_in_wool() -> dict:
    return {"ent_list": [
        {"category": "Human", "ent_desc": "the woman",
         "tag_dict": {"1_Appearance": {"1.2_material": ["wool", "felt"]}, "2_Form": {"2.1_hairstyle": ["bun"]}},
         "usable_as": ["attach"]},
        {"category": "Clothing", "ent_desc": "the scarf", "tag_dict": {"1_Appearance": {"1.2_material": ["silk"]}}}],
        "source": "photo", "license": "CC0-1.0"}


def test_a_tag_the_taxonomy_refuses_names_where_it_applies(tmp_path):
    from library_helpers import write_photo

    write_photo(tmp_path / "photos" / "woman.png")
    result = _import(tmp_path, {"woman.png": _human_in_wool()})
    text = (tmp_path / "tags.json").read_text()
    material = taxonomy().subtypes["1.2_material"]
    applies = ", ".join(c for c in taxonomy().categories if material.applies_to(c))
    assert "Human" not in applies and "Clothing" in applies
    material_line = _line_of(text, '"wool"') - 1  # the line of the field, `"1.2_material": [`
    assert _failed(result) == [
        f'tags.json:{material_line}: ["woman.png"] '
        f"ent_list[0].tag_dict.1_Appearance.1.2_material: subtype 1.2_material does not apply to category 'Human' "
        f"(it applies to {applies})",
        f'tags.json:{_line_of(text, "usable_as")}: ["woman.png"] ent_list[0].usable_as: '
        "'attach' does not apply to category 'Human' (it applies to Object, Clothing)",
    ]
    # the closing line names the flag that keeps the valid values
    assert result.stderr.strip().splitlines()[-1].endswith(
        "2 problems; nothing was written; --drop-invalid keeps the rest, leaving out the 3 tag values the taxonomy "
        "refuses")


def test_drop_invalid_imports_without_just_the_refused_values(tmp_path):
    from library_helpers import write_photo

    write_photo(tmp_path / "photos" / "woman.png")
    result = _import(tmp_path, {"woman.png": _human_in_wool()}, "--drop-invalid")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "tags.json").read_text()
    line = _line_of(text, '"wool"') - 1
    applies = ", ".join(c for c in taxonomy().categories if taxonomy().subtypes["1.2_material"].applies_to(c))
    assert result.stderr.splitlines() == [
        f'tags.json:{line}: ["woman.png"] ent_list[0] (Human, "the woman"): dropped 1.2_material "wool" '
        f"(it applies to {applies})",
        f'tags.json:{line}: ["woman.png"] ent_list[0] (Human, "the woman"): dropped 1.2_material "felt" '
        f"(it applies to {applies})",
        f'tags.json:{_line_of(text, "usable_as")}: ["woman.png"] ent_list[0] (Human, "the woman"): dropped usable_as '
        '"attach" (it applies to Object, Clothing)',
        "tags.json: dropped 3 tag values the taxonomy refuses (--drop-invalid)",
    ]
    assert validate_library(tmp_path / "lib") == []
    (woman,) = load_library(tmp_path / "lib")[1]
    assert woman.ent_list[0].subtype_tags() == {"2.1_hairstyle": ("bun",)} and woman.ent_list[0].usable_as == ()
    assert woman.ent_list[1].subtype_tags() == {"1.2_material": ("silk",)}  # what the taxonomy allows stays


def test_placeholder_backgrounds_are_dropped_with_one_note(tmp_path):
    from library_helpers import write_photo
    from tracebench.library._import import is_placeholder_background

    for name in ("a.png", "b.png", "c.png"):
        write_photo(tmp_path / "photos" / name)
    tags = {"a.png": _cat(background=["none", "Plain white.", "a brick wall", "solid grey", "White background"]),
            "b.png": _cat(background="N/A"), "c.png": _cat(background="a white fence")}
    for rec in tags.values():
        rec.update(source="photo", license="CC0-1.0")
    result = _import(tmp_path, tags)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        'tags.json: 5 placeholder backgrounds dropped (they name no background): "none", "Plain white.", '
        '"solid grey", "White background", "N/A"']
    assert [i.background for i in load_library(tmp_path / "lib")[1]] == [("a brick wall",), (), ("a white fence",)]
    assert not is_placeholder_background("solidly built wall") and is_placeholder_background("  transparent ")


def test_a_file_name_given_twice_is_an_error(tmp_path):
    from library_helpers import write_photo

    write_photo(tmp_path / "photos" / "cat.png")
    one = json.dumps(_cat())
    result = _import(tmp_path, '{\n"cat.png": ' + one + ',\n"cat.png": ' + one + "\n}\n")
    assert _failed(result) == ['tags.json:3: ["cat.png"] duplicate key (first on line 2)']


def test_a_record_without_its_path_is_one_problem(tmp_path):
    from library_helpers import write_photo

    write_photo(tmp_path / "photos" / "cat.png")
    text = json.dumps([{"path": "cat.png", **_cat()}, _cat()], indent=2)
    second = _line_of(text, "},\n  {") + 1  # where the second record opens
    assert _failed(_import(tmp_path, text)) == [f"tags.json:{second}: [1] record: missing field 'path'"]
