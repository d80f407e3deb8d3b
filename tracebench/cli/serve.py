"""``trace serve``: the synthetic zoo and the oracle as an OpenAI-compatible HTTP server."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the synthetic zoo and the oracle judge over an OpenAI-compatible API",
                       description="Models synthetic/PROFILE (images) and oracle (chat) for the given benchmarks.")
    p.add_argument("cases_dirs", type=Path, nargs="+", help="benchmark folders whose prompts the server answers")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--latency", type=float, default=0.0, metavar="SECONDS", help="delay added to every request")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic generators")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..serve import serve_forever

    serve_forever(args.cases_dirs, args.host, args.port, args.latency, args.seed)
    return 0
