"""Inputs that would cost without bound, and two benchmarks behind one ``trace serve``.

Each bound is refused through the command line as one line on stderr with exit status 2,
naming the place (a formula's column, a file's line), and nothing written: formulas too
long, with too many terms or with too long a number (grammar/language.toml); JSON nested
deeper than Python's recursion limit or holding an integer of more digits than Python
converts, in tags files, record files and model replies (an abstention there). Diagnostic
trees of long chains cost their size, not its square.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from openai_server import OpenAIStub
from test_cli import run_trace
from tracebench.errors import TraceError
from tracebench.formula import FormulaError, language, parse
from tracebench.records import CASES_FILE, VERDICTS_FILE

LANG = language()
DEEP = "[" * 100_000 + "]" * 100_000  # past any recursion limit
HUGE = "9" * 5000  # past Python's int-digits limit (4300)


def _refused(result: subprocess.CompletedProcess, *pieces: str) -> str:
    """The one line of a refusal (exit 2, no traceback, nothing on stdout)."""
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr and result.stdout == ""
    line = result.stderr.strip()
    assert "\n" not in line, line[:2000]
    for piece in pieces:
        assert piece in line, line[:2000]
    return line


def _chain(terms: int) -> str:
    return "f" + " ⊕ g" * (terms - 1)


# ------------------------------------------------------------------------------ formulas

def test_the_bounds_are_data_of_the_language():
    assert (LANG.max_formula_length, LANG.max_terms, LANG.max_number_digits) == (20000, 256, 6)


@pytest.mark.parametrize("formula,message", [
    (f"f{HUGE}", "formula column 1: 'f' is numbered with 5000 digits; a number has at most 6"),
    (f"f1 ⊕ g(I{HUGE}, pattern)", "formula column 8: 'I' is numbered with 5000 digits; a number has at most 6"),
    (f"C{HUGE}(f1, f2)", "formula column 1: 'C' is numbered with 5000 digits"),
    (f"C(f1, T_e{HUGE} ⊕ g1)", "formula column 7: 'T_e' is numbered with 5000 digits"),
    ("f1 ⊕ g_style1234567", "formula column 6: 'g_style' is numbered with 7 digits; a number has at most 6"),
    ("f" + " " * 20000, "formula column 20001: the formula is 20001 characters long; at most 20000 are allowed"),
    ("f ⊕\n" + " " * 20000, "formula line 2, column 19997: the formula is 20004 characters long"),
    (_chain(257), "formula column 1025: the formula has 257 terms (f, g and T); at most 256 are allowed"),
    ("C(" + ", ".join(["f ⊕ g"] * 200) + ")", "formula column 899: the formula has 400 terms"),
])
def test_a_formula_past_a_bound_is_one_line_naming_the_column(formula, message):
    _refused(run_trace("parse", formula), f"trace parse: {message}")


def test_a_number_within_the_bound_reads():
    result = run_trace("parse", "f1 ⊕ g_style999999")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("f1 ⊕ g_style999999\t")


def test_a_thousand_term_chain_is_refused_by_diagnose_dry_run_in_one_line():
    line = _refused(run_trace("diagnose", "--formula", _chain(1000), "--dry-run"))
    assert line == "trace diagnose: formula column 1025: the formula has 1000 terms (f, g and T); at most 256 are allowed"


def test_the_longest_chain_allowed_gets_its_whole_tree():
    n = LANG.max_terms - 1  # attributes
    result = run_trace("diagnose", "--formula", _chain(LANG.max_terms), "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    tree = json.loads(result.stdout)
    # N0, then the anchor alone and each attribute alone, each one attribute transfer (a leaf)
    assert len(tree["nodes"]) == 1 + (1 + n)
    assert [node["formula"] for node in tree["nodes"][1:4]] == ["f1", "f1 ⊕ g1", "f1 ⊕ g2"]
    result = run_trace("diagnose", "--formula", _chain(LANG.max_terms), "--dry-run", "--json", "--method", "rates")
    assert result.returncode == 0, result.stderr
    tree = json.loads(result.stdout)
    # the rates tree: each one-attribute child drops its attribute too, the sub-case of N1a again
    assert len(tree["nodes"]) == 1 + (1 + n) + n
    assert {node["same_as"] for node in tree["nodes"][n + 2:]} == {"N1a"}


def test_a_long_chain_costs_its_size_not_its_square():
    """Past the parser's bound (an AST built in Python): a 5,000-term chain's 10,000 nodes
    (the rates tree, the larger) are built and drawn (quadratic in the chain, this did not end
    within minutes)."""
    code = ("from tracebench.formula import Anchor, Apply, Disentangle\n"
            "from tracebench.diagnose import build_tree, draw_tree\n"
            "graph = build_tree(Apply(Anchor(), tuple(Disentangle() for _ in range(4999))), paper_stop=False)\n"
            "print(len(graph), len(draw_tree(graph).splitlines()))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # two lines per node (formula, kept targets), one per repeated sub-case drawn as a reference:
    # the root, f1 and 4,999 one-attribute children, and under each of those a reference to f1
    assert result.stdout.split() == ["10000", str(2 * 5001 + 4999)]


@given(st.integers(0, 400), st.sampled_from(["f", "T_e", "C(f, f)"]), st.sampled_from([" ⊕ g", " ⊕ g_style", "+g"]),
       st.integers(0, 10))
def test_parser_bounds_property(terms, carrier, modifier, digits):
    """Long chains, long numbers: the parser either reads the formula or raises a FormulaError
    naming a column; past a bound it is always the bound's error."""
    digits = digits if terms else 0  # the last modifier's number
    text = carrier + modifier * terms + "1" * digits
    total = {"f": 1, "T_e": 1, "C(f, f)": 2}[carrier] + terms
    try:
        expr = parse(text, validate=False)
    except FormulaError as err:
        assert err.column is not None
        if digits > LANG.max_number_digits:  # read as the parser meets it
            assert f"is numbered with {digits} digits" in err.message
        elif total > LANG.max_terms:
            assert f"the formula has {total} terms" in err.message
        else:
            raise
    else:
        assert total <= LANG.max_terms and digits <= LANG.max_number_digits
        assert expr is not None


# ------------------------------------------------------------------------------ JSON files

@pytest.fixture
def images(tmp_path) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    Image.new("RGB", (8, 4), (10, 20, 30)).save(folder / "a.png")
    return folder


@pytest.mark.parametrize("name,text,message", [
    ("deep.jsonl", DEEP + "\n", "deep.jsonl:1: not valid JSON: nested too deeply"),
    ("deep.json", DEEP + "\n", "deep.json:1: not valid JSON: nested too deeply"),
    ("deep-record.jsonl", '{"id": "a", "path": "a.png"}\n{"id": "b", "x": ' + DEEP + "}\n",
     "deep-record.jsonl:2: not valid JSON: nested too deeply"),
    ("huge.jsonl", '{"id": "a", "path": "a.png", "width": ' + HUGE + ', "height": 4}\n',
     "huge.jsonl:1: not valid JSON: a number of 5000 digits (at most 4300 are read)"),
    ("huge.json", '[\n  {"id": "a", "path": "a.png",\n   "width": ' + HUGE + ', "height": 4}\n]\n',
     "huge.json:3: not valid JSON: a number of 5000 digits (at most 4300 are read)"),
])
def test_a_tags_file_too_deep_or_with_a_huge_number_is_a_problem_naming_the_line(images, tmp_path, name, text,
                                                                                   message):
    tags = tmp_path / name
    tags.write_text(text)
    out = tmp_path / "lib"
    result = run_trace("library", "import", str(images), "--tags", str(tags), "--out", str(out))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    assert "int_max_str_digits" not in result.stderr
    assert result.stderr.splitlines()[0].startswith(message), result.stderr[:500]
    assert not out.exists()


def test_a_library_whose_tags_are_too_deep_is_invalid_not_a_crash(tmp_path):
    library = tmp_path / "lib"
    library.mkdir()
    (library / "tags.jsonl").write_text(DEEP + "\n")
    result = run_trace("library", "validate", str(library))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0].startswith("tags.jsonl:1: not valid JSON: nested too deeply")


@pytest.fixture(scope="module")
def bench(shared_folder) -> Path:
    """Read only (made once for all workers): a hostile file goes into a folder of its own."""
    def make(out: Path) -> None:
        result = run_trace("sample", "--slots", "1-2", "--per-slot", "2", "--seed", "1", "--out", str(out))
        assert result.returncode == 0, result.stderr

    return shared_folder("test_hostile_bounds-bench", make)


@pytest.mark.parametrize("value,message", [(DEEP, "not JSON: nested too deeply"),
                                           (HUGE, "not JSON: a number of 5000 digits (at most 4300 are read)")])
def test_a_record_file_too_deep_or_with_a_huge_number_is_one_line(bench, tmp_path, value, message):
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    lines = (bench / CASES_FILE).read_text().splitlines()
    (hostile / CASES_FILE).write_text(lines[0] + "\n" + '{"id": ' + value + "}\n")
    out = tmp_path / "run"
    _refused(run_trace("run", str(hostile), "--generator", "synthetic:perfect", "--judge", "oracle", "--out", str(out)),
             f"{hostile / CASES_FILE}:2: {message}")
    assert not out.exists()


# ------------------------------------------------------------------------------ replies

@pytest.mark.parametrize("reply", ['{"answers": ' + DEEP + "}", '{"answers": [{"id": ' + HUGE + "}]}"])
def test_a_judge_reply_too_deep_or_with_a_huge_number_is_an_abstention(bench, tmp_path, monkeypatch, reply):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    out = tmp_path / "run"
    with OpenAIStub(lambda request: reply) as stub:
        result = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge",
                           f"openai:stub-model@{stub.base_url}", "--max-retries", "0", "--out", str(out))
    assert result.returncode == 3, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    verdicts = [json.loads(line) for line in (out / VERDICTS_FILE).read_text().splitlines()]
    assert verdicts and {v["verdict"] for v in verdicts} == {"abstain"}
    assert {vote["reason"] for v in verdicts for vote in v["votes"]} == {"the reply is not the expected JSON"}


@pytest.mark.parametrize("reply,reason", [(DEEP, "the reply is not JSON (nested too deeply"),
                                          ('{"ent_list": [], "width": ' + HUGE + "}",
                                           "the reply is not JSON (a number of 5000 digits")])
def test_a_tagging_reply_too_deep_or_with_a_huge_number_skips_the_image(images, tmp_path, monkeypatch, reply, reason):
    from tracebench.library import tag_images
    from tracebench.library import TagOptions

    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    with OpenAIStub(lambda request: reply) as stub, pytest.raises(TraceError) as refused:
        tag_images(images, tmp_path / "lib", TagOptions(model="stub-model", base_url=stub.base_url, max_retries=0,
                                                       timeout=10.0))
    message = str(refused.value)  # the one image was skipped, with the reason
    assert "no image could be tagged (1 failed; first: a.png: invalid reply after one retry: " + reason in message
    assert "\n" not in message and not (tmp_path / "lib").exists()


# ------------------------------------------------------------------------------ trace serve

def test_serve_refuses_benchmarks_whose_case_ids_collide_in_one_line(bench, tmp_path):
    other = tmp_path / "other"
    assert run_trace("sample", "--slots", "1-2", "--per-slot", "2", "--seed", "2", "--out", str(other)).returncode == 0
    first_id = json.loads((bench / CASES_FILE).read_text().splitlines()[0])["id"]
    assert first_id == json.loads((other / CASES_FILE).read_text().splitlines()[0])["id"]  # same ids, other cases
    line = _refused(run_trace("serve", str(bench), str(other), "--port", "0"))
    assert line == (f"trace serve: {other / CASES_FILE}:1: id: case {first_id!r} is also {bench / CASES_FILE}:1, "
                    "another case; serve benchmarks whose case ids collide from separate servers")


def test_serve_takes_the_same_benchmark_twice_and_answers_it(bench, tmp_path, monkeypatch):
    """``trace serve`` in a process of its own: its handler threads' first requests arrive at
    once (they once found inflect half-imported: generation failed with an AttributeError)."""
    from test_cli import _trace_executable

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / CASES_FILE).write_bytes((bench / CASES_FILE).read_bytes())
    server = subprocess.Popen([*_trace_executable(), "serve", str(bench), str(copy), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = server.stdout.readline()
        assert banner.startswith("serving the synthetic zoo and the oracle at http://127.0.0.1:"), \
            banner + server.stderr.read()
        base_url = banner.split(" at ", 1)[1].split(" ", 1)[0]
        result = run_trace("run", str(bench), "--generator", f"openai:synthetic/perfect@{base_url}",
                           "--judge", f"openai:oracle@{base_url}", "--concurrency", "8", "--out", str(tmp_path / "run"))
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert result.returncode == 0, result.stderr[-2000:]
    verdicts = [json.loads(line) for line in (tmp_path / "run" / VERDICTS_FILE).read_text().splitlines()]
    assert verdicts and {v["verdict"] for v in verdicts} == {"pass"}
