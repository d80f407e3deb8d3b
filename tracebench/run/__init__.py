"""Running generators and judges over a benchmark: the harness (resume, shards, verdicts) and
shard merging. Model access itself (providers, cache, retry, concurrency) is ``tracebench.providers``."""

from __future__ import annotations

from ._harness import (IMAGES_DIR, RUN_FILE, VERDICTS_FILE, RunFolder, generated_image, library_of, load_run,
                       make_providers, parse_reply, read_verdicts, run_benchmark, shard_of)

__all__ = [
    "IMAGES_DIR",
    "RUN_FILE",
    "RunFolder",
    "VERDICTS_FILE",
    "generated_image",
    "library_of",
    "load_run",
    "make_providers",
    "parse_reply",
    "read_verdicts",
    "run_benchmark",
    "shard_of",
]
