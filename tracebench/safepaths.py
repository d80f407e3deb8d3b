"""Ids and paths read from files, kept inside their folders.

A benchmark, a library, a run or a diagnosis folder may come from anyone, and what it holds
becomes file names and paths: a case id names its generated image (``images/<id>.png``), a
library image id its copy in a benchmark (``references/<id>.png``), a reference path is read
and its bytes sent to model servers and embedded in reports. Two checks keep every read and
write inside its folder:

- in the records (:mod:`tracebench.records`, the library's ``TaggedImage``): :data:`SafeId`
  (a file-name stem: letters, digits, ``.``, ``_``, ``-``, no ``..``) and :data:`RelativePath`
  (relative, no ``..``); the record readers report a bad value as ``FILE:LINE: field: message``;
- where files are opened: :func:`inside` resolves symlinks and refuses a path that leaves its
  folder (a link pointing out), as one :class:`~tracebench.errors.TraceError` naming the place.
"""

from __future__ import annotations

import errno
import os
import re
from functools import lru_cache
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated

from pydantic import AfterValidator, Field

from .errors import TraceError

__all__ = ["MAX_ID", "RelativePath", "SafeId", "id_from_name", "inside", "owned_folder", "path_problem",
           "relative_path_problem", "safe_id_problem"]

MAX_ID = 128
_ID_PATTERN = rf"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID - 1}}}$"  # as JSON Schema writes it
_SAFE_ID = re.compile(_ID_PATTERN)
_MAX_PATH = 1024  # characters of a relative path; each part at most _MAX_PART bytes (the file systems' limit)
_MAX_PART = 255


def safe_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (it would not be a safe file name), or None."""
    if len(value) > MAX_ID:
        return f"expected an id of at most {MAX_ID} characters (this one has {len(value)})"
    if not _SAFE_ID.fullmatch(value):
        return ("expected an id of letters, digits, '.', '_' and '-' that starts with a letter or digit "
                "and holds no '..'")
    return None


@lru_cache(maxsize=4096)  # records repeat their paths (a reference shared by many cases)
def relative_path_problem(value: str) -> str | None:
    """Why ``value`` is not a path relative to its folder that stays inside it, or None
    (the words alone: symlinks are :func:`inside`'s)."""
    if not value:
        return "expected a non-empty path"
    if len(value) > _MAX_PATH:
        return f"expected a path of at most {_MAX_PATH} characters (this one has {len(value)})"
    if "\0" in value:
        return "a path holds no NUL character"
    windows = PureWindowsPath(value)
    if PurePosixPath(value).is_absolute() or windows.drive or windows.root:
        return "absolute paths are not allowed; give the path relative to its folder"
    parts = PurePosixPath(value).parts + windows.parts
    if ".." in parts:
        return "'..' is not allowed: the path must stay inside its folder"
    if any(len(part.encode("utf-8", "surrogatepass")) > _MAX_PART for part in parts):
        return f"expected path parts of at most {_MAX_PART} bytes"
    return None


def _check(problem_of):
    def check(value: str) -> str:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value
    return check


SafeId = Annotated[str, AfterValidator(_check(safe_id_problem)), Field(json_schema_extra={"pattern": _ID_PATTERN})]
"""A record's id that names files: ``s3-00012``, ``app-stylization-001``, ``s3-00012.N2a``."""

RelativePath = Annotated[str, AfterValidator(_check(relative_path_problem)),
                         Field(json_schema_extra={"minLength": 1, "maxLength": _MAX_PATH})]
"""A record's path relative to its folder, that cannot leave it by its words (``..``, ``/``)."""


def path_problem(folder: Path, relative: str, what: str = "folder") -> str | None:
    """Why ``folder / relative`` is not a file inside ``folder`` once symlinks are resolved, or
    None; ``what`` names the folder in the message ("a link that leaves the library folder")."""
    return _resolved_inside(folder, relative, what)[1]


def _resolved_inside(folder: Path, relative: str, what: str) -> tuple[str | None, str]:
    """``folder / relative`` resolved (or None) and why it is not inside ``folder`` (or None)."""
    problem = relative_path_problem(relative)
    if problem:
        return None, problem
    try:
        resolved = os.path.realpath(os.path.join(folder, relative))
        base = os.path.realpath(folder)
    except (OSError, ValueError) as err:  # a NUL byte
        return None, f"cannot be resolved ({getattr(err, 'strerror', None) or err})"
    try:
        os.stat(resolved)  # realpath leaves a link loop as it is; stat meets it
    except OSError as err:  # a missing file is for whoever opens it to report
        if err.errno == errno.ELOOP:
            return None, "cannot be resolved (a loop of symbolic links)"
    except ValueError:
        pass
    if resolved != base and not resolved.startswith(base.rstrip(os.sep) + os.sep):
        return None, f"a link that leaves the {what}"
    return resolved, None


def inside(folder: Path, relative: str, where: str, what: str = "folder") -> Path:
    """``folder / relative`` with its symlinks resolved, when it stays inside ``folder``; else a
    TraceError ``WHERE: RELATIVE: why`` (``where`` names the case or record that gave the path).
    Every reader of a path found in a file opens it through this."""
    resolved, problem = _resolved_inside(folder, relative, what)
    if problem:
        shown = relative if len(relative) <= 200 else relative[:200] + "..."
        raise TraceError(f"{where}: {shown}: {problem}")
    return Path(resolved)


def owned_folder(out: Path, relative: str) -> Path:
    """``out / relative``, a folder a command writes into (a run's ``images``, its default
    ``cache``, a diagnosis's ``rounds/NN``), when it does not leave ``out`` once symlinks are
    resolved; else a TraceError. An output folder resumed may be someone else's: a link in it
    would carry the writes elsewhere."""
    problem = path_problem(out, relative, "output folder")
    if problem:
        raise TraceError(f"{Path(out) / relative}: {problem}; tracebench writes only inside --out (remove the link)")
    return Path(out) / relative


def id_from_name(name: str) -> str:
    """A safe id made from a file name's stem: every run of other characters becomes ``-``
    (``my cat (2)`` -> ``my-cat-2``), cut to :data:`MAX_ID` characters; ``image`` if nothing is left."""
    cleaned = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._-]+", "-", name))
    cleaned = cleaned.lstrip("._-")[:MAX_ID].rstrip("-") or "image"
    return cleaned
