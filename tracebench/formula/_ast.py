"""The immutable AST of the formula language.

Nodes are frozen, slotted dataclasses holding tuples, so they hash, compare by value and
can be shared freely. Source positions (``column``/``line``) are carried for error
messages but take no part in equality or hashing: ``parse(print(ast)) == ast`` holds.

A chain ``X ⊕ m1 ⊕ m2`` is one :class:`Apply` whose ``carrier`` is never itself an
Apply: every modifier of a chain acts on the same carrier (as in TRACE-Bench, arXiv 2608.16765), so the AST
states that directly instead of nesting binary nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union

from ._grammar import numbered

__all__ = [
    "Anchor",
    "AnchorBinding",
    "Apply",
    "Compose",
    "Disentangle",
    "DisentangleBinding",
    "Expr",
    "Modifier",
    "Node",
    "Text",
    "walk",
]


def _check_label(value: str, what: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    if "\n" in value or "\r" in value:
        raise ValueError(f"{what} may not contain a line break: {value!r}")


def _check_index(index: int | None, what: str) -> None:
    if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
        raise ValueError(f"{what} index must be a non-negative integer, got {index!r}")


# Hashes are computed on first use and cached (the sympy habit). Formulas are hashed
# constantly (canonical-form caches, template sets, node dedupe in diagnostic trees): a
# dataclass hash would walk the whole subtree every time. Lazy, so parsing pays nothing.

def _node_hash(self) -> int:
    cached = self._hash
    if cached is None:
        cached = hash((type(self).__name__, self._identity()))
        object.__setattr__(self, "_hash", cached)
    return cached


def _node_eq(self, other: object) -> bool:
    if self is other:
        return True
    if type(other) is not type(self):
        return NotImplemented
    return hash(self) == hash(other) and self._identity() == other._identity()


@dataclass(frozen=True, slots=True)
class AnchorBinding:
    """What a bound anchor keeps: entity ``entity`` of reference image ``I<image>``."""

    image: int
    entity: str

    def __post_init__(self) -> None:
        _check_index(self.image, "image")
        _check_label(self.entity, "anchor entity")


@dataclass(frozen=True, slots=True)
class DisentangleBinding:
    """What a bound g term extracts: attribute ``attribute`` of ``entities`` in ``I<image>``.

    ``entities`` keeps its written order (a relation's roles may depend on it) and is
    empty for image-level conditions such as a style.
    """

    image: int
    entities: tuple[str, ...]
    attribute: str

    def __post_init__(self) -> None:
        _check_index(self.image, "image")
        if not isinstance(self.entities, tuple):
            raise TypeError("entities must be a tuple")
        for entity in self.entities:
            _check_label(entity, "g entity")
        _check_label(self.attribute, "g attribute")


@dataclass(frozen=True, slots=True)
class Anchor:
    """``f``: keep the identity of an entity of a reference image."""

    index: int | None = None
    binding: AnchorBinding | None = None
    column: int | None = field(default=None, compare=False, repr=False)
    line: int | None = field(default=None, compare=False, repr=False)
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    # an anchor named without an image, as the paper writes f(person) (Eq. 3): the word naming the
    # entity's category (taxonomy/categories.toml); binding draws the entity from that category
    kind: str | None = None
    __hash__ = _node_hash
    __eq__ = _node_eq

    def __post_init__(self) -> None:
        _check_index(self.index, "anchor")
        if self.kind is not None:
            _check_label(self.kind, "anchor kind")

    def _identity(self) -> tuple:
        return (self.index, self.binding, self.kind)


@dataclass(frozen=True, slots=True)
class Disentangle:
    """``g`` / ``g_<kind>``: extract one attribute. ``kind`` None is the plain ``g``."""

    kind: str | None = None
    index: int | None = None
    binding: DisentangleBinding | None = None
    column: int | None = field(default=None, compare=False, repr=False)
    line: int | None = field(default=None, compare=False, repr=False)
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    __hash__ = _node_hash
    __eq__ = _node_eq

    def __post_init__(self) -> None:
        _check_index(self.index, "g")
        if self.kind is not None and not (isinstance(self.kind, str) and numbered("GSYM", f"g_{self.kind}")):
            raise ValueError(f"g kind {self.kind!r} cannot be written: g_{self.kind} would not read back as that "
                             "kind under grammar/trace.lark's GSYM")

    def _identity(self) -> tuple:
        return (self.kind, self.index, self.binding)


@dataclass(frozen=True, slots=True)
class Text:
    """``T_<name>``: content named only in text (``T_e`` an entity, ``T_rel`` a relation).

    Carries no reference and counts zero slots; ``description`` is the text a bound case
    uses for it (``T_e("a wizard")``).
    """

    name: str = "e"
    index: int | None = None
    description: str | None = None
    column: int | None = field(default=None, compare=False, repr=False)
    line: int | None = field(default=None, compare=False, repr=False)
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    __hash__ = _node_hash
    __eq__ = _node_eq

    def __post_init__(self) -> None:
        _check_index(self.index, "text")
        if not (isinstance(self.name, str) and numbered("TSYM", f"T_{self.name}")):
            raise ValueError(f"text symbol name {self.name!r} cannot be written: T_{self.name} would not read back "
                             "as that name under grammar/trace.lark's TSYM")
        if self.description is not None:
            _check_label(self.description, "text description")

    def _identity(self) -> tuple:
        return (self.name, self.index, self.description)


@dataclass(frozen=True, slots=True)
class Compose:
    """``C(E1, ..., En)``: arrange contents into one scene."""

    args: tuple["Expr", ...]
    index: int | None = None
    column: int | None = field(default=None, compare=False, repr=False)
    line: int | None = field(default=None, compare=False, repr=False)
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    __hash__ = _node_hash
    __eq__ = _node_eq

    def __post_init__(self) -> None:
        _check_index(self.index, "C")
        if not isinstance(self.args, tuple) or not self.args:
            raise ValueError("C needs a non-empty tuple of arguments")
        for arg in self.args:
            if not isinstance(arg, (Anchor, Text, Compose, Apply)):
                raise TypeError(f"a C argument is f, T, C or an Apply, got {type(arg).__name__}")

    def _identity(self) -> tuple:
        return (self.args, self.index)


@dataclass(frozen=True, slots=True)
class Apply:
    """``carrier ⊕ m1 ⊕ ... ⊕ mk``: bind each modifier to the same carrier."""

    carrier: "Expr"
    modifiers: tuple["Modifier", ...]
    column: int | None = field(default=None, compare=False, repr=False)
    line: int | None = field(default=None, compare=False, repr=False)
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    __hash__ = _node_hash
    __eq__ = _node_eq

    def __post_init__(self) -> None:
        if isinstance(self.carrier, Apply):
            raise ValueError("an Apply's carrier is never an Apply: flatten the chain")
        if not isinstance(self.carrier, (Anchor, Text, Compose)):
            raise TypeError(f"a carrier is f, T or C, got {type(self.carrier).__name__}")
        if not isinstance(self.modifiers, tuple) or not self.modifiers:
            raise ValueError("Apply needs a non-empty tuple of modifiers")
        for modifier in self.modifiers:
            if not isinstance(modifier, (Disentangle, Text)):
                raise TypeError(f"a modifier is a g term or a text symbol, got {type(modifier).__name__}")

    def _identity(self) -> tuple:
        return (self.carrier, self.modifiers)


Modifier = Union[Disentangle, Text]
# A g term never stands alone: it is always a modifier of some carrier.
Expr = Union[Anchor, Text, Compose, Apply]
Node = Union[Anchor, Disentangle, Text, Compose, Apply]


def walk(expr: Expr) -> Iterator[Node]:
    """Every node in order of appearance in the printed formula (pre-order)."""
    yield expr
    if isinstance(expr, Compose):
        for arg in expr.args:
            yield from walk(arg)
    elif isinstance(expr, Apply):
        yield from walk(expr.carrier)
        for modifier in expr.modifiers:
            yield modifier


def relabel_images(expr: Expr, images: "dict[int, int]") -> Expr:
    """The formula with every bound term's image number ``k`` replaced by ``images[k]`` (a
    diagnostic sub-case renumbers its images; clutter interleaves distractors among them)."""
    if isinstance(expr, Compose):
        return Compose(tuple(relabel_images(a, images) for a in expr.args), expr.index)
    if isinstance(expr, Apply):
        return Apply(relabel_images(expr.carrier, images),
                     tuple(relabel_images(m, images) for m in expr.modifiers))  # type: ignore[misc]
    if isinstance(expr, Anchor) and expr.binding is not None:
        return Anchor(expr.index, AnchorBinding(images[expr.binding.image], expr.binding.entity))
    if isinstance(expr, Disentangle) and expr.binding is not None:
        b = expr.binding
        return Disentangle(expr.kind, expr.index, DisentangleBinding(images[b.image], b.entities, b.attribute))
    return expr
