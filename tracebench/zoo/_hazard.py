"""Exact failure rates of a case's operator instances under a profile: the zoo's truth for diagnoses.

In one generation the zoo draws every probabilistic failure independently (``_rules``): each
load mode, ``noise`` and ``partial`` once per requirement (``draw(seed, case id, question id,
mode) < p``), ``distractor-confusion`` once per term (which distractor it takes, uniformly);
a deterministic mode breaks a requirement with probability 0 or 1. The exact oracle answers
from the record, and ``trace score`` decides an operator instance from its questions
(``score.instance_results``, gating within the instance): it fails when one of its questions
is broken. A partly broken requirement (``partial``) is a fail on every scale (its graded value,
0.5 or 0.2, is below one half), and a dependent question fails only with a parent of the same
instance, which fails the instance already. So the probability that instance ``i`` fails is

    r_i = 1 - Π (1 - p)

over the draws that can break one of its questions: each (question, mode) with its ``p``, and
the confusion draw of its term with ``P(fires) × P(the distractor taken breaks a question of
the instance)``. Left out: a judge that errs (``oracle:flip``, ``yes-bias``: these rates are the
generator's, judged exactly) and dependencies across instances (``--gating cross``).
"""

from __future__ import annotations

from ..operators import Instance
from ..records import Case, Question
from ._profiles import CONFUSION, Failure, Profile
from ._rules import Scene, break_probability, confusers, confusion_breaks, confusion_probability

__all__ = ["failure_rates"]


def _confusion_rate(scene: Scene, failure: Failure, target: str, questions: list[Question]) -> float:
    """The probability that ``distractor-confusion`` breaks a question of the instance of term
    ``target`` in one generation: it fires, and the distractor it takes (one of the term's
    confusers, uniformly) breaks one of ``questions``."""
    found = confusers(scene, target)
    if not found:
        return 0.0
    breaking = sum(any(confusion_breaks(scene, q.target, q.aspect, q.id, d) for q in questions) for d in found)
    return confusion_probability(scene, target, failure) * breaking / len(found)


def failure_rates(case: Case, profile: Profile) -> dict[Instance, float]:
    """Operator instance -> the probability that it fails in one generation of ``case`` by the
    profile's generator, judged by the exact oracle (gating within the instance), for every
    instance of the case's checklist in checklist order: 0 where nothing can break it, 1 where a
    deterministic mode does."""
    scene = Scene(case)
    modes = profile.modes()
    questions: dict[Instance, list[Question]] = {}
    for q in case.checklist:
        questions.setdefault(Instance(q.op, q.target), []).append(q)
    rates = {}
    for instance, asked in questions.items():
        survive = 1.0
        for f in modes:
            if f.name == CONFUSION:
                survive *= 1.0 - _confusion_rate(scene, f, instance.target, asked)
                continue
            for q in asked:
                survive *= 1.0 - break_probability(f, scene, profile, q.target, q.aspect)
        rates[instance] = 1.0 - survive
    return rates
