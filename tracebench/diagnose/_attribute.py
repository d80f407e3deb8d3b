"""Attribution: from each node's results to one failure source per operator instance.

As the paper does (TRACE-Bench, arXiv 2608.16765, §3.5, Table 3): an instance failing at the
root is attributed at its **first pass**, whatever happens below it. Every root-to-leaf path
is followed through the nodes that keep it; the first node where it passes, at the smallest
depth over all paths (ties: the node met first, depth first in child order), names the rule
applied right before it, and the rule's source is the failure source. Never passing:
Persistent Failure. Passing at the root: Stable Success. So the sources of the instances sum
to 100%, as Table 3's rows do.

**Unstable** is a flag beside the source, not a source: the result flips back (fails again
below a node where it passed, or fails below a passing root). It is tracebench's own
observation (the paper does not report it); ``unstable`` is None when abstained results
could make or unmake a flip.

**Relative depth** (§C.3) is measured on the path: the first pass's depth over the depth of
that path's most simplified node keeping the instance (0: the complete case; 1: as simple
as its path goes). Where several paths continue below the node, the longest is taken.

An abstained result (the judge gave no usable answer) is unknown, never a fail. A source is
given only when no value of the unknown nodes could change it; otherwise the instance is
Undetermined, with the unknown nodes that decide it (an instance whose root abstained is
Undetermined too). An unknown node matters to the source of a root failure when, passing,
it would be a first pass at a smaller depth (or at the same depth with another source), or
when no first pass is found.

The adaptive strategy evaluates, depth by depth, only the children that keep a root failure
not yet explained anywhere in the tree (:func:`pending`). Every node on the path to a first
pass is such a node, and breadth first the first pass found is at the smallest depth, so
first passes and persistent failures come out as with the whole tree. It cannot see flips
below a first pass, or below a passing root, that the whole tree would show: the flag is
None there.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from ..operators import OPERATORS, Instance
from ..outcomes import ABSTAINED, Outcome, Status
from ..records import Attribution
from ._rules import rules, sources, zoo_expectations
from ._tree import TreeNode

__all__ = ["DEPTH_GRID", "UNDETERMINED", "Finding", "attribute", "localization", "mode_of", "pending", "SourceTally", "summarize_sources"]

Results = dict[Instance, Outcome]
DEPTH_GRID = tuple(k / 10 for k in range(11))
UNDETERMINED = "undetermined"  # the source of an instance whose attribution depends on abstained results


@dataclass(frozen=True)
class Finding:
    op: str
    target: str
    root: Outcome
    source: str | None
    node: str | None
    rule: str | None
    depth: int | None
    unknown: tuple[str, ...] = ()  # undetermined: the nodes whose abstained results decide it
    path_depth: int | None = None  # the depth of the most simplified node on the first pass's path
    unstable: bool | None = False  # a flip back along a path; None: abstained results could decide one

    @property
    def relative_depth(self) -> float | None:
        if self.depth is None:
            return None
        return round(self.depth / self.path_depth, 4) if self.path_depth else 0.0

    def record(self, causes: tuple[str, ...] = (), expected: tuple[str, ...] = ()) -> Attribution:
        return Attribution(op=self.op, target=self.target, root=self.root.status, source=self.source,
                           node=self.node, rule=self.rule, depth=self.depth, relative_depth=self.relative_depth,
                           unstable=self.unstable, causes=causes, expected=expected, unknown=self.unknown)


def attribute(nodes: list[TreeNode], results: dict[str, Results]) -> list[Finding]:
    """One finding per operator instance of the root (``nodes[0]``), in checklist order.

    ``results`` maps each evaluated node id to its instances' outcomes; nodes missing from
    it were not evaluated. An abstained result is unknown, never a fail: an instance whose
    source could change with the value of an unknown node is ``undetermined``."""
    children: dict[str, list[TreeNode]] = defaultdict(list)
    for node in nodes[1:]:
        children[node.parent].append(node)  # type: ignore[index]
    source_of = {r.name: r.source for r in rules()}
    root = nodes[0]
    findings = []
    def reach(node: TreeNode, instance: Instance) -> int:
        """The depth of the most simplified node keeping ``instance`` at or below ``node``."""
        below = [reach(child, instance) for child in children[node.id] if instance in child.targets]
        return max(below, default=node.depth)

    for instance in root.targets:
        at_root = results[root.id].get(instance, ABSTAINED)
        if not at_root.answered:
            findings.append(Finding(*instance, ABSTAINED, UNDETERMINED, None, None, None, (root.id,), unstable=None))
            continue
        first: TreeNode | None = None
        flipped = False
        # the unknown nodes met: (node, a pass or an unknown above it on its path, a fail or an unknown below)
        unknown: list[tuple[TreeNode, bool, list[bool]]] = []

        def walk(node: TreeNode, passed: bool, doubt_above: bool) -> bool:
            """Visit ``node`` (``passed``: it passed at or above the parent on this path);
            whether a fail or an unknown lies at or below it."""
            nonlocal first, flipped
            if node.id not in results or instance not in node.targets:
                return False  # not evaluated, or no longer kept: nor is anything below
            value = results[node.id].get(instance, ABSTAINED)
            if not value.answered:
                below: list[bool] = []
                unknown.append((node, passed or doubt_above, below))
                found = False
                for child in children[node.id]:
                    found |= walk(child, passed, True)
                below.append(found)
                return True
            if value.passed and not passed:
                if first is None or node.depth < first.depth:
                    first = node
                passed = True
            elif value.failed and passed:
                flipped = True
            found = value.failed
            for child in children[node.id]:
                found |= walk(child, passed, doubt_above)
            return found

        for child in children[root.id]:
            walk(child, at_root.passed, False)
        # a flip the unknowns could make: failing below a pass, or passing above a fail
        could_flip = any(doubt_above or below[0] for _, doubt_above, below in unknown)
        unstable = True if flipped else None if could_flip else False
        if at_root.passed:
            findings.append(Finding(*instance, at_root, "stable_success", None, None, 0, unstable=unstable))
            continue
        source = "persistent_failure" if first is None else source_of[first.rule]  # type: ignore[index]
        doubtful = tuple(node.id for node, _, _ in unknown if (
            first is None or node.depth < first.depth  # passing, it would be the first pass
            or (node.depth == first.depth and source_of[node.rule] != source)))  # type: ignore[index]
        if doubtful:
            findings.append(Finding(*instance, at_root, UNDETERMINED, None, None, None, doubtful, unstable=unstable))
            continue
        if first is None:
            findings.append(Finding(*instance, at_root, source, None, None, None, unstable=unstable))
            continue
        findings.append(Finding(*instance, at_root, source, first.id, first.rule, first.depth,
                                path_depth=reach(first, instance), unstable=unstable))
    return findings


def pending(node: TreeNode, parent_pending: frozenset[Instance], results: Results) -> frozenset[Instance]:
    """The root failures still unexplained at ``node``: pending at its parent, kept here, and
    not passing here. The root's own are its failing instances (``parent_pending`` of all
    its targets)."""
    return frozenset(i for i in parent_pending if i in node.targets and not results.get(i, ABSTAINED).passed)


def mode_of(cause: str) -> str:
    """The failure mode of a recorded cause: "composition-interference:2" -> "composition-interference"."""
    return cause.split(":", 1)[0]


def localization(finding: Finding, causes: tuple[str, ...]) -> tuple[str, ...]:
    """The sources a correct diagnosis may give a root failure with those recorded causes: one
    per cause that has a single right answer (not noise, not duplicate)."""
    table = zoo_expectations()
    found = (table.get(mode_of(c), {}).get(finding.op) for c in causes)
    return tuple(dict.fromkeys(s for s in found if s is not None))


class SourceTally:
    """The failure-source summary of attributions given one at a time (:meth:`add`), in
    memory that does not grow with their number: counts per source, operator, depth step and
    recorded cause. :meth:`result` is what :func:`summarize_sources` returns."""

    def __init__(self) -> None:
        self.names = list(sources())
        self.abstained = 0
        self.counts = dict.fromkeys(self.names, 0)  # every counted instance (Undetermined included)
        self.by_op: dict[str, dict[str, int]] = {}
        self.reached: dict[str, list[int]] = {}  # op -> decided instances passing by each depth step
        self.decided: dict[str, int] = defaultdict(int)  # op -> decided instances
        self.causes: dict[str, list] = {}  # cause -> [instances, correct, expected sources]
        self.unstable: dict[str, list[int]] = {}  # op -> [flagged, undecided]

    def add(self, a: Attribution) -> None:
        self.abstained += a.root == Status.ABSTAIN
        if a.source is None:  # a record of an older tracebench
            return
        flags = self.unstable.setdefault(a.op, [0, 0])
        flags[0] += a.unstable is True
        flags[1] += a.unstable is None
        self.counts[a.source] = self.counts.get(a.source, 0) + 1
        op = self.by_op.setdefault(a.op, dict.fromkeys(self.names, 0))
        op[a.source] = op.get(a.source, 0) + 1
        if a.source == UNDETERMINED:
            return
        self.decided[a.op] += 1
        reached = self.reached.setdefault(a.op, [0] * len(DEPTH_GRID))
        if a.relative_depth is not None:
            for k, x in enumerate(DEPTH_GRID):
                reached[k] += a.relative_depth <= x + 1e-9
        if a.expected:  # grouped by failure mode; several modes breaking one requirement: "a+b"
            cause = self.causes.setdefault("+".join(sorted({mode_of(c) for c in a.causes})), [0, 0, set()])
            cause[0] += 1
            cause[1] += a.source in a.expected
            cause[2].update(a.expected)

    def result(self) -> dict:
        def shares(counts: dict[str, int]) -> dict[str, float]:
            n = sum(counts.values())
            return {s: round(counts.get(s, 0) / n, 4) if n else 0.0 for s in self.names}

        def accuracy(instances: int, right: int) -> dict:
            return {"instances": instances, "correct": right, "accuracy": round(right / instances, 4)}

        ops = [op for op in OPERATORS if op in self.by_op]
        counted = sum(self.counts.values())
        causes = sorted(self.causes.items())
        flagged = sum(f[0] for f in self.unstable.values())
        return {
            "unstable": {"instances": flagged, "share": round(flagged / counted, 4) if counted else 0.0,
                         "undecided": sum(f[1] for f in self.unstable.values()),
                         "by_operator": {op: round(self.unstable[op][0] / sum(self.by_op[op].values()), 4)
                                         for op in ops}},
            "instances": counted,
            "undetermined": self.counts.get(UNDETERMINED, 0),
            "abstained": self.abstained,
            "sources": shares(self.counts),
            "counts": {s: self.counts.get(s, 0) for s in self.names},
            "by_operator": {op: {**shares(self.by_op[op]), "instances": sum(self.by_op[op].values())} for op in ops},
            "cumulative_pass": {op: {f"{x:.1f}": round(self.reached[op][k] / self.decided[op], 4)
                                     if self.decided[op] else 0.0 for k, x in enumerate(DEPTH_GRID)}
                                for op in ops},
            "localization": ({**accuracy(sum(c[0] for _, c in causes), sum(c[1] for _, c in causes)),
                              "by_cause": {name: {**accuracy(c[0], c[1]), "expected": sorted(c[2])}
                                           for name, c in causes}}
                             if causes else None),
        }


def summarize_sources(attributions: Iterable[Attribution]) -> dict:
    """Shares per source (Undetermined a source of its own), overall and per operator; the
    instances flagged unstable (beside their source);
    cumulative pass rate over relative depth and localization accuracy, over the decided
    instances only."""
    tally = SourceTally()
    for a in attributions:
        tally.add(a)
    return tally.result()
