"""Text -> AST: Lark's LALR parser (strict) with one Transformer building the AST inline.

The Transformer runs inside the parser (``Lark(transformer=...)``), so no parse tree is
built: AST nodes are created as rules reduce, and an error a builder method raises reaches
the caller unwrapped. Lark's exceptions never leave this module; every failure becomes a
:class:`FormulaSyntaxError` naming the column. How a symbol, word or string is spelled is
the grammar's (``_grammar``), never restated here.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from ._ast import Anchor, AnchorBinding, Apply, Compose, Disentangle, DisentangleBinding, Expr, Node, Text
from ._errors import FormulaSyntaxError
from ._grammar import build_lark, spells, split_index, tree_parser
from ._language import check_spellings, language

__all__ = ["parse_syntax", "lark_parser"]

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


def _bounded(*tokens: Token | None) -> None:
    """Refuse a symbol or image numbered with more digits than grammar/language.toml allows
    (before ``int()`` reads them: Python's own limit names no column)."""
    for token in tokens:
        if token is None:
            continue
        digits = len(token) - len(token.rstrip("0123456789"))
        if digits > language().max_number_digits:
            raise FormulaSyntaxError(f"'{token[:len(token) - digits]}' is numbered with {digits} digits; a number "
                                     f"has at most {language().max_number_digits}", column=token.column, line=token.line)


def _string(token: Token) -> str:
    if token.type != "STRING":
        return str(token)
    inner = token[1:-1]
    return _UNESCAPE.sub(r"\1", inner) if "\\" in inner else inner


@lru_cache(maxsize=1024)
def _g_symbol(spelling: str) -> tuple[str | None, int | None] | None:
    """A GSYM token: ``g_attach1`` -> ("attach", 1), ``g2`` -> (None, 2); None for an unknown kind."""
    stem, index = split_index(spelling)
    if stem == "g":
        return None, index
    kind = language().resolve_kind(stem.removeprefix("g_"))
    return None if kind is None else (kind, index)


@lru_cache(maxsize=256)
def _t_symbol(spelling: str) -> tuple[str, int | None] | None:
    """A TSYM token: ``T_s1`` -> ("s", 1), ``Te`` -> ("e", None); None for an unknown name."""
    stem, index = split_index(spelling)
    name = "e" if stem == "Te" else stem.removeprefix("T_")
    return (name, index) if name in language().texts else None


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
        _bounded(symbol)
        return Compose(tuple(children[1:]), split_index(symbol)[1], column=symbol.column, line=symbol.line)

    def anchor(self, children: list) -> Anchor:
        symbol, image, entity = children
        _bounded(symbol, image)
        binding = None if image is None else AnchorBinding(split_index(image)[1], _string(entity))
        return Anchor(split_index(symbol)[1], binding, column=symbol.column, line=symbol.line)

    def anchor_kind(self, children: list) -> Anchor:
        symbol, word = children
        words = language().category_words  # the words of taxonomy/categories.toml
        if str(word).lower() not in words:
            raise FormulaSyntaxError(f"f({word}): no category is named {str(word)!r} (known: {', '.join(words)})",
                                     column=word.column, line=word.line)
        return Anchor(split_index(symbol)[1], kind=str(word).lower(), column=symbol.column, line=symbol.line)

    def gterm(self, children: list) -> Disentangle:
        symbol, image, entities, attribute = children
        _bounded(symbol, image)
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
            binding = DisentangleBinding(split_index(image)[1], entities or (), _string(attribute))
        return Disentangle(decoded[0], decoded[1], binding, column=symbol.column, line=symbol.line)

    def text(self, children: list) -> Text:
        symbol, description = children
        _bounded(symbol)
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
    if not build_ast:
        return tree_parser()
    check_spellings(language())  # the vocabulary must be writable in this grammar
    return build_lark(transformer=_Builder())


def parse_syntax(text: str) -> Expr:
    """Parse text into an AST without checking the language's structural rules."""
    if not isinstance(text, str):
        raise TypeError(f"a formula is a string, got {type(text).__name__}")
    if not text.strip():
        raise FormulaSyntaxError("empty formula")
    limit = language().max_formula_length
    if len(text) > limit:
        line = text.count("\n", 0, limit) + 1
        raise FormulaSyntaxError(f"the formula is {len(text)} characters long; at most {limit} are allowed",
                                 column=limit - (text.rfind("\n", 0, limit) + 1) + 1, line=line)
    try:
        expr = lark_parser().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(text, exc) from None
    _check_terms(expr)
    return expr


def _check_terms(expr: Expr) -> None:
    """At most grammar/language.toml's ``max_terms`` f, g and T terms; the error names the
    first term past it. Without recursion: nothing has checked the nesting yet."""
    terms: list[Node] = []
    stack: list[Node] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Compose):
            stack.extend(node.args)
        elif isinstance(node, Apply):
            stack.append(node.carrier)
            stack.extend(node.modifiers)
        else:
            terms.append(node)
    limit = language().max_terms
    if len(terms) > limit:
        first_past = sorted(terms, key=lambda n: (n.line or 0, n.column or 0))[limit]
        raise FormulaSyntaxError(f"the formula has {len(terms)} terms (f, g and T); at most {limit} are allowed",
                                 column=first_past.column, line=first_past.line)


def _expected(names) -> str:
    readable = sorted({_TERMINAL_NAMES.get(n, n) for n in names})
    return ", ".join(readable)


def _syntax_error(text: str, exc: UnexpectedInput) -> FormulaSyntaxError:
    if isinstance(exc, UnexpectedCharacters):
        char = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        return FormulaSyntaxError(
            f"unexpected character {char!r}; expected {_expected(exc.allowed)}", column=exc.column, line=exc.line
        )
    assert isinstance(exc, UnexpectedToken)  # LALR raises nothing else
    expected = exc.accepts or exc.expected
    if exc.token.type == "$END":
        last_line = text.rstrip().count("\n") + 1
        last_col = len(text.rstrip().split("\n")[-1]) + 1
        return FormulaSyntaxError(
            f"the formula ends too early; expected {_expected(expected)}", column=last_col, line=last_line
        )
    token = exc.token
    # The contextual lexer names a token by what the parser state accepts, so a misplaced
    # symbol may arrive as a WORD: read its spelling with the grammar's own terminals.
    is_g = spells("GSYM", token)
    is_term = is_g or any(spells(name, token) for name in ("TSYM", "ASYM", "CSYM"))
    if is_g and "ASYM" in expected:
        message = f"'{token}' needs a carrier: write f ⊕ {token} or T_e ⊕ {token}"
    elif is_term and not is_g and "GSYM" in expected and spells("CSYM", token):  # a composition needs its arguments
        message = (f"'{token}' cannot be bound with ⊕, which takes a g term or T_rel; to put a composition in one "
                   f"scene with other things write C(..., {token}(...))")
    elif is_term and not is_g and "GSYM" in expected:
        message = f"'{token}' cannot be bound with ⊕, which takes a g term or T_rel; to put things in one scene write C(..., {token})"
    elif is_term and "_OPLUS" in expected:
        message = f"unexpected '{token}': separate the arguments of C with ',' or bind with ⊕"
    else:
        message = f"unexpected '{token}'; expected {_expected(expected)}"
    return FormulaSyntaxError(message, column=token.column, line=token.line)
