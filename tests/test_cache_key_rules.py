"""Every provider's cache key, part by part, on a hand-made case: what it holds (what changes the
output) and what it never holds (API keys, timeouts, retries, concurrency), written out in full:
a key that changes between versions empties every user's cache. Pure and fast: the tests
bench/mutation.py runs against the key functions."""

from __future__ import annotations

import asyncio
import json

import pytest

from tracebench.cache import Cache, cache_key, sha256
from tracebench.providers import ModelAccess, ModelSettings, make_generator, make_judge
from tracebench.providers._openai import _judge_text, _question_texts, _templates_hash
from tracebench.records import Case, Question, Reference

CASE = Case(id="s1-00000", slot=1, template="f", formula='f1(I1, "the dog")', prompt="Generate a new scene. A dog.",
            text_only_prompt="Generate a new scene. A plush dog.", scene="A {member}.",
            references=(Reference(image="Image 1", path="references/syn-0001.png", source_id="syn-0001"),), terms=(),
            checklist=(Question(id="f1:existence", op="anchor", target="f1", aspect="existence",
                                question="Does the image show the dog ('dog_A')?", expected="yes"),
                       Question(id="C0:duplication", op="compose", target="C0", aspect="duplication",
                                question="Does the dog ('dog_A') appear more than once?", expected="no")))
REF, IMAGE = b"reference bytes", b"image bytes"
SETTINGS = ModelSettings(base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=5.0)


def test_cache_key_is_the_sha256_of_canonical_json():
    parts = {"b": [1, "é"], "a": {"y": 2, "x": None}}
    text = '{"a":{"x":null,"y":2},"b":[1,"é"]}'
    assert cache_key(**parts) == sha256(text.encode()) == cache_key(a={"x": None, "y": 2}, b=[1, "é"])
    assert cache_key(adapter="oracle", image="00") == sha256(b'{"adapter":"oracle","image":"00"}')


def test_the_synthetic_generator_key():
    assert make_generator("synthetic:global-interference", ModelSettings(seed=3)).key(CASE, [REF]) == {
        "adapter": "synthetic", "profile": "global-interference", "case": CASE.model_dump(mode="json"), "seed": 3}


def test_the_command_generator_key():
    assert make_generator("command:./make.sh {output}").key(CASE, [REF]) == {
        "adapter": "command", "command": "./make.sh {output}", "case": CASE.model_dump(mode="json"),
        "images": [sha256(REF)]}


def test_a_folder_is_not_cached():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "x.png").write_bytes(IMAGE)
        assert make_generator(f"folder:{tmp}").key(CASE, [REF]) is None


def test_the_openai_keys_hold_the_model_the_endpoint_and_the_content_never_the_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-never-in-a-key")
    generator = make_generator("openai:gen-model", SETTINGS)
    assert generator.key(CASE, [REF]) == {"adapter": "openai-images", "model": "gen-model",
                                          "base_url": "http://127.0.0.1:9/v1", "prompt": CASE.prompt,
                                          "images": [sha256(REF)]}
    judge = make_judge("openai:judge-model", SETTINGS)
    questions = list(CASE.checklist)
    assert judge.key(CASE, questions, IMAGE, [REF]) == {
        "adapter": "openai-judge", "model": "judge-model", "base_url": "http://127.0.0.1:9/v1",
        "messages": _judge_text(CASE.prompt, _question_texts(questions)), "images": [sha256(REF)],
        "image": sha256(IMAGE), "templates": _templates_hash()}
    slower = make_judge("openai:judge-model", ModelSettings(base_url="http://127.0.0.1:9/v1", max_retries=7,
                                                            timeout=99.0))
    assert cache_key(**slower.key(CASE, questions, IMAGE, [REF])) == cache_key(**judge.key(CASE, questions, IMAGE,
                                                                                           [REF]))
    assert "sk-secret" not in json.dumps(judge.key(CASE, questions, IMAGE, [REF]))


def test_the_oracle_key_and_an_erring_oracle_s():
    questions = list(CASE.checklist)
    plain = {"adapter": "oracle", "questions": [q.model_dump(mode="json") for q in questions], "image": sha256(IMAGE)}
    assert make_judge("oracle").key(CASE, questions, IMAGE, [REF]) == plain
    assert make_judge("oracle:yes-bias=0.2,flip=0.1").key(CASE, questions, IMAGE, [REF]) == {
        **plain, "errors": "oracle:flip=0.1,yes-bias=0.2"}


class _Counting:
    """A generator plugin that counts its calls (the wrapper's cache decides whether it is called)."""

    def __init__(self, sample: int = 0) -> None:
        from tracebench.providers import Generator

        class Counting(Generator):
            spec = "python:counting"

            def __init__(self) -> None:
                self.calls = 0
                self.seen: list = []

            async def generate(self, case, references):
                self.calls += 1
                self.seen.append((case.id, list(references)))
                return IMAGE + bytes([self.calls])

        self.provider = Counting()
        self.provider.sample = sample


def test_a_later_generation_is_cached_apart_and_the_first_keeps_its_key(tmp_path):
    cache = Cache(tmp_path)
    access = ModelAccess(cache, concurrency=1, max_retries=0)

    def generate(sample: int) -> tuple[bytes, int]:
        made = _Counting(sample).provider
        data = asyncio.run(access.generate(made, CASE, [REF])).image
        return data, made.calls

    first, calls = generate(0)
    assert calls == 1 and access.stats.calls == {"python:counting": 1} and access.stats.cache_hits == 0
    assert generate(0) == (first, 0)  # the first generation, from the cache
    assert access.stats.cache_hits == 1 and access.stats.calls == {"python:counting": 1}
    second, calls = generate(1)
    assert calls == 1 and generate(1) == (second, 0)  # the second: a call of its own, cached apart
    assert access.stats.cache_hits == 2 and access.stats.calls == {"python:counting": 2}
    base = {"provider": "python:counting", "prompt": CASE.prompt, "images": [sha256(REF)]}
    assert cache.get(cache_key(**base)) == ({"generator": "python:counting"}, first)
    assert cache.get(cache_key(**base, sample=1)) == ({"generator": "python:counting"}, second)
    assert cache.get(cache_key(**base, sample=2)) is None


@pytest.mark.parametrize("sample", [-1])
def test_a_negative_generation_is_refused(sample):
    from tracebench.errors import TraceError

    with pytest.raises(TraceError, match="sample"):
        ModelSettings(sample=sample)


def test_the_default_keys_of_a_plugin():
    from tracebench.providers import Generator, Judge

    class Plain(Generator):
        spec = "python:plain"

        def generate(self, case, references):
            return IMAGE

    class Asker(Judge):
        spec = "python:asker"

        def ask(self, case, questions, image, references):
            return {q.id: "yes" for q in questions}

    assert Plain().key(CASE, [REF]) == {"provider": "python:plain", "prompt": CASE.prompt, "images": [sha256(REF)]}
    assert Asker().key(CASE, list(CASE.checklist), IMAGE, [REF]) == {
        "provider": "python:asker", "prompt": CASE.prompt,
        "questions": [["f1:existence", "Does the image show the dog ('dog_A')?"],
                      ["C0:duplication", "Does the dog ('dog_A') appear more than once?"]],
        "images": [sha256(REF)], "image": sha256(IMAGE)}


def test_a_judge_reply_is_cached_under_its_key_only_when_complete(tmp_path):
    from tracebench.providers import Judge

    class Asker(Judge):
        spec = "python:asker"

        def __init__(self) -> None:
            self.calls = 0

        def ask(self, case, questions, image, references):
            self.calls += 1
            return {q.id: "yes" for q in questions}

    cache = Cache(tmp_path)
    access = ModelAccess(cache, concurrency=1, max_retries=0)
    judge, questions = Asker(), list(CASE.checklist)
    expected_key = cache_key(**judge.key(CASE, questions, IMAGE, [REF]))

    def ask(keep):
        return asyncio.run(access.ask(judge, CASE, questions, IMAGE, [REF], keep=keep))

    reply, key = ask(lambda text: False)  # incomplete: not kept, asked again next time
    assert key == expected_key and judge.calls == 1 and cache.get(key) is None
    again, _ = ask(lambda text: True)
    assert judge.calls == 2 and again.text == reply.text and cache.get(key)[0] == {"judge": "python:asker",
                                                                                    "raw": reply.text}
    third, key3 = ask(lambda text: True)
    assert judge.calls == 2 and third.text == reply.text and key3 == key  # from the cache


def test_the_wrapper_passes_the_call_through_and_counts_only_model_calls(tmp_path):
    """The provider gets the case and references given; a folder read (no key) is not cached and
    not counted as a model call; without a cache nothing is stored."""
    made = _Counting().provider
    access = ModelAccess(Cache(tmp_path / "c"), concurrency=1, max_retries=0)
    asyncio.run(access.generate(made, CASE, [REF]))
    assert made.seen == [(CASE.id, [REF])]
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / f"{CASE.id}.png").write_bytes(IMAGE)
    reader = make_generator(f"folder:{folder}")
    entries = sorted(p for p in (tmp_path / "c").rglob("*") if p.is_file())
    assert entries  # the counting generator's image
    assert asyncio.run(access.generate(reader, CASE, [REF])).image == IMAGE
    assert access.stats.calls == {"python:counting": 1}
    assert sorted(p for p in (tmp_path / "c").rglob("*") if p.is_file()) == entries
    uncached = ModelAccess(None, concurrency=1, max_retries=0)
    again = _Counting().provider
    asyncio.run(uncached.generate(again, CASE, [REF]))
    asyncio.run(uncached.generate(again, CASE, [REF]))
    assert again.calls == 2 and uncached.stats.cache_hits == 0


def test_a_judge_s_reply_is_scrubbed_counted_and_a_failure_carries_its_key(tmp_path):
    from tracebench.providers import CallFailed, Judge, Reply

    class Leaky(Judge):
        spec = "python:leaky"

        def __init__(self, fail: bool = False) -> None:
            self.fail, self.seen = fail, []

        def secrets(self):
            return ("sk-leaked-key-123",)

        def ask(self, case, questions, image, references):
            self.seen.append((case.id, [q.id for q in questions], image, list(references)))
            if self.fail:
                raise CallFailed("down")
            return Reply('{"answers": [], "note": "sk-leaked-key-123"}', tokens=7)

    access = ModelAccess(Cache(tmp_path), concurrency=1, max_retries=0)
    judge, questions = Leaky(), list(CASE.checklist)
    seen_texts = []
    reply, key = asyncio.run(access.ask(judge, CASE, questions, IMAGE, [REF],
                                        keep=lambda text: seen_texts.append(text) or True))
    assert judge.seen == [(CASE.id, ["f1:existence", "C0:duplication"], IMAGE, [REF])]
    assert reply.text == '{"answers": [], "note": "***"}' and seen_texts == [reply.text]
    assert reply.tokens == 7 and access.stats.tokens == 7
    asyncio.run(access.ask(Leaky(), CASE, questions, IMAGE + b"2", [REF], keep=lambda text: True))
    assert access.stats.tokens == 14 and access.stats.cache_hits == 0
    asyncio.run(access.ask(Leaky(), CASE, questions, IMAGE, [REF], keep=lambda text: True))
    assert access.stats.cache_hits == 1 and access.stats.tokens == 14
    asyncio.run(access.ask(Leaky(), CASE, questions, IMAGE, [REF], keep=lambda text: True))
    assert access.stats.cache_hits == 2
    assert Cache(tmp_path).get(key)[0] == {"judge": "python:leaky", "raw": '{"answers": [], "note": "***"}'}
    broken = Leaky(fail=True)
    with pytest.raises(CallFailed) as info:
        asyncio.run(access.ask(broken, CASE, questions, IMAGE + b"3", [REF], keep=lambda text: True))
    assert info.value.cache_key == cache_key(**broken.key(CASE, questions, IMAGE + b"3", [REF]))


def test_the_zoo_seed_of_a_later_generation():
    """sample 0 keeps the seed; a later one is derived from both (documented, so the images of a
    repeated diagnosis are the same in every version), within 31 bits."""
    import hashlib

    from tracebench.providers._local import sample_seed

    assert sample_seed(5, 0) == 5
    for seed, sample in ((0, 1), (5, 2), (123456, 7)):
        digest = hashlib.sha256(f"tracebench-sample/{seed}/{sample}".encode()).digest()
        assert sample_seed(seed, sample) == int.from_bytes(digest[:4], "big") >> 1 < 2**31
    assert make_generator("synthetic:perfect", ModelSettings(seed=5, sample=2)).key(CASE, [REF])["seed"] == \
        sample_seed(5, 2)
    from tracebench.zoo import OracleJudge

    assert make_judge("oracle").spec == "oracle" and OracleJudge().spec == "oracle" and not OracleJudge().errors
    assert make_judge("oracle:yes-bias=0.2,flip=0.1").spec == "oracle:flip=0.1,yes-bias=0.2"
