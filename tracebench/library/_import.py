"""Building a library from a user's images and tags.

A tags file is JSONL (one record a line), a JSON list of records, or a JSON object keyed by
image file name (``{"cat.jpg": {...}}``; the key is the record's ``path`` when it has none).
What a researcher leaves out is filled in: ``id`` (the file name without its extension, made a
safe id: ``my cat.jpg`` -> ``my-cat``), ``width`` and ``height`` (read from the image); a
``background`` may be one string. Every problem is one line ``FILE:LINE: field: message`` (in
a JSON file also the record's key or index), and nothing is written when there is one.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import shutil
import sys
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from PIL import Image

from ..errors import TraceError, ValidationFailed
from ..jsonfiles import decode, json_members
from ..resources import DataFile
from ..safepaths import id_from_name
from ..taxonomy import taxonomy
from ._io import staged_output, write_library
from ._models import TaggedImage, tag_dict_of
from ._validate import Place, check_records, image_size, jsonl_values, refusals, validate_record

__all__ = ["import_library", "copy_selection", "is_placeholder_background"]

_SHOWN = 5  # names shown in a summary line


def import_library(images_dir: Path, tags_file: Path, out: Path, *, name: str | None = None,
                   drop_invalid: bool = False, note: Callable[[str], None] | None = None):
    """Check the user's tags against their images, then write a library to ``out``.

    Every problem is reported (``FILE:LINE: field: message``) in one ValidationFailed and
    nothing is written. ``drop_invalid``: a tag the taxonomy refuses (a subtype on a category
    it does not apply to) is left out of its image, listed, instead of being an error.
    ``note`` receives the summary lines (untagged images, defaulted source or license,
    placeholder backgrounds, dropped tags); by default they go to stderr.
    """
    note = note or (lambda line: print(line, file=sys.stderr))
    images_dir, tags_file = Path(images_dir), Path(tags_file)
    if not images_dir.is_dir():
        raise TraceError(f"{images_dir}: not a directory")
    on_disk = _image_files(images_dir)
    if not on_disk:
        raise TraceError(f"{images_dir}: no images found (looked for {', '.join(sorted(_suffixes()))})")
    label = tags_file.name
    items, errors = _tag_items(tags_file)
    if not items and not errors:
        raise TraceError(f"{tags_file}: no records (give one tagged image per line, a JSON list, or a JSON object "
                         "keyed by image file name)")
    records: list[tuple[Place, TaggedImage]] = []
    placeholders: list[str] = []
    unsourced: list[str] = []
    dropped: list[str] = []
    for place, data in items:
        data, problems = _complete(place, data, images_dir, placeholders, unsourced)
        image, invalid = validate_record(place, data)
        errors += problems + invalid
        if image is None or problems:
            continue
        kept = _drop_refused(place, image, dropped)  # listed either way: without the flag, to count them
        records.append((place, kept if drop_invalid else image))
    errors += check_records(images_dir, records)
    if errors:
        hint = (f"--drop-invalid keeps the rest, leaving out the {_count(len(dropped), 'tag value')} the taxonomy "
                f"refuses" if dropped and not drop_invalid else "")
        raise ValidationFailed(sorted(errors, key=_line_in(label)), hint=hint)
    tagged = {os.path.normpath(image.path) for _, image in records}
    untagged = [f for f in on_disk if os.path.normpath(f) not in tagged]
    if untagged:
        note(f"{images_dir}: {_count(len(untagged), 'image')} without tags left out: {_some(untagged)}")
    if unsourced:
        note(f"{label}: {_count(len(unsourced), 'record')} without source or license, written as \"unknown\": "
             f"{_some(unsourced)}")
    if placeholders:
        note(f"{label}: {_count(len(placeholders), 'placeholder background')} dropped (they name no background): "
             f"{_some(sorted(set(placeholders), key=placeholders.index), quote=True)}")
    for line in dropped if drop_invalid else ():
        note(line)
    if dropped and drop_invalid:
        note(f"{label}: dropped {_count(len(dropped), 'tag value')} the taxonomy refuses (--drop-invalid)")
    return copy_selection(images_dir, [image for _, image in records], out, name=name or images_dir.resolve().name)


def copy_selection(source: Path, images: list[TaggedImage], out: Path, *, name: str):
    """Write a library holding ``images`` (paths relative to ``source``) to ``out``."""
    with staged_output(out) as root:
        for image in images:
            target = root / image.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / image.path, target)
        return write_library(root, name, images)


# --- reading a tags file -----------------------------------------------------------------------

def _tag_items(tags_file: Path) -> tuple[list[tuple[Place, Any]], list[str]]:
    """(where, parsed JSON) of each record of a tags file, and the problems of its text."""
    try:
        data = tags_file.read_bytes().removeprefix(codecs.BOM_UTF8)
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, line_start = data.count(b"\n", 0, exc.start) + 1, data.rfind(b"\n", 0, exc.start) + 1
        raise TraceError(f"{tags_file}:{line}: not UTF-8 text (byte {exc.start - line_start + 1} of the line)") from None
    except OSError as exc:
        raise TraceError(f"{tags_file}: cannot read tags ({exc.strerror})") from None
    if not text.strip():
        raise TraceError(f"{tags_file}: empty file: no records")
    document = _json_document(text, tags_file.name, keyed=tags_file.suffix.lower() != ".jsonl")
    if document is not None:
        return document
    lines = text.split("\n")
    return jsonl_values(lines[:-1] if lines[-1] == "" else lines, tags_file.name)


def _json_document(text: str, label: str, *, keyed: bool) -> tuple[list[tuple[Place, Any]], list[str]] | None:
    """The records of a JSON document (a list, an object keyed by file name unless not
    ``keyed``, or one record), or None when the text is JSONL (several values, the first on
    one line)."""
    start = len(text) - len(text.lstrip())
    first_line = text[start:].split("\n", 1)[0].strip()
    try:
        value, end = decode(text, start)
    except json.JSONDecodeError as exc:
        if first_line.startswith("{") and first_line.endswith("}"):
            return None  # JSONL: each line is reported on its own
        return [], [f"{label}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})"]
    rest = len(text) - len(text[end:].lstrip())
    if rest < len(text):
        if isinstance(value, dict) and "\n" not in text[start:end]:
            return None
        line = text.count("\n", 0, rest) + 1
        return [], [f"{label}:{line}: not valid JSON: more after the end of the document (a JSON file holds one "
                    "list or object; for one record a line name the file .jsonl)"]
    if isinstance(value, dict) and (not value or keyed and not set(value) & _record_fields()):
        return _members(text, start, value, label, keyed=True)
    if isinstance(value, list):
        return _members(text, start, value, label, keyed=False)
    if isinstance(value, dict):
        return [(Place(label, text.count("\n", 0, start) + 1, text=text, start=start), value)], []
    return [], [f"{label}:1: expected a list of records or an object keyed by image file name"]


def _members(text: str, start: int, value: dict | list, label: str, *, keyed: bool):
    items: list[tuple[Place, Any]] = []
    errors: list[str] = []
    first: dict[Any, int] = {}
    pos, line = 0, 1
    for key, begin in json_members(text, start):
        line += text.count("\n", pos, begin)
        pos = begin
        place = Place(label, line, key=key, text=text, start=begin)
        if key in first:
            errors.append(f"{place.at()} duplicate key (first on line {first[key]})")
            continue
        first[key] = line
        data = value[key]
        if keyed and isinstance(data, dict) and "path" not in data:
            data = {"path": key, **data}
        items.append((place, data))
    return items, errors


@cache
def _record_fields() -> frozenset[str]:
    return frozenset(f.alias or name for name, f in TaggedImage.model_fields.items())


# --- what a researcher leaves out ---------------------------------------------------------------

def _complete(place: Place, data: Any, images_dir: Path, placeholders: list[str],
              unsourced: list[str]) -> tuple[Any, list[str]]:
    """``data`` with ``id``, ``width``, ``height`` filled in, a string background made a list and
    placeholder backgrounds dropped; the problems of its image when its size had to be read."""
    if not isinstance(data, dict):
        return data, []
    data = dict(data)
    problems: list[str] = []
    path = data.get("path")
    if isinstance(path, str) and path:
        data.setdefault("id", id_from_name(PurePosixPath(path.replace("\\", "/")).stem))
        if "width" not in data or "height" not in data:
            size, problem = image_size(images_dir, path)
            if problem:
                problems.append(place.problem(("path",), problem))
                size = (1, 1)  # only so the record's other problems are reported
            data.setdefault("width", size[0])
            data.setdefault("height", size[1])
    else:  # only the path is reported: id and size would come from it
        data.update({key: data.get(key, value) for key, value in (("id", "no-path"), ("width", 1), ("height", 1))})
    background = data.get("background")
    if isinstance(background, str):
        background = [background]
    if isinstance(background, list):
        kept = [b for b in background if not (isinstance(b, str) and is_placeholder_background(b))]
        placeholders += [b for b in background if b not in kept]
        data["background"] = kept
    if "source" not in data or "license" not in data:
        unsourced.append(str(data.get("id", place.key if place.key is not None else f"line {place.line}")))
    return data, problems


def is_placeholder_background(value: str) -> bool:
    """Whether a background value says there is none ("none", "plain white", "solid grey", ...;
    the list is taxonomy/backgrounds.toml)."""
    values, prefixes = _placeholders()
    text = re.sub(r"\s+", " ", value.strip().rstrip(".,;!").strip().lower())
    bare = re.sub(r"\s*\b(background|backdrop)$", "", text).strip()
    return bool({text, bare} & values) or any(bare == p or bare.startswith(p + " ") for p in prefixes)


@cache
def _placeholders() -> tuple[frozenset[str], tuple[str, ...]]:
    backgrounds = DataFile("taxonomy", "backgrounds.toml")
    table = backgrounds.value("", backgrounds.read(), "placeholders", dict)
    return (frozenset(backgrounds.strings("placeholders", table, "values")),
            backgrounds.strings("placeholders", table, "prefixes"))


def _drop_refused(place: Place, image: TaggedImage, dropped: list[str]) -> TaggedImage:
    """``image`` without the tags the taxonomy refuses; one line for each value in ``dropped``."""
    entities = list(image.ent_list)
    for i, entity in enumerate(entities):
        found = refusals(entity) if entity.category in taxonomy().categories else []
        if not found:
            continue
        tags, uses = entity.subtype_tags(), entity.usable_as
        for refusal in found:
            for value in refusal.values:
                dropped.append(f"{place.at(('ent_list', i, *refusal.loc))} ent_list[{i}] ({entity.category}, "
                               f"{json.dumps(entity.ent_desc, ensure_ascii=False)}): dropped {refusal.key} "
                               f"{json.dumps(value, ensure_ascii=False)} (it applies to "
                               f"{', '.join(refusal.categories)})")
            if refusal.key == "usable_as":
                uses = tuple(u for u in uses if u not in refusal.values)
            else:
                del tags[refusal.key]
        entities[i] = entity.model_copy(update={"tag_dict": tag_dict_of(tags), "usable_as": uses})
    return image.model_copy(update={"ent_list": tuple(entities)})


# --- the images folder --------------------------------------------------------------------------

@cache
def _suffixes() -> frozenset[str]:
    return frozenset(ext for ext, kind in Image.registered_extensions().items() if kind in Image.OPEN)


def _image_files(images_dir: Path) -> list[str]:
    """Image files under ``images_dir`` (by suffix), as paths relative to it, sorted."""
    return sorted(f.relative_to(images_dir).as_posix() for f in images_dir.rglob("*")
                  if f.suffix.lower() in _suffixes() and f.is_file() and not f.name.startswith("."))


def _line_in(label: str) -> Callable[[str], int]:
    """Sort key of a problem ``LABEL:LINE: ...``: its line (a problem of the whole file first)."""
    pattern = re.compile(re.escape(label) + r":(\d+):")

    def line(problem: str) -> int:
        found = pattern.match(problem)
        return int(found.group(1)) if found else 0
    return line


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _some(names: list[str], *, quote: bool = False) -> str:
    shown = [json.dumps(n, ensure_ascii=False) if quote else n for n in names[:_SHOWN]]
    return ", ".join(shown) + (f", … ({len(names) - _SHOWN} more)" if len(names) > _SHOWN else "")
