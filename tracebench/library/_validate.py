"""Checking a library folder (or a user's tags file) and listing every problem.

Each problem is one line ``FILE:LINE: field.path: message``; nothing stops at the first.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Iterable

from PIL import Image, UnidentifiedImageError
from pydantic import ValidationError

from ..errors import ValidationFailed
from ..taxonomy import taxonomy
from ._io import INFO_FILE, TAGS_FILE, content_hash, load_library
from ._models import LibraryInfo, TaggedImage

__all__ = ["validate_library", "check_records", "read_records", "read_valid_library"]


def _loc(parts) -> str:
    return ".".join(str(p) for p in parts)


def read_records(lines: Iterable[str], label: str) -> tuple[list[tuple[int, TaggedImage]], list[str]]:
    """Parse JSONL lines into records; problems as ``label:LINE: field: message``."""
    records: list[tuple[int, TaggedImage]] = []
    errors: list[str] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            errors.append(f"{label}:{lineno}: empty line")
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{label}:{lineno}: not valid JSON: {exc.msg} at column {exc.colno}")
            continue
        try:
            records.append((lineno, TaggedImage.model_validate(data)))
        except ValidationError as exc:
            for err in exc.errors():
                errors.append(f"{label}:{lineno}: {_loc(err['loc']) or 'record'}: {err['msg']}")
    return records, errors


def _path_problem(root: Path, relative: str) -> str | None:
    pure = PurePosixPath(relative)
    if pure.is_absolute() or Path(relative).is_absolute() or relative.startswith("\\"):
        return "absolute paths are not allowed; give the path relative to the library folder"
    if ".." in pure.parts:
        return "'..' is not allowed: the path must stay inside the library folder"
    target = root / relative
    try:
        resolved = target.resolve(strict=True)
    except FileNotFoundError:
        return f"image not found: {relative}"
    except OSError as exc:
        return f"cannot read {relative}: {exc.strerror}"
    if not resolved.is_relative_to(root.resolve()):
        return "a link that leaves the library folder"
    return None


def check_records(root: Path, records: list[tuple[int, TaggedImage]], label: str) -> list[str]:
    """Everything beyond the schema: taxonomy, paths, images, ids."""
    tax = taxonomy()
    errors: list[str] = []
    first_line: dict[str, int] = {}
    for lineno, image in records:
        where = f"{label}:{lineno}"
        if image.id in first_line:
            errors.append(f"{where}: id: duplicate id {image.id!r} (first on line {first_line[image.id]})")
        else:
            first_line[image.id] = lineno
        for i, entity in enumerate(image.ent_list):
            if entity.category not in tax.categories:
                errors.append(f"{where}: ent_list.{i}.category: unknown category {entity.category!r} "
                              f"(known: {', '.join(tax.categories)})")
                continue
            for key in entity.subtype_tags():
                spec = tax.subtypes[key]
                if not spec.applies_to(entity.category):
                    errors.append(f"{where}: ent_list.{i}.tag_dict.{spec.group}.{key}: "
                                  f"does not apply to category {entity.category!r}")
            for use in entity.usable_as:
                if not tax.special[use].applies_to(entity.category):
                    errors.append(f"{where}: ent_list.{i}.usable_as: {use!r} does not apply to "
                                  f"category {entity.category!r}")
            if entity.bbox is not None:
                left, top, right, bottom = entity.bbox
                if not (0 <= left < right <= image.width and 0 <= top < bottom <= image.height):
                    errors.append(f"{where}: ent_list.{i}.bbox: {list(entity.bbox)} is not inside the "
                                  f"{image.width}x{image.height} image")
        problem = _path_problem(root, image.path)
        if problem:
            errors.append(f"{where}: path: {problem}")
            continue
        try:
            with Image.open(root / image.path) as handle:
                size = handle.size
                handle.verify()
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            errors.append(f"{where}: path: not a readable image: {image.path} ({exc.__class__.__name__})")
            continue
        if size != (image.width, image.height):
            errors.append(f"{where}: width: recorded {image.width}x{image.height}, image is {size[0]}x{size[1]}")
    return errors


def validate_library(root: Path) -> list[str]:
    """Every problem of the library at ``root``; an empty list means valid."""
    root = Path(root)
    if not root.is_dir():
        return [f"{root}: not a directory"]
    tags_path = root / TAGS_FILE
    if not tags_path.is_file():
        return [f"{TAGS_FILE}: missing (a library holds {TAGS_FILE}, {INFO_FILE} and the images)"]
    try:
        lines = tags_path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as exc:
        return [f"{TAGS_FILE}: not UTF-8 text (byte {exc.start})"]
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    records, errors = read_records(lines, TAGS_FILE)
    errors += check_records(root, records, TAGS_FILE)
    info_path = root / INFO_FILE
    if not info_path.is_file():
        errors.append(f"{INFO_FILE}: missing")
    else:
        try:
            info = LibraryInfo.model_validate_json(info_path.read_text(encoding="utf-8"))
        except ValidationError as exc:
            errors += [f"{INFO_FILE}: {_loc(e['loc']) or 'record'}: {e['msg']}" for e in exc.errors()]
        else:
            if info.images != len(lines):
                errors.append(f"{INFO_FILE}: images: says {info.images}, {TAGS_FILE} has {len(lines)} lines")
            if not errors:
                actual = content_hash(root, [image for _, image in records])
                if actual != info.content_hash:
                    errors.append(f"{INFO_FILE}: content_hash: does not match tags and images "
                                  f"(recorded {info.content_hash[:12]}…, actual {actual[:12]}…)")
    return errors


def read_valid_library(root: Path) -> tuple[LibraryInfo, list[TaggedImage]]:
    """Check the library at ``root``, then read it: :class:`~tracebench.errors.ValidationFailed`
    listing every problem, or its info and images."""
    problems = validate_library(root)
    if problems:
        raise ValidationFailed(problems, what=f"problem in library {root}")
    return load_library(root)
