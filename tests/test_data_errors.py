"""The declarative folders as a researcher edits them: a mistake in a data file is one line naming
``file: [table] key: problem``, exit status 2, from the command that reads it (``trace --help``
still works), and a new g kind is a change of data alone.

Each test edits a copy of the package and its data folders (``tracebench/``, ``grammar/``,
``templates/``, ``taxonomy/``, ``diagnose/``: :mod:`tracebench.resources` finds the folders beside
the package) and runs ``python -m tracebench`` there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracebench.resources import FOLDERS

ROOT = Path(__file__).resolve().parent.parent


class TreeCopy:
    """A copy of the package and its data folders, edited and run as a user would."""

    def __init__(self, root: Path, cache: Path) -> None:
        self.root, self.cache = root, cache
        for folder in ("tracebench", *FOLDERS):
            shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))

    def edit(self, name: str, old: str, new: str) -> None:
        """Replace the first ``old`` of the data file ``name`` (``taxonomy/kinds.toml``) by ``new``."""
        path = self.root / name
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{name} no longer holds {old!r}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRACEBENCH"))}
        env.update(PYTHONPATH=os.pathsep.join((str(self.root), str(ROOT / "tests"))), TRACEBENCH_CACHE=str(self.cache),
                   PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run([sys.executable, *argv], cwd=self.root, env=env, capture_output=True, text=True,
                              timeout=300)

    def trace(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("-m", "tracebench", *args)


@pytest.fixture(scope="module")
def derived(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")  # the grammar's tables, kept between the copies


@pytest.fixture
def tree(tmp_path, derived) -> TreeCopy:
    return TreeCopy(tmp_path / "tree", derived)


PARSE = ("parse", "C(f(person), f2 ⊕ g_pattern) ⊕ g_style")

# (file, text, replaced by, command, the one line the command prints)
MISTAKES = [
    ("taxonomy/kinds.toml", "[kinds.pattern]", "[kinds.pattern", PARSE,
     "trace parse: taxonomy/kinds.toml: not TOML: Expected ']' at the end of a table declaration (at line 26, "
     "column 15)"),
    ("taxonomy/kinds.toml", 'roles = ["local"]\nunspecified = true', 'roles = ["locale"]\nunspecified = true', PARSE,
     "trace parse: taxonomy/kinds.toml: [kinds.local] roles: kind 'local' has unknown roles ['locale']"),
    ("taxonomy/kinds.toml", '[kinds.material]\nroles = ["local"]\n', "[kinds.material]\n", PARSE,
     "trace parse: taxonomy/kinds.toml: [kinds.material] roles: missing"),
    ("taxonomy/kinds.toml", 'aliases = ["texture"]', 'aliases = "texture"', PARSE,
     "trace parse: taxonomy/kinds.toml: [kinds.pattern] aliases: should be an array, not a string"),
    ("grammar/language.toml", "max_terms = 256", 'max_terms = "many"', PARSE,
     "trace parse: grammar/language.toml: max_terms: should be an integer, not a string"),
    ("taxonomy/categories.toml", 'words = ["animal"]', 'words = ["animal", "person"]', PARSE,
     "trace parse: taxonomy/categories.toml: [categories.Animal] words: the word 'person' names both Human and Animal"),
    ("taxonomy/subtypes.toml", 'kinds = ["pattern"]', 'kinds = ["patern"]', PARSE,
     "trace parse: taxonomy/subtypes.toml: [subtypes] 1.1_pattern_texture lists kind 'patern', which "
     "taxonomy/kinds.toml does not define"),
    ("taxonomy/subtypes.toml", 'kinds = ["pattern"]', 'kinds = ["patern"]', ("library", "stats", "nowhere"),
     "trace library stats: taxonomy/subtypes.toml: [subtypes] 1.1_pattern_texture lists kind 'patern', which "
     "taxonomy/kinds.toml does not define"),
    ("diagnose/rules.toml", 'name = "global_stripping"', 'name = "global_striping"',
     ("diagnose", "--formula", "C(f1, f2) + g_style", "--dry-run"),
     "trace diagnose: diagnose/rules.toml: [rule 2] name: unknown rule 'global_striping' (known: distractor_removal, "
     "global_stripping, relation_simplification, composition_flattening, attribute_removal)"),
    ("diagnose/sources.toml", 'title = "Global Reference"\n', "", ("diagnose", "--formula", "C(f1, f2)", "--dry-run"),
     "trace diagnose: diagnose/sources.toml: [sources.global_reference] title: missing"),
]


@pytest.mark.parametrize("name,old,new,command,line", MISTAKES, ids=[f"{m[0]}:{m[4][-30:]}" for m in MISTAKES])
def test_a_mistake_in_a_data_file_is_one_line_and_exit_2(tree, name, old, new, command, line):
    tree.edit(name, old, new)
    result = tree.trace(*command)
    assert (result.returncode, result.stderr, result.stdout) == (2, line + "\n", "")


def test_a_broken_grammar_is_one_line_and_help_still_works(tree):
    tree.edit("grammar/trace.lark", "start: expr", "start: (expr")
    helped = tree.trace("--help")
    assert helped.returncode == 0 and "parse" in helped.stdout and helped.stderr == ""
    result = tree.trace(*PARSE)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.startswith("trace parse: grammar/trace.lark: ") and result.stderr.count("\n") == 1


def test_a_mistake_in_a_template_table_is_one_line(tree):
    tree.edit("templates/space.toml", "[", "[[[\n[")
    result = tree.trace("templates", "--slots", "2")
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert ": templates/space.toml: not TOML: " in result.stderr


def test_a_template_that_does_not_compile_is_named_with_its_line(tree):
    tree.edit("templates/judge/user.j2", "{{", "{% if %}{{")
    code = ("from tracebench.errors import DataError\nfrom tracebench.templating import render\n"
            "try:\n    render('judge/user.j2')\nexcept DataError as err:\n    print(err)")
    result = tree.run("-c", code)
    assert result.stdout.startswith("templates/judge/user.j2: line 3: "), result.stdout + result.stderr


def test_a_kind_no_subtype_lists_is_refused_by_parse_at_its_column(tree):
    tree.edit("taxonomy/kinds.toml", "[kinds.material]", '[kinds.fabric]\nroles = ["local"]\n\n[kinds.material]')
    assert tree.trace("parse", "f1 ⊕ g_pattern").returncode == 0  # formulas without the kind still parse
    result = tree.trace("parse", "f1 ⊕ g_fabric")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("trace parse: formula column 6: g_fabric: no local subtype of taxonomy/subtypes.toml "
                             "lists kind 'fabric', so the term could never be bound\n")


# Binds f1 ⊕ g_<kind> against a two-image library and prints the formula, the term's subtype and
# value, the prompt and the checklist's question ids.
NEW_KIND = """
import random, sys
from pathlib import Path
from library_helpers import entity, make_library, record
from tracebench.checklist import compile_checklist
from tracebench.formula import parse, to_text
from tracebench.library import load_library
from tracebench.realize import realize
from tracebench.sample import LibraryIndex, bind

root = make_library(Path(sys.argv[1]), [
    record("a", [entity("Object", "a wooden chair", **{"1.2_material": ["oak wood"]})]),
    record("b", [entity("Animal", "a small dog", **{"1.2_material": ["felt"]})])])
bound = bind(parse(f"f1 + g_{sys.argv[2]}"), LibraryIndex.build(root, *load_library(root)), random.Random(0))
print(to_text(bound.formula))
print(*[(t.kind, t.subtype, t.value) for t in bound.terms if t.kind])
print(realize(bound.terms, False, random.Random(0)).prompt.splitlines()[-1])
print(*[q.id for q in compile_checklist(bound.terms, bound.compositions) if "fabric" in q.id])
"""


def test_a_new_g_kind_is_data_only(tree, tmp_path):
    """docs/architecture.md: a new g kind over an existing subtype is a ``[kinds.NAME]`` table and
    the subtype's ``kinds`` list; parsing, binding, the prompt and the checklist follow."""
    tree.edit("taxonomy/kinds.toml", "[kinds.material]",
              '[kinds.fabric]\nroles = ["local"]\ndescription = "the cloth a thing is made of"\n\n[kinds.material]')
    tree.edit("taxonomy/subtypes.toml", 'kinds = ["material"]', 'kinds = ["material", "fabric"]')
    parsed = tree.trace("parse", "C(f1 + g_fabric, f2) + g_style")
    assert (parsed.returncode, parsed.stdout, parsed.stderr) == (0, "C(f1 ⊕ g_fabric, f2) ⊕ g_style\tslots=4\n", "")
    bound = tree.run("-c", NEW_KIND, str(tmp_path / "library"), "fabric")
    assert bound.returncode == 0, bound.stderr
    assert bound.stdout.splitlines() == [
        'f1(I1, "a wooden chair") ⊕ g_fabric1(I2, {"a small dog"}, material)',
        "('fabric', '1.2_material', 'felt')",
        "('chair_A') takes the material of [a small dog in Image 2].",
        "g_fabric1:presence g_fabric1:fidelity g_fabric1:isolation g_fabric1:carrier f1+g_fabric1:integrity "
        "f1+g_fabric1:visibility f1+g_fabric1:fit f1+g_fabric1:exclusivity",
    ]
    unknown = TreeCopy(tmp_path / "pristine", tree.cache).trace("parse", "f1 + g_fabric")
    assert unknown.returncode == 2 and "unknown g kind 'g_fabric'" in unknown.stderr  # the kind came from the data
