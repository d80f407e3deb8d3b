"""Attribution: from each node's results to one failure source per operator instance.

For an instance failing at the root, every root-to-leaf path is followed through the nodes
that keep it. The first node where it passes, at the smallest depth over all paths (ties:
the earlier node), names the rule applied right before it, and the rule's source is the
failure source. Never passing: Persistent Failure. Passing at the root and everywhere:
Stable Success. A result that flips back (fails again below a node where it passed, or
fails below a passing root) is Unstable.

An abstained result (the judge gave no usable answer) is unknown, never a fail. A source is
given only when no value of the unknown nodes could change it; otherwise the instance is
Undetermined, with the unknown nodes that decide it (an instance whose root abstained is
Undetermined too). An unknown node matters when, passing, it would be a first pass at a
smaller depth (or at the same depth with another source) or would flip a fail below it, or
when, failing, it would flip a pass above it. A flip between two decided results stays
Unstable whatever the unknowns.

The adaptive strategy evaluates, depth by depth, only the children that keep a root failure
not yet explained anywhere in the tree (:func:`pending`). Every node on the path to a first
pass is such a node, and breadth first the first pass found is at the smallest depth, so
first passes and persistent failures come out as with the whole tree. It cannot see flips
below a first pass, or below a passing root, that the whole tree would show.
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

    def record(self, max_depth: int, causes: tuple[str, ...] = (), expected: tuple[str, ...] = ()) -> Attribution:
        relative = None if self.depth is None else (round(self.depth / max_depth, 4) if max_depth else 0.0)
        return Attribution(op=self.op, target=self.target, root=self.root.status, source=self.source,
                           node=self.node, rule=self.rule, depth=self.depth, relative_depth=relative,
                           causes=causes, expected=expected, unknown=self.unknown)


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
    for instance in root.targets:
        at_root = results[root.id].get(instance, ABSTAINED)
        if not at_root.answered:
            findings.append(Finding(*instance, ABSTAINED, UNDETERMINED, None, None, None, (root.id,)))
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
        if flipped:  # a decided pass above a decided fail: no unknown can undo it
            source = "unstable"
        elif at_root.passed:
            source = "stable_success"
        else:
            source = "persistent_failure" if first is None else source_of[first.rule]  # type: ignore[index]
        doubtful = tuple(node.id for node, doubt_above, below in unknown if not flipped and (
            doubt_above  # failing, it would flip a pass above it
            or below[0]  # passing, it would flip a fail below it
            or first is None or node.depth < first.depth  # passing, it would be the first pass
            or (node.depth == first.depth and source_of[node.rule] != source)))  # type: ignore[index]
        if doubtful:
            findings.append(Finding(*instance, at_root, UNDETERMINED, None, None, None, doubtful))
            continue
        moved = first is not None and not at_root.passed
        depth = 0 if at_root.passed else (first.depth if first else None)
        findings.append(Finding(*instance, at_root, source, first.id if moved else None,  # type: ignore[union-attr]
                                first.rule if moved else None, depth))  # type: ignore[union-attr]
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

    def add(self, a: Attribution) -> None:
        self.abstained += a.root == Status.ABSTAIN
        if a.source is None:  # a record of an older tracebench
            return
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
        return {
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
    """Shares per source (Undetermined a source of its own), overall and per operator;
    cumulative pass rate over relative depth and localization accuracy, over the decided
    instances only."""
    tally = SourceTally()
    for a in attributions:
        tally.add(a)
    return tally.result()
