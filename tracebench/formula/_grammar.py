"""grammar/trace.lark and its terminals: the one statement of how symbols, words and strings are spelled.

The parser builds on this grammar, and everything else that must agree with it (the printer
deciding whether an attribute needs quotes, the AST refusing a kind it could not print, the
vocabulary refusing a kind the lexer could not read, the parser's error messages naming what
a stray token looks like) asks :func:`spells` here instead of restating a regular expression.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache

from lark import Lark

from ..errors import DataError
from ..resources import read_text

__all__ = ["GRAMMAR_FILE", "build_lark", "lark_options", "numbered", "spells", "split_index", "terminal", "tree_parser"]

GRAMMAR_FILE = "trace.lark"
_DIGITS = "0123456789"


def lark_options() -> dict:
    """The options every parser of the grammar is built with."""
    return {"parser": "lalr", "lexer": "contextual", "strict": True, "maybe_placeholders": True}


def build_lark(transformer=None) -> Lark:
    """A Lark parser of the grammar (with ``transformer`` run as rules reduce).

    Building the LALR tables takes about 0.3 s; they are kept in the derived-data folder
    (:mod:`tracebench.derived`) by Lark's own cache, which checks them against the grammar
    text, the options and Lark's version before use and rebuilds them when they differ."""
    import os
    import sys

    import lark

    from ..cache import cache_key
    from ..derived import derived_path, prune

    text = read_text("grammar", GRAMMAR_FILE)
    options = lark_options()
    key = cache_key(grammar=text, options=options, lark=lark.__version__, python=list(sys.version_info[:2]))
    path = derived_path("lark", key, ".pickle")
    # Lark writes a missing cache file in place; written under a name of this process's own and
    # renamed, a process starting meanwhile never reads half of it
    fresh = path is not None and not path.exists()
    target = path.with_name(f"{path.name}.{os.getpid()}.tmp") if fresh else path
    if target is not None:
        options["cache"] = str(target)
    try:
        parser = Lark(text, transformer=transformer, **options)
    except lark.exceptions.LarkError as err:  # a mistake in the grammar file: one line naming it
        raise DataError(f"grammar/{GRAMMAR_FILE}", _first_line(err)) from None
    if fresh and target.exists():
        try:
            target.chmod(0o600)  # Lark writes it with the umask's permissions
            os.replace(target, path)
        except OSError:
            target.unlink(missing_ok=True)
        else:
            prune(path)
    return parser


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


@cache
def tree_parser() -> Lark:
    """The grammar's parser without the AST builder (it returns Lark trees)."""
    return build_lark()


@cache
def terminal(name: str) -> re.Pattern[str]:
    """The compiled pattern of one terminal of the grammar (``WORD``, ``GSYM`` ...)."""
    return re.compile(tree_parser().get_terminal(name).pattern.to_regexp())


@lru_cache(maxsize=4096)
def spells(name: str, text: str) -> bool:
    """Whether ``text`` is, as a whole, one token of terminal ``name``."""
    return terminal(name).fullmatch(text) is not None


def split_index(spelling: str) -> tuple[str, int | None]:
    """A symbol's stem and number: ``g_attach12`` -> ("g_attach", 12); ``Te`` -> ("Te", None).

    Numbering is the symbol's trailing digits, so a stem may not end with a digit (see
    :func:`numbered`)."""
    stem = spelling.rstrip(_DIGITS)
    digits = spelling[len(stem):]
    return stem, int(digits) if digits else None


@lru_cache(maxsize=1024)
def numbered(name: str, stem: str) -> bool:
    """Whether ``stem``, bare or numbered, is a token of terminal ``name`` that reads back as
    ``stem``: what the printer writes for a symbol, the parser must read as the same symbol."""
    return bool(stem) and stem[-1] not in _DIGITS and all(spells(name, stem + n) for n in ("", "1", "12"))
