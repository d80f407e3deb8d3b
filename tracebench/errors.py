"""The one error type a user sees.

Every error caused by the user's input (a formula, a file, an argument) is a
:class:`TraceError`. The CLI prints it as one line and exits with status 2; anything
else escaping is a bug in tracebench.
"""

from __future__ import annotations

__all__ = ["TraceError", "ValidationFailed"]


class TraceError(ValueError):
    """Bad input, reported to the user as one line naming the place."""


class ValidationFailed(TraceError):
    """Several problems found at once (a library, a tags file); each names its place."""

    def __init__(self, problems: list[str], what: str = "problem") -> None:
        self.problems = list(problems)
        count = len(self.problems)
        super().__init__(f"{count} {what}{'s' if count != 1 else ''}; nothing was written")
