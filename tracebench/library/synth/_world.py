"""The world: taxonomy/synth.toml checked against the taxonomy, the random streams, the world hash."""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import PIL

from ...resources import DataFile, data_path, table_name
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


_SYNTH = DataFile("taxonomy", SYNTH_FILE)
# the tables of vocabulary: each a table of tables, one per value (figures: one per figure)
_VOCABULARIES = ("patterns", "materials", "damage", "fonts", "hairstyles", "features", "poses", "expressions",
                 "orientations", "effects", "backgrounds", "styles", "lighting", "tones", "viewpoints", "layouts",
                 "relations", "figures")
_HEX = re.compile(r"#?[0-9a-fA-F]{6}")


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    return _SYNTH.value("", data, key, dict)


def _colors(table: str, entries: dict[str, Any], key: str | None = None) -> dict[str, RGB]:
    """``#rrggbb`` colors: the values of ``entries`` (or of its array ``key``, by position)."""
    values = dict(entries) if key is None else dict(enumerate(_SYNTH.strings(table, entries, key)))
    out = {}
    for name, value in values.items():
        if not isinstance(value, str) or not _HEX.fullmatch(value):
            raise _SYNTH.error(f"{value!r} is not a color #rrggbb", table, key or name)
        out[name] = _rgb(value)
    return out


def _draw(tax: Taxonomy, key: str, entry: dict[str, Any]) -> Draw:
    """``[draws.<key>]``: the subtype it draws and how."""
    sub = tax.subtypes.get(key) or tax.special.get(key)
    if sub is None:
        raise _SYNTH.error(f"draws.{key}: not a subtype of taxonomy/subtypes.toml")
    table, flag = table_name("draws", key), lambda name: _SYNTH.value(table, entry, name, bool, False)
    return Draw(sub, _SYNTH.value(table, entry, "field", str), _SYNTH.value(table, entry, "table", str),
                _SYNTH.value(table, entry, "tag", str, "") == "name", flag("of_figure"), flag("fine"),
                flag("needs_colors"))


class World:
    """taxonomy/synth.toml, checked against the taxonomy (tracebench.taxonomy)."""

    def __init__(self, data: dict[str, Any], tax: Taxonomy | None = None) -> None:
        tax = tax or taxonomy()
        self.size: int = _SYNTH.value("canvas", _table(data, "canvas"), "size", int)
        self.scene: dict[str, Any] = _table(data, "scene")
        self.colors: dict[str, RGB] = _colors("colors", _table(data, "colors"))
        people = _table(data, "people")
        self.skin: list[RGB] = list(_colors("people", people, "skin").values())
        self.hair: dict[str, RGB] = _colors("people.hair", _SYNTH.value("people", people, "hair", dict))
        self.pants: list[RGB] = list(_colors("people", people, "pants").values())
        for table in _VOCABULARIES:
            setattr(self, table, _SYNTH.tables("", data, table))
        self.motifs: dict[str, str] = {name: _SYNTH.value("motifs", _table(data, "motifs"), name, str)
                                       for name in _table(data, "motifs")}
        self.words: list[str] = list(_SYNTH.strings("words", _table(data, "words"), "list"))
        weights = _table(data, "category_weights")
        self.category_weights: dict[str, float] = {name: _SYNTH.value("category_weights", weights, name, (int, float))
                                                   for name in weights}
        self.categories = list(tax.categories)
        self.humanoid = set(tax.humanoid)
        self.draws: dict[str, Draw] = {key: _draw(tax, key, entry) for key, entry in _SYNTH.tables("", data, "draws").items()}
        self.allowed: dict[str, set[str]] = {key: set(d.subtype.categories) for key, d in self.draws.items()}
        self.attach_categories = set(tax.special["attach"].categories)
        self.ip_categories = set(tax.special["ip"].categories)
        self._check_entries()
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
    def _check_entries(self) -> None:
        """The types of the entries the world reads: a value's ``tag`` (if any) and ``categories``, a
        figure's ``category`` and value lists, an effect's ``figures``, a damage's ``materials``."""
        tagged = {d.table for d in self.draws.values() if not d.by_name and not d.of_figure} & set(_VOCABULARIES)
        for vocabulary in sorted(tagged) + ["effects"]:
            for name, entry in getattr(self, vocabulary).items():
                table = table_name(vocabulary, name)
                _SYNTH.value(table, entry, "tag", str, None)
                for key in ("categories", "figures", "materials", "excludes"):
                    _SYNTH.strings(table, entry, key, ())
        lists = {d.table for d in self.entity_draws() if not d.of_figure} | {"damage"}
        for name, fig in self.figures.items():
            table = table_name("figures", name)
            _SYNTH.value(table, fig, "category", str)
            for key in lists & set(fig):
                _SYNTH.strings(table, fig, key)

    def _check(self) -> None:
        problems: list[str] = []

        def need(ok: bool, message: str) -> None:
            if not ok:
                problems.append(message)

        for key, d in self.draws.items():
            need(d.of_figure or isinstance(getattr(self, d.table, None), dict),
                 f"draws.{key}: unknown table {d.table!r}")
        if problems:
            raise _SYNTH.error("; ".join(problems))
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
            raise _SYNTH.error("; ".join(problems))

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
    return World(_SYNTH.read())


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
