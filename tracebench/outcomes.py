"""The one outcome type: pass, fail or abstain, with a graded value.

Every verdict, vote, operator-instance result and diagnostic node status is an
:class:`Outcome`. ``value`` is the degree to which the requirement holds, in [0, 1]; a binary
judge gives 1 (pass) or 0 (fail), a graded scale may give partial credit in between, and an
abstention (no usable answer: an API error, a refusal, an unparseable reply, a tie between
judges) has none. Abstentions are never scored as failures.

On disk the status is the string ``"pass"``, ``"fail"`` or ``"abstain"`` and the value a
number or null (records keep both, see ``records.Verdict``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from statistics import fmean
from typing import Iterable, Mapping, Sequence, TypeVar

__all__ = ["ABSTAINED", "ENSEMBLES", "Ensemble", "FAILED", "PASSED", "Outcome", "Status", "combine", "majority", "majority_verdicts", "sample_means",
           "mean_vote", "median_vote", "samples_of"]

K = TypeVar("K")


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ABSTAIN = "abstain"


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    value: float | None  # in [0, 1]; None exactly when abstained

    def __post_init__(self) -> None:
        if (self.value is None) != (self.status is Status.ABSTAIN):
            raise ValueError(f"an outcome {self.status} with value {self.value}")
        if self.value is not None and not 0.0 <= self.value <= 1.0:
            raise ValueError(f"an outcome value {self.value} outside [0, 1]")

    @property
    def answered(self) -> bool:
        return self.status is not Status.ABSTAIN

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    @property
    def failed(self) -> bool:
        return self.status is Status.FAIL

    @classmethod
    def of(cls, status: str | Status, value: float | None = None) -> Outcome:
        """From a stored status (and value; a binary status without one gives 1 or 0)."""
        status = Status(status)
        if status is Status.ABSTAIN:
            return ABSTAINED
        if value is None or value == (1.0 if status is Status.PASS else 0.0):
            return PASSED if status is Status.PASS else FAILED  # the shared binary outcomes
        return cls(status, value)

    @classmethod
    def binary(cls, holds: bool | None) -> Outcome:
        """True -> pass (1), False -> fail (0), None -> abstain."""
        return ABSTAINED if holds is None else PASSED if holds else FAILED


PASSED = Outcome(Status.PASS, 1.0)
FAILED = Outcome(Status.FAIL, 0.0)
ABSTAINED = Outcome(Status.ABSTAIN, None)


def majority(outcomes: Iterable[Outcome]) -> Outcome:
    """The judges' majority status, with the mean value of the judges that gave it; abstain when
    no judge answered or the top statuses tie (the tie stays visible in the votes)."""
    answered = [o for o in outcomes if o.answered]
    if len(answered) == 1:
        return answered[0]
    counted = Counter(o.status for o in answered).most_common()
    if not counted or (len(counted) > 1 and counted[0][1] == counted[1][1]):
        return ABSTAINED
    top = counted[0][0]
    values = [o.value for o in answered if o.status is top]
    return Outcome(top, sum(values) / len(values))


def mean_vote(outcomes: Iterable[Outcome]) -> Outcome:
    """The judges averaged, as the paper averages its four judges: the value is the mean of the
    answering judges' values, and the requirement passes when that mean is above one half
    (two judges of four passing give a fail of value 0.5, which a score counts as 0.5);
    abstain when no judge answered."""
    answered = [o for o in outcomes if o.answered]
    if len(answered) == 1:
        return answered[0]
    if not answered:
        return ABSTAINED
    value = sum(o.value for o in answered) / len(answered)  # type: ignore[misc]
    return Outcome.of(Status.PASS if value > 0.5 else Status.FAIL, value)


def median_vote(outcomes: Iterable[Outcome]) -> Outcome:
    """The judges' median value (of an even number, the mean of the middle two), passing above
    one half: the rule for graded scales (``trace run --scale ternary``), where one lenient or
    harsh judge should not move the verdict; abstain when no judge answered."""
    values = sorted(o.value for o in outcomes if o.answered)  # type: ignore[type-var]
    if not values:
        return ABSTAINED
    middle = len(values) // 2
    value = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2  # type: ignore[operator]
    return Outcome.of(Status.PASS if value > 0.5 else Status.FAIL, value)


class Ensemble(StrEnum):
    """How the judges of an ensemble combine (trace run --ensemble; ``RunManifest.ensemble``)."""

    MEAN = "mean"
    MAJORITY = "majority"
    MEDIAN = "median"


ENSEMBLES = {Ensemble.MEAN: mean_vote, Ensemble.MAJORITY: majority, Ensemble.MEDIAN: median_vote}


def combine(rule: str | None, outcomes: Iterable[Outcome]) -> Outcome:
    """The ensemble's outcome under ``rule`` (None: majority, what runs recorded before the rule)."""
    return ENSEMBLES[rule or Ensemble.MAJORITY](outcomes)


def samples_of(given: Mapping[str, Outcome] | Sequence[Mapping[str, Outcome]]) -> tuple[Mapping[str, Outcome], ...]:
    """A case's outcomes as one mapping per sample: what scoring takes from a run of one sample (a
    mapping) or of ``trace run --samples K`` (K mappings)."""
    return (given,) if isinstance(given, Mapping) else tuple(given)


def sample_means(each: Sequence[Mapping[K, float]]) -> dict[K, float]:
    """Key -> its mean over the samples that have it (``trace run --samples``: a case's value is
    the mean over its generations); one sample's values as they are."""
    if len(each) == 1:
        return dict(each[0])
    keys = dict.fromkeys(key for values in each for key in values)
    return {key: fmean(values[key] for values in each if key in values) for key in keys}


def majority_verdicts(samples: Sequence[Mapping[str, Outcome]]) -> dict[str, Outcome]:
    """Question id -> the majority of its verdicts over several generations of one case (``trace
    run --samples``, a diagnosis node's ``--repeats``); a tie, or no answer, is an abstention."""
    if len(samples) == 1:
        return dict(samples[0])
    questions = dict.fromkeys(q for verdicts in samples for q in verdicts)
    return {q: majority(verdicts.get(q, ABSTAINED) for verdicts in samples) for q in questions}
