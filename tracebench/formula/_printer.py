"""AST -> text, in the Unicode (``⊕``) or ASCII (``+``) spelling.

The printer is the inverse of the parser: ``parse(to_text(ast)) == ast`` for every AST.
Whether an attribute can stand as a bare word is the grammar's ``WORD`` terminal
(``_grammar``); in an attribute's place the contextual lexer expects only a word or a
string, so a word that looks like a symbol (``I2``, ``f1``) needs no quotes either.
"""

from __future__ import annotations

from ._ast import Anchor, Apply, Compose, Disentangle, Expr, Node, Text
from ._grammar import spells

__all__ = ["to_text", "symbol"]


def _number(index: int | None) -> str:
    return "" if index is None else str(index)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _word_or_quote(value: str) -> str:
    return value if spells("WORD", value) else _quote(value)


def symbol(node: Node) -> str:
    """The node's symbol without binding: ``f1``, ``g_rel``, ``T_e``, ``C2``."""
    if isinstance(node, Anchor):
        return "f" + _number(node.index)
    if isinstance(node, Disentangle):
        return ("g" if node.kind is None else f"g_{node.kind}") + _number(node.index)
    if isinstance(node, Text):
        return f"T_{node.name}" + _number(node.index)
    if isinstance(node, Compose):
        return "C" + _number(node.index)
    raise TypeError(f"{type(node).__name__} has no symbol")


def to_text(expr: Expr, *, ascii: bool = False) -> str:
    """Print a formula; ``ascii=True`` writes ``+`` for ``⊕``."""
    plus = " + " if ascii else " ⊕ "
    return _print(expr, plus)


def _print(node: Node, plus: str) -> str:
    if isinstance(node, Apply):
        return plus.join([_print(node.carrier, plus), *(_print(m, plus) for m in node.modifiers)])
    if isinstance(node, Compose):
        return symbol(node) + "(" + ", ".join(_print(a, plus) for a in node.args) + ")"
    if isinstance(node, Anchor):
        if node.binding is None:
            return symbol(node) if node.kind is None else f"{symbol(node)}({node.kind})"
        return f"{symbol(node)}(I{node.binding.image}, {_quote(node.binding.entity)})"
    if isinstance(node, Disentangle):
        if node.binding is None:
            return symbol(node)
        b = node.binding
        parts = [f"I{b.image}"]
        if b.entities:
            parts.append("{" + ", ".join(_quote(e) for e in b.entities) + "}")
        parts.append(_word_or_quote(b.attribute))
        return f"{symbol(node)}({', '.join(parts)})"
    if isinstance(node, Text):
        if node.description is None:
            return symbol(node)
        return f"{symbol(node)}({_quote(node.description)})"
    raise TypeError(f"cannot print {type(node).__name__}")
