"""Reading and writing record files: JSON Lines (one record a line) and JSON (one record).

Every reader turns what is wrong with a file into one :class:`~tracebench.errors.TraceError`
``FILE:LINE: field.path: message`` (the first problem; ``not JSON`` in place of a field for a
line that is not JSON at all), so the CLI prints one line and exits 2. Messages speak JSON,
not pydantic (:func:`explain`): ``ent_list[0].category: expected a string``,
``record: missing field 'generator'``, ``record: unknown field 'sorce' (did you mean 'source'?)``. Every writer writes
atomically (:func:`tracebench.cache.write_atomic`): a kill leaves the old file or the new one.

:class:`JsonLinesFile` and :class:`JsonFile` tie a file name to its record model; the
record files of a benchmark, a run and a diagnosis are declared with them in
:mod:`tracebench.records`.
"""

from __future__ import annotations

import difflib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from .cache import write_atomic
from .errors import TraceError

__all__ = ["MAX_FILE_BYTES", "MAX_LINE_BYTES", "JsonFile", "JsonLinesFile", "decode", "explain", "field_path", "json_bytes", "json_members", "json_text",
           "line_of", "loads", "numbered_jsonl", "problems_of", "read_json", "read_jsonl", "record_line",
           "spanned_jsonl", "write_json", "write_jsonl"]

# what one record file may hold before it is read (a folder may come from anyone): far more than
# tracebench writes (a case line is kilobytes, a run.json at most a few megabytes)
MAX_LINE_BYTES = 16 << 20  # one line of a JSONL file
MAX_FILE_BYTES = 64 << 20  # a JSON file

M = TypeVar("M", bound=BaseModel)


# Characters JSON leaves raw in strings that some line readers take for line breaks (Python's
# str.splitlines, JavaScript before ES2019): written escaped, so every line stays one line.
_LINE_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def json_text(text: str) -> str:
    """JSON text with the line breaks JSON allows raw inside strings (U+2028, U+2029, U+0085)
    escaped: the same value, and a line of it is one line for any reader. (JSON escapes the
    other control characters, ``\\x1c``-``\\x1e`` included, itself.)"""
    # a search per character is far cheaper than translate's per-character table lookup
    if "\u2028" in text or "\u2029" in text or "\x85" in text:
        return text.translate(_LINE_BREAKS)
    return text


def record_line(record: BaseModel) -> str:
    """A record as one line of a JSONL file (with its newline): the only way lines are written."""
    return json_text(record.model_dump_json(by_alias=True)) + "\n"


def write_jsonl(path: Path, records: Iterable[BaseModel]) -> None:
    """Write ``records`` one a line, atomically; ``records`` is consumed as it is written."""
    write_atomic(Path(path), (record_line(r).encode() for r in records))


def json_bytes(record: BaseModel) -> bytes:
    """One record as :func:`write_json` writes it: indented JSON and a newline."""
    return (json.dumps(record.model_dump(mode="json", by_alias=True), indent=2) + "\n").encode()


def write_json(path: Path, record: BaseModel) -> None:
    """Write one record as indented JSON, atomically."""
    write_atomic(Path(path), json_bytes(record))


def read_jsonl(path: Path, model: type[M], *, check: Callable[[M], str | None] | None = None,
               torn_tail: bool = False, unique: Callable[[M], tuple[str, str]] | None = None) -> Iterator[M]:
    """The records of a JSONL file, one at a time; blank lines are skipped.

    ``check(record)`` returns a problem (``field: message``) or None. ``unique(record)`` is
    (field, what) of what must not appear twice (``("id", "case 's1-00003'")``); a second one
    is an error naming the line of the first. ``torn_tail``: a last line that has no newline
    and does not decode or parse (a write cut by a kill or a full disk, maybe inside a UTF-8
    character) is dropped instead of being an error; anywhere else such a line is an error.
    Lines end at ``\\n`` only (never at U+2028 and the like) and each is decoded on its own."""
    return (record for _, record in numbered_jsonl(path, model, check=check, torn_tail=torn_tail, unique=unique))


def numbered_jsonl(path: Path, model: type[M], *, check: Callable[[M], str | None] | None = None,
                   torn_tail: bool = False, unique: Callable[[M], tuple[str, str]] | None = None
                   ) -> Iterator[tuple[int, M]]:
    """(line number, record) of each record of a JSONL file, for checks that name the line
    themselves; otherwise as :func:`read_jsonl`."""
    return ((lineno, record) for lineno, _, _, record in spanned_jsonl(path, model, check=check, torn_tail=torn_tail,
                                                                       unique=unique))


def spanned_jsonl(path: Path, model: type[M], *, check: Callable[[M], str | None] | None = None,
                  torn_tail: bool = False, unique: Callable[[M], tuple[str, str]] | None = None
                  ) -> Iterator[tuple[int, int, int, M]]:
    """(line number, first byte, byte after the newline, record) of each record of a JSONL
    file: where each line lies, for a reader that copies lines instead of keeping them;
    otherwise as :func:`read_jsonl`."""
    path = Path(path)
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror})") from None
    first: dict[tuple[str, str], int] = {}
    end = 0
    with handle:
        # a binary file splits on b"\n" alone; a line is read up to a bound (a record from anyone)
        for lineno, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:
                raise TraceError(f"{path}:{lineno}: a line of more than {MAX_LINE_BYTES:,} bytes, more than any "
                                 f"record tracebench writes")
            start, end = end, end + len(raw)
            torn = torn_tail and not raw.endswith(b"\n")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                if torn:
                    return
                raise TraceError(f"{path}:{lineno}: not UTF-8 text (byte {err.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                record = model.model_validate_json(line)
            except ValidationError as err:
                if torn:
                    return
                raise TraceError(f"{path}:{lineno}: {_problem(err, line, model)[1]}") from None
            problem = check(record) if check else None
            if problem:
                raise TraceError(f"{path}:{lineno}: {problem}")
            if unique is not None:
                field, what = unique(record)
                seen = first.setdefault((field, what), lineno)
                if seen != lineno:
                    raise TraceError(f"{path}:{lineno}: {field}: {what} appears twice (first on line {seen})")
            yield lineno, start, end, record


def read_json(path: Path, model: type[M]) -> M:
    """The one record of a JSON file; a problem names the line of the field it is about."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        raise TraceError(f"{path}: more than {MAX_FILE_BYTES:,} bytes, more than any record tracebench writes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TraceError(f"{path}:{line}: not UTF-8 text") from None
    try:
        return model.model_validate_json(text)
    except ValidationError as err:
        line, problem = _problem(err, text, model)
        raise TraceError(f"{path}:{line}: {problem}") from None


class _LongNumber(Exception):
    def __init__(self, digits: str) -> None:
        self.digits = digits


def _parse_int(digits: str) -> int:
    # int() of more digits than Python converts raises a ValueError that names no place
    if len(digits) > sys.get_int_max_str_digits() > 0:
        raise _LongNumber(digits)
    return int(digits)


_DECODER = json.JSONDecoder(parse_int=_parse_int)


def decode(text: str, pos: int = 0) -> tuple[Any, int]:
    """The JSON value starting at ``pos`` of ``text`` and where it ends (``raw_decode``), with
    what Python's json does on hostile text as a :class:`json.JSONDecodeError` too: nesting
    deeper than the recursion limit (``nested too deeply``) and an integer of more digits
    than Python converts."""
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, pos) from None
    except _LongNumber as err:
        at = text.find(err.digits, pos)
        raise json.JSONDecodeError(f"a number of {len(err.digits)} digits (at most "
                                   f"{sys.get_int_max_str_digits()} are read)", text, max(at, pos)) from None


def loads(text: str) -> Any:
    """``json.loads`` through :func:`decode`: one JSON value, space around it allowed."""
    value, end = decode(text, _skip_space(text, 0))
    end = _skip_space(text, end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _problem(err: ValidationError, text: str, model: type[BaseModel] | None = None) -> tuple[int, str]:
    """The line of ``text`` the first error is on, and ``field.path: message`` (``not JSON:
    ...`` for text that is not JSON)."""
    first = err.errors()[0]
    if first["type"] == "json_invalid":
        try:
            loads(text)
        except json.JSONDecodeError as bad:
            return bad.lineno, f"not JSON: {bad.msg} (column {bad.colno})"
        return 1, f"not JSON: {first['msg']}"
    loc, message = explain(first, model)
    return line_of(text, first["loc"]), f"{field_path(loc)}: {message}"


def line_of(text: str, loc: Iterable, start: int = 0) -> int:
    """The line of ``text`` where the value at ``loc`` starts, in the JSON value starting at
    ``start`` (a whole document by default), or where its nearest enclosing value starts when
    it is absent (a missing field)."""
    decoder = json.JSONDecoder()
    pos = _skip_space(text, start)
    try:
        for key in loc:
            opening = "{" if isinstance(key, str) else "["
            if not text.startswith(opening, pos):
                break  # a part of the location that is not in the text (a union member's name)
            found = next((begin for name, begin in json_members(text, pos, decoder) if name == key), None)
            if found is None:
                break
            pos = found
    except ValueError:  # text pydantic reads and json does not: stop where we are
        pass
    return text.count("\n", 0, pos) + 1


def json_members(text: str, pos: int, decoder: json.JSONDecoder | None = None) -> Iterator[tuple[str | int, int]]:
    """(key or index, where its value starts) of the object or array starting at ``pos``;
    ValueError (json's) where the text is not JSON."""
    decoder = decoder or json.JSONDecoder()
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
    unique: Callable[[M], tuple[str, str]] | None = None  # (field, what) that must not appear twice

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
        return numbered_jsonl(path, self.model, check=self.check, torn_tail=torn_tail, unique=self.unique)

    def read_spanned(self, folder: Path, *, torn_tail: bool = False,
                     unique: bool = True) -> Iterator[tuple[int, int, int, M]]:
        """(line number, first byte, byte after the line, record) of each record of ``folder``'s
        file; ``unique=False``: the caller checks what must not repeat (remembering every key of a
        large file would cost more memory than its reader should)."""
        path = self.path(folder)
        if not path.is_file():
            raise TraceError(f"{folder}: {self.missing}")
        return spanned_jsonl(path, self.model, check=self.check, torn_tail=torn_tail,
                             unique=self.unique if unique else None)

    def write(self, folder: Path, records: Iterable[M]) -> None:
        write_jsonl(self.path(folder), records)

    def write_lines(self, folder: Path, lines: Iterable[str]) -> None:
        """Write lines already made by :func:`record_line` (in another process, say), atomically."""
        write_atomic(self.path(folder), (line.encode() for line in lines))


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


# --- what pydantic says, in the words of the JSON it read --------------------------------------

def field_path(loc: Iterable) -> str:
    """A location as JSON readers write it: ``ent_list[0].tag_dict.1_Appearance`` (``record`` for the whole)."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "record"


def explain(error: Mapping[str, Any], model: type[BaseModel] | None = None) -> tuple[tuple, str]:
    """One pydantic error as (location, message) in JSON's words: ``expected a string``,
    ``missing field 'category'``, ``unknown field 'sorce' (did you mean 'source'?)``. A missing
    or unknown field is reported at the object holding it; ``model`` (the record model) lets
    a list name its items' type and an unknown field suggest a known one."""
    loc, kind, ctx = tuple(error["loc"]), error["type"], error.get("ctx") or {}
    if kind == "missing" and loc and isinstance(loc[-1], str):
        return loc[:-1], f"missing field {loc[-1]!r}"
    if kind == "extra_forbidden" and loc:
        known = _field_names(_annotation_at(model, loc[:-1]))
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        return loc[:-1], f"unknown field {loc[-1]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind in _LISTS or kind in ("too_short", "too_long") or (kind == "missing" and loc):
        if kind == "missing":  # an item missing from a fixed-length list: the list is too short
            loc = loc[:-1]
        return loc, f"expected {_list_words(_annotation_at(model, loc))}"
    if kind == "string_too_short":
        least = ctx.get("min_length", 1)
        return loc, "expected a non-empty string" if least == 1 else f"expected a string of at least {least} characters"
    if kind == "string_too_long":
        return loc, f"expected a string of at most {ctx.get('max_length')} characters"
    if kind in _BOUNDS:
        return loc, f"expected a number {_BOUNDS[kind]} {next(iter(ctx.values()), '')}".rstrip()
    if kind in ("literal_error", "enum"):
        return loc, f"expected {ctx.get('expected', 'one of the allowed values')}"
    if kind in ("value_error", "assertion_error"):
        return loc, str(error["msg"]).split(", ", 1)[-1]
    return loc, _TYPES.get(kind, str(error["msg"]))


def problems_of(err: ValidationError, model: type[BaseModel] | None = None) -> list[tuple[tuple, str]]:
    """Every error of ``err`` as (pydantic's location, for :func:`line_of`; ``field.path:
    message``), each message once."""
    seen: dict[str, tuple] = {}
    for error in err.errors():
        loc, message = explain(error, model)
        seen.setdefault(f"{field_path(loc)}: {message}", tuple(error["loc"]))
    return [(loc, text) for text, loc in seen.items()]


_LISTS = ("tuple_type", "list_type", "set_type", "frozen_set_type", "iterable_type")
_BOUNDS = {"greater_than": "greater than", "greater_than_equal": "of at least", "less_than": "less than",
           "less_than_equal": "of at most", "multiple_of": "multiple of"}
_TYPES = {
    "string_type": "expected a string", "string_unicode": "expected a string",
    "int_type": "expected an integer", "int_parsing": "expected an integer", "int_from_float": "expected an integer",
    "float_type": "expected a number", "float_parsing": "expected a number",
    "bool_type": "expected true or false", "bool_parsing": "expected true or false",
    "model_type": "expected an object", "model_attributes_type": "expected an object", "dict_type": "expected an object",
    "none_required": "expected null",
}
_WORDS = {str: "strings", int: "integers", float: "numbers", bool: "true or false values", dict: "objects"}


def _list_words(annotation: Any) -> str:
    """``a list of strings``, ``a list of 4 integers``, or ``a list``, for a tuple or list type."""
    args = [a for a in get_args(annotation) if a is not Ellipsis]
    if not args or get_origin(annotation) not in (tuple, list, set, frozenset):
        return "a list"
    item = args[0]
    words = _WORDS.get(item) or ("objects" if isinstance(item, type) and issubclass(item, BaseModel) else None)
    fixed = get_origin(annotation) is tuple and Ellipsis not in get_args(annotation)
    if words is None or (fixed and len(set(args)) != 1):
        return f"a list of {len(args)} items" if fixed else "a list"
    return f"a list of {len(args)} {words}" if fixed else f"a list of {words}"


def _annotation_at(model: Any, loc: tuple) -> Any:
    """The declared type at ``loc`` inside ``model`` (None where it cannot be told)."""
    current = model
    for part in loc:
        current = _non_null(current)
        if isinstance(part, str) and isinstance(current, type) and issubclass(current, BaseModel):
            field = next((f for name, f in current.model_fields.items() if part in (name, f.alias)), None)
            current = field.annotation if field else None
        elif isinstance(part, int) and get_origin(current) in (tuple, list, set, frozenset):
            args = [a for a in get_args(current) if a is not Ellipsis]
            fixed = get_origin(current) is tuple and Ellipsis not in get_args(current)
            current = (args[part] if part < len(args) else None) if fixed else (args[0] if args else None)
        else:
            return None
    return _non_null(current)


def _non_null(annotation: Any) -> Any:
    """``X`` of ``X | None``."""
    if get_origin(annotation) in (Union, UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


def _field_names(model: Any) -> list[str]:
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or name for name, f in model.model_fields.items()]
    return []
