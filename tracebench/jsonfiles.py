"""Reading and writing record files: JSON Lines (one record a line) and JSON (one record).

Every reader turns what is wrong with a file into one :class:`~tracebench.errors.TraceError`
``FILE:LINE: field.path: message`` (the first problem; ``not JSON`` in place of a field for a
line that is not JSON at all), so the CLI prints one line and exits 2. Every writer writes
atomically (:func:`tracebench.cache.write_atomic`): a kill leaves the old file or the new one.

:class:`JsonLinesFile` and :class:`JsonFile` tie a file name to its record model; the
record files of a benchmark, a run and a diagnosis are declared with them in
:mod:`tracebench.records`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, Iterable, Iterator, TypeVar

from pydantic import BaseModel, ValidationError

from .cache import write_atomic
from .errors import TraceError

__all__ = ["JsonFile", "JsonLinesFile", "numbered_jsonl", "read_json", "read_jsonl", "record_line", "write_json",
           "write_jsonl"]

M = TypeVar("M", bound=BaseModel)


def record_line(record: BaseModel) -> str:
    """A record as one line of a JSONL file (with its newline): the only way lines are written."""
    return record.model_dump_json(by_alias=True) + "\n"


def write_jsonl(path: Path, records: Iterable[BaseModel]) -> None:
    """Write ``records`` one a line, atomically; ``records`` is consumed as it is written."""
    write_atomic(Path(path), (record_line(r).encode() for r in records))


def write_json(path: Path, record: BaseModel) -> None:
    """Write one record as indented JSON, atomically."""
    write_atomic(Path(path), (json.dumps(record.model_dump(mode="json", by_alias=True), indent=2) + "\n").encode())


def read_jsonl(path: Path, model: type[M], *, check: Callable[[M], str | None] | None = None,
               torn_tail: bool = False) -> Iterator[M]:
    """The records of a JSONL file, one at a time; blank lines are skipped.

    ``check(record)`` returns a problem (``field: message``) or None. ``torn_tail``: a last
    line that has no newline and does not parse (a write cut by a kill) is dropped instead
    of being an error; anywhere else such a line is an error."""
    return (record for _, record in numbered_jsonl(path, model, check=check, torn_tail=torn_tail))


def numbered_jsonl(path: Path, model: type[M], *, check: Callable[[M], str | None] | None = None,
                   torn_tail: bool = False) -> Iterator[tuple[int, M]]:
    """(line number, record) of each record of a JSONL file, for checks that name the line
    themselves; otherwise as :func:`read_jsonl`."""
    path = Path(path)
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror})") from None
    with handle:
        for lineno, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise TraceError(f"{path}:{lineno}: not UTF-8 text (byte {err.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                record = model.model_validate_json(line)
            except ValidationError as err:
                if torn_tail and not raw.endswith(b"\n"):
                    return
                raise TraceError(f"{path}:{lineno}: {_problem(err, line)[1]}") from None
            problem = check(record) if check else None
            if problem:
                raise TraceError(f"{path}:{lineno}: {problem}")
            yield lineno, record


def read_json(path: Path, model: type[M]) -> M:
    """The one record of a JSON file; a problem names the line of the field it is about."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TraceError(f"{path}:{line}: not UTF-8 text") from None
    try:
        return model.model_validate_json(text)
    except ValidationError as err:
        line, problem = _problem(err, text)
        raise TraceError(f"{path}:{line}: {problem}") from None


def _problem(err: ValidationError, text: str) -> tuple[int, str]:
    """The line of ``text`` the first error is on, and ``field.path: message`` (``not JSON:
    ...`` for text that is not JSON)."""
    first = err.errors()[0]
    if first["type"] == "json_invalid":
        try:
            json.loads(text)
        except json.JSONDecodeError as bad:
            return bad.lineno, f"not JSON: {bad.msg} (column {bad.colno})"
        return 1, f"not JSON: {first['msg']}"
    return _line_of(text, first["loc"]), f"{'.'.join(str(part) for part in first['loc']) or 'record'}: {first['msg']}"


def _line_of(text: str, loc: tuple) -> int:
    """The line where the value at ``loc`` starts in a JSON document, or where its nearest
    enclosing value starts when it is absent (a missing field)."""
    decoder = json.JSONDecoder()
    pos = _skip_space(text, 0)
    try:
        for key in loc:
            opening = "{" if isinstance(key, str) else "["
            if not text.startswith(opening, pos):
                break  # a part of the location that is not in the text (a union member's name)
            found = next((start for name, start in _members(text, pos, decoder) if name == key), None)
            if found is None:
                break
            pos = found
    except ValueError:  # text pydantic reads and json does not: stop where we are
        pass
    return text.count("\n", 0, pos) + 1


def _members(text: str, pos: int, decoder: json.JSONDecoder) -> Iterator[tuple[str | int, int]]:
    """(key or index, where its value starts) of the object or array starting at ``pos``."""
    is_object = text[pos] == "{"
    close = "}" if is_object else "]"
    pos = _skip_space(text, pos + 1)
    index = 0
    while pos < len(text) and text[pos] != close:
        key: str | int = index
        if is_object:
            key, pos = decoder.raw_decode(text, pos)
            pos = _skip_space(text, _skip_space(text, pos) + 1)  # past the colon
        yield key, pos
        _, pos = decoder.raw_decode(text, pos)
        pos = _skip_space(text, pos)
        if text.startswith(",", pos):
            pos = _skip_space(text, pos + 1)
        index += 1


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


@dataclass(frozen=True)
class JsonLinesFile(Generic[M]):
    """A record file holding one record a line, in a folder: its one reader and one writer."""

    name: str
    model: type[M]
    missing: str  # the error for a folder without the file: "not a run folder (no run.json) ..."
    check: Callable[[M], str | None] | None = None

    def path(self, folder: Path) -> Path:
        return Path(folder) / self.name

    def read(self, folder: Path, *, torn_tail: bool = False) -> Iterator[M]:
        """The records of ``folder``'s file, one at a time (see :func:`read_jsonl`)."""
        return (record for _, record in self.read_numbered(folder, torn_tail=torn_tail))

    def read_numbered(self, folder: Path, *, torn_tail: bool = False) -> Iterator[tuple[int, M]]:
        """(line number, record) of each record of ``folder``'s file."""
        path = self.path(folder)
        if not path.is_file():
            raise TraceError(f"{folder}: {self.missing}")
        return numbered_jsonl(path, self.model, check=self.check, torn_tail=torn_tail)

    def write(self, folder: Path, records: Iterable[M]) -> None:
        write_jsonl(self.path(folder), records)


@dataclass(frozen=True)
class JsonFile(Generic[M]):
    """A record file holding one record (a manifest, a summary), in a folder."""

    name: str
    model: type[M]
    missing: str

    def path(self, folder: Path) -> Path:
        return Path(folder) / self.name

    def read(self, folder: Path) -> M:
        path = self.path(folder)
        if not path.is_file():
            raise TraceError(f"{folder}: {self.missing}")
        return read_json(path, self.model)

    def write(self, folder: Path, record: M) -> None:
        write_json(self.path(folder), record)
