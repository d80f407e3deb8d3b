"""Rendering a plan: drawing each entity, motion effects, backgrounds and the whole-image passes
(lighting, style, tone)."""

from __future__ import annotations

import copy
import math
import random
from functools import lru_cache
from typing import Any

from PIL import Image, ImageChops, ImageDraw, ImageEnhance, ImageFilter, ImageOps

from ._draw import RGB, Pen, _damage, _material, _mix, _noise, _pattern, max_filter
from ._figures import FIGURES, Look, _fit_box, _shape_sx
from ._world import World, load_world


# =============================================================================== drawing an entity

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
        alpha = max_filter(layer.getchannel("A"), 9).filter(ImageFilter.GaussianBlur(7))
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


_VISIBLE = [255 if v >= 24 else 0 for v in range(256)]  # alpha -> counted in an entity's bbox


def render_scene(render: dict[str, Any]) -> tuple[Image.Image, dict[str, Any]]:
    """Draw a scene from its plan; returns the RGB image and the plan completed with boxes.

    ``render`` is a record's ``render`` field or a plan from :func:`plan_scene`. The
    output adds, per entity, ``box`` (the box it was fitted into), ``unit`` (its drawn
    height in pixels), ``bbox`` (its visible pixels, after the viewpoint's keystone) and
    ``rgb`` (its resolved colors); those keys are ignored on input and recomputed, so the
    same plan always gives the same pixels.
    """
    world = load_world()
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
        bbox = layer.getchannel("A").point(_VISIBLE).getbbox() or (0, 0, 1, 1)
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
            contour.putalpha(max_filter(layer.getchannel("A"), 7))
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
