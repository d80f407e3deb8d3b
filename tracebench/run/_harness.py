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
from typing import Iterable, Iterator, Sequence

from tqdm import tqdm

from .. import __version__
from ..errors import TraceError, disk_full, other_fields
from ..jsonfiles import loads, record_line, write_json
from ..records import (CASES, GENERATION_SUFFIX, MAX_SAMPLES, RUN_FILE, RUN_MANIFEST, VERDICTS, Case, GenerationInfo, Question,
                       RunManifest, Verdict, Vote, read_run_verdicts, repeated_question, sample_name)
from ..replies import unfence
from ..scales import GRADED_ENSEMBLE, KINDS, Scale, kind_of, normalize
from ..scales import outcome as scaled_outcome
from ..templating import template_hash
from ..outcomes import ABSTAINED, ENSEMBLES, Outcome, Status, combine, majority_verdicts
from ..providers import (JUDGE_TEMPLATES, CallFailed, Generator, ImageBytes, Judge, ModelAccess, ModelSettings, RayGenerator, Reply, RunImages,
                         ReferenceFiles, asking, check_references, clip, collage_case, image_suffix, make_generator,
                         make_judge, synthetic_profile)
from ..images import too_large
from ..sample import read_cases, read_sample_manifest
from ..cache import TEMPORARY_PREFIX, Cache, file_sha256, remove_stale_temporaries, write_atomic
from ..safepaths import inside, owned_folder

__all__ = ["IMAGES_DIR", "RunFolder", "abstention_reason", "abstention_reasons", "vote_abstention_reasons", "generated_image", "library_of", "load_run", "make_providers", "parse_reply",
           "run_benchmark", "shard_of"]

IMAGES_DIR = "images"
CACHE_DIR = "cache"


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


def _judged(given: list[dict], kind: str = "binary") -> tuple[str | None, str, str]:
    """One question's answer (of the answers of ``kind``) from the items of a reply that name it."""
    item = given[0]
    answers = {_answer(i, kind) or str(i.get("answer", "")).strip().lower() for i in given}
    part = clip(json.dumps(given if len(answers) > 1 else item, ensure_ascii=False), RAW_CHARS)
    answer = _answer(item, kind)
    if len(answers) > 1:
        return None, clip(f"contradictory answers: {', '.join(sorted(map(repr, answers)))}", REASON_CHARS), part
    if answer is None:
        wanted = " nor ".join(KINDS[kind]) if kind == "binary" else ", ".join(KINDS[kind])
        what = "neither " + wanted if kind == "binary" else f"not one of {wanted}"
        return None, clip(f"answer {item.get('answer')!r} is {what}", REASON_CHARS), part
    reason = item.get("reason", "")
    return answer, clip(reason if isinstance(reason, str) else json.dumps(reason), REASON_CHARS), part


def _answer(item: dict, kind: str = "binary") -> str | None:
    raw = item.get("answer", "")
    if isinstance(raw, (dict, list)):
        return None
    return normalize(kind, raw)


class _Runner:
    """The calls of one case: its image, then each judge's answers, through the one wrapper."""

    def __init__(self, root: Path, cases_dir: Path, generator: Generator, judges: list[Judge],
                 access: ModelAccess, judge_batch: str, ensemble: str | None = None,
                 collaged: frozenset[str] = frozenset(), scale: Scale | str = Scale.BINARY, samples: int = 1) -> None:
        self.root = root
        self.scale = Scale(scale)  # what the judges answer on (tracebench.scales)
        self.collaged = collaged  # the cases sent their references as one grid image
        self.references = ReferenceFiles(cases_dir)
        self.generator, self.judges, self.access = generator, judges, access
        self.samples = samples  # --samples K: each case generated K times by the one generator
        self.judge_batch = judge_batch
        self.ensemble = ensemble
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
        name = sample_name(case.id, sample)
        target = self.root / IMAGES_DIR / f"{name}{image_suffix(data)}"
        if not target.exists() or target.read_bytes() != data:
            write_atomic(target, data)
        info = self.root / IMAGES_DIR / f"{name}{GENERATION_SUFFIX}"
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
            batches = [list(case.checklist)] if self.judge_batch == "case" else _by_op(case.checklist)
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
        self.votes_abstained.update(_abstained_votes(verdicts))
        return verdicts


def _model_changes(seen: dict[str, set[str]], pinned: dict[str, tuple[str, ...]],
                   accepted: set[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(judge spec, the models before, a model now) for each model a judge answered with in this
    invocation that its earlier invocations did not, and that was not accepted already."""
    return [(spec, " / ".join(pinned[spec]), model) for spec, models in seen.items() if pinned.get(spec)
            for model in sorted(models - set(pinned[spec])) if (spec, model) not in accepted]


def _seen_models(pinned: dict[str, tuple[str, ...]], seen: dict[str, set[str]]) -> dict[str, tuple[str, ...]] | None:
    """judge spec -> every model seen over the invocations, sorted; None when none was."""
    merged = {spec: tuple(sorted(set(pinned.get(spec, ())) | seen.get(spec, set())))
              for spec in sorted(set(pinned) | set(seen))}
    return merged or None


def _most_calls(case: Case, generator: Generator, judges: Sequence[Judge], judge_batch: str, samples: int = 1) -> int:
    """The most model calls a case can take: per sample its generation, then each judge's batches
    (cache hits make it fewer; a retried call counts once, as ``run.json`` counts calls)."""
    batches = 1 if judge_batch == "case" else len({q.op for q in case.checklist})
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


def _sample_seeds(generator: Generator, samples: int) -> tuple[int, ...] | None:
    """The seed of each of a run's samples (``run.json``), for a generator that takes one."""
    if samples < 2:
        return None
    seeds = []
    for k in range(samples):
        with asking(k):
            seeds.append(generator.sample_seed())
    return None if any(seed is None for seed in seeds) else tuple(seeds)  # type: ignore[arg-type]


def _abstained_votes(verdicts: Iterable[Verdict]) -> Counter:
    """Judge spec -> how many of its votes abstained, where the verdict had other votes: an
    ensemble member's silence, which the other judges' answers hide from the verdict."""
    return Counter(vote.judge for v in verdicts if len(v.votes) > 1
                   for vote in v.votes if vote.verdict is Status.ABSTAIN)


def _append(handle, data: bytes) -> int:
    """Append ``data`` to an unbuffered file whole or not at all (returns where it starts): a
    write cut short (a full disk) is truncated away, so the file ends with a whole case and
    resumes cleanly."""
    start = handle.seek(0, 2)
    try:
        done = 0
        while done < len(data):
            done += handle.write(data[done:])
    except OSError:
        handle.truncate(start)
        raise
    return start


def _settle(finished: set[asyncio.Future]) -> None:
    """Raise the first error of finished tasks, having retrieved every one's (asyncio prints
    "Task exception was never retrieved" for any left)."""
    errors = [task.exception() for task in finished if not task.cancelled()]
    first = next((err for err in errors if err is not None), None)
    if first is not None:
        raise first


def generated_image(run_dir: Path, case_id: str, sample: int | None = 0) -> Path | None:
    """The image a run folder holds for a case (whatever its format; its generation ``sample``
    with ``--samples``), or None; one that is a link leaving the run folder is a TraceError,
    never read."""
    for suffix in (".png", ".jpg", ".webp"):
        relative = f"{IMAGES_DIR}/{sample_name(case_id, sample)}{suffix}"
        path = Path(run_dir) / relative
        if path.is_file():
            inside(Path(run_dir), relative, f"{run_dir}: case {case_id}: generated image", "run folder")
            return path
    return None


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


def _sampled_ids(questions: Sequence[Question], samples: int) -> Iterator[str]:
    """What a case's verdicts must cover: each question of each sample (:func:`_verdict_key`)."""
    return (sample_name(q.id, k) for k in range(samples) for q in questions)


def _verdict_key(verdict: Verdict) -> str:
    """A verdict's question, told apart by sample (the first's is its question id)."""
    return sample_name(verdict.question_id, verdict.sample)


def _question_digest(ids) -> tuple[int, int]:
    """How many question ids, and an order-free 64-bit digest of them: what a case's verdicts
    must match to be complete, held in a few bytes per case instead of every id."""
    count, digest = 0, 0
    for question_id in ids:
        digest ^= _id_hash(question_id)
        count += 1
    return count, digest


def _id_hash(question_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(question_id.encode(), digest_size=8).digest(), "big")


@dataclass(slots=True)  # one per case of the run: kept small
class _Lines:
    """Where one case's verdict lines lie in verdicts.jsonl (byte spans), and what they hold."""

    spans: list[tuple[int, int]] = field(default_factory=list)
    verdicts: int = 0
    abstained: int = 0
    digest: int = 0
    votes_abstained: Counter | None = None  # judge spec -> ensemble votes that abstained; None: none did

    def add(self, start: int, end: int, question_id: str, answered: bool, votes_abstained: Counter | None = None) -> None:
        if self.spans and self.spans[-1][1] == start:
            self.spans[-1] = (self.spans[-1][0], end)
        else:
            self.spans.append((start, end))
        self.verdicts += 1
        self.abstained += not answered
        self.digest ^= _id_hash(question_id)
        if votes_abstained:
            self.votes_abstained = (self.votes_abstained or Counter()) + votes_abstained


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


def _existing(out: Path, checklists: dict[str, tuple[int, int]], retry_abstained: bool) -> dict[str, _Lines]:
    """Complete cases already in verdicts.jsonl, as where their lines lie: a last line torn by
    a kill and a half-written case are dropped; a broken line anywhere else is an error, and
    so is a question twice within a case's lines. Nothing but spans and counts is kept."""
    found: dict[str, _Lines] = {}
    if not VERDICTS.path(out).is_file():
        return found
    current, first_line = None, {}
    for lineno, start, end, verdict in VERDICTS.read_spanned(out, torn_tail=True, unique=False):
        if verdict.case_id != current:  # a case's lines are written together
            current, first_line = verdict.case_id, {}
        repeated_question(VERDICTS.path(out), lineno, verdict, first_line)
        silent = _abstained_votes((verdict,)) if len(verdict.votes) > 1 else None  # an ensemble's only
        found.setdefault(verdict.case_id, _Lines()).add(start, end, _verdict_key(verdict), verdict.outcome.answered,
                                                        silent)
    return {case_id: lines for case_id, lines in found.items()
            if (lines.verdicts, lines.digest) == checklists.get(case_id)
            and not (retry_abstained and (lines.abstained or lines.votes_abstained))}


def _copy_spans(source, spans) -> Iterator[bytes]:
    """The bytes of ``spans`` of the open file ``source``, in the order given, a span at a time."""
    for start, end in spans:
        source.seek(start)
        yield source.read(end - start)


def _keep_only(path: Path, kept: dict[str, _Lines]) -> None:
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


def run_benchmark(cases_dir: Path, out: Path, *, generator: str | Generator, judges: Sequence[str],
                  settings: ModelSettings | None = None,
                  concurrency: int = 8, shard: tuple[int, int] | None = None, judge_batch: str = "case",
                  retry_abstained: bool = False, cache_dir: Path | None = None,
                  progress: bool | None = None, ensemble: str | None = None, max_images: int | None = None,
                  collage: bool = False, collage_cases: frozenset[str] = frozenset(),
                  max_calls: int | None = None, allow_model_change: bool = False, dry_run: bool = False,
                  prices: dict | None = None, executor: str | RayGenerator = "local", workers: int = 1,
                  gpus_per_worker: float = 0.0, ray_address: str | None = None, max_cost: float | None = None,
                  samples: int = 1):
    """Generate and judge every case of ``cases_dir`` (or one shard of them) into ``out``;
    several judges combine by ``ensemble`` (:data:`~tracebench.outcomes.ENSEMBLES`; default: mean,
    median on a graded scale). The judges answer on ``settings.scale`` (:mod:`tracebench.scales`).

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
    command resumes them.

    ``max_cost``: a budget in money for this invocation, in the currency of ``prices`` (which must
    price every model that makes calls): a case starts only when the cost spent so far, what the
    cases in flight may still cost and its own estimate fit (:class:`~tracebench.run.CostBudget`);
    then as for ``max_calls``, and ``run.json`` records the cost spent (``cost``).

    Judges are pinned: every vote records the model the server reported and its
    ``system_fingerprint``, ``run.json`` the set seen (``judge_models``). A resumed run whose
    judge now reports another stops with a TraceError before that case is kept, unless
    ``allow_model_change`` (then recorded in ``judge_model_changes``).

    ``executor``: ``local`` (generate here) or ``ray`` (``workers`` Ray actors make the images,
    each with ``gpus_per_worker`` GPUs, on the cluster at ``ray_address`` or a local one;
    :class:`~tracebench.providers.RayGenerator`); everything else stays here. A started
    ``RayGenerator`` given as ``executor``: its workers make this run's images and are left running
    (trace diagnose's rounds share one set).

    ``dry_run``: nothing is called or written; the :class:`~tracebench.run.CostEstimate` of
    what the run would still make is returned instead (``prices``: a price file's, for a cost)."""
    cases_dir, out = Path(cases_dir), Path(out)
    if concurrency < 1:
        raise TraceError(f"--concurrency: {concurrency} must be at least 1")
    if judge_batch not in ("case", "op"):
        raise TraceError(f"--judge-batch: {judge_batch!r} is neither case nor op")
    if ensemble is not None and ensemble not in ENSEMBLES:
        raise TraceError(f"--ensemble: {ensemble!r} is neither {' nor '.join(ENSEMBLES)}")
    cases_dir = cases_dir.resolve()
    if out.exists() and not out.is_dir():
        raise TraceError(f"--out {out}: is a file, not a folder")
    if CASES.path(out).exists():
        raise TraceError(f"--out {out}: is a benchmark folder; write the run elsewhere")
    # the cases are read twice, never held: here for their ids, checklists and references
    # (checked before anything is written or any call is made), then one at a time as they run
    if max_images is not None and max_images < 1:
        raise TraceError(f"--max-images: {max_images} must be at least 1")
    if max_calls is not None and max_calls < 1:
        raise TraceError(f"--max-calls: {max_calls} must be at least 1")
    if max_cost is not None and not (isinstance(max_cost, (int, float)) and 0 < max_cost < float("inf")):
        raise TraceError(f"--max-cost: {max_cost} must be a positive amount")
    if max_cost is not None and prices is None:
        raise TraceError("--max-cost: give --price-file FILE, the prices the budget is counted in")
    if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= MAX_SAMPLES:
        raise TraceError(f"--samples: {samples!r} must be a whole number from 1 to {MAX_SAMPLES}")
    order: list[str] = []
    inputs: dict[str, int] = {}  # case id -> its references
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
    settings = settings or ModelSettings()
    if settings.library is None:
        settings = replace(settings, library=library_of(cases_dir))
    if not isinstance(executor, RayGenerator) and executor not in ("local", "ray"):
        raise TraceError(f"--executor: {executor!r} is neither local nor ray")
    if executor == "ray" and not isinstance(generator, str):
        raise TraceError("--executor ray: the images are an earlier run's; there is nothing to generate")
    if workers < 1:
        raise TraceError(f"--workers: {workers} must be at least 1")
    if samples > 1 and settings.sample:
        raise TraceError(f"--samples: a run of generation {settings.sample} of each case makes one sample")
    gen, judge_list = make_providers(generator, judges, settings)
    if isinstance(executor, RayGenerator):
        gen = executor.serving(gen)
    elif executor == "ray":
        gen = RayGenerator(generator, settings, gen, workers=workers, gpus=gpus_per_worker, address=ray_address)
    scale = Scale(settings.scale or "binary")
    source = gen.manifest if isinstance(gen, RunImages) else None  # trace rejudge: the run whose images these are
    if ensemble is None and len(judge_list) > 1:  # the rule for the scale: mean (the paper's), median when graded
        ensemble = "mean" if scale is Scale.BINARY else GRADED_ENSEMBLE
    ensemble = ensemble if len(judge_list) > 1 else None  # one judge: nothing to combine
    limit = max_images if max_images is not None else gen.max_images
    if collage and limit is None:
        raise TraceError(f"--collage: the generator {gen.spec} declares no max_images; give --max-images N")
    beyond = {case_id for case_id, n in inputs.items() if limit is not None and n > limit}
    if collage:
        beyond |= set(collage_cases) & set(inputs)
    cases_hash = file_sha256(CASES.path(cases_dir))
    identity = RunManifest(
        tool=f"tracebench {__version__}", cases_dir=str(cases_dir), cases_hash=cases_hash, generator=gen.spec,
        seed=source.seed if source else settings.seed if gen.spec.startswith("synthetic:") else None,
        sample=source.sample if source else settings.sample,
        judges=tuple(j.spec for j in judge_list), judge_batch=judge_batch, ensemble=ensemble,
        endpoints={p.spec: e for p in (gen, *judge_list) if (e := p.endpoint()) is not None},
        loaded_from={**({gen.spec: source.loaded_from[gen.spec]} if source and gen.spec in source.loaded_from else {}),
                     **{p.spec: given for given, p in zip((generator, *judges), (gen, *judge_list))
                        if isinstance(given, str) and given.startswith("python:") and given != p.spec}},
        hashes={"judge_templates": template_hash(*JUDGE_TEMPLATES)},
        shard=f"{shard[0]}/{shard[1]}" if shard else None, cases=0, verdicts=0, calls={}, cache_hits=0,
        abstentions=0, tokens=0, max_images=limit, collage=None if limit is None else collage,
        scale=None if scale is Scale.BINARY else scale.value,
        rejudged_from=str(gen.run_dir.resolve()) if source else None,
        generator_options=dict(gen.options) or None, samples=samples if samples > 1 else None,
        sample_seeds=_sample_seeds(gen, samples))
    start_over = False
    if RUN_MANIFEST.path(out).is_file():
        old = RUN_MANIFEST.read(out)
        fields = ("cases_hash", "generator", "seed", "sample", "judges", "judge_batch", "ensemble", "shard",
                  "max_images", "collage", "scale", "rejudged_from", "generator_options", "samples")
        changed = [f for f in fields if getattr(old, f) != getattr(identity, f)]
        if changed and _kept_any(out):
            raise TraceError(f"{out}: holds a run with {other_fields(changed)}; choose another --out")
        # a run that stopped before it kept a case (a typo in the spec, a wrong URL) takes the corrected command
        start_over = bool(changed)
        if not start_over:  # the models its judges answered with so far: pinned, and kept should this invocation die
            identity = identity.model_copy(update={"judge_models": old.judge_models,
                                                   "judge_model_changes": old.judge_model_changes})
    elif VERDICTS.path(out).exists():
        raise TraceError(f"{out}: holds verdicts but no {RUN_FILE}; choose another --out")
    elif out.is_dir() and any(not p.name.startswith(TEMPORARY_PREFIX) for p in out.iterdir()):
        raise TraceError(f"--out {out}: is not empty and not a run folder (no {RUN_FILE}); choose another --out")
    previous = {} if start_over else _existing(out, checklists, retry_abstained)

    def todo_now() -> Iterator[Case]:  # the cases still to make, read again from their file
        return (case for case in read_cases(cases_dir)
                if case.id in checklists and case.id not in previous and (collage or case.id not in beyond))

    if collage and beyond:  # every reference a collage is made of, decoded as a cell before anything is written
        check_references(_cells(todo_now(), beyond, cases_dir))

    from ._cost import CostBudget, CostModel, estimate_cost, generated_size

    budget = None
    if max_cost is not None:  # every model that makes calls priced (a dry run with a budget refuses alike)
        budget = CostBudget(max_cost, prices, CostModel(
            references=ReferenceFiles(cases_dir), generator=gen, judges=judge_list, judge_batch=judge_batch,
            cache=Cache(cache_dir or out / CACHE_DIR), generated=generated_size(gen.options),
            collaged=frozenset(beyond) if collage else frozenset(), samples=samples))
        if missing := budget.missing(next(todo_now(), None)):
            raise TraceError(f"--max-cost: the price file has no price for {', '.join(missing)} (give each model "
                             f"that makes calls a table, an empty one for a free model)")
    if dry_run:
        return estimate_cost(todo_now(), references=ReferenceFiles(cases_dir), generator=gen, judges=judge_list,
                             judge_batch=judge_batch, cache=Cache(cache_dir or out / CACHE_DIR), done=len(previous),
                             not_applicable=0 if collage else len(beyond), prices=prices,
                             generated_size=generated_size(gen.options),
                             collaged=frozenset(beyond) if collage else frozenset(), samples=samples)
    out.mkdir(parents=True, exist_ok=True)
    for folder in (IMAGES_DIR, *((CACHE_DIR,) if cache_dir is None else ())):  # a resumed folder may be anyone's
        owned_folder(out, folder)
    if start_over:  # what the other command left: no case, perhaps images of another generator
        VERDICTS.path(out).unlink(missing_ok=True)
        shutil.rmtree(out / IMAGES_DIR, ignore_errors=True)
    for folder in (out, out / IMAGES_DIR):  # what a killed invocation was writing (kill -9)
        remove_stale_temporaries(folder)
    # the identity first: a run killed before its end can only be resumed by the same run
    RUN_MANIFEST.write(out, identity)
    (out / IMAGES_DIR).mkdir(exist_ok=True)
    access = ModelAccess(Cache(cache_dir or out / CACHE_DIR), concurrency=concurrency, max_retries=settings.max_retries,
                         max_calls=max_calls, meter=budget)
    runner = _Runner(out, cases_dir, gen, judge_list, access, judge_batch, ensemble,
                     frozenset(beyond) if collage else frozenset(), scale, samples)
    if progress is None:
        progress = sys.stderr.isatty()
    # keep only complete cases, then append new ones case by case
    verdict_path = VERDICTS.path(out)
    _keep_only(verdict_path, previous)
    done: dict[str, _Lines] = dict(previous)  # every case with its lines in the file, where they lie

    def todo() -> Iterator[Case]:
        for case in read_cases(cases_dir):
            if case.id in checklists and case.id not in done and (collage or case.id not in beyond):
                yield case

    async def main() -> None:
        bar = tqdm(total=len(order) - (0 if collage else len(beyond)), initial=len(previous), desc="running", unit="case", disable=not progress,
                   file=sys.stderr)
        pending = set()
        with open(verdict_path, "ab", buffering=0) as handle:
            async def one(case: Case) -> None:
                verdicts = await runner.case(case)
                for spec, before, after in _model_changes(access.stats.identities, pinned, set(accepted)):
                    if not allow_model_change:
                        raise TraceError(
                            f"{out}: judge {spec} now answers as {after}, the run so far as {before}: its verdicts "
                            f"would mix two judges; go on with --allow-model-change (recorded in {RUN_FILE}) or "
                            f"choose another --out")
                    accepted[(spec, after)] = f"{spec}: {before} -> {after}"
                unanswered = sum(not v.outcome.answered for v in verdicts)
                silent = _abstained_votes(verdicts)
                if unanswered or silent:
                    abstained_new[case.id] = unanswered
                data = "".join(map(record_line, verdicts)).encode()
                start = _append(handle, data)
                done[case.id] = _Lines([(start, start + len(data))], len(verdicts), unanswered,
                                       votes_abstained=silent or None)
                bar.update(1)
                bar.set_postfix(calls=sum(access.stats.calls.values()), errors=access.stats.failures,
                                abstained=runner.abstentions)

            reserved: dict[str, int] = {}  # --max-calls: the most calls each case in flight may still make

            async def admitted(case: Case) -> bool:
                """Whether the budgets leave room for every call of the case (cases in flight waited
                for when it is close): a case is done whole or not started, never cut midway."""
                nonlocal pending
                need = _most_calls(case, gen, judge_list, judge_batch, samples)
                cost = budget.estimate(case) if budget is not None else 0.0
                while True:
                    calls_fit = max_calls is None or sum(access.stats.calls.values()) + sum(reserved.values()) + need \
                        <= max_calls
                    if calls_fit and (budget is None or budget.fits(cost)):
                        reserved[case.id] = need
                        if budget is not None:
                            budget.reserve(case.id, cost)
                        return True
                    if not pending:
                        access.spent = True
                        return False
                    finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    _settle(finished)

            async def counted(case: Case) -> None:
                try:
                    await one(case)
                finally:
                    reserved.pop(case.id, None)
                    if budget is not None:
                        budget.release(case.id)

            try:
                for case in todo():  # at most 2 x concurrency cases in flight: memory stays flat
                    if access.stopped is not None or access.spent:
                        break
                    if len(pending) >= 2 * concurrency:
                        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                        _settle(finished)
                    budgeted = max_calls is not None or budget is not None
                    if budgeted and not await admitted(case):
                        break
                    pending.add(asyncio.ensure_future(counted(case) if budgeted else one(case)))
                if pending:
                    finished, pending = await asyncio.wait(pending)
                    _settle(finished)
            finally:  # on an error, stop the other cases quietly and close the clients
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                bar.close()
                for provider in (gen, *judge_list):
                    await provider.aclose()

    if isinstance(gen, RayGenerator):
        gen.start()  # the workers up before the first case (a cluster that fails is one line, exit 2)
    abstained_new: dict[str, int] = {}  # cases of this invocation with abstentions: how many
    pinned = dict(identity.judge_models or {})  # judge spec -> the models of earlier invocations
    accepted: dict[tuple[str, str], str] = {  # (judge spec, a model accepted) -> the change as run.json says it
        (change.split(": ", 1)[0], change.rsplit(" -> ", 1)[1]): change for change in identity.judge_model_changes or ()}
    gc.freeze()  # what is loaded by now is long-lived: the run's garbage collections need not walk it
    try:
        asyncio.run(main())
    except OSError as err:  # a full disk: what was appended is whole cases, so the same command resumes
        problem = disk_full(err, f"{len(done)} of {len(order)} cases kept; free some space and run the "
                                 f"same command to resume", where=out)
        if problem is None:
            raise
        raise problem from None
    finally:
        gc.unfreeze()
    # what failed is not kept: the same command asks again. A spent budget refuses no call of a case
    # it started (a case starts only when its calls fit), so the cases it did, abstentions and all, stay;
    # should a call be refused all the same, the cases with abstentions go, as for a stopped model
    if access.stopped is not None or access.refused:
        for case_id in abstained_new:
            del done[case_id]
        runner.abstentions -= sum(abstained_new.values())
    todo_count = len(order) - (0 if collage else len(beyond))
    votes_abstained: Counter = Counter()
    for lines in done.values():
        votes_abstained.update(lines.votes_abstained or {})
    # the final file in case order, copied from the lines appended (no record held, none serialised again)
    with open(verdict_path, "rb") as source:
        write_atomic(verdict_path, _copy_spans(source, [span for case_id in order if case_id in done
                                                        for span in done[case_id].spans]))
    manifest = identity.model_copy(update={
        "cases": len(done), "verdicts": sum(lines.verdicts for lines in done.values()),
        "calls": dict(access.stats.calls),
        "cache_hits": access.stats.cache_hits, "tokens": access.stats.tokens,
        "abstentions": sum(lines.abstained for lines in previous.values()) + runner.abstentions,
        "votes_abstained": dict(votes_abstained),
        "not_applicable": None if limit is None or collage else len(beyond),
        "collaged": sum(1 for case_id in beyond if case_id in done) if limit is not None and collage else None,
        "unfinished": todo_count - len(done) if access.spent and todo_count > len(done) else None,
        "cost": None if budget is None else round(budget.spent, 6),
        "judge_models": _seen_models(pinned, access.stats.identities), "judge_model_changes": tuple(accepted.values()) or None})
    RUN_MANIFEST.write(out, manifest)
    if access.stopped is not None:
        fix = _what_to_fix(access.stopped.spec)
        again = ("run again: a run that kept no case takes the corrected spec" if not done
                 else "run the same command to resume")
        raise TraceError(f"stopped early, {access.stopped}; {len(done)} of {len(order)} cases done, none kept "
                         f"with a failed call. Fix {fix} and {again}")
    return manifest
