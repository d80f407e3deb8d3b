"""The architecture's import rules, read from the sources with ``ast`` (nothing is imported).

- Public surfaces: no module of ``tracebench/`` or ``bench/`` imports another package's private
  module (a dotted name with a part starting with one ``_``: ``tracebench.sample._parallel``).
  A package is a top-level package of tracebench (``tracebench.library``, ``synth`` included) or a
  top-level module (``tracebench.cache``). Tests may import any private module: they test it.
- No import cycle among the modules of one package at module level (imports inside functions and
  under ``if TYPE_CHECKING:`` run later or never).
- Stages: ``LAYERS`` orders tracebench's packages; a module imports its own layer or an earlier
  one, lazy imports inside functions included.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent

# tracebench's packages, each layer importing only itself and the layers before it. The base is
# the shared leaf modules every stage uses; providers sit below library (tagging calls models).
LAYERS = (
    ("__init__", "errors", "operators", "outcomes", "resources", "cache", "jsonfiles", "safepaths", "derived",
     "gcpolicy", "lazy", "images", "apikeys", "replies", "nouns", "templating", "choices"),
    ("formula",),
    ("taxonomy",),
    ("scales",),
    ("records",),
    ("providers",),
    ("library",),
    ("realize",),
    ("checklist",),
    ("sample",),
    ("zoo",),
    ("serve",),
    ("run",),
    ("score",),
    ("diagnose",),
    ("report",),
    ("share",),
    ("merge",),
    ("schemas",),
    ("cli",),
    ("__main__",),
)

# Known exceptions, (importing file, imported module). Each names what removes it.
KNOWN_BACKWARD: set[tuple[str, str]] = set()  # (file, module of a later stage) allowed for a while, each with its reason
KNOWN_PRIVATE: set[tuple[str, str]] = set()  # (file, private module) allowed for a while, each with its reason


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


@cache
def package_modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in (ROOT / "tracebench").rglob("*.py"))


def package_of(module: str) -> str:
    """The top-level package (or module) of tracebench a module belongs to: ``library`` for
    ``tracebench.library.synth._world``, ``__init__`` for ``tracebench`` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split("."))


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imported(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    """The tracebench modules an import statement names: ``from . import agree`` names
    ``tracebench.cli.agree``; a name that is not a module names the module it comes from."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        source = _resolve(node, importer, is_package)
        names = [f"{source}.{a.name}" if f"{source}.{a.name}" in package_modules() else source for a in node.names]
    return sorted({name for name in names if name == "tracebench" or name.startswith("tracebench.")})


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def import_nodes(tree: ast.AST, *, module_level: bool) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that runs (none under ``if TYPE_CHECKING``); with ``module_level``,
    those run when the module is imported (none inside a function)."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        skip = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        if _type_checking(node) or (module_level and isinstance(node, skip)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


@cache
def imports_of(path: Path, module_level: bool = False) -> tuple[str, ...]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    importer = module_name(path)
    return tuple(sorted({target for node in import_nodes(tree, module_level=module_level)
                         for target in imported(node, importer, path.name == "__init__.py")}))


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_private_module_of_another_package():
    found = set()
    for path in sources("tracebench", "bench"):
        own = package_of(module_name(path)) if _relative(path).startswith("tracebench/") else None
        for target in imports_of(path):
            if _private(target) and package_of(target) != own:
                found.add((_relative(path), target))
    assert sorted(found - KNOWN_PRIVATE) == [], "import the package's public names instead"
    assert sorted(KNOWN_PRIVATE - found) == [], "a known exception is gone: remove it from KNOWN_PRIVATE"


def test_no_import_cycle_inside_a_package():
    graph = nx.DiGraph()
    for path in sources("tracebench"):
        importer = module_name(path)
        graph.add_node(importer)
        for target in imports_of(path, module_level=True):
            if target != importer and package_of(target) == package_of(importer) and target in package_modules():
                graph.add_edge(importer, target)
    assert sorted(sorted(cycle) for cycle in nx.simple_cycles(graph)) == []


def layer_of(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def test_every_package_has_a_layer():
    placed = {package for layer in LAYERS for package in layer}
    assert sorted({package_of(m) for m in package_modules()} - placed) == []
    assert len(placed) == sum(len(layer) for layer in LAYERS)


def test_no_package_imports_a_later_stage():
    found = set()
    for path in sources("tracebench"):
        own = layer_of(package_of(module_name(path)))
        for target in imports_of(path):
            if layer_of(package_of(target)) > own:
                found.add((_relative(path), ".".join(target.split(".")[:2])))
    assert sorted(found - KNOWN_BACKWARD) == [], "a stage imports a later one (see LAYERS)"
    assert sorted(KNOWN_BACKWARD - found) == [], "a known exception is gone: remove it from KNOWN_BACKWARD"


def test_the_checks_see_lazy_relative_and_private_imports():
    code = ("from ..sample import _parallel\nimport tracebench.zoo._rules\n"
            "def f():\n    from ..report import build_report\n")
    tree = ast.parse(code)
    every = {t for n in import_nodes(tree, module_level=False) for t in imported(n, "tracebench.cli.run", False)}
    at_import = {t for n in import_nodes(tree, module_level=True) for t in imported(n, "tracebench.cli.run", False)}
    assert every == {"tracebench.sample._parallel", "tracebench.zoo._rules", "tracebench.report"}
    assert at_import == {"tracebench.sample._parallel", "tracebench.zoo._rules"}
    assert [_private(t) for t in sorted(every)] == [False, True, True]
    assert layer_of(package_of("tracebench.report")) > layer_of(package_of("tracebench.score._score"))


def test_tests_import_their_helpers_as_top_level_modules():
    """pytest puts tests/ on the path (rootdir conftest), not the repository: ``from tests.x`` works
    only where the checkout itself is importable (an editable install), never from a clean one."""
    found = sorted(f"{_relative(path)}:{node.lineno}" for path in sources("tests", "bench")
                   for node in import_nodes(ast.parse(path.read_text(encoding="utf-8")), module_level=False)
                   if any(name == "tests" or name.startswith("tests.") for name in _module_names(node)))
    assert found == []


def _module_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute module names an import statement names (none for a relative one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module] if node.module and not node.level else []
