"""The references a judge call sends: with ``--judge-batch op`` an ``openai:`` judge sends each
batch only the reference images its questions name (``Question.images``), each labelled with
its number in the case ("Image 3:") after a line saying which are shown; a call asking the
whole checklist (``--judge-batch case``) sends what it always sent, byte for byte, under the
cache key it always had. The requests are read as the recording stub server
(tests/openai_server.py) received them; the dry run counts what they carry.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from openai_server import OpenAIStub, image_urls
from tracebench.cache import cache_key, sha256
from tracebench.providers import ModelSettings, make_judge, shown_references
from tracebench.records import Case, read_cases
from tracebench.run import RunOptions, run_benchmark
from tracebench.run._harness import _by_op
from tracebench.sample import ClutterSpec, SampleOptions, sample_benchmark
from tracebench.zoo import read_record

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)
GENERATOR = "synthetic:perfect"


@pytest.fixture(scope="module")
def bench(shared_folder) -> Path:
    """tests/test_providers.py's benchmark, under its name: made once for both modules."""
    return shared_folder("test_providers-bench", lambda out: sample_benchmark(
        out, SampleOptions(slots=(1, 2, 3, 5), per_slot=3, seed=2, applications=False)))


@pytest.fixture(scope="module")
def cluttered(shared_folder) -> Path:
    """Eight distractors a case where the library has them (trace sample --distractors 8)."""
    return shared_folder("test_judge_references-cluttered", lambda out: sample_benchmark(
        out, SampleOptions(slots=(2, 4), per_slot=2, seed=4, applications=False, clutter=ClutterSpec(low=8, high=8))))


def question_ids_asked(request: dict) -> list[str]:
    schema = request["response_format"]["json_schema"]["schema"]
    return schema["properties"]["answers"]["items"]["properties"]["id"]["enum"]


def answering(request: dict) -> str:
    return json.dumps({"answers": [{"id": q, "answer": "yes", "reason": "stub"} for q in question_ids_asked(request)]})


def content_of(request: dict) -> list[dict]:
    """The user message's parts: the labels, the images, the questions."""
    (user,) = [m for m in request["messages"] if m["role"] == "user"]
    return user["content"]


def layout(request: dict) -> list[tuple[str, bytes | str]]:
    """The user message as ("text", text) and ("image", bytes) in order."""
    return [("text", part["text"]) if part["type"] == "text" else
            ("image", base64.b64decode(part["image_url"]["url"].split(",", 1)[1])) for part in content_of(request)]


def case_of(request: dict, cases: dict[str, Case]) -> Case:
    """The case a request judges: the record inside its generated image (the last image)."""
    return cases[read_record(base64.b64decode(image_urls(request)[-1].split(",", 1)[1])).case_id]


def named(questions) -> list[int]:
    """The numbers of the references the questions name, read here from each question's images field."""
    return sorted({int(image.split()[-1]) for q in questions for image in q.images})


def judged_requests(bench: Path, tmp_path: Path, judge_batch: str) -> tuple[list[dict], dict[str, Case]]:
    """The chat requests of ``trace run --judge-batch JUDGE_BATCH`` over ``bench``, as the stub received them."""
    with OpenAIStub(answering) as stub:
        manifest = run_benchmark(bench, tmp_path / f"run-{judge_batch}", RunOptions(
            generator=GENERATOR, judges=[f"openai:stub-model@{stub.base_url}"], settings=SETTINGS,
            judge_batch=judge_batch, concurrency=2, progress=False))
        requests = stub.requests
    assert manifest.abstentions == 0
    assert ("judge_shown" in manifest.hashes) == (judge_batch == "op")  # run.json names the line's template
    return requests, {c.id: c for c in read_cases(bench)}


def check_op_requests(bench: Path, requests: list[dict], cases: dict[str, Case]) -> dict[str, int]:
    """Each request of an op batch carries exactly the references its questions name, each after
    the label of its number in the case, a line first saying which when not all are sent;
    counts of what was seen."""
    seen = {"calls": 0, "some": 0, "none": 0, "all": 0, "references": 0}
    batches = {(c.id, tuple(q.id for q in batch)) for c in cases.values() for batch in _by_op(c.checklist)}
    asked = set()
    for request in requests:
        case = case_of(request, cases)
        ids = question_ids_asked(request)
        asked.add((case.id, tuple(ids)))
        questions = [q for q in case.checklist if q.id in set(ids)]
        numbers = named(questions)
        files = {k: (bench / r.path).read_bytes() for k, r in enumerate(case.references, 1)}
        parts = layout(request)
        every = numbers == sorted(files)
        if not every:  # the line saying what is shown, then only the named images
            kind, note = parts.pop(0)
            assert kind == "text", (case.id, ids)
            assert note.startswith(f"The case has {len(files)} reference images" if len(files) > 1 else
                                   "The case has one reference image"), note
            assert re.findall(r"Image \d+", note.split(".", 1)[1]) == [f"Image {n}" for n in numbers], note
        expected = [x for n in numbers for x in (("text", f"Image {n}:"), ("image", files[n]))]
        assert parts[:len(expected)] == expected, (case.id, ids)
        assert parts[len(expected)][1] == "The generated image:" and parts[len(expected) + 2][0] == "text"
        assert len(parts) == len(expected) + 3
        for q in questions:  # every image a question's text names is sent, under that number
            for label in re.findall(r"\bImage \d+\b", q.question):
                assert ("text", f"{label}:") in parts, (q.id, label)
        seen["calls"] += 1
        seen["references"] += len(numbers)
        seen["all" if every else "some" if numbers else "none"] += 1
    assert asked == batches  # one request per operator of each case, each asking its batch
    return seen


def test_an_op_batch_sends_exactly_the_references_its_questions_name(bench, tmp_path):
    requests, cases = judged_requests(bench, tmp_path, "op")
    seen = check_op_requests(bench, requests, cases)
    assert seen["some"] > 0 and seen["none"] > 0  # batches sending a part of the references, and none
    before = sum(len(c.references) for c in cases.values() for _ in _by_op(c.checklist))
    assert seen["references"] < before


def test_a_case_batch_sends_every_reference_as_before(bench, tmp_path):
    """--judge-batch case: every reference labelled by its number, then the generated image and
    the questions; no line about what is shown."""
    requests, cases = judged_requests(bench, tmp_path, "case")
    assert len(requests) == len(cases)
    for request in requests:
        case = case_of(request, cases)
        assert question_ids_asked(request) == [q.id for q in case.checklist]
        files = [(bench / r.path).read_bytes() for r in case.references]
        expected = [x for k, data in enumerate(files, 1) for x in (("text", f"Image {k}:"), ("image", data))]
        parts = layout(request)
        assert parts[:len(expected)] == expected
        assert [kind for kind, _ in parts[len(expected):]] == ["text", "image", "text"]
        assert parts[len(expected)][1] == "The generated image:"


def test_a_benchmark_with_distractors_sends_an_op_batch_its_named_references_and_the_dry_run_counts_them(
        cluttered, tmp_path):
    cases = {c.id: c for c in read_cases(cluttered)}
    assert any(len(c.distractors) == 8 for c in cases.values())
    requests, _ = judged_requests(cluttered, tmp_path, "op")
    seen = check_op_requests(cluttered, requests, cases)
    for request in requests:  # a rejection question is sent the term's image and the distractor's
        case = case_of(request, cases)
        for q in case.checklist:
            if q.aspect == "rejection" and q.id in question_ids_asked(request):
                distractor = next(d for d in case.distractors if q.id.endswith(f".{d.id}"))
                assert ("text", f"{distractor.image}:") in layout(request)
    sent = seen["calls"] + seen["references"]  # each call's generated image and its references
    before = sum(len(c.references) + 1 for c in cases.values() for _ in _by_op(c.checklist))
    assert sent < 0.7 * before  # distractors are named by their own questions alone
    with OpenAIStub(answering) as stub:  # never called: a dry run
        estimate = run_benchmark(cluttered, tmp_path / "dry", RunOptions(
            generator=GENERATOR, judges=[f"openai:stub-model@{stub.base_url}"], settings=SETTINGS,
            judge_batch="op", dry_run=True, progress=False))
        assert stub.requests == []
    assert estimate.images_to_judges == sent and sum(estimate.judge_calls.values()) == seen["calls"]


# ------------------------------------------------------------------------------ the request of one call

REFERENCES = [b"\x89PNG\r\n\x1a\n" + f"reference {k}".encode() for k in (1, 2, 3)]
IMAGE = b"\x89PNG\r\n\x1a\n" + b"generated"


def _question(qid: str, op: str, text: str, images: tuple[str, ...] = ()) -> dict:
    return {"id": qid, "op": op, "target": qid.split(":")[0], "aspect": qid.split(":")[1], "question": text,
            "expected": "yes", "images": list(images)}


CASE = Case.model_validate({
    "id": "fixed-1", "slot": 2, "template": "C(f, f ⊕ g_style)", "formula": "C1(f1(I1), f2(I2) ⊕ g_style1(I3))",
    "prompt": "The dog ('dog_A') from Image 1 and the cat ('cat_A') from Image 2, in the style of Image 3.",
    "text_only_prompt": "A dog and a cat, painted.", "scene": "{members}",
    "references": [{"image": f"Image {k}", "path": f"references/r{k}.png", "source_id": f"r{k}"} for k in (1, 2, 3)],
    "terms": [],
    "checklist": [
        _question("f1:existence", "anchor", "Does the image show the dog ('dog_A')?"),
        _question("f1:identity", "anchor", "Does the dog ('dog_A') keep the identity of [the dog] in Image 1?",
                  ("Image 1",)),
        _question("g_style1:presence", "disentangle", "Does the whole image show the style of Image 3?", ("Image 3",)),
        _question("f2+g_style1:integrity", "apply", "Does the requested content stay recognizable?"),
        _question("C1:leakage", "compose", "Does the image contain objects from Image 1, Image 2 and Image 3 that "
                  "were not asked for?", ("Image 1", "Image 2", "Image 3")),
    ]})

# What the call asking CASE's whole checklist, and the call asking its compose questions (which
# name every reference), sent before op batches sent their named references alone (computed by
# the tree before that change, 9c6d90a): the SHA-256 of the canonical JSON of the body and the
# cache key. A change of the judge's templates (templates/judge/) changes them: pin them anew
# then, saying so.
CASE_BODY, CASE_KEY = ("73000545641bdf468dc86a6e41ebc822701de25b443ad6dfd6634c1d455bdf25",
                       "c53ae1b31cf8e56eb879f258ce72945a5582c46b5aac49779b6513bf4b03d9fd")
COMPOSE_BODY, COMPOSE_KEY = ("b3bc053428637b3818159721c263f73b4348ae42ba650e005f1316b2b391325d",
                             "f28137e5394a8ac0d422aa1e71bd3f6b702febc959aca5944bc1bc27b2d0d66d")


FIXED = ModelSettings(base_url="http://127.0.0.1:9/v1")  # a cache key names the server: one fixed URL (never called)


def _asked(questions) -> tuple[dict, str]:
    """The body the stub received for one call of an openai: judge asking ``questions`` of CASE,
    and the call's cache key (the judge's at the FIXED URL)."""
    with OpenAIStub(answering) as stub:
        judge = make_judge("openai:stub-model", ModelSettings(base_url=stub.base_url, max_retries=0, timeout=30.0))

        async def ask() -> None:
            await judge.ask(CASE, questions, IMAGE, REFERENCES)
            await judge.aclose()

        asyncio.run(ask())
        (body,) = stub.requests
    return body, cache_key(**make_judge("openai:stub-model", FIXED).key(CASE, questions, IMAGE, REFERENCES))


def canonical(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
                          ).hexdigest()


def test_a_call_asking_the_whole_checklist_sends_the_bytes_and_has_the_key_it_always_had():
    body, key = _asked(list(CASE.checklist))
    assert (canonical(body), key) == (CASE_BODY, CASE_KEY)
    parts = layout(body)
    assert [p[1] for p in parts[:6]] == ["Image 1:", REFERENCES[0], "Image 2:", REFERENCES[1], "Image 3:",
                                         REFERENCES[2]]


@pytest.mark.parametrize("op, sent", [("anchor", [1]), ("disentangle", [3]), ("apply", []), ("compose", [1, 2, 3])])
def test_one_operators_call_sends_the_references_it_names_under_their_numbers(op, sent):
    questions = [q for q in CASE.checklist if q.op == op]
    body, key = _asked(questions)
    parts = layout(body)
    whole = _asked(list(CASE.checklist))[1]
    judge = make_judge("openai:stub-model", FIXED)
    if sent == [1, 2, 3]:  # every reference named: the request and the key it always had
        assert (canonical(body), key) == (COMPOSE_BODY, COMPOSE_KEY)
        assert shown_references(CASE, questions) is None and "shown" not in judge.key(CASE, questions, IMAGE, REFERENCES)
        assert [p[1] for p in parts[:6]] == ["Image 1:", REFERENCES[0], "Image 2:", REFERENCES[1], "Image 3:",
                                             REFERENCES[2]]
        return
    note = parts.pop(0)[1]
    assert note.startswith("The case has 3 reference images (Image 1 to Image 3).")
    assert note.endswith(f"{', '.join(f'Image {n}' for n in sent)}." if sent else "none is shown.")
    assert parts[:2 * len(sent)] == [x for n in sent for x in (("text", f"Image {n}:"), ("image", REFERENCES[n - 1]))]
    assert parts[2 * len(sent):2 * len(sent) + 2] == [("text", "The generated image:"), ("image", IMAGE)]
    parts_key = judge.key(CASE, questions, IMAGE, REFERENCES)
    assert parts_key["images"] == [sha256(REFERENCES[n - 1]) for n in sent]
    assert parts_key["shown"]["images"] == sent and parts_key["shown"]["of"] == 3
    assert key != whole and judge.references_sent(CASE, questions) == tuple(n - 1 for n in sent)
    assert note in judge.prompt_text(CASE, questions)


def test_every_reference_is_sent_where_the_case_cannot_say_which_are_needed():
    questions = [q for q in CASE.checklist if q.op == "anchor"]
    assert shown_references(CASE, questions) == (0,)
    assert shown_references(CASE, list(CASE.checklist)) is None  # the whole checklist: --judge-batch case
    relabelled = CASE.model_copy(update={"references": tuple(
        r.model_copy(update={"image": f"Image {4 - k}"}) for k, r in enumerate(CASE.references, 1))})
    assert shown_references(relabelled, questions) is None  # not numbered by place: labels would not match
    unknown = [questions[1].model_copy(update={"images": ("Image 7",)})]
    assert shown_references(CASE, unknown) is None  # a question naming an image the case does not hold
    bare = CASE.model_copy(update={"checklist": tuple(q.model_copy(update={"images": ()}) for q in CASE.checklist)})
    assert shown_references(bare, bare.checklist[:2]) is None  # a checklist without the field


def test_an_op_run_made_when_every_reference_was_sent_resumes(bench, tmp_path, monkeypatch):
    """A run folder of --judge-batch op whose calls sent every reference (as before the change)
    resumes: its complete cases are kept, the rest asked anew with the references named."""
    import tracebench.providers._openai as openai_judge
    from tracebench.records import VERDICTS

    out = tmp_path / "run"
    with OpenAIStub(answering) as stub:
        options = RunOptions(generator=GENERATOR, judges=[f"openai:stub-model@{stub.base_url}"], settings=SETTINGS,
                             judge_batch="op", concurrency=1, progress=False)
        with monkeypatch.context() as old:
            old.setattr(openai_judge, "shown_references", lambda case, questions: None)
            first = run_benchmark(bench, out, replace(options, max_calls=12))
        kept = VERDICTS.path(out).read_bytes()
        before = len(stub.requests)
        assert 0 < first.cases < len(list(read_cases(bench)))
        assert all(len(image_urls(r)) == len(case_of(r, {c.id: c for c in read_cases(bench)}).references) + 1
                   for r in stub.requests)
        done = run_benchmark(bench, out, options)
        later = stub.requests[before:]
    cases = {c.id: c for c in read_cases(bench)}
    assert done.cases == len(cases) and done.abstentions == 0
    kept_ids = {json.loads(line)["case_id"] for line in kept.splitlines()}
    assert len(kept_ids) == first.cases
    assert not {case_of(r, cases).id for r in later} & kept_ids  # kept cases are not asked again
    check_op_requests(bench, later, {k: v for k, v in cases.items() if k not in kept_ids})
    final = set(VERDICTS.path(out).read_bytes().splitlines())
    assert set(kept.splitlines()) <= final  # the kept cases' verdicts, as they were
