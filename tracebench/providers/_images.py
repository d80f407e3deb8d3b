"""Reference images as bytes that remember their hash and their encoding.

A reference image is sent with every call of its case (to the generator and to each judge
call) and hashed into every cache key. :class:`ImageBytes` is ``bytes`` (providers and
plugins use it as such) that computes its SHA-256 and its base64 data URL once; the
harness keeps one per reference file, so a file is read, hashed and encoded once per run.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from functools import cached_property
from pathlib import Path

from ..cache import sha256
from ..safepaths import inside

__all__ = ["ImageBytes", "ReferenceFiles", "data_url", "digest", "image_kind", "image_suffix", "mime_type"]


class ImageBytes(bytes):
    @cached_property
    def sha256(self) -> str:
        return sha256(self)

    @cached_property
    def data_url(self) -> str:
        return f"data:{mime_type(self)};base64,{base64.b64encode(self).decode('ascii')}"


_KINDS = {"jpeg": (".jpg", "image/jpeg"), "webp": (".webp", "image/webp"), "png": (".png", "image/png")}


def _kind(data: bytes) -> str:
    """The format of image bytes, by their signature (a server may answer in JPEG or WebP)."""
    if data.startswith(b"\xff\xd8"):
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "png"


def image_kind(data: bytes) -> str | None:
    """``png``, ``jpeg`` or ``webp`` by the bytes' signature; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    kind = _kind(data)  # png for anything it does not know
    return kind if kind != "png" else None


def mime_type(data: bytes) -> str:
    """The MIME type of image bytes, by their signature."""
    return _KINDS[_kind(data)][1]


def image_suffix(data: bytes) -> str:
    """The file suffix of image bytes, by their signature."""
    return _KINDS[_kind(data)][0]


def digest(data: bytes) -> str:
    """SHA-256 of image bytes (remembered by :class:`ImageBytes`)."""
    return data.sha256 if isinstance(data, ImageBytes) else sha256(data)


def data_url(data: bytes) -> str:
    """The base64 data URL of image bytes (remembered by :class:`ImageBytes`)."""
    return data.data_url if isinstance(data, ImageBytes) else ImageBytes(data).data_url


class ReferenceFiles:
    """The reference images of a benchmark folder, read once each (the most recent ``size`` kept);
    a path that leaves the folder (``..``, absolute, a link pointing out) is a TraceError, never read."""

    def __init__(self, root: Path, size: int = 512) -> None:
        self.root = Path(root)
        self.size = size
        self._kept: OrderedDict[str, ImageBytes] = OrderedDict()

    def get(self, path: str) -> ImageBytes:
        image = self._kept.get(path)
        if image is None:
            image = ImageBytes(inside(self.root, path, f"{self.root}: reference", "benchmark folder").read_bytes())
            self._kept[path] = image
            if len(self._kept) > self.size:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(path)
        return image
