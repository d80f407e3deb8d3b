"""A diagnosis scored against the zoo's exact hazard shares: what bench/hazard_shares.py and
bench/localization.py share (imported as ``_machine`` is, from the bench folder).

:func:`scored` pairs each failing instance of a diagnosis with its exact hazard shares
(``tracebench.diagnose.exact_shares`` along its chain, ``tracebench.zoo.failure_rates`` at each
node); :class:`Scored` gives the measures: tolerant accuracy, dominant accuracy on clear
instances and the exact Table 3 mix (``tracebench.diagnose.share_accuracy``), Undetermined
instances, and the expected calibration error of a reported confidence (``--method rates``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping

if TYPE_CHECKING:
    from tracebench.diagnose import InstanceShares, ShareAccuracy
    from tracebench.records import Attribution, DiagnosticTree, MixShare

SOURCES = ("joint_composition", "global_reference", "persistent_failure", "relation_attribute", "reference_clutter",
           "undetermined")
DELTA = 0.2  # tolerant accuracy's margin and a clear instance's lead (share_accuracy's default)
ECE_BINS = 6  # equal bins over [0, 1] of the reported confidence


@dataclass(frozen=True)
class Scored:
    """The scored instances, in diagnosis order: each one's attribution with its exact shares;
    ``misread``: instances of the population without shares (an erring judge read them failed
    where the generator cannot fail them: their exact rate at the root is 0)."""

    pairs: tuple[tuple[Attribution, InstanceShares], ...]
    misread: int

    @cached_property
    def accuracy(self) -> ShareAccuracy:
        """Tolerant accuracy (Undetermined, or a source that is no failure, counts wrong),
        dominant accuracy on clear instances, Table 3's mixes."""
        from tracebench.diagnose import share_accuracy

        return share_accuracy(((a.source, shares) for a, shares in self.pairs), DELTA)

    @property
    def undetermined(self) -> int:
        return sum(a.source == "undetermined" for a, _ in self.pairs)

    @property
    def exact_mix(self) -> dict[str, float]:
        """The share of instances per exact dominant source, in the order first met."""
        counts = Counter(shares.dominant for _, shares in self.pairs)
        return {s: n / len(self.pairs) for s, n in counts.items()}

    @property
    def ece(self) -> float | None:
        """Expected calibration error of the reported confidence over :data:`ECE_BINS` equal bins:
        each bin's |mean confidence - share right| weighted by its instances, where right is the
        named source's (an Undetermined one's best guess's) exact share within :data:`DELTA` of
        the largest; None when no instance has a confidence (first-pass)."""
        import numpy as np

        found = [(a.confidence, shares.tolerates(a.guess or a.source, DELTA)) for a, shares in self.pairs
                 if a.confidence is not None]
        if not found:
            return None
        conf = np.array([c for c, _ in found])
        ok = np.array([o for _, o in found], dtype=float)
        bins = np.minimum((conf * ECE_BINS).astype(int), ECE_BINS - 1)
        return float(sum(abs(conf[bins == b].mean() - ok[bins == b].mean()) * (bins == b).sum()
                         for b in range(ECE_BINS) if (bins == b).any()) / len(conf))

    def mix_error(self, mix: Mapping[str, MixShare] | None, names: Collection[str] | None = None) -> dict[str, float]:
        """|Table 3's share - the exact dominant-source share| per source (``names``, default
        the exact mix's sources); ``mix`` a summary's (None: every share 0)."""
        exact = self.exact_mix
        return {s: abs((mix[s].share if mix and s in mix else 0.0) - exact.get(s, 0.0))
                for s in (exact if names is None else names)}

    def mix_covered(self, mix: Mapping[str, MixShare] | None, names: Collection[str] | None = None
                    ) -> dict[str, bool]:
        """Whether Table 3's 95% interval covers the exact share, per source (``names``, default
        the exact mix's sources) the summary's mix has."""
        exact = self.exact_mix
        return {s: bool(mix[s].low <= exact.get(s, 0.0) <= mix[s].high)
                for s in (exact if names is None else names) if mix and s in mix}


def scored(bench: Path, trees: Mapping[str, DiagnosticTree], profile: str, judge: str,
           failing: Mapping[str, Collection] | None = None) -> Scored:
    """The attributions of ``trees`` (case id -> its tree) of the instances in the population,
    with their exact shares under the generator ``profile``: ``failing`` (case id -> the
    instances that failed in the run), default the instances each tree's root saw fail. With
    the exact ``oracle`` judge every failing instance has a rate above 0: one without exits."""
    from tracebench.diagnose import exact_shares, plan_trees
    from tracebench.operators import Instance, Operator
    from tracebench.sample import read_cases
    from tracebench.zoo import parse_profile

    rates = any(tree.method == "rates" for tree in trees.values())  # rates' trees keep the carrier-alone step
    plan = plan_trees([case for case in read_cases(bench) if case.id in trees], paper_stop=not rates)
    pairs: list = []
    misread = 0
    for tree in plan.trees:
        found = {Instance(Operator(a.op), a.target): a for a in trees[tree.root.id].attributions}
        chosen = ({i: a for i, a in found.items() if a.root == "fail"} if failing is None
                  else {i: a for i, a in found.items() if i in failing.get(tree.root.id, ())})
        exact = exact_shares(tree.nodes, plan.node_cases(tree), parse_profile(profile), chosen)
        missing = set(chosen) - set(exact)
        if missing and judge == "oracle":  # an instance that failed has a rate above 0
            raise SystemExit(f"case {tree.root.id}: no exact hazard for {sorted(missing)}")
        misread += len(missing)
        pairs += [(a, exact[i]) for i, a in chosen.items() if i in exact]
    return Scored(tuple(pairs), misread)
