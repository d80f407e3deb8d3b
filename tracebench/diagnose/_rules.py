"""The simplification rules of diagnostic trees (TRACE-Bench, arXiv 2608.16765), as rewrites of the formula AST.

Each rule is a pure function from a node's formula to its children's formulas (none when it
does not apply). Their order, titles and the failure source each isolates are data
(``diagnose/rules.toml``); the implementations are looked up by name. Removed reference
content is never deleted silently: an anchor becomes a text entity ``T_e`` and a ``g_rel``
a text relation ``T_rel`` (both described from the case's bindings), and other g terms leave
the formula but stay in the node's prompt as words (:mod:`tracebench.diagnose._node`).
Every child has fewer slots than its parent; a node with one slot is a leaf, and so, under
the paper's stop rule (``paper_stop``: ``--method first-pass``), is one attribute transfer
``E ⊕ g`` (the attribute rule's ``paper_min_attributes`` in diagnose/rules.toml).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Callable, Mapping

from ..formula import Anchor, Apply, Compose, Disentangle, Expr, Node, Text, analyze, slot_count, symbol, walk
from ..operators import LOCAL_ROLES, SCENE, Family, Instance, Operator, Role, apply_target
from ..resources import DataFile, table_name

__all__ = ["Downgrades", "Rule", "Source", "number_terms", "rules", "sources", "targets", "zoo_expectations"]

RULES_FILE = "rules.toml"
SOURCES_FILE = "sources.toml"
_RULES = DataFile("diagnose", RULES_FILE)
_SOURCES = DataFile("diagnose", SOURCES_FILE)
_DROP = object()  # a modifier a rewrite takes out of the formula


@dataclass(frozen=True)
class Source:
    """A failure source: its key (``joint_composition``), title and meaning."""

    name: str
    title: str
    means: str


@dataclass(frozen=True)
class Rule:
    """One simplification rule, as diagnose/rules.toml states it. ``paper_min_attributes``: of a
    rule that removes attributes, the fewest an entity must have for the rule to apply under the
    paper's stop rule (None: the rule applies the same under both)."""

    name: str
    title: str
    source: str
    does: str
    rewrite: Callable[..., tuple[Expr, ...]]
    paper_min_attributes: int | None = None

    def children(self, expr: Expr, dg: "Downgrades", paper_stop: bool = True) -> tuple[Expr, ...]:
        """The children the rule makes of a node (none when it does not apply); ``paper_stop``:
        the paper's stop rule holds (a node holding one attribute transfer ``E ⊕ g`` is a leaf:
        first-pass), else the rule splits every node it can (``--method rates``)."""
        if paper_stop and self.paper_min_attributes is not None:
            return self.rewrite(expr, dg, min_attributes=self.paper_min_attributes)
        return self.rewrite(expr, dg)

    @property
    def on_clutter(self) -> bool:
        """Whether the rule simplifies a case's references rather than its formula: it applies to a
        node whose case has distractors, and only to those."""
        return self.name in _CLUTTER_RULES


@cache
def sources() -> dict[str, Source]:
    """The failure-source catalogue, in report order."""
    raw = _SOURCES.tables("", _SOURCES.read(), "sources")
    return {name: Source(name, *(_SOURCES.value(table_name("sources", name), spec, key, str)
                                 for key in ("title", "means"))) for name, spec in raw.items()}


@cache
def rules() -> tuple[Rule, ...]:
    """The rules in the order the engine tries them."""
    known = sources()
    out = []
    for k, spec in enumerate(_RULES.value("", _RULES.read(), "rule", list, []), 1):
        table = f"rule {k}"
        name = _RULES.value(table, spec, "name", str)
        if name not in _IMPLEMENTATIONS:
            raise _RULES.error(f"unknown rule {name!r} (known: {', '.join(_IMPLEMENTATIONS)})", table, "name")
        source = _RULES.value(table, spec, "source", str)
        if source not in known:
            raise _RULES.error(f"{source!r} is not in diagnose/{SOURCES_FILE} ({', '.join(known)})", table, "source")
        if name in _CLUTTER_RULES and out:
            raise _RULES.error(f"rule {name} must come first (a cluttered case is simplified by its references "
                               "before its formula)", table)
        least = _RULES.value(table, spec, "paper_min_attributes", int, None)
        if least is not None and name not in _COUNTS_ATTRIBUTES:
            raise _RULES.error(f"rule {name} removes no attributes", table, "paper_min_attributes")
        if least is not None and least < 1:
            raise _RULES.error(f"{least} must be at least 1", table, "paper_min_attributes")
        out.append(Rule(name, _RULES.value(table, spec, "title", str), source, _RULES.value(table, spec, "does", str),
                        _IMPLEMENTATIONS[name], least))
    return tuple(out)


@cache
def zoo_expectations() -> dict[str, dict[str, str]]:
    """Synthetic failure mode -> operator -> the source a correct diagnosis names."""
    raw = _SOURCES.tables("", _SOURCES.read(), "zoo", {})
    for mode, table in raw.items():
        for op, source in table.items():
            if source not in sources():
                raise _SOURCES.error(f"unknown source {source!r}", table_name("zoo", mode), op)
    return raw


# ------------------------------------------------------------------------------ numbering

def number_terms(expr: Expr) -> Expr:
    """The formula with every unnumbered symbol numbered (``C(f, f) ⊕ g_style`` ->
    ``C1(f1, f2) ⊕ g_style1``): per family, after the highest number already used, in order
    of appearance. Diagnosis names targets by symbol, so a bare template needs numbers."""
    highest: dict[tuple, int] = {}

    def family(node: Node) -> tuple:
        if isinstance(node, Disentangle):
            return ("g", node.kind)
        if isinstance(node, Text):
            return ("T", node.name)
        return (type(node).__name__,)

    for node in walk(expr):
        if getattr(node, "index", None) is not None:
            highest[family(node)] = max(highest.get(family(node), 0), node.index)

    def next_index(node: Node) -> int:
        highest[family(node)] = highest.get(family(node), 0) + 1
        return highest[family(node)]

    def renumber(node: Node) -> Node:
        if isinstance(node, Compose):
            index = node.index if node.index is not None else next_index(node)
            return Compose(tuple(renumber(a) for a in node.args), index)
        if isinstance(node, Apply):
            carrier = renumber(node.carrier)
            return Apply(carrier, tuple(renumber(m) for m in node.modifiers))
        if node.index is not None:
            return node
        if isinstance(node, Anchor):
            return Anchor(next_index(node), node.binding)
        if isinstance(node, Disentangle):
            return Disentangle(node.kind, next_index(node), node.binding)
        return Text(node.name, next_index(node), node.description)

    return renumber(expr)


# ------------------------------------------------------------------------------ rewriting

def _rewrite(expr: Expr, swap: Callable[[Node], object]) -> Expr:
    """A copy of ``expr`` in which ``swap`` replaces nodes: it returns the node itself to keep
    it, another node to put in its place, or ``_DROP`` to take a modifier out (an Apply left
    without modifiers becomes its carrier)."""
    out = swap(expr)
    if out is not expr:
        return out  # type: ignore[return-value]
    if isinstance(expr, Compose):
        return Compose(tuple(_rewrite(a, swap) for a in expr.args), expr.index)
    if isinstance(expr, Apply):
        carrier = _rewrite(expr.carrier, swap)
        modifiers = tuple(m for m in (swap(m) for m in expr.modifiers) if m is not _DROP)
        return Apply(carrier, modifiers) if modifiers else carrier  # type: ignore[arg-type]
    return expr


def _replacing(old: Node, new: object) -> Callable[[Node], object]:
    return lambda node: new if node is old else node


@dataclass(frozen=True)
class Downgrades:
    """How one tree states dropped reference content: each anchor's text entity and each
    relation's text relation, numbered after the root's own text terms and described by
    ``describe`` (the case's grounding phrase or relation; none for a bare template)."""

    roles: Mapping[str, str]  # symbol -> role, for every term of the root
    anchors: Mapping[str, Text]
    relations: Mapping[str, Text]

    @classmethod
    def of(cls, root: Expr, describe: Callable[[str], str | None] | None = None) -> "Downgrades":
        terms = analyze(root)
        used = {name: max((t.node.index or 0 for t in terms if isinstance(t.node, Text) and t.node.name == name),
                          default=0) for name in ("e", "rel")}
        anchors: dict[str, Text] = {}
        relations: dict[str, Text] = {}
        for t in terms:
            text = describe(t.symbol) if describe else None
            if t.op == Family.ANCHOR:
                used["e"] += 1
                anchors[t.symbol] = Text("e", used["e"], text)
            elif t.op is Family.DISENTANGLE and t.role is Role.RELATION:
                used["rel"] += 1
                relations[t.symbol] = Text("rel", used["rel"], text)
        return cls({t.symbol: t.role for t in terms}, anchors, relations)

    def described(self, describe: Callable[[str], str | None] | None) -> "Downgrades":
        """These downgrades with the descriptions ``describe`` gives: ``Downgrades.of(root,
        describe)`` is ``Downgrades.of(unbound root).described(describe)``, since the symbols
        and numbers depend only on the formula's structure."""
        if describe is None:
            return self
        return Downgrades(self.roles, {s: Text(t.name, t.index, describe(s)) for s, t in self.anchors.items()},
                          {s: Text(t.name, t.index, describe(s)) for s, t in self.relations.items()})

    def role(self, node: Node) -> str | None:
        return self.roles.get(symbol(node))

    def in_words(self, expr: Expr) -> Expr:
        """A branch with every reference stated in words: anchors become text entities,
        relations text relations, and other g terms leave the formula."""
        def swap(node: Node) -> object:
            if isinstance(node, Anchor):
                return self.anchors[symbol(node)]
            if isinstance(node, Disentangle):
                return self.relations[symbol(node)] if self.role(node) is Role.RELATION else _DROP
            return node

        return _rewrite(expr, swap)


def _split_target(expr: Expr) -> Compose | None:
    """The outermost composition with two or more reference-conditioned branches."""
    return next((n for n in walk(expr) if isinstance(n, Compose)
                 and sum(1 for a in n.args if slot_count(a) > 0) >= 2), None)


def _strictly_inside(node: Node, outer: Node) -> bool:
    return node is not outer and any(n is node for n in walk(outer))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ the four rules

def strip_global(expr: Expr, dg: Downgrades) -> tuple[Expr, ...]:
    term = next((t for t in analyze(expr) if t.op is Family.DISENTANGLE and t.role is Role.GLOBAL), None)
    if term is None:
        return ()
    return (_rewrite(expr, _replacing(term.node, _DROP)),)


def simplify_relation(expr: Expr, dg: Downgrades) -> tuple[Expr, ...]:
    target = _split_target(expr)
    for t in analyze(expr):
        if t.op is Family.DISENTANGLE and t.role is Role.RELATION:
            if target is not None and _strictly_inside(t.carrier, target):
                continue  # its composition is split later, inside a split still pending
            return (_rewrite(expr, _replacing(t.node, dg.relations[t.symbol])),)
    return ()


def flatten_composition(expr: Expr, dg: Downgrades) -> tuple[Expr, ...]:
    target = _split_target(expr)
    if target is None:
        return ()
    branches = [k for k, a in enumerate(target.args) if slot_count(a) > 0]
    children = []
    for keep in branches:
        args = tuple(a if k == keep or k not in branches else dg.in_words(a) for k, a in enumerate(target.args))
        children.append(_rewrite(expr, _replacing(target, Compose(args, target.index))))
    return tuple(children)


def remove_attributes(expr: Expr, dg: Downgrades, min_attributes: int = 1) -> tuple[Expr, ...]:
    """Children of the first entity with local attributes, when it has ``min_attributes`` or more
    (the paper's stop rule asks for 2: one attribute transfer ``E ⊕ g`` is a leaf)."""
    entity = next((n for n in walk(expr) if isinstance(n, Apply) and not isinstance(n.carrier, Compose)
                   and any(dg.role(m) in LOCAL_ROLES for m in n.modifiers)), None)
    if entity is None:
        return ()
    local = [k for k, m in enumerate(entity.modifiers) if dg.role(m) in LOCAL_ROLES]
    if len(local) < min_attributes:
        return ()
    others = [k for k, m in enumerate(entity.modifiers) if dg.role(m) not in LOCAL_ROLES]

    def keeping(kept: int | None) -> Expr:
        """The entity with its other modifiers and the local attribute at position ``kept``
        (none when None), in their order: each child costs its own size, not the chain's."""
        at = len(others) if kept is None else bisect.bisect(others, kept)
        positions = others[:at] + ([] if kept is None else [kept]) + others[at:]
        modifiers = tuple(entity.modifiers[k] for k in positions)
        return _rewrite(expr, _replacing(entity, Apply(entity.carrier, modifiers) if modifiers else entity.carrier))

    children = []
    if isinstance(entity.carrier, Anchor):
        children.append(keeping(None))
    if len(local) >= 2:
        children += [keeping(k) for k in local]
    return tuple(children)


def remove_distractors(expr: Expr, dg: Downgrades) -> tuple[Expr, ...]:
    """The one child of a cluttered node: the same formula, its case without distractors
    (:func:`tracebench.diagnose._node.node_case` keeps only the images the formula uses)."""
    return (expr,)


_CLUTTER_RULES = frozenset({"distractor_removal"})
_COUNTS_ATTRIBUTES = frozenset({"attribute_removal"})  # the rules a paper_min_attributes applies to
_IMPLEMENTATIONS: dict[str, Callable[[Expr, Downgrades], tuple[Expr, ...]]] = {
    "distractor_removal": remove_distractors,
    "global_stripping": strip_global,
    "relation_simplification": simplify_relation,
    "composition_flattening": flatten_composition,
    "attribute_removal": remove_attributes,
}


# ------------------------------------------------------------------------------ targets

def _units_by_composition(expr: Expr, roles: Mapping[str, str]) -> dict[str, int]:
    """C symbol -> reference-conditioned terms inside it (relations applied to it included,
    global conditions not)."""
    out: dict[str, int] = {}

    def visit(node: Expr, enclosing: tuple[str, ...]) -> None:
        if isinstance(node, Compose):
            out[symbol(node)] = 0
            for arg in node.args:
                visit(arg, enclosing + (symbol(node),))
        elif isinstance(node, Apply):
            visit(node.carrier, enclosing)
            inner = enclosing + ((symbol(node.carrier),) if isinstance(node.carrier, Compose) else ())
            for m in node.modifiers:
                if isinstance(m, Disentangle) and roles.get(symbol(m)) is not Role.GLOBAL:
                    for c in inner:
                        out[c] += 1
        elif isinstance(node, Anchor):
            for c in enclosing:
                out[c] += 1

    visit(expr, ())
    return out


@lru_cache(maxsize=16)
def _root_units(root: Expr) -> dict[str, int]:
    """:func:`_units_by_composition` of a tree's root, once per tree rather than once per node."""
    return _units_by_composition(root, {t.symbol: t.role for t in analyze(root)})


def targets(formula: Expr, root: Expr | None = None) -> tuple[Instance, ...]:
    """The operator instances a node keeps, as (operator, target) in checklist order:
    anchors, each g term and its binding, then compositions (a formula without C: the implicit
    scene ``C0``, kept at every node). A composition is kept while it
    holds reference-conditioned content (a branch stated wholly in words is no longer
    judged as a composition) or never held any at the ``root``."""
    terms = analyze(formula)
    roles = {t.symbol: t.role for t in terms}
    out: list[Instance] = []
    for t in terms:
        if t.op is Family.ANCHOR:
            out.append(Instance(Operator.ANCHOR, t.symbol))
        elif t.op is Family.DISENTANGLE:
            out += [Instance(Operator.DISENTANGLE, t.symbol),
                    Instance(Operator.APPLY, apply_target(symbol(t.carrier), t.symbol))]
    units = _units_by_composition(formula, roles)
    root_units = units if root is None else _root_units(root)
    out += [Instance(Operator.COMPOSE, c) for c, n in units.items() if n > 0 or root_units.get(c) == 0]
    if not units:  # a formula without C is one scene (the checklist's implicit composition)
        out.append(Instance(Operator.COMPOSE, SCENE))
    return tuple(out)
