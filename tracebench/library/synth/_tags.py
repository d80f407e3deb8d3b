"""The record of a drawn scene: grounding phrases, per-entity tag dicts and global tags."""

from __future__ import annotations

from ...nouns import plural, with_article
from ...operators import Role
from ...taxonomy import taxonomy
from .._models import Entity, GlobalTag, TagDict, TaggedImage, tag_dict_of
from ._plan import _DISTINCT, FINE_MIN_PX
from ._world import World


def relation_tag(world: World, rel: dict, entities: list[dict]) -> str:
    a, b = entities[rel["subject"]]["noun"], entities[rel["object"]]["noun"]
    if a == b:
        if rel["type"] == "facing":
            return f"two {plural(a)} facing each other"
        return world.relations[rel["type"]]["tag"].format(a=with_article(a), b="another " + b)
    return world.relations[rel["type"]]["tag"].format(a=with_article(a), b=with_article(b))


def _join_post(parts: list[str]) -> str:
    out: list[str] = []
    for part in parts:
        if out and part.startswith("with ") and out[-1].startswith("with "):
            out[-1] = out[-1] + " and " + part[5:]
        else:
            out.append(part)
    return " ".join(out)


_PRIORITY = {
    "Human": ["motif", "hairstyle", "color", "pattern", "features", "expression", "pose", "effect", "orientation"],
    "Text": ["word", "font", "material", "color", "pattern", "damage"],
    "*": ["motif", "pattern", "material", "color", "shape", "damage", "effect", "pose", "orientation"],
}


def _color_shows(world: World, e: dict, colors_ok: bool) -> bool:
    """Whether the entity's own color can be seen: the image keeps its colors and the entity
    has no material with colors of its own."""
    material = e.get("material")
    return colors_ok and (material is None or bool(world.materials[material].get("keeps_color")))


def _core(world: World, e: dict, must: set[str], colors_ok: bool, limit: int) -> str:
    """Adjectives + noun + modifiers naming the entity, always including the ``must`` dims."""
    fig = world.figures[e["figure"]]
    human = e["category"] in world.humanoid
    color_shows = _color_shows(world, e, colors_ok)
    have = {dim for dim in _DISTINCT + ("orientation",) if e.get(dim)}
    if e.get("design"):
        have.add("motif")
    if not color_shows:
        have.discard("color")
    if e.get("orientation") == "front":
        have.discard("orientation")
    if e.get("unit", FINE_MIN_PX) < FINE_MIN_PX:
        have -= {"expression", "features"}
    chosen = [d for d in must if d in have]
    for dim in _PRIORITY.get(e["category"], _PRIORITY["*"]):
        if len(chosen) >= len([d for d in must if d in have]) + limit:
            break
        if dim in have and dim not in chosen:
            chosen.append(dim)
    pre: dict[str, str] = {}
    post: dict[str, str] = {}
    for dim in chosen:
        value = e.get(dim)
        if dim == "damage":
            pre["damage"] = world.damage[value]["adj"]
        elif dim == "shape":
            pre["shape"] = fig["shapes"][value]
        elif dim == "effect":
            entry = world.effects[value]
            if "adj" in entry:
                pre["effect"] = entry["adj"]
            else:
                post["effect"] = entry["desc"]
        elif dim == "expression":
            pre["expression"] = world.expressions[value]["adj"]
        elif dim == "pose":
            pre["pose"] = world.poses[value]["adj"]
        elif dim in ("color", "pattern") and human:
            continue
        elif dim == "color":
            pre["color"] = value
        elif dim == "pattern":
            pre["fill"] = world.patterns[value]["adj"]
        elif dim == "material":
            pre["fill"] = world.materials[value]["adj"]
        elif dim == "hairstyle":
            post["hairstyle"] = world.hairstyles[value]["desc"]
        elif dim == "features":
            post["features"] = _join_post([world.features[f]["desc"] for f in value])
        elif dim == "word":
            post["word"] = f"reading '{value}'"
        elif dim == "font":
            post["font"] = world.fonts[value]["desc"]
        elif dim == "motif":
            post["motif"] = "with " + world.motifs[e["design"]["motif"]]
        elif dim == "orientation":
            post["orientation"] = world.orientations[value]["desc"]
    if human and ({"color", "pattern"} & set(chosen)):
        shirt = [e["color"]] if "color" in chosen and color_shows else []
        if "pattern" in chosen and e.get("pattern"):
            shirt.append(world.patterns[e["pattern"]]["adj"])
        if shirt:
            post["shirt"] = f"in {with_article(' '.join(shirt + ['shirt']))}"
    order_pre = ("damage", "shape", "effect", "expression", "pose", "color", "fill")
    order_post = ("hairstyle", "features", "shirt", "motif", "word", "font", "effect", "orientation")
    words = [pre[k] for k in order_pre if k in pre] + [e["noun"]]
    tail = _join_post([post[k] for k in order_post if k in post])
    return " ".join(words) + (" " + tail if tail else "")


_REL_PHRASE = {"holding": "held by", "wearing": "worn by", "on_top": "on top of", "in_front": "behind"}


def _describe(world: World, plan: dict) -> list[str]:
    entities = plan["entities"]
    colors_ok = plan["colors_visible"]
    must: dict[int, set[str]] = {i: set() for i in range(len(entities))}
    if plan["distractor"]:
        for i in plan["distractor"]["entities"]:
            must[i].add(plan["distractor"]["attribute"])
    # secondaries: the object held / worn, the base under a topper, the structure behind
    secondary: dict[int, tuple[int, str]] = {}
    for rel in plan["relations"]:
        if rel["type"] in ("holding", "wearing"):
            secondary[rel["object"]] = (rel["subject"], _REL_PHRASE[rel["type"]])
        elif rel["type"] == "on_top":
            secondary[rel["subject"]] = (rel["object"], "on top of")
        elif rel["type"] == "in_front":
            secondary[rel["object"]] = (rel["subject"], "behind")
    multi = len(entities) > 1
    descs: list[str] = [""] * len(entities)
    for i, e in enumerate(entities):
        if i in secondary:
            continue
        limit = 1 if multi else 2
        text = "the " + _core(world, e, must[i], colors_ok, limit)
        if e.get("position"):
            text += " " + e["position"]
        descs[i] = text
    for i, (anchor, phrase) in secondary.items():
        descs[i] = f"the {_core(world, entities[i], must[i], colors_ok, 1)} {phrase} {descs[anchor]}"
    if len(set(descs)) != len(descs):
        raise AssertionError(f"grounding phrases are not unique: {descs}")
    return descs


def _tag_dict(world: World, e: dict, colors_ok: bool) -> TagDict:
    """Every entity subtype the world drew on ``e`` and the taxonomy allows on its category."""
    fine = e.get("unit", FINE_MIN_PX) >= FINE_MIN_PX
    tags: dict[str, tuple[str, ...]] = {}
    for d in world.entity_draws():
        value = e.get(d.field)
        if not value or not d.subtype.applies_to(e["category"]):
            continue
        if (d.fine and not fine) or (d.needs_colors and not _color_shows(world, e, colors_ok)):
            continue
        values = value if isinstance(value, list) else [value]
        tags[d.subtype.key] = tuple(world.tag_text(d, e["figure"], v) for v in values)
    return tag_dict_of(tags)


def _global_tag(world: World, render: dict) -> GlobalTag:
    tags: dict[str, tuple[str, ...]] = {}
    for spec in taxonomy().global_subtypes():
        if spec.role == Role.RELATION:
            values = [relation_tag(world, r, render["entities"]) for r in render["relations"]]
        else:
            d = world.draws.get(spec.key)
            values = [world.tag_text(d, "", render[d.field])] if d is not None and render.get(d.field) else []
        tags[spec.key] = tuple(dict.fromkeys(values))
    return GlobalTag.model_validate(tags)


def _record(world: World, render: dict, image_id: str, path: str) -> TaggedImage:
    descs = _describe(world, render)
    ents = []
    for e, desc in zip(render["entities"], descs):
        e["desc"] = desc
        ents.append(Entity(category=e["category"], ent_desc=desc, name=e["noun"],
                           tag_dict=_tag_dict(world, e, render["colors_visible"]),
                           bbox=tuple(e["bbox"]), usable_as=tuple(e["usable_as"])))
    bg = world.backgrounds[render["background"]["kind"]].get("tag")
    return TaggedImage(id=image_id, path=path, width=render["size"], height=render["size"], source="synthetic",
                       license="CC0-1.0", ent_list=tuple(ents), background=(bg,) if bg else (),
                       global_tag=_global_tag(world, render), render=render)
