"""``--method rates`` over a window of trees: the chains of the failing instances, the
generations the allocator asks for made through the diagnosis's evaluator, and the estimates.

Fresh generations only: a node's generations are numbered from 0, a root's from the run's
generation count when the run's verdicts are the diagnosis's (those chose the instance, and a
served generator's call cache would return the run's own image for generation 0). Every
generation of a node is another sample (another seed); when the first generations of every node
are the same image each time (a generator that ignores the seed), no node is generated again:
each rate is 0 or 1.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from ..operators import Instance
from ..outcomes import Outcome
from ..records import Attribution, ChainStep, ShareEstimate
from ..score import Gating, instance_results
from ._attribute import UNDETERMINED
from ._hazard import instance_chain
from ._rates import Allocator, Chain, ChainEstimate, RatesSettings

if TYPE_CHECKING:
    from ._diagnose import Evaluator, TreePlan, _Evaluation

__all__ = ["RatesWindow", "rates_attribution"]


def _questions(case, instance: Instance) -> int:
    return sum(1 for q in case.checklist if q.op == instance.op and q.target == instance.target)


@dataclass
class RatesWindow:
    """The rates diagnosis of one window: ``plan`` its trees, ``root_verdicts`` the run's verdicts of
    the roots (which choose the failing instances), ``first_root`` the first fresh generation of a
    root (the run's count when its verdicts are reused, else 0), ``image_path`` an evaluated
    image's file (None: not checked for repeats), ``carried`` the prior counts of earlier windows."""

    plan: TreePlan
    root_verdicts: Mapping[str, Mapping[str, Outcome]]
    settings: RatesSettings
    gating: Gating
    first_root: int = 0
    image_path: Callable[[str], Path] | None = None
    carried: Mapping = field(default_factory=dict)

    def __post_init__(self) -> None:
        chains = []
        for tree in self.plan.trees:
            at_root = instance_results(tree.root, self.root_verdicts.get(tree.root.id, {}), self.gating)
            for instance in tree.nodes[0].targets:
                if instance in at_root and at_root[instance].failed:
                    nodes = instance_chain(tree.nodes, instance)
                    keys = tuple(tree.keys[n.id] for n in nodes)
                    chains.append(Chain(tree.root.id, instance, keys, tuple(n.id for n in nodes),
                                        tuple(n.rule for n in nodes[1:]),  # type: ignore[misc]
                                        tuple(_questions(self.plan.cases[k], instance) for k in keys)))
        self.allocator = Allocator(chains, self.settings, trees=len(self.plan.trees), carried=self.carried)
        self.roots = {tree.keys["N0"] for tree in self.plan.trees}
        self.instances_at: dict[str, set[Instance]] = {}
        for chain in chains:
            for key in chain.keys:
                self.instances_at.setdefault(key, set()).add(chain.instance)
        self.next: dict[str, int] = {}
        self.digests: dict[str, set[bytes]] = {}
        self.estimates: dict[tuple[str, Instance], ChainEstimate] = {}

    def run(self, evaluate: Evaluator, evaluation: _Evaluation) -> None:
        """Ask for generations until the allocator is done; the non-root ones are kept in
        ``evaluation`` (the nodes' records), every one is counted."""
        while True:
            asked = self.allocator.requests()
            if not asked:
                break
            groups: dict[tuple[int, ...], list[str]] = {}
            for key, count in asked.items():
                start = self.next.get(key, self.first_root if key in self.roots else 0)
                self.next[key] = start + count
                groups.setdefault(tuple(range(start, start + count)), []).append(key)
            for samples, keys in groups.items():
                made = evaluate([self.plan.cases[k] for k in keys], samples)
                for (got, images, why), sample in zip(made, samples):
                    for key in keys:
                        self._observe(key, sample, got, images, why, evaluation)
            if self.allocator.rounds == 1:
                self._check_repeatable()
        self.estimates = self.allocator.estimates()

    def _observe(self, key: str, sample: int, got, images, why, evaluation: _Evaluation) -> None:
        case = self.plan.cases[key]
        verdicts = got.get(case.id, {})
        results = instance_results(case, verdicts, self.gating)
        for instance in self.instances_at.get(key, ()):
            result = results.get(instance)
            if result is not None and result.answered:
                self.allocator.observe(key, instance, result.failed)
        image = images.get(case.id)
        if key not in self.roots or self.first_root == 0:
            evaluation.store(key, sample, verdicts, image, why.get(case.id, {}))
        if self.image_path is not None and image is not None:
            try:
                digest = hashlib.blake2b(self.image_path(image).read_bytes(), digest_size=16).digest()
            except OSError:
                return
            self.digests.setdefault(key, set()).add(digest)

    def _check_repeatable(self) -> None:
        """After the first generations: a generator whose every node gave the same image each time
        ignores the seed; no node is generated again (each rate is 0 or 1)."""
        if self.image_path is None or not self.digests:
            return
        if all(len(seen) == 1 for seen in self.digests.values()):
            self.allocator.fixed.update(self.digests)

    def generations(self, tree_id: str) -> int:
        return self.allocator.tree_spent(tree_id)


def rates_attribution(base: Attribution, estimate: ChainEstimate, chain: Chain, counts: list[tuple[int, int]],
                      threshold: float) -> Attribution:
    """A failing instance's attribution as ``rates`` names it: the most confident source, or
    Undetermined below ``threshold`` (the guess kept), with its shares, chain and confidence."""
    confident = estimate.confidence >= threshold
    steps = tuple(ChainStep(node=node, rule=rule, fails=k, trials=n, rate=ShareEstimate(mean=_unit(m), low=_unit(lo),
                                                                                            high=_unit(hi)))
                  for node, rule, (k, n), (m, lo, hi) in zip(chain.nodes, (None, *chain.rules), counts, estimate.rates))
    return base.model_copy(update={
        "source": estimate.source if confident else UNDETERMINED, "guess": None if confident else estimate.source,
        "confidence": round(estimate.confidence, 4), "node": None, "rule": None, "depth": None,
        "relative_depth": None, "unstable": False, "unknown": (),
        "shares": {s: ShareEstimate(mean=_unit(m), low=_unit(lo), high=_unit(hi))
                   for s, (m, lo, hi) in estimate.shares.items()},
        "dominant": {s: round(p, 4) for s, p in estimate.dominant.items()}, "chain": steps})


def _unit(x: float) -> float:
    return round(min(max(x, 0.0), 1.0), 4)


