"""Parse-to-AST throughput of the formula language: the full path against the bare Lark parse.

Two methods are timed side by side, in one run, on the same list of formula strings:

- ``bare``: ``lark_parser(build_ast=False).parse(s)``, the LALR parse of the same grammar
  building a plain Lark tree (no AST, no validation);
- ``full``: ``tracebench.formula.parse(s)``, the LALR parse with the AST builder running
  inside the parser, followed by the structural validation ``analyze``.

The input is ``--n`` distinct formula strings of slot 1..8, drawn deterministically from
``--seed``: templates of the template space are sampled evenly across slot levels, then
each is made concrete by numbering its f and g terms, binding some of them to reference
images, choosing concrete kinds for g and g_global terms, describing some T_e terms, and
printing it with ``+`` or ``⊕`` and one of three whitespace styles. Before any timing,
every string is checked to parse back to the AST it was printed from, with the slot count
of its template, and the strings are checked to be distinct. This pass also warms up
both parsers; building the Lark parsers is not timed.

Each of ``--rounds`` rounds times one pass over all strings per method, alternating which
method goes first; the garbage collector stays enabled (as in real use) and is run before
each pass. The report gives formulas/second per method (median, min and max over rounds)
and the ratio of median times full/bare. The work is single-threaded: it uses one core.

Run from the repository root, in the environment where tracebench is installed::

    python bench/parse_throughput.py [--n 10000] [--seed 0] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import re
import statistics
import sys
from time import perf_counter
from typing import Callable

import lark

from _machine import machine
from tracebench.formula import (
    Anchor,
    AnchorBinding,
    Apply,
    Compose,
    Disentangle,
    DisentangleBinding,
    Expr,
    Node,
    Text,
    lark_parser,
    parse,
    slot_count,
    symbol,
    templates,
    to_text,
)

SLOTS = range(1, 9)

# Concrete kinds a template's g term may become, by the template's kind.
KIND_CHOICES: dict[str | None, tuple[str | None, ...]] = {
    None: (None, "pattern", "material", "color"),
    "attach": ("attach",),
    "ip": ("ip",),
    "rel": ("rel",),
    "global": ("global", "style", "lighting", "view", "bg"),
}
# Attributes a bound g term extracts, by concrete kind (multi-word ones print quoted).
ATTRIBUTES: dict[str | None, tuple[str, ...]] = {
    None: ("pattern", "texture", "shape", "color"),
    "pattern": ("plaid", "polka dots", "floral print", "stripes"),
    "material": ("brass", "knitted wool", "glass", "leather"),
    "color": ("crimson", "pastel blue", "gold"),
    "attach": ("garment", "accessory", "headwear"),
    "ip": ("design", "character design", "motifs"),
    "rel": ("hug", "riding", "holding hands", "chasing"),
    "global": ("composition", "mood"),
    "style": ("watercolor", "pixel art", "ukiyo-e", "oil painting"),
    "lighting": ("golden hour", "neon", "backlight"),
    "view": ("top-down", "close-up", "wide shot"),
    "bg": ("beach", "city street", "snowy forest"),
}
_NOUNS = (
    "dog plush", "corgi", "sneaker", "teapot", "wizard", "girl", "car", "vase",
    "robot", "cat", "backpack", "desk lamp", "astronaut", "knight", "parrot", "bicycle",
)
_ADJECTIVES = ("red", "small", "vintage", "fluffy", "wooden", "striped", "old", "blue", "tiny", "golden")
# Enough entities that slot 1 (4 templates, one image) still yields n/8 distinct strings.
ENTITIES = _NOUNS + tuple(f"{adjective} {noun}" for adjective in _ADJECTIVES for noun in _NOUNS)
ATTACHED = ("robe", "scarf", "sunglasses", "backpack", "crown", "boots", "hat", "jacket")
DESCRIPTIONS = (
    "a wizard", "a small boat", "an old lighthouse", "a knight in armor", "a red fox", "a paper kite",
    "a street musician", "a tiny dragon", "a wooden chair", "a snowman",
)

_STRING = re.compile(r'("(?:[^"\\]|\\.)*")')  # a quoted string of the printed formula
_MAX_TRIES = 1000  # realizations of one template tried before giving up on a new string


class _Realizer:
    """Turns one template into a concrete formula; numbering is per printed symbol."""

    def __init__(self, rng: random.Random, slot: int) -> None:
        self.rng = rng
        self.images = slot  # a formula of slot s refers to at most s reference images
        self.bind = rng.choice((0.0, 0.5, 1.0))  # share of terms that get a binding
        self.counters: dict[str, int] = {}

    def _number(self, node: Node) -> int:
        name = symbol(node)
        self.counters[name] = self.counters.get(name, 0) + 1
        return self.counters[name]

    def _binds(self) -> bool:
        return self.rng.random() < self.bind

    def realize(self, node: Node) -> Node:
        rng = self.rng
        if isinstance(node, Compose):
            return Compose(tuple(self.realize(arg) for arg in node.args))
        if isinstance(node, Apply):
            carrier = self.realize(node.carrier)  # before the modifiers: numbers follow the text
            return Apply(carrier, tuple(self.realize(m) for m in node.modifiers))
        if isinstance(node, Anchor):
            binding = AnchorBinding(rng.randint(1, self.images), rng.choice(ENTITIES)) if self._binds() else None
            return Anchor(self._number(node), binding)
        if isinstance(node, Text):
            return Text(node.name, description=rng.choice(DESCRIPTIONS) if self._binds() else None)
        if isinstance(node, Disentangle):
            kind = rng.choice(KIND_CHOICES[node.kind])
            binding = None
            if self._binds():
                binding = DisentangleBinding(rng.randint(1, self.images), self._entities(kind),
                                             rng.choice(ATTRIBUTES[kind]))
            return Disentangle(kind, self._number(Disentangle(kind)), binding)
        raise TypeError(f"unexpected template node {type(node).__name__}")

    def _entities(self, kind: str | None) -> tuple[str, ...]:
        if kind == "rel":
            return tuple(self.rng.sample(ENTITIES, 2))
        if kind in KIND_CHOICES["global"]:
            return ()
        pool = ATTACHED if kind == "attach" else ENTITIES
        return tuple(self.rng.sample(pool, self.rng.randint(0, 1)))


def _respace(text: str, style: str) -> str:
    """Rewrite the whitespace between tokens (never inside quoted strings)."""
    parts = _STRING.split(text)
    for i in range(0, len(parts), 2):  # even parts lie outside strings
        if style == "compact":
            parts[i] = re.sub(r"\s*([⊕+,])\s*", r"\1", parts[i])
        elif style == "loose":
            parts[i] = parts[i].replace("(", "( ").replace(")", " )")
    return "".join(parts)


def make_formulas(n: int, seed: int) -> list[tuple[str, Expr, int]]:
    """``n`` distinct (text, AST, slot) triples, spread evenly over slot 1..8, in shuffled order."""
    rng = random.Random(seed)
    space = templates(SLOTS)
    seen: set[str] = set()
    formulas: list[tuple[str, Expr, int]] = []
    for position, slot in enumerate(SLOTS):
        quota = n // len(SLOTS) + (position < n % len(SLOTS))
        level = space[slot]
        picks = rng.sample(level, quota) if len(level) >= quota else rng.choices(level, k=quota)
        for template in picks:
            for _ in range(_MAX_TRIES):
                expr = _Realizer(rng, slot).realize(template)
                text = _respace(to_text(expr, ascii=rng.random() < 0.5), rng.choice(("printed", "compact", "loose")))
                if text not in seen:
                    break
            else:
                raise RuntimeError(f"no new formula from template {to_text(template)} after {_MAX_TRIES} tries")
            seen.add(text)
            formulas.append((text, expr, slot))
    rng.shuffle(formulas)
    return formulas


def check_formulas(formulas: list[tuple[str, Expr, int]], bare: Callable[[str], object]) -> None:
    """Every string parses (both ways) to its AST with its slot count; the strings are distinct."""
    for text, expr, slot in formulas:
        parsed = parse(text)
        if parsed != expr:
            raise AssertionError(f"{text!r} parses to {parsed!r}, not {expr!r}")
        if slot_count(parsed) != slot:
            raise AssertionError(f"{text!r} has slot {slot_count(parsed)}, not {slot}")
        bare(text)
    if len({text for text, _, _ in formulas}) != len(formulas):
        raise AssertionError("the formula strings are not distinct")


def time_pass(method: Callable[[str], object], strings: list[str]) -> float:
    """Seconds for one pass of ``method`` over ``strings``."""
    gc.collect()
    start = perf_counter()
    for text in strings:
        method(text)
    return perf_counter() - start


def machine_info() -> dict[str, object]:
    return machine(**{"lark": lark.__version__})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="number of distinct formulas (default 10000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the formula generator (default 0)")
    ap.add_argument("--rounds", type=int, default=5, help="timed passes per method (default 5)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    if args.n < 1 or args.rounds < 1:
        ap.error("--n and --rounds must be positive")

    methods: dict[str, Callable[[str], object]] = {
        "bare": lark_parser(build_ast=False).parse,
        "full": parse,
    }
    formulas = make_formulas(args.n, args.seed)
    check_formulas(formulas, methods["bare"])
    strings = [text for text, _, _ in formulas]

    times: dict[str, list[float]] = {name: [] for name in methods}
    for round_ in range(args.rounds):
        order = list(methods) if round_ % 2 == 0 else list(reversed(methods))
        for name in order:
            times[name].append(time_pass(methods[name], strings))

    n = len(strings)
    result = {
        "machine": machine_info(),
        "command": " ".join(["python", "bench/parse_throughput.py", *sys.argv[1:]]),
        "n": n,
        "seed": args.seed,
        "rounds": args.rounds,
        "slots": {slot: sum(s == slot for _, _, s in formulas) for slot in SLOTS},
        "mean_chars": round(sum(map(len, strings)) / n, 1),
        "methods": {
            name: {
                "seconds": ts,
                "formulas_per_s": {"median": n / statistics.median(ts), "min": n / max(ts), "max": n / min(ts)},
            }
            for name, ts in times.items()
        },
        "ratio_full_over_bare": statistics.median(times["full"]) / statistics.median(times["bare"]),
        "ratio_per_round": [f / b for f, b in zip(times["full"], times["bare"])],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return

    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores{' (virtualized)' if m['virtualized'] else ''}, {m['platform']}")
    print(f"python:  {m['python']}, lark {m['lark']}; single-threaded, one core")
    print(f"input:   {n} distinct formulas, seed {args.seed}, slot 1..8 "
          f"({', '.join(f'{s}:{c}' for s, c in result['slots'].items())}), mean {result['mean_chars']} chars")
    for text in strings[:3]:
        print(f"         e.g. {text}")
    print(f"timing:  {args.rounds} rounds, methods interleaved, time.perf_counter, GC enabled")
    print()
    print(f"{'method':<6} {'formulas/s median':>18} {'min':>10} {'max':>10}")
    for name, data in result["methods"].items():
        rate = data["formulas_per_s"]
        print(f"{name:<6} {rate['median']:>18,.0f} {rate['min']:>10,.0f} {rate['max']:>10,.0f}")
    per_round = result["ratio_per_round"]
    print()
    print(f"full/bare time (medians): {result['ratio_full_over_bare']:.2f}x "
          f"(per round {min(per_round):.2f}x-{max(per_round):.2f}x; target <= 1.5x)")


if __name__ == "__main__":
    main()
