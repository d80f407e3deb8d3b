"""``trace parse FORMULA``: canonical form, slot count and terms of one formula; every g kind it
names must be listed by a subtype of the taxonomy in the term's role."""

from __future__ import annotations

import json

from ..formula import describe_formula, parse
from ..taxonomy import check_formula_kinds


def register(sub) -> None:
    p = sub.add_parser("parse", help="check a formula; print its canonical form and slot count",
                       description="Parse and validate one formula of the TRACE language.")
    p.add_argument("formula", help='the formula, e.g. "C(f1, T_e ⊕ g1) ⊕ g_global" (+ works for ⊕)')
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--ascii", action="store_true", help="write + for ⊕")
    p.set_defaults(run=run)


def run(args) -> int:
    check_formula_kinds(parse(args.formula))
    info = describe_formula(args.formula)
    if args.json:
        print(json.dumps(info, ensure_ascii=False))
    else:
        print(f"{info['ascii'] if args.ascii else info['canonical']}\tslots={info['slots']}")
    return 0
