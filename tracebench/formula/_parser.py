"""Text -> AST: Lark's LALR parser (strict) with one Transformer building the AST inline.

The Transformer runs inside the parser (``Lark(transformer=...)``), so no parse tree is
built: AST nodes are created as rules reduce. Lark's exceptions never leave this module;
every failure becomes a :class:`FormulaSyntaxError` naming the column.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from ..resources import read_text
from ._ast import Anchor, AnchorBinding, Apply, Compose, Disentangle, DisentangleBinding, Expr, Text
from ._errors import FormulaError, FormulaSyntaxError
from ._language import language

__all__ = ["parse_syntax", "lark_parser"]

_GSYM = re.compile(r"g(?:_([a-z_]+?))?([0-9]*)")
_TSYM = re.compile(r"T(?:e|_([a-z_]+?))([0-9]*)")
_UNESCAPE = re.compile(r"\\(.)")

# How the parser's terminals read in an error message.
_TERMINAL_NAMES = {
    "ASYM": "f",
    "GSYM": "a g term",
    "TSYM": "a T symbol",
    "CSYM": "C(",
    "IMAGE": "an image such as I1",
    "WORD": "a word",
    "STRING": 'a "quoted string"',
    "_OPLUS": "⊕",
    "_LPAR": "'('",
    "_RPAR": "')'",
    "_LBRACE": "'{'",
    "_RBRACE": "'}'",
    "_COMMA": "','",
    "$END": "the end of the formula",
}


def _index(digits: str) -> int | None:
    return int(digits) if digits else None


def _string(token: Token) -> str:
    if token.type != "STRING":
        return str(token)
    inner = token[1:-1]
    return _UNESCAPE.sub(r"\1", inner) if "\\" in inner else inner


@lru_cache(maxsize=1024)
def _g_symbol(spelling: str) -> tuple[str | None, int | None] | None:
    """``g_attach1`` -> ("attach", 1); None for an unknown kind."""
    spelled, digits = _GSYM.fullmatch(spelling).groups()
    if spelled is None:
        return None, _index(digits)
    kind = language().resolve_kind(spelled)
    return None if kind is None else (kind, _index(digits))


@lru_cache(maxsize=256)
def _t_symbol(spelling: str) -> tuple[str, int | None] | None:
    """``T_s1`` -> ("s", 1), ``Te`` -> ("e", None); None for an unknown name."""
    spelled, digits = _TSYM.fullmatch(spelling).groups()
    name = spelled or "e"
    return (name, _index(digits)) if name in language().texts else None


class _Builder(Transformer):
    """One method per grammar rule, each taking the rule's children and returning an AST
    node (or a part of a binding). The methods take the children list as Lark passes it
    (no ``v_args`` wrapper): the builder runs once per reduction, on the parse's hot path.
    """

    def __init__(self) -> None:
        super().__init__(visit_tokens=False)

    def start(self, children: list) -> Expr:
        return children[0]

    def apply(self, children: list) -> Apply:
        carrier, modifiers = children[0], tuple(children[1:])
        if isinstance(carrier, Apply):  # "(f ⊕ g1) ⊕ g2" is the chain f ⊕ g1 ⊕ g2
            return Apply(carrier.carrier, carrier.modifiers + modifiers, column=carrier.column, line=carrier.line)
        return Apply(carrier, modifiers, column=carrier.column, line=carrier.line)

    def compose(self, children: list) -> Compose:
        symbol = children[0]
        return Compose(tuple(children[1:]), _index(symbol[1:]), column=symbol.column, line=symbol.line)

    def anchor(self, children: list) -> Anchor:
        symbol, image, entity = children
        binding = None if image is None else AnchorBinding(int(image[1:]), _string(entity))
        return Anchor(_index(symbol[1:]), binding, column=symbol.column, line=symbol.line)

    def gterm(self, children: list) -> Disentangle:
        symbol, image, entities, attribute = children
        decoded = _g_symbol(symbol)
        if decoded is None:
            known = ", ".join(f"g_{name}" for name in language().kinds)
            raise FormulaSyntaxError(
                f"unknown g kind '{symbol.rstrip('0123456789')}' (known: g, {known}; add kinds in taxonomy/kinds.toml)",
                column=symbol.column,
                line=symbol.line,
            )
        binding = None
        if image is not None:
            binding = DisentangleBinding(int(image[1:]), entities or (), _string(attribute))
        return Disentangle(decoded[0], decoded[1], binding, column=symbol.column, line=symbol.line)

    def text(self, children: list) -> Text:
        symbol, description = children
        decoded = _t_symbol(symbol)
        if decoded is None:
            known = ", ".join(f"T_{n}" for n in language().texts)
            raise FormulaSyntaxError(
                f"unknown text symbol '{symbol}' (known: Te, {known})", column=symbol.column, line=symbol.line
            )
        return Text(decoded[0], decoded[1], None if description is None else _string(description),
                    column=symbol.column, line=symbol.line)

    def entity_set(self, children: list) -> tuple[str, ...]:
        return tuple(_string(s) for s in children if s is not None)

    def entity_one(self, children: list) -> tuple[str, ...]:
        return (_string(children[0]),)


@cache
def lark_parser(*, build_ast: bool = True) -> Lark:
    """The Lark parser of grammar/trace.lark; ``build_ast=False`` gives the bare tree parser."""
    return Lark(
        read_text("grammar", "trace.lark"),
        parser="lalr",
        lexer="contextual",
        strict=True,
        maybe_placeholders=True,
        transformer=_Builder() if build_ast else None,
    )


def parse_syntax(text: str) -> Expr:
    """Parse text into an AST without checking the language's structural rules."""
    if not isinstance(text, str):
        raise TypeError(f"a formula is a string, got {type(text).__name__}")
    if not text.strip():
        raise FormulaSyntaxError("empty formula")
    try:
        return lark_parser().parse(text)
    except FormulaError:
        raise
    except VisitError as exc:  # an error raised by the builder, wrapped by lark
        if isinstance(exc.orig_exc, FormulaError):
            raise exc.orig_exc from None
        raise FormulaSyntaxError(str(exc.orig_exc)) from None
    except UnexpectedInput as exc:
        raise _syntax_error(text, exc) from None
    except ValueError as exc:  # an AST invariant (e.g. a line break inside a string)
        raise FormulaSyntaxError(str(exc)) from None


def _expected(names) -> str:
    readable = sorted({_TERMINAL_NAMES.get(n, n) for n in names})
    return ", ".join(readable)


def _syntax_error(text: str, exc: UnexpectedInput) -> FormulaSyntaxError:
    if isinstance(exc, UnexpectedCharacters):
        char = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        return FormulaSyntaxError(
            f"unexpected character {char!r}; expected {_expected(exc.allowed)}", column=exc.column, line=exc.line
        )
    if isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        expected = getattr(exc, "expected", None) or getattr(exc, "accepts", None) or set()
        last_line = text.rstrip().count("\n") + 1
        last_col = len(text.rstrip().split("\n")[-1]) + 1
        return FormulaSyntaxError(
            f"the formula ends too early; expected {_expected(expected)}", column=last_col, line=last_line
        )
    assert isinstance(exc, UnexpectedToken)
    token = exc.token
    expected = exc.accepts or exc.expected
    # The contextual lexer names a token by what the parser state accepts, so a misplaced
    # symbol may arrive as a WORD: read its spelling instead.
    is_g = _GSYM.fullmatch(token) is not None
    is_term = is_g or _TSYM.fullmatch(token) is not None or re.fullmatch(r"[fC][0-9]*", token) is not None
    if is_g and "ASYM" in expected:
        message = f"'{token}' needs a carrier: write f ⊕ {token} or T_e ⊕ {token}"
    elif is_term and not is_g and "GSYM" in expected:
        message = f"'{token}' cannot be bound with ⊕, which takes a g term or T_rel; to put things in one scene write C(..., {token})"
    elif is_term and "_OPLUS" in expected:
        message = f"unexpected '{token}': separate the arguments of C with ',' or bind with ⊕"
    else:
        message = f"unexpected '{token}'; expected {_expected(expected)}"
    return FormulaSyntaxError(message, column=token.column, line=token.line)
