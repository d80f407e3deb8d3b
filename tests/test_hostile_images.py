"""Hostile images: no image may cost a traceback or unbounded memory.

Images come from folders other people made. Each attack below is a real file: a PNG whose
header declares 100000 x 100000 pixels over a tiny zlib stream, a JPEG whose frame header says
65000 x 65000, a valid PNG of 13000 x 13000 white pixels that compresses to about 0.5 MB
(0.7 GB decoded), a PNG cut in half, and bytes that are no image. Each reaches every command
that opens images: an input of the user's (a library image, a benchmark's reference) is one
line naming the file, exit 2, nothing written; a generated image is an abstention with the
reason; the report shows a placeholder with the reason and is still written. The pixel limit
is tracebench.images.MAX_IMAGE_PIXELS, raised with TRACEBENCH_MAX_IMAGE_PIXELS.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import test_records
from image_bombs import SIGNATURE, _png, jpeg_bomb, large_png, png_bomb
from library_helpers import make_library, record, sample_records, write_photo
from test_cli import run_trace
from tracebench.errors import TraceError
from tracebench.records import read_cases, read_verdicts

world = test_records.world  # a benchmark (slot levels 1-3, 6 cases), its run by the zoo and the oracle
_copy = test_records._copy

TOO_LARGE = {"png bomb": "declares 100000x100000 pixels, 10000 megapixels, above the limit of 40 megapixels",
             "jpeg bomb": "declares 65000x65000 pixels, 4225 megapixels, above the limit of 40 megapixels",
             "13000 px png": "declares 13000x13000 pixels, 169 megapixels, above the limit of 40 megapixels"}
WHY = {**TOO_LARGE, "truncated": "cannot decode (OSError: image file is truncated)",
       "not an image": "not an image Pillow reads"}
ATTACKS = tuple(WHY)


# --------------------------------------------------------------------------- the attacks

def _small_png(size=(64, 48), color=(200, 120, 40)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def attacks(shared_folder) -> dict[str, bytes]:
    def make(folder: Path) -> None:
        folder.mkdir()
        (folder / "large.png").write_bytes(large_png())

    large = (shared_folder("hostile-images-13000", make) / "large.png").read_bytes()
    assert 400_000 < len(large) < 700_000
    whole = _small_png((300, 300))
    return {"png bomb": png_bomb(), "jpeg bomb": jpeg_bomb(), "13000 px png": large,
            "truncated": whole[: len(whole) // 2], "not an image": b"these bytes are no image\n"}


def _one_line(result, *fragments: str, summary: str | None = None) -> str:
    """The command failed the CLI's way: exit 2, no traceback, one line (then the count line of a
    library command), holding every fragment."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    if summary is not None:
        assert len(lines) == 2 and lines[1].startswith(summary), result.stderr
    else:
        assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- trace report

def _bodies(page: str) -> dict[str, str]:
    """case id -> the case's body as the page unpacks it."""
    found = re.findall(r'<details class="case"[^>]* data-case="([^"]+)"[^>]* data-body="([^"]*)">', page)
    return {case: zlib.decompress(base64.b64decode(packed)).decode("utf-8") for case, packed in found}


def _hostile_run(world, attacks, tmp_path) -> tuple[Path, dict[str, str]]:
    """A copy of the run whose first five generated images are the five attacks: case -> attack."""
    run = _copy(world["run"], tmp_path / "run")
    images = sorted((run / "images").glob("*.png"))
    assert len(images) >= len(ATTACKS)
    planted = {}
    for path, name in zip(images, ATTACKS):
        path.write_bytes(attacks[name])
        planted[path.stem] = name
    return run, planted


def test_the_report_shows_each_hostile_image_as_a_placeholder_with_the_reason(world, attacks, tmp_path):
    """The page is written (one image of a run is no reason to withhold the rest), each image it
    cannot show is a line where the image would be saying why; the other cases keep theirs."""
    run, planted = _hostile_run(world, attacks, tmp_path)
    page = tmp_path / "r.html"
    result = run_trace("report", str(run), "--out", str(page))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr, result.stderr
    bodies = _bodies(page.read_text(encoding="utf-8"))
    for case, body in bodies.items():
        shown = [html.unescape(text) for text in re.findall(r'<p class="unshown">(.*?)</p>', body)]
        if case in planted:
            assert shown == [f"Generated image not shown: {WHY[planted[case]]}"
                             + (" (TRACEBENCH_MAX_IMAGE_PIXELS raises it)" if planted[case] in TOO_LARGE else "")]
            assert 'alt="generated image' not in body
        else:
            assert shown == [] and 'alt="generated image' in body


def test_full_images_never_embeds_a_bomb(world, attacks, tmp_path):
    """--full-images embeds files as they are, the browser decoding them: their header is checked."""
    run, planted = _hostile_run(world, attacks, tmp_path)
    page = tmp_path / "r.html"
    result = run_trace("report", str(run), "--full-images", "--out", str(page))
    assert result.returncode == 0, result.stderr
    bodies = _bodies(page.read_text(encoding="utf-8"))
    for case, name in planted.items():
        if name in TOO_LARGE:
            assert f"Generated image not shown: {TOO_LARGE[name]}" in html.unescape(bodies[case])
    assert base64.b64encode(attacks["png bomb"]).decode() not in page.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- trace run --collage

@pytest.mark.parametrize("attack", ATTACKS)
def test_a_hostile_reference_of_a_collage_is_one_line_and_nothing_is_written(world, attacks, tmp_path, attack):
    bench = _copy(world["bench"], tmp_path / "bench")
    case = next(c for c in read_cases(bench) if len(c.references) > 1)  # sent as a grid under --max-images 1
    reference = case.references[-1].path
    (bench / reference).write_bytes(attacks[attack])
    out = tmp_path / "run"
    result = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle",
                       "--max-images", "1", "--collage", "--out", str(out))
    _one_line(result, f"reference image {reference}: cannot be a cell of a collage: {WHY[attack]}")
    assert not out.exists()


# --------------------------------------------------------------------------- trace library import / validate

@pytest.mark.parametrize("attack", TOO_LARGE)  # a truncated file, bytes that are no image: named as ever
def test_an_image_past_the_limit_in_library_import_is_named_and_nothing_is_written(attacks, tmp_path, attack):
    photos = tmp_path / "photos"
    tags = []
    for rec in sample_records()[:2]:
        name = Path(rec["path"]).name
        write_photo(photos / name)
        tags.append({key: value for key, value in rec.items() if key not in ("id", "width", "height")} | {"path": name})
    (photos / "cat.png").write_bytes(attacks[attack])
    (tmp_path / "tags.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tags))
    result = run_trace("library", "import", str(photos), "--tags", str(tmp_path / "tags.jsonl"),
                       "--out", str(tmp_path / "lib"))
    _one_line(result, f"tags.jsonl:1: path: image cat.png {TOO_LARGE[attack]}",
              summary="trace library import: 1 problem; nothing was written")
    assert not (tmp_path / "lib").exists()


@pytest.mark.parametrize("attack", TOO_LARGE)
def test_an_image_past_the_limit_in_library_validate_is_named(attacks, tmp_path, attack):
    library = make_library(tmp_path / "lib", sample_records()[:2])
    (library / "images" / "cat.png").write_bytes(attacks[attack])
    result = run_trace("library", "validate", str(library))
    _one_line(result, f"tags.jsonl:1: path: image images/cat.png {TOO_LARGE[attack]}",
              summary="trace library validate: 1 problem in library")


def test_the_limit_is_the_user_s_to_set(tmp_path, monkeypatch):
    """TRACEBENCH_MAX_IMAGE_PIXELS lowers (or raises) the limit; a value that is no number is one
    line before anything is read."""
    library = make_library(tmp_path / "lib", [record("cat", sample_records()[0]["ent_list"], size=(200, 100))])
    monkeypatch.setenv("TRACEBENCH_MAX_IMAGE_PIXELS", "10_000")
    _one_line(run_trace("library", "validate", str(library)),
              "image images/cat.png declares 200x100 pixels, 0.02 megapixels, above the limit of 0.01 megapixels",
              summary="trace library validate: 1 problem in library")
    monkeypatch.setenv("TRACEBENCH_MAX_IMAGE_PIXELS", "20_000")
    assert run_trace("library", "validate", str(library)).returncode == 0
    monkeypatch.setenv("TRACEBENCH_MAX_IMAGE_PIXELS", "lots")
    _one_line(run_trace("library", "validate", str(library)),
              "trace library validate: TRACEBENCH_MAX_IMAGE_PIXELS='lots': not a positive whole number of pixels")


# --------------------------------------------------------------------------- generated images and the oracle

def test_a_generated_image_past_the_limit_is_an_abstention_with_the_reason(world, attacks, tmp_path):
    """A generator's output (here folder:, as a server's or a command's) that declares more pixels
    than the limit is neither kept, judged nor decoded: its case abstains, saying why."""
    made = tmp_path / "made"
    made.mkdir()
    for image in (world["run"] / "images").glob("*.png"):
        shutil.copy(image, made / image.name)
    cases = sorted(c.id for c in read_cases(world["bench"]))
    planted = dict(zip(cases, TOO_LARGE))
    for case, name in planted.items():
        (made / f"{case}.png").write_bytes(attacks[name])
    out = tmp_path / "run"
    result = run_trace("run", str(world["bench"]), "--generator", f"folder:{made}", "--judge", "oracle",
                       "--out", str(out))
    assert result.returncode == 3, result.stderr  # done, some questions abstained
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr, result.stderr
    reasons = {}
    for verdict in read_verdicts(out):
        reasons.setdefault(verdict.case_id, set()).add(verdict.votes[0].reason if verdict.verdict == "abstain" else "")
    for case in cases:
        if case in planted:
            assert reasons[case] == {f"generated image refused: it {TOO_LARGE[planted[case]]} "
                                     "(TRACEBENCH_MAX_IMAGE_PIXELS raises it)"}
            assert not list(out.glob(f"images/{case}.*"))
        else:
            assert "" in reasons[case] and not any("refused" in r for r in reasons[case])


@pytest.mark.parametrize("attack", TOO_LARGE)  # a truncated file, no image: "not a readable image" as ever
def test_the_oracle_s_reader_refuses_an_image_past_the_limit(attacks, attack):
    """read_record (the oracle judge, trace agree --truth, trace diagnose's causes, trace serve):
    a TraceError saying why, before anything is inflated or decoded; never Pillow's exception."""
    from tracebench.zoo import read_record

    with pytest.raises(TraceError, match=re.escape(f"the image {TOO_LARGE[attack]}")):
        read_record(attacks[attack])


def test_the_oracle_reads_a_large_image_without_holding_its_pixels(attacks, monkeypatch):
    """With the limit raised past 169 megapixels, the 13000 x 13000 PNG (0.5 GB of rows) is
    checked for its record a megabyte of rows at a time, not inflated whole (Python's own
    allocations are counted: zlib's output is Python bytes)."""
    import tracemalloc

    from tracebench.zoo import read_record

    monkeypatch.setenv("TRACEBENCH_MAX_IMAGE_PIXELS", "200_000_000")
    tracemalloc.start()
    try:
        assert read_record(attacks["13000 px png"]) is None  # whole, and no record in it
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, peak


# --------------------------------------------------------------------------- the one opening function

_PIL_PNG_MODES = {"1": (0, 1), "L": (0, 8), "LA": (4, 8), "I;16": (0, 16), "P": (3, 8), "RGB": (2, 8), "RGBA": (6, 8)}


@st.composite
def hostile_images(draw) -> bytes:
    """A small real image (PNG, JPEG or WebP of some mode), then its header's width and height
    rewritten to anything (the PNG's CRC kept right or not), other header fields changed, and
    the bytes cut anywhere."""
    kind = draw(st.sampled_from(["PNG", "JPEG", "WEBP", "PNG header"]))
    width, height = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    if kind == "PNG header":  # a header Pillow may not even make: any depth, colour type, interlace
        data = _png(width, height, zlib.compress(bytes(draw(st.binary(max_size=200)))),
                    color=draw(st.sampled_from([0, 2, 3, 4, 6, 1, 7])), depth=draw(st.sampled_from([1, 2, 4, 8, 16, 3])),
                    interlace=draw(st.sampled_from([0, 1, 2])))
    else:
        mode = draw(st.sampled_from({"PNG": list(_PIL_PNG_MODES), "JPEG": ["L", "RGB", "CMYK"],
                                     "WEBP": ["RGB", "RGBA"]}[kind]))
        out = io.BytesIO()
        Image.new(mode, (width, height), 77).save(out, format=kind)
        data = out.getvalue()
    data = bytearray(data)
    declared = (draw(st.integers(0, 2**31 - 1)), draw(st.integers(0, 2**31 - 1))) if draw(st.booleans()) else None
    if declared and data.startswith(SIGNATURE):
        struct.pack_into(">II", data, 16, *declared)
        if draw(st.booleans()):  # the CRC made right again: only the size lies
            struct.pack_into(">I", data, 29, zlib.crc32(bytes(data[12:29])))
    elif declared and data.startswith(b"\xff\xd8"):
        at = max(data.find(b"\xff\xc0"), data.find(b"\xff\xc2"))
        if at > 0:
            struct.pack_into(">HH", data, at + 5, declared[0] % 65536, declared[1] % 65536)
    elif declared and data[8:12] == b"WEBP":
        at = data.find(b"VP8")
        if at > 0 and len(data) > at + 20:
            data[at + 14:at + 20] = struct.pack("<HHH", declared[0] % 65536, declared[1] % 65536, 0)
    cut = draw(st.one_of(st.none(), st.integers(0, max(0, len(data) - 1))))
    return bytes(data if cut is None else data[:cut])


@given(data=hostile_images(), fit=st.integers(1, 64), limit=st.integers(1, 5_000))
def test_the_opener_decodes_within_the_limit_or_refuses(data, fit, limit):
    """Any header, any cut: decode_reduced gives an RGB image of at most ``limit`` pixels, reduced
    to at most twice ``fit`` a side when larger, or ImageRefused; never another exception."""
    from tracebench.images import ImageRefused, decode_reduced, open_image

    try:
        with open_image(data, limit=limit) as image:
            declared = image.size
    except ImageRefused:
        declared = None
    try:
        image = decode_reduced(data, fit, limit=limit)
    except ImageRefused:
        return
    assert declared is not None  # what the header refuses is never decoded
    assert image.mode == "RGB" and image.width * image.height <= max(1, declared[0]) * max(1, declared[1]) <= limit
    if max(declared) >= 4 * fit:
        assert max(image.size) < 4 * fit + 2  # reduced: the consumer resizes a small image


def test_pillow_s_own_limit_is_never_lowered():
    """Pillow's limit backs every other use of Pillow in the process (it also checks the size of
    text it draws): a tiny limit of tracebench's leaves it as it was."""
    from PIL import ImageDraw

    from tracebench.images import ImageTooLarge, open_image

    before = Image.MAX_IMAGE_PIXELS
    with pytest.raises(ImageTooLarge, match="declares 64x48 pixels"):
        with open_image(_small_png(), limit=5):
            pass
    assert Image.MAX_IMAGE_PIXELS == before
    ImageDraw.Draw(Image.new("RGB", (200, 40))).text((2, 2), "Image 1 of a collage")
