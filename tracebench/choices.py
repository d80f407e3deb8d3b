"""The small value types of a run's options that records, the run and the command line share:
how judges are asked (:class:`JudgeBatch`) and where images are made (:class:`Executor`). A
leaf module (the command line builds its choices from them without loading the records)."""

from __future__ import annotations

from enum import StrEnum

from .errors import TraceError

__all__ = ["Executor", "JudgeBatch", "executor_of"]


class JudgeBatch(StrEnum):
    """How a run asks its judges (trace run --judge-batch; ``RunManifest.judge_batch``)."""

    CASE = "case"  # one call per case
    OP = "op"  # one call per operator


class Executor(StrEnum):
    """Where a run's images are made (trace run --executor)."""

    LOCAL = "local"  # in this process
    RAY = "ray"  # by Ray workers


def executor_of(text: str) -> Executor:
    """``--executor``'s value as an :class:`Executor`; another is a TraceError naming the option."""
    if text not in tuple(Executor):
        raise TraceError(f"--executor: {text!r} is neither {' nor '.join(Executor)}")
    return Executor(text)
