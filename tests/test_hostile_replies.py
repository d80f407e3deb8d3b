"""Hostile servers: every malformed reply is an abstention with a short reason, never a crash;
reply bodies are size-capped and calls bounded in time as a whole; the API key a server echoes
(in any case, in base64) never reaches a file.

The server here is raw HTTP on 127.0.0.1 (not the OpenAI-shaped stub): it sends whatever
bytes a test scripts, at whatever pace.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import test_tag
from test_cli import run_trace
from tracebench.errors import TraceError
from tracebench.library import load_library
from tracebench.library import TagOptions, tag_images
from tracebench.providers import ModelSettings
from tracebench.records import Verdict
from tracebench.run import parse_reply, RunOptions, run_benchmark
from tracebench.sample import SampleOptions, read_cases, sample_benchmark

KEY = test_tag.KEY
key = test_tag.key  # the fixture: KEY in $OPENAI_API_KEY, no $OPENAI_BASE_URL


@dataclass(frozen=True)
class Raw:
    """One reply as bytes: ``body`` sent with its length, or ``chunks`` sent without one (the
    connection closed at the end), ``pause`` seconds before each chunk."""

    body: bytes = b""
    status: int = 200
    content_type: str = "application/json"
    chunks: Sequence[bytes] | None = None  # a sequence: a reply may be sent more than once
    pause: float = 0.0


Script = Callable[[str, dict | None, int, dict], "Raw | dict | list"]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # a client hanging up mid-reply is expected here
        pass


class RawServer:
    """HTTP on 127.0.0.1: each POST is answered with ``script(path, json_body, n, headers)``,
    ``n`` counting the requests to that path from 0 (a dict or list is sent as JSON)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.counts: dict[str, int] = {}
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        if exc[0] is None and self.errors:
            raise self.errors[0]

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None  # multipart: an image edit
                path = self.path.split("?")[0]
                with server._lock:
                    n = server.counts[path] = server.counts.get(path, 0) + 1
                try:
                    reply = server.script(path, body, n - 1, {k.lower(): v for k, v in self.headers.items()})
                except BaseException as err:  # noqa: BLE001 - re-raised when the block ends
                    server.errors.append(err)
                    reply = Raw(json.dumps({"error": {"message": "script failed"}}).encode(), status=500)
                if not isinstance(reply, Raw):
                    reply = Raw(json.dumps(reply).encode())
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client hung up: what it was sent was enough

            def _send(self, reply: Raw) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                if reply.chunks is None:
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                for chunk in reply.chunks:
                    time.sleep(reply.pause)
                    self.wfile.write(chunk)
                    self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def completion(content: Any, **extra: Any) -> dict:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            **extra}


def question_ids(request: dict) -> list[str]:
    """The question ids a judge request asks about (its reply schema's enum)."""
    return request["response_format"]["json_schema"]["schema"]["properties"]["answers"]["items"]["properties"]["id"]["enum"]


def answers(ids: list[str], reason: str = "looks right") -> str:
    return json.dumps({"answers": [{"id": qid, "answer": "yes", "reason": reason} for qid in ids]})


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (20, 120, 200)).save(out, format="PNG")
    return out.getvalue()


def image_reply() -> dict:
    return {"created": 0, "data": [{"b64_json": base64.b64encode(png()).decode()}]}


MB = 1_000_000
HUGE = 50 * MB

# Bodies any endpoint may get wrong: mode -> (reply, a fragment of the reason)
ANY_ENDPOINT = {
    "truncated JSON": (Raw(b'{"id": "c", "choices": [{"message": {"content": "{\\"answ'), "not JSON"),
    "an HTML page": (Raw(b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>",
                         content_type="text/html"), "an HTML page"),
    "an empty body": (Raw(b""), "the reply is empty"),
    "deeply nested JSON": (Raw(b"[" * 200_000 + b"]" * 200_000), "nested too deeply"),
    "invalid UTF-8": (Raw(b'{"choices": [{"message": {"content": "\xff\xfe\xfa"}}], "data": "\xc3\x28"}'),
                      "not UTF-8"),
    "a top-level list": ([{"b64_json": "AAAA", "message": {"content": "yes"}}], "a list, not a JSON object"),
    "50 MB with its length": (Raw(b"x" * HUGE), "longer than 16000000 bytes"),
    "50 MB streamed": (Raw(chunks=[b"y" * MB] * 50), "longer than 16000000 bytes"),  # one 1 MB chunk, 50 times
    "an error in a 200": ({"error": {"message": "model overloaded"}}, "replied with an error: model overloaded"),
}
CHAT = {
    **ANY_ENDPOINT,
    "choices a string": ({"choices": "yes"}, "choices are a string, not a list"),
    "a message that is a string": ({"choices": [{"message": "yes"}]}, "a string as its message"),
    "content an int": (completion(5), "content is a number, not text"),
    "content a list": (completion([{"type": "text", "text": "yes"}]), "content is a list, not text"),
}
IMAGES = {
    **ANY_ENDPOINT,
    "data a string": ({"created": 0, "data": "iVBORw0KGgo="}, "data is a string, not a list"),
    "b64_json an int": ({"created": 0, "data": [{"b64_json": 12345}]}, "b64_json is a number, not text"),
    "not an image": ({"created": 0, "data": [{"b64_json": base64.b64encode(b"hello, no image here").decode()}]},
                     "not a PNG, JPEG or WebP image"),
}


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "bench"
    sample_benchmark(out, SampleOptions(slots=(1, 2), per_slot=2, seed=3, applications=False))
    return out



def judged(script: Callable[[dict, int], Any]) -> Script:
    """A server judging every image yes, except where ``script(request, n)`` says otherwise
    (returns None), and generating a small PNG for every case."""
    def serve(path: str, body: dict | None, n: int, headers: dict):
        if "/images/" in path:
            return image_reply()
        reply = script(body, n)
        return completion(answers(question_ids(body))) if reply is None else reply
    return serve


def verdicts(out: Path) -> list[Verdict]:
    return [Verdict.model_validate_json(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def assert_one_case_abstained(bench: Path, out: Path, fragment: str) -> None:
    """The run is complete; one case's questions abstained, with a short reason naming the fault."""
    cases = {c.id: c for c in read_cases(bench)}
    found = verdicts(out)
    assert {v.case_id for v in found} == set(cases)
    abstained = [v for v in found if v.verdict == "abstain"]
    assert len({v.case_id for v in abstained}) == 1, [v.votes[0].reason for v in abstained]
    assert len(abstained) == len(cases[abstained[0].case_id].checklist)
    for verdict in abstained:
        reason = verdict.votes[0].reason
        assert fragment in reason and len(reason) <= 300 and "0x" not in reason, reason
    assert any(v.verdict != "abstain" for v in found)
    assert size_of(out) < 2 * MB


@pytest.mark.parametrize("mode", list(CHAT))
def test_a_malformed_judge_reply_is_one_abstention(bench, tmp_path, key, mode):
    reply, fragment = CHAT[mode]
    with RawServer(judged(lambda request, n: reply if n == 1 else None)) as server:
        settings = ModelSettings(judge_base_url=server.base_url, max_retries=0, timeout=20.0)
        run_benchmark(bench, tmp_path / "run", RunOptions(generator="synthetic:perfect", judges=["openai:judge"],
                      settings=settings, concurrency=1))
    assert_one_case_abstained(bench, tmp_path / "run", fragment)


@pytest.mark.parametrize("mode", list(IMAGES))
def test_a_malformed_image_reply_is_one_abstention(bench, tmp_path, key, mode):
    reply, fragment = IMAGES[mode]

    def serve(path: str, body: dict | None, n: int, headers: dict):
        if "/images/" in path:
            return reply if n == 1 else image_reply()
        return completion(answers(question_ids(body)))

    with RawServer(serve) as server:
        settings = ModelSettings(base_url=server.base_url, max_retries=0, timeout=20.0)
        run_benchmark(bench, tmp_path / "run", RunOptions(generator="openai:painter", judges=["openai:judge"],
                      settings=settings, concurrency=1))
    assert_one_case_abstained(bench, tmp_path / "run", fragment)
    assert all(v.votes[0].reason.startswith("generation failed: ") for v in verdicts(tmp_path / "run")
               if v.verdict == "abstain")


@pytest.mark.parametrize("usage", [{"total_tokens": "many", "prompt_tokens": [1]}, "lots"])
def test_usage_of_the_wrong_type_is_ignored(bench, tmp_path, key, usage):
    def script(request, n):
        return completion(answers(question_ids(request)), usage=usage)

    with RawServer(judged(script)) as server:
        settings = ModelSettings(judge_base_url=server.base_url, max_retries=0, timeout=20.0)
        manifest = run_benchmark(bench, tmp_path / "run", RunOptions(generator="synthetic:perfect", judges=["openai:judge"],
                                 settings=settings, concurrency=1))
    assert manifest.abstentions == 0 and manifest.tokens == 0


def test_reasons_and_raw_parts_are_capped_when_stored(bench, tmp_path, key):
    def script(request, n):  # a 1 MB reason per question: under the reply cap, far over what a vote keeps
        return completion(answers(question_ids(request), reason="why " * 250_000))

    with RawServer(judged(script)) as server:
        settings = ModelSettings(judge_base_url=server.base_url, max_retries=0, timeout=20.0)
        manifest = run_benchmark(bench, tmp_path / "run", RunOptions(generator="synthetic:perfect", judges=["openai:judge"],
                                 settings=settings, concurrency=1))
    assert manifest.abstentions == 0
    for verdict in verdicts(tmp_path / "run"):
        assert len(verdict.votes[0].reason) <= 1000 and len(verdict.votes[0].raw) <= 2000
    assert (tmp_path / "run" / "verdicts.jsonl").stat().st_size < 200_000


def test_a_question_answered_twice_differently_abstains(bench):
    questions = next(iter(read_cases(bench))).checklist[:2]
    first, second = questions[0].id, questions[1].id
    raw = json.dumps({"answers": [{"id": first, "answer": "yes"}, {"id": second, "answer": "no"},
                                  {"id": first, "answer": "no"}, {"id": second, "answer": " NO "}]})
    parsed = parse_reply(raw, questions)
    assert parsed[first][0] is None and parsed[first][1] == "contradictory answers: 'no', 'yes'"
    assert parsed[second][0] == "no"  # said twice, alike: an answer


def test_the_timeout_bounds_the_whole_call_of_a_trickling_server(bench, tmp_path, key):
    """One byte every 0.2 s never trips a timeout per read; the call is cut off all the same."""
    timeout = 1.5

    def script(request, n):
        if n != 1:
            return None
        body = json.dumps(completion(answers(question_ids(request)))).encode()
        return Raw(chunks=[body[i:i + 1] for i in range(len(body))], pause=0.2)  # > 60 s in all

    with RawServer(judged(script)) as server:
        settings = ModelSettings(judge_base_url=server.base_url, max_retries=0, timeout=timeout)
        start = time.monotonic()
        run_benchmark(bench, tmp_path / "run", RunOptions(generator="synthetic:perfect", judges=["openai:judge"],
                      settings=settings, concurrency=1))
        elapsed = time.monotonic() - start
    assert elapsed < 4 * timeout + 5, elapsed  # a bound on hanging, not a measure of speed
    assert_one_case_abstained(bench, tmp_path / "run", "no complete reply within 1.5 s")


def echoes(headers: dict) -> str:
    """The key as a hostile server echoes it: upper-cased, lower-cased, in base64 (alone, with
    its Bearer prefix, URL-safe, at another offset)."""
    auth = headers["authorization"]
    secret = auth.split()[1]
    forms = [secret.upper(), secret.lower(), base64.b64encode(secret.encode()).decode(),
             base64.b64encode(auth.encode()).decode(), base64.urlsafe_b64encode(b"x:" + secret.encode()).decode()]
    return " ".join(forms)


def leaked(folder: Path) -> list[str]:
    forms = [KEY, KEY.upper(), KEY.lower(), base64.b64encode(KEY.encode()).decode().rstrip("="),
             base64.b64encode(f"Bearer {KEY}".encode()).decode().rstrip("=")]
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path}: {form}" for form in forms if form.encode() in data]
    return found


def test_an_echoed_key_never_reaches_a_file(bench, tmp_path, key):
    def serve(path: str, body: dict | None, n: int, headers: dict):
        echo = echoes(headers)
        if "/images/" in path:
            if n == 1:
                return Raw(json.dumps({"error": {"message": f"bad key {echo}"}}).encode(), status=400)
            return image_reply()
        ids = question_ids(body)
        if n == 1:
            return Raw(json.dumps({"error": {"message": f"denied for {echo}"}}).encode(), status=422)
        if n == 2:
            return completion(f"I cannot parse {echo}")  # not JSON: the raw snippet is stored
        return completion(json.dumps({"answers": [{"id": qid, "answer": "yes", "reason": f"key {echo}"}
                                                  for qid in ids]}), echo=echo)

    with RawServer(serve) as server:
        settings = ModelSettings(base_url=server.base_url, max_retries=0, timeout=20.0)
        manifest = run_benchmark(bench, tmp_path / "run", RunOptions(generator="openai:painter", judges=["openai:judge"],
                                 settings=settings, concurrency=1, cache_dir=tmp_path / "cache"))
    assert manifest.abstentions > 0
    reasons = " ".join(v.votes[0].reason + v.votes[0].raw for v in verdicts(tmp_path / "run"))
    assert "***" in reasons and "denied for" in reasons and "bad key" in reasons and "cannot parse" in reasons
    assert leaked(tmp_path) == []


# -- trace tag ------------------------------------------------------------------------------------


def tag_reply() -> str:
    return json.dumps({"ent_list": [{"category": "Object", "ent_desc": "a square", "tag_dict": {},
                                     "bbox": [0, 0, 2, 2], "usable_as": ["ip"]}],
                       "background": ["wall"], "global_tag": {"4.1_style": ["flat"]}})


@pytest.fixture
def photos(tmp_path) -> Path:
    root = tmp_path / "photos"
    root.mkdir()
    for name, color in (("a.png", "red"), ("b.png", "green"), ("c.png", "blue")):
        Image.new("RGB", (6, 4), color).save(root / name)
    return root


@pytest.mark.parametrize("mode", list(CHAT))
def test_a_malformed_tagging_reply_leaves_one_image_out(photos, tmp_path, key, mode):
    reply, fragment = CHAT[mode]

    def serve(path, body, n, headers):
        return reply if n == 1 else completion(tag_reply())

    with RawServer(serve) as server:
        report = tag_images(photos, tmp_path / "lib", TagOptions(model="tagger", base_url=server.base_url,
                                                                 concurrency=1, max_retries=0, timeout=20.0))
    assert report.tagged == 2 and len(report.skipped) == 1
    reason = report.skipped[0].reason
    assert fragment in reason and len(reason) <= 300, reason
    assert len(load_library(tmp_path / "lib")[1]) == 2
    assert size_of(tmp_path) < 2 * MB


def test_trace_tag_scrubs_an_echoed_key_from_the_library_and_the_cache(photos, tmp_path, key):
    def serve(path, body, n, headers):
        if n == 0:
            return Raw(json.dumps({"error": {"message": f"slow down {echoes(headers)}"}}).encode(), status=400)
        tags = json.loads(tag_reply())
        tags["ent_list"][0]["ent_desc"] = f"a square saying {echoes(headers)}"
        return completion(json.dumps(tags))

    with RawServer(serve) as server:
        report = tag_images(photos, tmp_path / "lib", TagOptions(model="tagger", base_url=server.base_url,
                                                                 concurrency=1, max_retries=0, timeout=20.0,
                                                                 cache_dir=tmp_path / "cache"))
    assert report.tagged == 2 and "***" in report.skipped[0].reason
    assert "***" in (tmp_path / "lib" / "tags.jsonl").read_text()
    assert leaked(tmp_path) == [] and KEY not in report.model_dump_json().upper()


def test_a_trickling_tagging_server_is_cut_off_by_the_timeout(photos, tmp_path, key):
    def serve(path, body, n, headers):
        data = json.dumps(completion(tag_reply())).encode()
        return Raw(chunks=[data[i:i + 1] for i in range(len(data))], pause=0.2)

    with RawServer(serve) as server:
        start = time.monotonic()
        with pytest.raises(TraceError, match=r"no complete reply within 1 s"):
            tag_images(photos, tmp_path / "lib", TagOptions(model="tagger", base_url=server.base_url, concurrency=3,
                                                            max_retries=0, timeout=1.0))
        assert time.monotonic() - start < 4 * 1.0 + 3
    assert not (tmp_path / "lib").exists()


# -- the options ----------------------------------------------------------------------------------


@pytest.mark.parametrize("option,value,fragment", [
    ("--timeout", "0", "--timeout: 0.0 is not a positive number of seconds"),
    ("--timeout", "-3", "--timeout: -3.0 is not a positive number of seconds"),
    ("--timeout", "nan", "--timeout: nan is not a positive number of seconds"),
    ("--max-retries", "-1", "--max-retries: -1 must be 0 or more"),
    ("--max-reply-bytes", "0", "--max-reply-bytes: 0 must be at least 1"),
])
@pytest.mark.parametrize("command", ["run", "tag"])
def test_bad_call_limits_are_one_line(bench, photos, tmp_path, command, option, value, fragment):
    out = tmp_path / "out"
    if command == "run":
        args = ["run", str(bench), "--generator", "synthetic:perfect", "--judge", "openai:j@http://127.0.0.1:9/v1"]
    else:
        args = ["tag", str(photos), "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    result = run_trace(*args, option, value, "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"trace {command}: {fragment}"]
    assert not out.exists() and "Traceback" not in result.stderr


def test_a_reply_cap_given_on_the_command_line_is_used(bench, tmp_path, key):
    def serve(path, body, n, headers):
        return completion(answers(question_ids(body), reason="r" * 5000))

    with RawServer(serve) as server:
        result = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge",
                           f"openai:judge@{server.base_url}", "--max-reply-bytes", "4000", "--max-retries", "0",
                           "--out", str(tmp_path / "run"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 3 and len(lines) == 1, result.stderr
    assert "questions abstained" in lines[0] and "the reply is longer than 4000 bytes (--max-reply-bytes)" in lines[0]
