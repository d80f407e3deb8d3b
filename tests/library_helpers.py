"""Small real libraries for tests: Pillow images on disk plus hand-written tags."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from tracebench.library import TaggedImage, write_library
from tracebench.taxonomy import taxonomy


def record(image_id: str, entities: list[dict], *, size=(64, 48), **extra) -> dict:
    return {"id": image_id, "path": f"images/{image_id}.png", "width": size[0], "height": size[1],
            "source": "test", "license": "CC0-1.0", "ent_list": entities, **extra}


def entity(category: str, desc: str, **tags) -> dict:
    tax = taxonomy()
    groups: dict[str, dict] = {g.key: {} for g in tax.groups_of("tag_dict")}
    for key, values in tags.items():
        key = key.replace("__", ".").lstrip("_")  # _1__1_pattern_texture -> 1.1_pattern_texture
        groups[tax.subtypes[key].group][key] = values
    return {"category": category, "ent_desc": desc, "tag_dict": groups}


def write_images(root: Path, records: list[dict]) -> None:
    for i, rec in enumerate(records):
        path = root / rec["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (rec["width"], rec["height"]), (10 * i % 255, 80, 160)).save(path)


def make_library(root: Path, records: list[dict], name: str = "test-lib") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_images(root, records)
    write_library(root, name, [TaggedImage.model_validate(r) for r in records])
    return root


def sample_records() -> list[dict]:
    return [
        record("cat", [entity("Animal", "the striped cat", _1__1_pattern_texture=["stripes"],
                              _3__1_action_pose=["sitting"])],
               background=["a brick wall"], global_tag={"4.1_style": ["flat"]}),
        record("pair", [entity("Human", "the woman with a bun", _2__1_hairstyle=["bun"]),
                        {**entity("Clothing", "the red scarf", _1__2_material=["wool"]), "usable_as": ["attach"]}],
               global_tag={"4.6_inter_instance_relation": ["the woman holding the scarf"]}),
        record("sign", [entity("Text", "the OPEN sign", _1__4_font=["serif"]),
                        entity("Structure", "the blue house"), entity("Food", "the round cake")]),
    ]


def write_photo(path: Path, size=(64, 48)) -> Path:
    """One real image (PNG, or what the suffix says) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 120, 40)).save(path)
    return path


def keyed_tags(records: list[dict]) -> dict:
    """Records as researchers write them: keyed by image file name, without id, path, size,
    source or license, and a background as one string."""
    tags = {}
    for rec in records:
        rest = {k: v for k, v in rec.items() if k not in ("id", "path", "width", "height", "source", "license")}
        if len(rest.get("background", [])) == 1:
            rest["background"] = rest["background"][0]
        tags[rec["path"]] = rest
    return tags


def derived_library(root: Path, edit, name: str = "derived-lib") -> Path:
    """The shipped synthetic library with every tag record passed through ``edit(record) -> record``
    (a real library on disk, its images copies of the shipped files)."""
    import shutil

    from tracebench.library import default_library, load_library

    source = default_library()
    _, images = load_library(source)
    shutil.copytree(source / "images", root / "images")
    records = [edit(image.model_dump(mode="json")) for image in images]
    write_library(root, name, [TaggedImage.model_validate(r) for r in records])
    return root


def without_usable_as(rec: dict) -> dict:
    """A record as the paper's tagging format has it: no entity marked usable whole."""
    return {**rec, "ent_list": [{**e, "usable_as": []} for e in rec["ent_list"]]}


def without_relations(rec: dict) -> dict:
    """A record without inter-instance relation tags."""
    tags = {k: v for k, v in rec.get("global_tag", {}).items() if k != "4.6_inter_instance_relation"}
    return {**rec, "global_tag": tags}
