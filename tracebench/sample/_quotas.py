"""Drawing templates per slot level under the quotas of templates/quotas.toml."""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass
from functools import cache

from ..errors import TraceError
from ..cache import cache_key
from ..derived import read_json, source_hash, write_json
from ..formula import Apply, Compose, Disentangle, Expr, decode_template, encode_template, space_bounds, space_by_slot
from ..resources import DataFile, data_hash
from ._capabilities import Need, needs_of

__all__ = ["Quotas", "quotas", "draw_templates", "largest_remainder", "left_out_counts", "other_templates"]

QUOTA_FILE = "quotas.toml"
_QUOTAS = DataFile("templates", QUOTA_FILE)


@dataclass(frozen=True)
class Quotas:
    per_slot: int
    whole: float
    relations: dict[int, tuple[float, ...]]
    globals: dict[int, tuple[float, ...]]


@cache
def quotas() -> Quotas:
    raw = _QUOTAS.read()

    def shares(table: str) -> dict[int, tuple[float, ...]]:
        out = {}
        levels = _QUOTAS.value("", raw, table, dict)
        for slot in levels:
            if not slot.isdigit():
                raise _QUOTAS.error("not a slot level (a whole number)", table, slot)
            values = _QUOTAS.numbers(table, levels, slot)
            if any(v < 0 for v in values) or abs(sum(values) - 1) > 1e-9:
                raise TraceError(f"templates/{QUOTA_FILE}: {table}.{slot}: shares must be >= 0 and sum to 1")
            out[int(slot)] = tuple(float(v) for v in values)
        return out

    whole = float(_QUOTAS.value("", raw, "whole", (int, float), 0.0))
    if not 0 <= whole <= 1:
        raise TraceError(f"templates/{QUOTA_FILE}: whole: a share between 0 and 1, got {whole}")
    return Quotas(_QUOTAS.value("", raw, "per_slot", int), whole, shares("relations"), shares("globals"))


def largest_remainder(total: int, shares: tuple[float, ...]) -> list[int]:
    """Integer counts summing to ``total`` in proportion to ``shares`` (ties to the lower index)."""
    raw = [total * s for s in shares]
    counts = [int(r) for r in raw]
    order = sorted(range(len(shares)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _cell(node: Expr | Disentangle, memo: dict[int, tuple[int, int, bool]]) -> tuple[int, int, bool]:
    """(g_rel terms, g_global terms, has g_attach or g_ip) of an unbound template.

    ``memo`` is keyed by object identity: the templates of the space share their
    subexpressions as objects, so each is counted once (and is alive while the space is).
    """
    known = memo.get(id(node))
    if known is not None:
        return known
    if isinstance(node, Disentangle):
        result = (int(node.kind == "rel"), int(node.kind == "global"), node.kind in ("attach", "ip"))
    elif isinstance(node, (Compose, Apply)):
        children = node.args if isinstance(node, Compose) else (node.carrier, *node.modifiers)
        rels = globs = 0
        whole = False
        for child in children:
            r, g, w = _cell(child, memo)
            rels, globs, whole = rels + r, globs + g, whole or w
        result = (rels, globs, whole)
    else:
        result = (0, 0, False)
    memo[id(node)] = result
    return result


Cell = tuple[int, int, bool]  # (g_rel terms, g_global terms, has g_attach or g_ip)

# The classified space is derived data (tracebench.derived): a function of these data files
# and of the code below and the modules it calls.
_SPACE_FILES = (("templates", "space.toml"), ("taxonomy", "kinds.toml"), ("grammar", "trace.lark"),
                ("grammar", "language.toml"))
_SPACE_CODE = ("formula/_space.py", "formula/_ast.py", "formula/_canonical.py", "formula/_language.py",
               "formula/_analysis.py", "formula/_grammar.py", "formula/_printer.py", "operators.py",
               "sample/_quotas.py", "sample/_capabilities.py")
_SPACE_FORMAT = 1


class SlotSpace:
    """The templates of one slot level, each in compact form (``encode_template``), their quota
    cells and their needs; a template is rebuilt as an AST only when it is drawn, once."""

    def __init__(self, codes: list[str], cells: dict[Cell, list[int]], needs: list[frozenset[Need]]) -> None:
        self.codes = codes
        self.cells = cells  # positions into codes by quota cell, cells in the space's order
        self.needs = needs  # per position
        self._built: dict[int, Expr] = {}
        self._position: dict[int, int] = {}  # id(template) -> position, for templates built here

    def template(self, position: int) -> Expr:
        built = self._built.get(position)
        if built is None:
            built = self._built[position] = decode_template(self.codes[position])
            self._position[id(built)] = position
        return built

    def position(self, template: Expr) -> int | None:
        """The position of a template this space built (None for any other object)."""
        return self._position.get(id(template))

    @classmethod
    def classify(cls, templates: tuple[Expr, ...]) -> "SlotSpace":
        memo: dict[int, Cell] = {}
        needs_memo: dict = {}
        code_memo: dict[int, str] = {}
        cells: dict[Cell, list[int]] = {}
        for position, template in enumerate(templates):
            cells.setdefault(_cell(template, memo), []).append(position)
        return cls([encode_template(t, code_memo) for t in templates], cells,
                   [needs_of(t, needs_memo) for t in templates])

    def to_json(self, slot: int) -> dict:
        table = sorted({n for ns in self.needs for n in ns}, key=str)
        bit = {n: 1 << k for k, n in enumerate(table)}
        return {"format": _SPACE_FORMAT, "key": _space_key(), "slot": slot, "digest": _digest(self.codes),
                "codes": self.codes,
                "cells": [[r, g, w, positions] for (r, g, w), positions in self.cells.items()],
                "need_table": [list(n) for n in table], "needs": [sum(bit[n] for n in ns) for ns in self.needs]}

    @classmethod
    def from_json(cls, raw, slot: int) -> "SlotSpace | None":
        """The stored space of slot level ``slot``, or None when ``raw`` is not the one this code
        wrote for it (another level's file under its name, another space's, a damaged one)."""
        try:
            if (raw.get("format") != _SPACE_FORMAT or raw.get("key") != _space_key() or raw.get("slot") != slot
                    or raw.get("digest") != _digest(raw["codes"])):
                return None
            codes = raw["codes"]
            table = [(kind, role) for kind, role in raw["need_table"]]
            needs_of_mask: dict[int, frozenset[Need]] = {}
            needs = []
            for mask in raw["needs"]:
                known = needs_of_mask.get(mask)
                if known is None:
                    known = needs_of_mask[mask] = frozenset(n for k, n in enumerate(table) if mask >> k & 1)
                needs.append(known)
            cells = {(int(r), int(g), bool(w)): [int(p) for p in positions] for r, g, w, positions in raw["cells"]}
            if len(needs) != len(codes) or sorted(p for ps in cells.values() for p in ps) != list(range(len(codes))):
                return None
            return cls(codes, cells, needs)
        except (AttributeError, KeyError, TypeError, ValueError):
            return None


def _digest(codes: list[str]) -> str:
    return hashlib.sha256("\n".join(codes).encode()).hexdigest()


@cache
def _space_key() -> str:
    return cache_key(data=data_hash(*_SPACE_FILES), code=source_hash(*_SPACE_CODE), format=_SPACE_FORMAT)


@cache
def slot_space(slot: int) -> SlotSpace:
    """The classified templates of slot level ``slot``: read from the derived-data folder, or
    taken from the whole classified space (:func:`_classified`)."""
    stored = SlotSpace.from_json(read_json(f"template-space-slot{slot}", _space_key()), slot)
    return stored if stored is not None else _classified().get(slot, SlotSpace([], {}, []))


@cache
def _classified() -> dict[int, SlotSpace]:
    """Every slot level enumerated and classified, once per process, and each stored."""
    levels = space_by_slot(range(space_bounds().min_slot, space_bounds().max_slot + 1))
    spaces = {level: SlotSpace.classify(templates) for level, templates in levels.items()}
    for level, space in spaces.items():
        write_json(f"template-space-slot{level}", _space_key(), space.to_json(level))
    return spaces


@cache
def _cells(slot: int, without: frozenset[Need] = frozenset()) -> dict[Cell, list[int]]:
    """The positions of the templates of slot level ``slot`` by quota cell, less those with a need in ``without``."""
    space = slot_space(slot)
    if not without:
        return space.cells
    cells: dict[Cell, list[int]] = {}
    for cell, positions in space.cells.items():
        kept = [p for p in positions if not space.needs[p] & without]
        if kept:
            cells[cell] = kept
    return cells


def left_out_counts(slot: int, gaps: tuple[Need, ...]) -> dict[Need, int]:
    """Per need of ``gaps``: the templates of slot level ``slot`` left out for it (a template
    with several is counted under the first of ``gaps`` it has)."""
    counts = dict.fromkeys(gaps, 0)
    if gaps:
        without = frozenset(gaps)
        for needs in slot_space(slot).needs:
            if needs & without:
                counts[next(n for n in gaps if n in needs)] += 1
    return counts


def _refit(shares: tuple[float, ...], present: set[int]) -> tuple[float, ...]:
    """``shares`` with the rows no template holds set to 0, the rest scaled back to a sum of 1
    (evenly when the rows left had no share at all)."""
    kept = [v if i in present else 0.0 for i, v in enumerate(shares)]
    total = sum(kept)
    if total <= 0:
        return tuple(1 / len(present) if i in present else 0.0 for i in range(len(shares)))
    return tuple(v / total for v in kept)


def other_templates(slot: int, template: Expr, rng: random.Random, n: int,
                    without: frozenset[Need] = frozenset()) -> list[Expr]:
    """Up to ``n`` other templates of slot level ``slot`` to try when ``template`` cannot be
    bound: first from its own quota cell, then from the whole level, in an order drawn from ``rng``."""
    space, cells = slot_space(slot), _cells(slot, without)
    itself = space.position(template)
    own = [p for p in cells.get(_cell(template, {}), []) if p != itself]
    pool = [p for ps in cells.values() for p in ps]
    picked = rng.sample(own, min(n // 2, len(own)))
    seen = set(picked) | {itself}
    for p in rng.sample(pool, min(n, len(pool))):
        if len(picked) >= n:
            break
        if p not in seen:
            seen.add(p)
            picked.append(p)
    return [space.template(p) for p in picked]


def draw_templates(slot: int, n: int, rng: random.Random, q: Quotas | None = None,
                   without: frozenset[Need] = frozenset()) -> list[Expr]:
    """``n`` templates of slot level ``slot`` meeting the quotas; distinct while the cell allows.

    ``without``: needs the library cannot supply; templates with one are left out and the
    quota shares re-fitted over the relation and global counts that templates still hold.
    """
    q = q or quotas()
    if slot not in q.relations or slot not in q.globals:
        raise TraceError(f"templates/{QUOTA_FILE}: no quota for slot {slot}")
    cells = _cells(slot, without)
    if not cells:
        raise TraceError(f"no template of slot {slot} is left once those the library cannot supply are left out")
    rel_shares, glob_shares = q.relations[slot], q.globals[slot]
    if without:
        rel_shares = _refit(rel_shares, {r for r, _, _ in cells})
        glob_shares = _refit(glob_shares, {g for _, g, _ in cells})
    rel_counts = largest_remainder(n, rel_shares)
    glob_counts = largest_remainder(n, glob_shares)
    feasible = {(r, g) for r in range(len(rel_counts)) for g in range(len(glob_counts))
                if (r, g, False) in cells or (r, g, True) in cells}
    counts = _stored_joint_counts(rel_counts, glob_counts, feasible)
    if counts is None:
        raise TraceError(
            f"templates/{QUOTA_FILE}: unsatisfiable quota for slot {slot}: no templates meet "
            f"{rel_counts} cases with 0/1/2 relations and {glob_counts} with 0/1/2 global terms together")
    drawn: list[int] = []
    for r in range(len(rel_counts)):
        for g in range(len(glob_counts)):
            count = counts.get((r, g), 0)
            if not count:
                continue
            plain, whole = cells.get((r, g, False), []), cells.get((r, g, True), [])
            n_whole = round(q.whole * count) if plain and whole else (count if whole else 0)
            drawn += _distinct(whole, n_whole, rng) + _distinct(plain, count - n_whole, rng)
    space = slot_space(slot)
    return [space.template(p) for p in drawn]


def _stored_joint_counts(rows: list[int], cols: list[int], feasible: set[tuple[int, int]]) -> dict | None:
    """:func:`_joint_counts`, kept in the derived-data folder (solving the flow is quick;
    importing networkx to do it is not)."""
    problem = [rows, cols, sorted(feasible)]
    key = cache_key(problem=problem, code=source_hash("sample/_quotas.py"), networkx=_networkx_installed())
    stored = read_json("quota-joint-counts", key)
    if isinstance(stored, dict) and stored.get("problem") == [rows, cols, [list(c) for c in sorted(feasible)]]:
        try:
            return None if stored["counts"] is None else {(int(r), int(g)): int(n) for r, g, n in stored["counts"]}
        except (KeyError, TypeError, ValueError):
            pass
    counts = _joint_counts(rows, cols, feasible)
    write_json("quota-joint-counts", key, {"problem": problem, "counts": None if counts is None else
                                           [[r, g, n] for (r, g), n in counts.items()]})
    return counts


@cache
def _networkx_installed() -> str:
    """Which networkx would solve the flows (where flows tie, the one returned is its solver's
    choice), found without importing it: its package file and when it was written."""
    from importlib.util import find_spec

    try:
        origin = find_spec("networkx").origin
        return f"{origin}:{os.stat(origin).st_mtime_ns}"
    except (AttributeError, OSError, TypeError, ValueError):
        return "unknown"


def _joint_counts(rows: list[int], cols: list[int], feasible: set[tuple[int, int]]) -> dict | None:
    """Integer cases per (relations, globals) cell meeting both margins, None if impossible.

    The target is the independent product of the margins, fitted to the feasible cells by
    iterative proportional fitting; a min-cost flow then rounds it to integers that meet
    both margins exactly, staying within the target where it can (so the cases spread over
    the cells rather than piling into one).
    """
    import networkx as nx

    n = sum(rows)
    target = {cell: (rows[cell[0]] / n) * (cols[cell[1]] / n) * n if n else 0.0 for cell in feasible}
    for _ in range(200):
        for axis, margin in ((0, rows), (1, cols)):
            for k, want in enumerate(margin):
                have = sum(v for cell, v in target.items() if cell[axis] == k)
                if have > 0:
                    for cell in target:
                        if cell[axis] == k:
                            target[cell] *= want / have
    graph = nx.DiGraph()
    for r, count in enumerate(rows):
        graph.add_edge("source", ("r", r), capacity=count, weight=0)
    for g, count in enumerate(cols):
        graph.add_edge(("g", g), "sink", capacity=count, weight=0)
    for (r, g), value in sorted(target.items()):
        # within the fitted target costs nothing; every case beyond it costs one
        graph.add_edge(("r", r), ("cell", r, g), capacity=n, weight=0)
        graph.add_edge(("cell", r, g), ("g", g), capacity=int(value), weight=0)
        graph.add_edge(("cell", r, g), ("over", r, g), capacity=n, weight=1)
        graph.add_edge(("over", r, g), ("g", g), capacity=n, weight=0)
    flow = nx.max_flow_min_cost(graph, "source", "sink")
    if sum(flow["source"].values()) < n:
        return None
    return {(r, g): flow[("r", r)][("cell", r, g)] for (r, g) in feasible if flow[("r", r)][("cell", r, g)]}


def _distinct(pool: list[int], n: int, rng: random.Random) -> list[int]:
    """``n`` positions from ``pool``: all distinct while it lasts, then cycling."""
    if n <= 0:
        return []
    order = list(pool)
    rng.shuffle(order)
    return [order[i % len(order)] for i in range(n)]
