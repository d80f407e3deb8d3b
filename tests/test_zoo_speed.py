"""The zoo's fast paths give what the slow ones gave: the separable max filter equals Pillow's
rank filter (so library images keep their bytes), generated PNGs are what Pillow writes with
the record as a text chunk before the image data, a drawn scene kept for reuse gives the same
image and record, and reading the record without decoding answers (or fails) exactly as a
full decode does, for whole, truncated and crafted files alike."""

from __future__ import annotations

import io
import random
import re
import struct
import zlib

import pytest
from PIL import Image, ImageFilter, PngImagePlugin, UnidentifiedImageError

from tracebench.errors import TraceError
from tracebench.library.synth import _build, _draw, _render, plan_scene, render_scene
from tracebench.records import GenerationRecord
from tracebench.sample import SampleOptions, read_cases, sample_benchmark
from tracebench.zoo import RECORD_KEY, generate, oracle_reply, read_record
from tracebench.zoo import _generate


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo-speed") / "bench"
    sample_benchmark(out, SampleOptions(slots=tuple(range(1, 9)), per_slot=2, seed=5))
    return list(read_cases(out))


def _rank_max(band: Image.Image, size: int) -> Image.Image:
    return band.filter(ImageFilter.MaxFilter(size))


# ------------------------------------------------------------------ the max filter

def test_max_filter_equals_the_rank_filter_pixel_for_pixel():
    rng = random.Random(7)
    for _ in range(150):
        w, h = rng.randint(1, 48), rng.randint(1, 48)
        band = Image.new("L", (w, h))
        band.putdata([rng.choice((0, 0, 0, 255, rng.randrange(256))) for _ in range(w * h)])
        for size in (3, 5, 7, 9):
            assert _draw.max_filter(band, size).tobytes() == _rank_max(band, size).tobytes(), (w, h, size)


def _library_plans() -> list[dict]:
    """Plans of the default library's seed that use every max filter (glow, ink contours,
    lettering halos, the shadow font's), a few of each."""
    wanted = {"glow": 3, "ink": 3, "letters": 3, "shadow": 2}
    plans = []
    for index in range(400):
        plan = plan_scene(_build.DEFAULT_SEED, index)
        uses = ({"glow"} if any(e.get("effect") == "glow" for e in plan["entities"]) else set()) \
            | ({"ink"} if plan["style"] == "ink" else set()) \
            | ({"letters"} if any(e.get("word") for e in plan["entities"]) else set()) \
            | ({"shadow"} if any(e.get("word") and e.get("font") == "shadow" for e in plan["entities"]) else set())
        if any(wanted.get(u, 0) > 0 for u in uses):
            plans.append(plan)
            for u in uses:
                wanted[u] = wanted.get(u, 0) - 1
        if all(n <= 0 for n in wanted.values()):
            break
    assert all(n <= 0 for n in wanted.values()), f"the library's plans lack some filter uses: {wanted}"
    return plans


def test_library_images_keep_their_bytes_with_the_separable_filter(monkeypatch):
    """Library scenes drawn with the fast filter and with Pillow's rank filter save to the same
    PNG bytes at the library's settings."""
    plans = _library_plans()

    def saved(plan: dict) -> bytes:
        out = io.BytesIO()
        render_scene(plan)[0].save(out, format="PNG", optimize=False, compress_level=6)
        return out.getvalue()

    fast = [saved(plan) for plan in plans]
    monkeypatch.setattr(_render, "max_filter", _rank_max)
    monkeypatch.setattr(_draw, "max_filter", _rank_max)
    slow = [saved(plan) for plan in plans]
    assert fast == slow


# ------------------------------------------------------------------ generated PNGs

def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 8
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        out.append((kind, png[pos + 8:pos + 8 + length]))
        pos += 12 + length
    return out


def test_generated_png_is_what_pillow_writes_at_the_fast_level(cases):
    png, record = generate(cases[3], "global-interference,noise:0.2", seed=1)
    with Image.open(io.BytesIO(png)) as image:
        pixels = image.convert("RGB")
        text = image.text[RECORD_KEY]
    info = PngImagePlugin.PngInfo()
    info.add_text(RECORD_KEY, text, zip=True)
    again = io.BytesIO()
    pixels.save(again, format="PNG", pnginfo=info, compress_level=_generate.COMPRESS_LEVEL)
    assert png == again.getvalue()
    kinds = [kind for kind, _ in _chunks(png)]
    assert kinds[:2] == [b"IHDR", b"zTXt"] and kinds[-1] == b"IEND" and set(kinds[2:-1]) == {b"IDAT"}
    assert GenerationRecord.model_validate_json(text) == record


def test_a_kept_scene_gives_the_same_image_and_record(cases, monkeypatch):
    case = cases[10]
    monkeypatch.setattr(_generate, "_SCENES", _generate._Kept(_generate.SCENES_KEPT))
    first, record = generate(case, "leaky-binding", seed=2)
    assert len(_generate._SCENES) == 1
    record.drawn["entities"].clear()  # what a caller does with its record is not kept
    again, record_again = generate(case, "leaky-binding", seed=2)
    assert again == first and record_again == read_record(first)
    # noise is in the record only: the same scene, drawn once, another record
    noisy, noisy_record = generate(case, "leaky-binding,noise:0.5", seed=2)
    assert len(_generate._SCENES) == 1
    assert noisy_record.drawn["zoo"]["profile"] == "leaky-binding,noise:0.5"
    assert {k: v for k, v in noisy_record.drawn.items() if k != "zoo"} == \
        {k: v for k, v in record_again.drawn.items() if k != "zoo"}
    with Image.open(io.BytesIO(noisy)) as a, Image.open(io.BytesIO(first)) as b:
        assert a.tobytes() == b.tobytes()
    # drawn afresh (nothing kept) it is the same again
    monkeypatch.setattr(_generate, "_SCENES", _generate._Kept(_generate.SCENES_KEPT))
    assert generate(case, "leaky-binding,noise:0.5", seed=2) == (noisy, noisy_record)
    generate(case, "leaky-binding", seed=3)  # another seed, another scene
    assert len(_generate._SCENES) == 2


def test_kept_scenes_are_bounded():
    kept = _generate._Kept(2)
    for key in (b"a", b"b", b"a", b"c"):
        kept.keep(key, key.upper())
    assert kept.find(b"b") is None and kept.find(b"a") == b"A" and kept.find(b"c") == b"C" and len(kept) == 2


def test_oracle_reply_from_the_record_equals_the_reply_from_the_image(cases):
    case = cases[12]
    png, record = generate(case, "global-interference,noise:0.3")
    assert oracle_reply(case.checklist, record) == oracle_reply(case.checklist, png)


# ------------------------------------------------------------------ reading the record

def _decoded(png: bytes) -> tuple[str, object]:
    """What reading the record by decoding the whole image gives (the reader's former way)."""
    try:
        with Image.open(io.BytesIO(png)) as image:
            text = getattr(image, "text", {}).get(RECORD_KEY)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        return "error", re.sub(r"0x[0-9a-f]+", "0x", f"not a readable image: {exc}")
    if text is None:
        return "none", None
    try:
        return "record", GenerationRecord.model_validate_json(text)
    except Exception as exc:  # the reader's own message is checked by its tests; only the kind here
        return "invalid", type(exc).__name__


def _read(png: bytes) -> tuple[str, object]:
    try:
        record = read_record(png)
    except TraceError as exc:
        message = str(exc)
        if message.startswith(RECORD_KEY):
            return "invalid", "ValidationError"
        return "error", re.sub(r"0x[0-9a-f]+", "0x", message)
    return ("none", None) if record is None else ("record", record)


def _png(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return _generate._SIGNATURE + b"".join(_generate._chunk(kind, data) for kind, data in chunks)


def _flip(png: bytes, offset: int) -> bytes:
    out = bytearray(png)
    out[offset] ^= 0x10
    return bytes(out)


def _variants(png: bytes) -> dict[str, bytes]:
    """A zoo-like PNG (IHDR, the record, one IDAT, IEND), cut, flipped and crafted: valid CRCs
    around broken image data, the record after the image data, chunks where none belong."""
    chunks = _chunks(png)
    assert [kind for kind, _ in chunks] == [b"IHDR", b"zTXt", b"IDAT", b"IEND"]
    header, record, (_, idat), end = chunks
    rows = zlib.decompress(idat)
    stride = len(rows) // struct.unpack(">I", header[1][4:8])[0]

    def image(data: bytes, *more: tuple[bytes, bytes]) -> bytes:  # valid CRCs whatever the data
        return _png([header, record, (b"IDAT", data), *more, end])

    broken = bytearray(zlib.compress(rows))
    broken[len(broken) // 2] ^= 0xFF
    out = {"whole": png, "with trailing bytes": png + b"junk", "without IEND": png[:-12], "not an image": b"not a png",
           "corrupt zlib stream, valid CRC": image(bytes(broken)),
           "zlib stream cut short, valid CRC": image(zlib.compress(rows)[:-6]),
           "a row short, valid CRC": image(zlib.compress(rows[:-stride])),
           "a row too many, valid CRC": image(zlib.compress(rows + rows[-stride:])),
           "bad filter byte, valid CRC": image(zlib.compress(b"\x07" + rows[1:])),
           "a chunk between IDATs": image(idat, (b"tIME", b"\x07\xe6\x01\x01\x00\x00\x00"), (b"IDAT", b"")),
           "record after the image data": _png([header, (b"IDAT", idat), record, end]),
           "a second record after the image data": image(idat, (b"zTXt", RECORD_KEY.encode() + b"\0\0"
                                                                + zlib.compress(b'{"case_id": "x"}'))),
           "no record": _png([header, (b"IDAT", idat), end]),
           "a broken record": _png([header, (b"tEXt", RECORD_KEY.encode() + b"\0{}"), (b"IDAT", idat), end])}
    out |= {f"cut at {n}": png[:n] for n in {*range(0, len(png), max(1, len(png) // 40)),
                                             *(len(png) - k for k in range(1, 14))}}
    pos = 8
    for k, (kind, data) in enumerate(chunks):
        out[f"cut before chunk {k} ({kind.decode()})"] = png[:pos]
        out[f"a bit flipped in chunk {k} ({kind.decode()})"] = _flip(png, pos + 8 + len(data) // 2 if data else pos + 4)
        pos += 12 + len(data)
    return out


def _formats(png: bytes) -> dict[str, bytes]:
    """The record in images of other modes and kinds (written by Pillow, not by the zoo)."""
    with Image.open(io.BytesIO(png)) as image:
        text, rgb = image.text[RECORD_KEY], image.convert("RGB")
    info = PngImagePlugin.PngInfo()
    info.add_text(RECORD_KEY, text, zip=True)
    out = {}
    for mode in ("RGB", "RGBA", "L", "LA", "P", "I;16", "1"):
        buf = io.BytesIO()
        (rgb.convert("L") if mode == "I;16" else rgb).convert(mode).save(buf, format="PNG", pnginfo=info)
        out[f"mode {mode}"] = buf.getvalue()
    buf = io.BytesIO()
    rgb.save(buf, format="PNG", pnginfo=info, save_all=True, append_images=[rgb.rotate(90)])
    out["animated"] = buf.getvalue()
    buf = io.BytesIO()
    rgb.save(buf, format="JPEG")
    out["JPEG"] = buf.getvalue()
    return out


def test_reading_without_decoding_answers_as_a_full_decode(cases):
    png, _ = generate(cases[5], "relation-blind,noise:0.1", seed=4)
    formats = _formats(png)
    inputs = {**_variants(png), **formats}
    for mode in ("mode RGBA", "mode L"):
        inputs |= {f"{mode}, {name}": data for name, data in _variants(formats[mode]).items()}
    outcomes = {}
    for name, data in inputs.items():
        outcomes[name] = _read(data)
        assert outcomes[name] == _decoded(data), name
    assert {kind for kind, _ in outcomes.values()} == {"record", "none", "invalid", "error"}


def test_whole_files_skip_the_decode(cases):
    """The check accepts whole PNGs of the usual modes; what it turns down is decoded instead."""
    png, _ = generate(cases[6], "perfect")
    formats = _formats(png)
    accepted = {name for name, data in {"zoo": png, **formats}.items() if _generate._decodes(data)}
    assert accepted == {"zoo", "mode RGB", "mode RGBA", "mode L", "mode LA"}
    rejected = {name for name, data in _variants(png).items() if not _generate._decodes(data)}
    assert rejected == set(_variants(png)) - {"whole", "no record", "a broken record"}


def test_a_truncated_generated_png_is_an_error_as_before(cases):
    png, _ = generate(cases[7], "duplicate")
    with pytest.raises(TraceError, match="not a readable image: image file is truncated"):
        read_record(png[:-40])
