"""``trace templates``: list or count the canonical templates of some slot levels."""

from __future__ import annotations

import json

from ..formula import template_counts, templates, to_text
from ._args import slot_levels


def register(sub) -> None:
    p = sub.add_parser("templates", help="list or count the template space per slot level",
                       description="The unbound templates of templates/space.toml, in canonical form.")
    p.add_argument("--slots", type=slot_levels, default="1-8", metavar="LEVELS",  # converted when the command runs
                   help="slot levels: 3, 1-8 or 2,4,6 (default 1-8)")
    p.add_argument("--count", action="store_true", help="count instead of listing")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--ascii", action="store_true", help="write + for ⊕")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.count:
        counts = template_counts(args.slots)
        if args.json:
            print(json.dumps({"counts": {str(s): n for s, n in counts.items()}, "total": sum(counts.values())}))
        else:
            for s, n in counts.items():
                print(f"slot {s}\t{n}")
            print(f"total\t{sum(counts.values())}")
        return 0
    listing = templates(args.slots)
    if args.json:
        print(json.dumps({"templates": [{"template": to_text(t, ascii=args.ascii), "slots": s}
                                        for s, ts in listing.items() for t in ts]}, ensure_ascii=False))
    else:
        for s, ts in listing.items():
            for t in ts:
                print(f"{s}\t{to_text(t, ascii=args.ascii)}")
    return 0
