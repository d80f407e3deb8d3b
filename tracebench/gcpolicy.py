"""Fewer garbage collections where a stage builds many objects that all live on.

Python's cyclic collector runs a young-generation pass every 700 net allocations and, every so
often, an old-generation pass over everything alive. Sampling a benchmark and planning
diagnostic trees allocate hundreds of thousands of small objects (ASTs, records, their
validators' dicts) that mostly live until the stage ends, so those passes find almost nothing
to free and cost a good part of the stage's time (``plan_trees`` on 175 cases: 0.635 s of CPU
before :func:`fewer_collections`, 0.509 s with it, ``bench/tree_planning.py --against``). Reference counting
still frees everything that is not in a cycle; the collector still runs, just less often, so
memory stays bounded when a stage streams (``trace sample`` of 100,000 cases).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["fewer_collections"]

YOUNG_THRESHOLD = 50_000  # net allocations between young passes (CPython's default: 700)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Within the block (or the function it decorates): what was alive before is frozen out of
    the collector's passes, and young passes run every :data:`YOUNG_THRESHOLD` allocations; both
    restored after. Nested uses keep the outer one's setting."""
    before = gc.get_threshold()
    if before[0] >= YOUNG_THRESHOLD:  # already inside one
        yield
        return
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
