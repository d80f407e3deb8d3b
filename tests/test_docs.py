"""The documentation cites the paper and only files that exist: every markdown file named in the
docs, the READMEs, the data files' comments, the source (docstrings and help strings) and the
CLI's help texts is in the repository."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tracebench.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAPER = "arXiv 2608.16765"
SCANNED = ("README.md", "docs", "diagnose", "templates", "taxonomy", "grammar", "tracebench", "bench", "examples",
           "tests")
SUFFIXES = {".md", ".py", ".toml", ".j2", ".lark", ".txt", ".cfg"}
# a path ending in .md that is not the tail of a longer path or of a URL
MARKDOWN = re.compile(r"(?<![\w/.:-])([\w.-]+(?:/[\w.-]+)*\.md)\b")


def missing_markdown(text: str, base: Path) -> list[str]:
    """The markdown files ``text`` names that exist neither from the repository root nor from ``base``."""
    return [name for name in MARKDOWN.findall(text) if not (ROOT / name).is_file() and not (base / name).is_file()]


def _files():
    for entry in SCANNED:
        path = ROOT / entry
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix in SUFFIXES
                        and "__pycache__" not in p.parts and p.name != Path(__file__).name)


def _help_texts(parser: argparse.ArgumentParser, name: str = "trace"):
    yield name, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _help_texts(child, f"{name} {sub}")


def test_the_check_finds_a_file_that_is_not_there():
    assert missing_markdown("as METHOD.md §9 says; see docs/nope.md", ROOT) == ["METHOD.md", "docs/nope.md"]
    assert missing_markdown("see docs/diagnose.md and (zoo.md), https://example.org/x/DESIGN.md", ROOT / "docs") == []


def test_every_markdown_file_the_repository_names_exists():
    files = list(_files())
    assert len(files) > 50 and ROOT / "README.md" in files
    problems = [f"{path.relative_to(ROOT)}: {name}" for path in files
                for name in missing_markdown(path.read_text(encoding="utf-8"), path.parent)]
    assert problems == []


def test_every_help_text_names_existing_files_and_diagnose_cites_the_paper():
    helps = dict(_help_texts(build_parser()))
    assert {"trace diagnose", "trace library balance", "trace report"} <= set(helps)
    problems = [f"{name}: {ref}" for name, text in helps.items() for ref in missing_markdown(text, ROOT / "docs")]
    assert problems == []
    assert PAPER in " ".join(helps["trace diagnose"].split())  # argparse wraps lines


def test_the_readme_and_the_docs_cite_the_paper():
    def words(path: Path) -> str:
        return " ".join(path.read_text(encoding="utf-8").split())

    assert f"TRACE-Bench ({PAPER})" in words(ROOT / "README.md")
    for name in ("diagnose.md", "formula-language.md", "library.md"):
        assert PAPER in words(ROOT / "docs" / name), name


def test_every_test_docs_security_names_exists():
    """docs/security.md backs each line of its threat model with a test: each one it names is
    defined (in the file it names, when it names one)."""
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    named = re.findall(r"`(?:(test_\w+\.py)::)?(test_\w+)`", text)
    assert len(named) > 20
    sources = {path.name: path.read_text(encoding="utf-8") for path in (ROOT / "tests").glob("test_*.py")}
    missing = [f"{file}::{name}" if file else name for file, name in named
               if not any(re.search(rf"^def {name}\(", body, re.MULTILINE)
                          for fname, body in sources.items() if not file or fname == file)]
    assert missing == []
