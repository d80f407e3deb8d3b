"""The world: taxonomy/synth.toml checked against the taxonomy, the random streams, the world hash."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import PIL

from ...resources import data_path, read_toml
from ...taxonomy import SubtypeSpec, Taxonomy, taxonomy
from ._draw import RGB, _rgb
from ._figures import FIGURES

SYNTH_FILE = "synth.toml"


@dataclass(frozen=True, slots=True)
class Draw:
    """What draws one subtype (``[draws.<subtype>]`` of taxonomy/synth.toml)."""

    subtype: SubtypeSpec
    field: str  # the plan field holding the value
    table: str  # the table naming the values
    by_name: bool = False  # the value's name is the tag (colors)
    of_figure: bool = False  # the table is the figure's own (shapes)
    fine: bool = False  # only on figures drawn at least FINE_MIN_PX tall
    needs_colors: bool = False  # only where the entity's own color shows


class World:
    """taxonomy/synth.toml, checked against the taxonomy (tracebench.taxonomy)."""

    def __init__(self, data: dict[str, Any], tax: Taxonomy | None = None) -> None:
        tax = tax or taxonomy()
        self.size: int = int(data["canvas"]["size"])
        self.scene: dict[str, Any] = data["scene"]
        self.colors: dict[str, RGB] = {name: _rgb(v) for name, v in data["colors"].items()}
        people = data["people"]
        self.skin: list[RGB] = [_rgb(v) for v in people["skin"]]
        self.hair: dict[str, RGB] = {name: _rgb(v) for name, v in people["hair"].items()}
        self.pants: list[RGB] = [_rgb(v) for v in people["pants"]]
        for table in ("patterns", "materials", "damage", "fonts", "hairstyles", "features", "poses",
                      "expressions", "orientations", "effects", "backgrounds", "styles", "lighting",
                      "tones", "viewpoints", "layouts", "relations", "figures"):
            setattr(self, table, data[table])
        self.motifs: dict[str, str] = data["motifs"]
        self.words: list[str] = data["words"]["list"]
        self.category_weights: dict[str, float] = data["category_weights"]
        self.categories = list(tax.categories)
        self.humanoid = set(tax.humanoid)
        self.draws: dict[str, Draw] = {}
        for key, entry in data["draws"].items():
            sub = tax.subtypes.get(key) or tax.special.get(key)
            if sub is None:
                raise ValueError(f"taxonomy/synth.toml: draws.{key}: not a subtype of taxonomy/subtypes.toml")
            self.draws[key] = Draw(sub, entry["field"], entry["table"], entry.get("tag") == "name",
                                   bool(entry.get("of_figure")), bool(entry.get("fine")),
                                   bool(entry.get("needs_colors")))
        self.allowed: dict[str, set[str]] = {key: set(d.subtype.categories) for key, d in self.draws.items()}
        self.attach_categories = set(tax.special["attach"].categories)
        self.ip_categories = set(tax.special["ip"].categories)
        self._check()

    def entity_draws(self) -> list[Draw]:
        """The draws of entity subtypes, in the taxonomy's order."""
        return [d for d in self.draws.values() if d.subtype.record == "tag_dict"]

    def draw_of(self, field: str) -> Draw:
        """The draw of an entity plan field: ``pattern`` -> 1.1_pattern_texture's."""
        return next(d for d in self.entity_draws() if d.field == field)

    def table(self, draw: Draw, figure: str) -> dict[str, Any]:
        """The values a draw names (for ``of_figure`` draws, the figure's own table)."""
        return self.figures[figure].get(draw.table, {}) if draw.of_figure else getattr(self, draw.table)

    def tag_text(self, draw: Draw, figure: str, value: str) -> str:
        if draw.by_name:
            return value
        entry = self.table(draw, figure)[value]
        return entry if draw.of_figure else entry["tag"]

    def value_of(self, draw: Draw, figure: str, tag: str) -> Any:
        """The plan value behind a tag text (the inverse of :meth:`tag_text`), None if none."""
        return next((v for v in self.table(draw, figure) if self.tag_text(draw, figure, v) == tag), None)

    # ---------------------------------------------------------------- compatibility
    def _check(self) -> None:
        problems: list[str] = []

        def need(ok: bool, message: str) -> None:
            if not ok:
                problems.append(message)

        for key, d in self.draws.items():
            need(d.of_figure or isinstance(getattr(self, d.table, None), dict),
                 f"draws.{key}: unknown table {d.table!r}")
        if problems:
            raise ValueError("taxonomy/synth.toml: " + "; ".join(problems))
        lists = {d.table: d for d in self.entity_draws()}  # figures restrict values by table name
        for name, fig in self.figures.items():
            cat = fig.get("category")
            where = f"figures.{name}"
            need(cat in self.categories, f"{where}: unknown category {cat!r}")
            need(name in FIGURES, f"{where}: no drawing function")
            for field, d in lists.items():
                values = fig.get(field) or []
                if values:
                    need(cat in self.allowed[d.subtype.key], f"{where}: {field} on a {cat} ({d.subtype.key} does not apply)")
                if d.of_figure:
                    continue
                table = self.table(d, name)
                for value in values:
                    need(value in table, f"{where}: unknown {d.field} {value!r}")
                    if value in table and isinstance(table[value], dict) and cat in self.allowed[d.subtype.key]:
                        need(cat in self._cats(table[value], d.subtype.key),
                             f"{where}: {d.field} {value!r} does not apply to {cat}")
            if fig.get("attach"):
                need(cat in self.attach_categories, f"{where}: attach on a {cat}")
            if fig.get("design"):
                need(cat in self.ip_categories, f"{where}: design (ip) on a {cat}")
            if cat in self.humanoid:  # the planner gives every humanoid these
                for field in ("hairstyle", "features", "expression"):
                    need(cat in self.allowed[self.draw_of(field).subtype.key], f"{where}: humanoid {cat} lacks {field}")
            if cat == "Text":
                need(cat in self.allowed[self.draw_of("font").subtype.key], f"{where}: Text without font")
        for name, effect in self.effects.items():
            for figure in effect.get("figures", []):
                need(figure in self.figures, f"effects.{name}: unknown figure {figure!r}")
        if problems:
            raise ValueError("taxonomy/synth.toml: " + "; ".join(problems))

    def _cats(self, entry: dict[str, Any], subtype: str) -> set[str]:
        cats = entry.get("categories", ["*"])
        own = set(self.categories) if "*" in cats else set(cats)
        return own & self.allowed[subtype]

    # ---------------------------------------------------------------- options
    def patterns_for(self, figure: str) -> list[str]:
        fig = self.figures[figure]
        cat = fig["category"]
        names = fig["patterns"] if "patterns" in fig else list(self.patterns)
        key = self.draw_of("pattern").subtype.key
        return [p for p in names if cat in self._cats(self.patterns[p], key)]

    def damage_for(self, figure: str, material: str | None) -> list[str]:
        cat = self.figures[figure]["category"]
        key = self.draw_of("damage").subtype.key
        out = []
        for name, entry in self.damage.items():
            if "damage" in self.figures[figure] and name not in self.figures[figure]["damage"]:
                continue
            if cat not in self._cats(entry, key):
                continue
            if material is not None and "materials" in entry and material not in entry["materials"]:
                continue
            if material is not None and material in entry.get("excludes", []):
                continue
            out.append(name)
        return out

    def effects_for(self, figure: str) -> list[str]:
        cat = self.figures[figure]["category"]
        key = self.draw_of("effect").subtype.key
        return [name for name, entry in self.effects.items()
                if cat in self._cats(entry, key)
                and ("figures" not in entry or figure in entry["figures"])]

    def figures_of(self, category: str) -> list[str]:
        return [name for name, fig in self.figures.items() if fig["category"] == category]


@cache
def load_world() -> World:
    return World(read_toml("taxonomy", SYNTH_FILE))


def _rng(*parts: object) -> random.Random:
    """An independent, platform-stable random stream for a tuple of labels."""
    text = "/".join(str(p) for p in ("tracebench-synth", *parts))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def _weighted(rng: random.Random, weights: dict[Any, float]) -> Any:
    keys = list(weights)
    return rng.choices(keys, weights=[float(weights[k]) for k in keys], k=1)[0]


@cache
def world_hash() -> str:
    """What the library depends on: the world file and the taxonomy its tags follow, the renderer
    (every module of this package in name order, but ``__init__``, which only re-exports) and
    Pillow's version."""
    digest = hashlib.sha256()
    for name in (SYNTH_FILE, "subtypes.toml", "categories.toml"):
        digest.update(data_path("taxonomy", name).read_bytes())
    for module in sorted((p for p in Path(__file__).parent.glob("*.py") if p.name != "__init__.py"),
                         key=lambda p: p.name):
        digest.update(b"\0" + module.name.encode() + b"\0" + module.read_bytes())
    digest.update(b"\0" + PIL.__version__.encode())
    return digest.hexdigest()
