"""Running generators and judges over a benchmark: adapters, cache, harness."""

from __future__ import annotations

from ._adapters import CallFailed, ClientSettings, make_generator, make_judge
from ..cache import Cache, cache_key
from ..records import RUN_FILE, VERDICTS_FILE, read_verdicts
from ._harness import IMAGES_DIR, RunFolder, generated_image, load_run, parse_reply, run_benchmark, shard_of
from ._merge import merge_runs

__all__ = [
    "Cache",
    "CallFailed",
    "ClientSettings",
    "IMAGES_DIR",
    "RUN_FILE",
    "RunFolder",
    "VERDICTS_FILE",
    "cache_key",
    "generated_image",
    "load_run",
    "make_generator",
    "make_judge",
    "merge_runs",
    "parse_reply",
    "read_verdicts",
    "run_benchmark",
    "shard_of",
]
