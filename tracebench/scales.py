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

Each scale is one :class:`ScaleSpec` in a registry keyed by its name (:func:`register_scale`).
Whatever names scales asks the registry: the ``--scale`` choices, the settings check, the record
fields (``RunManifest.scale``, ``Vote.answer``), the judge's JSON schema and text, the oracle and
``trace serve``. A new scale is its entry plus its text (templates/judge/scales.toml, or the spec's).
The *kind* of a question is the scale whose answers it takes: the scale's own, or binary for a
question the scale does not grade (:func:`kind_of`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Iterable, Iterator

from .operators import Operator
from .outcomes import Ensemble, Outcome, Status
from .resources import DataFile

if TYPE_CHECKING:
    from .records import Question

__all__ = ["DEFAULT_SCALE", "GRADED_ENSEMBLE", "KINDS", "SCALE_HEADER", "STATES", "Scale", "ScaleSpec", "all_answers",
           "alternatives",
           "answer_scale", "answers", "kind_of", "normalize", "outcome", "recorded_scale", "recorded_scale_names",
           "register_scale", "scale_names", "scale_of_answers", "spec_of", "truth_answer", "unregister_scale"]

STATES = ("holds", "partial", "broken")  # a requirement's truth: met, partly met, not met
SCALE_HEADER = "X-Tracebench-Scale"  # the header a served judge request names its scale in (trace serve reads it)
GRADED_ENSEMBLE = Ensemble.MEDIAN  # how a graded scale's judges combine unless --ensemble says otherwise


class Scale(str):
    """A registered scale's name. ``Scale(name)`` is the one instance of that name (so
    ``Scale("binary") is Scale.BINARY``); a name not registered is a ValueError, as an enum's."""

    __slots__ = ()
    BINARY: ClassVar[Scale]
    TERNARY: ClassVar[Scale]
    TIERS: ClassVar[Scale]

    def __new__(cls, name: str) -> Scale:
        found = _NAMES.get(name) if isinstance(name, str) else None
        if found is None:
            raise ValueError(f"{name!r} is not a valid Scale")
        return found

    @property
    def value(self) -> str:
        return str(self)

    @property
    def spec(self) -> ScaleSpec:
        return _REGISTRY[self]


def _anchor_identity(q: Question) -> bool:
    return q.op == Operator.ANCHOR and q.aspect == "identity"


@dataclass(frozen=True)
class ScaleSpec:
    """One answer scale: its answers and what each is worth, the truth it tells, its judge text and
    its judges' default ensemble."""

    name: str
    answers: tuple[str, ...]  # what a reply may say, best first
    values: tuple[float, ...]  # each answer's share of the requirement satisfied, the question as asked
    truth: tuple[str, str, str]  # the answer to a question expecting "yes" whose requirement holds, is partly met, is broken
    ensemble: Ensemble = Ensemble.MEDIAN  # how several judges combine unless --ensemble says otherwise
    polar: bool = True  # a failure-worded question (expected "no") reverses the value
    grades: Callable[[Question], bool] | None = None  # the questions that take these answers (None: all; others binary)
    instruction: str | None = None  # the judge's instruction; None: templates/judge/scales.toml [name]
    suffix: str | None = None  # what ends each question's line; None: from scales.toml as well

    def __post_init__(self) -> None:
        problem = _spec_problem(self)
        if problem:
            raise ValueError(f"scale {self.name!r}: {problem}")

    @property
    def graded(self) -> bool:
        """Whether an answer may be worth partial credit (a label keeps its value, not pass or fail)."""
        return any(0.0 < v < 1.0 for v in self.values)

    @property
    def numeric(self) -> bool:
        """Whether the answers are numbers (compared as such: 2 and "2.0" are "2")."""
        return all(_number(a) is not None for a in self.answers)

    @property
    def other_than(self) -> str:
        """What an answer outside the scale is, as a reply's reason says: "neither yes nor no",
        "not one of 2, 1, 0"."""
        if len(self.answers) == 2:
            return "neither " + " nor ".join(self.answers)
        return "not one of " + ", ".join(self.answers)

    def value(self, answer: str, q: Question) -> float:
        """The share of ``q``'s requirement satisfied when the reply gives ``answer``, after polarity."""
        value = self.values[self.answers.index(answer)]
        return 1.0 - value if self.polar and q.expected == "no" else value

    def answer_of(self, value: float) -> str:
        """The answer worth ``value`` (as asked)."""
        return next(a for a, v in zip(self.answers, self.values) if math.isclose(v, value))

    def normalize(self, raw: object) -> str | None:
        """A reply's answer as one of the answers ("Yes" -> "yes", 2 -> "2", 0.2 -> "0.2"), or None."""
        if isinstance(raw, bool):
            return None
        if not self.numeric:
            text = str(raw).strip().lower()
            return text if text in self.answers else None
        number = _number(raw)
        return next((a for a in self.answers if float(a) == number), None)

    def truth_answer(self, q: Question, state: str) -> str:
        """The answer telling the truth about ``q``'s requirement in ``state`` (:data:`STATES`), as asked."""
        answer = self.truth[STATES.index(state)]
        return self.answer_of(self.value(answer, q)) if self.polar else answer

    def text(self) -> tuple[str, str]:
        """(instruction, question suffix) of the judge's text on this scale."""
        texts = _SCALE_TEXTS.read()
        table = _SCALE_TEXTS.value("", texts, self.name, dict, {})
        instruction = self.instruction if self.instruction is not None else _SCALE_TEXTS.value(
            self.name, table, "instruction", str, None)
        suffix = self.suffix if self.suffix is not None else _SCALE_TEXTS.value(self.name, table, "suffix", str, "")
        if instruction is None:
            raise ValueError(f"scale {self.name!r} has no instruction (templates/judge/scales.toml [{self.name}])")
        return instruction, suffix


def _number(raw: object) -> float | None:
    try:
        return float(str(raw).strip())
    except ValueError:
        return None


def _spec_problem(spec: ScaleSpec) -> str | None:
    """What makes a spec unusable, or None."""
    if not spec.name or not spec.name.replace("-", "").replace("_", "").isalnum():
        return "a name is letters, digits, '-' and '_'"
    if len(spec.answers) < 2 or len(set(spec.answers)) != len(spec.answers) or len(spec.values) != len(spec.answers):
        return "two or more distinct answers, one value each"
    if not all(0.0 <= v <= 1.0 for v in spec.values):
        return "values are shares satisfied, in [0, 1]"
    if any(a not in spec.answers for a in spec.truth):
        return f"truth {spec.truth} names an answer it does not have"
    if spec.polar and not all(any(math.isclose(1.0 - v, w) for w in spec.values) for v in spec.values):
        return "a polar scale has the reverse of every value"
    return None


_SCALE_TEXTS = DataFile("templates", "judge/scales.toml")
_REGISTRY: dict[str, ScaleSpec] = {}
_NAMES: dict[str, Scale] = {}
_ANSWERS: list[tuple[str, ...]] = []  # all_answers() of the registry as it is (emptied when it changes)


def register_scale(spec: ScaleSpec) -> Scale:
    """Add a scale (its judge text from the spec, else templates/judge/scales.toml); the same spec
    again is a no-op, another under a registered name a ValueError."""
    known = _REGISTRY.get(spec.name)
    if known is not None and known != spec:
        raise ValueError(f"scale {spec.name!r} is registered already")
    _REGISTRY[spec.name] = spec
    _ANSWERS.clear()
    return _NAMES.setdefault(spec.name, str.__new__(Scale, spec.name))


def unregister_scale(name: str) -> None:
    """Remove a scale added by :func:`register_scale` (the shipped ones stay)."""
    if name in _SHIPPED:
        raise ValueError(f"scale {name!r} ships with tracebench")
    _REGISTRY.pop(name, None)
    _NAMES.pop(name, None)
    _ANSWERS.clear()


def spec_of(scale: str) -> ScaleSpec:
    """The spec of a registered scale (or kind); ValueError for another name."""
    return _REGISTRY[Scale(scale)]


def alternatives(words: Iterable[str]) -> str:
    """``a, b or c``: the words of a choice, as messages name them."""
    words = list(words)
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def scale_names() -> tuple[str, ...]:
    """Every registered scale, the shipped ones first (the ``--scale`` choices)."""
    return tuple(_REGISTRY)


def recorded_scale_names() -> tuple[str, ...]:
    """The scales a record names (``RunManifest.scale``): every one but the default, which it leaves out."""
    return tuple(name for name in _REGISTRY if name != DEFAULT_SCALE)


def all_answers() -> tuple[str, ...]:
    """Every answer of every scale, once (what ``Vote.answer`` may hold): asked of every vote read,
    so kept until the registry changes."""
    if not _ANSWERS:
        _ANSWERS.append(tuple(dict.fromkeys(a for spec in _REGISTRY.values() for a in spec.answers)))
    return _ANSWERS[0]


def answer_scale(recorded: str | None) -> Scale:
    """The scale a record's ``scale`` field says (None: the default, binary)."""
    return Scale(recorded or DEFAULT_SCALE)


def recorded_scale(scale: str | None) -> str | None:
    """What a record's ``scale`` field holds for ``scale``: its name, None for the default."""
    return None if scale is None or Scale(scale) is DEFAULT_SCALE else str(scale)


def scale_of_answers(allowed: set[str]) -> Scale:
    """The scale a judge request's allowed answers suggest, for a request that does not name it
    (``trace serve`` without :data:`SCALE_HEADER`): the shipped graded scale whose distinct
    answer ("2", "1.0") is allowed, else binary."""
    return Scale.TERNARY if "2" in allowed else Scale.TIERS if "1.0" in allowed else Scale.BINARY


class _Kinds(Mapping):
    """Kind (scale name) -> its answers, best first: the registry as it is when read."""

    def __getitem__(self, kind: str) -> tuple[str, ...]:
        return _REGISTRY[kind].answers

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)


KINDS: Mapping[str, tuple[str, ...]] = _Kinds()


def kind_of(scale: str, q: Question) -> str:
    """The answers ``q`` takes under ``scale``: the scale's name, or binary for a question it does not grade."""
    spec = spec_of(scale)
    return spec.name if spec.grades is None or spec.grades(q) else DEFAULT_SCALE


def answers(scale: str, q: Question) -> tuple[str, ...]:
    """The answers a reply may give ``q`` under ``scale``, best first."""
    return KINDS[kind_of(scale, q)]


def normalize(kind: str, raw: object) -> str | None:
    """A reply's answer as one of the kind's answers ("Yes" -> "yes", 2 -> "2", 0.2 -> "0.2"),
    or None when it is none of them."""
    return _REGISTRY[kind].normalize(raw)


def outcome(kind: str, answer: str, q: Question) -> Outcome:
    """The outcome of an answer (one of :func:`answers`) to ``q``: its value is the share of the
    requirement satisfied, after the question's polarity."""
    value = _REGISTRY[kind].value(answer, q)
    return Outcome.of(Status.PASS if value > 0.5 else Status.FAIL, value)


def truth_answer(kind: str, q: Question, state: str) -> str:
    """The answer that tells the truth about a requirement in ``state`` (``holds``, ``partial``:
    partly satisfied, ``broken``), as the question is asked."""
    return _REGISTRY[kind].truth_answer(q, state)


_SHIPPED_SPECS = (
    ScaleSpec("binary", ("yes", "no"), (1.0, 0.0), ("yes", "no", "no"), ensemble=Ensemble.MEAN),
    ScaleSpec("ternary", ("2", "1", "0"), (1.0, 0.5, 0.0), ("2", "1", "0")),
    ScaleSpec("tiers", ("1.0", "0.2", "0.0"), (1.0, 0.2, 0.0), ("1.0", "0.2", "0.0"), polar=False,
              grades=_anchor_identity),
)
Scale.BINARY, Scale.TERNARY, Scale.TIERS = (register_scale(spec) for spec in _SHIPPED_SPECS)
_SHIPPED = frozenset(spec.name for spec in _SHIPPED_SPECS)
DEFAULT_SCALE = Scale.BINARY
