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
import itertools
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

import networkx as nx

from .. import __version__
from ..errors import TraceError, other_fields
from ..formula import canonical
from ..library import staged_output
from ..scales import GRADED_ENSEMBLE
from ..records import (CASES, DIAGNOSIS_MANIFEST, MAX_SAMPLES, NODES, SUMMARY, TREES, Case, DiagnosisManifest, DiagnosisSummary,
                       DiagnosticEdge, DiagnosticNode, DiagnosticTree, NodeOccurrence, RUN_MANIFEST, RunManifest, SampleManifest, VERDICTS)
from ..gcpolicy import fewer_collections
from ..resources import data_hash
from ..safepaths import MAX_ID, inside, owned_folder, safe_id_problem
from ..outcomes import ABSTAINED, Outcome, majority_verdicts
from ..providers import ModelSettings, RayGenerator, resolve_spec, runs_offline, synthetic_profile
from ..run import (abstention_reason, generated_image, library_of, make_providers, run_benchmark, shard_of,
                   stream_run)
from ..cache import remove_stale_temporaries, sha256
from ..jsonfiles import record_line
from ..sample import read_sample_manifest, write_benchmark
from ..score import Gating, instance_results
from ._attribute import Finding, SourceTally, attribute, localization, pending
from ._node import node_case, node_shape, root_formula
from ._rules import RULES_FILE, SOURCES_FILE, number_terms, sources
from ._tree import TreeNode, bound_tree, tree_nodes

__all__ = ["Evaluated", "Evaluator", "TreePlan", "diagnose", "diagnose_run", "export_nodes", "format_summary",
           "majority_verdicts", "merge_diagnoses", "node_results", "plan_trees", "summarize"]

ROUNDS_DIR = "rounds"
CACHE_DIR = "cache"
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


def _key(case: Case) -> str:
    return sha256(case.model_dump_json(exclude={"id"}).encode())


def _short(key: str) -> bytes:
    """What a diagnosis keeps of a sub-case key for every sub-case it planned: the first 16 bytes
    of the SHA-256 (128 bits, as unique in practice; a 49-byte object where the hex key takes 113)."""
    return bytes.fromhex(key[:32])


@fewer_collections()  # the plan's many objects all live on: collector passes would find nothing
def plan_trees(roots: Sequence[Case], names: dict[bytes, str] | None = None) -> TreePlan:
    """Build the trees and their sub-cases; identical sub-cases (within or across trees) are one.
    ``names``: sub-case key (:func:`_short`) -> id of the sub-cases planned before (an earlier
    window of the same diagnosis), so that a sub-case met again keeps the id it was first given."""
    trees, cases, occurrences = [], {}, []
    names = names or {}
    for root in roots:
        terms = {t.symbol: t for t in root.terms}
        formula = root_formula(root)  # parsed and checked
        graph = bound_tree(number_terms(formula), lambda s, terms=terms: terms[s].value if s in terms else None,
                           clutter=bool(root.distractors))
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
    write_benchmark(target, cases, seed=sample.seed if sample else 0,
                    source=lambda case, ref: inside(source_dir, ref.path, f"{source_dir}: case {case.id}: reference",
                                                    "benchmark folder"),
                    arguments=arguments, library=sample.library if sample else {},
                    hashes={**(sample.hashes if sample else {}),
                            "diagnose": data_hash(("diagnose", RULES_FILE), ("diagnose", SOURCES_FILE))},
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


def _select(run, which: str, shard: tuple[int, int] | None) -> list[Case]:
    """The chosen cases of a run folder read whole (:func:`~tracebench.run.load_run`)."""
    def items() -> Iterator[Item]:
        return ((run.cases[i], run.verdicts[i]) for i in run.verdicts)
    return [case for case, _ in _chosen_items(items(), _choose(items(), which, shard, run.root).ids)]


# ------------------------------------------------------------------------------ the diagnosis

# a sub-case evaluated before (by key, id and generation), as evaluated: verdicts, image, abstention reasons;
# None if it was not
Recall = Callable[[str, str, int], "tuple[dict[str, Outcome], str | None, dict[str, str]] | None"]


def _strategy_rounds(plan: TreePlan, strategy: str, root_verdicts: dict[str, dict[str, Outcome]], evaluate: Evaluator,
                     roots_from_run: bool, recall: Recall | None = None, gating: Gating = Gating.WITHIN,
                     repeats: int = 1) -> tuple[Evaluated, _Samples]:
    """Evaluate the sub-cases the strategy asks for, ``repeats`` generations of each (those
    ``recall`` knows are not evaluated again); returns the first generation's verdicts, images
    and abstention reasons by sub-case key, and the later generations'."""
    verdicts: dict[str, dict[str, Outcome]] = {}
    images: dict[str, str] = {}
    reasons: dict[str, dict[str, str]] = {}
    later = _Samples()

    def store(k: str, sample: int, got: dict[str, Outcome], image: str | None, why: dict[str, str]) -> None:
        if sample == 0:
            verdicts[k] = got
            if image is not None:
                images[k] = image
            if why:
                reasons[k] = why
        else:
            later.verdicts.setdefault(k, []).append(got)
            later.images.setdefault(k, []).append(image)
            later.reasons.setdefault(k, []).append(why)

    def run_round(keys: list[str], first: int = 0) -> None:
        """Generate and judge samples ``first`` .. repeats-1 of the sub-cases not done yet."""
        wanted = [k for k in dict.fromkeys(keys) if (k not in verdicts if first == 0 else k not in later.verdicts)]
        samples = range(first, repeats)
        known = {(k, s): recall(k, plan.cases[k].id, s) if recall else None for k in wanted for s in samples}
        # the sub-cases by the generations they still need (a root of a run of --samples K asked
        # for more: generations K .. repeats-1), each group made in one round
        missing: dict[tuple[int, ...], list[str]] = {}
        for k in wanted:
            needed = tuple(s for s in samples if known[k, s] is None)
            if needed:
                missing.setdefault(needed, []).append(k)
        for needed, keys in missing.items():
            made = evaluate([plan.cases[k] for k in keys], needed)
            for k in keys:
                case_id = plan.cases[k].id
                for (got, got_images, got_reasons), s in zip(made, needed):
                    known[k, s] = (got.get(case_id, {}), got_images.get(case_id), got_reasons.get(case_id, {}))
        for k in wanted:
            for s in samples:
                store(k, s, *known[k, s])  # type: ignore[misc]

    def results(k: str, first: dict[str, Outcome] | None = None) -> dict:
        return node_results(plan.cases[k], [verdicts[k] if first is None else first, *later.verdicts.get(k, [])],
                            gating)

    if not roots_from_run:
        run_round([t.keys["N0"] for t in plan.trees])
    elif repeats > 1:  # the run made the roots' first generation
        run_round([t.keys["N0"] for t in plan.trees], first=1)
    if strategy == "full":
        run_round([t.keys[n.id] for t in plan.trees for n in t.nodes if n.parent is not None])
        return (verdicts, images, reasons), later
    # adaptive: breadth first, one round per depth. A root failure is chased only until it first
    # passes somewhere in its tree: breadth first, that node is at the smallest depth, and every
    # node of that depth that could tie was in the same round.
    frontier: list[tuple[_Tree, TreeNode, frozenset]] = []
    explained: dict[str, set] = {}
    for tree in plan.trees:
        at_root = results(tree.keys["N0"], root_verdicts.get(tree.root.id, {}) if roots_from_run else None)
        failing = frozenset(i for i in tree.nodes[0].targets if i in at_root and at_root[i].failed)
        frontier.append((tree, tree.nodes[0], failing))
        explained[tree.root.id] = set()
    while frontier:
        wanted: list[tuple[_Tree, TreeNode, frozenset]] = []
        for tree, node, open_ in frontier:
            open_ = open_ - explained[tree.root.id]
            if not open_ or node.same_as is not None:
                continue
            for child in tree.graph.successors(node.id):
                child_node = tree.graph.nodes[child]["node"]
                if open_ & set(child_node.targets):
                    wanted.append((tree, child_node, open_))
        run_round([tree.keys[child.id] for tree, child, _ in wanted])
        frontier = []
        for tree, child, open_ in wanted:
            still = pending(child, open_, results(tree.keys[child.id]))
            explained[tree.root.id] |= (open_ & set(child.targets)) - still
            frontier.append((tree, child, still))
    return (verdicts, images, reasons), later


def diagnose(roots: Sequence[Case], root_verdicts: dict[str, dict[str, Outcome]], evaluate: Evaluator, *,
             strategy: str = "full", roots_from_run: bool = True, root_images: dict[str, str] | None = None,
             causes: Callable[[Case, str], dict[str, tuple[str, ...]] | None] | None = None,
             plan: TreePlan | None = None, root_reasons: dict[str, dict[str, str]] | None = None,
             recall: Recall | None = None, gating: Gating = Gating.WITHIN, repeats: int = 1) -> list[DiagnosticTree]:
    """Diagnose ``roots`` given their verdicts, evaluating sub-cases with ``evaluate``.

    The model call is passed in: the CLI evaluates through the run harness; anything that
    maps sub-cases to verdicts will do. ``causes(case, image)`` gives the causes a synthetic
    generator recorded (question id -> causes) for the localization check; ``root_reasons``
    why the run's root verdicts abstained (case id -> question id -> reason); ``recall`` the
    sub-cases evaluated before (an earlier window of roots); ``gating`` which dependencies fail a
    question (:mod:`tracebench.score`); ``repeats`` how many generations of each node (the root
    included) decide its results by majority. Returns the trees; :func:`summarize` makes the
    summary from them."""
    if strategy not in STRATEGIES:
        raise TraceError(f"--strategy: {strategy!r} is neither full nor adaptive")
    if not 1 <= repeats <= MAX_SAMPLES:
        raise TraceError(f"--repeats: {repeats} must be from 1 to {MAX_SAMPLES}")
    plan = plan or plan_trees(roots)
    (verdicts, images, reasons), later = _strategy_rounds(plan, strategy, root_verdicts, evaluate, roots_from_run,
                                                          recall, gating, repeats)
    trees = []
    for tree in plan.trees:
        results: dict[str, dict] = {}
        node_verdicts: dict[str, dict[str, Outcome]] = {}
        sample_status: dict[str, dict[str, tuple]] = {}
        for node in tree.nodes:
            key = tree.keys[node.id]
            if node.parent is None and roots_from_run:
                node_verdicts[node.id] = root_verdicts.get(tree.root.id, {})
            elif key in verdicts:
                node_verdicts[node.id] = verdicts[key]
            else:
                continue
            samples = [node_verdicts[node.id], *later.verdicts.get(key, [])]
            results[node.id] = node_results(plan.cases[key], samples, gating)
            if len(samples) > 1:
                each = [instance_results(plan.cases[key], v, gating) for v in samples]
                sample_status[node.id] = {i[1]: tuple(r.get(i, ABSTAINED).status for r in each)
                                          for i in results[node.id]}
        findings = attribute(tree.nodes, results)
        max_depth = max(n.depth for n in tree.nodes)
        root_image = (root_images or {}).get(tree.root.id) if roots_from_run else images.get(tree.keys["N0"])
        recorded = None
        if causes:
            recorded = _merged_causes(causes(tree.root, image) for image in
                                      (root_image, *later.images.get(tree.keys["N0"], ())) if image)
        records = [f.record(*_cause(f, tree.root, recorded)) for f in findings]
        nodes = []
        for node in tree.nodes:
            key = tree.keys[node.id]
            sub = plan.cases[key]
            evaluated = node.id in results
            from_run = node.parent is None and roots_from_run
            image = (root_image if from_run else images.get(key)) if evaluated else None
            why = ((root_reasons or {}).get(tree.root.id, {}) if from_run else reasons.get(key, {})) if evaluated else {}
            nodes.append(DiagnosticNode(
                **node.to_json(), case_id=tree.root.id if from_run else sub.id,
                evaluated=evaluated, prompt=sub.prompt, references=sub.references,
                question_ids=tuple(q.id for q in sub.checklist), image=image,
                verdicts={qid: o.status for qid, o in node_verdicts.get(node.id, {}).items()},
                abstained={qid: why.get(qid, "no verdict") for qid, o in node_verdicts.get(node.id, {}).items()
                           if not o.answered},
                status={t: v.status for (_, t), v in results.get(node.id, {}).items()},
                sample_status=sample_status.get(node.id, {}),
                sample_images=tuple(later.images.get(key, ())) if evaluated else (),
                sample_abstained=tuple({qid: why.get(qid, "no verdict") for qid, o in v.items() if not o.answered}
                                       for v, why in zip(later.verdicts.get(key, ()), later.reasons.get(key, ())))
                if evaluated else ()))
        edges = tuple(DiagnosticEdge(parent=u, child=v, rule=d["rule"]) for u, v, d in tree.graph.edges(data=True))
        trees.append(DiagnosticTree(case_id=tree.root.id, formula=tree.root.formula, slot=tree.root.slot,
                                    strategy=strategy, max_depth=max_depth, nodes=tuple(nodes), edges=edges,
                                    attributions=tuple(records)))
    return trees


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

    def add(self, tree: DiagnosticTree) -> DiagnosticTree:
        self.cases += 1
        self.nodes_in_trees += len(tree.nodes) - 1
        for a in tree.attributions:
            self.sources.add(a)
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
                repeats: int = 1) -> DiagnosisSummary:
        summary = self.sources.result()
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
            localization_accuracy=summary["localization"] if synthetic else None)


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
    if unstable:  # a flag beside the sources, not a row of them
        lines.append(f"{'flagged unstable':22s}" + "".join(f"{unstable['by_operator'].get(op, 0.0):13.1%}" for op in ops)
                     + f"{unstable['share']:9.1%}" + (f"  ({unstable['undecided']} undecided)" if unstable["undecided"]
                                                       else ""))
    if summary.undetermined:
        reasons = "; ".join(f"{n}x {reason}" for reason, n in list(summary.abstention_reasons.items())[:3])
        lines.append(f"undetermined: {summary.undetermined} instances depend on {summary.abstained_verdicts} abstained "
                     f"verdicts ({summary.abstained} at the root); main reasons: {reasons or 'unknown'}")
    loc = summary.localization_accuracy
    if loc:
        causes = ", ".join(f"{c} {v['accuracy']:.1%} of {v['instances']}" for c, v in loc["by_cause"].items())
        lines.append(f"localization accuracy {loc['accuracy']:.1%} ({loc['correct']} of {loc['instances']} recorded "
                     f"causes; {causes})")
    return "\n".join(lines)


def _zoo_causes(case: Case, image: str) -> dict[str, tuple[str, ...]] | None:
    from ..zoo import read_record

    try:
        record = read_record(Path(image).read_bytes())
    except (OSError, TraceError):
        return None
    if record is None:
        return None
    return {qid: record.causes.get(qid) or (cause,) for qid, cause in record.failed.items()}


def export_nodes(run_dir: Path, out: Path, *, cases: str = "failing", shard: tuple[int, int] | None = None,
                 gating: Gating | str = Gating.WITHIN) -> int:
    """Write every node of the chosen cases' whole trees as one benchmark folder (roots as
    ``<case>.N0``) with ``nodes.jsonl`` saying where each sub-case sits; returns the count."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TraceError(f"--export-nodes {out}: exists and is not empty; choose a new folder")
    run = stream_run(run_dir)
    chosen = _choose(_streamed(run), cases, shard, run.root, Gating(gating))
    plan = plan_trees([case for case, _ in _chosen_items(_streamed(run), chosen.ids)])
    _write_node_folder(Path(out), list(plan.cases.values()), run.cases_dir, read_sample_manifest(run.cases_dir),
                       {"diagnosis_of": str(Path(run_dir).resolve()), "cases": cases}, plan.occurrences)
    return len(plan.cases)


# recorded models listed in the message of a refusal (a record may name any number)
_LISTED = 5


def named_providers(run_dir: Path, manifest: RunManifest, generator: str | None, judges: Sequence[str] | None,
                    settings: ModelSettings) -> tuple[str, tuple[str, ...], ModelSettings]:
    """The generator and judges of a diagnosis, and the settings they run with: those the
    command line names, else the run's when they are built in and offline
    (:func:`~tracebench.providers.runs_offline`: the zoo, the oracle; also as the user's models
    file resolves them), the zoo with the run's generation options unless the command line
    gives some. A run folder may come from anyone: a spec, plugin file, URL, key variable or
    option it records is shown, never run, imported or called; anything else it names is a
    TraceError that prints the flags to pass it explicitly."""
    needed: list[tuple[str, str]] = []  # (role, recorded spec) the command line must name
    if generator is None:
        if _offline(manifest.generator, "generator", settings):
            generator = manifest.generator
            if not settings.generator_options and manifest.generator_options:  # the nodes made as the run's images
                settings = replace(settings, generator_options=manifest.generator_options)
        else:
            needed.append(("generator", manifest.generator))
    if not judges:
        offline = all(_offline(j, "judge", settings) for j in manifest.judges)
        judges = manifest.judges if offline else ()
        needed += [] if offline else [("judge", j) for j in manifest.judges]
    if needed:
        named = []
        for role in ("generator", "judge"):
            specs = [_shown(spec) for r, spec in needed if r == role]
            if specs:
                listed = ", ".join(specs[:_LISTED]) + (f" and {len(specs) - _LISTED} more" if len(specs) > _LISTED else "")
                named.append(f"the {role}{'s' if len(specs) > 1 else ''} {listed}")
        raise TraceError(f"{RUN_MANIFEST.path(run_dir)}: names {' and '.join(named)}; what runs and where requests "
                         f"go is never taken from a run folder: name them yourself, and only what you trust, e.g. "
                         f"{_flags(needed, manifest)}")
    assert generator is not None
    return generator, tuple(judges), settings


def _offline(spec: str, role: str, settings: ModelSettings) -> bool:
    """:func:`~tracebench.providers.runs_offline` of a recorded spec, as written and as the
    user's models file resolves it (a table named ``oracle`` could name a served model)."""
    return runs_offline(spec, role) and runs_offline(resolve_spec(spec, settings, judge=role == "judge")[0], role)


def _flags(needed: list[tuple[str, str]], manifest: RunManifest) -> str:
    """The flags that name the recorded models ``needed``: ``--ROLE 'SPEC[@URL,...]'`` (where
    the run loaded a plugin from, or called a server), the generator's recorded options, and
    the key variables, each where the command line can say it (the judges' own when the
    generator's is not the default, so that no key goes to another's host)."""
    flags, keys = [], {"generator": set(), "judge": set()}
    for role, spec in needed[:1 + _LISTED]:
        endpoint = manifest.endpoints.get(spec)
        suffix = f"@{','.join(endpoint.base_urls)}" if endpoint and endpoint.base_urls else ""
        flags.append(f"--{role} {_shown(manifest.loaded_from.get(spec, spec) + suffix)}")
        if role == "generator":
            flags += [f"--generator-option {_shown(f'{k}={v}')}" for k, v in (manifest.generator_options or {}).items()]
        if endpoint:  # a served model: its key's variable (a plugin or a command takes none)
            keys[role].add(endpoint.api_key_env)
    default = {ModelSettings.api_key_env}
    if keys["generator"] - default:
        flags.append(f"--api-key-env {_shown(next(iter(keys['generator'])))}")
    if len(keys["judge"]) > 1:
        flags.append("(the judges' keys are in different variables: give each judge's in a --models file)")
    elif keys["judge"] and (keys["judge"] - default or keys["generator"] - default):
        flags.append(f"--judge-api-key-env {_shown(next(iter(keys['judge'])))}")
    return " ".join(flags)


def _shown(text: str, limit: int = 200) -> str:
    """A recorded text fit for one line of a terminal: shell-quoted as one word, control and
    other unprintable characters escaped (a record may hold anything), cut at ``limit``."""
    import shlex

    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return shlex.quote(text if len(text) <= limit else text[:limit - 1] + "…")


def diagnose_run(run_dir: Path, out: Path, *, cases: str = "failing", generator: str | None = None,
                 judges: Sequence[str] | None = None, strategy: str = "full", settings: ModelSettings | None = None,
                 concurrency: int = 8, judge_batch: str | None = None, cache_dir: Path | None = None,
                 shard: tuple[int, int] | None = None, retry_abstained: bool = False,
                 progress: bool | None = None, window: int | None = None,
                 gating: Gating | str = Gating.WITHIN, repeats: int | None = None, executor: str = "local",
                 workers: int = 1, gpus_per_worker: float = 0.0, ray_address: str | None = None) -> DiagnosisSummary:
    """Diagnose the cases of a run folder into ``out`` (see the module docstring); ``window``
    roots at a time (:data:`WINDOW`); ``gating`` as ``trace score --gating``; ``repeats``
    generations of every node (the root's first is the run's), decided by majority (None: 1, or
    for a run of ``--samples K`` K, so that every node is judged as the run judged its cases).

    ``executor``: ``local`` (the nodes' images made here) or ``ray``, as ``trace run``'s: one set of
    ``workers`` Ray actors (:class:`~tracebench.providers.RayGenerator`), started at the first
    round, makes the images of every round and every repeat (each call says which generation it
    asks), and is stopped at the end."""
    window = window or WINDOW
    gating = Gating(gating)
    if strategy not in STRATEGIES:
        raise TraceError(f"--strategy: {strategy!r} is neither full nor adaptive")
    run = stream_run(run_dir)  # read as a stream: only the chosen cases are kept
    manifest = run.manifest
    if repeats is None:
        repeats = manifest.samples or 1
    if not isinstance(repeats, int) or isinstance(repeats, bool) or not 1 <= repeats <= MAX_SAMPLES:
        raise TraceError(f"--repeats: {repeats!r} must be a whole number from 1 to {MAX_SAMPLES}")
    # what runs and where requests go: the command line's, or the run's only when built in and offline
    generator, judges, settings = named_providers(run.root, manifest, generator, judges,
                                                  settings or ModelSettings(seed=manifest.seed or 0))
    if settings.scale is None:  # the judges answer on the run's scale unless told otherwise
        settings = replace(settings, scale=manifest.scale or "binary")
    if settings.library is None:
        settings = replace(settings, library=library_of(run.cases_dir))
    judge_batch = judge_batch or manifest.judge_batch
    # the nodes' judges combine as the run's did (a run before the rule was recorded took the majority)
    ensemble = manifest.ensemble or ("majority" if len(manifest.judges) > 1 else "mean")
    scale = settings.scale
    if ensemble == "mean" and not manifest.ensemble and scale != "binary":
        ensemble = GRADED_ENSEMBLE  # several judges of a graded diagnosis over a one-judge run: the graded rule
    # a bad spec or a missing key is an error before anything is written; specs compared as resolved
    # (a models-file name or an @URL suffix names the same model as the run's plain spec)
    gen, judge_list = make_providers(generator, judges, settings)
    if executor not in ("local", "ray"):
        raise TraceError(f"--executor: {executor!r} is neither local nor ray")
    if workers < 1:  # as trace run: refused whatever the executor
        raise TraceError(f"--workers: {workers} must be at least 1")
    # one set of workers for every round (a bad --workers or a missing extra: one line, nothing written)
    workers_pool = RayGenerator(generator, settings, gen, workers=workers, gpus=gpus_per_worker,
                                address=ray_address) if executor == "ray" else None
    seed = settings.seed if gen.spec.startswith("synthetic:") else None
    generator_spec, judge_specs = gen.spec, tuple(j.spec for j in judge_list)
    same_generator = generator_spec == manifest.generator  # the run's limit on references holds for its generator
    # the run's images: its generator with its generation options (other options make other images)
    same_images = same_generator and dict(gen.options) == (manifest.generator_options or {})
    roots_from_run = (same_images and judge_specs == tuple(manifest.judges)
                      and judge_batch == manifest.judge_batch and seed == manifest.seed and manifest.sample == 0
                      and scale == (manifest.scale or "binary"))
    # a run of --samples K: a root's generations are the run's K (those --repeats asks; more are made)
    chosen = _choose(_streamed(run), cases, shard, run.root, gating)
    out = Path(out)
    identity = DiagnosisManifest(
        tool=f"tracebench {__version__}", run_dir=str(Path(run_dir).resolve()), cases_dir=str(run.cases_dir),
        cases_hash=manifest.cases_hash, generator=generator_spec, seed=seed, judges=judge_specs, judge_batch=judge_batch,
        strategy=strategy, gating=gating.value, cases=cases, shard=f"{shard[0]}/{shard[1]}" if shard else None,
        roots_from_run=roots_from_run, repeats=repeats, scale=None if scale == "binary" else scale,
        hashes={"diagnose": data_hash(("diagnose", RULES_FILE), ("diagnose", SOURCES_FILE))})
    if DIAGNOSIS_MANIFEST.path(out).is_file():
        old = DIAGNOSIS_MANIFEST.read(out)
        changed = [f for f in DiagnosisManifest.model_fields if f != "tool" and getattr(old, f) != getattr(identity, f)]
        if changed:
            raise TraceError(f"{out}: holds a diagnosis with {other_fields(changed)}; choose another --out")
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TraceError(f"--out {out}: exists and holds no diagnosis; choose another --out")
    if not chosen.ids and (cases != "failing" or chosen.unanswered):  # every case passing is no error
        unanswered = chosen.unanswered
        why = (f"; {unanswered} of {chosen.cases} cases have only abstained verdicts: ask again with "
               f"trace run ... --retry-abstained" if unanswered else "")
        raise TraceError(f"{run.root}: no case to diagnose ({cases}){why}")
    sample = read_sample_manifest(run.cases_dir)
    collage = bool(manifest.collage) and same_generator
    # the sub-cases of a root the run sent as a collage are sent one too: a node differs from its
    # root by what a rule took away, not by how the references were fed
    collage_always: set[str] = set()
    out.mkdir(parents=True, exist_ok=True)
    for folder in (ROUNDS_DIR, *((CACHE_DIR,) if cache_dir is None else ())):  # a resumed folder may be anyone's
        owned_folder(out, folder)
    remove_stale_temporaries(out)  # what a killed invocation was writing (kill -9); each round's run cleans its own
    DIAGNOSIS_MANIFEST.write(out, identity)
    rounds = itertools.count(1)
    used: list[str] = []  # the round folders, in order
    evaluated_in: dict[str, str] = {}  # sub-case id -> the round folder that evaluated it

    def evaluate(batch: list[Case], samples: Sequence[int]) -> list[Evaluated]:
        folder = owned_folder(out, f"{ROUNDS_DIR}/{next(rounds):02d}")
        used.append(folder.name)
        runs = [folder / _run_name(s) for s in samples]
        if _write_node_folder(folder / "cases", batch, run.cases_dir, sample,
                              {"diagnosis_of": identity.run_dir, "strategy": strategy, "round": folder.name},
                              replace=True):
            # a round of other sub-cases (rounds made by another version, windowed otherwise): its runs
            # are made again, from the call cache
            for stale in folder.iterdir():
                if stale.name.startswith("run"):
                    shutil.rmtree(stale)
        made = []
        for s, run_dir in zip(samples, runs):
            run_benchmark(folder / "cases", run_dir, generator=generator, judges=judges,
                          settings=replace(settings, sample=s), concurrency=concurrency, judge_batch=judge_batch,
                          cache_dir=cache_dir or out / CACHE_DIR, retry_abstained=retry_abstained, progress=progress,
                          ensemble=ensemble, collage=collage, max_images=manifest.max_images if same_generator else None,
                          collage_cases=frozenset(c.id for c in batch if c.id in collage_always),
                          executor=workers_pool or "local")
            got, why = _round_verdicts(run_dir)
            images = {c.id: str(p.relative_to(out)) for c in batch if (p := generated_image(run_dir, c.id))}
            made.append((got, images, why))
        evaluated_in.update((c.id, folder.name) for c in batch)
        return made

    names: dict[bytes, str] = {}  # sub-case key (:func:`_short`) -> id, of the windows diagnosed so far
    # --samples: a root's later generations the run made, by the root's sub-case id: (verdicts, image, reasons)
    run_samples: dict[str, list[tuple[dict[str, Outcome], str | None, dict[str, str]]]] = {}

    def recall(key: str, case_id: str, s: int) -> tuple[dict[str, Outcome], str | None, dict[str, str]] | None:
        """A root's generation the run made (``--samples``), or a sub-case an earlier window
        evaluated (rare: two roots that differ only by id), read back."""
        if roots_from_run and 0 < s <= len(run_samples.get(case_id, ())):
            return run_samples[case_id][s - 1]
        if _short(key) not in names or case_id not in evaluated_in:
            return None
        run_dir = out / ROUNDS_DIR / evaluated_in[case_id] / _run_name(s)
        if not run_dir.is_dir():
            return None
        got, why = _round_verdicts(run_dir, case_id)
        image = generated_image(run_dir, case_id)
        return got.get(case_id, {}), str(image.relative_to(out)) if image else None, why.get(case_id, {})

    synthetic = synthetic_profile(generator_spec) is not None  # the zoo, in process or behind trace serve

    def causes(case: Case, image: str) -> dict[str, tuple[str, ...]] | None:
        path = Path(image) if Path(image).is_absolute() else out / image
        return _zoo_causes(case, str(path))

    def trees() -> Iterator[DiagnosticTree]:
        """The trees, a window of roots at a time: only the window's cases, sub-cases and trees are held."""
        items = _chosen_items(_streamed_samples(run), chosen.ids)
        while window_items := list(itertools.islice(items, window)):
            roots = [case for case, _, _ in window_items]
            plan = plan_trees(roots, names)
            run_samples.clear()
            by_id = {item[0].id: item for item in window_items}
            for tree in plan.trees if roots_from_run else ():  # the generations --repeats asks of the run's
                case, samples, reasons = by_id[tree.root.id]
                run_samples[plan.cases[tree.keys["N0"]].id] = [
                    (samples[s], str(p.resolve()) if (p := generated_image(run.root, case.id, s)) else None, reasons[s])
                    for s in range(1, min(len(samples), repeats))]
            if collage and manifest.max_images is not None:
                fed = {c.id for c in roots if len(c.references) > manifest.max_images}
                collage_always.update(o.case_id for o in plan.occurrences if o.root in fed)
            root_images = {c.id: str(p.resolve()) for c in roots if (p := generated_image(run.root, c.id))}
            yield from diagnose(roots, {c.id: samples[0] for c, samples, _ in window_items}, evaluate,
                                strategy=strategy, roots_from_run=roots_from_run, root_images=root_images,
                                causes=causes if synthetic else None, plan=plan,
                                root_reasons={c.id: r[0] for c, _, r in window_items if r[0]}, recall=recall,
                                gating=gating, repeats=repeats)
            names.update((_short(key), case.id) for key, case in plan.cases.items())
            del window_items, by_id, roots, plan, root_images  # not held while the next window is read
            # nor the canonical forms of its tree nodes: the formula package memoizes up to 65,536 (about
            # 0.8 KB each), and every window adds its new formulas (29 MB after 14,560 cases, 5 MB after 1,600)
            canonical.cache_clear()

    tally = _SummaryTally()
    try:
        TREES.write(out, map(tally.add, trees()))
    finally:
        if workers_pool is not None:
            workers_pool.stop()
    for stale in (out / ROUNDS_DIR).iterdir() if (out / ROUNDS_DIR).is_dir() else ():
        if stale.name not in used and stale.name.isdigit():  # rounds of an earlier version's plan
            shutil.rmtree(stale)
    result = tally.summary(generator=generator_spec, judges=judge_specs, strategy=strategy, synthetic=synthetic,
                           repeats=repeats)
    SUMMARY.write(out, result)
    return result


def _run_name(sample: int) -> str:
    """A round's run folder of one generation: ``run`` for the first, ``run-2``, ``run-3`` ... after."""
    return "run" if sample == 0 else f"run-{sample + 1}"


def _round_verdicts(run_dir: Path, case_id: str | None = None
                    ) -> tuple[dict[str, dict[str, Outcome]], dict[str, dict[str, str]]]:
    """The verdicts of a diagnosis round's run (of one case, or all) and why those that
    abstained did: case id -> question id -> outcome, and -> reason."""
    got: dict[str, dict[str, Outcome]] = {}
    why: dict[str, dict[str, str]] = {}
    for _, _, _, v in VERDICTS.read_spanned(run_dir, unique=False):  # the round's run just wrote it
        if case_id is not None and v.case_id != case_id:
            continue
        got.setdefault(v.case_id, {})[v.question_id] = outcome = v.outcome
        if not outcome.answered:
            why.setdefault(v.case_id, {})[v.question_id] = abstention_reason(v)
    return got, why


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
