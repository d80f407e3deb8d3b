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
(the cached default library), :func:`synthesize_image`, :func:`plan_scene` and :func:`render_scene`.

The modules, each importing only those above it (``_figures`` names ``World`` in annotations only):

- ``_draw``: the pen (figure units), colors, patterns, materials, damage marks, lettering;
- ``_figures``: the figure drawers and their registry, fitting a figure into a box;
- ``_world``: ``taxonomy/synth.toml`` checked against the taxonomy, random streams, the world hash;
- ``_render``: drawing a plan: entities, effects, backgrounds, lighting, style and tone;
- ``_plan``: planning a scene: entities, attributes, distractors, placement, relations;
- ``_tags``: the record: grounding phrases, tag dicts, global tags;
- ``_build``: one image, a library folder, the cached default library.
"""

from __future__ import annotations

from ._build import DEFAULT_N, DEFAULT_SEED, cache_root, default_library, synthesize_image, synthesize_library
from ._plan import FINE_MIN_PX, plan_scene
from ._render import render_scene
from ._world import SYNTH_FILE

__all__ = [
    "DEFAULT_N",
    "DEFAULT_SEED",
    "FINE_MIN_PX",
    "SYNTH_FILE",
    "cache_root",
    "default_library",
    "plan_scene",
    "render_scene",
    "synthesize_image",
    "synthesize_library",
]
