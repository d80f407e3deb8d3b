"""The declarative folders as a researcher edits them: a mistake in a data file is one line naming
``file: [table] key: problem``, exit status 2, from the command that reads it (``trace --help``
still works), and a new g kind is a change of data alone.

Each test edits a copy of the package and its data folders (``tracebench/``, ``grammar/``,
``templates/``, ``taxonomy/``, ``diagnose/``: :mod:`tracebench.resources` finds the folders beside
the package) and runs ``python -m tracebench`` there.
"""

from __future__ import annotations

import json
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
    """The copies' cache: the grammar's tables, kept between the copies, and the session's
    default synthetic library linked in (built from the pristine world, whose hash names its
    folder: a copy with an edited world builds its own, a broken one writes none)."""
    from tracebench.library.synth import default_library

    cache = tmp_path_factory.mktemp("cache")
    library = default_library()  # the session's, built once for every test that samples
    shutil.copytree(library, cache / library.name, copy_function=_linked)
    return cache


def _linked(source: str, target: str) -> None:
    """A hard link, or a copy across file systems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


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


# The loaders of the other data files, each read by the command that uses it. A command names the folders
# it needs as {out} (a fresh output), {bench} (a small benchmark), {photos} and {tags} (images to import).
SAMPLE = ("sample", "--slots", "1", "--per-slot", "1", "--no-applications", "--out", "{out}")
WITH_APPLICATIONS = ("sample", "--slots", "1", "--per-slot", "1", "--out", "{out}")
RUN = ("run", "{bench}", "--generator", "synthetic:perfect", "--judge", "oracle", "--out", "{out}")
LOADERS = [
    ("templates/quotas.toml", "per_slot = 180", 'per_slot = "many"', WITH_APPLICATIONS,
     "trace sample: templates/quotas.toml: per_slot: should be an integer, not a string"),
    ("templates/applications.toml", "cases = 20", 'cases = "20"', WITH_APPLICATIONS,
     "trace sample: templates/applications.toml: [try_on] cases: should be an integer, not a string"),
    ("templates/clutter.toml", 'identity_groups = ["1_Appearance", "2_Form"]', 'identity_groups = "1_Appearance"',
     (*SAMPLE, "--distractors", "1"),
     "trace sample: templates/clutter.toml: identity_groups: should be an array, not a string"),
    ("templates/text_carriers.toml", 'category = "Human" }', 'categori = "Human" }',
     ("sample", "--slots", "1-2", "--per-slot", "2", "--no-applications", "--out", "{out}"),
     "trace sample: templates/text_carriers.toml: [carriers 1] category: missing"),
    ("templates/prompts/lines.toml", "[reference]\nanchor = ", "[reference]\nanchor = 1\nunused = ", SAMPLE,
     "trace sample: templates/prompts/lines.toml: [reference] anchor: should be a string, not an integer"),
    ("templates/prompts/phrases.toml", "neutral = [", 'neutral = "In front"\nunused = [', SAMPLE,
     "trace sample: templates/prompts/phrases.toml: [frames] neutral: should be an array, not a string"),
    ("templates/checklist/questions.toml", 'aspect = "existence"', 'aspekt = "existence"', SAMPLE,
     "trace sample: templates/checklist/questions.toml: [anchor 1] aspect: missing"),
    ("templates/nouns.toml", "relatives = [", 'relatives = "that"\nunused = [', SAMPLE,
     "trace sample: templates/nouns.toml: [post_modifiers] relatives: should be an array, not a string"),
    ("templates/space.toml", 'attribute_kinds = ["g", "g_attach"', 'attribute_kinds = ["g", "g_atach"',
     ("templates", "--slots", "2", "--count"),
     "trace templates: templates/space.toml: attribute_kinds: unknown attribute kind 'g_atach'"),
    ("taxonomy/zoo.toml", 'breaks = ["anchor.identity"', 'breaks = "anchor.identity"\nunused = ["anchor.identity"',
     ("run", "{bench}", "--generator", "synthetic:strain", "--judge", "oracle", "--out", "{out}"),
     "trace run: taxonomy/zoo.toml: [modes.load-global] breaks: should be an array, not a string"),
    ("templates/clutter.toml", "cell = 256", 'cell = "256"', (*RUN, "--collage", "--max-images", "1"),
     "trace run: templates/clutter.toml: [collage] cell: should be an integer, not a string"),
    ("templates/judge/scales.toml", 'suffix = "(answer 2, 1 or 0)"', "suffix = 2",
     ("run", "{bench}", "--generator", "synthetic:perfect", "--judge", "openai:judge", "--api-key-env",
      "DATA_ERRORS_TEST_KEY", "--scale", "ternary", "--dry-run", "--out", "{out}"),
     "trace run: templates/judge/scales.toml: [ternary] suffix: should be a string, not an integer"),
    ("taxonomy/categories.toml", "description = ", "descriptio = ",
     ("tag", "{photos}", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--out", "{out}"),
     "trace tag: taxonomy/categories.toml: [categories.Human] description: missing"),
    ("taxonomy/backgrounds.toml", 'prefixes = ["solid"]', 'prefixes = "solid"',
     ("library", "import", "{photos}", "--tags", "{tags}", "--out", "{out}"),
     "trace library import: taxonomy/backgrounds.toml: [placeholders] prefixes: should be an array, not a string"),
    ("taxonomy/synth.toml", "size = 256", 'size = "256"', ("library", "synth", "--out", "{out}", "--n", "2"),
     "trace library synth: taxonomy/synth.toml: [canvas] size: should be an integer, not a string"),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """The folders the commands of LOADERS read: a benchmark sampled from the pristine data, one photo to import."""
    from PIL import Image

    from tracebench.sample import SampleOptions, sample_benchmark

    root = tmp_path_factory.mktemp("inputs")
    sample_benchmark(root / "bench", SampleOptions(slots=(2,), per_slot=1, seed=3, applications=False))
    (root / "photos").mkdir()
    Image.new("RGB", (32, 24), "red").save(root / "photos" / "a.png")
    record = {"path": "a.png", "source": "test", "license": "CC0-1.0", "background": "plain white",
              "ent_list": [{"category": "Object", "ent_desc": "a red box", "tag_dict": {}}]}
    (root / "tags.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    return {"bench": str(root / "bench"), "photos": str(root / "photos"), "tags": str(root / "tags.jsonl")}


@pytest.mark.parametrize("name,old,new,command,line", LOADERS, ids=[f"{m[0]}:{m[4][-30:]}" for m in LOADERS])
def test_a_mistake_read_by_a_loader_is_one_line_and_exit_2(tree, inputs, monkeypatch, name, old, new, command, line):
    monkeypatch.setenv("DATA_ERRORS_TEST_KEY", "unused")  # the judge is built, never called (--dry-run)
    places = {**inputs, "out": str(tree.root / "out")}
    tree.edit(name, old, new)
    result = tree.trace(*(arg.format(**places) for arg in command))
    assert (result.returncode, result.stderr, result.stdout) == (2, line + "\n", "")
    assert not (tree.root / "out").exists()


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


def test_help_works_over_a_broken_template_space_and_sampling_names_it_in_one_line(tree):
    tree.edit("templates/space.toml", "[", "[[[\n[")
    helped = tree.trace("--help")
    assert helped.returncode == 0 and "sample" in helped.stdout and helped.stderr == ""
    result = tree.trace("sample", "--out", "never-written")
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert ": templates/space.toml: not TOML: " in result.stderr and not (tree.root / "never-written").exists()
