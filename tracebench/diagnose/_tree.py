"""Building a diagnostic tree: the root formula, then the rules of diagnose/rules.toml, breadth first.

A node's children come from the first rule (in data order) that applies to it; a node with
one slot, or to which no rule applies, is a leaf. Under the paper's stop rule (``paper_stop``,
the default: the tree ``--method first-pass`` diagnoses) a node holding one attribute transfer
``E ⊕ g`` is a leaf too; ``--method rates`` grows the tree without it, where such a node has one
more child, its carrier ``E`` alone (diagnose/rules.toml, ``paper_min_attributes``).

Nodes are named as the paper names them (TRACE-Bench, arXiv 2608.16765, Figs. 9-10):
``N<depth>``, plus a letter when the depth holds several nodes, ``a``, ``b`` ... breadth first (``N0``, ``N1``, ``N2a``, ``N2b``, ``N3a``,
``N4a``, ``N4b``; past ``z``: ``aa``, ``ab`` ...). A child whose formula has the canonical
form of a node already in the tree is kept as a reference to it (``same_as`` names the
first): not expanded and not generated again. The tree is a networkx DiGraph whose nodes carry a
:class:`TreeNode` and whose edges carry the rule applied.

The rules read only a formula's structure (roles, slots, symbols), never its bindings, so a
tree is built once per numbered formula stripped of its bindings (its *shape*, memoized) and
each case's tree puts the case's own bound terms back into the shape's nodes. Two nodes have
the same canonical form unbound exactly when they do bound: every numbered symbol is one term.
"""

from __future__ import annotations

import string
from collections import Counter, deque
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable

import networkx as nx

from ..formula import Anchor, Apply, Compose, Disentangle, Expr, Text, analyze, canonical, slot_count, symbol, to_text
from ..formula import walk
from ..operators import Instance
from ._rules import Downgrades, number_terms, rules, targets

__all__ = ["TreeNode", "TreeShape", "bound_tree", "build_tree", "draw_tree", "tree_json", "tree_nodes", "tree_shape", "unbound",
           "grow_tree"]


@dataclass(frozen=True)
class TreeNode:
    """One node of a diagnostic tree."""

    id: str
    parent: str | None
    rule: str | None  # the rule that made it from its parent
    depth: int
    formula: Expr
    targets: tuple[Instance, ...]  # the operator instances it keeps
    same_as: str | None = None  # an earlier node with the same canonical formula
    clutter: bool = False  # whether its case keeps the root's distractor references (the root of a cluttered case)

    @property
    def slot(self) -> int:
        return slot_count(self.formula)

    def to_json(self) -> dict:
        return {"id": self.id, "parent": self.parent, "rule": self.rule, "depth": self.depth,
                "formula": to_text(self.formula), "slot": self.slot, "targets": [t for _, t in self.targets],
                "same_as": self.same_as, **({"clutter": True} if self.clutter else {})}


def _letters(k: int) -> str:
    """The ``k``-th label of a depth: a .. z, aa, ab .. (spreadsheet columns)."""
    label = ""
    k += 1
    while k:
        k, r = divmod(k - 1, 26)
        label = string.ascii_lowercase[r] + label
    return label


def _paper_names(nodes: list[TreeNode]) -> tuple[TreeNode, ...]:
    """The nodes (breadth first, provisionally named) under the paper's names."""
    per_depth = Counter(n.depth for n in nodes)
    met: Counter = Counter()
    names: dict[str, str] = {}
    for n in nodes:
        names[n.id] = f"N{n.depth}" + (_letters(met[n.depth]) if per_depth[n.depth] > 1 else "")
        met[n.depth] += 1
    return tuple(replace(n, id=names[n.id], parent=n.parent and names[n.parent],
                         same_as=n.same_as and names[n.same_as]) for n in nodes)


def unbound(expr: Expr) -> Expr:
    """The formula without bindings or descriptions, numbers kept: what its tree depends on."""
    if isinstance(expr, Compose):
        return Compose(tuple(unbound(a) for a in expr.args), expr.index)
    if isinstance(expr, Apply):
        return Apply(unbound(expr.carrier), tuple(unbound(m) for m in expr.modifiers))  # type: ignore[misc]
    if isinstance(expr, Anchor):
        return expr if expr.binding is None else Anchor(expr.index)
    if isinstance(expr, Disentangle):
        return expr if expr.binding is None else Disentangle(expr.kind, expr.index)
    return expr if expr.description is None else Text(expr.name, expr.index)


@dataclass(frozen=True)
class TreeShape:
    """The tree of an unbound formula: its nodes breadth first (each node's edge is from its
    ``parent`` by its ``rule``) and its downgrades, undescribed."""

    nodes: tuple[TreeNode, ...]
    downgrades: Downgrades


def tree_shape(root: Expr, clutter: bool = False, paper_stop: bool = True) -> TreeShape:
    """The tree of an unbound, numbered, valid formula (:func:`unbound`), memoized; ``clutter``:
    the root's case has distractor references; ``paper_stop``: as :func:`grow_tree`."""
    return _shape(root, clutter, paper_stop)


@lru_cache(maxsize=512)
def _shape(root: Expr, clutter: bool, paper_stop: bool) -> TreeShape:  # one memo entry whatever the call form
    dg = Downgrades.of(root)
    return TreeShape(grow_tree(root, dg, clutter, paper_stop), dg)


def grow_tree(root: Expr, dg: Downgrades, clutter: bool = False, paper_stop: bool = True) -> tuple[TreeNode, ...]:
    """The rules applied to a numbered, valid formula, breadth first, bound or not: the tree
    :func:`tree_shape` memoizes, and :func:`bound_tree` rebinds. A cluttered root (``clutter``)
    takes the reference rules only (distractor removal), every other node the formula rules.
    ``paper_stop``: a node holding one attribute transfer ``E ⊕ g`` is a leaf, as the paper stops
    (first-pass); without it (``--method rates``) it has a child, its carrier ``E`` alone."""
    nodes = [TreeNode("N0", None, None, 0, root, targets(root), clutter=clutter)]
    seen = {(canonical(root), clutter): "N0"}
    queue = deque([nodes[0]])
    while queue:
        node = queue.popleft()
        if node.same_as is not None or (node.slot <= 1 and not node.clutter):
            continue
        for rule in rules():
            children = rule.children(node.formula, dg, paper_stop) if rule.on_clutter == node.clutter else ()
            if children:
                break
        else:
            continue
        for child in children:
            child_id = str(len(nodes))  # provisional: named once the tree is whole
            same = seen.setdefault((canonical(child), False), child_id)
            nodes.append(TreeNode(child_id, node.id, rule.name, node.depth + 1, child, targets(child, root),
                                  None if same == child_id else same))
            queue.append(nodes[-1])
    return _paper_names(nodes)


def _bind(expr: Expr, leaves: dict[str, Expr]) -> Expr:
    """An unbound formula of a tree's shape with the tree's own bound terms put back."""
    if isinstance(expr, Compose):
        return Compose(tuple(_bind(a, leaves) for a in expr.args), expr.index)
    if isinstance(expr, Apply):
        return Apply(_bind(expr.carrier, leaves), tuple(leaves[symbol(m)] for m in expr.modifiers))  # type: ignore[misc]
    return leaves[symbol(expr)]


def build_tree(formula: Expr, *, describe: Callable[[str], str | None] | None = None,
               paper_stop: bool = True) -> nx.DiGraph:
    """The diagnostic tree of a formula (bound or a bare template, numbered here if need be).

    ``describe(symbol)`` gives the words a dropped anchor or relation is stated in (the
    case's grounding phrase or relation); without it, text terms carry no description.
    ``paper_stop``: the tree of ``--method first-pass`` (the default), else of ``--method rates``
    (:func:`grow_tree`).
    Raises :class:`~tracebench.formula.FormulaError` for a formula outside the language.
    The graph's ``shape`` is the tree of the unbound formula (:func:`tree_shape`).
    """
    root = number_terms(formula)
    analyze(root)
    return bound_tree(root, describe, paper_stop=paper_stop)


def bound_tree(root: Expr, describe: Callable[[str], str | None] | None = None, clutter: bool = False,
               paper_stop: bool = True) -> nx.DiGraph:
    """:func:`build_tree` of a numbered formula already known to be valid (a parsed case's);
    ``clutter``: the case has distractor references (the tree starts by removing them);
    ``paper_stop``: first-pass's tree, else rates' (:func:`grow_tree`)."""
    shape = tree_shape(unbound(root), clutter, paper_stop)
    dg = shape.downgrades.described(describe)
    leaves: dict[str, Expr] = {symbol(n): n for n in walk(root) if isinstance(n, (Anchor, Disentangle, Text))}
    leaves.update((symbol(t), t) for t in (*dg.anchors.values(), *dg.relations.values()))
    graph = nx.DiGraph(root="N0", formula=root, downgrades=dg, shape=shape)
    graph.add_nodes_from((n.id, {"node": TreeNode(n.id, n.parent, n.rule, n.depth,
                                                  root if n.parent is None else _bind(n.formula, leaves), n.targets,
                                                  n.same_as, n.clutter)}) for n in shape.nodes)
    graph.add_edges_from((n.parent, n.id, {"rule": n.rule}) for n in shape.nodes[1:])
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
        if node.same_as:  # a reference to the node it repeats, not a leaf of its own
            lines.append(f"{prefix}{branch}{node.id}  {rule}→ {node.same_as} (the same sub-case)")
            return
        kept = ", ".join(t for _, t in node.targets)
        lines.append(f"{prefix}{branch}{node.id}  {rule}{to_text(node.formula)}  slot {node.slot}"
                     + ("  (with its distractors)" if node.clutter else ""))
        lines.append(f"{prefix}{'' if top else ('   ' if last else '│  ')}    keeps: {kept}")
        children = list(graph.successors(node_id))
        for k, child in enumerate(children):
            visit(child, prefix + ("" if top else ("   " if last else "│  ")), k == len(children) - 1, False)

    visit(graph.graph["root"], "", True, True)
    return "\n".join(lines)
