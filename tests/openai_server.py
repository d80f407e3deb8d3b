"""A real OpenAI-compatible HTTP server on 127.0.0.1, scripted per test.

Tests drive the real ``openai`` client against it, so retries, timeouts, headers and
response parsing are the ones used against real models. It implements
``POST /v1/chat/completions``, ``POST /v1/images/edits`` (multipart; answered with
``stub.image``, a small PNG, or with the error ``stub.image_error`` when set) and ``GET /v1/models``; what a chat request gets back is
decided by ``stub.handler(request_json)``, which returns one of:

- ``"text"``: a 200 chat completion whose message content is the text;
- ``(status, "text")``: the same when status is 200, else an OpenAI-shaped error with that message;
- ``(status, {...})``: that JSON body, as is (a custom completion, an odd error ...).

Every request is recorded (``stub.received``: path, headers, JSON body, the body's bytes; ``stub.requests``:
the bodies of the chat requests). A handler that raises answers 500 and is re-raised when
the ``with`` block ends, so a broken test handler cannot pass as a server error.

    with OpenAIStub(lambda request: '{"answer": "yes"}') as stub:
        client = openai.OpenAI(base_url=stub.base_url, api_key="unused")
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["OpenAIStub", "Received", "Reply", "completion", "error", "image_urls", "text_of"]

Reply = str | tuple[int, str | dict[str, Any]]
Handler = Callable[[dict[str, Any]], Reply]

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error"}


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict[str, Any] | None
    raw: bytes = b""  # the body as sent, byte for byte (JSON, or multipart image requests)


def completion(content: str | None, *, model: str = "stub-model", finish_reason: str = "stop",
               prompt_tokens: int = 0) -> dict[str, Any]:
    """A chat completion body in the OpenAI shape, with one choice."""
    completion_tokens = len((content or "").split())
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason, "logprobs": None,
                     "message": {"role": "assistant", "content": content, "refusal": None}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def error(status: int, message: str) -> dict[str, Any]:
    """An error body in the OpenAI shape."""
    return {"error": {"message": message, "type": _ERROR_TYPES.get(status, "server_error"),
                      "param": None, "code": None}}


def image_urls(request: dict[str, Any]) -> list[str]:
    """The image URLs (data URLs included) of a chat request, in message order."""
    return [part["image_url"]["url"] for message in request.get("messages", [])
            if isinstance(message.get("content"), list)
            for part in message["content"] if part.get("type") == "image_url"]


def text_of(request: dict[str, Any], role: str = "user") -> list[str]:
    """The text parts of a chat request's messages with ``role``, in order."""
    texts = []
    for message in request.get("messages", []):
        if message.get("role") != role:
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [part["text"] for part in content if part.get("type") == "text"]
    return texts


def _small_png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 40, 40)).save(buffer, format="PNG")
    return buffer.getvalue()


class OpenAIStub:
    """An OpenAI-compatible server on 127.0.0.1 and an ephemeral port, in a background thread.

    ``handler`` may be replaced at any time. ``models`` are listed by ``GET /v1/models``.
    Error replies carry ``retry-after-ms`` (``retry_after_ms``; None for none), which the
    openai client obeys, so its retries cost milliseconds in tests.
    """

    def __init__(self, handler: Handler | None = None, *, models: tuple[str, ...] = ("stub-model",),
                 retry_after_ms: int | None = 1) -> None:
        self.handler: Handler = handler or (lambda request: "{}")
        self.image = _small_png()
        self.image_error: tuple[int, str] | None = None  # the images endpoint's answer instead, when set
        self.models = models
        self.retry_after_ms = retry_after_ms
        self.received: list[Received] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits for one, and tests start and stop many servers.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
        if exc_type is None and self.errors:
            raise self.errors[0]

    # -- what tests read ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "the stub is not running"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """The URL to give the client as ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat completion requests received, in arrival order."""
        with self._lock:
            return [r.body for r in self.received if r.path == "/v1/chat/completions" and r.body is not None]

    # -- serving -----------------------------------------------------------------------------

    def _record(self, received: Received) -> None:
        with self._lock:
            self.received.append(received)

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        try:
            reply = self.handler(body)
        except BaseException as err:  # noqa: BLE001 - pytest.fail too; re-raised when the block ends
            with self._lock:
                self.errors.append(err)
            return 500, error(500, f"stub handler failed: {type(err).__name__}: {err}")
        status, payload = (200, reply) if isinstance(reply, str) else reply
        if isinstance(payload, dict):
            return status, payload
        if status == 200:
            return 200, completion(payload, model=body.get("model", "stub-model"))
        return status, error(status, payload)


def _handler_class(stub: OpenAIStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
        timeout = 30  # an idle keep-alive connection does not hold a thread forever

        def do_GET(self) -> None:  # http.server's naming
            stub._record(Received("GET", self.path, self._headers(), None))
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "stub"} for m in stub.models]})
            else:
                self._send(404, error(404, f"no route {self.path}"))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/v1/images/edits":
                stub._record(Received("POST", self.path, self._headers(), None, raw))
                if stub.image_error is not None:
                    self._send(stub.image_error[0], error(*stub.image_error))
                    return
                self._send(200, {"created": int(time.time()),
                                 "data": [{"b64_json": base64.b64encode(stub.image).decode()}]})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                stub._record(Received("POST", self.path, self._headers(), None, raw))
                self._send(400, error(400, "the body is not JSON"))
                return
            stub._record(Received("POST", self.path, self._headers(), body, raw))
            if self.path != "/v1/chat/completions":
                self._send(404, error(404, f"no route {self.path}"))
                return
            self._send(*stub._chat(body))

        def _headers(self) -> dict[str, str]:
            return {name.lower(): value for name, value in self.headers.items()}

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if status >= 400 and stub.retry_after_ms is not None:
                self.send_header("retry-after-ms", str(stub.retry_after_ms))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    return Handler
