"""Coverage statistics of a library: what a benchmark can be sampled from."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from ..taxonomy import taxonomy
from ._models import TaggedImage

__all__ = ["library_stats"]


def library_stats(images: Sequence[TaggedImage]) -> dict[str, Any]:
    """Counts per category, subtype and global tag, and the entities-per-image histogram.

    ``categories``: images holding at least one entity of the category; ``subtypes``:
    entities carrying the subtype; ``global``: images carrying the global subtype;
    ``usable_as``: entities usable whole as ``attach`` / ``ip``; ``background``: images
    with background tags.
    """
    tax = taxonomy()
    categories = Counter({c: 0 for c in tax.categories})
    subtypes = Counter({s.key: 0 for s in tax.entity_subtypes()})
    global_ = Counter({s.key: 0 for s in tax.global_subtypes()})
    usable = Counter({key: 0 for key, s in tax.special.items() if s.record == "usable_as"})
    per_image = Counter()
    for image in images:
        per_image[len(image.ent_list)] += 1
        for category in {e.category for e in image.ent_list}:
            categories[category] += 1
        for entity in image.ent_list:
            subtypes.update(entity.subtype_tags().keys())
            usable.update(entity.usable_as)
        global_.update(image.global_tags().keys())
    n = len(images)
    return {
        "images": n,
        "entities": sum(len(i.ent_list) for i in images),
        "categories": dict(categories),
        "subtypes": dict(subtypes),
        "global": dict(global_),
        "usable_as": dict(usable),
        "background": sum(1 for i in images if i.background),
        "multi_entity_share": round(sum(1 for i in images if len(i.ent_list) >= 2) / n, 4) if n else 0.0,
        "entities_per_image": {str(k): per_image[k] for k in sorted(per_image)},
    }
