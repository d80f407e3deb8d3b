"""The operator vocabulary: TRACE's four operators, the term families and roles of a formula,
and how an operator instance and its questions are named.

Every stage speaks this vocabulary (checklist, score, diagnose, zoo, report); none spells an
operator name, a target string or a question id itself. The operators are listed in the
paper's order (TRACE-Bench, arXiv 2608.16765, §3: Anchor, Disentangle, Apply, Compose), which
is the order of every table and plot.

- An **operator instance** is an (operator, target) pair: ``(anchor, "f2")``,
  ``(disentangle, "g_pattern1")``, ``(apply, "f2⊕g_pattern1")``, ``(compose, "C1")``.
- A **question id** is ``<target>:<aspect>`` with ASCII ``+`` for ``⊕`` (``f2+g_pattern1:fit``),
  so ids are plain text and diagnostic sub-cases keep the root's ids.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

__all__ = ["ENTITY_ROLES", "LOCAL_ROLES", "OPERATORS", "PLUS", "SCENE", "Family", "Instance", "Operator", "Role",
           "apply_target", "question_id", "split_target"]

PLUS = "⊕"
_ASCII_PLUS = "+"
SCENE = "C0"  # the implicit scene of a formula without C (the paper's C(f1 ⊕ g1) is one): its compose target


class Operator(StrEnum):
    """What a checklist question scores."""

    ANCHOR = "anchor"
    DISENTANGLE = "disentangle"
    APPLY = "apply"
    COMPOSE = "compose"


OPERATORS: tuple[Operator, ...] = tuple(Operator)  # the paper's order


class Family(StrEnum):
    """The kind of a term of a formula: an anchored entity ``f``, a disentangled attribute ``g``
    or a text term ``T``. (Not an operator: ``g`` terms give both disentangle and apply instances.)"""

    ANCHOR = "f"
    DISENTANGLE = "g"
    TEXT = "T"


class Role(StrEnum):
    """The part a term plays where it stands in the formula (``formula.analyze`` assigns it)."""

    ANCHOR = "anchor"      # an anchored entity f
    LOCAL = "local"        # a g term bound to one entity (an attribute of it)
    ATTACH = "attach"      # a g term that attaches an object to one entity
    IP = "ip"              # a g term that puts a design on one entity
    RELATION = "relation"  # g_rel or T_rel applied to a composition
    GLOBAL = "global"      # a g term applied to the whole scene (style, background, tone ...)
    TEXT = "text"          # a text entity T_e


LOCAL_ROLES: tuple[Role, ...] = (Role.LOCAL, Role.ATTACH, Role.IP)  # bound to one entity
ENTITY_ROLES: tuple[Role, ...] = (Role.ANCHOR, Role.TEXT)           # what a scene shows as entities


class Instance(NamedTuple):
    """One operator instance of a case: what an operator score averages over."""

    op: Operator
    target: str


def apply_target(carrier: str, modifier: str) -> str:
    """The target of an apply instance: ``f2⊕g_pattern1``."""
    return f"{carrier}{PLUS}{modifier}"


def split_target(target: str) -> tuple[str, str | None]:
    """``f2⊕g_pattern1`` -> (``f2``, ``g_pattern1``); a term or composition -> (target, None)."""
    carrier, plus, modifier = target.partition(PLUS)
    return (carrier, modifier) if plus else (target, None)


def question_id(target: str, aspect: str) -> str:
    """``<target>:<aspect>`` with ASCII ``+`` for ``⊕``."""
    return f"{target.replace(PLUS, _ASCII_PLUS)}:{aspect}"
