"""The oracle judge: answers checklist questions from the generation record inside the image.

``oracle`` answers every question as the record says. ``oracle:flip=P,yes-bias=Q`` is a judge
that errs, separately from the generator, with known truth:

- ``yes-bias=Q``: with probability Q it answers "yes" whatever the image shows (a lenient judge);
- ``flip=P``: otherwise, with probability P it gives the opposite of the true answer;
- ``flip.ASPECT=P`` / ``yes-bias.ASPECT=Q``: the rate for one aspect (``identity``, ``leakage`` ...),
  in place of the overall one.

So the chance of answering "yes" is ``Q + (1 - Q) * P`` where the truth is "no", and
``Q + (1 - Q) * (1 - P)`` where it is "yes". Each error is drawn per question from the record
(case id, question id, the record's digest), never from the rates: a higher rate errs on a
superset of questions, and two generations of one case are judged independently.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import TraceError
from ..records import GenerationRecord, Question
from ..scales import DEFAULT_SCALE, KINDS, kind_of, truth_answer
from ._generate import RECORD_KEY, read_record

__all__ = ["ORACLE", "JudgeErrors", "oracle_answers", "oracle_reply", "parse_oracle"]

ORACLE = "oracle"
_KINDS = ("flip", "yes-bias")


@dataclass(frozen=True, slots=True)
class JudgeErrors:
    """How often the oracle errs: (kind, aspect or None for every aspect) -> probability."""

    rates: tuple[tuple[str, str | None, float], ...] = ()

    def __bool__(self) -> bool:
        return any(p > 0 for _, _, p in self.rates)

    def __str__(self) -> str:
        """The canonical spec: ``oracle`` or ``oracle:flip=0.05,yes-bias.identity=0.2``."""
        parts = [f"{kind}{'' if aspect is None else '.' + aspect}={_number(p)}" for kind, aspect, p in self.rates]
        return ORACLE + (":" + ",".join(parts) if parts else "")

    def rate(self, kind: str, aspect: str) -> float:
        """The probability of an error of that kind on a question of that aspect."""
        overall = 0.0
        for k, a, p in self.rates:
            if k == kind and a == aspect:
                return p
            if k == kind and a is None:
                overall = p
        return overall


def _number(p: float) -> str:
    return str(int(p)) if p == int(p) else repr(p)


def parse_oracle(spec: str) -> JudgeErrors:
    """Parse ``oracle`` or ``oracle:KIND[.ASPECT]=P,...`` (kinds ``flip``, ``yes-bias``). Raises
    :class:`~tracebench.errors.TraceError`, one line naming the bad part."""
    from ..checklist import aspects

    head, colon, rest = spec.strip().partition(":")
    shown = repr(spec if len(spec) <= 120 else spec[:119] + "…")  # a spec may come from a record: any length
    if head != ORACLE or (colon and not rest.strip()):
        raise TraceError(f"--judge {shown}: expected oracle or oracle:flip=P,yes-bias=Q[,flip.ASPECT=P ...]")
    known = sorted(set().union(*aspects().values()))
    rates: dict[tuple[str, str | None], float] = {}
    for part in (p.strip() for p in rest.split(",")) if colon else ():
        def fail(message: str, part: str = part) -> None:
            raise TraceError(f"--judge {shown}: {part[:120]!r}: {message}")

        key, eq, raw = part.partition("=")
        kind, dot, aspect = key.strip().partition(".")
        if not eq or kind not in _KINDS:
            fail(f"expected KIND=P or KIND.ASPECT=P with KIND one of {', '.join(_KINDS)}")
        if dot and aspect not in known:
            fail(f"unknown aspect {aspect!r} (known: {', '.join(known)})")
        try:
            p = float(raw)
        except ValueError:
            fail(f"P must be a number, got {raw.strip()!r}")
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            fail(f"P must lie between 0 and 1, got {raw.strip()}")
        where = (kind, aspect if dot else None)
        if where in rates:
            fail("given twice")
        rates[where] = p
    ordered = sorted(rates.items(), key=lambda item: (_KINDS.index(item[0][0]), item[0][1] or ""))
    return JudgeErrors(tuple((kind, aspect, p) for (kind, aspect), p in ordered))


def _record(png: bytes | GenerationRecord) -> GenerationRecord:
    if isinstance(png, GenerationRecord):
        return png
    record = read_record(png)
    if record is None:
        raise TraceError(f"the image carries no {RECORD_KEY} chunk: the oracle judges only synthetic generations")
    return record


def _draw(digest: str, record: GenerationRecord, question_id: str, kind: str) -> float:
    key = f"tracebench-oracle/{kind}/{record.case_id}/{question_id}/{digest}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0**64


_FLIPPED = {"holds": "broken", "broken": "holds", "partial": "partial"}


def _answer(q: Question, cause: str | None, errors: JudgeErrors, record: GenerationRecord,
            digest: str, scale: str = DEFAULT_SCALE) -> tuple[str, str]:
    """The raw answer to ``q`` on ``scale`` and the reason: the truth, unless the judge errs on it.
    A requirement the record lists as partly broken is answered partly met by a graded scale (and
    not met by a binary one); a flip answers the opposite end (a partial stays partial), a
    yes-bias the top answer ("yes", "2", "1.0")."""
    kind = kind_of(scale, q)
    state = "holds" if cause is None else "partial" if q.id in (record.partial or {}) else "broken"
    truth = truth_answer(kind, q, state)
    reason = ("as drawn" if cause is None else f"partly broken by {cause}" if state == "partial"
              else f"broken by {cause}")
    if not errors:
        return truth, reason
    if _draw(digest, record, q.id, "yes-bias") < errors.rate("yes-bias", q.aspect):
        answer = KINDS[kind][0]
        why = "yes-bias"
    elif _draw(digest, record, q.id, "flip") < errors.rate("flip", q.aspect):
        answer = truth_answer(kind, q, _FLIPPED[state])
        why = "flip"
    else:
        return truth, reason
    return answer, reason if answer == truth else f"judge error ({why}); truth: {truth}, {reason}"


def oracle_answers(checklist: Sequence[Question], png: bytes) -> dict[str, bool]:
    """Question id -> whether the requirement holds in the image (True = pass, polarity applied).

    A question passes unless the record lists it as broken. Raises
    :class:`~tracebench.errors.TraceError` when the image carries no record."""
    failed = _record(png).failed
    return {q.id: q.id not in failed for q in checklist}


def oracle_reply(questions: Sequence[Question], png: bytes | GenerationRecord,
                 errors: JudgeErrors | None = None, scale: str = DEFAULT_SCALE) -> dict[str, Any]:
    """The JSON a judge model would return: ``{"answers": [{"id", "answer", "reason"}]}``.

    ``png`` is the generated image, or the record already read from it (:func:`read_record`).

    ``answer`` is the raw "yes"/"no" to the question as asked, so a passing failure-worded
    question (expected "no", e.g. duplication) is answered "no"; ``reason`` names the cause of a
    failure ("broken by global-interference") or says "as drawn", and names a judge error
    (``errors``) where the answer is not the truth."""
    record = _record(png)
    errors = errors or JudgeErrors()
    digest = hashlib.sha256(record.model_dump_json().encode()).hexdigest() if errors else ""
    answers = []
    for q in questions:
        answer, reason = _answer(q, record.failed.get(q.id), errors, record, digest, scale)
        answers.append({"id": q.id, "answer": answer, "reason": reason})
    return {"answers": answers}
