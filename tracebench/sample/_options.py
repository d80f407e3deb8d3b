"""What ``trace sample`` is asked for, checked once when the record is made."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceError
from ..formula import space_bounds
from ._clutter import ClutterSpec, check_spec
from ._quotas import quotas

__all__ = ["SampleOptions"]


@dataclass(frozen=True)
class SampleOptions:
    """A benchmark to sample (:func:`~tracebench.sample.sample_benchmark`).

    ``slots``: the slot levels. ``per_slot``: cases a level (None: templates/quotas.toml's,
    180; the record holds the number). ``library``: a tagged library folder (None: the shipped
    synthetic one). ``applications``: True, each application's cases of
    templates/applications.toml in proportion to ``per_slot`` (20 at the default 180); a
    number, that many cases each; False (or 0), none. ``strict``: a library gap, or a case
    that cannot be bound, is an error instead of being left out or replaced. ``jobs``:
    processes making cases (the output is the same bytes for any number). ``clutter``:
    distractor references per case and the mode; without it the benchmark is that of a
    tracebench without clutter, byte for byte.

    Made with a setting that means nothing, it raises a :class:`TraceError` naming the option.
    """

    slots: tuple[int, ...]
    per_slot: int | None = None
    seed: int = 0
    library: Path | None = None
    applications: bool | int = True
    strict: bool = False
    jobs: int = 1
    clutter: ClutterSpec = ClutterSpec()

    def __post_init__(self) -> None:
        check_spec(self.clutter)
        object.__setattr__(self, "slots", tuple(self.slots))
        if self.per_slot is None:
            object.__setattr__(self, "per_slot", quotas().per_slot)
        if self.library is not None:
            object.__setattr__(self, "library", Path(self.library))
        _check_counts(self.per_slot, self.applications)
        _check_slots(self.slots)


def _check_counts(per_slot: int, applications: bool | int) -> None:
    if per_slot < 1:
        raise TraceError(f"--per-slot: {per_slot} must be at least 1")
    if applications is not True and applications is not False and (not isinstance(applications, int)
                                                                    or applications < 0):
        raise TraceError(f"--per-application: {applications!r} must be a whole number, 0 or more")


def _check_slots(slots: tuple[int, ...]) -> None:
    bounds = space_bounds()
    bad = [s for s in slots if not bounds.min_slot <= s <= bounds.max_slot]
    if bad:
        raise TraceError(f"--slots: {bad} outside the slot levels {bounds.min_slot}-{bounds.max_slot}")
