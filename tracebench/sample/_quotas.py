"""Drawing templates per slot level under the quotas of templates/quotas.toml."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

import networkx as nx

from ..errors import TraceError
from ..formula import Apply, Compose, Disentangle, Expr, space_by_slot
from ..resources import read_toml
from ._capabilities import Need, needs_of

__all__ = ["Quotas", "quotas", "draw_templates", "largest_remainder", "left_out_counts", "other_templates"]

QUOTA_FILE = "quotas.toml"


@dataclass(frozen=True)
class Quotas:
    per_slot: int
    whole: float
    relations: dict[int, tuple[float, ...]]
    globals: dict[int, tuple[float, ...]]


@cache
def quotas() -> Quotas:
    raw = read_toml("templates", QUOTA_FILE)

    def shares(table: str) -> dict[int, tuple[float, ...]]:
        out = {}
        for slot, values in raw[table].items():
            if any(v < 0 for v in values) or abs(sum(values) - 1) > 1e-9:
                raise TraceError(f"templates/{QUOTA_FILE}: {table}.{slot}: shares must be >= 0 and sum to 1")
            out[int(slot)] = tuple(float(v) for v in values)
        return out

    whole = float(raw.get("whole", 0.0))
    if not 0 <= whole <= 1:
        raise TraceError(f"templates/{QUOTA_FILE}: whole: a share between 0 and 1, got {whole}")
    return Quotas(int(raw["per_slot"]), whole, shares("relations"), shares("globals"))


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


@cache
def _cells(slot: int, without: frozenset[Need] = frozenset()) -> dict[tuple[int, int, bool], list[Expr]]:
    """The templates of slot level ``slot`` by quota cell, less those with a need in ``without``."""
    cells: dict[tuple[int, int, bool], list[Expr]] = {}
    memo: dict[int, tuple[int, int, bool]] = {}
    templates = space_by_slot([slot])[slot]
    needs = _slot_needs(slot) if without else (frozenset(),) * len(templates)
    for template, need in zip(templates, needs):
        if not need & without:
            cells.setdefault(_cell(template, memo), []).append(template)
    return cells


@cache
def _slot_needs(slot: int) -> tuple[frozenset[Need], ...]:
    """The needs of each template of slot level ``slot``, in the space's order."""
    memo: dict = {}
    return tuple(needs_of(t, memo) for t in space_by_slot([slot])[slot])


def left_out_counts(slot: int, gaps: tuple[Need, ...]) -> dict[Need, int]:
    """Per need of ``gaps``: the templates of slot level ``slot`` left out for it (a template
    with several is counted under the first of ``gaps`` it has)."""
    counts = dict.fromkeys(gaps, 0)
    if gaps:
        without = frozenset(gaps)
        for needs in _slot_needs(slot):
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
    cells = _cells(slot, without)
    own = [t for t in cells.get(_cell(template, {}), []) if t is not template]
    pool = [t for ts in cells.values() for t in ts]
    picked = rng.sample(own, min(n // 2, len(own)))
    seen = {id(t) for t in picked} | {id(template)}
    for t in rng.sample(pool, min(n, len(pool))):
        if len(picked) >= n:
            break
        if id(t) not in seen:
            seen.add(id(t))
            picked.append(t)
    return picked


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
    counts = _joint_counts(rel_counts, glob_counts, feasible)
    if counts is None:
        raise TraceError(
            f"templates/{QUOTA_FILE}: unsatisfiable quota for slot {slot}: no templates meet "
            f"{rel_counts} cases with 0/1/2 relations and {glob_counts} with 0/1/2 global terms together")
    drawn: list[Expr] = []
    for r in range(len(rel_counts)):
        for g in range(len(glob_counts)):
            count = counts.get((r, g), 0)
            if not count:
                continue
            plain, whole = cells.get((r, g, False), []), cells.get((r, g, True), [])
            n_whole = round(q.whole * count) if plain and whole else (count if whole else 0)
            drawn += _distinct(whole, n_whole, rng) + _distinct(plain, count - n_whole, rng)
    return drawn


def _joint_counts(rows: list[int], cols: list[int], feasible: set[tuple[int, int]]) -> dict | None:
    """Integer cases per (relations, globals) cell meeting both margins, None if impossible.

    The target is the independent product of the margins, fitted to the feasible cells by
    iterative proportional fitting; a min-cost flow then rounds it to integers that meet
    both margins exactly, staying within the target where it can (so the cases spread over
    the cells rather than piling into one).
    """
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


def _distinct(pool: list[Expr], n: int, rng: random.Random) -> list[Expr]:
    """``n`` templates from ``pool``: all distinct while it lasts, then cycling."""
    if n <= 0:
        return []
    order = list(pool)
    rng.shuffle(order)
    return [order[i % len(order)] for i in range(n)]
