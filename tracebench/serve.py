"""``trace serve``: the synthetic zoo and the oracle judge behind a real OpenAI-compatible HTTP API.

The same client path used for real models (the openai client, retries, concurrency, cache,
parsing) is then exercised end to end against it. Endpoints:

- ``POST /v1/images/edits`` (multipart: ``model``, ``prompt``, ``image[]``) and
  ``POST /v1/images/generations`` (JSON): model ``synthetic/PROFILE`` (e.g.
  ``synthetic/global-interference,noise:0.1``); the prompt selects the case among the
  benchmark folders the server was started with; the reply carries ``b64_json``.
- ``POST /v1/chat/completions``: model ``oracle`` (or ``oracle:flip=P,yes-bias=Q``, a judge that
  errs at those rates); answers the questions listed as
  ``- <id>: <text>`` from the record inside the generated image it is sent.
- ``GET /v1/models``.

It binds 127.0.0.1 by default; ``latency`` adds a delay per request (for benchmarks).
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable

from .errors import TraceError
from .records import CASES, Case

__all__ = ["ZooServer", "serve_forever"]

_QUESTION_LINE = re.compile(r"^- (\S+): ", re.MULTILINE)


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

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

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
                body = json.loads(self._body() or b"{}")
                self._image(body.get("model", ""), body.get("prompt", ""))
            elif self.path == "/v1/chat/completions":
                self._chat(json.loads(self._body() or b"{}"))
            else:
                self._error(404, f"no such endpoint: {self.path}")
        except TraceError as err:
            self._error(400, str(err))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
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
            return self._error(400, "the prompt matches no case of the benchmarks this server was started with")
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
        reply = json.dumps(oracle_reply(questions, record, errors, _scale_asked(body)))
        self._send(200, {"id": "chatcmpl-oracle", "object": "chat.completion", "created": int(time.time()),
                         "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                                          "message": {"role": "assistant", "content": reply}}],
                         "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})


def _scale_asked(body: dict) -> str:
    """The scale a judge request asks for, read off the answers its JSON schema allows
    (``tracebench.scales``: "2" only on the ternary scale, "1.0" only on the tiers); binary
    when it names none."""
    try:
        schema = body["response_format"]["json_schema"]["schema"]
        allowed = set(schema["properties"]["answers"]["items"]["properties"]["answer"]["enum"])
    except (KeyError, TypeError):
        return "binary"
    return "ternary" if "2" in allowed else "tiers" if "1.0" in allowed else "binary"


def _multipart(content_type: str, body: bytes) -> dict[str, str]:
    """The text fields of a multipart/form-data body (files are not needed: the prompt names the case)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name and part.get_filename() is None:
            fields[name] = part.get_content().strip() if isinstance(part.get_content(), str) else part.get_content()
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
