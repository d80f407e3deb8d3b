"""The world: taxonomy/synth.toml checked against the taxonomy, the random streams, the world hash."""

from __future__ import annotations

import hashlib
import random
from functools import cache
from pathlib import Path
from typing import Any

import PIL

from ...resources import data_path, read_toml
from ._draw import RGB, _rgb
from ._figures import FIGURES

SYNTH_FILE = "synth.toml"


class World:
    """taxonomy/synth.toml, checked against taxonomy/subtypes.toml and categories.toml."""

    def __init__(self, data: dict[str, Any], subtypes: dict[str, Any], categories: dict[str, Any]) -> None:
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
        self.categories = list(categories["categories"])
        self.humanoid = {name for name, c in categories["categories"].items() if c.get("humanoid")}
        subs = subtypes["subtypes"]
        self.allowed: dict[str, set[str]] = {}
        for key, sub in subs.items():
            cats = sub.get("categories", [])
            self.allowed[key] = set(self.categories) if "*" in cats else set(cats)
        special = subtypes.get("special", {})
        self.attach_categories = set(special.get("attach", {}).get("categories", []))
        self.ip_categories = set(special.get("ip", {}).get("categories", []))
        self._check()

    # ---------------------------------------------------------------- compatibility
    def _check(self) -> None:
        problems: list[str] = []

        def need(ok: bool, message: str) -> None:
            if not ok:
                problems.append(message)

        for name, fig in self.figures.items():
            cat = fig.get("category")
            where = f"figures.{name}"
            need(cat in self.categories, f"{where}: unknown category {cat!r}")
            need(name in FIGURES, f"{where}: no drawing function")
            for field, sub in (("poses", "3.1_action_pose"), ("orientations", "3.3_orientation"),
                               ("shapes", "2.3_shape"), ("materials", "1.2_material")):
                if fig.get(field):
                    need(cat in self.allowed[sub], f"{where}: {field} on a {cat} ({sub} does not apply)")
            for field, noun, table, sub in (("poses", "pose", self.poses, None),
                                            ("orientations", "orientation", self.orientations, None),
                                            ("damage", "damage", self.damage, "1.3_damage_wear"),
                                            ("materials", "material", self.materials, None),
                                            ("patterns", "pattern", self.patterns, "1.1_pattern_texture"),
                                            ("colors", "color", self.colors, None)):
                for value in fig.get(field, []):
                    need(value in table, f"{where}: unknown {noun} {value!r}")
                    if sub is not None and value in table:
                        need(cat in self._cats(table[value], sub), f"{where}: {noun} {value!r} does not apply to {cat}")
            if fig.get("attach"):
                need(cat in self.attach_categories, f"{where}: attach on a {cat}")
            if fig.get("design"):
                need(cat in self.ip_categories, f"{where}: design (ip) on a {cat}")
            if cat in self.humanoid:
                for sub in ("2.1_hairstyle", "2.2_facial_features", "3.2_expression"):
                    need(cat in self.allowed[sub], f"{where}: humanoid {cat} lacks {sub}")
            if cat == "Text":
                need(cat in self.allowed["1.4_font"], f"{where}: Text without 1.4_font")
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
        return [p for p in names if cat in self._cats(self.patterns[p], "1.1_pattern_texture")]

    def damage_for(self, figure: str, material: str | None) -> list[str]:
        cat = self.figures[figure]["category"]
        out = []
        for name, entry in self.damage.items():
            if "damage" in self.figures[figure] and name not in self.figures[figure]["damage"]:
                continue
            if cat not in self._cats(entry, "1.3_damage_wear"):
                continue
            if material is not None and "materials" in entry and material not in entry["materials"]:
                continue
            if material is not None and material in entry.get("excludes", []):
                continue
            out.append(name)
        return out

    def effects_for(self, figure: str) -> list[str]:
        cat = self.figures[figure]["category"]
        return [name for name, entry in self.effects.items()
                if cat in self._cats(entry, "3.4_motion_effect")
                and ("figures" not in entry or figure in entry["figures"])]

    def figures_of(self, category: str) -> list[str]:
        return [name for name, fig in self.figures.items() if fig["category"] == category]


@cache
def load_world() -> World:
    return World(read_toml("taxonomy", SYNTH_FILE), read_toml("taxonomy", "subtypes.toml"),
                 read_toml("taxonomy", "categories.toml"))


def _rng(*parts: object) -> random.Random:
    """An independent, platform-stable random stream for a tuple of labels."""
    text = "/".join(str(p) for p in ("tracebench-synth", *parts))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def _weighted(rng: random.Random, weights: dict[Any, float]) -> Any:
    keys = list(weights)
    return rng.choices(keys, weights=[float(weights[k]) for k in keys], k=1)[0]


@cache
def world_hash() -> str:
    """What the pixels depend on: the world file, the renderer (every module of this package, in
    name order) and Pillow's version."""
    digest = hashlib.sha256()
    digest.update(data_path("taxonomy", SYNTH_FILE).read_bytes())
    for module in sorted(Path(__file__).parent.glob("*.py"), key=lambda p: p.name):
        digest.update(b"\0" + module.name.encode() + b"\0" + module.read_bytes())
    digest.update(b"\0" + PIL.__version__.encode())
    return digest.hexdigest()
