"""Checking a library folder (or a user's tags file) and listing every problem.

Each problem is one line ``FILE:LINE: field.path: message``; nothing stops at the first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import PIL
from pydantic import ValidationError

from ..errors import ValidationFailed
from ..images import ImageRefused, ImageTooLarge, max_image_pixels, open_image
from ..jsonfiles import field_path, line_of, loads, problems_of
from ..safepaths import path_problem
from ..taxonomy import taxonomy
from ._io import INFO_FILE, TAGS_FILE, content_hash, load_library
from ._models import Entity, LibraryInfo, TaggedImage

__all__ = ["Place", "Refusal", "check_records", "image_size", "jsonl_values", "read_records", "read_valid_library",
           "refusals", "validate_library", "validate_record"]


@dataclass(frozen=True)
class Place:
    """Where a record is: its file and line, and in a JSON object or list of records its key
    or index (with the document, so a problem names the line of its field)."""

    label: str
    line: int
    key: str | int | None = None
    text: str | None = None  # the whole JSON document holding the record, from ``start``
    start: int = 0

    def at(self, loc: Iterable = ()) -> str:
        """``FILE:LINE:`` (with `` ["cat.jpg"]`` or `` [3]`` in a JSON container) for the field at ``loc``."""
        loc = tuple(loc)
        line = line_of(self.text, loc, self.start) if self.text is not None and loc else self.line
        return f"{self.label}:{line}:{self.name()}"

    def name(self) -> str:
        return "" if self.key is None else f" [{json.dumps(self.key, ensure_ascii=False)}]"

    def problem(self, loc: Iterable, message: str) -> str:
        """One problem: ``FILE:LINE: [key] field.path: message``."""
        return f"{self.at(loc)} {field_path(loc)}: {message}"


def validate_record(place: Place, data: Any) -> tuple[TaggedImage | None, list[str]]:
    """The record ``data`` (parsed JSON), or its problems in JSON's words."""
    try:
        return TaggedImage.model_validate(data), []
    except ValidationError as exc:
        return None, [f"{place.at(loc)} {message}" for loc, message in problems_of(exc, TaggedImage)]


def jsonl_values(lines: Iterable[str], label: str) -> tuple[list[tuple[Place, Any]], list[str]]:
    """(where, parsed JSON) of each JSONL line; an empty line or one that is not JSON is a problem."""
    values: list[tuple[Place, Any]] = []
    errors: list[str] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            errors.append(f"{label}:{lineno}: empty line")
            continue
        try:
            values.append((Place(label, lineno), loads(line)))
        except json.JSONDecodeError as exc:
            errors.append(f"{label}:{lineno}: not valid JSON: {exc.msg} at column {exc.colno}")
    return values, errors


def read_records(lines: Iterable[str], label: str) -> tuple[list[tuple[Place, TaggedImage]], list[str]]:
    """Parse JSONL lines into records; problems as ``label:LINE: field: message``."""
    values, errors = jsonl_values(lines, label)
    records: list[tuple[Place, TaggedImage]] = []
    for place, data in values:
        image, problems = validate_record(place, data)
        errors += problems
        if image is not None:
            records.append((place, image))
    return records, errors


class Refusal(NamedTuple):
    """A tag the taxonomy refuses on an entity."""

    loc: tuple  # in the entity: ("tag_dict", "1_Appearance", "1.2_material") or ("usable_as",)
    key: str  # the subtype key, or "usable_as"
    values: tuple[str, ...]
    categories: tuple[str, ...]  # where it does apply
    message: str


def refusals(entity: Entity) -> list[Refusal]:
    """What the taxonomy refuses on ``entity`` (of a known category): a tag whose subtype does
    not apply to the entity's category, a whole-entity use (``usable_as``) that does not."""
    tax = taxonomy()
    found = []
    for key, values in entity.subtype_tags().items():
        spec = tax.subtypes[key]
        if not spec.applies_to(entity.category):
            found.append(Refusal(("tag_dict", spec.group, key), key, values, _where(spec),
                                 f"subtype {key} does not apply to category {entity.category!r} "
                                 f"(it applies to {', '.join(_where(spec))})"))
    for use in entity.usable_as:
        spec = tax.special[use]
        if not spec.applies_to(entity.category):
            found.append(Refusal(("usable_as",), "usable_as", (use,), _where(spec),
                                 f"{use!r} does not apply to category {entity.category!r} "
                                 f"(it applies to {', '.join(_where(spec))})"))
    return found


def _where(spec) -> tuple[str, ...]:
    """The categories a subtype applies to, in the order of taxonomy/categories.toml."""
    return tuple(c for c in taxonomy().categories if spec.applies_to(c))


def image_size(root: Path, relative: str) -> tuple[tuple[int, int] | None, str | None]:
    """The size of the image at ``relative`` under ``root``, or why it cannot be used."""
    problem = _path_problem(root, relative)
    if problem:
        return None, problem
    try:
        with open_image(root / relative) as handle:  # the header: past the pixel limit it is refused here
            size = handle.size
            handle.verify()
    except ImageTooLarge as exc:
        return None, f"image {relative} {exc}"
    except ImageRefused as exc:  # what Pillow raised, named as always
        return None, f"cannot read image: {relative} ({type(exc.cause).__name__ if exc.cause else exc})"
    except Exception as exc:  # noqa: BLE001 - verify() on hostile bytes raises many types
        return None, f"cannot read image: {relative} ({exc.__class__.__name__})"
    return size, None


def _path_problem(root: Path, relative: str) -> str | None:
    problem = path_problem(root, relative, "library folder")
    if problem:
        return problem
    try:
        (root / relative).resolve(strict=True)
    except FileNotFoundError:
        return f"image not found: {relative}"
    except OSError as exc:
        return f"cannot read image: {relative} ({exc.strerror})"
    return None


def check_records(root: Path, records: list[tuple[Place, TaggedImage]]) -> list[str]:
    """Everything beyond the schema: taxonomy, paths, images, ids."""
    tax = taxonomy()
    errors: list[str] = []
    first: dict[str, Place] = {}
    for place, image in records:
        if image.id in first:
            where = first[image.id]
            errors.append(place.problem(("id",), f"duplicate id {image.id!r} (first on line {where.line}{where.name()})"))
        else:
            first[image.id] = place
        for i, entity in enumerate(image.ent_list):
            if entity.category not in tax.categories:
                errors.append(place.problem(("ent_list", i, "category"), f"unknown category {entity.category!r} "
                                            f"(known: {', '.join(tax.categories)})"))
                continue
            for refusal in refusals(entity):
                errors.append(place.problem(("ent_list", i, *refusal.loc), refusal.message))
            if entity.bbox is not None:
                left, top, right, bottom = entity.bbox
                if not (0 <= left < right <= image.width and 0 <= top < bottom <= image.height):
                    errors.append(place.problem(("ent_list", i, "bbox"), f"{list(entity.bbox)} is not inside the "
                                                f"{image.width}x{image.height} image"))
        size, problem = image_size(root, image.path)
        if problem:
            errors.append(place.problem(("path",), problem))
        elif size != (image.width, image.height):
            errors.append(place.problem(("width",), f"recorded {image.width}x{image.height}, "
                                        f"image is {size[0]}x{size[1]}"))
    return errors


def validate_library(root: Path) -> list[str]:
    """Every problem of the library at ``root``; an empty list means valid."""
    root = Path(root)
    if not root.is_dir():
        return [f"{root}: not a directory"]
    tags_path = root / TAGS_FILE
    if not tags_path.is_file():
        return [f"{TAGS_FILE}: missing (a library holds {TAGS_FILE}, {INFO_FILE} and the images)"]
    raw_lines = tags_path.read_bytes().split(b"\n")  # lines end at \n alone, each decoded on its own
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the final newline
    lines = []
    for lineno, raw in enumerate(raw_lines, 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return [f"{TAGS_FILE}:{lineno}: not UTF-8 text (byte {exc.start + 1} of the line)"]
    records, errors = read_records(lines, TAGS_FILE)
    errors += check_records(root, records)
    info_path = root / INFO_FILE
    if not info_path.is_file():
        errors.append(f"{INFO_FILE}: missing")
    else:
        try:
            info = LibraryInfo.model_validate_json(info_path.read_text(encoding="utf-8"))
        except ValidationError as exc:
            errors += [f"{INFO_FILE}: {message}" for _, message in problems_of(exc, LibraryInfo)]
        else:
            if info.images != len(lines):
                errors.append(f"{INFO_FILE}: images: says {info.images}, {TAGS_FILE} has {len(lines)} lines")
            if not errors:
                actual = content_hash(root, [image for _, image in records])
                if actual != info.content_hash:
                    errors.append(f"{INFO_FILE}: content_hash: does not match tags and images "
                                  f"(recorded {info.content_hash[:12]}…, actual {actual[:12]}…)")
    return errors


def read_valid_library(root: Path, *, remember: bool = False) -> tuple[LibraryInfo, list[TaggedImage]]:
    """Check the library at ``root``, then read it: :class:`~tracebench.errors.ValidationFailed`
    listing every problem, or its info and images.

    ``remember``: a library found valid before, with every file of its folder as it was then
    (names, sizes, modification times; a folder holding a link is always checked) and the same
    checking code and taxonomy,
    is not checked again (the fact is derived data, :mod:`tracebench.derived`). ``trace
    sample`` remembers; ``trace library validate`` always checks."""
    from ..derived import read_json, write_json

    key = _validation_key(Path(root)) if remember else None
    if key is not None and read_json("library-valid", key) == {"valid": True}:
        return load_library(root)
    problems = validate_library(root)
    if problems:
        raise ValidationFailed(problems, what=f"problem in library {root}")
    if key is not None and _validation_key(Path(root)) == key:  # nothing changed while it was checked
        write_json("library-valid", key, {"valid": True})
    return load_library(root)


def _validation_key(root: Path) -> str | None:
    """A hash of everything validity depends on: the folder's every entry (path, type, size,
    modification and change times: ``touch -r`` cannot hide an edit), the checking code and the taxonomy; None if unreadable or if the
    folder holds a symbolic link (what it points at could change unseen: always checked)."""
    import hashlib
    import os
    import stat

    from ..derived import source_hash
    from ..resources import data_hash

    digest = hashlib.sha256()
    try:
        base = root.resolve(strict=True)
        code = source_hash("library/_validate.py", "library/_models.py", "library/_io.py", "safepaths.py",
                           "jsonfiles.py", "taxonomy.py", "images.py")
        data = data_hash(("taxonomy", "categories.toml"), ("taxonomy", "subtypes.toml"))
        digest.update(f"{base}\0{code}\0{data}\0{PIL.__version__}\0{max_image_pixels()}\0".encode())
        for folder, dirs, files in os.walk(base):
            dirs.sort()
            for name in sorted(dirs + files):
                path = os.path.join(folder, name)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    return None
                digest.update(f"{os.path.relpath(path, base)}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0"
                              f"{st.st_ctime_ns}\0{st.st_ino}\n".encode("utf-8", "surrogateescape"))
    except OSError:
        return None
    return digest.hexdigest()
