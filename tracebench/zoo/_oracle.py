"""The oracle judge: answers checklist questions from the generation record inside the image."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import TraceError
from ..records import GenerationRecord, Question
from ._generate import RECORD_KEY, read_record

__all__ = ["oracle_answers", "oracle_reply"]


def _record(png: bytes | GenerationRecord) -> GenerationRecord:
    if isinstance(png, GenerationRecord):
        return png
    record = read_record(png)
    if record is None:
        raise TraceError(f"the image carries no {RECORD_KEY} chunk: the oracle judges only synthetic generations")
    return record


def oracle_answers(checklist: Sequence[Question], png: bytes) -> dict[str, bool]:
    """Question id -> whether the requirement holds in the image (True = pass, polarity applied).

    A question passes unless the record lists it as broken. Raises
    :class:`~tracebench.errors.TraceError` when the image carries no record."""
    failed = _record(png).failed
    return {q.id: q.id not in failed for q in checklist}


def oracle_reply(questions: Sequence[Question], png: bytes | GenerationRecord) -> dict[str, Any]:
    """The JSON a judge model would return: ``{"answers": [{"id", "answer", "reason"}]}``.

    ``png`` is the generated image, or the record already read from it (:func:`read_record`).

    ``answer`` is the raw "yes"/"no" to the question as asked, so a passing failure-worded
    question (expected "no", e.g. duplication) is answered "no"; ``reason`` names the cause of a
    failure ("broken by global-interference") or says "as drawn"."""
    failed = _record(png).failed
    answers = []
    for q in questions:
        cause = failed.get(q.id)
        flipped = {"yes": "no", "no": "yes"}[q.expected]
        answers.append({"id": q.id, "answer": q.expected if cause is None else flipped,
                        "reason": "as drawn" if cause is None else f"broken by {cause}"})
    return {"answers": answers}
