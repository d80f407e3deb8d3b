"""``trace diagnose``: the diagnostic trees of a run's cases, generated, judged and attributed.

Order of work: read the run; pick the cases; build every case's whole tree (pure, no model
call) and each node's sub-case; merge identical sub-cases (same content, whatever the
tree); then evaluate in rounds through the ``trace run`` harness, so every model call is
cached, resumable, concurrent and turns failures into abstentions:

- ``full``: one round holding every distinct sub-case;
- ``adaptive``: one round per depth, holding only the children of nodes where a root
  failure is still unexplained, and only those children that keep such a failure.

Each round is a benchmark folder (``rounds/NN/cases``, trace sample's format) and a run
folder (``rounds/NN/run``); a rerun with the same arguments recreates the same rounds and
resumes them. Root verdicts are the run's own when the generator and judges are the run's;
otherwise the root is generated again as node ``N0``. The end: ``trees.jsonl`` (one
:class:`~tracebench.records.DiagnosticTree` per case) and ``summary.json``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import networkx as nx

from .. import __version__
from ..errors import TraceError
from ..library import staged_output
from ..records import (CASES, DIAGNOSIS_MANIFEST, NODES, SUMMARY, TREES, Case, DiagnosisManifest, DiagnosisSummary,
                       DiagnosticEdge, DiagnosticNode, DiagnosticTree, NodeOccurrence, SampleManifest, VERDICTS)
from ..resources import data_hash
from ..safepaths import inside, safe_id_problem
from ..outcomes import Outcome
from ..providers import ModelSettings, synthetic_profile, with_endpoints
from ..run import (abstention_reason, generated_image, library_of, make_providers, run_benchmark, shard_of,
                   stream_run)
from ..cache import sha256
from ..jsonfiles import record_line
from ..sample import read_sample_manifest, write_benchmark
from ..score import instance_results
from ._attribute import Finding, attribute, localization, pending, summarize_sources
from ._node import node_case, node_shape, root_formula
from ._rules import RULES_FILE, SOURCES_FILE, number_terms, sources
from ._tree import TreeNode, bound_tree, tree_nodes

__all__ = ["Evaluated", "Evaluator", "TreePlan", "diagnose", "diagnose_run", "export_nodes", "format_summary", "merge_diagnoses",
           "plan_trees", "summarize"]

ROUNDS_DIR = "rounds"
CACHE_DIR = "cache"
STRATEGIES = ("full", "adaptive")

# sub-cases in -> (case id -> question id -> verdict, case id -> image path,
#                  case id -> question id -> why it abstained)
Evaluated = tuple[dict[str, dict[str, Outcome]], dict[str, str], dict[str, dict[str, str]]]
Evaluator = Callable[[list[Case]], Evaluated]


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


def plan_trees(roots: Sequence[Case]) -> TreePlan:
    """Build the trees and their sub-cases; identical sub-cases (within or across trees) are one."""
    trees, cases, occurrences = [], {}, []
    for root in roots:
        terms = {t.symbol: t for t in root.terms}
        formula = root_formula(root)  # parsed and checked
        graph = bound_tree(number_terms(formula), lambda s, terms=terms: terms[s].value if s in terms else None)
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
                tree.keys[node.id] = _key(sub)
                cases.setdefault(tree.keys[node.id], sub)
            occurrences.append(NodeOccurrence(case_id=cases[tree.keys[node.id]].id, root=root.id, node=node.id))
        trees.append(tree)
    return TreePlan(trees, cases, occurrences)


# ------------------------------------------------------------------------------ node folders

def _write_node_folder(target: Path, cases: list[Case], source_dir: Path, sample: SampleManifest | None,
                       arguments: dict, occurrences: list[NodeOccurrence] | None = None, *,
                       replace: bool = False) -> None:
    """Write sub-cases as a benchmark folder through trace sample's writer (plus nodes.jsonl).
    ``replace``: the folder is the diagnosis's own round and may be rewritten; otherwise an
    existing non-empty folder is refused."""
    if replace and CASES.path(target).is_file() and CASES.path(target).read_text(encoding="utf-8") == "".join(
            map(record_line, cases)):
        return  # the same round, written before a resume
    write_benchmark(target, cases, seed=sample.seed if sample else 0,
                    source=lambda case, ref: inside(source_dir, ref.path, f"{source_dir}: case {case.id}: reference",
                                                    "benchmark folder"),
                    arguments=arguments, library=sample.library if sample else {},
                    hashes={**(sample.hashes if sample else {}),
                            "diagnose": data_hash(("diagnose", RULES_FILE), ("diagnose", SOURCES_FILE))},
                    overwrite=replace,
                    extra=None if occurrences is None else lambda folder: NODES.write(folder, occurrences))


# ------------------------------------------------------------------------------ selection

@dataclass
class _Chosen:
    """The cases a diagnosis starts from, with their run verdicts, read from a stream of the run."""

    roots: list[Case]
    verdicts: dict[str, dict[str, Outcome]]  # of the roots
    reasons: dict[str, dict[str, str]]  # of the roots: why a verdict abstained
    cases: int  # cases of the run with verdicts
    unanswered: int  # of those, cases whose every verdict abstained


def _choose(items: Iterable[tuple[Case, dict[str, Outcome], dict[str, str]]], which: str,
            shard: tuple[int, int] | None, root: Path) -> _Chosen:
    """The chosen cases of a run given as (case, outcomes, abstention reasons) in run order,
    consumed one at a time: only the chosen ones are kept."""
    explicit = None if which in ("failing", "all") else [i.strip() for i in which.split(",") if i.strip()]
    if explicit is not None and not explicit:
        raise TraceError(f"--cases: {which!r}: not a case of run {root}")
    wanted = set(explicit or ())
    seen: set[str] = set()
    picked: dict[str, tuple[Case, dict[str, Outcome], dict[str, str]]] = {}
    unanswered = 0
    for case, outcomes, reasons in items:
        seen.add(case.id)
        unanswered += not any(o.answered for o in outcomes.values())
        if which == "failing":
            take = any(v.failed for v in instance_results(case, outcomes).values())
        else:
            take = which == "all" or case.id in wanted
        if take:
            picked[case.id] = (case, outcomes, reasons)
    if explicit is not None:
        unknown = [i for i in explicit if i not in seen]
        if unknown:
            raise TraceError(f"--cases: {', '.join(unknown)}: not a case of run {root}")
    chosen = explicit if explicit is not None else list(picked)
    if shard is not None:
        chosen = [i for i in chosen if shard_of(i, shard[1]) == shard[0]]
    return _Chosen([picked[i][0] for i in chosen], {i: picked[i][1] for i in chosen},
                   {i: picked[i][2] for i in chosen if picked[i][2]}, len(seen), unanswered)


def _streamed(run) -> Iterator[tuple[Case, dict[str, Outcome], dict[str, str]]]:
    """A run stream's cases as :func:`_choose` takes them."""
    for item in run:
        yield item.case, item.outcomes, {v.question_id: abstention_reason(v) for v in item.verdicts
                                         if not v.outcome.answered}


def _select(run, which: str, shard: tuple[int, int] | None) -> list[Case]:
    """The chosen cases of a run folder read whole (:func:`~tracebench.run.load_run`)."""
    items = ((run.cases[i], run.verdicts[i], run.reasons.get(i, {})) for i in run.verdicts)
    return _choose(items, which, shard, run.root).roots


# ------------------------------------------------------------------------------ the diagnosis

def _strategy_rounds(plan: TreePlan, strategy: str, root_verdicts: dict[str, dict[str, Outcome]], evaluate: Evaluator,
                     roots_from_run: bool) -> Evaluated:
    """Evaluate the sub-cases the strategy asks for; returns verdicts, images and abstention
    reasons by sub-case key."""
    verdicts: dict[str, dict[str, Outcome]] = {}
    images: dict[str, str] = {}
    reasons: dict[str, dict[str, str]] = {}

    def run_round(keys: list[str]) -> None:
        todo = [k for k in dict.fromkeys(keys) if k not in verdicts]
        if not todo:
            return
        got, got_images, got_reasons = evaluate([plan.cases[k] for k in todo])
        for k in todo:
            case_id = plan.cases[k].id
            verdicts[k] = got.get(case_id, {})
            if case_id in got_images:
                images[k] = got_images[case_id]
            if case_id in got_reasons:
                reasons[k] = got_reasons[case_id]

    if not roots_from_run:
        run_round([t.keys["N0"] for t in plan.trees])
    if strategy == "full":
        run_round([t.keys[n.id] for t in plan.trees for n in t.nodes if n.parent is not None])
        return verdicts, images, reasons
    # adaptive: breadth first, one round per depth. A root failure is chased only until it first
    # passes somewhere in its tree: breadth first, that node is at the smallest depth, and every
    # node of that depth that could tie was in the same round.
    frontier: list[tuple[_Tree, TreeNode, frozenset]] = []
    explained: dict[str, set] = {}
    for tree in plan.trees:
        at_root = root_verdicts.get(tree.root.id, {}) if roots_from_run else verdicts[tree.keys["N0"]]
        results = instance_results(tree.root, at_root)
        failing = frozenset(i for i in tree.nodes[0].targets if i in results and results[i].failed)
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
            case = plan.cases[tree.keys[child.id]]
            still = pending(child, open_, instance_results(case, verdicts[tree.keys[child.id]]))
            explained[tree.root.id] |= (open_ & set(child.targets)) - still
            frontier.append((tree, child, still))
    return verdicts, images, reasons


def diagnose(roots: Sequence[Case], root_verdicts: dict[str, dict[str, Outcome]], evaluate: Evaluator, *,
             strategy: str = "full", roots_from_run: bool = True, root_images: dict[str, str] | None = None,
             causes: Callable[[Case, str], dict[str, tuple[str, ...]] | None] | None = None,
             plan: TreePlan | None = None, root_reasons: dict[str, dict[str, str]] | None = None
             ) -> list[DiagnosticTree]:
    """Diagnose ``roots`` given their verdicts, evaluating sub-cases with ``evaluate``.

    The model call is passed in: the CLI evaluates through the run harness; anything that
    maps sub-cases to verdicts will do. ``causes(case, image)`` gives the causes a synthetic
    generator recorded (question id -> causes) for the localization check; ``root_reasons``
    why the run's root verdicts abstained (case id -> question id -> reason). Returns the trees;
    :func:`summarize` makes the summary from them."""
    if strategy not in STRATEGIES:
        raise TraceError(f"--strategy: {strategy!r} is neither full nor adaptive")
    plan = plan or plan_trees(roots)
    verdicts, images, reasons = _strategy_rounds(plan, strategy, root_verdicts, evaluate, roots_from_run)
    trees = []
    for tree in plan.trees:
        results: dict[str, dict] = {}
        node_verdicts: dict[str, dict[str, Outcome]] = {}
        for node in tree.nodes:
            key = tree.keys[node.id]
            if node.parent is None and roots_from_run:
                node_verdicts[node.id] = root_verdicts.get(tree.root.id, {})
            elif key in verdicts:
                node_verdicts[node.id] = verdicts[key]
            else:
                continue
            results[node.id] = instance_results(plan.cases[key], node_verdicts[node.id])
        findings = attribute(tree.nodes, results)
        max_depth = max(n.depth for n in tree.nodes)
        root_image = (root_images or {}).get(tree.root.id) if roots_from_run else images.get(tree.keys["N0"])
        recorded = causes(tree.root, root_image) if causes and root_image else None
        records = [f.record(max_depth, *_cause(f, tree.root, recorded)) for f in findings]
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
                status={t: v.status for (_, t), v in results.get(node.id, {}).items()}))
        edges = tuple(DiagnosticEdge(parent=u, child=v, rule=d["rule"]) for u, v, d in tree.graph.edges(data=True))
        trees.append(DiagnosticTree(case_id=tree.root.id, formula=tree.root.formula, slot=tree.root.slot,
                                    strategy=strategy, max_depth=max_depth, nodes=tuple(nodes), edges=edges,
                                    attributions=tuple(records)))
    return trees


def summarize(trees: Sequence[DiagnosticTree], *, generator: str, judges: Sequence[str], strategy: str,
              synthetic: bool) -> DiagnosisSummary:
    """The summary of a diagnosis, from its trees alone (so shards merge by concatenation)."""
    summary = summarize_sources([a for t in trees for a in t.attributions])
    # by content, not case id: shards name an identical sub-case after their own first occurrence
    generated = len({(n.prompt, n.references, n.question_ids) for t in trees for n in t.nodes
                     if n.evaluated and n.parent is not None})
    abstained = {(n.parent is None and t.case_id, n.prompt, n.references, n.question_ids): n.abstained
                 for t in trees for n in t.nodes if n.abstained}  # each generated sub-case once
    reasons = Counter(reason for why in abstained.values() for reason in why.values())
    return DiagnosisSummary(
        tool=f"tracebench {__version__}", generator=generator, judges=tuple(judges), strategy=strategy,
        cases=len(trees), instances=summary["instances"], undetermined=summary["undetermined"],
        abstained=summary["abstained"], abstained_verdicts=sum(reasons.values()),
        abstention_reasons=dict(reasons.most_common()),
        sources=summary["sources"], counts=summary["counts"], by_operator=summary["by_operator"],
        cumulative_pass=summary["cumulative_pass"], nodes_generated=generated,
        nodes_in_trees=sum(len(t.nodes) - 1 for t in trees),
        nodes_per_case=round(generated / len(trees), 3) if trees else 0.0,
        localization_accuracy=summary["localization"] if synthetic else None)


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


def export_nodes(run_dir: Path, out: Path, *, cases: str = "failing", shard: tuple[int, int] | None = None) -> int:
    """Write every node of the chosen cases' whole trees as one benchmark folder (roots as
    ``<case>.N0``) with ``nodes.jsonl`` saying where each sub-case sits; returns the count."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TraceError(f"--export-nodes {out}: exists and is not empty; choose a new folder")
    run = stream_run(run_dir)
    plan = plan_trees(_choose(_streamed(run), cases, shard, run.root).roots)
    _write_node_folder(Path(out), list(plan.cases.values()), run.cases_dir, read_sample_manifest(run.cases_dir),
                       {"diagnosis_of": str(Path(run_dir).resolve()), "cases": cases}, plan.occurrences)
    return len(plan.cases)


def diagnose_run(run_dir: Path, out: Path, *, cases: str = "failing", generator: str | None = None,
                 judges: Sequence[str] | None = None, strategy: str = "full", settings: ModelSettings | None = None,
                 concurrency: int = 8, judge_batch: str | None = None, cache_dir: Path | None = None,
                 shard: tuple[int, int] | None = None, retry_abstained: bool = False,
                 progress: bool | None = None) -> DiagnosisSummary:
    """Diagnose the cases of a run folder into ``out`` (see the module docstring)."""
    if strategy not in STRATEGIES:
        raise TraceError(f"--strategy: {strategy!r} is neither full nor adaptive")
    run = stream_run(run_dir)  # read as a stream: only the chosen cases are kept
    manifest = run.manifest
    settings = with_endpoints(settings or ModelSettings(seed=manifest.seed or 0), manifest.endpoints,
                              generator=manifest.generator, judges=manifest.judges)
    if settings.library is None:
        settings = replace(settings, library=library_of(run.cases_dir))
    generator = generator or manifest.generator
    judges = tuple(judges or manifest.judges)
    judge_batch = judge_batch or manifest.judge_batch
    # a bad spec or a missing key is an error before anything is written; specs compared as resolved
    # (a models-file name or an @URL suffix names the same model as the run's plain spec)
    gen, judge_list = make_providers(generator, judges, settings)
    seed = settings.seed if gen.spec.startswith("synthetic:") else None
    generator_spec, judge_specs = gen.spec, tuple(j.spec for j in judge_list)
    roots_from_run = (generator_spec == manifest.generator and judge_specs == tuple(manifest.judges)
                      and judge_batch == manifest.judge_batch and seed == manifest.seed)
    chosen = _choose(_streamed(run), cases, shard, run.root)
    roots = chosen.roots
    out = Path(out)
    identity = DiagnosisManifest(
        tool=f"tracebench {__version__}", run_dir=str(Path(run_dir).resolve()), cases_dir=str(run.cases_dir),
        cases_hash=manifest.cases_hash, generator=generator_spec, seed=seed, judges=judge_specs, judge_batch=judge_batch,
        strategy=strategy, cases=cases, shard=f"{shard[0]}/{shard[1]}" if shard else None,
        roots_from_run=roots_from_run,
        hashes={"diagnose": data_hash(("diagnose", RULES_FILE), ("diagnose", SOURCES_FILE))})
    if DIAGNOSIS_MANIFEST.path(out).is_file():
        old = DIAGNOSIS_MANIFEST.read(out)
        changed = [f for f in DiagnosisManifest.model_fields if f != "tool" and getattr(old, f) != getattr(identity, f)]
        if changed:
            raise TraceError(f"{out}: holds a diagnosis with another {', '.join(changed)}; choose another --out")
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TraceError(f"--out {out}: exists and holds no diagnosis; choose another --out")
    if not roots:
        unanswered = chosen.unanswered
        why = (f"; {unanswered} of {chosen.cases} cases have only abstained verdicts: ask again with "
               f"trace run ... --retry-abstained" if unanswered else "")
        raise TraceError(f"{run.root}: no case to diagnose ({cases}){why}")
    plan = plan_trees(roots)
    sample = read_sample_manifest(run.cases_dir)
    out.mkdir(parents=True, exist_ok=True)
    DIAGNOSIS_MANIFEST.write(out, identity)
    rounds = iter(range(1, 1000))

    def evaluate(batch: list[Case]) -> Evaluated:
        folder = out / ROUNDS_DIR / f"{next(rounds):02d}"
        _write_node_folder(folder / "cases", batch, run.cases_dir, sample,
                           {"diagnosis_of": identity.run_dir, "strategy": strategy, "round": folder.name}, replace=True)
        run_benchmark(folder / "cases", folder / "run", generator=generator, judges=judges, settings=settings,
                      concurrency=concurrency, judge_batch=judge_batch, cache_dir=cache_dir or out / CACHE_DIR,
                      retry_abstained=retry_abstained, progress=progress)
        got: dict[str, dict[str, Outcome]] = {}
        why: dict[str, dict[str, str]] = {}
        for _, _, _, v in VERDICTS.read_spanned(folder / "run", unique=False):  # the round's run just wrote it
            got.setdefault(v.case_id, {})[v.question_id] = outcome = v.outcome
            if not outcome.answered:
                why.setdefault(v.case_id, {})[v.question_id] = abstention_reason(v)
        images = {c.id: str(p.relative_to(out)) for c in batch if (p := generated_image(folder / "run", c.id))}
        return got, images, why

    root_images = {c.id: str(p.resolve()) for c in roots if (p := generated_image(run.root, c.id))}
    synthetic = synthetic_profile(generator_spec) is not None  # the zoo, in process or behind trace serve

    def causes(case: Case, image: str) -> dict[str, tuple[str, ...]] | None:
        path = Path(image) if Path(image).is_absolute() else out / image
        return _zoo_causes(case, str(path))

    trees = diagnose(roots, chosen.verdicts, evaluate, strategy=strategy, roots_from_run=roots_from_run,
                     root_images=root_images, causes=causes if synthetic else None, plan=plan,
                     root_reasons=chosen.reasons)
    TREES.write(out, trees)
    result = summarize(trees, generator=generator_spec, judges=judge_specs, strategy=strategy, synthetic=synthetic)
    SUMMARY.write(out, result)
    return result


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
            nodes = tuple(n.model_copy(update={"image": _moved(n.image, folder, out)}) for n in tree.nodes)
            trees[tree.case_id] = tree.model_copy(update={"nodes": nodes})
    order = {item.case.id: k for k, item in enumerate(stream_run(Path(first.run_dir)))}
    merged = sorted(trees.values(), key=lambda t: order.get(t.case_id, len(order)))
    identity = first.model_copy(update={"shard": None})
    summary = summarize(merged, generator=first.generator, judges=first.judges, strategy=first.strategy,
                        synthetic=synthetic_profile(first.generator) is not None)
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
