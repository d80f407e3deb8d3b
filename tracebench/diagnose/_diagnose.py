"""``trace diagnose``: the diagnostic trees of a run's cases, generated, judged and attributed.

Order of work: read the run as a stream and pick the cases (only their ids are kept); then,
a window of :data:`WINDOW` cases at a time (read again from the run), build every case's
whole tree (pure, no model call) and each node's sub-case; merge identical sub-cases (same
content, whatever the tree or window: a sub-case met again keeps its first id and verdicts);
then evaluate in rounds through the ``trace run`` harness, so every model call is cached,
resumable, concurrent and turns failures into abstentions:

- ``full``: one round holding every distinct sub-case;
- ``adaptive``: one round per depth, holding only the children of nodes where a root
  failure is still unexplained, and only those children that keep such a failure.

Each round is a benchmark folder (``rounds/NN/cases``, trace sample's format) and a run
folder (``rounds/NN/run``); a rerun with the same arguments recreates the same rounds and
resumes them. Root verdicts are the run's own when the generator and judges are the run's;
otherwise the root is generated again as node ``N0``. Rounds are numbered one after the
other across windows. The end: ``trees.jsonl`` (one :class:`~tracebench.records.DiagnosticTree`
per case, written as each window finishes, in place at the end) and ``summary.json`` (counted
from the trees as they are written). Memory is one window's cases, sub-cases and trees, plus a
key's first 16 bytes and an id per sub-case planned, whatever the number of cases diagnosed.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, TypeVar

import networkx as nx

from .. import __version__
from ..errors import TraceError
from ..library import staged_output
from ..records import (CASES, DIAGNOSIS_MANIFEST, MAX_SAMPLES, NODES, SUMMARY, TREES, Case, DiagnosisManifest,
                       DiagnosisSummary, DiagnosticEdge, MixShare, DiagnosticNode, DiagnosticTree, NodeOccurrence, SampleManifest)
from ..gcpolicy import fewer_collections
from ..resources import data_hash
from ..safepaths import MAX_ID, inside, safe_id_problem
from ..outcomes import ABSTAINED, Outcome, majority_verdicts
from ..providers import synthetic_profile
from ..run import abstention_reason, shard_of, stream_run
from ..cache import sha256
from ..jsonfiles import record_line
from ..sample import ManifestInputs, read_sample_manifest, write_benchmark
from ..score import Gating, instance_results
from ..operators import Instance
from ._attribute import Finding, SourceTally, attribute, localization, pending
from ._node import node_case, node_shape, root_formula
from ._rules import RULES_FILE, SOURCES_FILE, number_terms, sources
from ._tree import TreeNode, bound_tree, tree_nodes

if TYPE_CHECKING:
    from ._rates import RatesSettings

__all__ = ["Evaluated", "Evaluator", "RatesState", "RootEvidence", "TreePlan", "select_cases", "diagnose", "export_nodes", "format_summary",
           "majority_verdicts", "merge_diagnoses", "node_results", "plan_trees", "summarize"]

STRATEGIES = ("full", "adaptive")
# roots diagnosed together: their sub-cases and trees are what a diagnosis holds in memory (a root of
# 8 slots plans about 16 sub-cases, 1 MB as records), and each window's rounds are run one by one
WINDOW = 100

# sub-cases in -> (case id -> question id -> verdict, case id -> image path,
#                  case id -> question id -> why it abstained)
Evaluated = tuple[dict[str, dict[str, Outcome]], dict[str, str], dict[str, dict[str, str]]]
# (sub-cases, the generations to make of each: 0 the first, 1 .. K-1 with --repeats K) -> one Evaluated per generation
Evaluator = Callable[[list[Case], Sequence[int]], list[Evaluated]]


@dataclass
class _Samples:
    """The later generations of the sub-cases (``--repeats``): key -> one entry per sample 1 .. K-1."""

    verdicts: dict[str, list[dict[str, Outcome]]] = field(default_factory=dict)
    images: dict[str, list[str | None]] = field(default_factory=dict)
    reasons: dict[str, list[dict[str, str]]] = field(default_factory=dict)


def node_results(case: Case, samples: Sequence[dict[str, Outcome]], gating: Gating) -> dict:
    """A node's operator-instance results from the verdicts of each of its generations: each
    question decided by its majority over them, then the instances as for one generation (so a
    dependency gates the majority, and a requirement that one generation in three breaks holds)."""
    return instance_results(case, majority_verdicts(samples), gating)


@dataclass
class _Tree:
    root: Case
    nodes: list[TreeNode]
    graph: nx.DiGraph
    keys: dict[str, str] = field(default_factory=dict)  # node id -> sub-case key


@dataclass
class TreePlan:
    """Every case's whole tree and the distinct sub-cases its nodes ask for."""

    trees: list[_Tree]
    cases: dict[str, Case]  # key -> sub-case, named after the first node that asks for it
    occurrences: list[NodeOccurrence]

    def node_cases(self, tree: _Tree) -> dict[str, Case]:
        """Node id -> the sub-case of one of the plan's trees (a node repeating another, its)."""
        return {node: self.cases[key] for node, key in tree.keys.items()}


def _key(case: Case) -> str:
    return sha256(case.model_dump_json(exclude={"id"}).encode())


def _short(key: str) -> bytes:
    """What a diagnosis keeps of a sub-case key for every sub-case it planned: the first 16 bytes
    of the SHA-256 (128 bits, as unique in practice; a 49-byte object where the hex key takes 113)."""
    return bytes.fromhex(key[:32])


@fewer_collections()  # the plan's many objects all live on: collector passes would find nothing
def plan_trees(roots: Sequence[Case], names: dict[bytes, str] | None = None, *, paper_stop: bool = True) -> TreePlan:
    """Build the trees and their sub-cases; identical sub-cases (within or across trees) are one.
    ``names``: sub-case key (:func:`_short`) -> id of the sub-cases planned before (an earlier
    window of the same diagnosis), so that a sub-case met again keeps the id it was first given.
    ``paper_stop``: the trees of ``--method first-pass`` (the paper's stop rule: one attribute
    transfer ``E ⊕ g`` is a leaf), else of ``--method rates`` (:func:`~._tree.grow_tree`)."""
    trees, cases, occurrences = [], {}, []
    names = names or {}
    for root in roots:
        terms = {t.symbol: t for t in root.terms}
        formula = root_formula(root)  # parsed and checked
        graph = bound_tree(number_terms(formula), lambda s, terms=terms: terms[s].value if s in terms else None,
                           clutter=bool(root.distractors), paper_stop=paper_stop)
        tree = _Tree(root, tree_nodes(graph), graph)
        downgrades = graph.graph["downgrades"]
        for node, unbound_node in zip(tree.nodes, graph.graph["shape"].nodes):
            if node.same_as is not None:
                tree.keys[node.id] = tree.keys[node.same_as]
            else:
                sub_id = f"{root.id}.{node.id}"
                problem = safe_id_problem(sub_id)
                if problem:  # a root id near the length limit
                    raise TraceError(f"case {root.id}: its sub-case id {sub_id}: {problem}")
                sub = (root.model_copy(update={"id": sub_id}) if node.parent is None
                       else node_case(root, node, downgrades, sub_id, node_shape(unbound_node.formula)))
                key = tree.keys[node.id] = _key(sub)
                if key not in cases:
                    first = names.get(_short(key), sub_id)
                    cases[key] = sub if first == sub_id else sub.model_copy(update={"id": first})
            occurrences.append(NodeOccurrence(case_id=cases[tree.keys[node.id]].id, root=root.id, node=node.id))
        trees.append(tree)
    return TreePlan(trees, cases, occurrences)


# ------------------------------------------------------------------------------ node folders

def _write_node_folder(target: Path, cases: list[Case], source_dir: Path, sample: SampleManifest | None,
                       arguments: dict, occurrences: list[NodeOccurrence] | None = None, *,
                       replace: bool = False) -> bool:
    """Write sub-cases as a benchmark folder through trace sample's writer (plus nodes.jsonl);
    whether it was written. ``replace``: the folder is the diagnosis's own round and may be
    rewritten (it is not when it holds these cases already); otherwise an existing non-empty
    folder is refused."""
    if replace and CASES.path(target).is_file() and CASES.path(target).read_text(encoding="utf-8") == "".join(
            map(record_line, cases)):
        return False  # the same round, written before a resume
    hashes = {**(sample.hashes if sample else {}), "diagnose": data_hash(("diagnose", RULES_FILE), ("diagnose", SOURCES_FILE))}
    write_benchmark(target, cases,
                    source=lambda case, ref: inside(source_dir, ref.path, f"{source_dir}: case {case.id}: reference",
                                                    "benchmark folder"),
                    inputs=ManifestInputs(seed=sample.seed if sample else 0, arguments=arguments,
                                          library=sample.library if sample else {}, hashes=hashes),
                    overwrite=replace,
                    extra=None if occurrences is None else lambda folder: NODES.write(folder, occurrences))
    return True


# ------------------------------------------------------------------------------ selection

Item = tuple[Case, dict[str, Outcome]]  # a case of a run and its outcomes
T = TypeVar("T", bound=tuple)


@dataclass
class _Chosen:
    """The cases a diagnosis starts from, chosen from a stream of the run: their ids only."""

    ids: list[str]  # in the order they are diagnosed
    cases: int  # cases of the run with verdicts
    unanswered: int  # of those, cases whose every verdict abstained


def _choose(items: Iterable[Item], which: str, shard: tuple[int, int] | None, root: Path,
            gating: Gating = Gating.WITHIN) -> _Chosen:
    """The ids of the chosen cases of a run given as (case, outcomes) in run order, consumed one at a time: nothing else is kept. A case whose sub-case ids could
    be too long is planned at once, so that its error comes before anything is written."""
    explicit = None if which in ("failing", "all") else [i.strip() for i in which.split(",") if i.strip()]
    if explicit is not None and not explicit:
        raise TraceError(f"--cases: {which!r}: not a case of run {root}")
    wanted = set(explicit or ())
    seen: set[str] = set()
    picked: list[str] = []
    unanswered = 0
    for case, outcomes in items:
        seen.add(case.id)
        unanswered += not any(o.answered for o in outcomes.values())
        if which == "failing":
            take = any(v.failed for v in instance_results(case, outcomes, gating).values())
        else:
            take = which == "all" or case.id in wanted
        if take and (shard is None or shard_of(case.id, shard[1]) == shard[0]):
            picked.append(case.id)
            if len(case.id) > MAX_ID - _LONGEST_NODE_ID:
                plan_trees([case])
    if explicit is not None:
        unknown = [i for i in explicit if i not in seen]
        if unknown:
            raise TraceError(f"--cases: {', '.join(unknown)}: not a case of run {root}")
        taken = set(picked)
        picked = [i for i in dict.fromkeys(explicit) if i in taken]
    return _Chosen(picked, len(seen), unanswered)


# a node id is "N<depth>" and one label a branching: far shorter than this
_LONGEST_NODE_ID = 40


def _chosen_items(items: Iterable[T], ids: Sequence[str]) -> Iterator[T]:
    """The items (tuples whose first member is a case) of ``ids`` in that order, from a stream in
    run order (only those that come before their turn are held: none when ``ids`` are in run order)."""
    wanted = set(ids)
    held: dict[str, T] = {}
    turn = 0
    for item in items:
        if item[0].id not in wanted:
            continue
        held[item[0].id] = item
        while turn < len(ids) and ids[turn] in held:
            yield held.pop(ids[turn])
            turn += 1
        if turn == len(ids):
            return


def _streamed(run) -> Iterator[Item]:
    """A run stream's cases as :func:`_choose` takes them (with ``--samples``, each question's
    majority over the samples)."""
    return ((item.case, item.outcomes) for item in run)


def _streamed_samples(run) -> Iterator[tuple[Case, tuple[dict[str, Outcome], ...], tuple[dict[str, str], ...]]]:
    """A run stream's cases with their verdicts and abstention reasons per sample (one, without
    ``--samples``): the roots' generations, as the run made and judged them."""
    for item in run:
        samples = item.samples
        reasons: tuple[dict[str, str], ...] = tuple({} for _ in samples)
        for v in item.verdicts:
            if not v.outcome.answered:
                reasons[v.sample or 0][v.question_id] = abstention_reason(v)
        yield item.case, samples, reasons


def select_cases(run, which: str, shard: tuple[int, int] | None) -> list[Case]:
    """The chosen cases of a run folder read whole (:func:`~tracebench.run.load_run`)."""
    def items() -> Iterator[Item]:
        return ((run.cases[i], run.verdicts[i]) for i in run.verdicts)
    return [case for case, _ in _chosen_items(items(), _choose(items(), which, shard, run.root).ids)]


# ------------------------------------------------------------------------------ the diagnosis

# a sub-case evaluated before (by key, id and generation), as evaluated: verdicts, image, abstention reasons;
# None if it was not
Recall = Callable[[str, str, int], "tuple[dict[str, Outcome], str | None, dict[str, str]] | None"]


@dataclass
class RatesState:
    """What ``--method rates`` keeps from window to window: its settings and the prior groups'
    expected counts (so that a window's priors are fitted on every window so far)."""

    settings: RatesSettings
    carried: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RootEvidence:
    """What a diagnosis knows of its roots besides their verdicts. ``from_run``: the roots'
    verdicts (and images) are the run's, else each root is generated again as node ``N0``;
    ``images``: case id -> the run's image; ``reasons``: case id -> question id -> why the run's
    verdict abstained; ``causes(case, image)``: the causes a synthetic generator recorded
    (question id -> causes), for the localization check; ``recall``: the sub-cases evaluated
    before (an earlier window of roots, the run's later samples)."""

    from_run: bool = True
    images: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, dict[str, str]] = field(default_factory=dict)
    causes: Callable[[Case, str], dict[str, tuple[str, ...]] | None] | None = None
    recall: Recall | None = None
    run_generations: int = 1  # the run's generations of each root (trace run --samples)
    image_file: Callable[[str], Path] | None = None  # an evaluated image's path -> its file (rates: repeats checked)
    rates: RatesState | None = None  # --method rates: its settings and what it carries from window to window


class _Evaluation:
    """The sub-cases a strategy evaluated: the first generation's verdicts, images and abstention
    reasons by sub-case key, and the later generations' (``--repeats``)."""

    def __init__(self, plan: TreePlan, evaluate: Evaluator, recall: Recall | None, repeats: int) -> None:
        self.plan, self.evaluate, self.recall, self.repeats = plan, evaluate, recall, repeats
        self.verdicts: dict[str, dict[str, Outcome]] = {}
        self.images: dict[str, str] = {}
        self.reasons: dict[str, dict[str, str]] = {}
        self.later = _Samples()

    def store(self, k: str, sample: int, got: dict[str, Outcome], image: str | None, why: dict[str, str]) -> None:
        if sample == 0:
            self.verdicts[k] = got
            if image is not None:
                self.images[k] = image
            if why:
                self.reasons[k] = why
        else:
            self.later.verdicts.setdefault(k, []).append(got)
            self.later.images.setdefault(k, []).append(image)
            self.later.reasons.setdefault(k, []).append(why)

    def run_round(self, keys: list[str], first: int = 0) -> None:
        """Generate and judge samples ``first`` .. repeats-1 of the sub-cases not done yet (those
        ``recall`` knows are not evaluated again)."""
        done = self.verdicts if first == 0 else self.later.verdicts
        wanted = [k for k in dict.fromkeys(keys) if k not in done]
        samples = range(first, self.repeats)
        cases = self.plan.cases
        known = {(k, s): self.recall(k, cases[k].id, s) if self.recall else None for k in wanted for s in samples}
        # the sub-cases by the generations they still need (a root of a run of --samples K asked
        # for more: generations K .. repeats-1), each group made in one round
        missing: dict[tuple[int, ...], list[str]] = {}
        for k in wanted:
            needed = tuple(s for s in samples if known[k, s] is None)
            if needed:
                missing.setdefault(needed, []).append(k)
        for needed, group in missing.items():
            made = self.evaluate([cases[k] for k in group], needed)
            for k in group:
                case_id = cases[k].id
                for (got, got_images, got_reasons), s in zip(made, needed):
                    known[k, s] = (got.get(case_id, {}), got_images.get(case_id), got_reasons.get(case_id, {}))
        for k in wanted:
            for s in samples:
                self.store(k, s, *known[k, s])  # type: ignore[misc]

    def generations(self, k: str, first: dict[str, Outcome] | None = None) -> list[dict[str, Outcome]]:
        """A sub-case's verdicts of each generation (``first``: the first's, when not evaluated here)."""
        return [self.verdicts[k] if first is None else first, *self.later.verdicts.get(k, [])]

    def results(self, k: str, gating: Gating, first: dict[str, Outcome] | None = None) -> dict:
        return node_results(self.plan.cases[k], self.generations(k, first), gating)


def _strategy_rounds(plan: TreePlan, strategy: str, root_verdicts: dict[str, dict[str, Outcome]],
                     evaluate: Evaluator, evidence: RootEvidence, gating: Gating, repeats: int) -> _Evaluation:
    """Evaluate the sub-cases the strategy asks for, ``repeats`` generations of each."""
    evaluation = _Evaluation(plan, evaluate, evidence.recall, repeats)
    roots = [t.keys["N0"] for t in plan.trees]
    if not evidence.from_run:
        evaluation.run_round(roots)
    elif repeats > 1:  # the run made the roots' first generation
        evaluation.run_round(roots, first=1)
    if strategy == "full":
        evaluation.run_round([t.keys[n.id] for t in plan.trees for n in t.nodes if n.parent is not None])
    else:
        _adaptive_rounds(plan, evaluation, root_verdicts if evidence.from_run else None, gating)
    return evaluation


def _adaptive_rounds(plan: TreePlan, evaluation: _Evaluation, root_verdicts: dict[str, dict[str, Outcome]] | None,
                     gating: Gating) -> None:
    """Breadth first, one round per depth. A root failure is chased only until it first passes
    somewhere in its tree: breadth first, that node is at the smallest depth, and every node of
    that depth that could tie was in the same round. ``root_verdicts``: the run's (None: the
    roots were evaluated here)."""
    frontier: list[tuple[_Tree, TreeNode, frozenset]] = []
    explained: dict[str, set] = {}
    for tree in plan.trees:
        first = root_verdicts.get(tree.root.id, {}) if root_verdicts is not None else None
        at_root = evaluation.results(tree.keys["N0"], gating, first)
        failing = frozenset(i for i in tree.nodes[0].targets if i in at_root and at_root[i].failed)
        frontier.append((tree, tree.nodes[0], failing))
        explained[tree.root.id] = set()
    while frontier:
        wanted = [(tree, child, open_) for tree, node, open_ in frontier
                  for child, open_ in _open_children(tree, node, open_ - explained[tree.root.id])]
        evaluation.run_round([tree.keys[child.id] for tree, child, _ in wanted])
        frontier = []
        for tree, child, open_ in wanted:
            still = pending(child, open_, evaluation.results(tree.keys[child.id], gating))
            explained[tree.root.id] |= (open_ & set(child.targets)) - still
            frontier.append((tree, child, still))


def _open_children(tree: _Tree, node: TreeNode, open_: frozenset) -> Iterator[tuple[TreeNode, frozenset]]:
    """The children of ``node`` that keep one of its unexplained failures ``open_``."""
    if not open_ or node.same_as is not None:
        return
    for child in tree.graph.successors(node.id):
        child_node = tree.graph.nodes[child]["node"]
        if open_ & set(child_node.targets):
            yield child_node, open_


def diagnose(roots: Sequence[Case], root_verdicts: dict[str, dict[str, Outcome]], evaluate: Evaluator, *,
             strategy: str = "full", gating: Gating = Gating.WITHIN, repeats: int = 1, plan: TreePlan | None = None,
             evidence: RootEvidence = RootEvidence()) -> list[DiagnosticTree]:
    """Diagnose ``roots`` given their verdicts, evaluating sub-cases with ``evaluate``.

    The model call is passed in: the CLI evaluates through the run harness; anything that
    maps sub-cases to verdicts will do. ``evidence``: what is known of the roots besides their
    verdicts (:class:`RootEvidence`); ``gating`` which dependencies fail a question
    (:mod:`tracebench.score`); ``repeats`` how many generations of each node (the root
    included) decide its results by majority. ``evidence.rates``: name sources by ``--method
    rates`` (:mod:`._chains`) instead of the first-pass rule, its state carried from window to window.
    Returns the trees; :func:`summarize` makes the summary from them."""
    if strategy not in STRATEGIES:
        raise TraceError(f"--strategy: {strategy!r} is neither full nor adaptive")
    if not 1 <= repeats <= MAX_SAMPLES:
        raise TraceError(f"--repeats: {repeats} must be from 1 to {MAX_SAMPLES}")
    plan = plan or plan_trees(roots, paper_stop=evidence.rates is None)
    if evidence.rates is not None:
        return _rates_trees(plan, root_verdicts, evaluate, evidence, gating, evidence.rates)
    evaluation = _strategy_rounds(plan, strategy, root_verdicts, evaluate, evidence, gating, repeats)
    context = _TreeContext(plan, evaluation, root_verdicts, evidence, gating)
    return [context.tree(tree, strategy) for tree in plan.trees]


def _rates_trees(plan: TreePlan, root_verdicts: dict[str, dict[str, Outcome]], evaluate: Evaluator,
                 evidence: RootEvidence, gating: Gating, state: RatesState) -> list[DiagnosticTree]:
    """The trees of a window, sources named by failure rates (:class:`~._chains.RatesWindow`): the
    roots' failing instances are the run's (or, when the roots are generated again, their first
    new generation's), and every generation after that is fresh."""
    from ._chains import RatesWindow, rates_attribution

    evaluation = _Evaluation(plan, evaluate, evidence.recall, 1)
    if not evidence.from_run:
        evaluation.run_round([t.keys["N0"] for t in plan.trees])
    chosen_by = root_verdicts if evidence.from_run else {
        t.root.id: evaluation.verdicts.get(t.keys["N0"], {}) for t in plan.trees}
    window = RatesWindow(plan, chosen_by, state.settings, gating,
                         first_root=evidence.run_generations if evidence.from_run else 1,
                         image_path=evidence.image_file, carried=state.carried)
    window.run(evaluate, evaluation)
    state.carried = window.allocator.carry()
    chains = {(c.tree, c.instance): c for c in window.allocator.chains}
    context = _TreeContext(plan, evaluation, root_verdicts, evidence, gating)
    trees = []
    for tree in plan.trees:
        record = context.tree(tree, "full")
        attributions = []
        for a in record.attributions:
            chain = chains.get((tree.root.id, Instance(a.op, a.target)))
            if chain is not None:
                a = rates_attribution(a, window.estimates[chain.tree, chain.instance], chain,
                                      window.allocator.chain_counts(chain), state.settings.threshold)
            attributions.append(a)
        trees.append(record.model_copy(update={"attributions": tuple(attributions), "method": "rates",
                                               "generations": window.generations(tree.root.id)}))
    return trees


@dataclass(frozen=True)
class _TreeContext:
    """What the records of a diagnosed tree are made from."""

    plan: TreePlan
    evaluation: _Evaluation
    root_verdicts: dict[str, dict[str, Outcome]]
    evidence: RootEvidence
    gating: Gating

    def tree(self, tree: _Tree, strategy: str) -> DiagnosticTree:
        results, node_verdicts, sample_status = self._results(tree)
        findings = attribute(tree.nodes, results)
        later = self.evaluation.later
        root_image = (self.evidence.images.get(tree.root.id) if self.evidence.from_run
                      else self.evaluation.images.get(tree.keys["N0"]))
        recorded = None
        if self.evidence.causes:
            recorded = _merged_causes(self.evidence.causes(tree.root, image) for image in
                                      (root_image, *later.images.get(tree.keys["N0"], ())) if image)
        records = [f.record(*_cause(f, tree.root, recorded)) for f in findings]
        nodes = tuple(self._node(tree, node, results, node_verdicts.get(node.id, {}), sample_status, root_image)
                      for node in tree.nodes)
        edges = tuple(DiagnosticEdge(parent=u, child=v, rule=d["rule"]) for u, v, d in tree.graph.edges(data=True))
        return DiagnosticTree(case_id=tree.root.id, formula=tree.root.formula, slot=tree.root.slot,
                              strategy=strategy, max_depth=max(n.depth for n in tree.nodes), nodes=nodes, edges=edges,
                              attributions=tuple(records))

    def _results(self, tree: _Tree) -> tuple[dict[str, dict], dict[str, dict[str, Outcome]], dict[str, dict]]:
        """Node id -> its instance results, its first generation's verdicts, and with several
        generations each instance's status per generation; of the nodes evaluated."""
        results: dict[str, dict] = {}
        node_verdicts: dict[str, dict[str, Outcome]] = {}
        sample_status: dict[str, dict[str, tuple]] = {}
        for node in tree.nodes:
            key = tree.keys[node.id]
            if node.parent is None and self.evidence.from_run:
                node_verdicts[node.id] = self.root_verdicts.get(tree.root.id, {})
            elif key in self.evaluation.verdicts:
                node_verdicts[node.id] = self.evaluation.verdicts[key]
            else:
                continue
            samples = self.evaluation.generations(key, node_verdicts[node.id])
            results[node.id] = node_results(self.plan.cases[key], samples, self.gating)
            if len(samples) > 1:
                each = [instance_results(self.plan.cases[key], v, self.gating) for v in samples]
                sample_status[node.id] = {i[1]: tuple(r.get(i, ABSTAINED).status for r in each)
                                          for i in results[node.id]}
        return results, node_verdicts, sample_status

    def _node(self, tree: _Tree, node: TreeNode, results: dict[str, dict], verdicts: dict[str, Outcome],
              sample_status: dict[str, dict], root_image: str | None) -> DiagnosticNode:
        key = tree.keys[node.id]
        sub = self.plan.cases[key]
        later = self.evaluation.later
        evaluated = node.id in results
        from_run = node.parent is None and self.evidence.from_run
        image = (root_image if from_run else self.evaluation.images.get(key)) if evaluated else None
        why = ((self.evidence.reasons.get(tree.root.id, {}) if from_run else self.evaluation.reasons.get(key, {}))
               if evaluated else {})
        return DiagnosticNode(
            **node.to_json(), case_id=tree.root.id if from_run else sub.id,
            evaluated=evaluated, prompt=sub.prompt, references=sub.references,
            question_ids=tuple(q.id for q in sub.checklist), image=image,
            verdicts={qid: o.status for qid, o in verdicts.items()},
            abstained={qid: why.get(qid, "no verdict") for qid, o in verdicts.items() if not o.answered},
            status={t: v.status for (_, t), v in results.get(node.id, {}).items()},
            sample_status=sample_status.get(node.id, {}),
            sample_images=tuple(later.images.get(key, ())) if evaluated else (),
            sample_abstained=tuple({qid: why.get(qid, "no verdict") for qid, o in v.items() if not o.answered}
                                   for v, why in zip(later.verdicts.get(key, ()), later.reasons.get(key, ())))
            if evaluated else ())


class _SummaryTally:
    """The summary of a diagnosis from its trees given one at a time (:meth:`add`): what it
    keeps is counts and a digest per generated sub-case, never the trees."""

    def __init__(self) -> None:
        self.sources = SourceTally()
        self.cases = 0
        self.nodes_in_trees = 0
        self.generated: set[bytes] = set()  # by content, not case id: shards name an identical sub-case
        #                                     after their own first occurrence
        self.abstained: dict[bytes, dict[str, str]] = {}  # each generated sub-case once
        self.mix: list[dict[str, float]] = []  # per case: its failing instances' weight per source (Table 3's mix)
        self.generations: list[int] = []  # rates: fresh generations per tree
        self.confidence: list[float] = []  # rates: each failing instance's confidence
        self.method: str | None = None
        self.random = False  # a node's (or the root's) generations gave different results

    def add(self, tree: DiagnosticTree) -> DiagnosticTree:
        self.cases += 1
        self.nodes_in_trees += len(tree.nodes) - 1
        self.method = self.method or tree.method
        weights: dict[str, float] = {}
        for a in tree.attributions:
            self.sources.add(a)
            if a.root == "fail" and a.source is not None:
                for source, weight in (a.dominant or {a.source: 1.0}).items():
                    weights[source] = weights.get(source, 0.0) + weight
                if a.confidence is not None:
                    self.confidence.append(a.confidence)
        self.mix.append(weights)
        if tree.generations is not None:
            self.generations.append(tree.generations)
        self.random = self.random or any(len(set(s)) > 1 for n in tree.nodes for s in n.sample_status.values())
        for n in tree.nodes:
            root = n.parent is None
            if n.evaluated and not root:
                self.generated.add(_digest((n.prompt, n.references, n.question_ids)))
            if n.abstained:
                self.abstained[_digest((root and tree.case_id, n.prompt, n.references, n.question_ids))] = n.abstained
            for k, why in enumerate(n.sample_abstained, start=2):  # the later generations' own abstentions
                if why:
                    self.abstained[_digest((k, root and tree.case_id, n.prompt, n.references, n.question_ids))] = why
        return tree

    def summary(self, *, generator: str, judges: Sequence[str], strategy: str, synthetic: bool,
                repeats: int = 1, where: tuple[str, str] = ("RUN", "DIAG")) -> DiagnosisSummary:
        summary = self.sources.result()
        import numpy as np

        reasons = Counter(reason for why in self.abstained.values() for reason in why.values())
        generated = len(self.generated)
        return DiagnosisSummary(
            tool=f"tracebench {__version__}", generator=generator, judges=tuple(judges), strategy=strategy,
            repeats=repeats, cases=self.cases, instances=summary["instances"], undetermined=summary["undetermined"],
            abstained=summary["abstained"], abstained_verdicts=sum(reasons.values()),
            abstention_reasons=dict(reasons.most_common()),
            sources=summary["sources"], counts=summary["counts"], unstable=summary["unstable"],
            by_operator=summary["by_operator"],
            cumulative_pass=summary["cumulative_pass"], nodes_generated=generated,
            nodes_in_trees=self.nodes_in_trees,
            nodes_per_case=round(generated / self.cases, 3) if self.cases else 0.0,
            localization_accuracy=summary["localization"] if synthetic else None,
            method=self.method, mix=_bootstrap_mix(self.mix),
            generations_per_tree=({"mean": round(float(np.mean(self.generations)), 2),
                                   "p90": float(np.percentile(self.generations, 90))} if self.generations else None),
            confidence=({"mean": round(float(np.mean(self.confidence)), 4),
                         "undetermined": round(summary["counts"].get("undetermined", 0) / len(self.confidence), 4)}
                        if self.confidence else None),
            random_note=random_note(where, self.cases) if self.random and self.method is None else None)


def random_note(where: tuple[str, str], cases: int) -> str:
    """The one line a first-pass diagnosis ends with when the generator was seen to be random:
    ``where`` the run and diagnosis folders, ``cases`` diagnosed."""
    import shlex

    from ._rates import RatesSettings

    budget = RatesSettings().budget
    run, out = where
    return (f"the generator is random (a node's generations gave different results): first-pass names the first "
            f"chance pass; estimate failure rates instead (about {round(budget * cases):,} generations): "
            f"trace diagnose {shlex.quote(run)} --method rates --budget {budget:g} --out {shlex.quote(out + '-rates')}")


BOOTSTRAP = 1000  # resamples of the cases for Table 3's intervals


def _bootstrap_mix(cases: list[dict[str, float]]) -> dict[str, MixShare] | None:
    """Table 3's mix over the failing instances (each case's weight per source, summed over its
    instances), with 95% intervals from resampling the cases (seeded: the same trees, the same
    intervals); None without failing instances."""
    import numpy as np

    names = [s for s in sources() if any(s in c for c in cases)]
    if not names:
        return None
    table = np.array([[c.get(s, 0.0) for s in names] for c in cases])
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(cases), size=(BOOTSTRAP, len(cases)))
    sums = table[picks].sum(axis=1)  # resamples x sources
    totals = sums.sum(axis=1, keepdims=True)
    shares = np.divide(sums, totals, out=np.zeros_like(sums), where=totals > 0)
    low, high = np.quantile(shares, [0.025, 0.975], axis=0)
    point = table.sum(axis=0) / table.sum()
    return {s: MixShare(share=round(float(point[i]), 4), low=round(float(low[i]), 4), high=round(float(high[i]), 4))
            for i, s in enumerate(names)}


def _digest(value: tuple) -> bytes:
    """A 16-byte digest of a node's content (records' reprs name every field)."""
    return hashlib.blake2b(repr(value).encode(), digest_size=16).digest()


def summarize(trees: Iterable[DiagnosticTree], *, generator: str, judges: Sequence[str], strategy: str,
              synthetic: bool, repeats: int = 1) -> DiagnosisSummary:
    """The summary of a diagnosis, from its trees alone (so shards merge by concatenation)."""
    tally = _SummaryTally()
    for tree in trees:
        tally.add(tree)
    return tally.summary(generator=generator, judges=judges, strategy=strategy, synthetic=synthetic, repeats=repeats)


def _merged_causes(found: Iterable[dict[str, tuple[str, ...]] | None]) -> dict[str, tuple[str, ...]] | None:
    """The causes recorded in the images of a root's generations, question by question (a
    question's causes in the order first met); None when no image carries a record."""
    merged: dict[str, dict[str, None]] = {}
    seen = False
    for recorded in found:
        if recorded is None:
            continue
        seen = True
        for qid, causes in recorded.items():
            merged.setdefault(qid, {}).update(dict.fromkeys(causes))
    return {qid: tuple(causes) for qid, causes in merged.items()} if seen else None


def _cause(finding: Finding, root: Case, recorded: dict[str, tuple[str, ...]] | None
           ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The recorded causes of a root failure (of its own first broken question, else of the
    nearest question it depends on) and the sources they should be localized to."""
    if recorded is None or not finding.root.failed:
        return (), ()
    questions = {q.id: q for q in root.checklist}
    queue = [q.id for q in root.checklist if q.op == finding.op and q.target == finding.target]
    seen: set[str] = set()
    while queue:
        qid = queue.pop(0)
        if qid in seen:
            continue
        seen.add(qid)
        if qid in recorded:
            return recorded[qid], localization(finding, recorded[qid])
        queue += list(questions[qid].depends_on) if qid in questions else []
    return (), ()


# ------------------------------------------------------------------------------ the command

def format_summary(summary: DiagnosisSummary) -> str:
    """The failure-source table (the paper's Table 3 layout: sources by operator, shares)."""
    ops = list(summary.by_operator)
    lines = [f"{'source':22s}" + "".join(f"{op:>13s}" for op in ops) + f"{'all':>9s}"]
    for name, source in sources().items():
        lines.append(f"{source.title:22s}" + "".join(f"{summary.by_operator[op].get(name, 0.0):13.1%}" for op in ops)
                     + f"{summary.sources.get(name, 0.0):9.1%}")
    lines.append(f"{'instances':22s}" + "".join(f"{int(summary.by_operator[op]['instances']):13d}" for op in ops)
                 + f"{summary.instances:9d}")
    unstable = summary.unstable
    if unstable and summary.method != "rates":  # a flag beside the sources, not a row of them (first-pass's)
        lines.append(f"{'flagged unstable':22s}" + "".join(f"{unstable['by_operator'].get(op, 0.0):13.1%}" for op in ops)
                     + f"{unstable['share']:9.1%}" + (f"  ({unstable['undecided']} undecided)" if unstable["undecided"]
                                                       else ""))
    if summary.undetermined and (summary.abstained_verdicts or summary.method != "rates"):
        reasons = "; ".join(f"{n}x {reason}" for reason, n in list(summary.abstention_reasons.items())[:3])
        lines.append(f"undetermined: {summary.undetermined} instances depend on {summary.abstained_verdicts} abstained "
                     f"verdicts ({summary.abstained} at the root); main reasons: {reasons or 'unknown'}")
    if summary.mix:
        named = "dominant sources (each instance's probabilities averaged)" if summary.method == "rates" else \
            "sources first-pass names"
        lines.append(f"failing instances by {named}, 95% intervals over cases: " + "; ".join(
            f"{sources()[s].title} {m.share:.1%} [{m.low:.1%}, {m.high:.1%}]" for s, m in summary.mix.items()))
    if summary.confidence:
        lines.append(f"method rates: mean confidence {summary.confidence['mean']:.1%}; "
                     f"{summary.confidence['undetermined']:.1%} of failing instances Undetermined (confidence "
                     f"below the threshold)")
    loc = summary.localization_accuracy
    if loc:
        causes = ", ".join(f"{c} {v['accuracy']:.1%} of {v['instances']}" for c, v in loc["by_cause"].items())
        what = "realized-cause accuracy (which load mode fired in the root's draw; secondary)" \
            if summary.method == "rates" else "localization accuracy"
        lines.append(f"{what} {loc['accuracy']:.1%} ({loc['correct']} of {loc['instances']} recorded "
                     f"causes; {causes})")
    return "\n".join(lines)


def export_nodes(run_dir: Path, out: Path, *, cases: str = "failing", shard: tuple[int, int] | None = None,
                 gating: Gating | str = Gating.WITHIN, paper_stop: bool = True) -> int:
    """Write every node of the chosen cases' whole trees as one benchmark folder (roots as
    ``<case>.N0``) with ``nodes.jsonl`` saying where each sub-case sits; returns the count.
    ``paper_stop``: the trees of ``--method first-pass``, else of ``--method rates``."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TraceError(f"--export-nodes {out}: exists and is not empty; choose a new folder")
    run = stream_run(run_dir)
    chosen = _choose(_streamed(run), cases, shard, run.root, Gating(gating))
    plan = plan_trees([case for case, _ in _chosen_items(_streamed(run), chosen.ids)], paper_stop=paper_stop)
    _write_node_folder(Path(out), list(plan.cases.values()), run.cases_dir, read_sample_manifest(run.cases_dir),
                       {"diagnosis_of": str(Path(run_dir).resolve()), "cases": cases}, plan.occurrences)
    return len(plan.cases)


def merge_diagnoses(folders: Sequence[Path], out: Path) -> DiagnosisSummary:
    """Combine the diagnosis folders of shards (``--shard i/n``) into one: the same diagnosis
    but for the shard, every case once; trees in the run's case order, image paths rewritten."""
    folders = [Path(f) for f in folders]
    identities = [DIAGNOSIS_MANIFEST.read(folder) for folder in folders]
    trees_of = [TREES.read(folder) for folder in folders]  # an unfinished folder is refused before any is read
    first = identities[0]
    for folder, other in zip(folders[1:], identities[1:]):
        changed = [f for f in DiagnosisManifest.model_fields if f not in ("tool", "shard")
                   and getattr(other, f) != getattr(first, f)]
        if changed:
            raise TraceError(f"{folder}: another diagnosis than {folders[0]} ({', '.join(changed)} differ)")
    out = Path(out)
    trees: dict[str, DiagnosticTree] = {}
    for folder, folder_trees in zip(folders, trees_of):
        for tree in folder_trees:
            if tree.case_id in trees:
                raise TraceError(f"{folder}: case {tree.case_id} is in two of the folders")
            nodes = tuple(n.model_copy(update={"image": _moved(n.image, folder, out),
                                               "sample_images": tuple(_moved(i, folder, out) for i in n.sample_images)})
                          for n in tree.nodes)
            trees[tree.case_id] = tree.model_copy(update={"nodes": nodes})
    order = {item.case.id: k for k, item in enumerate(stream_run(Path(first.run_dir)))}
    merged = sorted(trees.values(), key=lambda t: order.get(t.case_id, len(order)))
    identity = first.model_copy(update={"shard": None})
    summary = summarize(merged, generator=first.generator, judges=first.judges, strategy=first.strategy,
                        synthetic=synthetic_profile(first.generator) is not None, repeats=first.repeats)
    with staged_output(out) as stage:
        DIAGNOSIS_MANIFEST.write(stage, identity)
        TREES.write(stage, merged)
        SUMMARY.write(stage, summary)
    return summary


def _moved(image: str | None, folder: Path, out: Path) -> str | None:
    """An image path relative to a shard's folder, made relative to the merged folder."""
    if image is None or Path(image).is_absolute():
        return image
    return os.path.relpath(folder.resolve() / image, out.resolve())
