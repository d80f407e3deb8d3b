"""The one error type a user sees.

Every error caused by the user's input (a formula, a file, an argument) is a
:class:`TraceError`. The CLI prints it as one line and exits with status 2; anything
else escaping is a bug in tracebench.
"""

from __future__ import annotations

import errno
import os

__all__ = ["DISK_FULL", "DataError", "TraceError", "ValidationFailed", "disk_full", "other_fields"]

# Write errors of a full or read-only disk (EFBIG: a file past the size limit, RLIMIT_FSIZE): the
# user's to fix, so one line and exit status 2, like bad input.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


class TraceError(ValueError):
    """Bad input, reported to the user as one line naming the place."""


class DataError(TraceError):
    """A mistake in one of tracebench's own data files (grammar/, templates/, taxonomy/, diagnose/),
    named as ``file: [table] key: problem`` (``taxonomy/kinds.toml: [kinds.pattern] roles: ...``)."""

    def __init__(self, file: str, problem: str, table: str = "", key: str = "") -> None:
        self.file, self.table, self.key, self.problem = file, table, key, problem
        place = (f"[{table}] " if table else "") + (f"{key}: " if key else "")
        super().__init__(f"{file}: {place}{problem}")


class ValidationFailed(TraceError):
    """Several problems found at once (a library, a tags file); each names its place."""

    def __init__(self, problems: list[str], what: str = "problem", hint: str = "") -> None:
        self.problems = list(problems)
        count = len(self.problems)
        super().__init__(f"{count} {what}{'s' if count != 1 else ''}; nothing was written" + (f"; {hint}" if hint else ""))


def disk_full(err: OSError, resume: str = "", where: object = None) -> TraceError | None:
    """The one-line error of a write that failed for want of space (``DISK_FULL``), or None;
    ``resume`` says what to do next, ``where`` the output the command was writing (its ``--out``).

    The place named is the file being written: a copy's destination (``filename2``: Python's
    ``shutil`` puts the source, a file of the user's or of tracebench's own, in ``filename``),
    and ``where`` when the error names no file of that output."""
    if err.errno not in DISK_FULL:
        return None
    written = err.filename2 or err.filename
    if where is not None and (written is None or not _inside(str(written), str(where))):
        written = where
    place = f"{written}: " if written else ""
    return TraceError(f"{place}cannot write ({err.strerror or errno.errorcode.get(err.errno, err.errno)})"
                      + (f"; {resume}" if resume else ""))


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def other_fields(fields: list[str] | tuple[str, ...]) -> str:
    """What differs, as a message says it: "another generator and other judges" (a field
    named in the plural, ``judges``, ``samples``, takes "other")."""
    one = [f for f in fields if not f.endswith("s")]
    many = [f for f in fields if f.endswith("s")]
    return " and ".join(part for part in (f"another {', '.join(one)}" if one else "",
                                          f"other {', '.join(many)}" if many else "") if part)
