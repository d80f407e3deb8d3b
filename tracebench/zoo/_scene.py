"""Planning the scene a synthetic generator draws for a case, under its profile.

The plan is a render plan of the synthetic library (``tracebench.library.synth``), built from
the case's terms: anchored entities are copied from their library image's plan, text
entities are stand-in figures of their category, attributes, designs and attachable items
are moved onto their carriers, global terms set the image-level fields. What the profile
breaks is drawn broken (withheld, leaked, degraded, duplicated), and the ``zoo`` key of the
plan says, term by term, what was done.
"""

from __future__ import annotations

import copy
import hashlib
import math
import random
import re
from typing import Any

from ..errors import TraceError
from ..library.synth import (RENDER_VERSION, World, entity_options, load_world, new_entity, relation_tag,
                             set_attribute, slot_boxes, world_hash)
from ..operators import Family, Role
from ..records import Case, Distractor, TermBinding
from ..sample import LibraryIndex
from ._profiles import CONFUSION, PARTIAL, Profile
from ._load import load_modes
from ._rules import Scene, breaking, confused

__all__ = ["plan_generation"]

_OPTIONAL = ("pattern", "material", "damage", "shape", "effect")  # an entity may lack these
_DRAWN_KEYS = ("place", "position", "box", "bbox", "unit", "rgb", "desc", "worn")  # redone for the new scene
# what an image shows when a global term is missing (or, if that is what was asked, the second choice)
_NEUTRAL = {"style": ("flat", "ink"), "lighting": (None,), "tone": (None,), "viewpoint": ("eye_level", "wide"),
            "background": ("plain",)}
_OTHER_LAYOUT = {"row": "diagonal", "grid": "row", "diagonal": "row", "centered": "row", "stacked": "row",
                 "layered": "row"}
# text entities' nouns (templates/text_carriers.toml) the world draws under another figure's name
_LOOKALIKES = {"corgi": "dog", "owl": "bird", "sneaker": "boot", "lighthouse": "tower", "cabin": "house",
               "sign": "hanging_sign", "poster": "banner", "wizard": "person", "sailor": "person",
               "dancer": "person", "chef": "person"}
_NATIVE_BOXES = {("centered", 1), ("row", 2), ("row", 3), ("diagonal", 3), ("grid", 4)}


def _stream(seed: int, *parts: object) -> random.Random:
    text = "/".join(str(p) for p in ("tracebench-zoo", seed, *parts))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def _choices(world: World, e: dict, dim: str) -> list[Any]:
    try:
        return list(entity_options(world, e, dim))
    except KeyError:
        return []


# ------------------------------------------------------------------------------ library content

class _Sources:
    """Library images by id, and the plan parts a term takes content from."""

    def __init__(self, index: LibraryIndex) -> None:
        self.images = index.by_id

    def plan(self, t: TermBinding) -> dict:
        image = self.images.get(t.source_id or "")
        if image is None:
            raise TraceError(f"term {t.symbol}: library image {t.source_id!r} is not in the library")
        if not image.render:
            raise TraceError(f"term {t.symbol}: library image {t.source_id} has no render plan "
                             "(the synthetic zoo draws from a synthetic library)")
        return image.render

    def entity(self, t: TermBinding) -> dict:
        entities = self.plan(t).get("entities") or []
        if t.entity_index is None or not 0 <= t.entity_index < len(entities):
            raise TraceError(f"term {t.symbol}: entity {t.entity_index} is not in library image {t.source_id}")
        return entities[t.entity_index]

    def taken(self, t: TermBinding, d: Distractor | None) -> TermBinding:
        """Term ``t`` as the generator reads it: bound to distractor ``d``'s content when it took
        that distractor instead of the term's source (``distractor-confusion``)."""
        if d is None:
            return t
        return t.model_copy(update={"source_id": d.source_id, "entity_index": d.entity_index, "value": d.value})


def _fresh(entity: dict) -> dict:
    """A library entity's plan, without what its own scene placed or measured."""
    e = copy.deepcopy(entity)
    for key in _DRAWN_KEYS:
        e.pop(key, None)
    return e


def _fields(world: World, *, entity: bool) -> dict[str, str]:
    """Subtype -> the plan field that draws it (taxonomy/synth.toml's draws): the entity
    subtypes, or (``entity=False``) the image-level ones and the background."""
    return {key: d.field for key, d in world.draws.items() if (d.subtype.record == "tag_dict") == entity}


def _plan_value(world: World, source: dict, dim: str, tag: str) -> Any:
    """The plan value behind a tag of the source entity ("horizontal stripes" -> "stripes")."""
    draw = world.draw_of(dim)
    if dim == "features":
        feats = source.get("features") or []
        match = [f for f in feats if world.tag_text(draw, source["figure"], f) == tag]
        return (match or feats or [None])[0]
    if source.get(dim) is not None:
        return source[dim]
    return world.value_of(draw, source["figure"], tag)


def _shows(e: dict, dim: str, value: Any) -> bool:
    return value in (e.get(dim) or []) if dim == "features" else e.get(dim) == value


def _withhold(world: World, e: dict, dim: str, value: Any) -> None:
    """Make sure the entity does not show ``value`` (it may have had it of its own)."""
    if not _shows(e, dim, value):
        return
    if dim == "features":
        e["features"] = [f for f in e["features"] if f != value]
    elif dim in _OPTIONAL:
        e.pop(dim)
    else:
        other = [v for v in _choices(world, e, dim) if v != value]
        if other:
            e[dim] = other[0]


def _apply(world: World, e: dict, dim: str, value: Any) -> bool:
    """Set an attribute on an entity; False (entity unchanged) when the figure cannot draw it.

    Only pose conflicts are refused: a figure draws only its own poses, and profile poses only
    from the side (a transferred pose turns the entity sideways if that helps; a transferred
    orientation that would leave a profile pose facing the viewer is not drawn). Any other
    value is drawn as the renderer can."""
    trial = copy.deepcopy(e)
    set_attribute(world, trial, dim, value)
    if dim != "features":
        trial[dim] = value  # set_attribute drops damage the figure does not list; the renderer draws any

    def pose_ok() -> bool:
        return trial.get("pose") is None or trial["pose"] in _choices(world, trial, "pose")

    if dim == "pose" and not pose_ok():
        sides = [o for o in ("right", "left") if o in world.figures[e["figure"]].get("orientations", [])]
        if sides:
            trial["orientation"] = sides[0]
    if not pose_ok():
        return False
    e.clear()
    e.update(trial)
    return True


def _other_color(world: World, e: dict, avoid: set[str]) -> str:
    colors = _choices(world, e, "color") or list(world.colors)
    start = colors.index(e["color"]) + 1 if e.get("color") in colors else 0
    ring = colors[start:] + colors[:start]
    return next((c for c in ring if c not in avoid), ring[0])


# ------------------------------------------------------------------------------ stand-ins

def _stand_in(world: World, t: TermBinding, wanted: list[tuple[str, Any]], avoid: set[str],
              rng: random.Random) -> dict:
    """A figure of the text entity's category: its own noun if the world draws it, else the one
    that can show most of the attributes it is to take; plain (no optional attributes)."""
    figures = world.figures_of(t.category or "") or list(world.figures)

    def rank(name: str) -> tuple:
        fig = world.figures[name]
        probe = {"figure": name, "category": fig["category"]}
        fits = sum(1 for dim, value in wanted if value in _choices(world, probe, dim))
        same = t.noun in (name, fig["noun"]) or _LOOKALIKES.get(t.noun or "") == name
        return (not same, -fits, name in avoid)

    best = min(rank(f) for f in figures)
    pool = [f for f in figures if rank(f) == best]
    e = new_entity(world, rng, pool[rng.randrange(len(pool))])
    for key in (*_OPTIONAL, "design"):
        e.pop(key, None)
    e["noun"] = world.figures[e["figure"]]["noun"]
    e["usable_as"] = []
    word = re.search(r"reading\s+([A-Za-z]+)", t.value)
    if e["category"] == "Text" and word:
        e["word"] = word.group(1).upper()
    return e


# ------------------------------------------------------------------------------ slots

def _generic_boxes(layout: str, n: int) -> list[list[float]]:
    """``n`` boxes on the 256-pixel reference canvas for layouts or counts the planner lacks."""
    if layout == "grid":
        cols = math.ceil(math.sqrt(n))
        rows = math.ceil(n / cols)
        w, h = 248 / cols, 248 / rows
        return [[4 + (i % cols) * w, 4 + (i // cols) * h, 4 + (i % cols + 1) * w - 4, 4 + (i // cols + 1) * h - 4]
                for i in range(n)]
    if layout == "diagonal" and n > 1:
        s = min(120.0, 248 / (0.55 * (n - 1) + 1))
        step = (248 - s) / (n - 1)
        return [[4 + i * step, 4 + i * step, 4 + i * step + s, 4 + i * step + s] for i in range(n)]
    if layout == "stacked":
        h = 248 / n
        return [[68, 4 + i * h, 188, 4 + (i + 1) * h - 2] for i in range(n)]
    cols = n if n <= 4 else math.ceil(n / 2)  # row, centered, layered
    rows = math.ceil(n / cols)
    w = 248 / cols
    widen = 0.15 * w if layout == "layered" else 0.0
    bands = [[236 - min(184.0, 1.8 * w), 236]] if rows == 1 else [[8, 120], [132, 248]]
    return [[max(0.0, 4 + (i % cols) * w - widen), bands[i // cols][0], min(256.0, 4 + (i % cols + 1) * w - 4 + widen),
             bands[i // cols][1]] for i in range(n)]


def _boxes(layout: str, n: int, size: int, viewpoint: dict) -> list[list[float]]:
    """Slot boxes: the planner's own for the layouts it knows, else a generic arrangement,
    scaled by the viewpoint as the planner scales them."""
    if (layout, n) in _NATIVE_BOXES:
        return slot_boxes(layout, n, size, viewpoint)
    scale = float(viewpoint.get("scale", 1.0))
    cx, cy = 128.0, 236.0 if layout in ("centered", "row") else 128.0
    k = size / 256
    return [[round((cx + (x0 - cx) * scale) * k, 1), round((cy + (y0 - cy) * scale) * k, 1),
             round((cx + (x1 - cx) * scale) * k, 1), round((cy + (y1 - cy) * scale) * k, 1)]
            for x0, y0, x1, y1 in _generic_boxes(layout, n)]


def _default_layout(n: int) -> str:
    return "centered" if n <= 1 else "row" if n <= 3 else "grid"


# ------------------------------------------------------------------------------ the plan

class _Planner:
    def __init__(self, case: Case, profile: Profile, index: LibraryIndex, seed: int) -> None:
        self.case, self.profile, self.seed = case, profile, seed
        self.world = load_world()
        self.scene = Scene(case)
        self.sources = _Sources(index)
        self.entities: list[dict] = []
        self.at: dict[str, int] = {}  # carrier symbol -> its entity (first copy)
        self.fixed: dict[int, set[str]] = {}  # entity -> fields set by a transfer
        self.notes: dict[str, Any] = {"case": case.id, "profile": str(profile), "seed": seed, "anchors": {},
                                      "transfers": [], "globals": [], "relations": []}
        confusion = next((f for f in profile.modes() if f.name == CONFUSION), None)
        self.took: dict[str, Distractor] = {}  # term -> the distractor taken instead of its source
        if confusion is not None:
            for t in case.terms:
                d = confused(self.scene, t.symbol, confusion, seed)
                if d is not None:
                    self.took[t.symbol] = d
        if self.took:
            self.notes["confused"] = {term: d.id for term, d in self.took.items()}

    def broken(self, target: str, aspect: str, *names: str) -> bool:
        """Whether one of the named modes, or any load mode, breaks ``target:aspect`` in this image."""
        names = (*names, *load_modes())
        return any(n in names for n in breaking(self.scene, self.profile, target, aspect, seed=self.seed))

    def run(self) -> dict[str, Any]:
        terms = self.case.terms
        for t in terms:
            if t.role in (Role.ANCHOR, Role.TEXT):
                self.carrier(t)
        for t in terms:
            if t.op == Family.DISENTANGLE and t.role == Role.LOCAL:
                self.local(t)
            elif t.op == Family.DISENTANGLE and t.role == Role.IP:
                self.design(t)
        self.settle()
        for t in terms:
            if t.op == Family.DISENTANGLE and t.role == Role.RELATION:
                self.relation(t)
        if self.profile.has("duplicate"):
            for t in terms:
                if t.role == Role.ANCHOR:
                    twin = copy.deepcopy(self.entities[self.at[t.symbol]])
                    twin["copy"] = 1
                    self.entities.append(twin)
        plan = self.image_level()
        vp = self.world.viewpoints[plan["viewpoint"]]
        for e, box in zip(self.entities, _boxes(plan["layout"], len(self.entities), self.world.size, vp)):
            e["place"] = {"mode": "slot", "box": box}
        for t in terms:
            if t.op == Family.DISENTANGLE and t.role == Role.ATTACH:
                self.attach(t)
        plan["entities"] = self.entities
        plan["relations"] = [{"type": r["type"], "subject": r["entities"][0], "object": r["entities"][-1]}
                             for r in self.notes["relations"] if r["drawn"] and len(r["entities"]) >= 2]
        plan["zoo"] = self.notes
        return plan

    # -- carriers ------------------------------------------------------------------------
    def carrier(self, t: TermBinding) -> None:
        world = self.world
        if t.role == Role.ANCHOR:
            e = _fresh(self.sources.entity(self.sources.taken(t, self.took.get(t.symbol))))
            if self.broken(t.symbol, "identity", "global-interference", "composition-interference"):
                old = e["color"]
                set_attribute(world, e, "color", _other_color(world, e, {old, e.get("second", "")}))
                self.notes["anchors"][t.symbol] = {"identity": "altered", "color": [old, e["color"]]}
            elif PARTIAL in breaking(self.scene, self.profile, t.symbol, "identity", seed=self.seed):
                old = e.get("accent")  # one specific feature wrong, the main color kept
                e["accent"] = next(c for c in world.colors if c not in (old, e.get("color"), e.get("second")))
                self.notes["anchors"][t.symbol] = {"identity": "partly altered", "accent": [old, e["accent"]]}
            else:
                self.notes["anchors"][t.symbol] = {"identity": "kept"}
        else:
            wanted = []
            fields = _fields(world, entity=True)
            for g in self.case.terms:
                if g.carrier == t.symbol and g.op == Family.DISENTANGLE and g.role == Role.LOCAL and g.subtype in fields:
                    dim = fields[g.subtype]
                    wanted.append((dim, _plan_value(world, self.sources.entity(g), dim, g.value)))
            used = {e["figure"] for e in self.entities}
            e = _stand_in(world, t, wanted, used, _stream(self.seed, self.case.id, t.symbol))
            e["stands_for"] = t.value
        e["term"], e["copy"] = t.symbol, 0
        self.at[t.symbol] = len(self.entities)
        self.fixed[len(self.entities)] = set()
        self.entities.append(e)

    # -- transfers -----------------------------------------------------------------------
    def local(self, g: TermBinding) -> None:
        world = self.world
        g = self.sources.taken(g, self.took.get(g.symbol))
        dim = _fields(world, entity=True).get(g.subtype or "")
        source = self.sources.entity(g)
        value = _plan_value(world, source, dim, g.value) if dim else None
        note: dict[str, Any] = {"term": g.symbol, "subtype": g.subtype, "field": dim, "value": value,
                                "carrier": g.carrier, "on": None}
        home = self.at.get(g.carrier or "")
        target = home
        if self.broken(g.symbol, "presence", "weak-subtype"):
            note["status"], target = "withheld", None
        elif self.broken(g.symbol, "presence", "leaky-binding"):
            ring = [c for c in self.scene.carriers if c in self.at]
            start = ring.index(g.carrier) + 1 if g.carrier in ring else 0
            others = [c for c in ring[start:] + ring[:start] if c != g.carrier]  # the next entity takes it
            target = self.at[others[0]] if others else None
            note["status"] = "leaked" if target is not None else "withheld"
        else:
            note["status"] = "applied"
        note["fidelity"] = "kept"
        if home is not None and dim and value is not None and target != home:
            _withhold(world, self.entities[home], dim, value)
            self.fixed[home].add(dim)  # a relation must not turn it back
        if target is not None and dim and value is not None:
            e = self.entities[target]
            note["on"] = e["term"]
            note["drawn"] = _apply(world, e, dim, value)
            note["fits"] = value in _choices(world, e, dim)
            self.fixed[target].add(dim)
            if self.broken(g.symbol, "fidelity", "global-interference"):  # a trait of the source comes along
                own = e.get("color")
                e["color"] = source["color"] if source.get("color") != own else source.get("second", own)
                note["fidelity"], note["carried_along"] = "lost", {"color": e["color"]}
        self.notes["transfers"].append(note)

    def settle(self) -> None:
        """After every transfer: no carrier shows an attribute it was denied (another leak may
        have brought it back), and ``drawn`` says whether each transferred value is still shown
        (a later transfer may have replaced it; a pattern hides a material)."""
        notes = [n for n in self.notes["transfers"] if n.get("field") and n.get("value") is not None]
        for note in notes:
            if note["status"] in ("withheld", "leaked") and note["carrier"] in self.at:
                _withhold(self.world, self.entities[self.at[note["carrier"]]], note["field"], note["value"])
        for note in notes:
            if note["on"] is not None:
                e = self.entities[self.at[note["on"]]]
                hidden = note["field"] == "material" and bool(e.get("pattern"))
                note["drawn"] = note["drawn"] and _shows(e, note["field"], note["value"]) and not hidden

    def design(self, g: TermBinding) -> None:
        source = self.sources.entity(self.sources.taken(g, self.took.get(g.symbol)))
        note: dict[str, Any] = {"term": g.symbol, "subtype": "ip", "carrier": g.carrier, "on": None}
        home = self.at.get(g.carrier or "")
        if home is None or self.broken(g.symbol, "presence", "weak-subtype"):
            note["status"] = "withheld"
            if home is not None and source.get("design") and self.entities[home].get("design") == source["design"]:
                self.entities[home].pop("design")
        else:
            e = self.entities[home]
            if source.get("design"):
                e["design"] = dict(source["design"])
            degraded = self.broken(g.symbol, "fidelity", "global-interference")
            keys = ("accent",) if degraded else ("color", "second", "accent")  # degraded: the color scheme is lost
            for key in keys:
                if key in source:
                    e[key] = source[key]
            motif = bool(self.world.figures[e["figure"]].get("design") and source.get("design"))
            note.update(status="applied", fidelity="lost" if degraded else "kept", on=e["term"],
                        shows=(["motif"] if motif else []) + ["accent color" if degraded else "color scheme"])
        self.notes["transfers"].append(note)

    def attach(self, g: TermBinding) -> None:
        world = self.world
        note: dict[str, Any] = {"term": g.symbol, "subtype": "attach", "carrier": g.carrier, "on": None}
        home = self.at.get(g.carrier or "")
        if home is None or self.broken(g.symbol, "presence", "weak-subtype"):
            note["status"] = "withheld"
            self.notes["transfers"].append(note)
            return
        carrier = self.entities[home]
        item = _fresh(self.sources.entity(self.sources.taken(g, self.took.get(g.symbol))))
        fig = world.figures[item["figure"]]
        human = carrier["category"] in world.humanoid
        if human and fig.get("wear"):
            item["worn"] = True
            item["mirror"] = carrier.get("orientation") == "left"
            item["place"] = {"mode": "worn", "of": home}
        elif human and fig.get("hold"):
            item["place"] = {"mode": "held", "of": home}
        else:  # beside the carrier, overlapping its lower right
            x0, y0, x1, y1 = carrier["place"]["box"]
            item["place"] = {"mode": "slot", "box": [round(x0 + 0.45 * (x1 - x0), 1), round(y0 + 0.5 * (y1 - y0), 1),
                                                     x1, y1]}
        degraded = self.broken(g.symbol, "fidelity", "global-interference")
        if degraded:
            old = item["color"]
            set_attribute(world, item, "color", _other_color(world, item, {old, item.get("second", "")}))
            note["color"] = [old, item["color"]]
        item["term"], item["copy"] = g.symbol, 0
        note.update(status="applied", fidelity="lost" if degraded else "kept", on=carrier["term"],
                    entity=len(self.entities))
        self.entities.append(item)
        self.notes["transfers"].append(note)

    def relation(self, g: TermBinding) -> None:
        world = self.world
        g = self.sources.taken(g, self.took.get(g.symbol))
        members = [self.at[p] for p in g.participants if p in self.at]
        source = self.sources.plan(g)
        kinds = [r["type"] for r in source.get("relations") or []
                 if relation_tag(world, r, source["entities"]) == g.value]
        kind = (kinds or [r["type"] for r in source.get("relations") or []] or ["beside"])[0]
        drawn = not (self.broken(g.symbol, "presence", "relation-blind", "weak-subtype")
                     or (g.carrier is not None and self.broken(g.carrier, "relation")))
        if drawn and kind in ("facing", "chasing") and len(members) >= 2:
            for i, k in enumerate(members):
                want = "left" if kind == "facing" and i == len(members) - 1 else "right"
                e = self.entities[k]
                if "orientation" not in self.fixed[k] and want in world.figures[e["figure"]].get("orientations", []):
                    e["orientation"] = want
        self.notes["relations"].append({"term": g.symbol, "type": kind, "participants": list(g.participants),
                                        "entities": members, "drawn": drawn})

    # -- image level -----------------------------------------------------------------------
    def image_level(self) -> dict[str, Any]:
        world = self.world
        n = len(self.entities)
        values: dict[str, Any] = {"style": "flat", "lighting": None, "tone": None, "viewpoint": "eye_level",
                                  "layout": _default_layout(n), "background": "plain"}
        background_seed = None
        fields = _fields(world, entity=False)
        for g in self.case.terms:
            if not (g.op == Family.DISENTANGLE and g.role == Role.GLOBAL and g.subtype in fields):
                continue
            field = fields[g.subtype]
            source = self.sources.plan(self.sources.taken(g, self.took.get(g.symbol)))
            asked = source["background"]["kind"] if field == "background" else source.get(field)
            applied = asked is not None and not self.broken(g.symbol, "presence", "no-global", "weak-subtype")
            if applied:
                values[field] = asked
                if field == "background":
                    background_seed = source["background"]["seed"]
            else:
                fallback = ((_default_layout(n), _OTHER_LAYOUT.get(asked, "row")) if field == "layout"
                            else _NEUTRAL[field])
                values[field] = next((v for v in fallback if v != asked), fallback[-1])
            self.notes["globals"].append({"term": g.symbol, "field": field, "value": asked,
                                          "status": "applied" if applied else "withheld", "drawn": values[field]})
        rng = _stream(self.seed, self.case.id, "scene")
        own_seed, post_seed = rng.getrandbits(31), rng.getrandbits(31)
        vp = world.viewpoints[values["viewpoint"]]
        tone, lighting = values["tone"], values["lighting"]
        colors_ok = ((tone is None or bool(world.tones[tone].get("keeps_colors")))
                     and (lighting is None or bool(world.lighting[lighting].get("keeps_colors"))))
        return {
            "version": RENDER_VERSION,
            "world": world_hash()[:12],
            "seed": self.seed,
            "case": self.case.id,
            "size": world.size,
            "viewpoint": values["viewpoint"],
            "layout": values["layout"],
            "style": values["style"],
            "lighting": lighting,
            "tone": tone,
            "colors_visible": colors_ok,
            "background": {"kind": values["background"], "horizon": round(world.size * float(vp["horizon"])),
                           "seed": own_seed if background_seed is None else background_seed},
            "post_seed": post_seed,
            "distractor": None,
        }


def plan_generation(case: Case, profile: Profile, index: LibraryIndex, *, seed: int = 0) -> dict[str, Any]:
    """The render plan of what a generator with ``profile`` draws for ``case`` (plain JSON)."""
    return _Planner(case, profile, index, seed).run()
