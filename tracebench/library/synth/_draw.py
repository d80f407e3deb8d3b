"""Drawing primitives: the pen that draws figures in figure units, colors, patterns, materials,
damage marks and lettering."""

from __future__ import annotations

import math
import random
from functools import lru_cache
from typing import Any, Iterable, Iterator

from PIL import Image, ImageChops, ImageDraw, ImageFont, ImageOps

RGB = tuple[int, int, int]
INK: RGB = (34, 30, 38)
HOLE = (0, 0, 0, 0)  # a fill that cuts a transparent hole into a figure
SURFACE = "surface"  # a fill: the entity's main surface (gets its pattern, material and damage)
LINE_W = 0.014  # default outline width, in figure units


def max_filter(band: Image.Image, size: int) -> Image.Image:
    """``band.filter(ImageFilter.MaxFilter(size))`` of an L image, pixel for pixel, in a row pass
    and a column pass of shifted maxima (the square window is separable; the rank filter sorts
    every window, 20 times slower). Outside the image counts as 0, as the rank filter's repeated
    edge pixels never exceed the window's own maximum."""
    r = size // 2
    w, h = band.size
    rows = band
    for d in range(1, r + 1):
        rows = ImageChops.lighter(rows, band.crop((-d, 0, w - d, h)))
        rows = ImageChops.lighter(rows, band.crop((d, 0, w + d, h)))
    out = rows
    for d in range(1, r + 1):
        out = ImageChops.lighter(out, rows.crop((0, -d, w, h - d)))
        out = ImageChops.lighter(out, rows.crop((0, d, w, h + d)))
    return out


def _rgb(value: str) -> RGB:
    value = value.lstrip("#")
    return (int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16))


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
        self._shape("pieslice", self._box(u - ru, v - rv, u + ru, v + rv), fill, outline, width, start=s, end=e)

    def chord(self, u: float, v: float, ru: float, rv: float, start: float, end: float, fill: Any,
              outline: Any = True, width: float = LINE_W) -> None:
        s, e = self._angles(start, end)
        self._shape("chord", self._box(u - ru, v - rv, u + ru, v + rv), fill, outline, width, start=s, end=e)

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


def _gradient(w: int, h: int, profile: list[float]) -> Image.Image:
    """An L image whose columns follow ``profile`` (values 0..1), stretched."""
    row = Image.frombytes("L", (len(profile), 1), bytes(max(0, min(255, round(255 * p))) for p in profile))
    return row.resize((w, 1), Image.Resampling.BILINEAR).resize((w, h), Image.Resampling.NEAREST)


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
            if w >= 5 and h >= 5:  # the stitched edge, where there is room for it
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


def _spots(mask: Image.Image, rng: random.Random, count: int) -> Iterator[tuple[int, int]]:
    """Up to ``count`` points inside the surface, each found just before it is used; stops at the first miss."""
    for _ in range(count):
        spot = _inside(mask, rng)
        if spot is None:
            return
        yield spot


def _damage(kind: str, mask: Image.Image, scale: float, rng: random.Random) -> Image.Image:
    """Damage marks for a surface (``mask`` is the surface's crop); clipped by the caller."""
    w, h = mask.size
    over = Image.new("RGBA", (w, h), (0, 0, 0, 0))
    d = ImageDraw.Draw(over)
    p = max(5, scale * 0.1)
    lw = max(1, round(scale * 0.012))
    if kind == "cracks":
        for x, y in _spots(mask, rng, 3):
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
        for x, y in _spots(mask, rng, count):
            if kind == "moss":
                y = max(y, h * 0.55 + rng.uniform(0, h * 0.4))
            for _ in range(3):
                r = rng.uniform(0.35, 0.8) * p * (1.6 if kind == "stains" else 1.0)
                ox, oy = rng.uniform(-p * 0.4, p * 0.4), rng.uniform(-p * 0.4, p * 0.4)
                d.ellipse((x + ox - r, y + oy - r * 0.8, x + ox + r, y + oy + r * 0.8), fill=rng.choice(colors))
    elif kind == "scratches":
        for x, y in _spots(mask, rng, 6):
            a = rng.uniform(-0.6, 0.6) + math.pi / 4
            length = rng.uniform(0.8, 1.6) * p
            d.line((x, y, x + math.cos(a) * length, y + math.sin(a) * length), fill=(245, 245, 240, 255), width=1)
            d.line((x + 1, y + 1, x + 1 + math.cos(a) * length, y + 1 + math.sin(a) * length),
                   fill=(60, 60, 60, 160), width=1)
    elif kind == "patches":
        for x, y in _spots(mask, rng, 2):
            s = p * rng.uniform(0.9, 1.3)
            color = rng.choice(((230, 200, 90), (120, 170, 90), (200, 110, 110), (120, 140, 200)))
            d.rectangle((x - s, y - s, x + s, y + s), fill=(*color, 255), outline=(40, 40, 40, 255), width=1)
            for t in range(0, int(4 * s), 3):  # stitches
                k = t / (4 * s)
                d.point((x - s + 2 + (2 * s - 4) * min(1, k * 2), y - s + 2), fill=(250, 250, 250, 255))
                d.point((x - s + 2 + (2 * s - 4) * min(1, k * 2), y + s - 2), fill=(250, 250, 250, 255))
    elif kind == "holes":
        for x, y in _spots(mask, rng, 3):
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
    halo = max_filter(ink, 5)
    if font == "shadow":
        off = max(2, round(ink.height * 0.09))
        canvas = Image.new("L", (ink.width + off, ink.height + off), 0)
        shadow = canvas.copy()
        shadow.paste(ink, (off, off))
        ink_c = canvas.copy()
        ink_c.paste(ink, (0, 0))
        halo = max_filter(ImageChops.lighter(ink_c, shadow), 5)
        out += [(halo, "halo"), (shadow, "shadow"), (ink_c, "ink")]
    else:
        out += [(halo, "halo"), (ink, "ink")]
    return out
