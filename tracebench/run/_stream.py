"""Reading a run folder in memory that does not grow with the benchmark.

``trace score``, ``trace report`` and ``trace diagnose`` read a run as a stream of cases, each
with its verdicts, in the order of ``verdicts.jsonl``: :func:`stream_run`. What stays in
memory is where each case lies in ``cases.jsonl`` (:class:`CaseIndex`: an id and two
offsets a case), never the cases or the verdicts themselves.

The stream checks what :func:`~tracebench.run.load_run` checks, with the same messages: every
case of the benchmark (each line, once, before anything else), the benchmark's hash, then
every verdict (a case the benchmark does not hold, a question its case does not ask, a
question twice). A case's verdicts are read together when its lines are together, as every
file tracebench writes has them; a file whose cases' lines are interleaved (edited by hand,
say) is read whole instead, as before, with the same results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Generic, Iterator, TypeVar

from ..cache import file_sha256
from ..errors import TraceError
from ..outcomes import Outcome, majority_verdicts
from ..jsonfiles import JsonLinesFile
from ..records import CASES, RUN_MANIFEST, VERDICTS, Case, RunManifest, Verdict, checked_run_verdicts
from ._harness import per_sample

M = TypeVar("M")

__all__ = ["CaseIndex", "RecordIndex", "RunCase", "RunStream", "stream_run"]


class RecordIndex(Generic[M]):
    """Where each record of a folder's JSON-lines file lies, by a key (a case's id, a tree's
    case), every line checked as the file's reader checks it; :meth:`get` reads one back."""

    def __init__(self, spec: JsonLinesFile[M], folder: Path, key: Callable[[M], str]) -> None:
        self.spec, self.key = spec, key
        self.path = spec.path(folder)
        self.spans: dict[str, tuple[int, int]] = {}
        for _, start, end, record in spec.read_spanned(folder):
            self.spans[key(record)] = (start, end)

    def __contains__(self, key: object) -> bool:
        return key in self.spans

    def __len__(self) -> int:
        return len(self.spans)

    def get(self, key: str) -> M | None:
        """The record of ``key`` read again from its line, or None for a key not in the file."""
        span = self.spans.get(key)
        if span is None:
            return None
        try:
            with open(self.path, "rb") as handle:
                handle.seek(span[0])
                line = handle.read(span[1] - span[0])
        except OSError as error:  # removed or made unreadable since it was indexed
            raise TraceError(f"{self.path}: changed while it was read ({error.strerror or error}); "
                             "read it again") from None
        try:
            record = self.spec.model.model_validate_json(line)
        except ValueError:
            record = None
        if record is None or self.key(record) != key:
            raise TraceError(f"{self.path}: changed while it was read; read it again")
        return record


class CaseIndex(RecordIndex[Case]):
    """The cases of a benchmark folder by id (checked as :func:`~tracebench.sample.read_cases` checks them)."""

    def __init__(self, cases_dir: Path) -> None:
        super().__init__(CASES, cases_dir, lambda case: case.id)
        self.cases_dir = Path(cases_dir)


@dataclass(frozen=True)
class RunCase:
    """One case of a run and its verdicts (file order)."""

    case: Case
    verdicts: tuple[Verdict, ...]

    @property
    def outcomes(self) -> dict[str, Outcome]:
        """Question id -> outcome (with ``--samples K``, its majority over the samples: a tie abstains)."""
        return majority_verdicts(self.samples)

    @cached_property
    def samples(self) -> tuple[dict[str, Outcome], ...]:
        """Question id -> outcome, per sample 0 .. K-1 (one without ``--samples``)."""
        found: dict[int, dict[str, Outcome]] = {}
        for v in self.verdicts:
            found.setdefault(v.sample or 0, {})[v.question_id] = v.outcome
        return per_sample(found)


class RunStream:
    """A run folder read for streaming: its manifest, its benchmark's :class:`CaseIndex`
    (checked against the run's hash); iterating gives a :class:`RunCase` per case with
    verdicts, in the order their lines first appear. Iterable more than once."""

    def __init__(self, run_dir: Path, *, cases_dir: Path | None = None) -> None:
        self.root = Path(run_dir)
        self.manifest: RunManifest = RUN_MANIFEST.read(self.root)
        self.cases_dir = Path(cases_dir or self.manifest.cases_dir)
        if not CASES.path(self.cases_dir).is_file():
            raise TraceError(f"{self.cases_dir}: not a benchmark folder (no {CASES.name}); give it with --cases")
        self.index = CaseIndex(self.cases_dir)  # a broken line is named before the hash
        if file_sha256(CASES.path(self.cases_dir)) != self.manifest.cases_hash:
            raise TraceError(f"{self.cases_dir}: not the benchmark this run was made from (its {CASES.name} differs)")

    def __iter__(self) -> Iterator[RunCase]:
        if not VERDICTS.path(self.root).is_file():
            VERDICTS.read(self.root)  # the reader's error for a folder without the file
        if _together(VERDICTS.path(self.root)):
            return self._grouped()
        return self._whole()

    def _grouped(self) -> Iterator[RunCase]:
        case: Case | None = None
        verdicts: list[Verdict] = []
        for _, v, of in checked_run_verdicts(self.root, self.index, self.cases_dir,
                                                  samples=self.manifest.samples or 1, together=True):
            if case is None or v.case_id != case.id:
                if case is not None:
                    yield RunCase(case, tuple(verdicts))
                case, verdicts = of, []
            verdicts.append(v)
        if case is not None:
            yield RunCase(case, tuple(verdicts))

    def _whole(self) -> Iterator[RunCase]:
        """A file whose cases' lines are apart: every verdict held, as before (and the reader's
        check that no question repeats spans the whole file)."""
        by_case: dict[str, list[Verdict]] = {}
        for _, v, _ in checked_run_verdicts(self.root, self.index, self.cases_dir,
                                                samples=self.manifest.samples or 1):
            by_case.setdefault(v.case_id, []).append(v)
        for case_id, verdicts in by_case.items():
            yield RunCase(self.index.get(case_id), tuple(verdicts))


def stream_run(run_dir: Path, *, cases_dir: Path | None = None) -> RunStream:
    """A run folder as a stream of cases with their verdicts (see :class:`RunStream`)."""
    return RunStream(run_dir, cases_dir=cases_dir)


_PREFIX = b'{"case_id":"'


def _together(path: Path) -> bool:
    """Whether each case's lines in ``path`` are next to each other (read cheaply: the case id
    at the start of a line as tracebench writes it, else by JSON; a line neither reads is for
    the checked reader to name)."""
    closed: set[str] = set()
    current = None
    with open(path, "rb") as handle:
        for raw in handle:
            case_id = None
            if raw.startswith(_PREFIX):
                end = raw.find(b'"', len(_PREFIX))
                if end > 0 and b"\\" not in raw[len(_PREFIX):end]:
                    case_id = raw[len(_PREFIX):end].decode("utf-8", "replace")
            if case_id is None:
                try:
                    case_id = json.loads(raw).get("case_id")
                except (ValueError, AttributeError, RecursionError):
                    continue
            if case_id != current:
                if case_id in closed:
                    return False
                if current is not None:
                    closed.add(current)
                current = case_id
    return True
