"""Generating an image for a case: plan the scene, draw it, embed the record in the PNG."""

from __future__ import annotations

import io
import json
from functools import cache

from PIL import Image, PngImagePlugin, UnidentifiedImageError
from pydantic import ValidationError

from ..errors import TraceError
from ..library import default_library, load_library, render_scene
from ..records import Case, GenerationRecord
from ..sample import LibraryIndex
from ._profiles import Profile, parse_profile
from ._rules import breakdown
from ._scene import plan_generation

__all__ = ["RECORD_KEY", "default_index", "generate", "read_record"]

RECORD_KEY = "tracebench-record"  # the PNG text chunk holding the generation record


@cache
def default_index() -> LibraryIndex:
    """The default synthetic library, indexed once per process."""
    root = default_library()
    info, images = load_library(root)
    return LibraryIndex.build(root, info, images)


def generate(case: Case, profile: Profile | str, *, library: LibraryIndex | None = None,
             seed: int = 0) -> tuple[bytes, GenerationRecord]:
    """Draw ``case`` as a synthetic generator with ``profile`` would; returns PNG bytes and the record.

    The record (what was drawn, and every requirement the profile broke with its cause) is
    embedded in the PNG as the ``tracebench-record`` text chunk, so the oracle judge can answer
    from the image alone. The same case, profile, library and seed give the same bytes.
    """
    if isinstance(profile, str):
        profile = parse_profile(profile)
    index = default_index() if library is None else library
    plan = plan_generation(case, profile, index, seed=seed)
    image, drawn = render_scene(plan)
    causes = breakdown(case, profile, seed=seed)
    record = GenerationRecord(case_id=case.id, generator=profile.generator, drawn=drawn,
                              failed={qid: modes[0] for qid, modes in causes.items()}, causes=causes)
    info = PngImagePlugin.PngInfo()
    info.add_text(RECORD_KEY, json.dumps(record.model_dump(mode="json"), ensure_ascii=True,
                                         separators=(",", ":")), zip=True)
    out = io.BytesIO()
    image.save(out, format="PNG", pnginfo=info)
    return out.getvalue(), record


def read_record(png: bytes) -> GenerationRecord | None:
    """The generation record embedded in a PNG, or None when the image carries none.

    Raises :class:`~tracebench.errors.TraceError` when the bytes are not an image or the
    chunk is not a valid record."""
    try:
        with Image.open(io.BytesIO(png)) as image:
            text = getattr(image, "text", {}).get(RECORD_KEY)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise TraceError(f"not a readable image: {exc}") from None
    if text is None:
        return None
    try:
        return GenerationRecord.model_validate_json(text)
    except ValidationError as exc:
        raise TraceError(f"{RECORD_KEY} chunk: not a generation record ({exc.error_count()} problems)") from None
