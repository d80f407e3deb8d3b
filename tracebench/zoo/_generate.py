"""Generating an image for a case: plan the scene, draw it, embed the record in the PNG."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import threading
import zlib
from collections import OrderedDict
from functools import cache
from typing import Any

from pydantic import ValidationError

from ..errors import TraceError
from ..images import ImageRefused, ImageTooLarge, decoding, open_image
from ..library import default_library, load_library, render_scene
from ..records import Case, GenerationRecord
from ..sample import LibraryIndex
from ._profiles import Profile, parse_profile
from ._rules import breakdown, partly_broken
from ._scene import plan_generation

__all__ = ["RECORD_KEY", "default_index", "generate", "read_record"]

RECORD_KEY = "tracebench-record"  # the PNG text chunk holding the generation record
COMPRESS_LEVEL = 1  # zlib level of generated PNGs: about half the default level 6 encoding time, files 1.25x larger
SCENES_KEPT = 256  # drawn scenes kept per process (an encoded PNG of about 11 KB and its drawn plan each)
WRITTEN_KEPT = 8192  # digests of the PNGs generate() returned, whose records read_record may trust
INFLATE_CHUNK = 1 << 20  # bytes of rows _inflates holds at a time (a PNG's pixels are checked, never kept)

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG color type -> samples per pixel (8-bit, no palette)


class _Kept:
    """A bounded, thread-safe map that forgets its least recently used entries."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()

    def find(self, key: bytes) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def keep(self, key: bytes, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


_SCENES = _Kept(SCENES_KEPT)  # plan digest -> (PNG without the record, the drawn plan's JSON without its notes)
_WRITTEN = _Kept(WRITTEN_KEPT)  # PNG digest -> True


@cache
def default_index() -> LibraryIndex:
    """The default synthetic library, indexed once per process."""
    root = default_library()
    info, images = load_library(root)
    return LibraryIndex.build(root, info, images)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _draw(plan: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """The scene of a plan as a PNG (no text chunk) and the drawn plan, drawn once per process
    for equal scenes: the key is the plan without its ``zoo`` notes, which the renderer never
    reads (two profiles that draw a case alike, or the same case asked again, share it)."""
    scene = {key: value for key, value in plan.items() if key != "zoo"}
    key = hashlib.sha256(json.dumps(scene, sort_keys=True, separators=(",", ":")).encode()).digest()
    kept = _SCENES.find(key)
    if kept is None:
        image, drawn = render_scene(scene)
        out = io.BytesIO()
        image.save(out, format="PNG", compress_level=COMPRESS_LEVEL)
        kept = (out.getvalue(), json.dumps(drawn, separators=(",", ":")))
        _SCENES.keep(key, kept)
    png, drawn_json = kept
    drawn = json.loads(drawn_json)
    if "zoo" in plan:
        drawn["zoo"] = plan["zoo"]
    return png, drawn


def generate(case: Case, profile: Profile | str, *, library: LibraryIndex | None = None,
             seed: int = 0) -> tuple[bytes, GenerationRecord]:
    """Draw ``case`` as a synthetic generator with ``profile`` would; returns PNG bytes and the record.

    The record (what was drawn, and every requirement the profile broke with its cause) is
    embedded in the PNG as the ``tracebench-record`` text chunk (zTXt, before the image data),
    so the oracle judge can answer from the image alone. The same case, profile, library and
    seed give the same bytes.
    """
    if isinstance(profile, str):
        profile = parse_profile(profile)
    index = default_index() if library is None else library
    plan = plan_generation(case, profile, index, seed=seed)
    pixels, drawn = _draw(plan)
    causes = breakdown(case, profile, seed=seed)
    record = GenerationRecord(case_id=case.id, generator=profile.generator, drawn=drawn,
                              failed={qid: modes[0] for qid, modes in causes.items()}, causes=causes,
                              partial=partly_broken(causes) or None)
    text = json.dumps(record.model_dump(mode="json"), ensure_ascii=True, separators=(",", ":"))
    # the chunk Pillow's PngInfo.add_text(..., zip=True) writes, right after IHDR as Pillow places it
    header_end = len(_SIGNATURE) + 25
    png = (pixels[:header_end] + _chunk(b"zTXt", RECORD_KEY.encode("latin-1") + b"\0\0" + zlib.compress(text.encode()))
           + pixels[header_end:])
    _WRITTEN.keep(hashlib.sha256(png).digest(), True)
    return png, record


def _decodes(png: bytes) -> bool:
    """Whether Pillow is sure to decode the whole PNG and to find no text chunk after the image
    data, checked without decoding: a signature, an 8-bit non-interlaced IHDR without palette,
    whole chunks with correct CRCs, no animation, one run of IDAT chunks whose zlib stream
    inflates exactly to the header's rows with valid filter bytes, then IEND and nothing after.
    False (decode to find out) for anything else."""
    if not png.startswith(_SIGNATURE) or len(png) < 33 or png[12:16] != b"IHDR":
        return False
    width, height, depth, color, compression, filters, interlace = struct.unpack(">IIBBBBB", png[16:29])
    if depth != 8 or color not in _CHANNELS or (compression, filters, interlace) != (0, 0, 0):
        return False
    pos, data, state = 8, [], "before"  # before, in, after the IDAT run
    while pos + 12 <= len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        end = pos + 12 + length
        if end > len(png) or zlib.crc32(png[pos + 4:end - 4]) != struct.unpack(">I", png[end - 4:end])[0]:
            return False
        if kind == b"IDAT" and state != "after":
            state = "in"
            data.append(png[pos + 8:end - 4])
        elif kind == b"IEND":
            return state == "in" and length == 0 and end == len(png) and _inflates(b"".join(data), width, height,
                                                                                   _CHANNELS[color])
        elif state != "before" or kind in (b"acTL", b"fcTL", b"fdAT"):
            return False
        pos = end
    return False


def _inflates(data: bytes, width: int, height: int, channels: int) -> bool:
    """Whether ``data`` inflates to exactly the rows of the header (each a filter byte of at
    most 4 and its samples) and ends there; inflated :data:`INFLATE_CHUNK` bytes at a time, so
    the check holds no more than that of a large image's pixels."""
    stride = 1 + width * channels
    total = stride * height
    inflater = zlib.decompressobj()
    pending, done = data, 0
    while True:
        try:
            rows = inflater.decompress(pending, INFLATE_CHUNK)
        except zlib.error:
            return False
        pending = inflater.unconsumed_tail
        if max(rows[(-done) % stride::stride], default=0) > 4:  # the filter bytes of the rows begun here
            return False
        done += len(rows)
        if done > total:
            return False
        if inflater.eof or not rows:
            break
    return done == total and inflater.eof and not inflater.unused_data and not inflater.unconsumed_tail


def read_record(png: bytes) -> GenerationRecord | None:
    """The generation record embedded in a PNG, or None when the image carries none.

    The image is opened by :func:`tracebench.images.open_image`: one that declares more pixels
    than the limit is refused before anything is decoded. The chunk is read from the PNG's
    header (``image.info``) without decoding the pixels when the file is whole (a PNG this
    process generated, or one :func:`_decodes` accepts, inflating it a chunk at a time);
    anything else is decoded in full (within the limit, one large image at a time), so a
    truncated or broken file gives the error it always gave.
    Raises :class:`~tracebench.errors.TraceError` when the bytes are not an image, declare more
    pixels than the limit, or the chunk is not a valid record."""
    try:
        with open_image(png) as image:
            if _WRITTEN.find(hashlib.sha256(png).digest()) or _decodes(png):
                text = image.info.get(RECORD_KEY)
            else:
                with decoding(image.width * image.height):
                    text = getattr(image, "text", {}).get(RECORD_KEY)
    except ImageTooLarge as exc:
        raise TraceError(f"the image {exc}") from None
    except ImageRefused as exc:
        raise TraceError(f"not a readable image: {exc.cause or exc}") from None
    except Exception as exc:  # noqa: BLE001 - decoding hostile bytes raises OSError, SyntaxError, ValueError...
        raise TraceError(f"not a readable image: {exc}") from None
    if text is None:
        return None
    try:
        return GenerationRecord.model_validate_json(text)
    except ValidationError as exc:
        raise TraceError(f"{RECORD_KEY} chunk: not a generation record ({exc.error_count()} problems)") from None
