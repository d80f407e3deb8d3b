"""The figure drawers and their registry, and how a figure is fitted into a box.

Each figure function draws one entity facing right with a Pen and returns anchors (pixel
positions other entities attach to): ``hand`` (a held item), ``head`` (x, y, r: a worn
hat), ``neck`` (x, y, half width: a worn scarf), ``top`` (x0, x1, y: something on top).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from ._draw import (HOLE, INK, LINE_W, MATERIAL_BASE, RGB, SURFACE, Pen, _contrast, _luma, _mix, _motif, _shape_pts,
                    lettering)

if TYPE_CHECKING:
    from ._world import World


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


# =============================================================================== fitting a figure into a box

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
