"""The run's loop: cases started as they are read (at most twice the concurrency in flight, so
memory stays flat), each admitted whole against the budgets (:class:`Admission`), and each
finished case's verdict lines appended whole to ``verdicts.jsonl`` (:class:`CaseLines`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Iterable

from ..errors import TraceError
from ..jsonfiles import record_line
from ..providers import ModelAccess
from ..records import RUN_FILE, Case, Verdict

__all__ = ["Admission", "CaseLines", "Lines", "abstained_votes", "run_cases"]


def abstained_votes(verdicts: Iterable[Verdict]) -> Counter:
    """Judge spec -> how many of its votes abstained, where the verdict had other votes: an
    ensemble member's silence, which the other judges' answers hide from the verdict."""
    from ..outcomes import Status

    return Counter(vote.judge for v in verdicts if len(v.votes) > 1
                   for vote in v.votes if vote.verdict is Status.ABSTAIN)


@dataclass(slots=True)  # one per case of the run: kept small
class Lines:
    """Where one case's verdict lines lie in verdicts.jsonl (byte spans), and what they hold."""

    spans: list[tuple[int, int]] = field(default_factory=list)
    verdicts: int = 0
    abstained: int = 0
    digest: int = 0
    votes_abstained: Counter | None = None  # judge spec -> ensemble votes that abstained; None: none did

    def add(self, start: int, end: int, question_hash: int, answered: bool,
            votes_abstained: Counter | None = None) -> None:
        if self.spans and self.spans[-1][1] == start:
            self.spans[-1] = (self.spans[-1][0], end)
        else:
            self.spans.append((start, end))
        self.verdicts += 1
        self.abstained += not answered
        self.digest ^= question_hash
        if votes_abstained:
            self.votes_abstained = (self.votes_abstained or Counter()) + votes_abstained


def append_whole(handle, data: bytes) -> int:
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


class CaseLines:
    """The cases kept in ``verdicts.jsonl`` (case id -> where their lines lie), those of this
    invocation with abstentions, and the judges' models: a judge answering as another model
    than in earlier invocations stops the run before its case is kept, unless accepted
    (``--allow-model-change``, recorded)."""

    def __init__(self, out: Path, previous: dict[str, Lines], judge_models: dict | None,
                 model_changes: Iterable[str] | None, allow_model_change: bool) -> None:
        self.out = out
        self.done: dict[str, Lines] = dict(previous)  # every case with its lines in the file, where they lie
        self.abstained_new: dict[str, int] = {}  # cases of this invocation with abstentions: how many
        self.pinned = dict(judge_models or {})  # judge spec -> the models of earlier invocations
        self.accepted: dict[tuple[str, str], str] = {  # (judge spec, a model accepted) -> the change as recorded
            (change.split(": ", 1)[0], change.rsplit(" -> ", 1)[1]): change for change in model_changes or ()}
        self.allow_model_change = allow_model_change

    def check_models(self, seen: dict[str, set[str]]) -> None:
        """Refuse (or, allowed, accept and record) a judge model not seen before this invocation."""
        for spec, before, after in model_changes(seen, self.pinned, set(self.accepted)):
            if not self.allow_model_change:
                raise TraceError(
                    f"{self.out}: judge {spec} now answers as {after}, the run so far as {before}: its verdicts "
                    f"would mix two judges; go on with --allow-model-change (recorded in {RUN_FILE}) or "
                    f"choose another --out")
            self.accepted[(spec, after)] = f"{spec}: {before} -> {after}"

    def keep(self, handle, case: Case, verdicts: list[Verdict]) -> None:
        """Append a case's lines in one write and remember where they lie."""
        unanswered = sum(not v.outcome.answered for v in verdicts)
        silent = abstained_votes(verdicts)
        if unanswered or silent:
            self.abstained_new[case.id] = unanswered
        data = "".join(map(record_line, verdicts)).encode()
        start = append_whole(handle, data)
        self.done[case.id] = Lines([(start, start + len(data))], len(verdicts), unanswered,
                                   votes_abstained=silent or None)

    def drop_abstained(self) -> int:
        """Forget this invocation's cases with abstentions (what failed is not kept: the same
        command asks again); returns how many abstained verdicts they held."""
        for case_id in self.abstained_new:
            del self.done[case_id]
        return sum(self.abstained_new.values())

    def votes_abstained(self) -> Counter:
        total: Counter = Counter()
        for lines in self.done.values():
            total.update(lines.votes_abstained or {})
        return total


def model_changes(seen: dict[str, set[str]], pinned: dict[str, tuple[str, ...]],
                  accepted: set[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(judge spec, the models before, a model now) for each model a judge answered with in this
    invocation that its earlier invocations did not, and that was not accepted already."""
    return [(spec, " / ".join(pinned[spec]), model) for spec, models in seen.items() if pinned.get(spec)
            for model in sorted(models - set(pinned[spec])) if (spec, model) not in accepted]


class Admission:
    """Whether the budgets (``--max-calls``, ``--max-cost``) leave room for every call of a case:
    a case is done whole or not started, never cut midway. ``most_calls(case)``: the most calls
    it may make."""

    def __init__(self, access: ModelAccess, max_calls: int | None, budget, most_calls: Callable[[Case], int]) -> None:
        self.access, self.max_calls, self.budget, self.most_calls = access, max_calls, budget, most_calls
        self.reserved: dict[str, int] = {}  # the most calls each case in flight may still make

    @property
    def active(self) -> bool:
        return self.max_calls is not None or self.budget is not None

    def fits(self, case: Case) -> bool:
        """Reserve the case's calls and cost when they fit, and say whether they did."""
        need = self.most_calls(case)
        cost = self.budget.estimate(case) if self.budget is not None else 0.0
        made = sum(self.access.stats.calls.values()) + sum(self.reserved.values())
        if self.max_calls is not None and made + need > self.max_calls:
            return False
        if self.budget is not None and not self.budget.fits(cost):
            return False
        self.reserved[case.id] = need
        if self.budget is not None:
            self.budget.reserve(case.id, cost)
        return True

    def release(self, case: Case) -> None:
        self.reserved.pop(case.id, None)
        if self.budget is not None:
            self.budget.release(case.id)


async def run_cases(cases: Iterable[Case], work: Callable[[Case], Awaitable[None]], access: ModelAccess,
                    admission: Admission, concurrency: int) -> None:
    """``work`` on each case as read, at most ``2 x concurrency`` in flight; stops reading when a
    provider is stopped or a budget is spent. On an error the cases in flight are cancelled."""
    pending: set[asyncio.Future] = set()

    async def admitted(case: Case) -> bool:  # cases in flight waited for when the budget is close
        nonlocal pending
        while not admission.fits(case):
            if not pending:
                access.spent = True
                return False
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            settle(finished)
        return True

    async def counted(case: Case) -> None:
        try:
            await work(case)
        finally:
            admission.release(case)

    try:
        for case in cases:
            if access.stopped is not None or access.spent:
                break
            if len(pending) >= 2 * concurrency:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                settle(finished)
            if admission.active and not await admitted(case):
                break
            pending.add(asyncio.ensure_future(counted(case) if admission.active else work(case)))
        if pending:
            finished, pending = await asyncio.wait(pending)
            settle(finished)
    finally:  # on an error, stop the other cases quietly
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def settle(finished: set[asyncio.Future]) -> None:
    """Raise the first error of finished tasks, having retrieved every one's (asyncio prints
    "Task exception was never retrieved" for any left)."""
    errors = [task.exception() for task in finished if not task.cancelled()]
    first = next((err for err in errors if err is not None), None)
    if first is not None:
        raise first
