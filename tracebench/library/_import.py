"""Building a library from a user's images and tags (JSONL, or one JSON list)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PIL import Image

from ..errors import TraceError, ValidationFailed
from ._io import staged_output, write_library
from ._models import TaggedImage
from ._validate import check_records, read_records

__all__ = ["import_library", "copy_selection"]


def _tag_lines(tags_file: Path) -> list[str]:
    """The records of a tags file as JSON lines (a JSON list is split into one per item)."""
    try:
        text = tags_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{tags_file}: cannot read tags ({exc})") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{tags_file}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        return [json.dumps(item) for item in items]
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _fill_size(line: str, images_dir: Path) -> str:
    """Width and height may be left out of a user's tags: read them from the image."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return line  # reported by read_records
    if isinstance(data, dict) and isinstance(data.get("path"), str) and ("width" not in data or "height" not in data):
        candidate = images_dir / data["path"]
        if candidate.is_file() and candidate.resolve().is_relative_to(images_dir.resolve()):
            try:
                with Image.open(candidate) as handle:
                    data.setdefault("width", handle.width)
                    data.setdefault("height", handle.height)
            except OSError:
                pass  # reported by check_records
    return json.dumps(data)


def import_library(images_dir: Path, tags_file: Path, out: Path, *, name: str | None = None):
    """Check the user's tags against their images, then write a library to ``out``.

    Every problem is reported (``FILE:LINE: field: message``) in one TraceError and
    nothing is written.
    """
    images_dir, tags_file = Path(images_dir), Path(tags_file)
    if not images_dir.is_dir():
        raise TraceError(f"{images_dir}: not a directory")
    lines = [_fill_size(line, images_dir) for line in _tag_lines(tags_file)]
    records, errors = read_records(lines, tags_file.name)
    errors += check_records(images_dir, records, tags_file.name)
    if errors:
        raise ValidationFailed(errors)
    return copy_selection(images_dir, [image for _, image in records], out, name=name or images_dir.resolve().name)


def copy_selection(source: Path, images: list[TaggedImage], out: Path, *, name: str):
    """Write a library holding ``images`` (paths relative to ``source``) to ``out``."""
    with staged_output(out) as root:
        for image in images:
            target = root / image.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / image.path, target)
        return write_library(root, name, images)
