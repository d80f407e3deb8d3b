"""Planning a scene: entities and their attributes, look-alike distractors, slots and placement,
relations. A plan is plain JSON data; :func:`~._render.render_scene` draws it."""

from __future__ import annotations

import copy
import random
from functools import cache
from typing import Any, Callable

from ._draw import _luma
from ._figures import _fit_box
from ._world import World, _rng, _weighted, load_world, world_hash

RENDER_VERSION = 1


def slot_boxes(layout: str, count: int, size: int, viewpoint: dict) -> list[list[float]]:
    if layout == "centered":
        boxes = [[6, 4, 250, 252]] if viewpoint.get("single") else [[34, 26, 222, 240]]
    elif layout == "row" and count == 2:
        boxes = [[8, 56, 124, 240], [132, 56, 248, 240]]
    elif layout == "row":
        boxes = [[4, 96, 84, 236], [88, 96, 168, 236], [172, 96, 252, 236]]
    elif layout == "diagonal":
        boxes = [[6, 6, 98, 98], [82, 82, 174, 174], [158, 158, 250, 250]]
    elif layout == "grid":
        boxes = [[6, 6, 124, 124], [132, 6, 250, 124], [6, 132, 124, 250], [132, 132, 250, 250]]
    else:
        raise KeyError(layout)
    scale = float(viewpoint.get("scale", 1.0))
    cx, cy = 128.0, 236.0 if layout in ("centered", "row") else 128.0
    k = size / 256
    out = []
    for box in boxes:
        x0, y0, x1, y1 = box
        out.append([round((cx + (x0 - cx) * scale) * k, 1), round((cy + (y0 - cy) * scale) * k, 1),
                    round((cx + (x1 - cx) * scale) * k, 1), round((cy + (y1 - cy) * scale) * k, 1)])
    return out


_POSITIONS = {
    ("row", 2): ["on the left", "on the right"],
    ("row", 3): ["on the left", "in the middle", "on the right"],
    ("diagonal", 3): ["at the top left", "in the center", "at the bottom right"],
    ("grid", 4): ["at the top left", "at the top right", "at the bottom left", "at the bottom right"],
}


def entity_options(world: World, e: dict, dim: str) -> list[Any]:
    """The values dimension ``dim`` may take on entity ``e``, given its other attributes."""
    fig = world.figures[e["figure"]]
    human = e["category"] in world.humanoid
    side = e.get("orientation") in ("left", "right")
    if dim == "color":
        return list(fig.get("colors") or world.colors)
    if dim == "pattern":
        return world.patterns_for(e["figure"])
    if dim == "material":
        return list(fig.get("materials", []))
    if dim == "damage":
        return world.damage_for(e["figure"], e.get("material"))
    if dim == "shape":
        return list(fig.get("shapes", {}))
    if dim == "pose":
        poses = list(fig.get("poses", []))
        if e.get("pose") == "reaching":
            poses.append("reaching")
        return [p for p in poses if side or not world.poses[p].get("profile")] if "orientation" in e else poses
    if dim == "orientation":
        profile = world.poses.get(e.get("pose", ""), {}).get("profile")
        return [o for o in fig.get("orientations", []) if not (profile and o == "front")]
    if dim == "effect":
        return world.effects_for(e["figure"])
    if not human and dim in ("hairstyle", "features", "expression"):
        return []
    if dim == "hairstyle":
        return [h for h, v in world.hairstyles.items() if e.get("wears") != "head" or v.get("under_hat")]
    if dim == "features":
        feats = [f for f, v in world.features.items() if not (v.get("adult") and e["figure"] == "child")]
        if e.get("expression") == "winking":
            feats = [f for f in feats if f != "sunglasses"]
        return feats
    if dim == "expression":
        exprs = list(world.expressions)
        if side or "sunglasses" in e.get("features", []):
            exprs = [x for x in exprs if not world.expressions[x].get("front")]
        return exprs
    if dim == "font":
        return list(world.fonts) if e["category"] == "Text" else []
    if dim == "word":
        return list(world.words) if e["category"] == "Text" else []
    if dim == "motif":
        return list(world.motifs) if e.get("design") else []
    raise KeyError(dim)


_CONFLICTS = ({"glasses", "sunglasses"}, {"blush", "freckles"})


def _valid(world: World, e: dict) -> bool:
    for dim in ("pattern", "material", "damage", "shape", "pose", "orientation", "effect", "hairstyle",
                "expression", "font", "word"):
        if e.get(dim) is not None and e[dim] not in entity_options(world, e, dim):
            return False
    feats = set(e.get("features", []))
    if not feats <= set(entity_options(world, e, "features")) or any(pair <= feats for pair in _CONFLICTS):
        return False
    return not (e.get("pattern") and e.get("material"))


def _pick_features(world: World, rng: random.Random, e: dict) -> list[str]:
    count = rng.choices((0, 1, 2), weights=world.scene["n_features"])[0]
    out: list[str] = []
    for f in rng.sample(entity_options(world, e, "features"), k=len(entity_options(world, e, "features"))):
        if len(out) < count and not any(pair <= set(out) | {f} for pair in _CONFLICTS):
            out.append(f)
    return sorted(out)


def _second_color(world: World, rng: random.Random, main: str) -> str:
    m = world.colors[main]
    far = [c for c, v in world.colors.items() if c != main and abs(_luma(v) - _luma(m)) > 70]
    return rng.choice(far or [c for c in world.colors if c != main])


def new_entity(world: World, rng: random.Random, name: str) -> dict:
    fig = world.figures[name]
    cat = fig["category"]
    sc = world.scene
    e: dict[str, Any] = {"figure": name, "category": cat, "noun": fig["noun"], "seed": rng.getrandbits(31)}
    e["color"] = rng.choice(entity_options(world, e, "color"))
    e["second"] = _second_color(world, rng, e["color"])
    e["accent"] = rng.choice([c for c in world.colors if c != e["color"]])
    if cat in world.humanoid:
        e["skin"] = list(rng.choice(world.skin))
        e["hair_color"] = rng.choice(list(world.hair))
        e["pants"] = list(rng.choice(world.pants))
    if fig.get("orientations"):
        e["orientation"] = rng.choice(fig["orientations"])
    if fig.get("poses"):
        e["pose"] = rng.choice(entity_options(world, e, "pose"))
    if cat in world.humanoid:
        e["hairstyle"] = rng.choice(entity_options(world, e, "hairstyle"))
        e["features"] = _pick_features(world, rng, e)
        e["expression"] = rng.choice(entity_options(world, e, "expression"))
    if cat == "Text":
        e["word"] = rng.choice(world.words)
        e["font"] = rng.choice(list(world.fonts))
    if fig.get("design") and rng.random() < sc["p_design"]:
        e["design"] = {"motif": rng.choice(list(world.motifs))}
        e["noun"] = fig.get("design_noun", fig["noun"])
    else:
        roll = rng.random()
        patterns, materials = entity_options(world, e, "pattern"), entity_options(world, e, "material")
        if patterns and roll < sc["p_pattern"]:
            e["pattern"] = rng.choice(patterns)
        elif materials and roll > 1 - sc["p_material"]:
            e["material"] = rng.choice(materials)
        damage = entity_options(world, e, "damage")
        if damage and rng.random() < sc["p_damage"]:
            e["damage"] = rng.choice(damage)
    if fig.get("shapes") and rng.random() < sc["p_shape"]:
        e["shape"] = rng.choice(list(fig["shapes"]))
    effects = entity_options(world, e, "effect")
    if effects and rng.random() < sc["p_effect"]:
        e["effect"] = rng.choice(effects)
    uses = (["attach"] if fig.get("attach") else []) + (["ip"] if e.get("design") else [])
    e["usable_as"] = uses
    return e


def set_attribute(world: World, e: dict, dim: str, value: Any) -> None:
    if dim == "pattern":
        e["pattern"] = value
        e.pop("material", None)
    elif dim == "material":
        e["material"] = value
        e.pop("pattern", None)
    elif dim == "color":
        e["color"] = value
        material = e.get("material")
        if material and not world.materials[material].get("keeps_color"):
            e.pop("material")
        if e["second"] == value:
            e["second"] = next(c for c in world.colors if c != value)
    elif dim == "features":
        e["features"] = [value]
    elif dim == "motif":
        e["design"] = {"motif": value}
    else:
        e[dim] = value
    if e.get("damage") and e["damage"] not in entity_options(world, e, "damage"):
        e.pop("damage")


_DISTINCT = ("color", "pattern", "material", "shape", "pose", "expression", "hairstyle", "features", "font", "word",
             "damage", "effect", "motif")


_FINE = ("expression", "features", "damage")  # too small to tell apart on small figures
FINE_MIN_PX = 100  # figures drawn less tall get no expression or facial-feature tags


def _distract(world: World, rng: random.Random, e: dict, colors_ok: bool,
              fixed: set[str]) -> tuple[dict, dict, str] | None:
    """Two look-alikes: copies of ``e`` differing in one visible attribute."""
    dims = []
    for dim in _DISTINCT:
        if dim in fixed or (dim == "color" and not colors_ok):
            continue
        if dim in ("pattern", "material", "damage") and e.get("design"):
            continue
        if len(entity_options(world, e, dim)) >= 2:
            dims.append(dim)
    rng.shuffle(dims)
    for dim in dims:
        for _ in range(8):
            v1, v2 = rng.sample(entity_options(world, e, dim), 2)
            a, b = copy.deepcopy(e), copy.deepcopy(e)
            set_attribute(world, a, dim, v1)
            set_attribute(world, b, dim, v2)
            if dim == "color" and (a.get("material") or b.get("material")):
                continue
            if _valid(world, a) and _valid(world, b):
                b["seed"] = rng.getrandbits(31)
                return a, b, dim
    return None


class _Picker:
    """Draws figures: a category by weight, then a figure in it by weight. The first draw
    that can take the hinted category takes it instead: images cycle their first entity
    through the categories, so every category is well covered in any library."""

    def __init__(self, world: World, rng: random.Random, hint: str | None = None) -> None:
        self.world, self.rng, self.hint = world, rng, hint

    def __call__(self, ok: Callable[[str], bool]) -> str:
        world, rng = self.world, self.rng
        cats = {c: w for c, w in world.category_weights.items() if any(ok(f) for f in world.figures_of(c))}
        cat = _weighted(rng, cats)
        if self.hint in cats:
            cat, self.hint = self.hint, None
        return _weighted(rng, {f: world.figures[f].get("weight", 1.0) for f in world.figures_of(cat) if ok(f)})


@cache
def _category_cycle(seed: int) -> tuple[str, ...]:
    names = sorted(load_world().category_weights)
    _rng(seed, "categories").shuffle(names)
    return tuple(names)


def _compound(world: World, rng: random.Random, pick: _Picker, kind: str,
              box: list[float]) -> tuple[list[dict], dict]:
    """Two related entities filling one slot: (entities, relation with local indexes)."""
    figs = world.figures
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    if kind in ("holding", "wearing"):
        who = new_entity(world, rng, pick(lambda f: figs[f]["category"] in world.humanoid))
        if kind == "holding":
            item = new_entity(world, rng, pick(lambda f: "hold" in figs[f]))
            who["pose"] = "reaching"
            if who.get("orientation") == "front":
                who["mirror"] = rng.random() < 0.5
            item_left = who.get("orientation") == "left" or bool(who.get("mirror"))
            who["place"] = {"mode": "slot", "box": [round(x1 - 0.75 * w, 1), y0, x1, y1] if item_left
                            else [x0, y0, round(x0 + 0.75 * w, 1), y1]}
            item["place"] = {"mode": "held", "of": 0}
        else:
            item = new_entity(world, rng, pick(lambda f: "wear" in figs[f]))
            item["worn"] = True
            if figs[item["figure"]]["wear"] == "head":
                who["wears"] = "head"
                if who["hairstyle"] not in entity_options(world, who, "hairstyle"):
                    who["hairstyle"] = rng.choice(entity_options(world, who, "hairstyle"))
                item.pop("shape", None)
            item["mirror"] = who.get("orientation") == "left"
            who["place"] = {"mode": "slot", "box": box}
            item["place"] = {"mode": "worn", "of": 0}
        return [who, item], {"type": kind, "subject": 0, "object": 1}
    if kind == "on_top":
        base = new_entity(world, rng, pick(lambda f: bool(figs[f].get("platform"))))
        top = new_entity(world, rng, pick(lambda f: bool(figs[f].get("topper"))))
        if top["category"] == "Animal":
            calm = [p for p in ("standing", "sitting", "lying", "perched") if p in figs[top["figure"]].get("poses", [])]
            top["pose"] = rng.choice(calm)
        top.pop("effect", None) if top.get("effect") in ("speed_lines", "trail") else None
        base.pop("effect", None) if base.get("effect") in ("speed_lines", "trail") else None
        base["place"] = {"mode": "slot", "box": [x0, round(y0 + 0.38 * h, 1), x1, y1]}
        top["place"] = {"mode": "on", "of": 0}
        return [base, top], {"type": "on_top", "subject": 1, "object": 0}
    if kind == "in_front":
        back = new_entity(world, rng, pick(lambda f: figs[f]["category"] == "Structure"))
        front = new_entity(world, rng, pick(lambda f: bool(figs[f].get("front"))))
        back["place"] = {"mode": "slot", "box": [x0, y0, x1, round(y1 - 0.06 * h, 1)]}
        left = rng.random() < 0.5
        fx0 = x0 if left else x1 - 0.55 * w
        front["place"] = {"mode": "slot", "box": [round(fx0, 1), round(y1 - 0.5 * h, 1), round(fx0 + 0.55 * w, 1), y1]}
        return [back, front], {"type": "in_front", "subject": 1, "object": 0}
    raise KeyError(kind)


TEXT_MIN_W = 100  # lettering in narrower boxes is too small to tell fonts apart


def _fits(world: World, box: list[float]) -> Callable[[str], bool]:
    wide = box[2] - box[0] >= TEXT_MIN_W
    return lambda f: wide or world.figures[f]["category"] != "Text"


def _pair(world: World, rng: random.Random, pick: _Picker, kind: str, colors_ok: bool, distract: bool,
          boxes: list[list[float]]) -> tuple[list[dict], dict | None, dict | None]:
    """The first two single slots: maybe related (beside, facing, chasing), maybe look-alikes."""
    figs = world.figures
    fits = _fits(world, min(boxes, key=lambda b: b[2] - b[0]))
    if kind == "facing":
        ok: Callable[[str], bool] = lambda f: fits(f) and {"left", "right"} <= set(figs[f].get("orientations", []))
    elif kind == "chasing":
        ok = lambda f: fits(f) and "running" in figs[f].get("poses", [])
    else:
        ok = fits
    fixed: set[str] = set()
    first = new_entity(world, rng, pick(ok))
    if min(_fit_box(world, first, box)[2] for box in boxes) < FINE_MIN_PX:
        fixed |= set(_FINE)
    if kind == "facing":
        first["orientation"] = "right"
        fixed |= {"orientation"}
    elif kind == "chasing":
        first["orientation"] = rng.choice(("left", "right"))
        first["pose"] = "running"
        fixed |= {"orientation", "pose"}
    if kind in ("facing", "chasing"):
        for dim in ("expression", "pose"):
            if first.get(dim) is not None and first[dim] not in entity_options(world, first, dim):
                first[dim] = rng.choice(entity_options(world, first, dim))
    distractor = None
    pair = _distract(world, rng, first, colors_ok, fixed) if distract else None
    if pair is not None:
        a, b, dim = pair
        distractor = {"entities": [0, 1], "attribute": dim}
    else:
        a = first
        b = new_entity(world, rng, pick(ok))
        if kind == "chasing":
            b["pose"], b["orientation"] = "running", first["orientation"]
    if kind == "facing":
        b["orientation"] = "left"
        for dim in ("expression", "pose"):
            if b.get(dim) is not None and b[dim] not in entity_options(world, b, dim):
                b[dim] = rng.choice(entity_options(world, b, dim))
    a["place"] = {"mode": "slot", "box": boxes[0]}
    b["place"] = {"mode": "slot", "box": boxes[1]}
    relation = None
    if kind == "beside":
        relation = {"type": "beside", "subject": 0, "object": 1}
    elif kind == "facing":
        relation = {"type": "facing", "subject": 0, "object": 1}
    elif kind == "chasing":  # the one behind chases the one ahead
        chaser, chased = (0, 1) if a["orientation"] == "right" else (1, 0)
        relation = {"type": "chasing", "subject": chaser, "object": chased}
    return [a, b], relation, distractor


def plan_scene(seed: int, index: int) -> dict[str, Any]:
    """The plan of image ``index`` of the library of ``seed`` (plain JSON data)."""
    world = load_world()
    sc = world.scene
    rng = _rng(seed, index)
    cycle = _category_cycle(seed)
    pick = _Picker(world, rng, cycle[index % len(cycle)])
    count = int(_weighted(rng, sc["slots"]))
    vps = {k: v.get("weight", 1.0) for k, v in world.viewpoints.items()
           if (count == 1 or not v.get("single")) and count <= v.get("max_slots", 4)}
    viewpoint = _weighted(rng, vps)
    layout = {1: "centered", 2: "row", 3: rng.choice(("row", "diagonal")), 4: "grid"}[count]
    vp = world.viewpoints[viewpoint]
    boxes = slot_boxes(layout, count, world.size, vp)
    tone = (_weighted(rng, {k: v.get("weight", 1.0) for k, v in world.tones.items()})
            if rng.random() < sc["p_tone"] else None)
    lighting = (_weighted(rng, {k: v.get("weight", 1.0) for k, v in world.lighting.items()})
                if rng.random() < sc["p_lighting"] else None)
    colors_ok = ((tone is None or bool(world.tones[tone].get("keeps_colors")))
                 and (lighting is None or bool(world.lighting[lighting].get("keeps_colors"))))
    salient = [k for k, v in world.backgrounds.items() if v.get("tag")]
    background = rng.choice(salient) if rng.random() < sc["p_background"] else "plain"
    kinds = ["single"] * count
    if not vp.get("single"):
        weights = {"holding": 1.0, "wearing": 1.0, "on_top": 0.8, "in_front": 0.7}
        kinds = [_weighted(rng, weights) if rng.random() < sc["p_compound"] else "single" for _ in range(count)]
    entities: list[dict] = []
    relations: list[dict] = []
    distractor = None
    primaries: list[int] = []  # the entity holding each slot's position
    start = 0
    if count >= 2 and kinds[0] == kinds[1] == "single":
        pair_kind = None
        if layout == "row" and rng.random() < sc["p_pair_relation"]:
            pair_kind = _weighted(rng, {"beside": 1.0, "facing": 1.0, "chasing": 0.7})
        distract = rng.random() < sc["p_distractor"]
        ents, relation, distractor = _pair(world, rng, pick, pair_kind or "none", colors_ok, distract, boxes[:2])
        entities += ents
        primaries += [0, 1]
        if relation:
            relations.append(relation)
        start = 2
    for slot in range(start, count):
        base = len(entities)
        if kinds[slot] == "single":
            e = new_entity(world, rng, pick(_fits(world, boxes[slot])))
            e["place"] = {"mode": "slot", "box": boxes[slot]}
            entities.append(e)
            primaries.append(base)
            continue
        ents, relation = _compound(world, rng, pick, kinds[slot], boxes[slot])
        for e in ents:
            if "of" in e["place"]:
                e["place"]["of"] += base
        entities += ents
        relations.append({"type": relation["type"], "subject": relation["subject"] + base,
                          "object": relation["object"] + base})
        primaries.append(base + (1 if kinds[slot] == "in_front" else 0))
    if count == 1 and kinds[0] in ("on_top", "in_front"):
        layout = "stacked" if kinds[0] == "on_top" else "layered"
    min_px = min(b[3] - b[1] for b in boxes)
    styles = {k: v.get("weight", 1.0) for k, v in world.styles.items() if min_px >= v.get("min_px", 0)}
    style = _weighted(rng, styles)
    horizon = round(world.size * float(vp["horizon"]))
    positions = _POSITIONS.get((layout, count), [])
    for slot, i in enumerate(primaries):
        if positions:
            entities[i]["position"] = positions[slot]
    return {
        "version": RENDER_VERSION,
        "world": world_hash()[:12],
        "seed": seed,
        "index": index,
        "size": world.size,
        "viewpoint": viewpoint,
        "layout": layout,
        "style": style,
        "lighting": lighting,
        "tone": tone,
        "colors_visible": colors_ok,
        "background": {"kind": background, "horizon": horizon, "seed": rng.getrandbits(31)},
        "post_seed": rng.getrandbits(31),
        "entities": entities,
        "relations": relations,
        "distractor": distractor,
    }
