"""``trace run``: generate an image per case and judge it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def _shard(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)/(\d+)", text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shard i/n with 1 <= i <= n, e.g. 2/4")
    return int(match.group(1)), int(match.group(2))


def register(sub) -> None:
    p = sub.add_parser("run", help="generate an image per case and judge it",
                       description="Send every case to a generator and its image to one or more judges.")
    p.add_argument("cases_dir", type=Path, help="a benchmark folder (trace sample's output)")
    p.add_argument("--generator", required=True, metavar="SPEC",
                   help="openai:MODEL, folder:PATH, command:'...' (reads the case on stdin, writes {output}) "
                        "or synthetic:PROFILE")
    p.add_argument("--judge", action="append", required=True, metavar="SPEC",
                   help="openai:MODEL or oracle; repeat for an ensemble (majority vote, ties recorded)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL, then OpenAI)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (loopback servers need none)")
    p.add_argument("--judge-base-url", help="endpoint of the judges when it differs from --base-url")
    p.add_argument("--judge-api-key-env", metavar="VAR", help="key variable of the judges' endpoint")
    p.add_argument("--concurrency", type=int, default=8, help="calls in flight per endpoint (default 8)")
    p.add_argument("--max-retries", type=int, default=4, help="client retries of a failed call, with backoff")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per call")
    p.add_argument("--judge-batch", choices=("case", "op"), default="case",
                   help="one judge call per case (default) or one per operator")
    p.add_argument("--shard", type=_shard, metavar="i/n", help="run only shard i of n (split by case id)")
    p.add_argument("--retry-abstained", action="store_true", help="ask again where a verdict is an abstention")
    p.add_argument("--cache", type=Path, help="cache folder (default RUN_DIR/cache)")
    p.add_argument("--seed", type=int, default=0, help="seed of synthetic generators")
    p.add_argument("--out", type=Path, required=True, help="the run folder (resumed if it holds the same run)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..run import ClientSettings, run_benchmark
    from ..records import SampleManifest

    library = None
    manifest_path = args.cases_dir / "manifest.json"
    if manifest_path.is_file():
        sample = SampleManifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))
        library = Path(sample.arguments["library"]) if sample.arguments.get("library") else None
    settings = ClientSettings(base_url=args.base_url, api_key_env=args.api_key_env,
                              judge_base_url=args.judge_base_url, judge_api_key_env=args.judge_api_key_env,
                              max_retries=args.max_retries, timeout=args.timeout, library=library, seed=args.seed)
    manifest = run_benchmark(args.cases_dir, args.out, generator=args.generator, judges=args.judge,
                             settings=settings, concurrency=args.concurrency, shard=args.shard,
                             judge_batch=args.judge_batch, retry_abstained=args.retry_abstained,
                             cache_dir=args.cache)
    calls = ", ".join(f"{spec}: {n}" for spec, n in manifest.calls.items()) or "none"
    print(f"{args.out}: {manifest.cases} cases, {manifest.verdicts} verdicts, {manifest.abstentions} abstentions; "
          f"calls {calls}; cache hits {manifest.cache_hits}")
    return 0

