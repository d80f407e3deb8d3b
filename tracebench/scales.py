"""The answer scales a judge may be asked on (``trace run --scale``), and how an answer becomes an outcome.

- ``binary`` (the default, TRACE-Bench's): "yes" or "no"; a question passes when the answer is
  the one it expects (``Question.expected``).
- ``ternary`` (LongBanana's 0/1/2): 2 satisfied, 1 partly or uncertain, 0 not, given to the
  question *as asked*; for a failure-worded question (expected "no": duplication, leakage,
  rejection) the grade is reversed. The outcome's value is the share satisfied: 1, 0.5 or 0.
- ``tiers`` (Savanna's identity tiers): an anchor's identity question is graded 1.0 (every
  salient identity feature agrees), 0.2 (clearly the target attempted, at least one specific
  feature right, but a hard error) or 0.0 (absent, another entity, or only the generic category
  right); every other question stays binary.

An outcome passes when its value is above one half (a ternary 1 and a tier 0.2 are fails with
partial credit, which scores count as such). Each scale's answers are what a judge's reply may
hold for a question (:func:`answers`), what the oracle gives from a generation record
(:func:`truth_answer`) and what the harness turns into an outcome (:func:`outcome`).
"""

from __future__ import annotations

from enum import StrEnum

from .operators import Operator
from .outcomes import FAILED, PASSED, Outcome, Status
from .records import Question

__all__ = ["GRADED_ENSEMBLE", "KINDS", "Scale", "answers", "kind_of", "normalize", "outcome", "truth_answer"]


class Scale(StrEnum):
    BINARY = "binary"
    TERNARY = "ternary"
    TIERS = "tiers"


KINDS = {"binary": ("yes", "no"), "ternary": ("2", "1", "0"), "tiers": ("1.0", "0.2", "0.0")}
GRADED_ENSEMBLE = "median"  # how a graded scale's judges combine unless --ensemble says otherwise


def kind_of(scale: Scale | str, q: Question) -> str:
    """The answers ``q`` takes under ``scale``: ``binary``, ``ternary`` or ``tiers``."""
    scale = Scale(scale)
    if scale is Scale.TERNARY:
        return "ternary"
    if scale is Scale.TIERS and q.op == Operator.ANCHOR and q.aspect == "identity":
        return "tiers"
    return "binary"


def answers(scale: Scale | str, q: Question) -> tuple[str, ...]:
    """The answers a reply may give ``q`` under ``scale``, best first."""
    return KINDS[kind_of(scale, q)]


def normalize(kind: str, raw: object) -> str | None:
    """A reply's answer as one of the kind's answers ("Yes" -> "yes", 2 -> "2", 0.2 -> "0.2"),
    or None when it is none of them."""
    if isinstance(raw, bool):
        return None
    if kind == "binary":
        text = str(raw).strip().lower()
        return text if text in KINDS["binary"] else None
    try:
        number = float(str(raw).strip())
    except ValueError:
        return None
    found = [a for a in KINDS[kind] if float(a) == number]
    return found[0] if found else None


def outcome(kind: str, answer: str, q: Question) -> Outcome:
    """The outcome of an answer (one of :func:`answers`) to ``q``: its value is the share of the
    requirement satisfied, after the question's polarity."""
    if kind == "binary":
        return PASSED if answer == q.expected else FAILED
    if kind == "ternary":
        grade = int(answer) / 2
        value = grade if q.expected == "yes" else 1.0 - grade
    else:
        value = float(answer)
    return Outcome.of(Status.PASS if value > 0.5 else Status.FAIL, value)


def truth_answer(kind: str, q: Question, state: str) -> str:
    """The answer that tells the truth about a requirement in ``state`` (``holds``, ``partial``:
    partly satisfied, ``broken``), as the question is asked."""
    if kind == "binary":
        holds = state == "holds"
        return q.expected if holds else {"yes": "no", "no": "yes"}[q.expected]
    if kind == "tiers":
        return {"holds": "1.0", "partial": "0.2", "broken": "0.0"}[state]
    grade = {"holds": 2, "partial": 1, "broken": 0}[state]  # the share satisfied, in halves
    return str(grade if q.expected == "yes" else 2 - grade)
