"""The probabilistic failure modes of the zoo (``load-*``, ``strain``): data in ``taxonomy/zoo.toml``.

A load mode breaks a requirement with probability ``1 - (1 - p1) ** (scale * load)``, where
``load`` is what the mode counts on the case (global terms, composed branches, reference
relations, entities in an anchor's source image; 1 for a subtype's own difficulty). The draw
is seeded by the generator's seed, the case id, the question id and the mode, so a diagnostic
sub-case (another id) is a fresh sample, as a real generator's would be.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Mapping

from ..errors import TraceError
from ..resources import DataFile, table_name
from ..taxonomy import taxonomy

__all__ = ["LOADS", "Chance", "LoadMode", "confusion", "draw", "load_modes", "partial", "probability", "subtype_difficulty"]

ZOO_FILE = "zoo.toml"
LOADS = ("global", "composition", "relation", "entities", "subtype")
_ZOO = DataFile("taxonomy", ZOO_FILE)


@dataclass(frozen=True, slots=True)
class LoadMode:
    """One probabilistic failure mode: what it counts, its probability at one unit of load
    (none for ``subtype``: each subtype's difficulty), the requirements it may break."""

    name: str
    load: str
    p1: float | None
    breaks: frozenset[tuple[str, str]]  # (checklist section, aspect)


def _fail(message: str) -> TraceError:
    return TraceError(f"taxonomy/{ZOO_FILE}: {message}")


def _probability(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
        raise _fail(f"{where}: expected a probability in [0, 1), got {value!r}")
    return float(value)


@cache
def load_modes() -> Mapping[str, LoadMode]:
    """The load modes, in file order (the order ``strain`` lists them and records causes in)."""
    raw = _ZOO.tables("", _ZOO.read(), "modes", {})
    modes: dict[str, LoadMode] = {}
    for name, entry in raw.items():
        table = table_name("modes", name)
        if not name.startswith("load-"):
            raise _fail(f"modes.{name}: a load mode's name starts with 'load-'")
        load = entry.get("load")
        if load not in LOADS:
            raise _fail(f"modes.{name}.load: {load!r} is not one of {', '.join(LOADS)}")
        p1 = None if load == "subtype" else _probability(f"modes.{name}.p1", entry.get("p1"))
        breaks = _breaks(f"modes.{name}.breaks", _ZOO.value(table, entry, "breaks", list, []))
        modes[name] = LoadMode(name, load, p1, breaks)
    if not modes:
        raise _fail("no [modes.load-*] table")
    return MappingProxyType(modes)


@dataclass(frozen=True, slots=True)
class Chance:
    """A mode drawn per requirement or term at a rate (``[confusion]``, ``[partial]``): its default
    probability and the requirements it breaks."""

    p1: float
    breaks: frozenset[tuple[str, str]]  # (checklist section, aspect)


def _breaks(where: str, items) -> frozenset[tuple[str, str]]:
    from ..checklist import aspects

    asked = aspects()
    breaks = set()
    for item in items:
        section, _, aspect = str(item).partition(".")
        if section not in asked or not aspect:
            raise _fail(f"{where}: {item!r} is not <section>.<aspect> with a section of {', '.join(asked)}")
        if aspect not in asked[section]:
            raise _fail(f"{where}: the checklist asks no {aspect!r} in [[{section}]] "
                        f"(templates/checklist/questions.toml)")
        breaks.add((section, aspect))
    return frozenset(breaks)


@cache
def _chance(table: str) -> Chance:
    raw = _ZOO.value("", _ZOO.read(), table, dict, None)
    if raw is None:
        raise _fail(f"no [{table}] table")
    return Chance(_probability(f"{table}.p1", raw.get("p1")),
                  _breaks(f"{table}.breaks", _ZOO.value(table, raw, "breaks", list, [])))


def partial() -> Chance:
    """The ``[partial]`` table: the requirements ``partial`` may leave partly met, and how often."""
    return _chance("partial")


def confusion() -> Chance:
    """The ``[confusion]`` table: how ``distractor-confusion`` takes a distractor for a term."""
    return _chance("confusion")


@cache
def subtype_difficulty() -> Mapping[str, float]:
    """Subtype key -> the probability that the generator does not transfer it (``load-subtype``)."""
    raw = _ZOO.value("", _ZOO.read(), "subtype", dict, {})
    tax = taxonomy()
    known = {*tax.subtypes, *tax.special}
    for key in raw:
        if key not in known:
            raise _fail(f"subtype.{key}: not a subtype of taxonomy/subtypes.toml")
    missing = sorted(known - set(raw))
    if missing:
        raise _fail(f"[subtype]: no difficulty for {', '.join(missing)}")
    return MappingProxyType({key: _probability(f"subtype.{key}", value) for key, value in raw.items()})


def probability(p1: float, load: float, scale: float = 1.0) -> float:
    """``1 - (1 - p1) ** (scale * load)``: each unit of load an independent chance ``p1`` to fail."""
    if load <= 0 or p1 <= 0:
        return 0.0
    return 1.0 - (1.0 - p1) ** (scale * load)


def draw(seed: int, case_id: str, question_id: str, mode: str) -> float:
    """A uniform number in [0, 1) for one requirement of one generation under one mode."""
    digest = hashlib.sha256(f"tracebench-zoo/{mode}/{seed}/{case_id}/{question_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64
