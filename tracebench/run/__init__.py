"""Running generators and judges over a benchmark: the harness (resume, shards, verdicts) and
shard merging, re-judging a run's images (``rejudge_run``). Model access itself (providers, cache, retry, concurrency) is ``tracebench.providers``."""

from __future__ import annotations

from ..records import RUN_FILE, VERDICTS_FILE, read_verdicts
from ._harness import (IMAGES_DIR, RunFolder, abstention_reason, abstention_reasons, generated_image, library_of, load_run, make_providers, parse_reply,
                       run_benchmark, shard_of, vote_abstention_reasons)
from ._cost import CostEstimate, format_estimate, read_prices
from ._options import RunIdentity, RunOptions, default_ensemble
from ._merge import merge_runs
from ._rejudge import rejudge_run
from ._stream import CaseIndex, RecordIndex, RunCase, RunStream, stream_run

__all__ = [
    "CaseIndex",
    "CostEstimate",
    "format_estimate",
    "read_prices",
    "IMAGES_DIR",
    "RUN_FILE",
    "RecordIndex",
    "RunCase",
    "RunFolder",
    "RunIdentity",
    "RunOptions",
    "RunStream",
    "abstention_reason", "abstention_reasons",
    "default_ensemble",
    "VERDICTS_FILE",
    "generated_image",
    "library_of",
    "load_run",
    "make_providers",
    "merge_runs",
    "parse_reply",
    "read_verdicts",
    "rejudge_run",
    "run_benchmark",
    "shard_of",
    "vote_abstention_reasons",
    "stream_run",
]
