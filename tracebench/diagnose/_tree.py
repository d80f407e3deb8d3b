"""Building a diagnostic tree: the root formula, then the rules of diagnose/rules.toml, breadth first.

A node's children come from the first rule (in data order) that applies to it; a node with
one slot, or to which no rule applies, is a leaf. Nodes are named as the paper names them:
``N<depth>`` plus one label per branching on the way down, letters and digits alternating
(``N0``, ``N1``, ``N2a``, ``N2b``, ``N3b1``). A child whose formula has the canonical form of a
node already in the tree is kept as a node (``same_as`` names the first) but not expanded
and not generated again. The tree is a networkx DiGraph whose nodes carry a
:class:`TreeNode` and whose edges carry the rule applied.
"""

from __future__ import annotations

import string
from collections import deque
from dataclasses import dataclass
from typing import Callable

import networkx as nx

from ..formula import Expr, analyze, canonical, slot_count, to_text
from ..operators import Instance
from ._rules import Downgrades, number_terms, rules, targets

__all__ = ["TreeNode", "build_tree", "draw_tree", "tree_json", "tree_nodes"]


@dataclass(frozen=True)
class TreeNode:
    """One node of a diagnostic tree."""

    id: str
    parent: str | None
    rule: str | None  # the rule that made it from its parent
    depth: int
    formula: Expr
    targets: tuple[Instance, ...]  # the operator instances it keeps
    suffix: str = ""
    same_as: str | None = None  # an earlier node with the same canonical formula

    @property
    def slot(self) -> int:
        return slot_count(self.formula)

    def to_json(self) -> dict:
        return {"id": self.id, "parent": self.parent, "rule": self.rule, "depth": self.depth,
                "formula": to_text(self.formula), "slot": self.slot, "targets": [t for _, t in self.targets],
                "same_as": self.same_as}


def _label(parent_suffix: str, k: int) -> str:
    if not parent_suffix or parent_suffix[-1].isdigit():
        return string.ascii_lowercase[k] if k < 26 else f"z{k}"
    return str(k + 1)


def build_tree(formula: Expr, *, describe: Callable[[str], str | None] | None = None) -> nx.DiGraph:
    """The diagnostic tree of a formula (bound or a bare template, numbered here if need be).

    ``describe(symbol)`` gives the words a dropped anchor or relation is stated in (the
    case's grounding phrase or relation); without it, text terms carry no description.
    Raises :class:`~tracebench.formula.FormulaError` for a formula outside the language.
    """
    root = number_terms(formula)
    analyze(root)
    dg = Downgrades.of(root, describe)
    graph = nx.DiGraph(root="N0", formula=root, downgrades=dg)
    graph.add_node("N0", node=TreeNode("N0", None, None, 0, root, targets(root)))
    seen = {canonical(root): "N0"}
    queue = deque(["N0"])
    while queue:
        node: TreeNode = graph.nodes[queue.popleft()]["node"]
        if node.same_as is not None or node.slot <= 1:
            continue
        for rule in rules():
            children = rule.children(node.formula, dg)
            if children:
                break
        else:
            continue
        for k, child in enumerate(children):
            suffix = node.suffix + (_label(node.suffix, k) if len(children) > 1 else "")
            child_id = f"N{node.depth + 1}{suffix}"
            key = canonical(child)
            same = seen.setdefault(key, child_id)
            graph.add_node(child_id, node=TreeNode(child_id, node.id, rule.name, node.depth + 1, child,
                                                   targets(child, root), suffix,
                                                   None if same == child_id else same))
            graph.add_edge(node.id, child_id, rule=rule.name)
            queue.append(child_id)
    return graph


def tree_nodes(graph: nx.DiGraph) -> list[TreeNode]:
    """The nodes in breadth-first order (the order they were made and named)."""
    return [data["node"] for _, data in graph.nodes(data=True)]


def tree_json(graph: nx.DiGraph) -> dict:
    """The tree as JSON (``trace diagnose --formula F --dry-run --json``): the root formula,
    the nodes breadth first, the edges with their rules."""
    nodes = [n.to_json() for n in tree_nodes(graph)]
    return {"formula": nodes[0]["formula"], "nodes": nodes,
            "edges": [{"parent": u, "child": v, "rule": d["rule"]} for u, v, d in graph.edges(data=True)]}


def draw_tree(graph: nx.DiGraph) -> str:
    """The tree as indented text: one line per node with its rule, formula and targets."""
    lines: list[str] = []

    def visit(node_id: str, prefix: str, last: bool, top: bool) -> None:
        node: TreeNode = graph.nodes[node_id]["node"]
        branch = "" if top else ("└─ " if last else "├─ ")
        rule = f"[{node.rule}] " if node.rule else ""
        same = f"  (same as {node.same_as})" if node.same_as else ""
        kept = ", ".join(t for _, t in node.targets)
        lines.append(f"{prefix}{branch}{node.id}  {rule}{to_text(node.formula)}  slot {node.slot}{same}")
        lines.append(f"{prefix}{'' if top else ('   ' if last else '│  ')}    keeps: {kept}")
        children = list(graph.successors(node_id))
        for k, child in enumerate(children):
            visit(child, prefix + ("" if top else ("   " if last else "│  ")), k == len(children) - 1, False)

    visit(graph.graph["root"], "", True, True)
    return "\n".join(lines)
