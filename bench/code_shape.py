"""The shape of tracebench's functions against the house limits: lines, complexity, parameters.

Every function and method of ``tracebench/`` (nested ones too), except the synthetic library's
drawing code (``tracebench/library/synth/``): its lines (``def`` to last line), its cyclomatic
complexity (radon's McCabe count, nested functions counted on their own) and its parameters
(``self``/``cls`` not counted; an ``__init__`` of a frozen record, a frozen dataclass or pydantic
model, is exempt: such a constructor takes one argument per field). Prints the functions past a
limit as a table and exits 1 if there is one; ``--all`` prints every function; ``--against
TREE`` measures another source tree too (a checkout of an earlier commit) and prints the two
side by side (functions past a limit, the largest measures) instead.
``tests/test_code_shape.py`` runs the same check.

Run from the repository root::

    python bench/code_shape.py [--all] [--against TREE]
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from radon.visitors import ComplexityVisitor

ROOT = Path(__file__).resolve().parent.parent
EXCLUDED = ("tracebench/library/synth/",)
MAX_LINES, MAX_COMPLEXITY, MAX_PARAMETERS = 80, 25, 8


@dataclass(frozen=True)
class Shape:
    """One function: where it is and its measures."""

    path: str  # relative to the repository
    name: str  # Class.method, outer.inner
    line: int
    lines: int
    complexity: int
    parameters: int | None  # None: exempt (a frozen record's constructor)

    def problems(self) -> tuple[str, ...]:
        """What is past a limit: ``lines``, ``complexity``, ``parameters``."""
        return tuple(what for what, past in (("lines", self.lines > MAX_LINES),
                                             ("complexity", self.complexity > MAX_COMPLEXITY),
                                             ("parameters", (self.parameters or 0) > MAX_PARAMETERS)) if past)


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> int:
    args = node.args
    named = [*args.posonlyargs, *args.args]
    if method and named and named[0].arg in ("self", "cls", "mcs"):
        named = named[1:]
    return len(named) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)


def _keyword_true(call: ast.AST, name: str) -> bool:
    return isinstance(call, ast.Call) and any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value
                                              is True for k in call.keywords)


def _frozen_record(node: ast.ClassDef) -> bool:
    """A frozen dataclass (``@dataclass(frozen=True)``) or pydantic model (``model_config`` with
    ``frozen=True``)."""
    if any(_keyword_true(d, "frozen") for d in node.decorator_list):
        return True
    return any(isinstance(s, ast.Assign) and any(getattr(t, "id", None) == "model_config" for t in s.targets)
               and _keyword_true(s.value, "frozen") for s in node.body)


def _functions(node: ast.AST, prefix: str = "", owner: ast.ClassDef | None = None):
    """Every function definition under ``node``: its dotted name (``Class.method``, ``outer.inner``),
    the node and the class it is a method of."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{child.name}", child, owner
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.", child)
        else:
            yield from _functions(child, prefix, owner)


def complexity(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """radon's cyclomatic complexity of one function, its nested functions not counted."""
    return ComplexityVisitor.from_ast(node).functions[0].complexity


def file_shapes(path: Path, root: Path = ROOT) -> list[Shape]:
    shapes = []
    for name, node, owner in _functions(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        exempt = owner is not None and node.name == "__init__" and _frozen_record(owner)
        shapes.append(Shape(path.relative_to(root).as_posix(), name, node.lineno, node.end_lineno - node.lineno + 1,
                            complexity(node), None if exempt else _parameters(node, owner is not None)))
    return shapes


def function_shapes(root: Path = ROOT) -> list[Shape]:
    """Every measured function of ``root/tracebench``, in file and line order."""
    paths = sorted(p for p in (root / "tracebench").rglob("*.py")
                   if not p.relative_to(root).as_posix().startswith(EXCLUDED))
    return [shape for path in paths for shape in sorted(file_shapes(path, root), key=lambda s: s.line)]


def violations(root: Path = ROOT) -> list[Shape]:
    """The functions past a limit."""
    return [shape for shape in function_shapes(root) if shape.problems()]


def table(shapes: list[Shape]) -> str:
    rows = [f"| {'function':<60} | lines | cc | params | past", f"|{'-' * 62}|-------|----|--------|------"]
    for s in shapes:
        params = "-" if s.parameters is None else s.parameters
        rows.append(f"| {f'{s.path}:{s.line} {s.name}':<60} | {s.lines:>5} | {s.complexity:>2} | {params:>6} | "
                    f"{', '.join(s.problems())}")
    return "\n".join(rows)


def summary(shapes: list[Shape]) -> dict[str, int]:
    """Functions, those past a limit, and the largest of each measure."""
    return {"functions": len(shapes), "past a limit": sum(bool(s.problems()) for s in shapes),
            "most lines": max(s.lines for s in shapes), "most complexity": max(s.complexity for s in shapes),
            "most parameters": max(s.parameters or 0 for s in shapes)}


def compared(trees: dict[str, Path]) -> str:
    """The summaries of several source trees, side by side (a Markdown table)."""
    found = {name: summary(function_shapes(root)) for name, root in trees.items()}
    rows = [f"| measure | {' | '.join(found)} |", f"|---|{'---|' * len(found)}"]
    for measure in next(iter(found.values())):
        rows.append(f"| {measure} | {' | '.join(str(found[name][measure]) for name in found)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="functions of tracebench past the house limits")
    parser.add_argument("--all", action="store_true", help="print every function, not only those past a limit")
    parser.add_argument("--against", type=Path, metavar="TREE", help="another source tree, measured side by side")
    args = parser.parse_args(argv)
    if args.against is not None:
        print(compared({f"{args.against}": args.against.resolve(), "this tree": ROOT}))
        return 0
    shapes = function_shapes()
    past = [s for s in shapes if s.problems()]
    print(f"limits: {MAX_LINES} lines, complexity {MAX_COMPLEXITY}, {MAX_PARAMETERS} parameters; "
          f"{len(shapes)} functions, {len(past)} past a limit")
    if args.all or past:
        print(table(shapes if args.all else past))
    return 1 if past else 0


if __name__ == "__main__":
    sys.exit(main())
