"""A diagnostic node as a case of its own: terms, references, prompt and checklist.

The node's formula says which root terms keep their references. Every other root term is
stated in words, from the case's bindings: an anchor becomes a text entity with the
anchor's description, a relation a text relation, any other g term a sentence of the scene
paragraph (``templates/prompts/lines.toml``, table ``prose``). So the node keeps the root's
scene (same opening, same entities, same handles) and its text-only prompt is the root's.
References are only the images the node still uses, renumbered Image 1..m in order of
first mention; the checklist is the root's questions on the targets the node keeps, with
the root's ids, recompiled so they name the node's images and entities. A node never keeps the
root's distractor references (the first rule of a cluttered case's tree removes them); in pool
mode it keeps naming its entity terms by description, now with their true sources alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..checklist import compile_checklist
from ..errors import TraceError
from ..formula import Anchor, Apply, Compose, Expr, Text, analyze
from ..formula import parse, relabel_images, symbol, template_of, to_text, walk
from ..operators import ENTITY_ROLES, Family, Role
from ..realize import realize
from ..records import Case, Clutter, PoolTarget, Question, Reference, TermBinding
from ._rules import Downgrades
from ._tree import TreeNode, unbound

__all__ = ["NodeShape", "compositions_of", "node_case", "node_shape", "root_formula"]


def root_formula(case: Case) -> Expr:
    """The case's bound formula; a TraceError naming the case when it does not parse."""
    try:
        return parse(case.formula)
    except TraceError as err:
        raise TraceError(f"case {case.id}: formula: {err}") from None


def compositions_of(formula: Expr) -> tuple[tuple[str, tuple[str, ...], str | None], ...]:
    """(C symbol, the entity symbols inside it, the enclosing C) per composition, in order:
    what the checklist compiler reads (binding produces the same for a sampled case)."""
    entities = {t.symbol for t in analyze(formula) if t.role in ENTITY_ROLES}
    out = []

    def visit(node: Expr, parent: str | None) -> None:
        if isinstance(node, Compose):
            name = symbol(node)
            members = tuple(symbol(n) for n in walk(node) if isinstance(n, (Anchor, Text)) and symbol(n) in entities)
            out.append((name, members, parent))
            for arg in node.args:
                visit(arg, name)
        elif isinstance(node, Apply):
            visit(node.carrier, parent)

    visit(formula, None)
    return tuple(out)


def _words_symbol(g_symbol: str) -> str:
    """The symbol of a g term stated in words: g_pattern1 -> T_pattern1."""
    return "T_" + g_symbol.removeprefix("g_").removeprefix("g")


def _node_terms(root: Case, kept: frozenset[str], dg: Downgrades) -> list[tuple[TermBinding, dict]]:
    """Each root term and the update that makes it the node's term (kept, or stated in words)."""
    renamed = {t.symbol: symbol(dg.anchors[t.symbol]) for t in root.terms if t.op == Family.ANCHOR and t.symbol not in kept}
    renamed |= {t.symbol: symbol(dg.relations[t.symbol]) for t in root.terms
                if t.op is Family.DISENTANGLE and t.role is Role.RELATION and t.symbol not in kept}

    def moved(t: TermBinding) -> dict:
        return {"carrier": renamed.get(t.carrier, t.carrier) if t.carrier else None,
                "participants": tuple(renamed.get(p, p) for p in t.participants)}

    terms = []
    for t in root.terms:
        if t.op == Family.TEXT or t.symbol in kept:
            terms.append((t, moved(t)))
            continue
        words = {"op": Family.TEXT, "image": None, "source_id": None, "entity": None, "entity_index": None,
                 "source_entities": None, "replaces": t.symbol, **moved(t)}
        if t.op == Family.ANCHOR:
            words |= {"symbol": renamed[t.symbol], "role": Role.TEXT, "kind": "e"}
        elif t.role is Role.RELATION:
            words |= {"symbol": renamed[t.symbol]}
        else:
            words |= {"symbol": _words_symbol(t.symbol)}
        terms.append((t, words))
    return terms


@dataclass(frozen=True)
class NodeShape:
    """What a node's case takes from the node's unbound formula alone (the same for every case
    whose tree has that node): the f and g symbols it keeps, its compositions, its template."""

    kept: frozenset[str]
    compositions: tuple[tuple[str, tuple[str, ...], str | None], ...]
    template: str


@lru_cache(maxsize=4096)
def node_shape(formula: Expr) -> NodeShape:
    """:class:`NodeShape` of a node's formula (bound or not: bindings play no part)."""
    formula = unbound(formula)
    return NodeShape(frozenset(t.symbol for t in analyze(formula) if t.op in (Family.ANCHOR, Family.DISENTANGLE)), compositions_of(formula),
                     to_text(template_of(formula)))


def _labelled(updates: list[tuple[TermBinding, dict]]) -> tuple[tuple[TermBinding, ...], dict[str, str]]:
    """The node's terms, their images renumbered Image 1..m in order of first mention, and the
    renumbering (a root image -> the node's)."""
    images = [update.get("image", t.image) for t, update in updates]  # after the update
    label = {old: f"Image {k + 1}" for k, old in enumerate(dict.fromkeys(i for i in images if i is not None))}
    terms = tuple(t.model_copy(update=update | {"image": label[image]} if image else update)
                  for (t, update), image in zip(updates, images))
    return terms, label


def _relabelled(formula: Expr, label: dict[str, str]) -> Expr:
    number = {int(old.split()[-1]): int(new.split()[-1]) for old, new in label.items()}
    return formula if all(k == v for k, v in number.items()) else relabel_images(formula, number)


def _references(root: Case, label: dict[str, str]) -> tuple[Reference, ...]:
    """The root's references the node still uses, renumbered, in order."""
    return tuple(sorted((r.model_copy(update={"image": label[r.image]}) for r in root.references
                         if r.image in label), key=lambda r: int(r.image.split()[-1])))


def _pooled(root: Case, kept: frozenset[str], label: dict[str, str]) -> tuple[PoolTarget, ...]:
    """Pool mode: the kept entity terms, named by description, with their true sources alone."""
    return tuple(p.model_copy(update={"image": label[p.image], "confusers": (), "confusion": 0.0})
                 for p in (root.clutter.pooled if root.clutter else ()) if p.term in kept and p.image in label)


def _checklist(root: Case, node: TreeNode, terms: tuple[TermBinding, ...], shape: NodeShape) -> tuple[Question, ...]:
    """The root's questions on the node's targets, recompiled for its terms, with the root's
    ids; dependencies on questions the node does not ask are dropped."""
    wanted = {t for _, t in node.targets}
    root_ids = {q.id for q in root.checklist}
    questions = [q for q in compile_checklist(terms, shape.compositions) if q.id in root_ids and q.target in wanted]
    ids = {q.id for q in questions}
    return tuple(q if all(d in ids for d in q.depends_on)
                 else q.model_copy(update={"depends_on": tuple(d for d in q.depends_on if d in ids)})
                 for q in questions)


def node_case(root: Case, node: TreeNode, dg: Downgrades, case_id: str, shape: NodeShape | None = None) -> Case:
    """The case a diagnostic node asks a generator for (``case_id`` names it); ``shape`` is
    :func:`node_shape` of the node's formula, when the caller holds it."""
    shape = shape or node_shape(node.formula)
    terms, label = _labelled(_node_terms(root, shape.kept, dg))
    pooled = _pooled(root, shape.kept, label)
    prompts = realize(terms, bool(shape.compositions), scene=root.scene, pooled=frozenset(p.term for p in pooled))
    return Case(id=case_id, slot=node.slot, template=shape.template, formula=to_text(_relabelled(node.formula, label)),
                application=root.application, prompt=prompts.prompt, text_only_prompt=prompts.text_only,
                scene=root.scene, references=_references(root, label), terms=terms,
                checklist=_checklist(root, node, terms, shape),
                clutter=Clutter(mode="pool", distractors=(), pooled=pooled) if pooled else None)
