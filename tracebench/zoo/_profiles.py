"""Generator profiles: the named, combinable ways a synthetic generator fails.

A spec string lists failure modes separated by commas, e.g. ``"global-interference,noise:0.1"``;
``"perfect"`` alone is the generator that never fails. The order matters: when several modes
break one requirement, the first one listed is recorded as its cause. The load modes
(``load-global`` ..., ``taxonomy/zoo.toml``) break requirements with a probability; ``strain``
is all of them at once.
"""

from __future__ import annotations

import difflib

import math
from dataclasses import dataclass

from ..errors import TraceError
from ..taxonomy import taxonomy
from ._load import load_modes

__all__ = ["CONFUSION", "PARTIAL", "PROFILE_NAMES", "Failure", "Profile", "parse_profile"]

PERFECT = "perfect"
# name -> the parameter it takes (None: none), as shown in error messages
PROFILE_NAMES: dict[str, str | None] = {
    PERFECT: None,
    "no-global": None,
    "global-interference": None,
    "composition-interference": "K",
    "relation-blind": None,
    "weak-subtype": "SUBTYPE",
    "leaky-binding": None,
    "duplicate": None,
    "noise": "P",
    "strain": "S",
    "distractor-confusion": "P",
    "partial": "P",
}
PARTIAL = "partial"  # leaves requirements partly met (taxonomy/zoo.toml [partial]; graded scales see it)
CONFUSION = "distractor-confusion"  # takes a distractor reference for a term (taxonomy/zoo.toml [confusion])
_PREFIX = "synthetic:"
STRAIN = "strain"  # every load mode of taxonomy/zoo.toml at one scale


def _names() -> dict[str, str | None]:
    """Every profile name -> its parameter: the fixed ones and the load modes of the data file."""
    return {**PROFILE_NAMES, **{name: "S" for name in load_modes()}}


def _optional(name: str) -> bool:
    """Whether a profile's parameter may be left out (the load modes' scale, default 1)."""
    return name in (STRAIN, CONFUSION, PARTIAL) or name in load_modes()


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure mode: its name and parameter (K, SUBTYPE or P; None for the others)."""

    name: str
    arg: int | float | str | None = None

    @property
    def probabilistic(self) -> bool:
        """Whether the mode breaks requirements by chance (noise, a load mode; ``strain`` is
        spelled out as its load modes by :meth:`Profile.modes` before any question is asked)."""
        return self.name in ("noise", CONFUSION, PARTIAL) or self.name in load_modes()

    def __str__(self) -> str:
        if self.arg is None:
            return self.name
        if isinstance(self.arg, float):
            text = repr(self.arg)
            return f"{self.name}:{text.removesuffix('.0')}"
        return f"{self.name}:{self.arg}"


@dataclass(frozen=True, slots=True)
class Profile:
    """A synthetic generator's failure modes, in spec order (empty: the perfect generator)."""

    failures: tuple[Failure, ...] = ()

    def __str__(self) -> str:
        return ",".join(str(f) for f in self.failures) or PERFECT

    @property
    def generator(self) -> str:
        """The generator's identity as records name it: ``synthetic:<profile>``."""
        return _PREFIX + str(self)

    def has(self, name: str) -> bool:
        """Whether a failure mode of that name is part of the profile."""
        return any(f.name == name for f in self.failures)

    def modes(self) -> tuple[Failure, ...]:
        """The failure modes with ``strain`` spelled out as every load mode at its scale, in the
        order causes are recorded."""
        out: list[Failure] = []
        for f in self.failures:
            out += [Failure(name, f.arg) for name in load_modes()] if f.name == STRAIN else [f]
        return tuple(out)

    def weak_subtypes(self) -> frozenset[str]:
        """The attribute subtypes the generator never transfers."""
        return frozenset(str(f.arg) for f in self.failures if f.name == "weak-subtype")


def _known() -> str:
    return ", ".join(name if arg is None else f"{name}[:{arg}]" if _optional(name) else f"{name}:{arg}"
                     for name, arg in _names().items())


def _subtype_keys() -> dict[str, str]:
    """Every subtype a g term may extract, by full key and by its name without the number."""
    tax = taxonomy()
    keys = [*tax.subtypes, *tax.special]
    table = {key: key for key in keys}
    for key in keys:
        short = key.split("_", 1)[1] if key[:1].isdigit() else key
        table.setdefault(short, key)
    return table


def _argument(name: str, raw: str, fail) -> int | float | str:
    if name == "composition-interference":
        try:
            k = int(raw)
        except ValueError:
            fail(f"K must be a whole number, got {raw!r}")
        if k < 1:
            fail(f"K must be at least 1, got {k}")
        return k
    if name in ("noise", CONFUSION, PARTIAL) or _optional(name):
        try:
            p = float(raw)
        except ValueError:
            fail(f"{'S' if _optional(name) and name not in (CONFUSION, PARTIAL) else 'P'} must be a number, got {raw!r}")
        if name in (CONFUSION, PARTIAL) and not (math.isfinite(p) and 0.0 < p <= 1.0):
            fail(f"P must lie in (0, 1], got {raw}")
        if name not in ("noise", CONFUSION, PARTIAL):  # a load mode's scale
            if not (math.isfinite(p) and p > 0.0):
                fail(f"S must be a positive number, got {raw}")
            return p
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            fail(f"P must lie between 0 and 1, got {raw}")
        return p
    key = _subtype_keys().get(raw)
    if key is None:
        fail(f"unknown subtype {raw!r} (known: {', '.join(sorted(set(_subtype_keys().values())))})")
    return key


def parse_profile(spec: str) -> Profile:
    """Parse a profile spec such as ``"no-global,noise:0.1"`` (an optional ``synthetic:`` prefix
    is accepted). Raises :class:`~tracebench.errors.TraceError`, one line naming the bad part and
    the known profiles."""
    if not isinstance(spec, str):
        raise TraceError(f"generator profile: expected a string, got {type(spec).__name__}")
    text = spec.strip()
    text = text.removeprefix(_PREFIX)
    failures: list[Failure] = []
    seen: set[tuple[str, object]] = set()
    names = _names()
    parts = [p.strip() for p in text.split(",")]
    for part in parts:
        def fail(message: str, part: str = part) -> None:
            # one part: named once; a spec may come from a record: any length, cut
            shown = repr(spec if len(spec) <= 120 else spec[:119] + "…")
            where = f"{shown}: {part[:120]!r}" if part != text else shown
            raise TraceError(f"generator profile {where}: {message}; known profiles: {_known()}")

        if not part:
            fail("empty part")
        name, colon, raw = part.partition(":")
        name, raw = name.strip().lower(), raw.strip()
        if name not in names:
            close = difflib.get_close_matches(name, list(names), n=1)
            fail(f"unknown profile{f' (did you mean {close[0]}?)' if close else ''}")
        wanted = names[name]
        if wanted is None and colon:
            fail(f"{name} takes no parameter")
        if wanted is not None and not raw and (colon or not _optional(name)):
            fail(f"{name} needs a parameter, e.g. {name}:{wanted}")
        if name == PERFECT:
            if len(parts) > 1:
                fail("perfect cannot be combined with failure modes")
            continue
        arg = None if wanted is None or not raw else _argument(name, raw, fail)
        for mode in (load_modes() if name == STRAIN else (name,)):
            key = (mode, arg) if mode == "weak-subtype" else (mode, None)
            if key in seen:
                fail(f"{mode} given twice" + (" (strain holds every load mode)" if name == STRAIN or
                                              any(f.name == STRAIN for f in failures) else ""))
            seen.add(key)
        failures.append(Failure(name, arg))
    return Profile(tuple(failures))
