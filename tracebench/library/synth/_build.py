"""Writing libraries: one image and its record, a library folder, the cached default library."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from PIL import Image

from ... import __version__
from ...cache import make_stage
from ...derived import cache_root
from ...errors import TraceError
from .._io import INFO_FILE, TAGS_FILE, staged_output, write_library
from .._models import LibraryInfo, TaggedImage
from ._world import load_world, world_hash

DEFAULT_N = 400
DEFAULT_SEED = 0
DEFAULT_NAME = "tracebench-synthetic"


def image_id(index: int) -> str:
    return f"syn-{index:04d}"


def synthesize_image(index: int, *, seed: int = DEFAULT_SEED) -> tuple[Image.Image, TaggedImage]:
    """Image ``index`` of the synthetic library of ``seed`` and its tagged record."""
    from ._plan import plan_scene  # the drawing modules: only when an image is made
    from ._render import render_scene
    from ._tags import _record

    world = load_world()
    plan = json.loads(json.dumps(plan_scene(seed, index)))  # exactly what the record will hold
    img, render = render_scene(plan)
    ident = image_id(index)
    return img, _record(world, render, ident, f"images/{ident}.png")


def _save_png(img: Image.Image, path: Path) -> None:
    img.save(path, format="PNG", optimize=False, compress_level=6)  # no metadata chunks, fixed options


def synthesize_library(out: Path, *, n: int = DEFAULT_N, seed: int = DEFAULT_SEED,
                       name: str = DEFAULT_NAME) -> LibraryInfo:
    """Render ``n`` synthetic scenes into a new library folder ``out`` (written atomically).

    The same ``n`` and ``seed`` give byte-identical files on the same Pillow version.
    """
    if n < 0:
        raise TraceError(f"n must be >= 0, got {n}")
    with staged_output(Path(out)) as root:
        (root / "images").mkdir()
        records = []
        for index in range(n):
            img, record = synthesize_image(index, seed=seed)
            _save_png(img, root / record.path)
            records.append(record)
        info = write_library(root, name, records)
    return info


def _complete(folder: Path) -> bool:
    return (folder / INFO_FILE).is_file() and (folder / TAGS_FILE).is_file()


def default_library() -> Path:
    """The folder of the default synthetic library, built into the cache on first use.

    The folder name carries the tracebench version, n, seed and a hash of the world
    (taxonomy/synth.toml, the renderer, Pillow's version), so a changed world builds anew.
    Concurrent first uses are safe: each builds privately and renames into place; a
    process that finds the folder already there uses it.
    """
    root = cache_root()
    dest = root / f"synthetic-{__version__}-n{DEFAULT_N}-seed{DEFAULT_SEED}-{world_hash()[:12]}"
    if _complete(dest):
        return dest
    root.mkdir(parents=True, exist_ok=True)
    work = make_stage(root, f".{dest.name}.")
    try:
        synthesize_library(work / "library", n=DEFAULT_N, seed=DEFAULT_SEED)
        try:
            os.rename(work / "library", dest)
        except OSError:
            if not _complete(dest):
                raise TraceError(f"{dest}: exists but is not a complete library; remove it and retry") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest
