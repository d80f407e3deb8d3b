"""The shipped synthetic reference library: small drawn scenes whose tags are true by construction.

Each image is planned from its own random stream (derived from the library seed and the image
index), then drawn with Pillow from that plan alone. The plan, completed with the drawn boxes,
is kept as the record's ``render`` field: it is plain JSON and :func:`render_scene` redraws the
exact same pixels from it, so later synthetic generators and an oracle judge can use it as
ground truth (or edit it and redraw).

The world's vocabulary (figures, colors, patterns, materials, damage marks, fonts, hairstyles,
facial features, poses, expressions, effects, backgrounds, styles, lighting, tones, viewpoints,
layouts, relations) is data: ``taxonomy/synth.toml``. Which tag subtype may appear on which
entity category is checked against ``taxonomy/subtypes.toml`` when the world is loaded.

Public entry points: :func:`synthesize_library` (write a library), :func:`default_library`
(the cached default library), :func:`synthesize_image` and :func:`render_scene`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

import PIL
from PIL import Image, ImageChops, ImageDraw, ImageEnhance, ImageFilter, ImageFont, ImageOps

from .. import __version__
from ..errors import TraceError
from ..resources import data_path, read_toml
from ._io import INFO_FILE, TAGS_FILE, staged_output, write_library
from ._models import Appearance, Dynamics, Entity, Form, GlobalTag, LibraryInfo, TagDict, TaggedImage

__all__ = [
    "DEFAULT_N",
    "DEFAULT_SEED",
    "SYNTH_FILE",
    "cache_root",
    "default_library",
    "plan_scene",
    "render_scene",
    "synthesize_image",
    "synthesize_library",
]

SYNTH_FILE = "synth.toml"
DEFAULT_N = 400
DEFAULT_SEED = 0
DEFAULT_NAME = "tracebench-synthetic"
RENDER_VERSION = 1

RGB = tuple[int, int, int]
INK: RGB = (34, 30, 38)
HOLE = (0, 0, 0, 0)  # a fill that cuts a transparent hole into a figure
SURFACE = "surface"  # a fill: the entity's main surface (gets its pattern, material and damage)
LINE_W = 0.014  # default outline width, in figure units


# =============================================================================== the world

def _rgb(value: str) -> RGB:
    value = value.lstrip("#")
    return (int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16))


class World:
    """taxonomy/synth.toml, checked against taxonomy/subtypes.toml and categories.toml."""

    def __init__(self, data: dict[str, Any], subtypes: dict[str, Any], categories: dict[str, Any]) -> None:
        self.data = data
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
            for pose in fig.get("poses", []):
                need(pose in self.poses, f"{where}: unknown pose {pose!r}")
            for orientation in fig.get("orientations", []):
                need(orientation in self.orientations, f"{where}: unknown orientation {orientation!r}")
            for damage in fig.get("damage", []):
                need(damage in self.damage, f"{where}: unknown damage {damage!r}")
                if damage in self.damage:
                    need(cat in self._cats(self.damage[damage], "1.3_damage_wear"),
                         f"{where}: damage {damage!r} does not apply to {cat}")
            for material in fig.get("materials", []):
                need(material in self.materials, f"{where}: unknown material {material!r}")
            for pattern in fig.get("patterns", []):
                need(pattern in self.patterns, f"{where}: unknown pattern {pattern!r}")
                if pattern in self.patterns:
                    need(cat in self._cats(self.patterns[pattern], "1.1_pattern_texture"),
                         f"{where}: pattern {pattern!r} does not apply to {cat}")
            for color in fig.get("colors", []):
                need(color in self.colors, f"{where}: unknown color {color!r}")
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
def _world() -> World:
    return World(read_toml("taxonomy", SYNTH_FILE), read_toml("taxonomy", "subtypes.toml"),
                 read_toml("taxonomy", "categories.toml"))


def _rng(*parts: object) -> random.Random:
    """An independent, platform-stable random stream for a tuple of labels."""
    text = "/".join(str(p) for p in ("tracebench-synth", *parts))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def _weighted(rng: random.Random, weights: dict[Any, float]) -> Any:
    keys = list(weights)
    return rng.choices(keys, weights=[float(weights[k]) for k in keys], k=1)[0]


# =============================================================================== the pen

class Pen:
    """Draws one figure into a full-size RGBA layer, in figure units.

    A figure is drawn facing right in units of its height: ``u`` runs across (0 = the
    figure's center line), ``v`` runs down (0 = top, 1 = ground). ``flip`` mirrors it to
    face left, ``sx`` stretches it sideways (tall and thin / short and wide shapes). Fills
    equal to :data:`SURFACE` mark the entity's main surface in ``mask``; anything drawn
    later over it is cut out of the mask, so textures and damage go only where the
    surface is still visible.
    """

    def __init__(self, size: int, cx: float, top: float, unit: float, *, flip: bool = False, sx: float = 1.0,
                 base: RGB = (200, 200, 200)) -> None:
        self.size = size
        self.layer = Image.new("RGBA", (size, size), (0, 0, 0, 0))
        self.mask = Image.new("L", (size, size), 0)
        self.d = ImageDraw.Draw(self.layer)
        self.m = ImageDraw.Draw(self.mask)
        self.cx, self.top, self.unit, self.flip, self.sx, self.base = cx, top, unit, flip, sx, base

    # coordinates
    def x(self, u: float) -> float:
        return self.cx + (-u if self.flip else u) * self.sx * self.unit

    def y(self, v: float) -> float:
        return self.top + v * self.unit

    def pt(self, u: float, v: float) -> tuple[float, float]:
        return (self.x(u), self.y(v))

    def w(self, t: float) -> int:
        return max(1, round(t * self.unit))

    def _box(self, u0: float, v0: float, u1: float, v1: float) -> list[float]:
        x0, x1 = sorted((self.x(u0), self.x(u1)))
        y0, y1 = sorted((self.y(v0), self.y(v1)))
        return [x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)]

    def _angles(self, start: float, end: float) -> tuple[float, float]:
        return (180 - end, 180 - start) if self.flip else (start, end)

    def _fills(self, fill: Any) -> tuple[Any, int | None]:
        if fill is None:
            return None, None
        if fill == SURFACE:
            return self.base, 255
        return tuple(fill), 0

    def _outline(self, outline: Any, width: float) -> tuple[Any, int]:
        if outline is None or outline is False:
            return None, 0
        return (INK if outline is True else tuple(outline)), self.w(width)

    def _shape(self, method: str, xy: Any, fill: Any, outline: Any, width: float, **kw: Any) -> None:
        lf, mf = self._fills(fill)
        oc, ow = self._outline(outline, width)
        getattr(self.d, method)(xy, fill=lf, outline=oc, width=ow, **kw)
        getattr(self.m, method)(xy, fill=mf, outline=0 if oc is not None else None, width=ow, **kw)

    # shapes
    def ellipse(self, u: float, v: float, ru: float, rv: float, fill: Any, outline: Any = True,
                width: float = LINE_W) -> None:
        self._shape("ellipse", self._box(u - ru, v - rv, u + ru, v + rv), fill, outline, width)

    def rect(self, u0: float, v0: float, u1: float, v1: float, fill: Any, outline: Any = True,
             width: float = LINE_W, radius: float = 0.0) -> None:
        box = self._box(u0, v0, u1, v1)
        if radius > 0:
            r = min(radius * self.unit, (box[2] - box[0]) / 2, (box[3] - box[1]) / 2)
            self._shape("rounded_rectangle", box, fill, outline, width, radius=max(0, int(r)))
        else:
            self._shape("rectangle", box, fill, outline, width)

    def poly(self, pts: Iterable[tuple[float, float]], fill: Any, outline: Any = True, width: float = LINE_W) -> None:
        self._shape("polygon", [self.pt(u, v) for u, v in pts], fill, outline, width)

    def pieslice(self, u: float, v: float, ru: float, rv: float, start: float, end: float, fill: Any,
                 outline: Any = True, width: float = LINE_W) -> None:
        s, e = self._angles(start, end)
        lf, mf = self._fills(fill)
        oc, ow = self._outline(outline, width)
        box = self._box(u - ru, v - rv, u + ru, v + rv)
        self.d.pieslice(box, s, e, fill=lf, outline=oc, width=ow)
        self.m.pieslice(box, s, e, fill=mf, outline=0 if oc is not None else None, width=ow)

    def chord(self, u: float, v: float, ru: float, rv: float, start: float, end: float, fill: Any,
              outline: Any = True, width: float = LINE_W) -> None:
        s, e = self._angles(start, end)
        lf, mf = self._fills(fill)
        oc, ow = self._outline(outline, width)
        box = self._box(u - ru, v - rv, u + ru, v + rv)
        self.d.chord(box, s, e, fill=lf, outline=oc, width=ow)
        self.m.chord(box, s, e, fill=mf, outline=0 if oc is not None else None, width=ow)

    def arc(self, u: float, v: float, ru: float, rv: float, start: float, end: float, color: Any = INK,
            width: float = LINE_W) -> None:
        s, e = self._angles(start, end)
        lf, mf = self._fills(color)
        box = self._box(u - ru, v - rv, u + ru, v + rv)
        self.d.arc(box, s, e, fill=lf, width=self.w(width))
        self.m.arc(box, s, e, fill=mf, width=self.w(width))

    def line(self, pts: list[tuple[float, float]], color: Any = INK, width: float = LINE_W,
             outline: bool = False) -> None:
        """A thick line with round joints and caps; ``outline`` rings it with ink."""
        xy = [self.pt(u, v) for u, v in pts]
        w = self.w(width)
        layers = [(INK, w + 2 * self.w(LINE_W))] if outline else []
        layers.append((color, w))
        for col, lw in layers:
            lf, mf = self._fills(col)
            self.d.line(xy, fill=lf, width=lw, joint="curve")
            self.m.line(xy, fill=mf, width=lw, joint="curve")
            if lw >= 3:
                r = lw / 2 - 0.5
                for x, y in (xy[0], xy[-1]):
                    self.d.ellipse((x - r, y - r, x + r, y + r), fill=lf)
                    self.m.ellipse((x - r, y - r, x + r, y + r), fill=mf)

    def dot(self, u: float, v: float, r: float, color: Any = INK) -> None:
        """A filled dot of radius ``r`` units but at least one pixel."""
        x, y = self.pt(u, v)
        rp = max(1.0, r * self.unit)
        lf, mf = self._fills(color)
        self.d.ellipse((x - rp, y - rp, x + rp, y + rp), fill=lf)
        self.m.ellipse((x - rp, y - rp, x + rp, y + rp), fill=mf)

    def stamp(self, mask: Image.Image, u: float, v: float, color: Any) -> None:
        """Paint ``color`` through an L mask centered at (u, v); never mirrored (text)."""
        x, y = self.pt(u, v)
        left, top = round(x - mask.width / 2), round(y - mask.height / 2)
        lf, mf = self._fills(color)
        self.layer.paste(tuple(lf) if len(lf) == 4 else (*lf, 255), (left, top), mask)
        self.mask.paste(mf, (left, top), mask)


def _shape_pts(kind: str, u: float, v: float, r: float) -> list[tuple[float, float]]:
    """Outline points of a motif or shape of radius r centered at (u, v), in figure units."""
    if kind == "star":
        pts = [(math.sin(math.pi * k / 5) * (1 if k % 2 == 0 else 0.45),
                -math.cos(math.pi * k / 5) * (1 if k % 2 == 0 else 0.45)) for k in range(10)]
    elif kind == "heart":
        pts = []
        for k in range(28):
            t = 2 * math.pi * k / 28
            pts.append((16 * math.sin(t) ** 3 / 17,
                        -(13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t)) / 17 + 0.1))
    elif kind == "bolt":
        pts = [(0.2, -1), (-0.55, 0.12), (-0.05, 0.12), (-0.25, 1), (0.55, -0.18), (0.05, -0.18)]
    elif kind == "diamond":
        pts = [(0, -1), (0.72, 0), (0, 1), (-0.72, 0)]
    elif kind == "moon":
        outer = [(math.cos(a), math.sin(a)) for a in (math.radians(d) for d in range(50, 311, 15))]
        inner = [(0.42 + 0.78 * math.cos(a), 0.78 * math.sin(a))
                 for a in (math.radians(d) for d in range(300, 59, -15))]
        pts = outer + inner
    else:
        raise KeyError(kind)
    return [(u + px * r, v + py * r) for px, py in pts]


def _motif(pen: Pen, kind: str, u: float, v: float, r: float, color: RGB) -> None:
    """An emblem: a white badge with the motif in ``color``."""
    pen.ellipse(u, v, r, r, (250, 250, 245))
    pen.poly(_shape_pts(kind, u, v, r * 0.72), color, outline=True, width=LINE_W * 0.7)


# =============================================================================== textures

def _noise(rng: random.Random, w: int, h: int) -> Image.Image:
    return Image.frombytes("L", (w, h), rng.randbytes(w * h))


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b))  # type: ignore[return-value]


def _luma(c: Iterable[int]) -> float:
    r, g, b = list(c)[:3]
    return 0.299 * r + 0.587 * g + 0.114 * b


def _contrast(c: RGB) -> RGB:
    return (30, 28, 34) if _luma(c) > 140 else (250, 250, 246)


def _pattern(kind: str, w: int, h: int, main: RGB, second: RGB, scale: float, rng: random.Random) -> Image.Image:
    img = Image.new("RGB", (w, h), main)
    d = ImageDraw.Draw(img)
    p = max(6, round(scale * 0.1))  # pattern period in pixels
    if kind == "stripes":
        for y in range(0, h, p):
            d.rectangle((0, y, w, y + p // 2 - 1), fill=second)
    elif kind == "diagonal":
        lw = max(2, p // 2)
        for k in range(-h, w + h, p):
            d.line((k, 0, k + h, h), fill=second, width=lw)
    elif kind == "dots":
        r = max(1.5, p * 0.3)
        for j, y in enumerate(range(p // 2, h + p, p)):
            off = p // 2 if j % 2 else 0
            for x in range(off, w + p, p):
                d.ellipse((x - r, y - r, x + r, y + r), fill=second)
    elif kind == "checks":
        q = max(5, round(p * 0.8))
        for j, y in enumerate(range(0, h, q)):
            for i, x in enumerate(range(0, w, q)):
                if (i + j) % 2:
                    d.rectangle((x, y, x + q - 1, y + q - 1), fill=second)
    elif kind == "plaid":
        q = p * 2
        band = Image.new("RGB", (w, h), second)
        bands = Image.new("L", (w, h), 0)
        bd = ImageDraw.Draw(bands)
        for k in range(0, max(w, h), q):
            bd.rectangle((k, 0, k + q // 3, h), fill=110)
            bd.rectangle((0, k, w, k + q // 3), fill=110)
        img.paste(band, (0, 0), bands)
        third = _contrast(main)
        for k in range(q // 2, max(w, h), q):
            d.line((k, 0, k, h), fill=third, width=1)
            d.line((0, k, w, k), fill=third, width=1)
    elif kind == "zigzag":
        amp = max(2, p // 2)
        lw = max(2, p // 3)
        for y in range(p // 2, h + p, p):
            pts = [(x, y + (amp if (x // amp) % 2 else -amp) // 2) for x in range(-amp, w + amp * 2, amp)]
            d.line(pts, fill=second, width=lw)
    elif kind == "stars":
        q = max(8, round(p * 1.5))
        for j, y in enumerate(range(q // 2, h + q, q)):
            for x in range((q // 2) * (j % 2), w + q, q):
                r = q * 0.38
                d.polygon([(x + px * r, y + py * r) for px, py in _shape_pts("star", 0, 0, 1)], fill=second)
    elif kind == "floral":
        q = max(9, round(p * 1.6))
        center = _contrast(second) if _luma(second) > 200 else (250, 210, 60)
        for j, y in enumerate(range(q // 2, h + q, q)):
            for x in range((q // 2) * (j % 2), w + q, q):
                r = q * 0.16
                for a in range(5):
                    t = 2 * math.pi * a / 5
                    px, py = x + math.cos(t) * r * 1.3, y + math.sin(t) * r * 1.3
                    d.ellipse((px - r, py - r, px + r, py + r), fill=second)
                d.ellipse((x - r * 0.8, y - r * 0.8, x + r * 0.8, y + r * 0.8), fill=center)
    elif kind == "blotches":
        for _ in range(max(3, (w * h) // (p * p * 4))):
            x, y = rng.uniform(0, w), rng.uniform(0, h)
            rx, ry = rng.uniform(0.6, 1.4) * p, rng.uniform(0.5, 1.1) * p
            d.ellipse((x - rx, y - ry, x + rx, y + ry), fill=second)
    elif kind == "scales":
        q = max(6, round(p * 0.9))
        for j, y in enumerate(range(0, h + q, q // 2 + 1)):
            for x in range(-q + (q // 2) * (j % 2), w + q, q):
                d.arc((x, y - q // 2, x + q, y + q // 2), 0, 180, fill=second, width=max(1, q // 5))
    else:
        raise KeyError(kind)
    return img


def _gradient(w: int, h: int, profile: list[float], horizontal: bool = True) -> Image.Image:
    """An L image whose columns (or rows) follow ``profile`` (values 0..1), stretched."""
    row = Image.frombytes("L", (len(profile), 1), bytes(max(0, min(255, round(255 * p))) for p in profile))
    img = row.resize((w, 1), Image.Resampling.BILINEAR).resize((w, h), Image.Resampling.NEAREST)
    return img if horizontal else img.transpose(Image.Transpose.ROTATE_90).resize((w, h))


MATERIAL_BASE: dict[str, RGB] = {
    "wood": (176, 122, 70), "metal": (170, 176, 186), "gold": (222, 180, 60), "leather": (112, 64, 38),
    "denim": (62, 92, 150), "stone": (150, 148, 140), "brick": (170, 70, 50), "chocolate": (92, 52, 30),
}


def _material(kind: str, w: int, h: int, main: RGB, scale: float, rng: random.Random) -> Image.Image:
    p = max(6, round(scale * 0.1))
    if kind == "wood":
        img = Image.new("RGB", (w, h), MATERIAL_BASE["wood"])
        d = ImageDraw.Draw(img)
        dark = (128, 82, 42)
        for y in range(rng.randrange(p // 2 + 1), h, max(3, p // 2)):
            phase, amp = rng.uniform(0, 6.3), rng.uniform(0.5, 2.0)
            d.line([(x, y + amp * math.sin(phase + x / (p * 1.3))) for x in range(0, w + 4, 4)], fill=dark, width=1)
        for _ in range(max(1, (w * h) // (p * p * 40))):
            x, y = rng.uniform(0, w), rng.uniform(0, h)
            d.ellipse((x - p * 0.6, y - p * 0.3, x + p * 0.6, y + p * 0.3), outline=dark, width=1)
        return img
    if kind in ("metal", "gold"):
        profile = [0.35, 0.55, 0.9, 1.0, 0.75, 0.55, 0.45, 0.4, 0.3]
        shade = _gradient(w, h, profile)
        lo, hi = ((70, 76, 88), (238, 242, 248)) if kind == "metal" else ((120, 78, 10), (255, 236, 130))
        img = ImageOps.colorize(shade, lo, hi)
        d = ImageDraw.Draw(img)
        for y in range(0, h, 3):
            if rng.random() < 0.35:
                d.line((0, y, w, y), fill=_mix(hi, lo, 0.25), width=1)
        return img
    if kind == "glass":
        img = Image.new("RGBA", (w, h), (*_mix(main, (225, 240, 250), 0.55), 140))
        d = ImageDraw.Draw(img)
        lw = max(2, p // 2)
        for k in (0.2, 0.32, 0.75):
            x = round(w * k)
            d.line((x, 0, x - h // 2, h), fill=(255, 255, 255, 215), width=lw if k != 0.32 else max(1, lw // 2))
        return img
    if kind == "knit":
        img = Image.new("RGB", (w, h), main)
        d = ImageDraw.Draw(img)
        q = max(4, p // 2 + 1)
        dark, light = _mix(main, (0, 0, 0), 0.3), _mix(main, (255, 255, 255), 0.25)
        for y in range(0, h + q, q):
            for x in range(0, w + q, q):
                d.line((x, y, x + q // 2, y + q), fill=dark, width=1)
                d.line((x + q, y, x + q // 2, y + q), fill=dark, width=1)
                d.point((x + q // 2, y + q // 2), fill=light)
        return img
    if kind in ("leather", "denim", "stone", "chocolate"):
        base = MATERIAL_BASE[kind]
        img = Image.new("RGB", (w, h), base)
        grain = _noise(rng, max(1, w // 2), max(1, h // 2)).resize((w, h), Image.Resampling.BILINEAR)
        amount = {"leather": 0.18, "denim": 0.22, "stone": 0.35, "chocolate": 0.1}[kind]
        img = Image.composite(Image.new("RGB", (w, h), _mix(base, (0, 0, 0), 0.5)), img,
                              grain.point(lambda v: round(v * amount)))
        d = ImageDraw.Draw(img)
        if kind == "denim":
            for k in range(-h, w, 3):
                d.line((k, 0, k + h, h), fill=(88, 120, 178), width=1)
        elif kind == "stone":
            for _ in range(max(2, (w * h) // (p * p * 3))):
                x, y = rng.uniform(0, w), rng.uniform(0, h)
                r = rng.uniform(0.5, 1.2) * p
                d.ellipse((x - r, y - r * 0.7, x + r, y + r * 0.7), outline=(105, 104, 98), width=1)
        elif kind == "leather":
            d.rectangle((2, 2, w - 3, h - 3), outline=(160, 110, 70), width=1)
        elif kind == "chocolate":
            for k in range(3):
                y = h * (0.25 + 0.25 * k)
                d.arc((w * 0.1, y - p, w * 0.9, y + p), 200, 340, fill=(150, 100, 70), width=max(1, p // 4))
        return img
    if kind == "brick":
        img = Image.new("RGB", (w, h), (215, 205, 190))
        d = ImageDraw.Draw(img)
        bh = max(5, round(p * 0.8))
        bw = bh * 2 + 2
        for j, y in enumerate(range(0, h, bh)):
            for x in range(-bw + (bw // 2) * (j % 2), w, bw):
                shade = rng.choice(((170, 70, 50), (158, 62, 44), (182, 82, 58)))
                d.rectangle((x + 1, y + 1, x + bw - 2, y + bh - 2), fill=shade)
        return img
    if kind == "jelly":
        img = Image.new("RGBA", (w, h), (*_mix(main, (255, 255, 255), 0.15), 185))
        d = ImageDraw.Draw(img)
        d.ellipse((w * 0.15, h * 0.12, w * 0.45, h * 0.3), fill=(255, 255, 255, 200))
        d.ellipse((w * 0.6, h * 0.55, w * 0.7, h * 0.65), fill=(255, 255, 255, 170))
        return img
    raise KeyError(kind)


def _inside(mask: Image.Image, rng: random.Random, tries: int = 40) -> tuple[int, int] | None:
    for _ in range(tries):
        x, y = rng.randrange(mask.width), rng.randrange(mask.height)
        if mask.getpixel((x, y)) == 255:
            return x, y
    return None


def _damage(kind: str, mask: Image.Image, scale: float, rng: random.Random) -> Image.Image:
    """Damage marks for a surface (``mask`` is the surface's crop); clipped by the caller."""
    w, h = mask.size
    over = Image.new("RGBA", (w, h), (0, 0, 0, 0))
    d = ImageDraw.Draw(over)
    p = max(5, scale * 0.1)
    lw = max(1, round(scale * 0.012))
    if kind == "cracks":
        for _ in range(3):
            start = _inside(mask, rng)
            if start is None:
                break
            x, y = start
            pts = [(x, y)]
            angle = rng.uniform(0, 2 * math.pi)
            for _ in range(6):
                angle += rng.uniform(-0.9, 0.9)
                x, y = x + math.cos(angle) * p * 0.8, y + math.sin(angle) * p * 0.8
                pts.append((x, y))
            d.line(pts, fill=(35, 28, 24, 255), width=max(1, lw), joint="curve")
            mid = pts[3]
            d.line([mid, (mid[0] + math.cos(angle + 1.2) * p, mid[1] + math.sin(angle + 1.2) * p)],
                   fill=(35, 28, 24, 255), width=1)
    elif kind in ("rust", "stains", "moss"):
        colors = {"rust": ((160, 78, 28, 235), (196, 104, 40, 235)),
                  "stains": ((110, 82, 48, 150), (90, 66, 40, 150)),
                  "moss": ((70, 120, 40, 235), (96, 150, 52, 235))}[kind]
        count = {"rust": 6, "stains": 3, "moss": 7}[kind]
        for _ in range(count):
            spot = _inside(mask, rng)
            if spot is None:
                break
            x, y = spot
            if kind == "moss":
                y = max(y, h * 0.55 + rng.uniform(0, h * 0.4))
            for _ in range(3):
                r = rng.uniform(0.35, 0.8) * p * (1.6 if kind == "stains" else 1.0)
                ox, oy = rng.uniform(-p * 0.4, p * 0.4), rng.uniform(-p * 0.4, p * 0.4)
                d.ellipse((x + ox - r, y + oy - r * 0.8, x + ox + r, y + oy + r * 0.8), fill=rng.choice(colors))
    elif kind == "scratches":
        for _ in range(6):
            spot = _inside(mask, rng)
            if spot is None:
                break
            x, y = spot
            a = rng.uniform(-0.6, 0.6) + math.pi / 4
            length = rng.uniform(0.8, 1.6) * p
            d.line((x, y, x + math.cos(a) * length, y + math.sin(a) * length), fill=(245, 245, 240, 255), width=1)
            d.line((x + 1, y + 1, x + 1 + math.cos(a) * length, y + 1 + math.sin(a) * length),
                   fill=(60, 60, 60, 160), width=1)
    elif kind == "patches":
        for _ in range(2):
            spot = _inside(mask, rng)
            if spot is None:
                break
            x, y = spot
            s = p * rng.uniform(0.9, 1.3)
            color = rng.choice(((230, 200, 90), (120, 170, 90), (200, 110, 110), (120, 140, 200)))
            d.rectangle((x - s, y - s, x + s, y + s), fill=(*color, 255), outline=(40, 40, 40, 255), width=1)
            for t in range(0, int(4 * s), 3):  # stitches
                k = t / (4 * s)
                d.point((x - s + 2 + (2 * s - 4) * min(1, k * 2), y - s + 2), fill=(250, 250, 250, 255))
                d.point((x - s + 2 + (2 * s - 4) * min(1, k * 2), y + s - 2), fill=(250, 250, 250, 255))
    elif kind == "holes":
        for _ in range(3):
            spot = _inside(mask, rng)
            if spot is None:
                break
            x, y = spot
            r = p * rng.uniform(0.35, 0.6)
            pts = [(x + math.cos(a) * r * rng.uniform(0.6, 1.2), y + math.sin(a) * r * rng.uniform(0.6, 1.2))
                   for a in (2 * math.pi * k / 8 for k in range(8))]
            d.polygon(pts, fill=(30, 26, 26, 255))
            for a in (0.3, 2.2, 4.0):
                d.line((x + math.cos(a) * r, y + math.sin(a) * r, x + math.cos(a) * r * 1.7,
                        y + math.sin(a) * r * 1.7), fill=(40, 40, 40, 255), width=1)
    else:
        raise KeyError(kind)
    return over


# =============================================================================== lettering

@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's built-in font (no system font files), at ``size`` pixels."""
    return ImageFont.load_default(size=max(6, size))


def _word_mask(word: str, size: int, stroke: int = 0, pad: int = 4) -> Image.Image:
    font = _font(size)
    x0, y0, x1, y1 = font.getbbox(word, stroke_width=stroke)
    img = Image.new("L", (x1 - x0 + 2 * pad, y1 - y0 + 2 * pad), 0)
    ImageDraw.Draw(img).text((pad - x0, pad - y0), word, font=font, fill=255, stroke_width=stroke, stroke_fill=255)
    return img


def _fit(mask: Image.Image, w: int, h: int, nearest: bool = False) -> Image.Image:
    k = min(w / mask.width, h / mask.height)
    size = (max(1, round(mask.width * k)), max(1, round(mask.height * k)))
    return mask.resize(size, Image.Resampling.NEAREST if nearest else Image.Resampling.LANCZOS)


def _threshold(mask: Image.Image) -> Image.Image:
    return mask.point(lambda v: 255 if v >= 110 else 0)


def _rows(size: tuple[int, int], top: int, bottom: int) -> Image.Image:
    keep = Image.new("L", size, 0)
    ImageDraw.Draw(keep).rectangle((0, top, size[0], bottom), fill=255)
    return keep


def lettering(word: str, font: str, w: int, h: int) -> list[tuple[Image.Image, str]]:
    """Masks that draw ``word`` in one of the world's fonts, fitted into w x h pixels.

    Returns (mask, role) pairs to paint in order; role is ``ink`` (the letters), ``shadow``
    (a dark offset copy) or ``halo`` (a backing in the board's color).
    """
    w, h = max(8, w), max(6, h)
    big = 48  # render large, then fit: the fitted size decides the look
    if font == "pixel":
        small = _word_mask(word, 11, pad=1).point(lambda v: 255 if v >= 90 else 0)
        k = max(1, min(w // small.width, h // small.height))
        ink = small.resize((small.width * k, small.height * k), Image.Resampling.NEAREST)
        if ink.width > w or ink.height > h:
            ink = _fit(small, w, h, nearest=True)
    elif font == "bold":
        ink = _fit(_word_mask(word, big, stroke=4), w, h)
    elif font == "outline":
        outer = _word_mask(word, big, stroke=3)
        inner = _word_mask(word, big, stroke=0, pad=4 + 3)
        inner = inner.crop((0, 0, outer.width, outer.height))
        ink = _fit(ImageChops.subtract(outer, inner), w, h)
    elif font == "italic":
        base = _word_mask(word, big, pad=10)
        shear = 0.32
        base = base.transform((base.width + round(base.height * shear), base.height), Image.Transform.AFFINE,
                              (1, shear, -base.height * shear, 0, 1, 0), resample=Image.Resampling.BICUBIC)
        ink = _fit(base, w, h)
    elif font == "condensed":
        base = _word_mask(word, big, stroke=1)
        base = base.resize((max(1, round(base.width * 0.5)), base.height), Image.Resampling.LANCZOS)
        ink = _fit(base, w, h)
    elif font == "slab":
        base = _threshold(_word_mask(word, big, stroke=1, pad=8))
        _, top_row, _, bottom_row = base.getbbox() or (0, 0, 0, base.height)
        edges = ImageChops.lighter(ImageChops.subtract(base, ImageChops.offset(base, 0, 1)),
                                   ImageChops.subtract(base, ImageChops.offset(base, 0, -1)))
        band = Image.new("L", base.size, 0)  # serifs only on the cap line and the baseline
        ImageDraw.Draw(band).rectangle((0, top_row, base.width, top_row + 1), fill=255)
        ImageDraw.Draw(band).rectangle((0, bottom_row - 2, base.width, bottom_row), fill=255)
        feet = ImageChops.multiply(edges, band)
        feet = ImageChops.lighter(feet, ImageChops.offset(feet, 0, 1))
        feet = ImageChops.lighter(feet, ImageChops.offset(feet, 0, -1))
        feet = ImageChops.lighter(feet, ImageChops.offset(feet, 0, 2))
        feet = ImageChops.lighter(feet, ImageChops.offset(feet, 0, -2))
        serif = feet
        for dx in (-4, -3, -2, -1, 1, 2, 3, 4):
            serif = ImageChops.lighter(serif, ImageChops.offset(feet, dx, 0))
        ink = _fit(ImageChops.multiply(ImageChops.lighter(base, serif), _rows(base.size, top_row, bottom_row)), w, h)
    elif font == "shadow":
        base = _word_mask(word, big, stroke=1, pad=8)
        ink = _fit(base, w - max(2, w // 30), h - max(2, h // 12))
    else:  # sans
        ink = _fit(_word_mask(word, big), w, h)
    out: list[tuple[Image.Image, str]] = []
    halo = ink.filter(ImageFilter.MaxFilter(5))
    if font == "shadow":
        off = max(2, round(ink.height * 0.09))
        canvas = Image.new("L", (ink.width + off, ink.height + off), 0)
        shadow = canvas.copy()
        shadow.paste(ink, (off, off))
        ink_c = canvas.copy()
        ink_c.paste(ink, (0, 0))
        halo = ImageChops.lighter(ink_c, shadow).filter(ImageFilter.MaxFilter(5))
        out += [(halo, "halo"), (shadow, "shadow"), (ink_c, "ink")]
    else:
        out += [(halo, "halo"), (ink, "ink")]
    return out


# =============================================================================== figures
#
# Each figure function draws one entity facing right with a Pen and returns anchors (pixel
# positions other entities attach to): ``hand`` (a held item), ``head`` (x, y, r: a worn
# hat), ``neck`` (x, y, half width: a worn scarf), ``top`` (x0, x1, y: something on top).

class Look:
    """The resolved colors of one entity."""

    def __init__(self, world: World, e: dict[str, Any]) -> None:
        self.main: RGB = world.colors[e["color"]]
        self.second: RGB = world.colors[e["second"]]
        self.accent: RGB = world.colors[e["accent"]]
        self.skin: RGB = tuple(e.get("skin", (240, 200, 170)))  # type: ignore[assignment]
        self.hair: RGB = world.hair.get(e.get("hair_color", ""), (60, 40, 20))
        self.pants: RGB = tuple(e.get("pants", (50, 60, 100)))  # type: ignore[assignment]
        material = e.get("material")
        keeps = material is None or world.materials[material].get("keeps_color", False)
        self.surface: RGB = self.main if keeps else MATERIAL_BASE.get(material, self.main)


Figure = Callable[[Pen, dict, Look], dict]
FIGURES: dict[str, Figure] = {}


def figure(name: str) -> Callable[[Figure], Figure]:
    def register(fn: Figure) -> Figure:
        FIGURES[name] = fn
        return fn
    return register


def _px(pen: Pen, u: float, v: float) -> list[float]:
    x, y = pen.pt(u, v)
    return [round(x, 2), round(y, 2)]


# --------------------------------------------------------------------------- humans

_BODY = {
    "person": dict(hr=0.095, hv=0.115, sv=0.255, hip=0.56, th=0.1, lw=0.062, aw=0.048),
    "child": dict(hr=0.13, hv=0.15, sv=0.315, hip=0.61, th=0.095, lw=0.06, aw=0.046),
}
# arms as (elbow, hand) offsets from the shoulder. Front view: (arm on the +u side, arm on
# the -u side, the latter mirrored). Profile: (front arm, back arm), not mirrored.
_STAND = ((0.035, 0.14), (0.045, 0.27))
_FRONT_ARMS = {
    "standing": (_STAND, _STAND),
    "waving": (((0.12, -0.04), (0.15, -0.17)), _STAND),
    "cheering": (((0.1, -0.08), (0.15, -0.2)), ((0.1, -0.08), (0.15, -0.2))),
    "jumping": (((0.1, -0.08), (0.15, -0.2)), ((0.1, -0.08), (0.15, -0.2))),
    "pointing": (((0.11, 0.0), (0.23, -0.01)), _STAND),
    "reaching": (((0.1, 0.06), (0.2, 0.07)), _STAND),
    "sitting": (((0.04, 0.13), (0.09, 0.22)), ((0.04, 0.13), (0.09, 0.22))),
}
_SIDE_STAND = ((0.02, 0.14), (0.03, 0.27))
_SIDE_ARMS = {
    "standing": (_SIDE_STAND, ((-0.01, 0.14), (-0.01, 0.27))),
    "waving": (((0.09, -0.05), (0.12, -0.18)), _SIDE_STAND),
    "cheering": (((0.07, -0.1), (0.1, -0.22)), ((0.03, -0.1), (0.05, -0.23))),
    "jumping": (((0.07, -0.1), (0.1, -0.22)), ((0.03, -0.1), (0.05, -0.23))),
    "running": (((0.08, 0.1), (0.16, 0.04)), ((-0.08, 0.1), (-0.13, 0.2))),
    "pointing": (((0.11, 0.0), (0.23, 0.0)), _SIDE_STAND),
    "reaching": (((0.1, 0.05), (0.21, 0.06)), _SIDE_STAND),
    "sitting": (((0.06, 0.12), (0.13, 0.2)), ((0.04, 0.12), (0.1, 0.2))),
}


Point = tuple[float, float]


def _legs(pose: str, side: bool, hip: float) -> list[tuple[Point, Point, Point]]:
    """(hip, knee, foot) per leg, back leg first."""
    mid = (hip + 0.95) / 2
    if not side:
        if pose == "jumping":
            return [((s * 0.045, hip), (s * 0.12, hip + 0.12), (s * 0.075, hip + 0.27)) for s in (-1, 1)]
        if pose == "sitting":
            return [((s * 0.045, hip), (s * 0.065, hip + 0.06), (s * 0.065, 0.95)) for s in (-1, 1)]
        return [((s * 0.045, hip), (s * 0.05, mid), (s * 0.055, 0.95)) for s in (-1, 1)]
    if pose == "running":
        return [((0, hip), (-0.03, hip + 0.2), (-0.17, hip + 0.3)), ((0, hip), (0.13, hip + 0.14), (0.1, hip + 0.34))]
    if pose == "jumping":
        return [((0, hip), (0.06, hip + 0.14), (-0.03, hip + 0.27)), ((0, hip), (0.12, hip + 0.12), (0.04, hip + 0.26))]
    if pose == "sitting":
        return [((0, hip), (0.15, hip), (0.15, 0.95)), ((0, hip), (0.17, hip + 0.01), (0.18, 0.95))]
    return [((0, hip), (-0.01, mid), (-0.01, 0.95)), ((0, hip), (0.01, mid), (0.02, 0.95))]


def _hair_back(pen: Pen, style: str, hu: float, hv: float, r: float, side: bool, color: RGB) -> None:
    if style == "long":
        u0, u1 = (-1.08 * r, 0.35 * r) if side else (-1.08 * r, 1.08 * r)
        pen.rect(hu + u0, hv - 0.3 * r, hu + u1, hv + 1.75 * r, color, radius=0.4 * r)
    elif style == "curly":
        for a in range(100, 450, 30) if not side else range(100, 290, 30):
            t = math.radians(a)
            pen.ellipse(hu + math.cos(t) * 0.98 * r, hv + math.sin(t) * 0.98 * r + 0.15 * r, 0.36 * r, 0.36 * r, color)
    elif style == "ponytail":
        pu = hu - 1.05 * r
        pen.ellipse(pu, hv + 0.45 * r, 0.32 * r, 0.75 * r, color)


def _hair_front(pen: Pen, style: str, hu: float, hv: float, r: float, side: bool, color: RGB) -> None:
    shift = -0.12 * r if side else 0.0
    if style in ("short", "long", "ponytail", "bun", "spiky", "curly"):
        if side:  # hair covers the back of the head in profile
            pen.pieslice(hu + shift, hv - 0.05 * r, 1.06 * r, 1.05 * r, 100, 200, color)
        pen.chord(hu + shift, hv - 0.05 * r, 1.07 * r, 1.06 * r, 198, 342, color)  # ends above the brows
    if style == "bun":
        pen.ellipse(hu + shift * 3, hv - 1.28 * r, 0.36 * r, 0.34 * r, color)
        pen.rect(hu + shift * 3 - 0.12 * r, hv - 1.1 * r, hu + shift * 3 + 0.12 * r, hv - 0.95 * r, color,
                 outline=False)
    elif style == "spiky":
        for k in range(-2, 3):
            base = hu + shift + k * 0.38 * r
            pen.poly([(base - 0.22 * r, hv - 0.8 * r), (base + k * 0.08 * r, hv - 1.55 * r),
                      (base + 0.22 * r, hv - 0.8 * r)], color)
    elif style == "curly":
        for k in range(-3, 4):
            t = math.radians(270 + k * 24)
            pen.ellipse(hu + shift + math.cos(t) * r, hv - 0.05 * r + math.sin(t) * r, 0.3 * r, 0.3 * r, color)
    elif style == "mohawk":
        pts = [(hu - 0.16 * r, hv - 0.75 * r)]
        for k in range(5):
            pts.append((hu + (-0.16 + 0.08 * k) * r, hv - (1.45 if k % 2 == 0 else 1.15) * r))
        pts.append((hu + 0.16 * r, hv - 0.75 * r))
        pen.poly(pts, color)
        pen.rect(hu - 0.16 * r, hv - 1.0 * r, hu + 0.16 * r, hv - 0.78 * r, color, outline=False)
    elif style == "bald":
        pen.arc(hu - 0.2 * r, hv - 0.45 * r, 0.35 * r, 0.3 * r, 200, 290, (255, 255, 255), width=0.012)


def _face(pen: Pen, e: dict, look: Look, hu: float, hv: float, r: float, side: bool) -> None:
    expr = e.get("expression", "smiling")
    feats = set(e.get("features", []))
    eyes = [(hu + 0.5 * r, hv + 0.02 * r)] if side else [(hu - 0.38 * r, hv + 0.03 * r), (hu + 0.38 * r, hv + 0.03 * r)]
    mouth_u = hu + 0.62 * r if side else hu
    mouth_v = hv + 0.5 * r
    if side:  # nose
        pen.poly([(hu + 0.92 * r, hv + 0.05 * r), (hu + 1.2 * r, hv + 0.3 * r), (hu + 0.92 * r, hv + 0.35 * r)],
                 look.skin, width=0.008)
    if "beard" in feats:
        pen.pieslice(hu + (0.1 * r if side else 0), hv + 0.12 * r, 1.0 * r, 0.98 * r, 5, 175, look.hair,
                     outline=True, width=0.008)
        pen.ellipse(mouth_u, mouth_v, 0.3 * r, 0.17 * r, look.skin, outline=False)
    if "blush" in feats:
        for ex, _ in eyes:
            pen.ellipse(ex + (0.08 * r if side else (-0.1 * r if ex < hu else 0.1 * r)), hv + 0.35 * r,
                        0.18 * r, 0.1 * r, (240, 130, 140), outline=False)
    if "freckles" in feats:
        for ex, _ in eyes:
            for du, dv in ((-0.12, 0.3), (0.0, 0.38), (0.12, 0.3)):
                pen.dot(ex + du * r, hv + dv * r, 0.035 * r, (150, 90, 50))
    # eyes
    shades = "sunglasses" in feats
    for i, (ex, ey) in enumerate(eyes):
        closed = (expr == "laughing") or (expr == "winking" and i == 1)
        if shades:
            continue
        if closed:
            pen.arc(ex, ey + 0.06 * r, 0.13 * r, 0.12 * r, 200, 340, INK, width=0.012)
        elif expr == "surprised":
            pen.ellipse(ex, ey, 0.15 * r, 0.17 * r, (255, 255, 255), width=0.008)
            pen.dot(ex, ey, 0.07 * r)
        else:
            pen.dot(ex, ey, 0.1 * r)
    # brows
    for ex, ey in eyes:
        inner = 1 if (side or ex > hu) else -1  # toward the nose
        if expr == "angry":
            pen.line([(ex - inner * 0.2 * r, ey - 0.38 * r), (ex + inner * 0.18 * r, ey - 0.2 * r)], INK, 0.018)
        elif expr == "sad":
            pen.line([(ex - inner * 0.2 * r, ey - 0.22 * r), (ex + inner * 0.16 * r, ey - 0.36 * r)], INK, 0.014)
        elif expr == "surprised":
            pen.arc(ex, ey - 0.3 * r, 0.2 * r, 0.1 * r, 200, 340, INK, width=0.012)
    if shades:
        for ex, ey in eyes:
            pen.ellipse(ex, ey, 0.26 * r, 0.2 * r, (25, 25, 30), width=0.01)
        if not side:
            pen.line([(eyes[0][0] + 0.26 * r, eyes[0][1]), (eyes[1][0] - 0.26 * r, eyes[1][1])], INK, 0.01)
        else:
            pen.line([(eyes[0][0] - 0.26 * r, eyes[0][1]), (hu - 0.3 * r, hv - 0.05 * r)], INK, 0.01)
    if "glasses" in feats:
        for ex, ey in eyes:
            pen.ellipse(ex, ey, 0.25 * r, 0.25 * r, None, outline=INK, width=0.011)
        if not side:
            pen.line([(eyes[0][0] + 0.25 * r, eyes[0][1]), (eyes[1][0] - 0.25 * r, eyes[1][1])], INK, 0.01)
        else:
            pen.line([(eyes[0][0] - 0.25 * r, eyes[0][1]), (hu - 0.3 * r, hv - 0.05 * r)], INK, 0.01)
    if "mustache" in feats:
        for s in ((0,) if side else (-1, 1)):
            pen.ellipse(mouth_u + s * 0.16 * r + (0.05 * r if side else 0), mouth_v - 0.16 * r, 0.18 * r, 0.08 * r,
                        look.hair, outline=False)
    # mouth
    mw = 0.3 * r if not side else 0.2 * r
    if expr in ("smiling", "winking"):
        pen.arc(mouth_u, mouth_v - 0.12 * r, mw, 0.18 * r, 20, 160, INK, width=0.012)
    elif expr == "laughing":
        pen.pieslice(mouth_u, mouth_v - 0.1 * r, mw, 0.25 * r, 0, 180, (150, 30, 40), width=0.008)
    elif expr in ("sad", "angry"):
        pen.arc(mouth_u, mouth_v + 0.12 * r, mw * 0.9, 0.14 * r, 200, 340, INK, width=0.012)
    elif expr == "surprised":
        pen.ellipse(mouth_u, mouth_v, 0.11 * r, 0.14 * r, (70, 20, 30), width=0.008)
    else:
        pen.line([(mouth_u - mw * 0.8, mouth_v), (mouth_u + mw * 0.8, mouth_v)], INK, 0.012)


def _human(pen: Pen, e: dict, look: Look) -> dict:
    b = _BODY[e["figure"]]
    side = e.get("orientation") in ("left", "right")
    pose = e.get("pose", "standing")
    hr, hv, sv, hip, th, lw, aw = (b[k] for k in ("hr", "hv", "sv", "hip", "th", "lw", "aw"))
    d = 0.1 if pose == "sitting" else 0.0
    hv, sv, hip = hv + d, sv + d, hip + d
    design = e.get("design")
    hair = e.get("hairstyle", "short")
    arms = (_SIDE_ARMS if side else _FRONT_ARMS)[pose]
    tw = 0.07 if side else th
    shoulders = [(0.0, sv + 0.02), (0.0, sv + 0.02)] if side else [(th - 0.01, sv + 0.02), (-(th - 0.01), sv + 0.02)]

    def arm_pts(k: int) -> list[tuple[float, float]]:
        (eu, ev), (hu_, hv_) = arms[k]
        su, s_v = shoulders[k]
        sign = -1 if (not side and k == 1) else 1
        return [(su, s_v), (su + sign * eu, s_v + ev), (su + sign * hu_, s_v + hv_)]

    def draw_arm(k: int) -> tuple[float, float]:
        pts = arm_pts(k)
        pen.line(pts[:2], SURFACE, aw * 1.15, outline=True)
        pen.line(pts[1:], look.skin, aw * 0.9, outline=True)
        pen.line(pts[:2], SURFACE, aw * 1.15 - 0.02)  # sleeve over the elbow joint
        pen.ellipse(*pts[2], aw * 0.6, aw * 0.6, look.skin, width=0.01)
        return pts[2]

    _hair_back(pen, hair, 0.0, hv, hr, side, look.hair)
    if design:  # a cape
        if side:
            pen.poly([(-0.02, sv), (0.04, sv), (-0.14, hip + 0.26), (-0.24, hip + 0.2)], look.accent)
        else:
            pen.poly([(-th, sv), (th, sv), (th + 0.1, hip + 0.27), (-th - 0.1, hip + 0.27)], look.accent)
    if pose == "sitting":  # a stool
        pen.rect(-0.16, hip + 0.03, 0.16, hip + 0.07, (150, 105, 60))
        for su in (-0.13, 0.11):
            pen.rect(su, hip + 0.07, su + 0.03, 0.97, (150, 105, 60))
    if side:
        draw_arm(1)
    for hip_pt, knee, foot in _legs(pose, side, hip):
        pen.line([hip_pt, knee, foot], look.pants, lw, outline=True)
        pen.ellipse(foot[0] + (0.03 if side else 0.0), foot[1] + 0.012, 0.05 if side else 0.04, 0.022, (45, 40, 40))
    pen.rect(-tw * 0.95, hip - 0.03, tw * 0.95, hip + 0.05, look.pants, radius=0.02)
    pen.rect(-tw, sv - 0.015, tw, hip + 0.03, SURFACE, radius=0.04)
    if design and not side:
        _motif(pen, design["motif"], 0.0, sv + 0.1, 0.055, look.accent)
    pen.rect(-0.025, hv + hr * 0.8, 0.025, sv + 0.01, look.skin, width=0.01)
    hand = draw_arm(0)
    if not side:
        draw_arm(1)
    elif design:
        _motif(pen, design["motif"], -0.02, sv + 0.09, 0.045, look.accent)
    pen.ellipse(0.0, hv, hr, hr * 1.06, look.skin)
    if not side:
        for s in (-1, 1):
            pen.ellipse(s * hr * 1.0, hv + 0.1 * hr, 0.16 * hr, 0.22 * hr, look.skin, width=0.008)
    else:
        pen.ellipse(-0.1 * hr, hv + 0.1 * hr, 0.16 * hr, 0.22 * hr, look.skin, width=0.008)
    _face(pen, e, look, 0.0, hv, hr, side)
    _hair_front(pen, hair, 0.0, hv, hr, side, look.hair)
    hx, hy = pen.pt(0.0, hv)
    return {"hand": _px(pen, *hand), "head": [round(hx, 2), round(hy, 2), round(hr * pen.unit, 2)],
            "neck": [*_px(pen, 0.0, sv), round(th * pen.unit * pen.sx, 2)]}


figure("person")(_human)
figure("child")(_human)


# --------------------------------------------------------------------------- animals

def _quadruped(pen: Pen, e: dict, look: Look, kind: str) -> dict:
    pose = e.get("pose", "standing")
    shape = e.get("shape")
    rv = {"chubby": 0.24, "slender": 0.14}.get(shape, 0.19)
    ru = 0.38 if shape == "chubby" else 0.36
    legw = 0.075 if kind != "rabbit" else 0.07
    lift = {"running": 0.04, "jumping": 0.16}.get(pose, 0.0)
    if kind == "rabbit":
        ru, rv = ru * 0.78, rv * 1.15
    bu, bv = -0.05, 0.52 - lift
    legs_top = bv + rv * 0.4
    head = (0.36 if kind != "rabbit" else 0.3, 0.3 - lift)
    hr = 0.16 if kind != "rabbit" else 0.15
    if pose == "sitting":
        bu, bv, ru, rv = -0.1, 0.62, ru * 0.62, rv * 1.55
        head = (0.1, 0.22)
    elif pose == "lying":
        bv = 0.8
        head = (0.36 if kind != "rabbit" else 0.3, 0.64)
    tail_root = (bu - ru * 0.95, bv - rv * 0.3)
    # tail (behind the body)
    if kind == "cat":
        if pose in ("sitting", "lying"):
            tail = [tail_root, (tail_root[0] - 0.14, 0.93), (tail_root[0] + 0.05, 0.95)]
        else:
            tail = [tail_root, (tail_root[0] - 0.16, tail_root[1] - 0.12), (tail_root[0] - 0.12, tail_root[1] - 0.33)]
        pen.line(tail, SURFACE, 0.06, outline=True)
    elif kind == "dog":
        pen.line([tail_root, (tail_root[0] - 0.12, tail_root[1] - 0.16)], SURFACE, 0.06, outline=True)
    # legs
    if pose == "sitting":
        pen.ellipse(bu - 0.04, 0.84, ru * 1.1, 0.13, SURFACE)
        for lu in (bu + ru * 0.55, bu + ru * 0.85):
            pen.line([(lu, bv), (lu + 0.02, 0.96)], SURFACE, legw, outline=True)
    elif pose == "lying":
        for lu in (0.12, 0.2):
            pen.line([(lu, 0.9), (lu + 0.24, 0.93)], SURFACE, legw, outline=True)
    else:
        fronts, backs = (0.2, 0.27), (-0.27, -0.34)
        if kind == "rabbit":
            fronts, backs = (0.12, 0.17), (-0.2, -0.26)
        for k, (lu, back) in enumerate([(fronts[0], False), (backs[0], True), (fronts[1], False), (backs[1], True)]):
            top = (lu, legs_top)
            if pose == "running":
                foot = (lu + (-0.2 if back else 0.2), 0.92 - (0.08 if k < 2 else 0.0))
            elif pose == "jumping":
                foot = (lu + (-0.26 if back else 0.24), legs_top + 0.22)
            else:
                foot = (lu + (0.01 if k < 2 else 0.0), 0.96)
            if kind == "rabbit" and back and pose not in ("running", "jumping"):
                foot = (lu + 0.1, 0.96)
            pen.line([top, foot], SURFACE, legw, outline=True)
    # body
    pen.ellipse(bu, bv, ru, rv, SURFACE)
    if kind == "rabbit":
        pen.ellipse(bu - ru * 0.9, bv - rv * 0.3, 0.08, 0.08, (250, 250, 250))
        if pose not in ("lying",):
            pen.ellipse(bu - ru * 0.35, bv + rv * 0.45, 0.16, 0.1, SURFACE)
    design = e.get("design")
    if design:
        _motif(pen, design["motif"], bu, bv, min(rv, ru) * 0.55, look.accent)
    # head
    hu, hv = head
    if kind == "cat":
        for du in (-0.1, 0.06):
            pen.poly([(hu + du - 0.06, hv - hr * 0.6), (hu + du, hv - hr * 1.6), (hu + du + 0.07, hv - hr * 0.7)],
                     SURFACE)
    elif kind == "rabbit":
        for du in (-0.07, 0.03):
            pen.ellipse(hu + du, hv - hr * 1.7, 0.045, hr * 1.05, SURFACE)
            pen.ellipse(hu + du, hv - hr * 1.65, 0.018, hr * 0.75, (245, 170, 180), outline=False)
    pen.ellipse(hu, hv, hr * (1.1 if kind == "dog" else 1.0), hr, SURFACE)
    if kind == "dog":
        pen.rect(hu + 0.05, hv - 0.02, hu + hr + 0.1, hv + hr * 0.7, SURFACE, radius=0.04)
        pen.dot(hu + hr + 0.09, hv + 0.01, 0.03)
        pen.ellipse(hu - 0.07, hv + 0.02, 0.055, hr * 0.9, _mix(look.surface, (0, 0, 0), 0.35))
        pen.line([(hu + 0.1, hv + hr * 0.55), (hu + 0.2, hv + hr * 0.55)], INK, 0.01)
    else:
        pen.dot(hu + hr * 0.98, hv + hr * 0.2, 0.022, (230, 120, 140))
        if kind == "cat":
            for dv in (0.1, 0.3):
                pen.line([(hu + hr * 0.75, hv + hr * dv + 0.02), (hu + hr * 1.55, hv + hr * (dv - 0.2))], INK, 0.006)
    pen.dot(hu + hr * 0.45, hv - hr * 0.12, 0.028)
    if design:  # a bandana around the neck
        pen.poly([(hu - hr * 0.9, hv + hr * 0.7), (hu + hr * 0.5, hv + hr * 0.95), (hu - hr * 0.1, hv + hr * 1.6)],
                 look.accent)
    x0, x1 = sorted((pen.x(bu - ru * 0.6), pen.x(bu + ru * 0.6)))
    return {"top": [round(x0, 2), round(x1, 2), round(pen.y(bv - rv), 2)]}


@figure("cat")
def _cat(pen: Pen, e: dict, look: Look) -> dict:
    return _quadruped(pen, e, look, "cat")


@figure("dog")
def _dog(pen: Pen, e: dict, look: Look) -> dict:
    return _quadruped(pen, e, look, "dog")


@figure("rabbit")
def _rabbit(pen: Pen, e: dict, look: Look) -> dict:
    return _quadruped(pen, e, look, "rabbit")


@figure("bird")
def _bird(pen: Pen, e: dict, look: Look) -> dict:
    flying = e.get("pose") == "flying"
    rv = {"chubby": 0.26, "slender": 0.17}.get(e.get("shape"), 0.21)
    bv = 0.5 if flying else 0.56
    if flying:  # far wing
        pen.poly([(-0.05, bv - 0.05), (-0.28, bv - 0.45), (0.02, bv - 0.36), (0.12, bv - 0.08)], SURFACE)
    pen.poly([(-0.22, bv - 0.04), (-0.55, bv - 0.14), (-0.52, bv + 0.08)], SURFACE)
    if not flying:
        for lu in (-0.02, 0.08):
            pen.line([(lu, bv + rv * 0.8), (lu, 0.95)], (230, 150, 40), 0.022)
            pen.line([(lu - 0.05, 0.96), (lu + 0.07, 0.96)], (230, 150, 40), 0.02)
    pen.ellipse(0.0, bv, 0.3, rv, SURFACE)
    pen.ellipse(0.25, bv - rv - 0.04, 0.15, 0.15, SURFACE)
    pen.poly([(0.37, bv - rv - 0.08), (0.55, bv - rv - 0.02), (0.37, bv - rv + 0.03)], (240, 160, 30))
    pen.dot(0.3, bv - rv - 0.07, 0.025)
    if flying:
        pen.poly([(-0.08, bv), (-0.18, bv - 0.46), (0.1, bv - 0.4), (0.16, bv - 0.02)], SURFACE)
    else:
        pen.ellipse(-0.06, bv + 0.02, 0.19, rv * 0.55, SURFACE)
    return {}


@figure("fish")
def _fish(pen: Pen, e: dict, look: Look) -> dict:
    rv = {"round": 0.36, "slender": 0.17}.get(e.get("shape"), 0.27)
    ru = 0.5 if e.get("shape") != "slender" else 0.56
    pen.poly([(-ru + 0.1, 0.5), (-0.79, 0.5 - 0.26), (-0.72, 0.5), (-0.79, 0.5 + 0.26)], SURFACE)
    pen.poly([(-0.2, 0.5 - rv * 0.8), (0.05, 0.5 - rv - 0.14), (0.2, 0.5 - rv * 0.9)], SURFACE)
    pen.ellipse(0.05, 0.5, ru, rv, SURFACE)
    pen.arc(0.22, 0.5, 0.08, rv * 0.7, 300, 60, INK, 0.012)
    pen.ellipse(0.38, 0.5 - rv * 0.3, 0.055, 0.055, (255, 255, 255), width=0.01)
    pen.dot(0.39, 0.5 - rv * 0.3, 0.025)
    pen.arc(ru - 0.04, 0.5 + rv * 0.2, 0.06, 0.04, 90, 200, INK, 0.01)
    pen.poly([(-0.05, 0.5 + rv * 0.5), (0.1, 0.5 + rv + 0.1), (0.16, 0.5 + rv * 0.6)], SURFACE)
    return {}


# --------------------------------------------------------------------------- objects

def _body(pen: Pen, shape: str | None, u: float, v: float, ru: float, rv: float, fill: Any = SURFACE) -> None:
    """A figure's main body in its shape: round/default ellipse, boxy rectangle, heart, star."""
    if shape == "boxy":
        pen.rect(u - ru, v - rv, u + ru, v + rv, fill, radius=min(ru, rv) * 0.2)
    elif shape in ("heart", "star"):
        pen.poly(_shape_pts(shape, u, v, max(ru, rv)), fill)
    else:
        pen.ellipse(u, v, ru, rv, fill)


@figure("teapot")
def _teapot(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    ru, rv, bv = (0.27, 0.38, 0.57) if shape == "tall" else (0.38, 0.32, 0.63)
    pen.arc(-ru - 0.02, bv, 0.17, 0.17, 90, 270, INK, 0.075)
    pen.arc(-ru - 0.02, bv, 0.17, 0.17, 90, 270, SURFACE, 0.05)
    pen.poly([(ru * 0.7, bv - 0.02), (ru + 0.28, bv - 0.3), (ru + 0.34, bv - 0.3), (ru * 0.8, bv + 0.2)], SURFACE)
    _body(pen, shape, 0.0, bv, ru, rv)
    pen.chord(0.0, bv - rv + 0.02, ru * 0.55, 0.1, 180, 360, SURFACE)
    pen.ellipse(0.0, bv - rv - 0.1, 0.05, 0.045, SURFACE)
    return {}


@figure("mug")
def _mug(pen: Pen, e: dict, look: Look) -> dict:
    u0, u1, v0 = {"tall": (-0.25, 0.17, 0.12), "wide": (-0.42, 0.3, 0.42)}.get(e.get("shape"), (-0.34, 0.24, 0.25))
    mid = (v0 + 0.97) / 2
    rv = (0.97 - v0) * 0.27
    pen.arc(u1, mid, 0.17, rv, 270, 90, INK, 0.085)
    pen.arc(u1, mid, 0.17, rv, 270, 90, SURFACE, 0.055)
    pen.rect(u0, v0, u1, 0.97, SURFACE, radius=0.05)
    pen.ellipse((u0 + u1) / 2, v0 + 0.02, (u1 - u0) / 2 - 0.01, 0.04, (90, 55, 35), width=0.01)
    return {}


@figure("chair")
def _chair(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    back_top = 0.0 if shape == "tall" else 0.12
    seat = 0.62 if shape == "wide" else 0.55
    front = 0.34 if shape == "wide" else 0.3
    pen.rect(-0.3, back_top, -0.22, seat, SURFACE)
    pen.rect(-0.22, back_top + 0.05, -0.2, back_top + 0.12, SURFACE, outline=False)
    for lu in (-0.29, front - 0.06):
        pen.rect(lu, seat, lu + 0.06, 0.98, SURFACE)
    pen.rect(-0.32, seat - 0.07, front + 0.02, seat + 0.01, SURFACE)
    x0, x1 = sorted((pen.x(-0.2), pen.x(front)))
    return {"top": [round(x0, 2), round(x1, 2), round(pen.y(seat - 0.07), 2)]}


@figure("vase")
def _vase(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    if shape == "tall":
        pen.rect(-0.08, 0.04, 0.08, 0.3, SURFACE)
        pen.ellipse(0.0, 0.62, 0.21, 0.36, SURFACE)
    elif shape == "boxy":
        pen.rect(-0.1, 0.12, 0.1, 0.32, SURFACE)
        pen.rect(-0.3, 0.28, 0.3, 0.98, SURFACE, radius=0.04)
    else:
        pen.rect(-0.1, 0.12, 0.1, 0.38, SURFACE)
        pen.ellipse(0.0, 0.66, 0.33, 0.32, SURFACE)
    top = 0.04 if shape == "tall" else 0.12
    pen.ellipse(0.0, top, 0.14, 0.04, SURFACE)
    pen.ellipse(0.0, top, 0.08, 0.02, (60, 45, 40), outline=False)
    return {}


@figure("umbrella")
def _umbrella(pen: Pen, e: dict, look: Look) -> dict:
    pen.line([(0.0, 0.1), (0.0, 0.86)], (70, 60, 55), 0.025)
    pen.arc(0.07, 0.86, 0.07, 0.07, 0, 180, (70, 60, 55), 0.03)
    pen.chord(0.0, 0.45, 0.49, 0.37, 180, 360, SURFACE)
    for k in range(4):  # scalloped rim
        u = -0.49 + 0.245 * k + 0.1225
        pen.chord(u, 0.45, 0.1225, 0.05, 0, 180, HOLE, outline=False)
        pen.arc(u, 0.45, 0.1225, 0.05, 180, 360, INK, LINE_W)
    for u in (-0.245, 0.0, 0.245):
        pen.line([(0.0, 0.09), (u, 0.44)], INK, 0.008)
    pen.ellipse(0.0, 0.07, 0.025, 0.025, (70, 60, 55))
    return {}


@figure("handbag")
def _handbag(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    w, top = {"wide": (0.5, 0.45), "tall": (0.34, 0.3)}.get(shape, (0.44, 0.38))
    pen.arc(0.0, top, w * 0.55, top - 0.03, 180, 360, INK, 0.06)
    pen.arc(0.0, top, w * 0.55, top - 0.03, 180, 360, (120, 80, 50), 0.035)
    pen.poly([(-w, 0.96), (w, 0.96), (w * 0.82, top), (-w * 0.82, top)], SURFACE)
    pen.poly([(-w * 0.82, top), (w * 0.82, top), (w * 0.7, top + 0.2), (-w * 0.7, top + 0.2)], SURFACE)
    pen.ellipse(0.0, top + 0.2, 0.04, 0.04, (230, 190, 60))
    return {}


@figure("backpack")
def _backpack(pen: Pen, e: dict, look: Look) -> dict:
    radius = 0.06 if e.get("shape") == "boxy" else 0.17
    pen.arc(0.0, 0.14, 0.1, 0.1, 180, 360, INK, 0.05)
    for su in (-0.39, 0.33):
        pen.rect(su, 0.25, su + 0.06, 0.8, (60, 55, 50), radius=0.02)
    pen.rect(-0.35, 0.12, 0.35, 0.97, SURFACE, radius=radius)
    pen.rect(-0.25, 0.55, 0.25, 0.88, SURFACE, radius=radius * 0.6)
    pen.line([(-0.2, 0.6), (0.2, 0.6)], INK, 0.012)
    pen.line([(-0.24, 0.32), (0.24, 0.32)], INK, 0.012)
    return {}


@figure("balloon")
def _balloon(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    pts = [(0.0, 0.68)]
    for k in range(1, 8):
        pts.append(((0.05 if k % 2 else -0.05), 0.68 + k * 0.045))
    pen.line(pts, INK, 0.008)
    pen.poly([(0.0, 0.62), (-0.04, 0.69), (0.04, 0.69)], SURFACE)
    _body(pen, shape, 0.0, 0.34, 0.3, 0.31 if shape != "round" else 0.3)
    pen.ellipse(-0.12, 0.22, 0.05, 0.08, (255, 255, 255), outline=False)
    return {}


@figure("giftbox")
def _giftbox(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    top = {"tall": 0.22, "wide": 0.55}.get(shape, 0.4)
    pen.rect(-0.4, top, 0.4, 0.97, SURFACE)
    pen.rect(-0.45, top - 0.13, 0.45, top + 0.02, SURFACE)
    pen.rect(-0.06, top - 0.13, 0.06, 0.97, look.accent)
    for s in (-1, 1):
        pen.poly([(0.0, top - 0.13), (s * 0.2, top - 0.28), (s * 0.2, top - 0.1)], look.accent)
    x0, x1 = sorted((pen.x(-0.4), pen.x(0.4)))
    return {"top": [round(x0, 2), round(x1, 2), round(pen.y(top - 0.13), 2)]}


@figure("robot")
def _robot(pen: Pen, e: dict, look: Look) -> dict:
    round_ = e.get("shape") == "round"
    metal = (120, 125, 135)
    for su in (-0.16, 0.08):
        pen.rect(su, 0.76, su + 0.08, 0.97, metal)
    for s in (-1, 1):
        pen.line([(s * 0.3, 0.45), (s * 0.4, 0.62), (s * 0.36, 0.75)], metal, 0.05, outline=True)
    if round_:
        pen.ellipse(0.0, 0.58, 0.31, 0.21, SURFACE)
        pen.ellipse(0.0, 0.24, 0.23, 0.15, SURFACE)
    else:
        pen.rect(-0.3, 0.38, 0.3, 0.79, SURFACE, radius=0.03)
        pen.rect(-0.22, 0.1, 0.22, 0.37, SURFACE, radius=0.03)
    pen.line([(0.0, 0.1), (0.0, 0.02)], INK, 0.015)
    pen.ellipse(0.0, 0.02, 0.03, 0.03, (230, 60, 60))
    for s in (-1, 1):
        pen.ellipse(s * 0.09, 0.21, 0.05, 0.05, (150, 220, 250))
    pen.rect(-0.09, 0.29, 0.09, 0.32, INK, outline=False)
    design = e.get("design")
    if design:
        _motif(pen, design["motif"], 0.0, 0.58, 0.11, look.accent)
    else:
        pen.rect(-0.12, 0.5, 0.12, 0.64, (60, 60, 70), radius=0.02)
    return {}


# --------------------------------------------------------------------------- food

@figure("apple")
def _apple(pen: Pen, e: dict, look: Look) -> dict:
    ru, rv = (0.34, 0.42) if e.get("shape") == "tall" else (0.44, 0.38)
    pen.line([(0.0, 0.97 - 2 * rv + 0.04), (0.04, 0.97 - 2 * rv - 0.1)], (100, 65, 35), 0.03)
    pen.ellipse(0.0, 0.97 - rv, ru, rv, SURFACE)
    pen.arc(0.0, 0.97 - 2 * rv + 0.02, 0.1, 0.05, 20, 160, INK, 0.012)
    pen.poly([(0.05, 0.97 - 2 * rv - 0.05), (0.22, 0.97 - 2 * rv - 0.15), (0.3, 0.97 - 2 * rv - 0.08),
              (0.12, 0.97 - 2 * rv + 0.0)], (70, 150, 60))
    pen.ellipse(-ru * 0.45, 0.97 - rv * 1.35, 0.05, 0.08, (255, 255, 255), outline=False)
    return {}


@figure("cake")
def _cake(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    tiers = {"tall": [(0.45, 0.26), (0.34, 0.22), (0.22, 0.18)], "wide": [(0.5, 0.3)]}.get(
        shape, [(0.45, 0.32), (0.3, 0.25)])
    pen.ellipse(0.0, 0.955, 0.52, 0.035, (240, 240, 240))
    v = 0.94
    for half, h in tiers:
        pen.rect(-half, v - h, half, v, SURFACE, radius=0.02)
        pts = [(-half, v - h)]
        for k in range(9):
            u = -half + 2 * half * k / 8
            pts.append((u, v - h + (0.06 if k % 2 else 0.03)))
        pts.append((half, v - h))
        pen.poly(pts, (250, 248, 240), width=0.008)
        v -= h
    top_half = tiers[-1][0]
    for u in (-top_half * 0.5, 0.0, top_half * 0.5)[: 3 if top_half > 0.25 else 2]:
        pen.rect(u - 0.015, v - 0.12, u + 0.015, v, (120, 180, 230), width=0.008)
        pen.ellipse(u, v - 0.15, 0.02, 0.035, (250, 180, 40), outline=False)
    return {}


@figure("donut")
def _donut(pen: Pen, e: dict, look: Look) -> dict:
    pen.ellipse(0.0, 0.6, 0.56, 0.36, (215, 165, 100))
    pts = []
    for k in range(36):
        t = 2 * math.pi * k / 36
        rr = 1.0 + (0.07 if k % 3 == 0 else 0.0)
        pts.append((math.cos(t) * 0.47 * rr, 0.58 + math.sin(t) * 0.29 * rr))
    pen.poly(pts, SURFACE)
    pen.ellipse(0.0, 0.58, 0.17, 0.1, (205, 150, 90))
    pen.ellipse(0.0, 0.585, 0.12, 0.065, HOLE)
    return {}


@figure("icecream")
def _icecream(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    pen.poly([(-0.27, 0.5), (0.27, 0.5), (0.0, 0.99)], (225, 170, 95))
    for t in (0.25, 0.5, 0.75):
        pen.line([(-0.27 + 0.27 * t, 0.5 + 0.49 * t), (-0.27 + 0.54 * t, 0.5)], (170, 115, 55), 0.008)
        pen.line([(0.27 - 0.27 * t, 0.5 + 0.49 * t), (0.27 - 0.54 * t, 0.5)], (170, 115, 55), 0.008)
    scoops = {"tall": [(0.45, 0.2), (0.29, 0.18), (0.15, 0.15)], "round": [(0.34, 0.28)]}.get(
        shape, [(0.43, 0.24), (0.24, 0.2)])
    for v, r in scoops:
        pen.ellipse(0.0, v, r, r * 0.9, SURFACE)
    v, r = scoops[-1]
    pen.ellipse(0.0, v - r * 0.9 - 0.02, 0.05, 0.05, (200, 30, 40))
    return {}


@figure("pizza")
def _pizza(pen: Pen, e: dict, look: Look) -> dict:
    pen.poly([(-0.42, 0.1), (0.42, 0.1), (0.0, 0.97)], SURFACE)
    pen.rect(-0.45, 0.03, 0.45, 0.15, (200, 140, 70), radius=0.05)
    for u, v in ((-0.15, 0.28), (0.14, 0.3), (0.0, 0.5), (-0.04, 0.72), (0.2, 0.2)):
        pen.ellipse(u, v, 0.075, 0.07, (190, 50, 40), width=0.008)
    return {}


@figure("cupcake")
def _cupcake(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    pen.poly([(-0.35, 0.58), (0.35, 0.58), (0.26, 0.97), (-0.26, 0.97)], look.accent)
    for k in range(1, 6):
        u = -0.3 + 0.1 * k
        pen.line([(u, 0.6), (u * 0.78, 0.95)], _mix(look.accent, (0, 0, 0), 0.3), 0.008)
    layers = {"tall": [(0.55, 0.4), (0.42, 0.33), (0.3, 0.26), (0.18, 0.18)], "wide": [(0.54, 0.44), (0.43, 0.34)]}.get(
        shape, [(0.54, 0.4), (0.41, 0.32), (0.29, 0.22)])
    for v, ru in layers:
        pen.ellipse(0.0, v, ru, 0.085, SURFACE)
    v, _ = layers[-1]
    pen.ellipse(0.0, v - 0.12, 0.055, 0.055, (200, 30, 40))
    return {}


# --------------------------------------------------------------------------- clothing

@figure("tshirt")
def _tshirt(pen: Pen, e: dict, look: Look) -> dict:
    pts = [(-0.12, 0.06), (0.12, 0.06), (0.32, 0.12), (0.56, 0.36), (0.42, 0.48), (0.32, 0.38),
           (0.32, 0.96), (-0.32, 0.96), (-0.32, 0.38), (-0.42, 0.48), (-0.56, 0.36), (-0.32, 0.12)]
    pen.poly(pts, SURFACE)
    pen.chord(0.0, 0.06, 0.12, 0.08, 0, 180, _mix(look.surface, (0, 0, 0), 0.35))
    return {}


@figure("dress")
def _dress(pen: Pen, e: dict, look: Look) -> dict:
    flare = 0.46 if e.get("shape") == "wide" else (0.3 if e.get("shape") == "slender" else 0.4)
    for s in (-1, 1):
        pen.line([(s * 0.1, 0.02), (s * 0.13, 0.12)], SURFACE, 0.03, outline=True)
    pen.poly([(-0.17, 0.1), (0.17, 0.1), (0.15, 0.42), (-0.15, 0.42)], SURFACE)
    pen.poly([(-0.15, 0.42), (0.15, 0.42), (flare, 0.96), (-flare, 0.96)], SURFACE)
    pen.rect(-0.16, 0.4, 0.16, 0.45, look.accent)
    return {}


def _hat_band(pen: Pen, u0: float, u1: float, v0: float, v1: float, color: Any) -> None:
    pen.rect(u0, v0, u1, v1, color, radius=0.04)


@figure("beanie")
def _beanie(pen: Pen, e: dict, look: Look) -> dict:
    dome = {"tall": 0.62, "round": 0.4}.get(e.get("shape"), 0.5)
    pen.ellipse(0.0, 0.72 - dome - 0.06, 0.11, 0.11, (250, 250, 250) if look.second != (244, 244, 244) else look.accent)
    pen.chord(0.0, 0.72, 0.43, dome, 180, 360, SURFACE)
    _hat_band(pen, -0.46, 0.46, 0.64, 0.92, SURFACE)
    for k in range(1, 9):
        u = -0.46 + 0.92 * k / 9
        pen.line([(u, 0.67), (u, 0.89)], _mix(look.surface, (0, 0, 0), 0.3), 0.008)
    return {}


@figure("cap")
def _cap(pen: Pen, e: dict, look: Look) -> dict:
    pen.poly([(0.2, 0.7), (0.56, 0.74), (0.7, 0.84), (0.62, 0.9), (0.2, 0.88)], SURFACE)
    pen.chord(-0.02, 0.88, 0.44, 0.72, 180, 360, SURFACE)
    pen.arc(-0.02, 0.88, 0.18, 0.72, 270, 360, INK, 0.01)
    pen.arc(-0.02, 0.88, 0.18, 0.72, 180, 270, INK, 0.01)
    pen.ellipse(-0.02, 0.17, 0.05, 0.035, SURFACE)
    return {}


@figure("tophat")
def _tophat(pen: Pen, e: dict, look: Look) -> dict:
    crown_top = {"tall": 0.0, "wide": 0.35}.get(e.get("shape"), 0.12)
    pen.ellipse(0.0, 0.9, 0.5, 0.08, SURFACE)
    pen.rect(-0.3, crown_top, 0.3, 0.9, SURFACE)
    pen.rect(-0.3, 0.68, 0.3, 0.8, look.accent)
    pen.ellipse(0.0, crown_top, 0.3, 0.045, SURFACE)
    return {}


@figure("scarf")
def _scarf(pen: Pen, e: dict, look: Look) -> dict:
    if e.get("worn"):
        pen.rect(-0.5, 0.0, 0.5, 0.32, SURFACE, radius=0.12)
        pen.poly([(0.08, 0.22), (0.38, 0.22), (0.44, 0.95), (0.14, 0.98)], SURFACE)
        for k in range(5):
            u = 0.15 + 0.06 * k
            pen.line([(u, 0.96), (u + 0.01, 1.0)], INK, 0.012)
        return {}
    pen.ellipse(0.0, 0.26, 0.4, 0.22, SURFACE)
    pen.ellipse(0.0, 0.23, 0.26, 0.12, HOLE)
    pen.poly([(0.02, 0.38), (0.24, 0.38), (0.3, 0.88), (0.08, 0.9)], SURFACE)
    pen.poly([(-0.2, 0.4), (0.0, 0.38), (-0.04, 0.8), (-0.24, 0.78)], SURFACE)
    for k in range(4):
        pen.line([(0.1 + 0.05 * k, 0.89), (0.1 + 0.05 * k, 0.96)], INK, 0.012)
        pen.line([(-0.23 + 0.05 * k, 0.79), (-0.23 + 0.05 * k, 0.86)], INK, 0.012)
    return {}


@figure("boot")
def _boot(pen: Pen, e: dict, look: Look) -> dict:
    shaft_top = {"tall": 0.02, "wide": 0.45}.get(e.get("shape"), 0.2)
    pen.rect(-0.28, 0.9, 0.46, 0.98, (40, 35, 35), radius=0.03)
    pen.poly([(-0.26, 0.62), (0.18, 0.62), (0.42, 0.72), (0.46, 0.9), (-0.26, 0.9)], SURFACE)
    pen.rect(-0.26, shaft_top, 0.14, 0.75, SURFACE)
    pen.rect(-0.28, shaft_top, 0.16, shaft_top + 0.07, SURFACE)
    for k in range(3):
        v = 0.64 + 0.07 * k
        pen.line([(0.1 + 0.05 * k, v), (0.2 + 0.05 * k, v + 0.03)], (245, 245, 240), 0.012)
    return {}


# --------------------------------------------------------------------------- transportation

_WINDOW = (170, 215, 240)


def _wheel(pen: Pen, u: float, v: float, r: float) -> None:
    pen.ellipse(u, v, r, r, (35, 35, 38))
    pen.ellipse(u, v, r * 0.45, r * 0.45, (185, 185, 190))


@figure("car")
def _car(pen: Pen, e: dict, look: Look) -> dict:
    shape = e.get("shape")
    roof = 0.28 if shape == "wide" else 0.15
    if shape == "round":
        pen.chord(-0.05, 0.5, 0.6, 0.42, 180, 360, SURFACE)
        pen.chord(-0.05, 0.48, 0.48, 0.3, 180, 360, _WINDOW)
        pen.line([(-0.05, 0.18), (-0.05, 0.48)], SURFACE, 0.04)
        top_u = (-0.35, 0.25)
        roof = 0.08
    else:
        pen.poly([(-0.6, 0.46), (-0.42, roof), (0.28, roof), (0.52, 0.46)], SURFACE)
        pen.poly([(-0.5, 0.44), (-0.37, roof + 0.05), (-0.08, roof + 0.05), (-0.08, 0.44)], _WINDOW)
        pen.poly([(0.0, 0.44), (0.0, roof + 0.05), (0.25, roof + 0.05), (0.42, 0.44)], _WINDOW)
        top_u = (-0.4, 0.26)
    pen.rect(-0.96, 0.44, 0.96, 0.8, SURFACE, radius=0.14 if shape == "round" else 0.06)
    design = e.get("design")
    if design:
        pen.rect(-0.96, 0.6, 0.96, 0.66, look.accent, outline=False)
        _motif(pen, design["motif"], -0.02, 0.6, 0.11, look.accent)
    else:
        pen.line([(-0.05, 0.47), (-0.05, 0.76)], INK, 0.01)
    pen.ellipse(0.9, 0.54, 0.05, 0.04, (250, 220, 90))
    pen.rect(-0.96, 0.5, -0.9, 0.58, (220, 40, 40))
    for u in (-0.55, 0.55):
        _wheel(pen, u, 0.8, 0.17)
    x0, x1 = sorted((pen.x(top_u[0]), pen.x(top_u[1])))
    return {"top": [round(x0, 2), round(x1, 2), round(pen.y(roof), 2)]}


@figure("bus")
def _bus(pen: Pen, e: dict, look: Look) -> dict:
    radius = 0.3 if e.get("shape") == "round" else 0.06
    pen.rect(-1.12, 0.1, 1.12, 0.82, SURFACE, radius=radius)
    for k in range(5):
        u = -0.95 + 0.34 * k
        pen.rect(u, 0.2, u + 0.26, 0.44, _WINDOW, radius=0.03)
    pen.rect(0.78, 0.2, 0.98, 0.76, _WINDOW, radius=0.03)
    pen.line([(0.88, 0.2), (0.88, 0.76)], INK, 0.012)
    pen.rect(1.0, 0.2, 1.1, 0.46, _WINDOW, radius=0.02)
    pen.ellipse(1.06, 0.62, 0.04, 0.04, (250, 220, 90))
    for u in (-0.7, 0.62):
        _wheel(pen, u, 0.82, 0.16)
    x0, x1 = sorted((pen.x(-0.9), pen.x(0.9)))
    return {"top": [round(x0, 2), round(x1, 2), round(pen.y(0.1), 2)]}


@figure("boat")
def _boat(pen: Pen, e: dict, look: Look) -> dict:
    mast_top = 0.0 if e.get("shape") == "tall" else 0.12
    pen.line([(0.0, mast_top), (0.0, 0.66)], (110, 75, 45), 0.025)
    pen.poly([(0.03, mast_top + 0.04), (0.03, 0.6), (0.45, 0.6)], (250, 250, 245))
    pen.poly([(-0.03, mast_top + 0.12), (-0.03, 0.6), (-0.38, 0.6)], look.accent)
    pen.poly([(0.0, mast_top), (0.0, mast_top + 0.08), (0.12, mast_top + 0.04)], look.accent)
    pen.poly([(-0.55, 0.64), (0.57, 0.64), (0.4, 0.93), (-0.44, 0.93)], SURFACE)
    for u in (-0.25, 0.0, 0.25):
        pen.ellipse(u, 0.75, 0.04, 0.04, _WINDOW, width=0.01)
    return {}


@figure("airplane")
def _airplane(pen: Pen, e: dict, look: Look) -> dict:
    rv = 0.16 if e.get("shape") == "round" else 0.11
    pen.poly([(-0.15, 0.5), (0.15, 0.5), (-0.1, 0.25), (-0.22, 0.25)], SURFACE)  # far wing
    pen.poly([(-0.82, 0.5), (-0.94, 0.12), (-0.74, 0.12), (-0.52, 0.5)], SURFACE)
    pen.rect(-0.85, 0.5 - rv, 0.7, 0.5 + rv, SURFACE, radius=rv)
    pen.ellipse(0.7, 0.5, 0.22, rv, SURFACE)
    pen.poly([(0.74, 0.5 - rv * 0.9), (0.86, 0.5 - rv * 0.5), (0.74, 0.5 - rv * 0.3)], _WINDOW)
    for k in range(6):
        pen.ellipse(-0.5 + 0.17 * k, 0.5 - rv * 0.25, 0.03, 0.03, _WINDOW, width=0.008)
    pen.poly([(-0.2, 0.55), (0.2, 0.55), (-0.05, 0.92), (-0.25, 0.92)], SURFACE)
    design = e.get("design")
    if design:
        _motif(pen, design["motif"], -0.72, 0.28, 0.09, look.accent)
    return {}


# --------------------------------------------------------------------------- structures

def _window(pen: Pen, u0: float, v0: float, u1: float, v1: float) -> None:
    pen.rect(u0, v0, u1, v1, _WINDOW)
    pen.line([((u0 + u1) / 2, v0), ((u0 + u1) / 2, v1)], INK, 0.01)
    pen.line([(u0, (v0 + v1) / 2), (u1, (v0 + v1) / 2)], INK, 0.01)


@figure("house")
def _house(pen: Pen, e: dict, look: Look) -> dict:
    pen.rect(0.18, 0.1, 0.3, 0.32, (150, 90, 70))
    pen.rect(-0.4, 0.42, 0.4, 0.98, SURFACE)
    pen.poly([(-0.5, 0.45), (0.5, 0.45), (0.0, 0.06)], look.accent)
    pen.rect(-0.08, 0.7, 0.1, 0.98, (120, 75, 45))
    pen.dot(0.06, 0.85, 0.015, (240, 200, 80))
    _window(pen, -0.32, 0.54, -0.16, 0.68)
    _window(pen, 0.18, 0.54, 0.34, 0.68)
    return {}


def _battlement(pen: Pen, u0: float, u1: float, v: float, fill: Any) -> None:
    n = max(3, round((u1 - u0) / 0.09))
    step = (u1 - u0) / n
    for k in range(0, n, 2):
        pen.rect(u0 + k * step, v - 0.06, u0 + (k + 1) * step, v + 0.01, fill)


@figure("tower")
def _tower(pen: Pen, e: dict, look: Look) -> dict:
    _battlement(pen, -0.22, 0.22, 0.1, SURFACE)
    pen.rect(-0.22, 0.1, 0.22, 0.2, SURFACE)
    pen.rect(-0.18, 0.19, 0.18, 0.98, SURFACE)
    for v in (0.32, 0.52):
        pen.rect(-0.025, v, 0.025, v + 0.1, (45, 40, 50))
    pen.pieslice(0.0, 0.86, 0.08, 0.08, 180, 360, (110, 70, 40))
    pen.rect(-0.08, 0.86, 0.08, 0.98, (110, 70, 40))
    return {}


@figure("castle")
def _castle(pen: Pen, e: dict, look: Look) -> dict:
    wall_top = 0.3 if e.get("shape") == "tall" else 0.45
    for s in (-1, 1):
        u0, u1 = (s * 0.62, s * 0.36) if s < 0 else (s * 0.36, s * 0.62)
        pen.rect(min(u0, u1), wall_top - 0.2, max(u0, u1), 0.98, SURFACE)
        mid = (u0 + u1) / 2
        pen.poly([(min(u0, u1) - 0.03, wall_top - 0.2), (max(u0, u1) + 0.03, wall_top - 0.2),
                  (mid, wall_top - 0.45)], look.accent)
        pen.line([(mid, wall_top - 0.45), (mid, wall_top - 0.56)], INK, 0.01)
        pen.poly([(mid, wall_top - 0.56), (mid + 0.09, wall_top - 0.53), (mid, wall_top - 0.5)], look.second)
        pen.rect(mid - 0.02, wall_top - 0.05, mid + 0.02, wall_top + 0.05, (45, 40, 50))
    _battlement(pen, -0.36, 0.36, wall_top, SURFACE)
    pen.rect(-0.36, wall_top, 0.36, 0.98, SURFACE)
    pen.pieslice(0.0, 0.78, 0.13, 0.12, 180, 360, (90, 60, 40))
    pen.rect(-0.13, 0.78, 0.13, 0.98, (90, 60, 40))
    for u in (-0.06, 0.0, 0.06):
        pen.line([(u, 0.7), (u, 0.97)], INK, 0.008)
    return {}


@figure("windmill")
def _windmill(pen: Pen, e: dict, look: Look) -> dict:
    pen.poly([(-0.18, 0.34), (0.18, 0.34), (0.27, 0.98), (-0.27, 0.98)], SURFACE)
    pen.chord(0.0, 0.36, 0.22, 0.16, 180, 360, look.accent)
    pen.pieslice(0.0, 0.88, 0.07, 0.07, 180, 360, (110, 70, 40))
    pen.rect(-0.07, 0.88, 0.07, 0.98, (110, 70, 40))
    _window(pen, -0.06, 0.52, 0.06, 0.62)
    hub = (0.0, 0.3)
    for k in range(4):
        a = math.radians(25 + 90 * k)
        cu, cv = math.cos(a), math.sin(a)
        pu, pv = -cv, cu
        near, far, half = 0.06, 0.42, 0.07
        pts = [(hub[0] + cu * near + pu * 0.01, hub[1] + cv * near + pv * 0.01),
               (hub[0] + cu * far + pu * 0.01, hub[1] + cv * far + pv * 0.01),
               (hub[0] + cu * far + pu * half * 2, hub[1] + cv * far + pv * half * 2),
               (hub[0] + cu * near + pu * half * 2, hub[1] + cv * near + pv * half * 2)]
        pen.line([(hub[0], hub[1]), (hub[0] + cu * far, hub[1] + cv * far)], (110, 75, 45), 0.018)
        pen.poly(pts, (245, 240, 225), width=0.01)
    pen.ellipse(*hub, 0.035, 0.035, (90, 60, 40))
    return {}


# --------------------------------------------------------------------------- text

def _letters(pen: Pen, e: dict, look: Look, u0: float, v0: float, u1: float, v1: float) -> None:
    w = abs(pen.x(u1) - pen.x(u0))
    h = abs(pen.y(v1) - pen.y(v0))
    ink = tuple(e.get("ink", _contrast(look.surface)))
    shadow = (25, 25, 30) if _luma(ink) > 128 else (150, 150, 150)
    for mask, role in lettering(e["word"], e["font"], round(w), round(h)):
        color = {"ink": ink, "shadow": shadow, "halo": look.surface}[role]
        pen.stamp(mask, (u0 + u1) / 2, (v0 + v1) / 2, color)


@figure("signpost")
def _signpost(pen: Pen, e: dict, look: Look) -> dict:
    pen.rect(-0.04, 0.5, 0.04, 0.98, (120, 85, 50))
    pen.rect(-0.63, 0.08, 0.63, 0.6, SURFACE, radius=0.05, width=0.02)
    _letters(pen, e, look, -0.54, 0.15, 0.54, 0.53)
    return {}


@figure("hanging_sign")
def _hanging_sign(pen: Pen, e: dict, look: Look) -> dict:
    pen.line([(-0.58, 0.05), (0.58, 0.05)], (60, 55, 55), 0.03)
    for u in (-0.35, 0.35):
        pen.line([(u, 0.05), (u, 0.3)], (90, 90, 95), 0.012)
    pen.rect(-0.52, 0.28, 0.52, 0.86, SURFACE, radius=0.06, width=0.02)
    _letters(pen, e, look, -0.44, 0.35, 0.44, 0.79)
    return {}


@figure("banner")
def _banner(pen: Pen, e: dict, look: Look) -> dict:
    for u in (-0.96, 0.96):
        pen.rect(u - 0.025, 0.08, u + 0.025, 0.98, (120, 85, 50))
    pen.poly([(-0.93, 0.2), (0.93, 0.2), (0.8, 0.47), (0.93, 0.74), (-0.93, 0.74), (-0.8, 0.47)], SURFACE,
             width=0.02)
    if e.get("pattern"):  # a plain plate keeps the letters readable; the pattern shows around it
        pen.rect(-0.72, 0.29, 0.72, 0.65, look.surface, radius=0.04, width=0.01)
    _letters(pen, e, look, -0.72, 0.27, 0.72, 0.67)
    return {}


# =============================================================================== drawing an entity

def _shape_sx(category: str, shape: str | None) -> float:
    """Sideways stretch of a shape variant (other variants change the drawing itself)."""
    if shape == "tall":
        return 0.78
    if shape == "wide":
        return 1.3
    if shape == "slender" and category == "Clothing":
        return 0.82
    return 1.0


def _fit_box(world: World, e: dict, box: list[float]) -> tuple[float, float, float, float]:
    """(cx, top, unit, sx) placing a figure in a box: as large as fits, centered, on the box bottom."""
    fig = world.figures[e["figure"]]
    sx = _shape_sx(fig["category"], e.get("shape"))
    x0, y0, x1, y1 = box
    unit = min((y1 - y0) * float(fig.get("scale", 1.0)), (x1 - x0) / (fig["aspect"] * sx))
    return (x0 + x1) / 2, y1 - unit, unit, sx


_TILT = {"leaping": 24.0, "jumping": 10.0}


def _draw_entity(world: World, e: dict, box: list[float]) -> tuple[Image.Image, dict, float]:
    """The entity's RGBA layer (full canvas), its anchors and its unit (height in pixels)."""
    cx, top, unit, sx = _fit_box(world, e, box)
    look = Look(world, e)
    pen = Pen(world.size, cx, top, unit, flip=e.get("orientation") == "left" or bool(e.get("mirror")), sx=sx,
              base=look.surface)
    anchors = FIGURES[e["figure"]](pen, e, look)
    rng = random.Random(e["seed"])
    area = pen.mask.getbbox()
    if area is not None and (e.get("pattern") or e.get("material")):
        w, h = area[2] - area[0], area[3] - area[1]
        if e.get("pattern"):
            tex = _pattern(e["pattern"], w, h, look.main, world.colors[e["second"]], unit, rng)
        else:
            tex = _material(e["material"], w, h, look.main, unit, rng)
        pen.layer.paste(tex, area[:2], pen.mask.crop(area))
    if area is not None and e.get("damage"):
        crop = pen.mask.crop(area)
        marks = _damage(e["damage"], crop, unit, rng)
        marks.putalpha(ImageChops.multiply(marks.getchannel("A"), crop))
        pen.layer.alpha_composite(marks, dest=area[:2])
    tilt = _TILT.get(e.get("pose", ""), 0.0) if e["category"] == "Animal" else 0.0
    layer = pen.layer
    if tilt:
        sign = -1 if pen.flip else 1
        layer = layer.rotate(sign * tilt, resample=Image.Resampling.BICUBIC, center=(cx, top + unit * 0.5))
    return layer, anchors, unit


# =============================================================================== effects

def _behind(facing: int, bbox: tuple[int, int, int, int]) -> float:
    return bbox[0] if facing > 0 else bbox[2]


def _effect_under(kind: str, layer: Image.Image, bbox: tuple[int, int, int, int], facing: int,
                  glow: RGB) -> Image.Image | None:
    size = layer.size
    if kind == "glow":
        alpha = layer.getchannel("A").filter(ImageFilter.MaxFilter(9)).filter(ImageFilter.GaussianBlur(7))
        halo = Image.new("RGBA", size, (*glow, 0))
        halo.putalpha(alpha.point(lambda v: min(255, round(v * 1.6))))
        return halo
    if kind == "trail":
        out = Image.new("RGBA", size, (0, 0, 0, 0))
        step = max(6, round((bbox[2] - bbox[0]) * 0.16))
        alpha = layer.getchannel("A")
        for k, strength in ((3, 0.14), (2, 0.26), (1, 0.42)):
            ghost = layer.copy()
            ghost.putalpha(alpha.point(lambda v, s=strength: round(v * s)))
            out.alpha_composite(ImageChops.offset(ghost, -facing * step * k, 0))
        return out
    return None


def _effect_over(kind: str, size: int, bbox: tuple[int, int, int, int], facing: int,
                 rng: random.Random) -> Image.Image | None:
    x0, y0, x1, y1 = bbox
    w, h = x1 - x0, y1 - y0
    over = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    d = ImageDraw.Draw(over)
    if kind == "speed_lines":
        back = _behind(facing, bbox)
        lw = max(2, round(h * 0.025))
        for k in range(4):
            y = y0 + h * (0.2 + 0.2 * k)
            start = back - facing * max(3, w * 0.04)
            length = w * rng.uniform(0.25, 0.45)
            d.line((start, y, start - facing * length, y), fill=(45, 45, 55, 255), width=lw)
        return over
    if kind == "sparkles":
        for k in range(6):
            angle = 2 * math.pi * k / 6 + rng.uniform(-0.3, 0.3)
            cx = (x0 + x1) / 2 + math.cos(angle) * w * 0.55
            cy = (y0 + y1) / 2 + math.sin(angle) * h * 0.55
            r = max(4.0, min(w, h) * rng.uniform(0.07, 0.11))
            pts = []
            for j in range(8):
                t = math.pi * j / 4
                rr = r if j % 2 == 0 else r * 0.3
                pts.append((cx + math.sin(t) * rr, cy - math.cos(t) * rr))
            d.polygon(pts, fill=(255, 240, 120, 255), outline=(90, 70, 20, 255))
        return over
    if kind == "steam":
        for k in range(3):
            cx = x0 + w * (0.3 + 0.2 * k)
            pts = [(cx + math.sin(t / 3 + k) * w * 0.05, y0 - 2 - t * h * 0.03) for t in range(12)]
            d.line(pts, fill=(120, 120, 130, 255), width=max(4, round(w * 0.035)), joint="curve")
            d.line(pts, fill=(250, 250, 250, 255), width=max(2, round(w * 0.02)), joint="curve")
        return over
    return None


# =============================================================================== backgrounds

def _background(kind: str, size: int, horizon: int, rng: random.Random) -> Image.Image:
    S, hz = size, horizon
    img = Image.new("RGB", (S, S), (150, 200, 240))
    d = ImageDraw.Draw(img)

    def sky(top: RGB, bottom: RGB) -> None:
        for y in range(0, max(1, hz)):
            d.line((0, y, S, y), fill=_mix(top, bottom, y / max(1, hz)))

    if kind == "plain":
        color = rng.choice(((236, 232, 222), (222, 232, 240), (238, 226, 232), (226, 238, 226), (240, 236, 214)))
        d.rectangle((0, 0, S, S), fill=color)
        d.rectangle((0, hz, S, S), fill=_mix(color, (120, 110, 100), 0.15))
    elif kind == "brick_wall":
        d.rectangle((0, 0, S, hz), fill=(200, 190, 178))
        bh, bw = 12, 26
        for j, y in enumerate(range(0, hz, bh)):
            for x in range(-bw + (bw // 2) * (j % 2), S, bw):
                d.rectangle((x + 1, y + 1, x + bw - 2, min(hz, y + bh - 2)),
                            fill=rng.choice(((165, 72, 52), (150, 64, 46), (178, 86, 60))))
        d.rectangle((0, hz, S, S), fill=(160, 156, 150))
    elif kind == "beach":
        sky((110, 170, 235), (200, 230, 250))
        d.ellipse((S * 0.75, S * 0.06, S * 0.9, S * 0.21), fill=(255, 220, 90))
        sea_top = max(0, hz - round(S * 0.09))
        d.rectangle((0, sea_top, S, hz), fill=(50, 120, 190))
        for x in range(0, S, 24):
            d.arc((x, sea_top + 4, x + 16, sea_top + 12), 180, 360, fill=(235, 245, 255), width=2)
        d.rectangle((0, hz, S, S), fill=(236, 212, 150))
        for _ in range(40):
            x, y = rng.uniform(0, S), rng.uniform(hz, S)
            d.point((x, y), fill=(200, 170, 110))
    elif kind == "field":
        sky((110, 170, 235), (205, 230, 250))
        for _ in range(3):
            cx, cy = rng.uniform(0, S), rng.uniform(10, max(12, hz * 0.5))
            for dx in (-14, 0, 14):
                d.ellipse((cx + dx - 14, cy - 9, cx + dx + 14, cy + 9), fill=(250, 250, 252))
        d.rectangle((0, hz, S, S), fill=(110, 180, 80))
        for _ in range(60):
            x, y = rng.uniform(0, S), rng.uniform(hz + 3, S)
            d.line((x, y, x + 2, y - 5), fill=(70, 140, 50), width=1)
    elif kind == "city":
        sky((160, 190, 225), (220, 225, 235))
        x = -5
        while x < S:
            bw, bh = rng.randint(22, 40), rng.randint(40, 130)
            shade = rng.choice(((120, 125, 140), (100, 105, 125), (140, 140, 150)))
            d.rectangle((x, hz - bh, x + bw, hz), fill=shade)
            for wy in range(hz - bh + 6, hz - 6, 10):
                for wx in range(x + 4, x + bw - 4, 8):
                    d.rectangle((wx, wy, wx + 3, wy + 4), fill=(240, 230, 160))
            x += bw + rng.randint(1, 6)
        d.rectangle((0, hz, S, S), fill=(110, 110, 115))
        for xs in range(0, S, 30):
            d.rectangle((xs, hz + (S - hz) // 2, xs + 14, hz + (S - hz) // 2 + 2), fill=(240, 240, 240))
    elif kind == "night":
        sky((15, 20, 55), (40, 50, 100))
        for _ in range(45):
            x, y = rng.uniform(0, S), rng.uniform(0, max(1, hz - 4))
            r = rng.choice((0.8, 1.0, 1.6))
            d.ellipse((x - r, y - r, x + r, y + r), fill=(255, 255, 230))
        mx, my = S * 0.2, S * 0.14
        d.ellipse((mx - 16, my - 16, mx + 16, my + 16), fill=(250, 245, 210))
        d.ellipse((mx - 8, my - 20, mx + 22, my + 12), fill=(25, 30, 70))
        d.rectangle((0, hz, S, S), fill=(30, 50, 45))
    elif kind == "snow":
        sky((190, 215, 235), (230, 240, 248))
        for cx in (S * 0.2, S * 0.7):
            d.ellipse((cx - 90, hz - 30, cx + 90, hz + 60), fill=(248, 250, 255), outline=(210, 220, 235))
        d.rectangle((0, hz + 10, S, S), fill=(248, 250, 255))
        for _ in range(50):
            x, y = rng.uniform(0, S), rng.uniform(0, S)
            d.ellipse((x - 1.5, y - 1.5, x + 1.5, y + 1.5), fill=(255, 255, 255), outline=(200, 210, 225))
    elif kind == "forest":
        sky((140, 190, 230), (210, 232, 245))
        for row, shade in ((0, (40, 100, 60)), (1, (30, 80, 45))):
            x = -10 + row * 12
            while x < S + 10:
                tw, th = rng.randint(22, 32), rng.randint(45, 80) - row * 10
                base = hz + row * 6
                d.polygon([(x, base), (x + tw, base), (x + tw / 2, base - th)], fill=shade)
                d.rectangle((x + tw / 2 - 2, base, x + tw / 2 + 2, base + 5), fill=(90, 60, 35))
                x += tw - 4
        d.rectangle((0, hz + 10, S, S), fill=(95, 150, 70))
    elif kind == "mountains":
        sky((120, 175, 230), (210, 230, 245))
        for cx, peak, half in ((S * 0.25, 0.55, 0.32), (S * 0.65, 0.7, 0.38), (S * 0.95, 0.5, 0.28)):
            top = hz - S * peak * 0.55
            d.polygon([(cx - S * half, hz), (cx + S * half, hz), (cx, top)], fill=(110, 120, 145))
            cap = 0.3
            d.polygon([(cx - S * half * cap, top + (hz - top) * cap), (cx + S * half * cap, top + (hz - top) * cap),
                       (cx, top)], fill=(245, 248, 252))
        d.rectangle((0, hz, S, S), fill=(120, 165, 90))
    elif kind == "kitchen":
        d.rectangle((0, 0, S, hz), fill=(238, 236, 228))
        t = 20
        for x in range(0, S, t):
            d.line((x, 0, x, hz), fill=(180, 185, 190), width=1)
        for y in range(0, hz, t):
            d.line((0, y, S, y), fill=(180, 185, 190), width=1)
        d.rectangle((0, hz, S, hz + 8), fill=(150, 110, 70))
        d.rectangle((0, hz + 8, S, S), fill=(190, 150, 105))
    else:
        raise KeyError(kind)
    return img


# =============================================================================== whole-image passes

def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


@lru_cache(maxsize=8)
def _keystone_coeffs(size: int, k: float) -> tuple[float, ...]:
    """PERSPECTIVE coefficients narrowing the top (k < 0, low angle) or the bottom (k > 0)."""
    S, q = float(size), abs(k) * size
    src = [(0, 0), (S, 0), (S, S), (0, S)]
    dst = [(q, 0), (S - q, 0), (S, S), (0, S)] if k < 0 else [(0, 0), (S, 0), (S - q, S), (q, S)]
    a, b = [], []
    for (xs, ys), (xd, yd) in zip(src, dst):
        a.append([xd, yd, 1, 0, 0, 0, -xs * xd, -xs * yd])
        b.append(xs)
        a.append([0, 0, 0, xd, yd, 1, -ys * xd, -ys * yd])
        b.append(ys)
    return tuple(_solve(a, b))


def _lighting(img: Image.Image, kind: str) -> Image.Image:
    if kind == "bright":
        return ImageEnhance.Contrast(ImageEnhance.Brightness(img).enhance(1.18)).enhance(1.06)
    if kind == "dim":
        return ImageEnhance.Brightness(img).enhance(0.5)
    if kind == "warm":
        warm = ImageChops.multiply(img, Image.new("RGB", img.size, (255, 200, 130)))
        return ImageEnhance.Brightness(Image.blend(img, warm, 0.65)).enhance(1.08)
    if kind == "spotlight":
        ring = Image.radial_gradient("L").resize(img.size).point(lambda v: min(255, max(0, round((v - 60) * 1.9))))
        lit = ImageEnhance.Brightness(img).enhance(1.12)
        dark = ImageEnhance.Brightness(img).enhance(0.28)
        return Image.composite(dark, lit, ring)
    raise KeyError(kind)


def _tone(img: Image.Image, kind: str) -> Image.Image:
    if kind == "sepia":
        return ImageOps.colorize(ImageOps.grayscale(img), (40, 26, 12), (255, 242, 205), mid=(165, 125, 85))
    if kind == "mono":
        return ImageOps.grayscale(img).convert("RGB")
    if kind == "cool":
        cool = ImageChops.multiply(img, Image.new("RGB", img.size, (150, 185, 255)))
        return Image.blend(Image.blend(img, cool, 0.7), Image.new("RGB", img.size, (60, 100, 200)), 0.12)
    if kind == "pastel":
        return Image.blend(ImageEnhance.Color(img).enhance(0.8), Image.new("RGB", img.size, (255, 255, 255)), 0.38)
    if kind == "vivid":
        return ImageEnhance.Contrast(ImageEnhance.Color(img).enhance(1.7)).enhance(1.08)
    raise KeyError(kind)


def _style(img: Image.Image, kind: str, rng: random.Random) -> Image.Image:
    S = img.width
    if kind == "flat":
        return img
    if kind == "pixel":
        block = 3  # no palette reduction: it would shift hues that grounding phrases name
        small = img.resize((-(-S // block), -(-S // block)), Image.Resampling.BOX)
        small = ImageOps.posterize(small, 5)
        return small.resize((small.width * block, small.height * block), Image.Resampling.NEAREST).crop((0, 0, S, S))
    if kind == "painterly":
        out = img.filter(ImageFilter.ModeFilter(3))  # small: larger windows erase faces
        strokes = _noise(rng, S // 6, S // 2).resize((S, S), Image.Resampling.BICUBIC).rotate(
            35, resample=Image.Resampling.BILINEAR, expand=False)
        out = Image.composite(ImageEnhance.Brightness(out).enhance(0.8), out, strokes.point(lambda v: v // 3))
        light = _noise(rng, S // 8, S // 3).resize((S, S), Image.Resampling.BICUBIC).rotate(
            -50, resample=Image.Resampling.BILINEAR, expand=False)
        return Image.composite(ImageEnhance.Brightness(out).enhance(1.15), out, light.point(lambda v: v // 4))
    if kind == "watercolor":
        soft = img.filter(ImageFilter.GaussianBlur(1.1))
        soft = Image.blend(soft, Image.new("RGB", img.size, (255, 255, 255)), 0.12)
        paper = _noise(rng, S // 4, S // 4).resize((S, S), Image.Resampling.BICUBIC).point(lambda v: 236 + v // 14)
        soft = ImageChops.multiply(soft, Image.merge("RGB", (paper, paper, paper)))
        edges = ImageOps.grayscale(img).filter(ImageFilter.FIND_EDGES).point(lambda v: min(110, v))
        pigment = Image.new("RGB", img.size, (70, 60, 70))
        return Image.composite(pigment, soft, edges.filter(ImageFilter.GaussianBlur(0.8)))
    if kind == "ink":  # the contours are drawn with the figures (render_scene)
        return ImageEnhance.Contrast(img).enhance(1.1)
    raise KeyError(kind)


# =============================================================================== rendering a plan

def _place(world: World, e: dict, anchors: list[dict], units: list[float]) -> list[float]:
    """The box an entity is fitted into: a slot box, or relative to the entity it belongs to."""
    place = e["place"]
    if place["mode"] == "slot":
        return list(place["box"])
    of = place["of"]
    fig = world.figures[e["figure"]]
    aspect = fig["aspect"] * _shape_sx(fig["category"], e.get("shape"))
    if place["mode"] == "held":
        hx, hy = anchors[of]["hand"]
        h = units[of] * (0.6 if e["figure"] in ("balloon", "umbrella") else 0.34)
        w = h * aspect
        grip = fig.get("hold", "center")
        top = {"bottom": hy - h * 0.97, "top": hy - h * 0.03}.get(grip, hy - h / 2)
        return [hx - w / 2, top, hx + w / 2, top + h]
    if place["mode"] == "worn":
        if fig.get("wear") == "neck":
            nx, ny, half = anchors[of]["neck"]
            w = half * 2.7
            return [nx - w / 2, ny - 0.12 * w, nx + w / 2, ny + 0.88 * w]
        hx, hy, r = anchors[of]["head"]
        half_units, bottom_v, drop = {"beanie": (0.46, 0.92, -0.3), "cap": (0.44, 0.88, -0.25),
                                      "tophat": (0.42, 0.92, -0.5)}[e["figure"]]
        unit = 1.12 * r / half_units
        bottom = hy + drop * r
        top = bottom - bottom_v * unit
        w = unit * aspect
        return [hx - w / 2, top, hx + w / 2, top + unit]
    if place["mode"] == "on":
        x0, x1, ty = anchors[of]["top"]
        base = world.figures[anchors[of]["figure"]]
        h = units[of] * (0.5 if base["category"] == "Transportation" else 0.42)
        w = max(x1 - x0, h * aspect)
        mid = (x0 + x1) / 2
        return [mid - w / 2, ty - h, mid + w / 2, ty + 1]
    raise KeyError(place["mode"])


def render_scene(render: dict[str, Any]) -> tuple[Image.Image, dict[str, Any]]:
    """Draw a scene from its plan; returns the RGB image and the plan completed with boxes.

    ``render`` is a record's ``render`` field or a plan from :func:`plan_scene`. The
    output adds, per entity, ``box`` (the box it was fitted into), ``unit`` (its drawn
    height in pixels), ``bbox`` (its visible pixels, after the viewpoint's keystone) and
    ``rgb`` (its resolved colors); those keys are ignored on input and recomputed, so the
    same plan always gives the same pixels.
    """
    world = _world()
    render = copy.deepcopy(render)
    S = int(render["size"])
    if S != world.size:
        raise ValueError(f"render size {S} differs from the world's canvas {world.size}")
    bg = render["background"]
    scene = _background(bg["kind"], S, int(bg["horizon"]), random.Random(bg["seed"])).convert("RGBA")
    keystone = float(world.viewpoints[render["viewpoint"]].get("keystone", 0.0))
    anchors: list[dict] = []
    units: list[float] = []
    layers: list[Image.Image] = []
    for e in render["entities"]:
        box = _place(world, e, anchors, units)
        layer, anchor, unit = _draw_entity(world, e, box)
        anchor["figure"] = e["figure"]
        anchors.append(anchor)
        units.append(unit)
        if keystone:
            layer = layer.transform((S, S), Image.Transform.PERSPECTIVE, _keystone_coeffs(S, keystone),
                                    resample=Image.Resampling.BICUBIC)
        e["box"] = [round(v, 1) for v in box]
        e["unit"] = round(unit, 1)
        look = Look(world, e)
        e["rgb"] = {"color": list(look.main), "second": list(look.second), "accent": list(look.accent),
                    "surface": list(look.surface)}
        bbox = layer.getchannel("A").point(lambda v: 255 if v >= 24 else 0).getbbox() or (0, 0, 1, 1)
        e["bbox"] = list(bbox)
        layers.append(layer)
    inked = render["style"] == "ink"
    for e, layer in zip(render["entities"], layers):
        effect = e.get("effect")
        bbox = tuple(e["bbox"])
        facing = -1 if e.get("orientation") == "left" or (e.get("mirror") and e.get("orientation") != "right") else 1
        if effect:
            glow = (120, 220, 255) if e.get("color") in ("yellow", "orange") else (255, 226, 80)
            under = _effect_under(effect, layer, bbox, facing, glow)  # type: ignore[arg-type]
            if under is not None:
                scene.alpha_composite(under)
        if inked:  # bold ink contours around every figure
            contour = Image.new("RGBA", (S, S), (20, 18, 22, 0))
            contour.putalpha(layer.getchannel("A").filter(ImageFilter.MaxFilter(7)))
            scene.alpha_composite(contour)
        scene.alpha_composite(layer)
        if effect:
            over = _effect_over(effect, S, bbox, facing, random.Random(e["seed"] + 1))  # type: ignore[arg-type]
            if over is not None:
                scene.alpha_composite(over)
    img = scene.convert("RGB")
    post = random.Random(render["post_seed"])
    if render.get("lighting"):
        img = _lighting(img, render["lighting"])
    img = _style(img, render["style"], post)
    if render.get("tone"):  # last, so that e.g. black and white stays gray whatever the style drew
        img = _tone(img, render["tone"])
    return img, render


# =============================================================================== planning

def _slot_boxes(layout: str, count: int, size: int, viewpoint: dict) -> list[list[float]]:
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


def _options(world: World, e: dict, dim: str) -> list[Any]:
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
        if e.get(dim) is not None and e[dim] not in _options(world, e, dim):
            return False
    feats = set(e.get("features", []))
    if not feats <= set(_options(world, e, "features")) or any(pair <= feats for pair in _CONFLICTS):
        return False
    return not (e.get("pattern") and e.get("material"))


def _pick_features(world: World, rng: random.Random, e: dict) -> list[str]:
    count = rng.choices((0, 1, 2), weights=world.scene["n_features"])[0]
    out: list[str] = []
    for f in rng.sample(_options(world, e, "features"), k=len(_options(world, e, "features"))):
        if len(out) < count and not any(pair <= set(out) | {f} for pair in _CONFLICTS):
            out.append(f)
    return sorted(out)


def _second_color(world: World, rng: random.Random, main: str) -> str:
    m = world.colors[main]
    far = [c for c, v in world.colors.items() if c != main and abs(_luma(v) - _luma(m)) > 70]
    return rng.choice(far or [c for c in world.colors if c != main])


def _new_entity(world: World, rng: random.Random, name: str) -> dict:
    fig = world.figures[name]
    cat = fig["category"]
    sc = world.scene
    e: dict[str, Any] = {"figure": name, "category": cat, "noun": fig["noun"], "seed": rng.getrandbits(31)}
    e["color"] = rng.choice(_options(world, e, "color"))
    e["second"] = _second_color(world, rng, e["color"])
    e["accent"] = rng.choice([c for c in world.colors if c != e["color"]])
    if cat in world.humanoid:
        e["skin"] = list(rng.choice(world.skin))
        e["hair_color"] = rng.choice(list(world.hair))
        e["pants"] = list(rng.choice(world.pants))
    if fig.get("orientations"):
        e["orientation"] = rng.choice(fig["orientations"])
    if fig.get("poses"):
        e["pose"] = rng.choice(_options(world, e, "pose"))
    if cat in world.humanoid:
        e["hairstyle"] = rng.choice(_options(world, e, "hairstyle"))
        e["features"] = _pick_features(world, rng, e)
        e["expression"] = rng.choice(_options(world, e, "expression"))
    if cat == "Text":
        e["word"] = rng.choice(world.words)
        e["font"] = rng.choice(list(world.fonts))
    if fig.get("design") and rng.random() < sc["p_design"]:
        e["design"] = {"motif": rng.choice(list(world.motifs))}
        e["noun"] = fig.get("design_noun", fig["noun"])
    else:
        roll = rng.random()
        patterns, materials = _options(world, e, "pattern"), _options(world, e, "material")
        if patterns and roll < sc["p_pattern"]:
            e["pattern"] = rng.choice(patterns)
        elif materials and roll > 1 - sc["p_material"]:
            e["material"] = rng.choice(materials)
        damage = _options(world, e, "damage")
        if damage and rng.random() < sc["p_damage"]:
            e["damage"] = rng.choice(damage)
    if fig.get("shapes") and rng.random() < sc["p_shape"]:
        e["shape"] = rng.choice(list(fig["shapes"]))
    effects = _options(world, e, "effect")
    if effects and rng.random() < sc["p_effect"]:
        e["effect"] = rng.choice(effects)
    uses = (["attach"] if fig.get("attach") else []) + (["ip"] if e.get("design") else [])
    e["usable_as"] = uses
    return e


def _set(world: World, e: dict, dim: str, value: Any) -> None:
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
    if e.get("damage") and e["damage"] not in _options(world, e, "damage"):
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
        if len(_options(world, e, dim)) >= 2:
            dims.append(dim)
    rng.shuffle(dims)
    for dim in dims:
        for _ in range(8):
            v1, v2 = rng.sample(_options(world, e, dim), 2)
            a, b = copy.deepcopy(e), copy.deepcopy(e)
            _set(world, a, dim, v1)
            _set(world, b, dim, v2)
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

    def __call__(self, ok: Callable[[str], bool] = lambda name: True) -> str:
        world, rng = self.world, self.rng
        cats = {c: w for c, w in world.category_weights.items() if any(ok(f) for f in world.figures_of(c))}
        cat = _weighted(rng, cats)
        if self.hint in cats:
            cat, self.hint = self.hint, None
        return _weighted(rng, {f: world.figures[f].get("weight", 1.0) for f in world.figures_of(cat) if ok(f)})


@cache
def _category_cycle(seed: int) -> tuple[str, ...]:
    names = sorted(_world().category_weights)
    _rng(seed, "categories").shuffle(names)
    return tuple(names)


def _compound(world: World, rng: random.Random, pick: _Picker, kind: str,
              box: list[float]) -> tuple[list[dict], dict]:
    """Two related entities filling one slot: (entities, relation with local indexes)."""
    figs = world.figures
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    if kind in ("holding", "wearing"):
        who = _new_entity(world, rng, pick(lambda f: figs[f]["category"] in world.humanoid))
        if kind == "holding":
            item = _new_entity(world, rng, pick(lambda f: "hold" in figs[f]))
            who["pose"] = "reaching"
            if who.get("orientation") == "front":
                who["mirror"] = rng.random() < 0.5
            item_left = who.get("orientation") == "left" or bool(who.get("mirror"))
            who["place"] = {"mode": "slot", "box": [round(x1 - 0.75 * w, 1), y0, x1, y1] if item_left
                            else [x0, y0, round(x0 + 0.75 * w, 1), y1]}
            item["place"] = {"mode": "held", "of": 0}
        else:
            item = _new_entity(world, rng, pick(lambda f: "wear" in figs[f]))
            item["worn"] = True
            if figs[item["figure"]]["wear"] == "head":
                who["wears"] = "head"
                if who["hairstyle"] not in _options(world, who, "hairstyle"):
                    who["hairstyle"] = rng.choice(_options(world, who, "hairstyle"))
                item.pop("shape", None)
            item["mirror"] = who.get("orientation") == "left"
            who["place"] = {"mode": "slot", "box": box}
            item["place"] = {"mode": "worn", "of": 0}
        return [who, item], {"type": kind, "subject": 0, "object": 1}
    if kind == "on_top":
        base = _new_entity(world, rng, pick(lambda f: bool(figs[f].get("platform"))))
        top = _new_entity(world, rng, pick(lambda f: bool(figs[f].get("topper"))))
        if top["category"] == "Animal":
            calm = [p for p in ("standing", "sitting", "lying", "perched") if p in figs[top["figure"]].get("poses", [])]
            top["pose"] = rng.choice(calm)
        top.pop("effect", None) if top.get("effect") in ("speed_lines", "trail") else None
        base.pop("effect", None) if base.get("effect") in ("speed_lines", "trail") else None
        base["place"] = {"mode": "slot", "box": [x0, round(y0 + 0.38 * h, 1), x1, y1]}
        top["place"] = {"mode": "on", "of": 0}
        return [base, top], {"type": "on_top", "subject": 1, "object": 0}
    if kind == "in_front":
        back = _new_entity(world, rng, pick(lambda f: figs[f]["category"] == "Structure"))
        front = _new_entity(world, rng, pick(lambda f: bool(figs[f].get("front"))))
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
    first = _new_entity(world, rng, pick(ok))
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
            if first.get(dim) is not None and first[dim] not in _options(world, first, dim):
                first[dim] = rng.choice(_options(world, first, dim))
    distractor = None
    pair = _distract(world, rng, first, colors_ok, fixed) if distract else None
    if pair is not None:
        a, b, dim = pair
        distractor = {"entities": [0, 1], "attribute": dim}
    else:
        a = first
        b = _new_entity(world, rng, pick(ok))
        if kind == "chasing":
            b["pose"], b["orientation"] = "running", first["orientation"]
    if kind == "facing":
        b["orientation"] = "left"
        for dim in ("expression", "pose"):
            if b.get(dim) is not None and b[dim] not in _options(world, b, dim):
                b[dim] = rng.choice(_options(world, b, dim))
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
    world = _world()
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
    boxes = _slot_boxes(layout, count, world.size, vp)
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
            e = _new_entity(world, rng, pick(_fits(world, boxes[slot])))
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
        "world": _world_hash()[:12],
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


# =============================================================================== tags

def _article(noun: str) -> str:
    return ("an " if noun[0].lower() in "aeiou" else "a ") + noun


_PLURALS = {"person": "people", "child": "children", "fish": "fish", "bus": "buses"}


def _plural(noun: str) -> str:
    return _PLURALS.get(noun, noun + "s")


def _relation_tag(world: World, rel: dict, entities: list[dict]) -> str:
    a, b = entities[rel["subject"]]["noun"], entities[rel["object"]]["noun"]
    if a == b:
        if rel["type"] == "facing":
            return f"two {_plural(a)} facing each other"
        return world.relations[rel["type"]]["tag"].format(a=_article(a), b="another " + b)
    return world.relations[rel["type"]]["tag"].format(a=_article(a), b=_article(b))


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


def _core(world: World, e: dict, must: set[str], colors_ok: bool, limit: int) -> str:
    """Adjectives + noun + modifiers naming the entity, always including the ``must`` dims."""
    fig = world.figures[e["figure"]]
    human = e["category"] in world.humanoid
    material = e.get("material")
    color_shows = colors_ok and (material is None or world.materials[material].get("keeps_color"))
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
            post["shirt"] = f"in {_article(' '.join(shirt + ['shirt']))}"
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


def _tag_dict(world: World, e: dict) -> TagDict:
    def one(table: dict, key: str) -> tuple[str, ...]:
        return (table[e[key]]["tag"],) if e.get(key) else ()

    fig = world.figures[e["figure"]]
    fine = e.get("unit", FINE_MIN_PX) >= FINE_MIN_PX
    return TagDict(
        appearance=Appearance(pattern_texture=one(world.patterns, "pattern"), material=one(world.materials, "material"),
                              damage_wear=one(world.damage, "damage"), font=one(world.fonts, "font")),
        form=Form(hairstyle=one(world.hairstyles, "hairstyle"),
                  facial_features=tuple(world.features[f]["tag"] for f in e.get("features", [])) if fine else (),
                  shape=(fig["shapes"][e["shape"]],) if e.get("shape") else ()),
        dynamics=Dynamics(action_pose=one(world.poses, "pose"),
                          expression=one(world.expressions, "expression") if fine else (),
                          orientation=one(world.orientations, "orientation"),
                          motion_effect=one(world.effects, "effect")),
    )


def _record(world: World, render: dict, image_id: str, path: str) -> TaggedImage:
    descs = _describe(world, render)
    ents = []
    for e, desc in zip(render["entities"], descs):
        e["desc"] = desc
        ents.append(Entity(category=e["category"], ent_desc=desc, tag_dict=_tag_dict(world, e),
                           bbox=tuple(e["bbox"]), usable_as=tuple(e["usable_as"])))
    bg = world.backgrounds[render["background"]["kind"]].get("tag")
    rel_tags = tuple(dict.fromkeys(_relation_tag(world, r, render["entities"]) for r in render["relations"]))
    glob = GlobalTag(
        style=(world.styles[render["style"]]["tag"],),
        lighting=(world.lighting[render["lighting"]]["tag"],) if render["lighting"] else (),
        camera_viewpoint=(world.viewpoints[render["viewpoint"]]["tag"],),
        layout_sequence=(world.layouts[render["layout"]]["tag"],),
        color_tone=(world.tones[render["tone"]]["tag"],) if render["tone"] else (),
        inter_instance_relation=rel_tags,
    )
    return TaggedImage(id=image_id, path=path, width=render["size"], height=render["size"], source="synthetic",
                       license="CC0-1.0", ent_list=tuple(ents), background=(bg,) if bg else (), global_tag=glob,
                       render=render)


# =============================================================================== public API

@cache
def _world_hash() -> str:
    """What the pixels depend on: the world file, this renderer and Pillow's version."""
    digest = hashlib.sha256()
    digest.update(data_path("taxonomy", SYNTH_FILE).read_bytes())
    digest.update(b"\0" + Path(__file__).read_bytes())
    digest.update(b"\0" + PIL.__version__.encode())
    return digest.hexdigest()


def image_id(index: int) -> str:
    return f"syn-{index:04d}"


def synthesize_image(index: int, *, seed: int = DEFAULT_SEED) -> tuple[Image.Image, TaggedImage]:
    """Image ``index`` of the synthetic library of ``seed`` and its tagged record."""
    world = _world()
    plan = json.loads(json.dumps(plan_scene(seed, index)))  # exactly what the record will hold
    img, render = render_scene(plan)
    ident = image_id(index)
    return img, _record(world, render, ident, f"images/{ident}.png")


def _save_png(img: Image.Image, path: Path) -> None:
    img.save(path, format="PNG", optimize=False, compress_level=6)  # no metadata chunks, fixed options


def synthesize_library(out: Path, *, n: int = DEFAULT_N, seed: int = DEFAULT_SEED,
                       name: str = DEFAULT_NAME) -> LibraryInfo:
    """Render ``n`` synthetic scenes into a new library folder ``out`` (written atomically).

    The same ``n`` and ``seed`` give byte-identical files on the same Pillow version.
    """
    if n < 0:
        raise TraceError(f"n must be >= 0, got {n}")
    with staged_output(Path(out)) as root:
        (root / "images").mkdir()
        records = []
        for index in range(n):
            img, record = synthesize_image(index, seed=seed)
            _save_png(img, root / record.path)
            records.append(record)
        info = write_library(root, name, records)
    return info


def cache_root() -> Path:
    """``$TRACEBENCH_CACHE``, else ``$XDG_CACHE_HOME/tracebench``, else ``~/.cache/tracebench``."""
    if os.environ.get("TRACEBENCH_CACHE"):
        return Path(os.environ["TRACEBENCH_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "tracebench"
    return Path.home() / ".cache" / "tracebench"


def _complete(folder: Path) -> bool:
    return (folder / INFO_FILE).is_file() and (folder / TAGS_FILE).is_file()


def default_library() -> Path:
    """The folder of the default synthetic library, built into the cache on first use.

    The folder name carries the tracebench version, n, seed and a hash of the world
    (taxonomy/synth.toml, the renderer, Pillow's version), so a changed world builds anew.
    Concurrent first uses are safe: each builds privately and renames into place; a
    process that finds the folder already there uses it.
    """
    root = cache_root()
    dest = root / f"synthetic-{__version__}-n{DEFAULT_N}-seed{DEFAULT_SEED}-{_world_hash()[:12]}"
    if _complete(dest):
        return dest
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=root))
    try:
        synthesize_library(work / "library", n=DEFAULT_N, seed=DEFAULT_SEED)
        try:
            os.rename(work / "library", dest)
        except OSError:
            if not _complete(dest):
                raise TraceError(f"{dest}: exists but is not a complete library; remove it and retry") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest
