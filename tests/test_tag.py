"""``tag_images`` against a real OpenAI-compatible server on loopback, with the real openai client."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from pathlib import Path

import openai
import pytest
from openai_server import OpenAIStub, image_urls, text_of
from PIL import Image

from tracebench.errors import TraceError
from tracebench.library import TaggedImage, content_hash, load_library
from tracebench.apikeys import is_loopback
from tracebench.library._tag import ModelTags, TagOptions, tag_images, tag_schema
from tracebench.resources import read_toml
from tracebench.sample import LibraryIndex

KEY = "sk-test-Zq8XvL2mN0-distinctive-key"
MODEL = "vlm-test"

# The test images: relative path -> (size, color). One JPEG in a sub-folder, the rest PNG.
IMAGES = {"blue.png": ((10, 4), "blue"), "red.png": ((8, 6), "red"), "sub/green.jpg": ((12, 9), "green")}


def good_reply(rel: str) -> dict:
    """A complete reply for one image, every field present (so what is written can be compared as is)."""
    color = IMAGES[rel][1] if rel in IMAGES else "grey"
    tags = ModelTags.model_validate({
        "ent_list": [{"category": "Object", "ent_desc": f"the {color} square in the center",
                      "tag_dict": {"1_Appearance": {"1.1_pattern_texture": ["plain"], "1.2_material": ["paint"]},
                                   "2_Form": {"2.3_shape": ["rectangle"]}},
                      "bbox": [0, 0, 2, 2], "usable_as": ["ip"]}],
        "background": [f"{color} wall"],
        "global_tag": {"4.1_style": ["flat"], "4.5_color_tone": [color]},
    })
    return tags.model_dump(mode="json")


def bad(kind: str, rel: str) -> str:
    reply = good_reply(rel)
    if kind == "not json":
        return '{"ent_list": [ oops'
    if kind == "unknown category":
        reply["ent_list"][0]["category"] = "Vegetable"
    elif kind == "missing field":
        del reply["global_tag"]
    elif kind == "unknown subtype":
        reply["global_tag"]["4.9_mood"] = ["calm"]
    return json.dumps(reply)


@pytest.fixture
def images(tmp_path) -> Path:
    root = tmp_path / "photos"
    for rel, (size, color) in IMAGES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, color).save(root / rel)
    (root / "notes.txt").write_text("not an image")
    return root


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return KEY


@pytest.fixture
def stub():
    with OpenAIStub() as server:
        yield server


class Script:
    """A handler answering per image: each image's replies in turn (the last one repeats)."""

    def __init__(self, images: Path, default=None, **replies) -> None:
        self.names = {f"data:image/{'png' if rel.endswith('png') else 'jpeg'};base64,"
                      f"{base64.b64encode((images / rel).read_bytes()).decode()}": rel
                      for rel in (p.relative_to(images).as_posix() for p in images.rglob("*.*"))}
        self.replies = {rel.replace("__", "/").replace("_", "."): r for rel, r in replies.items()}
        self.default = default or (lambda rel: json.dumps(good_reply(rel)))
        self.seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def image(self, request: dict) -> str:
        (url,) = image_urls(request)
        return self.names[url]

    def __call__(self, request: dict):
        rel = self.image(request)
        with self._lock:
            n = self.seen[rel] = self.seen.get(rel, 0) + 1
        script = self.replies.get(rel)
        if script is None:
            return self.default(rel)
        return script[min(n, len(script)) - 1]


def run(images: Path, out: Path, stub: OpenAIStub, **kw):
    kw = {"model": MODEL, "base_url": stub.base_url, "max_retries": 1, "timeout": 10.0, **kw}
    return tag_images(images, out, TagOptions(**kw))


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# -- good replies ---------------------------------------------------------------------------------


def test_good_replies_make_a_valid_library(images, tmp_path, stub, key):
    stub.handler = Script(images)
    out = tmp_path / "lib"
    report = run(images, out, stub, name="my-photos")

    assert (report.tagged, report.skipped, report.calls) == (3, (), 3)
    lines = (out / "tags.jsonl").read_text().splitlines()
    records = [TaggedImage.model_validate_json(line) for line in lines]
    assert [r.path for r in records] == ["images/blue.png", "images/red.png", "images/sub/green.jpg"]
    for record in records:
        rel = record.path.removeprefix("images/")
        (width, height), _ = IMAGES[rel]
        assert (record.id, record.width, record.height) == (Path(rel).stem, width, height)
        assert (record.source, record.license) == (f"tagged:{MODEL}", "unknown")
        written = record.model_dump(mode="json")
        for field, value in good_reply(rel).items():
            assert written[field] == value, field  # the reply's content, as returned
        assert (out / record.path).read_bytes() == (images / rel).read_bytes()
    assert files_under(out) == sorted([out / "tags.jsonl", out / "library.json"]
                                      + [out / r.path for r in records])
    info, loaded = load_library(out)
    assert info == report.library and info.name == "my-photos" and info.images == 3
    assert info.content_hash == content_hash(out, loaded)


def test_requests_carry_the_image_as_a_data_url_and_the_schema(images, tmp_path, stub, key):
    stub.handler = Script(images)
    run(images, tmp_path / "lib", stub)

    by_image = {stub.handler.image(r): r for r in stub.requests}
    assert sorted(by_image) == sorted(IMAGES)
    for rel, request in by_image.items():
        mime = "image/png" if rel.endswith(".png") else "image/jpeg"
        assert image_urls(request) == [f"data:{mime};base64,{base64.b64encode((images / rel).read_bytes()).decode()}"]
        assert request["model"] == MODEL
        assert request["response_format"] == {
            "type": "json_schema", "json_schema": {"name": "tagged_image", "schema": tag_schema(), "strict": False}}
        system = "\n".join(text_of(request, "system"))
        for category in read_toml("taxonomy", "categories.toml")["categories"]:
            assert category in system
        for subtype in read_toml("taxonomy", "subtypes.toml")["subtypes"]:
            assert subtype in system

    schema = tag_schema()
    assert set(schema["required"]) == {"ent_list", "background", "global_tag"}
    assert schema["$defs"]["Entity"]["properties"]["category"]["enum"] == list(
        read_toml("taxonomy", "categories.toml")["categories"])


def test_entity_names_are_asked_for_and_optional(images, tmp_path, stub, key):
    named = good_reply("red.png")
    named["ent_list"][0]["name"] = "tiles"  # a name: the entity's noun and handle
    old = good_reply("blue.png")
    del old["ent_list"][0]["name"]  # a reply of a model that gives none, as before the field
    blank = good_reply("sub/green.jpg")
    blank["ent_list"][0]["name"] = " "  # no name either
    stub.handler = Script(images, red_png=[json.dumps(named)], blue_png=[json.dumps(old)],
                          sub__green_jpg=[json.dumps(blank)])
    out = tmp_path / "lib"
    report = run(images, out, stub)

    assert (report.tagged, report.skipped, report.calls) == (3, (), 3)
    system = "\n".join(text_of(stub.requests[0], "system"))
    assert '"name"' in system and "short noun phrase" in system
    entity = tag_schema()["$defs"]["Entity"]
    assert "name" in entity["properties"] and "name" not in entity.get("required", [])
    info, records = load_library(out)
    assert [r.ent_list[0].name for r in records] == [None, "tiles", None]  # blue, red, green
    index = LibraryIndex.build(out, info, records)
    assert [e.noun for e in index.entities] == ["square", "tiles", "square"]  # "the blue square in the center"


def test_fenced_json_is_accepted(images, tmp_path, stub, key):
    stub.handler = Script(images, red_png=["```json\n" + json.dumps(good_reply("red.png")) + "\n```"])
    report = run(images, tmp_path / "lib", stub)
    assert (report.tagged, report.calls) == (3, 3)


# -- invalid replies: one corrective retry ---------------------------------------------------------


@pytest.mark.parametrize("kind, hint", [("not json", "not JSON"), ("unknown category", "Vegetable"),
                                        ("missing field", "global_tag"), ("unknown subtype", "4.9_mood")])
def test_an_invalid_reply_is_sent_back_once(images, tmp_path, stub, key, kind, hint):
    stub.handler = Script(images, red_png=[bad(kind, "red.png"), json.dumps(good_reply("red.png"))])
    report = run(images, tmp_path / "lib", stub)

    assert (report.tagged, report.skipped, report.calls) == (3, (), 4)
    red = [r for r in stub.requests if stub.handler.image(r) == "red.png"]
    assert len(red) == 2
    first, second = red
    assert second["messages"][:len(first["messages"])] == first["messages"]
    assistant, correction = second["messages"][len(first["messages"]):]
    assert assistant == {"role": "assistant", "content": bad(kind, "red.png")}
    assert correction["role"] == "user" and hint in correction["content"]
    _, records = load_library(tmp_path / "lib")
    red_record = next(r for r in records if r.id == "red")
    assert red_record.model_dump(mode="json")["ent_list"] == good_reply("red.png")["ent_list"]


@pytest.mark.parametrize("kind", ["not json", "unknown category", "missing field"])
def test_an_image_invalid_twice_is_reported_and_left_out(images, tmp_path, stub, key, kind):
    stub.handler = Script(images, red_png=[bad(kind, "red.png")])
    out = tmp_path / "lib"
    report = run(images, out, stub)

    assert (report.tagged, report.calls) == (2, 4)
    (skipped,) = report.skipped
    assert skipped.path == "red.png"
    assert skipped.reason.startswith("invalid reply after one retry: ") and "\n" not in skipped.reason
    assert stub.handler.seen["red.png"] == 2
    _, records = load_library(out)
    assert [r.id for r in records] == ["blue", "green"]
    assert not (out / "images" / "red.png").exists()


def test_an_empty_or_refused_reply_is_invalid(images, tmp_path, stub, key):
    refusal = {"id": "x", "object": "chat.completion", "created": 0, "model": MODEL,
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": None, "refusal": "I cannot help"}}]}
    stub.handler = Script(images, red_png=[(200, refusal)], blue_png=[""])
    report = run(images, tmp_path / "lib", stub)
    reasons = {s.path: s.reason for s in report.skipped}
    assert "the model refused: I cannot help" in reasons["red.png"]
    assert "the reply is empty" in reasons["blue.png"]
    assert report.tagged == 1


# -- API failures -----------------------------------------------------------------------------------


def test_a_server_error_skips_only_that_image(images, tmp_path, stub, key):
    stub.handler = Script(images, red_png=[(500, "the GPU caught fire")])
    report = run(images, tmp_path / "lib", stub, max_retries=2)

    assert report.tagged == 2
    (skipped,) = report.skipped
    assert skipped.path == "red.png"
    assert "500" in skipped.reason and "the GPU caught fire" in skipped.reason
    assert stub.handler.seen["red.png"] == 3  # the client's own retries: 1 + max_retries
    assert report.calls == 3  # ours: one request per image


def test_every_image_failing_writes_nothing(images, tmp_path, stub, key):
    stub.handler = Script(images, default=lambda rel: "no JSON here")
    out = tmp_path / "lib"
    before = sorted(tmp_path.iterdir())
    with pytest.raises(TraceError, match="no image could be tagged") as caught:
        run(images, out, stub)
    assert "\n" not in str(caught.value)
    assert not out.exists()
    assert sorted(tmp_path.iterdir()) == before  # no staging folder left behind
    assert len(stub.requests) == 6


def test_an_unreachable_server_writes_nothing(images, tmp_path, key):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "lib"
    with pytest.raises(TraceError, match="no image could be tagged"):
        tag_images(images, out, TagOptions(model=MODEL, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0,
                                           timeout=5))
    assert not out.exists()


@pytest.mark.parametrize("status", [401, 404])
def test_a_refused_key_or_model_stops_the_run(images, tmp_path, stub, key, status):
    stub.handler = lambda request: (status, f"refused; you sent {KEY}")
    out = tmp_path / "lib"
    with pytest.raises(TraceError, match=f"refused the request: API error {status}") as caught:
        run(images, out, stub, concurrency=1)
    assert KEY not in str(caught.value)
    assert len(stub.requests) == 1 and not out.exists()


def test_an_unknown_model_stops_the_run_whatever_the_status(tmp_path, stub, key):
    """LiteLLM's proxy answers an unknown model with a 400: after five alike, nothing more is sent."""
    photos = tmp_path / "many"
    photos.mkdir()
    for k in range(12):
        Image.new("RGB", (16, 16), (20 * k, 0, 0)).save(photos / f"p{k:02d}.png")
    stub.handler = lambda request: (400, "Invalid model name passed in model=vlm. Call `/v1/models` to view "
                                         "available models for your key.")
    with pytest.raises(TraceError, match="stopped early, the first 5 calls to openai:.* all failed the same way: "
                                         "API error 400: .*Invalid model name"):
        run(photos, tmp_path / "lib", stub, concurrency=1)
    assert len(stub.requests) == 5 and not (tmp_path / "lib").exists()


def test_a_folder_tagged_from_the_cache_says_the_server_was_not_asked(images, tmp_path, stub, key):
    from test_cli import run_trace

    stub.handler = Script(images)
    out = tmp_path / "lib"
    assert run_trace("tag", str(images), "--model", MODEL, "--base-url", stub.base_url, "--out", str(out)).returncode == 0
    stub.handler = lambda request: (401, "invalid key")
    again = run_trace("tag", str(images), "--model", MODEL, "--base-url", stub.base_url, "--out", str(out))
    assert again.returncode == 0, again.stderr  # the library it wrote is replaced by the same library
    assert "every image came from the cache: the server was not contacted" in again.stderr
    assert (out / "tags.jsonl").is_file()


def test_a_partly_tagged_folder_exits_3_and_the_same_command_completes_it(images, tmp_path, stub, key):
    from test_cli import run_trace

    stub.handler = Script(images, red_png=[(500, "overloaded")])
    out = tmp_path / "lib"
    args = ("tag", str(images), "--model", MODEL, "--base-url", stub.base_url, "--out", str(out), "--max-retries", "0")
    first = run_trace(*args)
    assert first.returncode == 3, first.stderr
    (line,) = first.stderr.strip().splitlines()
    assert line.startswith("trace tag: 1 of 3 images could not be tagged") and "1x API error 500" in line
    assert line.endswith("Ask again with: " + " ".join(["trace", *args[:2], *args[2:]]).replace(str(images), str(images)))
    stub.handler = Script(images)
    again = run_trace(*args)
    assert again.returncode == 0, again.stderr
    assert len((out / "tags.jsonl").read_text().splitlines()) == 3


# -- the key ------------------------------------------------------------------------------------------


def test_the_key_travels_only_in_the_authorization_header(images, tmp_path, stub, key):
    stub.handler = Script(images, red_png=[(500, f"invalid key {KEY}")], blue_png=["not json", f"still {KEY}"])
    out = tmp_path / "lib"
    report = run(images, out, stub, max_retries=0)

    assert report.tagged == 1
    for received in stub.received:
        assert received.headers["authorization"] == f"Bearer {KEY}"
        assert not [name for name, value in received.headers.items() if KEY in value and name != "authorization"]
        assert KEY not in json.dumps(received.body)
    for file in files_under(out):
        assert KEY.encode() not in file.read_bytes(), file
    assert KEY not in report.model_dump_json()
    assert {s.path for s in report.skipped} == {"red.png", "blue.png"}


def test_a_missing_key_is_refused_for_a_remote_server(images, tmp_path, monkeypatch):
    monkeypatch.delenv("MY_VLM_KEY", raising=False)
    out = tmp_path / "lib"
    with pytest.raises(TraceError, match="environment variable MY_VLM_KEY is not set.*vlm.example.com"):
        tag_images(images, out, TagOptions(model=MODEL, base_url="https://vlm.example.com/v1",
                                           api_key_env="MY_VLM_KEY"))
    assert not out.exists()


def test_a_loopback_server_needs_no_key(images, tmp_path, stub, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    stub.handler = Script(images)
    report = run(images, tmp_path / "lib", stub)
    assert report.tagged == 3
    assert {r.headers["authorization"] for r in stub.received} == {"Bearer unused"}


@pytest.mark.parametrize("url, loopback", [
    ("http://127.0.0.1:8000/v1", True), ("http://localhost/v1", True), ("http://[::1]:1234/v1", True),
    ("http://127.9.9.9/v1", True), ("https://api.openai.com/v1", False), ("http://10.0.0.2/v1", False),
    ("http://localhost.example.com/v1", False), ("not a url", False)])
def test_loopback_urls(url, loopback):
    assert is_loopback(url) is loopback


# -- inputs and order ------------------------------------------------------------------------------------


def test_ids_are_unique_and_unreadable_or_hidden_files_are_left_out(tmp_path, stub, key):
    root = tmp_path / "photos"
    for rel in ["a/cat.png", "b/cat.png", "cat-2.PNG", "cat.webp", ".hidden/dog.png", "._cat.png"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        image_format = "WEBP" if rel.endswith("webp") else "PNG"
        Image.new("RGB", (4, 4), (len(rel) * 20, 0, 0)).save(root / rel, format=image_format)
    (root / "broken.jpg").write_bytes(b"not really a jpeg")
    Image.new("RGB", (4, 4)).save(root / "gif.png", format="GIF")
    Image.new("RGB", (4, 4)).save(root / "jpeg.png", format="JPEG")
    stub.handler = lambda request: json.dumps(good_reply("x"))
    report = run(root, tmp_path / "lib", stub)

    reasons = {s.path: s.reason for s in report.skipped}
    assert "not a readable image" in reasons["broken.jpg"]
    assert reasons["gif.png"] == "a GIF image; only PNG, JPEG and WebP are sent"
    _, records = load_library(tmp_path / "lib")
    assert [(r.path, r.id) for r in records] == [("images/a/cat.png", "cat"), ("images/b/cat.png", "cat-3"),
                                                 ("images/cat-2.PNG", "cat-2"), ("images/cat.webp", "cat-4"),
                                                 ("images/jpeg.png", "jpeg")]
    assert report.calls == 5  # neither the unreadable nor the hidden files were sent
    assert sorted(url.split(";")[0] for r in stub.requests for url in image_urls(r)) == \
        ["data:image/jpeg"] + ["data:image/png"] * 3 + ["data:image/webp"]  # the type found, not the suffix


def test_concurrency_is_bounded_and_the_output_order_is_the_path_order(tmp_path, stub, key):
    root = tmp_path / "photos"
    root.mkdir()
    for i in range(6):
        Image.new("RGB", (4, 4), (i * 40, 0, 0)).save(root / f"img{i}.png")
    script = Script(root)
    in_flight, peak, lock = [0], [0], threading.Lock()

    def slow(request):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.02 * (6 - int(script.image(request)[3])))  # later paths answer sooner
        with lock:
            in_flight[0] -= 1
        return script(request)

    stub.handler = slow
    report = run(root, tmp_path / "lib", stub, concurrency=2)
    assert report.tagged == 6 and peak[0] == 2
    assert [json.loads(line)["id"] for line in (tmp_path / "lib" / "tags.jsonl").read_text().splitlines()] == \
        [f"img{i}" for i in range(6)]


def test_bad_arguments_are_refused_before_any_request(images, tmp_path, stub, key):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("mine")
    for call, message in [(lambda: run(images, taken, stub), "already exists"),
                          (lambda: run(tmp_path / "nope", tmp_path / "lib", stub), "not a folder"),
                          (lambda: run(taken, tmp_path / "lib", stub), "no images"),
                          (lambda: run(images, tmp_path / "lib", stub, concurrency=0), "concurrency"),
                          (lambda: run(images, tmp_path / "lib", stub, model=" "), "model")]:
        with pytest.raises(TraceError, match=message):
            call()
    assert stub.received == [] and (taken / "x").read_text() == "mine"


# -- the stub itself -----------------------------------------------------------------------------------------


def test_the_stub_speaks_the_openai_shape():
    with OpenAIStub(lambda request: "hello", models=("a", "b")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == ["a", "b"]
        reply = client.chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "hello" and reply.usage.completion_tokens == 1
        assert server.requests == [{"model": "a", "messages": [{"role": "user", "content": "hi"}]}]
        assert server._server.server_address[0] == "127.0.0.1"
    # A handler that raises answers 500, and the error reaches the test when the block ends.
    with pytest.raises(ZeroDivisionError), OpenAIStub(lambda request: 1 / 0) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError, match="stub handler failed"):
            client.chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}])


# -- the command ------------------------------------------------------------------------------------


def test_trace_tag_command_end_to_end(images, tmp_path, stub, key):
    from test_cli import run_trace

    stub.handler = Script(images)
    out = tmp_path / "lib"
    result = run_trace("tag", str(images), "--model", MODEL, "--base-url", stub.base_url, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{out}: 3 images tagged, 0 skipped, 3 requests")
    check = run_trace("library", "validate", str(out))
    assert check.returncode == 0, check.stderr


def test_trace_tag_command_failure_is_one_line_and_writes_nothing(images, tmp_path, stub, key):
    from test_cli import run_trace

    stub.handler = lambda request: (500, "server on fire")
    out = tmp_path / "lib"
    result = run_trace("tag", str(images), "--model", MODEL, "--base-url", stub.base_url, "--out", str(out),
                       "--max-retries", "0")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("trace tag: ")
    assert KEY not in result.stderr + result.stdout
    assert not out.exists()


def test_replies_are_cached_and_a_rerun_asks_only_for_what_failed(images, tmp_path, stub, key):
    stub.handler = Script(images, red_png=[(500, "overloaded")])
    first = run(images, tmp_path / "lib", stub, max_retries=0)
    assert [s.path for s in first.skipped] == ["red.png"] and first.cache_hits == 0
    stub.handler = Script(images)
    second = run(images, tmp_path / "lib-retry", stub)  # same folder, so the same cache
    assert second.calls == 1 and second.cache_hits == first.tagged and not second.skipped
    third = run(images, tmp_path / "lib-again", stub)
    assert third.calls == 0 and third.cache_hits == second.tagged
    assert (tmp_path / "lib-again" / "tags.jsonl").read_bytes() == (tmp_path / "lib-retry" / "tags.jsonl").read_bytes()
    other = run(images, tmp_path / "lib-other", stub, model="another-model")  # another model: asked again
    assert other.cache_hits == 0 and other.calls == other.tagged
    assert not any(KEY in p.read_text(errors="ignore") for p in files_under(tmp_path / ".tracebench-tag-cache"))
