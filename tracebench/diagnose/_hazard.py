"""Hazard shares along an operator instance's chain: what a diagnosis estimates when failures are random.

The paper's first-pass rule names the first simplification after which a failing instance
passes. When the generator fails at random, one generation per node makes that a draw: a node
one step down passes with probability ``1 - r`` however little the step changed. The quantity
a diagnosis can estimate is a property of the generator instead: the failure rate
``r_n`` of the instance at each node ``n`` of its **chain**, the nodes from the root through,
at each step, the first child that keeps the instance (:func:`instance_chain`; the children
in the tree's order, which under attribute removal puts an anchor's carrier-alone child first).

With ``H_n = -ln(1 - r_n)`` (``r`` capped at ``1 - 1e-12``), hazards of independent causes add
as their failures compose (``1 - Π(1 - p)``). Each edge of the chain, made by a rule of source
``s``, contributes ``H_parent - H_child`` to ``s``; what is left at the chain's end, ``H_end``,
is Persistent Failure. Divided by their total, these are the instance's **hazard shares**
(:func:`hazard_shares`); they sum to 1. A rate that rises along the chain (possible with
estimated rates; the zoo's exact rates never rise) gives a negative contribution: it is
clipped at 0, kept aside as ``risen``, and the shares are renormalised over what is left, so
they still sum to 1 and every share lies in [0, 1].

In the zoo the rates are exact (:func:`tracebench.zoo.failure_rates` on each chain node's own
sub-case): :func:`exact_shares`. :func:`share_accuracy` scores a diagnosis's named sources
against them: tolerant accuracy (the named source's exact share within ``delta`` of the
largest; Undetermined counts wrong), dominant accuracy on clear instances (the largest share
leads the second by at least ``delta``), and the Table 3 mix of exact dominant sources beside
the mix of named ones.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from ..operators import Instance
from ._attribute import UNDETERMINED
from ._rules import rules, sources
from ._tree import TreeNode

if TYPE_CHECKING:
    from ..records import Case
    from ..zoo import Profile

__all__ = ["InstanceShares", "PERSISTENT", "ShareAccuracy", "exact_shares", "hazard", "hazard_shares",
           "instance_chain", "share_accuracy"]

PERSISTENT = "persistent_failure"
RATE_CAP = 1.0 - 1e-12  # a rate of 1 has an infinite hazard
DELTA = 0.2  # tolerant accuracy's margin, and the lead that makes an instance clear


def hazard(rate: float) -> float:
    """``-ln(1 - r)`` of a rate clamped to [0, 1 - 1e-12]."""
    return -math.log1p(-min(max(rate, 0.0), RATE_CAP))


def instance_chain(nodes: Sequence[TreeNode], instance: Instance) -> tuple[TreeNode, ...]:
    """The chain of ``instance`` in a whole tree (``nodes`` breadth first, the root first): the
    root, then at each step the first child that keeps the instance, as attribution's paths keep
    it (``targets``); it ends at a node none of whose children keeps it (a node repeating an
    earlier one, ``same_as``, has no children)."""
    children: dict[str, list[TreeNode]] = {}
    for node in nodes[1:]:
        children.setdefault(node.parent, []).append(node)  # type: ignore[arg-type]
    chain = [nodes[0]]
    while True:
        following = next((c for c in children.get(chain[-1].id, ()) if instance in c.targets), None)
        if following is None:
            return tuple(chain)
        chain.append(following)


@dataclass(frozen=True)
class InstanceShares:
    """An instance's hazard shares along its chain: the chain's node ids (root first), the rule
    making each edge, the rate at each node, the shares (source -> share, summing to 1: each
    source of an edge of the chain and Persistent Failure), and the hazard of rises clipped."""

    nodes: tuple[str, ...]
    rules: tuple[str, ...]
    rates: tuple[float, ...]
    shares: Mapping[str, float]
    risen: float = 0.0

    @property
    def dominant(self) -> str:
        """The source of the largest share (ties: the first in diagnose/sources.toml's order)."""
        order = list(sources())
        return max(self.shares, key=lambda s: (self.shares[s], -order.index(s)))

    @property
    def lead(self) -> float:
        """How far the largest share leads the second (the whole share when it is alone)."""
        top = sorted(self.shares.values(), reverse=True) + [0.0]
        return top[0] - top[1]

    def share(self, source: str | None) -> float:
        return self.shares.get(source or "", 0.0)

    def tolerates(self, source: str | None, delta: float = DELTA) -> bool:
        """Whether naming ``source`` is right within ``delta``: its share is within ``delta`` of
        the largest (a source with no share, or none, only when every share is within it)."""
        return self.share(source) >= max(self.shares.values()) - delta - 1e-12


def hazard_shares(rates: Sequence[float], edge_rules: Sequence[str]) -> tuple[dict[str, float], float] | None:
    """The shares of a chain whose nodes have failure ``rates`` (root first) and whose edges were
    made by ``edge_rules`` (one fewer), and the hazard of rises clipped; None when no hazard is
    left to share (every rate 0). Raises ValueError when the lengths do not fit."""
    if len(rates) != len(edge_rules) + 1:
        raise ValueError(f"{len(rates)} rates for {len(edge_rules)} edges: a chain has one rate more than edges")
    source_of = {r.name: r.source for r in rules()}
    hazards = [hazard(r) for r in rates]
    parts: dict[str, float] = {}
    risen = 0.0
    for rule, above, below in zip(edge_rules, hazards, hazards[1:]):
        drop = above - below
        risen += max(-drop, 0.0)
        parts[source_of[rule]] = parts.get(source_of[rule], 0.0) + max(drop, 0.0)
    parts[PERSISTENT] = parts.get(PERSISTENT, 0.0) + hazards[-1]
    total = sum(parts.values())
    if total <= 0.0:
        return None
    return {s: h / total for s, h in parts.items()}, risen


def exact_shares(nodes: Sequence[TreeNode], node_case: Mapping[str, Case], profile: Profile,
                 instances: Iterable[Instance] | None = None) -> dict[Instance, InstanceShares]:
    """The zoo's exact hazard shares of a tree's root instances (``instances``, default every
    instance the root keeps), each with a rate above 0 at the root: ``nodes`` the whole tree
    breadth first, ``node_case`` node id -> its sub-case (the diagnosis's plan:
    ``TreePlan.node_cases(tree)``), ``profile`` the generator's."""
    from ..zoo import failure_rates

    memo: dict[str, dict[Instance, float]] = {}

    def rate(node: TreeNode, instance: Instance) -> float:
        if node.id not in memo:
            memo[node.id] = failure_rates(node_case[node.id], profile)
        return memo[node.id].get(instance, 0.0)

    out = {}
    for instance in (nodes[0].targets if instances is None else instances):
        chain = instance_chain(nodes, instance)
        rates = tuple(rate(n, instance) for n in chain)
        if rates[0] <= 0.0:
            continue
        edge_rules = tuple(n.rule for n in chain[1:])
        found = hazard_shares(rates, edge_rules)  # type: ignore[arg-type]
        if found is not None:
            out[instance] = InstanceShares(tuple(n.id for n in chain), edge_rules, rates,  # type: ignore[arg-type]
                                           MappingProxyType(found[0]), found[1])
    return out


@dataclass(frozen=True)
class ShareAccuracy:
    """A diagnosis's named sources scored against hazard shares, over ``instances`` (each a named
    source and its shares): tolerant (named share within ``delta`` of the largest; Undetermined,
    or no source, counts wrong), clear instances (lead at least ``delta``) and those named by
    their dominant source, and Table 3's mix: the share of instances per exact dominant source
    and per named source."""

    instances: int
    tolerant: int
    clear: int
    clear_correct: int
    exact_mix: Mapping[str, float]
    named_mix: Mapping[str, float]

    @property
    def tolerant_accuracy(self) -> float | None:
        return self.tolerant / self.instances if self.instances else None

    @property
    def dominant_accuracy(self) -> float | None:
        return self.clear_correct / self.clear if self.clear else None


def share_accuracy(named: Iterable[tuple[str | None, InstanceShares]], delta: float = DELTA) -> ShareAccuracy:
    """Score named sources (one per instance, None or ``undetermined`` for none) against their
    instances' shares (:class:`ShareAccuracy`)."""
    count = tolerant = clear = clear_correct = 0
    exact: Counter = Counter()
    given: Counter = Counter()
    for source, shares in named:
        count += 1
        tolerant += source not in (None, UNDETERMINED) and shares.tolerates(source, delta)
        if shares.lead >= delta:
            clear += 1
            clear_correct += source == shares.dominant
        exact[shares.dominant] += 1
        given[source or UNDETERMINED] += 1

    def mix(counts: Counter) -> Mapping[str, float]:
        return MappingProxyType({s: counts[s] / count for s in sources() if counts[s]})

    return ShareAccuracy(count, tolerant, clear, clear_correct, mix(exact), mix(given))
