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
For tools that plan scenes of their own (the synthetic generators of ``tracebench.zoo``): the
world (:func:`load_world`, :func:`world_hash`, ``RENDER_VERSION``) and the planner's helpers
:func:`new_entity`, :func:`entity_options`, :func:`set_attribute`, :func:`slot_boxes` and
:func:`relation_tag`.

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

from ...lazy import lazy_exports
from ._build import DEFAULT_N, DEFAULT_SEED, cache_root, default_library, synthesize_image, synthesize_library
from ._world import SYNTH_FILE, World, load_world, world_hash

# the planner and the renderer load on first use: finding the default library needs neither
_LAZY = {"FINE_MIN_PX": "_plan", "RENDER_VERSION": "_plan", "entity_options": "_plan", "new_entity": "_plan",
         "plan_scene": "_plan", "set_attribute": "_plan", "slot_boxes": "_plan", "render_scene": "_render",
         "relation_tag": "_tags"}


__getattr__, __dir__ = lazy_exports(__name__, globals(), {name: f".{module}" for name, module in _LAZY.items()})

__all__ = [
    "DEFAULT_N",
    "DEFAULT_SEED",
    "FINE_MIN_PX",
    "RENDER_VERSION",
    "SYNTH_FILE",
    "World",
    "cache_root",
    "default_library",
    "entity_options",
    "load_world",
    "new_entity",
    "plan_scene",
    "relation_tag",
    "render_scene",
    "set_attribute",
    "slot_boxes",
    "synthesize_image",
    "synthesize_library",
    "world_hash",
]
