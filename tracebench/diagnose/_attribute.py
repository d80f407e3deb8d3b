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

from ..operators import OPERATORS, Instance
from ..outcomes import ABSTAINED, Outcome, Status
from ..records import Attribution
from ._rules import rules, sources, zoo_expectations
from ._tree import TreeNode

__all__ = ["DEPTH_GRID", "UNDETERMINED", "Finding", "attribute", "localization", "mode_of", "pending", "summarize_sources"]

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


def summarize_sources(attributions: list[Attribution]) -> dict:
    """Shares per source (Undetermined a source of its own), overall and per operator;
    cumulative pass rate over relative depth and localization accuracy, over the decided
    instances only."""
    names = list(sources())
    counted = [a for a in attributions if a.source is not None]  # None: records of an older tracebench
    decided = [a for a in counted if a.source != UNDETERMINED]

    def shares(items: list[Attribution]) -> dict[str, float]:
        n = len(items)
        return {s: round(sum(a.source == s for a in items) / n, 4) if n else 0.0 for s in names}

    by_op: dict[str, list[Attribution]] = defaultdict(list)
    for a in counted:
        by_op[a.op].append(a)
    ops = [op for op in OPERATORS if op in by_op]

    def cumulative(items: list[Attribution]) -> dict[str, float]:
        items = [a for a in items if a.source != UNDETERMINED]
        return {f"{x:.1f}": round(sum(a.relative_depth is not None and a.relative_depth <= x + 1e-9 for a in items)
                                  / len(items), 4) if items else 0.0 for x in DEPTH_GRID}

    localized = [a for a in decided if a.expected]
    per_cause: dict[str, list[Attribution]] = defaultdict(list)
    for a in localized:  # grouped by failure mode; several modes breaking one requirement: "a+b"
        per_cause["+".join(sorted({mode_of(c) for c in a.causes}))].append(a)

    def accuracy(items: list[Attribution]) -> dict:
        right = sum(a.source in a.expected for a in items)
        return {"instances": len(items), "correct": right, "accuracy": round(right / len(items), 4)}

    return {
        "instances": len(counted),
        "undetermined": len(counted) - len(decided),
        "abstained": sum(a.root == Status.ABSTAIN for a in attributions),
        "sources": shares(counted),
        "counts": {s: sum(a.source == s for a in counted) for s in names},
        "by_operator": {op: {**shares(by_op[op]), "instances": len(by_op[op])} for op in ops},
        "cumulative_pass": {op: cumulative(by_op[op]) for op in ops},
        "localization": ({**accuracy(localized), "by_cause": {c: {**accuracy(v), "expected": sorted({e for a in v for e in a.expected})}
                                                              for c, v in sorted(per_cause.items())}}
                         if localized else None),
    }
