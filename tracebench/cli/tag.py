"""``trace tag IMAGES_DIR --model M --out DIR``: tag real images with a vision-language model."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from ..replies import DEFAULT_MAX_REPLY_BYTES
from ._args import EXIT_STATUSES, report_incomplete


def register(sub) -> None:
    p = sub.add_parser("tag", help="tag images with a vision-language model (any OpenAI-compatible server)",
                       description="Tag images in the paper's format with a VLM; writes a library.", epilog=EXIT_STATUSES)
    p.add_argument("images_dir", type=Path)
    p.add_argument("--model", required=True, help="model name on the server")
    p.add_argument("--out", type=Path, required=True, help="folder of the new library")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL, then OpenAI)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (default OPENAI_API_KEY; loopback servers need none)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    p.add_argument("--max-retries", type=int, default=2, help="client retries of a failed request (default 2)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a request may take in all, however slowly the server sends (default 120)")
    p.add_argument("--max-reply-bytes", type=int, default=DEFAULT_MAX_REPLY_BYTES, metavar="N",
                   help=f"a longer reply body is cut off: that image is left out (default {DEFAULT_MAX_REPLY_BYTES})")
    p.add_argument("--name", help="library name (default: the --out folder's name)")
    p.add_argument("--cache", type=Path, help="cache of replies (default: .tracebench-tag-cache beside --out); "
                                              "run the command again to resume")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..library import TagOptions, tag_images  # imported on first use: the openai client costs ~0.4 s

    options = TagOptions(model=args.model, base_url=args.base_url, api_key_env=args.api_key_env,
                         concurrency=args.concurrency, name=args.name, max_retries=args.max_retries,
                         timeout=args.timeout, cache_dir=args.cache, max_reply_bytes=args.max_reply_bytes)
    report = tag_images(args.images_dir, args.out, options)
    if args.json:
        print(report.model_dump_json())
    else:
        print(f"{args.out}: {report.tagged} images tagged, {len(report.skipped)} skipped, {report.calls} requests, "
              f"{report.cache_hits} from the cache")
        for skipped in report.skipped:
            print(f"  skipped {skipped.path}: {skipped.reason}")
    if report.calls == 0 and report.cache_hits:
        print("trace tag: every image came from the cache: the server was not contacted, so the model name and "
              "the key were not checked", file=sys.stderr)
    if not report.skipped:
        return 0
    reasons = Counter(s.reason for s in report.skipped).most_common(3)
    return report_incomplete("trace tag", f"{len(report.skipped)} of {len(report.skipped) + report.tagged} images "
                                          f"could not be tagged (left out of the library)", reasons, retry_flag=None)
