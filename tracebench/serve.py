"""``trace serve``: the synthetic zoo and the oracle judge behind a real OpenAI-compatible HTTP API.

The same client path used for real models (the openai client, retries, concurrency, cache,
parsing) is then exercised end to end against it. Endpoints:

- ``POST /v1/images/edits`` (multipart: ``model``, ``prompt``, ``image[]``) and
  ``POST /v1/images/generations`` (JSON): model ``synthetic/PROFILE`` (e.g.
  ``synthetic/global-interference,noise:0.1``); the prompt selects the case among the
  benchmark folders the server was started with; the reply carries ``b64_json``.
- ``POST /v1/chat/completions``: model ``oracle`` (or ``oracle:flip=P,yes-bias=Q``, a judge that
  errs at those rates); answers the questions listed as
  ``- <id>: <text>`` from the record inside the generated image it is sent, on the scale the
  request names in its ``X-Tracebench-Scale`` header (``tracebench.scales.SCALE_HEADER``, which
  tracebench's judge sends); a request without it is answered on the scale its JSON schema's
  answers suggest.
- ``GET /v1/models``.

It binds 127.0.0.1 by default; ``latency`` adds a delay per request (for benchmarks).

What one request may cost is bounded, whoever sends it: a body is read only when its
``Content-Length`` is a plain number of bytes (else 400; a chunked body is 411) of at most
:data:`MAX_BODY` (else 413, answered before any of it is read); a JSON body nests at most
:data:`MAX_JSON_DEPTH` arrays and objects and holds at most :data:`MAX_JSON_CONTAINERS` (else
400, before it is parsed); a multipart body has at most :data:`MAX_FORM_PARTS` parts, none of
them multipart itself (else 400; it is split without recursion). Every refusal is an
OpenAI-shaped error saying why.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable

from .errors import TraceError
from .records import CASES, Case
from .scales import SCALE_HEADER, Scale, alternatives, scale_names, scale_of_answers

__all__ = ["MAX_BODY", "MAX_FORM_PARTS", "MAX_JSON_CONTAINERS", "MAX_JSON_DEPTH", "ZooServer", "serve_forever"]

_QUESTION_LINE = re.compile(r"^- (\S+): ", re.MULTILINE)

MAX_BODY = 64 * 2**20  # bytes of a request body: an image edit with 16 reference images of 4 MiB each fits
MAX_JSON_DEPTH = 64  # arrays and objects open at once in a JSON body (a judge's request nests about 10)
MAX_JSON_CONTAINERS = 100_000  # arrays and objects in a JSON body (a judge's request has tens)
MAX_FORM_PARTS = 100  # parts of a multipart body: its fields and its images (the OpenAI API takes 16 images)
_LINGER = 2.0  # seconds a refused connection is read from (and dropped) so the client sees the refusal


class _Refused(Exception):
    """A request answered with ``status`` and ``message``; ``unread``: its body was not read
    (the connection is then closed)."""

    def __init__(self, status: int, message: str, code: str, *, unread: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.unread = status, code, unread


class _Handler(BaseHTTPRequestHandler):
    server: "ZooServer"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out separately: no 40 ms stall per reply

    def log_message(self, format: str, *args: Any) -> None:  # quiet: a server for tests and benchmarks
        return

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, code: str | None = None) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error", "param": None,
                                      "code": code}})

    def _body(self) -> bytes:
        """The request's body, read whole only when its Content-Length allows (:data:`MAX_BODY`)."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise _Refused(411, "send the body with a Content-Length (no Transfer-Encoding)", "length_required",
                           unread=True)
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            return b""
        if len(lengths) > 1 or not re.fullmatch(r"[0-9]{1,19}", lengths[0].strip()):
            shown = ", ".join(lengths)
            raise _Refused(400, f"bad Content-Length {shown[:40]!r}: one number of bytes", "bad_content_length",
                           unread=True)
        length = int(lengths[0])
        if length > MAX_BODY:
            raise _Refused(413, f"the body of {length} bytes is over the limit of {MAX_BODY // 2**20} MiB "
                                f"(trace serve's MAX_BODY)", "body_too_large", unread=True)
        data = self.rfile.read(length)
        if len(data) < length:
            raise _Refused(400, f"the body ended after {len(data)} of its {length} bytes", "body_cut", unread=True)
        return data

    def _json(self) -> Any:
        """The body as JSON, its nesting bounded before it is parsed (:func:`_json_bounds`)."""
        body = self._body()
        _json_bounds(body)
        return json.loads(body or b"{}")

    def _refuse(self, refused: _Refused) -> None:
        """Answer a refusal; with the body unread, close the connection, first reading (and
        dropping) what the client still sends for a moment, so it reads the answer rather than
        a reset."""
        if not refused.unread:
            return self._error(refused.status, str(refused), refused.code)
        self.close_connection = True
        data = json.dumps({"error": {"message": str(refused), "type": "invalid_request_error", "param": None,
                                     "code": refused.code}}).encode()
        self.send_response(refused.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        try:
            self.connection.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + _LINGER
            while (left := deadline - time.monotonic()) > 0:
                self.connection.settimeout(left)
                if not self.connection.recv(65536):
                    break
        except OSError:  # the client is gone, or kept sending past the linger
            pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.rstrip("/") == "/v1/models":
            models = ["oracle", "synthetic/perfect"]
            self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "tracebench"}
                                                        for m in models]})
        else:
            self._error(404, f"no such endpoint: {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        self.server.pause()
        try:
            if self.path == "/v1/images/edits":
                fields = _multipart(self.headers.get("Content-Type", ""), self._body())
                self._image(fields.get("model", ""), fields.get("prompt", ""))
            elif self.path == "/v1/images/generations":
                body = self._json()
                self._image(body.get("model", ""), body.get("prompt", ""))
            elif self.path == "/v1/chat/completions":
                self._chat(self._json())
            else:
                self._error(404, f"no such endpoint: {self.path}")
        except _Refused as refused:
            self._refuse(refused)
        except TraceError as err:
            self._error(400, str(err))
        except (ValueError, LookupError, TypeError, AttributeError, RecursionError) as err:  # LookupError: an unknown charset too
            self._error(400, f"bad request: {type(err).__name__}: {err}")
        except Exception as err:  # a bug here must still answer, or the client retries a dead socket
            self._error(500, f"internal error: {type(err).__name__}: {err}")

    def _image(self, model, prompt) -> None:
        from .zoo import generate, parse_profile

        model = model.decode() if isinstance(model, bytes) else model
        prompt = prompt.decode() if isinstance(prompt, bytes) else prompt
        if not isinstance(model, str) or not isinstance(prompt, str):
            return self._error(400, "model and prompt must be strings")
        if not model.startswith("synthetic/"):
            return self._error(404, f"unknown model {model!r}; use synthetic/PROFILE")
        case = self.server.case_for(prompt)
        if case is None:
            return self._error(400, "the prompt matches no case of the benchmarks this server was started with (to "
                                    "diagnose a run made here: trace diagnose RUN --export-nodes DIR, then start "
                                    "trace serve BENCH DIR)")
        png, _ = generate(case, parse_profile(model.removeprefix("synthetic/")), seed=self.server.seed)
        self._send(200, {"created": int(time.time()), "data": [{"b64_json": base64.b64encode(png).decode()}]})

    def _chat(self, body: dict) -> None:
        from .zoo import oracle_reply, parse_oracle, read_record

        model = str(body.get("model"))
        if model.partition(":")[0] != "oracle":
            return self._error(404, f"unknown model {body.get('model')!r}; the judge here is oracle")
        try:
            errors = parse_oracle(model)
        except TraceError as err:
            return self._error(404, f"unknown model: {err}")
        texts, images = [], []
        for message in body.get("messages", []):
            content = message.get("content")
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            for part in parts:
                if part.get("type") == "text":
                    texts.append(part["text"])
                elif part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    images.append(base64.b64decode(url.split(",", 1)[1]))
        record = next((found for data in images if (found := read_record(data)) is not None), None)
        if record is None:
            return self._error(400, "no generated image with a tracebench record in the request")
        case = self.server.case_by_id(record.case_id)
        if case is None:
            return self._error(400, f"case {record.case_id!r} is not in the benchmarks this server was started with")
        wanted = set(_QUESTION_LINE.findall("\n".join(texts)))
        questions = [q for q in case.checklist if q.id in wanted]
        reply = json.dumps(oracle_reply(questions, record, errors, _scale_asked(self.headers.get(SCALE_HEADER), body)))
        self._send(200, {"id": "chatcmpl-oracle", "object": "chat.completion", "created": int(time.time()),
                         "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                                          "message": {"role": "assistant", "content": reply}}],
                         "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})


def _scale_asked(named: str | None, body: dict) -> Scale:
    """The scale a judge request asks for: the one its :data:`~tracebench.scales.SCALE_HEADER`
    names (another name is refused, 400); without the header, the one suggested by the answers
    its JSON schema allows (:func:`~tracebench.scales.scale_of_answers`), binary when it lists none."""
    if named is not None:
        if named.strip() not in scale_names():
            raise _Refused(400, f"{SCALE_HEADER}: {named[:40]!r} is not {alternatives(scale_names())}", "unknown_scale")
        return Scale(named.strip())
    try:
        schema = body["response_format"]["json_schema"]["schema"]
        allowed = set(schema["properties"]["answers"]["items"]["properties"]["answer"]["enum"])
    except (KeyError, TypeError):
        return Scale.BINARY
    return scale_of_answers(allowed)


_JSON_STRING = re.compile(rb'"[^"]*(?:"|\Z)')  # escapes removed first; an unterminated string runs to the end
_BRACKETS = re.compile(rb"[\[{]+|[\]}]+")


def _json_bounds(body: bytes) -> None:
    """Refuse (400) a JSON body nesting more than :data:`MAX_JSON_DEPTH` arrays and objects, or
    holding more than :data:`MAX_JSON_CONTAINERS`, before it is parsed (a parser recurses per
    level). Brackets inside strings are text; a body with few brackets is not scanned."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return
    bare = _JSON_STRING.sub(b"", body.replace(b"\\\\", b"").replace(b'\\"', b""))  # the strings' text out
    if bare.count(b"[") + bare.count(b"{") > MAX_JSON_CONTAINERS:
        raise _Refused(400, f"the JSON body holds more than {MAX_JSON_CONTAINERS} arrays and objects",
                       "json_too_large")
    depth = 0
    for run in _BRACKETS.finditer(bare):  # runs of openers and of closers alternate: at most 2 per container
        size = run.end() - run.start()
        depth = depth + size if bare[run.start()] in b"[{" else max(depth - size, 0)
        if depth > MAX_JSON_DEPTH:
            raise _Refused(400, f"the JSON body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels",
                           "json_too_deep")


def _multipart(content_type: str, body: bytes) -> dict[str, str | bytes]:
    """The text fields of a multipart/form-data body (files are not needed: the prompt names the
    case). Split at its boundary without recursion: at most :data:`MAX_FORM_PARTS` parts, each a
    field or a file, none multipart itself (a form is one level deep); else 400."""
    header = email.parser.HeaderParser(policy=email.policy.HTTP).parsestr(f"Content-Type: {content_type}\r\n\r\n")
    boundary = header.get_param("boundary") if header.get_content_type() == "multipart/form-data" else None
    if not isinstance(boundary, str) or not 0 < len(boundary) <= 70:
        raise _Refused(400, "send the image edit as multipart/form-data with a boundary (of 1 to 70 characters)",
                       "bad_multipart")
    delimiter = re.compile(rb"(?:\A|\r\n)--" + re.escape(boundary.encode("latin-1")) + rb"(--|[ \t]*\r\n)")
    starts, closed = [], False
    for found in delimiter.finditer(body):
        if starts:
            starts[-1] = (starts[-1][0], found.start())
        if found.group(1) == b"--":
            closed = True
            break
        if len(starts) == MAX_FORM_PARTS:
            raise _Refused(400, f"the multipart body has more than {MAX_FORM_PARTS} parts", "bad_multipart")
        starts.append((found.end(), None))
    if not closed or not starts:
        raise _Refused(400, "the multipart body has no parts or no closing boundary", "bad_multipart")
    fields: dict[str, str | bytes] = {}
    for start, end in starts:
        part = body[start:end]
        head, separator, content = part.partition(b"\r\n\r\n")
        if not separator:  # no headers: the part starts with the blank line
            head, content = b"", part.removeprefix(b"\r\n")
        headers = email.parser.BytesHeaderParser(policy=email.policy.HTTP).parsebytes(head + b"\r\n\r\n")
        if headers.get_content_maintype() == "multipart":
            raise _Refused(400, "a part of the multipart body is multipart itself (nested): a form is one level deep",
                           "bad_multipart")
        name = headers.get_param("name", header="content-disposition")
        if isinstance(name, str) and headers.get_filename() is None:
            if headers.get_content_maintype() == "text":
                fields[name] = content.decode(headers.get_content_charset() or "utf-8").strip()
            else:
                fields[name] = content
    return fields


class ZooServer(ThreadingHTTPServer):
    """The server; ``with ZooServer(cases_dirs) as s: s.start(); ... s.base_url``."""

    daemon_threads = True
    request_queue_size = 128  # clients open dozens of connections at once (the default 5 drops some)

    def __init__(self, cases_dirs: Iterable[Path], *, host: str = "127.0.0.1", port: int = 0,
                 latency: float = 0.0, seed: int = 0) -> None:
        self.by_prompt: dict[str, Case] = {}
        self.by_id: dict[str, Case] = {}
        where: dict[str, str] = {}
        for folder in cases_dirs:
            for line, case in CASES.read_numbered(Path(folder)):
                place = f"{CASES.path(Path(folder))}:{line}"
                first = self.by_id.get(case.id)
                if first is not None and first != case:
                    # the oracle finds a generated image's case by the id it records: one id, one case
                    raise TraceError(f"{place}: id: case {case.id!r} is also {where[case.id]}, another case; "
                                     "serve benchmarks whose case ids collide from separate servers")
                where.setdefault(case.id, place)
                self.by_prompt[case.prompt] = case
                self.by_id[case.id] = case
        self.latency = latency
        self.seed = seed
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def pause(self) -> None:
        if self.latency:
            time.sleep(self.latency)

    def case_for(self, prompt: str) -> Case | None:
        """The case a prompt asks for; a collaged case's prompt (``trace run --collage``) is its
        case's with one line added, which is tried without it."""
        found = self.by_prompt.get(prompt.strip()) or self.by_prompt.get(prompt)
        if found is None and "\n" in prompt.strip():
            found = self.by_prompt.get(prompt.strip().rsplit("\n", 1)[0].strip())
        return found

    def case_by_id(self, case_id: str) -> Case | None:
        return self.by_id.get(case_id)

    def start(self) -> "ZooServer":
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        super().__exit__(*exc)


def serve_forever(cases_dirs: list[Path], host: str, port: int, latency: float, seed: int) -> None:
    with ZooServer(cases_dirs, host=host, port=port, latency=latency, seed=seed) as server:
        print(f"serving the synthetic zoo and the oracle at {server.base_url} "
              f"({len(server.by_id)} cases); Ctrl-C stops", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
