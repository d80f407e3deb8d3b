"""Opening an image tracebench did not make: the one place that does it.

Images come from folders other people made (reference libraries, benchmarks, run folders,
a server's or a command's output). A few hundred bytes can declare 100000 x 100000 pixels
(a PNG whose zlib stream is tiny, a JPEG whose frame header says 65000 x 65000), and a
valid 0.5 MB PNG of 13000 x 13000 pixels decodes to 0.7 GB. So every image is opened here:

- :func:`open_image` reads the header only (Pillow's ``Image.open`` is lazy: no pixel is
  decoded) and refuses an image that declares more than :func:`max_image_pixels` pixels,
  before anything is decoded. Pillow's own check (``Image.MAX_IMAGE_PIXELS``, a warning past
  it and ``DecompressionBombError`` past twice it) stays as the backstop of every other use of
  Pillow in the process; it is raised to tracebench's limit when the user raises that past
  Pillow's default (89 megapixels), never lowered (Pillow also checks the size of text it
  draws against it). Its warning is silenced: the images it warns of are past the default
  limit, refused here with a reason of tracebench's.
- :func:`decode_reduced` decodes an image for a consumer that shows it small (the report's
  thumbnails, a collage's cells): a JPEG at 1/2, 1/4 or 1/8 of its size (``Image.draft``:
  the DCT decodes fewer pixels), any other format whole and then reduced by an integer
  factor (``Image.reduce``) without a full-size copy for RGB, RGBA, L and LA images; images
  above :data:`LARGE_PIXELS` are decoded one at a time in the process.

Whatever Pillow raises on hostile bytes (``UnidentifiedImageError``, ``OSError`` of a
truncated file, ``SyntaxError``, ``ValueError``, ``struct.error``, ``EOFError``, the bomb
error...) becomes :class:`ImageRefused`, a :class:`~tracebench.errors.TraceError` whose
message says why without naming the file: the caller names it (an input of the user's is a
one-line error, a generated image an abstention, the report a placeholder).

The memory bound of one image decoded by :func:`decode_reduced`: Pillow holds a decoded pixel
in 4 bytes (RGB, RGBA, LA, CMYK), 2 (16-bit grey) or 1 (L, palette, 1-bit); an RGB image is
reduced without a copy, RGBA, L and LA one band at a time (1 byte a pixel more), palette,
1-bit and 16-bit ones converted to RGB first (4 bytes a pixel more). So at most
:data:`BYTES_PER_PIXEL` (8) bytes a pixel of the limit, 320 MB at the default 40 megapixels;
4-5 bytes (160-200 MB) for RGB, RGBA and palette PNGs and WebPs; a JPEG shown small
decodes down to 1/64 of its pixels. Only one image above :data:`LARGE_PIXELS` is decoded at a time.
"""

from __future__ import annotations

import io
import os
import threading
import warnings
from contextlib import contextmanager, nullcontext
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from .errors import TraceError

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["BYTES_PER_PIXEL", "LARGE_PIXELS", "LIMIT_VARIABLE", "MAX_IMAGE_PIXELS", "ImageRefused", "ImageTooLarge",
           "decode_reduced", "decoding", "max_image_pixels", "open_image", "too_large"]

MAX_IMAGE_PIXELS = 40_000_000  # the most pixels an image may declare (8000 x 5000); LIMIT_VARIABLE raises it
LIMIT_VARIABLE = "TRACEBENCH_MAX_IMAGE_PIXELS"  # the user's own setting of the limit, in pixels
LARGE_PIXELS = 4_000_000  # an image decoding to more pixels than this is decoded one at a time in the process
BYTES_PER_PIXEL = 8  # the most one image decoded by decode_reduced costs, per pixel of the limit

_SCALED = ("JPEG", "MPO")  # formats Pillow decodes at 1/2, 1/4 or 1/8 scale (Image.draft)
_NOT_DECODED = ("EPS",)  # Pillow decodes EPS by running Ghostscript on the file: not on bytes from others
_LARGE = threading.Lock()


@cache
def _pillow():
    """Pillow, imported when an image is first opened (the CLI starts without it)."""
    from PIL import Image

    return Image


@cache
def _pillow_default() -> int | None:
    """Pillow's own limit as this process found it (None: switched off by someone else)."""
    return _pillow().MAX_IMAGE_PIXELS


def _pillow_limit(limit: int) -> int | None:
    """Pillow's limit for an open under ``limit``: its own, or ``limit`` when that is higher."""
    default = _pillow_default()
    return None if default is None else max(default, limit)


class ImageRefused(TraceError):
    """An image that is not opened or decoded; the message says why, the caller names the file.
    ``cause``: what Pillow raised, if it raised (a caller may keep the wording it always gave)."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class ImageTooLarge(ImageRefused):
    """An image that declares more pixels than the limit (refused before any pixel is decoded)."""


def max_image_pixels() -> int:
    """The pixel limit: ``TRACEBENCH_MAX_IMAGE_PIXELS`` when set (a whole number, ``_`` allowed:
    ``200_000_000``), else :data:`MAX_IMAGE_PIXELS`. A value that is not a positive whole
    number is a TraceError naming the variable."""
    text = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not text:
        return MAX_IMAGE_PIXELS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise TraceError(f"{LIMIT_VARIABLE}={text!r}: not a positive whole number of pixels "
                         f"(the default is {MAX_IMAGE_PIXELS:_})")
    return value


def _megapixels(pixels: int) -> str:
    """Pixels in megapixels, exactly: 169, 0.02, 10000."""
    return format(Decimal(pixels) / 1_000_000, "f")


def _refusal(width: int, height: int, limit: int) -> ImageTooLarge:
    return ImageTooLarge(f"declares {width}x{height} pixels, {_megapixels(width * height)} megapixels, above the "
                         f"limit of {_megapixels(limit)} megapixels ({LIMIT_VARIABLE} raises it)")


def _why(err: BaseException) -> str:
    Image = _pillow()
    if isinstance(err, Image.DecompressionBombError):  # past twice the limit: Pillow refused it first
        return "declares more pixels than the limit"
    if isinstance(err, Image.UnidentifiedImageError):
        return "not an image Pillow reads"
    text = " ".join(str(err).split())
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


@contextmanager
def open_image(source: bytes | Path | str, *, limit: int | None = None) -> Iterator[Image.Image]:
    """The image of ``source`` (bytes, or a file's path) with its header read and nothing
    decoded (``image.size``, ``image.format``, ``image.mode``, ``image.info`` of the chunks
    before the pixels), closed on leaving. Raises :class:`ImageRefused` when it is not an
    image Pillow reads or it declares more than ``limit`` pixels (default
    :func:`max_image_pixels`)."""
    Image = _pillow()
    limit = max_image_pixels() if limit is None else limit
    # Pillow warns of an image past its limit, which is ours: such an image is refused below with
    # a reason of ours, so the warning would only repeat it on stderr. (Set at each open: a caller's
    # catch_warnings, pytest's for one, restores the filters it found.)
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    Image.MAX_IMAGE_PIXELS = _pillow_limit(limit)  # never below Pillow's own: only raised with ours
    opened = io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview)) else source
    try:
        image = Image.open(opened)
    except Image.DecompressionBombError:
        image = None
    except Exception as err:  # noqa: BLE001 - a parser of hostile bytes raises many types; each is a refusal
        raise ImageRefused(_why(err), err) from None
    if image is None:  # Pillow read the size and refused it: read it again for the message
        raise _declared(opened, limit)
    with image:
        width, height = image.size
        if max(1, width) * max(1, height) > limit:  # Pillow's count: a side of 0 counts as 1
            raise _refusal(width, height, limit)
        yield image


def _declared(opened, limit: int) -> ImageTooLarge:
    """The refusal of an image Pillow refused (it declares more than twice its own limit), naming
    its declared size: the header read again with Pillow's check off for that one open. (Another
    thread opening meanwhile is still refused by :func:`open_image`'s own check, made before
    any pixel is decoded.)"""
    Image = _pillow()
    if hasattr(opened, "seek"):
        opened.seek(0)
    try:
        Image.MAX_IMAGE_PIXELS = None
        with Image.open(opened) as image:
            width, height = image.size
    except Exception:  # noqa: BLE001
        return ImageTooLarge(f"declares more pixels than the limit of {_megapixels(limit)} megapixels "
                             f"({LIMIT_VARIABLE} raises it)")
    finally:
        Image.MAX_IMAGE_PIXELS = _pillow_limit(limit)
    return _refusal(width, height, limit)


@contextmanager
def decoding(pixels: int) -> Iterator[None]:
    """Held while an image of ``pixels`` pixels is decoded: above :data:`LARGE_PIXELS`, one
    such image at a time in the process (the report's threads, a Ray worker's calls)."""
    with _LARGE if pixels > LARGE_PIXELS else nullcontext():
        yield


def decode_reduced(source: bytes | Path | str, fit: int, *, limit: int | None = None) -> Image.Image:
    """The image of ``source`` as RGB, decoded for showing within ``fit`` x ``fit`` pixels:
    reduced by a whole factor that keeps its longer side at least ``2 * fit`` (a JPEG decoded
    at that scale), or whole when it is no larger; equal to ``image.convert("RGB")`` reduced by
    that factor. The caller resizes it to its final size. Raises :class:`ImageRefused` (see
    :func:`open_image`; also a truncated or undecodable image, and EPS, which Pillow decodes by
    running Ghostscript)."""
    with open_image(source, limit=limit) as image:
        if image.format in _NOT_DECODED:
            raise ImageRefused(f"an {image.format} image; tracebench does not decode it (Pillow runs Ghostscript)")
        try:
            if image.format in _SCALED:
                image.draft(None, (2 * fit, 2 * fit))  # the size decoded: the DCT scaled down by 1, 2, 4 or 8
            with decoding(image.width * image.height):
                image.load()
                return _rgb_reduced(image, max(1, max(image.size) // (2 * fit)))
        except ImageRefused:
            raise
        except Exception as err:  # noqa: BLE001 - truncated data, a broken stream, a mode Pillow cannot convert
            raise ImageRefused(f"cannot decode ({_why(err)})", err) from None


def _rgb_reduced(image: Image.Image, factor: int) -> Image.Image:
    """``image.convert("RGB").reduce(factor)`` without a full-size copy where it can: RGB is
    reduced as it is, L, LA and RGBA band by band (the alpha band dropped, as convert drops it)."""
    Image = _pillow()
    if factor == 1:
        return image.convert("RGB")
    if image.mode == "RGB":
        return image.reduce(factor)
    if image.mode in ("L", "LA"):
        return image.getchannel("L").reduce(factor).convert("RGB")
    if image.mode in ("RGBA", "RGBX"):
        return Image.merge("RGB", [image.getchannel(band).reduce(factor) for band in "RGB"])
    return image.convert("RGB").reduce(factor)  # palette, 1-bit, 16-bit, CMYK: one RGB copy


def too_large(data: bytes) -> str | None:
    """Why ``data`` is refused when it declares more pixels than the limit (header only), else
    None: also for bytes that are no image, which a judge may still be sent (the run's check of
    a generated image)."""
    try:
        with open_image(data):
            return None
    except ImageTooLarge as err:
        return str(err)
    except ImageRefused:
        return None
