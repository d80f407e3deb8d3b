"""Making the cases of a benchmark on several cores, in case order.

Each case depends only on its plan, the library and the seed (its own random stream), so the
cases can be made anywhere and written in order: the bytes are those of one process. Workers
are forked after the template space and the library index are loaded, so they start at
once; each makes a chunk of consecutive cases and sends back their finished JSONL lines
(unpickling whole records in the writer would cost more than making them). At most a few
chunks per worker are in flight, so memory does not grow with the benchmark.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Callable, Iterator, NamedTuple

from ..errors import TraceError
from ..jsonfiles import record_line
from ..operators import Role
from ..records import Case

__all__ = ["PARALLEL_FROM", "Written", "default_jobs", "made_in_order", "written"]

PARALLEL_FROM = 200  # fewer cases are made in the calling process: forking would cost more than it saves
CHUNK = 32  # cases a worker makes per task
WINDOW = 3  # tasks in flight per worker


class RefPath(NamedTuple):
    path: str
    source_id: str


class Written(NamedTuple):
    """A case as the benchmark writer needs it: its line of ``cases.jsonl`` and what the folder
    counts and copies (the attributes ``source(case, ref)`` callbacks read)."""

    id: str
    slot: int
    application: str | None
    template: str
    whole: bool  # has an attach or ip term
    distractors: int  # its distractor references
    short: bool  # fewer distractors than asked (the library held no more hard negatives for its terms)
    references: tuple[RefPath, ...]
    line: str


def written(case: Case) -> Written:
    return Written(case.id, case.slot, case.application, case.template,
                   any(t.role in (Role.ATTACH, Role.IP) for t in case.terms), len(case.distractors),
                   case.clutter is not None and case.clutter.asked > len(case.distractors),
                   tuple(RefPath(r.path, r.source_id) for r in case.references), record_line(case))


def default_jobs() -> int:
    """The cores this process may use (at most 8)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


_MAKE: Callable[[int], Case] | None = None  # what forked workers run (inherited, never pickled)


def _quiet() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the writer's to handle


def _chunk(start: int, stop: int) -> list[Written]:
    assert _MAKE is not None
    return [written(_MAKE(i)) for i in range(start, stop)]


@contextmanager
def made_in_order(make: Callable[[int], Case], count: int, jobs: int) -> Iterator[Iterator[Written]]:
    """``make(0) .. make(count - 1)`` as :class:`Written` cases, in order, made by ``jobs``
    forked workers (in this process for one job, few cases, or where fork is unavailable).
    The workers start when the block is entered: enter it before starting other threads."""
    global _MAKE
    if jobs <= 1 or count < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        yield (written(make(i)) for i in range(count))
        return
    starts = iter(range(0, count, CHUNK))
    pending: deque[Future] = deque()
    pool: ProcessPoolExecutor | None = None

    def submit() -> None:
        start = next(starts, None)
        if start is not None:
            pending.append(pool.submit(_chunk, start, min(start + CHUNK, count)))

    def results() -> Iterator[Written]:
        while pending:
            try:
                chunk = pending.popleft().result()
            except BrokenProcessPool:
                raise TraceError("a process making cases died (out of memory, or killed); run the same command "
                                 "again, or with --jobs 1") from None
            submit()
            yield from chunk

    try:
        _MAKE = make  # inherited by the forked workers
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_quiet)
        for _ in range(jobs * WINDOW):
            submit()  # the first submission forks the workers
        yield results()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        _MAKE = None
