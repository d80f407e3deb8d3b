"""Argument types shared by subcommands."""

from __future__ import annotations

import argparse

from ..formula._space import space_bounds

__all__ = ["slot_levels"]


def slot_levels(spec: str) -> tuple[int, ...]:
    """``3``, ``1-8``, ``2,4,6`` or a mix such as ``1-3,5`` -> sorted slot levels."""
    bounds = space_bounds()
    low, high = bounds.min_slot, bounds.max_slot
    levels: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                first, last = (int(p) for p in part.split("-", 1))
            else:
                first = last = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{spec!r} is not a slot list such as 3, 1-8 or 2,4,6") from None
        if first > last:
            raise argparse.ArgumentTypeError(f"range {part!r} runs backwards")
        if first < low or last > high:
            raise argparse.ArgumentTypeError(f"{part!r} is outside the slot levels {low}-{high}")
        levels.update(range(first, last + 1))
    return tuple(sorted(levels))
