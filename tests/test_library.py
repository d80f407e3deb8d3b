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
from tracebench.sample import sample_benchmark
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
     "tags.jsonl:1: ent_list.0.tag_dict.1_Appearance.1.9_sparkle: Extra inputs are not permitted"),
    (set_attribute(["ent_list", 0, "category"], "Robot"), "tags.jsonl:1: ent_list.0.category: unknown category 'Robot'"),
    (set_attribute(["ent_list", 0, "tag_dict", "2_Form", "2.1_hairstyle"], ["bun"]),
     "tags.jsonl:1: ent_list.0.tag_dict.2_Form.2.1_hairstyle: does not apply to category 'Animal'"),
    (set_attribute(["ent_list", 0, "usable_as"], ["attach"]), "tags.jsonl:1: ent_list.0.usable_as: 'attach' does not apply"),
    (set_attribute(["ent_list", 0, "bbox"], [0, 0, 500, 10]), "tags.jsonl:1: ent_list.0.bbox: [0, 0, 500, 10] is not inside"),
    (set_attribute(["path"], "images/missing.png"), "tags.jsonl:1: path: image not found: images/missing.png"),
    (set_attribute(["path"], "/etc/passwd"), "tags.jsonl:1: path: absolute paths are not allowed"),
    (set_attribute(["path"], "images/../../outside.png"), "tags.jsonl:1: path: '..' is not allowed"),
    (_outside_link, "tags.jsonl:1: path: a link that leaves the library folder"),
    (_garbage_image, "tags.jsonl:1: path: not a readable image"),
    (set_attribute(["width"], 65), "tags.jsonl:1: width: recorded 65x48, image is 64x48"),
    (set_attribute(["id"], "pair"), "tags.jsonl:2: id: duplicate id 'pair' (first on line 1)"),
    (set_attribute(["height"], -3), "tags.jsonl:1: height: Input should be greater than 0"),
    (set_attribute(["ent_list", 0, "ent_desc"], ""), "tags.jsonl:1: ent_list.0.ent_desc: String should have at least 1 character"),
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
        sample_benchmark(tmp_path / "bench", slots=(1,), per_slot=1, library=root)
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
        del rec["width"], rec["height"]
    tags = tmp_path / ("tags.json" if as_list else "tags.jsonl")
    tags.write_text(json.dumps(records) if as_list else "\n".join(json.dumps(r) for r in records) + "\n")
    result = run_trace("library", "import", str(tmp_path / "photos"), "--tags", str(tags), "--out", str(tmp_path / "lib"))
    assert result.returncode == 0, result.stderr
    assert validate_library(tmp_path / "lib") == []
    assert load_library(tmp_path / "lib")[1][0].width == 64


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
    assert any(p.startswith("mine.jsonl:1: ent_list.0.category") for p in info.value.problems)
    assert any(p.startswith("mine.jsonl:3: path: '..'") for p in info.value.problems)
    assert not (tmp_path / "lib").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".lib")]
