"""The shipped synthetic library: deterministic, covering the taxonomy, tags true by construction.

One default-size library (n=400, seed=0) is built once per session through ``default_library()``
with the cache in a temporary folder of its own (tests/conftest.py); coverage rules are asserted
on it. Small libraries cover determinism, atomic writing and the pixel-level checks.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageChops

from tracebench import __version__
from tracebench.errors import TraceError
from tracebench.library import synth
from tracebench.library._io import INFO_FILE, TAGS_FILE, load_library, tags_line
from tracebench.library._models import TaggedImage
from tracebench.library.synth import _build
from tracebench.library.synth._world import World, world_hash
from tracebench.resources import read_toml

MIN_PER_SUBTYPE = 20
SUBTYPES = read_toml("taxonomy", "subtypes.toml")
CATEGORIES = list(read_toml("taxonomy", "categories.toml")["categories"])
WORLD = read_toml("taxonomy", synth.SYNTH_FILE)
LOCAL = [k for k, v in SUBTYPES["subtypes"].items() if v["group"] != "4_Global"]
GLOBAL = [k for k, v in SUBTYPES["subtypes"].items() if v["group"] == "4_Global"]


def allowed(subtype: str) -> set[str]:
    cats = SUBTYPES["subtypes"][subtype]["categories"]
    return set(CATEGORIES) if "*" in cats else set(cats)


def entity_tags(entity) -> dict[str, tuple[str, ...]]:
    """subtype key -> tag values, from the on-disk (aliased) form."""
    out: dict[str, tuple[str, ...]] = {}
    for group in entity.tag_dict.model_dump(by_alias=True).values():
        out.update(group)
    return out


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def default_lib(default_library_cache):
    cache, path = default_library_cache  # read only: the session links it into its own cache
    info, images = load_library(path)
    return cache, path, info, images


@pytest.fixture(scope="module")
def small_lib(tmp_path_factory):
    root = tmp_path_factory.mktemp("small") / "lib"
    synth.synthesize_library(root, n=40, seed=3)
    return root, load_library(root)[1]


# ----------------------------------------------------------------------------- determinism

def test_same_seed_gives_byte_identical_library_and_another_seed_differs(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    info_a = synth.synthesize_library(a, n=24, seed=5)
    info_b = synth.synthesize_library(b, n=24, seed=5)
    synth.synthesize_library(c, n=24, seed=6)
    assert files(a) == files(b)
    assert info_a == info_b
    fa, fc = files(a), files(c)
    assert fa[TAGS_FILE] != fc[TAGS_FILE]
    assert sum(fa[k] != fc[k] for k in fa if k.startswith("images/")) >= 20


def test_build_does_not_depend_on_the_process(tmp_path):
    """Another interpreter with another hash seed writes the same bytes (content hash)."""
    here = synth.synthesize_library(tmp_path / "here", n=10, seed=9)
    code = ("import sys; from pathlib import Path; from tracebench.library.synth import synthesize_library; "
            "print(synthesize_library(Path(sys.argv[1]), n=10, seed=9).content_hash)")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "there")], capture_output=True, text=True,
                         env=env, check=True)
    assert out.stdout.strip() == here.content_hash


def test_render_field_redraws_the_exact_pixels(small_lib):
    root, images = small_lib
    for record in images[::4]:
        redrawn, completed = synth.render_scene(record.render)
        with Image.open(root / record.path) as saved:
            assert redrawn.tobytes() == saved.convert("RGB").tobytes(), record.id
        assert [e["bbox"] for e in completed["entities"]] == [e["bbox"] for e in record.render["entities"]]


# ----------------------------------------------------------------------------- coverage (n=400)

def test_default_library_covers_the_taxonomy(default_lib):
    _, _, info, images = default_lib
    assert info.images == len(images) == synth.DEFAULT_N
    per_subtype: collections.Counter[str] = collections.Counter()
    values: dict[str, set[str]] = collections.defaultdict(set)
    categories: collections.Counter[str] = collections.Counter()
    uses: collections.Counter[str] = collections.Counter()
    per_global: collections.Counter[str] = collections.Counter()
    multi = with_background = with_distractor = 0
    for image in images:
        multi += len(image.ent_list) >= 2
        with_background += bool(image.background)
        with_distractor += bool(image.render["distractor"])
        for entity in image.ent_list:
            categories[entity.category] += 1
            uses.update(entity.usable_as)
            for key, tags in entity_tags(entity).items():
                if tags:
                    per_subtype[key] += 1
                    values[key].update(tags)
        for key, tags in image.global_tag.model_dump(by_alias=True).items():
            if tags:
                per_global[key] += 1
                values[key].update(tags)
    for key in LOCAL:
        assert per_subtype[key] >= MIN_PER_SUBTYPE, (key, per_subtype[key])
        assert len(values[key]) >= 3, (key, values[key])
    for key in GLOBAL:
        assert per_global[key] >= MIN_PER_SUBTYPE, (key, per_global[key])
        assert len(values[key]) >= 3, (key, values[key])
    assert set(categories) == set(CATEGORIES), categories
    assert multi >= 0.4 * len(images), multi
    assert with_distractor >= MIN_PER_SUBTYPE, with_distractor
    assert uses["attach"] >= MIN_PER_SUBTYPE and uses["ip"] >= MIN_PER_SUBTYPE, uses
    assert with_background >= 0.4 * len(images), with_background
    figures = collections.Counter(e["figure"] for image in images for e in image.render["entities"])
    assert set(figures) == set(WORLD["figures"]), set(WORLD["figures"]) - set(figures)


def test_look_alike_distractors_share_figure_and_differ_in_the_named_attribute(default_lib):
    _, _, _, images = default_lib
    seen = 0
    for image in images:
        distractor = image.render["distractor"]
        if not distractor:
            continue
        seen += 1
        i, j = distractor["entities"]
        a, b = image.render["entities"][i], image.render["entities"][j]
        dim = distractor["attribute"]
        assert a["figure"] == b["figure"] and a["category"] == b["category"]
        key = "design" if dim == "motif" else dim
        assert a.get(key) != b.get(key), (image.id, dim)
        # the phrases tell them apart even without their position words
        strip = [re.sub(r" (on the|in the|at the) .*$", "", image.ent_list[k].ent_desc) for k in (i, j)]
        assert strip[0] != strip[1], (image.id, strip)
    assert seen >= MIN_PER_SUBTYPE


def test_grounding_phrases_are_unique_within_each_image(default_lib):
    _, _, _, images = default_lib
    for image in images:
        descs = [e.ent_desc for e in image.ent_list]
        assert len(set(descs)) == len(descs), (image.id, descs)
        assert all(d.startswith("the ") for d in descs), descs


def test_relations_name_existing_entities(default_lib):
    _, _, _, images = default_lib
    relations = 0
    for image in images:
        rels = image.render["relations"]
        assert len(image.global_tag.inter_instance_relation) <= len(rels)  # one tag per relation (deduplicated)
        for rel in rels:
            relations += 1
            n = len(image.ent_list)
            assert 0 <= rel["subject"] < n and 0 <= rel["object"] < n and rel["subject"] != rel["object"]
            assert rel["type"] in WORLD["relations"]
        assert bool(rels) == bool(image.global_tag.inter_instance_relation)
    assert relations >= MIN_PER_SUBTYPE


# ----------------------------------------------------------------------------- taxonomy compatibility

def test_tags_follow_the_taxonomy(default_lib):
    _, _, _, images = default_lib
    special = SUBTYPES["special"]
    vocab = {
        "1.1_pattern_texture": {v["tag"] for v in WORLD["patterns"].values()},
        "1.2_material": {v["tag"] for v in WORLD["materials"].values()},
        "1.3_damage_wear": {v["tag"] for v in WORLD["damage"].values()},
        "1.4_font": {v["tag"] for v in WORLD["fonts"].values()},
        "2.1_hairstyle": {v["tag"] for v in WORLD["hairstyles"].values()},
        "2.2_facial_features": {v["tag"] for v in WORLD["features"].values()},
        "2.3_shape": {t for f in WORLD["figures"].values() for t in f.get("shapes", {}).values()},
        "3.1_action_pose": {v["tag"] for v in WORLD["poses"].values()},
        "3.2_expression": {v["tag"] for v in WORLD["expressions"].values()},
        "3.3_orientation": {v["tag"] for v in WORLD["orientations"].values()},
        "3.4_motion_effect": {v["tag"] for v in WORLD["effects"].values()},
        "1.5_color": set(WORLD["colors"]),
    }
    for image in images:
        for entity, plan in zip(image.ent_list, image.render["entities"]):
            assert entity.category in CATEGORIES
            assert entity.category == WORLD["figures"][plan["figure"]]["category"]
            for key, tags in entity_tags(entity).items():
                if tags:
                    assert entity.category in allowed(key), (image.id, entity.category, key, tags)
                    assert set(tags) <= vocab[key], (key, tags)
            if entity.category == "Human":  # faces too small to see get no face tags
                tags = entity_tags(entity)
                small = plan["unit"] < synth.FINE_MIN_PX
                assert bool(tags["3.2_expression"]) == (not small), (image.id, plan["unit"])
                assert not (small and tags["2.2_facial_features"]), image.id
            # an entity's own color is tagged exactly when it can be seen: the image keeps its
            # colors and no material with colors of its own covers it
            material = WORLD["materials"].get(plan.get("material"), {})
            shows = image.render["colors_visible"] and (not material or material.get("keeps_color", False))
            expect = (plan["color"],) if shows and entity.category in allowed("1.5_color") else ()
            assert entity_tags(entity)["1.5_color"] == expect, (image.id, plan["figure"], plan.get("material"))
            if "attach" in entity.usable_as:
                assert entity.category in special["attach"]["categories"]
            if "ip" in entity.usable_as:
                assert entity.category in special["ip"]["categories"]
                assert plan.get("design"), image.id
        for value in image.background:
            assert value in {v["tag"] for v in WORLD["backgrounds"].values() if "tag" in v}


def test_world_refuses_a_subtype_on_a_category_it_does_not_apply_to():
    data = json.loads(json.dumps(WORLD))
    data["figures"]["apple"]["poses"] = ["standing"]  # 3.1_action_pose is for Human and Animal only
    with pytest.raises(ValueError, match="apple.*poses"):
        World(data)
    data = json.loads(json.dumps(WORLD))
    data["figures"]["teapot"]["patterns"] = ["blotches"]  # an Animal-only pattern
    with pytest.raises(ValueError, match="teapot.*blotches"):
        World(data)
    data = json.loads(json.dumps(WORLD))
    data["figures"]["person"]["colors"] = ["red"]  # 1.5_color does not apply to Human
    with pytest.raises(ValueError, match="person: colors on a Human"):
        World(data)
    data = json.loads(json.dumps(WORLD))
    data["draws"]["1.9_sparkle"] = {"field": "sparkle", "table": "effects"}
    with pytest.raises(ValueError, match="draws.1.9_sparkle: not a subtype"):
        World(data)


# ----------------------------------------------------------------------------- records and images

def test_every_record_round_trips(default_lib):
    _, path, _, _ = default_lib
    lines = (path / TAGS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(lines) == synth.DEFAULT_N
    for k, line in enumerate(lines):
        record = TaggedImage.model_validate_json(line)
        assert tags_line(record) == line
        assert record.id == f"syn-{k:04d}" and record.path == f"images/{record.id}.png"
        assert record.source == "synthetic" and record.license == "CC0-1.0"
        json.dumps(record.render)  # plain JSON


def test_images_open_with_their_recorded_size_and_boxes_lie_inside(small_lib):
    root, images = small_lib
    for record in images:
        with Image.open(root / record.path) as img:
            assert img.format == "PNG" and img.mode == "RGB"
            assert img.size == (record.width, record.height)
            assert img.info == {}  # no metadata chunks (time stamps, text)
        for entity, plan in zip(record.ent_list, record.render["entities"]):
            x0, y0, x1, y1 = entity.bbox
            assert 0 <= x0 < x1 <= record.width and 0 <= y0 < y1 <= record.height, (record.id, entity.bbox)
            assert list(entity.bbox) == plan["bbox"]


def test_whole_image_tags_hold_on_the_pixels(default_lib):
    """Black-and-white images are gray; without nameable colors no phrase names a color."""
    _, path, _, images = default_lib
    colors = set(WORLD["colors"])
    mono = [r for r in images if r.render["tone"] == "mono"]
    assert mono
    for record in mono[:12]:
        with Image.open(path / record.path) as img:
            r, g, b = img.convert("RGB").split()
            assert ImageChops.difference(r, g).getbbox() is None and ImageChops.difference(g, b).getbbox() is None
    for record in images:
        if not record.render["colors_visible"]:
            for entity in record.ent_list:
                words = set(re.findall(r"[a-z]+", entity.ent_desc.split(" reading ")[0]))
                assert not words & colors, (record.id, entity.ent_desc)


# ----------------------------------------------------------------------------- writing and the cache

def test_output_is_atomic(tmp_path, monkeypatch):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    with pytest.raises(TraceError):
        synth.synthesize_library(occupied, n=2)
    assert [p.name for p in occupied.iterdir()] == ["keep.txt"]

    real = synth.synthesize_image

    def failing(index, *, seed=0):
        if index == 3:
            raise RuntimeError("disk on fire")
        return real(index, seed=seed)

    monkeypatch.setattr(_build, "synthesize_image", failing)
    with pytest.raises(RuntimeError):
        synth.synthesize_library(tmp_path / "new", n=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["occupied"]


def test_default_library_is_built_once_and_reused(default_lib, monkeypatch):
    cache, path, info, _ = default_lib
    assert path.parent == cache
    assert f"n{synth.DEFAULT_N}" in path.name and f"seed{synth.DEFAULT_SEED}" in path.name
    assert world_hash()[:12] in path.name
    assert [p.name for p in cache.iterdir()] == [path.name]  # no leftovers of the build

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt although the cache holds the library")

    monkeypatch.setenv("TRACEBENCH_CACHE", str(cache))
    monkeypatch.setattr(_build, "synthesize_library", no_rebuild)
    stamp = (path / INFO_FILE).stat().st_mtime_ns
    assert synth.default_library() == path
    assert (path / INFO_FILE).stat().st_mtime_ns == stamp


def test_default_library_race_uses_the_folder_another_process_finished(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(_build, "DEFAULT_N", 3)
    real = synth.synthesize_library
    winner: list[Path] = []

    def slow_build(out, **kwargs):
        info = real(out, **kwargs)
        # meanwhile another process finished the same library and renamed it into place
        name = f"synthetic-{__version__}-n3-seed{synth.DEFAULT_SEED}-{world_hash()[:12]}"
        other = tmp_path / name
        real(other, n=3, seed=synth.DEFAULT_SEED, name="other-process")
        winner.append(other)
        return info

    monkeypatch.setattr(_build, "synthesize_library", slow_build)
    path = synth.default_library()
    assert winner and path == winner[0]
    assert json.loads((path / INFO_FILE).read_text())["name"] == "other-process"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEBENCH_CACHE", str(tmp_path / "explicit"))
    assert synth.cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("TRACEBENCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert synth.cache_root() == tmp_path / "xdg" / "tracebench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert synth.cache_root() == tmp_path / "home" / ".cache" / "tracebench"


def test_every_material_draws_on_the_thinnest_boxes():
    """An entity box can be a few pixels thin (found on case s6-07976 of a 100,000-case sample:
    a leather edge drawn inside a 4-pixel box was a ValueError of Pillow, so the case abstained)."""
    import itertools
    import random

    from tracebench.library.synth import load_world
    from tracebench.library.synth._draw import _material

    materials = list(load_world().materials)
    assert "leather" in materials
    for kind, w, h in itertools.product(materials, range(1, 8), range(1, 8)):
        image = _material(kind, w, h, (120, 80, 40), 40.0, random.Random(0))
        assert image.size == (w, h), kind
