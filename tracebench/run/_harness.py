"""``trace run``: every case through a generator and its judges, cached, resumable, concurrent.

Every model call goes through :class:`~tracebench.providers.ModelAccess` (cache, retry,
concurrency per endpoint, counters, key scrubbing); this module owns what a run adds: the
parsing of judge replies into verdicts, the judges' majority, resume and shards. An API
error, a refusal or a reply that cannot be parsed is an abstention with its reason, never a
fail; abstentions are not cached, so ``--retry-abstained`` asks again.

Resuming: verdicts are appended case by case (all lines of a case in one write). At start,
lines of cases left incomplete by a kill are dropped; complete cases are skipped; every
model call that had finished is in the cache. At the end the file is rewritten in case
order, so an interrupted-and-resumed run ends with the same bytes as an uninterrupted one.

Memory does not grow with the benchmark: the cases are read from their file as they run (at
most twice the concurrency in flight), and of each case finished the run keeps only where
its lines lie in the appended file and how many there are; the final file is copied from
those places in case order.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import shutil
import sys
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Container, Iterable, Iterator, Sequence

from tqdm import tqdm

from ..errors import TraceError, disk_full
from ..jsonfiles import loads, write_json
from ..choices import Executor, JudgeBatch
from ..records import (CALL_CACHE_DIR, CASES, IMAGES_DIR, RUN_MANIFEST, VERDICTS, Case, GenerationInfo, Question, RunManifest,
                       Verdict, Vote, read_run_verdicts, repeated_question, RunLayout, SampleKey)
from ..replies import unfence
from ..scales import DEFAULT_SCALE, spec_of, Scale, kind_of, normalize
from ..scales import outcome as scaled_outcome
from ..outcomes import ABSTAINED, Outcome, Status, combine, majority_verdicts
from ..providers import (CallFailed, Generator, ImageBytes, Judge, ModelAccess, ModelSettings, RayGenerator, Reply,
                         ReferenceFiles, asking, check_references, clip, collage_case, image_suffix, make_generator,
                         make_judge, synthetic_profile)
from ..images import too_large
from ..sample import read_cases, read_sample_manifest
from ..cache import Cache, file_sha256, remove_stale_temporaries, write_atomic
from ..safepaths import inside, owned_folder
from ._options import RunIdentity, RunOptions, settings_for
from ._schedule import Admission, CaseLines, Lines, abstained_votes, run_cases

__all__ = ["IMAGES_DIR", "RunFolder", "RunOptions", "abstention_reason", "abstention_reasons", "vote_abstention_reasons", "generated_image", "library_of", "load_run", "make_providers", "parse_reply",
           "run_benchmark", "shard_of"]



def shard_of(case_id: str, n: int) -> int:
    """The shard (1..n) of a case: a stable split by case id."""
    return zlib.crc32(case_id.encode()) % n + 1


REASON_CHARS = 1000  # the longest reason a vote keeps of a judge's
RAW_CHARS = 2000  # the longest part of a judge's reply a vote keeps


def parse_reply(raw: str, questions: Sequence[Question], scale: Scale | str = Scale.BINARY
                ) -> dict[str, tuple[str | None, str, str]]:
    """question id -> (answer or None, reason, this question's raw part); the answer is one of the
    question's answers under ``scale`` (:func:`tracebench.scales.answers`: "yes"/"no", a grade
    "2"/"1"/"0", a tier "1.0"/"0.2"/"0.0").

    A reply that is not JSON, or does not answer a question with one of its answers, or answers
    it twice with different answers, leaves that question without an answer (an abstention),
    with the reason. Reasons and raw parts are cut to :data:`REASON_CHARS` and :data:`RAW_CHARS`.
    """
    text = unfence(raw)
    try:
        data = loads(text)  # deep nesting and huge numbers are JSONDecodeErrors too
        items = data["answers"]
        if not isinstance(items, list):
            raise TypeError
    except (ValueError, KeyError, TypeError, IndexError, RecursionError) as err:
        snippet = " ".join(raw[:4 * RAW_CHARS].split())[:300]
        what = "nested too deeply" if isinstance(err, RecursionError) else "not the expected JSON"
        return {q.id: (None, f"the reply is {what}", snippet) for q in questions}
    found: dict[str, list[dict]] = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            found.setdefault(item["id"], []).append(item)
    result = {}
    for q in questions:
        given = found.get(q.id)
        if not given:
            result[q.id] = (None, "no answer for this question", "")
            continue
        try:
            result[q.id] = _judged(given, kind_of(scale, q))
        except RecursionError:
            result[q.id] = (None, "the answer is nested too deeply", "")
    return result


def _judged(given: list[dict], kind: str = DEFAULT_SCALE) -> tuple[str | None, str, str]:
    """One question's answer (of the answers of ``kind``) from the items of a reply that name it."""
    item = given[0]
    answers = {_answer(i, kind) or str(i.get("answer", "")).strip().lower() for i in given}
    part = clip(json.dumps(given if len(answers) > 1 else item, ensure_ascii=False), RAW_CHARS)
    answer = _answer(item, kind)
    if len(answers) > 1:
        return None, clip(f"contradictory answers: {', '.join(sorted(map(repr, answers)))}", REASON_CHARS), part
    if answer is None:
        return None, clip(f"answer {item.get('answer')!r} is {spec_of(kind).other_than}", REASON_CHARS), part
    reason = item.get("reason", "")
    return answer, clip(reason if isinstance(reason, str) else json.dumps(reason), REASON_CHARS), part


def _answer(item: dict, kind: str = DEFAULT_SCALE) -> str | None:
    raw = item.get("answer", "")
    if isinstance(raw, (dict, list)):
        return None
    return normalize(kind, raw)


class _Runner:
    """The calls of one case: its image, then each judge's answers, through the one wrapper."""

    def __init__(self, root: Path, cases_dir: Path, generator: Generator, judges: list[Judge],
                 access: ModelAccess, identity: RunManifest, collaged: frozenset[str] = frozenset()) -> None:
        self.root, self.layout = root, RunLayout(root)
        self.scale = identity.answer_scale  # what the judges answer on (tracebench.scales)
        self.collaged = collaged  # the cases sent their references as one grid image
        self.references = ReferenceFiles(cases_dir)
        self.generator, self.judges, self.access = generator, judges, access
        self.samples = identity.samples or 1  # --samples K: each case generated K times by the one generator
        self.judge_batch = identity.judge_batch
        self.ensemble = identity.ensemble
        self.abstentions = 0
        self.votes_abstained: Counter = Counter()  # judge spec -> its votes that abstained (this invocation)

    async def image(self, case: Case, references: list[bytes], sample: int = 0) -> tuple[bytes | None, str]:
        """The generated image (or None) and the abstention reason; what the generator says of it
        (the references it used, a collage) is written beside it (:class:`GenerationInfo`).
        ``sample``: which generation of the case (``--samples``), named ``<case id>~<sample>``."""
        sent, given = case, references
        collaged = case.id in self.collaged
        if collaged:
            sent, given = collage_case(case, references)
        try:
            with asking(sample if self.samples > 1 else None):  # the generation asked (its key, seed, name)
                made = await self.access.generate(self.generator, sent, given)
        except CallFailed as err:
            return None, f"generation failed: {err}"
        refused = too_large(made.image)  # the header only; never kept, judged or shown
        if refused is not None:
            return None, f"generated image refused: it {refused}"
        data = ImageBytes(made.image)  # hashed and encoded once for all the judge calls of the case
        key = SampleKey(case.id, sample)
        target = self.layout.image(key, image_suffix(data))
        if not target.exists() or target.read_bytes() != data:
            write_atomic(target, data)
        info = self.layout.info(key)
        if made.used_references is not None or collaged:
            write_json(info, GenerationInfo(case_id=case.id, used_references=None if collaged else made.used_references,
                                            collage=collaged, sample=sample or None))
        elif info.exists():
            info.unlink()
        return data, ""

    async def ask(self, judge: Judge, case: Case, questions: list[Question], image: bytes,
                  references: list[bytes]) -> tuple[dict[str, tuple[str | None, str, str]], str | None, Reply | None]:
        parsed: dict[str, dict] = {}

        def complete(text: str) -> bool:  # only complete replies are cached: abstentions are asked again
            parsed[text] = parse_reply(text, questions, self.scale)
            return all(answer is not None for answer, _, _ in parsed[text].values())

        try:
            reply, key = await self.access.ask(judge, case, questions, image, references, keep=complete)
        except CallFailed as err:
            return ({q.id: (None, f"judge call failed: {err}", "") for q in questions}, getattr(err, "cache_key", None),
                    None)
        return parsed.get(reply.text) or parse_reply(reply.text, questions, self.scale), key, reply

    async def case(self, case: Case) -> list[Verdict]:
        """The verdicts of a case: of each of its samples in turn (one, without ``--samples``)."""
        references = [self.references.get(ref.path) for ref in case.references]
        verdicts = []
        for sample in range(self.samples):
            verdicts += await self.sample(case, references, sample)
        return verdicts

    async def sample(self, case: Case, references: list[bytes], sample: int) -> list[Verdict]:
        image, problem = await self.image(case, references, sample)
        votes: dict[str, list[Vote]] = {q.id: [] for q in case.checklist}
        for judge in self.judges:
            if image is None:
                for q in case.checklist:
                    votes[q.id].append(Vote(judge=judge.spec, verdict=Status.ABSTAIN, reason=problem))
                continue
            batches = [list(case.checklist)] if self.judge_batch == JudgeBatch.CASE else _by_op(case.checklist)
            results = await asyncio.gather(*(self.ask(judge, case, batch, image, references) for batch in batches))
            for batch, (parsed, key, reply) in zip(batches, results):
                for q in batch:
                    answer, reason, raw = parsed[q.id]
                    outcome = ABSTAINED if answer is None else scaled_outcome(kind_of(self.scale, q), answer, q)
                    votes[q.id].append(Vote(judge=judge.spec, verdict=outcome.status, value=outcome.value,
                                            answer=answer, reason=reason, raw=raw, cache_key=key,
                                            model=reply and reply.model, fingerprint=reply and reply.fingerprint))
        spec = "+".join(j.spec for j in self.judges)
        verdicts = []
        for q in case.checklist:
            outcome = combine(self.ensemble, (v.outcome for v in votes[q.id]))
            verdicts.append(Verdict(case_id=case.id, question_id=q.id, sample=sample or None, op=q.op,
                                    verdict=outcome.status, value=outcome.value, judge=spec, votes=tuple(votes[q.id])))
        self.abstentions += sum(not v.outcome.answered for v in verdicts)
        self.votes_abstained.update(abstained_votes(verdicts))
        return verdicts


def _seen_models(pinned: dict[str, tuple[str, ...]], seen: dict[str, set[str]]) -> dict[str, tuple[str, ...]] | None:
    """judge spec -> every model seen over the invocations, sorted; None when none was."""
    merged = {spec: tuple(sorted(set(pinned.get(spec, ())) | seen.get(spec, set())))
              for spec in sorted(set(pinned) | set(seen))}
    return merged or None


def _most_calls(case: Case, generator: Generator, judges: Sequence[Judge], judge_batch: str, samples: int = 1) -> int:
    """The most model calls a case can take: per sample its generation, then each judge's batches
    (cache hits make it fewer; a retried call counts once, as ``run.json`` counts calls)."""
    batches = 1 if judge_batch == JudgeBatch.CASE else len({q.op for q in case.checklist})
    return samples * (1 + len(judges) * batches)


def _cells(cases: Iterable[Case], collaged: set[str], cases_dir: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each reference of the cases sent as a collage, each file once."""
    seen: set[str] = set()
    for case in cases:
        if case.id in collaged:
            for ref in case.references:
                if ref.path not in seen:
                    seen.add(ref.path)
                    where = f"{cases_dir}: case {case.id}: reference image {ref.path}"
                    yield where, inside(cases_dir, ref.path, where, "benchmark folder").read_bytes()


def generated_image(run_dir: Path, case_id: str, sample: int | None = 0) -> Path | None:
    """The image a run folder holds for a case (whatever its format; its generation ``sample``
    with ``--samples``), or None; one that is a link leaving the run folder is a TraceError,
    never read."""
    return RunLayout(Path(run_dir)).find_image(SampleKey(case_id, sample or 0))


def _by_op(questions: Sequence[Question]) -> list[list[Question]]:
    groups: dict[str, list[Question]] = {}
    for q in questions:
        groups.setdefault(q.op, []).append(q)
    return list(groups.values())




@dataclass(frozen=True)
class RunFolder:
    """A finished (or partial) run folder, read: its manifest, the cases it was made from
    (by id) and its verdicts (case id -> question id -> outcome)."""

    root: Path
    manifest: RunManifest
    cases_dir: Path
    cases: dict[str, Case]
    verdicts: dict[str, dict[str, Outcome]]  # with --samples K: each question's majority over the samples
    reasons: dict[str, dict[str, str]]  # case id -> question id -> why its verdict abstained
    samples: dict[str, tuple[dict[str, Outcome], ...]] = field(default_factory=dict)  # --samples K: case id ->
    # its verdicts per sample (0 .. K-1); empty for a run of one sample

    def outcomes(self, case_id: str) -> tuple[dict[str, Outcome], ...]:
        """A case's verdicts per sample: one dict, or K with ``--samples K`` (what scores average)."""
        return self.samples.get(case_id) or (self.verdicts[case_id],)


def load_run(run_dir: Path, *, cases_dir: Path | None = None) -> RunFolder:
    """Read a run folder; a TraceError names what is missing or does not match."""
    run_dir = Path(run_dir)
    manifest = RUN_MANIFEST.read(run_dir)
    cases_dir = Path(cases_dir or manifest.cases_dir)
    if not CASES.path(cases_dir).is_file():
        raise TraceError(f"{cases_dir}: not a benchmark folder (no {CASES.name}); give it with --cases")
    cases = {case.id: case for case in read_cases(cases_dir)}  # a broken line is named before the hash
    if file_sha256(CASES.path(cases_dir)) != manifest.cases_hash:
        raise TraceError(f"{cases_dir}: not the benchmark this run was made from (its {CASES.name} differs)")
    verdicts: dict[str, dict[str, Outcome]] = {}
    reasons: dict[str, dict[str, str]] = {}
    by_sample: dict[str, dict[int, dict[str, Outcome]]] = {}
    for v in read_run_verdicts(run_dir, cases, cases_dir, samples=manifest.samples or 1):
        by_sample.setdefault(v.case_id, {}).setdefault(v.sample or 0, {})[v.question_id] = outcome = v.outcome
        if not outcome.answered:
            reasons.setdefault(v.case_id, {}).setdefault(v.question_id, abstention_reason(v))
    samples = {case_id: per_sample(found) for case_id, found in by_sample.items()}
    for case_id, each in samples.items():
        verdicts[case_id] = majority_verdicts(each)
        kept = {q: why for q, why in reasons.get(case_id, {}).items() if not verdicts[case_id][q].answered}
        for q, outcome in verdicts[case_id].items():  # answered by every sample, yet no majority: a tie
            if not outcome.answered and q not in kept:
                kept[q] = f"its {len(each)} samples tie"
        if kept:
            reasons[case_id] = kept
        else:
            reasons.pop(case_id, None)
    return RunFolder(run_dir, manifest, cases_dir, cases, verdicts, reasons,
                     {case_id: each for case_id, each in samples.items() if len(each) > 1})


def per_sample(found: dict[int, dict[str, Outcome]]) -> tuple[dict[str, Outcome], ...]:
    """A case's verdicts by sample index as a tuple 0 .. K-1 (a sample with no verdict: empty)."""
    return tuple(found.get(k, {}) for k in range(max(found) + 1)) if found else ({},)


def _sampled_ids(questions: Sequence[Question], samples: int) -> Iterator[tuple[str, int]]:
    """What a case's verdicts must cover: each question of each sample (:func:`_verdict_key`)."""
    return ((q.id, k) for k in range(samples) for q in questions)


def _verdict_key(verdict: Verdict) -> tuple[str, int]:
    """A verdict's question and sample."""
    return verdict.question_id, verdict.sample or 0


def _question_digest(keys: Iterable[tuple[str, int]]) -> tuple[int, int]:
    """How many (question id, sample) keys, and an order-free 64-bit digest of them: what a
    case's verdicts must match to be complete, held in a few bytes per case instead of every id."""
    count, digest = 0, 0
    for key in keys:
        digest ^= _id_hash(key)
        count += 1
    return count, digest


def _id_hash(key: tuple[str, int]) -> int:
    question_id, sample = key
    return int.from_bytes(hashlib.blake2b(f"{sample}\n{question_id}".encode(), digest_size=8).digest(), "big")


def _kept_any(out: Path) -> bool:
    """Whether ``verdicts.jsonl`` holds a case (a whole verdict line: a line torn by a kill is none)."""
    path = VERDICTS.path(out)
    if not path.is_file() or path.stat().st_size == 0:
        return False
    return any(True for _ in VERDICTS.read_spanned(out, torn_tail=True, unique=False))


def _what_to_fix(spec: str) -> str:
    """What a stopped provider's user fixes, by its scheme: a served model's endpoint, a command ..."""
    if synthetic_profile(spec) is not None or spec.partition(":")[2].partition(":")[0] == "oracle":
        return "the benchmarks trace serve was started with"  # the zoo behind a server knows only its cases
    scheme = spec.partition(":")[0]
    return {"openai": "the endpoint, model or key", "command": "the command", "python": "the plugin",
            "folder": "the folder"}.get(scheme, f"the {scheme} provider")


def _existing(out: Path, checklists: dict[str, tuple[int, int]], retry_abstained: bool) -> dict[str, Lines]:
    """Complete cases already in verdicts.jsonl, as where their lines lie: a last line torn by
    a kill and a half-written case are dropped; a broken line anywhere else is an error, and
    so is a question twice within a case's lines. Nothing but spans and counts is kept."""
    found: dict[str, Lines] = {}
    if not VERDICTS.path(out).is_file():
        return found
    current, first_line = None, {}
    for lineno, start, end, verdict in VERDICTS.read_spanned(out, torn_tail=True, unique=False):
        if verdict.case_id != current:  # a case's lines are written together
            current, first_line = verdict.case_id, {}
        repeated_question(VERDICTS.path(out), lineno, verdict, first_line)
        silent = abstained_votes((verdict,)) if len(verdict.votes) > 1 else None  # an ensemble's only
        found.setdefault(verdict.case_id, Lines()).add(start, end, _id_hash(_verdict_key(verdict)), verdict.outcome.answered,
                                                        silent)
    return {case_id: lines for case_id, lines in found.items()
            if (lines.verdicts, lines.digest) == checklists.get(case_id)
            and not (retry_abstained and (lines.abstained or lines.votes_abstained))}


def _copy_spans(source, spans) -> Iterator[bytes]:
    """The bytes of ``spans`` of the open file ``source``, in the order given, a span at a time."""
    for start, end in spans:
        source.seek(start)
        yield source.read(end - start)


def _keep_only(path: Path, kept: dict[str, Lines]) -> None:
    """Rewrite ``path`` to hold the lines of ``kept`` alone, in their order, and point each
    case at its new place."""
    offset = 0
    moved = {}
    for case_id, lines in kept.items():
        size = sum(end - start for start, end in lines.spans)
        moved[case_id] = [(offset, offset + size)]
        offset += size
    if path.is_file():
        with open(path, "rb") as source:
            write_atomic(path, _copy_spans(source, [span for lines in kept.values() for span in lines.spans]))
    else:
        write_atomic(path, b"")
    for case_id, lines in kept.items():
        lines.spans = moved[case_id]


def abstention_reasons(run_dir: Path) -> Counter:
    """Why the questions of a run folder abstained: reason -> questions (the first vote's
    reason of each abstained verdict), for the summary a command prints. Read as a stream,
    without the reader's check that no question repeats (its memory of every question would
    grow with the run): the file is one a run has just written, or one a run has read."""
    return Counter(abstention_reason(v) for _, _, _, v in VERDICTS.read_spanned(run_dir, unique=False)
                   if not v.outcome.answered)


def vote_abstention_reasons(run_dir: Path) -> Counter:
    """Why the votes of ensemble members abstained: "judge: reason" -> votes, read as a stream
    (see :func:`abstention_reasons`)."""
    return Counter(f"{vote.judge}: {vote.reason or 'no answer'}"
                   for _, _, _, v in VERDICTS.read_spanned(run_dir, unique=False) if len(v.votes) > 1
                   for vote in v.votes if vote.verdict is Status.ABSTAIN)


def abstention_reason(verdict: Verdict) -> str:
    """Why an abstained verdict abstained: its first vote's reason."""
    return next((vote.reason for vote in verdict.votes if vote.reason), "no answer (a tie between judges)")


def library_of(cases_dir: Path) -> Path | None:
    """The library a benchmark was sampled from (its manifest says), where the synthetic
    generator finds the render plans; None: the shipped one."""
    sample = read_sample_manifest(cases_dir)
    return sample.library_folder if sample else None


def make_providers(generator: str | Generator, judges: Sequence[str],
                   settings: ModelSettings) -> tuple[Generator, list[Judge]]:
    """The run's generator (made from its spec, unless given made) and judges, checked (a bad
    spec or a missing key is a TraceError before anything is written)."""
    if not judges:
        raise TraceError("--judge: give at least one judge (openai:MODEL, oracle or python:FILE.py)")
    gen = generator if isinstance(generator, Generator) else make_generator(generator, settings)
    judge_list = [make_judge(spec, settings) for spec in judges]
    for provider in (gen, *judge_list):
        provider.check()
    return gen, judge_list


@dataclass(frozen=True)
class _Plan:
    """The cases of a benchmark this run (or shard) makes, read once for their ids, checklists and
    references (checked before anything is written or any call is made); the cases themselves
    are read again, one at a time, as they run (:meth:`todo`), never held."""

    cases_dir: Path
    order: tuple[str, ...]  # the run's case ids, in the file's order
    inputs: dict[str, int]  # case id -> its references
    checklists: dict[str, tuple[int, int]]  # case id -> what its verdicts must cover (:func:`_question_digest`)
    beyond: frozenset[str] = frozenset()  # the cases over the generator's limit on references (or collaged)
    collage: bool = False

    @classmethod
    def read(cls, cases_dir: Path, shard: tuple[int, int] | None, samples: int) -> _Plan:
        order: list[str] = []
        inputs: dict[str, int] = {}
        checklists: dict[str, tuple[int, int]] = {}
        references: dict[str, str] = {}  # each reference path -> the first case naming it
        any_case = False
        for case in read_cases(cases_dir):  # every line checked before any reference
            any_case = True
            if shard is not None and shard_of(case.id, shard[1]) != shard[0]:
                continue
            order.append(case.id)
            inputs[case.id] = len(case.references)
            checklists[case.id] = _question_digest(_sampled_ids(case.checklist, samples))
            for ref in case.references:
                references.setdefault(ref.path, case.id)
        if not any_case:
            raise TraceError(f"{CASES.path(cases_dir)}: holds no case; sample a benchmark with trace sample")
        for path, case_id in references.items():
            if not inside(cases_dir, path, f"{cases_dir}: case {case_id}: reference", "benchmark folder").is_file():
                raise TraceError(f"{cases_dir}: case {case_id}: reference image {path} is missing")
        return cls(cases_dir, tuple(order), inputs, checklists)

    def limited(self, limit: int | None, collage: bool, collage_cases: frozenset[str]) -> _Plan:
        """The plan under the generator's ``limit`` on references: the cases over it left out,
        or with ``collage`` sent as one grid image (and ``collage_cases`` whatever their number)."""
        beyond = {case_id for case_id, n in self.inputs.items() if limit is not None and n > limit}
        if collage:
            beyond |= set(collage_cases) & set(self.inputs)
        return replace(self, beyond=frozenset(beyond), collage=collage)

    @property
    def collaged(self) -> frozenset[str]:
        """The cases sent their references as one grid image."""
        return self.beyond if self.collage else frozenset()

    @property
    def to_make(self) -> int:
        """How many cases the run makes (those over the limit left out)."""
        return len(self.order) - (0 if self.collage else len(self.beyond))

    def todo(self, done: Container[str]) -> Iterator[Case]:
        """The cases still to make, read again from their file."""
        return (case for case in read_cases(self.cases_dir)
                if case.id in self.checklists and case.id not in done and (self.collage or case.id not in self.beyond))


def run_benchmark(cases_dir: Path, out: Path, options: RunOptions):
    """Generate and judge every case of ``cases_dir`` (or one shard of them) into ``out``, as
    :class:`~tracebench.run.RunOptions` asks; returns the run's manifest (``run.json``), or with
    ``dry_run`` the :class:`~tracebench.run.CostEstimate` of what the run would still make
    (nothing called or written).

    Several judges combine by ``ensemble`` (:data:`~tracebench.outcomes.ENSEMBLES`; default:
    mean, median on a graded scale); the judges answer on ``settings.scale``
    (:mod:`tracebench.scales`).

    ``max_images``: the most reference images the generator accepts (default: its own
    declaration or the models file's ``max_images``). A case holding more is left out as not
    applicable (no verdict, never a fail; counted in ``run.json``), or with ``collage`` sent
    its references as one labelled grid image; ``collage_cases`` are sent one whatever their
    number of references (a diagnosis's sub-cases of a root that was collaged).

    ``generator`` may be a generator already made: :func:`rejudge_run` gives a
    :class:`~tracebench.providers.RunImages`, the images of an earlier run, whose generator
    identity (spec, seed, sample, endpoint, plugin source) the new run keeps.

    ``max_calls``: a budget of model calls for this invocation (cache hits are free). When it is
    spent no case is started (a case starts only when the budget holds every call it may make, so
    none is cut midway), and ``run.json`` says how many are left (``unfinished``): the same
    command resumes them. ``max_cost``: a budget in money, in the currency of ``prices`` (which
    must price every model that makes calls), admitted alike (:class:`~tracebench.run.CostBudget`);
    ``run.json`` records the cost spent (``cost``).

    Judges are pinned: every vote records the model the server reported and its
    ``system_fingerprint``, ``run.json`` the set seen (``judge_models``). A resumed run whose
    judge now reports another stops with a TraceError before that case is kept, unless
    ``allow_model_change`` (then recorded in ``judge_model_changes``).

    ``executor``: ``local`` (generate here) or ``ray`` (``workers`` Ray actors make the images,
    each with ``gpus_per_worker`` GPUs, on the cluster at ``ray_address`` or a local one;
    :class:`~tracebench.providers.RayGenerator`). A started ``RayGenerator`` given as
    ``executor``: its workers make this run's images and are left running (trace diagnose's
    rounds share one set)."""
    out = Path(out)
    _check_out(out)
    plan = _Plan.read(Path(cases_dir).resolve(), options.shard, options.samples)
    settings = settings_for(options, library_of(plan.cases_dir))
    gen, judges = _made_providers(options, settings)
    cases = (plan.cases_dir, file_sha256(CASES.path(plan.cases_dir)))
    identity = RunIdentity.of(options, settings, cases, gen, judges)
    plan = plan.limited(identity.limit, options.collage, options.collage_cases)
    identity, start_over = identity.resume(out, lambda: _kept_any(out))
    previous = {} if start_over else _existing(out, plan.checklists, options.retry_abstained)
    if plan.collaged:  # every reference a collage is made of, decoded as a cell before anything is written
        check_references(_cells(plan.todo(previous), plan.collaged, plan.cases_dir))
    budget = _budget(options, plan, gen, judges, out, previous)
    if options.dry_run:
        return _estimate(options, plan, gen, judges, out, previous)
    _prepare_folder(out, identity.manifest, start_over, options.cache_dir, previous)
    access = ModelAccess(Cache(options.cache_dir or RunLayout(out).cache), concurrency=options.concurrency,
                         max_retries=settings.max_retries, max_calls=options.max_calls, meter=budget)
    runner = _Runner(out, plan.cases_dir, gen, judges, access, identity.manifest, plan.collaged)
    lines = CaseLines(out, previous, identity.manifest.judge_models, identity.manifest.judge_model_changes,
                      options.allow_model_change)
    admission = Admission(access, options.max_calls, budget,
                          lambda case: _most_calls(case, gen, judges, options.judge_batch, options.samples))
    _execute(plan, runner, lines, admission, options)
    manifest = _finished(identity, plan, runner, lines, previous, budget)
    RUN_MANIFEST.write(out, manifest)
    if runner.access.stopped is not None:
        _stopped(runner.access.stopped, len(lines.done), len(plan.order))
    return manifest


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise TraceError(f"--out {out}: is a file, not a folder")
    if CASES.path(out).exists():
        raise TraceError(f"--out {out}: is a benchmark folder; write the run elsewhere")


def _made_providers(options: RunOptions, settings: ModelSettings) -> tuple[Generator, list[Judge]]:
    """The run's generator (behind its executor) and judges, checked before anything is written."""
    gen, judges = make_providers(options.generator, options.judges, settings)
    if isinstance(options.executor, RayGenerator):
        gen = options.executor.serving(gen)
    elif options.executor == Executor.RAY:
        gen = RayGenerator(options.generator, settings, gen, workers=options.workers, gpus=options.gpus_per_worker,
                           address=options.ray_address)
    return gen, judges


def _cost_model(options: RunOptions, plan: _Plan, gen: Generator, judges: list[Judge], out: Path):
    """The cost rules for this run's cases (:class:`~tracebench.run.CostModel`)."""
    from ._cost import CostModel, generated_size

    return CostModel(references=ReferenceFiles(plan.cases_dir), generator=gen, judges=judges,
                     judge_batch=options.judge_batch, cache=Cache(options.cache_dir or RunLayout(out).cache),
                     generated=generated_size(gen.options), collaged=plan.collaged, samples=options.samples)


def _budget(options: RunOptions, plan: _Plan, gen: Generator, judges: list[Judge], out: Path,
            previous: dict[str, Lines]):
    """``--max-cost``'s budget, every model that makes calls priced (a dry run with a budget
    refuses alike); None without one."""
    from ._cost import CostBudget

    if options.max_cost is None:
        return None
    budget = CostBudget(options.max_cost, options.prices, _cost_model(options, plan, gen, judges, out))
    if missing := budget.missing(next(plan.todo(previous), None)):
        raise TraceError(f"--max-cost: the price file has no price for {', '.join(missing)} (give each model "
                         f"that makes calls a table, an empty one for a free model)")
    return budget


def _estimate(options: RunOptions, plan: _Plan, gen: Generator, judges: list[Judge], out: Path,
              previous: dict[str, Lines]):
    """What the run would still make, counted without a call (``--dry-run``)."""
    from ._cost import estimate_cost

    return estimate_cost(plan.todo(previous), _cost_model(options, plan, gen, judges, out), done=len(previous),
                         not_applicable=0 if plan.collage else len(plan.beyond), prices=options.prices)


def _prepare_folder(out: Path, identity: RunManifest, start_over: bool, cache_dir: Path | None,
                    previous: dict[str, Lines]) -> None:
    """The run folder made ready: its folders its own, what a killed invocation or another
    command left removed, the identity written first (a run killed before its end can only be
    resumed by the same run), and ``verdicts.jsonl`` holding only the complete cases kept."""
    layout = RunLayout(out)
    out.mkdir(parents=True, exist_ok=True)
    for folder in (IMAGES_DIR, *((CALL_CACHE_DIR,) if cache_dir is None else ())):  # a resumed folder may be anyone's
        owned_folder(out, folder)
    if start_over:  # what the other command left: no case, perhaps images of another generator
        VERDICTS.path(out).unlink(missing_ok=True)
        shutil.rmtree(layout.images, ignore_errors=True)
    for folder in (out, layout.images):  # what a killed invocation was writing (kill -9)
        remove_stale_temporaries(folder)
    RUN_MANIFEST.write(out, identity)
    layout.images.mkdir(exist_ok=True)
    _keep_only(VERDICTS.path(out), previous)


def _execute(plan: _Plan, runner: _Runner, lines: CaseLines, admission: Admission, options: RunOptions) -> None:
    """Run the cases still to make, then write ``verdicts.jsonl`` in case order. What failed is
    not kept: the same command asks again. A spent budget refuses no call of a case it started
    (a case starts only when its calls fit), so the cases it did, abstentions and all, stay;
    should a call be refused all the same, the cases with abstentions go, as for a stopped model."""
    if isinstance(runner.generator, RayGenerator):
        runner.generator.start()  # the workers up before the first case (a cluster that fails is one line, exit 2)
    gc.freeze()  # what is loaded by now is long-lived: the run's garbage collections need not walk it
    try:
        asyncio.run(_run_cases(plan, runner, lines, admission, options))
    except OSError as err:  # a full disk: what was appended is whole cases, so the same command resumes
        problem = disk_full(err, f"{len(lines.done)} of {len(plan.order)} cases kept; free some space and run the "
                                 f"same command to resume", where=runner.root)
        if problem is None:
            raise
        raise problem from None
    finally:
        gc.unfreeze()
    if runner.access.stopped is not None or runner.access.refused:
        runner.abstentions -= lines.drop_abstained()
    # the final file in case order, copied from the lines appended (no record held, none serialised again)
    path = VERDICTS.path(runner.root)
    with open(path, "rb") as source:
        write_atomic(path, _copy_spans(source, [span for case_id in plan.order if case_id in lines.done
                                                for span in lines.done[case_id].spans]))


async def _run_cases(plan: _Plan, runner: _Runner, lines: CaseLines, admission: Admission,
                     options: RunOptions) -> None:
    access = runner.access
    progress = sys.stderr.isatty() if options.progress is None else options.progress
    bar = tqdm(total=plan.to_make, initial=len(lines.done), desc="running", unit="case", disable=not progress,
               file=sys.stderr)
    with open(VERDICTS.path(runner.root), "ab", buffering=0) as handle:
        async def work(case: Case) -> None:
            verdicts = await runner.case(case)
            lines.check_models(access.stats.identities)
            lines.keep(handle, case, verdicts)
            bar.update(1)
            bar.set_postfix(calls=sum(access.stats.calls.values()), errors=access.stats.failures,
                            abstained=runner.abstentions)

        try:
            await run_cases(plan.todo(lines.done), work, access, admission, options.concurrency)
        finally:  # on an error too: close the clients
            bar.close()
            for provider in (runner.generator, *runner.judges):
                await provider.aclose()


def _finished(identity: RunIdentity, plan: _Plan, runner: _Runner, lines: CaseLines, previous: dict[str, Lines],
              budget) -> RunManifest:
    """``run.json`` at the end of an invocation: the identity and what the run holds."""
    access, done, limit = runner.access, lines.done, identity.limit
    return identity.manifest.model_copy(update={
        "cases": len(done), "verdicts": sum(kept.verdicts for kept in done.values()),
        "calls": dict(access.stats.calls), "cache_hits": access.stats.cache_hits, "tokens": access.stats.tokens,
        "abstentions": sum(kept.abstained for kept in previous.values()) + runner.abstentions,
        "votes_abstained": dict(lines.votes_abstained()),
        "not_applicable": None if limit is None or plan.collage else len(plan.beyond),
        "collaged": sum(1 for case_id in plan.beyond if case_id in done) if limit is not None and plan.collage
        else None,
        "unfinished": plan.to_make - len(done) if access.spent and plan.to_make > len(done) else None,
        "cost": None if budget is None else round(budget.spent, 6),
        "judge_models": _seen_models(lines.pinned, access.stats.identities),
        "judge_model_changes": tuple(lines.accepted.values()) or None})


def _stopped(stopped, kept: int, cases: int) -> None:
    """The error of a run whose provider was stopped (its first calls all failed alike)."""
    again = "run again: a run that kept no case takes the corrected spec" if not kept else \
        "run the same command to resume"
    raise TraceError(f"stopped early, {stopped}; {kept} of {cases} cases done, none kept with a failed call. "
                     f"Fix {_what_to_fix(stopped.spec)} and {again}")
