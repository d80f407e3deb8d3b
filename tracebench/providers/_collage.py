"""One grid image for a generator that accepts fewer images than a case holds (``trace run --collage``).

MacroBench evaluates such models on a collage: the references stitched into one grid with a
positional description. Each cell is a reference scaled to fit ``cell`` pixels, labelled
"Image k" in its corner; the prompt gains one line saying how to read the grid
(``templates/clutter.toml``, table ``collage``). The judge still sees the case's own references.
"""

from __future__ import annotations

import io
import math
from functools import cache
from typing import Sequence

from ..records import Case, Reference
from ._base import COLLAGE_ID
from ..resources import read_toml
from ..templating import compile_string

__all__ = ["COLLAGE_ID", "collage_case"]



@cache
def _settings() -> tuple[object, int]:
    table = read_toml("templates", "clutter.toml")["collage"]
    return compile_string(table["line"]), int(table["cell"])


def _grid(references: Sequence[bytes], cell: int) -> tuple[bytes, int]:
    from PIL import Image, ImageDraw, ImageOps

    n = len(references)
    columns = math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    sheet = Image.new("RGB", (columns * cell, rows * cell), "white")
    draw = ImageDraw.Draw(sheet)
    for k, data in enumerate(references):
        with Image.open(io.BytesIO(data)) as image:
            tile = ImageOps.contain(image.convert("RGB"), (cell - 4, cell - 4))
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
    grid image, its prompt with the line that reads the grid."""
    line, cell = _settings()
    grid, columns = _grid(references, cell)
    text = line({"count": len(references), "columns": columns, "last": f"Image {len(references)}"})
    sent = case.model_copy(update={
        "prompt": f"{case.prompt}\n{text}",
        "references": (Reference(image="Image 1", path=f"{COLLAGE_ID}.png", source_id=COLLAGE_ID),)})
    return sent, [grid]
