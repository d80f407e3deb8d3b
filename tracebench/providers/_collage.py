"""One grid image for a generator that accepts fewer images than a case holds (``trace run --collage``).

MacroBench evaluates such models on a collage: the references stitched into one grid with a
positional description. Each cell is a reference scaled to fit ``cell`` pixels, labelled
"Image k" in its corner; the prompt gains one line saying how to read the grid
(``templates/clutter.toml``, table ``collage``). The judge still sees the case's own references.

A reference is decoded by :func:`tracebench.images.decode_reduced` (a large one reduced as it
is decoded, one past the pixel limit never decoded); :func:`check_references` decodes each
reference of the cases to collage before a run writes anything, so a reference that cannot be
a cell (past the limit, truncated, no image) is a one-line error naming the file.
"""

from __future__ import annotations

import io
import math
from functools import cache
from typing import Sequence

from ..errors import TraceError
from ..images import ImageRefused, decode_reduced
from ..records import Case, Reference
from ._base import COLLAGE_ID
from ..resources import DataFile
from ..templating import compile_string

__all__ = ["COLLAGE_ID", "check_references", "collage_case"]



@cache
def _settings() -> tuple[object, int]:
    clutter = DataFile("templates", "clutter.toml")
    table = clutter.value("", clutter.read(), "collage", dict)
    return compile_string(clutter.value("collage", table, "line", str)), clutter.value("collage", table, "cell", int)


def _tile(data: bytes, cell: int):
    """A reference scaled to fit a cell (its margin left); raises ImageRefused."""
    from PIL import ImageOps

    return ImageOps.contain(decode_reduced(data, cell - 4), (cell - 4, cell - 4))


def check_references(references: Sequence[tuple[str, bytes]]) -> None:
    """Each reference decoded as a cell would be: a TraceError ``<name>: <why>`` for the first
    that cannot be one (it declares more pixels than the limit, is truncated, is no image)."""
    _, cell = _settings()
    for name, data in references:
        try:
            _tile(data, cell)
        except ImageRefused as err:
            raise TraceError(f"{name}: cannot be a cell of a collage: {err}") from None


def _grid(references: Sequence[bytes], cell: int, names: Sequence[str]) -> tuple[bytes, int]:
    from PIL import Image, ImageDraw

    n = len(references)
    columns = math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    sheet = Image.new("RGB", (columns * cell, rows * cell), "white")
    draw = ImageDraw.Draw(sheet)
    for k, data in enumerate(references):
        try:
            tile = _tile(data, cell)
        except ImageRefused as err:  # checked before the run (check_references): changed since
            raise TraceError(f"{names[k]}: cannot be a cell of a collage: {err}") from None
        x, y = (k % columns) * cell, (k // columns) * cell
        sheet.paste(tile, (x + (cell - tile.width) // 2, y + (cell - tile.height) // 2))
        label = f"Image {k + 1}"
        box = draw.textbbox((x + 4, y + 4), label)
        draw.rectangle((box[0] - 2, box[1] - 2, box[2] + 2, box[3] + 2), fill="black")
        draw.text((x + 4, y + 4), label, fill="white")
    out = io.BytesIO()
    sheet.save(out, format="PNG")
    return out.getvalue(), columns


def collage_case(case: Case, references: Sequence[bytes]) -> tuple[Case, list[bytes]]:
    """The case as a generator that takes one image is sent it: its references as one labelled
    grid image, its prompt with the line that reads the grid. A reference that cannot be a cell
    is a TraceError (the run checks them first: :func:`check_references`)."""
    line, cell = _settings()
    grid, columns = _grid(references, cell, [f"reference {r.path} of case {case.id}" for r in case.references])
    text = line({"count": len(references), "columns": columns, "last": f"Image {len(references)}"})
    sent = case.model_copy(update={
        "prompt": f"{case.prompt}\n{text}",
        "references": (Reference(image="Image 1", path=f"{COLLAGE_ID}.png", source_id=COLLAGE_ID),)})
    return sent, [grid]
